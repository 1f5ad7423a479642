//! Connected clients, option descriptors and the system snapshot.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_list_contains_every_connected_client() {
    let server = TestServer::start();
    let a = server.root_client().await;
    let b = server.root_client().await;
    let me_a = ok("me a", within("me", a.get_me()).await);
    let me_b = ok("me b", within("me", b.get_me()).await);
    assert_ne!(me_a.client_id, me_b.client_id, "distinct client ids");

    let clients = ok("get_clients", within("clients", a.get_clients()).await);
    let ids: Vec<u32> = clients.iter().map(|c| c.client_id).collect();
    assert!(ids.contains(&me_a.client_id) && ids.contains(&me_b.client_id), "both listed: {ids:?}");
    for c in clients.iter().filter(|c| c.client_id == me_a.client_id || c.client_id == me_b.client_id) {
        assert_eq!(c.user_id, Some(DEFAULT_ROOT_USER_ID));
        assert_eq!(c.transport, "TCP");
    }

    let got = ok("get_client", within("client", a.get_client(me_b.client_id)).await).expect("b is known");
    assert_eq!((got.client_id, got.user_id, got.address.as_str()), (me_b.client_id, Some(0), me_b.address.as_str()));
    assert!(ok("get missing client", within("client", a.get_client(u32::MAX - 1)).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_and_got_clients_show_the_consumer_groups_they_joined() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    for g in ["g1", "g2"] {
        ok("create group", within("create", admin.create_consumer_group(&name("s"), &name("t"), g)).await);
    }
    let member = server.root_client().await;
    for g in ["g1", "g2"] {
        ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name(g))).await);
    }
    let me = ok("me", within("me", member.get_me()).await);
    assert_eq!(me.consumer_groups_count, 2, "me counts both groups");

    let clients = ok("get_clients", within("clients", admin.get_clients()).await);
    let counts: Vec<(u32, u32)> = clients.iter().map(|c| (c.client_id, c.consumer_groups_count)).collect();
    assert!(counts.contains(&(me.client_id, 2)), "the member is listed with its 2 groups: {counts:?}");
    let admin_id = ok("me", within("me", admin.get_me()).await).client_id;
    assert!(counts.contains(&(admin_id, 0)), "the admin joined none: {counts:?}");

    let got = ok("get_client", within("client", admin.get_client(me.client_id)).await).expect("the member is known");
    assert_eq!(got.consumer_groups_count, 2);
    let mut groups: Vec<(u32, u32, u32)> = got.consumer_groups.iter().map(|g| (g.stream_id, g.topic_id, g.group_id)).collect();
    groups.sort();
    assert_eq!(groups, vec![(0, 0, 0), (0, 0, 1)], "get_client names the groups");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_options_lists_the_topic_catalog() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let specs = ok("describe topic options", within("describe", client.describe_options(OptionsScope::Topic)).await);
    let keys: Vec<&str> = specs.iter().map(|s| s.key.as_str()).collect();
    for key in ["message_expiry", "max_topic_size", "segment_size", "compression_algorithm", "partition_resize_policy"] {
        assert!(keys.contains(&key), "topic option {key:?} described: {keys:?}");
    }
    let expiry = specs.iter().find(|s| s.key == "message_expiry").unwrap();
    assert!(expiry.updatable, "message_expiry is updatable");
    let segment = specs.iter().find(|s| s.key == "segment_size").unwrap();
    assert!(!segment.updatable, "segment_size is create-only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_returns_a_zip_archive() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let snap = ok(
        "snapshot",
        within("snapshot", client.snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::Test])).await,
    );
    assert!(snap.0.len() > 22, "a zip has at least an end-of-central-directory record");
    assert_eq!(&snap.0[..2], b"PK", "zip magic");
}

/// Every snapshot type the CLI offers gets an entry: the process list (upstream's `ps`) names
/// the server's own process, and server_logs says where the log goes (stderr, never a file
/// the server keeps), instead of an archive without the entries asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_holds_the_process_list_and_says_where_the_logs_are() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let snapshot = |types: Vec<SystemSnapshotType>| client.snapshot(SnapshotCompression::Stored, types);
    let processes = ok("process_list", within("snapshot", snapshot(vec![SystemSnapshotType::ProcessList])).await).0;
    let text = String::from_utf8_lossy(&processes);
    assert!(text.contains("process_list.txt"), "a process_list entry");
    let pid = server.pid().expect("pid");
    assert!(
        text.lines().any(|line| line.split_whitespace().next() == Some(&pid.to_string()) && line.contains("iggy-server")),
        "the server's process {pid} is listed:\n{text}"
    );
    // A snapshot needs only read_servers: no process's arguments (the server's own flag here),
    // which may hold another program's password.
    assert!(!text.contains("--with-default-root-credentials"), "arguments are left out:\n{text}");
    let logs = ok("server_logs", within("snapshot", snapshot(vec![SystemSnapshotType::ServerLogs])).await).0;
    let text = String::from_utf8_lossy(&logs);
    assert!(text.contains("server_logs.txt") && text.contains("stderr"), "server_logs says where the log goes:\n{text}");
    let all = ok("all", within("snapshot", snapshot(vec![SystemSnapshotType::All])).await).0;
    let names: Vec<String> = zip_entries(&all).into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names.iter().map(String::as_str).collect::<std::collections::BTreeSet<_>>(),
        ["filesystem_overview.txt", "process_list.txt", "resource_usage.txt", "server_logs.txt", "server_config.txt"].into(),
        "all is every type but test, as the official client's all_snapshot_types"
    );
    // `all` stands alone, as upstream has it.
    let mixed = within("snapshot", snapshot(vec![SystemSnapshotType::All, SystemSnapshotType::Test])).await;
    expect_code("all with test", mixed, 3);
}

/// The archive's entries, each with its compression method (0 stored, 8 deflated), from the
/// local file headers.
fn zip_entries(archive: &[u8]) -> Vec<(String, u16)> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at + 30 <= archive.len() && archive[at..at + 4] == *b"PK\x03\x04" {
        let u16_at = |i: usize| u16::from_le_bytes([archive[at + i], archive[at + i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(archive[at + i..at + i + 4].try_into().unwrap());
        let (method, compressed, name, extra) = (u16_at(8), u32_at(18) as usize, u16_at(26) as usize, u16_at(28) as usize);
        entries.push((String::from_utf8_lossy(&archive[at + 30..at + 30 + name]).into_owned(), method));
        at += 30 + name + extra + compressed;
    }
    entries
}

/// A snapshot's entries are compressed as asked: stored for Stored, deflated for Deflated (the
/// CLI's default) and for the methods this build does not carry (Zstd here); each was stored
/// whatever was asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_compressed_as_asked() {
    let server = TestServer::start();
    let client = server.root_client().await;
    for (compression, method) in [(SnapshotCompression::Stored, 0), (SnapshotCompression::Deflated, 8), (SnapshotCompression::Zstd, 8)] {
        let archive = ok("snapshot", within("snapshot", client.snapshot(compression, vec![SystemSnapshotType::All])).await).0;
        let entries = zip_entries(&archive);
        assert_eq!(entries.len(), 5, "{compression:?}: {entries:?}");
        assert!(entries.iter().all(|(_, m)| *m == method), "{compression:?}: every entry's method is {method}: {entries:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_clients_and_stats_needs_read_servers() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create",
        within("create", root.create_user("plain", "plain-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    let root_me = ok("me", within("me", root.get_me()).await);
    let plain = server.client_as("plain", "plain-secret").await;
    let me = ok("me needs no permission", within("me", plain.get_me()).await);
    assert_eq!(me.user_id, Some(1));
    expect_code("get_clients", within("clients", plain.get_clients()).await, 41);
    expect_code("get_client", within("client", plain.get_client(root_me.client_id)).await, 41);
    expect_code("get_stats", within("stats", plain.get_stats()).await, 41);
    ok("ping needs no permission", within("ping", plain.ping()).await);
    let meta = ok("cluster metadata needs no permission", within("meta", plain.get_cluster_metadata()).await);
    assert_eq!(meta.nodes.len(), 1);
}

/// A connection whose session ended (its user deactivated or deleted, or it logged out) is
/// listed with no user: the list once went on naming the user, a deleted one too, whose id
/// the next user created then holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_session_ended_is_listed_with_no_user() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let mut connections = Vec::new();
    for user in ["quitter", "idle", "gone"] {
        ok(user, within("create", root.create_user(user, "user-secret", UserStatus::Active, None, &UserCreateOptions::default())).await);
        let client = server.client_as(user, "user-secret").await;
        let me = ok("me", within("me", client.get_me()).await);
        assert!(me.user_id.is_some(), "{user} is signed in");
        connections.push((me.client_id, client));
    }
    ok("logout", within("logout", connections[0].1.logout_user()).await);
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    ok("deactivate", within("update", root.update_user(&name("idle"), &deactivate)).await);
    ok("delete", within("delete", root.delete_user(&name("gone"))).await);

    let clients = ok("get_clients", within("clients", root.get_clients()).await);
    for (id, _) in &connections {
        let listed = clients.iter().find(|c| c.client_id == *id).expect("the connection is still open");
        assert_eq!(listed.user_id, None, "client {id}: {clients:?}");
        let got = ok("get_client", within("client", root.get_client(*id)).await).expect("known");
        assert_eq!(got.user_id, None, "client {id}");
    }
}

/// The configuration in a snapshot (which read_servers alone may take) shows no secret: the
/// HTTP token signing secrets were written out as configured, letting such a user sign access
/// tokens. The cluster secret was already shown only by its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_shows_no_token_signing_secret() {
    let secret = "jwt-signing-secret-only-the-operator-knows";
    let server = TestServer::start_with_env(&[("IGGY_HTTP_JWT_ENCODING_SECRET", secret), ("IGGY_HTTP_JWT_DECODING_SECRET", secret)]);
    let root = server.root_client().await;
    let reader = Permissions { global: GlobalPermissions { read_servers: true, ..Default::default() }, streams: None };
    ok("create", within("create", root.create_user("watcher", "watcher-secret", UserStatus::Active, Some(reader), &UserCreateOptions::default())).await);
    let watcher = server.client_as("watcher", "watcher-secret").await;
    let types = vec![SystemSnapshotType::ServerConfig];
    let archive = ok("snapshot", within("snapshot", watcher.snapshot(SnapshotCompression::Stored, types)).await).0;
    let text = String::from_utf8_lossy(&archive);
    assert!(text.contains("server_config.txt") && text.contains("encoding_secret"), "the configuration is there:\n{text}");
    assert!(!text.contains(secret), "no secret in the snapshot:\n{text}");
}
