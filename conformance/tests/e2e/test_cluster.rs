//! The loopback cluster (three processes, five in `cluster_five.rs`) both the e2e suite (`cluster.rs` and its siblings) and the
//! durability suite's cluster histories drive: `TestCluster` and the replica proxy it cuts
//! links with. Included by `e2e/main.rs` as a module and by `durability/main.rs` by path.
//!
//! A cluster of three `iggy-server` processes on loopback, driven by the official SDK through
//! crashes, pauses and a cut network (issue 14's "3-process loopback harness").
//!
//! - `TestCluster::start(n)` writes one config file (every node's TCP and replica port; QUIC,
//!   WebSocket and HTTP off unless `ClusterOptions` turns them on with ports of their own), gives each node its own data directory (a `TestServer`, so logs, `kill9`,
//!   restarts and `IGGY_E2E_KEEP` work as for one server) and runs `iggy-server --replica-id i`
//!   with the same root credentials on each.
//! - The replica plane goes through `ReplicaProxy`: node i is told (by per-node
//!   `IGGY_CLUSTER_NODES_<j>_PORTS_TCP_REPLICA`) that peer j listens on a proxy port the test
//!   owns, which forwards to j's real port. The handshake names the target replica, not the
//!   address, so the nodes cannot tell. `cut(i)` closes every proxied link touching node i and
//!   refuses new ones; `heal(i)` lets them through again.
//! - Who leads a group is read from the nodes' own log lines ("group 0x..: replica N is Normal
//!   in view V (primary P)"), the metadata leader also from the roster (command 12).
//! - Heartbeat timeout 2 s (the configuration's floor) keeps view changes quick.

// The durability suite uses only part of it.
#![allow(dead_code)]

use crate::harness::*;
use crate::lan::Lan;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The metadata group's id on the replica plane (spec/frames.spec `METADATA_GROUP`).
pub const METADATA_GROUP: u64 = 1 << 63;

pub(crate) const CLUSTER_NAME: &str = "e2e-cluster";

/// A partition's group id: `stream << 32 | topic << 20 | partition`.
pub fn partition_group(stream: u32, topic: u32, partition: u32) -> u64 {
    (u64::from(stream) << 32) | (u64::from(topic) << 20) | u64::from(partition)
}

/// One roster node of the shared config file.
pub(crate) struct RosterNode {
    pub(crate) ip: IpAddr,
    /// A host name the file gives as the node's `ip` instead (it must resolve to `ip`).
    pub(crate) host: Option<String>,
    pub(crate) tcp: u16,
    pub(crate) replica: u16,
    /// The HTTP port; HTTP is on in the file when any node has one.
    pub(crate) http: Option<u16>,
    /// The QUIC (UDP) port; QUIC is on in the file when any node has one.
    pub(crate) quic: Option<u16>,
    /// The WebSocket port; WebSocket is on in the file when any node has one.
    pub(crate) websocket: Option<u16>,
}

/// The nodes' shared config file: `[cluster]` with the roster and fast timing; QUIC, WebSocket
/// and HTTP each off unless the roster gives it ports.
pub(crate) fn cluster_file(nodes: &[RosterNode]) -> String {
    let http = nodes.iter().any(|node| node.http.is_some());
    let quic = nodes.iter().any(|node| node.quic.is_some());
    let websocket = nodes.iter().any(|node| node.websocket.is_some());
    let mut text = format!(
        "[quic]\nenabled = {quic}\n\n[websocket]\nenabled = {websocket}\n\n\
         [http]\nenabled = {http}\n\n[cluster]\nenabled = true\n\
         name = \"{CLUSTER_NAME}\"\nheartbeat_timeout = \"2s\"\n\
         view_change_status_timeout = \"2s\"\n"
    );
    for (id, node) in nodes.iter().enumerate() {
        let RosterNode {
            ip, tcp, replica, ..
        } = node;
        let ip = node.host.clone().unwrap_or_else(|| ip.to_string());
        text.push_str(&format!(
            "\n[[cluster.nodes]]\nname = \"node-{id}\"\nip = \"{ip}\"\nreplica_id = {id}\n\
             [cluster.nodes.ports]\ntcp = {tcp}\ntcp_replica = {replica}\n"
        ));
        for (key, port) in [
            ("http", node.http),
            ("quic", node.quic),
            ("websocket", node.websocket),
        ] {
            if let Some(port) = port {
                text.push_str(&format!("{key} = {port}\n"));
            }
        }
    }
    text
}

/// The environment that binds a node's client listeners to its own `ip` (HTTP always, QUIC and
/// WebSocket when on), port 0: the roster gives each port.
pub(crate) fn listeners_on(ip: IpAddr, quic: bool, websocket: bool) -> Vec<(String, String)> {
    let mut env = vec![
        ("IGGY_HTTP_ENABLED".to_string(), "true".to_string()),
        ("IGGY_HTTP_ADDRESS".to_string(), format!("{ip}:0")),
    ];
    if quic {
        env.push(("IGGY_QUIC_ADDRESS".to_string(), format!("{ip}:0")));
    }
    if websocket {
        env.push(("IGGY_WEBSOCKET_ADDRESS".to_string(), format!("{ip}:0")));
    }
    env
}

/// A `free_port` that is free for UDP too (QUIC listens on UDP).
pub(crate) fn free_udp_port() -> u16 {
    free_udp_port_on(&[IpAddr::V4(Ipv4Addr::LOCALHOST)])
}

/// A `free_port_on` that is free for UDP on each of `ips` too.
pub(crate) fn free_udp_port_on(ips: &[IpAddr]) -> u16 {
    loop {
        let port = free_port_on(ips);
        if ips
            .iter()
            .all(|&ip| std::net::UdpSocket::bind((ip, port)).is_ok())
        {
            return port;
        }
    }
}

/// What a node's log last said about one group (in its current start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRole {
    pub normal: bool,
    pub view: u32,
    pub primary: u8,
}

/// Every role line for `group` in `log`, in order.
pub(crate) fn role_lines(log: &str, group: u64) -> Vec<GroupRole> {
    let prefix = format!("group {group:#x}: replica ");
    log.lines()
        .filter_map(|line| {
            let rest = &line[line.find(&prefix)? + prefix.len()..];
            // "<id> is <Status> in view <v> (primary <p>), op .., commit .."
            let (_, rest) = rest.split_once(" is ")?;
            let (status, rest) = rest.split_once(" in view ")?;
            let (view, rest) = rest.split_once(" (primary ")?;
            let (primary, _) = rest.split_once(')')?;
            Some(GroupRole {
                normal: status == "Normal",
                view: view.parse().ok()?,
                primary: primary.parse().ok()?,
            })
        })
        .collect()
}

/// The part of a `TestServer` log written by its latest start.
pub(crate) fn current_start(log: &str) -> &str {
    log.rsplit("===== e2e harness: start #")
        .next()
        .unwrap_or("")
}

/// The environment entry that makes a node checkpoint once its journal holds `ops` ops (the
/// tests that need checkpoints, state transfers or retirements within a few writes).
pub fn checkpoint_every(ops: u32) -> (String, String) {
    (
        "IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS".to_string(),
        ops.to_string(),
    )
}

/// Per-node options for `TestCluster::start_with`.
#[derive(Default)]
pub struct ClusterOptions {
    /// Extra environment for every node.
    pub env: Vec<(String, String)>,
    /// The executable of node i, when not the default binary.
    pub binaries: BTreeMap<usize, PathBuf>,
    /// Extra environment for node i only, after `env`.
    pub node_env: BTreeMap<usize, Vec<(String, String)>>,
    /// QUIC on, every node on a port of its own in the roster.
    pub quic: bool,
    /// WebSocket on, every node on a port of its own in the roster.
    pub websocket: bool,
    /// HTTP on, every node on a port of its own in the roster.
    pub http: bool,
    /// The replica proxy reads each link frame by frame (a 256-byte header naming its size,
    /// then the body), so a test can drop one command's frames (`TestCluster::drop_frames`).
    /// Only for a plane without `[cluster.tls]`, whose bytes are not frames.
    pub replica_frames: bool,
    /// `start_with`: the host name every roster entry gives as its `ip` instead of 127.0.0.1
    /// (one that resolves to 127.0.0.1, as `localhost`).
    pub roster_host: Option<String>,
    /// Nodes the start does not wait to accept clients: ones the test expects never to serve
    /// (refused by every peer, a node without metadata waits for a majority of the cluster).
    pub unready: std::collections::BTreeSet<usize>,
}

pub struct TestCluster {
    // Dropped in order: the nodes (killed) before the proxy they talk through.
    pub(crate) nodes: Vec<TestServer>,
    /// Between the replicas, unless they run on distinct IPs (`start_on_distinct_ips`).
    pub(crate) proxy: Option<ReplicaProxy>,
    /// The network namespaces the nodes run in (`start_on_lan`), removed after the nodes.
    pub(crate) lan: Option<Lan>,
    /// Each node's real replica listener.
    pub(crate) replica_addresses: Vec<SocketAddr>,
    /// The roster the config file names.
    pub(crate) roster: Vec<RosterNode>,
    pub(crate) _config_dir: tempfile::TempDir,
}

impl TestCluster {
    pub fn start(n: usize) -> Self {
        Self::start_with(n, ClusterOptions::default())
    }

    /// Starts `n` nodes from one config file and waits until each accepts on its TCP port.
    /// Every node runs on 127.0.0.1 with ports of its own; the replica plane goes through the
    /// proxy.
    pub fn start_with(n: usize, options: ClusterOptions) -> Self {
        assert!((1..=8).contains(&n), "a loopback cluster of {n} nodes");
        let roster: Vec<RosterNode> = (0..n)
            .map(|_| RosterNode {
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                host: options.roster_host.clone(),
                tcp: free_port(),
                replica: free_port(),
                http: options.http.then(free_port),
                quic: options.quic.then(free_udp_port),
                websocket: options.websocket.then(free_port),
            })
            .collect();
        let replica: Vec<u16> = roster.iter().map(|node| node.replica).collect();
        let proxy = ReplicaProxy::start(&replica);
        proxy
            .state
            .framed
            .store(options.replica_frames, Ordering::SeqCst);
        let node_env: Vec<Vec<(String, String)>> = (0..n)
            .map(|i| {
                let mut env: Vec<(String, String)> = (0..n)
                    .filter(|&j| j != i)
                    .map(|j| {
                        (
                            format!("IGGY_CLUSTER_NODES_{j}_PORTS_TCP_REPLICA"),
                            proxy.port(i, j).to_string(),
                        )
                    })
                    .collect();
                // The harness turns HTTP off for every server; the roster gives the port.
                if options.http {
                    env.push(("IGGY_HTTP_ENABLED".into(), "true".into()));
                }
                env
            })
            .collect();
        Self::launch(roster, |i| node_env[i].clone(), Some(proxy), None, options)
    }

    /// `n` nodes as `n` machines run them: node i on 127.0.0.(i+1) (Linux routes all of
    /// 127/8 to the loopback), every node with the same TCP, HTTP and replica port (and QUIC
    /// and WebSocket port when `options` turns them on). Each client listener binds its node's
    /// IP (`IGGY_TCP_ADDRESS`, `IGGY_HTTP_ADDRESS`, ... with port 0: the roster gives the
    /// port); the replicas talk directly, so `cut` is not available.
    pub fn start_on_distinct_ips(n: usize) -> Self {
        Self::start_on_distinct_ips_with(n, ClusterOptions::default())
    }

    /// `start_on_distinct_ips` with extra environment, QUIC and WebSocket (HTTP is always on).
    pub fn start_on_distinct_ips_with(n: usize, options: ClusterOptions) -> Self {
        assert!((1..=8).contains(&n), "a loopback cluster of {n} nodes");
        let ips: Vec<IpAddr> = (0..n)
            .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i as u8 + 1)))
            .collect();
        let (tcp, replica, http) = (free_port_on(&ips), free_port_on(&ips), free_port_on(&ips));
        let quic = options.quic.then(|| free_udp_port_on(&ips));
        let websocket = options.websocket.then(|| free_port_on(&ips));
        let roster: Vec<RosterNode> = ips
            .iter()
            .map(|&ip| RosterNode {
                ip,
                host: None,
                tcp,
                replica,
                http: Some(http),
                quic,
                websocket,
            })
            .collect();
        let node_env = |i: usize| listeners_on(ips[i], quic.is_some(), websocket.is_some());
        Self::launch(roster, node_env, None, None, options)
    }

    /// `n` nodes as `n` machines on one switch: node i in a network namespace of its own
    /// (`lan.rs`) at `10.a.b.(i+1)`, every node on upstream's default ports (each stack has its
    /// own), the test reaching them through the bridge. `unplug`/`plug` take a node's cable
    /// out and put it back. Panics with the reason where network namespaces cannot be made
    /// (they need root).
    pub fn start_on_lan(n: usize, options: ClusterOptions) -> Self {
        let lan = Lan::create(n).unwrap_or_else(|why| panic!("a LAN of network namespaces: {why}"));
        let roster: Vec<RosterNode> = (0..n)
            .map(|i| RosterNode {
                ip: lan.ip(i),
                host: None,
                tcp: 8090,
                replica: 8070,
                http: Some(3000),
                quic: options.quic.then_some(8080),
                websocket: options.websocket.then_some(8092),
            })
            .collect();
        let ips: Vec<IpAddr> = (0..n).map(|i| lan.ip(i)).collect();
        let (quic, websocket) = (options.quic, options.websocket);
        let node_env = move |i: usize| listeners_on(ips[i], quic, websocket);
        Self::launch(roster, node_env, None, Some(lan), options)
    }

    /// Takes node i's cable out (`start_on_lan`): its packets are dropped, no connection of it
    /// is closed or refused, every one just stops hearing from it.
    pub fn unplug(&self, i: usize) {
        self.lan().unplug(i);
    }

    /// Puts node i's cable back.
    pub fn plug(&self, i: usize) {
        self.lan().plug(i);
    }

    pub(crate) fn lan(&self) -> &Lan {
        self.lan
            .as_ref()
            .expect("this cluster runs in the test's network stack: start it with start_on_lan")
    }

    /// Writes the config file for `roster`, starts node i with `node_env(i)` and `options`,
    /// and waits until each accepts on its TCP port.
    pub(crate) fn launch(
        roster: Vec<RosterNode>,
        node_env: impl Fn(usize) -> Vec<(String, String)>,
        proxy: Option<ReplicaProxy>,
        lan: Option<Lan>,
        options: ClusterOptions,
    ) -> Self {
        let config_dir = tempfile::Builder::new()
            .prefix("iggy-e2e-cluster-")
            .tempdir()
            .expect("create temp dir");
        let config = config_dir.path().join("cluster.toml");
        std::fs::write(&config, cluster_file(&roster)).expect("write cluster.toml");
        let mut nodes = Vec::new();
        for (i, node) in roster.iter().enumerate() {
            let mut env: Vec<(String, String)> =
                vec![("IGGY_CONFIG_PATH".into(), config.display().to_string())];
            env.extend(node_env(i));
            env.extend(options.env.iter().cloned());
            env.extend(options.node_env.get(&i).into_iter().flatten().cloned());
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let id = i.to_string();
            let namespace = lan.as_ref().map(|lan| lan.namespace_file(i));
            nodes.push(TestServer::launch_in(
                namespace.as_deref(),
                options.binaries.get(&i).map(PathBuf::as_path),
                SocketAddr::new(node.ip, node.tcp),
                &["--replica-id", &id],
                &env,
            ));
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            if !options.unready.contains(&i) {
                node.wait_ready();
            }
        }
        TestCluster {
            nodes,
            proxy,
            lan,
            replica_addresses: roster
                .iter()
                .map(|node| SocketAddr::new(node.ip, node.replica))
                .collect(),
            roster,
            _config_dir: config_dir,
        }
    }

    /// The replica proxy; a cluster on distinct IPs has none.
    pub(crate) fn proxy(&self) -> &ReplicaProxy {
        self.proxy
            .as_ref()
            .expect("this cluster's replicas talk directly: no proxy to cut")
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, i: usize) -> &TestServer {
        &self.nodes[i]
    }

    /// Node i, to change how it starts next (`TestServer::set_env`).
    pub fn node_mut(&mut self, i: usize) -> &mut TestServer {
        &mut self.nodes[i]
    }

    pub fn address(&self, i: usize) -> String {
        self.nodes[i].address()
    }

    /// Node i's QUIC address, as the roster names it.
    pub fn quic_address(&self, i: usize) -> String {
        let node = &self.roster[i];
        format!(
            "{}:{}",
            node.ip,
            node.quic.expect("QUIC on (ClusterOptions::quic)")
        )
    }

    /// Node i's WebSocket address, as the roster names it.
    pub fn websocket_address(&self, i: usize) -> String {
        let node = &self.roster[i];
        let port = node
            .websocket
            .expect("WebSocket on (ClusterOptions::websocket)");
        format!("{}:{port}", node.ip)
    }

    /// Node i's HTTP API base URL, as the roster names it.
    pub fn http_url(&self, i: usize) -> String {
        let node = &self.roster[i];
        let port = node.http.expect("HTTP on (ClusterOptions::http)");
        format!("http://{}:{port}", node.ip)
    }

    /// Node i's real replica listener (not the proxy's).
    pub fn replica_address(&self, i: usize) -> SocketAddr {
        self.replica_addresses[i]
    }

    pub fn kill9(&mut self, i: usize) {
        tokio::task::block_in_place(|| self.nodes[i].kill9());
    }

    /// Stops node i gracefully (SIGTERM, waits for its exit).
    pub fn stop(&mut self, i: usize) {
        tokio::task::block_in_place(|| self.nodes[i].stop());
    }

    /// Starts node i again on its data directory and waits until it accepts.
    pub fn restart(&mut self, i: usize) {
        tokio::task::block_in_place(|| self.nodes[i].start_again());
    }

    /// Starts node i again with `extra` flags for this start only, and waits until it accepts.
    pub fn restart_with(&mut self, i: usize, extra: &[&str]) {
        tokio::task::block_in_place(|| self.nodes[i].start_again_with(extra));
    }

    pub fn pause(&self, i: usize) {
        self.nodes[i].pause();
    }

    pub fn resume(&self, i: usize) {
        self.nodes[i].resume();
    }

    /// Drops every replica link touching node i and refuses new ones until `heal(i)`.
    pub fn cut(&self, i: usize) {
        self.proxy().cut(i);
    }

    /// Holds back what node `sender` sends node `receiver` until [`Self::release`]: the
    /// receiver hears nothing new from the sender, who still hears it.
    pub fn hold(&self, sender: usize, receiver: usize) {
        self.proxy().hold(sender, receiver);
    }

    pub fn release(&self, sender: usize, receiver: usize) {
        self.proxy().release(sender, receiver);
    }

    /// Drops the frames of `command` node `sender` sends node `receiver` (everything else
    /// flows) until [`Self::pass_frames`]; needs `ClusterOptions::replica_frames`.
    pub fn drop_frames(&self, sender: usize, receiver: usize, command: u8) {
        let proxy = self.proxy();
        assert!(
            proxy.state.framed.load(Ordering::SeqCst),
            "a proxy reading frames (ClusterOptions::replica_frames)"
        );
        proxy
            .state
            .dropped
            .lock()
            .unwrap()
            .insert((sender, receiver, command));
    }

    pub fn pass_frames(&self, sender: usize, receiver: usize, command: u8) {
        let proxy = self.proxy();
        proxy
            .state
            .dropped
            .lock()
            .unwrap()
            .remove(&(sender, receiver, command));
    }

    pub fn heal(&self, i: usize) {
        self.proxy().heal(i);
    }

    /// Node i's role in `group` as its log tells since its latest start. A node logs a role
    /// only when it differs from the last one it published, starting from Normal with primary
    /// 0; so a partition group it opened in that role has no line yet, and counts as such
    /// (view unknown, taken as 0). The metadata group always logs (it opens Recovering).
    pub fn role(&self, i: usize, group: u64) -> Option<GroupRole> {
        let log = self.nodes[i].log();
        let lines = role_lines(current_start(&log), group);
        match lines.last() {
            Some(role) => Some(*role),
            None if group != METADATA_GROUP => Some(GroupRole {
                normal: true,
                view: 0,
                primary: 0,
            }),
            None => None,
        }
    }

    /// The primary of the highest view some node reports Normal for `group`, with that view.
    pub fn primary(&self, group: u64) -> Option<(u8, u32)> {
        (0..self.len())
            .filter_map(|i| self.role(i, group))
            .filter(|role| role.normal)
            .max_by_key(|role| role.view)
            .map(|role| (role.primary, role.view))
    }

    /// Waits until a quorum of nodes, not counting `excluded`, is Normal for `group` in one
    /// view later than `after_view` whose primary is not `excluded`; returns that primary.
    pub async fn wait_new_primary(&self, group: u64, excluded: usize, after_view: u32) -> u8 {
        let quorum = self.len() / 2 + 1;
        wait_until(
            &format!("group {group:#x} elects a primary other than node {excluded} after view {after_view}"),
            Duration::from_secs(30),
            || {
                let mut by_view: BTreeMap<(u32, u8), usize> = BTreeMap::new();
                for i in (0..self.len()).filter(|&i| i != excluded) {
                    if let Some(role) = self.role(i, group).filter(|r| r.normal) {
                        *by_view.entry((role.view, role.primary)).or_default() += 1;
                    }
                }
                by_view.into_iter().find_map(|((view, primary), count)| {
                    (view > after_view && usize::from(primary) != excluded && count >= quorum)
                        .then_some(primary)
                })
            },
            || self.describe(group),
        )
        .await
    }

    /// Waits until node i, in its current start, is Normal in every one of `groups`.
    pub async fn wait_normal(&self, i: usize, groups: &[u64]) {
        wait_until(
            &format!("node {i} is Normal in groups {groups:x?}"),
            Duration::from_secs(30),
            || {
                groups
                    .iter()
                    .all(|&g| self.role(i, g).is_some_and(|r| r.normal))
                    .then_some(())
            },
            || {
                groups
                    .iter()
                    .map(|&g| self.describe(g))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
        .await
    }

    /// Every node's last role line for `group`, for failure messages.
    pub fn describe(&self, group: u64) -> String {
        let roles: Vec<String> = (0..self.len())
            .map(|i| format!("node {i}: {:?}", self.role(i, group)))
            .collect();
        format!("group {group:#x}: {}", roles.join("; "))
    }

    /// The official HTTP client given node i only, signed in as root once the root user
    /// reached that node by replication.
    pub async fn http_root_client(&self, i: usize) -> IggyClient {
        let client = IggyClient::builder()
            .with_http()
            .with_api_url(self.http_url(i))
            .build()
            .expect("http client");
        wait_until_async(
            &format!("root signs in over HTTP on node {i}"),
            Duration::from_secs(30),
            async || {
                let login = client.login_user(ROOT_USER, ROOT_PASSWORD);
                within("login", login).await.ok()
            },
            || self.describe(METADATA_GROUP),
        )
        .await;
        client
    }

    /// A root client connected to node i, once the root user exists there (the first metadata
    /// primary creates it; the others learn it by replication).
    pub async fn root_client(&self, i: usize) -> IggyClient {
        let connection = self.nodes[i].connection_string(ROOT_USER, ROOT_PASSWORD);
        signed_in(&connection, &format!("root signs in on node {i}")).await
    }

    /// Every segment `.log` file under each node's data directory, by its path there (indexes,
    /// journals, checkpoints and view files are local artifacts and differ).
    pub fn segment_logs(&self, i: usize) -> BTreeMap<PathBuf, Vec<u8>> {
        let root = self.nodes[i].data_dir();
        files_under(&root)
            .into_iter()
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .map(|path| {
                let bytes = std::fs::read(&path).unwrap_or_default();
                (path.strip_prefix(&root).unwrap().to_path_buf(), bytes)
            })
            .collect()
    }

    /// Waits until every node holds the same segment `.log` files with the same bytes, and
    /// returns them. `expected_files` guards against comparing empty directories.
    pub async fn wait_identical_segments(
        &self,
        expected_files: usize,
    ) -> BTreeMap<PathBuf, Vec<u8>> {
        let summary = |logs: &BTreeMap<PathBuf, Vec<u8>>| -> Vec<String> {
            logs.iter()
                .map(|(p, b)| format!("{} ({} bytes)", p.display(), b.len()))
                .collect()
        };
        wait_until(
            "every replica's segment files are byte-identical",
            Duration::from_secs(30),
            || {
                let first = self.segment_logs(0);
                (first.len() >= expected_files
                    && (1..self.len()).all(|i| self.segment_logs(i) == first))
                .then_some(first)
            },
            || {
                (0..self.len())
                    .map(|i| format!("node {i}: {:?}", summary(&self.segment_logs(i))))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
        .await
    }
}

/// A client of `connection` (credentials in it) once it connects and signs in, retried for
/// 30 s (a node serves once it learned the root user; each attempt is cut at CALL_TIMEOUT).
pub async fn signed_in(connection: &str, what: &str) -> IggyClient {
    let last_error = Mutex::new(String::new());
    wait_until_async(
        what,
        Duration::from_secs(30),
        async || {
            let client =
                IggyClient::from_connection_string(connection).expect("valid connection string");
            match tokio::time::timeout(CALL_TIMEOUT, client.connect()).await {
                Ok(Ok(())) => Some(client),
                Ok(Err(e)) => {
                    *last_error.lock().unwrap() = format!("{e} (code {})", e.as_code());
                    None
                }
                Err(_) => {
                    *last_error.lock().unwrap() = "connect timed out".into();
                    None
                }
            }
        },
        || last_error.lock().unwrap().clone(),
    )
    .await
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most `limit`; then panics with
/// `what` and `state()`.
pub async fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
    state: impl Fn() -> String,
) -> T {
    wait_until_async(what, limit, async || probe(), state).await
}

/// `wait_until` with an async probe.
pub async fn wait_until_async<T>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
    state: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {limit:?} waiting until {what}; state:\n{}",
                state()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The replica plane's man in the middle: one listener per ordered pair (i, j), i != j; node i
/// dials peer j at `port(i, j)` and the proxy connects on to j's real replica port.
pub struct ReplicaProxy {
    ports: BTreeMap<(usize, usize), u16>,
    pub(crate) state: Arc<ProxyState>,
}

/// A forwarded connection: its dialer side's address (its key), the pair (dialer, acceptor)
/// it joins, and a clone of each of its sockets.
type Forwarded = (SocketAddr, usize, usize, TcpStream, TcpStream);

#[derive(Default)]
pub(crate) struct ProxyState {
    /// Nodes whose links are cut.
    cut: Mutex<BTreeSet<usize>>,
    /// Directions (sender, receiver) whose bytes are held back until released: the link stays
    /// up, so the receiver just hears nothing new from the sender meanwhile.
    held: Mutex<BTreeSet<(usize, usize)>>,
    /// Links are read frame by frame (set before any node dials).
    pub(crate) framed: AtomicBool,
    /// (sender, receiver, command) whose frames are dropped, on a framed proxy.
    pub(crate) dropped: Mutex<BTreeSet<(usize, usize, u8)>>,
    /// Directions (sender, receiver) whose frames are discarded while the link stays up: the
    /// receiver hears nothing from the sender, who still hears it (a one-way loss; framed
    /// proxy only, so the stream stays whole frames).
    muted: Mutex<BTreeSet<(usize, usize)>>,
    /// Latency added to every chunk or frame a direction (sender, receiver) carries.
    latency: Mutex<BTreeMap<(usize, usize), Duration>>,
    /// Bytes per second a direction (sender, receiver) carries at most.
    rate: Mutex<BTreeMap<(usize, usize), u64>>,
    /// One-shot damage to the next frame of a command a direction carries (framed proxy).
    faults: Mutex<Vec<(usize, usize, u8, FrameFault)>>,
    /// Faults applied so far.
    faults_applied: AtomicUsize,
    /// Connections (by their dialer side's address) whose bytes are all discarded, both ways,
    /// while they stay open: a path that lost their state (a NAT or firewall that forgot them)
    /// without a reset. New connections flow.
    blackholed: Mutex<BTreeSet<SocketAddr>>,
    /// Both sockets of every forwarded connection up, by the pair it joins; a connection leaves
    /// when a side of it closes.
    connections: Mutex<Vec<Forwarded>>,
    stopping: AtomicBool,
    /// Connections forwarded so far (a healed link shows up as a new one).
    forwarded: AtomicUsize,
}

impl ProxyState {
    pub(crate) fn blocked(&self, from: usize, to: usize) -> bool {
        let cut = self.cut.lock().unwrap();
        cut.contains(&from) || cut.contains(&to)
    }

    fn holds(&self, sender: usize, receiver: usize) -> bool {
        self.held.lock().unwrap().contains(&(sender, receiver))
    }

    fn drops(&self, sender: usize, receiver: usize, command: u8) -> bool {
        let dropped = self.dropped.lock().unwrap();
        dropped.contains(&(sender, receiver, command))
            || self.muted.lock().unwrap().contains(&(sender, receiver))
    }

    fn blackholes(&self, key: SocketAddr) -> bool {
        self.blackholed.lock().unwrap().contains(&key)
    }

    /// Drops the connection whose dialer side is `key` from those up.
    fn forget(&self, key: SocketAddr) {
        let mut connections = self.connections.lock().unwrap();
        connections.retain(|(at, ..)| *at != key);
    }

    fn latency(&self, sender: usize, receiver: usize) -> Duration {
        let latency = self.latency.lock().unwrap();
        latency.get(&(sender, receiver)).copied().unwrap_or_default()
    }

    fn rate(&self, sender: usize, receiver: usize) -> Option<u64> {
        self.rate.lock().unwrap().get(&(sender, receiver)).copied()
    }

    /// The fault armed for the next frame of `command` from `sender` to `receiver`, taken.
    fn take_fault(&self, sender: usize, receiver: usize, command: u8) -> Option<FrameFault> {
        let mut faults = self.faults.lock().unwrap();
        let at = faults
            .iter()
            .position(|&(s, r, c, _)| (s, r, c) == (sender, receiver, command))?;
        self.faults_applied.fetch_add(1, Ordering::SeqCst);
        Some(faults.remove(at).3)
    }
}

/// What the framed proxy does to one frame (`ReplicaProxy::damage_next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// One bit of the body flipped (its middle byte); the frame's size stays right.
    FlipBody,
    /// One bit of the header flipped past its checksum (byte 200).
    FlipHeader,
    /// The header and half the body written, then both sockets closed: the receiver meets the
    /// end of the stream inside a frame.
    Truncate,
}

impl ReplicaProxy {
    /// Listens for every pair of the `replica_ports.len()` nodes. Threads, not tasks: the
    /// proxy keeps forwarding while a test blocks its runtime (a restart waits synchronously).
    pub fn start(replica_ports: &[u16]) -> Self {
        let state = Arc::new(ProxyState::default());
        let mut ports = BTreeMap::new();
        let n = replica_ports.len();
        for from in 0..n {
            for to in (0..n).filter(|&to| to != from) {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
                ports.insert((from, to), listener.local_addr().unwrap().port());
                let target = SocketAddr::from(([127, 0, 0, 1], replica_ports[to]));
                let state = state.clone();
                std::thread::Builder::new()
                    .name(format!("proxy-{from}-{to}"))
                    .spawn(move || accept_loop(listener, from, to, target, state))
                    .expect("spawn a proxy thread");
            }
        }
        ReplicaProxy { ports, state }
    }

    /// The port node `from` dials to reach node `to`.
    pub fn port(&self, from: usize, to: usize) -> u16 {
        self.ports[&(from, to)]
    }

    pub fn cut(&self, node: usize) {
        self.state.cut.lock().unwrap().insert(node);
        let mut connections = self.state.connections.lock().unwrap();
        connections.retain(|(_, from, to, a, b)| {
            let touches = *from == node || *to == node;
            if touches {
                let _ = a.shutdown(Shutdown::Both);
                let _ = b.shutdown(Shutdown::Both);
            }
            !touches
        });
    }

    pub fn heal(&self, node: usize) {
        self.state.cut.lock().unwrap().remove(&node);
    }

    /// Holds back what `sender` sends `receiver` (in order, nothing dropped) until
    /// [`Self::release`]; the other direction flows on.
    pub fn hold(&self, sender: usize, receiver: usize) {
        self.state.held.lock().unwrap().insert((sender, receiver));
    }

    pub fn release(&self, sender: usize, receiver: usize) {
        self.state.held.lock().unwrap().remove(&(sender, receiver));
    }

    /// Discards every frame `sender` sends `receiver` until [`Self::unmute`], the link staying
    /// up (framed proxy only).
    pub fn mute(&self, sender: usize, receiver: usize) {
        assert!(
            self.state.framed.load(Ordering::SeqCst),
            "a proxy reading frames (ClusterOptions::replica_frames)"
        );
        self.state.muted.lock().unwrap().insert((sender, receiver));
    }

    pub fn unmute(&self, sender: usize, receiver: usize) {
        self.state.muted.lock().unwrap().remove(&(sender, receiver));
    }

    /// Delays what `sender` sends `receiver` by `latency` (zero: none).
    pub fn set_latency(&self, sender: usize, receiver: usize, latency: Duration) {
        let mut latencies = self.state.latency.lock().unwrap();
        latencies.insert((sender, receiver), latency);
    }

    /// Carries at most `bytes_per_second` from `sender` to `receiver` (`None`: unlimited).
    pub fn set_rate(&self, sender: usize, receiver: usize, bytes_per_second: Option<u64>) {
        let mut rate = self.state.rate.lock().unwrap();
        match bytes_per_second {
            Some(limit) => rate.insert((sender, receiver), limit.max(1)),
            None => rate.remove(&(sender, receiver)),
        };
    }

    /// Damages the next frame of `command` that `sender` sends `receiver` (framed proxy only).
    pub fn damage_next(&self, sender: usize, receiver: usize, command: u8, fault: FrameFault) {
        assert!(
            self.state.framed.load(Ordering::SeqCst),
            "a proxy reading frames (ClusterOptions::replica_frames)"
        );
        let mut faults = self.state.faults.lock().unwrap();
        faults.push((sender, receiver, command, fault));
    }

    /// Closes the `k`-th (modulo their count) of the links forwarded now, as a middlebox that
    /// resets a connection does; the link may be dialed again at once. Returns the pair it
    /// joined, or `None` when none is up.
    pub fn reset_one(&self, k: usize) -> Option<(usize, usize)> {
        let mut connections = self.state.connections.lock().unwrap();
        if connections.is_empty() {
            return None;
        }
        let at = k % connections.len();
        let (_, from, to, a, b) = connections.remove(at);
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
        Some((from, to))
    }

    /// Every connection up now between nodes `a` and `b` goes silent both ways without being
    /// closed, as through a middlebox that forgot it; a connection made afterwards flows.
    /// Returns how many it silenced.
    pub fn blackhole(&self, a: usize, b: usize) -> usize {
        let connections = self.state.connections.lock().unwrap();
        let mut blackholed = self.state.blackholed.lock().unwrap();
        let mut silenced = 0;
        for (key, from, to, _, _) in connections.iter() {
            if (*from, *to) == (a, b) || (*from, *to) == (b, a) {
                silenced += usize::from(blackholed.insert(*key));
            }
        }
        silenced
    }

    /// The pairs of nodes with a forwarded link up now, each as (lower, higher).
    pub fn linked_pairs(&self) -> BTreeSet<(usize, usize)> {
        let connections = self.state.connections.lock().unwrap();
        connections
            .iter()
            .map(|&(_, from, to, _, _)| (from.min(to), from.max(to)))
            .collect()
    }

    /// Faults `damage_next` armed that a frame met so far.
    pub fn faults_applied(&self) -> usize {
        self.state.faults_applied.load(Ordering::SeqCst)
    }

    pub fn forwarded(&self) -> usize {
        self.state.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for ReplicaProxy {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        for port in self.ports.values() {
            // Wakes the accept loop, which then sees `stopping`.
            let _ = TcpStream::connect(("127.0.0.1", *port));
        }
        for (_, _, _, a, b) in self.state.connections.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

pub(crate) fn accept_loop(
    listener: TcpListener,
    from: usize,
    to: usize,
    target: SocketAddr,
    state: Arc<ProxyState>,
) {
    for dialer in listener.incoming() {
        if state.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(dialer) = dialer else { continue };
        // A cut link is refused: accepted and closed at once.
        if state.blocked(from, to) {
            continue;
        }
        let Ok(acceptor) = TcpStream::connect_timeout(&target, Duration::from_secs(1)) else {
            continue;
        };
        let _ = dialer.set_nodelay(true);
        let _ = acceptor.set_nodelay(true);
        let clones = (
            dialer.try_clone(),
            acceptor.try_clone(),
            dialer.try_clone(),
            acceptor.try_clone(),
        );
        let (Ok(d1), Ok(a1), Ok(d2), Ok(a2), Ok(key)) = (clones.0, clones.1, clones.2, clones.3, dialer.peer_addr()) else {
            continue;
        };
        {
            // Checked again under the lock `cut` takes, so a link admitted while a cut runs
            // is closed by it or refused here.
            let mut connections = state.connections.lock().unwrap();
            if state.blocked(from, to) {
                continue;
            }
            connections.push((key, from, to, d2, a2));
        }
        state.forwarded.fetch_add(1, Ordering::Relaxed);
        let (forth, back) = (state.clone(), state.clone());
        // Each direction's reader forgets the connection when it ends.
        if state.framed.load(Ordering::SeqCst) {
            std::thread::spawn(move || {
                pipe_frames(dialer, a1, from, to, key, forth.clone());
                forth.forget(key);
            });
            std::thread::spawn(move || {
                pipe_frames(acceptor, d1, to, from, key, back.clone());
                back.forget(key);
            });
            continue;
        }
        std::thread::spawn(move || {
            pipe(dialer, a1, from, to, key, forth.clone());
            forth.forget(key);
        });
        std::thread::spawn(move || {
            pipe(acceptor, d1, to, from, key, back.clone());
            back.forget(key);
        });
    }
}

/// What a reading side hands its writing side: the bytes, when they were read, and whether the
/// stream is to be closed once they are written (a truncated frame).
type Chunk = (Instant, Vec<u8>, bool);

/// The writing side of one direction (`sender` to `receiver`), on a thread of its own: writes
/// each chunk once the direction is no longer held, its latency since it was read has passed
/// and the direction's rate allows. Closes both sockets when a write fails, a chunk says so,
/// or the reading side ends (after writing what it read).
fn outlet(
    mut to: TcpStream,
    sender: usize,
    receiver: usize,
    state: Arc<ProxyState>,
) -> std::sync::mpsc::SyncSender<Chunk> {
    let (chunks, inbox) = std::sync::mpsc::sync_channel::<Chunk>(256);
    std::thread::spawn(move || {
        for (read_at, bytes, close) in inbox {
            while state.holds(sender, receiver) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let due = read_at + state.latency(sender, receiver);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&bytes).is_err() || close {
                break;
            }
            if let Some(rate) = state.rate(sender, receiver) {
                std::thread::sleep(Duration::from_secs_f64(bytes.len() as f64 / rate as f64));
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
    chunks
}

/// Copies the frames node `sender` writes on `from` to `to` (node `receiver`'s side) until
/// either side closes, then closes both: a frame of a command `state` drops (or of a muted
/// direction) is skipped, one `state` armed a fault for is damaged, and one read while
/// `state` holds the direction waits until it no longer does.
fn pipe_frames(
    mut from: TcpStream,
    to: TcpStream,
    sender: usize,
    receiver: usize,
    key: SocketAddr,
    state: Arc<ProxyState>,
) {
    use iggy_generated::frames::GenericHeader;
    let out = outlet(to, sender, receiver, state.clone());
    loop {
        let mut header = [0u8; GenericHeader::SIZE];
        if from.read_exact(&mut header).is_err() {
            break;
        }
        let read_at = Instant::now();
        let size_at = GenericHeader::SIZE_OFFSET;
        let size = u32::from_le_bytes(header[size_at..size_at + 4].try_into().unwrap());
        let mut body = vec![0u8; (size as usize).saturating_sub(GenericHeader::SIZE)];
        if from.read_exact(&mut body).is_err() {
            break;
        }
        let command = header[GenericHeader::COMMAND_OFFSET];
        if state.drops(sender, receiver, command) || state.blackholes(key) {
            continue;
        }
        let mut frame = header.to_vec();
        let mut close = false;
        match state.take_fault(sender, receiver, command) {
            Some(FrameFault::FlipBody) if !body.is_empty() => {
                let middle = body.len() / 2;
                body[middle] ^= 0x01;
            }
            Some(FrameFault::FlipHeader | FrameFault::FlipBody) => frame[200] ^= 0x01,
            Some(FrameFault::Truncate) => {
                body.truncate(body.len() / 2);
                close = true;
            }
            None => {}
        }
        frame.extend_from_slice(&body);
        if out.send((read_at, frame, close)).is_err() || close {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
}

/// Copies the bytes node `sender` writes on `from` to `to` (node `receiver`'s side) until
/// either side closes, then closes both; what it reads while `state` holds the direction waits
/// until it no longer does, and what it reads on a connection `state` blackholes (`key`) is
/// discarded.
fn pipe(
    mut from: TcpStream,
    to: TcpStream,
    sender: usize,
    receiver: usize,
    key: SocketAddr,
    state: Arc<ProxyState>,
) {
    let out = outlet(to, sender, receiver, state.clone());
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            // A blackholed connection's bytes go nowhere; it never carries again.
            Ok(_) if state.blackholes(key) => {}
            Ok(n) => {
                if out.send((Instant::now(), buffer[..n].to_vec(), false)).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
}
