//! Five `iggy-server` processes on loopback (`TestCluster::start(5)`), as an operator and an SDK
//! user meet them: the same binary and one config file, VSR quorums of three, so the cluster
//! rides out two nodes down at once and refuses, without acknowledging, when three are.

use crate::cluster::{Producer, all_groups, assert_acknowledged_exactly_once, create_topic};
use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

const NODES: usize = 5;

/// Waits until a quorum (three) of the nodes outside `down` is Normal for `group` in one view
/// later than `after_view`, led by a node outside `down`; returns that primary.
async fn wait_primary_outside(cluster: &TestCluster, group: u64, down: &[usize], after_view: u32) -> u8 {
    let quorum = cluster.len() / 2 + 1;
    wait_until(
        &format!("group {group:#x} elects a primary outside {down:?} after view {after_view}"),
        Duration::from_secs(40),
        || {
            let mut by_view: BTreeMap<(u32, u8), usize> = BTreeMap::new();
            for i in (0..cluster.len()).filter(|i| !down.contains(i)) {
                if let Some(role) = cluster.role(i, group).filter(|r| r.normal) {
                    *by_view.entry((role.view, role.primary)).or_default() += 1;
                }
            }
            by_view.into_iter().find_map(|((view, primary), count)| {
                (view > after_view && !down.contains(&usize::from(primary)) && count >= quorum).then_some(primary)
            })
        },
        || cluster.describe(group),
    )
    .await
}

/// The roster as node `i` tells it: (replica id, role, status) per node.
async fn roster(client: &IggyClient) -> Vec<(u8, ClusterNodeRole, ClusterNodeStatus)> {
    let metadata = ok("get_cluster_metadata", within("roster", client.get_cluster_metadata()).await);
    metadata.nodes.iter().map(|n| (n.replica_id, n.role, n.status)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_ride_out_two_killed_at_once_and_a_whole_cluster_kill_losing_no_acknowledged_message() {
    let mut cluster = TestCluster::start(NODES);
    let client = Arc::new(cluster.root_client(0).await);

    // The roster: five nodes, one Leader, every one Healthy, the same from every node.
    let leader = wait_until_async(
        "node 0 tells five Healthy nodes and one Leader",
        Duration::from_secs(30),
        async || {
            let nodes = roster(&client).await;
            let ids: BTreeSet<u8> = nodes.iter().map(|n| n.0).collect();
            let leaders: Vec<u8> = nodes.iter().filter(|n| n.1 == ClusterNodeRole::Leader).map(|n| n.0).collect();
            let healthy = nodes.iter().all(|n| n.2 == ClusterNodeStatus::Healthy);
            (ids == (0..NODES as u8).collect() && leaders.len() == 1 && healthy).then(|| leaders[0])
        },
        String::new,
    )
    .await;
    let (metadata_primary, metadata_view) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    assert_eq!(leader, metadata_primary, "the Leader is the metadata primary the nodes log");

    // Five partitions: their primaries follow the creation view, so every node leads one.
    let (stream, topic, partition_groups) = create_topic(&client, NODES as u32).await;
    let groups = all_groups(&partition_groups);
    let primaries: BTreeMap<u64, (u8, u32)> = partition_groups
        .iter()
        .map(|&g| (g, cluster.primary(g).unwrap_or_else(|| panic!("{}", cluster.describe(g)))))
        .collect();
    let leading: BTreeSet<u8> = primaries.values().map(|&(p, _)| p).collect();
    assert_eq!(leading, (0..NODES as u8).collect(), "partition primaries spread over the five nodes: {primaries:x?}");

    let producer = Producer::start(client.clone(), stream, topic, NODES as u32);
    producer.wait_progress("before any crash", 4, Duration::from_secs(30)).await;

    // kill -9 of the metadata primary and of another partition's primary at once.
    let first = usize::from(metadata_primary);
    let (&group, &(second, group_view)) = primaries.iter().find(|(_, (p, _))| usize::from(*p) != first).unwrap();
    let second = usize::from(second);
    let down = [first, second];
    cluster.kill9(first);
    cluster.kill9(second);
    let new_metadata = wait_primary_outside(&cluster, METADATA_GROUP, &down, metadata_view).await;
    let mut views = Vec::new();
    for (&g, &(p, v)) in &primaries {
        if down.contains(&usize::from(p)) {
            views.push((g, wait_primary_outside(&cluster, g, &down, v).await));
        }
    }
    producer.wait_progress("two nodes down", 4, Duration::from_secs(60)).await;
    let survivor = (0..NODES).find(|i| !down.contains(i)).unwrap();
    let observer = cluster.root_client(survivor).await;
    let nodes = roster(&observer).await;
    eprintln!("with nodes {down:?} down node {survivor} tells {nodes:?}; new metadata primary {new_metadata}, partitions {views:x?}");

    cluster.restart(first);
    cluster.restart(second);
    for i in down {
        cluster.wait_normal(i, &groups).await;
    }
    producer.wait_progress("after both restarts", 4, Duration::from_secs(45)).await;

    // Every node killed with kill -9 at once and started again: the producer goes on.
    for i in 0..NODES {
        cluster.kill9(i);
    }
    for i in 0..NODES {
        cluster.restart(i);
    }
    for i in 0..NODES {
        cluster.wait_normal(i, &groups).await;
    }
    producer.wait_progress("after the whole-cluster restart", 4, Duration::from_secs(60)).await;

    let failures = producer.failures();
    let acked = producer.finish().await;
    let reader = cluster.root_client(first).await;
    let stored = assert_acknowledged_exactly_once(&reader, stream, topic, &acked).await;
    cluster.wait_identical_segments(NODES).await;
    eprintln!(
        "killed nodes {first} (metadata primary) and {second} (primary of {group:#x}, view {group_view}); acknowledged {:?}, stored {:?}, failed sends {failures:?}",
        acked.iter().map(Vec::len).collect::<Vec<_>>(),
        stored.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backups_left_behind_by_checkpoints_both_catch_up_by_state_transfer() {
    let options = ClusterOptions { env: vec![checkpoint_every(8)], ..ClusterOptions::default() };
    let mut cluster = TestCluster::start_with(NODES, options);
    let client = Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 1).await;
    let groups = all_groups(&partition_groups);
    let group = partition_groups[0];
    let producer = Producer::start(client.clone(), stream, topic, 1);
    producer.wait_progress("before the kills", 4, Duration::from_secs(30)).await;
    let (primary, _) = cluster.primary(group).expect("a partition primary");
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    // Two backups of both groups, neither the node the client talks to.
    let laggards: Vec<usize> = (1..NODES).filter(|&i| i != usize::from(primary) && i != usize::from(metadata_primary)).take(2).collect();
    assert_eq!(laggards.len(), 2, "two backups of both groups");
    for &i in &laggards {
        cluster.kill9(i);
    }
    let left_behind = format!("leaves replicas {laggards:?} behind");
    // Metadata ops too (streams created and deleted again), until the metadata group
    // checkpoints past both of them as well, then more, so every other node's journal outgrows
    // the bound too.
    let checkpointed = |node: u8, what: &str| current_start(&cluster.node(usize::from(node)).log()).lines().any(|l| l.contains(what) && l.contains(&left_behind));
    let mut round = 0;
    while !checkpointed(metadata_primary, "metadata: checkpoint at op") || round < 40 {
        assert!(round < 200, "no metadata checkpoint left nodes {laggards:?} behind");
        let name = format!("churn-{round}");
        ok("create", within("create", client.create_stream(&name, &StreamCreateOptions::default())).await);
        ok("delete", within("delete", client.delete_stream(&Identifier::named(&name).unwrap())).await);
        round += 1;
    }
    wait_until(
        &format!("the partition's primary checkpoints past nodes {laggards:?}"),
        Duration::from_secs(40),
        || checkpointed(primary, "partitions").then_some(()),
        || format!("acknowledged {:?}", producer.counts()),
    )
    .await;
    producer.wait_progress("past the laggards", 8, Duration::from_secs(30)).await;
    for &i in &laggards {
        cluster.restart(i);
    }
    for &i in &laggards {
        for g in [METADATA_GROUP, group] {
            wait_until(
                &format!("node {i} catches group {g:#x} up by state transfer"),
                Duration::from_secs(40),
                || current_start(&cluster.node(i).log()).lines().any(|l| l.contains(&format!("group {g:#x}: state transfer from replica")) && l.contains(" to op ")).then_some(()),
                || cluster.describe(g),
            )
            .await;
        }
        cluster.wait_normal(i, &groups).await;
    }
    producer.wait_progress("after the transfers", 4, Duration::from_secs(30)).await;
    let acked = producer.finish().await;
    let stored = assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    let segments = cluster.wait_identical_segments(1).await;
    // Both laggards serve the churned metadata as the others do: only stream "s" is left.
    for &i in &laggards {
        let reader = cluster.root_client(i).await;
        let streams = ok("streams", within("streams", reader.get_streams()).await);
        assert_eq!(streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["s"], "node {i}");
    }
    eprintln!("laggards {laggards:?}: acknowledged {}, stored {}, segments {:?}", acked[0].len(), stored[0].len(), segments.keys().collect::<Vec<_>>());
}

/// One message `text` sent to `partition` on its own task; its outcome.
fn send_on_its_own(client: &Arc<IggyClient>, (stream, topic): (u32, u32), partition: u32, text: String) -> tokio::task::JoinHandle<Result<(), IggyError>> {
    let client = client.clone();
    tokio::spawn(async move {
        let (mut batch, stream, topic, partitioning) = (vec![msg(text)], id(stream), id(topic), Partitioning::partition_id(partition));
        let sent = client.send_messages(&stream, &topic, &partitioning, &mut batch);
        within_for(Duration::from_secs(90), "send_messages", sent).await.map(|_| ())
    })
}

/// Three of five down (the metadata primary among them): no quorum anywhere, so nothing is
/// acknowledged, a metadata write nor a send, whichever node leads; once a third node is back
/// the writes the SDK is still retrying go through, and once all five are back every
/// acknowledged message is there once. With `CLUSTER_FIVE_LONG` set the three stay
/// down until the SDK gives up (30 s of 58s): each send then ends TransientNotAccepted, or
/// OperationUncertain where the live primary had prepared it, and a refused one is never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_acknowledge_nothing_and_the_writes_go_through_once_a_third_is_back() {
    let long = std::env::var_os("CLUSTER_FIVE_LONG").is_some();
    let mut cluster = TestCluster::start(NODES);
    let client = cluster.root_client(0).await;
    let (stream, topic, partition_groups) = create_topic(&client, NODES as u32).await;
    let groups = all_groups(&partition_groups);
    for p in 0..NODES as u32 {
        send_to_partition(&client, &id(stream), &id(topic), p, vec![msg(format!("before-p{p}"))]).await;
    }
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let mut down = vec![usize::from(metadata_primary)];
    down.extend((0..NODES).filter(|&i| i != usize::from(metadata_primary)).take(2));
    let survivor = (0..NODES).find(|i| !down.contains(i)).unwrap();
    let client = Arc::new(cluster.root_client(survivor).await);
    for &i in &down {
        cluster.kill9(i);
    }
    let sends: Vec<_> = (0..NODES as u32).map(|p| send_on_its_own(&client, (stream, topic), p, format!("minority-p{p}"))).collect();
    let create = tokio::spawn({
        let client = client.clone();
        async move { within_for(Duration::from_secs(90), "create_stream", client.create_stream("minority", &StreamCreateOptions::default())).await.map(|s| s.id) }
    });
    // Well past the heartbeat timeout (2 s): every group noticed, none acknowledged anything.
    tokio::time::sleep(Duration::from_secs(if long { 40 } else { 5 })).await;
    let mut refused = BTreeSet::new();
    if long {
        for (p, send) in sends.into_iter().enumerate() {
            match send.await.unwrap() {
                Err(IggyError::TransientNotAccepted) => _ = refused.insert(p),
                Err(IggyError::OperationUncertain(_)) => {}
                other => panic!("partition {p} with three of five down: {other:?}"),
            }
        }
        let created = create.await.unwrap();
        assert!(matches!(created, Err(IggyError::TransientNotAccepted | IggyError::OperationUncertain(_))), "create_stream with three of five down: {created:?}");
        cluster.restart(down[0]);
    } else {
        for (p, send) in sends.iter().enumerate() {
            assert!(!send.is_finished(), "partition {p}'s send ended with three of five down: {:?}", send);
        }
        assert!(!create.is_finished(), "create_stream ended with three of five down");
        // A third node back: the SDK's retries go through.
        cluster.restart(down[0]);
        for (p, send) in sends.into_iter().enumerate() {
            ok(&format!("partition {p}'s send once a third node is back"), send.await.unwrap());
        }
        ok("create_stream once a third node is back", create.await.unwrap());
    }
    for &i in &down[1..] {
        cluster.restart(i);
    }
    for i in 0..NODES {
        cluster.wait_normal(i, &groups).await;
    }
    let reader = cluster.root_client(survivor).await;
    for p in 0..NODES as u32 {
        send_to_partition(&reader, &id(stream), &id(topic), p, vec![msg(format!("after-p{p}"))]).await;
        let polled = poll(&reader, &id(stream), &id(topic), p, &consumer("reader"), PollingStrategy::first(), 100, false).await;
        let stored = payloads(&polled);
        let minority = format!("minority-p{p}");
        let expected: Vec<String> = match refused.contains(&(p as usize)) {
            true => vec![format!("before-p{p}"), format!("after-p{p}")],
            false if long && !stored.contains(&minority) => vec![format!("before-p{p}"), format!("after-p{p}")],
            false => vec![format!("before-p{p}"), minority, format!("after-p{p}")],
        };
        assert_eq!(stored, expected, "partition {p}");
        assert_eq!(offsets(&polled), (0..expected.len() as u64).collect::<Vec<_>>(), "partition {p}");
    }
    cluster.wait_identical_segments(NODES).await;
    eprintln!("nodes {down:?} down, client on node {survivor}; refused {refused:?}");
}

/// README "Replace a cluster node's disk" twice at once: the disks of two of five nodes die
/// (the metadata primary's and another partition primary's) and there is no copy. The three
/// others are a quorum, so writes go on; both nodes start empty with `--restored` together,
/// copy everything from their peers, leave the restored state, and nothing acknowledged is
/// lost or stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_disks_lost_at_once_rejoin_empty_with_restored_under_load() {
    let mut cluster = TestCluster::start(NODES);
    let client = Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, NODES as u32).await;
    let groups = all_groups(&partition_groups);
    let producer = Producer::start(client.clone(), stream, topic, NODES as u32);
    producer.wait_progress("before the disks die", 3, Duration::from_secs(30)).await;
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let first = usize::from(metadata_primary);
    let second = (first + 1) % NODES;
    for i in [first, second] {
        let data = cluster.node(i).data_dir();
        cluster.kill9(i);
        std::fs::remove_dir_all(&data).unwrap();
    }
    producer.wait_progress("while two disks are gone", 3, Duration::from_secs(60)).await;
    for i in [first, second] {
        cluster.restart_with(i, &["--restored"]);
    }
    for i in [first, second] {
        crate::day_two::leaves_the_restored_state(&cluster, i).await;
        cluster.wait_normal(i, &groups).await;
    }
    producer.wait_progress("after both rejoined", 3, Duration::from_secs(30)).await;
    let acked = producer.finish().await;
    assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(NODES).await;
}

/// Two of five nodes, the metadata primary and another partition primary, stopped (SIGSTOP)
/// past the heartbeat timeout: the other three elect new primaries and writes go on; resumed,
/// both follow the new views, and nothing acknowledged is lost or stored twice. Long (about
/// 45 s; `CLUSTER_FIVE_LONG` runs it): the SDK's sends to a stopped primary get no answer and
/// move on to the new one only at its 30 s operation deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_stopped_past_the_heartbeat_timeout_step_down_and_rejoin_losing_nothing() {
    if std::env::var_os("CLUSTER_FIVE_LONG").is_none() {
        return eprintln!("skipped: set CLUSTER_FIVE_LONG to run it");
    }
    let cluster = TestCluster::start(NODES);
    let client = Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, NODES as u32).await;
    let groups = all_groups(&partition_groups);
    let producer = Producer::start(client.clone(), stream, topic, NODES as u32);
    producer.wait_progress("before the pause", 3, Duration::from_secs(30)).await;

    let (metadata_primary, metadata_view) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    let first = usize::from(metadata_primary);
    let (group, (second, view)) = partition_groups
        .iter()
        .map(|&g| (g, cluster.primary(g).expect("a partition primary")))
        .find(|(_, (p, _))| usize::from(*p) != first)
        .expect("a partition another node leads");
    let paused = [first, usize::from(second)];
    for i in paused {
        cluster.pause(i);
    }
    let new_metadata = wait_primary_outside(&cluster, METADATA_GROUP, &paused, metadata_view).await;
    wait_primary_outside(&cluster, group, &paused, view).await;
    producer.wait_progress("while two nodes are stopped", 3, Duration::from_secs(90)).await;
    for i in paused {
        cluster.resume(i);
    }
    for i in paused {
        wait_until(
            &format!("node {i} follows a later metadata view"),
            Duration::from_secs(30),
            || cluster.role(i, METADATA_GROUP).filter(|r| r.normal && r.view > metadata_view).map(|_| ()),
            || cluster.describe(METADATA_GROUP),
        )
        .await;
        cluster.wait_normal(i, &groups).await;
    }
    producer.wait_progress("after the resume", 3, Duration::from_secs(30)).await;
    let acked = producer.finish().await;
    let reader = cluster.root_client(usize::from(new_metadata)).await;
    assert_acknowledged_exactly_once(&reader, stream, topic, &acked).await;
    cluster.wait_identical_segments(NODES).await;
}

/// A network split of five into two and three, the two holding a partition's primary and its
/// next replica (the one the SDK asks for the route after the primary refuses): the three elect
/// a new primary, and a client that wrote through the old one must find it well within the
/// SDK's 30 s deadline. Readers on the two's side get a refusal, never a copy without what the
/// three acknowledged (README: "a client behind a load balancer reads through any node what it
/// wrote through another").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_three_split_sends_the_sdk_to_the_threes_new_primary_and_refuses_reads_on_the_two() {
    let options = ClusterOptions { http: true, ..ClusterOptions::default() };
    let cluster = TestCluster::start_with(NODES, options);
    let client = cluster.root_client(0).await;
    let (stream, topic, partition_groups) = create_topic(&client, NODES as u32).await;
    let (metadata_primary, _) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    // A partition led by neither the metadata primary nor node 0 (the client's), whose next
    // replica is neither either.
    let (group, p, view) = partition_groups
        .iter()
        .map(|&g| (g, cluster.primary(g).unwrap()))
        .map(|(g, (p, v))| (g, usize::from(p), v))
        .find(|&(_, p, _)| ![0, usize::from(metadata_primary)].contains(&p) && ![0, usize::from(metadata_primary)].contains(&((p + 1) % NODES)))
        .expect("such a partition");
    let partition = (group & 0xfffff) as u32;
    let b = (p + 1) % NODES;
    // The client's route to the partition names its primary now.
    send_to_partition(&client, &id(stream), &id(topic), partition, vec![msg("before")]).await;
    let http_b = cluster.http_root_client(b).await;
    let http_p = cluster.http_root_client(p).await;
    let two = [p, b];
    let three: Vec<usize> = (0..NODES).filter(|i| !two.contains(i)).collect();
    for &i in &two {
        for &j in &three {
            cluster.hold(i, j);
            cluster.hold(j, i);
        }
    }
    let new = wait_primary_outside(&cluster, group, &two, view).await;
    let started = std::time::Instant::now();
    let mut batch = vec![msg("after-split")];
    let (stream, topic, partitioning) = (id(stream), id(topic), Partitioning::partition_id(partition));
    let sent = client.send_messages(&stream, &topic, &partitioning, &mut batch);
    let sent = within_for(Duration::from_secs(20), "send_messages", sent).await;
    assert!(sent.is_ok(), "the send after the split, {:?} later: {sent:?}; {}", started.elapsed(), cluster.describe(group));
    for (who, http) in [("backup", &http_b), ("old primary", &http_p)] {
        let (reader, from) = (consumer("r"), PollingStrategy::offset(0));
        let polled = http.poll_messages(&stream, &topic, Some(partition), &reader, &from, 100, false);
        if let Ok(polled) = within_for(Duration::from_secs(20), "http poll", polled).await {
            assert!(payloads(&polled).contains(&"after-split".to_string()), "the {who} on the two's side served {:?}", payloads(&polled));
        }
    }
    for &i in &two {
        for &j in &three {
            cluster.release(i, j);
            cluster.release(j, i);
        }
    }
    eprintln!("partition {partition}: primary {p} and node {b} split off, new primary {new}, send acknowledged after {:?}", started.elapsed());
}
