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
    "server/partition",
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
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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
    assert!(
        violations.is_empty(),
        "forbidden dependencies:\n{}",
        violations.join("\n")
    );
}

#[test]
fn official_sdk_is_pinned_exactly() {
    let text = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let dependencies = manifest["workspace"]["dependencies"].as_table().unwrap();
    for name in ["iggy", "iggy_binary_protocol", "iggy_common"] {
        let requirement = dependencies[name].as_str().unwrap_or_else(|| {
            dependencies[name]["version"]
                .as_str()
                .expect("a version requirement")
        });
        assert!(
            requirement.starts_with('='),
            "{name} must be pinned with `=` (a caret on an edge version floats): {requirement}"
        );
    }
}

/// The server's layers, outermost first: a transport calls the service layer, the service
/// layer calls the runtime, the runtime drives consensus groups; never the other way.
const SERVER_LAYERS: &[&str] = &["transport", "service", "runtime", "consensus"];

#[test]
fn server_modules_form_no_cycle_and_import_only_inward() {
    let src = workspace_root().join("server/iggy-server/src");
    let sources = iggy_tidy::read_sources(&src);
    for layer in SERVER_LAYERS {
        assert!(
            sources.contains_key(*layer),
            "server/iggy-server/src/{layer}/mod.rs is missing"
        );
    }
    let graph = iggy_tidy::module_graph(&sources);
    let cycles = iggy_tidy::cycles(&graph);
    assert!(
        cycles.is_empty(),
        "import cycles between server modules:\n{}",
        cycles
            .iter()
            .map(|cycle| cycle.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let backwards = iggy_tidy::backward_imports(&graph, SERVER_LAYERS);
    assert!(
        backwards.is_empty(),
        "imports against the layer order {SERVER_LAYERS:?}:\n{}",
        backwards.join("\n")
    );
}

/// The crates that decide (sans-IO) and what each may depend on: no runtime, no server, no
/// clock or randomness crate. Their sources must not reach the filesystem, the network or the
/// clock through `std` either.
const SANS_IO_CRATES: &[(&str, &[&str])] = &[
    (
        "server/vsr",
        &["bytes", "twox-hash", "iggy-wire", "iggy-generated"],
    ),
    (
        "server/metadata",
        &["bytes", "twox-hash", "iggy-wire", "iggy-generated"],
    ),
    (
        "server/partition",
        &["bytes", "iggy-wire", "iggy-generated"],
    ),
    // The simulator runs the unchanged sans-IO crates: never compio, never the storage crate.
    (
        "server/sim",
        &[
            "bytes",
            "iggy-vsr",
            "iggy-partition",
            "iggy-metadata",
            "iggy-generated",
            "iggy-wire",
        ],
    ),
];

/// `std` paths a sans-IO crate may not name.
const SANS_IO_BANNED_PATHS: &[&str] = &["std::fs", "std::net", "Instant::now", "SystemTime::now"];

fn manifest(krate: &str) -> toml::Table {
    let path = workspace_root().join(krate).join("Cargo.toml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
        .parse()
        .expect("valid Cargo.toml")
}

/// The sans-IO rule over one crate: each dependency its `manifest` names outside `allowed`,
/// and each banned `std` path its `sources` (file, text) name outside comments.
fn sans_io_violations(
    krate: &str,
    manifest: &toml::Table,
    allowed: &[&str],
    sources: &[(PathBuf, String)],
) -> Vec<String> {
    let mut violations = Vec::new();
    for (section, name) in dependency_names(manifest) {
        if section == "dependencies" && !allowed.contains(&name.as_str()) {
            violations.push(format!("{krate}/Cargo.toml depends on {name}"));
        }
    }
    for (file, text) in sources {
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for banned in SANS_IO_BANNED_PATHS {
                if code.contains(banned) {
                    violations.push(format!("{}:{}: names {banned}", file.display(), number + 1));
                }
            }
        }
    }
    violations
}

#[test]
fn sans_io_crates_depend_only_on_their_allowed_crates_and_never_on_io() {
    let mut violations = Vec::new();
    for (krate, allowed) in SANS_IO_CRATES {
        let files = iggy_tidy::rust_files(&workspace_root().join(krate).join("src"));
        assert!(!files.is_empty(), "{krate} has no sources");
        let sources: Vec<(PathBuf, String)> = files
            .into_iter()
            .map(|file| {
                let text = std::fs::read_to_string(&file).unwrap();
                (file, text)
            })
            .collect();
        violations.extend(sans_io_violations(
            krate,
            &manifest(krate),
            allowed,
            &sources,
        ));
    }
    assert!(
        violations.is_empty(),
        "sans-IO violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_sans_io_rule_reports_compio_and_a_file_read_in_the_partition_crate() {
    let krate = "server/partition";
    let allowed = SANS_IO_CRATES
        .iter()
        .find(|(name, _)| *name == krate)
        .expect("the partition crate is sans-IO")
        .1;
    // The crate's real manifest, with the runtime a shell would want added.
    let mut manifest = manifest(krate);
    manifest["dependencies"]
        .as_table_mut()
        .unwrap()
        .insert("compio".to_string(), toml::Value::Table(toml::Table::new()));
    let sources = vec![(
        PathBuf::from("src/machine.rs"),
        "// std::fs in a comment is fine\nfn f() { std::fs::read(\"x\"); }\n".to_string(),
    )];
    assert_eq!(
        sans_io_violations(krate, &manifest, allowed, &sources),
        vec![
            "server/partition/Cargo.toml depends on compio".to_string(),
            "src/machine.rs:2: names std::fs".to_string(),
        ]
    );
}

#[test]
fn no_crate_depends_on_the_server_and_storage_uses_compio_only_for_files() {
    let mut violations = Vec::new();
    for krate in SERVER_CRATES.iter().filter(|k| **k != "server/iggy-server") {
        let manifest = manifest(krate);
        for (section, name) in dependency_names(&manifest) {
            if name == "iggy-server" {
                violations.push(format!("{krate} [{section}] depends on the server"));
            }
        }
        let compio = manifest
            .get("dependencies")
            .and_then(|d| d.get("compio"))
            .and_then(|c| c.get("features"))
            .and_then(|f| f.as_array());
        if let Some(features) = compio {
            if *krate != "server/storage" {
                violations.push(format!("{krate} depends on compio"));
            }
            for feature in features.iter().filter_map(|f| f.as_str()) {
                // The runtime and its io_uring driver run the file operations; no sockets.
                if !["runtime", "io-uring", "fs"].contains(&feature) {
                    violations.push(format!("{krate} uses compio feature {feature}"));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
