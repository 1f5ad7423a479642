//! Committed limits: a group's client table capacity is fixed by its first committed op; a
//! configuration changed later is logged and does not resize the group.

use crate::harness::*;
use iggy::prelude::*;
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_smaller_clients_table_max_keeps_the_committed_capacity_and_logs_it() {
    let mut server = TestServer::start();
    // The metadata group committed the default (4096) with its first op at the first start.
    std::fs::write(
        server.dir().join("config.toml"),
        "[limits]\nclients_table_max = 2\n",
    )
    .unwrap();
    tokio::task::block_in_place(|| server.restart());

    let log = server.log();
    let restart = log
        .rsplit("===== e2e harness: start")
        .next()
        .unwrap_or_default();
    assert!(
        restart.contains("limits.clients_table_max is 2 in the configuration")
            && restart.contains("committed 4096"),
        "the mismatch is logged at the restart:\n{restart}"
    );

    // Four sessions at once: a table of 2 would push the first two out.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.root_client().await);
    }
    for (index, client) in clients.iter().enumerate() {
        ok(
            &format!("session {index} still works"),
            within("streams", client.get_streams()).await,
        );
    }
    assert!(
        !server.log().contains("evicted from the full client table"),
        "no session was evicted:\n{}",
        server.log()
    );
}

/// Waits up to `limit` for `fut`; `None` when it has not finished by then.
async fn finished_within<F: std::future::Future>(
    limit: std::time::Duration,
    fut: F,
) -> Option<F::Output> {
    tokio::time::timeout(limit, fut).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_session_table_refuses_logins_until_a_logout_is_retired_in_order() {
    let server = TestServer::start_with_env(&[
        ("IGGY_LIMITS_CLIENTS_TABLE_MAX", "2"),
        ("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "100"),
    ]);
    let first = server.root_client().await;
    let second = server.root_client().await;

    // A third login finds every slot held by a live session: refused (the SDK re-sends the
    // refusal, TransientNotAccepted, until its deadline) and nobody is evicted.
    let third =
        IggyClient::from_connection_string(&server.connection_string(ROOT_USER, ROOT_PASSWORD))
            .expect("valid connection string");
    let mut login = Box::pin(third.connect());
    assert!(
        finished_within(std::time::Duration::from_secs(2), &mut login)
            .await
            .is_none(),
        "a third session was admitted into a table of two"
    );
    for (what, client) in [("first", &first), ("second", &second)] {
        ok(
            &format!("{what} session still works"),
            within("streams", client.get_streams()).await,
        );
    }

    // The first logs out: the next retirement passes release its slot, and the waiting login
    // gets it.
    ok("logout", within("logout", first.logout_user()).await);
    let connected = finished_within(std::time::Duration::from_secs(20), login).await;
    assert!(
        matches!(connected, Some(Ok(()))),
        "the login waiting for a slot got the released one: {connected:?}\n{}",
        server.log()
    );
    ok(
        "third session works",
        within("streams", third.get_streams()).await,
    );
    assert!(
        server
            .log()
            .contains("released the slots of 1 ended sessions"),
        "{}",
        server.log()
    );
}

/// A user that logs in and never out (any permission, any transport) filled the session table
/// and locked root out of every transport until its sessions' leases ended. The table's last
/// slots (1 of 8 here) are root's: the user's next login is refused with a warning that says
/// so, root still signs in, and deactivating the user ends its sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_filling_the_session_table_leaves_root_a_slot_to_sign_in_and_end_its_sessions() {
    let server = TestServer::start_with_env(&[
        ("IGGY_LIMITS_CLIENTS_TABLE_MAX", "8"),
        ("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "100"),
    ]);
    let root = server.root_client().await;
    let options = UserCreateOptions::default();
    let created = root.create_user("filler", "secret1", UserStatus::Active, None, &options);
    ok("create user", within("create user", created).await);
    // The filler logs in until a login of its is refused: that one would take root's slot.
    let mut fillers = Vec::new();
    loop {
        assert!(fillers.len() < 8, "the filler took every slot");
        let filler = IggyClient::from_connection_string(&server.connection_string("filler", "secret1"))
            .expect("valid connection string");
        let mut login = Box::pin(filler.connect());
        match finished_within(std::time::Duration::from_secs(2), &mut login).await {
            Some(connected) => {
                ok("filler login", connected);
                drop(login);
                fillers.push(filler);
            }
            None => break,
        }
    }
    assert!(!fillers.is_empty());
    assert!(server.log().contains("slots are kept for root"), "{}", server.log());
    drop(root);
    let root = server.root_client().await;
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    let filler = name("filler");
    let deactivated = root.update_user(&filler, &deactivate);
    ok("deactivate the filler", within("update user", deactivated).await);
    let refused = within("streams", fillers[0].get_streams()).await;
    assert!(refused.is_err(), "a deactivated user's session ended: {refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_full_of_writers_refuses_a_new_one_until_an_ended_session_is_retired() {
    let server = TestServer::start_with_env(&[
        ("IGGY_LIMITS_DEDUP_CLIENTS_MAX", "1"),
        ("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "100"),
    ]);
    let first = server.root_client().await;
    create_stream_and_topic(&first, "writers", "events", 1).await;
    send_to_partition(
        &first,
        &name("writers"),
        &name("events"),
        0,
        msgs("first", 2),
    )
    .await;

    // The partition's one writer slot is the first session's: a second writer is refused
    // (and re-sends) while the first is live; its retry protection is kept.
    let second = server.root_client().await;
    let mut messages = msgs("second", 3);
    let (stream, topic, partitioning) = (
        name("writers"),
        name("events"),
        Partitioning::partition_id(0),
    );
    let mut send = Box::pin(second.send_messages(&stream, &topic, &partitioning, &mut messages));
    assert!(
        finished_within(std::time::Duration::from_secs(2), &mut send)
            .await
            .is_none(),
        "a second writer got a slot in a partition of one"
    );
    // The client only sees a transient refusal it retries: the log says why.
    let log = server.log();
    assert!(
        log.contains("every writer slot of its partition is held")
            && log.contains("limits.dedup_clients_max"),
        "the refusal is logged naming the limit:\n{log}"
    );

    // The first session ends: the partition retires its slot, and the waiting send lands.
    ok("logout", within("logout", first.logout_user()).await);
    let sent = finished_within(std::time::Duration::from_secs(20), send).await;
    assert!(
        matches!(sent, Some(Ok(_))),
        "the waiting send landed: {sent:?}\n{}",
        server.log()
    );
    let polled = poll(
        &second,
        &name("writers"),
        &name("events"),
        0,
        &consumer("reader"),
        PollingStrategy::offset(0),
        10,
        false,
    )
    .await;
    assert_eq!(
        payloads(&polled),
        ["first-0", "first-1", "second-0", "second-1", "second-2"],
        "every acknowledged message once, in order"
    );
}

/// A partition that cannot open (its directory lost: it is refused, not served, until the
/// operator restores it) holds no writer slot anyone could reuse: the node's other partitions
/// and new logins go on, so ended sessions are still released and a full session table admits
/// a new login (the seed: healthy partitions and new logins continue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_cannot_open_does_not_hold_ended_sessions_slots() {
    let mut server = TestServer::start_with_env(&[
        ("IGGY_LIMITS_CLIENTS_TABLE_MAX", "2"),
        ("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "100"),
    ]);
    let first = server.root_client().await;
    create_stream_and_topic(&first, "lost", "events", 1).await;
    // Ended before the stop: its slot is the one the restarted node must release.
    ok("logout", within("logout", first.logout_user()).await);
    tokio::task::block_in_place(|| server.stop());
    let partition_dir = files_under(&server.data_dir())
        .into_iter()
        .find(|path| {
            path.ends_with("created.revision") && !path.to_string_lossy().contains("initialization")
        })
        .and_then(|record| record.parent().map(Path::to_path_buf))
        .expect("the partition's directory");
    std::fs::remove_dir_all(&partition_dir).unwrap();
    tokio::task::block_in_place(|| server.start_again());
    assert!(
        server.log().contains("cannot open"),
        "the partition is refused:\n{}",
        server.log()
    );

    // One slot is free; the second login needs the ended session's.
    let _first = server.root_client().await;
    let second =
        IggyClient::from_connection_string(&server.connection_string(ROOT_USER, ROOT_PASSWORD))
            .expect("valid connection string");
    let connected = finished_within(std::time::Duration::from_secs(20), second.connect()).await;
    assert!(
        matches!(connected, Some(Ok(()))),
        "the ended session's slot was released: {connected:?}\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_open_files_limit_are_refused_without_flooding_the_log_and_served_later()
{
    // The server needs a few dozen descriptors of its own, and keeps half for partitions: the
    // connections it admits are bounded so that the storm cannot take those (it admits 8 here),
    // and the others are refused.
    let server = TestServer::start_with_open_files_limit(&[], 96);
    let address = server.address();
    let storm = tokio::task::spawn_blocking(move || {
        // The kernel completes these handshakes in the listener's backlog whether or not the
        // server can accept them.
        let held: Vec<std::net::TcpStream> = (0..150)
            .map(|_| std::net::TcpStream::connect(&address).expect("connect"))
            .collect();
        // The listener meets the limit while these are held.
        std::thread::sleep(std::time::Duration::from_secs(1));
        held.len()
    });
    assert_eq!(storm.await.unwrap(), 150);

    // Once they are gone the server serves again.
    let client = server.root_client().await;
    ok("streams", within("streams", client.get_streams()).await);
    let log = server.log();
    let failed = log.matches("tcp accept failed").count()
        + log.matches("connection limit reached").count();
    assert!(
        (1..=5).contains(&failed),
        "the refusals are logged, throttled: {failed} lines\n{log}"
    );
    assert!(
        log.contains("the open files limit; raise ulimit -n"),
        "the warning says which limit ran out:\n{log}"
    );
    assert!(
        log.contains("at most 8 client connections"),
        "the start says how many connections the limit leaves room for:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_idle_timeout_and_others_are_served() {
    let server = TestServer::start_with_env(&[
        ("IGGY_LIMITS_IDLE_TIMEOUT_SECS", "2"),
        ("RUST_LOG", "info,iggy_server::transport=debug"),
    ]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let megabyte = |i: usize| msg(vec![b'a' + (i % 26) as u8; 1 << 20]);
    // Far above a socket's send buffer (Linux's tcp_wmem allows at most 4 MiB by default).
    for batch in 0..5 {
        let messages = (0..8).map(|i| megabyte(batch * 8 + i)).collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, messages).await;
    }

    // A reader through a proxy that stops reading: the 40 MiB reply backs up into the server.
    let tap = crate::wiretap::WireTap::start(server.port()).await;
    tap.shrink_upstream_receive_buffers(64 * 1024);
    let stalled = IggyClient::from_connection_string(&format!(
        "iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}",
        tap.address()
    ))
    .expect("connection string");
    ok(
        "connect through the tap",
        within("connect", stalled.connect()).await,
    );
    // The SDK learns the partition's route with its first poll; the stalled one needs none.
    poll(
        &stalled,
        &name("s"),
        &name("t"),
        0,
        &consumer("stalled"),
        PollingStrategy::offset(0),
        1,
        false,
    )
    .await;
    tap.stall_replies();
    let stalled_poll = tokio::spawn(async move {
        let consumer = consumer("stalled");
        let strategy = PollingStrategy::offset(0);
        let topic = (name("s"), name("t"));
        let _ = stalled
            .poll_messages(&topic.0, &topic.1, Some(0), &consumer, &strategy, 40, false)
            .await;
    });

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !server.log().contains("reply not taken") {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled connection is still open:\n{}",
            server.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stalled_poll.abort();
    tap.release_replies();
    let other = server.root_client().await;
    let polled = poll(
        &other,
        &name("s"),
        &name("t"),
        0,
        &consumer("other"),
        PollingStrategy::offset(0),
        40,
        false,
    )
    .await;
    assert_eq!(polled.messages.len(), 40, "another client is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_past_what_the_open_files_limit_allows_are_refused_and_the_node_serves_on() {
    let server = TestServer::start_with_open_files_limit(&[], 256);
    let client = server.root_client().await;
    ok(
        "create_stream",
        within(
            "create_stream",
            client.create_stream("s", &StreamCreateOptions::default()),
        )
        .await,
    );
    // 5 descriptors a partition (journal, active segment and index, 2 closed segments' logs
    // kept for reads): partitions may take 128 of the 256, and 200 of them would take 1000.
    expect_code(
        "a topic of 200 partitions",
        within(
            "create_topic",
            client.create_topic(&name("s"), "wide", &topic_options(200)),
        )
        .await,
        2015,
    );
    ok(
        "a topic of 10 partitions",
        within(
            "create_topic",
            client.create_topic(&name("s"), "narrow", &topic_options(10)),
        )
        .await,
    );
    expect_code(
        "190 more partitions",
        within(
            "create_partitions",
            client.create_partitions(&name("s"), &name("narrow"), 190),
        )
        .await,
        2015,
    );
    ok("streams", within("streams", client.get_streams()).await);
    assert!(
        server.log().contains("ulimit -n"),
        "the refusal names the limit:\n{}",
        server.log()
    );
}

/// A client refused at `limits.max_connections` that reconnects at once (the SDK's reconnect
/// loop, a connection storm) wrote a warning per attempt; one per 10 s now, with the count
/// held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_refused_at_max_connections_are_logged_at_most_once_per_interval() {
    use tokio::io::AsyncReadExt;
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_MAX_CONNECTIONS", "1")]);
    let mut streams = Vec::new();
    for _ in 0..30 {
        let mut stream = within("connect", tokio::net::TcpStream::connect(server.address())).await.expect("connect");
        // A refused connection is answered and closed; the one admitted stays open (held).
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_millis(200), stream.read_to_end(&mut reply)).await;
        streams.push(stream);
    }
    let log = server.log();
    let refusals = log.matches("refused, connection limit reached").count();
    assert_eq!(refusals, 1, "one warning for 29 or 30 refusals:\n{log}");
    assert!(log.contains("limits.max_connections"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_of_many_closed_segments_holds_few_descriptors_open() {
    let server = TestServer::start_with_env(&[("IGGY_SYSTEM_SEGMENT_SIZE", "1048576")]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    // A message of a whole segment size: each one closes its segment.
    let segment_of = |i: usize| msg(vec![b'a' + (i % 26) as u8; 1 << 20]);
    let open_files =
        async || ok("get_stats", within("get_stats", client.get_stats()).await).open_files_count;
    send_to_partition(&client, &name("s"), &name("t"), 0, vec![segment_of(0)]).await;
    let before = open_files().await;
    const SEGMENTS: usize = 30;
    for i in 1..SEGMENTS {
        send_to_partition(&client, &name("s"), &name("t"), 0, vec![segment_of(i)]).await;
    }
    // Every closed segment is read.
    for offset in 0..SEGMENTS as u64 {
        let polled = poll(
            &client,
            &name("s"),
            &name("t"),
            0,
            &consumer("c"),
            PollingStrategy::offset(offset),
            1,
            false,
        )
        .await;
        assert_eq!(offsets(&polled), vec![offset]);
        assert!(polled.messages[0].payload[..] == segment_of(offset as usize).payload[..]);
    }
    let topic = ok(
        "get_topic",
        within("get_topic", client.get_topic(&name("s"), &name("t"))).await,
    )
    .expect("the topic exists");
    assert!(topic.partitions[0].segments_count > SEGMENTS as u32);
    // One more closed segment's log kept open for reads, and room for a descriptor or two the
    // node opens for a moment (a writeback start's, a checkpoint's); each closed segment kept
    // two open before.
    let after = open_files().await;
    assert!(
        after <= before + 4,
        "{before} descriptors open after the first segment closed, {after} after {SEGMENTS}"
    );
}

/// The HTTP API's responses too are written within `limits.idle_timeout_secs`: a client that
/// asked for a large poll and stopped reading kept its connection and the whole response in the
/// server's memory for good (the binary transports' loop had the bound, the HTTP one did not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_that_stops_reading_is_closed_after_the_idle_timeout_and_others_are_served() {
    let (server, api) = TestServer::start_with_http(&[("IGGY_LIMITS_IDLE_TIMEOUT_SECS", "2"), ("RUST_LOG", "info,iggy_server::transport=debug")]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    // 40 MiB, a third more in base64: far above the sockets' buffers.
    for batch in 0..5 {
        let messages = (0..8).map(|i| msg(vec![b'a' + ((batch * 8 + i) % 26) as u8; 1 << 20])).collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, messages).await;
    }
    let token = crate::http::raw_token(&api).await;
    let address: std::net::SocketAddr = api.trim_start_matches("http://").parse().expect("address");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(64 * 1024).expect("receive buffer");
    let mut stalled = socket.connect(address).await.expect("connect");
    let query = "/streams/s/topics/t/messages?consumer_kind=consumer&consumer_id=1&partition_id=0&kind=offset&value=0&count=40";
    let head = format!("GET {query} HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {token}\r\n\r\n");
    use tokio::io::AsyncWriteExt;
    stalled.write_all(head.as_bytes()).await.expect("write the request");
    // Never read: the response backs up into the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !server.log().contains("response not taken") {
        assert!(std::time::Instant::now() < deadline, "the stalled HTTP connection is still open:\n{}", server.log());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(stalled);
    let (status, _) = crate::http::raw(&api, "GET", "/streams/s/topics/t/messages?consumer_kind=consumer&consumer_id=2&partition_id=0&kind=offset&value=0&count=1", Some(&token), b"").await;
    assert_eq!(status, 200, "another client is served");
}


/// A connection that has not signed in can only register, bind a session or ping, which take a
/// few hundred bytes; a larger request of it is read past and answered Unauthenticated, not
/// held. Before, the server read any body up to `limits.max_frame_size` (64 MiB) into memory
/// first, so a few anonymous connections that each sent a large body short of its last byte
/// held 32 MiB apiece until the request timeout (16 of them: over 500 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_connections_cannot_make_the_server_hold_large_request_bodies() {
    use iggy_generated::frames::ReplyHeader;
    use std::io::{Read, Write};
    const CONNECTIONS: usize = 16;
    const BODY: usize = 32 << 20;
    // The bodies stay held for the whole measurement.
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000")]);
    let before = server.resident_mib();
    let address = server.address();
    let held = tokio::task::spawn_blocking(move || {
        let body = vec![b'x'; BODY];
        (0..CONNECTIONS)
            .map(|i| {
                let header = send_header_one_byte_short(0xA11CE + i as u128, BODY);
                let mut stream = std::net::TcpStream::connect(&address).expect("connect");
                stream.set_write_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
                stream.write_all(&header.to_bytes()).expect("header");
                // Everything but the last byte.
                stream.write_all(&body).expect("body");
                stream
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Give the server the time to take in what was sent.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let during = server.resident_mib();
    eprintln!("resident {before} MiB before, {during} MiB during");
    let client = server.root_client().await;
    ok("ping", within("ping", client.ping()).await);
    assert!(
        during < before + 128,
        "{CONNECTIONS} anonymous connections with {} MiB bodies short of one byte: resident {before} MiB before, {during} MiB while they wait",
        BODY >> 20
    );

    // The last byte: the request is answered Unauthenticated and the connection serves on.
    let mut stream = held.into_iter().next().unwrap();
    let reply = tokio::task::spawn_blocking(move || {
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        stream.write_all(b"x").expect("last byte");
        let mut head = [0u8; ReplyHeader::SIZE];
        stream.read_exact(&mut head).expect("a reply");
        ReplyHeader::decode_fixed(&head).expect("reply header")
    })
    .await
    .unwrap();
    assert_eq!(reply.status, 40, "Unauthenticated");
}

/// A signed-in TCP connection of client `id` that sends a SendMessages header for `body` and
/// every byte of it but the last, then holds the connection open until the task is aborted (a
/// connection the server does not read waits in its write).
async fn stalled_send(server: &TestServer, id: u128, body: std::sync::Arc<Vec<u8>>) -> tokio::task::JoinHandle<()> {
    let (stream, _) = crate::transports::signed_in_over_tcp(server, id).await;
    let header = send_header_one_byte_short(id, body.len());
    hold_after_writing(stream, header.to_bytes().to_vec(), body)
}

/// Writes `head` then `body` to `stream` (as far as the server reads them) and holds the
/// connection open until the task is aborted.
fn hold_after_writing(mut stream: tokio::net::TcpStream, head: Vec<u8>, body: std::sync::Arc<Vec<u8>>) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        let _ = stream.write_all(&head).await;
        let _ = stream.write_all(&body).await;
        std::future::pending::<()>().await;
        drop(stream);
    })
}

/// Signed-in connections share one node-wide budget of request bodies
/// (`limits.max_request_bodies_size`): a body over 64 KiB is read only once its bytes fit, and
/// its connection waits unread until then. Before, each signed-in connection could send a
/// body up to `limits.max_frame_size` and the node held them all: 12 connections that each
/// sent a 16 MiB send short of its last byte held 192 MiB until the request timeout. Meanwhile
/// an SDK client still sends and polls (small bodies are not counted), and its large send,
/// queued behind the stalled ones, is served once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_connections_holding_large_bodies_are_bounded_by_the_node_wide_budget() {
    const CONNECTIONS: usize = 12;
    const BODY: usize = 16 << 20;
    const BUDGET: usize = 32 << 20;
    let budget = BUDGET.to_string();
    // The bodies stay held for the whole measurement.
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", &budget)]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let before = server.resident_mib();
    let body = std::sync::Arc::new(vec![b'x'; BODY]);
    let mut stalled = Vec::new();
    for i in 0..CONNECTIONS {
        let id = 0x5107_0000 + i as u128;
        stalled.push(stalled_send(&server, id, body.clone()).await);
    }
    bounded_by_the_budget_while_stalled(&server, client, before, stalled, &format!("{CONNECTIONS} signed-in connections with {} MiB bodies short of one byte", BODY >> 20), BUDGET).await;
}

/// Once connections (`what`) hold stalled bodies: the node's resident memory, given the time to
/// take in what it will, grew from `before` by at most the budget and 32 MiB of slack.
pub async fn resident_within_budget(server: &TestServer, before: u64, what: &str, budget: usize) {
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let during = server.resident_mib();
    eprintln!("{what}: resident {before} MiB before, {during} MiB while they wait (budget {} MiB)", budget >> 20);
    assert!(during < before + (budget >> 20) as u64 + 32, "{what}: resident {before} MiB before, {during} MiB while they wait (budget {} MiB)", budget >> 20);
}

/// What the budget tests of stalled bodies check once the `stalled` connections (`what`) hold
/// their bodies: the node's resident memory grew from `before` by at most the budget (and 32 MiB
/// of slack); `client` sends and polls small requests meanwhile; and its 1 MiB send, queued
/// behind the stalled bodies, is served once their connections are gone.
async fn bounded_by_the_budget_while_stalled(server: &TestServer, client: IggyClient, before: u64, stalled: Vec<tokio::task::JoinHandle<()>>, what: &str, budget: usize) {
    resident_within_budget(server, before, what, budget).await;
    // Small requests are served meanwhile.
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("meanwhile", 10)).await;
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(0), 10, false).await;
    assert_eq!(payloads(&polled).len(), 10);
    // A large send waits its turn behind the stalled bodies, and is served once they are gone.
    let large = tokio::spawn(async move {
        let mut messages = vec![msg(vec![b'L'; 1 << 20])];
        let sent = client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages).await;
        (client, sent)
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for connection in &stalled {
        connection.abort();
    }
    let (client, sent) = within("the large send", large).await.unwrap();
    ok("the large send", sent);
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(10), 1, false).await;
    assert_eq!(polled.messages.len(), 1);
    assert_eq!(polled.messages[0].payload.len(), 1 << 20);
}

/// A signed-in WebSocket connection of client `id` that sends one masked binary frame holding a
/// SendMessages request for `body` (its header, then the body) and every byte of it but the
/// last, then holds the connection open until the task is aborted.
async fn stalled_websocket_send(server: &TestServer, port: u16, id: u128, body: std::sync::Arc<Vec<u8>>) -> tokio::task::JoinHandle<()> {
    let (stream, _) = crate::transports::signed_in_over_websocket(server, port, id).await;
    let header = send_header_one_byte_short(id, body.len());
    // FIN + binary, masked (a zero key: the payload goes as is), a 64-bit length.
    let mut head = vec![0x82, 0xFF];
    head.extend_from_slice(&(header.size as u64).to_be_bytes());
    head.extend_from_slice(&[0, 0, 0, 0]);
    head.extend_from_slice(&header.to_bytes());
    hold_after_writing(stream, head, body)
}

/// WebSocket connections share the node-wide budget of request bodies too. The library reads
/// a whole message before the server sees its frame header, so each signed-in connection could
/// make the node hold a message of up to `websocket.max_message_size` beside the budget: the
/// server now reads a large message's payload only once its bytes are reserved. Meanwhile a
/// WebSocket client of the SDK still sends and polls, and its large send, queued behind the
/// stalled messages, is served once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_websocket_connections_holding_large_messages_are_bounded_by_the_node_wide_budget() {
    use crate::transports::{endpoints, ws_client, WEBSOCKET_ON};
    const CONNECTIONS: usize = 12;
    const BODY: usize = 16 << 20;
    const BUDGET: usize = 32 << 20;
    let budget = BUDGET.to_string();
    // The messages stay held for the whole measurement.
    let server = TestServer::start_with_env(&[WEBSOCKET_ON[0], WEBSOCKET_ON[1], ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "60000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", &budget)]);
    let port = endpoints(&server.root_client().await).await.websocket;
    let client = ws_client(port).await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let before = server.resident_mib();
    let body = std::sync::Arc::new(vec![b'x'; BODY]);
    let mut stalled = Vec::new();
    for i in 0..CONNECTIONS {
        let id = 0x5107_2000 + i as u128;
        stalled.push(stalled_websocket_send(&server, port, id, body.clone()).await);
    }
    bounded_by_the_budget_while_stalled(&server, client, before, stalled, &format!("{CONNECTIONS} signed-in WebSocket connections with {} MiB messages short of one byte", BODY >> 20), BUDGET).await;
}

/// A WebSocket message whose bytes are reserved holds them for at most
/// `limits.request_timeout_ms`, as a body does over TCP: a stalled message is cut then (its
/// connection closed, its reservation given back), and a WebSocket client waiting its turn
/// behind two of them is served without either going away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_websocket_send_waiting_behind_stalled_messages_is_served_once_their_request_timeout_cuts_them() {
    use crate::transports::{endpoints, ws_client, WEBSOCKET_ON};
    const BODY: usize = 12 << 20;
    let server = TestServer::start_with_env(&[WEBSOCKET_ON[0], WEBSOCKET_ON[1], ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "2000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", "13631488")]);
    let port = endpoints(&server.root_client().await).await.websocket;
    let client = ws_client(port).await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let body = std::sync::Arc::new(vec![b'x'; BODY]);
    let mut stalled = Vec::new();
    for i in 0..2 {
        let id = 0x5107_3000 + i as u128;
        stalled.push(stalled_websocket_send(&server, port, id, body.clone()).await);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let started = std::time::Instant::now();
    let mut messages = vec![msg(vec![b'L'; 1 << 20])];
    ok("the large send", within("the large send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await);
    eprintln!("the large send was served after {:?}", started.elapsed());
    assert!(server.log().contains("waits to be read"), "the wait is logged:\n{}", server.log());
    for connection in &stalled {
        connection.abort();
    }
}

/// Poll replies are built within the same node-wide budget: a poll leases what is left of it
/// (at least 64 KiB of messages, whole batches, at least one) and holds it until its reply is
/// written, so consumers that poll large counts and read their replies slowly (or not at all)
/// get smaller replies instead of making the node hold each one whole. Before, 8 connections
/// that each polled a 24 MiB partition and never read the reply made the node hold 8 replies
/// of 24 MiB. A consumer reading meanwhile still gets every message, in more polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_that_leave_large_poll_replies_unread_are_bounded_by_the_node_wide_budget() {
    use iggy_generated::frames::Operation;
    use iggy_generated::payloads::{ClientVersionInfo, Consumer as WireConsumer, Identifier as WireIdentifier, OptionalPartitionId, PollMessagesRequest, PollingStrategy as WirePolling};
    use iggy_wire::WireEncode;
    use tokio::io::AsyncWriteExt;
    const CONNECTIONS: usize = 8;
    const BUDGET: usize = 16 << 20;
    const SENDS: usize = 24;
    const PER_SEND: usize = 8;
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", &BUDGET.to_string())]);
    let client = server.root_client().await;
    let (stream, topic) = create_stream_and_topic(&client, "s", "t", 1).await;
    // 24 MiB: 24 batches of 8 messages of 128 KiB.
    for send in 0..SENDS {
        let batch = (0..PER_SEND).map(|m| msg(format!("{send:03}-{m}-{}", "p".repeat(128 << 10)))).collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, batch).await;
    }
    let before = server.resident_mib();
    let (stream_id, topic_id, reader) = (stream.id.to_le_bytes(), topic.id.to_le_bytes(), 1u32.to_le_bytes());
    let mut body = Vec::new();
    PollMessagesRequest {
        consumer: WireConsumer { kind: 1, id: WireIdentifier { kind: 1, value: &reader } },
        stream_id: WireIdentifier { kind: 1, value: &stream_id },
        topic_id: WireIdentifier { kind: 1, value: &topic_id },
        partition_id: OptionalPartitionId { has: 1, partition_id: 0 },
        strategy: WirePolling { kind: 1, value: 0 },
        count: 1_000_000,
        auto_commit: false,
    }
    .encode_to(&mut body);
    let mut unread = Vec::new();
    for i in 0..CONNECTIONS {
        let id = 0x5108_0000 + i as u128;
        // A 0.11.1 session: its requests name a partition by ids alone (no incarnation).
        let version = ClientVersionInfo { protocol_version: iggy_generated::protocol::V0_11_1.packed(), sdk_name: "unread-polls", sdk_version: "0.0.0" };
        let (mut tcp, session) = crate::transports::signed_in_over_tcp_as(&server, id, version).await;
        tcp.write_all(&crate::transports::request_frame(id, session, 1, Operation::NonReplicated, 100, &body)).await.unwrap();
        unread.push(tcp);
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let during = server.resident_mib();
    eprintln!("resident {before} MiB before, {during} MiB while {CONNECTIONS} polls of the whole 24 MiB partition go unread (budget {} MiB)", BUDGET >> 20);
    assert!(
        during < before + (BUDGET >> 20) as u64 + 40,
        "{CONNECTIONS} unread polls of a 24 MiB partition: resident {before} MiB before, {during} MiB while they wait (budget {} MiB)",
        BUDGET >> 20
    );
    // Meanwhile a consumer reads the whole partition, in replies the spent budget keeps small.
    let mut read = Vec::new();
    let mut polls = 0;
    while read.len() < SENDS * PER_SEND {
        let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(read.len() as u64), 1_000_000, false).await;
        assert!(!polled.messages.is_empty(), "a poll from offset {} returned nothing", read.len());
        read.extend(payloads(&polled).into_iter().map(|p| p[..5].to_string()));
        polls += 1;
    }
    let expected: Vec<String> = (0..SENDS).flat_map(|send| (0..PER_SEND).map(move |m| format!("{send:03}-{m}"))).collect();
    assert_eq!(read, expected);
    eprintln!("the consumer read {} messages in {polls} polls", read.len());
    assert!(polls > 1, "the spent budget made the replies smaller");
    drop(unread);
    // A budget below the largest request is said at start.
    assert!(server.log().contains("limits.max_request_bodies_size (16777216 bytes) is below limits.max_frame_size"), "{}", server.log());
}

/// Stalled bodies hold the budget of request bodies for at most `limits.request_timeout_ms`:
/// a connection whose body does not arrive in time is closed and gives its reservation back,
/// so a client waiting its turn behind them is served without any of them going away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_send_waiting_behind_stalled_bodies_is_served_once_their_request_timeout_cuts_them() {
    const BODY: usize = 12 << 20;
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "2000"), ("IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE", "13631488")]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let body = std::sync::Arc::new(vec![b'x'; BODY]);
    let mut stalled = Vec::new();
    for i in 0..2 {
        let id = 0x5107_1000 + i as u128;
        stalled.push(stalled_send(&server, id, body.clone()).await);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Behind both (13 MiB hold one of them but not one and the send): each holds the budget
    // until its body is cut, one after the other.
    let started = std::time::Instant::now();
    let mut messages = vec![msg(vec![b'L'; 1 << 20])];
    ok("the large send", within("the large send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await);
    eprintln!("the large send was served after {:?}", started.elapsed());
    assert!(server.log().contains("waits to be read"), "the wait is logged:\n{}", server.log());
    for connection in &stalled {
        connection.abort();
    }
}

/// Client connections that take every descriptor the process may open must not stop the node
/// at its next file open: a topic create (new partition files), a checkpoint (slot files,
/// directory fsyncs) and segment rolls on a connection opened before the storm find the limit
/// reached. Before, such an open failed with EMFILE and stopped the node as a storage failure
/// (exit 74): any client able to open connections could stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_take_every_descriptor_do_not_stop_the_node_at_its_next_file_open() {
    let mut server = TestServer::start_with_open_files_limit(
        &[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "4"), ("IGGY_SYSTEM_SEGMENT_SIZE", "1048576")],
        128,
    );
    // No reconnection: a request the node dies in fails at once.
    let client = IggyClient::from_connection_string(&format!(
        "{}?reconnection_retries=0",
        server.connection_string(ROOT_USER, ROOT_PASSWORD)
    ))
    .expect("valid connection string");
    ok("connect", within("connect + auto-login", client.connect()).await);
    create_stream_and_topic(&client, "s", "t", 1).await;
    let address = server.address();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let storm = std::thread::spawn(move || {
        let held: Vec<std::net::TcpStream> = (0..200).filter_map(|_| std::net::TcpStream::connect(&address).ok()).collect();
        let _ = released.recv();
        held.len()
    });
    // The server accepts until it refuses (or its descriptors run out).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !server.log().contains("tcp accept failed") && !server.log().contains("connection limit reached") {
        assert!(std::time::Instant::now() < deadline, "the storm never reached the limit:\n{}", server.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Writes that open files: checkpoints every 4 ops, a segment roll every 1 MiB, a new topic.
    let mut outcomes = Vec::new();
    for i in 0..12 {
        let mut messages = vec![msg(vec![b'a' + i as u8; 200 * 1024])];
        let sent = within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await;
        outcomes.push(format!("send {i}: {:?}", sent.err()));
    }
    let created = within("create topic", client.create_topic(&name("s"), "t2", &topic_options(1))).await;
    outcomes.push(format!("create topic: {:?}", created.err()));
    let _ = release.send(());
    assert_eq!(storm.join().unwrap(), 200);
    let exited = tokio::task::block_in_place(|| server.wait_exit(std::time::Duration::from_secs(2)));
    assert!(exited.is_none(), "the node stopped ({exited:?}) after {outcomes:#?}:\n{}", server.log());
    assert!(!server.log().contains("storage failure"), "{}", server.log());
    // Once the connections are gone, everything works again.
    let other = server.root_client().await;
    ok("streams", within("streams", other.get_streams()).await);
    send_to_partition(&other, &name("s"), &name("t"), 0, msgs("after", 1)).await;
}

/// A poll's reply holds at most `limits.max_frame_size` bytes of messages (whole batches, at
/// least one): a poll with a large count over a large partition built its whole reply in
/// memory (a client asking for u32::MAX messages of a partition of many GiB held them all, and
/// a reply over 4 GiB would not fit the header's u32 size). The client polls on from the
/// offset after the last message it got, as for any short poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_reply_is_bounded_by_the_frame_limit_and_the_client_polls_on() {
    const FRAME: usize = 2 << 20;
    const PAYLOAD: usize = 400 << 10;
    let frame = FRAME.to_string();
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_MAX_FRAME_SIZE", &frame)]);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    for i in 0..12u8 {
        send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg(vec![b'a' + i; PAYLOAD])]).await;
    }
    let mut next = 0u64;
    let mut polls = 0;
    while next < 12 {
        let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(next), 100, false).await;
        let bytes: usize = polled.messages.iter().map(|m| m.payload.len()).sum();
        assert!(!polled.messages.is_empty(), "a poll from {next} returns at least one message");
        assert!(bytes <= FRAME + PAYLOAD, "a reply of {} messages, {bytes} bytes of payload", polled.messages.len());
        for (i, message) in polled.messages.iter().enumerate() {
            assert_eq!(message.header.offset, next + i as u64);
            assert_eq!(message.payload[0], b'a' + (next + i as u64) as u8);
        }
        next += polled.messages.len() as u64;
        polls += 1;
    }
    assert!(polls >= 3, "12 x 400 KiB in replies of at most 2 MiB: {polls} polls");
}

/// Node i's descriptors in use now (its `/proc/<pid>/fd` entries), for failure messages.
fn descriptors_in_use(cluster: &crate::test_cluster::TestCluster, i: usize) -> String {
    match cluster.node(i).pid() {
        Some(pid) => std::fs::read_dir(format!("/proc/{pid}/fd")).map_or_else(|e| format!("unreadable: {e}"), |d| d.count().to_string()),
        None => "not running".into(),
    }
}

/// A backup whose open-files limit is lower than the proposer's (the descriptor budget is
/// checked on the proposing node only) cannot keep a new topic's partitions open. It stays up:
/// the partitions past its budget are not opened and reported (ERROR naming the cause and the
/// limit), its other groups go on, and once descriptors free up (another topic deleted) it
/// opens them, catches up, and holds every acknowledged message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_out_of_descriptors_opening_partitions_stays_up_and_opens_them_once_descriptors_free_up() {
    use crate::cluster::{all_groups, create_topic, send_numbered};
    use crate::test_cluster::*;
    use std::time::Duration;
    // Room for 25 partitions (half of 256, 5 descriptors each); the other nodes have 20000.
    const LOW: u64 = 256;
    let mut cluster = TestCluster::start(3);
    // Node 2 runs with the low limit; the metadata primary (where the budget is checked) is another node.
    cluster.stop(2);
    cluster.nodes[2].set_open_files_limit(Some(LOW));
    cluster.restart(2);
    let client = cluster.root_client(0).await;
    let (stream, topic, small) = create_topic(&client, 1).await;
    cluster.wait_normal(2, &all_groups(&small)).await;
    let primary = cluster.primary(METADATA_GROUP).expect("a metadata primary").0;
    assert_ne!(primary, 2, "the budget would be checked on node 2 itself");
    // 81 partitions on node 2, then 24 more: the proposer allows them, node 2 has room for 25
    // (before, it ran out of descriptors opening them and stopped, exit 74).
    let filler = ok("filler", within("filler", client.create_topic(&id(stream), "filler", &topic_options(80))).await);
    let wide = ok("wide", within("wide", client.create_topic(&id(stream), "wide", &topic_options(24))).await);
    let wide_groups: Vec<u64> = (0..24).map(|p| partition_group(stream, wide.id, p)).collect();
    // Writes to every wide partition commit on the other two nodes meanwhile.
    send_numbered(&client, (stream, wide.id), 24, 4, 1).await;
    let error = wait_until("node 2 reports the partitions it could not open", Duration::from_secs(20), || current_start(&cluster.node(2).log()).lines().find(|l| l.contains(" ERROR ") && l.contains("not opened")).map(str::to_string), || format!("{} descriptors in use\n{}", descriptors_in_use(&cluster, 2), current_start(&cluster.node(2).log()))).await;
    assert!(error.contains("open files limit of 256"), "the cause and the limit: {error}");
    eprintln!("node 2: {error}");
    let status = tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::from_secs(2)));
    assert!(status.is_none(), "node 2 stopped ({status:?}):\n{}", current_start(&cluster.node(2).log()));
    // Its other groups go on: a write to the small topic commits and node 2 applies it.
    send_numbered(&client, (stream, topic), 1, 10, 1).await;
    cluster.wait_normal(2, &all_groups(&small)).await;
    // Descriptors free up: node 2 opens what it could not and catches up.
    ok("delete filler", within("delete filler", client.delete_topic(&id(stream), &id(filler.id))).await);
    cluster.wait_normal(2, &wide_groups).await;
    // The small topic's partition and the wide topic's 24, the same bytes on every node.
    cluster.wait_identical_segments(25).await;
    let log = current_start(&cluster.node(2).log()).to_string();
    assert!(log.contains("after waiting for file descriptors"), "{log}");
    assert!(!log.contains("storage failure"), "{log}");
}

/// A node restarted under an open-files limit lower than its partitions need (the budget is
/// checked only when partitions are created) starts and serves the partitions its budget holds;
/// the others are reported (ERROR) and answered as not ready (58), never as empty. Once
/// descriptors free up (a topic deleted; raising the running process's limit with prlimit
/// does the same, but needs CAP_SYS_RESOURCE) it opens them without a restart, every message
/// in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_under_a_lower_open_files_limit_serves_what_fits_and_the_rest_once_descriptors_free_up() {
    use std::time::Duration;
    const PARTITIONS: u32 = 25;
    let mut server = TestServer::start();
    let client = server.root_client().await;
    ok("stream", within("stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    // Opened first at a start (topic 0), then the 25 partitions of "t" (topic 1).
    ok("spare", within("spare", client.create_topic(&name("s"), "spare", &topic_options(5))).await);
    ok("topic", within("topic", client.create_topic(&name("s"), "t", &topic_options(PARTITIONS))).await);
    for p in 0..PARTITIONS {
        send_to_partition(&client, &name("s"), &name("t"), p, msgs(&format!("p{p}"), 3)).await;
    }
    drop(client);
    // Room for 25 of the 30 partitions (half of 256, 5 descriptors each).
    server.set_open_files_limit(Some(256));
    tokio::task::block_in_place(|| server.restart());
    let log = server.log();
    let deferred: Vec<u32> = crate::test_cluster::current_start(&log).lines().filter(|l| l.contains(" ERROR ") && l.contains("not opened")).filter_map(|l| l.split("/topics/1/partitions/").nth(1)?.split(':').next()?.parse().ok()).collect();
    assert_eq!(deferred.len(), 5, "5 partitions of t past the budget are reported:\n{log}");
    let client = server.root_client().await;
    let open = (0..PARTITIONS).find(|p| !deferred.contains(p)).unwrap();
    let polled = poll(&client, &name("s"), &name("t"), open, &consumer("c"), PollingStrategy::offset(0), 10, false).await;
    assert_eq!(polled.messages.len(), 3, "partition {open} is served");
    // Not served, and never as empty: the server answers 58 (not ready), which the SDK resends.
    let waiting = deferred[0];
    let impatient = server.root_client().await;
    let early = tokio::time::timeout(Duration::from_secs(4), impatient.poll_messages(&name("s"), &name("t"), Some(waiting), &consumer("c"), &PollingStrategy::offset(0), 10, false)).await;
    match early {
        Err(_still_waiting) => {}
        Ok(Err(error)) => assert_eq!(error.as_code(), 58, "{error}"),
        Ok(Ok(polled)) => panic!("partition {waiting} answered {} messages before it opened", polled.messages.len()),
    }
    drop(impatient);
    // Descriptors free up: the maintenance pass opens the rest.
    ok("delete spare", within("delete spare", client.delete_topic(&name("s"), &name("spare"))).await);
    for p in deferred {
        let polled = crate::test_cluster::wait_until_async(&format!("partition {p} is served"), Duration::from_secs(20), async || {
            let polled = within("poll", client.poll_messages(&name("s"), &name("t"), Some(p), &consumer("c"), &PollingStrategy::offset(0), 10, false)).await;
            polled.ok()
        }, || server.log()).await;
        assert_eq!(payloads(&polled), (0..3).map(|i| format!("p{p}-{i}")).collect::<Vec<_>>(), "partition {p} holds what was acknowledged");
    }
    assert!(server.log().contains("after waiting for file descriptors"), "{}", server.log());
}

/// The client listeners' backlog holds 1024 connections (the kernel caps it at
/// `net.core.somaxconn`): a burst of reconnecting clients overflowed compio's default of 128,
/// and each dropped SYN cost its client a second (3,000 connects: 168 overflows, 12 s).
#[test]
fn a_burst_of_connects_fits_the_listen_backlog() {
    let server = TestServer::start();
    let port = server.port();
    let listed = std::process::Command::new("ss").args(["-ltnH", &format!("sport = :{port}")]).output().expect("run ss");
    let text = String::from_utf8_lossy(&listed.stdout);
    // State, Recv-Q, Send-Q (the backlog of a listening socket), local, peer.
    let backlog: Vec<u32> = text.lines().filter_map(|line| line.split_whitespace().nth(2)?.parse().ok()).collect();
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn").map_or(4096, |s| s.trim().parse().unwrap_or(4096));
    assert_eq!(backlog, vec![1024.min(somaxconn)], "the TCP listener's backlog: {text}");
}
