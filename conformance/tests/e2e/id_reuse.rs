//! Ids are reused after deletes (the lowest free id, 0-based): a restart must keep the live
//! incarnation's messages and never run an old incarnation's delete against the new one's
//! files (issue 11: the metadata replay used to re-run every op's disk effect in order, so a
//! stream deleted and created again came back empty).

use crate::harness::*;
use iggy::prelude::*;
use std::path::Path;

/// Every message of `partition`, as payload strings in offset order (checks the offsets too).
async fn all_messages(client: &IggyClient, stream: &str, topic: &str, partition: u32) -> Vec<String> {
    let mut payloads_seen = Vec::new();
    loop {
        let next = payloads_seen.len() as u64;
        let polled = poll(
            client,
            &name(stream),
            &name(topic),
            partition,
            &consumer("reader"),
            PollingStrategy::offset(next),
            1000,
            false,
        )
        .await;
        if polled.messages.is_empty() {
            return payloads_seen;
        }
        let expected: Vec<u64> = (next..next + polled.messages.len() as u64).collect();
        assert_eq!(offsets(&polled), expected, "{stream}/{topic}/{partition}: offsets in order");
        payloads_seen.extend(payloads(&polled));
    }
}

fn expected(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

/// Sends `count` messages `"{prefix}-{i}"` to one partition in batches of 1000.
async fn send_many(client: &IggyClient, stream: &str, topic: &str, partition: u32, prefix: &str, count: usize) {
    for start in (0..count).step_by(1000) {
        let batch = (start..(start + 1000).min(count)).map(|i| msg(format!("{prefix}-{i}"))).collect();
        send_to_partition(client, &name(stream), &name(topic), partition, batch).await;
    }
}

fn partition_dirs(data: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(streams) = std::fs::read_dir(data.join("streams")) else { return found };
    for stream in streams.flatten() {
        let Ok(topics) = std::fs::read_dir(stream.path().join("topics")) else { continue };
        for topic in topics.flatten() {
            let Ok(partitions) = std::fs::read_dir(topic.path().join("partitions")) else { continue };
            for partition in partitions.flatten() {
                found.push(partition.path().strip_prefix(data).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

/// The reproduction: a stream deleted, another created with the same id (0) and
/// 10,000 messages sent to it; every message survives a SIGTERM restart and a SIGKILL restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_created_with_a_reused_id_keeps_its_messages_across_sigterm_and_sigkill() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    let (first, _) = create_stream_and_topic(&c, "first", "events", 3).await;
    assert_eq!(first.id, 0);
    for partition in 0..3 {
        send_to_partition(&c, &name("first"), &name("events"), partition, msgs("old", 5)).await;
    }
    assert_eq!(all_messages(&c, "first", "events", 1).await, expected("old", 5));
    ok("delete stream", within("delete", c.delete_stream(&name("first"))).await);
    assert_eq!(partition_dirs(&server.data_dir()), Vec::<String>::new(), "the deleted stream's partitions are gone");

    let (second, _) = create_stream_and_topic(&c, "second", "events", 3).await;
    assert_eq!(second.id, 0, "the id is reused");
    let per_partition = [3400, 3300, 3300];
    for (partition, count) in per_partition.iter().enumerate() {
        send_many(&c, "second", "events", partition as u32, &format!("p{partition}"), *count).await;
    }
    drop(c);

    for restart in ["SIGTERM", "SIGKILL"] {
        match restart {
            "SIGTERM" => server.restart(),
            _ => server.kill9_and_restart(),
        }
        let c = server.root_client().await;
        for (partition, count) in per_partition.iter().enumerate() {
            assert_eq!(
                all_messages(&c, "second", "events", partition as u32).await,
                expected(&format!("p{partition}"), *count),
                "after {restart}: partition {partition} keeps every acknowledged message"
            );
        }
        assert!(!server.log().contains("cannot open"), "after {restart}: every partition opens:\n{}", server.log());
    }
}

/// The CLI flow of the issue with topics and partitions: a topic deleted and another created
/// with the same id, a partition deleted and created again with the same id, each sent to;
/// a SIGKILL; both partitions keep their messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_topic_and_partition_ids_keep_their_messages_across_sigkill() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "t", 2).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("t-old", 3)).await;
    send_to_partition(&c, &name("s"), &name("t"), 1, msgs("t-old", 3)).await;
    ok("delete topic", within("delete topic", c.delete_topic(&name("s"), &name("t"))).await);
    let t2 = ok("create t2", within("create t2", c.create_topic(&name("s"), "t2", &topic_options(2))).await);
    assert_eq!(t2.id, 0, "the topic id is reused");
    send_to_partition(&c, &name("s"), &name("t2"), 0, msgs("zero", 4)).await;
    send_to_partition(&c, &name("s"), &name("t2"), 1, msgs("one-old", 2)).await;
    ok("delete partition", within("delete partition", c.delete_partitions(&name("s"), &name("t2"), 1)).await);
    ok("create partition", within("create partition", c.create_partitions(&name("s"), &name("t2"), 1)).await);
    send_to_partition(&c, &name("s"), &name("t2"), 1, msgs("one", 5)).await;
    assert_eq!(all_messages(&c, "s", "t2", 1).await, expected("one", 5), "the new partition 1 starts empty");
    drop(c);

    server.kill9_and_restart();
    let c = server.root_client().await;
    assert_eq!(all_messages(&c, "s", "t2", 0).await, expected("zero", 4));
    assert_eq!(all_messages(&c, "s", "t2", 1).await, expected("one", 5));
    server.restart();
    let c = server.root_client().await;
    assert_eq!(all_messages(&c, "s", "t2", 0).await, expected("zero", 4));
    assert_eq!(all_messages(&c, "s", "t2", 1).await, expected("one", 5));
}

/// A crash after a stream delete committed but before its directory went (put back here by
/// hand): the restart finishes that delete, and a tree a crash left half removed in
/// `discarded-partitions/` is removed too; a directory no committed op explains is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_finishes_committed_deletes_and_keeps_unexplained_directories() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "gone", "t", 1).await;
    send_to_partition(&c, &name("gone"), &name("t"), 0, msgs("m", 3)).await;
    let data = server.data_dir();
    let partition = data.join("streams/0/topics/0/partitions/0");
    let aside = server.dir().join("aside");
    copy_tree(&partition, &aside);
    ok("delete stream", within("delete", c.delete_stream(&name("gone"))).await);
    drop(c);
    server.kill9();
    assert!(!partition.exists(), "the live delete removed the directory");
    copy_tree(&aside, &partition);
    let half = data.join("discarded-partitions/99");
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("00000000000000000000.log"), b"x").unwrap();
    let stray = data.join("streams/7/topics/0/partitions/0");
    copy_tree(&aside, &stray);

    server.start_again();
    assert!(!partition.exists(), "the replayed delete removed the directory again:\n{}", server.log());
    assert!(!half.exists(), "the interrupted discard is finished");
    assert!(stray.join("created.revision").exists(), "a directory no committed delete names is kept");
    assert!(
        server.log().contains(&format!("{}: not in the metadata", stray.display())),
        "and reported:\n{}",
        server.log()
    );
    let c = server.root_client().await;
    let (again, _) = create_stream_and_topic(&c, "again", "t", 1).await;
    assert_eq!(again.id, 0);
    assert_eq!(all_messages(&c, "again", "t", 0).await, Vec::<String>::new(), "a new incarnation starts empty");
}

/// A deleted topic or stream leaves no directory behind (an operator listing `streams/` sees
/// only live ones), while a live topic's directories stay; a restart that finishes a delete a
/// crash interrupted removes the emptied directories too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_topics_and_streams_leave_no_directories_behind() {
    let mut server = TestServer::start();
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "a", 2).await;
    ok("create b", within("create b", c.create_topic(&name("s"), "b", &topic_options(1))).await);
    send_to_partition(&c, &name("s"), &name("a"), 0, msgs("a", 3)).await;
    send_to_partition(&c, &name("s"), &name("b"), 0, msgs("b", 3)).await;
    let data = server.data_dir();
    let (stream, topic_a, topic_b) = (data.join("streams/0"), data.join("streams/0/topics/0"), data.join("streams/0/topics/1"));
    assert!(topic_a.is_dir() && topic_b.is_dir(), "both topics have directories");
    ok("delete a", within("delete a", c.delete_topic(&name("s"), &name("a"))).await);
    assert!(!topic_a.exists(), "the deleted topic's directory is gone");
    assert!(topic_b.join("partitions/0").is_dir(), "the live topic's partition stays");
    ok("delete s", within("delete s", c.delete_stream(&name("s"))).await);
    assert!(!stream.exists(), "the deleted stream's directory is gone");
    assert!(data.join("streams").is_dir(), "streams/ itself stays");

    // A crash between a delete's commit and its directories' removal (put back by hand).
    create_stream_and_topic(&c, "s2", "t", 1).await;
    send_to_partition(&c, &name("s2"), &name("t"), 0, msgs("m", 3)).await;
    let partition = data.join("streams/0/topics/0/partitions/0");
    let aside = server.dir().join("aside");
    copy_tree(&partition, &aside);
    ok("delete s2", within("delete s2", c.delete_stream(&name("s2"))).await);
    drop(c);
    server.kill9();
    copy_tree(&aside, &partition);
    server.start_again();
    assert!(!stream.exists(), "the restart removed the deleted stream's directories:\n{}", server.log());
}

/// Stores consumer `c`'s offset `offset` on `partition` of `s`/`t`.
async fn store_offset(client: &IggyClient, partition: u32, offset: u64) {
    let (c, s, t) = (consumer("c"), name("s"), name("t"));
    let stored = client.store_consumer_offset(&c, &s, &t, Some(partition), offset);
    ok("store offset", within("store offset", stored).await);
}

/// What every node serves of the third incarnation of `s`/`t`: its partition count, each
/// partition's messages, and consumer `c`'s offsets (none was stored in this incarnation).
async fn assert_only_the_third_incarnation(
    cluster: &crate::cluster::TestCluster,
    counts: &[usize],
    when: &str,
) {
    for node in 0..cluster.len() {
        let c = cluster.root_client(node).await;
        let topic = ok(
            "get topic",
            within("get topic", c.get_topic(&name("s"), &name("t"))).await,
        )
        .expect("topic t");
        assert_eq!(
            topic.partitions_count as usize,
            counts.len(),
            "{when}, node {node}: {topic:?}"
        );
        for (partition, count) in counts.iter().enumerate() {
            let partition = partition as u32;
            assert_eq!(
                all_messages(&c, "s", "t", partition).await,
                expected(&format!("three-{partition}"), *count),
                "{when}, node {node}: partition {partition} holds the third incarnation's messages only"
            );
            let (reader, s, t) = (consumer("c"), name("s"), name("t"));
            let offset = c.get_consumer_offset(&reader, &s, &t, Some(partition));
            let offset = ok("get offset", within("get offset", offset).await);
            assert!(
                offset.is_none(),
                "{when}, node {node}: partition {partition} serves an earlier incarnation's offset {offset:?}"
            );
        }
    }
}

/// In a cluster: a topic deleted and created again under its id with fewer partitions, then its
/// stream deleted and created again under its id with more, each incarnation sent to and its
/// consumer offsets stored. Every node serves the last incarnation only (its messages, no
/// earlier offset) after a kill -9 of a partition primary and a graceful restart of the
/// metadata primary; messages sent after both restarts land after the earlier ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_reused_ids_serve_only_the_last_incarnation_across_kill9_and_restart() {
    use crate::cluster::{METADATA_GROUP, TestCluster, partition_group};
    let mut cluster = TestCluster::start(3);
    let c = cluster.root_client(0).await;
    let (stream, topic) = create_stream_and_topic(&c, "s", "t", 3).await;
    for partition in 0..3 {
        send_many(&c, "s", "t", partition, &format!("one-{partition}"), 20).await;
        store_offset(&c, partition, 15).await;
    }
    ok(
        "delete topic",
        within("delete topic", c.delete_topic(&name("s"), &name("t"))).await,
    );
    let second = ok(
        "create topic",
        within(
            "create topic",
            c.create_topic(&name("s"), "t", &topic_options(2)),
        )
        .await,
    );
    assert_eq!(second.id, topic.id, "the topic id is reused");
    for partition in 0..2 {
        send_many(&c, "s", "t", partition, &format!("two-{partition}"), 12).await;
        store_offset(&c, partition, 5).await;
    }
    ok(
        "delete stream",
        within("delete stream", c.delete_stream(&name("s"))).await,
    );
    let (third_stream, third_topic) = create_stream_and_topic(&c, "s", "t", 4).await;
    assert_eq!(
        (third_stream.id, third_topic.id),
        (stream.id, topic.id),
        "the ids are reused"
    );
    let mut counts = vec![3, 5, 7, 9];
    for (partition, count) in counts.iter().enumerate() {
        send_many(
            &c,
            "s",
            "t",
            partition as u32,
            &format!("three-{partition}"),
            *count,
        )
        .await;
    }
    drop(c);
    assert_only_the_third_incarnation(&cluster, &counts, "before any restart").await;

    let (primary, _) = cluster
        .primary(partition_group(stream.id, topic.id, 1))
        .expect("a primary");
    cluster.kill9(usize::from(primary));
    cluster.restart(usize::from(primary));
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    cluster.stop(usize::from(metadata_primary));
    cluster.restart(usize::from(metadata_primary));
    let c = cluster.root_client(usize::from(metadata_primary)).await;
    for (partition, count) in counts.iter_mut().enumerate() {
        let prefix = format!("three-{partition}");
        let batch = (*count..*count + 2)
            .map(|i| msg(format!("{prefix}-{i}")))
            .collect();
        send_to_partition(&c, &name("s"), &name("t"), partition as u32, batch).await;
        *count += 2;
    }
    assert_only_the_third_incarnation(&cluster, &counts, "after kill -9 and a graceful restart")
        .await;
}

/// A cluster node restarted after topics were created and deleted under the same ids applies
/// those ops again on its way back (a replica of a larger group commits nothing past its
/// checkpoint until it hears its primary): the creates of incarnations a later op deleted are
/// not errors to the operator, who has nothing to restore (the soak found 16 `cannot open …
/// restore its files from a backup` errors on a node stopped by SIGTERM after 8 incarnations
/// of one topic's ids, the last one deleted too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_cluster_node_reapplying_deleted_incarnations_reports_no_error() {
    let mut cluster = crate::cluster::TestCluster::start(3);
    let c = cluster.root_client(0).await;
    ok("create stream", within("create", c.create_stream("s", &StreamCreateOptions::default())).await);
    for round in 0..3 {
        ok("create topic", within("create", c.create_topic(&name("s"), "t", &topic_options(1))).await);
        send_to_partition(&c, &name("s"), &name("t"), 0, msgs(&format!("r{round}"), 2)).await;
        ok("delete topic", within("delete", c.delete_topic(&name("s"), &name("t"))).await);
    }
    cluster.stop(2);
    cluster.restart(2);
    cluster.wait_normal(2, &[crate::test_cluster::METADATA_GROUP]).await;
    // A stream created after the restart reaches node 2 once it applied every op before it.
    ok("create stream", within("create", c.create_stream("after", &StreamCreateOptions::default())).await);
    let on_2 = cluster.root_client(2).await;
    let after = name("after");
    crate::test_cluster::wait_until_async(
        "node 2 has the stream created after its restart",
        std::time::Duration::from_secs(30),
        async || tokio::time::timeout(CALL_TIMEOUT, on_2.get_stream(&after)).await.ok()?.ok()?,
        || cluster.node(2).log(),
    )
    .await;
    let log = cluster.node(2).log();
    let start = crate::test_cluster::current_start(&log);
    assert!(start.contains("replaying"), "node 2's current start:\n{start}");
    assert!(!start.contains("cannot open"), "node 2 reported deleted incarnations as errors:\n{start}");
}

/// The other side of the one above: a cluster node whose live partition's directory was lost
/// while it was down still reports it as the error it is, once its metadata caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_cluster_node_whose_live_partition_directory_was_lost_reports_it() {
    let mut cluster = crate::cluster::TestCluster::start(3);
    let c = cluster.root_client(0).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("m", 2)).await;
    cluster.stop(2);
    let lost = cluster.node(2).data_dir().join("streams/0/topics/0/partitions/0");
    std::fs::remove_dir_all(&lost).unwrap();
    cluster.restart(2);
    crate::test_cluster::wait_until(
        "node 2 reports the lost directory",
        std::time::Duration::from_secs(30),
        || {
            let log = cluster.node(2).log();
            let start = crate::test_cluster::current_start(&log);
            start.contains(" ERROR ").then_some(()).filter(|()| start.contains("cannot open"))
        },
        || cluster.node(2).log(),
    )
    .await;
}
