//! A three-node cluster as three machines on a switch: each node in a network stack of its
//! own (`lan.rs`), reached by the SDK through the LAN, and a node's cable pulled out while a
//! producer runs. Unlike a killed process or the loopback proxy's cut, an unplugged node's
//! connections are not closed: its peers and the client only stop hearing from it, and when
//! the cable goes back in, connections from before may still be alive.

use crate::cluster::*;
use crate::harness::*;
use iggy::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// The partition primary that neither serves the test's client (node 0) nor leads the
/// metadata group, unplugged for three heartbeat timeouts under the producer: the other two
/// elect a primary for its partition (and the metadata group keeps its own), the SDK follows
/// it, the unplugged node rejoins once plugged back (and takes its partition back), every
/// acknowledged message is read back once, and the three nodes end with byte-identical
/// segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_in_three_network_stacks_lose_nothing_while_a_primary_is_unplugged() {
    let cluster = TestCluster::start_on_lan(3, ClusterOptions::default());
    let client = Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let groups = all_groups(&partition_groups);
    let producer = Producer::start(client.clone(), stream, topic, 3);
    producer
        .wait_progress("before the cable is pulled", 4, Duration::from_secs(20))
        .await;

    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let (group, victim, view) = partition_groups
        .iter()
        .filter_map(|&g| cluster.primary(g).map(|(primary, view)| (g, primary, view)))
        .find(|(_, primary, _)| *primary != 0 && *primary != metadata_primary)
        .expect("three partitions led by three nodes");
    let unplugged = usize::from(victim);
    cluster.unplug(unplugged);
    let successor = cluster.wait_new_primary(group, unplugged, view).await;
    // Three heartbeat timeouts away: long enough for every peer to give up on its links.
    tokio::time::sleep(Duration::from_secs(6)).await;
    producer
        .wait_progress("while the primary is unplugged", 4, Duration::from_secs(60))
        .await;
    // The node's peers see it Unreachable, though nothing closed their connections.
    let observer = cluster.root_client(usize::from(successor)).await;
    wait_roster_status(
        &observer,
        victim,
        ClusterNodeStatus::Unreachable,
        Duration::from_secs(10),
    )
    .await;

    cluster.plug(unplugged);
    cluster.wait_normal(unplugged, &groups).await;
    wait_until(
        &format!("node {victim} leads group {group:#x} again after the cable is back"),
        Duration::from_secs(40),
        || {
            cluster
                .role(unplugged, group)
                .filter(|r| r.normal && r.primary == victim && r.view > view)
                .map(|_| ())
        },
        || cluster.describe(group),
    )
    .await;
    producer
        .wait_progress("after the cable is back", 4, Duration::from_secs(30))
        .await;
    let failures = producer.failures();
    let acked = producer.finish().await;
    let stored = assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(3).await;
    eprintln!(
        "unplugged node {victim} (primary of {group:#x} in view {view}; node {successor} took \
         over); acknowledged {:?}, stored {:?}, failed sends {failures:?}",
        acked.iter().map(Vec::len).collect::<Vec<_>>(),
        stored.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// The metadata primary unplugged: the other two elect one of themselves, the SDK (given a
/// node that stays on the LAN) creates streams through the new primary, and the old primary,
/// plugged back, follows the new view and holds every stream created meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplugged_metadata_primary_is_replaced_and_follows_the_new_view_once_plugged_back() {
    let cluster = TestCluster::start_on_lan(3, ClusterOptions::default());
    // Signed in once the root user is replicated: a metadata primary leads by then.
    drop(cluster.root_client(0).await);
    let (metadata_primary, view) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let unplugged = usize::from(metadata_primary);
    // The SDK is given a node that stays on the LAN.
    let entry = (unplugged + 1) % cluster.len();
    let client = cluster.root_client(entry).await;
    cluster.unplug(unplugged);
    let successor = cluster
        .wait_new_primary(METADATA_GROUP, unplugged, view)
        .await;
    let mut created = Vec::new();
    for k in 0..5u32 {
        let name = format!("lan-{k}");
        let stream = within(
            "create_stream",
            client.create_stream(&name, &StreamCreateOptions::default()),
        )
        .await;
        created.push(ok("create_stream", stream).id);
    }
    cluster.plug(unplugged);
    wait_until(
        &format!("node {unplugged} follows primary {successor} once plugged back"),
        Duration::from_secs(30),
        || {
            cluster
                .role(unplugged, METADATA_GROUP)
                .filter(|r| r.normal && r.view > view && r.primary == successor)
                .map(|_| ())
        },
        || cluster.describe(METADATA_GROUP),
    )
    .await;
    // Read from the node that was away: it holds every stream created without it.
    let reader = cluster.root_client(unplugged).await;
    for id_ in created {
        let stream = within("get_stream", reader.get_stream(&id(id_))).await;
        assert!(
            ok("get_stream", stream).is_some(),
            "stream {id_} on node {unplugged}"
        );
    }
}
