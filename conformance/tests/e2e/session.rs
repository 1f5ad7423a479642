//! Sessions over time: a silent connection is closed at the idle timeout while heartbeats keep
//! an idle client connected, a client outlives a server restart by reconnecting, sessions are
//! independent, and deactivating a user ends its sessions.

use crate::harness::*;
use iggy::prelude::*;
use std::time::Duration;

/// The idle timeout these tests configure (`limits.idle_timeout_secs`), well below their sleeps.
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

fn short_idle_timeout() -> TestServer {
    let secs = IDLE_TIMEOUT.as_secs().to_string();
    TestServer::start_with_env(&[("IGGY_LIMITS_IDLE_TIMEOUT_SECS", &secs), ("RUST_LOG", "debug")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_by_the_server_after_the_idle_timeout() {
    let server = short_idle_timeout();
    let address = server.address();
    let (closed_after, read) = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut socket = std::net::TcpStream::connect(address).expect("connect");
        // The server closes first or the test fails: it waits far past the timeout.
        socket.set_read_timeout(Some(IDLE_TIMEOUT * 5)).unwrap();
        let began = std::time::Instant::now();
        let read = socket.read(&mut [0u8; 64]).map_err(|e| e.kind());
        (began.elapsed(), read)
    })
    .await
    .unwrap();
    assert_eq!(read, Ok(0), "the server closes a connection that sends nothing (EOF, no bytes)");
    assert!(
        closed_after >= IDLE_TIMEOUT - Duration::from_millis(50),
        "closed after {closed_after:?}, before the idle timeout {IDLE_TIMEOUT:?}"
    );
    let log = server.log();
    assert!(
        log.lines().any(|l| l.contains("closed: no request in time")),
        "the server logs the close as idleness:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_an_idle_client_connected_past_the_idle_timeout() {
    let server = short_idle_timeout();
    // Heartbeats (pings) every second, against a 3 s idle timeout.
    let client = IggyClient::from_connection_string(&format!(
        "{}?heartbeat_interval=1s",
        server.connection_string(ROOT_USER, ROOT_PASSWORD)
    ))
    .expect("valid connection string");
    ok("connect", within("connect + auto-login", client.connect()).await);
    ok("create", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let before = ok("me before idling", within("me", client.get_me()).await);
    tokio::time::sleep(IDLE_TIMEOUT * 2).await;
    let after = ok("me after idling", within("me", client.get_me()).await);
    assert_eq!(
        after.client_id, before.client_id,
        "the same connection serves the client (a close for idleness would have made it redial)"
    );
    let streams = ok("list after idling", within("list", client.get_streams()).await);
    assert_eq!(streams.len(), 1);
    let log = server.log();
    assert!(
        !log.contains("no request in time"),
        "no connection was closed for idleness:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_client_keeps_working_after_a_server_restart() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("before", 2)).await;

    tokio::task::block_in_place(|| server.restart());

    // The SDK redials with backoff and binds its session again (or registers anew).
    let streams = ok(
        "get_streams after restart",
        within_for(Duration::from_secs(25), "get_streams after restart", client.get_streams()).await,
    );
    assert_eq!(streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), vec!["s"]);
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, msgs("after", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(2));
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&polled), vec!["before-0", "before-1", "after-0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_of_one_client_leaves_the_other_signed_in() {
    let server = TestServer::start();
    let a = server.root_client().await;
    let b = server.root_client().await;
    ok("logout a", within("logout", a.logout_user()).await);
    ok("b still works", within("list", b.get_streams()).await);
    let me = ok("b me", within("me", b.get_me()).await);
    assert_eq!(me.user_id, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relogin_as_another_user_switches_identity() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create alice",
        within("create", root.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    let client = server.anonymous_client().await;
    ok("login root", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    let identity = ok("login alice", within("login", client.login_user("alice", "alice-secret")).await);
    assert_eq!(identity.user_id, 1);
    let me = ok("me", within("me", client.get_me()).await);
    assert_eq!(me.user_id, Some(1), "the connection now acts as alice");
    expect_code(
        "alice has no permission to create streams",
        within("create", client.create_stream("x", &StreamCreateOptions::default())).await,
        41,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_change_keeps_the_live_session() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create alice",
        within("create", root.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    let alice = server.client_as("alice", "alice-secret").await;
    ok("root changes alice's password", within("pw", root.change_password(&name("alice"), "alice-secret", "alice-new")).await);
    let me = ok("alice's session still works", within("me", alice.get_me()).await);
    assert_eq!(me.user_id, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivating_a_user_ends_its_live_session() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let perms = Permissions { global: GlobalPermissions { read_streams: true, ..Default::default() }, streams: None };
    ok(
        "create alice",
        within("create", root.create_user("alice", "alice-secret", UserStatus::Active, Some(perms), &UserCreateOptions::default())).await,
    );
    let alice = server.client_as("alice", "alice-secret").await;
    ok("alice lists streams", within("list", alice.get_streams()).await);
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    ok("deactivate alice", within("update", root.update_user(&name("alice"), &deactivate)).await);
    let r = within_for(Duration::from_secs(15), "alice after deactivation", alice.get_streams()).await;
    // 40 Unauthenticated: the session itself is gone (41 Unauthorized would be a permission).
    expect_code("alice's session ended with her deactivation", r, 40);
}

/// A login refused because every slot of the session table is taken (live sessions are never
/// evicted) says so in the log, naming the limit: the client only sees a transient refusal that
/// it retries (503 over HTTP, 58 that the SDK resends until its timeout), and the server wrote
/// nothing, leaving an operator no clue why logins hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_refused_at_session_capacity_is_logged_naming_the_limit() {
    let (server, api) = TestServer::start_with_http(&[("IGGY_LIMITS_CLIENTS_TABLE_MAX", "4")]);
    let login = br#"{"username":"iggy","password":"iggy"}"#;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(crate::http::raw(&api, "POST", "/users/login", None, login).await.0);
    }
    assert_eq!(statuses.last(), Some(&503), "the table fills: {statuses:?}");
    let log = server.log();
    assert!(log.contains("clients_table_max"), "the refusal is logged naming the limit:\n{log}");
}
