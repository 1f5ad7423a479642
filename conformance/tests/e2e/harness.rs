//! Harness: builds (once) and starts the real `iggy-server` binary as a child process on a
//! private temp dir and a free port, and connects the official SDK to it.
//!
//! - The binary is `$IGGY_SERVER_BIN` if set, else `<target>/debug/iggy-server`, where
//!   `<target>` is `$CARGO_TARGET_DIR` (relative paths resolve against the workspace root) or
//!   `<workspace>/target`. A missing binary is built with `cargo build --bin iggy-server`,
//!   once per process (`OnceLock`) and under an exclusive file lock across processes (nextest
//!   runs every test in its own process). `IGGY_E2E_REBUILD=1` builds even when it exists.
//! - The child runs in the temp dir with `--with-default-root-credentials`,
//!   `IGGY_TCP_ADDRESS=127.0.0.1:<port>` and `IGGY_SYSTEM_PATH=<tempdir>/data`; its stdout and
//!   stderr go to `<tempdir>/server.log`, which is printed when the test panics.
//! - `TestServer::start_with_env` adds environment variables for the child (configuration as
//!   `IGGY_<SECTION>_<KEY>`, `RUST_LOG`), applied after the ones above at every start.
//! - `TestServer::start_with_file_size_limit` runs the child with `RLIMIT_FSIZE` (SIGXFSZ left
//!   at its default, which the server ignores): a write that would grow any file past the limit
//!   fails with EFBIG, a real storage error injected without a hook in the server. `set_file_size_limit(None)` lifts it for the
//!   next start; `wait_exit` waits for a child that stops by itself.
//! - `TestServer::start_with_open_files_limit` runs the child with `RLIMIT_NOFILE`, so its
//!   descriptors run out.
//! - `Drop` kills the child (SIGKILL) and reaps it. `IGGY_E2E_KEEP=1` keeps the temp dir of
//!   a failed test and prints its path.
//! - `TestServer::launch` spawns a child on a chosen port with extra flags and its own binary
//!   without waiting for it (`wait_ready` does): the nodes of a cluster (`cluster.rs`) only
//!   serve once their peers run. `pause`/`resume` stop and continue the child (SIGSTOP/SIGCONT).
//! - The binary is not rebuilt when it exists: run `cargo build --bin iggy-server` (or set
//!   `IGGY_E2E_REBUILD=1`) after changing the server.

#![allow(dead_code)]

use iggy::prelude::*;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the server gets to accept TCP connections after spawn.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bound on one SDK call in the tests (the SDK's own deadline is 30 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SIGTERM gets before the harness escalates to SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub const ROOT_USER: &str = "iggy";
pub const ROOT_PASSWORD: &str = "iggy";

pub fn workspace_root() -> PathBuf {
    // Run time first: cargo and nextest export CARGO_MANIFEST_DIR to the test process, so a
    // test binary built from another checkout that shares the target dir still finds its own
    // workspace. The compile-time value is the fallback.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .expect("conformance/ has a parent")
        .to_path_buf()
}

pub fn target_dir(root: &Path) -> PathBuf {
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

/// The server binary, built on first use if it is missing.
pub fn server_binary() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(find_or_build)
        .clone()
        .unwrap_or_else(|e| panic!("iggy-server binary: {e}"))
}

fn find_or_build() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("IGGY_SERVER_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("IGGY_SERVER_BIN={} is not a file", bin.display()))
        };
    }
    let root = workspace_root();
    let target = target_dir(&root);
    let bin = target.join("debug").join("iggy-server");
    let force = std::env::var("IGGY_E2E_REBUILD").is_ok_and(|v| v == "1");
    if bin.is_file() && !force {
        return Ok(bin);
    }
    // The first test process builds, the others wait and then find it.
    build_locked(&root, &target, &[], "iggy-e2e-build.lock", || {
        bin.is_file() && !force
    })?;
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "cargo build succeeded but {} is missing",
            bin.display()
        ))
    }
}

/// `cargo build --bin iggy-server <extra>` into `target`, under an exclusive file lock named
/// `lock_name` in `target` (nextest runs every test in its own process); skipped when `done()`
/// holds once the lock is taken.
pub fn build_locked(
    root: &Path,
    target: &Path,
    extra: &[&str],
    lock_name: &str,
    done: impl Fn() -> bool,
) -> Result<(), String> {
    std::fs::create_dir_all(target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let lock_path = target.join(lock_name);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("open {}: {e}", lock_path.display()))?;
    let _guard = FileLock::exclusive(&lock)?;
    if done() {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--bin", "iggy-server"])
        .args(extra)
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("spawn cargo build: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo build --bin iggy-server {}` failed ({}):\n{}",
            extra.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(file: &'a File) -> Result<Self, String> {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a valid, open descriptor; the File outlives the guard.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(format!("flock: {}", std::io::Error::last_os_error()));
        }
        Ok(Self(file))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// `IGGY_E2E_SDK_LOG=<env-filter>` (for example `iggy=debug`) prints the SDK's tracing to the
/// test's stderr, which nextest shows for failing tests.
fn init_sdk_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("IGGY_E2E_SDK_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .try_init();
        }
    });
}

/// A port `free_port` hands out that is also free on each of `ips` (loopback IPs), for nodes
/// that listen on one port each on their own IP.
pub fn free_port_on(ips: &[IpAddr]) -> u16 {
    loop {
        let port = free_port();
        if ips.iter().all(|&ip| TcpListener::bind((ip, port)).is_ok()) {
            return port;
        }
    }
}

/// A free loopback port for a server to listen on, outside the kernel's ephemeral range: the
/// nodes' own outgoing connections (a replica dialing its peers, clients) take their source
/// ports from that range, and one of them could hold a port a test had picked but not bound
/// yet (a cluster's roster is picked before any node starts). Ports are drawn at random from
/// 20000..32000, checked free with a bind, and never handed out twice by one process, nor by
/// two test processes (nextest runs each test in its own) within `PORT_RESERVATION`: a port
/// stays picked but unbound until its server starts, which for a cluster node that joins its
/// peers first can take a while, and a bind check alone let two processes pick one port.
pub fn free_port() -> u16 {
    use rand::Rng;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut rng = rand::rng();
    loop {
        let port = rng.random_range(20_000..32_000);
        let mut handed_out = HANDED_OUT.lock().expect("the port list");
        if handed_out.contains(&port)
            || TcpListener::bind(("127.0.0.1", port)).is_err()
            || !reserve_across_processes(port)
        {
            continue;
        }
        handed_out.push(port);
        return port;
    }
}

/// How long a port `free_port` handed out stays reserved against other test processes.
const PORT_RESERVATION: Duration = Duration::from_secs(5 * 60);

/// Claims `port` for this test process: a file named after it, created exclusively in a
/// directory every test process shares. A claim older than `PORT_RESERVATION` is stale and
/// is taken over.
fn reserve_across_processes(port: u16) -> bool {
    let dir = std::env::temp_dir().join("iggy-e2e-ports");
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let claim = dir.join(port.to_string());
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&claim)
            .is_ok()
    };
    if create() {
        return true;
    }
    let stale = std::fs::metadata(&claim)
        .and_then(|meta| meta.modified())
        .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > PORT_RESERVATION));
    // Two processes may both find it stale: only the one whose create wins takes it.
    stale && std::fs::remove_file(&claim).is_ok() && create()
}

/// One running `iggy-server` child with its own data directory and port.
pub struct TestServer {
    dir: tempfile::TempDir,
    /// The loopback IP of its TCP listener (127.0.0.1 unless launched on another).
    ip: IpAddr,
    port: u16,
    child: Option<Child>,
    starts: u32,
    /// Set on the child at every start, after the harness's own variables (so they win).
    env: Vec<(String, String)>,
    /// The child's `RLIMIT_FSIZE` in bytes, from its next start.
    file_size_limit: Option<u64>,
    /// The child's `RLIMIT_NOFILE` (open file descriptors), from its next start.
    open_files_limit: Option<u64>,
    /// Flags after `--with-default-root-credentials`, at every start.
    args: Vec<String>,
    /// The executable, when not `server_binary()`.
    binary: Option<PathBuf>,
    /// The network namespace the child runs in (`lan.rs`), when not the test's.
    namespace: Option<PathBuf>,
}

impl TestServer {
    /// Spawns the server and waits until its TCP port accepts connections.
    pub fn start() -> Self {
        Self::start_with_env(&[])
    }

    /// `start` with extra environment variables for the child (`IGGY_*` configuration,
    /// `RUST_LOG`), kept for every restart. They are set after the harness's own, so
    /// `("RUST_LOG", "")` clears the harness's `RUST_LOG=info`.
    pub fn start_with_env(env: &[(&str, &str)]) -> Self {
        Self::start_limited(env, None, None)
    }

    /// `start` with the HTTP API on a free port, returned with the server.
    pub fn start_with_http(env: &[(&str, &str)]) -> (Self, String) {
        let address = format!("127.0.0.1:{}", free_port());
        let mut all = vec![
            ("IGGY_HTTP_ENABLED", "true"),
            ("IGGY_HTTP_ADDRESS", address.as_str()),
        ];
        all.extend_from_slice(env);
        (Self::start_with_env(&all), format!("http://{address}"))
    }

    /// `start_with_env` with the child's files limited to `bytes` (see the module notes).
    pub fn start_with_file_size_limit(env: &[(&str, &str)], bytes: u64) -> Self {
        Self::start_limited(env, Some(bytes), None)
    }

    /// `start_with_env` with the child's open file descriptors limited to `descriptors`.
    pub fn start_with_open_files_limit(env: &[(&str, &str)], descriptors: u64) -> Self {
        Self::start_limited(env, None, Some(descriptors))
    }

    fn start_limited(
        env: &[(&str, &str)],
        file_size_limit: Option<u64>,
        open_files_limit: Option<u64>,
    ) -> Self {
        init_sdk_logging();
        let bin = server_binary();
        let dir = tempfile::Builder::new()
            .prefix("iggy-e2e-")
            .tempdir()
            .expect("create temp dir");
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut server = Self {
            dir,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: free_port(),
            child: None,
            starts: 0,
            env,
            file_size_limit,
            open_files_limit,
            args: Vec::new(),
            binary: None,
            namespace: None,
        };
        server.spawn(&bin);
        server
    }

    /// Spawns `binary` (default `server_binary()`) with `args` on TCP `port` and returns at
    /// once; call `wait_ready` before using it. Restarts reuse all of it.
    pub fn launch(binary: Option<&Path>, port: u16, args: &[&str], env: &[(&str, &str)]) -> Self {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        Self::launch_at(binary, address, args, env)
    }

    /// `launch` with the TCP listener on `address` (`IGGY_TCP_ADDRESS`), any loopback IP.
    pub fn launch_at(
        binary: Option<&Path>,
        address: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::launch_in(None, binary, address, args, env)
    }

    /// `launch_at` in the network namespace `namespace` names (a file under /var/run/netns),
    /// at every start.
    pub fn launch_in(
        namespace: Option<&Path>,
        binary: Option<&Path>,
        address: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        init_sdk_logging();
        let dir = tempfile::Builder::new()
            .prefix("iggy-e2e-")
            .tempdir()
            .expect("create temp dir");
        let mut server = Self {
            dir,
            ip: address.ip(),
            port: address.port(),
            child: None,
            starts: 0,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            file_size_limit: None,
            open_files_limit: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            binary: binary.map(Path::to_path_buf),
            namespace: namespace.map(Path::to_path_buf),
        };
        let bin = server.binary();
        server.spawn_child(&bin);
        server
    }

    fn binary(&self) -> PathBuf {
        self.binary.clone().unwrap_or_else(server_binary)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn address(&self) -> String {
        SocketAddr::new(self.ip, self.port).to_string()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    /// The lines of the server's log that contain `text`, in order.
    pub fn log_lines_with(&self, text: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| line.contains(text))
            .map(str::to_string)
            .collect()
    }

    /// The server's resident memory in MiB (VmRSS).
    pub fn resident_mib(&self) -> u64 {
        let pid = self.pid().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib / 1024
    }

    /// The server's anonymous resident memory in KiB (RssAnon: its heap and other private
    /// pages, not its binary or the files it maps).
    pub fn anonymous_kib(&self) -> u64 {
        let pid = self.pid().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("RssAnon:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `iggy://<user>:<password>@<ip>:<port>`, heartbeat and reconnection tuned for tests.
    pub fn connection_string(&self, user: &str, password: &str) -> String {
        format!("iggy://{user}:{password}@{}", self.address())
    }

    fn spawn(&mut self, bin: &Path) {
        self.spawn_child(bin);
        self.wait_ready();
    }

    fn spawn_child(&mut self, bin: &Path) {
        assert!(self.child.is_none(), "server already running");
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server.log");
        writeln!(
            log,
            "===== e2e harness: start #{} on {} =====",
            self.starts,
            self.address()
        )
        .expect("write server.log");
        let stderr = log.try_clone().expect("clone log handle");
        let mut cmd = Command::new(bin);
        cmd.arg("--with-default-root-credentials")
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr));
        without_shell_settings(&mut cmd);
        // QUIC is on by default: an ephemeral port keeps parallel servers apart (cluster
        // metadata tells the bound port).
        cmd.env("IGGY_TCP_ADDRESS", self.address())
            .env("IGGY_QUIC_ADDRESS", "127.0.0.1:0")
            .env("IGGY_SYSTEM_PATH", self.data_dir())
            // Served by default on a fixed port; tests that use it pass IGGY_HTTP_ENABLED=true
            // and a free port (`start_with_http`).
            .env("IGGY_HTTP_ENABLED", "false");
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        let limits = [
            (libc::RLIMIT_FSIZE, self.file_size_limit),
            (libc::RLIMIT_NOFILE, self.open_files_limit),
        ];
        for (resource, limit) in limits {
            let Some(limit) = limit else { continue };
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure calls only setrlimit(2), which is
            // async-signal-safe. SIGXFSZ keeps its default (the server ignores it itself).
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(resource, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(path) = &self.namespace {
            join_network_namespace(&mut cmd, path);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        self.child = Some(child);
    }

    /// Waits until this start of the child accepts on its TCP port (panics after
    /// `START_TIMEOUT` or if it exits).
    pub fn wait_ready(&mut self) {
        let addr: SocketAddr = self.address().parse().expect("socket address");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                panic!(
                    "iggy-server exited during startup ({status}); log {}:\n{}",
                    self.log_path().display(),
                    self.log()
                );
            }
            // Right after a SIGKILL the dead process's listener can still accept for a moment
            // (its io_uring is torn down asynchronously): only this start's own "listening"
            // line proves the new process serves the port.
            let log = self.log();
            let this_start = log
                .rsplit("===== e2e harness: start #")
                .next()
                .unwrap_or("");
            if this_start.contains("listening on tcp")
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "iggy-server did not accept on {addr} within {START_TIMEOUT:?}; log {}:\n{}",
                    self.log_path().display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }

    /// SIGSTOP: the process stays, frozen (its sockets stay open, nothing is answered).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGTERM, wait for exit (SIGKILL after `STOP_TIMEOUT`). Returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_ref()?;
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        let child = self.child.as_mut().expect("child");
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    eprintln!("iggy-server ignored SIGTERM for {STOP_TIMEOUT:?}; sending SIGKILL");
                    let _ = child.kill();
                    break child.wait().expect("wait for killed child");
                }
            }
        };
        self.child = None;
        Some(status)
    }

    /// The child's `RLIMIT_FSIZE` from its next start; `None` lifts it.
    pub fn set_file_size_limit(&mut self, bytes: Option<u64>) {
        self.file_size_limit = bytes;
    }

    /// The child's `RLIMIT_NOFILE` (soft and hard) from its next start; `None` lifts it.
    pub fn set_open_files_limit(&mut self, descriptors: Option<u64>) {
        self.open_files_limit = descriptors;
    }

    /// Waits up to `limit` for the child to exit by itself and reaps it; `None` if it is still
    /// running then (it is left running) or none was started.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut()?;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    /// SIGKILL and reap: a crash, nothing gets flushed or closed by the server.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data directory and port (after `stop` or `kill9`).
    pub fn start_again(&mut self) {
        let bin = self.binary();
        self.spawn(&bin);
    }

    /// Runs `binary` (with `None`, `server_binary()`) from the next start: a node moved to
    /// another build on its data directory, as an upgrade or a rollback does.
    pub fn set_binary(&mut self, binary: Option<PathBuf>) {
        self.binary = binary;
    }

    /// Sets (or with `None` removes) the child's environment variable `key` from its next start.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.env.push((key.to_string(), value.to_string()));
        }
    }

    /// Starts the server again as `start_again` does, with `extra` flags for this start only.
    pub fn start_again_with(&mut self, extra: &[&str]) {
        let kept = self.args.clone();
        self.args.extend(extra.iter().map(|a| a.to_string()));
        let bin = self.binary();
        self.spawn(&bin);
        self.args = kept;
    }

    /// Starts the server again without waiting for it to accept: for a start that must be
    /// refused (`wait_exit` then reaps it).
    pub fn start_again_unready(&mut self) {
        let bin = self.binary();
        self.spawn_child(&bin);
    }

    /// Graceful restart: SIGTERM, wait, start again on the same directory and port.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Crash restart: SIGKILL, start again on the same directory and port.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.start_again();
    }

    /// A connected client signed in as root (auto-login from the connection string).
    pub async fn root_client(&self) -> IggyClient {
        self.client_as(ROOT_USER, ROOT_PASSWORD).await
    }

    /// A connected client signed in as `user` (auto-login from the connection string).
    pub async fn client_as(&self, user: &str, password: &str) -> IggyClient {
        let client = IggyClient::from_connection_string(&self.connection_string(user, password))
            .expect("valid connection string");
        within("connect + auto-login", client.connect())
            .await
            .unwrap_or_else(|e| panic!("connect as {user:?}: {e} (code {})", e.as_code()));
        client
    }

    /// A connected client that has not signed in (no auto-login).
    pub async fn anonymous_client(&self) -> IggyClient {
        let client = IggyClient::builder()
            .with_tcp()
            .with_server_address(self.address())
            .build()
            .expect("tcp client");
        within("connect", client.connect())
            .await
            .unwrap_or_else(|e| panic!("connect: {e} (code {})", e.as_code()));
        client
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- iggy-server log ({}) -----\n{}\n----- end of iggy-server log -----",
                self.log_path().display(),
                self.log()
            );
            if std::env::var_os("IGGY_E2E_KEEP").is_some() {
                let kept = std::mem::replace(
                    &mut self.dir,
                    tempfile::tempdir().expect("placeholder temp dir"),
                );
                eprintln!("IGGY_E2E_KEEP: data kept in {}", kept.keep().display());
            }
        }
    }
}

/// Awaits `fut` for at most `CALL_TIMEOUT`; a timeout panics with `what`.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    within_for(CALL_TIMEOUT, what, fut).await
}

/// Awaits `fut` for at most `limit`; a timeout panics with `what`.
pub async fn within_for<F: Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// The answer a client gets once its session ended on the server. The official client reads
/// its own state first and answers `Disconnected` (8) without sending while its automatic
/// sign-in is under way (it learned of the end from another replica's link), so a call made
/// then is repeated until the sign-in was refused; the answer after that is returned.
pub async fn after_session_end<T, F, Fut>(what: &str, mut call: F) -> Result<T, IggyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, IggyError>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = within_for(Duration::from_secs(15), what, call()).await;
        match r {
            Err(IggyError::Disconnected) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            r => return r,
        }
    }
}

/// Unwraps an SDK result, naming the call and the error code on failure.
#[track_caller]
pub fn ok<T>(what: &str, r: Result<T, IggyError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error {e} (code {})", e.as_code()),
    }
}

/// Asserts an SDK result is the error with wire code `code`.
#[track_caller]
pub fn expect_code<T: std::fmt::Debug>(what: &str, r: Result<T, IggyError>, code: u32) {
    match r {
        Ok(v) => {
            let mut shown = format!("{v:?}");
            if shown.len() > 400 {
                let mut cut = 400;
                while !shown.is_char_boundary(cut) {
                    cut -= 1;
                }
                shown.truncate(cut);
                shown.push('…');
            }
            panic!(
                "{what}: expected error {code} ({}), got Ok({shown})",
                IggyError::from_code_as_string(code)
            )
        }
        Err(e) => assert_eq!(
            e.as_code(),
            code,
            "{what}: expected error {code} ({}), got {e} (code {})",
            IggyError::from_code_as_string(code),
            e.as_code()
        ),
    }
}

pub fn id(n: u32) -> Identifier {
    Identifier::numeric(n).expect("numeric identifier")
}

pub fn name(s: &str) -> Identifier {
    Identifier::named(s).expect("named identifier")
}

/// Hermetic: no IGGY_* setting from the developer's shell reaches a child server.
pub fn without_shell_settings(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("IGGY_") {
            command.env_remove(key);
        }
    }
}

/// Starts `command`'s process in the network namespace whose file is `namespace` (`lan.rs`).
/// The file, opened here, lives in the command (closed at exec, close-on-exec, and with it).
pub fn join_network_namespace(command: &mut Command, namespace: &Path) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let file =
        File::open(namespace).unwrap_or_else(|e| panic!("open {}: {e}", namespace.display()));
    let fd = file.as_raw_fd();
    // SAFETY: between fork and exec the closure calls only setns(2), which is
    // async-signal-safe, on a descriptor the closure keeps open.
    unsafe {
        command.pre_exec(move || {
            let _open = &file;
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A message with the given payload (the SDK mints a random id).
pub fn msg(payload: impl Into<Vec<u8>>) -> IggyMessage {
    IggyMessage::builder()
        .payload(bytes::Bytes::from(payload.into()))
        .build()
        .expect("valid message")
}

/// `n` messages whose payloads are `"{prefix}-{i}"`.
pub fn msgs(prefix: &str, n: usize) -> Vec<IggyMessage> {
    (0..n).map(|i| msg(format!("{prefix}-{i}"))).collect()
}

pub fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

pub fn offsets(polled: &PolledMessages) -> Vec<u64> {
    polled.messages.iter().map(|m| m.header.offset).collect()
}

pub fn topic_options(partitions: u32) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        ..Default::default()
    }
}

/// Creates stream `stream` and its topic `topic` with `partitions` partitions.
pub async fn create_stream_and_topic(
    client: &IggyClient,
    stream: &str,
    topic: &str,
    partitions: u32,
) -> (StreamDetails, TopicDetails) {
    let s = ok(
        "create_stream",
        within(
            "create_stream",
            client.create_stream(stream, &StreamCreateOptions::default()),
        )
        .await,
    );
    let t = ok(
        "create_topic",
        within(
            "create_topic",
            client.create_topic(&name(stream), topic, &topic_options(partitions)),
        )
        .await,
    );
    (s, t)
}

/// Sends `messages` to one explicit partition and returns the confirmations.
pub async fn send_to_partition(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    mut messages: Vec<IggyMessage>,
) -> SendMessagesResponse {
    ok(
        "send_messages",
        within(
            "send_messages",
            client.send_messages(
                stream,
                topic,
                &Partitioning::partition_id(partition),
                &mut messages,
            ),
        )
        .await,
    )
}

/// Polls `count` messages from one partition with a plain consumer.
#[allow(clippy::too_many_arguments)] // the SDK's poll_messages arguments, one for one
pub async fn poll(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    consumer: &Consumer,
    strategy: PollingStrategy,
    count: u32,
    auto_commit: bool,
) -> PolledMessages {
    ok(
        "poll_messages",
        within(
            "poll_messages",
            client.poll_messages(
                stream,
                topic,
                Some(partition),
                consumer,
                &strategy,
                count,
                auto_commit,
            ),
        )
        .await,
    )
}

pub fn consumer(name_: &str) -> Consumer {
    Consumer::new(name(name_))
}

/// Every file under `dir` with its bytes (directories as `None`), for comparing a tree before
/// and after.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut found = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).expect("read a directory of the tree") {
            let path = entry.expect("a directory entry").path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                found.insert(relative, None);
                pending.push(path);
            } else {
                found.insert(relative, Some(std::fs::read(&path).expect("read a file")));
            }
        }
    }
    found
}

/// Copies the tree at `from` to `to` (created), file by file.
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

/// Every file (not directory) under `dir`, at any depth. A directory removed while it is walked
/// (a running server deleting a topic's) is skipped.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut directories = vec![dir.to_path_buf()];
    while let Some(directory) = directories.pop() {
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && directory != dir => {
                continue;
            }
            Err(error) => panic!("{}: {error}", directory.display()),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => panic!("{}: {error}", directory.display()),
            };
            let path = entry.path();
            if path.is_dir() {
                directories.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// A member of group `group` of `s`/`t` as the SDK's examples build one: created if missing,
/// joined, `next` polling with its offset committed at each poll.
pub fn group_member(client: &IggyClient, group: &str) -> IggyConsumer {
    client
        .consumer_group(group, "s", "t")
        .expect("consumer builder")
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval("10ms".parse::<IggyDuration>().unwrap())
        .batch_length(10)
        .build()
}

/// The header of a SendMessages request from `client` declaring a body of `body` + 1 bytes: a
/// test that sends it and `body` bytes leaves the request one byte short, held by the server.
pub fn send_header_one_byte_short(
    client: u128,
    body: usize,
) -> iggy_generated::frames::RequestHeader {
    use iggy_generated::frames::{Command, Operation, RequestHeader};
    RequestHeader {
        command: Command::Request,
        size: (RequestHeader::SIZE + body + 1) as u32,
        client,
        operation: Operation::SendMessages.to_repr(),
        request: 1,
        request_checksum: 1,
        ..RequestHeader::default()
    }
}
