//! Ping, me, stats, cluster metadata.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_succeeds_after_login() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("ping", within("ping", client.ping()).await);
    ok("second ping", within("ping", client.ping()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_succeeds_before_login() {
    let server = TestServer::start();
    let client = server.anonymous_client().await;
    ok("ping before login", within("ping", client.ping()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn me_reports_root_user_over_tcp_with_no_groups() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let me = ok("get_me", within("get_me", client.get_me()).await);
    assert_eq!(me.user_id, Some(DEFAULT_ROOT_USER_ID), "me.user_id");
    assert_eq!(me.transport, "TCP", "me.transport");
    assert!(
        me.address.starts_with("127.0.0.1:"),
        "me.address should be the client's peer address, got {:?}",
        me.address
    );
    assert_eq!(me.consumer_groups_count, 0, "me.consumer_groups_count");
    assert!(me.consumer_groups.is_empty(), "me.consumer_groups");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_metadata_lists_one_healthy_leader_with_the_tcp_port() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let meta = ok("get_cluster_metadata", within("metadata", client.get_cluster_metadata()).await);
    assert_eq!(meta.nodes.len(), 1, "one node: {meta:?}");
    let node = &meta.nodes[0];
    assert_eq!(node.role, ClusterNodeRole::Leader, "role");
    assert_eq!(node.status, ClusterNodeStatus::Healthy, "status");
    assert_eq!(node.endpoints.tcp, server.port(), "advertised tcp port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_streams_topics_partitions_and_messages() {
    let server = TestServer::start();
    let client = server.root_client().await;

    let empty = ok("get_stats (empty)", within("stats", client.get_stats()).await);
    assert_eq!(empty.streams_count, 0, "streams_count on an empty server");
    assert_eq!(empty.topics_count, 0, "topics_count on an empty server");
    assert_eq!(empty.partitions_count, 0, "partitions_count on an empty server");
    assert_eq!(empty.messages_count, 0, "messages_count on an empty server");
    assert_eq!(empty.consumer_groups_count, 0, "consumer_groups_count on an empty server");
    assert_eq!(empty.process_id, server.pid().unwrap(), "process_id is the server's pid");
    assert!(empty.clients_count >= 1, "clients_count counts this client: {}", empty.clients_count);
    let (free, total) = (empty.free_disk_space.as_bytes_u64(), empty.total_disk_space.as_bytes_u64());
    assert!(total > 0, "total_disk_space of the data directory's filesystem is measured");
    assert!(free <= total, "free_disk_space {free} <= total_disk_space {total}");
    assert!((0.0..=100.0).contains(&empty.total_cpu_usage), "total_cpu_usage {}", empty.total_cpu_usage);
    assert!(empty.cpu_usage >= 0.0 && empty.cpu_usage.is_finite(), "cpu_usage {}", empty.cpu_usage);

    create_stream_and_topic(&client, "s1", "t1", 3).await;
    create_stream_and_topic(&client, "s2", "t2", 2).await;
    ok(
        "create second topic",
        within("create_topic", client.create_topic(&name("s2"), "t3", &topic_options(1))).await,
    );
    send_to_partition(&client, &name("s1"), &name("t1"), 0, msgs("m", 4)).await;
    send_to_partition(&client, &name("s2"), &name("t3"), 0, msgs("m", 3)).await;
    ok(
        "create group",
        within("cg", client.create_consumer_group(&name("s1"), &name("t1"), "g")).await,
    );

    let stats = ok("get_stats", within("stats", client.get_stats()).await);
    assert_eq!(stats.streams_count, 2, "streams_count");
    assert_eq!(stats.topics_count, 3, "topics_count");
    assert_eq!(stats.partitions_count, 6, "partitions_count");
    assert_eq!(stats.messages_count, 7, "messages_count");
    assert_eq!(stats.consumer_groups_count, 1, "consumer_groups_count");
    // The release as the official client compares versions (it was always absent).
    let release: iggy_common::SemanticVersion = stats.iggy_server_version.parse().unwrap();
    assert_eq!(stats.iggy_server_semver, Some(release.get_numeric_version().unwrap()));
}

/// `start_time` is when the process started: every stats reply of one process gives the same
/// value (a monitor compares it to tell a restart), over the binary protocol and over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_give_one_start_time_per_process() {
    let (server, api) = TestServer::start_with_http(&[]);
    let tcp = server.root_client().await;
    let http = IggyClient::builder().with_http().with_api_url(api).build().expect("http client");
    ok("login", within("login", http.login_user(ROOT_USER, ROOT_PASSWORD)).await);
    let mut start_times = std::collections::BTreeSet::new();
    for _ in 0..20 {
        for client in [&tcp, &http] {
            let stats = ok("get_stats", within("stats", client.get_stats()).await);
            start_times.insert(stats.start_time.as_micros());
        }
    }
    assert_eq!(start_times.len(), 1, "start times: {start_times:?}");
}

/// The server's disk writes as `/proc/<pid>/io` counts them.
fn process_write_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("read /proc/<pid>/io");
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("write_bytes in /proc/<pid>/io")
}

/// written_bytes is what the process wrote to disk, as read_bytes is what it read and as
/// upstream reports both (the process's disk I/O); the messages' size has its own field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_written_bytes_are_the_process_disk_writes() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 5)).await;
    let pid = server.pid().expect("server pid");
    let before = process_write_bytes(pid);
    let stats = ok("get_stats", within("stats", client.get_stats()).await);
    let after = process_write_bytes(pid);
    let written = stats.written_bytes.as_bytes_u64();
    assert!(
        (before..=after).contains(&written),
        "written_bytes {written} within the process's write_bytes {before}..={after} (messages_size_bytes {})",
        stats.messages_size_bytes
    );
}
