//! An operator moves a running cluster from a previous build to this one and back (README "Run
//! a 3-node cluster on one machine", the upgrade order; "Long forms"). It needs the previous
//! build's binary, `IGGY_OLD_SERVER_BIN` (build it from an older commit in a worktree of its
//! own); without it the test says so and passes without running. `scripts/upgrade/` has the
//! same walk with the CLI, for by hand.

use crate::cluster::create_topic;
use crate::day_two::cli_roster_until;
use crate::test_cluster::*;
use std::path::PathBuf;
use std::time::Duration;

/// The previous build, or `None` (after saying why nothing runs) when `IGGY_OLD_SERVER_BIN` is unset.
fn old_binary() -> Option<PathBuf> {
    let Some(path) = std::env::var_os("IGGY_OLD_SERVER_BIN") else {
        eprintln!("skipped: IGGY_OLD_SERVER_BIN is not set (the iggy-server binary of a previous build; README, Long forms)");
        return None;
    };
    let path = PathBuf::from(path);
    assert!(path.is_file(), "IGGY_OLD_SERVER_BIN={} is not a file", path.display());
    Some(path)
}

/// Three nodes of the previous build under a producer's load on three partitions move to this
/// build one at a time in README's order (highest id first), back to the previous build lowest
/// id first, to this build lowest id first, and one node back and forth alone. After each
/// restart the node is Normal in every group, links with both peers (its log names each
/// admitted), the CLI through its neighbour shows three healthy nodes, and the producer goes on.
/// No node logs a refusal (old and new nodes admit each other whichever dials), no acknowledged
/// message is lost or stored twice, and the segments are byte-identical on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_a_previous_build_and_back_under_load_loses_nothing() {
    let Some(old) = old_binary() else { return };
    assert_ne!(std::fs::read(&old).unwrap(), std::fs::read(crate::harness::server_binary()).unwrap(), "IGGY_OLD_SERVER_BIN is this build");
    let options = ClusterOptions { binaries: (0..3).map(|i| (i, old.clone())).collect(), ..Default::default() };
    let mut cluster = TestCluster::start_with(3, options);
    let client = std::sync::Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let groups: Vec<u64> = std::iter::once(METADATA_GROUP).chain(partition_groups.iter().copied()).collect();
    let producer = crate::cluster::Producer::start(client.clone(), stream, topic, 3);
    producer.wait_progress("on the previous build", 3, Duration::from_secs(20)).await;

    // (node, runs this build)
    let steps = [(2, true), (1, true), (0, true), (0, false), (1, false), (2, false), (0, true), (1, true), (2, true), (1, false), (1, true)];
    for (i, new) in steps {
        let build = if new { "this build" } else { "the previous build" };
        cluster.stop(i);
        cluster.nodes[i].set_binary((!new).then(|| old.clone()));
        cluster.restart(i);
        cluster.wait_normal(i, &groups).await;
        wait_until(
            &format!("node {i} on {build} links with both peers"),
            Duration::from_secs(30),
            || {
                let log = cluster.node(i).log();
                let start = current_start(&log);
                (0..3).filter(|&j| j != i).all(|j| start.contains(&format!("replica {i}: link with replica {j} admitted"))).then_some(())
            },
            || current_start(&cluster.node(i).log()).to_string(),
        )
        .await;
        let observer = (i + 1) % 3;
        cli_roster_until(&cluster, observer, &format!("node {i} back on {build}"), |t| t.matches("| healthy ").count() == 3 && t.matches("| leader ").count() == 1).await;
        producer.wait_progress(&format!("after node {i} moved to {build}"), 2, Duration::from_secs(30)).await;
    }
    let acked = producer.finish().await;
    for i in 0..3 {
        let log = cluster.node(i).log();
        let refusals: Vec<&str> = log.lines().filter(|l| l.contains("refused") || l.contains("StaleCopy") || l.contains("panicked")).collect();
        assert!(refusals.is_empty(), "node {i} logged refusals:\n{}", refusals.join("\n"));
    }
    crate::cluster::assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(3).await;
}
