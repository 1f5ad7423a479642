//! The Docker image's configuration, run outside the image (this machine builds no image: see
//! README): the server is started with exactly the `ENV` lines and the `ENTRYPOINT` of the
//! repository's Dockerfile, only the data path and the port moved to private ones. Without
//! `IGGY_NODE_ADVERTISED_ADDRESS` it refuses to start, naming the variable; with it, it listens
//! on 0.0.0.0 and cluster metadata advertises that address.

use crate::harness::*;
use iggy::prelude::*;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The final stage's `ENV KEY=VALUE` lines and its exec-form `ENTRYPOINT`.
pub(crate) fn image_configuration() -> (Vec<(String, String)>, Vec<String>) {
    let dockerfile =
        std::fs::read_to_string(workspace_root().join("Dockerfile")).expect("read Dockerfile");
    let final_stage = dockerfile.rsplit("\nFROM ").next().expect("a FROM line");
    let mut env = Vec::new();
    let mut entrypoint = Vec::new();
    for line in final_stage.lines().map(str::trim) {
        if let Some(assignment) = line.strip_prefix("ENV ") {
            let (key, value) = assignment
                .split_once('=')
                .unwrap_or_else(|| panic!("ENV KEY=VALUE: {line}"));
            env.push((key.to_string(), value.to_string()));
        } else if let Some(list) = line.strip_prefix("ENTRYPOINT ") {
            let list = list
                .trim()
                .strip_prefix('[')
                .and_then(|l| l.strip_suffix(']'))
                .expect("exec form");
            entrypoint = list
                .split(',')
                .map(|word| word.trim().trim_matches('"').to_string())
                .collect();
        }
    }
    (env, entrypoint)
}

fn free_wildcard_port() -> u16 {
    TcpListener::bind("0.0.0.0:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

/// The image's command with its environment, the data directory under `dir`, TCP on `port`.
fn image_command(dir: &Path, port: u16, advertised: Option<&str>) -> Command {
    let (env, entrypoint) = image_configuration();
    assert_eq!(
        entrypoint,
        ["iggy-server"],
        "the image runs the server with no flags"
    );
    let mut command = Command::new(server_binary());
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("RUST_LOG", "info");
    without_shell_settings(&mut command);
    for (key, value) in env {
        let value = match key.as_str() {
            "IGGY_SYSTEM_PATH" => dir.join("data").display().to_string(),
            "IGGY_TCP_ADDRESS" => {
                assert_eq!(value, "0.0.0.0:8090", "the image's TCP listener");
                format!("0.0.0.0:{port}")
            }
            // The image's QUIC listener (on by default) on an ephemeral port, so that
            // parallel tests do not collide on 8080/udp.
            "IGGY_QUIC_ADDRESS" => {
                assert_eq!(value, "0.0.0.0:8080", "the image's QUIC listener");
                "0.0.0.0:0".to_string()
            }
            _ => value,
        };
        command.env(key, value);
    }
    if let Some(address) = advertised {
        command.env("IGGY_NODE_ADVERTISED_ADDRESS", address);
    }
    command
}

/// Whether `/proc/net/tcp` lists a socket listening on 0.0.0.0:`port`.
fn listens_on_every_interface(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let wildcard = format!("00000000:{port:04X}");
    // Columns: sl, local_address, rem_address, st (0A = LISTEN).
    table.lines().skip(1).any(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        columns.get(1) == Some(&wildcard.as_str()) && columns.get(3) == Some(&"0A")
    })
}

pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_listener_in_the_image_binds_the_wildcard_address() {
    let (env, _) = image_configuration();
    let addresses: Vec<&(String, String)> = env
        .iter()
        .filter(|(key, _)| key.ends_with("_ADDRESS"))
        .collect();
    let keys: Vec<&str> = addresses.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "IGGY_TCP_ADDRESS",
            "IGGY_HTTP_ADDRESS",
            "IGGY_QUIC_ADDRESS",
            "IGGY_WEBSOCKET_ADDRESS"
        ]
    );
    for (key, value) in addresses {
        assert!(value.starts_with("0.0.0.0:"), "{key}={value}");
    }
    assert!(
        !env.iter()
            .any(|(key, _)| key == "IGGY_NODE_ADVERTISED_ADDRESS"),
        "the operator supplies it"
    );
}

#[test]
fn the_image_refuses_to_start_without_an_advertised_address() {
    let dir = tempfile::tempdir().unwrap();
    let output = image_command(dir.path(), free_wildcard_port(), None)
        .output()
        .expect("run iggy-server");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "refused: {stderr}");
    assert!(
        stderr.contains(
            "binds a wildcard address; set node.advertised_address (IGGY_NODE_ADVERTISED_ADDRESS)"
        ),
        "the message names the variable: {stderr}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "refused before the data directory is touched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_listens_on_every_interface_and_advertises_the_given_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_wildcard_port();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = image_command(dir.path(), port, Some("localhost"))
        .arg("--with-default-root-credentials")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn iggy-server");
    let mut server = Running(child);
    let read_log = || {
        let mut text = String::new();
        std::fs::File::open(&log_path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text
    };
    let deadline = Instant::now() + START_TIMEOUT;
    while !read_log().contains(&format!("listening on tcp 0.0.0.0:{port}")) {
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("iggy-server exited ({status}):\n{}", read_log());
        }
        assert!(
            Instant::now() < deadline,
            "not listening within {START_TIMEOUT:?}:\n{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        listens_on_every_interface(port),
        "a LISTEN socket on 0.0.0.0:{port}"
    );

    let client = IggyClient::from_connection_string(&format!("iggy://iggy:iggy@127.0.0.1:{port}"))
        .expect("connection string");
    within("connect", client.connect()).await.expect("connect");
    let metadata = ok(
        "get_cluster_metadata",
        within("metadata", client.get_cluster_metadata()).await,
    );
    assert_eq!(metadata.nodes.len(), 1, "{metadata:?}");
    let node = &metadata.nodes[0];
    assert_eq!(node.ip, "localhost", "the advertised address: {node:?}");
    assert_eq!(node.endpoints.tcp, port, "{node:?}");
}

/// README, "Docker and Kubernetes": `docker run --rm -v iggy-data:/var/lib/iggy iggy-server
/// verify` checks the volume. That is the image's command with `verify` and no advertised
/// address, which only serving needs: the verification runs and passes on the directory the
/// image's server left.
#[test]
fn the_images_verify_command_checks_the_volume_without_an_advertised_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_wildcard_port();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut server = Running(
        image_command(dir.path(), port, Some("localhost"))
            .arg("--with-default-root-credentials")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn iggy-server"),
    );
    let deadline = Instant::now() + START_TIMEOUT;
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("iggy-server replica 0 serving")
    {
        assert!(server.0.try_wait().unwrap().is_none(), "iggy-server exited");
        assert!(
            Instant::now() < deadline,
            "not serving in {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGTERM) };
    assert!(server.0.wait().unwrap().success(), "a clean stop");

    let output = image_command(dir.path(), port, None)
        .arg("verify")
        .output()
        .expect("run iggy-server verify");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(printed.contains("verified: "), "{printed}");
}
