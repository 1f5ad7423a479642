//! What the simulator's seed drivers share: the world's size and fault settings, the seeds to
//! run, and running one seed so that a failing checker names it.

use iggy_vsr::sim::cluster::{Cluster, Summary};
use iggy_vsr::sim::machine::Workload;

pub const CLIENTS: u8 = 3;
pub const REQUESTS_PER_CLIENT: u64 = 20;
pub const FAULT_TICKS: u64 = 1_500;
pub const TICKS_MAX: u64 = 30_000;
/// Per tick, the chance a replica with journal writes in flight crashes: crashes meet the
/// machines' unsynced writes, not only synced state.
pub const CRASH_WHILE_WRITING_PERCENT: u64 = 3;

pub fn env(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
}

/// The seeds to run for `replica_count`: `SIM_SEED` alone, or `SIM_SEEDS` (default 100) of them.
pub fn seeds(replica_count: u8) -> Vec<u64> {
    seeds_or(replica_count, 100)
}

/// [`seeds`], `default` of them without `SIM_SEEDS`.
pub fn seeds_or(replica_count: u8, default: u64) -> Vec<u64> {
    match env("SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..env("SIM_SEEDS").unwrap_or(default))
            .map(|seed| seed * 1_000 + u64::from(replica_count))
            .collect(),
    }
}

/// Runs seed `seed` of `workload` on `replica_count` replicas (the cluster adjusted by
/// `world`), printing how to replay it if a checker fails.
pub fn run_seed<W: Workload>(
    what: &str,
    replica_count: u8,
    seed: u64,
    workload: impl FnOnce() -> W + std::panic::UnwindSafe,
    world: impl FnOnce(Cluster<W>) -> Cluster<W> + std::panic::UnwindSafe,
) -> (Summary, W) {
    naming_seed(what, replica_count, seed, || {
        let cluster = Cluster::with_workload(
            seed,
            replica_count,
            CLIENTS,
            REQUESTS_PER_CLIENT,
            workload(),
        )
        .crash_while_writing(CRASH_WHILE_WRITING_PERCENT);
        world(cluster).run_workload(FAULT_TICKS, TICKS_MAX)
    })
}

/// Runs `run`, the simulation of seed `seed` of `what` on `replica_count` replicas, printing
/// how to replay it if a checker fails.
pub fn naming_seed<T>(
    what: &str,
    replica_count: u8,
    seed: u64,
    run: impl FnOnce() -> T + std::panic::UnwindSafe,
) -> T {
    match std::panic::catch_unwind(run) {
        Ok(outcome) => outcome,
        Err(panic) => {
            eprintln!(
                "{what} simulation failed: replicas={replica_count} seed={seed} \
                 (replay: SIM_SEED={seed})"
            );
            std::panic::resume_unwind(panic);
        }
    }
}
