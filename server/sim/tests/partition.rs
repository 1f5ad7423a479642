//! The real partition state machine under the deterministic simulator, over many seeds.
//!
//! `SIM_SEEDS=N` runs N seeds per group size (default 100: 200 in all), `SIM_SEED=S` replays
//! one seed (for each group size). A failure prints `replicas=R seed=S`.

use iggy_sim::{Figures, PartitionWorkload};
use iggy_vsr::sim::cluster::{Cluster, Summary};

mod support;
use support::{CLIENTS, REQUESTS_PER_CLIENT, seeds, seeds_or};

/// Runs one seed, naming it if a checker fails.
fn run_seed(replica_count: u8, seed: u64, restart_all_at: Option<u64>) -> (Summary, Figures) {
    let (summary, workload) = support::run_seed(
        "partition",
        replica_count,
        seed,
        || PartitionWorkload::new(seed),
        |cluster| match restart_all_at {
            Some(at) => cluster.restart_all_at(at),
            None => cluster,
        },
    );
    (summary, workload.figures())
}

#[derive(Debug, Default)]
struct Totals {
    seeds: u64,
    committed: u64,
    crashes: u64,
    restarts_all: u64,
    checkpoints: u64,
    sends_acknowledged: u64,
    messages_acknowledged: u64,
    messages_committed: u64,
    malformed_refused: u64,
    stores_acknowledged: u64,
    stores_at_key_limit: u64,
    polls: u64,
    messages_polled: u64,
    full_reads: u64,
    retirements_committed: u64,
    retirements_past_end: u64,
    retirements_held_by_later_stores: u64,
    retirements_applied: u64,
    retirements_bounded: u64,
    segments_retired: u64,
    messages_retired: u64,
    stowed_restored: u64,
    stowed_retired: u64,
    journals_cut: u64,
    unaccounted_dropped: u64,
    view_max: u32,
}

impl Totals {
    fn add(&mut self, summary: &Summary, figures: &Figures) {
        self.seeds += 1;
        self.committed += summary.committed;
        self.crashes += summary.crashes;
        self.restarts_all += summary.restarts_all;
        self.checkpoints += summary.checkpoints;
        self.view_max = self.view_max.max(summary.view_max);
        self.sends_acknowledged += figures.sends_acknowledged;
        self.messages_acknowledged += figures.messages_acknowledged;
        self.messages_committed += figures.messages_committed;
        self.malformed_refused += figures.malformed_refused;
        self.stores_acknowledged += figures.stores_acknowledged;
        self.stores_at_key_limit += figures.stores_at_key_limit;
        self.polls += figures.polls;
        self.messages_polled += figures.messages_polled;
        self.full_reads += figures.full_reads;
        self.retirements_committed += figures.retirements_committed;
        self.retirements_past_end += figures.retirements_past_end;
        self.retirements_held_by_later_stores += figures.retirements_held_by_later_stores;
        let machines = &figures.machines;
        self.retirements_applied += machines.retirements;
        self.retirements_bounded += machines.retirements_bounded;
        self.segments_retired += machines.segments_retired;
        self.messages_retired += machines.messages_retired;
        self.stowed_restored += machines.stowed_restored;
        self.stowed_retired += machines.stowed_retired;
        self.journals_cut += machines.journals_cut;
        self.unaccounted_dropped += machines.unaccounted_dropped;
    }
}

fn run(replica_count: u8) {
    let mut totals = Totals::default();
    for seed in seeds(replica_count) {
        let (summary, figures) = run_seed(replica_count, seed, None);
        // Every client finished: its register and all its requests committed.
        assert!(
            summary.committed >= u64::from(CLIENTS) * (REQUESTS_PER_CLIENT + 1),
            "seed {seed}: {summary:?}"
        );
        totals.add(&summary, &figures);
    }
    eprintln!("replicas={replica_count}: {totals:?}");
    assert!(totals.sends_acknowledged > 0 && totals.polls > 0);
    assert!(
        totals.messages_committed >= totals.messages_acknowledged,
        "every acknowledged message is committed"
    );
    if totals.seeds >= 10 {
        assert!(totals.crashes > 0, "crashes are exercised");
        assert!(
            totals.restarts_all > 0,
            "restarts of every replica are exercised"
        );
        assert!(totals.checkpoints > 0, "checkpoints are exercised");
        assert!(totals.malformed_refused > 0 && totals.stores_acknowledged > 0);
        assert!(
            totals.stores_at_key_limit > 0,
            "stores of a new key at the partition's limit are refused"
        );
        assert!(
            totals.stowed_restored > 0,
            "restarts read stowed sends back from the log"
        );
        assert!(
            totals.retirements_applied > 0 && totals.messages_retired > 0,
            "retirements delete segments"
        );
        assert!(
            totals.retirements_past_end > 0,
            "retirements past the committed end are exercised"
        );
        assert!(
            totals.retirements_held_by_later_stores > 0,
            "retirements planned before offset stores they did not see are exercised"
        );
        assert!(
            totals.stowed_retired > 0,
            "restarts find journaled sends whose segments a retirement deleted"
        );
    }
}

#[test]
fn three_replicas_run_the_real_partition_machine() {
    run(3);
}

#[test]
fn five_replicas_run_the_real_partition_machine() {
    run(5);
}

/// Every replica crashes at once, each losing its unsynced journal and log writes: no
/// acknowledged send is lost, and the group goes on appending at dense offsets.
#[test]
fn every_replica_restarting_at_once_loses_no_acknowledged_send() {
    for replica_count in [3, 5] {
        for seed in 0..6u64 {
            let seed = 70_000 + seed * 10 + u64::from(replica_count);
            let at = 80 + (seed * 37) % 300;
            let (summary, figures) = run_seed(replica_count, seed, Some(at));
            assert_eq!(summary.restarts_all, 1, "seed {seed}: {summary:?}");
            assert!(figures.sends_acknowledged > 0, "seed {seed}: {figures:?}");
        }
    }
}

#[test]
fn a_seed_replays_exactly() {
    let first = run_seed(3, 11, None);
    let second = run_seed(3, 11, None);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}

/// With state transfer past a short journal and a long load, a replica left behind copies a
/// peer's checkpoint while the group goes on (the copy takes virtual time): now and then the
/// peer retires past the offered state's end before the copy completes, the machine refuses
/// the transfer (`Overtaken` in the server) and a newer checkpoint is copied. The checkers
/// (committed prefixes agree, client histories) hold throughout, and every client finishes.
#[test]
fn a_transfer_overtaken_during_its_copy_is_refused_and_a_newer_one_taken() {
    const REQUESTS: u64 = 80;
    let (mut seeds, mut refused, mut transfers) = (0, 0, 0);
    for seed in seeds_or(3, 40) {
        seeds += 1;
        let (summary, _) = support::naming_seed("partition", 3, seed, || {
            Cluster::with_workload(
                seed,
                3,
                CLIENTS,
                REQUESTS,
                PartitionWorkload::new(seed).with_retire_percent(30),
            )
            .crash_while_writing(support::CRASH_WHILE_WRITING_PERCENT)
            .with_state_transfer_past(1)
            .run_workload(support::FAULT_TICKS, support::TICKS_MAX)
        });
        assert!(
            summary.committed >= u64::from(CLIENTS) * (REQUESTS + 1),
            "seed {seed}: {summary:?}"
        );
        refused += summary.transfers_refused;
        transfers += summary.state_transfers;
    }
    eprintln!("{seeds} seeds: {transfers} state transfers installed, {refused} refused");
    if seeds >= 20 {
        assert!(
            transfers > 0 && refused > 0,
            "copies overtaken by the group's retirements are exercised"
        );
    }
}
