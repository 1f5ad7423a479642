//! Graceful restart (SIGTERM, start again on the same directory): everything written before
//! is still there, and new writes continue where the old ones stopped.

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::str::FromStr;

fn reader_permissions() -> Permissions {
    Permissions {
        global: GlobalPermissions { read_streams: true, read_topics: true, poll_messages: true, ..Default::default() },
        streams: None,
    }
}

fn headers() -> BTreeMap<HeaderKey, HeaderValue> {
    let mut h = BTreeMap::new();
    h.insert(HeaderKey::from_str("trace").unwrap(), HeaderValue::from_str("abc-123").unwrap());
    h.insert(HeaderKey::from_str("n").unwrap(), HeaderValue::from(7u32));
    h
}

/// Writes a known state; returns the root PAT.
async fn write_state(server: &TestServer) -> String {
    let c = server.root_client().await;
    create_stream_and_topic(&c, "orders", "created", 2).await; // stream 0, topic 0
    create_stream_and_topic(&c, "logs", "app", 1).await; // stream 1, topic 0
    ok("create tmp", within("create", c.create_stream("tmp", &StreamCreateOptions::default())).await); // 2
    ok("delete tmp", within("delete", c.delete_stream(&name("tmp"))).await);
    ok("create topic", within("create", c.create_topic(&name("orders"), "archived", &topic_options(1))).await);

    send_to_partition(&c, &name("orders"), &name("created"), 0, msgs("o", 6)).await;
    let second: Vec<IggyMessage> = (6..10).map(|i| msg(format!("o-{i}"))).collect();
    send_to_partition(&c, &name("orders"), &name("created"), 0, second).await;
    send_to_partition(&c, &name("orders"), &name("created"), 1, msgs("q", 3)).await;
    let with_headers: Vec<IggyMessage> = (0..5)
        .map(|i| {
            IggyMessage::builder()
                .id(1000 + i as u128)
                .payload(bytes::Bytes::from(format!("log-{i}")))
                .user_headers(headers())
                .build()
                .unwrap()
        })
        .collect();
    send_to_partition(&c, &name("logs"), &name("app"), 0, with_headers).await;

    ok(
        "store offset",
        within("store", c.store_consumer_offset(&consumer("c"), &name("orders"), &name("created"), Some(0), 4)).await,
    );
    ok(
        "store offset p1",
        within("store", c.store_consumer_offset(&consumer("c"), &name("orders"), &name("created"), Some(1), 1)).await,
    );
    ok("create group", within("cg", c.create_consumer_group(&name("orders"), &name("created"), "g")).await);
    ok("create group 2", within("cg", c.create_consumer_group(&name("orders"), &name("created"), "h")).await);
    ok("delete group 2", within("cg", c.delete_consumer_group(&name("orders"), &name("created"), &name("h"))).await);
    ok(
        "create user",
        within(
            "create_user",
            c.create_user("alice", "alice-secret", UserStatus::Active, Some(reader_permissions()), &UserCreateOptions::default()),
        )
        .await,
    );
    ok(
        "create user bob",
        within("create_user", c.create_user("bob", "bob-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    ok("change bob's password", within("pw", c.change_password(&name("bob"), "bob-secret", "bob-new-secret")).await);
    let token = ok(
        "create pat",
        within("pat", c.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await,
    )
    .token;
    let _ = within("shutdown client", c.shutdown()).await;
    token
}

async fn verify_state(server: &TestServer, token: &str) {
    let c = server.root_client().await;

    let mut streams = ok("list streams", within("list", c.get_streams()).await);
    streams.sort_by_key(|s| s.id);
    let got: Vec<(u32, &str, u32, u64)> =
        streams.iter().map(|s| (s.id, s.name.as_str(), s.topics_count, s.messages_count)).collect();
    assert_eq!(got, vec![(0, "orders", 2, 13), (1, "logs", 1, 5)], "streams after restart");

    let created = ok("get topic", within("get", c.get_topic(&name("orders"), &name("created"))).await).expect("created");
    assert_eq!((created.id, created.partitions_count, created.messages_count), (0, 2, 13));
    let mut parts: Vec<(u32, u64, u64)> =
        created.partitions.iter().map(|p| (p.id, p.messages_count, p.current_offset)).collect();
    parts.sort();
    assert_eq!(parts, vec![(0, 10, 9), (1, 3, 2)], "partition counts and current offsets");
    let archived = ok("get topic", within("get", c.get_topic(&name("orders"), &name("archived"))).await).expect("archived");
    assert_eq!((archived.id, archived.partitions_count), (1, 1));

    let p0 = poll(&c, &name("orders"), &name("created"), 0, &consumer("x"), PollingStrategy::offset(0), 100, false).await;
    assert_eq!(offsets(&p0), (0..10).collect::<Vec<u64>>());
    assert_eq!(payloads(&p0), (0..10).map(|i| format!("o-{i}")).collect::<Vec<_>>());
    let p1 = poll(&c, &name("orders"), &name("created"), 1, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(payloads(&p1), vec!["q-0", "q-1", "q-2"]);
    let logs = poll(&c, &name("logs"), &name("app"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(payloads(&logs), (0..5).map(|i| format!("log-{i}")).collect::<Vec<_>>());
    for (i, m) in logs.messages.iter().enumerate() {
        assert_eq!(m.header.id, 1000 + i as u128, "message id after restart");
        assert_eq!(m.user_headers_map().unwrap(), Some(headers()), "headers after restart");
    }

    let off = ok(
        "get offset",
        within("get", c.get_consumer_offset(&consumer("c"), &name("orders"), &name("created"), Some(0))).await,
    )
    .expect("offset survives restart");
    assert_eq!((off.partition_id, off.stored_offset, off.current_offset), (0, 4, 9));
    let off1 = ok(
        "get offset p1",
        within("get", c.get_consumer_offset(&consumer("c"), &name("orders"), &name("created"), Some(1))).await,
    )
    .expect("offset survives restart");
    assert_eq!(off1.stored_offset, 1);
    let next = poll(&c, &name("orders"), &name("created"), 0, &consumer("c"), PollingStrategy::next(), 2, false).await;
    assert_eq!(offsets(&next), vec![5, 6], "next continues from the stored offset");

    let groups = ok("list groups", within("list", c.get_consumer_groups(&name("orders"), &name("created"))).await);
    let got: Vec<(u32, &str, u32)> = groups.iter().map(|g| (g.id, g.name.as_str(), g.partitions_count)).collect();
    assert_eq!(got, vec![(0, "g", 2)], "groups after restart");

    let alice = ok("get alice", within("get", c.get_user(&name("alice"))).await).expect("alice survives");
    assert_eq!((alice.id, alice.status), (1, UserStatus::Active));
    assert_eq!(alice.permissions, Some(reader_permissions()));
    let alice_client = server.client_as("alice", "alice-secret").await;
    let me = ok("alice me", within("me", alice_client.get_me()).await);
    assert_eq!(me.user_id, Some(1));
    let fresh = server.anonymous_client().await;
    expect_code("bob's old password", within("login", fresh.login_user("bob", "bob-secret")).await, 42);
    let bob = ok("bob's new password", within("login", fresh.login_user("bob", "bob-new-secret")).await);
    assert_eq!(bob.user_id, 2);

    let pats = ok("list pats", within("list", c.get_personal_access_tokens()).await);
    assert_eq!(pats.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["ci-bot"]);
    let pat_client = server.anonymous_client().await;
    let identity = ok("pat login", within("pat login", pat_client.login_with_personal_access_token(token)).await);
    assert_eq!(identity.user_id, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_streams_topics_messages_offsets_groups_users_and_tokens() {
    let mut server = TestServer::start();
    let token = write_state(&server).await;
    tokio::task::block_in_place(|| server.restart());
    verify_state(&server, &token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_after_restart_continue_ids_and_offsets_and_survive_a_second_restart() {
    let mut server = TestServer::start();
    let token = write_state(&server).await;
    tokio::task::block_in_place(|| server.restart());

    {
        let c = server.root_client().await;
        let sent = send_to_partition(&c, &name("orders"), &name("created"), 0, msgs("after", 2)).await;
        let conf: Vec<(u32, u32, u32, u64)> =
            sent.confirmations.iter().map(|c| (c.stream_id, c.topic_id, c.partition_id, c.base_offset)).collect();
        assert_eq!(conf, vec![(0, 0, 0, 10)], "offsets continue after restart");
        let s = ok("create stream", within("create", c.create_stream("fresh", &StreamCreateOptions::default())).await);
        assert_eq!(s.id, 2, "the lowest free stream id after restart");
        let u = ok(
            "create user",
            within("create_user", c.create_user("carol", "carol-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
        );
        assert_eq!(u.id, 3, "user ids continue after restart");
        let _ = within("shutdown client", c.shutdown()).await;
    }

    tokio::task::block_in_place(|| server.restart());
    let c = server.root_client().await;
    let p0 = poll(&c, &name("orders"), &name("created"), 0, &consumer("x"), PollingStrategy::offset(8), 100, false).await;
    assert_eq!(payloads(&p0), vec!["o-8", "o-9", "after-0", "after-1"]);
    assert_eq!(offsets(&p0), vec![8, 9, 10, 11]);
    let s = ok("get fresh", within("get", c.get_stream(&id(2))).await).expect("fresh survives");
    assert_eq!(s.name, "fresh");
    assert!(ok("get carol", within("get", c.get_user(&name("carol"))).await).is_some());
    drop(c);
    verify_state_after_second(&server, &token).await;
}

async fn verify_state_after_second(server: &TestServer, token: &str) {
    let client = server.anonymous_client().await;
    let identity = ok("pat login", within("pat login", client.login_with_personal_access_token(token)).await);
    assert_eq!(identity.user_id, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_with_exit_status_zero() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    drop(c);
    let status = tokio::task::block_in_place(|| server.stop()).expect("it was running");
    assert!(status.success(), "exit status after SIGTERM: {status}");
    tokio::task::block_in_place(|| server.start_again());
    let c = server.root_client().await;
    assert!(ok("get", within("get", c.get_stream(&name("s"))).await).is_some());
}

/// SIGHUP (the terminal or SSH session a server runs in closed) stops it as SIGTERM does:
/// drained, exit status 0, its data kept. It killed it at once before (status 129, no word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_stops_the_server_gracefully_as_sigterm_does() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    drop(c);
    server.signal(libc::SIGHUP);
    let status = tokio::task::block_in_place(|| server.wait_exit(std::time::Duration::from_secs(20)))
        .expect("it stops on SIGHUP");
    assert!(status.success(), "exit status after SIGHUP: {status}");
    let log = server.log();
    assert!(log.contains("SIGHUP received"), "{log}");
    tokio::task::block_in_place(|| server.start_again());
    let c = server.root_client().await;
    assert!(ok("get", within("get", c.get_stream(&name("s"))).await).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_group_offsets_are_the_same_after_restart() {
    let mut server = TestServer::start();
    let before = {
        let c = server.root_client().await;
        create_stream_and_topic(&c, "a", "t", 3).await;
        create_stream_and_topic(&c, "b", "t", 1).await;
        send_to_partition(&c, &name("a"), &name("t"), 2, msgs("m", 7)).await;
        ok("create group", within("cg", c.create_consumer_group(&name("a"), &name("t"), "g")).await);
        ok("join", within("join", c.join_consumer_group(&name("a"), &name("t"), &name("g"))).await);
        ok(
            "store group offset",
            within("store", c.store_consumer_offset(&Consumer::group(name("g")), &name("a"), &name("t"), Some(2), 5)).await,
        );
        ok("stats", within("stats", c.get_stats()).await)
    };
    tokio::task::block_in_place(|| server.restart());
    let c = server.root_client().await;
    let after = ok("stats", within("stats", c.get_stats()).await);
    assert_eq!(
        (after.streams_count, after.topics_count, after.partitions_count, after.messages_count, after.consumer_groups_count),
        (before.streams_count, before.topics_count, before.partitions_count, before.messages_count, before.consumer_groups_count),
        "stats counters after restart"
    );
    assert_eq!((after.streams_count, after.partitions_count, after.messages_count), (2, 4, 7));
    assert_eq!(after.messages_size_bytes.as_bytes_u64(), before.messages_size_bytes.as_bytes_u64());
    assert_ne!(after.process_id, before.process_id, "a new process");
    let off = ok(
        "group offset",
        within("get", c.get_consumer_offset(&Consumer::group(name("g")), &name("a"), &name("t"), Some(2))).await,
    )
    .expect("group offset survives restart");
    assert_eq!((off.stored_offset, off.current_offset), (5, 6));
}

/// A restart replays the partition ops journaled since the partition's checkpoint (their
/// batches read back and applied) and the memory that took is given back once the node serves:
/// glibc kept those freed chunks amid live ones, about 30 bytes per message replayed for the
/// life of the process (150 batches of 1000 messages here: several MiB more after the restart
/// than before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_gives_back_the_memory_its_replay_used() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    for batch in 0..150 {
        let messages = (0..1000)
            .map(|i| msg(format!("{batch:03}-{i:04}-{}", "p".repeat(80))))
            .collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, messages).await;
    }
    drop(client);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let before = server.anonymous_kib();
    tokio::task::block_in_place(|| server.restart());
    let client = server.root_client().await;
    let polled = poll(
        &client,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::last(),
        1,
        false,
    )
    .await;
    assert_eq!(offsets(&polled), [149_999], "every message replayed");
    let after = server.anonymous_kib();
    assert!(
        after <= before + 2048,
        "anonymous memory {before} KiB before the restart, {after} KiB after it"
    );
}
