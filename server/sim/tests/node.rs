//! Nodes hosting the metadata group and the partition groups it creates, under one fault plan
//! per node, over many seeds.
//!
//! `SIM_SEEDS=N` runs N seeds per node count (default 30: 60 in all), `SIM_SEED=S` replays one
//! seed (for each node count). A failure prints `replicas=R seed=S`.

use iggy_sim::{NodeFigures, NodeSettings, NodeWorld};

// Shared with the other seed drivers, which use the rest of it.
#[allow(dead_code)]
mod support;
use support::{FAULT_TICKS, TICKS_MAX, seeds_or};

const SETTINGS: NodeSettings = NodeSettings {
    metadata_clients: 3,
    metadata_requests: 30,
    partition_clients: 1,
    partition_requests: 8,
    partition_requests_past_laggards: 20,
    fault_ticks: FAULT_TICKS,
    ticks_max: TICKS_MAX,
};

/// Runs one seed, naming it if a checker fails.
fn run_seed(replica_count: u8, seed: u64) -> NodeFigures {
    support::naming_seed("node", replica_count, seed, || {
        NodeWorld::new(seed, replica_count, SETTINGS).run()
    })
}

#[derive(Debug, Default)]
struct Totals {
    seeds: u64,
    metadata_ops: u64,
    partition_ops: u64,
    sends_acknowledged: u64,
    messages_acknowledged: u64,
    incarnations: u64,
    incarnations_deleted: u64,
    incarnations_reusing_ids: u64,
    ids_reused: u64,
    replicas_formatted: u64,
    replicas_reopened: u64,
    replicas_discarded: u64,
    node_crashes: u64,
    restarts_all: u64,
    cuts: u64,
    state_transfers: u64,
    metadata_slow_effects: u64,
    long_outages: u64,
    partition_checkpoints_past_laggards: u64,
    partition_state_transfers: u64,
    partition_transfer_log_restarts: u64,
    partition_transfer_batches_copied: u64,
    partition_transfers_refused: u64,
    partition_views_given_up: u64,
    partition_fetches_timed_out_on_retired: u64,
    partition_views_timed_out_for_transfer: u64,
    partition_retirements: u64,
    partition_groups_compared: u64,
    consumer_group_deletions: u64,
    offset_stores_acknowledged: u64,
    offset_stores_refused: u64,
    offset_stores_superseded: u64,
    group_offset_deletions: u64,
    offset_reads: u64,
    inherited_offsets_withheld: u64,
    frames_of_other_incarnations_refused: u64,
    /// Seeds on which a frame of one incarnation reached a node running another.
    seeds_crossing_incarnations: u64,
    acks_of_other_incarnations_passed: u64,
    frames_of_no_running_group: u64,
}

impl Totals {
    fn add(&mut self, figures: &NodeFigures) {
        self.seeds += 1;
        self.metadata_ops += figures.metadata_ops;
        self.partition_ops += figures.partition_ops;
        self.sends_acknowledged += figures.sends_acknowledged;
        self.messages_acknowledged += figures.messages_acknowledged;
        self.incarnations += figures.incarnations;
        self.incarnations_deleted += figures.incarnations_deleted;
        self.incarnations_reusing_ids += figures.incarnations_reusing_ids;
        self.ids_reused += figures.ids_reused;
        self.replicas_formatted += figures.replicas_formatted;
        self.replicas_reopened += figures.replicas_reopened;
        self.replicas_discarded += figures.replicas_discarded;
        self.node_crashes += figures.node_crashes;
        self.restarts_all += figures.restarts_all;
        self.cuts += figures.cuts;
        self.state_transfers += figures.state_transfers;
        self.metadata_slow_effects += figures.metadata_slow_effects;
        self.long_outages += figures.long_outages;
        self.partition_checkpoints_past_laggards += figures.partition_checkpoints_past_laggards;
        self.partition_state_transfers += figures.partition_state_transfers;
        self.partition_transfer_log_restarts += figures.partition_transfer_log_restarts;
        self.partition_transfer_batches_copied += figures.partition_transfer_batches_copied;
        self.partition_transfers_refused += figures.partition_transfers_refused;
        self.partition_views_given_up += figures.partition_views_given_up;
        self.partition_views_timed_out_for_transfer +=
            figures.partition_views_timed_out_for_transfer;
        self.partition_fetches_timed_out_on_retired +=
            figures.partition_fetches_timed_out_on_retired;
        self.partition_retirements += figures.partition_retirements;
        self.partition_groups_compared += figures.partition_groups_compared;
        self.consumer_group_deletions += figures.consumer_group_deletions;
        self.offset_stores_acknowledged += figures.offset_stores_acknowledged;
        self.offset_stores_refused += figures.offset_stores_refused;
        self.offset_stores_superseded += figures.offset_stores_superseded;
        self.group_offset_deletions += figures.group_offset_deletions;
        self.offset_reads += figures.offset_reads;
        self.inherited_offsets_withheld += figures.inherited_offsets_withheld;
        self.frames_of_other_incarnations_refused += figures.frames_of_other_incarnations_refused;
        self.seeds_crossing_incarnations += u64::from(
            figures.frames_of_other_incarnations_refused
                + figures.acks_of_other_incarnations_passed
                > 0,
        );
        self.acks_of_other_incarnations_passed += figures.acks_of_other_incarnations_passed;
        self.frames_of_no_running_group += figures.frames_of_no_running_group;
    }
}

fn run(replica_count: u8) {
    let mut totals = Totals::default();
    for seed in seeds_or(replica_count, 30) {
        totals.add(&run_seed(replica_count, seed));
    }
    eprintln!("replicas={replica_count}: {totals:?}");
    assert!(totals.incarnations > 0 && totals.sends_acknowledged > 0);
    if totals.seeds >= 20 {
        assert!(totals.node_crashes > 0 && totals.restarts_all > 0);
        assert!(
            totals.incarnations_deleted > 0 && totals.incarnations_reusing_ids > 0,
            "partitions are deleted and their ids reused"
        );
        assert!(totals.replicas_reopened > 0 && totals.replicas_discarded > 0);
        assert!(
            totals.long_outages > 0
                && totals.partition_checkpoints_past_laggards > 0
                && totals.partition_state_transfers > 0
                && totals.partition_transfer_batches_copied > 0,
            "partition replicas left behind catch up by state transfer, copying a peer's log"
        );
        assert!(totals.partition_groups_compared > 0);
        assert!(
            totals.metadata_slow_effects > 0,
            "metadata ops' partition opens and deletes run ticks after their apply"
        );
        assert!(
            totals.frames_of_other_incarnations_refused > 0,
            "frames of one partition incarnation reach a node running another incarnation of \
             its ids, whose codec refuses them"
        );
        assert!(
            totals.consumer_group_deletions > 0
                && totals.group_offset_deletions > 0
                && totals.offset_stores_acknowledged > 0
                && totals.offset_reads > 0,
            "consumer groups are deleted and their offsets stored, deleted and read"
        );
    }
    if totals.seeds >= 100 {
        assert!(
            totals.partition_transfer_log_restarts > 0,
            "a laggard's log restarts past what its group retired"
        );
        assert!(
            totals.offset_stores_refused > 0 && totals.inherited_offsets_withheld > 0,
            "stale group stores are refused and recreated groups find a predecessor's offset"
        );
        assert!(
            totals.seeds_crossing_incarnations * 20 >= totals.seeds,
            "on many seeds a frame of one incarnation reaches a node running another: {} of {}",
            totals.seeds_crossing_incarnations,
            totals.seeds
        );
        assert!(
            totals.offset_stores_superseded > 0,
            "a deleted group's late store commits after its recreated group's own store"
        );
    }
}

#[test]
fn three_nodes_run_metadata_and_partition_groups_together() {
    run(3);
}

#[test]
fn five_nodes_run_metadata_and_partition_groups_together() {
    run(5);
}

#[test]
fn a_node_seed_replays_exactly() {
    let first = run_seed(3, 11);
    let second = run_seed(3, 11);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}
