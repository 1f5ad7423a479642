//! Architecture invariants that a compiler cannot see, checked on every test run.

use std::path::{Path, PathBuf};

/// Crates that ship in or feed the server binary. None of them may depend on the generator, the
/// conformance suite or an official SDK crate: the official crates are the judge of wire
/// compatibility, so the server must not borrow their codec, and the generator's output is
/// committed precisely so that the server never runs it.
const SERVER_CRATES: &[&str] = &[
    "wire",
    "generated",
    "server/vsr",
    "server/storage",
    "server/metadata",
    "server/iggy-server",
];

const FORBIDDEN_DEPENDENCIES: &[&str] = &[
    "iggy-codegen",
    "iggy-conformance",
    "iggy",
    "iggy_binary_protocol",
    "iggy_common",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dependency_names(manifest: &toml::Table) -> Vec<(String, String)> {
    let mut names = Vec::new();
    for section in ["dependencies", "build-dependencies", "dev-dependencies"] {
        if let Some(table) = manifest.get(section).and_then(|value| value.as_table()) {
            for (key, value) in table {
                // A renamed dependency names its real crate in `package`.
                let real = value
                    .get("package")
                    .and_then(|package| package.as_str())
                    .unwrap_or(key)
                    .to_string();
                names.push((section.to_string(), real));
            }
        }
    }
    names
}

#[test]
fn server_crates_do_not_depend_on_codegen_conformance_or_official_sdk() {
    let root = workspace_root();
    let mut violations = Vec::new();
    for krate in SERVER_CRATES {
        let path = root.join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        let manifest: toml::Table = text.parse().expect("valid Cargo.toml");
        for (section, name) in dependency_names(&manifest) {
            if FORBIDDEN_DEPENDENCIES.contains(&name.as_str()) {
                violations.push(format!("{krate}/Cargo.toml [{section}] depends on {name}"));
            }
        }
    }
    assert!(violations.is_empty(), "forbidden dependencies:\n{}", violations.join("\n"));
}

#[test]
fn official_sdk_is_pinned_exactly() {
    let text = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let dependencies = manifest["workspace"]["dependencies"].as_table().unwrap();
    for name in ["iggy", "iggy_binary_protocol", "iggy_common"] {
        let requirement = dependencies[name].as_str().unwrap_or_else(|| {
            dependencies[name]["version"].as_str().expect("a version requirement")
        });
        assert!(
            requirement.starts_with('='),
            "{name} must be pinned with `=` (a caret on an edge version floats): {requirement}"
        );
    }
}
