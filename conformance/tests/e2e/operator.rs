//! What an operator sees: `--help`, `--version` and flag errors of the real binary.

use crate::harness::*;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(server_binary())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run iggy-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_flag_with_its_meaning_and_exits_0() {
    let out = run(&["--help"]);
    let help = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--help exits 0: {help}{}",
        text(&out.stderr)
    );
    assert!(help.contains("Usage: iggy-server [OPTIONS]"), "{help}");
    for (flag, meaning) in [
        ("--replica-id <N>", "replica id"),
        ("-f, --fresh", "Delete the configured data directory"),
        ("--with-default-root-credentials", "iggy/iggy"),
        ("--list-config-env-vars", "IGGY_ variable"),
        ("-V, --version", "version"),
        ("-h, --help", "help"),
    ] {
        let line = help
            .lines()
            .find(|l| l.contains(flag))
            .unwrap_or_else(|| panic!("{flag} missing from --help:\n{help}"));
        assert!(
            line.contains(meaning),
            "{flag} is explained ({meaning:?}): {line}"
        );
    }
}

#[test]
fn version_names_the_release_the_protocol_range_and_the_storage_format() {
    let out = run(&["--version"]);
    let version = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--version exits 0: {version}{}",
        text(&out.stderr)
    );
    let lines: Vec<&str> = version.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("iggy-server {}", env!("CARGO_PKG_VERSION")).as_str(),
            "protocol 0.11.1 to 0.12.0 (admitted: 0.12.0, 0.11.1; native 0.12.0)",
            "storage format IGGY-OWNERSHIP-HISTORY-5",
        ],
        "{version}"
    );
}

#[test]
fn a_bad_flag_exits_2_with_the_usage_line_on_stderr() {
    for bad in [
        &["--bogus"][..],
        &["--replica-id"],
        &["--replica-id=many"],
        &["--fresh", "now"],
    ] {
        let out = run(bad);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?} exits 2: {stderr}");
        assert!(stderr.starts_with("error: "), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("Usage: iggy-server [OPTIONS]"),
            "{bad:?}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{bad:?} prints nothing on stdout: {}",
            text(&out.stdout)
        );
    }
}
