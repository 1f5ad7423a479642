//! The safe checkpoint op of a group of more than one: the primary learns from its view's
//! PrepareOks how far every replica's journal durably reaches, announces the committed part in
//! its Commit heartbeats, and a checkpoint never goes past it.

use bytes::Bytes;
use iggy_vsr::group::{CheckpointPolicy, Durability, GroupCore, JournalBound, Step};
use iggy_vsr::{Action, Config, Entry, Message, OPERATION_REGISTER, Replica};

mod support;
use support::*;

/// Replica `replica`'s ack of `log`'s entry at `op` in view 0.
fn prepare_ok(log: &Replica, op: u64, replica: u8) -> Message {
    Message::PrepareOk {
        view: 0,
        op,
        checksum: log.checksum_at(op).expect("an op of the log"),
        replica,
    }
}

/// Replica 0 of three, primary of view 0, with four registers prepared and durable in its own
/// journal.
fn primary_with_four_ops() -> Replica {
    let mut primary = Replica::new(Config::new(3, 0));
    for client in 1..=4 {
        primary.on_request(client, 0, OPERATION_REGISTER, Bytes::new());
    }
    drain(&mut primary);
    for op in 1..=4 {
        primary.on_write_done(op);
    }
    drain(&mut primary);
    primary
}

fn heartbeats(primary: &mut Replica, now: u64) -> Vec<Message> {
    primary.on_tick(now);
    drain(primary)
        .into_iter()
        .filter_map(|action| match action {
            Action::Send { message, .. } if matches!(message, Message::Commit { .. }) => {
                Some(message)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_primary_announces_the_highest_committed_op_every_replica_holds() {
    let mut primary = primary_with_four_ops();
    for op in 1..=4 {
        primary.on_message(1, prepare_ok(&primary, op, 1));
    }
    for op in 1..=2 {
        primary.on_message(2, prepare_ok(&primary, op, 2));
    }
    drain(&mut primary);
    assert_eq!(primary.commit_max(), 4, "a quorum holds every op");
    assert_eq!(
        primary.checkpoint_safe(),
        2,
        "replica 2 holds ops 1..=2 only"
    );
    let expected = Message::Commit {
        view: 0,
        commit: 4,
        checkpoint_safe: 2,
    };
    assert_eq!(heartbeats(&mut primary, 100), [expected.clone(), expected]);
    // Replica 2 reports the head of its durable journal, already committed.
    primary.on_message(2, prepare_ok(&primary, 4, 2));
    assert_eq!(primary.checkpoint_safe(), 4);
}

#[test]
fn an_ack_vouches_for_the_prefix_before_it_and_the_safe_op_waits_for_every_replica() {
    let mut primary = primary_with_four_ops();
    // Replica 1 acknowledges op 1 alone; replica 2's acknowledgement of op 3 says it holds
    // ops 1..=3 in this view's log, so with the primary's own ops 1..=3 have a quorum.
    primary.on_message(1, prepare_ok(&primary, 1, 1));
    primary.on_message(2, prepare_ok(&primary, 3, 2));
    drain(&mut primary);
    assert_eq!(primary.commit_max(), 3);
    assert_eq!(primary.checkpoint_safe(), 1, "replica 1 holds op 1 only");
}

#[test]
fn a_replica_that_never_answers_holds_the_safe_op_back() {
    let mut primary = primary_with_four_ops();
    for op in 1..=4 {
        primary.on_message(1, prepare_ok(&primary, op, 1));
    }
    drain(&mut primary);
    assert_eq!(primary.commit_max(), 4);
    assert_eq!(primary.checkpoint_safe(), 0, "replica 2 is silent");
    // Acknowledgements naming another view say nothing about this view's log.
    primary.on_message(
        2,
        Message::PrepareOk {
            view: 1,
            op: 4,
            checksum: primary.checksum_at(4).unwrap(),
            replica: 2,
        },
    );
    assert_eq!(primary.checkpoint_safe(), 0);
}

fn entry(op: u64) -> Entry {
    Entry::new(op, 0, 7, op, 5, Bytes::from(format!("b{op}")))
}

fn prepare_oks(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send {
                to: 0,
                message: Message::PrepareOk { op, .. },
            } => Some(*op),
            _ => None,
        })
        .collect()
}

#[test]
fn a_backup_acknowledges_only_its_durable_prefix_and_learns_the_safe_op() {
    let mut backup = Replica::new(Config::new(3, 1));
    for op in 1..=3 {
        let prepare = Message::Prepare {
            view: 0,
            commit: 0,
            entry: entry(op),
        };
        backup.on_message(0, prepare);
    }
    drain(&mut backup);
    backup.on_write_done(2);
    assert_eq!(
        prepare_oks(&drain(&mut backup)),
        [] as [u64; 0],
        "op 1 is still in flight: a crash would lose op 2 with it"
    );
    backup.on_write_done(1);
    assert_eq!(prepare_oks(&drain(&mut backup)), [1, 2]);
    let commit = Message::Commit {
        view: 0,
        commit: 3,
        checkpoint_safe: 2,
    };
    backup.on_message(0, commit);
    drain(&mut backup);
    assert_eq!(backup.checkpoint_safe(), 2);
    // Committed before it was durable here: still reported, as the head of the durable log.
    backup.on_write_done(3);
    assert_eq!(prepare_oks(&drain(&mut backup)), [3]);
    // The safe op only grows.
    let older = Message::Commit {
        view: 0,
        commit: 3,
        checkpoint_safe: 1,
    };
    backup.on_message(0, older);
    assert_eq!(backup.checkpoint_safe(), 2);
}

/// Performs a primary's steps; returns the messages it sends.
fn run(core: &mut GroupCore<u32>) -> Vec<Message> {
    let mut sent = Vec::new();
    while let Some(step) = core.poll() {
        match step {
            Step::Journal { op, .. } => core.journaled(op, false),
            Step::Sync => core.synced(),
            Step::Apply { op, .. } => core.applied(op, Bytes::new(), &[]),
            Step::Send { message, .. } => sent.push(message),
            Step::Truncate { .. } | Step::Registered { .. } | Step::Answer { .. } => {}
            Step::PersistView { state } => core.view_persisted(state),
            Step::ReadBack { op } => panic!("nothing was released, yet op {op} is read back"),
        }
    }
    sent
}

/// Replica 0 of three, primary of view 0, checkpointing once its journal holds 4 ops.
fn primary_of_three() -> GroupCore<u32> {
    let policy = CheckpointPolicy {
        journal_bytes: u64::MAX,
        journal_ops: 4,
    };
    GroupCore::format(
        Config::new(3, 0),
        Durability::Replicated,
        false,
        Some(policy),
    )
}

/// Submits a register of each of `clients` to `core`.
fn submit_registers(core: &mut GroupCore<u32>, clients: std::ops::RangeInclusive<u128>) {
    for client in clients {
        core.submit(iggy_vsr::group::Pending {
            client,
            request: 0,
            operation: OPERATION_REGISTER,
            body: Bytes::new(),
            waiter: 0,
        });
    }
}

#[test]
fn a_group_of_three_checkpoints_only_at_ops_every_replica_holds() {
    let mut core = primary_of_three();
    submit_registers(&mut core, 1..=6);
    run(&mut core);
    for op in 1..=6 {
        core.on_message(1, prepare_ok(core.replica(), op, 1));
    }
    run(&mut core);
    assert_eq!(core.replica().commit_min(), 6);
    assert_eq!(
        core.checkpoint_due(0),
        None,
        "every op is committed and applied, but replica 2 holds none of them"
    );
    core.on_message(2, prepare_ok(core.replica(), 2, 2));
    run(&mut core);
    assert_eq!(
        core.checkpoint_due(0),
        None,
        "releasing 2 of 6 ops: wait until at least half can go"
    );
    core.on_message(2, prepare_ok(core.replica(), 5, 2));
    run(&mut core);
    assert_eq!(core.checkpoint_due(0), Some(5));
    core.checkpoint_record(5);
    core.checkpointed();
    assert_eq!(core.replica().checkpoint_op(), 5);
    assert_eq!(core.checkpoint_due(0), None, "one op left");
}

#[test]
fn a_group_set_past_laggards_checkpoints_at_its_commit_once_the_journal_passes_the_bound() {
    let mut core = primary_of_three();
    core.checkpoint_past_laggards(JournalBound {
        bytes: u64::MAX,
        ops: 8,
    });
    let register = |client| iggy_vsr::group::Pending {
        client,
        request: 0,
        operation: OPERATION_REGISTER,
        body: Bytes::new(),
        waiter: 0,
    };
    // The group's limits nomination (op 1), then six registers.
    for client in 1..=6 {
        core.submit(register(client));
    }
    run(&mut core);
    for op in 1..=7 {
        core.on_message(1, prepare_ok(core.replica(), op, 1));
    }
    run(&mut core);
    assert_eq!(core.replica().commit_min(), 7);
    assert_eq!(core.replica().journal_len(), 7);
    assert_eq!(
        core.checkpoint_due(0),
        None,
        "7 ops: past the policy, below the bound, so replica 2 is still waited for"
    );
    core.submit(register(7));
    run(&mut core);
    core.on_message(1, prepare_ok(core.replica(), 8, 1));
    run(&mut core);
    assert_eq!(
        core.checkpoint_due(0),
        Some(8),
        "the bound reached: at commit_min"
    );
    assert_eq!(core.left_behind(8), [2], "replica 2 acknowledged nothing");
    core.checkpoint_record(8);
    core.checkpointed();
    assert_eq!(core.replica().checkpoint_op(), 8);
    // The same journal without the bound keeps waiting for replica 2.
    let mut waiting = primary_of_three();
    for client in 1..=7 {
        waiting.submit(register(client));
    }
    run(&mut waiting);
    for op in 1..=8 {
        waiting.on_message(1, prepare_ok(waiting.replica(), op, 1));
    }
    run(&mut waiting);
    assert_eq!(waiting.replica().commit_min(), 8);
    assert_eq!(waiting.checkpoint_due(0), None);
}

/// Primary of three (see [`primary_of_three`]) that committed a limits nomination and seven
/// registers (ops 1..=8) with replica 1, while replica 2 acknowledged ops 1..=2 only.
fn primary_of_three_with_a_laggard(past_laggards: Option<JournalBound>) -> GroupCore<u32> {
    let mut core = primary_of_three();
    if let Some(bound) = past_laggards {
        core.checkpoint_past_laggards(bound);
    }
    submit_registers(&mut core, 1..=7);
    run(&mut core);
    for op in 1..=8 {
        core.on_message(1, prepare_ok(core.replica(), op, 1));
    }
    core.on_message(2, prepare_ok(core.replica(), 2, 2));
    run(&mut core);
    assert_eq!(core.replica().commit_min(), 8);
    assert_eq!(core.replica().checkpoint_safe(), 2);
    core
}

#[test]
fn retirement_follows_a_checkpoint_past_a_laggard_and_otherwise_what_every_replica_holds() {
    let bound = JournalBound {
        bytes: u64::MAX,
        ops: 8,
    };
    let mut core = primary_of_three_with_a_laggard(Some(bound));
    assert_eq!(
        core.retirable_through(),
        2,
        "not checkpointed past replica 2 yet: what every replica holds"
    );
    assert_eq!(core.checkpoint_due(0), Some(8));
    core.checkpoint_record(8);
    core.checkpointed();
    assert_eq!(core.left_behind(8), [2]);
    assert_eq!(
        core.retirable_through(),
        8,
        "replica 2 can follow only by state transfer now: up to the checkpoint"
    );
    // A group whose laggards do not catch up by state transfer never checkpoints past them,
    // and its retirements stay below what every replica holds.
    let waiting = primary_of_three_with_a_laggard(None);
    assert_eq!(waiting.checkpoint_due(0), None);
    assert_eq!(waiting.retirable_through(), 2);
}

#[test]
fn retirement_never_passes_the_commit() {
    let mut core = primary_of_three_with_a_laggard(Some(JournalBound {
        bytes: u64::MAX,
        ops: 8,
    }));
    core.checkpoint_record(8);
    core.checkpointed();
    // Prepared, not committed yet: not retirable.
    submit_registers(&mut core, 8..=8);
    run(&mut core);
    assert_eq!(core.replica().op(), 9);
    assert_eq!(core.replica().commit_max(), 8);
    assert_eq!(core.retirable_through(), 8);
}

/// A PrepareOk vouches for the entry its sender holds at its op: an ack from a replica of
/// another log under the same group id (a deleted partition incarnation's backup, whose frames
/// reach the recreated group: the PrepareOk layout carries no incarnation) neither completes
/// a commit quorum nor tells the primary how far the replica's journal reaches.
#[test]
fn an_ack_of_another_log_at_the_same_op_counts_for_nothing() {
    let mut primary = primary_with_four_ops();
    // The same ops of another group's log: other clients registered.
    let mut other = Replica::new(Config::new(3, 0));
    for client in 11..=14 {
        other.on_request(client, 0, OPERATION_REGISTER, Bytes::new());
    }
    drain(&mut other);
    for op in 1..=4 {
        primary.on_message(1, prepare_ok(&other, op, 1));
    }
    // Past the log: an op this view never had.
    let beyond = Message::PrepareOk {
        view: 0,
        op: 9,
        checksum: 0,
        replica: 2,
    };
    primary.on_message(2, beyond);
    drain(&mut primary);
    assert_eq!(
        primary.commit_max(),
        0,
        "replica 1 acknowledged another log"
    );
    assert_eq!(primary.checkpoint_safe(), 0);
    for op in 1..=4 {
        primary.on_message(1, prepare_ok(&primary, op, 1));
    }
    drain(&mut primary);
    assert_eq!(primary.commit_max(), 4, "replica 1 acknowledged this log");
}
