//! A roster whose `ip` entries are host names (as a Kubernetes StatefulSet's stable pod names):
//! three nodes named `localhost` (which resolves to 127.0.0.1 here), told apart by their ports.
//! The replicas dial each other by that name (resolved at every attempt), each binds its
//! replica listener on the wildcard address, and the official SDK, told the names by cluster
//! metadata, creates, sends and polls through them.

use crate::cluster::{ReplicaCertificates, create_topic, logged, read_numbered, send_numbered, serves_without_node_2};
use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_named_localhost_in_the_roster_serve_the_sdk_and_tell_it_the_names() {
    let options = ClusterOptions { roster_host: Some("localhost".into()), ..Default::default() };
    let mut cluster = TestCluster::start_with(3, options);
    let config = std::fs::read_to_string(cluster._config_dir.path().join("cluster.toml")).expect("read cluster.toml");
    assert_eq!(config.matches("ip = \"localhost\"").count(), 3, "{config}");
    assert!(!config.contains("127.0.0.1"), "{config}");
    for i in 0..3 {
        let log = cluster.node(i).log();
        assert!(log.contains("replica listener on [::]:") || log.contains("replica listener on 0.0.0.0:"), "node {i} binds the wildcard for its name:\n{log}");
    }

    // Connected by name, as a client told the roster would be.
    let by_name = format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@localhost:{}", cluster.node(0).port());
    let client = signed_in(&by_name, "root signs in on node 0 by name").await;
    let (stream, topic, groups) = create_topic(&client, 3).await;
    send_numbered(&client, (stream, topic), 3, 30, 3).await;
    read_numbered(&client, (stream, topic), 3, 30).await;

    let metadata = ok("get_cluster_metadata", within("roster", client.get_cluster_metadata()).await);
    let ids: BTreeSet<u8> = metadata.nodes.iter().map(|n| n.replica_id).collect();
    assert_eq!(ids, BTreeSet::from([0, 1, 2]), "{metadata:?}");
    for node in &metadata.nodes {
        let i = usize::from(node.replica_id);
        assert_eq!((node.ip.as_str(), node.endpoints.tcp), ("localhost", cluster.node(i).port()), "node {i}: {metadata:?}");
        assert_eq!(node.status, ClusterNodeStatus::Healthy, "node {i} is linked with node 0: {metadata:?}");
    }
    let leaders: Vec<u8> = metadata.nodes.iter().filter(|n| n.role == ClusterNodeRole::Leader).map(|n| n.replica_id).collect();
    assert_eq!(leaders.len(), 1, "exactly one Leader: {metadata:?}");
    let primaries: BTreeSet<u8> = groups.iter().map(|&g| cluster.primary(g).unwrap_or_else(|| panic!("{}", cluster.describe(g))).0).collect();
    assert_eq!(primaries, BTreeSet::from([0, 1, 2]), "partition primaries spread over the named nodes");

    // A node killed and restarted is dialed by name again and catches up.
    cluster.kill9(2);
    cluster.restart(2);
    cluster.wait_normal(2, &crate::cluster::all_groups(&groups)).await;
    let reader = cluster.root_client(2).await;
    read_numbered(&reader, (stream, topic), 3, 30).await;
    let metadata = ok("get_cluster_metadata", within("roster", reader.get_cluster_metadata()).await);
    assert!(metadata.nodes.iter().all(|n| n.ip == "localhost"), "{metadata:?}");
}

/// `[cluster.tls]` with names: each certificate names its node's roster host name as a DNS SAN
/// (`localhost` for nodes 0 and 1), which is what the peers check, whatever address the name
/// resolves to; node 2's names another host, so both its dialers refuse it, naming the name, and
/// node 2, which no peer admits, never formats a history of its own (it waits for a majority).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_named_nodes_check_dns_sans_and_refuse_a_certificate_for_another_name() {
    let certificates = ReplicaCertificates::new("e2e named cluster CA");
    let names = ["localhost", "localhost", "iggy-2.elsewhere.test"];
    let options = ClusterOptions { roster_host: Some("localhost".into()), node_env: (0..3).map(|i| (i, certificates.node_env(i, names[i]))).collect(), unready: [2].into(), ..Default::default() };
    let cluster = TestCluster::start_with(3, options);
    for dialer in [0, 1] {
        let line = format!("replica {dialer}: link with replica 2: peer refused: `tls`");
        logged(&cluster, dialer, &format!("node {dialer} refuses node 2's certificate"), &[&line, "certificate not valid for name \"localhost\"", "does not name its roster ip"]).await;
    }
    logged(&cluster, 2, "node 2 logs that its certificate was refused", &["replica 2: inbound replica link: peer refused: `tls`"]).await;
    serves_without_node_2(&cluster).await;
    let client = cluster.root_client(1).await;
    let metadata = ok("get_cluster_metadata", within("roster", client.get_cluster_metadata()).await);
    let healthy: Vec<u8> = metadata.nodes.iter().filter(|n| n.status == ClusterNodeStatus::Healthy).map(|n| n.replica_id).collect();
    assert_eq!(healthy, [0, 1], "nodes 0 and 1 linked over TLS by name, node 2 refused: {metadata:?}");
}
