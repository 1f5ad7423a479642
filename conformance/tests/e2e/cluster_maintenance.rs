//! Data maintenance on a 3-node cluster as an operator runs it: message expiry, segment
//! deletion, partitions deleted and added again, through a kill -9 of a partition's primary and
//! a restart of the whole cluster. Nothing retired comes back on any replica, every replica
//! serves the same offsets from its own copy, and their segment files end byte-identical.

use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

const PAYLOAD: usize = 200 * 1024; // six messages fill a 1 MiB segment

/// A cluster whose nodes run a maintenance pass every 100 ms, HTTP on (node-local reads).
fn fast_maintenance_cluster() -> TestCluster {
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS".to_string(), "100".to_string())],
        http: true,
        ..ClusterOptions::default()
    };
    TestCluster::start_with(3, options)
}

/// Stream `stream`, topic "t" of `partitions` partitions with 1 MiB segments and `expiry`.
async fn topic_of_small_segments(client: &IggyClient, stream: &str, partitions: u32, expiry: IggyExpiry) -> (u32, u32) {
    let created = ok("create stream", within("create", client.create_stream(stream, &StreamCreateOptions::default())).await);
    let options = TopicCreateOptions {
        partitions_count: Some(partitions),
        segment_size: Some(IggyByteSize::from(1024 * 1024)),
        message_expiry: Some(expiry),
        ..Default::default()
    };
    let topic = ok("create topic", within("create", client.create_topic(&name(stream), "t", &options)).await);
    (created.id, topic.id)
}

/// Sends one message of PAYLOAD bytes per request to `partition`, filled with its number.
async fn send_big(client: &IggyClient, stream: &Identifier, topic: &Identifier, partition: u32, fills: Range<u8>) {
    for fill in fills {
        send_to_partition(client, stream, topic, partition, vec![msg(vec![fill; PAYLOAD])]).await;
    }
}

/// The offsets node `node` serves of `partition` from its own copy (an HTTP client given that
/// node only), from the first.
async fn served_by(cluster: &TestCluster, node: usize, stream: &Identifier, topic: &Identifier, partition: u32) -> Vec<u64> {
    let reader = cluster.http_root_client(node).await;
    let polled = poll(&reader, stream, topic, partition, &consumer("reader"), PollingStrategy::first(), 1000, false).await;
    offsets(&polled)
}

/// Waits until every node serves exactly `expected` of `partition` from its own copy.
async fn every_node_serves(cluster: &TestCluster, stream: &Identifier, topic: &Identifier, partition: u32, expected: Range<u64>) {
    let expected: Vec<u64> = expected.collect();
    let mut last = Vec::new();
    for _ in 0..100 {
        last.clear();
        for node in 0..cluster.len() {
            last.push(served_by(cluster, node, stream, topic, partition).await);
        }
        if last.iter().all(|served| *served == expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("every node serves {expected:?} of partition {partition}: they serve {last:?}");
}

/// The segment `.log` file names under node `node`'s data directory.
fn segment_names(cluster: &TestCluster, node: usize) -> Vec<String> {
    cluster.segment_logs(node).keys().filter_map(|path| path.file_name()?.to_str().map(str::to_string)).collect()
}

/// Expiry retires the closed segments of a 2 s topic on every replica; a consumer offset stored
/// before points below the first kept offset and its next poll starts there. Neither a kill -9
/// of the partition's primary nor a restart of the whole cluster brings a retired segment back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_segments_stay_retired_on_every_replica_through_kill9_and_a_whole_cluster_restart() {
    let mut cluster = fast_maintenance_cluster();
    let client = cluster.root_client(0).await;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(2)));
    let (stream, topic) = topic_of_small_segments(&client, "x", 1, expiry).await;
    let group = partition_group(stream, topic, 0);
    let (s, t) = (id(stream), id(topic));
    send_big(&client, &s, &t, 0, 0..14).await;
    ok("store offset 3", within("store", client.store_consumer_offset(&consumer("c"), &s, &t, Some(0), 3)).await);
    every_node_serves(&cluster, &s, &t, 0, 12..14).await;
    let segments = cluster.wait_identical_segments(1).await;
    assert_eq!(segments.len(), 1, "the active segment only: {:?}", segments.keys());
    let stored = ok("get offset", within("get", client.get_consumer_offset(&consumer("c"), &s, &t, Some(0))).await).expect("stored");
    eprintln!("after expiry: stored {} current {}", stored.stored_offset, stored.current_offset);
    let next = poll(&client, &s, &t, 0, &consumer("c"), PollingStrategy::next(), 10, false).await;
    assert_eq!(offsets(&next), vec![12, 13], "the next poll of a consumer whose offset expired");

    let (primary, view) = cluster.primary(group).expect("a partition primary");
    cluster.kill9(usize::from(primary));
    cluster.wait_new_primary(group, usize::from(primary), view).await;
    let client = cluster.root_client((usize::from(primary) + 1) % 3).await;
    send_big(&client, &s, &t, 0, 14..16).await;
    cluster.restart(usize::from(primary));
    every_node_serves(&cluster, &s, &t, 0, 12..16).await;
    drop(client);

    for node in 0..3 {
        cluster.stop(node);
    }
    for node in 0..3 {
        cluster.restart(node);
    }
    every_node_serves(&cluster, &s, &t, 0, 12..16).await;
    let segments = cluster.wait_identical_segments(1).await;
    for node in 0..3 {
        assert_eq!(segment_names(&cluster, node), vec![format!("{:020}.log", 12)], "node {node}: {:?}", segments.keys());
    }
    let client = cluster.root_client(1).await;
    let stored = ok("get offset", within("get", client.get_consumer_offset(&consumer("c"), &s, &t, Some(0))).await).expect("stored");
    assert_eq!(stored.stored_offset, 3, "the stored offset stays as stored");
    // Retention goes on after the failover and the restart, planned by whichever node leads.
    send_big(&client, &s, &t, 0, 16..26).await;
    every_node_serves(&cluster, &s, &t, 0, 24..26).await;
    cluster.wait_identical_segments(1).await;
}

/// The payload of message `n` of `partition` under load: its name, then filler to 64 KiB.
fn numbered(partition: u32, n: u32) -> Vec<u8> {
    let mut payload = format!("p{partition}-{n}:").into_bytes();
    payload.resize(64 * 1024, b'.');
    payload
}

/// The name a `numbered` payload starts with.
fn name_of(payload: &[u8]) -> String {
    let end = payload.iter().position(|&b| b == b':').unwrap_or(payload.len());
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

/// What a producer task got: the acknowledged messages as (offset, name), and the failures.
type Produced = (Vec<(u64, String)>, Vec<String>);

/// Sends `numbered` messages to `partition`, one per request, until `stop`; the acknowledged
/// ones as (offset, name), and the failures.
fn produce(client: std::sync::Arc<IggyClient>, stream: u32, topic: u32, partition: u32, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<Produced> {
    tokio::spawn(async move {
        let (s, t) = (id(stream), id(topic));
        let (mut acked, mut failed) = (Vec::new(), Vec::new());
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mut batch = vec![msg(numbered(partition, n))];
            let sent = tokio::time::timeout(Duration::from_secs(40), client.send_messages(&s, &t, &Partitioning::partition_id(partition), &mut batch)).await;
            match sent {
                Ok(Ok(reply)) => match reply.confirmations.first() {
                    Some(confirmation) => acked.push((confirmation.base_offset, format!("p{partition}-{n}"))),
                    None => failed.push(format!("p{partition}-{n}: no confirmation")),
                },
                Ok(Err(e)) => failed.push(format!("p{partition}-{n}: {e} ({})", e.as_code())),
                Err(_) => failed.push(format!("p{partition}-{n}: hung")),
            }
            n += 1;
        }
        (acked, failed)
    })
}

/// What node `node` serves of `partition` from its own copy: (offset, name) from the first.
async fn served_names(cluster: &TestCluster, node: usize, stream: &Identifier, topic: &Identifier, partition: u32) -> Vec<(u64, String)> {
    let reader = cluster.http_root_client(node).await;
    let mut out = Vec::new();
    let mut strategy = PollingStrategy::first();
    loop {
        let polled = poll(&reader, stream, topic, partition, &consumer("reader"), strategy, 100, false).await;
        let Some(last) = polled.messages.last().map(|m| m.header.offset) else { break };
        out.extend(polled.messages.iter().map(|m| (m.header.offset, name_of(&m.payload))));
        strategy = PollingStrategy::offset(last + 1);
    }
    out
}

/// Checks that every node serves the same messages of `partition`, contiguous from the first
/// kept offset, holding every acknowledged message at or above it under its offset.
async fn every_node_serves_the_acknowledged(cluster: &TestCluster, stream: &Identifier, topic: &Identifier, partition: u32, acked: &[(u64, String)]) -> u64 {
    let mut served = Vec::new();
    for _ in 0..50 {
        served.clear();
        for node in 0..cluster.len() {
            served.push(served_names(cluster, node, stream, topic, partition).await);
        }
        if served.iter().all(|s| *s == served[0]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (node, s) in served.iter().enumerate() {
        assert_eq!(*s, served[0], "node {node} serves what node 0 does of partition {partition}");
    }
    let kept = &served[0];
    let first = kept.first().map(|(offset, _)| *offset).expect("a message kept");
    for (i, (offset, _)) in kept.iter().enumerate() {
        assert_eq!(*offset, first + i as u64, "partition {partition}: contiguous offsets");
    }
    for (offset, name) in acked.iter().filter(|(offset, _)| *offset >= first) {
        let at = (offset - first) as usize;
        assert_eq!(kept.get(at).map(|(_, n)| n), Some(name), "partition {partition}: acknowledged {name} at offset {offset}");
    }
    let newest = acked.iter().map(|(offset, _)| *offset).max().unwrap_or(0);
    assert!(kept.last().unwrap().0 >= newest, "partition {partition}: the newest acknowledged offset {newest} is kept");
    first
}

/// Size retention (2 MiB per partition, 1 MiB segments) under a paced load on two partitions
/// through a SIGTERM of one partition's primary, a kill -9 of the other's and a kill -9 of the
/// whole cluster: every acknowledged message retention did not reach is kept, every node
/// serves the same messages, and the segment files end byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_retention_under_load_through_failovers_keeps_the_replicas_identical() {
    let mut cluster = fast_maintenance_cluster();
    let client = cluster.root_client(0).await;
    let created = ok("create stream", within("create", client.create_stream("load", &StreamCreateOptions::default())).await);
    let options = TopicCreateOptions {
        partitions_count: Some(2),
        segment_size: Some(IggyByteSize::from(1024 * 1024)),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(4 * 1024 * 1024))),
        ..Default::default()
    };
    let topic = ok("create topic", within("create", client.create_topic(&name("load"), "t", &options)).await);
    let (stream, topic) = (created.id, topic.id);
    let (s, t) = (id(stream), id(topic));
    let shared = std::sync::Arc::new(client);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers: Vec<_> = (0..2).map(|p| produce(shared.clone(), stream, topic, p, stop.clone())).collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let group0 = partition_group(stream, topic, 0);
    let (primary0, view0) = cluster.primary(group0).expect("a primary");
    cluster.stop(usize::from(primary0));
    cluster.wait_new_primary(group0, usize::from(primary0), view0).await;
    cluster.restart(usize::from(primary0));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let group1 = partition_group(stream, topic, 1);
    let (primary1, view1) = cluster.primary(group1).expect("a primary");
    cluster.kill9(usize::from(primary1));
    cluster.wait_new_primary(group1, usize::from(primary1), view1).await;
    cluster.restart(usize::from(primary1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut acked = Vec::new();
    for (p, producer) in producers.into_iter().enumerate() {
        let (a, failed) = within_for(Duration::from_secs(60), "producer stops", producer).await.expect("producer");
        eprintln!("partition {p}: {} acknowledged, {} failed: {:?}", a.len(), failed.len(), failed.iter().take(5).collect::<Vec<_>>());
        acked.push(a);
    }
    drop(shared);
    let mut firsts = Vec::new();
    for p in 0..2 {
        firsts.push(every_node_serves_the_acknowledged(&cluster, &s, &t, p, &acked[p as usize]).await);
    }
    eprintln!("first kept offsets {firsts:?}");
    assert!(firsts.iter().all(|&f| f > 0), "retention ran on both partitions: {firsts:?}");
    let before = cluster.wait_identical_segments(4).await;
    for node in 0..3 {
        cluster.kill9(node);
    }
    for node in 0..3 {
        cluster.restart(node);
    }
    for p in 0..2 {
        let first = every_node_serves_the_acknowledged(&cluster, &s, &t, p, &acked[p as usize]).await;
        assert!(first >= firsts[p as usize], "partition {p}: nothing retired comes back ({first} < {})", firsts[p as usize]);
    }
    let after = cluster.wait_identical_segments(4).await;
    let names = |m: &std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    eprintln!("segments before {:?}\nafter {:?}", names(&before), names(&after));
    for path in after.keys() {
        assert!(before.contains_key(path) || !before.keys().any(|b| b.parent() == path.parent() && b > path), "no retired segment comes back: {path:?}");
    }
}

/// A backup holding offsets 0..14 (segments 0, 6, and 12 active) goes down; DeleteSegments
/// retires 0..12, which every replica holds, so nothing holds it back; the group then
/// checkpoints past the backup, which comes back and catches up by state transfer from where
/// its log ends (14, which the others still hold). The segments the group retired must not stay
/// on it: every replica ends with the same segment files, from 12, and it serves from 12.
/// Before, it copied on from 14 and kept 0..12: it served them, and its segment files differed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_caught_up_by_state_transfer_drops_the_segments_the_group_retired_while_it_was_down() {
    let options = ClusterOptions { env: vec![checkpoint_every(8)], http: true, ..ClusterOptions::default() };
    let mut cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    let (stream, topic) = topic_of_small_segments(&client, "d", 1, IggyExpiry::NeverExpire).await;
    let group = partition_group(stream, topic, 0);
    let (s, t) = (id(stream), id(topic));
    send_big(&client, &s, &t, 0, 0..14).await;
    // Small ones after, so the backup's own checkpoint (every 8 ops) lies past offset 14.
    for n in 0..16u32 {
        send_to_partition(&client, &s, &t, 0, vec![msg(format!("before-{n}"))]).await;
    }
    cluster.wait_identical_segments(3).await;
    let (primary, _) = cluster.primary(group).expect("a partition primary");
    let laggard = (usize::from(primary) + 1) % 3;
    // Applied, not only written: a backup's commit trails its log by a heartbeat, and a laggard
    // that had applied less restarts with its log ending below 12 (the path of a laggard wholly
    // behind the retired offsets), not the one this test covers.
    let (st, tt) = (stream.to_string(), topic.to_string());
    let labels = [("group", "partition"), ("stream", st.as_str()), ("topic", tt.as_str()), ("partition", "0")];
    wait_until_async(
        &format!("node {laggard} applied every op of the partition"),
        Duration::from_secs(30),
        async || {
            let applied = |samples: &[crate::metrics::Sample]| crate::metrics::value(samples, "iggy_vsr_applied", &labels);
            let on_primary = applied(&crate::metrics::scrape(&cluster.http_url(usize::from(primary))).await);
            let on_laggard = applied(&crate::metrics::scrape(&cluster.http_url(laggard)).await);
            (on_laggard >= on_primary).then_some(())
        },
        || cluster.describe(group),
    )
    .await;
    cluster.kill9(laggard);
    let client = cluster.root_client((laggard + 1) % 3).await;
    ok("delete 2 segments", within("delete", client.delete_segments(&s, &t, 0, 2)).await);
    for n in 0..64u32 {
        send_to_partition(&client, &s, &t, 0, vec![msg(format!("small-{n}"))]).await;
    }
    let left_behind = format!("leaves replicas [{laggard}] behind");
    wait_until(
        &format!("the group checkpoints past node {laggard}"),
        Duration::from_secs(30),
        || (0..3).filter(|&i| i != laggard).any(|i| current_start(&cluster.node(i).log()).contains(&left_behind)).then_some(()),
        || cluster.describe(group),
    )
    .await;
    // The primary's queue for the laggard still holds the prepares it missed: a restart of the
    // primary drops it, so the laggard has only the checkpoint to catch up from.
    let (primary, _) = cluster.primary(group).expect("a partition primary");
    cluster.kill9(usize::from(primary));
    cluster.restart(usize::from(primary));
    cluster.restart(laggard);
    wait_until(
        &format!("node {laggard} catches up by state transfer"),
        Duration::from_secs(40),
        || current_start(&cluster.node(laggard).log()).contains(&format!("group {group:#x}: state transfer from replica")).then_some(()),
        || cluster.describe(group),
    )
    .await;
    let log = cluster.node(laggard).log();
    assert!(current_start(&log).contains("which this replica's log still held; deleted here"), "the laggard continued from its log's end (its checkpoint lies past 12):\n{}", current_start(&log));
    every_node_serves(&cluster, &s, &t, 0, 12..94).await;
    let segments = cluster.wait_identical_segments(1).await;
    let names: Vec<String> = segments.keys().filter_map(|path| path.file_name()?.to_str().map(str::to_string)).collect();
    assert_eq!(names.first(), Some(&format!("{:020}.log", 12)), "every node holds the segments from 12 on: {names:?}");
}

/// A consumer group's offset that expiry passed: it stays as stored, and the group's next poll
/// starts at the first kept offset, then goes on from what it committed, through a kill -9 of
/// the partition's primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_whose_offset_expired_polls_on_from_the_first_kept_offset() {
    let mut cluster = fast_maintenance_cluster();
    let client = cluster.root_client(0).await;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(2)));
    let (stream, topic) = topic_of_small_segments(&client, "cg", 1, expiry).await;
    let group_id = partition_group(stream, topic, 0);
    let (s, t) = (id(stream), id(topic));
    ok("create group", within("create group", client.create_consumer_group(&s, &t, "g")).await);
    ok("join", within("join", client.join_consumer_group(&s, &t, &name("g"))).await);
    let as_group = Consumer::group(name("g"));
    let poll_next = async |client: &IggyClient, count| {
        let polled = within("poll", client.poll_messages(&s, &t, None, &as_group, &PollingStrategy::next(), count, true)).await;
        offsets(&ok("poll as the group", polled))
    };
    send_big(&client, &s, &t, 0, 0..14).await;
    assert_eq!(poll_next(&client, 3).await, vec![0, 1, 2]);
    every_node_serves(&cluster, &s, &t, 0, 12..14).await;
    let stored = ok("get offset", within("get", client.get_consumer_offset(&as_group, &s, &t, Some(0))).await).expect("stored");
    assert_eq!(stored.stored_offset, 2, "the group's offset stays as stored");
    assert_eq!(poll_next(&client, 10).await, vec![12, 13], "the next poll starts at the first kept offset");

    let (primary, view) = cluster.primary(group_id).expect("a partition primary");
    cluster.kill9(usize::from(primary));
    cluster.wait_new_primary(group_id, usize::from(primary), view).await;
    cluster.restart(usize::from(primary));
    assert_eq!(poll_next(&client, 10).await, Vec::<u64>::new(), "nothing after what it committed");
    send_to_partition(&client, &s, &t, 0, vec![msg("after")]).await;
    assert_eq!(poll_next(&client, 10).await, vec![14]);
}

/// A cluster node whose `system.segment_size` no topic can record (upstream's "100 MB" text:
/// 10^8 bytes, not a multiple of 512) says at start that it must be the same on every node: a
/// topic created with it is cut by each replica's own setting, and nodes configured apart cut
/// different segments (reported: one node served offsets the others had retired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_size_no_topic_records_is_named_at_start_as_one_to_keep_alike() {
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_SEGMENT_SIZE".to_string(), "100 MB".to_string())],
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    for i in 0..cluster.len() {
        let log = cluster.node(i).log();
        assert!(
            log.contains("system.segment_size is 100000000 bytes, which a topic cannot record")
                && log.contains("so it must be the same on every node")
                && log.contains("e.g. 99999744"),
            "node {i} warns of its segment size:\n{log}"
        );
    }
}

/// A topic created with the server's segment size on nodes whose `system.segment_size`
/// differs (a rolling change of it, one file edited before the others): every replica cuts its
/// segments at the same offsets (the metadata primary's size, pinned in the create), so a
/// segment deletion retires the same messages everywhere. Each replica once cut at its own size
/// and deleted whole segments below the primary's offset: the node of 2 MiB segments went on
/// serving offsets the others had retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_configured_with_different_segment_sizes_cut_and_retire_the_same_segments() {
    let size = |bytes: u32| vec![("IGGY_SYSTEM_SEGMENT_SIZE".to_string(), bytes.to_string())];
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS".to_string(), "100".to_string())],
        node_env: [(0, size(1 << 20)), (1, size(1 << 20)), (2, size(2 << 20))].into_iter().collect(),
        http: true,
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    let created = ok("create stream", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    let topic = ok("create topic", within("create", client.create_topic(&name("s"), "t", &options)).await);
    let (stream, topic) = (id(created.id), id(topic.id));
    // The metadata primary's size is the topic's: six messages fill 1 MiB, twelve 2 MiB.
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let per_segment: u64 = if metadata_primary == 2 { 12 } else { 6 };
    send_big(&client, &stream, &topic, 0, 0..24).await;
    let files = cluster.wait_identical_segments((24 / per_segment) as usize).await;
    let second = format!("{per_segment:020}.log");
    assert!(files.keys().any(|path| path.ends_with(&second)), "segments of {per_segment} messages: {:?}", files.keys().collect::<Vec<_>>());

    ok("delete segments", within("delete", client.delete_segments(&stream, &topic, 0, 1)).await);
    every_node_serves(&cluster, &stream, &topic, 0, per_segment..24).await;
    cluster.wait_identical_segments((24 / per_segment - 1) as usize).await;
}

/// `support/skewed_clock.c` built as a library to preload into a node (`LD_PRELOAD`): its wall
/// clock reads `IGGY_TEST_CLOCK_SKEW_SECS` seconds ahead.
pub(crate) fn skewed_clock_library() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/support/skewed_clock.c");
            // Built beside the test binaries, under one name: each process builds its own copy
            // and renames it over the last (a loaded copy lives on), so none is left behind.
            let directory = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            let building = directory.join(format!("skewed-clock-{}.so", std::process::id()));
            let built = std::process::Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&building).arg(&source).arg("-ldl").output().expect("run cc");
            assert!(built.status.success(), "cc {}: {}", source.display(), String::from_utf8_lossy(&built.stderr));
            let library = directory.join("skewed-clock.so");
            std::fs::rename(&building, &library).expect("rename the built library into place");
            library
        })
        .clone()
}

/// The environment that starts a node with its wall clock `secs` seconds off (ahead when
/// positive), through `skewed_clock_library`.
fn skewed_clock(secs: i64) -> Vec<(String, String)> {
    let library = skewed_clock_library().to_str().expect("a UTF-8 path").to_string();
    vec![("LD_PRELOAD".to_string(), library), ("IGGY_TEST_CLOCK_SKEW_SECS".to_string(), secs.to_string())]
}

/// A partition's primary dies and the replica that takes over has a wall clock an hour ahead
/// (a VM resumed from a snapshot, a bad NTP step): its retention passes judge the topic's 30
/// minute expiry by the time a quorum of the replicas' clocks reached (learned from the replica
/// links' Pings and Pongs), not by its own, so nothing acknowledged expires early on any node.
/// It once retired every closed segment of messages a minute old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_clock_is_an_hour_ahead_expires_nothing_early() {
    let mut cluster = fast_maintenance_cluster();
    let client = cluster.root_client(0).await;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(1800)));
    let (stream, topic) = topic_of_small_segments(&client, "x", 1, expiry).await;
    let group = partition_group(stream, topic, 0);
    let (s, t) = (id(stream), id(topic));
    send_big(&client, &s, &t, 0, 0..14).await;
    every_node_serves(&cluster, &s, &t, 0, 0..14).await;
    // The replica that leads the next view restarts an hour ahead.
    let (primary, view) = cluster.primary(group).expect("a partition primary");
    let (primary, ahead) = (usize::from(primary), (usize::from(primary) + 1) % 3);
    for (key, value) in skewed_clock(3600) {
        cluster.nodes[ahead].set_env(&key, Some(&value));
    }
    cluster.stop(ahead);
    cluster.restart(ahead);
    cluster.wait_normal(ahead, &[group]).await;
    cluster.kill9(primary);
    let new = cluster.wait_new_primary(group, primary, view).await;
    assert_eq!(usize::from(new), ahead, "the replica an hour ahead leads the partition now");
    // Thirty retention passes of the new primary.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart(primary);
    every_node_serves(&cluster, &s, &t, 0, 0..14).await;
    let log = cluster.node(ahead).log();
    assert!(crate::test_cluster::current_start(&log).contains("serving"), "{log}");
}

/// The wall clock of a running node that leads the metadata group and a partition steps an
/// hour ahead (a VM resumed from a snapshot, a bad NTP step), with the clocks agreeing before:
/// its retention passes still judge the topic's 30-minute expiry, and its token cleaning an
/// hour's token, by the peers' clocks, and the messages it is sent at the step are stamped with
/// their time. The peers' clocks were once estimated as offsets from this node's own, so they
/// stepped with it until their next Pongs: in that gap every closed segment was retired on
/// every node, the tokens deleted, and the partition's messages stamped an hour ahead (stamps
/// never go back, so its later ones too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_primary_whose_clock_steps_an_hour_ahead_expires_and_stamps_nothing_by_it() {
    let skews = tempfile::tempdir().expect("a directory for the clock skews");
    let library = skewed_clock_library().to_str().expect("a UTF-8 path").to_string();
    let skew = |node: usize| skews.path().join(format!("skew-{node}"));
    let mut node_env = BTreeMap::new();
    for node in 0..3 {
        std::fs::write(skew(node), "0").expect("write a skew");
        let file = skew(node).to_str().expect("a UTF-8 path").to_string();
        node_env.insert(node, vec![("LD_PRELOAD".to_string(), library.clone()), ("IGGY_TEST_CLOCK_SKEW_FILE".to_string(), file)]);
    }
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS".to_string(), "100".to_string())],
        node_env,
        http: true,
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let (stepped, _) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let client = cluster.root_client(stepped).await;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(1800)));
    let (stream, topic) = topic_of_small_segments(&client, "x", 3, expiry).await;
    let (s, t) = (id(stream), id(topic));
    // The partition the metadata primary leads (new partitions spread their primaries).
    let led = |p: &u32| cluster.primary(partition_group(stream, topic, *p)).is_some_and(|(primary, _)| usize::from(primary) == stepped);
    let partition = wait_until("a partition led by the metadata primary", Duration::from_secs(30), || (0..3).find(led), || cluster.describe(METADATA_GROUP)).await;
    let hour = PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(3600)));
    ok("create token", within("create token", client.create_personal_access_token("hour", hour)).await);
    send_big(&client, &s, &t, partition, 0..14).await;
    every_node_serves(&cluster, &s, &t, partition, 0..14).await;
    std::fs::write(skew(stepped), "3600").expect("step the clock");
    tokio::time::sleep(Duration::from_millis(50)).await;
    send_big(&client, &s, &t, partition, 14..16).await;
    // Thirty retention passes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    every_node_serves(&cluster, &s, &t, partition, 0..16).await;
    let tokens = ok("list tokens", within("list tokens", client.get_personal_access_tokens()).await);
    assert!(tokens.iter().any(|token| token.name == "hour"), "the hour's token is kept: {tokens:?}");
    let polled = poll(&client, &s, &t, partition, &consumer("c"), PollingStrategy::offset(14), 2, false).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    for message in &polled.messages {
        let stamped = message.header.timestamp;
        assert!(stamped < now + 60_000_000, "offset {} stamped {}s ahead", message.header.offset, (stamped - now) / 1_000_000);
    }
    let log = cluster.node(stepped).log();
    assert!(log.contains("this node's clock is 3600"), "the stepped node says its clock is off: {log}");
}

/// A partition's primary whose wall clock is an hour behind stamps the messages it is sent with
/// the time a quorum of the replicas' clocks reached, not with its own, and says its clock is
/// off; so once it dies, the replica with a good clock that leads next expires nothing early
/// (30-minute expiry). Stamped an hour in the past, every closed segment was once retired at
/// the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_to_a_primary_whose_clock_is_an_hour_behind_do_not_expire_early() {
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS".to_string(), "100".to_string())],
        node_env: [(0, skewed_clock(-3600))].into_iter().collect(),
        http: true,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start_with(3, options);
    let behind = "this node's clock is 3600";
    wait_until("node 0 finds its clock behind", Duration::from_secs(30), || cluster.node(0).log().contains(behind).then_some(()), || cluster.node(0).log()).await;
    let client = cluster.root_client(1).await;
    let expiry = IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(1800)));
    let (stream, topic) = topic_of_small_segments(&client, "x", 3, expiry).await;
    let (s, t) = (id(stream), id(topic));
    // The partition node 0 leads (new partitions spread their primaries over the nodes).
    let (partition, group, view) = (0..3)
        .map(|p| (p, partition_group(stream, topic, p)))
        .find_map(|(p, g)| cluster.primary(g).filter(|(primary, _)| *primary == 0).map(|(_, v)| (p, g, v)))
        .expect("a partition led by node 0");
    send_big(&client, &s, &t, partition, 0..14).await;
    every_node_serves(&cluster, &s, &t, partition, 0..14).await;
    let polled = poll(&client, &s, &t, partition, &consumer("c"), PollingStrategy::first(), 1, false).await;
    let stamped = polled.messages[0].header.timestamp;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    assert!(now.abs_diff(stamped) < 60_000_000, "stamped {stamped}, now {now}: {}s apart", now.abs_diff(stamped) / 1_000_000);
    cluster.kill9(0);
    cluster.wait_new_primary(group, 0, view).await;
    // Thirty retention passes of the new primary.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart(0);
    every_node_serves(&cluster, &s, &t, partition, 0..14).await;
}

/// Personal access tokens in a cluster whose node 0 runs an hour behind and node 1 an hour
/// ahead (node 2 and the quorum's time are right): a 30-minute token created through any node
/// expires 30 minutes from the quorum's time, and signs in on every node, the one ahead
/// included. A token's expiry was once the receiving node's own clock plus its duration (so a
/// token made through node 0 was born expired on every node), and a login judged it by the
/// node's own clock (node 1 refused every 30-minute token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_access_tokens_expire_by_the_replicas_clocks_not_by_one_nodes() {
    let options = ClusterOptions {
        node_env: [(0, skewed_clock(-3600)), (1, skewed_clock(3600))].into_iter().collect(),
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    for (node, says) in [(0, "this node's clock is 3600"), (1, "this node's clock is 3600")] {
        wait_until("the skewed node finds its clock off", Duration::from_secs(30), || cluster.node(node).log().contains(says).then_some(()), || cluster.node(node).log()).await;
    }
    let half_hour = PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(1800)));
    let mut tokens = Vec::new();
    for through in 0..3 {
        let root = cluster.root_client(through).await;
        let before = IggyTimestamp::now().as_micros();
        let created = ok("create token", within("create token", root.create_personal_access_token(&format!("through-{through}"), half_hour)).await);
        let after = IggyTimestamp::now().as_micros();
        let listed = ok("list tokens", within("list tokens", root.get_personal_access_tokens()).await);
        let expiry = listed.iter().find(|t| t.name == format!("through-{through}")).and_then(|t| t.expiry_at).expect("an expiry").as_micros();
        let (earliest, latest) = (before + 1_800_000_000 - 5_000_000, after + 1_800_000_000 + 5_000_000);
        assert!((earliest..=latest).contains(&expiry), "a token made through node {through} expires at {expiry}, {}s from 30 minutes after its creation", (expiry as i64 - (before + 1_800_000_000) as i64) / 1_000_000);
        tokens.push(created.token);
    }
    for (made, token) in tokens.iter().enumerate() {
        for node in 0..3 {
            let client = cluster.node(node).anonymous_client().await;
            ok(&format!("token made through {made}, login on {node}"), within("token login", client.login_with_personal_access_token(token)).await);
        }
    }
}
