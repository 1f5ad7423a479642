//! Client-side encryption, as the official SDK does it (`with_encryptor`): the client encrypts
//! each message's payload and user headers before sending them, each as one opaque blob, and
//! decrypts them after a poll. The server stores both as they arrive, over the binary transports
//! and HTTP alike, so an encrypting client reads back what it wrote and any other client reads
//! only ciphertext.

use crate::harness::*;
use bytes::Bytes;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

fn encryptor() -> Arc<EncryptorKind> {
    let key = [42u8; 32];
    Arc::new(EncryptorKind::Aes256Gcm(
        Aes256GcmEncryptor::new(&key).expect("a 32-byte key"),
    ))
}

fn headers() -> BTreeMap<HeaderKey, HeaderValue> {
    BTreeMap::from([
        (
            HeaderKey::from_str("trace").unwrap(),
            HeaderValue::from_str("abc").unwrap(),
        ),
        (HeaderKey::from_str("n").unwrap(), HeaderValue::from(7u64)),
    ])
}

/// Three messages: typed headers, none, and an empty header map (what the official CLI
/// attaches when given no `-H`). Over HTTP the one without headers is left out: the official
/// HTTP client reads a message's empty header list (`[]`, what its own type writes for none) as
/// present and empty, and its decryption of that fails the whole poll (CannotDecryptData, 72).
fn messages(over_http: bool) -> Vec<IggyMessage> {
    let message = |payload: &'static str, headers: Option<BTreeMap<HeaderKey, HeaderValue>>| {
        let builder = IggyMessage::builder().payload(Bytes::from_static(payload.as_bytes()));
        match headers {
            Some(headers) => builder.user_headers(headers).build(),
            None => builder.build(),
        }
        .expect("valid message")
    };
    let mut messages = vec![
        message("with headers", Some(headers())),
        message("without headers", None),
        message("empty header map", Some(BTreeMap::new())),
    ];
    if over_http {
        messages.remove(1);
    }
    messages
}

/// Sends [`messages`] through `encrypting` to a topic of its own, then checks what it and
/// `plain` (no encryptor) poll back.
async fn round_trip(what: &str, encrypting: &IggyClient, plain: &IggyClient) {
    create_stream_and_topic(plain, what, "t", 1).await;
    let (stream, topic) = (name(what), name("t"));
    let over_http = what == "http";
    let mut batch = messages(over_http);
    let partition = Partitioning::partition_id(0);
    let sent = within(
        "encrypted send",
        encrypting.send_messages(&stream, &topic, &partition, &mut batch),
    )
    .await;
    ok(&format!("{what}: encrypted send"), sent);

    let reader = consumer("c");
    let read = |client| {
        poll(
            client,
            &stream,
            &topic,
            0,
            &reader,
            PollingStrategy::offset(0),
            10,
            false,
        )
    };
    let decrypted = read(encrypting).await;
    let sent: Vec<_> = messages(over_http).into_iter().map(|m| m.payload).collect();
    let read_back: Vec<_> = decrypted
        .messages
        .iter()
        .map(|m| m.payload.clone())
        .collect();
    assert_eq!(read_back, sent, "{what}");
    let mapped = |message: &IggyMessage| message.user_headers_map().expect("decodable");
    assert_eq!(mapped(&decrypted.messages[0]), Some(headers()), "{what}");
    let last = decrypted.messages.last().expect("read back");
    assert!(mapped(last).unwrap_or_default().is_empty(), "{what}");
    if !over_http {
        assert_eq!(decrypted.messages[1].user_headers, None, "{what}");
    }

    let overhead = 28;
    let ciphertext = read(plain).await;
    assert_eq!(ciphertext.messages.len(), sent.len(), "{what}");
    for (stored, sent) in ciphertext.messages.iter().zip(messages(over_http)) {
        assert_ne!(stored.payload, sent.payload, "{what}: stored encrypted");
        assert_eq!(
            stored.payload.len(),
            sent.payload.len() + overhead,
            "{what}"
        );
        let headers = stored.user_headers.as_ref().map(|h| h.len());
        let expected = sent.user_headers.as_ref().map(|h| h.len() + overhead);
        assert_eq!(headers, expected, "{what}: the headers' blob as sent");
    }
    assert_eq!(
        mapped(&ciphertext.messages[0]),
        None,
        "{what}: opaque to others"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypting_client_reads_back_its_payloads_and_headers_over_tcp_and_http() {
    let (server, api) = TestServer::start_with_http(&[]);
    let plain = server.root_client().await;

    let connection = server.connection_string(ROOT_USER, ROOT_PASSWORD);
    let tcp = IggyClientBuilder::from_connection_string(&connection)
        .expect("valid connection string")
        .with_encryptor(encryptor())
        .build()
        .expect("tcp client");
    ok("connect", within("connect", tcp.connect()).await);
    round_trip("tcp", &tcp, &plain).await;

    let http = IggyClient::builder()
        .with_encryptor(encryptor())
        .with_http()
        .with_api_url(api.clone())
        .build()
        .expect("http client");
    let login = within("login", http.login_user(ROOT_USER, ROOT_PASSWORD)).await;
    ok("http login", login);
    round_trip("http", &http, &plain).await;
}

/// A stream given its own key (the CLI's `--stream-key-file`) asks for encryption at rest,
/// which this server does not do: refused with StreamEncryptionUnavailable (4106), the code the
/// SDK names for a server with no key to wrap it with, over TCP and HTTP; nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_its_own_key_is_refused_as_stream_encryption_unavailable() {
    const STREAM_ENCRYPTION_UNAVAILABLE: u32 = 4106;
    let (server, api) = TestServer::start_with_http(&[]);
    let tcp = server.root_client().await;
    let http = crate::http::http_client(&api).await;
    let options = || StreamCreateOptions {
        encryption_key: Some(StreamEncryptionKey::try_from([7u8; 32].as_slice()).unwrap()),
        raw: BTreeMap::new(),
    };
    let over_tcp = within("create", tcp.create_stream("keyed", &options())).await;
    expect_code("tcp", over_tcp, STREAM_ENCRYPTION_UNAVAILABLE);
    match within("create", http.create_stream("keyed", &options())).await {
        Err(IggyError::HttpResponseError(400, body)) => {
            assert!(body.contains(r#""id":4106"#), "http: {body}")
        }
        other => expect_code("http", other, STREAM_ENCRYPTION_UNAVAILABLE),
    }
    let streams = ok("get_streams", within("get", tcp.get_streams()).await);
    assert!(streams.is_empty(), "{streams:?}");
}
