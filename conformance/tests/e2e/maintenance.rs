//! Background upkeep: retention deletes closed segments past a topic's expiry or size, and a
//! session that no connection is bound to ends when its lease runs out.

use crate::harness::*;
use iggy::prelude::*;
use std::time::Duration;

/// Restarts `server` with fast maintenance: 100 ms passes and a 1 s session lease.
fn fast_maintenance(server: &mut TestServer) {
    let config = "[system]\nmaintenance_interval_ms = 100\nsession_lease_secs = 1\n";
    std::fs::write(server.dir().join("config.toml"), config).unwrap();
    tokio::task::block_in_place(|| server.restart());
}

/// A configuration with no maintenance pass within any test's lifetime.
const NO_MAINTENANCE: &str = "[system]\nmaintenance_interval_ms = 3600000\n";

/// The segment size of [`small_segments_up_to`]'s topic: six of its messages close a segment.
const SEGMENT: u64 = 1024 * 1024;

/// Stream "s", topic "t" of one partition with 1 MiB segments and a maximum of `max_topic_size`
/// bytes, then `messages` sends of one 200 KiB message each (offsets 0..messages).
async fn small_segments_up_to(c: &IggyClient, max_topic_size: u64, messages: u8) {
    ok("create stream", within("create", c.create_stream("s", &StreamCreateOptions::default())).await);
    let opts = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(SEGMENT)),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(max_topic_size))),
        ..Default::default()
    };
    ok("create topic", within("create", c.create_topic(&name("s"), "t", &opts)).await);
    for i in 0..messages {
        send_to_partition(c, &name("s"), &name("t"), 0, vec![msg(vec![i; 200 * 1024])]).await;
    }
}

/// The first offset s/t holds once retention deleted from its start (0 if it did not within 5 s).
async fn first_offset_once_retention_ran(c: &IggyClient) -> u64 {
    for _ in 0..50 {
        let polled = poll(c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 1, false).await;
        if offsets(&polled)[0] > 0 {
            return offsets(&polled)[0];
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    0
}

/// Every segment file (`.log` and `.index`) under the data directory, with its bytes.
fn segment_files(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    files_under(dir)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "log" || e == "index"))
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_topic_size_deletes_the_oldest_closed_segments() {
    let mut server = TestServer::start();
    fast_maintenance(&mut server);
    let c = server.root_client().await;
    small_segments_up_to(&c, 2 * SEGMENT, 24).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let t = ok("get", within("get", c.get_topic(&name("s"), &name("t"))).await).expect("topic");
    assert!(t.size.as_bytes_u64() <= 3 * SEGMENT, "retention kept the topic near its maximum: {}", t.size);
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 100, false).await;
    let offsets = offsets(&polled);
    assert!(offsets[0] > 0, "the oldest messages are gone");
    assert_eq!(*offsets.last().unwrap(), 23, "the newest messages stay");
    // The sends of the deleted segments are still in the partition's journal: a crash restart
    // replays them without their batches and keeps every retained message.
    drop(c);
    tokio::task::block_in_place(|| server.kill9_and_restart());
    let c = server.root_client().await;
    let after = poll(&c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 100, false).await;
    assert_eq!(super::harness::offsets(&after), offsets, "the retained messages survive a crash restart");
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, vec![msg("tail")]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(24), "appends continue after offset 23");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_session_expires_and_leaves_its_consumer_group() {
    let mut server = TestServer::start();
    fast_maintenance(&mut server);
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    ok("create group", within("cg", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    {
        let member = server.root_client().await;
        ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
        let g = ok("get", within("get", admin.get_consumer_group(&name("s"), &name("t"), &name("g"))).await);
        assert_eq!(g.expect("group").members_count, 1);
        let _ = member.disconnect().await;
    }
    // The admin stays connected (heartbeats keep its session bound); the member's lease ends.
    let mut members = 1;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let g = ok("get", within("get", admin.get_consumer_group(&name("s"), &name("t"), &name("g"))).await);
        members = g.expect("group").members_count;
        if members == 0 {
            break;
        }
    }
    assert_eq!(members, 0, "the expired member left the group");
    ok("admin session still works", within("ping", admin.ping()).await);
}

/// Retention is a committed op of the partition's group, planned by the primary: a crash after
/// it committed but before its files went (played here by putting the deleted files back) is
/// repaired by the journal's replay, which deletes exactly the same segments although no
/// maintenance pass runs after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_replayed_from_the_journal_deletes_the_same_segments() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), NO_MAINTENANCE).unwrap();
    tokio::task::block_in_place(|| server.restart());
    let c = server.root_client().await;
    small_segments_up_to(&c, 2 * SEGMENT, 24).await;
    drop(c);
    let before = segment_files(&server.data_dir());
    assert!(before.len() >= 8, "several segments: {:?}", before.keys());

    fast_maintenance(&mut server);
    let c = server.root_client().await;
    let first = first_offset_once_retention_ran(&c).await;
    assert!(first > 0, "retention ran");
    drop(c);
    tokio::task::block_in_place(|| server.kill9());
    let retained = segment_files(&server.data_dir());
    assert!(retained.len() < before.len());

    // The files retention deleted come back, as if the crash came before their deletion.
    for (path, bytes) in &before {
        if !retained.contains_key(path) {
            std::fs::write(path, bytes).unwrap();
        }
    }
    assert_eq!(segment_files(&server.data_dir()).len(), before.len());
    std::fs::write(server.dir().join("config.toml"), NO_MAINTENANCE).unwrap();
    tokio::task::block_in_place(|| server.start_again());
    let c = server.root_client().await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 100, false).await;
    assert_eq!(offsets(&polled)[0], first, "the replay kept the log from the same offset");
    assert_eq!(*offsets(&polled).last().unwrap(), 23);
    let replayed: Vec<_> = segment_files(&server.data_dir()).into_keys().collect();
    let expected: Vec<_> = retained.into_keys().collect();
    assert_eq!(replayed, expected, "the replayed journal deleted the same segment files");
}

/// The maximum topic size bounds the closed segments (each partition's share of it), as upstream
/// documents it, so closed segments that fit stay: 23 messages of 200 KiB in 1 MiB segments
/// close [0, 6), [6, 12) and [12, 18) (1.23 MB each) and leave [18, 23) active (1.02 MB); under a
/// 3 MiB maximum retention deletes [0, 6) only, as [6, 18) fits. Before, it counted the active
/// segment too and deleted [6, 12) as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_topic_size_bounds_the_closed_segments_not_the_active_one() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), NO_MAINTENANCE).unwrap();
    tokio::task::block_in_place(|| server.restart());
    small_segments_up_to(&server.root_client().await, 3 * SEGMENT, 23).await;
    fast_maintenance(&mut server);
    let c = server.root_client().await;
    let first = first_offset_once_retention_ran(&c).await;
    assert_eq!(first, 6, "retention kept the closed segments within the maximum");
}

/// A maximum of one segment's size keeps the newest closed segment, as the official client
/// documents a maximum below one sealed segment: a segment closes past its size by its last
/// batch (1.23 MB for 1 MiB here), so retention once deleted every closed segment and left only
/// the active one's 5 messages of 23.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maximum_of_one_segment_keeps_the_newest_closed_segment() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), NO_MAINTENANCE).unwrap();
    tokio::task::block_in_place(|| server.restart());
    small_segments_up_to(&server.root_client().await, SEGMENT, 23).await;
    fast_maintenance(&mut server);
    let c = server.root_client().await;
    let first = first_offset_once_retention_ran(&c).await;
    assert_eq!(first, 12, "retention kept the newest closed segment, [12, 18), and the active one");
}

/// DeleteSegments keeps the messages a consumer has not consumed: the command succeeds (the CLI
/// prints "Deleted 2 segments") and deletes nothing below the stored offset. The node says why,
/// naming the offset and its owner; before, it logged nothing and the operator saw no effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_deletion_a_stored_offset_holds_back_says_so_in_the_log() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), NO_MAINTENANCE).unwrap();
    tokio::task::block_in_place(|| server.restart());
    let c = server.root_client().await;
    small_segments_up_to(&c, 64 * SEGMENT, 14).await;
    ok("store offset 2", within("store", c.store_consumer_offset(&consumer("reader"), &name("s"), &name("t"), Some(0), 2)).await);
    ok("delete 2 segments", within("delete", c.delete_segments(&name("s"), &name("t"), 0, 2)).await);
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 1, false).await;
    assert_eq!(offsets(&polled), vec![0], "offsets 3.. are unconsumed: the first segment stays");
    let log = server.log();
    let line = log.lines().find(|line| line.contains("segment deletion")).unwrap_or_else(|| panic!("no line on the held deletion:\n{log}"));
    assert!(line.contains("offset 2") && line.contains("consumer"), "{line}");
}
