//! An operator's second day with a three-node cluster (README "Run a 3-node cluster on one
//! machine", "Operations"): a node's disk replaced from a backup, rolling restarts, what
//! `/metrics` tells about each node's groups and links.

use crate::cluster::create_topic;
use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::time::Duration;

/// Polls every message of partition 0 through `reader`: their payloads in offset order.
async fn partition_payloads(reader: &IggyClient, stream: u32, topic: u32) -> Vec<String> {
    let mut found = Vec::new();
    let mut offset = 0;
    loop {
        let polled = poll(reader, &id(stream), &id(topic), 0, &consumer("audit"), PollingStrategy::offset(offset), 1000, false).await;
        if polled.messages.is_empty() {
            return found;
        }
        offset = polled.messages.last().unwrap().header.offset + 1;
        found.extend(payloads(&polled));
    }
}

/// README "Backup and restore", step 4, on a cluster node, restoring a copy taken before the
/// node acknowledged writes a peer never received. A VSR replica may count toward a view
/// change only with every op it acknowledged: a committed op is on a quorum, and any other
/// quorum meets it in one replica that still holds it. A node restored from an older copy
/// acknowledged ops its disk no longer holds, so with the one peer that held them too down, it
/// and the third node form a quorum that lacks them and a new view discards them.
///
/// Partition primary P, restored node R, third node C: R's directory is copied; C is cut off
/// while P and R commit "acked-*" (P's own write and R's ack make the quorum); R's disk dies
/// and is replaced by the copy; P is killed; C is healed and R started. The acknowledged
/// messages must all be there once P is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fails: a node restored from an older backup votes in a view change without the ops it acknowledged; acknowledged messages are lost"]
async fn a_node_restored_from_an_older_copy_never_outvotes_the_writes_it_acknowledged() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    let (stream, topic, groups) = create_topic(&client, 1).await;
    let group = groups[0];
    for i in 0..3 {
        cluster.wait_normal(i, &[group]).await;
    }
    send_to_partition(&client, &id(stream), &id(topic), 0, vec![msg("before the copy")]).await;
    cluster.wait_identical_segments(1).await;
    drop(client);
    let (p, view) = cluster.primary(group).expect("a partition primary");
    let p = usize::from(p);
    let (r, c) = ((p + 1) % 3, (p + 2) % 3);
    eprintln!("partition primary {p} (view {view}), restored node {r}, third node {c}");

    // The copy of R, taken as the README says (stopped, whole directory), and R back.
    let data = cluster.node(r).data_dir();
    cluster.stop(r);
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("backup");
    copy_tree(&data, &copy);
    cluster.restart(r);
    cluster.wait_normal(r, &[group]).await;

    // C cut off: P and R alone commit these.
    cluster.cut(c);
    let writer = cluster.root_client(p).await;
    let acked: Vec<String> = (0..5).map(|i| format!("acked-{i}")).collect();
    for text in &acked {
        send_to_partition(&writer, &id(stream), &id(topic), 0, vec![msg(text.clone())]).await;
    }
    drop(writer);

    // R's disk dies; its directory is restored from the copy. P dies too.
    cluster.stop(r);
    std::fs::remove_dir_all(&data).unwrap();
    copy_tree(&copy, &data);
    cluster.kill9(p);
    cluster.heal(c);
    cluster.restart(r);
    // Give R and C the time to elect a view between them, were they allowed to.
    tokio::time::sleep(Duration::from_secs(8)).await;
    eprintln!("before P returns:\n{}", cluster.describe(group));

    cluster.restart(p);
    for i in 0..3 {
        cluster.wait_normal(i, &[group]).await;
    }
    let reader = cluster.root_client(p).await;
    let found = wait_until_async(
        "the partition is readable",
        Duration::from_secs(20),
        async || Some(partition_payloads(&reader, stream, topic).await),
        || cluster.describe(group),
    )
    .await;
    let missing: Vec<&String> = acked.iter().filter(|a| !found.contains(a)).collect();
    assert!(missing.is_empty(), "acknowledged messages lost: {missing:?}; the partition holds {found:?}\n{}", cluster.describe(group));
}
