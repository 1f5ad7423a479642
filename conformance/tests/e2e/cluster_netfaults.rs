//! A three-node cluster on loopback under the replica-network faults a LAN or a cloud network
//! produces, through the replica proxy (`test_cluster.rs`) while the official SDK produces:
//! one-way loss around a primary, latency, a narrow link, a flapping link, damaged frames.
//! The cut-and-heal, held-back-frames and unplugged-cable cases are in `cluster.rs` and
//! `cluster_lan.rs`.

use crate::cluster::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn framed() -> ClusterOptions {
    ClusterOptions {
        replica_frames: true,
        ..ClusterOptions::default()
    }
}

/// The groups among `groups` whose highest Normal view node `node` leads, with that view.
fn led_by(cluster: &TestCluster, groups: &[u64], node: usize) -> Vec<(u64, u32)> {
    groups
        .iter()
        .filter_map(|&group| {
            let (primary, view) = cluster.primary(group)?;
            (usize::from(primary) == node).then_some((group, view))
        })
        .collect()
}

/// Role lines every node logged for `groups` in its current start: any view change or status
/// change adds one.
fn role_line_count(cluster: &TestCluster, groups: &[u64]) -> usize {
    (0..cluster.len())
        .map(|i| {
            let log = cluster.node(i).log();
            let current = current_start(&log);
            groups
                .iter()
                .map(|&g| role_lines(current, g).len())
                .sum::<usize>()
        })
        .sum()
}

/// Waits until every node is Normal in every group and then no node logs a role change in
/// any of them for `quiet` (the views settled; a partition handed back to the node its creation
/// view names is one more change first), within `limit`: a view-change storm never settles.
/// Returns the role changes logged meanwhile.
async fn wait_views_settle(
    cluster: &TestCluster,
    groups: &[u64],
    quiet: Duration,
    limit: Duration,
) -> usize {
    for i in 0..cluster.len() {
        cluster.wait_normal(i, groups).await;
    }
    let first = role_line_count(cluster, groups);
    let mut last = (first, Instant::now());
    wait_until(
        &format!("no role changes for {quiet:?}"),
        limit,
        || {
            let count = role_line_count(cluster, groups);
            if count != last.0 {
                last = (count, Instant::now());
            }
            let normal = (0..cluster.len())
                .all(|i| groups.iter().all(|&g| cluster.role(i, g).is_some_and(|r| r.normal)));
            (normal && last.1.elapsed() >= quiet).then_some(count - first)
        },
        || {
            groups
                .iter()
                .map(|&g| cluster.describe(g))
                .collect::<Vec<_>>()
                .join("\n")
        },
    )
    .await
}

/// Every line of node i's current start at `level` (" ERROR ", " WARN ").
fn lines_at(cluster: &TestCluster, i: usize, level: &str) -> Vec<String> {
    let log = cluster.node(i).log();
    current_start(&log)
        .lines()
        .filter(|line| line.contains(level))
        .map(str::to_string)
        .collect()
}

/// The metadata primary of a running 3-node cluster cut off one way from both backups: either
/// it hears nothing from them (`deaf`: their frames to it are lost, its own reach them) or
/// they hear nothing from it. Every group it leads must get a new primary, the producer (on a
/// node that is not the primary) must keep being acknowledged, and once the loss ends the
/// old primary follows, the views settle, and every acknowledged message reads back once.
async fn one_way_loss_around_the_metadata_primary(deaf: bool) {
    let cluster = TestCluster::start_with(3, framed());
    drop(cluster.root_client(0).await);
    let (primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let primary = usize::from(primary);
    let entry = (primary + 1) % 3;
    let client = Arc::new(cluster.root_client(entry).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let groups = all_groups(&partition_groups);
    let producer = Producer::start(client.clone(), stream, topic, 3);
    producer
        .wait_progress("before the loss", 4, Duration::from_secs(20))
        .await;
    let led = led_by(&cluster, &groups, primary);
    assert!(!led.is_empty(), "node {primary} leads the metadata group");
    let backups: Vec<usize> = (0..3).filter(|&b| b != primary).collect();
    for &b in &backups {
        match deaf {
            true => cluster.proxy().mute(b, primary),
            false => cluster.proxy().mute(primary, b),
        }
    }
    let started = Instant::now();
    for &(group, view) in &led {
        cluster.wait_new_primary(group, primary, view).await;
    }
    let replaced_within = started.elapsed();
    producer
        .wait_progress("during the one-way loss", 4, Duration::from_secs(45))
        .await;
    for &b in &backups {
        match deaf {
            true => cluster.proxy().unmute(b, primary),
            false => cluster.proxy().unmute(primary, b),
        }
    }
    let changes = wait_views_settle(&cluster, &groups, Duration::from_secs(4), Duration::from_secs(40)).await;
    producer
        .wait_progress("after the loss ended", 4, Duration::from_secs(30))
        .await;
    let failures = producer.failures();
    let acked = producer.finish().await;
    assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(3).await;
    for i in 0..3 {
        let errors = lines_at(&cluster, i, " ERROR ");
        assert!(errors.is_empty(), "node {i} logged errors: {errors:#?}");
    }
    eprintln!(
        "node {primary} led {led:x?}, replaced within {replaced_within:?}; {changes} role \
         changes after the loss ended; acknowledged {:?}, failed sends {failures:?}",
        acked.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// The metadata primary's frames reach both backups, theirs never reach it (its receive path
/// is broken): the backups still hear a primary that commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_hears_neither_backup_is_replaced() {
    one_way_loss_around_the_metadata_primary(true).await;
}

/// The backups' frames reach the metadata primary, its own reach neither backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_neither_backup_hears_is_replaced() {
    one_way_loss_around_the_metadata_primary(false).await;
}
