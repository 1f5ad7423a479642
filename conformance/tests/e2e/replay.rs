//! Lost replies: the request reaches the server and commits, the reply is lost with the link
//! (injected by the wire tap). The SDK reconnects, binds its session again and replays the
//! same frame; the server must answer from its dedup state, with the committed marker, and
//! apply nothing twice.

use crate::harness::*;
use crate::wiretap::WireTap;
use iggy::prelude::*;
use std::time::Duration;

const OP_CREATE_STREAM: u8 = 128;
const OP_SEND_MESSAGES: u8 = 160;
const OP_STORE_CONSUMER_OFFSET: u8 = 161;

async fn tapped_client(server: &TestServer) -> (WireTap, IggyClient) {
    let tap = WireTap::start(server.port()).await;
    let client = IggyClient::from_connection_string(&format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", tap.address()))
        .expect("connection string");
    ok("connect through the tap", within("connect", client.connect()).await);
    (tap, client)
}

/// The SDK's own deadline is 30 s; a correct replay resolves in about a second. The SDK
/// either replays by itself (the call returns the original result) or hands the uncertain
/// operation back as `OperationUncertain(op)`, which `resolve_operation` must then prove
/// (`None` here: the result value itself is not returned by the proof).
async fn resolved<T>(
    tap: &WireTap,
    client: &IggyClient,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, IggyError>>,
) -> Option<T> {
    let first = match tokio::time::timeout(Duration::from_secs(15), fut).await {
        Ok(r) => r,
        Err(_) => panic!("{what}: not resolved within 15 s; frames:\n{}", tap.tail(30)),
    };
    match first {
        Ok(v) => Some(v),
        Err(IggyError::OperationUncertain(op)) => {
            // Another OperationUncertain means "not proved yet" (the link may still be
            // down): try again until the deadline.
            let deadline = std::time::Instant::now() + Duration::from_secs(12);
            loop {
                match tokio::time::timeout(Duration::from_secs(15), client.resolve_operation(op, deadline)).await {
                    Ok(Ok(())) => return None,
                    Ok(Err(IggyError::OperationUncertain(_))) if std::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Ok(Err(e)) => panic!(
                        "{what}: uncertain operation {op} resolved to {e} (code {}); frames:\n{}",
                        e.as_code(),
                        tap.tail(30)
                    ),
                    Err(_) => panic!("{what}: resolve_operation({op}) hung; frames:\n{}", tap.tail(30)),
                }
            }
        }
        Err(e) => panic!("{what}: {e} (code {}); frames:\n{}", e.as_code(), tap.tail(30)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_whose_reply_was_lost_is_resolved_once() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("a", 3)).await;

    tap.lose_next_reply_to(OP_SEND_MESSAGES);
    let mut batch = msgs("b", 2);
    let r = resolved(
        &tap,
        &c,
        "send with a lost reply",
        c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut batch),
    )
    .await;
    assert!(tap.lines().iter().any(|l| l.contains("FAULT")), "the fault fired");
    if let Some(conf) = r.as_ref().and_then(|r| r.confirmations.first()) {
        assert_eq!(conf.base_offset, 3, "the replay reports the original offset");
    }
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("c", 1)).await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(payloads(&polled), vec!["a-0", "a-1", "a-2", "b-0", "b-1", "c-0"], "the replayed batch is stored once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stream_whose_reply_was_lost_is_resolved_once() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    ok("create first", within("create", c.create_stream("first", &StreamCreateOptions::default())).await);

    tap.lose_next_reply_to(OP_CREATE_STREAM);
    if let Some(s) = resolved(&tap, &c, "create with a lost reply", c.create_stream("second", &StreamCreateOptions::default())).await {
        assert_eq!((s.id, s.name.as_str()), (1, "second"), "the replay returns the original result");
    }
    let streams = ok("list", within("list", c.get_streams()).await);
    let mut names: Vec<&str> = streams.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["first", "second"], "created once, not rejected as a duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_offset_whose_reply_was_lost_is_resolved() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("m", 10)).await;

    tap.lose_next_reply_to(OP_STORE_CONSUMER_OFFSET);
    resolved(
        &tap,
        &c,
        "store with a lost reply",
        c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 6),
    )
    .await;
    let off = ok("get", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await)
        .expect("stored");
    assert_eq!(off.stored_offset, 6);
}

const OP_REGISTER: u8 = 1;
const OP_DELETE_STREAM: u8 = 130;
const OP_JOIN_CONSUMER_GROUP: u8 = 148;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_stream_whose_reply_was_lost_reports_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    ok("create", within("create", c.create_stream("doomed", &StreamCreateOptions::default())).await);
    tap.lose_next_reply_to(OP_DELETE_STREAM);
    // A replay answered by re-executing would say 1009 (not found); the dedup answer is OK.
    resolved(&tap, &c, "delete with a lost reply", c.delete_stream(&name("doomed"))).await;
    assert!(ok("get", within("get", c.get_stream(&name("doomed"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_whose_reply_was_lost_leaves_one_membership() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 2).await;
    ok("create group", within("cg", c.create_consumer_group(&name("s"), &name("t"), "g")).await);
    tap.lose_next_reply_to(OP_JOIN_CONSUMER_GROUP);
    resolved(&tap, &c, "join with a lost reply", c.join_consumer_group(&name("s"), &name("t"), &name("g"))).await;
    let g = ok("get group", within("get", c.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(g.members_count, 1, "one member, not two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_whose_reply_was_lost_still_signs_in() {
    let server = TestServer::start();
    let tap = WireTap::start(server.port()).await;
    tap.lose_next_reply_to(OP_REGISTER);
    let c = IggyClient::from_connection_string(&format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", tap.address()))
        .expect("connection string");
    resolved(&tap, &c, "connect with a lost Register reply", c.connect()).await;
    assert!(tap.lines().iter().any(|l| l.contains("FAULT")), "the fault fired");
    let me = ok("me", within("me", c.get_me()).await);
    assert_eq!(me.user_id, Some(0));
}

// Non-idempotent operations: re-executing the replay instead of answering it from the dedup
// table gives a different answer (not found, already exists, wrong password) or applies twice.

const OP_DELETE_TOPIC: u8 = 134;
const OP_CREATE_PARTITIONS: u8 = 136;
const OP_DELETE_CONSUMER_GROUP: u8 = 140;
const OP_CREATE_USER: u8 = 141;
const OP_DELETE_USER: u8 = 143;
const OP_CHANGE_PASSWORD: u8 = 144;
const OP_DELETE_PAT: u8 = 147;
const OP_LEAVE_CONSUMER_GROUP: u8 = 149;
const OP_DELETE_CONSUMER_OFFSET: u8 = 162;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_topic_whose_reply_was_lost_reports_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    tap.lose_next_reply_to(OP_DELETE_TOPIC);
    resolved(&tap, &c, "delete topic with a lost reply", c.delete_topic(&name("s"), &name("t"))).await;
    assert!(ok("get", within("get", c.get_topic(&name("s"), &name("t"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_whose_reply_was_lost_adds_them_once() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    tap.lose_next_reply_to(OP_CREATE_PARTITIONS);
    resolved(&tap, &c, "create partitions with a lost reply", c.create_partitions(&name("s"), &name("t"), 2)).await;
    let t = ok("get", within("get", c.get_topic(&name("s"), &name("t"))).await).expect("t");
    assert_eq!(t.partitions_count, 3, "two partitions added once, not twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_group_and_leave_whose_replies_were_lost_report_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    ok("create a", within("cg", c.create_consumer_group(&name("s"), &name("t"), "a")).await);
    ok("create b", within("cg", c.create_consumer_group(&name("s"), &name("t"), "b")).await);
    ok("join b", within("join", c.join_consumer_group(&name("s"), &name("t"), &name("b"))).await);
    tap.lose_next_reply_to(OP_LEAVE_CONSUMER_GROUP);
    resolved(&tap, &c, "leave with a lost reply", c.leave_consumer_group(&name("s"), &name("t"), &name("b"))).await;
    tap.lose_next_reply_to(OP_DELETE_CONSUMER_GROUP);
    resolved(&tap, &c, "delete group with a lost reply", c.delete_consumer_group(&name("s"), &name("t"), &name("a"))).await;
    let groups = ok("list", within("list", c.get_consumer_groups(&name("s"), &name("t"))).await);
    let got: Vec<(&str, u32)> = groups.iter().map(|g| (g.name.as_str(), g.members_count)).collect();
    assert_eq!(got, vec![("b", 0)]);
}

async fn create_alice(c: &IggyClient) {
    ok(
        "create alice",
        within("create", c.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_whose_reply_was_lost_creates_once() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    tap.lose_next_reply_to(OP_CREATE_USER);
    resolved(
        &tap,
        &c,
        "create user with a lost reply",
        c.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default()),
    )
    .await;
    let users = ok("list", within("list", c.get_users()).await);
    assert_eq!(users.len(), 2, "root and alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_password_whose_reply_was_lost_reports_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_alice(&c).await;
    tap.lose_next_reply_to(OP_CHANGE_PASSWORD);
    // Re-executed, the replay would check the old password against the new one (42).
    resolved(&tap, &c, "change password with a lost reply", c.change_password(&name("alice"), "alice-secret", "alice-new")).await;
    let fresh = server.anonymous_client().await;
    ok("new password", within("login", fresh.login_user("alice", "alice-new")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_user_whose_reply_was_lost_reports_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_alice(&c).await;
    tap.lose_next_reply_to(OP_DELETE_USER);
    resolved(&tap, &c, "delete user with a lost reply", c.delete_user(&name("alice"))).await;
    assert!(ok("get", within("get", c.get_user(&name("alice"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_token_and_offset_whose_replies_were_lost_report_the_original_success() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("m", 3)).await;
    ok("store", within("store", c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 1)).await);
    ok("create pat", within("pat", c.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)).await);
    tap.lose_next_reply_to(OP_DELETE_PAT);
    resolved(&tap, &c, "delete PAT with a lost reply", c.delete_personal_access_token("ci-bot")).await;
    tap.lose_next_reply_to(OP_DELETE_CONSUMER_OFFSET);
    resolved(
        &tap,
        &c,
        "delete offset with a lost reply",
        c.delete_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0)),
    )
    .await;
    assert!(ok("list pats", within("list", c.get_personal_access_tokens()).await).is_empty());
    assert!(ok("get offset", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await).is_none());
}

// The dedup state must survive a restart: the reply is lost, the server restarts before the
// SDK reconnects (the tap holds the reconnection), then the replay arrives.

async fn lose_reply_across_restart<T>(
    crash: bool,
    server: &mut TestServer,
    tap: &WireTap,
    c: &IggyClient,
    operation: u8,
    what: &str,
    call: impl std::future::Future<Output = Result<T, IggyError>>,
) -> Option<T> {
    tap.lose_next_reply_to(operation);
    tap.hold_new_connections();
    let call = resolved(tap, c, what, call);
    tokio::pin!(call);
    tokio::select! {
        _ = &mut call => panic!("{what}: resolved before the restart"),
        _ = tap.wait_for_fault() => {}
    }
    tokio::task::block_in_place(|| if crash { server.kill9_and_restart() } else { server.restart() });
    tap.release_new_connections();
    call.await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stream_replayed_after_a_restart_is_answered_from_persisted_dedup_state() {
    let mut server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    ok("create first", within("create", c.create_stream("first", &StreamCreateOptions::default())).await);
    let created = lose_reply_across_restart(
        false,
        &mut server,
        &tap,
        &c,
        OP_CREATE_STREAM,
        "create across a restart",
        c.create_stream("second", &StreamCreateOptions::default()),
    )
    .await;
    if let Some(s) = created {
        assert_eq!((s.id, s.name.as_str()), (1, "second"));
    }
    let streams = ok("list", within("list", c.get_streams()).await);
    assert_eq!(streams.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_replayed_after_a_restart_is_stored_once() {
    let mut server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("a", 2)).await;
    let mut batch = msgs("b", 2);
    lose_reply_across_restart(
        false,
        &mut server,
        &tap,
        &c,
        OP_SEND_MESSAGES,
        "send across a restart",
        c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut batch),
    )
    .await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(payloads(&polled), vec!["a-0", "a-1", "b-0", "b-1"], "stored once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_and_join_replayed_after_kill9_apply_once() {
    let mut server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 2).await;
    ok("create group", within("cg", c.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let mut batch = msgs("b", 2);
    lose_reply_across_restart(
        true,
        &mut server,
        &tap,
        &c,
        OP_SEND_MESSAGES,
        "send across kill -9",
        c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(1), &mut batch),
    )
    .await;
    lose_reply_across_restart(
        true,
        &mut server,
        &tap,
        &c,
        OP_JOIN_CONSUMER_GROUP,
        "join across kill -9",
        c.join_consumer_group(&name("s"), &name("t"), &name("g")),
    )
    .await;
    let polled = poll(&c, &name("s"), &name("t"), 1, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(payloads(&polled), vec!["b-0", "b-1"], "stored once");
    let g = ok("get group", within("get", c.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(g.members_count, 1, "joined once");
}

const OP_CREATE_PAT: u8 = 146;

/// A token is shown only in its creation's reply; when that reply is lost, the retry gets the
/// same token again (the node remembers it in memory, never in the journal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_token_whose_reply_was_lost_shows_the_token_on_the_retry() {
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    tap.lose_next_reply_to(OP_CREATE_PAT);
    let created = resolved(
        &tap,
        &c,
        "create token with a lost reply",
        c.create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire),
    )
    .await
    .expect("the SDK retries the creation and decodes the token from the replayed reply");
    assert!(!created.token.is_empty());
    let tokens = ok("list", within("list", c.get_personal_access_tokens()).await);
    assert_eq!(tokens.len(), 1, "created once");
    let fresh = server.anonymous_client().await;
    ok("login with the token", within("login", fresh.login_with_personal_access_token(&created.token)).await);
}

const OP_DELETE_SEGMENTS: u8 = 138;

/// A DeleteSegments whose reply is lost is retried by the SDK with the same request number:
/// the retry replays the committed reply and deletes nothing more (it used to delete another
/// `count` segments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_whose_reply_was_lost_deletes_once() {
    const SEGMENT: u64 = 1024 * 1024;
    let server = TestServer::start();
    let (tap, c) = tapped_client(&server).await;
    ok("create stream", within("create", c.create_stream("s", &StreamCreateOptions::default())).await);
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(SEGMENT)),
        ..Default::default()
    };
    ok("create topic", within("create", c.create_topic(&name("s"), "t", &options)).await);
    // 200 KiB messages, six to a 1 MiB segment: segments start at 0, 6, 12, 18, 24.
    for i in 0..24 {
        send_to_partition(&c, &name("s"), &name("t"), 0, vec![msg(vec![i as u8; 200 * 1024])]).await;
    }
    tap.lose_next_reply_to(OP_DELETE_SEGMENTS);
    resolved(&tap, &c, "delete segments with a lost reply", c.delete_segments(&name("s"), &name("t"), 0, 1)).await;
    assert!(tap.lines().iter().any(|l| l.contains("FAULT")), "the fault fired");
    let first = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 1, false).await;
    assert_eq!(offsets(&first), vec![6], "one segment deleted, not two; frames:\n{}", tap.tail(20));
}

/// The seed's "crash-safe explicit offset retries require Persisted and Quorum": under
/// `persisted`, an offset store and an offset delete whose replies were lost, replayed by the
/// SDK after a kill -9 and restart, report their original success (the delete not
/// ConsumerOffsetNotFound, 3021) and apply once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persisted_offset_store_and_delete_replayed_after_kill9_report_their_original_success() {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_DURABILITY", "persisted")]);
    let (tap, c) = tapped_client(&server).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("m", 5)).await;
    ok("store 1", within("store", c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 1)).await);
    lose_reply_across_restart(
        true,
        &mut server,
        &tap,
        &c,
        OP_STORE_CONSUMER_OFFSET,
        "store 3 across kill -9",
        c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 3),
    )
    .await;
    let stored = ok("get offset", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await);
    assert_eq!(stored.map(|o| o.stored_offset), Some(3), "the replayed store applied");
    lose_reply_across_restart(
        true,
        &mut server,
        &tap,
        &c,
        OP_DELETE_CONSUMER_OFFSET,
        "delete across kill -9",
        c.delete_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0)),
    )
    .await;
    assert!(ok("get offset", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await).is_none());
}
