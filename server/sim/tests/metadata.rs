//! The real metadata state machine under the deterministic simulator, over many seeds.
//!
//! `SIM_SEEDS=N` runs N seeds per group size (default 100: 200 in all), `SIM_SEED=S` replays
//! one seed (for each group size). A failure prints `replicas=R seed=S`.
//!
//! Half the seeds (those of an even thousand) checkpoint past a replica that stays behind, as
//! the server's metadata group does, and the laggard takes a peer's snapshot whole (state
//! transfer); the others wait for every replica, and the checker proves no replica needs a
//! transfer there. On half the seeds, some ops' partition effects run ticks after their apply.

use iggy_sim::{MetadataRunFigures, MetadataWorkload};
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::cluster::Summary;

mod support;
use support::{CLIENTS, REQUESTS_PER_CLIENT, seeds};

/// Runs one seed, naming it if a checker fails.
fn run_seed(replica_count: u8, seed: u64) -> (Summary, MetadataRunFigures) {
    let (summary, workload) = support::run_seed(
        "metadata",
        replica_count,
        seed,
        || MetadataWorkload::new(seed),
        |cluster| {
            let cluster = match (seed / 1_000).is_multiple_of(2) {
                true => cluster.with_state_transfer(),
                false => cluster,
            };
            // On half the seeds (a stream of their own), a quarter of the ops' partition opens
            // and deletes run ticks after their apply, as the server's effects task runs them.
            match Rng::new(seed ^ 0x5105_e11e).chance(50) {
                true => cluster.with_slow_effects(25, 90),
                false => cluster,
            }
        },
    );
    (summary, workload.figures())
}

#[derive(Debug, Default)]
struct Totals {
    seeds: u64,
    committed: u64,
    slow_effects: u64,
    crashes: u64,
    restarts_all: u64,
    checkpoints: u64,
    retirements: u64,
    creates_acknowledged: u64,
    ids_reused: u64,
    deletes_acknowledged: u64,
    refusals_acknowledged: u64,
    snapshots_compared: u64,
    references_compared: u64,
    snapshots_restored: u64,
    checkpoints_past_laggards: u64,
    state_transfers: u64,
    views_given_up: u64,
    views_timed_out_for_transfer: u64,
    snapshots_transferred: u64,
    transfer_discards: u64,
    partitions_opened: u64,
    partitions_deleted: u64,
}

impl Totals {
    fn add(&mut self, summary: &Summary, figures: &MetadataRunFigures) {
        self.seeds += 1;
        self.committed += summary.committed;
        self.slow_effects += summary.slow_effects;
        self.crashes += summary.crashes;
        self.restarts_all += summary.restarts_all;
        self.checkpoints += summary.checkpoints;
        self.retirements += summary.retirements;
        self.creates_acknowledged += figures.creates_acknowledged;
        self.ids_reused += figures.ids_reused;
        self.deletes_acknowledged += figures.deletes_acknowledged;
        self.refusals_acknowledged += figures.refusals_acknowledged;
        self.snapshots_compared += figures.snapshots_compared;
        self.references_compared += figures.references_compared;
        self.snapshots_restored += figures.machines.snapshots_restored;
        self.checkpoints_past_laggards += summary.checkpoints_past_laggards;
        self.state_transfers += summary.state_transfers;
        self.views_given_up += summary.views_given_up;
        self.views_timed_out_for_transfer += summary.views_timed_out_for_transfer;
        self.snapshots_transferred += figures.machines.snapshots_transferred;
        self.transfer_discards += figures.machines.transfer_discards;
        self.partitions_opened += figures.machines.partitions_opened;
        self.partitions_deleted += figures.machines.partitions_deleted;
    }
}

fn run(replica_count: u8) {
    let mut totals = Totals::default();
    for seed in seeds(replica_count) {
        let (summary, figures) = run_seed(replica_count, seed);
        assert!(
            summary.committed >= u64::from(CLIENTS) * (REQUESTS_PER_CLIENT + 1),
            "seed {seed}: {summary:?}"
        );
        totals.add(&summary, &figures);
    }
    eprintln!("replicas={replica_count}: {totals:?}");
    assert!(totals.creates_acknowledged > 0 && totals.snapshots_compared > 0);
    if totals.seeds >= 10 {
        assert!(totals.crashes > 0 && totals.restarts_all > 0 && totals.checkpoints > 0);
        assert!(
            totals.ids_reused > 0,
            "ids freed by deletes are handed out again"
        );
        assert!(totals.deletes_acknowledged > 0 && totals.refusals_acknowledged > 0);
        assert!(
            totals.partitions_deleted > 0,
            "deletes run their partition effects"
        );
        assert!(
            totals.snapshots_restored > 0,
            "restarts restore checkpoint snapshots"
        );
        assert!(totals.retirements > 0, "logouts free client-table slots");
        assert!(
            totals.checkpoints_past_laggards > 0 && totals.state_transfers > 0,
            "replicas left behind catch up by state transfer"
        );
        assert_eq!(totals.snapshots_transferred, totals.state_transfers);
        assert!(
            totals.slow_effects > 0,
            "ops' partition effects run ticks after their apply"
        );
    }
}

#[test]
fn three_replicas_run_the_real_metadata_machine() {
    run(3);
}

#[test]
fn five_replicas_run_the_real_metadata_machine() {
    run(5);
}

#[test]
fn a_metadata_seed_replays_exactly() {
    let first = run_seed(3, 11);
    let second = run_seed(3, 11);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}
