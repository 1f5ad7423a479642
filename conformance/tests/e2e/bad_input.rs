//! Bad input over the binary transports: a request body that is not exactly its command's
//! declared request, or a message the official client never builds (its size, its frame), is
//! refused with a clear error before anything changes; the connection keeps serving and what
//! was acknowledged before reads back intact. User headers are the client's bytes: ones that map
//! to no typed headers (an encrypting client's blob) are stored as sent. Sent with the official
//! SDK's raw API (`send_raw_with_response`) and its own message type, whose `user_headers` bytes
//! it sends as they are.

use crate::harness::*;
use bytes::Bytes;
use iggy::prelude::*;
use iggy_binary_protocol::WireEncode;
use iggy_binary_protocol::WireIdentifier;
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::requests::streams::DeleteStreamRequest;
use iggy_binary_protocol::requests::system::GetClientRequest;
use iggy_common::BinaryTransport;
use std::collections::BTreeMap;
use std::str::FromStr;

const INVALID_COMMAND: u32 = 3;

/// A TCP client of the official SDK signed in as root, whose raw API sends any body.
async fn raw_client(server: &TestServer) -> TcpClient {
    let client =
        TcpClient::from_connection_string(&server.connection_string(ROOT_USER, ROOT_PASSWORD))
            .expect("valid connection string");
    ok("connect", within("connect", client.connect()).await);
    client
}

async fn raw(client: &TcpClient, code: u32, body: Vec<u8>) -> Result<Bytes, IggyError> {
    within(
        "raw request",
        client.send_raw_with_response(code, Bytes::from(body)),
    )
    .await
}

/// What the official encoder sends for `request`, and the same with one byte after it.
fn exact_and_one_more<T: WireEncode>(request: &T) -> (Vec<u8>, Vec<u8>) {
    let exact = request.to_bytes().to_vec();
    let mut longer = exact.clone();
    longer.push(0);
    (exact, longer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_longer_than_its_commands_request_is_refused_and_the_connection_serves_on() {
    let server = TestServer::start();
    let client = raw_client(&server).await;

    // The commands the SDK sends with no body (Ping, GetStats, GetClusterMetadata, GetMe,
    // GetClients, GetUsers, GetPersonalAccessTokens, GetStreams): any byte is refused, and the
    // same command with no body is served on the same connection right after.
    for code in [
        PING_CODE,
        GET_STATS_CODE,
        GET_CLUSTER_METADATA_CODE,
        GET_ME_CODE,
        GET_CLIENTS_CODE,
        GET_USERS_CODE,
        GET_PERSONAL_ACCESS_TOKENS_CODE,
        GET_STREAMS_CODE,
    ] {
        expect_code(
            &format!("command {code} with one byte"),
            raw(&client, code, vec![0]).await,
            INVALID_COMMAND,
        );
        expect_code(
            &format!("command {code} with 300 bytes"),
            raw(&client, code, vec![7; 300]).await,
            INVALID_COMMAND,
        );
        ok(
            &format!("command {code} with no body"),
            raw(&client, code, Vec::new()).await,
        );
    }

    // A fixed body (GetClient, a u32) and a variable one (DeleteStream, an identifier) with a
    // byte after them: refused, and the delete does not happen.
    let me = ok("get_me", within("get_me", client.get_me()).await);
    let (exact, longer) = exact_and_one_more(&GetClientRequest {
        client_id: me.client_id,
    });
    expect_code(
        "GetClient with one byte more",
        raw(&client, GET_CLIENT_CODE, longer).await,
        INVALID_COMMAND,
    );
    assert!(
        !ok("GetClient", raw(&client, GET_CLIENT_CODE, exact).await).is_empty(),
        "the client is found"
    );

    ok(
        "create_stream",
        within(
            "create",
            client.create_stream("kept", &StreamCreateOptions::default()),
        )
        .await,
    );
    let stream = ok(
        "get_stream",
        within("get", client.get_stream(&name("kept"))).await,
    )
    .expect("stream");
    let (exact, longer) = exact_and_one_more(&DeleteStreamRequest {
        stream_id: WireIdentifier::numeric(stream.id),
    });
    expect_code(
        "DeleteStream with one byte more",
        raw(&client, DELETE_STREAM_CODE, longer).await,
        INVALID_COMMAND,
    );
    assert!(
        ok(
            "get_stream",
            within("get", client.get_stream(&name("kept"))).await
        )
        .is_some(),
        "the stream is kept"
    );

    // Logout with a byte: refused, and the session stays signed in.
    expect_code(
        "Logout with one byte",
        raw(&client, LOGOUT_USER_CODE, vec![0]).await,
        INVALID_COMMAND,
    );
    ok(
        "get_stats after the refusals",
        within("get_stats", client.get_stats()).await,
    );
    ok(
        "DeleteStream as the SDK sends it",
        raw(&client, DELETE_STREAM_CODE, exact).await,
    );
    assert!(
        ok(
            "get_stream",
            within("get", client.get_stream(&name("kept"))).await
        )
        .is_none(),
        "deleted now"
    );
}

/// One field of a user-headers blob as the SDK writes it: kind, u32 length, bytes.
fn field(kind: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

/// User headers that map to no typed headers in the official client (`user_headers_map`).
fn unmapped_headers() -> [(&'static str, Vec<u8>); 11] {
    let key_field = field(2, b"k");
    let pair = [key_field.clone(), field(2, b"v")].concat();
    [
        ("a key cut short", vec![2, 5, 0, 0, 0, b'k']),
        (
            "a byte after a whole entry",
            [pair.clone(), vec![2]].concat(),
        ),
        ("a key without a value", key_field.clone()),
        (
            "a value cut short",
            [key_field.clone(), vec![2, 9, 0, 0, 0, b'v']].concat(),
        ),
        ("an empty key", [field(2, b""), field(2, b"v")].concat()),
        (
            "a 256-byte raw value",
            [key_field.clone(), field(1, &[1; 256])].concat(),
        ),
        (
            "a 2-byte uint64 value",
            [key_field.clone(), field(12, &[1, 2])].concat(),
        ),
        (
            "a 2-byte bool key",
            [field(3, &[1, 0]), field(2, b"v")].concat(),
        ),
        (
            "value kind 16",
            [key_field.clone(), field(16, b"v")].concat(),
        ),
        ("key kind 0", [field(0, b"k"), field(2, b"v")].concat()),
        ("an encrypted blob", vec![0xA5; 45]),
    ]
}

/// Everything partition 0 of `s`/`t` holds, read with the official client.
async fn stored(client: &IggyClient) -> PolledMessages {
    let first = PollingStrategy::first();
    poll(
        client,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        first,
        100,
        false,
    )
    .await
}

fn with_raw_headers(payload: &str, headers: Vec<u8>) -> IggyMessage {
    let mut message = msg(payload);
    message.header.user_headers_length = headers.len() as u32;
    message.user_headers = Some(Bytes::from(headers));
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_headers_that_map_to_no_typed_headers_are_stored_as_sent_and_read_back() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;

    // One message with a header of every kind, as the SDK's builder writes them, then the
    // blobs, each stored as it came.
    let mut headers: BTreeMap<HeaderKey, HeaderValue> = BTreeMap::new();
    let key = |text: &str| HeaderKey::from_str(text).unwrap();
    headers.insert(key("raw"), HeaderValue::try_from(&[0u8, 255][..]).unwrap());
    headers.insert(key("string"), HeaderValue::from_str("text").unwrap());
    headers.insert(key("bool"), HeaderValue::from(true));
    headers.insert(key("i8"), HeaderValue::from(-8i8));
    headers.insert(key("i16"), HeaderValue::from(-16i16));
    headers.insert(key("i32"), HeaderValue::from(-32i32));
    headers.insert(key("i64"), HeaderValue::from(-64i64));
    headers.insert(key("i128"), HeaderValue::from(-128i128));
    headers.insert(key("u8"), HeaderValue::from(8u8));
    headers.insert(key("u16"), HeaderValue::from(16u16));
    headers.insert(key("u32"), HeaderValue::from(32u32));
    headers.insert(key("u64"), HeaderValue::from(64u64));
    headers.insert(key("u128"), HeaderValue::from(128u128));
    headers.insert(key("f32"), HeaderValue::from(0.5f32));
    headers.insert(key("f64"), HeaderValue::from(0.25f64));
    let good = IggyMessage::builder()
        .payload(Bytes::from_static(b"good"))
        .user_headers(headers.clone())
        .build()
        .unwrap();
    send_to_partition(&client, &name("s"), &name("t"), 0, vec![good]).await;

    let unmapped = unmapped_headers();
    for (what, blob) in &unmapped {
        // Each rides behind a message without headers, as one batch.
        let batch = vec![msg("neighbour"), with_raw_headers(what, blob.clone())];
        send_to_partition(&client, &name("s"), &name("t"), 0, batch).await;
    }

    let polled = stored(&client).await;
    assert_eq!(polled.messages.len(), 1 + 2 * unmapped.len());
    let read = polled.messages[0]
        .user_headers_map()
        .expect("decodable headers")
        .expect("headers present");
    assert_eq!(read, headers, "every kind reads back");
    for (pair, (what, blob)) in polled.messages[1..].chunks(2).zip(&unmapped) {
        assert_eq!(&pair[0].payload[..], b"neighbour");
        assert_eq!(pair[0].user_headers, None, "{what}: the neighbour has none");
        assert_eq!(&pair[1].payload[..], what.as_bytes());
        let stored = pair[1].user_headers.as_deref();
        assert_eq!(stored, Some(&blob[..]), "{what}: the bytes as sent");
    }
}

/// Both refusals over one transport's official client: a ping with a byte, then a send whose
/// second message has an empty payload; then a well-formed send on the same connection.
async fn refusals_over<C: BinaryTransport + MessageClient + Sync>(what: &str, client: &C) {
    expect_code(
        &format!("{what}: ping with one byte"),
        raw_on(client, PING_CODE, vec![0]).await,
        INVALID_COMMAND,
    );
    ok(
        &format!("{what}: ping"),
        raw_on(client, PING_CODE, Vec::new()).await,
    );
    let empty = with_raw_payload(msg(what), Bytes::new());
    let sent = send_to_s_t(client, vec![msg("neighbour"), empty]).await;
    expect_code(
        &format!("{what}: an empty payload"),
        sent,
        EMPTY_MESSAGE_PAYLOAD,
    );
    let batch = vec![msg(what)];
    ok(&format!("{what}: send"), send_to_s_t(client, batch).await);
}

/// Sends `batch` to partition 0 of `s`/`t` through `client` (any transport): the SDK's answer.
async fn send_to_s_t<C: MessageClient + Sync>(
    client: &C,
    mut batch: Vec<IggyMessage>,
) -> Result<SendMessagesResponse, IggyError> {
    let partition = Partitioning::partition_id(0);
    within(
        "send",
        client.send_messages(&name("s"), &name("t"), &partition, &mut batch),
    )
    .await
}

async fn raw_on<C: BinaryTransport + Sync>(
    client: &C,
    code: u32,
    body: Vec<u8>,
) -> Result<Bytes, IggyError> {
    within(
        "raw request",
        client.send_raw_with_response(code, Bytes::from(body)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_and_websocket_refuse_the_same_bad_input_and_serve_on() {
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", "127.0.0.1:0"),
    ]);
    let tcp = server.root_client().await;
    create_stream_and_topic(&tcp, "s", "t", 1).await;
    let metadata = ok(
        "cluster metadata",
        within("metadata", tcp.get_cluster_metadata()).await,
    );
    let ports = metadata.nodes[0].endpoints.clone();
    let url = |scheme: &str, port: u16| {
        format!("iggy+{scheme}://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}")
    };

    let quic = QuicClient::from_connection_string(&url("quic", ports.quic))
        .expect("quic connection string");
    ok("quic connect", within("connect", quic.connect()).await);
    refusals_over("quic", &quic).await;
    let ws = WebSocketClient::from_connection_string(&url("ws", ports.websocket))
        .expect("ws connection string");
    ok("ws connect", within("connect", ws.connect()).await);
    refusals_over("ws", &ws).await;

    let polled = stored(&tcp).await;
    assert_eq!(
        payloads(&polled),
        ["quic", "ws"],
        "only the well-formed sends are stored"
    );
}

/// The HTTP API stores raw user headers as sent (the official HTTP client sends headers that map
/// to no typed ones as base64 text) and polls them back as such; a structured list it would not
/// map is refused with the code iggy_common's decoding names (in a 400's body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_stores_raw_user_headers_and_refuses_a_typed_list_it_would_not_map() {
    let (server, api) = TestServer::start_with_http(&[]);
    let http = crate::http::http_client(&api).await;
    create_stream_and_topic(&http, "s", "t", 1).await;
    let unmapped = unmapped_headers();
    for (what, blob) in &unmapped {
        let batch = vec![with_raw_headers(what, blob.clone())];
        ok(&format!("http: {what}"), send_to_s_t(&http, batch).await);
    }
    let polled = stored(&http).await;
    assert_eq!(polled.messages.len(), unmapped.len());
    for (message, (what, blob)) in polled.messages.iter().zip(&unmapped) {
        assert_eq!(&message.payload[..], what.as_bytes());
        let stored = message.user_headers.as_deref();
        assert_eq!(stored, Some(&blob[..]), "http: {what}: the bytes as sent");
    }
    // A structured list whose uint32 value is 2 bytes.
    let token = crate::http::raw_token(&api).await;
    let send = br#"{"partitioning":{"kind":"partition_id","value":"AAAAAA=="},"messages":[{"id":1,"payload":"bQ==","user_headers":[{"key":{"kind":"string","value":"aw=="},"value":{"kind":"uint32","value":"AQI="}}]}]}"#;
    let (status, body) = crate::http::raw(
        &api,
        "POST",
        "/streams/s/topics/t/messages",
        Some(&token),
        send,
    )
    .await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("4019") && body.contains("uint32 is 4 bytes, not 2"),
        "{body}"
    );
    // An empty payload, which the binary sends refuse too.
    let send = br#"{"partitioning":{"kind":"partition_id","value":"AAAAAA=="},"messages":[{"id":1,"payload":""}]}"#;
    let (status, body) = crate::http::raw(
        &api,
        "POST",
        "/streams/s/topics/t/messages",
        Some(&token),
        send,
    )
    .await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(&format!(r#""id":{EMPTY_MESSAGE_PAYLOAD}"#)),
        "{body}"
    );

    let tcp = server.root_client().await;
    let after = send_to_partition(&tcp, &name("s"), &name("t"), 0, vec![msg("after")]).await;
    let next = unmapped.len() as u64;
    assert_eq!(
        after.confirmations.first().map(|c| c.base_offset),
        Some(next),
        "nothing refused took an offset"
    );
}

/// A request over `limits.max_frame_size` (here a send of 1.2 MiB to a server that takes 1 MiB
/// per request) is answered TooBigMessagePayload (4022) over TCP and QUIC, and the same
/// connection serves the next send: the server reads past the body instead of evicting the
/// client, whose SDK could then not tell whether the send was stored. Nothing of it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_frame_limit_is_refused_and_its_connection_serves_on() {
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_MAX_FRAME_SIZE", "1048576")]);
    let tcp = server.root_client().await;
    create_stream_and_topic(&tcp, "s", "t", 1).await;
    let raw = raw_client(&server).await;
    oversized_send_over("tcp", &raw).await;
    let metadata = ok(
        "cluster metadata",
        within("metadata", tcp.get_cluster_metadata()).await,
    );
    let port = metadata.nodes[0].endpoints.quic;
    let url = format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{port}");
    let quic = QuicClient::from_connection_string(&url).expect("quic connection string");
    ok("quic connect", within("connect", quic.connect()).await);
    oversized_send_over("quic", &quic).await;
    let polled = poll(
        &tcp,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::offset(0),
        10,
        false,
    )
    .await;
    assert_eq!(
        payloads(&polled),
        ["after tcp", "after quic"],
        "only the sends that fit"
    );
}

async fn oversized_send_over<C: MessageClient + SystemClient + Sync>(what: &str, client: &C) {
    let before = ok("me", within("me", client.get_me()).await).client_id;
    let batch: Vec<IggyMessage> = (0..3).map(|_| msg(vec![7u8; 400 * 1024])).collect();
    let sent = send_to_s_t(client, batch).await;
    expect_code(&format!("{what}: a send over the frame limit"), sent, 4022);
    let batch = vec![msg(format!("after {what}"))];
    let sent = send_to_s_t(client, batch).await;
    ok(&format!("{what}: the next send"), sent);
    let after = ok("me", within("me", client.get_me()).await).client_id;
    assert_eq!(before, after, "{what}: the same connection serves on");
}

const TOO_BIG_USER_HEADERS: u32 = 4017;
const TOO_BIG_MESSAGE_PAYLOAD: u32 = 4022;
const EMPTY_MESSAGE_PAYLOAD: u32 = 4024;

/// `message` with `payload` in place of its own, as a client that skips the SDK's builder
/// (which refuses an empty payload and one over `MAX_PAYLOAD_SIZE`) sends it.
fn with_raw_payload(mut message: IggyMessage, payload: Bytes) -> IggyMessage {
    message.header.payload_length = payload.len() as u32;
    message.payload = payload;
    message
}

/// Readable user headers of more than `MAX_USER_HEADERS_SIZE` bytes, even encrypted: string keys
/// of 10 bytes, raw values of 255, 275 bytes a pair.
fn headers_over_the_sdks_limit() -> Vec<u8> {
    let pairs = (MAX_USER_HEADERS_SIZE as usize + encryption_overhead()) / 275 + 1;
    let mut headers = Vec::new();
    for i in 0..pairs {
        headers.extend(field(2, format!("key{i:07}").as_bytes()));
        headers.extend(field(1, &[7u8; 255]));
    }
    assert!(headers.len() > MAX_USER_HEADERS_SIZE as usize + encryption_overhead());
    headers
}

/// What the official client's encryptor adds to what it encrypts (nonce and tag).
fn encryption_overhead() -> usize {
    let encryptor = EncryptorKind::Aes256Gcm(Aes256GcmEncryptor::new(&[7; 32]).expect("a key"));
    encryptor.encrypt(&[]).expect("encrypts").len()
}

/// Messages the official client never sends are refused by the server with the codes
/// iggy_common names for them: an empty payload, a payload over `MAX_PAYLOAD_SIZE` (64 MB, still
/// inside the 64 MiB frame limit) once encrypted and user headers over `MAX_USER_HEADERS_SIZE`
/// once encrypted. Nothing refused takes an offset and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_sdks_builder_would_refuse_for_its_size_is_refused_with_the_sdks_code() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg("first")]).await;
    let largest_payload = MAX_PAYLOAD_SIZE as usize + encryption_overhead();

    let refused = [
        (
            "an empty payload",
            with_raw_payload(msg("x"), Bytes::new()),
            EMPTY_MESSAGE_PAYLOAD,
        ),
        (
            "a payload one byte over the limit, encrypted",
            with_raw_payload(msg("x"), Bytes::from(vec![b'p'; largest_payload + 1])),
            TOO_BIG_MESSAGE_PAYLOAD,
        ),
        (
            "user headers over the limit",
            with_raw_headers("big headers", headers_over_the_sdks_limit()),
            TOO_BIG_USER_HEADERS,
        ),
    ];
    for (what, message, code) in refused {
        let batch = vec![msg("well-formed neighbour"), message];
        let sent = send_to_s_t(&client, batch).await;
        expect_code(what, sent, code);
    }

    // The limits themselves are accepted.
    let at_the_limit = vec![
        with_raw_payload(msg("x"), Bytes::from(vec![b'p'; largest_payload])),
        msg("after"),
    ];
    let after = send_to_partition(&client, &name("s"), &name("t"), 0, at_the_limit).await;
    assert_eq!(
        after.confirmations.first().map(|c| c.base_offset),
        Some(1),
        "nothing refused took an offset"
    );
    let polled = poll(
        &client,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::offset(1),
        2,
        false,
    )
    .await;
    assert_eq!(polled.messages.len(), 2);
    assert_eq!(polled.messages[0].payload.len(), largest_payload);
    assert_eq!(&polled.messages[1].payload[..], b"after");
}

const INVALID_MESSAGE_PAYLOAD_LENGTH: u32 = 4025;

/// A SendMessages `body` with its batch's second message's frame header field at `at` set to
/// `value` and both checksums sealed again, as a client that fills the frame itself. (The SDK's
/// `calculate_batch_checksum` stops at a frame its decoder refuses, so the batch checksum is
/// summed here as the protocol defines it: six header fields, then each frame's checksum.)
fn second_frame_with(body: &mut [u8], at: usize, value: u64) {
    use iggy_generated::frames::{BatchHeader as Batch, MessageFrameHeader as Frame};
    use std::hash::Hasher;
    let metadata = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    let batch = &mut body[4 + metadata..];
    let frame_length = |frame: &[u8]| {
        let length = |at: usize| u32::from_le_bytes(frame[at..at + 4].try_into().unwrap());
        Frame::SIZE
            + length(Frame::USER_HEADERS_LENGTH_OFFSET) as usize
            + length(Frame::PAYLOAD_LENGTH_OFFSET) as usize
    };
    let second = Batch::SIZE + frame_length(&batch[Batch::SIZE..]);
    let end = second + frame_length(&batch[second..]);
    batch[second + at..second + at + 8].copy_from_slice(&value.to_le_bytes());
    let checksum = twox_hash::XxHash3_64::oneshot(&batch[second + 8..end]);
    batch[second..second + 8].copy_from_slice(&checksum.to_le_bytes());
    let mut hasher = twox_hash::XxHash3_64::new();
    for field in [
        Batch::PARTITION_ID_OFFSET,
        Batch::BASE_OFFSET_OFFSET,
        Batch::BASE_TIMESTAMP_OFFSET,
        Batch::ORIGIN_TIMESTAMP_OFFSET,
        Batch::BATCH_LENGTH_OFFSET,
    ] {
        hasher.write(&batch[field..field + 8]);
    }
    hasher.write(&batch[Batch::MESSAGE_COUNT_OFFSET..Batch::MESSAGE_COUNT_OFFSET + 4]);
    hasher.write(&batch[Batch::SIZE..Batch::SIZE + 8]);
    hasher.write(&batch[second..second + 8]);
    let at = Batch::BATCH_CHECKSUM_OFFSET;
    batch[at..at + 8].copy_from_slice(&hasher.finish().to_le_bytes());
}

/// A message frame the official client never builds is refused at the send, before it takes an
/// offset: reserved frame bytes that are not zero (the SDK's decoder refuses such a frame, so
/// once stored it would fail every poll of its partition, the messages before it included) and
/// an `offset_delta` other than the message's index (offsets would repeat or skip). With 4025,
/// the code the SDK's decoder gives such a frame; the connection serves on and a consumer reads
/// every message acknowledged, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_frame_the_sdk_never_builds_is_refused_before_it_can_poison_its_partition() {
    use crate::wiretap::WireTap;
    use iggy_generated::frames::{MessageFrameHeader, Operation};
    let server = TestServer::start();
    let tap = WireTap::start(server.port()).await;
    let client = IggyClient::from_connection_string(&format!(
        "iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}",
        tap.address()
    ))
    .expect("connection string");
    ok("connect", within("connect", client.connect()).await);
    create_stream_and_topic(&client, "s", "t", 1).await;
    ok("first", send_to_s_t(&client, vec![msg("first")]).await);

    let faults = [
        (
            "reserved frame bytes",
            MessageFrameHeader::RESERVED_OFFSET,
            5,
        ),
        (
            "a repeated offset delta",
            MessageFrameHeader::OFFSET_DELTA_OFFSET,
            0,
        ),
        (
            "a skipped offset delta",
            MessageFrameHeader::OFFSET_DELTA_OFFSET,
            7,
        ),
    ];
    for (what, at, value) in faults {
        tap.rewrite_next_request(Operation::SendMessages.to_repr(), move |body| {
            second_frame_with(body, at, value)
        });
        let sent = send_to_s_t(&client, vec![msg("neighbour"), msg(what)]).await;
        expect_code(what, sent, INVALID_MESSAGE_PAYLOAD_LENGTH);
    }
    ok("after", send_to_s_t(&client, vec![msg("after")]).await);
    let polled = poll(
        &client,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::first(),
        10,
        false,
    )
    .await;
    assert_eq!(payloads(&polled), ["first", "after"]);
    assert_eq!(offsets(&polled), [0, 1]);
}

/// A frame header announcing more than `limits.max_frame_size` and no body after it (or a body
/// of gigabytes): the server read past the body first, so such a client waited the whole
/// request timeout and was closed without an answer. It is answered at once now (4022), the
/// body then passed over as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_limit_is_answered_at_once_whether_or_not_its_body_follows() {
    use iggy_generated::frames::ReplyHeader;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000")]);
    for size in [u32::MAX, (64 << 20) + 1000] {
        let mut header = send_header_one_byte_short(0x0b16_f4a3, 0);
        header.size = size;
        let mut stream = tokio::net::TcpStream::connect(server.address()).await.unwrap();
        stream.write_all(&header.to_bytes()).await.unwrap();
        let mut head = [0u8; ReplyHeader::SIZE];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head));
        read.await
            .expect("an answer at once, not at the request timeout")
            .unwrap();
        let reply = ReplyHeader::decode_fixed(&head).unwrap();
        assert_eq!(reply.status, TOO_BIG_MESSAGE_PAYLOAD, "a {size}-byte frame");
    }
}
