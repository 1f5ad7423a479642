//! Tripwire: fails the build when spec/ no longer matches the committed SPEC_HASH.
fn main() {
    // Read at run time: a build script binary may be shared between checkouts.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = std::path::Path::new(&manifest).join("..");
    let spec = root.join("spec");
    println!("cargo:rerun-if-changed={}", spec.display());
    let mut files: Vec<_> = std::fs::read_dir(&spec)
        .expect("spec dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "spec"))
        .collect();
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in &files {
        println!("cargo:rerun-if-changed={}", p.display());
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(p).expect("read spec");
        for b in name.bytes().chain(text.bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    let lib = std::fs::read_to_string(root.join("generated/src/lib.rs")).expect("lib.rs");
    let want = format!("SPEC_HASH: u64 = {h:#x};");
    if !lib.contains(&want) {
        panic!("spec changed; run cargo codegen");
    }
}
