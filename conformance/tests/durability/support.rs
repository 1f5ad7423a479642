//! Shared pieces of the durability suite: seeds, a server launcher with its own environment and
//! arguments (the e2e harness finds and builds the binary), file-tree hashing, and a raw client
//! that speaks the binary protocol with the official `iggy_binary_protocol` types.

#![allow(dead_code)]

use crate::harness::server_binary;
use iggy_binary_protocol::codes::{
    BIND_SESSION_CODE, GET_PARTITION_ROUTE_CODE, LOGIN_REGISTER_CODE, SEND_MESSAGES_CODE,
};
use iggy_binary_protocol::requests::messages::get_partition_route::GetPartitionRouteRequest;
use iggy_binary_protocol::requests::messages::send_messages::{RawMessage, SendMessagesEncoder};
use iggy_binary_protocol::requests::system::bind_session::{BindSessionRequest, SessionIdentity};
use iggy_binary_protocol::requests::users::login_register::{BindSecret, LoginRegisterRequest};
use iggy_binary_protocol::responses::messages::partition_route::PartitionRouteResponse;
use iggy_binary_protocol::responses::users::login_register::LoginRegisterResponse;
use iggy_binary_protocol::version::{ClientVersionInfo, IGGY_PROTOCOL_VERSION};
use iggy_binary_protocol::{
    Command, HEADER_SIZE, PartitionContext, ReplyHeader, RequestHeader, WireDecode, WireEncode,
    WireIdentifier, WireName, WirePartitioning,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitStatus, Stdio};
use std::time::{Duration, Instant};

// ----- seeds -----

/// The suite's seed: `DURABILITY_SEED` when set (to replay a failure), else fresh. Printed at the
/// start and again, with the replay command, if the test panics (see [`SeedGuard`]).
pub fn seed(test: &str) -> (u64, SeedGuard) {
    let seed = match std::env::var("DURABILITY_SEED") {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("DURABILITY_SEED={value:?} is not a u64")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            nanos ^ twox_hash::XxHash3_64::oneshot(test.as_bytes()) ^ u64::from(std::process::id())
        }
    };
    eprintln!("{test}: DURABILITY_SEED={seed}");
    (seed, SeedGuard { test: test.to_string(), seed, failure_expected: false })
}

pub fn rng(seed: u64, stream: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Prints the seed and the replay command when the test panics.
pub struct SeedGuard {
    test: String,
    pub seed: u64,
    /// A `should_panic` test: its panic is the expected outcome, not a failure to replay.
    pub failure_expected: bool,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.failure_expected {
            eprintln!(
                "\n*** {} FAILED with DURABILITY_SEED={}; replay with:\n    DURABILITY_SEED={} \
                 cargo nextest run -p iggy-conformance --test durability {}\n",
                self.test, self.seed, self.seed, self.test
            );
        }
    }
}

/// An integer knob from the environment (`DURABILITY_KILLS` and friends).
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
        .unwrap_or(default)
}

// ----- the server -----

pub const START_TIMEOUT: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `iggy-server` process on a private temp dir and port, with a chosen environment
/// (`IGGY_*` overrides) and arguments. Unlike the e2e harness it can start a server that is
/// expected to refuse, and it reports the child's pid and peak RSS.
pub struct Server {
    root: tempfile::TempDir,
    pub system_path: PathBuf,
    port: u16,
    child: Option<Child>,
    pub env: Vec<(String, String)>,
    starts: u32,
}

/// How a start that may be refused ended.
#[derive(Debug)]
pub enum Started {
    Listening,
    Exited(ExitStatus),
}

impl Server {
    /// A server (not started) whose system path is `<tmp>/data`.
    pub fn new(env: &[(&str, &str)]) -> Self {
        let root = tempfile::Builder::new().prefix("iggy-durability-").tempdir().unwrap();
        let system_path = root.path().join("data");
        Server {
            root,
            system_path,
            port: free_port(),
            child: None,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            starts: 0,
        }
    }

    /// Starts a new server and waits until it listens.
    pub fn start(env: &[(&str, &str)]) -> Self {
        let mut server = Server::new(env);
        server.spawn(&[]);
        server
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn connection_string(&self) -> String {
        format!("iggy://iggy:iggy@{}", self.address())
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sets (or replaces) one environment override for the next start.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.env.push((key.to_string(), value.to_string()));
        }
    }

    fn command(&mut self, args: &[&str]) -> Process {
        self.starts += 1;
        let mut log = OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        writeln!(log, "===== durability: start #{} {:?} on {} =====", self.starts, args, self.address())
            .unwrap();
        let err = log.try_clone().unwrap();
        let mut cmd = Process::new(server_binary());
        cmd.arg("--with-default-root-credentials")
            .args(args)
            .current_dir(self.root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("IGGY_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("IGGY_TCP_ADDRESS", self.address()).env("IGGY_SYSTEM_PATH", &self.system_path);
        // QUIC is on by default: an ephemeral port keeps parallel servers apart. HTTP is on by
        // default on a fixed port (3000), which a parallel server may hold: a test that uses it
        // turns it on with its own address.
        cmd.env("IGGY_QUIC_ADDRESS", "127.0.0.1:0")
            .env("IGGY_HTTP_ENABLED", "false");
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the server; `Exited` if it exits before it listens.
    pub fn try_spawn(&mut self, args: &[&str]) -> Started {
        assert!(self.child.is_none(), "server already running");
        // Ready means: this start logged that it listens, and a connection succeeds. (A killed
        // predecessor's listener can linger for a moment while its io_uring is torn down, so a
        // connection alone could reach the dead process.)
        let log_before = self.log().len();
        let child = self.command(args).spawn().expect("spawn iggy-server");
        self.child = Some(child);
        let addr: SocketAddr = self.address().parse().unwrap();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                return Started::Exited(status);
            }
            let listening = self.log().get(log_before..).is_some_and(|log| log.contains("listening on tcp"));
            if listening && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Started::Listening;
            }
            if Instant::now() >= deadline {
                panic!("iggy-server did not listen within {START_TIMEOUT:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server and panics (with the log) if it does not come up.
    pub fn spawn(&mut self, args: &[&str]) {
        if let Started::Exited(status) = self.try_spawn(args) {
            panic!("iggy-server exited during startup ({status}); log:\n{}", self.log_tail(80));
        }
    }

    /// Runs the server expecting it to exit on its own (a refusal) within `limit`. Returns the
    /// exit status, or `None` if it was still running (it is then killed) — with what it printed.
    pub fn run_expecting_exit(&mut self, args: &[&str], limit: Duration) -> (Option<ExitStatus>, String) {
        let before = self.log().len();
        let mut child = self.command(args).spawn().expect("spawn iggy-server");
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = self.log();
        (status, log[before.min(log.len())..].to_string())
    }

    /// Starts the server and SIGKILLs it `delay` later, whatever it is doing by then (opening
    /// the data directory, replaying journals, truncating torn tails, rebuilding indexes).
    pub fn start_and_kill_after(&mut self, delay: Duration) {
        assert!(self.child.is_none(), "server already running");
        let mut child = self.command(&[]).spawn().expect("spawn iggy-server");
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait (SIGKILL after 10 s).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the child is still running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// `(VmHWM, VmRSS)` of the running child in KiB, from /proc/<pid>/status.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        };
        Some((field("VmHWM:")?, field("VmRSS:")?))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// An SDK client signed in as root.
    pub async fn client(&self) -> iggy::prelude::IggyClient {
        use iggy::prelude::*;
        let client = IggyClient::from_connection_string(&self.connection_string()).unwrap();
        crate::harness::within("connect", client.connect())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}; log tail:\n{}", self.log_tail(40)));
        client
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("----- iggy-server log (tail) -----\n{}\n-----", self.log_tail(120));
            if std::env::var_os("IGGY_E2E_KEEP").is_some() {
                let kept = std::mem::replace(&mut self.root, tempfile::tempdir().unwrap());
                eprintln!("IGGY_E2E_KEEP: kept {}", kept.keep().display());
            }
        }
    }
}

// ----- file trees -----

/// What a path holds, for before/after comparisons: every directory, file (length and
/// XxHash3-64 of the contents) and symlink (its target) under a root, keyed by relative path.
pub type Tree = BTreeMap<PathBuf, String>;

pub fn hash_tree(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let mut entries: Vec<_> = match std::fs::read_dir(dir) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => return,
        };
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, format!("link -> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(
                    rel,
                    format!("file {} {:016x}", bytes.len(), twox_hash::XxHash3_64::oneshot(&bytes)),
                );
            }
        }
    }
    let mut out = Tree::new();
    if let Ok(meta) = std::fs::symlink_metadata(root)
        && !meta.is_dir()
    {
        let bytes = std::fs::read(root).unwrap_or_default();
        out.insert(PathBuf::new(), format!("file {} {:016x}", bytes.len(), twox_hash::XxHash3_64::oneshot(&bytes)));
        return out;
    }
    walk(root, root, &mut out);
    out
}

pub fn assert_same_tree(what: &str, before: &Tree, after: &Tree) {
    if before == after {
        return;
    }
    let mut diff = String::new();
    for (path, was) in before {
        match after.get(path) {
            None => diff += &format!("  removed {}: {was}\n", path.display()),
            Some(now) if now != was => diff += &format!("  changed {}: {was} -> {now}\n", path.display()),
            _ => {}
        }
    }
    for (path, now) in after {
        if !before.contains_key(path) {
            diff += &format!("  added {}: {now}\n", path.display());
        }
    }
    panic!("{what}: the tree changed:\n{diff}");
}

/// Copies a directory tree (files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `root` whose name ends with `suffix`, sorted.
pub fn files_named(root: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    fn walk(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, suffix, out);
            } else if path.file_name().unwrap().to_string_lossy().ends_with(suffix) {
                out.push(path);
            }
        }
    }
    walk(root, suffix, &mut out);
    out.sort();
    out
}

// ----- the raw protocol -----

pub fn version_info() -> ClientVersionInfo {
    ClientVersionInfo {
        protocol_version: IGGY_PROTOCOL_VERSION,
        sdk_name: WireName::new("durability-raw").unwrap(),
        sdk_version: WireName::new("0.0.1").unwrap(),
    }
}

pub fn header_bytes(header: &RequestHeader) -> [u8; HEADER_SIZE] {
    let mut out = [0u8; HEADER_SIZE];
    out.copy_from_slice(bytemuck::bytes_of(header));
    out
}

/// A request frame: the official header for `code` and `payload`, then the payload.
pub fn frame(code: u32, client: u128, request: u64, session: u64, payload: &[u8]) -> Vec<u8> {
    let header = RequestHeader::for_request(code, client, request, session, payload).unwrap();
    let mut out = header_bytes(&header).to_vec();
    out.extend_from_slice(payload);
    out
}

/// What came back for one frame.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    Reply { header: ReplyHeader, body: Vec<u8> },
    /// An eviction frame (the connection is closed after it); the reason byte.
    Eviction { reason: u8 },
}

impl Reply {
    pub fn ok(self, what: &str) -> (ReplyHeader, Vec<u8>) {
        match self {
            Reply::Reply { header, body } if header.status == 0 => (header, body),
            Reply::Reply { header, .. } => panic!("{what}: status {}", header.status),
            Reply::Eviction { reason } => panic!("{what}: evicted (reason {reason})"),
        }
    }
}

/// Reads one reply or eviction frame.
pub fn read_reply(stream: &mut TcpStream) -> std::io::Result<Reply> {
    let mut head = [0u8; HEADER_SIZE];
    stream.read_exact(&mut head)?;
    let size = u32::from_le_bytes(head[48..52].try_into().unwrap()) as usize;
    if head[60] == Command::Eviction as u8 {
        // EvictionHeader: the reason is its last byte.
        return Ok(Reply::Eviction { reason: head[HEADER_SIZE - 1] });
    }
    let header: ReplyHeader = bytemuck::checked::try_pod_read_unaligned(&head)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("reply header: {e:?}")))?;
    let mut body = vec![0u8; size.saturating_sub(HEADER_SIZE)];
    stream.read_exact(&mut body)?;
    Ok(Reply::Reply { header, body })
}

/// A raw connection with a registered session.
pub struct Raw {
    pub stream: TcpStream,
    pub client: u128,
    pub session: u64,
    pub secret: [u8; 32],
    next_request: u64,
}

impl Raw {
    pub fn connect(address: &str) -> TcpStream {
        let stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// Connects and registers a new session (LoginRegister) as `user`.
    pub fn login(address: &str, user: &str, password: &str, client: u128) -> std::io::Result<Raw> {
        let mut stream = Raw::connect(address);
        let secret: [u8; 32] = rand::random();
        let request = LoginRegisterRequest {
            version_info: version_info(),
            bind_secret: BindSecret::new(Box::new(secret)),
            username: WireName::new(user).unwrap(),
            password: password.to_string().into(),
            client_context: None,
        };
        let bytes = frame(LOGIN_REGISTER_CODE, client, 0, 0, &request.to_bytes());
        stream.write_all(&bytes)?;
        match read_reply(&mut stream)? {
            Reply::Reply { header, body } if header.status == 0 => {
                let response = LoginRegisterResponse::decode_from(&body).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("login reply: {e:?}"))
                })?;
                Ok(Raw { stream, client, session: response.session, secret, next_request: 1 })
            }
            other => Err(std::io::Error::other(format!("login refused: {other:?}"))),
        }
    }

    /// A fresh connection bound (BindSession) to an existing session.
    pub fn bind(address: &str, client: u128, session: u64, secret: [u8; 32], next_request: u64) -> std::io::Result<Raw> {
        let mut stream = Raw::connect(address);
        let request = BindSessionRequest {
            version_info: version_info(),
            identity: SessionIdentity { client_id: client, session, metadata_watermark: 0 },
            bind_secret: BindSecret::new(Box::new(secret)),
        };
        let bytes = frame(BIND_SESSION_CODE, client, 0, 0, &request.to_bytes());
        stream.write_all(&bytes)?;
        match read_reply(&mut stream)? {
            Reply::Reply { header, .. } if header.status == 0 => {
                Ok(Raw { stream, client, session, secret, next_request })
            }
            other => Err(std::io::Error::other(format!("bind refused: {other:?}"))),
        }
    }

    pub fn next_request(&mut self) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        request
    }

    pub fn peek_next_request(&self) -> u64 {
        self.next_request
    }

    pub fn call(&mut self, bytes: &[u8]) -> std::io::Result<Reply> {
        self.stream.write_all(bytes)?;
        read_reply(&mut self.stream)
    }

    /// The partition's route (its incarnation and the metadata op it was read at).
    pub fn route(&mut self, stream: u32, topic: u32, partition: u32) -> PartitionRouteResponse {
        let body = GetPartitionRouteRequest {
            stream_id: WireIdentifier::numeric(stream),
            topic_id: WireIdentifier::numeric(topic),
            partition_id: partition,
        }
        .to_bytes();
        let request = self.next_request();
        let bytes = frame(GET_PARTITION_ROUTE_CODE, self.client, request, self.session, &body);
        let (_, body) = self.call(&bytes).unwrap().ok("get partition route");
        PartitionRouteResponse::decode_from(&body).unwrap()
    }

    /// A SendMessages frame with request number `request`, stamped with the route's context.
    pub fn send_frame(
        &self,
        request: u64,
        route: &PartitionRouteResponse,
        (stream, topic, partition): (u32, u32, u32),
        messages: &[(u128, Vec<u8>)],
    ) -> Vec<u8> {
        let raw: Vec<RawMessage<'_>> = messages
            .iter()
            .map(|(id, payload)| RawMessage { id: *id, origin_timestamp: 1, headers: None, payload })
            .collect();
        let mut body = bytes::BytesMut::new();
        SendMessagesEncoder::encode(
            &mut body,
            &WireIdentifier::numeric(stream),
            &WireIdentifier::numeric(topic),
            &WirePartitioning::PartitionId(partition),
            &raw,
        )
        .unwrap();
        let mut header =
            RequestHeader::for_request(SEND_MESSAGES_CODE, self.client, request, self.session, &body).unwrap();
        PartitionContext { incarnation: route.incarnation, owner_generation: 0, metadata_op: route.metadata_op }
            .stamp(&mut header);
        let mut out = header_bytes(&header).to_vec();
        out.extend_from_slice(&body);
        out
    }
}

/// The base offset in a SendMessages reply body (`[u32 count][u32 s][u32 t][u32 p][u64 base]`).
pub fn confirmed_base_offset(body: &[u8]) -> u64 {
    use iggy_binary_protocol::responses::messages::send_messages::SendMessagesResponse;
    let response = SendMessagesResponse::decode_from(body).expect("send reply body");
    response.confirmations.first().expect("one confirmation").base_offset
}

/// Raises this process's open-file soft limit to the hard limit (children inherit it) and
/// returns the new soft limit.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// Random bytes.
pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}
