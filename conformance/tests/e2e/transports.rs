//! The binary transports beside plain TCP: QUIC, WebSocket, TCP with TLS and WebSocket with TLS
//! carry the same frames through the same connection loop. The official SDK runs one scenario
//! over each (login, streams and topics, sends and polls, offsets, a consumer group, a batch
//! near the frame limit); a session registered over TCP binds over QUIC and WebSocket; and
//! malformed input on each gets a clear eviction or close while the server and other clients
//! carry on.

use crate::harness::*;
use futures_util::{SinkExt, StreamExt};
use iggy::prelude::*;
use iggy_generated::frames::{
    Command, EvictionHeader, EvictionReason, Operation, ReplyHeader, RequestHeader,
};
use iggy_generated::payloads::{
    BindSessionRequest, ClientVersionInfo, LoginRegisterRequest, LoginRegisterResponse,
    SessionIdentity,
};
use iggy_generated::protocol;
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// WebSocket on, on an ephemeral port (QUIC is on by default; the harness puts it on one too).
pub(crate) const WEBSOCKET_ON: [(&str, &str); 2] = [
    ("IGGY_WEBSOCKET_ENABLED", "true"),
    ("IGGY_WEBSOCKET_ADDRESS", "127.0.0.1:0"),
];

/// The ports the server advertises in cluster metadata: the bound ones, 0 for a disabled
/// transport.
pub(crate) async fn endpoints(client: &IggyClient) -> TransportEndpoints {
    let metadata = ok(
        "cluster metadata",
        within("get_cluster_metadata", client.get_cluster_metadata()).await,
    );
    assert_eq!(metadata.nodes.len(), 1, "one node");
    metadata.nodes[0].endpoints.clone()
}

async fn connected(what: &str, client: IggyClient) -> IggyClient {
    within(what, client.connect())
        .await
        .unwrap_or_else(|e| panic!("{what}: connect: {e} (code {})", e.as_code()));
    ok(
        &format!("{what}: login"),
        within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await,
    );
    client
}

async fn quic_client(port: u16) -> IggyClient {
    let url = format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
    let client = IggyClient::from_connection_string(&url).expect("quic connection string");
    within("quic connect + auto-login", client.connect())
        .await
        .unwrap_or_else(|e| panic!("quic connect: {e} (code {})", e.as_code()));
    client
}

pub(crate) async fn ws_client(port: u16) -> IggyClient {
    let url = format!("iggy+ws://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
    let client = IggyClient::from_connection_string(&url).expect("ws connection string");
    within("ws connect + auto-login", client.connect())
        .await
        .unwrap_or_else(|e| panic!("ws connect: {e} (code {})", e.as_code()));
    client
}

/// A CA and a certificate it signed for localhost and 127.0.0.1, as PEM files.
struct TestCertificates {
    _dir: tempfile::TempDir,
    ca_file: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
    ca_der: Vec<u8>,
}

fn test_certificates() -> TestCertificates {
    test_certificates_signed_with(&rcgen::PKCS_ECDSA_P256_SHA256)
}

/// [`test_certificates`] whose server key is of `algorithm`.
fn test_certificates_signed_with(algorithm: &'static rcgen::SignatureAlgorithm) -> TestCertificates {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "iggy e2e test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate_for(algorithm).unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca_file, cert_file, key_file) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
    );
    std::fs::write(&ca_file, ca.pem()).unwrap();
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    TestCertificates {
        _dir: dir,
        ca_file,
        cert_file,
        key_file,
        ca_der: ca.der().to_vec(),
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The same scenario over any transport: streams and topics, a send and every polling strategy,
/// stored offsets, a consumer group fed by a producer, and a ~60 MiB batch (the frame limit is
/// 64 MiB) polled back `big_poll` messages at a time.
async fn scenario(client: &IggyClient, other: &IggyClient, big_poll: u32) {
    let (stream, topic) = (name("s"), name("t"));
    create_stream_and_topic(client, "s", "t", 3).await;
    let streams = ok(
        "get streams",
        within("get_streams", client.get_streams()).await,
    );
    assert_eq!(
        streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["s"]
    );

    let sent = send_to_partition(client, &stream, &topic, 0, msgs("m", 10)).await;
    assert_eq!(
        sent.confirmations
            .iter()
            .map(|c| (c.partition_id, c.base_offset))
            .collect::<Vec<_>>(),
        [(0, 0)]
    );
    let c = consumer("c");
    // Partition 0 with consumer `c`: `count` messages from `strategy`.
    let read = |strategy: PollingStrategy, count: u32, auto_commit: bool| {
        poll(client, &stream, &topic, 0, &c, strategy, count, auto_commit)
    };
    let polled = read(PollingStrategy::offset(4), 3, false).await;
    assert_eq!(offsets(&polled), [4, 5, 6]);
    assert_eq!(payloads(&polled), ["m-4", "m-5", "m-6"]);
    assert_eq!(offsets(&read(PollingStrategy::first(), 2, false).await), [0, 1]);
    assert_eq!(offsets(&read(PollingStrategy::last(), 2, false).await), [8, 9]);
    let since_epoch = read(PollingStrategy::timestamp(0.into()), 10, false).await;
    assert_eq!(offsets(&since_epoch).len(), 10);
    assert_eq!(offsets(&read(PollingStrategy::next(), 4, true).await), [0, 1, 2, 3]);
    assert_eq!(offsets(&read(PollingStrategy::next(), 4, true).await), [4, 5, 6, 7]);

    let stored = consumer("stored");
    ok(
        "store offset",
        within(
            "store",
            client.store_consumer_offset(&stored, &stream, &topic, Some(0), 5),
        )
        .await,
    );
    let info = ok(
        "get offset",
        within(
            "get",
            client.get_consumer_offset(&stored, &stream, &topic, Some(0)),
        )
        .await,
    )
    .expect("a stored offset");
    assert_eq!((info.stored_offset, info.current_offset), (5, 9));
    // What one client stored, another (here over plain TCP) reads.
    let seen = ok(
        "get offset elsewhere",
        within(
            "get",
            other.get_consumer_offset(&stored, &stream, &topic, Some(0)),
        )
        .await,
    );
    assert_eq!(seen.map(|info| info.stored_offset), Some(5));

    // A consumer group member on this transport receives what a producer on it sends.
    let mut member = client
        .consumer_group("g", "s", "t")
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval(IggyDuration::from_str("10ms").unwrap())
        .batch_length(5)
        .build();
    ok(
        "group member init",
        within("member init", member.init()).await,
    );
    let producer = client
        .producer("s", "t")
        .unwrap()
        .direct(DirectConfig::builder().build())
        .partitioning(Partitioning::balanced())
        .build();
    ok(
        "producer init",
        within("producer init", producer.init()).await,
    );
    ok(
        "producer send",
        within("producer send", producer.send(msgs("g", 12))).await,
    );
    let mut got = BTreeSet::new();
    let collect = async {
        // Partition 0 holds ten earlier messages "m-*"; the group reads those too.
        while got.iter().filter(|p: &&String| p.starts_with("g-")).count() < 12 {
            let m = ok(
                "group message",
                member.next().await.expect("the member's stream ended"),
            );
            got.insert(String::from_utf8_lossy(&m.message.payload).into_owned());
        }
    };
    within_for(
        Duration::from_secs(30),
        "the group member receives the batch",
        collect,
    )
    .await;
    let want: BTreeSet<String> = (0..12).map(|i| format!("g-{i}")).collect();
    assert!(
        want.is_subset(&got),
        "every produced message reached the member: {got:?}"
    );
    let group = ok(
        "get group",
        within(
            "get group",
            client.get_consumer_group(&stream, &topic, &name("g")),
        )
        .await,
    )
    .expect("the member created the group");
    assert_eq!(group.members_count, 1);

    // Twelve 5 MiB messages, one ~60 MiB frame.
    let big: Vec<IggyMessage> = (0..12u8).map(|i| msg(vec![i; 5 * 1024 * 1024])).collect();
    let mut big = big;
    let sent = within_for(
        Duration::from_secs(90),
        "send the big batch",
        client.send_messages(&stream, &topic, &Partitioning::partition_id(1), &mut big),
    )
    .await;
    let sent = ok("send big", sent);
    assert_eq!(sent.confirmations.len(), 1);
    let start = sent.confirmations[0].base_offset;
    let back = within_for(
        Duration::from_secs(60),
        "poll the big batch",
        client.poll_messages(
            &stream,
            &topic,
            Some(1),
            &c,
            &PollingStrategy::offset(start + 2),
            big_poll,
            false,
        ),
    )
    .await;
    let back = ok("poll big", back);
    assert_eq!(back.messages.len(), big_poll as usize);
    for (i, m) in back.messages.iter().enumerate() {
        assert_eq!(m.payload.len(), 5 * 1024 * 1024);
        assert!(
            m.payload.iter().all(|b| *b == i as u8 + 2),
            "message {} intact",
            i + 2
        );
    }
}

/// The scenario's 60 MiB send can take longer than the default 10 s request timeout: over QUIC
/// (the SDK's 100 kB send window) always, over TLS or WebSocket on a loaded machine (a debug
/// build beside other tests), where the server then evicts the request and the SDK reports an
/// unknown outcome.
const SLOW_BIG_SENDS: (&str, &str) = ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_runs_the_scenario_over_quic_with_the_default_self_signed_certificate() {
    let server = TestServer::start_with_env(&[SLOW_BIG_SENDS]);
    let tcp = server.root_client().await;
    let ports = endpoints(&tcp).await;
    assert!(
        ports.quic != 0,
        "QUIC is served by default and advertised: {ports:?}"
    );
    assert_eq!(
        (ports.tcp, ports.websocket, ports.http),
        (server.port(), 0, 0),
        "disabled transports advertise 0"
    );
    let quic = quic_client(ports.quic).await;
    // The QUIC client reads the same roster.
    assert_eq!(endpoints(&quic).await.quic, ports.quic);
    // The SDK's QUIC reply buffer is 10 MB: one 5 MiB message per poll.
    scenario(&quic, &tcp, 1).await;
    let me = ok("me", within("get_me", quic.get_me()).await);
    assert_eq!(me.transport, "QUIC");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_runs_the_scenario_over_websocket() {
    let server = TestServer::start_with_env(&[WEBSOCKET_ON[0], WEBSOCKET_ON[1], SLOW_BIG_SENDS]);
    let tcp = server.root_client().await;
    let ports = endpoints(&tcp).await;
    assert!(ports.websocket != 0, "{ports:?}");
    let ws = ws_client(ports.websocket).await;
    // Four 5 MiB messages: a 20 MiB reply, over the client's 16 MiB frame limit, arrives in
    // two messages.
    scenario(&ws, &tcp, 4).await;
    let me = ok("me", within("get_me", ws.get_me()).await);
    assert_eq!(me.transport, "WebSocket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_runs_the_scenario_over_tcp_with_tls_validating_against_a_ca_file() {
    let certs = test_certificates();
    let server = TestServer::start_with_env(&[
        ("IGGY_TCP_TLS_ENABLED", "true"),
        ("IGGY_TCP_TLS_CERT_FILE", path(&certs.cert_file)),
        ("IGGY_TCP_TLS_KEY_FILE", path(&certs.key_file)),
        SLOW_BIG_SENDS,
    ]);
    let tls_client = || {
        IggyClient::builder()
            .with_tcp()
            .with_server_address(server.address())
            .with_tls_enabled(true)
            .with_tls_domain("localhost".to_string())
            .with_tls_ca_file(path(&certs.ca_file).to_string())
            .with_tls_validate_certificate(true)
            .build()
            .expect("tls client")
    };
    let client = connected("tcp+tls", tls_client()).await;
    let other = connected("tcp+tls (second)", tls_client()).await;
    let ports = endpoints(&client).await;
    assert_eq!(
        ports.tcp,
        server.port(),
        "TLS replaces plain TCP on the same port"
    );
    scenario(&client, &other, 4).await;
    let me = ok("me", within("get_me", client.get_me()).await);
    assert_eq!(me.transport, "TCP", "the client list has no TLS kind");
    // A plain-TCP client on the TLS port gets no service.
    let plain = IggyClient::builder()
        .with_tcp()
        .with_server_address(server.address())
        .with_reconnection_max_retries(Some(0))
        .build()
        .unwrap();
    let refused = within_for(
        Duration::from_secs(20),
        "plain tcp on the tls port",
        async {
            plain.connect().await?;
            plain.ping().await
        },
    )
    .await;
    assert!(refused.is_err(), "plain TCP is not served on the TLS port");
}

/// A client speaking plain frames to a TLS port (its TLS left off) is logged at info with
/// its address and a hint, once per address per interval; the server said nothing of it, and
/// the client only saw its connection close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_on_a_tls_port_is_logged_with_a_hint() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start_with_env(&[("IGGY_TCP_TLS_ENABLED", "true")]);
    for _ in 0..2 {
        let mut plain = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        // A request header as a client without TLS sends it: no TLS record.
        plain.write_all(&[0u8; 64]).await.unwrap();
        let mut rest = Vec::new();
        let _ = within("the server closes", plain.read_to_end(&mut rest)).await;
    }
    let log = server.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("TLS handshake of"))
        .collect();
    assert_eq!(lines.len(), 1, "once per address per interval: {lines:#?}");
    assert!(
        lines[0].contains(" INFO ")
            && lines[0].contains("over tcp+tls failed")
            && lines[0].contains("is the client's TLS off"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_tls_serves_a_generated_certificate_when_no_file_is_given() {
    let server = TestServer::start_with_env(&[("IGGY_TCP_TLS_ENABLED", "true")]);
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(server.address())
        .with_tls_enabled(true)
        .with_tls_domain("localhost".to_string())
        .with_tls_validate_certificate(false)
        .build()
        .expect("tls client");
    let client = connected("tcp+tls, self-signed", client).await;
    still_served(&client).await;
    assert!(
        server.log().contains("listening on tcp+tls"),
        "{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_runs_the_scenario_over_websocket_with_tls() {
    let certs = test_certificates();
    let server = TestServer::start_with_env(&[
        WEBSOCKET_ON[0],
        WEBSOCKET_ON[1],
        ("IGGY_WEBSOCKET_TLS_ENABLED", "true"),
        ("IGGY_WEBSOCKET_TLS_CERT_FILE", path(&certs.cert_file)),
        ("IGGY_WEBSOCKET_TLS_KEY_FILE", path(&certs.key_file)),
        SLOW_BIG_SENDS,
    ]);
    let tcp = server.root_client().await;
    let port = endpoints(&tcp).await.websocket;
    let wss = IggyClient::builder()
        .with_websocket()
        .with_server_address(format!("127.0.0.1:{port}"))
        .with_tls_enabled(true)
        .with_tls_domain("localhost".to_string())
        .with_tls_ca_file(path(&certs.ca_file).to_string())
        .with_tls_validate_certificate(true)
        .build()
        .expect("wss client");
    let wss = connected("wss", wss).await;
    scenario(&wss, &tcp, 4).await;
    let me = ok("me", within("get_me", wss.get_me()).await);
    assert_eq!(me.transport, "WebSocket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_http_client_works_over_https_validating_against_a_ca_file() {
    let certs = test_certificates();
    let (server, api) = TestServer::start_with_http(&[
        ("IGGY_HTTP_TLS_ENABLED", "true"),
        ("IGGY_HTTP_TLS_CERT_FILE", path(&certs.cert_file)),
        ("IGGY_HTTP_TLS_KEY_FILE", path(&certs.key_file)),
    ]);
    assert!(server.log().contains("listening on https"), "{}", server.log());
    // The SDK's reqwest verifies against the platform roots, which SSL_CERT_FILE replaces (this
    // test runs in a process of its own under nextest).
    unsafe { std::env::set_var("SSL_CERT_FILE", &certs.ca_file) };
    let https = api.replace("http://127.0.0.1", "https://localhost");
    let client = IggyClient::builder()
        .with_http()
        .with_api_url(https.clone())
        .build()
        .expect("https client");
    ok("login", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    ok("create stream", within("create", client.create_stream("tls", &StreamCreateOptions::default())).await);
    ok("create topic", within("create", client.create_topic(&name("tls"), "t", &topic_options(1))).await);
    let mut messages: Vec<IggyMessage> = (1..=3u128)
        .map(|i| {
            IggyMessage::builder()
                .id(i)
                .payload(bytes::Bytes::from(format!("secure-{i}")))
                .build()
                .expect("message")
        })
        .collect();
    let partitioning = Partitioning::partition_id(0);
    ok(
        "send",
        within("send", client.send_messages(&name("tls"), &name("t"), &partitioning, &mut messages)).await,
    );
    let polled = ok(
        "poll",
        within(
            "poll",
            client.poll_messages(
                &name("tls"),
                &name("t"),
                Some(0),
                &Consumer::default(),
                &PollingStrategy::offset(0),
                10,
                false,
            ),
        )
        .await,
    );
    let payloads: Vec<_> = polled.messages.iter().map(|m| m.payload.to_vec()).collect();
    assert_eq!(payloads, [b"secure-1".to_vec(), b"secure-2".to_vec(), b"secure-3".to_vec()]);
    // Plain HTTP on the HTTPS port gets no HTTP answer.
    let address = api.trim_start_matches("http://");
    let mut plain = within("connect", tokio::net::TcpStream::connect(address)).await.expect("connect");
    plain
        .write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut reply = Vec::new();
    let _ = within("read", plain.read_to_end(&mut reply)).await;
    assert!(!reply.starts_with(b"HTTP/1.1 200"), "plain HTTP served on the HTTPS port");
    // The server still serves TLS clients after that.
    ok("ping", within("ping", client.ping()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_can_be_disabled_and_an_unbindable_transport_stops_the_start() {
    // QUIC alone: the roster advertises TCP as 0.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let quic_only = std::process::Command::new(server_binary())
        .arg("--with-default-root-credentials")
        .current_dir(dir.path())
        .env("IGGY_TCP_ENABLED", "false")
        .env("IGGY_QUIC_ADDRESS", format!("127.0.0.1:{port}"))
        .env("IGGY_SYSTEM_PATH", dir.path().join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _quic_only = Kill(quic_only);
    let client = within_for(Duration::from_secs(20), "quic-only server", async {
        loop {
            let url = format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
            let client = IggyClient::from_connection_string(&url).unwrap();
            if client.connect().await.is_ok() && client.ping().await.is_ok() {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let ports = endpoints(&client).await;
    assert_eq!(
        (ports.tcp, ports.quic),
        (0, port),
        "tcp.enabled = false: not served, advertised as 0"
    );

    // A WebSocket address already taken: the start fails naming the transport and address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let failed = std::process::Command::new(server_binary())
        .arg("--with-default-root-credentials")
        .current_dir(dir.path())
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env("IGGY_QUIC_ADDRESS", "127.0.0.1:0")
        .env("IGGY_WEBSOCKET_ENABLED", "true")
        .env("IGGY_WEBSOCKET_ADDRESS", &address)
        // HTTP (default 127.0.0.1:3000, maybe taken here) binds first: off, to fail on ws.
        .env("IGGY_HTTP_ENABLED", "false")
        .env("IGGY_SYSTEM_PATH", dir.path().join("data-2"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "the start fails: {stderr}");
    assert!(
        stderr.contains(&format!("cannot bind websocket {address}")),
        "{stderr}"
    );
}

// ----- raw frames -----

/// A request frame as the official client builds one.
pub(crate) fn request_frame(
    client: u128,
    session: u64,
    request: u64,
    operation: Operation,
    code: u32,
    body: &[u8],
) -> Vec<u8> {
    let mut header = RequestHeader {
        command: Command::Request,
        size: (RequestHeader::SIZE + body.len()) as u32,
        client,
        operation: operation.to_repr(),
        session,
        request,
        ..Default::default()
    };
    if operation == Operation::NonReplicated {
        header.reserved = code.to_le_bytes();
    } else {
        header.request_checksum = u128::from(request) + 1;
    }
    let mut frame = header.to_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

pub(crate) fn version_info() -> ClientVersionInfo<'static> {
    ClientVersionInfo {
        protocol_version: protocol::CURRENT.packed(),
        sdk_name: "transports-test",
        sdk_version: "0.0.0",
    }
}

pub(crate) const SECRET: [u8; 32] = [9; 32];

/// A reply frame's header and body; an eviction's reason instead when it is one.
pub(crate) fn parse_reply(frame: &[u8]) -> Result<(ReplyHeader, Vec<u8>), EvictionReason> {
    assert!(
        frame.len() >= ReplyHeader::SIZE,
        "a whole frame header: {} bytes",
        frame.len()
    );
    if frame[ReplyHeader::COMMAND_OFFSET] == Command::Eviction.to_repr() {
        return Err(
            EvictionReason::from_repr(frame[EvictionHeader::REASON_OFFSET])
                .expect("a known reason"),
        );
    }
    let header = ReplyHeader::decode_fixed(&frame[..ReplyHeader::SIZE]).unwrap();
    assert_eq!(header.size as usize, frame.len(), "one frame");
    Ok((header, frame[ReplyHeader::SIZE..].to_vec()))
}

/// Registers client `client` as root over plain TCP: its session.
async fn register_over_tcp(server: &TestServer, client: u128) -> u64 {
    // The TCP connection closes here; the session outlives it (its lease).
    signed_in_over_tcp(server, client).await.1
}

/// A plain TCP connection on which client `client` registered as root, and its session.
pub(crate) async fn signed_in_over_tcp(server: &TestServer, client: u128) -> (tokio::net::TcpStream, u64) {
    signed_in_over_tcp_as(server, client, version_info()).await
}

/// `signed_in_over_tcp` for a client that declares `version` (a 0.11.1 session names a
/// partition by ids alone, with no incarnation in its requests' headers).
pub(crate) async fn signed_in_over_tcp_as(server: &TestServer, client: u128, version: ClientVersionInfo<'_>) -> (tokio::net::TcpStream, u64) {
    let mut stream = tokio::net::TcpStream::connect(server.address())
        .await
        .unwrap();
    let body = LoginRegisterRequest {
        version_info: version,
        bind_secret: SECRET,
        username: ROOT_USER,
        password: ROOT_PASSWORD,
        client_context: "",
    }
    .to_wire_bytes();
    stream
        .write_all(&request_frame(client, 0, 0, Operation::Register, 40, &body))
        .await
        .unwrap();
    let mut head = [0u8; ReplyHeader::SIZE];
    stream.read_exact(&mut head).await.unwrap();
    let reply = ReplyHeader::decode_fixed(&head).unwrap();
    let mut body = vec![0u8; reply.size as usize - ReplyHeader::SIZE];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(reply.status, 0, "register");
    let session = LoginRegisterResponse::decode_exact(&body).unwrap().session;
    (stream, session)
}

/// A plain WebSocket connection to `port` on which client `client` (registered as root over
/// TCP) bound its session: the TCP stream under it, to write raw WebSocket frames on, and the
/// session.
pub(crate) async fn signed_in_over_websocket(server: &TestServer, port: u16, client: u128) -> (tokio::net::TcpStream, u64) {
    let session = register_over_tcp(server, client).await;
    let mut ws = ws_connect(port).await;
    ws.send(Message::Binary(bind_frame(client, session, 1).into())).await.unwrap();
    assert_eq!(status(&ws_next(&mut ws).await.unwrap()), 0, "bound over WebSocket");
    match ws.into_inner() {
        tokio_tungstenite::MaybeTlsStream::Plain(stream) => (stream, session),
        _ => unreachable!("plain ws"),
    }
}

fn bind_frame(client: u128, session: u64, request: u64) -> Vec<u8> {
    let body = BindSessionRequest {
        version_info: version_info(),
        identity: SessionIdentity {
            client_id: client,
            session,
            metadata_watermark: 0,
        },
        bind_secret: SECRET,
    }
    .to_wire_bytes();
    request_frame(
        client,
        session,
        request,
        Operation::NonReplicated,
        15,
        &body,
    )
}

/// `me` (code 20): answered only on a bound connection.
pub(crate) fn me_frame(client: u128, session: u64, request: u64) -> Vec<u8> {
    request_frame(client, session, request, Operation::NonReplicated, 20, &[])
}

fn status(frame: &[u8]) -> u32 {
    parse_reply(frame)
        .expect("a reply, not an eviction")
        .0
        .status
}

/// A raw QUIC connection to `port`, trusting `ca_der`.
/// Opens up to `streams` streams on `connection`, each carrying a SendMessages header of
/// client `client_of(i)` for `body` and all of it but the last byte, until the server grants
/// no more streams or takes no more bytes: the streams, kept open.
async fn hold_streams(connection: &quinn::Connection, streams: usize, body: &[u8], client_of: impl Fn(usize) -> u128) -> Vec<(quinn::SendStream, quinn::RecvStream)> {
    let mut held = Vec::new();
    for i in 0..streams {
        let header = send_header_one_byte_short(client_of(i), body.len());
        // A stream the server does not grant, or whose bytes it does not take, ends the storm.
        let Ok(Ok((mut send, recv))) = tokio::time::timeout(Duration::from_secs(1), connection.open_bi()).await else {
            break;
        };
        let written = tokio::time::timeout(Duration::from_secs(1), async {
            send.write_all(&header.to_bytes()).await?;
            send.write_all(body).await
        })
        .await;
        held.push((send, recv));
        if !matches!(written, Ok(Ok(()))) {
            break;
        }
    }
    held
}

async fn quic_connect(port: u16, ca_der: &[u8]) -> (quinn::Endpoint, quinn::Connection) {
    let (endpoint, connection) = quic_dial(port, ca_der).await;
    (endpoint, connection.expect("quic handshake"))
}

/// A raw QUIC handshake with `port`, trusting `ca_der`: the connection or why there is none.
async fn quic_dial(
    port: u16,
    ca_der: &[u8],
) -> (
    quinn::Endpoint,
    Result<quinn::Connection, quinn::ConnectionError>,
) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(ca_der.to_vec()))
        .unwrap();
    let crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let address = format!("127.0.0.1:{port}").parse().unwrap();
    let connection = within(
        "quic handshake",
        endpoint.connect(address, "localhost").unwrap(),
    )
    .await;
    (endpoint, connection)
}

/// Sends `bytes` on a new stream, finishes it, and reads the stream's whole answer.
async fn quic_exchange(connection: &quinn::Connection, bytes: &[u8]) -> Vec<u8> {
    let (mut send, mut recv) = within("open_bi", connection.open_bi()).await.unwrap();
    send.write_all(bytes).await.unwrap();
    send.finish().unwrap();
    within("quic answer", recv.read_to_end(1 << 20))
        .await
        .expect("the stream's answer")
}

fn quic_server(certs: &TestCertificates) -> TestServer {
    quic_server_with(certs, &[])
}

fn quic_server_with(certs: &TestCertificates, extra: &[(&str, &str)]) -> TestServer {
    let mut env = vec![
        ("IGGY_QUIC_CERTIFICATE_SELF_SIGNED", "false"),
        ("IGGY_QUIC_CERTIFICATE_CERT_FILE", path(&certs.cert_file)),
        ("IGGY_QUIC_CERTIFICATE_KEY_FILE", path(&certs.key_file)),
    ];
    env.extend_from_slice(extra);
    TestServer::start_with_env(&env)
}

/// A loopback UDP port free a moment ago, and its address, for a QUIC listener a test must
/// know in advance (to fill it, or to restart on it).
fn free_udp_address() -> (u16, String) {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (port, format!("127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_connections_count_against_max_connections_and_free_their_slot_on_close() {
    let certs = test_certificates();
    let (port, address) = free_udp_address();
    let _server = quic_server_with(
        &certs,
        &[
            ("IGGY_LIMITS_MAX_CONNECTIONS", "2"),
            ("IGGY_QUIC_ADDRESS", &address),
        ],
    );
    // Two QUIC connections fill the slots (the harness's readiness probe may still hold one
    // for a moment: a refused connection is dialed again). A connection over the limit is
    // answered CannotEstablishConnection (9) on its first stream, then closed.
    const REFUSED: u32 = 9;
    let dial_until_admitted = || async {
        within_for(Duration::from_secs(10), "a QUIC slot", async {
            loop {
                let (endpoint, dialed) = quic_dial(port, &certs.ca_der).await;
                if let Ok(connection) = dialed
                    && status(&quic_exchange(&connection, &me_frame(0x7a11_0005, 0, 1)).await)
                        != REFUSED
                {
                    return (endpoint, connection);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
    };
    let first = dial_until_admitted().await;
    let _second = dial_until_admitted().await;
    let (_endpoint, refused) = quic_dial(port, &certs.ca_der).await;
    let refused = refused.expect("the handshake of a connection over the limit completes");
    let answer = quic_exchange(&refused, &me_frame(0x7a11_0007, 0, 1)).await;
    assert_eq!(status(&answer), REFUSED, "its first request is told why");
    let closed = within("the refused connection closes", refused.closed()).await;
    assert!(
        matches!(closed, quinn::ConnectionError::ApplicationClosed(_)),
        "{closed:?}"
    );
    first.1.close(0u32.into(), b"done");
    let admitted = dial_until_admitted().await;
    let me = quic_exchange(&admitted.1, &me_frame(0x7a11_0006, 0, 1)).await;
    assert_eq!(status(&me), IggyError::Unauthenticated.as_code(), "served");
}

/// At `limits.max_connections` the official SDK's `connect` fails at once with
/// CannotEstablishConnection (9) over TCP, QUIC and WebSocket alike: each transport answers the
/// first request of a connection over the limit so, then closes it. (QUIC refused the handshake
/// and WebSocket closed the socket, and the SDK redialed those for as long as it ran.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_the_sdk_is_refused_at_once_over_every_transport() {
    let server = TestServer::start_with_env(&[
        WEBSOCKET_ON[0],
        WEBSOCKET_ON[1],
        ("IGGY_LIMITS_MAX_CONNECTIONS", "1"),
    ]);
    let ports = {
        // This client holds the one slot from here on (once the harness's readiness probe gave
        // it back: a refused connect is tried again).
        let url = server.connection_string(ROOT_USER, ROOT_PASSWORD);
        let holder = within_for(Duration::from_secs(10), "the one slot", async {
            loop {
                let client = IggyClient::from_connection_string(&url).expect("connection string");
                if client.connect().await.is_ok() {
                    return client;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        let ports = endpoints(&holder).await;
        std::mem::forget(holder);
        ports
    };
    for (scheme, port) in [
        ("iggy", ports.tcp),
        ("iggy+quic", ports.quic),
        ("iggy+ws", ports.websocket),
    ] {
        let url = format!("{scheme}://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
        let client = IggyClient::from_connection_string(&url).expect("connection string");
        let started = std::time::Instant::now();
        let connected = within_for(Duration::from_secs(20), scheme, client.connect()).await;
        expect_code(scheme, connected, 9);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{scheme}: refused after {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_registered_over_tcp_binds_over_quic_and_serves_later_streams() {
    let certs = test_certificates();
    let server = quic_server(&certs);
    let port = endpoints(&server.root_client().await).await.quic;
    let client = 0x7a11_0001;
    let session = register_over_tcp(&server, client).await;
    let (_endpoint, quic) = quic_connect(port, &certs.ca_der).await;
    let unbound = quic_exchange(&quic, &me_frame(client, session, 1)).await;
    assert_eq!(
        status(&unbound),
        IggyError::Unauthenticated.as_code(),
        "not bound yet"
    );
    assert_eq!(
        status(&quic_exchange(&quic, &bind_frame(client, session, 2)).await),
        0,
        "BindSession over QUIC"
    );
    // The binding holds for the connection's later (and concurrent) streams.
    let (me_a, me_b) = (me_frame(client, session, 3), me_frame(client, session, 4));
    let (a, b) = tokio::join!(quic_exchange(&quic, &me_a), quic_exchange(&quic, &me_b));
    assert_eq!((status(&a), status(&b)), (0, 0), "bound streams are served");
    // A wrong secret does not bind another connection.
    let (_endpoint2, other) = quic_connect(port, &certs.ca_der).await;
    let mut wrong = bind_frame(client, session, 5);
    let at = wrong.len() - 1;
    wrong[at] ^= 1;
    assert_eq!(
        status(&quic_exchange(&other, &wrong).await),
        IggyError::Unauthenticated.as_code()
    );
}

/// A graceful stop (SIGTERM) closes every QUIC connection (CONNECTION_CLOSE) before the process
/// exits, as the kernel's FIN does for TCP and WebSocket: a client learns at once that the
/// server went away and reconnects, to the restarted process or another node, instead of
/// waiting out its idle timeout (the SDK's is 10 s, the CLI's 100 s; a rolling restart stalled
/// QUIC clients that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_closes_the_quic_connections_it_serves() {
    let certs = test_certificates();
    // A short idle timeout, no keep-alive: without a close the connection times out quickly.
    let mut server = quic_server_with(
        &certs,
        &[
            ("IGGY_QUIC_MAX_IDLE_TIMEOUT_MS", "3000"),
            ("IGGY_QUIC_KEEP_ALIVE_INTERVAL_MS", "0"),
        ],
    );
    let port = endpoints(&server.root_client().await).await.quic;
    let (_endpoint, quic) = quic_connect(port, &certs.ca_der).await;
    tokio::task::block_in_place(|| server.stop());
    let ended = within("the connection ends", quic.closed()).await;
    assert!(
        matches!(ended, quinn::ConnectionError::ApplicationClosed(_)),
        "closed by the server, not timed out: {ended:?}"
    );
}

/// A QUIC client of a server killed with -9 learns at its next packet that its connection is
/// gone: the restarted server answers with a stateless reset derived from the key its data
/// directory keeps (`quic.reset_key`), which the client checks against the token the dead
/// process gave it. A new key per process left the client to wait out its idle timeout (the
/// SDK 10 s, the CLI 100 s) after every crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_client_of_a_killed_server_is_reset_by_the_next_process() {
    let certs = test_certificates();
    let (port, address) = free_udp_address();
    // A short idle timeout, no keep-alive: unreset, the connection times out quickly.
    let mut server = quic_server_with(
        &certs,
        &[
            ("IGGY_QUIC_ADDRESS", &address),
            ("IGGY_QUIC_MAX_IDLE_TIMEOUT_MS", "3000"),
            ("IGGY_QUIC_KEEP_ALIVE_INTERVAL_MS", "0"),
        ],
    );
    let (_endpoint, quic) = quic_connect(port, &certs.ca_der).await;
    tokio::task::block_in_place(|| server.kill9_and_restart());
    let _ready = server.root_client().await;
    // The client's next packet reaches the new process, which knows no such connection.
    if let Ok((mut send, _)) = quic.open_bi().await {
        let _ = send.write_all(&[0; 256]).await;
    }
    let ended = within("the connection ends", quic.closed()).await;
    assert!(
        matches!(ended, quinn::ConnectionError::Reset),
        "reset by the restarted server, not timed out: {ended:?}"
    );
}

/// A raw WebSocket connection to `port`.
async fn ws_connect(
    port: u16,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = format!("ws://127.0.0.1:{port}/any/path");
    within("ws handshake", tokio_tungstenite::connect_async(url))
        .await
        .expect("ws handshake")
        .0
}

/// The next binary message, or the close frame's code and reason.
async fn ws_next(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Result<Vec<u8>, (CloseCode, String)> {
    loop {
        match within("ws message", ws.next()).await {
            Some(Ok(Message::Binary(bytes))) => return Ok(bytes.to_vec()),
            Some(Ok(Message::Close(Some(frame)))) => {
                return Err((frame.code, frame.reason.to_string()));
            }
            Some(Ok(Message::Close(None))) | None => {
                return Err((CloseCode::Status, String::new()));
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => panic!("ws read: {error}"),
        }
    }
}

/// A masked WebSocket frame (a zero key: the payload goes as is): `first` is its FIN bit and
/// opcode.
fn ws_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![first, 0x80 | 127];
    frame.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// A signed-in client's large request may come in WebSocket fragments with a ping between
/// them: the server reads each frame's length below the library, to reserve a large message's
/// bytes from the budget before the library reads them, and the library still reads the same
/// frames. Two messages of 600 KiB in three fragments on one connection, with a 1 MiB budget:
/// each is answered and its reservation given back (else the second would wait for good), and
/// the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_websocket_requests_with_a_ping_between_are_reserved_read_and_answered() {
    use tokio_tungstenite::tungstenite::protocol::Role;
    let server = TestServer::start_with_env(&[WEBSOCKET_ON[0], WEBSOCKET_ON[1], ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", "1048576")]);
    let port = endpoints(&server.root_client().await).await.websocket;
    let client = 0x7a11_0f00;
    let (stream, session) = signed_in_over_websocket(&server, port, client).await;
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(tokio_tungstenite::MaybeTlsStream::Plain(stream), Role::Client, None).await;
    for request in [2, 3] {
        // `me` takes no body: answered with an error, not an eviction.
        let frame = request_frame(client, session, request, Operation::NonReplicated, 20, &vec![7; 600 << 10]);
        let (first, rest) = frame.split_at(100_000);
        let (second, last) = rest.split_at(300_000);
        let raw = [ws_frame(0x02, first), ws_frame(0x89, b"ping"), ws_frame(0x00, second), ws_frame(0x80, last)].concat();
        within("fragments", ws.get_mut().write_all(&raw)).await.unwrap();
        let reply = ws_next(&mut ws).await.unwrap_or_else(|close| panic!("request {request}: closed {close:?}\n{}", server.log()));
        let (header, _) = parse_reply(&reply).unwrap_or_else(|reason| panic!("request {request}: evicted {reason:?}"));
        assert_eq!(header.request, request);
    }
    ws.send(Message::Binary(me_frame(client, session, 4).into())).await.unwrap();
    assert_eq!(status(&ws_next(&mut ws).await.unwrap()), 0, "the connection serves on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_registered_over_tcp_binds_over_websocket_on_any_path() {
    let server = TestServer::start_with_env(&WEBSOCKET_ON);
    let port = endpoints(&server.root_client().await).await.websocket;
    let client = 0x7a11_0002;
    let session = register_over_tcp(&server, client).await;
    let mut ws = ws_connect(port).await;
    ws.send(Message::Binary(me_frame(client, session, 1).into()))
        .await
        .unwrap();
    assert_eq!(
        status(&ws_next(&mut ws).await.unwrap()),
        IggyError::Unauthenticated.as_code(),
        "not bound yet"
    );
    ws.send(Message::Binary(bind_frame(client, session, 2).into()))
        .await
        .unwrap();
    assert_eq!(
        status(&ws_next(&mut ws).await.unwrap()),
        0,
        "BindSession over WebSocket"
    );
    ws.send(Message::Binary(me_frame(client, session, 3).into()))
        .await
        .unwrap();
    assert_eq!(status(&ws_next(&mut ws).await.unwrap()), 0, "bound");
}

/// The server still serves: an SDK client on `transport` pings and lists streams.
async fn still_served(client: &IggyClient) {
    ok("ping", within("ping", client.ping()).await);
    ok(
        "get streams",
        within("get_streams", client.get_streams()).await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_quic_streams_are_evicted_and_the_server_and_other_clients_carry_on() {
    let certs = test_certificates();
    let server = quic_server(&certs);
    let port = endpoints(&server.root_client().await).await.quic;
    // Another connection, bound before the bad input, keeps working.
    let client = 0x7a11_0003;
    let session = register_over_tcp(&server, client).await;
    let (_endpoint, good) = quic_connect(port, &certs.ca_der).await;
    assert_eq!(
        status(&quic_exchange(&good, &bind_frame(client, session, 1)).await),
        0
    );

    let valid = me_frame(0x7a11_0004, 0, 1);
    let mut truncated = request_frame(0x7a11_0004, 0, 1, Operation::NonReplicated, 20, &[0; 1000]);
    truncated.truncate(RequestHeader::SIZE + 500);
    let mut trailing = valid.clone();
    trailing.extend_from_slice(&[0; 10]);
    let cases: [(&str, Vec<u8>, EvictionReason); 5] = [
        (
            "a short header",
            valid[..100].to_vec(),
            EvictionReason::InvalidRequestBodySize,
        ),
        (
            "an empty stream",
            Vec::new(),
            EvictionReason::InvalidRequestBodySize,
        ),
        (
            "garbage",
            (0..RequestHeader::SIZE)
                .map(|i| (i * 37 % 251) as u8)
                .collect(),
            EvictionReason::InvalidRequestBody,
        ),
        (
            "a truncated body",
            truncated,
            EvictionReason::InvalidRequestBodySize,
        ),
        (
            "bytes after the frame",
            trailing,
            EvictionReason::InvalidRequestBodySize,
        ),
    ];
    for (what, bytes, reason) in cases {
        let (_endpoint, bad) = quic_connect(port, &certs.ca_der).await;
        let answer = quic_exchange(&bad, &bytes).await;
        assert_eq!(
            parse_reply(&answer).err(),
            Some(reason),
            "{what}: evicted with {reason:?}"
        );
        // An eviction ends the whole connection, as on TCP.
        within("the evicted connection closes", bad.closed()).await;
        let me = quic_exchange(&good, &me_frame(client, session, 2)).await;
        assert_eq!(
            status(&me),
            0,
            "after {what}: the other connection is served"
        );
    }
    still_served(&quic_client(port).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_websocket_messages_get_a_clear_close_and_the_server_and_other_clients_carry_on() {
    let server = TestServer::start_with_env(&[
        WEBSOCKET_ON[0],
        WEBSOCKET_ON[1],
        ("IGGY_WEBSOCKET_MAX_MESSAGE_SIZE", "1048576"),
        ("IGGY_WEBSOCKET_MAX_FRAME_SIZE", "1048576"),
    ]);
    let port = endpoints(&server.root_client().await).await.websocket;
    let other = ws_client(port).await;

    let mut ws = ws_connect(port).await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    let (code, reason) = ws_next(&mut ws).await.unwrap_err();
    assert_eq!(code, CloseCode::Unsupported, "a text message: {reason}");
    assert!(reason.contains("binary"), "{reason}");

    let mut ws = ws_connect(port).await;
    ws.send(Message::Binary(vec![0u8; 2 * 1024 * 1024].into()))
        .await
        .unwrap();
    let (code, reason) = ws_next(&mut ws).await.unwrap_err();
    assert_eq!(code, CloseCode::Size, "an oversized message: {reason}");

    for (what, bytes) in [
        (
            "a short message",
            me_frame(0x7a11_0005, 0, 1)[..100].to_vec(),
        ),
        ("a truncated frame", {
            let mut frame =
                request_frame(0x7a11_0005, 0, 1, Operation::NonReplicated, 20, &[0; 1000]);
            frame.truncate(RequestHeader::SIZE + 10);
            frame
        }),
    ] {
        let mut ws = ws_connect(port).await;
        ws.send(Message::Binary(bytes.into())).await.unwrap();
        let evicted = ws_next(&mut ws).await.expect("an eviction frame");
        assert_eq!(
            parse_reply(&evicted).err(),
            Some(EvictionReason::InvalidRequestBodySize),
            "{what}"
        );
        let (code, reason) = ws_next(&mut ws).await.unwrap_err();
        assert_eq!(code, CloseCode::Policy, "{what}: {reason}");
    }
    still_served(&other).await;
    still_served(&ws_client(port).await).await;
}

/// A request to the WebSocket port that is not a WebSocket handshake (curl, a browser, a
/// health check pointed at the wrong port) is answered with an HTTP status that says what the
/// port serves, not closed unanswered; the port goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_the_websocket_port_that_is_no_handshake_gets_an_http_status() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start_with_env(&WEBSOCKET_ON);
    let port = endpoints(&server.root_client().await).await.websocket;
    for (request, status, header) in [
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "426", "upgrade: websocket"),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "400",
            "sec-websocket-version: 13",
        ),
        ("garbage\r\n\r\n", "400", "content-type: text/plain"),
    ] {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
            .await
            .expect("answered and closed")
            .unwrap();
        let lower = answer.to_ascii_lowercase();
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{request:?}: {answer}");
        assert!(lower.contains(header), "{request:?}: {answer}");
        assert!(answer.contains("serves Iggy over WebSocket"), "{request:?}: {answer}");
    }
    still_served(&ws_client(port).await).await;
}

/// The HTTP client list names each transport as upstream's HTTP API does: the official
/// `TransportProtocol`'s names ("tcp", "quic", "http", "ws"), which the SDK's HTTP client model
/// takes as they come (a plain string). The binary reply carries a number, which the SDK turns
/// into "TCP", "QUIC", "HTTP" or "WebSocket" itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_client_list_names_transports_as_upstreams_http_api() {
    let (server, api) = TestServer::start_with_http(&WEBSOCKET_ON);
    let tcp = server.root_client().await;
    let ports = endpoints(&tcp).await;
    let websocket = IggyClient::builder()
        .with_websocket()
        .with_server_address(format!("127.0.0.1:{}", ports.websocket))
        .build()
        .expect("websocket client");
    let _websocket = connected("websocket", websocket).await;
    let _quic = quic_client(ports.quic).await;
    let http = IggyClient::builder()
        .with_http()
        .with_api_url(api)
        .build()
        .expect("http client");
    ok("http login", within("login", http.login_user(ROOT_USER, ROOT_PASSWORD)).await);

    let clients = ok("clients", within("clients", http.get_clients()).await);
    let mut named: Vec<String> = clients.iter().map(|c| c.transport.clone()).collect();
    named.sort();
    named.dedup();
    let mut expected: Vec<String> = [
        TransportProtocol::Tcp,
        TransportProtocol::Quic,
        TransportProtocol::Http,
        TransportProtocol::WebSocket,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    expected.sort();
    assert_eq!(named, expected, "{clients:?}");
}

/// An HTTP address already taken fails the start before any transport serves: the binary
/// listeners used to bind and serve first, so a client could be served by a process about to
/// exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_address_already_taken_fails_the_start_before_anything_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let failed = std::process::Command::new(server_binary())
        .arg("--with-default-root-credentials")
        .current_dir(dir.path())
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env("IGGY_QUIC_ADDRESS", "127.0.0.1:0")
        .env("IGGY_HTTP_ENABLED", "true")
        .env("IGGY_HTTP_ADDRESS", &address)
        .env("IGGY_SYSTEM_PATH", dir.path().join("data"))
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&failed.stdout),
        String::from_utf8_lossy(&failed.stderr)
    );
    assert!(!failed.status.success(), "the start fails: {printed}");
    assert!(
        printed.contains(&format!("cannot bind http {address}")),
        "{printed}"
    );
    assert!(
        !printed.contains("listening on"),
        "nothing was served first: {printed}"
    );
}

/// A session's bind secret is a credential (BindSession with it takes the session over, from
/// any node): the data directory keeps only its hash, as it does passwords and tokens, and the
/// secret still binds. The journaled register and the checkpoint once held the secret itself,
/// so a copy of the directory (a backup) could take over every live session, root's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_keeps_no_bind_secret() {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "1")]);
    let client = 0x5ec2_e7b1_4d00_0000_0000_0000_0000_0001;
    let session = register_over_tcp(&server, client).await;
    let mut stream = tokio::net::TcpStream::connect(server.address()).await.unwrap();
    stream.write_all(&bind_frame(client, session, 1)).await.unwrap();
    let mut head = [0u8; ReplyHeader::SIZE];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(ReplyHeader::decode_fixed(&head).unwrap().status, 0, "the secret binds the session");
    drop(stream);
    server.stop();
    for file in files_under(&server.data_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET), "{} holds the bind secret", file.display());
    }
}

/// An anonymous QUIC connection (no session bound yet) gets few streams and a small receive
/// window, raised to the configured ones once it signs in. Each stream is one request whose body
/// the server reads, so one anonymous connection that opened thousands of streams, each with a
/// body short of its last byte, made the server hold them all (9,000 streams of 60 KiB: 16 ->
/// 685 MiB resident) until the request timeout; the TCP cap on an anonymous request's size does
/// not bound the number of requests a QUIC connection has in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_quic_connection_cannot_make_the_server_hold_many_request_bodies() {
    const STREAMS: usize = 2000;
    const BODY: usize = 60 * 1024;
    let certs = test_certificates();
    let (port, address) = free_udp_address();
    // The bodies stay held for the whole measurement.
    let server = quic_server_with(&certs, &[("IGGY_QUIC_ADDRESS", &address), ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000")]);
    let before = server.resident_mib();
    let (_endpoint, connection) = quic_connect(port, &certs.ca_der).await;
    let body = vec![b'x'; BODY];
    let held = hold_streams(&connection, STREAMS, &body, |i| 0xB0B + i as u128).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = server.resident_mib();
    eprintln!("resident {before} MiB before, {during} MiB during");
    assert!(
        during < before + 64,
        "{} streams of {} KiB bodies short of one byte: resident {before} MiB before, {during} MiB while they wait",
        held.len(),
        BODY / 1024
    );
    // A client that signs in gets the configured streams: the SDK's concurrent requests work.
    let client = quic_client(port).await;
    let requests = (0..64).map(|_| client.get_streams());
    for result in futures_util::future::join_all(requests).await {
        ok("get_streams", result);
    }
}

/// A signed-in QUIC connection's streams are requests served at once, so its small bodies (at
/// most 64 KiB, read without a reservation from the node's budget on links that serve one
/// request at a time) are uncounted only within a 1 MiB allowance per connection; beyond it
/// they wait for the budget (`limits.max_request_bodies_size`) like large ones. Before, one
/// signed-in connection that opened 2000 streams, each with a 60 KiB body short of its last
/// byte, made the server hold them all (the configured 10,000 streams are granted once a
/// session is bound). Another QUIC client still signs in and is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_quic_connection_cannot_make_the_server_hold_many_small_request_bodies() {
    const STREAMS: usize = 2000;
    const BODY: usize = 60 * 1024;
    let certs = test_certificates();
    let (port, address) = free_udp_address();
    // The bodies stay held for the whole measurement; what the server does not read waits in
    // the connection's receive window, 8 MiB here.
    let env = [("IGGY_QUIC_ADDRESS", address.as_str()), ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", "8388608"), ("IGGY_QUIC_RECEIVE_WINDOW", "8388608")];
    let server = quic_server_with(&certs, &env);
    let client = 0x7a11_00b0;
    let session = register_over_tcp(&server, client).await;
    let (_endpoint, connection) = quic_connect(port, &certs.ca_der).await;
    assert_eq!(status(&quic_exchange(&connection, &bind_frame(client, session, 1)).await), 0, "bound");
    let before = server.resident_mib();
    let body = vec![b'x'; BODY];
    let held = hold_streams(&connection, STREAMS, &body, |_| client).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = server.resident_mib();
    eprintln!("resident {before} MiB before, {during} MiB while {} streams wait", held.len());
    assert!(
        during < before + 48,
        "{} streams of a signed-in connection with {} KiB bodies short of one byte: resident {before} MiB before, {during} MiB while they wait (budget 8 MiB)",
        held.len(),
        BODY / 1024
    );
    let other = quic_client(port).await;
    let requests = (0..64).map(|_| other.get_streams());
    for result in futures_util::future::join_all(requests).await {
        ok("get_streams", result);
    }
}

/// Signed-in QUIC connections that each stall a large body hold at most the node's budget of
/// request bodies between them, beside a small receive window each: what the server has not
/// read of a connection waits in that window, so the window a connection is granted beyond a
/// small base is the bytes of the bodies reserved on it. Before, a signed-in connection was
/// granted `quic.receive_window` (64 MiB), and 12 connections that each stalled a 16 MiB body
/// made the node hold all of them whatever the budget. Another QUIC client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_quic_connections_holding_large_bodies_are_bounded_by_the_node_wide_budget() {
    const CONNECTIONS: usize = 12;
    const BODY: usize = 16 << 20;
    const BUDGET: usize = 32 << 20;
    let certs = test_certificates();
    let budget = BUDGET.to_string();
    // The bodies stay held for the whole measurement.
    let server = quic_server_with(&certs, &[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", &budget)]);
    let port = endpoints(&server.root_client().await).await.quic;
    let before = server.resident_mib();
    let body = Arc::new(vec![b'x'; BODY]);
    let held = futures_util::future::join_all((0..CONNECTIONS).map(|i| {
        let (server, certs, body) = (&server, &certs, body.clone());
        async move {
            let client = 0x7a11_0c00 + i as u128;
            let session = register_over_tcp(server, client).await;
            let (endpoint, connection) = quic_connect(port, &certs.ca_der).await;
            assert_eq!(status(&quic_exchange(&connection, &bind_frame(client, session, 1)).await), 0, "bound");
            let streams = hold_streams(&connection, 1, &body, |_| client).await;
            (endpoint, connection, streams)
        }
    }))
    .await;
    crate::limits::resident_within_budget(&server, before, &format!("{CONNECTIONS} signed-in QUIC connections with {} MiB bodies short of one byte", BODY >> 20), BUDGET).await;
    let other = quic_client(port).await;
    let requests = (0..16).map(|_| other.get_streams());
    for result in futures_util::future::join_all(requests).await {
        ok("get_streams", result);
    }
    drop(held);
}

/// Over WebSocket the library reads a whole message (up to `websocket.max_message_size`, 64 MiB)
/// before the server sees its frame header, so the cap on an anonymous request's size (64 KiB
/// over TCP and QUIC) did not keep anonymous connections from making the node hold large
/// messages: 16 connections that each sent a 32 MiB binary frame short of its last byte held
/// over 500 MiB until the idle timeout. A connection is now built with 64 KiB message and frame
/// limits (a larger frame is refused at its header) and rebuilt with the configured ones once a
/// session is bound: a signed-in client still sends large messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_websocket_connections_cannot_make_the_server_hold_large_messages() {
    const CONNECTIONS: usize = 16;
    const BODY: usize = 32 << 20;
    let server = TestServer::start_with_env(&WEBSOCKET_ON);
    let port = endpoints(&server.root_client().await).await.websocket;
    let before = server.resident_mib();
    let mut held = Vec::new();
    let payload = vec![0u8; BODY];
    for _ in 0..CONNECTIONS {
        let ws = ws_connect(port).await;
        let mut stream = match ws.into_inner() {
            tokio_tungstenite::MaybeTlsStream::Plain(stream) => stream,
            _ => unreachable!("plain ws"),
        };
        // One masked binary frame (a zero mask key) declaring BODY + 1 bytes, all but the last sent.
        let mut head = vec![0x82, 0xFF];
        head.extend_from_slice(&((BODY + 1) as u64).to_be_bytes());
        head.extend_from_slice(&[0, 0, 0, 0]);
        within("frame head", stream.write_all(&head)).await.unwrap();
        within("frame payload", stream.write_all(&payload)).await.unwrap();
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = server.resident_mib();
    eprintln!("resident {before} MiB before, {during} MiB during");
    assert!(
        during < before + 64,
        "{CONNECTIONS} anonymous WebSocket frames of {} MiB short of one byte: resident {before} MiB before, {during} MiB while they wait",
        BODY >> 20
    );
    let client = ws_client(port).await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let mut messages = vec![msg(vec![b'w'; 4 << 20])];
    ok("a 4 MiB send over WebSocket", within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await);
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(0), 1, false).await;
    assert_eq!(polled.messages[0].payload.len(), 4 << 20);
}

/// Polls 10 messages of partition 0 of `s`/`t` from `offset` as consumer `c` through `client`.
async fn poll_s_t_from(client: &IggyClient, offset: u64) -> Result<PolledMessages, IggyError> {
    let strategy = PollingStrategy::offset(offset);
    client
        .poll_messages(
            &name("s"),
            &name("t"),
            Some(0),
            &consumer("c"),
            &strategy,
            10,
            false,
        )
        .await
}

/// A QUIC client reads a reply into a buffer of fixed size (the SDK's `response_buffer_size`)
/// and fails a longer one, retrying until its deadline. Poll replies over QUIC hold at most
/// `quic.max_reply_size` bytes: a batch larger than that (here 10 messages of 30 kB, under a
/// 100 kB limit and a 100 kB client buffer) is served a few messages per poll, every one read
/// in order; a single message over it is refused at once with 4022, not served to fail there,
/// and the messages after it are read past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_poll_replies_fit_the_clients_reply_buffer() {
    let server = TestServer::start_with_env(&[("IGGY_QUIC_MAX_REPLY_SIZE", "100000")]);
    let tcp = server.root_client().await;
    create_stream_and_topic(&tcp, "s", "t", 1).await;
    let ports = endpoints(&tcp).await;
    let url = format!(
        "iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{}?response_buffer_size=100000",
        ports.quic
    );
    let quic = IggyClient::from_connection_string(&url).expect("quic connection string");
    ok("quic connect", within("quic connect", quic.connect()).await);
    let batch: Vec<IggyMessage> = (0..10u8).map(|i| msg(vec![i; 30_000])).collect();
    send_to_partition(&tcp, &name("s"), &name("t"), 0, batch).await;

    let mut read = Vec::new();
    let mut replies = 0;
    while read.len() < 10 {
        let polled = within("quic poll", poll_s_t_from(&quic, read.len() as u64))
            .await
            .unwrap_or_else(|e| panic!("poll from {}: {e} (code {})", read.len(), e.as_code()));
        assert!(
            !polled.messages.is_empty(),
            "a poll from {} read nothing",
            read.len()
        );
        read.extend(
            polled
                .messages
                .iter()
                .map(|m| (m.header.offset, m.payload[0])),
        );
        replies += 1;
    }
    assert_eq!(
        read,
        (0..10u8).map(|i| (u64::from(i), i)).collect::<Vec<_>>()
    );
    assert!(
        replies >= 4,
        "10 messages of 30 kB in {replies} replies of at most 100 kB"
    );

    send_to_partition(
        &tcp,
        &name("s"),
        &name("t"),
        0,
        vec![msg(vec![b'L'; 150_000])],
    )
    .await;
    send_to_partition(&tcp, &name("s"), &name("t"), 0, vec![msg("after")]).await;
    let started = std::time::Instant::now();
    let too_large = within("quic poll of the large message", poll_s_t_from(&quic, 10)).await;
    expect_code("a message over the reply limit", too_large, 4022);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once, not after the client's deadline: {:?}",
        started.elapsed()
    );
    assert!(
        !server
            .log_lines_with("its message takes 150304 bytes, over quic.max_reply_size (100000)")
            .is_empty(),
        "the refusal names the key in the log"
    );
    let after = ok(
        "quic poll after it",
        within("quic poll", poll_s_t_from(&quic, 11)).await,
    );
    assert_eq!(payloads(&after), ["after"]);
    // TCP serves the large message.
    let polled = poll(
        &tcp,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::offset(10),
        1,
        false,
    )
    .await;
    assert_eq!(polled.messages[0].payload.len(), 150_000);
}

/// A Register names no session and no request number (the official header validation refuses
/// one that does): a client that sets either is evicted as a malformed login; the same login
/// with both zero is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_register_that_names_a_session_or_a_request_number_is_a_malformed_login() {
    let server = TestServer::start();
    for (session, request) in [(7u64, 0u64), (0, 5), (0, 0)] {
        let mut frame = crate::cluster::root_register_frame(0xA5);
        let at = RequestHeader::SESSION_OFFSET;
        frame[at..at + 8].copy_from_slice(&session.to_le_bytes());
        let at = RequestHeader::REQUEST_OFFSET;
        frame[at..at + 8].copy_from_slice(&request.to_le_bytes());
        let mut stream = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        stream.write_all(&frame).await.unwrap();
        let mut head = [0u8; ReplyHeader::SIZE];
        within("register reply", stream.read_exact(&mut head))
            .await
            .unwrap();
        let size = u32::from_le_bytes(head[48..52].try_into().unwrap()) as usize;
        let mut reply = head.to_vec();
        reply.resize(size.max(ReplyHeader::SIZE), 0);
        within(
            "reply body",
            stream.read_exact(&mut reply[ReplyHeader::SIZE..]),
        )
        .await
        .unwrap();
        let verdict = parse_reply(&reply).map(|(header, _)| header.status);
        let expected = match (session, request) {
            (0, 0) => Ok(0),
            _ => Err(EvictionReason::MalformedLogin),
        };
        assert_eq!(verdict, expected, "session {session}, request {request}");
    }
}

/// A QUIC stream is one request, opened by its first bytes: a header that stops short on it is
/// cut after `limits.request_timeout_ms` (the stream ends), as a TCP connection's is, instead of
/// holding the stream for the connection's idle timeout. The connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_request_header_that_stops_short_is_cut_after_the_request_timeout() {
    let certs = test_certificates();
    let server = quic_server_with(&certs, &[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "1000")]);
    let port = endpoints(&server.root_client().await).await.quic;
    let (_endpoint, quic) = quic_connect(port, &certs.ca_der).await;
    let (mut send, mut recv) = within("open_bi", quic.open_bi()).await.unwrap();
    let frame = me_frame(0x7a11_0009, 0, 1);
    send.write_all(&frame[..100]).await.unwrap();
    let started = std::time::Instant::now();
    let ended = within_for(
        Duration::from_secs(20),
        "the stream ends",
        recv.read_to_end(1 << 20),
    )
    .await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "cut after the request timeout (1 s), not the idle timeout: {waited:?}, {ended:?}"
    );
    let me = quic_exchange(&quic, &me_frame(0x7a11_0009, 0, 2)).await;
    assert_eq!(
        status(&me),
        IggyError::Unauthenticated.as_code(),
        "the connection serves on"
    );
}

/// A WebSocket peer that sends Pings and never reads: the server queued a Pong for each, with
/// no bound (2.7 GB in 15 s from one anonymous connection, the node's memory at the network's
/// speed). The queue is bounded now (before a session is bound, 1 MiB above the write buffer):
/// after 64 MiB of Pings the server's memory grew by far less, and it serves other clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_peer_that_never_reads_its_pongs_leaves_a_bounded_queue() {
    let server = TestServer::start_with_env(&WEBSOCKET_ON);
    let tcp = server.root_client().await;
    let port = endpoints(&tcp).await.websocket;
    let before = server.resident_mib();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    stream
        .write_all(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        answer.push(stream.read_u8().await.unwrap());
    }
    assert!(answer.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&answer));
    // A masked Ping (zero key: the payload as is) of 125 bytes, a thousand at a time.
    let mut ping = vec![0x89, 0x80 | 125, 0, 0, 0, 0];
    ping.extend_from_slice(&[b'p'; 125]);
    let pings = ping.repeat(1000);
    let mut sent = 0;
    while sent < 64 << 20 {
        let write = tokio::time::timeout(Duration::from_secs(10), stream.write_all(&pings));
        match write.await {
            Ok(Ok(())) => sent += pings.len(),
            // The server closed the connection, or stopped reading it: either bounds it.
            _ => break,
        }
    }
    let grown = server.resident_mib().saturating_sub(before);
    assert!(grown < 32, "the server grew by {grown} MiB after {sent} bytes of Pings");
    ok("ping", within("ping", tcp.ping()).await);
}

/// A QUIC request whose body does not arrive within `limits.request_timeout_ms` (a large send
/// over a slow link, the SDK's 100 kB send window): the server dropped it without a word, so the
/// SDK waited out its own deadline, reported an unknown outcome and blocked the partition's
/// lane. It is now refused on its stream with 58 (not executed: the client may send it again),
/// and the refusal is logged naming the key to raise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_body_slower_than_the_request_timeout_is_refused_unexecuted_on_its_stream() {
    let certs = test_certificates();
    let server = quic_server_with(&certs, &[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "1000")]);
    let port = endpoints(&server.root_client().await).await.quic;
    let client = 0x510e_b0d1;
    let session = register_over_tcp(&server, client).await;
    let (_endpoint, quic) = quic_connect(port, &certs.ca_der).await;
    assert_eq!(status(&quic_exchange(&quic, &bind_frame(client, session, 1)).await), 0);

    let (mut send, mut recv) = within("open_bi", quic.open_bi()).await.unwrap();
    let body = vec![b'x'; 1000];
    let mut header = send_header_one_byte_short(client, body.len());
    (header.session, header.request) = (session, 2);
    send.write_all(&header.to_bytes()).await.unwrap();
    send.write_all(&body).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 20))
        .await
        .expect("an answer within the request timeout, not the client's deadline")
        .unwrap();
    assert_eq!(status(&reply), IggyError::TransientNotAccepted.as_code());
    assert!(
        server.log().contains("did not arrive within limits.request_timeout_ms"),
        "{}",
        server.log()
    );
}

/// A QUIC certificate whose key the official client's default QUIC mode cannot use (it skips
/// validation and offers only ECDSA P-256 SHA-256): every handshake failed, the client retried
/// for ever, and the server said nothing, neither at start nor per handshake. It warns at start
/// now, and logs the failed handshakes as the other TLS listeners do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_key_the_sdk_cannot_use_is_said_at_start_and_its_failed_handshakes_are_logged() {
    let certs = test_certificates_signed_with(&rcgen::PKCS_ECDSA_P384_SHA384);
    let server = quic_server(&certs);
    let port = endpoints(&server.root_client().await).await.quic;
    assert!(server.log().contains("does not sign with ECDSA P-256 SHA-256"), "{}", server.log());
    let url = format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
    let client = IggyClient::from_connection_string(&url).expect("quic connection string");
    let connected = tokio::time::timeout(Duration::from_secs(3), client.connect()).await;
    assert!(!matches!(connected, Ok(Ok(()))), "the SDK cannot handshake with a P-384 key");
    let logged = || server.log().contains("over quic failed");
    for _ in 0..50 {
        if logged() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(logged(), "{}", server.log());
}

/// WebSocket limits below the frame limit: a request between the two closed its connection
/// unanswered, which the official client reports as an unknown outcome after its deadline
/// (TCP and QUIC refuse it with 4022), and the server said nothing of it at start. It warns now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_limits_below_the_frame_limit_are_warned_about_at_start() {
    let server = TestServer::start_with_env(&[
        WEBSOCKET_ON[0],
        WEBSOCKET_ON[1],
        ("IGGY_WEBSOCKET_MAX_MESSAGE_SIZE", "1048576"),
        ("IGGY_WEBSOCKET_MAX_FRAME_SIZE", "1048576"),
    ]);
    let log = server.log();
    assert!(
        log.contains("websocket.max_message_size (1048576 bytes) is below limits.max_frame_size"),
        "{log}"
    );
}
