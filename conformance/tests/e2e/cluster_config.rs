//! The cluster configuration as an operator meets it: a bad cluster file or `--replica-id` is
//! refused at start, naming the key, before the data directory is touched. (A valid one serves:
//! see `cluster.rs`.)

use crate::harness::*;
use crate::test_cluster::TestCluster;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Three nodes on one machine, as README.md shows (QUIC and HTTP are on by default, so they
/// have ports too).
fn three_node_file() -> String {
    let mut text = String::from("[cluster]\nenabled = true\nname = \"e2e-cluster\"\n");
    for id in 0..3 {
        text.push_str(&format!(
            "\n[[cluster.nodes]]\nname = \"node-{id}\"\nip = \"127.0.0.1\"\nreplica_id = {id}\n\
             [cluster.nodes.ports]\ntcp = {}\nquic = {}\nhttp = {}\ntcp_replica = {}\n",
            18090 + id,
            18080 + id,
            13000 + id,
            18100 + id
        ));
    }
    text
}

/// A stop asked for before the node serves ends the start cleanly: exit 0 and a line saying so,
/// not killed by the signal (143, which a supervisor counts as a crash). Here a cluster node
/// with no history waits for its peers (none runs) when SIGTERM comes.
#[test]
fn a_stop_before_the_node_serves_exits_0_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("[cluster]\nenabled = true\nname = \"e2e-early-stop\"\n");
    for id in 0..3 {
        text.push_str(&format!(
            "\n[[cluster.nodes]]\nname = \"node-{id}\"\nip = \"127.0.0.1\"\nreplica_id = {id}\n\
             [cluster.nodes.ports]\ntcp = {}\nquic = {}\nhttp = {}\ntcp_replica = {}\n",
            free_port(),
            free_port(),
            free_port(),
            free_port()
        ));
    }
    std::fs::write(dir.path().join("config.toml"), text).unwrap();
    let log = dir.path().join("log");
    let mut child = Command::new(server_binary())
        .args(["--replica-id", "0", "--with-default-root-credentials"])
        .env_remove("RUST_LOG")
        .env("IGGY_SYSTEM_PATH", dir.path().join("data"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run iggy-server");
    let waiting = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).unwrap().contains("replica listener") {
        assert!(Instant::now() < waiting, "{}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) with the child's pid, which is not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}: {log}");
    assert!(log.contains("stopped before serving"), "{log}");
    assert!(!log.contains(" serving\n"), "it did not serve: {log}");
}

/// Starts the real binary in `dir` with `config.toml` there, a data directory holding one
/// file, and `--fresh` (which would delete it were the start to get that far).
fn start(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("keep"), b"untouched").unwrap();
    let mut command = Command::new(server_binary());
    command
        .args(args)
        .arg("--fresh")
        .env_remove("RUST_LOG")
        .env_remove("IGGY_ROOT_PASSWORD")
        .env("IGGY_SYSTEM_PATH", &data)
        .current_dir(dir)
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    refusal_of(&mut command)
}

/// Runs `command` (an iggy-server start expected to be refused) to its exit.
fn refusal_of(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run iggy-server");
    // A refusal comes at once; the bound only keeps a binary that serves instead from hanging
    // the test.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll iggy-server").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "iggy-server kept running instead of refusing:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("iggy-server output")
}

fn assert_refused_untouched(dir: &Path, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let data = dir.join("data");
    let entries: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec!["keep"], "data directory untouched: {stderr}");
    assert_eq!(std::fs::read(data.join("keep")).unwrap(), b"untouched");
    stderr
}

#[test]
fn a_cluster_node_without_given_root_credentials_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = start(dir.path(), &three_node_file(), &["--replica-id", "1"], &[]);
    let stderr = assert_refused_untouched(dir.path(), &out);
    assert!(stderr.contains("IGGY_ROOT_PASSWORD"), "{stderr}");
    assert!(
        stderr.contains("--with-default-root-credentials"),
        "{stderr}"
    );
}

#[test]
fn a_duplicate_replica_id_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = three_node_file().replacen("replica_id = 2", "replica_id = 1", 1);
    let out = start(dir.path(), &file, &["--replica-id", "1"], &[]);
    let stderr = assert_refused_untouched(dir.path(), &out);
    assert!(stderr.contains("`cluster.nodes[2].replica_id`"), "{stderr}");
}

#[test]
fn the_replica_id_flag_must_name_a_roster_node() {
    let dir = tempfile::tempdir().unwrap();
    let out = start(dir.path(), &three_node_file(), &[], &[]);
    let stderr = assert_refused_untouched(dir.path(), &out);
    assert!(stderr.contains("--replica-id is required"), "{stderr}");
    let out = start(dir.path(), &three_node_file(), &["--replica-id", "3"], &[]);
    let stderr = assert_refused_untouched(dir.path(), &out);
    assert!(stderr.contains("--replica-id 3"), "{stderr}");
}

#[test]
fn a_roster_given_only_by_environment_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("IGGY_CLUSTER_ENABLED", "true"),
        ("IGGY_CLUSTER_NODES_0_NAME", "solo"),
        ("IGGY_CLUSTER_NODES_0_IP", "127.0.0.1"),
        ("IGGY_CLUSTER_NODES_0_REPLICA_ID", "0"),
        ("IGGY_CLUSTER_NODES_0_PORTS_TCP", "18090"),
        ("IGGY_CLUSTER_NODES_0_PORTS_QUIC", "18080"),
        ("IGGY_CLUSTER_NODES_0_PORTS_HTTP", "13000"),
    ];
    // tcp_replica is missing: named.
    let out = start(dir.path(), "", &["--replica-id", "0"], &env);
    let stderr = assert_refused_untouched(dir.path(), &out);
    assert!(
        stderr.contains("`cluster.nodes[0].ports.tcp_replica`"),
        "{stderr}"
    );
}

#[test]
fn the_roster_variables_are_listed() {
    let out = Command::new(server_binary())
        .arg("--list-config-env-vars")
        .output()
        .expect("run iggy-server");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    for line in [
        "IGGY_CLUSTER_HEARTBEAT_TIMEOUT\tcluster.heartbeat_timeout\tstring\t\"5s\"",
        "IGGY_CLUSTER_NODES_<i>_REPLICA_ID\tcluster.nodes[<i>].replica_id\tinteger",
        "IGGY_CLUSTER_NODES_<i>_PORTS_TCP_REPLICA\tcluster.nodes[<i>].ports.tcp_replica\tinteger",
    ] {
        assert!(listed.contains(line), "{line:?} in:\n{listed}");
    }
}

#[test]
fn a_replica_tls_file_that_is_empty_missing_or_not_pem_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let junk = junk.to_str().unwrap();
    let args = ["--replica-id", "0", "--with-default-root-credentials"];
    let cases = [
        ("", junk, junk, "`cluster.tls.cert_file`"),
        (
            "/nonexistent/node.pem",
            junk,
            junk,
            "cluster.tls.cert_file \"/nonexistent/node.pem\"",
        ),
        (junk, junk, junk, "cluster.tls.cert_file"),
    ];
    for (cert, key, ca, named) in cases {
        let env = [
            ("IGGY_CLUSTER_TLS_ENABLED", "true"),
            ("IGGY_CLUSTER_TLS_CERT_FILE", cert),
            ("IGGY_CLUSTER_TLS_KEY_FILE", key),
            ("IGGY_CLUSTER_TLS_CA_FILE", ca),
        ];
        let out = start(dir.path(), &three_node_file(), &args, &env);
        let stderr = assert_refused_untouched(dir.path(), &out);
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
}

/// Each file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files_under(dir)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

/// Asserts `dir` holds exactly the files of `before`, each with the same bytes.
fn assert_untouched(dir: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, context: &str) {
    let after = contents(dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "no file added or removed: {context}"
    );
    assert!(*before == after, "every file's bytes unchanged: {context}");
}

/// Creates stream `name` through `client`.
async fn create_stream(client: &IggyClient, name: &str) {
    let options = StreamCreateOptions::default();
    let create = client.create_stream(name, &options);
    ok("create stream", within("create stream", create).await);
}

/// A node started on another node's data directory (node 1's copied under node 2's path, as a
/// mistyped `system.path` or a restored backup of the wrong machine gives) is refused as a
/// configuration error, naming whose directory it is, before anything in it is modified: not
/// exit 74, which says the disk failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_on_another_nodes_data_directory_is_refused_and_touches_nothing() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    create_stream(&client, "s").await;
    for node in [1, 2] {
        cluster.stop(node);
    }
    let (one, two) = (cluster.node(1).data_dir(), cluster.node(2).data_dir());
    std::fs::remove_dir_all(&two).unwrap();
    copy_tree(&one, &two);
    let before = contents(&two);
    cluster.nodes[2].start_again_unready();
    let status = cluster.nodes[2]
        .wait_exit(Duration::from_secs(30))
        .expect("node 2 refused to start on node 1's directory");
    let log = cluster.node(2).log();
    assert_eq!(status.code(), Some(1), "{log}");
    for named in ["replica 1", "this node is replica 2", "--replica-id"] {
        assert!(log.contains(named), "{named:?} in:\n{log}");
    }
    assert_untouched(&two, &before, "node 2");
}

/// A cluster's size is fixed by its history (quorums are majorities of it): the three nodes of a
/// cluster restarted on a roster of five (nodes 3 and 4 added by `IGGY_CLUSTER_NODES_3_*` and
/// `_4_*`) refuse to start, naming both counts, before anything in their data directories is
/// modified; started again on their own roster, they serve what they held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_restarted_on_a_roster_of_another_size_are_refused_and_touch_nothing() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    create_stream(&client, "kept").await;
    drop(client);
    for node in 0..3 {
        cluster.stop(node);
    }
    let added: Vec<(String, String)> = (3..5)
        .flat_map(|j| {
            [
                (format!("IGGY_CLUSTER_NODES_{j}_NAME"), format!("added-{j}")),
                (
                    format!("IGGY_CLUSTER_NODES_{j}_IP"),
                    "127.0.0.1".to_string(),
                ),
                (format!("IGGY_CLUSTER_NODES_{j}_REPLICA_ID"), j.to_string()),
                (
                    format!("IGGY_CLUSTER_NODES_{j}_PORTS_TCP"),
                    free_port().to_string(),
                ),
                (
                    format!("IGGY_CLUSTER_NODES_{j}_PORTS_TCP_REPLICA"),
                    free_port().to_string(),
                ),
            ]
        })
        .collect();
    for node in 0..3 {
        let dir = cluster.node(node).data_dir();
        let before = contents(&dir);
        for (key, value) in &added {
            cluster.nodes[node].set_env(key, Some(value));
        }
        cluster.nodes[node].start_again_unready();
        let status = cluster.nodes[node]
            .wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("node {node} refused to start on a roster of five"));
        let log = cluster.node(node).log();
        assert_eq!(status.code(), Some(1), "node {node}: {log}");
        for named in [
            "formed by a cluster of 3 replicas",
            "now lists 5",
            "nothing was written",
        ] {
            assert!(log.contains(named), "node {node}: {named:?} in:\n{log}");
        }
        assert_untouched(&dir, &before, &format!("node {node}"));
        for (key, _) in &added {
            cluster.nodes[node].set_env(key, None);
        }
    }
    for node in 0..3 {
        cluster.restart(node);
    }
    serves_kept(&cluster, 1).await;
}

/// A standalone node started with `env`, holding a stream, then stopped; its data directory
/// given to node 0 of the 3-node file: the refused start's stderr, once checked to have exited
/// 1 and left every file of the directory as it was.
async fn standalone_directory_started_as_node_0(env: &[(&str, &str)]) -> String {
    let mut server = TestServer::start_with_env(env);
    let client = server.root_client().await;
    create_stream(&client, "s").await;
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    let data = server.data_dir();
    let before = contents(&data);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), three_node_file()).unwrap();
    let out = refusal_of(
        Command::new(server_binary())
            .args(["--replica-id", "0", "--with-default-root-credentials"])
            .env_remove("RUST_LOG")
            .env("IGGY_SYSTEM_PATH", &data)
            .current_dir(dir.path())
            .stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_untouched(&data, &before, &stderr);
    stderr
}

/// A standalone node's data directory given to a cluster node (a node being moved into a
/// cluster, a mistyped `system.path`) is refused as a standalone node's, before anything in it
/// is written: not even the cluster node's run or replica count files. (Its journal names
/// another cluster too, the standalone node's default name: that refusal came first and hid the
/// reason and its fix.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_nodes_data_directory_started_as_a_cluster_node_is_refused_and_touches_nothing()
 {
    let stderr = standalone_directory_started_as_node_0(&[]).await;
    assert!(stderr.contains("a standalone node's"), "{stderr}");
    assert!(stderr.contains("start it on empty data directories"), "{stderr}");
}

/// The same with the cluster's own name (the 3-node file's): the superblock's cluster id agrees,
/// but the directory records a history of one replica, which a cluster of three cannot take on
/// (there is no reconfiguration). Refused naming it, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_nodes_directory_of_the_clusters_name_is_refused_as_a_standalone_nodes() {
    let stderr =
        standalone_directory_started_as_node_0(&[("IGGY_CLUSTER_NAME", "e2e-cluster")]).await;
    assert!(stderr.contains("a standalone node's"), "{stderr}");
}

/// A cluster node's data directory started as a standalone node (its configuration without
/// `[cluster]` enabled, an operator's slip) is refused before anything is written: served alone
/// it would fork the cluster's history, acknowledging writes the node discards when it rejoins.
/// Started again as the cluster's node, it serves what the cluster holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_nodes_data_directory_started_standalone_is_refused_and_touches_nothing() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    create_stream(&client, "kept").await;
    drop(client);
    cluster.stop(0);
    let dir = cluster.node(0).data_dir();
    let before = contents(&dir);
    cluster.nodes[0].set_env("IGGY_CLUSTER_ENABLED", Some("false"));
    cluster.nodes[0].start_again_unready();
    let status = cluster.nodes[0]
        .wait_exit(Duration::from_secs(30))
        .expect("node 0 refused to start standalone");
    let log = cluster.node(0).log();
    assert_eq!(status.code(), Some(1), "{log}");
    for named in [
        "cluster of 3 replicas",
        "cluster.enabled is false",
        "nothing was written",
    ] {
        assert!(log.contains(named), "{named:?} in:\n{log}");
    }
    assert_untouched(&dir, &before, "node 0");
    // Started standalone under another name too (the default one a standalone node runs
    // with): refused for the same reason, not as a directory of another cluster.name, whose
    // advice (start it with the name its peers run) led only to this refusal.
    cluster.nodes[0].set_env("IGGY_CLUSTER_NAME", Some("a-standalone-name"));
    cluster.nodes[0].start_again_unready();
    let status = cluster.nodes[0]
        .wait_exit(Duration::from_secs(30))
        .expect("node 0 refused to start standalone");
    let log = cluster.node(0).log();
    let last_start = log.rsplit("===== e2e harness: start #").next().unwrap_or(&log);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(last_start.contains("cluster.enabled is false"), "{last_start}");
    assert_untouched(&dir, &before, "node 0");
    cluster.nodes[0].set_env("IGGY_CLUSTER_NAME", None);
    cluster.nodes[0].set_env("IGGY_CLUSTER_ENABLED", None);
    cluster.restart(0);
    serves_kept(&cluster, 0).await;
}

/// Waits until node `node` of `cluster` serves the stream "kept" again (up to 30 s).
async fn serves_kept(cluster: &TestCluster, node: usize) {
    let client = cluster.root_client(node).await;
    let kept = Identifier::named("kept").unwrap();
    let stream = crate::test_cluster::wait_until_async(
        "the stream served again",
        Duration::from_secs(30),
        async || client.get_stream(&kept).await.ok().flatten(),
        || cluster.describe(0),
    )
    .await;
    assert_eq!(stream.name, "kept");
}
