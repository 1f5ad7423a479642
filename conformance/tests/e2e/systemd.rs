//! systemd service notification on the real binary, the one every other test runs (the
//! notification is always built in: a build without it once left the example unit waiting 300 s
//! for READY=1, restarting the node forever), started with a `NOTIFY_SOCKET` this test binds
//! and, where named, `WATCHDOG_USEC`.
//!
//! - `READY=1` is the first notification, and the TCP listener (the only transport served)
//!   accepts a connection dialled the moment it arrives.
//! - `WATCHDOG=1` repeats at half of `WATCHDOG_USEC`, and not at all without it.
//! - `STOPPING=1` is sent on SIGTERM, before the process exits (cleanly).

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server gets from spawn to `READY=1`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The server as systemd would start it: its own temp dir, a free port, the
/// notify socket bound by the test.
struct Notified {
    dir: tempfile::TempDir,
    address: SocketAddr,
    /// QUIC (UDP) and WebSocket listeners, bound before READY=1 like TCP.
    quic: SocketAddr,
    websocket: SocketAddr,
    socket: UnixDatagram,
    child: Option<Child>,
}

impl Notified {
    fn start(watchdog_usec: Option<&str>) -> Self {
        let bin = crate::harness::server_binary();
        let dir = tempfile::Builder::new()
            .prefix("iggy-e2e-systemd-")
            .tempdir()
            .unwrap();
        let notify_path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&notify_path).expect("bind NOTIFY_SOCKET");
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let quic = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let websocket = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        // HTTP is on by default on a fixed port (3000) a parallel test may hold.
        let http = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let log = File::create(dir.path().join("server.log")).unwrap();
        let mut cmd = Command::new(&bin);
        cmd.arg("--with-default-root-credentials")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        crate::harness::without_shell_settings(&mut cmd);
        cmd.env("IGGY_TCP_ADDRESS", address.to_string())
            .env("IGGY_QUIC_ADDRESS", quic.to_string())
            .env("IGGY_WEBSOCKET_ENABLED", "true")
            .env("IGGY_WEBSOCKET_ADDRESS", websocket.to_string())
            .env("IGGY_HTTP_ADDRESS", http.to_string())
            .env("IGGY_SYSTEM_PATH", dir.path().join("data"))
            .env("RUST_LOG", "info")
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        if let Some(usec) = watchdog_usec {
            cmd.env("WATCHDOG_USEC", usec);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Self {
            dir,
            address,
            quic,
            websocket,
            socket,
            child: Some(child),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The next notification, or `None` when nothing arrives within `wait`.
    fn next(&self, wait: Duration) -> Option<String> {
        self.socket
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .unwrap();
        let mut buffer = [0u8; 512];
        match self.socket.recv(&mut buffer) {
            Ok(n) => Some(String::from_utf8_lossy(&buffer[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("recv on NOTIFY_SOCKET: {e}"),
        }
    }

    /// Waits for `READY=1`, which must be the first notification.
    fn ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("server exited ({status}) before READY=1:\n{}", self.log());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no READY=1 within {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            if let Some(first) = self.next(left.min(Duration::from_millis(200))) {
                assert_eq!(first, "READY=1", "first notification");
                return;
            }
        }
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server still running {limit:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("----- server.log -----\n{}", self.log());
        }
    }
}

#[test]
fn ready_arrives_only_once_the_tcp_listener_accepts() {
    let mut server = Notified::start(None);
    server.ready();
    // Dialled at once, no retry: READY=1 promises every enabled listener accepts (TCP,
    // WebSocket, and QUIC's UDP socket is bound).
    TcpStream::connect_timeout(&server.address, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("READY=1 arrived but {} refused: {e}", server.address));
    TcpStream::connect_timeout(&server.websocket, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("READY=1 arrived but websocket {} refused: {e}", server.websocket));
    let taken = std::net::UdpSocket::bind(server.quic).map(|_| ()).map_err(|e| e.kind());
    assert_eq!(taken, Err(std::io::ErrorKind::AddrInUse), "READY=1 arrived but quic {} is not bound", server.quic);
    // Without WATCHDOG_USEC there is no watchdog to feed.
    assert_eq!(
        server.next(Duration::from_secs(1)),
        None,
        "a notification without a watchdog"
    );
}

#[test]
fn watchdog_pings_at_half_of_watchdog_usec() {
    // 400 ms: a ping every 200 ms.
    let mut server = Notified::start(Some("400000"));
    server.ready();
    let window = Duration::from_secs(3);
    let start = Instant::now();
    let mut pings = Vec::new();
    while start.elapsed() < window {
        if let Some(state) = server.next(window.saturating_sub(start.elapsed())) {
            assert_eq!(state, "WATCHDOG=1");
            pings.push(Instant::now());
        }
    }
    let mut gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    // About 15 in 3 s; receive-side delays only bunch them, so the count bounds the rate
    // from above and the median gap tells half the interval from the whole of it.
    assert!(pings.len() >= 6, "{} pings in {window:?}", pings.len());
    assert!(
        pings.len() <= 32,
        "{} pings in {window:?}: faster than every 100 ms",
        pings.len()
    );
    let median = gaps[gaps.len() / 2];
    assert!(
        (Duration::from_millis(150)..=Duration::from_millis(300)).contains(&median),
        "median gap {median:?} (expected 200 ms), gaps {gaps:?}"
    );
}

#[test]
fn stopping_is_sent_on_sigterm_before_the_process_exits() {
    let mut server = Notified::start(Some("400000"));
    server.ready();
    // Nothing but watchdog pings while running.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(500) {
        if let Some(state) = server.next(Duration::from_millis(100)) {
            assert_eq!(state, "WATCHDOG=1", "before SIGTERM");
        }
    }
    server.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match server.next(left) {
            Some(state) if state == "STOPPING=1" => break,
            Some(state) => assert_eq!(state, "WATCHDOG=1", "after SIGTERM, before STOPPING=1"),
            None => panic!("no STOPPING=1 within 10 s of SIGTERM"),
        }
    }
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit after SIGTERM: {status}");
    // Whatever it sent after STOPPING=1 (a last watchdog ping during the drain) is no second
    // READY or STOPPING.
    while let Some(state) = server.next(Duration::from_millis(10)) {
        assert_eq!(state, "WATCHDOG=1", "after STOPPING=1");
    }
    let log = server.log();
    assert!(
        log.contains("shutting down: draining") && log.contains("stopped"),
        "{log}"
    );
}
