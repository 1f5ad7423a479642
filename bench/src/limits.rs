//! The machine's limits for the scenario's volume, measured in the same run: sequential write
//! bandwidth of the data directory's filesystem (buffered, and fdatasync per batch) and
//! loopback TCP bandwidth between plain tokio sockets (streaming, and one request per batch
//! answered by a 16-byte reply, which is the ceiling of a synchronous send).

use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// No single trial runs longer than this; its rate is volume written / time taken.
const BUDGET: Duration = Duration::from_millis(1500);
/// Trials per measurement; the median is reported (the shared VM's disk and CPU are noisy).
const TRIALS: usize = 3;

fn median(mut trials: Vec<Measure>) -> Measure {
    trials.sort_by(|a, b| a.mb_per_s.total_cmp(&b.mb_per_s));
    let mut m = trials[trials.len() / 2].clone();
    m.trials_mb_per_s = trials.iter().map(|t| t.mb_per_s).collect();
    m
}
/// No single measurement writes more than this.
const MAX_VOLUME: u64 = 2 << 30;

#[derive(Debug, Clone, Serialize)]
pub struct Measure {
    pub mb_per_s: f64,
    pub bytes: u64,
    pub batches: u64,
    pub seconds: f64,
    /// Whether the time budget cut the volume short.
    pub truncated: bool,
    /// Every trial's rate, ascending; the fields above are the median trial's.
    pub trials_mb_per_s: Vec<f64>,
}

impl Measure {
    fn new(bytes: u64, batches: u64, elapsed: Duration, truncated: bool) -> Measure {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Measure {
            mb_per_s: bytes as f64 / secs / 1e6,
            bytes,
            batches,
            seconds: secs,
            truncated,
            trials_mb_per_s: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    pub volume_bytes: u64,
    pub batch_bytes: u64,
    pub data_dir: String,
    pub disk_buffered: Measure,
    pub disk_fsync_per_batch: Measure,
    pub connections: u32,
    pub nodelay: bool,
    pub tcp_stream: Measure,
    pub tcp_request_reply: Measure,
}

impl Limits {
    pub fn print(&self) {
        let t = |m: &Measure| if m.truncated { " (time-capped)" } else { "" };
        println!(
            "  machine limits for {:.1} MB in {} B batches (data dir {}):",
            self.volume_bytes as f64 / 1e6,
            self.batch_bytes,
            self.data_dir
        );
        println!(
            "    disk sequential write, buffered        {:>9.1} MB/s{}",
            self.disk_buffered.mb_per_s,
            t(&self.disk_buffered)
        );
        println!(
            "    disk sequential write, fsync per batch {:>9.1} MB/s{}",
            self.disk_fsync_per_batch.mb_per_s,
            t(&self.disk_fsync_per_batch)
        );
        println!(
            "    loopback TCP stream, {} conn{}           {:>9.1} MB/s{}",
            self.connections,
            if self.connections == 1 { " " } else { "s" },
            self.tcp_stream.mb_per_s,
            t(&self.tcp_stream)
        );
        println!(
            "    loopback TCP batch + reply, {} conn{}    {:>9.1} MB/s{}",
            self.connections,
            if self.connections == 1 { " " } else { "s" },
            self.tcp_request_reply.mb_per_s,
            t(&self.tcp_request_reply)
        );
    }
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn disk(dir: &Path, volume: u64, batch: u64, fsync: bool) -> Result<Measure, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join(format!(
        "bench-limit-{}-{}.tmp",
        std::process::id(),
        if fsync { "fsync" } else { "buffered" }
    ));
    let buf = pattern(batch as usize);
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = Instant::now();
    let (mut written, mut batches, mut truncated) = (0u64, 0u64, false);
    while written < volume {
        f.write_all(&buf).map_err(|e| format!("write: {e}"))?;
        if fsync {
            f.sync_data().map_err(|e| format!("fdatasync: {e}"))?;
        }
        written += buf.len() as u64;
        batches += 1;
        if start.elapsed() > BUDGET {
            truncated = written < volume;
            break;
        }
    }
    let elapsed = start.elapsed();
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(Measure::new(written, batches, elapsed, truncated))
}

async fn tcp(
    connections: u32,
    volume: u64,
    batch: u64,
    nodelay: bool,
    request_reply: bool,
) -> Result<Measure, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let per_conn = (volume / connections as u64).max(batch);
    let batch = batch as usize;
    // Receivers: read everything (stream) or each batch then reply 16 bytes.
    let accept = tokio::spawn(async move {
        let mut readers = Vec::new();
        for _ in 0..connections {
            let (mut s, _) = listener.accept().await?;
            s.set_nodelay(nodelay)?;
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; batch.clamp(64 << 10, 1 << 20)];
                if request_reply {
                    let mut body = vec![0u8; batch];
                    loop {
                        let mut len = [0u8; 4];
                        if s.read_exact(&mut len).await.is_err() {
                            return Ok::<(), std::io::Error>(());
                        }
                        s.read_exact(&mut body[..u32::from_le_bytes(len) as usize])
                            .await?;
                        s.write_all(&[0u8; 16]).await?;
                    }
                } else {
                    while s.read(&mut buf).await? > 0 {}
                    Ok(())
                }
            }));
        }
        for r in readers {
            r.await.map_err(std::io::Error::other)??;
        }
        Ok::<(), std::io::Error>(())
    });
    let data = std::sync::Arc::new(pattern(batch));
    let start = Instant::now();
    let mut senders = Vec::new();
    for _ in 0..connections {
        let data = data.clone();
        senders.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await?;
            s.set_nodelay(nodelay)?;
            let (mut sent, mut batches, mut truncated) = (0u64, 0u64, false);
            let mut reply = [0u8; 16];
            let mut frame = Vec::with_capacity(batch + 4);
            frame.extend_from_slice(&(batch as u32).to_le_bytes());
            frame.extend_from_slice(&data);
            while sent < per_conn {
                if request_reply {
                    s.write_all(&frame).await?;
                    s.read_exact(&mut reply).await?;
                } else {
                    s.write_all(&data).await?;
                }
                sent += batch as u64;
                batches += 1;
                if start.elapsed() > BUDGET {
                    truncated = sent < per_conn;
                    break;
                }
            }
            s.shutdown().await?;
            Ok::<_, std::io::Error>((sent, batches, truncated))
        }));
    }
    let (mut bytes, mut batches, mut truncated) = (0, 0, false);
    for s in senders {
        let (b, n, t) = s
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("loopback sender: {e}"))?;
        bytes += b;
        batches += n;
        truncated |= t;
    }
    accept
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("loopback receiver: {e}"))?;
    Ok(Measure::new(bytes, batches, start.elapsed(), truncated))
}

pub async fn measure(
    data_dir: &Path,
    volume: u64,
    batch: u64,
    connections: u32,
    nodelay: bool,
) -> Result<Limits, String> {
    let volume = volume.clamp(batch.max(1), MAX_VOLUME);
    let batch = batch.max(1);
    let dir = data_dir.to_path_buf();
    let (buffered, fsynced) = tokio::task::spawn_blocking(move || {
        let (mut b, mut f) = (Vec::new(), Vec::new());
        for _ in 0..TRIALS {
            b.push(disk(&dir, volume, batch, false)?);
            f.push(disk(&dir, volume, batch, true)?);
        }
        Ok::<_, String>((median(b), median(f)))
    })
    .await
    .map_err(|e| e.to_string())??;
    let (mut s, mut r) = (Vec::new(), Vec::new());
    for _ in 0..TRIALS {
        s.push(tcp(connections.max(1), volume, batch, nodelay, false).await?);
        r.push(tcp(connections.max(1), volume, batch, nodelay, true).await?);
    }
    let (stream, rr) = (median(s), median(r));
    Ok(Limits {
        volume_bytes: volume,
        batch_bytes: batch,
        data_dir: data_dir.display().to_string(),
        disk_buffered: buffered,
        disk_fsync_per_batch: fsynced,
        connections: connections.max(1),
        nodelay,
        tcp_stream: stream,
        tcp_request_reply: rr,
    })
}
