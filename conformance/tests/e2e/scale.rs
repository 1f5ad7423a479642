//! Scale: many clients at once over every binary transport, leaving without a logout; a wide
//! topic in a cluster; a cluster of many partition groups through a node's kill -9, a restart
//! of every node and idling.
//! `SCALE_CLIENTS=N` (default 30) sets the clients per transport, `SCALE_PARTITIONS=N` (default
//! 100) the partitions of the topic a cluster creates, `SCALE_CLUSTER_TOPICS=N` (default 8) the
//! topics of 4 partitions of the kill -9 and restart tests, `SCALE_IDLE_PARTITIONS=N` (default
//! 600) those of the idle cluster; the long forms run hundreds and 1000 or more.

use crate::harness::*;
use iggy::prelude::*;

fn clients_per_transport() -> usize {
    std::env::var("SCALE_CLIENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30)
}

/// Connects and signs in through `url`, sends one message to partition 0 and polls it back
/// from its own consumer; the client is dropped without a logout.
async fn one_client(url: String, index: usize) -> Result<(), String> {
    let client = IggyClient::from_connection_string(&url).map_err(|e| e.to_string())?;
    let limit = std::time::Duration::from_secs(60);
    let step = |what: &'static str, r: Result<(), IggyError>| {
        r.map_err(|e| format!("client {index} {url}: {what}: {e} (code {})", e.as_code()))
    };
    let timed = |what: &'static str| format!("client {index} {url}: {what} timed out");
    tokio::time::timeout(limit, client.connect())
        .await
        .map_err(|_| timed("connect"))
        .and_then(|r| step("connect", r))?;
    let mut messages = vec![msg(format!("from {index}"))];
    let partitioning = Partitioning::partition_id(0);
    tokio::time::timeout(
        limit,
        client.send_messages(&name("s"), &name("t"), &partitioning, &mut messages),
    )
    .await
    .map_err(|_| timed("send"))
    .and_then(|r| step("send", r.map(|_| ())))?;
    let consumer = Consumer::new(Identifier::numeric(index as u32 + 1).unwrap());
    tokio::time::timeout(
        limit,
        client.poll_messages(
            &name("s"),
            &name("t"),
            Some(0),
            &consumer,
            &PollingStrategy::offset(0),
            10,
            false,
        ),
    )
    .await
    .map_err(|_| timed("poll"))
    .and_then(|r| {
        r.map(|_| ())
            .map_err(|e| format!("client {index}: poll: {e}"))
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_over_every_transport_at_once_are_served_and_may_leave_without_logout() {
    let ws_port = free_port();
    let ws_address = format!("127.0.0.1:{ws_port}");
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", ws_address.as_str()),
    ]);
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 1).await;
    let metadata = ok(
        "cluster metadata",
        within("metadata", admin.get_cluster_metadata()).await,
    );
    let quic_port = metadata.nodes[0].endpoints.quic;
    let per_transport = clients_per_transport();
    let urls = [
        format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", server.address()),
        format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{quic_port}"),
        format!("iggy+ws://{ROOT_USER}:{ROOT_PASSWORD}@{ws_address}"),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..per_transport * urls.len() {
        let url = urls[index % urls.len()].clone();
        tasks.spawn(one_client(url, index));
    }
    let mut failures = Vec::new();
    while let Some(result) = tasks.join_next().await {
        if let Err(failure) = result.expect("client task") {
            failures.push(failure);
        }
    }
    assert!(
        failures.is_empty(),
        "{} clients failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );

    let stats = ok("stats", within("stats", admin.get_stats()).await);
    assert_eq!(
        stats.messages_count,
        (per_transport * urls.len()) as u64,
        "every send is stored"
    );
    let late = server.root_client().await;
    ok("streams", within("streams", late.get_streams()).await);
}

/// Partitions of the wide topic a cluster creates (`SCALE_PARTITIONS`, default 100).
fn wide_topic_partitions() -> u32 {
    std::env::var("SCALE_PARTITIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_creates_a_wide_topic_and_keeps_its_metadata_primary() {
    use crate::test_cluster::{METADATA_GROUP, TestCluster};
    let cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    ok(
        "create_stream",
        within(
            "create_stream",
            client.create_stream("s", &StreamCreateOptions::default()),
        )
        .await,
    );
    let before = cluster.primary(METADATA_GROUP);
    let partitions = wide_topic_partitions();
    let topic = ok(
        "create_topic",
        within_for(
            std::time::Duration::from_secs(120),
            "create_topic",
            client.create_topic(&name("s"), "wide", &topic_options(partitions)),
        )
        .await,
    );
    assert_eq!(topic.partitions_count, partitions);
    // Every node applied the create without falling silent for a heartbeat timeout.
    assert_eq!(
        cluster.primary(METADATA_GROUP),
        before,
        "the metadata group changed views while the partitions opened"
    );
    let last = partitions - 1;
    send_to_partition(&client, &name("s"), &name("wide"), last, vec![msg("last")]).await;
    let polled = poll(
        &client,
        &name("s"),
        &name("wide"),
        last,
        &consumer("c"),
        PollingStrategy::offset(0),
        1,
        false,
    )
    .await;
    assert_eq!(payloads(&polled), ["last"]);
}

/// A metadata op whose disk effects outlast the heartbeat timeout (every node's partition opens
/// slowed past the harness's 2 s by a debug-build hook, as a slow disk or a 1000-partition topic
/// on a debug build would) keeps its group's primary and view: the replicas answer and send
/// heartbeats while the effects run, and the client gets its normal reply once the partitions
/// are open here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_its_metadata_primary_while_a_slow_create_opens_its_partitions() {
    use crate::test_cluster::{ClusterOptions, METADATA_GROUP, TestCluster};
    let options = ClusterOptions {
        env: vec![("IGGY_DEBUG_PARTITION_OPEN_DELAY_MS".to_string(), "4000".to_string())],
        ..Default::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    let before = cluster.primary(METADATA_GROUP);
    assert!(before.is_some(), "the metadata group has a primary");
    let started = std::time::Instant::now();
    let topic = ok(
        "create_topic",
        within_for(std::time::Duration::from_secs(60), "create_topic", client.create_topic(&name("s"), "slow", &topic_options(4))).await,
    );
    assert_eq!(topic.partitions_count, 4);
    assert!(started.elapsed() >= std::time::Duration::from_secs(4), "the reply waits for the partitions to open on the node that answered: {:?}", started.elapsed());
    // The client that got "created" sends to the new partitions at once.
    send_to_partition(&client, &name("s"), &name("slow"), 3, vec![msg("at once")]).await;
    let polled = poll(&client, &name("s"), &name("slow"), 3, &consumer("c"), PollingStrategy::offset(0), 1, false).await;
    assert_eq!(payloads(&polled), ["at once"]);
    // A metadata write after it commits in the same view.
    ok("create_stream", within("create_stream", client.create_stream("t", &StreamCreateOptions::default())).await);
    // Long enough for a timeout the stall started to have shown in the roles.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(cluster.primary(METADATA_GROUP), before, "the metadata group changed views while the partitions opened");
}

/// Topics of 4 partitions the many-groups cluster tests create (`SCALE_CLUSTER_TOPICS`,
/// default 8; the long form runs 100, 400 partition groups).
fn cluster_topics() -> u32 {
    std::env::var("SCALE_CLUSTER_TOPICS").ok().and_then(|n| n.parse().ok()).unwrap_or(8)
}

/// Resident KiB and open descriptors of node i, for the figures a long form prints.
fn node_figures(cluster: &crate::test_cluster::TestCluster, i: usize) -> String {
    let Some(pid) = cluster.node(i).pid() else { return format!("node {i}: down") };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).map_or("?".to_string(), |v| v.trim().to_string());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    // User and system CPU time since the process started (fields 14 and 15, in 1/100 s).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    format!("node {i}: rss {rss}, {fds} descriptors, {:.1} s of CPU", ticks as f64 / 100.0)
}

/// Sends `sends` single-message sends to each of `targets` (topic name, partition), from
/// `clients` clients at once; returns what each partition was acknowledged.
async fn send_each(cluster: &crate::test_cluster::TestCluster, node: usize, targets: &[(String, u32)], sends: usize, tag: &str) -> std::collections::BTreeMap<(String, u32), Vec<String>> {
    let clients = 4;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..clients {
        let mine: Vec<(String, u32)> = targets.iter().skip(k).step_by(clients).cloned().collect();
        let client = cluster.root_client(node).await;
        let tag = tag.to_string();
        tasks.spawn(async move {
            let mut acked = std::collections::BTreeMap::new();
            for (topic, partition) in mine {
                for n in 0..sends {
                    let payload = format!("{tag} {topic}/{partition} #{n}");
                    send_to_partition(&client, &name("s"), &name(&topic), partition, vec![msg(payload.clone())]).await;
                    acked.entry((topic.clone(), partition)).or_insert_with(Vec::new).push(payload);
                }
            }
            acked
        });
    }
    let mut acked = std::collections::BTreeMap::new();
    while let Some(part) = tasks.join_next().await {
        acked.extend(part.expect("send task"));
    }
    acked
}

/// A node killed with kill -9 while many topics are created, deleted and written comes back
/// and catches up every partition group at once (some by state transfer, their peers having
/// checkpointed past it), its segment files byte-identical to its peers', every acknowledged
/// message readable, deleted topics' files gone and their ids reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_while_many_topics_change_catches_up_every_partition() {
    use crate::test_cluster::{ClusterOptions, TestCluster, checkpoint_every, partition_group};
    let topics = cluster_topics();
    let options = ClusterOptions { env: vec![checkpoint_every(4)], ..Default::default() };
    let mut cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    let started = std::time::Instant::now();
    for t in 1..=topics {
        ok("create_topic", within_for(std::time::Duration::from_secs(60), "create_topic", client.create_topic(&name("s"), &format!("t{t}"), &topic_options(4))).await);
    }
    eprintln!("created {topics} topics of 4 partitions in {:?}", started.elapsed());
    let all: Vec<(String, u32)> = (1..=topics).flat_map(|t| (0..4).map(move |p| (format!("t{t}"), p))).collect();
    let mut expected = send_each(&cluster, 0, &all, 1, "before").await;

    cluster.kill9(2);
    // While it is down: a quarter of the topics deleted and as many created (reusing their
    // ids), every live partition written, the first two topics' past four times the checkpoint
    // policy so their peers checkpoint without it.
    let gone = (topics / 4).max(1);
    for t in 1..=gone {
        let topic = format!("t{}", topics + 1 - t);
        ok("delete_topic", within("delete_topic", client.delete_topic(&name("s"), &name(&topic))).await);
        expected.retain(|(name_, _), _| *name_ != topic);
    }
    for t in 1..=gone {
        ok("create_topic", within_for(std::time::Duration::from_secs(60), "create_topic", client.create_topic(&name("s"), &format!("n{t}"), &topic_options(4))).await);
    }
    let live: Vec<(String, u32)> = expected.keys().cloned().chain((1..=gone).flat_map(|t| (0..4).map(move |p| (format!("n{t}"), p)))).collect();
    let busy: Vec<(String, u32)> = live.iter().filter(|(t, _)| t == "t1" || t == "t2").cloned().collect();
    for (key, payloads) in send_each(&cluster, 0, &live, 1, "down").await.into_iter().chain(send_each(&cluster, 1, &busy, 20, "busy").await) {
        expected.entry(key).or_default().extend(payloads);
    }

    let restarted = std::time::Instant::now();
    cluster.restart(2);
    let files = expected.len();
    cluster.wait_identical_segments(files).await;
    eprintln!("node 2 caught up {} partitions in {:?}; {}; {}; {}", files, restarted.elapsed(), node_figures(&cluster, 0), node_figures(&cluster, 1), node_figures(&cluster, 2));
    let transfers = cluster.node(2).log().matches("state transfer from replica").count();
    assert!(transfers >= 1, "node 2 caught up the busy partitions by state transfer");
    // Every group of the stream on node 2 is Normal, and every acknowledged message is there.
    let stream_id = 0;
    let topic_ids: Vec<u32> = (0..topics).collect();
    let groups: Vec<u64> = topic_ids.iter().flat_map(|&t| (0..4).map(move |p| partition_group(stream_id, t, p))).collect();
    cluster.wait_normal(2, &groups).await;
    let reader = cluster.root_client(2).await;
    for ((topic, partition), sent) in &expected {
        let polled = poll(&reader, &name("s"), &name(topic), *partition, &consumer("c"), PollingStrategy::offset(0), 100, false).await;
        assert_eq!(&payloads(&polled), sent, "{topic}/{partition}");
    }
}

/// Every node of a cluster holding many partition groups killed with kill -9 at once and
/// started again: every group changes views at once, the cluster serves every partition again,
/// and no acknowledged message is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_cluster_restart_with_many_partition_groups_serves_every_partition_again() {
    use crate::test_cluster::{ClusterOptions, TestCluster};
    let topics = cluster_topics();
    // HTTP for the figures' replica frames dropped (`/metrics`).
    let mut cluster = TestCluster::start_with(3, ClusterOptions { http: true, ..Default::default() });
    let client = cluster.root_client(0).await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    for t in 1..=topics {
        ok("create_topic", within_for(std::time::Duration::from_secs(60), "create_topic", client.create_topic(&name("s"), &format!("t{t}"), &topic_options(4))).await);
    }
    let all: Vec<(String, u32)> = (1..=topics).flat_map(|t| (0..4).map(move |p| (format!("t{t}"), p))).collect();
    let first = std::time::Instant::now();
    let mut expected = send_each(&cluster, 0, &all, 1, "first").await;
    eprintln!("{} partitions sent to in {:?} before the restart", all.len(), first.elapsed());
    drop(client);
    for i in 0..3 {
        cluster.kill9(i);
    }
    let restarted = std::time::Instant::now();
    for i in 0..3 {
        cluster.restart(i);
    }
    // Serving again: a send to every partition is acknowledged (the SDK follows the routes).
    for (key, payloads) in send_each(&cluster, 1, &all, 1, "after").await {
        expected.entry(key).or_default().extend(payloads);
    }
    eprintln!("{} partitions served again {:?} after the restart; {}; {}; {}", all.len(), restarted.elapsed(), node_figures(&cluster, 0), node_figures(&cluster, 1), node_figures(&cluster, 2));
    let mut frames = Vec::new();
    for i in 0..3 {
        let samples = crate::metrics::scrape(&cluster.http_url(i)).await;
        let total = |name: &str| samples.iter().filter(|s| s.name == name).map(|s| s.value).sum::<f64>();
        frames.push((total("iggy_replica_frames_dropped_total"), total("iggy_replica_frames_sent_total")));
    }
    eprintln!("replica frames (dropped, sent) since the restart, per node: {frames:?}");
    let reader = cluster.root_client(2).await;
    for ((topic, partition), sent) in &expected {
        let polled = poll(&reader, &name("s"), &name(topic), *partition, &consumer("c"), PollingStrategy::offset(0), 100, false).await;
        assert_eq!(&payloads(&polled), sent, "{topic}/{partition}");
    }
    cluster.wait_identical_segments(all.len()).await;
}

/// Partitions of the topic the idle-cluster test creates (`SCALE_IDLE_PARTITIONS`, default 600;
/// the long form's 1800 has each node lead 600 groups, created in one op, so their heartbeats
/// leave in the same tick).
fn idle_partitions() -> u32 {
    std::env::var("SCALE_IDLE_PARTITIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(600)
}

/// Replica frames node i dropped so far (every peer), from its `/metrics`.
async fn frames_dropped(cluster: &crate::test_cluster::TestCluster, i: usize) -> f64 {
    crate::metrics::scrape(&cluster.http_url(i)).await.iter().filter(|s| s.name == "iggy_replica_frames_dropped_total").map(|s| s.value).sum()
}

/// An idle cluster holding many partition groups drops no replica frame and no group changes
/// its view: the heartbeats of hundreds of groups a node leads, and their answers, leave in the
/// same tick and must all fit the peer's send queue. Before, a queue of 256 frames dropped
/// them by the thousand each second (1800 partitions: some 200 view changes per node every 30 s
/// at idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_with_many_partition_groups_drops_no_replica_frame_and_keeps_its_views() {
    use crate::test_cluster::{ClusterOptions, TestCluster};
    // The operator's default timing (the harness's is 2 s), as thousands of groups ask.
    let env = [("IGGY_CLUSTER_HEARTBEAT_TIMEOUT", "5s"), ("IGGY_CLUSTER_VIEW_CHANGE_STATUS_TIMEOUT", "5s")];
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let cluster = TestCluster::start_with(3, ClusterOptions { http: true, env, ..Default::default() });
    let client = cluster.root_client(0).await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    let partitions = idle_partitions();
    let created = std::time::Instant::now();
    // Topics of at most 600 partitions: a debug build on a busy machine opens one in about as
    // many seconds as a request may take (`limits.request_timeout_ms`, 10 s).
    let mut left = partitions;
    let mut topics = 0;
    while left > 0 {
        let count = left.min(600);
        topics += 1;
        ok("create_topic", within_for(std::time::Duration::from_secs(120), "create_topic", client.create_topic(&name("s"), &format!("wide{topics}"), &topic_options(count))).await);
        // Every node opened them (the last one answers a send on its primary's route).
        send_to_partition(&client, &name("s"), &name(&format!("wide{topics}")), count - 1, vec![msg("last")]).await;
        left -= count;
    }
    eprintln!("created {topics} topics of {partitions} partitions in {:?}", created.elapsed());
    let view_changes = |i: usize| cluster.node(i).log().matches("is ViewChange").count();
    // Settled: the views the creation's hand-backs change are done (no change for 3 s).
    let mut last = (0..3).map(view_changes).collect::<Vec<_>>();
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let now = (0..3).map(view_changes).collect::<Vec<_>>();
        if now == last {
            break;
        }
        last = now;
    }
    let mut before = Vec::new();
    for i in 0..3 {
        before.push((frames_dropped(&cluster, i).await, view_changes(i)));
    }
    // Two heartbeat timeouts of idling.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    for (i, (dropped, changes)) in before.into_iter().enumerate() {
        let (dropped_after, changes_after) = (frames_dropped(&cluster, i).await, view_changes(i));
        eprintln!("node {i}: {} frames dropped, {} view changes while idle; {}", dropped_after - dropped, changes_after - changes, node_figures(&cluster, i));
        assert_eq!(dropped_after, dropped, "node {i} dropped replica frames at idle");
        assert_eq!(changes_after, changes, "node {i} changed views of groups at idle");
    }
}
