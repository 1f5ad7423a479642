//! Storage: data that spans several segments reads back across segment boundaries, also
//! after a restart.

use crate::harness::*;
use iggy::prelude::*;

const SEGMENT: u64 = 1024 * 1024; // MIN_TOPIC_SEGMENT_SIZE
const PAYLOAD: usize = 200 * 1024;
const COUNT: usize = 24; // about 4.7 MiB: at least four segments

fn payload(i: usize) -> Vec<u8> {
    (0..PAYLOAD).map(|j| (i * 7 + j * 13 + (j >> 10)) as u8).collect()
}

async fn check_all(client: &IggyClient) {
    let polled = poll(client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(0), 1000, false).await;
    assert_eq!(offsets(&polled), (0..COUNT as u64).collect::<Vec<_>>(), "every offset across segments");
    for (i, m) in polled.messages.iter().enumerate() {
        assert!(m.payload[..] == payload(i)[..], "payload of offset {i} differs");
    }
    // Starting inside a later segment.
    let mid = poll(client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(13), 3, false).await;
    assert_eq!(offsets(&mid), vec![13, 14, 15]);
    assert!(mid.messages[0].payload[..] == payload(13)[..]);
    let last = poll(client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::last(), 2, false).await;
    assert_eq!(offsets(&last), vec![COUNT as u64 - 2, COUNT as u64 - 1]);
}

async fn fill_small_segments(client: &IggyClient) {
    ok("create stream", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let opts = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(SEGMENT)),
        ..Default::default()
    };
    ok("create topic", within("create", client.create_topic(&name("s"), "t", &opts)).await);
    for i in 0..COUNT {
        send_to_partition(client, &name("s"), &name("t"), 0, vec![msg(payload(i))]).await;
    }
}

async fn segments_count(client: &IggyClient) -> u32 {
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic");
    let p = &t.partitions[0];
    assert_eq!((p.messages_count, p.current_offset), (COUNT as u64, COUNT as u64 - 1));
    p.segments_count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_reports_the_segments_it_rolled() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    fill_small_segments(&client).await;
    let live = segments_count(&client).await;
    assert!(live >= 4, "1 MiB segments hold ~4.7 MiB in at least 4 segments, got {live}");
    drop(client);
    tokio::task::block_in_place(|| server.restart());
    let client = server.root_client().await;
    let reopened = segments_count(&client).await;
    assert_eq!(reopened, live, "the same count after a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_spanning_many_segments_read_back_and_survive_restart() {
    let mut server = TestServer::start();
    {
        let client = server.root_client().await;
        fill_small_segments(&client).await;
        check_all(&client).await;
    }
    tokio::task::block_in_place(|| server.restart());
    let client = server.root_client().await;
    check_all(&client).await;
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg("tail")]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(COUNT as u64));
}

async fn first_offset(client: &IggyClient) -> Vec<u64> {
    offsets(&poll(client, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 1, false).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_removes_the_oldest_sealed_segments() {
    let server = TestServer::start();
    let client = server.root_client().await;
    fill_small_segments(&client).await;
    assert_eq!(first_offset(&client).await, vec![0]);
    // Each 1 MiB segment holds six 200 KiB messages: segments start at 0, 6, 12, 18, (24).
    ok("delete 2 segments", within("delete", client.delete_segments(&name("s"), &name("t"), 0, 2)).await);
    assert_eq!(first_offset(&client).await, vec![12], "the first two segments are gone");
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic");
    assert_eq!(t.partitions[0].current_offset, COUNT as u64 - 1, "the head does not move");
    assert_eq!(t.partitions[0].messages_count, COUNT as u64 - 12, "twelve messages were deleted with their segments");
    assert_eq!(t.messages_count, COUNT as u64 - 12);
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::offset(12), 1, false).await;
    assert!(polled.messages[0].payload[..] == payload(12)[..]);
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg("tail")]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(COUNT as u64), "appends continue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_stops_at_the_lowest_committed_offset() {
    let server = TestServer::start();
    let client = server.root_client().await;
    fill_small_segments(&client).await;
    ok("store offset 8", within("store", client.store_consumer_offset(&consumer("slow"), &name("s"), &name("t"), Some(0), 8)).await);
    ok("delete 3 segments", within("delete", client.delete_segments(&name("s"), &name("t"), 0, 3)).await);
    assert_eq!(
        first_offset(&client).await,
        vec![6],
        "only the segment below the committed offset 8 may go; 6..11 still holds unconsumed messages"
    );
    let next = poll(&client, &name("s"), &name("t"), 0, &consumer("slow"), PollingStrategy::next(), 2, false).await;
    assert_eq!(offsets(&next), vec![9, 10], "the slow consumer loses nothing");
}

/// A consumer group deleted and created again under its id: the offset the deleted group stored
/// is nobody's, so it holds no segment back; the new group's own offset does. On a single node
/// the deletion removes the group's offsets as it commits, with no maintenance sweep; where a
/// deletion has not reached a partition yet (a cluster whose partition primary was down), the
/// planner skips such an offset (`iggy_partition`'s
/// `a_group_offset_no_live_group_owns_holds_no_segment_back`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_segments_is_not_held_back_by_the_offset_a_deleted_group_left() {
    // No sweep while the test runs: the deletion itself removes the offset.
    let server = TestServer::start_with_env(&[("IGGY_SYSTEM_MAINTENANCE_INTERVAL_MS", "3600000")]);
    let client = server.root_client().await;
    fill_small_segments(&client).await;
    let group = Consumer::group(name("g"));
    let create = async || ok("create group", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await).id;
    let first = create().await;
    ok("store offset 2", within("store", client.store_consumer_offset(&group, &name("s"), &name("t"), Some(0), 2)).await);
    ok("delete group", within("delete", client.delete_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    assert_eq!(create().await, first, "the id is reused");

    ok("delete 1 segment", within("delete", client.delete_segments(&name("s"), &name("t"), 0, 1)).await);
    assert_eq!(first_offset(&client).await, vec![6], "the deleted group's offset 2 holds nothing back");
    ok("store offset 8", within("store", client.store_consumer_offset(&group, &name("s"), &name("t"), Some(0), 8)).await);
    ok("delete 2 segments", within("delete", client.delete_segments(&name("s"), &name("t"), 0, 2)).await);
    assert_eq!(first_offset(&client).await, vec![6], "the new group's offset 8 holds 6..11 back");
}

/// Segments deleted while the sends that filled them are still in the partition's journal (no
/// checkpoint since): a crash restart replays that journal, and every message after the
/// deleted segments, acknowledged before or after the delete, is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_after_deleted_segments_survive_a_crash_restart() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    fill_small_segments(&client).await;
    ok("delete 2 segments", within("delete", client.delete_segments(&name("s"), &name("t"), 0, 2)).await);
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg("tail")]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(COUNT as u64));
    drop(client);
    for restart in ["SIGKILL", "SIGTERM"] {
        match restart {
            "SIGKILL" => tokio::task::block_in_place(|| server.kill9_and_restart()),
            _ => tokio::task::block_in_place(|| server.restart()),
        }
        let client = server.root_client().await;
        assert_eq!(first_offset(&client).await, vec![12], "after {restart}: the deleted segments stay deleted");
        let polled =
            poll(&client, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::offset(12), 100, false).await;
        assert_eq!(offsets(&polled), (12..=COUNT as u64).collect::<Vec<_>>(), "after {restart}: every later message");
        for m in &polled.messages[..COUNT - 12] {
            assert!(m.payload[..] == payload(m.header.offset as usize)[..], "payload of offset {}", m.header.offset);
        }
        assert_eq!(polled.messages[COUNT - 12].payload, "tail".as_bytes());
    }
}

/// A single node's active segment file removed behind its back (an operator's mistake, a
/// cleanup script) while the node holds it open: the node has no peer to catch up from, so the
/// check that finds it (each maintenance pass) writes the open file's bytes back to its path
/// before the node stops (74, one line naming the segment), and the restart serves every
/// acknowledged message. Before, the node stopped and the restart served none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_segment_removed_behind_a_single_nodes_back_is_written_back_before_it_stops() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    let mut acknowledged: Vec<String> = Vec::new();
    for batch in 0..30 {
        let payloads: Vec<String> = (0..10).map(|i| format!("b{batch}-m{i}-{}", "x".repeat(500))).collect();
        send_to_partition(&c, &name("s"), &name("t"), 0, payloads.iter().map(|p| msg(p.as_bytes())).collect()).await;
        acknowledged.extend(payloads);
    }
    drop(c);
    let segment = files_under(&server.data_dir())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "log") && p.to_string_lossy().contains("partitions"))
        .expect("the partition's segment");
    let length = std::fs::metadata(&segment).unwrap().len();
    std::fs::remove_file(&segment).unwrap();
    let status = tokio::task::block_in_place(|| server.wait_exit(std::time::Duration::from_secs(15)))
        .unwrap_or_else(|| panic!("the node went on running on a segment removed behind its back"));
    assert_eq!(status.code(), Some(74), "{status}");
    let lines = server.log_lines_with("storage failure:");
    assert!(
        lines.len() == 1 && lines[0].contains(&segment.display().to_string()) && lines[0].contains("written back"),
        "one line naming the segment and that it was written back: {lines:?}"
    );
    assert_eq!(std::fs::metadata(&segment).map(|m| m.len()).ok(), Some(length), "the segment is back, whole");

    tokio::task::block_in_place(|| server.start_again());
    let c = server.root_client().await;
    let mut served: Vec<String> = Vec::new();
    loop {
        let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::offset(served.len() as u64), 1000, false).await;
        if polled.messages.is_empty() {
            break;
        }
        served.extend(payloads(&polled));
    }
    assert_eq!(served.len(), acknowledged.len(), "every acknowledged message is served after the restart");
    assert!(served == acknowledged, "in order");
}
