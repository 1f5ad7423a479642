//! The official Python SDK (`apache-iggy 0.9.0`, PyPI) against the real binary: the script
//! `conformance/python/sdk_smoke.py` runs the user flow over HTTP (streams, topics, sends by
//! partition, balanced and by key with headers, polls by offset, first and next with
//! auto-commit, consumer groups, users, refusals) and checks that over TCP and WebSocket the
//! SDK, which speaks protocol 0.11.0, is told its version is not admitted (eviction 14) rather
//! than "Invalid format". `.ci/run` installs the SDK into `/tmp/iggy-pysdk-venv`; elsewhere set
//! `IGGY_PYTHON` to a python that has it.

use crate::harness::*;
use crate::transports::{WEBSOCKET_ON, endpoints};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const VENV: &str = "/tmp/iggy-pysdk-venv";
const INSTALL: &str = "python3 -m venv /tmp/iggy-pysdk-venv && \
                       /tmp/iggy-pysdk-venv/bin/pip install apache-iggy==0.9.0";

/// The python with `apache_iggy` 0.9.0: `IGGY_PYTHON`, else the venv `.ci/run` makes.
fn python() -> PathBuf {
    let python = std::env::var_os("IGGY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(VENV).join("bin/python"));
    let version = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('apache-iggy'))",
        ])
        .output();
    match version {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "0.9.0" => python,
        _ => panic!(
            "the official Python SDK apache-iggy 0.9.0 is not installed for {}: {INSTALL} \
             (or set IGGY_PYTHON)",
            python.display()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_runs_its_flow_over_http_and_is_told_its_protocol_is_refused() {
    let python = python();
    let (server, http_url) = TestServer::start_with_http(&WEBSOCKET_ON);
    let ports = endpoints(&server.root_client().await).await;
    let websocket = format!("127.0.0.1:{}", ports.websocket);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/sdk_smoke.py");
    let out = tokio::task::block_in_place(|| {
        Command::new(&python)
            .arg(&script)
            .env("IGGY_PY_HTTP", &http_url)
            .env("IGGY_PY_TCP", server.address())
            .env("IGGY_PY_WS", &websocket)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run the Python SDK script")
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 failed"), "{stdout}");
}
