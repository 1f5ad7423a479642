//! Starts `iggy-server` as a child on a free port in a temp dir (as the e2e harness does),
//! building the release binary first when it is missing.

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ServerProc {
    pub dir: tempfile::TempDir,
    pub address: String,
    /// QUIC, WebSocket and the HTTP API, served beside TCP.
    pub quic_address: String,
    pub ws_address: String,
    pub http_address: String,
    child: Option<Child>,
}

fn workspace_root() -> PathBuf {
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR"));
    match compiled.parent() {
        Some(root) if root.join("Cargo.toml").is_file() => root.to_path_buf(),
        _ => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    }
}

fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                root.join(dir)
            }
        }
        _ => root.join("target"),
    }
}

/// `explicit`, else `$IGGY_SERVER_BIN`, else `<target>/release/iggy-server`, built if missing.
pub fn server_binary(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(bin) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("IGGY_SERVER_BIN").map(PathBuf::from))
    {
        // Absolute: the server is spawned with its temp dir as working directory.
        return if bin.is_file() {
            bin.canonicalize()
                .map_err(|e| format!("server binary {}: {e}", bin.display()))
        } else {
            Err(format!("server binary {} is not a file", bin.display()))
        };
    }
    let root = workspace_root();
    let bin = target_dir(&root).join("release").join("iggy-server");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "bench: {} is missing; running `cargo build --release --bin iggy-server`",
        bin.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "iggy-server"])
        .current_dir(&root)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("spawn cargo build: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release --bin iggy-server` failed ({status})"
        ));
    }
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "cargo build succeeded but {} is missing",
            bin.display()
        ))
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn free_udp_port() -> Result<u16, String> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.port())
}

impl ServerProc {
    /// The address clients of `transport` dial.
    pub fn address_for(&self, transport: crate::args::Transport) -> String {
        use crate::args::Transport;
        match transport {
            Transport::Tcp => self.address.clone(),
            Transport::Quic => self.quic_address.clone(),
            Transport::Ws => self.ws_address.clone(),
            Transport::Http => self.http_address.clone(),
        }
    }

    /// `http_max_request_size`: the HTTP API's request limit (a batch travels as base64 JSON);
    /// `extra_env` is applied last, so it can override any of the bench's settings.
    pub fn start(
        bin: &Path,
        durability: &str,
        http_max_request_size: u64,
        extra_env: &[(String, String)],
    ) -> Result<ServerProc, String> {
        let address = format!("127.0.0.1:{}", free_port()?);
        let mut server = Self::spawn(
            bin,
            durability,
            http_max_request_size,
            (address, None, &[]),
            extra_env,
        )?;
        server.wait_ready()?;
        Ok(server)
    }

    /// A cluster of `nodes` local servers from one roster (TCP only: the other transports are
    /// off, so the roster needs no ports for them), started together; clients dial node 0 and
    /// the SDK finds the others in its roster.
    pub fn start_cluster(
        bin: &Path,
        nodes: u8,
        durability: &str,
        extra_env: &[(String, String)],
    ) -> Result<Vec<ServerProc>, String> {
        let mut roster = vec![
            ("IGGY_CLUSTER_ENABLED".to_string(), "true".to_string()),
            ("IGGY_CLUSTER_NAME".to_string(), "iggy-bench".to_string()),
            ("IGGY_QUIC_ENABLED".to_string(), "false".to_string()),
            ("IGGY_HTTP_ENABLED".to_string(), "false".to_string()),
            ("IGGY_WEBSOCKET_ENABLED".to_string(), "false".to_string()),
        ];
        let mut addresses = Vec::new();
        for id in 0..nodes {
            let (tcp, replica) = (free_port()?, free_port()?);
            for (field, value) in [
                ("NAME", format!("bench-{id}")),
                ("IP", "127.0.0.1".to_string()),
                ("REPLICA_ID", id.to_string()),
                ("PORTS_TCP", tcp.to_string()),
                ("PORTS_TCP_REPLICA", replica.to_string()),
            ] {
                roster.push((format!("IGGY_CLUSTER_NODES_{id}_{field}"), value));
            }
            addresses.push(format!("127.0.0.1:{tcp}"));
        }
        // All spawned before any is waited for: a node of a new cluster serves only once a
        // majority of its peers declared no metadata history.
        let mut servers = Vec::new();
        for (id, address) in addresses.into_iter().enumerate() {
            let node = (address, Some(id as u8), roster.as_slice());
            servers.push(Self::spawn(bin, durability, 1 << 20, node, extra_env)?);
        }
        for server in &mut servers {
            server.wait_ready()?;
        }
        Ok(servers)
    }

    /// One server process, spawned (the caller waits until it accepts): `node` is its TCP
    /// address and, in a cluster, its replica id and the roster's environment.
    fn spawn(
        bin: &Path,
        durability: &str,
        http_max_request_size: u64,
        node: (String, Option<u8>, &[(String, String)]),
        extra_env: &[(String, String)],
    ) -> Result<ServerProc, String> {
        let (address, replica_id, roster) = node;
        let dir = tempfile::Builder::new()
            .prefix("iggy-bench-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let quic_address = format!("127.0.0.1:{}", free_udp_port()?);
        let ws_address = format!("127.0.0.1:{}", free_port()?);
        let http_address = format!("127.0.0.1:{}", free_port()?);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("server.log"))
            .map_err(|e| format!("server.log: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("--with-default-root-credentials")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("IGGY_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("IGGY_TCP_ADDRESS", &address)
            .env("IGGY_QUIC_ADDRESS", &quic_address)
            .env("IGGY_WEBSOCKET_ENABLED", "true")
            .env("IGGY_WEBSOCKET_ADDRESS", &ws_address)
            .env("IGGY_SYSTEM_PATH", dir.path().join("data"))
            .env("IGGY_SYSTEM_DURABILITY", durability)
            // On a free port (the default 3000 could be taken): the http transport's listener,
            // and the server's default configuration, under which request metrics are recorded.
            .env("IGGY_HTTP_ENABLED", "true")
            .env("IGGY_HTTP_ADDRESS", &http_address)
            .env(
                "IGGY_HTTP_MAX_REQUEST_SIZE",
                http_max_request_size.to_string(),
            );
        if let Some(id) = replica_id {
            cmd.arg("--replica-id").arg(id.to_string());
        }
        for (key, value) in roster.iter().chain(extra_env) {
            cmd.env(key, value);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let server = ServerProc {
            dir,
            address,
            quic_address,
            ws_address,
            http_address,
            child: Some(child),
        };
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let addr: SocketAddr = self.address.parse().map_err(|e| format!("{e}"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!(
                    "iggy-server exited during startup ({status}):\n{}",
                    self.log_tail(40)
                ));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "iggy-server did not accept on {addr} within {START_TIMEOUT:?}:\n{}",
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the child is still running (false after a crash).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("server.log"))
            .unwrap_or_else(|e| format!("<no server.log: {e}>"));
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// User + system CPU seconds the server has used so far (Linux /proc), if known.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(&self.pid()?.to_string())
    }
}

/// User + system CPU seconds process `pid` (or `self`) has used so far (Linux /proc), if known.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ is 100 on Linux
}

impl Drop for ServerProc {
    /// SIGTERM (so a profiler wrapping the server writes its output), SIGKILL after 20 s.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
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
}
