//! A logging TCP proxy between the SDK and the server, for diagnosing protocol hangs: every
//! frame's header is summarized (request: op, code, session, request number; reply: request
//! number, op, status, commit). Connect the SDK to `WireTap::address()`.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone)]
pub struct WireTap {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
    fault: Arc<Mutex<Fault>>,
}

/// Lose the reply to the next request with a given operation: the request reaches the server,
/// its reply is swallowed and the connection is closed, as when a link dies after the send.
#[derive(Default)]
struct Fault {
    armed_operation: Option<u8>,
    /// (connection, request number) whose reply is to be lost.
    doomed: Option<(u64, u64)>,
    /// Forward client bytes to the server in writes of at most this many bytes.
    fragment: Option<usize>,
    /// Hold client frames back and forward this many at once, in one write.
    coalesce: Option<usize>,
    /// New connections wait (accepted, not yet dialed upstream) while this is set.
    hold: bool,
    /// Reply bodies wait at the server (only their headers are read) while this is set.
    stall_replies: bool,
    /// The receive buffer of upstream sockets dialed from now on, so a stalled reply backs up
    /// into the server rather than into this proxy's kernel buffers.
    upstream_receive_buffer: Option<u32>,
    /// Rewrites the body of the next request of this operation, once (a client that builds
    /// what the SDK never would).
    rewrite: Option<(u8, Rewrite)>,
}

type Rewrite = Box<dyn FnOnce(&mut Vec<u8>) + Send>;

fn u32_at(h: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(h[off..off + 4].try_into().unwrap())
}

fn u64_at(h: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(h[off..off + 8].try_into().unwrap())
}

fn summarize(to_server: bool, h: &[u8], started: Instant) -> String {
    let ms = started.elapsed().as_millis();
    let size = u32_at(h, 48);
    let command = h[60];
    if to_server {
        format!(
            "{ms:>6}ms C->S cmd={command} size={size} request={} op={} session={} code={} incarnation={} min_meta_op={}",
            u64_at(h, 168),
            h[176],
            u64_at(h, 184),
            u32_at(h, 196),
            u64_at(h, 200),
            u64_at(h, 216),
        )
    } else if command == 13 {
        format!("{ms:>6}ms S->C EVICTION reason={}", h[255])
    } else {
        format!(
            "{ms:>6}ms S->C cmd={command} size={size} request={} op={} status={} commit={} committed_marker={}",
            u64_at(h, 200),
            h[208],
            u32_at(h, 216),
            u64_at(h, 184),
            h[220],
        )
    }
}

#[allow(clippy::too_many_arguments)]
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    to_server: bool,
    log: Arc<Mutex<Vec<String>>>,
    fault: Arc<Mutex<Fault>>,
    connection: u64,
    started: Instant,
) {
    let mut header = [0u8; 256];
    let mut held: Vec<u8> = Vec::new();
    let mut held_frames = 0usize;
    loop {
        if from.read_exact(&mut header).await.is_err() {
            break;
        }
        // Checked once a header is in: this pump is usually waiting for one when a stall is set.
        while !to_server && fault.lock().unwrap().stall_replies {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let size = u32_at(&header, 48) as usize;
        log.lock()
            .unwrap()
            .push(summarize(to_server, &header, started));
        let mut body = vec![0u8; size.saturating_sub(256)];
        if from.read_exact(&mut body).await.is_err() {
            break;
        }
        {
            let mut fault = fault.lock().unwrap();
            if to_server
                && header[60] == 5
                && fault.rewrite.as_ref().map(|(operation, _)| *operation) == Some(header[176])
            {
                let (_, rewrite) = fault.rewrite.take().expect("armed");
                rewrite(&mut body);
                header[48..52].copy_from_slice(&(256 + body.len() as u32).to_le_bytes());
            }
            if to_server && header[60] == 5 && fault.armed_operation == Some(header[176]) {
                fault.armed_operation = None;
                fault.doomed = Some((connection, u64_at(&header, 168)));
            } else if !to_server
                && header[60] == 8
                && fault.doomed == Some((connection, u64_at(&header, 200)))
            {
                fault.doomed = None;
                log.lock().unwrap().push(format!(
                    "{:>6}ms FAULT: reply to request {} lost, connection closed",
                    started.elapsed().as_millis(),
                    u64_at(&header, 200)
                ));
                break;
            }
        }
        let (fragment, coalesce) = {
            let fault = fault.lock().unwrap();
            (
                fault.fragment.filter(|_| to_server),
                fault.coalesce.filter(|_| to_server),
            )
        };
        let mut frame = Vec::with_capacity(size.max(256));
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&body);
        if let Some(n) = coalesce {
            held.extend_from_slice(&frame);
            held_frames += 1;
            if held_frames < n {
                // Flush whatever is held if the client goes quiet (it may wait for a reply).
                // `peek` waits for real bytes and consumes none, so a timeout loses nothing.
                let mut probe = [0u8; 1];
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(50), from.peek(&mut probe)).await
                    && n > 0
                {
                    continue;
                }
            }
            frame = std::mem::take(&mut held);
            held_frames = 0;
        }
        let sent = match fragment {
            Some(n) => {
                let mut ok = true;
                for chunk in frame.chunks(n.max(1)) {
                    if to.write_all(chunk).await.is_err() || to.flush().await.is_err() {
                        ok = false;
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                ok
            }
            None => to.write_all(&frame).await.is_ok(),
        };
        if !sent {
            break;
        }
    }
    let _ = to.shutdown().await;
    log.lock().unwrap().push(format!(
        "{:>6}ms {} closed",
        started.elapsed().as_millis(),
        if to_server {
            "client side"
        } else {
            "server side"
        }
    ));
}

/// A connection to `127.0.0.1:port`, with a receive buffer of `receive_buffer` bytes if given.
async fn dial(port: u16, receive_buffer: Option<u32>) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    if let Some(bytes) = receive_buffer {
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.connect(([127, 0, 0, 1], port).into()).await
}

impl WireTap {
    /// Listens on a free port and forwards each connection to `127.0.0.1:upstream_port`,
    /// redialing for up to 10 s (the server may be restarting).
    pub async fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind tap");
        let port = listener.local_addr().unwrap().port();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let fault: Arc<Mutex<Fault>> = Arc::default();
        let started = Instant::now();
        let (tap_log, tap_fault) = (log.clone(), fault.clone());
        tokio::spawn(async move {
            for connection in 0u64.. {
                let Ok((client, _)) = listener.accept().await else {
                    break;
                };
                let (log, fault) = (tap_log.clone(), tap_fault.clone());
                tokio::spawn(async move {
                    while fault.lock().unwrap().hold {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let receive_buffer = fault.lock().unwrap().upstream_receive_buffer;
                    let server = loop {
                        match dial(upstream_port, receive_buffer).await {
                            Ok(s) => break s,
                            Err(_) if Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(20)).await
                            }
                            Err(_) => return,
                        }
                    };
                    let _ = server.set_nodelay(true);
                    log.lock()
                        .unwrap()
                        .push(format!("{:>6}ms connection", started.elapsed().as_millis()));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(
                        pump(
                            cr,
                            sw,
                            true,
                            log.clone(),
                            fault.clone(),
                            connection,
                            started
                        ),
                        pump(
                            sr,
                            cw,
                            false,
                            log.clone(),
                            fault.clone(),
                            connection,
                            started
                        )
                    );
                });
            }
        });
        Self { port, log, fault }
    }

    /// The next request whose header operation is `operation` reaches the server, but its
    /// reply is lost and the connection closed.
    pub fn lose_next_reply_to(&self, operation: u8) {
        self.fault.lock().unwrap().armed_operation = Some(operation);
    }

    /// Split every client frame into writes of at most `bytes` bytes.
    /// Passes the body of the next request of `operation` through `rewrite` (its size is set
    /// again from the result).
    pub fn rewrite_next_request(
        &self,
        operation: u8,
        rewrite: impl FnOnce(&mut Vec<u8>) + Send + 'static,
    ) {
        self.fault.lock().unwrap().rewrite = Some((operation, Box::new(rewrite)));
    }

    pub fn fragment_client_frames(&self, bytes: usize) {
        self.fault.lock().unwrap().fragment = Some(bytes);
    }

    /// Forward client frames `frames` at a time in one write (or when the client pauses).
    pub fn coalesce_client_frames(&self, frames: usize) {
        self.fault.lock().unwrap().coalesce = Some(frames);
    }

    /// New connections wait until `release`.
    pub fn hold_new_connections(&self) {
        self.fault.lock().unwrap().hold = true;
    }

    pub fn release_new_connections(&self) {
        self.fault.lock().unwrap().hold = false;
    }

    /// Upstream sockets dialed from now on receive into a buffer of `bytes`.
    pub fn shrink_upstream_receive_buffers(&self, bytes: u32) {
        self.fault.lock().unwrap().upstream_receive_buffer = Some(bytes);
    }

    /// Stops reading replies from the server after their header (a client that stops reading
    /// its socket), until `release_replies`.
    pub fn stall_replies(&self) {
        self.fault.lock().unwrap().stall_replies = true;
    }

    pub fn release_replies(&self) {
        self.fault.lock().unwrap().stall_replies = false;
    }

    /// Waits until the armed fault has fired (a reply was lost).
    pub async fn wait_for_fault(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.lines().iter().any(|l| l.contains("FAULT")) {
            assert!(
                Instant::now() < deadline,
                "the fault did not fire:\n{}",
                self.tail(20)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `before` lines before the first closed connection and `after` lines from it on.
    pub fn around_first_close(&self, before: usize, after: usize) -> String {
        let log = self.log.lock().unwrap();
        let at = log
            .iter()
            .position(|l| l.ends_with("closed"))
            .unwrap_or(log.len());
        let from = at.saturating_sub(before);
        let to = (at + after).min(log.len());
        log[from..to].join("\n")
    }

    /// The last `n` summary lines.
    pub fn tail(&self, n: usize) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(n)..].join("\n")
    }
}
