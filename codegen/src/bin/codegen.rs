//! `cargo codegen` writes generated/ from spec/; `cargo codegen --check` only compares.
use std::path::PathBuf;

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let outputs = match iggy_codegen::generate(&root) {
        Ok(o) => o,
        Err(diags) => {
            for d in diags {
                eprintln!("error: {d}");
            }
            std::process::exit(2);
        }
    };
    let stale = iggy_codegen::stale(&outputs);
    if check {
        for p in &stale {
            eprintln!("stale: {}", p.display());
        }
        std::process::exit(if stale.is_empty() { 0 } else { 1 });
    }
    for (p, t) in &outputs {
        if stale.contains(p) {
            std::fs::write(p, t).expect("write generated file");
            eprintln!("wrote {}", p.display());
        }
    }
}
