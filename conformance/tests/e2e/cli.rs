//! The official CLI (`iggy-cli 0.14.1-edge.2`) against the real binary over every transport it
//! speaks: TCP, QUIC, HTTP and WebSocket each create a stream and a topic, send a message, poll
//! it back and list the streams. `.ci/run` installs the CLI; elsewhere set `IGGY_CLI_BIN` or put
//! `iggy` on the PATH (`cargo install iggy-cli --version 0.14.1-edge.2 --locked`).

use crate::harness::*;
use crate::transports::{WEBSOCKET_ON, endpoints};
use iggy::prelude::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const CLI_VERSION: &str = "iggy-cli 0.14.1-edge.2";

/// The CLI binary: `IGGY_CLI_BIN`, else `iggy` on the PATH, else cargo's bin directory.
pub(crate) fn cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IGGY_CLI_BIN") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("iggy"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let cargo_bin =
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo/bin/iggy"));
    on_path
        .into_iter()
        .chain(cargo_bin)
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the official CLI is not installed: cargo install iggy-cli --version 0.14.1-edge.2 \
                 --locked (or set IGGY_CLI_BIN)"
            )
        })
}

/// Runs the CLI with `transport` arguments and `args`; its stdout (it must succeed).
pub(crate) fn cli(transport: &[String], args: &[&str]) -> String {
    let out = Command::new(cli_binary())
        .args(transport)
        .args(["-u", ROOT_USER, "-p", ROOT_PASSWORD])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the iggy CLI");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "iggy {transport:?} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_cli_creates_sends_polls_and_lists_over_tcp_quic_http_and_websocket() {
    let version = Command::new(cli_binary())
        .arg("--version")
        .output()
        .expect("iggy --version");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains(CLI_VERSION),
        "the pinned CLI: {}",
        String::from_utf8_lossy(&version.stdout)
    );
    let (server, http_url) = TestServer::start_with_http(&WEBSOCKET_ON);
    // QUIC and WebSocket run on ephemeral ports; cluster metadata tells which.
    let client = server.root_client().await;
    let endpoints = &endpoints(&client).await;
    let transports: Vec<(&str, Vec<String>)> = vec![
        (
            "tcp",
            vec![
                "--transport".into(),
                "tcp".into(),
                "--tcp-server-address".into(),
                server.address(),
            ],
        ),
        (
            "quic",
            vec![
                "--transport".into(),
                "quic".into(),
                "--quic-server-address".into(),
                format!("127.0.0.1:{}", endpoints.quic),
            ],
        ),
        (
            "http",
            vec![
                "--transport".into(),
                "http".into(),
                "--http-api-url".into(),
                http_url.clone(),
            ],
        ),
        (
            "ws",
            vec![
                "--transport".into(),
                "ws".into(),
                "--websocket-server-address".into(),
                format!("127.0.0.1:{}", endpoints.websocket),
            ],
        ),
    ];
    for (name, transport) in &transports {
        let stream = format!("cli-{name}");
        let payload = format!("hello over {name}");
        tokio::task::block_in_place(|| {
            cli(transport, &["stream", "create", &stream]);
            cli(
                transport,
                &["topic", "create", &stream, "events", "1", "none"],
            );
            cli(transport, &["message", "send", &stream, "events", &payload]);
            let polled = cli(
                transport,
                &[
                    "message",
                    "poll",
                    "--first",
                    "--message-count",
                    "10",
                    &stream,
                    "events",
                    "0",
                ],
            );
            assert!(
                polled.contains(&payload),
                "{name}: poll shows the message:\n{polled}"
            );
            let listed = cli(transport, &["stream", "list"]);
            assert!(
                listed.contains(&stream),
                "{name}: the list shows the stream:\n{listed}"
            );
        });
    }
    // Every message went in once, whichever transport sent it; over HTTP it got an id too.
    for (name, _) in &transports {
        let polled = poll(
            &client,
            &self::name(&format!("cli-{name}")),
            &self::name("events"),
            0,
            &consumer("check"),
            PollingStrategy::offset(0),
            10,
            false,
        )
        .await;
        assert_eq!(
            payloads(&polled),
            vec![format!("hello over {name}")],
            "{name}"
        );
        assert_ne!(
            polled.messages[0].header.id, 0,
            "{name}: the message has an id"
        );
    }
}
