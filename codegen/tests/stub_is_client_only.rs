//! The SDK stub is a client's view of the spec, not a copy of `generated/`: no stub file is a
//! generated module with another first line or mostly made of its code lines, and no
//! server-only struct (storage records, the replication header, journal bodies) is declared in it.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Above this share of its code lines found in one generated module, a stub file counts as a
/// copy (a copied module scores 100; the stub's own files score at most about 20).
const COPIED_CODE_LINES_MAX_PERCENT: usize = 50;

/// Files with fewer code lines (`lib.rs`, a list of modules) are judged by identity alone.
const CODE_LINES_MIN: usize = 20;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(file name, text)` of every `.rs` file in `dir`.
fn rust_files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// A line that only carries spec data, the same text in any Rust rendering of the spec: an enum
/// variant (`Ping = 1,`), a field declaration (`pub client: u128,`), a struct literal's field
/// (`code: 1,`) or an item of a name list (`checksum,`).
fn is_data_line(line: &str) -> bool {
    let Some(item) = line.strip_suffix(',') else {
        return false;
    };
    let item = item.strip_prefix("pub ").unwrap_or(item);
    match (item.split_once(" = "), item.split_once(": ")) {
        (Some((name, value)), _) => is_ident(name) && !value.contains(' '),
        (None, Some((name, _))) => is_ident(name),
        (None, None) => is_ident(item),
    }
}

/// The lines that are code: trimmed, past the `@generated` line, not blank or punctuation only,
/// not doc comments or attributes, not data lines.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.chars().any(char::is_alphanumeric))
        .filter(|l| !l.starts_with("//") && !l.starts_with("#[") && !l.starts_with("#!["))
        .filter(|l| !is_data_line(l))
        .collect()
}

/// Percent of the code lines of `stub` that occur among the code lines of `generated`, or None
/// when `stub` has too few code lines to tell.
fn copied_percent(stub: &str, generated: &str) -> Option<usize> {
    let theirs: BTreeSet<&str> = code_lines(generated).into_iter().collect();
    let ours = code_lines(stub);
    if ours.len() < CODE_LINES_MIN {
        return None;
    }
    Some(100 * ours.iter().filter(|l| theirs.contains(*l)).count() / ours.len())
}

#[test]
fn no_stub_file_is_a_generated_module() {
    let stub = rust_files(&root().join("sdk-stubs/rust/src"));
    let generated = rust_files(&root().join("generated/src"));
    assert!(!stub.is_empty() && !generated.is_empty());
    let mut copies = Vec::new();
    for (s_name, s_text) in &stub {
        for (g_name, g_text) in &generated {
            let body = |t: &str| {
                t.split_once('\n')
                    .map(|(_, rest)| rest.to_string())
                    .unwrap_or_default()
            };
            if body(s_text) == body(g_text) {
                copies.push(format!(
                    "sdk-stubs/rust/src/{s_name} is generated/src/{g_name}"
                ));
            }
            if let Some(percent) =
                copied_percent(s_text, g_text).filter(|p| *p > COPIED_CODE_LINES_MAX_PERCENT)
            {
                copies.push(format!("sdk-stubs/rust/src/{s_name}: {percent}% of its code lines are in generated/src/{g_name}"));
            }
        }
    }
    assert!(
        copies.is_empty(),
        "stub files copied from generated/:\n{}",
        copies.join("\n")
    );
}

#[test]
fn the_stub_declares_no_server_only_struct() {
    let files: Vec<(String, String)> = std::fs::read_dir(root().join("spec"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "spec"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    let spec = iggy_codegen::load(&files).expect("the spec loads");
    let surface = iggy_codegen::emit::client_surface(&spec);
    let client: BTreeSet<&str> = surface.structs.iter().map(|s| s.name.as_str()).collect();
    // Named here, not taken from the surface, so a surface that grew them fails too.
    let server_only: Vec<&str> = spec
        .global
        .structs
        .iter()
        .filter(|s| {
            s.file.ends_with("storage.spec")
                || ["PrepareHeader", "SessionRecord"].contains(&s.name.as_str())
        })
        .map(|s| s.name.as_str())
        .collect();
    assert!(server_only.len() > 2, "storage.spec declares records");
    let in_surface: Vec<&&str> = server_only
        .iter()
        .filter(|n| client.contains(**n))
        .collect();
    assert!(
        in_surface.is_empty(),
        "server-only structs in the client surface: {in_surface:?}"
    );
    let stub = rust_files(&root().join("sdk-stubs/rust/src"));
    let declared: Vec<String> = stub
        .iter()
        .flat_map(|(f, text)| {
            let f = f.clone();
            text.lines().filter_map(move |l| {
                let name = l
                    .trim()
                    .strip_prefix("pub struct ")?
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()?;
                Some((f.clone(), name.to_string()))
            })
        })
        .filter(|(_, name)| !client.contains(name.as_str()))
        .map(|(f, name)| format!("{f}: {name}"))
        .collect();
    let runtime = [
        "registry.rs: Roundtrip",
        "registry.rs: Encoded",
        "client.rs: CommandRow",
        "errors.rs: ErrorInfo",
    ];
    let stray: Vec<&String> = declared
        .iter()
        .filter(|d| !runtime.contains(&d.as_str()))
        .collect();
    assert!(
        stray.is_empty(),
        "structs in sdk-stubs/rust/src outside the client surface: {stray:?}"
    );
    assert!(
        stub.iter().all(|(f, _)| f != "storage.rs"),
        "sdk-stubs/rust/src/storage.rs is server-only"
    );
}

#[test]
fn data_lines_are_told_from_code() {
    for data in [
        "Ping = 1,",
        "pub client: u128,",
        "pub reserved_frame: [u8; 66],",
        "code: 1,",
        "checksum,",
    ] {
        assert!(is_data_line(data), "{data}");
    }
    for code in [
        "let v = take(input, 4)?;",
        "Ok(()),",
        "out.push(0),",
        "0 => Ok(None),",
        "x => y(z),",
    ] {
        assert!(!is_data_line(code), "{code}");
    }
}

#[test]
fn every_stub_file_is_one_codegen_writes() {
    // `cargo codegen` never deletes, so a module the emitter dropped would otherwise linger.
    let outputs = iggy_codegen::generate(&root()).expect("the spec generates");
    let dir = root().join("sdk-stubs/rust/src");
    let emitted: BTreeSet<String> = outputs
        .iter()
        .filter(|(p, _)| p.parent() == Some(dir.as_path()))
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let on_disk: BTreeSet<String> = rust_files(&dir).into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        on_disk, emitted,
        "sdk-stubs/rust/src holds files codegen does not write"
    );
}
