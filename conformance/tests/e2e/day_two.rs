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
    cluster.restart_with(r, &["--restored"]);
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
    leaves_the_restored_state(&cluster, r).await;
    cluster.wait_identical_segments(1).await;
}

/// Waits until node `i`, started with `--restored`, logs that every group caught up and its
/// data directory no longer holds the marker.
async fn leaves_the_restored_state(cluster: &TestCluster, i: usize) {
    wait_until(
        &format!("node {i} leaves the restored state"),
        Duration::from_secs(60),
        || current_start(&cluster.node(i).log()).contains("restored node caught up").then_some(()),
        || current_start(&cluster.node(i).log()).to_string(),
    )
    .await;
    let marker = cluster.node(i).data_dir().join("restored.pending");
    assert!(!marker.exists(), "{} removed", marker.display());
}

/// A node's disk dies and there is no copy of it: its peers hold everything, so the node is
/// started on an empty directory with `--restored` (README "Replace a cluster node's disk")
/// while a producer keeps writing through the others. It copies the metadata and every
/// partition from its peers, leaves the restored state, holds the same segments as they do,
/// and no acknowledged message is lost or stored twice. Started empty without the flag it is
/// refused, naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_disk_died_without_a_copy_rejoins_empty_with_restored_under_load() {
    let mut cluster = TestCluster::start(3);
    let client = std::sync::Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    for i in 0..3 {
        cluster.wait_normal(i, &partition_groups).await;
    }
    let producer = crate::cluster::Producer::start(client.clone(), stream, topic, 3);
    producer.wait_progress("before the disk dies", 3, Duration::from_secs(20)).await;

    let data = cluster.node(2).data_dir();
    cluster.kill9(2);
    std::fs::remove_dir_all(&data).unwrap();
    producer.wait_progress("while node 2 is gone", 3, Duration::from_secs(30)).await;

    let (status, printed) = tokio::task::block_in_place(|| cluster.run_to_exit(2, Duration::from_secs(30)));
    assert_eq!(status.code(), Some(1), "{printed}");
    assert!(printed.contains("start it with --restored on the empty directory"), "{printed}");

    cluster.restart_with(2, &["--restored"]);
    leaves_the_restored_state(&cluster, 2).await;
    cluster.wait_normal(2, &partition_groups).await;
    producer.wait_progress("after node 2 rejoined", 3, Duration::from_secs(30)).await;
    let acked = producer.finish().await;
    crate::cluster::assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(3).await;
}

/// The samples of `name` in `samples` with their labels, for a failure message.
fn family(samples: &[crate::metrics::Sample], name: &str) -> String {
    samples.iter().filter(|s| s.name == name).map(|s| format!("{s:?}\n")).collect()
}

/// README "Logs" and `/metrics` in a cluster: an operator tells from each node's `/metrics`
/// which node it is, which replica leads each group (the same on every node), whether each
/// replica is normal and how far it applied, and which replica links are down: node 2 stopped,
/// nodes 0 and 1 report `iggy_replica_peer_up{peer="2"} 0` and each other 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_tell_which_node_leads_each_group_how_far_it_applied_and_which_links_are_down() {
    let options = ClusterOptions { http: true, ..ClusterOptions::default() };
    let mut cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    let (stream, topic, groups) = create_topic(&client, 1).await;
    send_to_partition(&client, &id(stream), &id(topic), 0, vec![msg("m")]).await;
    for i in 0..3 {
        cluster.wait_normal(i, &[METADATA_GROUP, groups[0]]).await;
    }
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let (partition_primary, _) = cluster.primary(groups[0]).expect("a partition primary");
    let (s, t) = (stream.to_string(), topic.to_string());
    let partition: [(&str, &str); 4] = [("group", "partition"), ("stream", &s), ("topic", &t), ("partition", "0")];
    for i in 0..3 {
        let samples = wait_until_async(
            &format!("node {i} reports every group normal and applied"),
            Duration::from_secs(20),
            async || {
                let samples = crate::metrics::scrape(&cluster.http_url(i)).await;
                let settled = samples.iter().any(|s| s.name == "iggy_vsr_status")
                    && samples.iter().filter(|s| s.name == "iggy_vsr_status").all(|s| s.value == 0.0);
                settled.then_some(samples)
            },
            String::new,
        )
        .await;
        assert_eq!(crate::metrics::value(&samples, "iggy_replica_id", &[]), i as f64);
        assert_eq!(crate::metrics::value(&samples, "iggy_vsr_primary", &[("group", "metadata")]), f64::from(metadata_primary), "{}", family(&samples, "iggy_vsr_primary"));
        assert_eq!(crate::metrics::value(&samples, "iggy_vsr_primary", &partition), f64::from(partition_primary));
        let commit = crate::metrics::value(&samples, "iggy_vsr_commit", &partition);
        let applied = crate::metrics::value(&samples, "iggy_vsr_applied", &partition);
        assert!(applied >= 1.0 && applied <= commit, "applied {applied}, commit {commit}");
        assert_eq!(crate::metrics::value(&samples, "iggy_replica_restored", &[]), 0.0);
        for peer in (0..3).filter(|&p| p != i) {
            assert_eq!(crate::metrics::value(&samples, "iggy_replica_peer_up", &[("peer", &peer.to_string())]), 1.0, "{}", family(&samples, "iggy_replica_peer_up"));
        }
    }
    cluster.stop(2);
    for i in 0..2 {
        let other = (1 - i).to_string();
        wait_until_async(
            &format!("node {i} reports the link to node 2 down"),
            Duration::from_secs(20),
            async || {
                let samples = crate::metrics::scrape(&cluster.http_url(i)).await;
                let down = crate::metrics::value(&samples, "iggy_replica_peer_up", &[("peer", "2")]) == 0.0;
                let up = crate::metrics::value(&samples, "iggy_replica_peer_up", &[("peer", &other)]) == 1.0;
                (down && up).then_some(())
            },
            String::new,
        )
        .await;
    }
}

/// One shared file is the roster of every node (README "Cluster configuration"). A node
/// restarted with another roster (here an edited copy that moves node 1's TCP port) told
/// clients an address for node 1 no node listens on, and its peers admitted it as if nothing
/// differed. Its peers now refuse it, both sides log `RosterMismatch` naming the roster, the
/// others' roster shows it Unreachable, and given the shared roster again it rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_roster_differs_from_its_peers_is_refused_and_both_sides_say_why() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    create_topic(&client, 1).await;
    cluster.stop(2);
    let moved = free_port().to_string();
    cluster.nodes[2].set_env("IGGY_CLUSTER_NODES_1_PORTS_TCP", Some(&moved));
    cluster.restart(2);
    for i in 0..3 {
        crate::cluster::logged(&cluster, i, &format!("node {i} logs the roster refusal"), &["RosterMismatch", "`roster`", "[[cluster.nodes]]"]).await;
    }
    crate::cluster::wait_roster_status(&client, 2, ClusterNodeStatus::Unreachable, Duration::from_secs(20)).await;

    cluster.stop(2);
    cluster.nodes[2].set_env("IGGY_CLUSTER_NODES_1_PORTS_TCP", None);
    cluster.restart(2);
    crate::cluster::wait_roster_status(&client, 2, ClusterNodeStatus::Healthy, Duration::from_secs(20)).await;
}
