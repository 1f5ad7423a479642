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
    restored_copy_keeps_what_it_acknowledged(true).await;
}

/// The same restore started without `--restored` (an operator who skipped that step): C
/// linked with the run R started after the copy was taken, so the copy, starting that run's
/// number again, is refused by C (StaleCopy) and sees it is the copy itself: it writes the
/// restored marker and stops (exit 75) before taking part in any view change. Started again
/// as is, it is restored, and nothing acknowledged is lost. (Without this check R and C
/// elected a view without the acknowledged messages.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restored_from_an_older_copy_without_the_flag_is_stopped_by_a_peer_that_saw_it_run_on() {
    restored_copy_keeps_what_it_acknowledged(false).await;
}

/// Partition primary P, restored node R, third node C, as the tests above say; R's copy is
/// started with `--restored` when `flag`, else as is.
async fn restored_copy_keeps_what_it_acknowledged(flag: bool) {
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
    if flag {
        cluster.restart_with(r, &["--restored"]);
    } else {
        let (status, printed) = tokio::task::block_in_place(|| cluster.run_to_exit(r, Duration::from_secs(30)));
        assert_eq!(status.code(), Some(75), "{printed}");
        assert!(printed.contains("this data directory is older than this node was"), "{printed}");
        assert!(data.join("restored.pending").exists(), "the copy marked itself restored:\n{printed}");
        wait_until(
            &format!("node {c} logs why it refused node {r}"),
            Duration::from_secs(10),
            || current_start(&cluster.node(c).log()).contains("StaleCopy").then_some(()),
            || current_start(&cluster.node(c).log()).to_string(),
        )
        .await;
        // Started again as is: the marker makes it restored.
        cluster.restart(r);
    }
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
pub(crate) async fn leaves_the_restored_state(cluster: &TestCluster, i: usize) {
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
    let (s, t) = (stream.to_string(), topic.to_string());
    let partition: [(&str, &str); 4] = [("group", "partition"), ("stream", &s), ("topic", &t), ("partition", "0")];
    for i in 0..3 {
        // Judged against the primaries the logs name when the scrape settled: a partition may
        // still move to the node its creation view names (a rebalance) after it was created.
        let (samples, metadata_primary, partition_primary) = wait_until_async(
            &format!("node {i} reports every group normal and applied"),
            Duration::from_secs(20),
            async || {
                let samples = crate::metrics::scrape(&cluster.http_url(i)).await;
                let settled = samples.iter().any(|s| s.name == "iggy_vsr_status")
                    && samples.iter().filter(|s| s.name == "iggy_vsr_status").all(|s| s.value == 0.0);
                let (metadata_primary, _) = cluster.primary(METADATA_GROUP)?;
                let (partition_primary, _) = cluster.primary(groups[0])?;
                let named = settled && crate::metrics::value(&samples, "iggy_vsr_primary", &partition) == f64::from(partition_primary);
                named.then_some((samples, metadata_primary, partition_primary))
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

/// Runs `iggy cluster metadata` through node `through` until `wanted` holds for its output (the
/// CLI's table), up to 30 s; that output.
pub(crate) async fn cli_roster_until(cluster: &TestCluster, through: usize, what: &str, wanted: impl Fn(&str) -> bool) -> String {
    let transport = vec!["--tcp-server-address".to_string(), cluster.address(through)];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = tokio::task::block_in_place(|| {
            std::process::Command::new(crate::cli::cli_binary())
                .args(&transport)
                .args(["-u", ROOT_USER, "-p", ROOT_PASSWORD, "cluster", "metadata"])
                .env_remove("RUST_LOG")
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run the iggy CLI")
        });
        let last = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() && wanted(&last) {
            return last;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: the CLI through node {through} never showed it:\n{last}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The CLI table's row of replica `id`.
fn roster_row(table: &str, id: usize) -> Option<&str> {
    table.lines().find(|line| line.starts_with(&format!("| {id} ")))
}

/// A consumer-group member polling with auto-commit (the server picks the partition) until
/// stopped: every payload it received, and the errors it met (retried after a pause).
struct GroupMember {
    received: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl GroupMember {
    async fn start(client: IggyClient, stream: u32, topic: u32) -> Self {
        let group = ok("create group", within("create group", client.create_consumer_group(&id(stream), &id(topic), "g")).await);
        ok("join", within("join", client.join_consumer_group(&id(stream), &id(topic), &id(group.id))).await);
        let received: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let errors: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r, e, s) = (received.clone(), errors.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let consumer = Consumer::group(id(group.id));
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                let polled = tokio::time::timeout(
                    Duration::from_secs(40),
                    client.poll_messages(&id(stream), &id(topic), None, &consumer, &PollingStrategy::next(), 50, true),
                )
                .await;
                match polled {
                    Ok(Ok(polled)) if !polled.messages.is_empty() => r.lock().unwrap().extend(payloads(&polled)),
                    Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
                    Ok(Err(error)) => {
                        e.lock().unwrap().push(format!("{error} ({})", error.as_code()));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(_) => e.lock().unwrap().push("poll hung for 40 s".into()),
                }
            }
        });
        GroupMember { received, errors, stop, task }
    }
}

/// A rolling restart, as an operator does one under load: a producer on three partitions and a
/// consumer-group member polling with auto-commit run throughout; each node in turn is stopped
/// gracefully, `iggy cluster metadata` through another node shows it Unreachable, it is started
/// again with a changed timing knob (`heartbeat_timeout` 2 s to 3 s, a rolling configuration
/// change) and the CLI shows all three Healthy before the next. No acknowledged message is lost
/// or stored twice, the member received every acknowledged message, and once the cluster is
/// stopped every node's data directory verifies with the configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_with_a_changed_timing_knob_loses_nothing() {
    let mut cluster = TestCluster::start(3);
    let client = std::sync::Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let groups: Vec<u64> = std::iter::once(METADATA_GROUP).chain(partition_groups.iter().copied()).collect();
    let producer = crate::cluster::Producer::start(client.clone(), stream, topic, 3);
    let member = GroupMember::start(cluster.root_client(1).await, stream, topic).await;
    producer.wait_progress("before the rolling restart", 3, Duration::from_secs(20)).await;

    for i in 0..3 {
        let observer = (i + 1) % 3;
        cli_roster_until(&cluster, observer, "all healthy", |t| t.matches("| healthy ").count() == 3 && t.matches("| leader ").count() == 1).await;
        cluster.stop(i);
        cli_roster_until(&cluster, observer, &format!("node {i} unreachable"), |t| roster_row(t, i).is_some_and(|row| row.contains("| unreachable "))).await;
        producer.wait_progress(&format!("while node {i} is down"), 2, Duration::from_secs(30)).await;
        cluster.nodes[i].set_env("IGGY_CLUSTER_HEARTBEAT_TIMEOUT", Some("3s"));
        cluster.restart(i);
        cluster.wait_normal(i, &groups).await;
        cli_roster_until(&cluster, observer, &format!("node {i} back"), |t| t.matches("| healthy ").count() == 3 && t.matches("| leader ").count() == 1).await;
        producer.wait_progress(&format!("after node {i} rejoined"), 2, Duration::from_secs(30)).await;
    }
    let acked = producer.finish().await;
    let all: Vec<String> = acked.iter().flatten().cloned().collect();
    wait_until(
        "the group member received every acknowledged message",
        Duration::from_secs(30),
        || {
            let received = member.received.lock().unwrap();
            all.iter().all(|m| received.contains(m)).then_some(())
        },
        || {
            let received = member.received.lock().unwrap();
            let missing: Vec<&String> = all.iter().filter(|m| !received.contains(m)).take(10).collect();
            format!("{} received, missing e.g. {missing:?}; errors {:?}", received.len(), member.errors.lock().unwrap())
        },
    )
    .await;
    member.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    within_for(Duration::from_secs(45), "the member stops", member.task).await.expect("member task");
    let received = member.received.lock().unwrap().clone();
    let mut seen = std::collections::BTreeSet::new();
    let duplicates: Vec<&String> = received.iter().filter(|m| !seen.insert(*m)).collect();
    eprintln!("member: {} received, {} duplicates, errors {:?}", received.len(), duplicates.len(), member.errors.lock().unwrap());
    crate::cluster::assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    cluster.wait_identical_segments(3).await;

    drop(client);
    for i in 0..3 {
        cluster.stop(i);
    }
    let config = cluster._config_dir.path().join("cluster.toml");
    for i in 0..3 {
        let out = std::process::Command::new(server_binary())
            .args(["verify", "--path"])
            .arg(cluster.node(i).data_dir())
            .env("IGGY_CONFIG_PATH", &config)
            .env_remove("RUST_LOG")
            .output()
            .expect("run iggy-server verify");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "node {i}:\n{printed}{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A limit raised node by node (README "Configuration", `limits.max_frame_size`): node 0 runs
/// the raised limit while its peers still run the old one, and node 0 leads a partition. A send
/// larger than the old limit reached node 0 as that partition's primary, and its prepare was
/// larger than the peers accepted on the replica plane: each closed its link with node 0 at
/// every retransmission (`frame refused: size`), every 250 ms for good, the send never
/// committed and node 0's other traffic went through flapping links. The replica plane now
/// takes any frame a peer's own limit allows, so the send commits and the links stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_limit_raised_on_one_node_first_keeps_the_replica_links_up() {
    const OLD: usize = 1 << 20;
    let mut node_env = std::collections::BTreeMap::new();
    node_env.insert(0, vec![("IGGY_LIMITS_MAX_FRAME_SIZE".to_string(), (4 * OLD).to_string())]);
    for i in 1..3 {
        node_env.insert(i, vec![("IGGY_LIMITS_MAX_FRAME_SIZE".to_string(), OLD.to_string())]);
    }
    let cluster = TestCluster::start_with(3, ClusterOptions { node_env, ..ClusterOptions::default() });
    let client = cluster.root_client(0).await;
    let (stream, topic, groups) = create_topic(&client, 3).await;
    for i in 0..3 {
        cluster.wait_normal(i, &groups).await;
    }
    let partition = (0..3u32).find(|&p| cluster.primary(groups[p as usize]).map(|(leader, _)| leader) == Some(0)).expect("a partition led by node 0");
    let big = "x".repeat(2 * OLD);
    let mut batch = vec![msg(big)];
    let sent = tokio::time::timeout(
        Duration::from_secs(30),
        client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(partition), &mut batch),
    )
    .await;
    let refused: Vec<String> = (1..3)
        .flat_map(|i| current_start(&cluster.node(i).log()).lines().filter(|l| l.contains("frame refused")).take(2).map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert!(matches!(sent, Ok(Ok(_))), "the send above the peers' limit: {sent:?}; {refused:?}");
    assert!(refused.is_empty(), "{refused:?}");
    for p in 0..3 {
        send_to_partition(&client, &id(stream), &id(topic), p, vec![msg("small")]).await;
    }
    cluster.wait_identical_segments(3).await;
}

/// A node restarted with another `[cluster] name` (an edited copy of the shared file): its
/// data directory belongs to the cluster its name derived, so the start is refused (exit 1)
/// before it serves or links with anyone, naming `cluster.name`; with the shared name it
/// rejoins. The refusal said "this is another node's data directory; start each node on its
/// own (system.path) with its own --replica-id", which sends the operator after the wrong
/// thing: the directory is this node's, the name changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_with_another_cluster_name_is_refused_naming_it() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    create_topic(&client, 1).await;
    cluster.stop(2);
    cluster.nodes[2].set_env("IGGY_CLUSTER_NAME", Some("another-cluster"));
    cluster.nodes[2].start_again_unready();
    let status = tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::from_secs(30)));
    let printed = current_start(&cluster.node(2).log()).to_string();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{printed}");
    assert!(printed.contains("cluster.name"), "{printed}");
    assert!(!printed.contains("another node's data directory"), "{printed}");
    cluster.nodes[2].set_env("IGGY_CLUSTER_NAME", None);
    cluster.restart(2);
    crate::cluster::wait_roster_status(&client, 2, ClusterNodeStatus::Healthy, Duration::from_secs(20)).await;
}
