//! Hostile and careless clients. While a well-behaved SDK client produces to and consumes from
//! its own stream, fuzz threads open raw TCP connections and send seeded mutations of valid
//! frames — bit flips in the header or the body, truncated frames, `size` above the configured
//! `limits.max_frame_size` or below the header, sizes that lie about the body, random operation
//! bytes, random command codes, random checksums, wrong command bytes, wrong client ids, pure
//! garbage, and frames of the maximum legal size — authenticated as a user whose permissions
//! cover only its own stream, or not at all. Meanwhile slow-loris connections trickle header
//! bytes and a thousand idle connections stay open. At the end:
//!
//! - the server is still running and answers the SDK;
//! - the good client saw no error at all, and reads back exactly what it sent, in order;
//! - the server log holds no panic;
//! - peak RSS (VmHWM) stays under the bound printed with the figures, and RSS sampled every 5 s
//!   plateaus instead of growing (the long form, `DURABILITY_FUZZ_SECS=120`, is the leak check).

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::primitives::polling_strategy::WirePollingStrategy;
use iggy_binary_protocol::requests::consumer_offsets::get_consumer_offset::GetConsumerOffsetRequest;
use iggy_binary_protocol::requests::consumer_offsets::store_consumer_offset::StoreConsumerOffsetRequest;
use iggy_binary_protocol::requests::messages::get_partition_route::GetPartitionRouteRequest;
use iggy_binary_protocol::requests::messages::poll_messages::PollMessagesRequest;
use iggy_binary_protocol::requests::streams::create_stream::CreateStreamRequest;
use iggy_binary_protocol::requests::streams::get_stream::GetStreamRequest;
use iggy_binary_protocol::requests::users::login_register::{BindSecret, LoginRegisterRequest};
use iggy_binary_protocol::{
    AckLevel, HEADER_SIZE, PartitionContext, RequestHeader, WireConsumer, WireEncode, WireIdentifier,
    WireName, WireOptions,
};
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MAX_FRAME: u32 = 1 << 20;
const IDLE_CONNECTIONS: usize = 1000;
const SLOW_LORIS: usize = 64;
const FUZZ_THREADS: u64 = 3;
/// Peak RSS the server (a debug build) may reach during the run. Seen: 140-475 MiB depending on
/// the seed (a plateau reached within 5 s, not growth); this bound is ~1.35x the highest.
/// Growth after warm-up is checked separately (a leak would show there).
const RSS_BOUND_KIB: u64 = 640 * 1024;
/// After the first 5 s sample, RSS may grow by at most this factor plus 64 MiB.
const RSS_GROWTH_FACTOR: f64 = 1.25;

const SIZE_AT: usize = std::mem::offset_of!(RequestHeader, size);
const COMMAND_AT: usize = std::mem::offset_of!(RequestHeader, command);
const CLIENT_AT: usize = std::mem::offset_of!(RequestHeader, client);
const OPERATION_AT: usize = std::mem::offset_of!(RequestHeader, operation);
const SESSION_AT: usize = std::mem::offset_of!(RequestHeader, session);
const RESERVED_AT: usize = std::mem::offset_of!(RequestHeader, reserved);

/// A valid request body and how to frame it.
struct Template {
    code: u32,
    body: Vec<u8>,
    /// Partition ops carry the partition context.
    partition: bool,
}

fn templates(stream: u32, topic: u32) -> Vec<Template> {
    let s = || WireIdentifier::numeric(stream);
    let t = || WireIdentifier::numeric(topic);
    let consumer = || WireConsumer::consumer(WireIdentifier::numeric(7));
    let mut send = bytes::BytesMut::new();
    iggy_binary_protocol::requests::messages::send_messages::SendMessagesEncoder::encode(
        &mut send,
        &s(),
        &t(),
        &iggy_binary_protocol::WirePartitioning::PartitionId(0),
        &[
            iggy_binary_protocol::requests::messages::send_messages::RawMessage {
                id: 1,
                origin_timestamp: 1,
                headers: None,
                payload: b"fuzz-payload-one",
            },
            iggy_binary_protocol::requests::messages::send_messages::RawMessage {
                id: 2,
                origin_timestamp: 2,
                headers: None,
                payload: b"fuzz-two",
            },
        ],
    )
    .unwrap();
    let login = LoginRegisterRequest {
        version_info: version_info(),
        bind_secret: BindSecret::new(Box::new([7; 32])),
        username: WireName::new("fuzz").unwrap(),
        password: "fuzz-secret".to_string().into(),
        client_context: None,
    };
    vec![
        Template { code: PING_CODE, body: vec![], partition: false },
        Template { code: GET_STREAMS_CODE, body: vec![], partition: false },
        Template { code: GET_ME_CODE, body: vec![], partition: false },
        Template { code: GET_STREAM_CODE, body: GetStreamRequest { stream_id: s() }.to_bytes().to_vec(), partition: false },
        Template {
            code: GET_PARTITION_ROUTE_CODE,
            body: GetPartitionRouteRequest { stream_id: s(), topic_id: t(), partition_id: 0 }.to_bytes().to_vec(),
            partition: false,
        },
        Template {
            code: POLL_MESSAGES_CODE,
            body: PollMessagesRequest {
                consumer: consumer(),
                stream_id: s(),
                topic_id: t(),
                partition_id: Some(0),
                strategy: WirePollingStrategy::offset(0),
                count: 5,
                auto_commit: false,
            }
            .to_bytes()
            .to_vec(),
            partition: true,
        },
        Template { code: SEND_MESSAGES_CODE, body: send.to_vec(), partition: true },
        Template {
            code: STORE_CONSUMER_OFFSET_CODE,
            body: StoreConsumerOffsetRequest {
                consumer: consumer(),
                stream_id: s(),
                topic_id: t(),
                partition_id: Some(0),
                offset: 0,
                ack: AckLevel::default(),
            }
            .to_bytes()
            .to_vec(),
            partition: true,
        },
        Template {
            code: GET_CONSUMER_OFFSET_CODE,
            body: GetConsumerOffsetRequest { consumer: consumer(), stream_id: s(), topic_id: t(), partition_id: Some(0) }
                .to_bytes()
                .to_vec(),
            partition: false,
        },
        Template {
            code: CREATE_STREAM_CODE,
            body: CreateStreamRequest { name: WireName::new("fz-made").unwrap(), options: WireOptions::from_slice(&[]).unwrap() }
                .to_bytes()
                .to_vec(),
            partition: false,
        },
        Template { code: LOGIN_REGISTER_CODE, body: login.to_bytes().to_vec(), partition: false },
    ]
}

#[derive(Default)]
struct FuzzFigures {
    connections: AtomicU64,
    valid_frames: AtomicU64,
    bad_inputs: AtomicU64,
    bytes_sent: AtomicU64,
    closed_by_server: AtomicU64,
    kinds: Mutex<BTreeMap<&'static str, u64>>,
}

/// One mutated frame; `None` for the kind name when the frame was left valid.
fn mutate(rng: &mut StdRng, mut frame: Vec<u8>) -> (Vec<u8>, &'static str, bool) {
    let body_len = frame.len() - HEADER_SIZE;
    let set_size = |frame: &mut Vec<u8>, size: u32| frame[SIZE_AT..SIZE_AT + 4].copy_from_slice(&size.to_le_bytes());
    let kind = match rng.random_range(0..100) {
        0..15 => "valid",
        15..30 => {
            for _ in 0..rng.random_range(1..=8) {
                let bit = rng.random_range(0..frame.len() * 8);
                frame[bit / 8] ^= 1 << (bit % 8);
            }
            "bit flips"
        }
        30..42 if body_len > 0 => {
            for _ in 0..rng.random_range(1..=6) {
                let bit = rng.random_range(HEADER_SIZE * 8..frame.len() * 8);
                frame[bit / 8] ^= 1 << (bit % 8);
            }
            "body bit flips"
        }
        42..48 => {
            let keep = rng.random_range(1..frame.len());
            frame.truncate(keep);
            "truncated frame"
        }
        48..54 => {
            set_size(&mut frame, rng.random_range(MAX_FRAME + 1..=u32::MAX));
            "size above max_frame_size"
        }
        54..58 => {
            set_size(&mut frame, rng.random_range(0..HEADER_SIZE as u32));
            "size below the header"
        }
        58..63 => {
            let lie = frame.len() as u32 + rng.random_range(1..4096);
            set_size(&mut frame, lie);
            "size longer than the frame"
        }
        63..67 if body_len > 0 => {
            let lie = frame.len() as u32 - rng.random_range(1..=body_len as u32);
            set_size(&mut frame, lie);
            "size shorter than the frame"
        }
        67..73 => {
            frame[OPERATION_AT] = rng.random();
            "random operation byte"
        }
        73..79 => {
            frame[OPERATION_AT] = iggy_binary_protocol::Operation::NonReplicated as u8;
            let code: u32 = if rng.random_bool(0.5) { rng.random_range(0..1000) } else { rng.random() };
            frame[RESERVED_AT..RESERVED_AT + 4].copy_from_slice(&code.to_le_bytes());
            "random command code"
        }
        79..83 => {
            for byte in &mut frame[0..32] {
                *byte = rng.random();
            }
            "random checksums"
        }
        83..86 => {
            frame[COMMAND_AT] = rng.random();
            "random command byte"
        }
        86..90 => {
            let n = rng.random_range(1..2048);
            let garbage = random_bytes(rng, n);
            return (garbage, "garbage bytes", true);
        }
        90..95 => {
            let field = if rng.random_bool(0.5) { CLIENT_AT } else { SESSION_AT };
            for byte in &mut frame[field..field + 8] {
                *byte = if rng.random_bool(0.3) { 0 } else { rng.random() };
            }
            "wrong client or session"
        }
        95..97 => {
            // A frame of the maximum legal size whose body is random.
            let mut big = frame[..HEADER_SIZE].to_vec();
            set_size(&mut big, MAX_FRAME);
            big.extend(random_bytes(rng, MAX_FRAME as usize - HEADER_SIZE));
            return (big, "maximum-size frame, random body", true);
        }
        _ => {
            let n = rng.random_range(1..64);
            let extra = random_bytes(rng, n);
            frame.extend(extra);
            "trailing bytes"
        }
    };
    let bad = kind != "valid";
    (frame, kind, bad)
}

/// Reads whatever the server sent without blocking. False when the server closed.
fn drain(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 16384];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => return true,
            Err(_) => return false,
        }
    }
}

struct Identity {
    client: u128,
    session: u64,
}

fn fuzz_thread(address: String, seed: u64, thread: u64, deadline: Instant, route: PartitionContext, templates: Arc<Vec<Template>>, figures: Arc<FuzzFigures>) {
    let mut rng = rng(seed, 1000 + thread);
    // A small pool of sessions, so the fuzzer does not grow the clients table without bound.
    let pool: Vec<u128> = (0..4).map(|i| (u128::from(thread) << 96) | (i + 1)).collect();
    let mut request = 1u64;
    while Instant::now() < deadline {
        figures.connections.fetch_add(1, Ordering::Relaxed);
        let identity = if rng.random_bool(0.7) {
            let client = pool[rng.random_range(0..pool.len())];
            match Raw::login(&address, "fuzz", "fuzz-secret", client) {
                Ok(raw) => Some((raw.stream, Identity { client, session: raw.session })),
                Err(_) => None,
            }
        } else {
            None
        };
        let (mut stream, identity) = match identity {
            Some((stream, identity)) => (stream, identity),
            None => match TcpStream::connect(&address) {
                Ok(stream) => (stream, Identity { client: rng.random::<u128>() | 1, session: 0 }),
                Err(_) => continue,
            },
        };
        stream.set_nonblocking(true).unwrap();
        for _ in 0..rng.random_range(1..=16) {
            let template = &templates[rng.random_range(0..templates.len())];
            request += 1;
            let mut header = RequestHeader::for_request(template.code, identity.client, request, identity.session, &template.body).unwrap();
            if template.partition {
                route.stamp(&mut header);
            }
            let mut frame = header_bytes(&header).to_vec();
            frame.extend_from_slice(&template.body);
            let (frame, kind, bad) = mutate(&mut rng, frame);
            *figures.kinds.lock().unwrap().entry(kind).or_default() += 1;
            if bad {
                figures.bad_inputs.fetch_add(1, Ordering::Relaxed);
            } else {
                figures.valid_frames.fetch_add(1, Ordering::Relaxed);
            }
            let written = write_all_nonblocking(&mut stream, &frame, deadline);
            figures.bytes_sent.fetch_add(frame.len() as u64, Ordering::Relaxed);
            if !written {
                figures.closed_by_server.fetch_add(1, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(0..3)));
            if !drain(&mut stream) {
                figures.closed_by_server.fetch_add(1, Ordering::Relaxed);
                break;
            }
            if kind == "truncated frame" {
                break;
            }
        }
    }
}

fn write_all_nonblocking(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> bool {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if !drain(stream) || Instant::now() > deadline + Duration::from_secs(5) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return false,
        }
    }
    true
}

/// Trickles the first bytes of a valid header, one byte per connection per round, and never
/// finishes it.
fn slow_loris(address: String, seed: u64, deadline: Instant, figures: Arc<FuzzFigures>) -> usize {
    let mut rng = rng(seed, 77);
    let header = header_bytes(&RequestHeader::for_request(PING_CODE, 5, 1, 0, &[]).unwrap());
    let mut conns: Vec<(TcpStream, usize)> = (0..SLOW_LORIS)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .map(|s| (s, 0))
        .collect();
    let opened = conns.len();
    while Instant::now() < deadline {
        for (stream, sent) in &mut conns {
            if *sent < HEADER_SIZE - 1 && rng.random_bool(0.5) && stream.write_all(&header[*sent..*sent + 1]).is_ok() {
                *sent += 1;
                figures.bytes_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    figures.bad_inputs.fetch_add(opened as u64, Ordering::Relaxed);
    opened
}

/// The good client: produce, then consume what it produced, until told to stop.
async fn good_client(server_address: String, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let client = IggyClient::from_connection_string(&format!("iggy://iggy:iggy@{server_address}")).unwrap();
    within("connect good client", client.connect()).await.expect("good client connects");
    let s = Identifier::named("good").unwrap();
    let t = Identifier::named("t").unwrap();
    let consumer = Consumer::new(Identifier::named("good-reader").unwrap());
    let mut sent = 0u64;
    let mut consumed = 0u64;
    let mut errors = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let mut batch: Vec<IggyMessage> = (0..3)
            .map(|i| IggyMessage::builder().payload(bytes::Bytes::from(format!("good-{}", sent + i))).build().unwrap())
            .collect();
        match tokio::time::timeout(Duration::from_secs(15), client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut batch)).await {
            Ok(Ok(_)) => sent += 3,
            Ok(Err(e)) => errors.push(format!("send: {e}")),
            Err(_) => errors.push("send: timed out".into()),
        }
        match tokio::time::timeout(
            Duration::from_secs(15),
            client.poll_messages(&s, &t, Some(0), &consumer, &PollingStrategy::offset(consumed), 100, false),
        )
        .await
        {
            Ok(Ok(polled)) => {
                for m in &polled.messages {
                    let expected = format!("good-{consumed}");
                    if m.header.offset != consumed || m.payload[..] != *expected.as_bytes() {
                        errors.push(format!("consumed offset {} = {:?}, expected {expected}", m.header.offset, String::from_utf8_lossy(&m.payload)));
                    }
                    consumed += 1;
                }
            }
            Ok(Err(e)) => errors.push(format!("poll: {e}")),
            Err(_) => errors.push("poll: timed out".into()),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Everything sent reads back, in order: polled on from where each reply ended (a reply
    // holds at most limits.max_frame_size bytes of messages, however many are asked for).
    let mut payloads: Vec<String> = Vec::new();
    loop {
        let from = PollingStrategy::offset(payloads.len() as u64);
        let polled = within("final poll", client.poll_messages(&s, &t, Some(0), &consumer, &from, 1_000_000, false))
            .await
            .expect("final poll");
        if polled.messages.is_empty() {
            break;
        }
        payloads.extend(polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()));
    }
    let expected: Vec<String> = (0..sent).map(|i| format!("good-{i}")).collect();
    if payloads != expected {
        errors.push(format!("final read: {} messages, {} sent; first difference at {:?}", payloads.len(), sent,
            payloads.iter().zip(&expected).position(|(a, b)| a != b)));
    }
    (sent, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_do_not_disturb_a_good_client_or_the_server() {
    let (seed, _guard) = seed("hostile_clients_do_not_disturb_a_good_client_or_the_server");
    let seconds = knob("DURABILITY_FUZZ_SECS", 20);
    let max_frame = MAX_FRAME.to_string();
    let mut server = Server::new(&[("IGGY_LIMITS_MAX_FRAME_SIZE", &max_frame)]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let address = server.address();
    let (fz_stream, fz_topic) = {
        let root = server.client().await;
        within("good stream", root.create_stream("good", &StreamCreateOptions::default())).await.unwrap();
        within("good topic", root.create_topic(&Identifier::named("good").unwrap(), "t", &TopicCreateOptions { partitions_count: Some(1), ..Default::default() }))
            .await
            .unwrap();
        let s = within("fz stream", root.create_stream("fz", &StreamCreateOptions::default())).await.unwrap();
        let t = within("fz topic", root.create_topic(&Identifier::named("fz").unwrap(), "t", &TopicCreateOptions { partitions_count: Some(1), ..Default::default() }))
            .await
            .unwrap();
        let mut streams = BTreeMap::new();
        streams.insert(
            s.id as usize,
            StreamPermissions {
                manage_stream: true,
                read_stream: true,
                manage_topics: true,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
                topics: None,
            },
        );
        let permissions = Permissions { global: GlobalPermissions::default(), streams: Some(streams) };
        within("fuzz user", root.create_user("fuzz", "fuzz-secret", UserStatus::Active, Some(permissions), &UserCreateOptions::default()))
            .await
            .expect("create the fuzz user");
        (s.id, t.id)
    };
    let route = tokio::task::block_in_place(|| {
        let mut raw = Raw::login(&address, "fuzz", "fuzz-secret", 0xF0F0).expect("fuzz login");
        raw.route(fz_stream, fz_topic, 0).context()
    });
    let (baseline_hwm, _) = server.memory_kib().expect("server memory");

    let stop = Arc::new(AtomicBool::new(false));
    let good = tokio::spawn(good_client(address.clone(), stop.clone()));
    let figures = Arc::new(FuzzFigures::default());
    // Both ends of every idle connection live on this machine: keep well inside the fd limit.
    let files = raise_open_files_limit();
    let idle_target = IDLE_CONNECTIONS.min((files as usize).saturating_sub(512) / 2);
    if idle_target < IDLE_CONNECTIONS {
        eprintln!("open-file limit {files}: {idle_target} idle connections instead of {IDLE_CONNECTIONS}");
    }
    let idle: Vec<TcpStream> = tokio::task::block_in_place(|| {
        (0..idle_target).map(|_| TcpStream::connect(&address).expect("idle connection")).collect()
    });
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let templates = Arc::new(templates(fz_stream, fz_topic));
    let mut threads = Vec::new();
    for thread in 0..knob("DURABILITY_FUZZ_THREADS", FUZZ_THREADS) {
        let (address, templates, figures) = (address.clone(), templates.clone(), figures.clone());
        threads.push(std::thread::spawn(move || fuzz_thread(address, seed, thread, deadline, route, templates, figures)));
    }
    let loris = {
        let (address, figures) = (address.clone(), figures.clone());
        std::thread::spawn(move || slow_loris(address, seed, deadline, figures))
    };
    let mut peak = baseline_hwm;
    // RSS every 5 s: a leak shows as steady growth, a bounded peak as a plateau.
    let mut samples = Vec::new();
    let fuzz_started = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(server.alive(), "the server died under the fuzz (seed {seed}):\n{}", server.log_tail(40));
        if let Some((hwm, rss)) = server.memory_kib() {
            peak = peak.max(hwm);
            if fuzz_started.elapsed().as_secs() >= 5 * (samples.len() as u64 + 1) {
                samples.push(rss / 1024);
            }
        }
    }
    for thread in threads {
        thread.join().expect("fuzz thread");
    }
    let loris_count = loris.join().expect("slow-loris thread");
    stop.store(true, Ordering::SeqCst);
    let (good_sent, good_errors) = good.await.expect("good client task");
    let idle_count = idle.len();
    drop(idle);

    assert!(server.alive(), "the server died under the fuzz:\n{}", server.log_tail(40));
    let root = server.client().await;
    within("ping after the fuzz", root.ping()).await.expect("the server answers after the fuzz");
    let (hwm, rss) = server.memory_kib().expect("server memory");
    peak = peak.max(hwm);
    let kinds = figures.kinds.lock().unwrap().clone();
    eprintln!(
        "hostile figures: seed {seed}, {seconds}s, fuzz connections {}, bad inputs {} (plus {loris_count} slow-loris, \
         {idle_count} idle connections), valid frames {}, bytes sent {}, server closures observed {}, \
         good client sent {good_sent} messages with {} errors, peak RSS {} KiB (baseline {baseline_hwm} KiB, now {rss} KiB, bound {} KiB)\n  RSS MiB every 5 s: {samples:?}\n  kinds: {kinds:?}",
        figures.connections.load(Ordering::Relaxed),
        figures.bad_inputs.load(Ordering::Relaxed),
        figures.valid_frames.load(Ordering::Relaxed),
        figures.bytes_sent.load(Ordering::Relaxed),
        figures.closed_by_server.load(Ordering::Relaxed),
        good_errors.len(),
        peak,
        RSS_BOUND_KIB,
    );
    assert!(good_errors.is_empty(), "the good client saw errors it did not cause: {good_errors:?}");
    assert!(good_sent > 0, "the good client made no progress");
    let log = server.log();
    assert!(!log.contains("panicked"), "the server log holds a panic:\n{}", server.log_tail(40));
    assert!(peak <= RSS_BOUND_KIB, "peak RSS {peak} KiB exceeds the bound {RSS_BOUND_KIB} KiB");
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        assert!(
            (*last as f64) <= (*first as f64) * RSS_GROWTH_FACTOR + 64.0,
            "RSS keeps growing under a steady fuzz (MiB every 5 s: {samples:?}): a leak"
        );
    }
}

/// `limits.max_connections` (from configuration): a connection beyond it gets the status
/// CannotEstablishConnection for its first request and is closed; an SDK client started while
/// every slot is taken does not get in; the slots come back as soon as the holders disconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_are_refused_promptly_and_the_slots_come_back() {
    const LIMIT: usize = 8;
    let limit = LIMIT.to_string();
    let mut server = Server::new(&[("IGGY_LIMITS_MAX_CONNECTIONS", &limit)]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let address = server.address();
    let ping = header_bytes(&RequestHeader::for_request(PING_CODE, 9, 0, 0, &[]).unwrap());
    let answered = |stream: &mut TcpStream| -> bool {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(&ping).is_ok() && matches!(read_reply(stream), Ok(Reply::Reply { .. }))
    };
    // The readiness probe's connection may still hold a slot for a moment.
    let holders: Vec<TcpStream> = tokio::task::block_in_place(|| {
        let mut holders = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while holders.len() < LIMIT {
            let mut stream = TcpStream::connect(&address).unwrap();
            if answered(&mut stream) {
                holders.push(stream);
            } else {
                assert!(Instant::now() < deadline, "could not fill {LIMIT} connection slots");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        holders
    });
    // The connection beyond the limit gets a clear refusal for its first request, then the
    // close: the status CannotEstablishConnection (or an eviction), never a served reply.
    let (over, after) = tokio::task::block_in_place(|| {
        let mut stream = TcpStream::connect(&address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = stream.write_all(&ping);
        let over = read_reply(&mut stream);
        let mut byte = [0u8; 1];
        (over, stream.read(&mut byte))
    });
    let refusal = iggy_common::IggyError::CannotEstablishConnection.as_code();
    match &over {
        Ok(Reply::Reply { header, .. }) => assert_eq!(
            header.status, refusal,
            "connection {} beyond the limit: expected status {refusal} (CannotEstablishConnection)",
            LIMIT + 1
        ),
        Ok(Reply::Eviction { .. }) => {}
        Err(error) => panic!("connection {} beyond the limit: no refusal frame before the close ({error})", LIMIT + 1),
    }
    assert!(
        matches!(after, Ok(0)) || matches!(&after, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "the refused connection must be closed after the refusal, got {after:?}"
    );
    // An SDK client started while every slot is taken does not get in.
    let waiting = {
        let connection_string = server.connection_string();
        tokio::spawn(async move {
            let client = IggyClient::from_connection_string(&connection_string).unwrap();
            let started = Instant::now();
            let result = client.connect().await.map_err(|e| e.to_string());
            (client, started.elapsed(), result)
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    if waiting.is_finished() {
        let (_, after, result) = waiting.await.unwrap();
        assert!(result.is_err(), "an SDK client beyond the limit connected (after {after:?})");
        eprintln!("SDK client beyond the limit: {result:?} after {after:?}");
    } else {
        eprintln!("SDK client beyond the limit: still retrying after 3 s (the server closes without a frame)");
        waiting.abort();
    }
    drop(holders);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = server.client().await;
    within("ping after the holders left", client.ping()).await.expect("a slot is free again");
    assert!(server.alive());
}

/// The issue: "refusals at capacity are clear errors". An SDK client that arrives when every
/// connection slot is taken should fail promptly with an error it can show, not retry a silent
/// close until its own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_client_beyond_max_connections_gets_a_clear_error_promptly() {
    let mut server = Server::new(&[("IGGY_LIMITS_MAX_CONNECTIONS", "4")]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut holders = Vec::new();
    for _ in 0..4 {
        holders.push(server.client().await);
    }
    let client = IggyClient::from_connection_string(&server.connection_string()).unwrap();
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), client.connect()).await;
    match result {
        Ok(Err(error)) => eprintln!("refused after {:?}: {error} (code {})", started.elapsed(), error.as_code()),
        Ok(Ok(())) => panic!("a fifth client connected with max_connections = 4"),
        Err(_) => panic!("an SDK client beyond max_connections got no error within 10 s"),
    }
}

/// `limits.idle_timeout_secs` and `limits.request_timeout_ms` (from configuration): a connection
/// that sends nothing is closed after the idle timeout; one that stops in the middle of a header,
/// or whose header arrived but whose body does not, after the request timeout; a bound SDK
/// client that keeps working is not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_idle_connections_are_closed_by_the_configured_timeouts() {
    let mut server = Server::new(&[("IGGY_LIMITS_IDLE_TIMEOUT_SECS", "2"), ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "500")]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let address = server.address();
    let client = server.client().await;
    let closed_after = |mut stream: TcpStream| {
        move || -> Option<Duration> {
            let started = Instant::now();
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buffer = [0u8; 512];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) => return Some(started.elapsed()),
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(started.elapsed()),
                    Err(_) => return None,
                }
            }
        }
    };
    let header = |size: u32| {
        let mut header = RequestHeader::for_request(PING_CODE, 11, 0, 0, &[]).unwrap();
        header.size = size;
        header_bytes(&header)
    };
    // Silent, half a header, a whole header whose body never comes.
    let silent = TcpStream::connect(&address).unwrap();
    let mut half = TcpStream::connect(&address).unwrap();
    half.write_all(&header(256)[..100]).unwrap();
    let mut bodiless = TcpStream::connect(&address).unwrap();
    bodiless.write_all(&header(256 + 100)).unwrap();
    let waits: Vec<_> = [silent, half, bodiless]
        .into_iter()
        .map(|stream| std::thread::spawn(closed_after(stream)))
        .collect();
    // The SDK client keeps working meanwhile (it pings when idle; here it polls).
    for _ in 0..6 {
        within("ping", client.ping()).await.expect("a working client is not closed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let [silent, half, bodiless]: [Option<Duration>; 3] =
        waits.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>().try_into().unwrap();
    let silent = silent.expect("a silent connection is closed by the idle timeout (2 s)");
    let half = half.expect("a connection stalled mid-header is closed by the request timeout (500 ms)");
    let bodiless = bodiless.expect("a frame whose body never comes is closed by the request timeout (500 ms)");
    eprintln!("closed after: silent {silent:?}, half header {half:?}, missing body {bodiless:?}");
    assert!(silent >= Duration::from_millis(1500) && silent < Duration::from_secs(6), "silent: {silent:?}");
    // The rest of a begun header is due within the request timeout, as a body is.
    assert!(half >= Duration::from_millis(400) && half < Duration::from_millis(1900), "half header: {half:?}, the request timeout is 500 ms");
    assert!(bodiless < Duration::from_millis(1900), "missing body: closed after {bodiless:?}, the request timeout is 500 ms");
    within("ping", client.ping()).await.expect("the working client survived");
}
