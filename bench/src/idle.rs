//! The idle scenario: a node or a cluster holding many partitions while no client sends or
//! polls. What each node's CPU spends then is its consensus groups' own traffic (heartbeats,
//! their answers, timers): a cost a deployment pays all day, whatever its load.

use crate::args::Params;
use crate::scenario;
use crate::server::ServerProc;
use iggy::prelude::Client;
use std::time::{Duration, Instant};

/// Partitions one topic gets at most; the rest go to further topics of the same stream.
const PARTITIONS_PER_TOPIC: u32 = 600;

#[derive(Debug, Clone, serde::Serialize)]
pub struct IdleReport {
    pub partitions: u32,
    pub topics: u32,
    pub window_seconds: f64,
    /// Per node (by replica id): user+system CPU seconds over the window.
    pub node_cpu_seconds: Vec<f64>,
}

impl IdleReport {
    pub fn print(&self) {
        println!(
            "  idle: {} partitions in {} topics, CPU over {:.1} s",
            self.partitions, self.topics, self.window_seconds
        );
        for (node, cpu) in self.node_cpu_seconds.iter().enumerate() {
            println!(
                "    node {node}: {cpu:.2} s ({:.1} % of a core)",
                100.0 * cpu / self.window_seconds
            );
        }
    }
}

/// Creates the partitions through `address`, waits `settle` (every group opened and its
/// replicas in touch), then reads each node's CPU before and after `window`.
pub async fn measure(
    address: &str,
    p: &Params,
    procs: &[ServerProc],
    settle: Duration,
    window: Duration,
) -> Result<IdleReport, String> {
    let partitions = p.effective_partitions();
    let topics = partitions.div_ceil(PARTITIONS_PER_TOPIC);
    let admin = scenario::connect(address, p, false).await?;
    scenario::create_idle_partitions(&admin, p, topics, partitions).await?;
    // Measured with no client connected: the SDK's own pings would count.
    let _ = admin.disconnect().await;
    drop(admin);
    tokio::time::sleep(settle).await;
    let cpu = || -> Result<Vec<f64>, String> {
        procs
            .iter()
            .map(|proc| {
                proc.cpu_seconds()
                    .ok_or("a node's /proc stat is unreadable")
            })
            .collect::<Result<_, _>>()
            .map_err(String::from)
    };
    let before = cpu()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = cpu()?;
    let window_seconds = started.elapsed().as_secs_f64();
    Ok(IdleReport {
        partitions,
        topics,
        window_seconds,
        node_cpu_seconds: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
    })
}
