//! Soak: the server over time, as an operator runs it. A mixed workload runs for `SOAK_SECS`
//! (default 8) against one node and against a 3-node cluster: a producer with retention and
//! small segments (segments roll and retire), consumer group members joining and leaving
//! (or vanishing without a logout), clients connecting over TCP, QUIC, WebSocket and HTTP and
//! leaving without a logout, personal access tokens created and deleted, streams and topics
//! created and deleted under reused ids, offsets stored, and in the cluster a node restarted
//! every `SOAK_RESTART_SECS` (default 240). Every `SOAK_SAMPLE_SECS` (default 60, or a
//! quarter of a short run) one line per node: RSS, peak RSS, descriptors, threads, data
//! directory bytes (partitions, journals, checkpoint slots, partition directories), log lines
//! and warnings, `/metrics` lines and sessions, and a probe's send-and-poll latency. At the
//! end, the most repeated warnings of each node. What grows with time while the live state
//! stays the same is the finding; the long forms print it for a reader:
//!
//!     SOAK_SECS=1200 IGGY_SERVER_BIN=target/release/iggy-server cargo nextest run --workspace -E 'binary(e2e) & test(/soak::/)' --no-capture
//!
//! The short form asserts that the workload made progress on every path, that no node logged
//! an error, and (one node) that the live sessions return to what the live clients hold once
//! the vanished ones' leases end.

use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn env_secs(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The session lease of the soaked servers: vanished clients' sessions end within it.
const LEASE_SECS: u64 = 5;

/// Settings of every soaked node: short leases and token lifetimes (so what churn leaves
/// behind ends within the run), frequent checkpoints (journals cycle), WebSocket and HTTP on.
fn soak_env() -> Vec<(String, String)> {
    [
        ("IGGY_SYSTEM_SESSION_LEASE_SECS", LEASE_SECS.to_string()),
        ("IGGY_HTTP_JWT_ACCESS_TOKEN_EXPIRY_SECS", "5".to_string()),
        ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "512".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Where one node is reached.
#[derive(Clone)]
struct Endpoints {
    tcp: String,
    quic: String,
    ws: String,
    http: String,
}

impl Endpoints {
    fn url(&self, transport: usize) -> String {
        let auth = format!("{ROOT_USER}:{ROOT_PASSWORD}");
        match transport % 3 {
            0 => format!("iggy://{auth}@{}", self.tcp),
            1 => format!("iggy+quic://{auth}@{}", self.quic),
            _ => format!("iggy+ws://{auth}@{}", self.ws),
        }
    }
}

/// Successes and failures of each workload path.
#[derive(Default)]
struct Tally {
    counts: Mutex<BTreeMap<&'static str, (u64, u64, String)>>,
}

impl Tally {
    fn note<T>(&self, path: &'static str, r: Result<T, String>) -> Option<T> {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.entry(path).or_default();
        match r {
            Ok(v) => {
                entry.0 += 1;
                Some(v)
            }
            Err(e) => {
                entry.1 += 1;
                entry.2 = e;
                None
            }
        }
    }

    fn show(&self) -> String {
        self.counts
            .lock()
            .unwrap()
            .iter()
            .map(|(path, (good, bad, last))| {
                if *bad == 0 {
                    format!("{path} {good}")
                } else {
                    format!("{path} {good} ({bad} failed, last: {last})")
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn successes(&self, path: &str) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .get(path)
            .map_or(0, |entry| entry.0)
    }
}

async fn timed<T>(what: &str, fut: impl Future<Output = Result<T, IggyError>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e} (code {})", e.as_code())),
        Err(_) => Err(format!("{what}: timed out")),
    }
}

async fn connected(url: &str) -> Result<IggyClient, String> {
    let client = IggyClient::from_connection_string(url).map_err(|e| e.to_string())?;
    timed("connect", client.connect()).await?;
    Ok(client)
}

async fn http_login(url: &str) -> Result<IggyClient, String> {
    let client = IggyClient::builder()
        .with_http()
        .with_api_url(url.to_string())
        .build()
        .map_err(|e| e.to_string())?;
    timed("http login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await?;
    Ok(client)
}

fn soak_topic() -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(3),
        segment_size: Some(IggyByteSize::from(1024 * 1024)),
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(
            Duration::from_secs(60),
        ))),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(4 * 1024 * 1024))),
        ..Default::default()
    }
}

/// The workload's paths, each a loop until `stop`; `nodes` are the endpoints to spread over.
async fn workload(nodes: Vec<Endpoints>, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut tasks = tokio::task::JoinSet::new();
    // A producer: balanced batches of 20 × 256 B every 20 ms (~250 KB/s).
    {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut client = None;
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                if client.is_none() {
                    client = tally.note("producer connect", connected(&nodes[round % nodes.len()].url(0)).await);
                }
                if let Some(c) = &client {
                    let mut batch: Vec<IggyMessage> = (0..20).map(|i| msg(vec![(round + i) as u8; 256])).collect();
                    let sent = timed("send", c.send_messages(&name("soak"), &name("t"), &Partitioning::balanced(), &mut batch)).await;
                    if tally.note("send", sent).is_none() {
                        client = None;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }
    // Consumer group members: three at a time, each over a rotating transport and node, polls
    // a few times with auto-commit, then leaves, or every other one vanishes without a word.
    for member in 0..3usize {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut life = member;
            while !stop.load(Ordering::Relaxed) {
                life += 3;
                let node = &nodes[life % nodes.len()];
                let Some(c) = tally.note("member connect", connected(&node.url(life)).await) else {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                };
                if tally.note("join", timed("join", c.join_consumer_group(&name("soak"), &name("t"), &name("cg"))).await).is_none() {
                    continue;
                }
                let group = Consumer::group(name("cg"));
                for _ in 0..5 {
                    let polled = timed("group poll", c.poll_messages(&name("soak"), &name("t"), None, &group, &PollingStrategy::next(), 50, true)).await;
                    tally.note("group poll", polled);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if life % 2 == 0 {
                    tally.note("leave", timed("leave", c.leave_consumer_group(&name("soak"), &name("t"), &name("cg"))).await);
                    tally.note("logout", timed("logout", c.logout_user()).await);
                }
                drop(c);
            }
        });
    }
    // Clients that sign in, ask one thing and go without a logout, over every transport.
    {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let node = &nodes[round % nodes.len()];
                if round % 4 == 3 {
                    if let Some(c) = tally.note("http login", http_login(&node.http).await) {
                        tally.note("http read", timed("streams", c.get_streams()).await);
                    }
                } else if let Some(c) = tally.note("churn connect", connected(&node.url(round)).await) {
                    tally.note("churn read", timed("me", c.get_me()).await);
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
    }
    // Personal access tokens created, used once and deleted.
    {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut round = 0usize;
            let mut admin = None;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let node = &nodes[round % nodes.len()];
                if admin.is_none() {
                    admin = tally.note("pat admin connect", connected(&node.url(0)).await);
                }
                let Some(a) = &admin else {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                };
                let token_name = format!("pat-{}", round % 7);
                let created = timed("create pat", a.create_personal_access_token(&token_name, PersonalAccessTokenExpiry::NeverExpire)).await;
                if let Some(raw) = tally.note("pat create", created) {
                    let user = IggyClient::builder().with_tcp().with_server_address(node.tcp.clone()).build().map_err(|e| e.to_string());
                    if let Ok(user) = user
                        && tally.note("pat connect", timed("connect", user.connect()).await).is_some()
                    {
                        tally.note("pat login", timed("pat login", user.login_with_personal_access_token(&raw.token)).await);
                    }
                    if tally.note("pat delete", timed("delete pat", a.delete_personal_access_token(&token_name)).await).is_none() {
                        admin = None;
                    }
                } else {
                    // A failed create may have landed (a reply lost in a restart): delete it.
                    let _ = timed("delete pat", a.delete_personal_access_token(&token_name)).await;
                    admin = None;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
    }
    // A stream with a topic, a few messages, a group and an offset, then deleted: ids reused.
    {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut round = 0usize;
            let mut admin = None;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                if admin.is_none() {
                    admin = tally.note("churn admin connect", connected(&nodes[round % nodes.len()].url(0)).await);
                }
                let Some(a) = &admin else {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                };
                let stream = format!("tmp-{}", round % 3);
                let steps = async || -> Result<(), String> {
                    timed("create stream", a.create_stream(&stream, &StreamCreateOptions::default())).await?;
                    timed("create topic", a.create_topic(&name(&stream), "t", &topic_options(2))).await?;
                    let mut batch = msgs("tmp", 10);
                    timed("send", a.send_messages(&name(&stream), &name("t"), &Partitioning::partition_id(1), &mut batch)).await?;
                    timed("create group", a.create_consumer_group(&name(&stream), &name("t"), "g")).await?;
                    timed("store offset", a.store_consumer_offset(&consumer("c"), &name(&stream), &name("t"), Some(1), 5)).await?;
                    timed("delete topic", a.delete_topic(&name(&stream), &name("t"))).await?;
                    timed("delete stream", a.delete_stream(&name(&stream))).await
                };
                if tally.note("resource churn", steps().await).is_none() {
                    // Whatever failed halfway: remove the stream if it is there.
                    let _ = timed("delete stream", a.delete_stream(&name(&stream))).await;
                    admin = None;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
    }
    // Plain consumers storing offsets on the soak topic (a bounded set of names).
    {
        let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
        tasks.spawn(async move {
            let mut round = 0usize;
            let mut client = None;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                if client.is_none() {
                    client = tally.note("offset connect", connected(&nodes[round % nodes.len()].url(round)).await);
                }
                if let Some(c) = &client {
                    let who = consumer(&format!("c{}", round % 50));
                    let polled = timed("poll", c.poll_messages(&name("soak"), &name("t"), Some((round % 3) as u32), &who, &PollingStrategy::next(), 20, true)).await;
                    if tally.note("consumer poll", polled).is_none() {
                        client = None;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a workload task panicked");
    }
}

/// One probe: a message sent to the probe topic and polled back, timed.
async fn probe(client: &IggyClient, round: u64) -> Result<Duration, String> {
    let started = Instant::now();
    let mut batch = vec![msg(format!("probe-{round}"))];
    timed("probe send", client.send_messages(&name("probe"), &name("t"), &Partitioning::partition_id(0), &mut batch)).await?;
    let polled = timed("probe poll", client.poll_messages(&name("probe"), &name("t"), Some(0), &consumer("probe"), &PollingStrategy::last(), 1, false)).await?;
    if payloads(&polled) != [format!("probe-{round}")] {
        return Err(format!("probe polled {:?}", payloads(&polled)));
    }
    Ok(started.elapsed())
}

async fn http_get(api_url: &str, path: &str) -> Option<String> {
    let address = api_url.trim_start_matches("http://").to_string();
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(&address).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.ok()?;
        let text = String::from_utf8(reply).ok()?;
        text.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
    };
    tokio::time::timeout(CALL_TIMEOUT, fetch).await.ok().flatten()
}

/// What /proc says of a process: (VmRSS KiB, VmHWM KiB, threads, open descriptors).
fn process_figures(pid: u32) -> (u64, u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count() as u64);
    (field("VmRSS:"), field("VmHWM:"), field("Threads:"), fds)
}

/// The data directory's bytes by kind: (segments and indexes, journals, checkpoint and view
/// slots, everything else) and its partition directories (those holding a segment or journal).
fn disk_figures(root: &Path) -> ([u64; 4], usize) {
    let mut bytes = [0u64; 4];
    let mut partitions = std::collections::BTreeSet::new();
    if !root.exists() {
        return (bytes, 0);
    }
    for path in files_under(root) {
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let kind = if file.ends_with(".log") || file.ends_with(".index") {
            partitions.insert(path.parent().map(Path::to_path_buf));
            0
        } else if file.ends_with(".wal") {
            1
        } else if file.starts_with("checkpoint") || file.starts_with("view.") {
            2
        } else {
            3
        };
        bytes[kind] += size;
    }
    (bytes, partitions.len())
}

/// Log lines and warnings so far, and the warnings by their text with digits masked.
fn log_figures(path: &Path) -> (usize, usize, BTreeMap<String, usize>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut warnings = BTreeMap::new();
    let mut lines = 0;
    let mut warned = 0;
    for line in text.lines() {
        lines += 1;
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            warned += 1;
            let at = line.find(" WARN ").or_else(|| line.find(" ERROR ")).unwrap_or(0);
            let masked: String = line[at..]
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .take(160)
                .collect();
            *warnings.entry(masked).or_insert(0) += 1;
        }
    }
    (lines, warned, warnings)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// What the sampler reads of one node.
struct NodeProbe {
    name: String,
    pid: Option<u32>,
    data_dir: PathBuf,
    log: PathBuf,
    http: String,
}

async fn sample_line(node: &NodeProbe, elapsed: Duration, probe_latency: &str) -> String {
    let (rss, hwm, threads, fds) = node.pid.map_or((0, 0, 0, 0), process_figures);
    let (disk, partitions) = disk_figures(&node.data_dir);
    let (lines, warned, _) = log_figures(&node.log);
    let metrics = http_get(&node.http, "/metrics").await.unwrap_or_default();
    let sessions = metric(&metrics, "iggy_sessions").unwrap_or(-1.0);
    let series = metrics.lines().filter(|l| !l.starts_with('#')).count();
    format!(
        "soak t={:>5}s {} rss={}MiB hwm={}MiB threads={threads} fds={fds} seg={}KiB wal={}KiB ckpt={}KiB other={}KiB partition_dirs={partitions} log_lines={lines} warn={warned} metric_series={series} sessions={sessions} probe={probe_latency}",
        elapsed.as_secs(),
        node.name,
        rss / 1024,
        hwm / 1024,
        disk[0] / 1024,
        disk[1] / 1024,
        disk[2] / 1024,
        disk[3] / 1024,
    )
}

fn soak_secs() -> u64 {
    env_secs("SOAK_SECS", 8)
}

fn sample_secs(total: u64) -> u64 {
    env_secs("SOAK_SAMPLE_SECS", if total >= 240 { 60 } else { (total / 4).max(1) })
}

fn repeated_warnings(node: &NodeProbe) -> String {
    let (_, _, warnings) = log_figures(&node.log);
    let mut by_count: Vec<(usize, String)> = warnings.into_iter().map(|(w, n)| (n, w)).collect();
    by_count.sort_by(|a, b| b.cmp(a));
    by_count
        .iter()
        .take(8)
        .map(|(n, w)| format!("  {n:>6} × {w}"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn create_soak_resources(admin: &IggyClient) {
    ok("create soak", within("create", admin.create_stream("soak", &StreamCreateOptions::default())).await);
    ok("create soak topic", within("create", admin.create_topic(&name("soak"), "t", &soak_topic())).await);
    ok("create group", within("create", admin.create_consumer_group(&name("soak"), &name("t"), "cg")).await);
    create_stream_and_topic(admin, "probe", "t", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_node_mixed_workload_over_time() {
    let total = soak_secs();
    let ws = format!("127.0.0.1:{}", free_port());
    let mut env = soak_env();
    env.push(("IGGY_WEBSOCKET_ENABLED".into(), "true".into()));
    env.push(("IGGY_WEBSOCKET_ADDRESS".into(), ws.clone()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (server, http) = TestServer::start_with_http(&env_refs);
    let admin = server.root_client().await;
    create_soak_resources(&admin).await;
    let metadata = ok("metadata", within("metadata", admin.get_cluster_metadata()).await);
    let endpoints = Endpoints {
        tcp: server.address(),
        quic: format!("127.0.0.1:{}", metadata.nodes[0].endpoints.quic),
        ws,
        http: http.clone(),
    };
    let node = NodeProbe {
        name: "node".into(),
        pid: server.pid(),
        data_dir: server.data_dir(),
        log: server.log_path(),
        http,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = tokio::spawn(workload(vec![endpoints], stop.clone(), tally.clone()));
    let started = Instant::now();
    let every = Duration::from_secs(sample_secs(total));
    let rounds = AtomicU64::new(0);
    eprintln!("{}", sample_line(&node, started.elapsed(), "-").await);
    while started.elapsed() < Duration::from_secs(total) {
        tokio::time::sleep(every.min(Duration::from_secs(total).saturating_sub(started.elapsed()))).await;
        let round = rounds.fetch_add(1, Ordering::Relaxed);
        let latency = probe(&admin, round).await.map_or_else(|e| e, |d| format!("{}ms", d.as_millis()));
        eprintln!("{}", sample_line(&node, started.elapsed(), &latency).await);
        eprintln!("soak paths: {}", tally.show());
    }
    stop.store(true, Ordering::Relaxed);
    within_for(Duration::from_secs(60), "workload stops", load).await.expect("workload");
    for path in ["send", "group poll", "churn read", "pat login", "resource churn", "consumer poll"] {
        assert!(tally.successes(path) > 0, "no {path} succeeded: {}", tally.show());
    }
    // The clients that vanished end with their leases; the admin's session stays.
    let settled = wait_until_async(
        "the vanished clients' sessions end",
        Duration::from_secs(LEASE_SECS * 4 + 30),
        async || {
            let metrics = http_get(&node.http, "/metrics").await?;
            let sessions = metric(&metrics, "iggy_sessions")?;
            (sessions <= 3.0).then_some(sessions)
        },
        || tally.show(),
    )
    .await;
    eprintln!("{}", sample_line(&node, started.elapsed(), &format!("settled sessions={settled}")).await);
    eprintln!("soak repeated warnings ({}):\n{}", node.name, repeated_warnings(&node));
    assert_no_error(&node);
}

/// Nothing in a soak is an error to the operator: a line at ERROR is a finding.
fn assert_no_error(node: &NodeProbe) {
    let log = std::fs::read_to_string(&node.log).unwrap_or_default();
    let errors: Vec<&str> = log.lines().filter(|line| line.contains(" ERROR ")).take(5).collect();
    assert!(errors.is_empty(), "{} logged errors:\n{}", node.name, errors.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_node_cluster_mixed_workload_with_restarts_over_time() {
    let total = soak_secs();
    let restart_every = Duration::from_secs(env_secs("SOAK_RESTART_SECS", 240));
    let mut cluster = TestCluster::start_with(
        3,
        ClusterOptions {
            env: soak_env(),
            quic: true,
            websocket: true,
            http: true,
            ..Default::default()
        },
    );
    let admin = cluster.root_client(0).await;
    create_soak_resources(&admin).await;
    let endpoints: Vec<Endpoints> = (0..3)
        .map(|i| Endpoints {
            tcp: cluster.address(i),
            quic: cluster.quic_address(i),
            ws: cluster.websocket_address(i),
            http: cluster.http_url(i),
        })
        .collect();
    let probes = |cluster: &TestCluster| -> Vec<NodeProbe> {
        (0..3)
            .map(|i| NodeProbe {
                name: format!("node{i}"),
                pid: cluster.node(i).pid(),
                data_dir: cluster.node(i).data_dir(),
                log: cluster.node(i).log_path(),
                http: cluster.http_url(i),
            })
            .collect()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = tokio::spawn(workload(endpoints, stop.clone(), tally.clone()));
    let started = Instant::now();
    let every = Duration::from_secs(sample_secs(total));
    let mut next_sample = started;
    let mut next_restart = started + restart_every;
    let mut restarts = 0usize;
    let mut round = 0u64;
    let mut probe_client: Option<IggyClient> = None;
    while started.elapsed() < Duration::from_secs(total) {
        if Instant::now() >= next_restart {
            let i = restarts % 3;
            restarts += 1;
            if restarts.is_multiple_of(2) {
                cluster.kill9(i);
                eprintln!("soak t={}s: node{i} killed (SIGKILL)", started.elapsed().as_secs());
            } else {
                cluster.stop(i);
                eprintln!("soak t={}s: node{i} stopped (SIGTERM)", started.elapsed().as_secs());
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            cluster.restart(i);
            eprintln!("soak t={}s: node{i} started again", started.elapsed().as_secs());
            next_restart = Instant::now() + restart_every;
        }
        if Instant::now() >= next_sample {
            round += 1;
            // One probe client while it works: the latency is a send and a poll, not a login.
            if probe_client.is_none() {
                probe_client = Some(cluster.root_client(round as usize % 3).await);
            }
            let probed = probe(probe_client.as_ref().unwrap(), round).await;
            if probed.is_err() {
                probe_client = None;
            }
            let latency = probed.map_or_else(|e| e, |d| format!("{}ms", d.as_millis()));
            for node in probes(&cluster) {
                eprintln!("{}", sample_line(&node, started.elapsed(), &latency).await);
            }
            eprintln!("soak paths: {}", tally.show());
            next_sample += every;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    within_for(Duration::from_secs(60), "workload stops", load).await.expect("workload");
    for path in ["send", "group poll", "churn read", "pat login", "resource churn", "consumer poll"] {
        assert!(tally.successes(path) > 0, "no {path} succeeded: {}", tally.show());
    }
    for node in probes(&cluster) {
        eprintln!("{}", sample_line(&node, started.elapsed(), "end").await);
        eprintln!("soak repeated warnings ({}):\n{}", node.name, repeated_warnings(&node));
    }
    for node in probes(&cluster) {
        assert_no_error(&node);
    }
}
