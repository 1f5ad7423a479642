//! Multi-replica groups and checkpoints: a replica missing ops another replica checkpointed can
//! only use that replica's log if it holds the same entry at the checkpoint op; otherwise it
//! stays out of the group (state transfer is not implemented) and never commits a guess.

use bytes::Bytes;
use iggy_vsr::{
    Action, Config, Entry, Log, Message, OPERATION_REGISTER, Replica, StateTransferNeeded, Status,
    ViewState,
};

mod support;
use support::{drain, pre_votes, registered_log, sends, settle, voting_for_view_1};

fn log_of(view: u32) -> Vec<Entry> {
    registered_log(view, 10)
}

/// The answer to a restarted replica's RequestStartView: the primary (replica 0, view 0)
/// checkpointed at op 8 and holds ops 9 and 10, all committed. The primary then answers the
/// replica's requests for bodies, and the replica's commits are applied.
fn rejoin(replica: &mut Replica, entries: &[Entry]) -> Vec<Action> {
    let log = Log::of_entries(8, entries[7].checksum, &entries[8..]);
    let asked: Vec<Action> = std::iter::from_fn(|| replica.poll_action()).collect();
    assert!(
        asked.iter().any(|a| matches!(
            a,
            Action::Send {
                to: 0,
                message: Message::RequestStartView {
                    view: 0,
                    replica: 1
                }
            }
        )),
        "a restarted backup asks the primary of its view: {asked:?}"
    );
    let start_view = Message::StartView {
        view: 0,
        commit: 10,
        log,
    };
    replica.on_message(0, start_view);
    let mut out = Vec::new();
    for _ in 0..1_000 {
        let Some(action) = replica.poll_action() else {
            break;
        };
        match &action {
            Action::Commit { op, .. } => replica.on_committed_reply(*op, Bytes::from_static(b"ok")),
            Action::Send {
                to: 0,
                message: Message::RequestPrepare { op, .. },
            } => {
                for entry in &entries[*op as usize - 1..] {
                    let prepare = Message::Prepare {
                        view: 0,
                        commit: 10,
                        entry: entry.clone(),
                    };
                    replica.on_message(0, prepare);
                }
            }
            _ => {}
        }
        out.push(action);
    }
    out
}

#[test]
fn a_replica_without_the_checkpointed_ops_stays_recovering() {
    let entries = log_of(0);
    let mut replica = Replica::open(
        Config::new(3, 1),
        entries[..5].to_vec(),
        ViewState::default(),
    );
    let out = rejoin(&mut replica, &entries);
    assert_eq!(replica.status(), Status::Recovering);
    assert_eq!(
        replica.state_transfer_needed(),
        Some(StateTransferNeeded {
            commit_min: 0,
            checkpoint: 8
        })
    );
    assert_eq!(replica.commit_min(), 0);
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::Commit { .. } | Action::WritePrepare { .. })),
        "{out:?}"
    );
}

#[test]
fn a_replica_with_a_different_entry_at_the_checkpoint_stays_recovering() {
    let entries = log_of(0);
    let mut ours = entries[..8].to_vec();
    ours[7] = Entry::new(8, 0, 9, 7, 5, Bytes::from_static(b"uncommitted"));
    let mut replica = Replica::open(Config::new(3, 1), ours, ViewState::default());
    let out = rejoin(&mut replica, &entries);
    assert_eq!(replica.status(), Status::Recovering);
    assert!(replica.state_transfer_needed().is_some());
    assert!(!out.iter().any(|a| matches!(a, Action::Commit { .. })));
}

#[test]
fn a_replica_holding_the_checkpoint_entry_rejoins_and_commits_its_own_prefix() {
    let entries = log_of(0);
    let mut replica = Replica::open(
        Config::new(3, 1),
        entries[..8].to_vec(),
        ViewState::default(),
    );
    let out = rejoin(&mut replica, &entries);
    assert_eq!(replica.status(), Status::Normal);
    assert_eq!(replica.state_transfer_needed(), None);
    let writes: Vec<u64> = out
        .iter()
        .filter_map(|a| match a {
            Action::WritePrepare { op, .. } => Some(*op),
            _ => None,
        })
        .collect();
    assert_eq!(writes, vec![9, 10]);
    let commits: Vec<u64> = out
        .iter()
        .filter_map(|a| match a {
            Action::Commit { op, .. } => Some(*op),
            _ => None,
        })
        .collect();
    assert_eq!(commits, (2..=10).collect::<Vec<_>>());
    assert_eq!(replica.commit_min(), 10);
}

/// The primary checkpointed at its commit (op 10) and holds no op above it; a restarted
/// backup holds ops 1..=10 in its own journal. Installing the StartView raises the commit it
/// knows to the checkpoint, and it applies its own prefix at once: no later commit is needed
/// to start it (an idle group would otherwise leave the backup behind for good).
#[test]
fn a_replica_rejoining_at_the_primary_checkpoint_applies_its_prefix_without_a_later_commit() {
    let entries = log_of(0);
    let mut replica = Replica::open(Config::new(3, 1), entries.clone(), ViewState::default());
    std::iter::from_fn(|| replica.poll_action()).for_each(drop);
    let start_view = Message::StartView {
        view: 0,
        commit: 10,
        log: Log::of_entries(10, entries[9].checksum, &[]),
    };
    replica.on_message(0, start_view);
    let mut commits = Vec::new();
    while let Some(action) = replica.poll_action() {
        if let Action::Commit { op, .. } = action {
            commits.push(op);
            replica.on_committed_reply(op, Bytes::from_static(b"ok"));
        }
    }
    assert_eq!(replica.status(), Status::Normal);
    assert_eq!(commits, (2..=10).collect::<Vec<_>>());
    assert_eq!(replica.commit_min(), 10);
}

#[test]
fn a_primary_asked_for_checkpointed_ops_answers_with_its_log() {
    // A group of three where replica 0 is the primary of view 0 and has checkpointed.
    let mut primary = Replica::new(Config::new(3, 0));
    primary.on_request(9, 0, OPERATION_REGISTER, Bytes::new());
    std::iter::from_fn(|| primary.poll_action()).for_each(drop);
    primary.on_write_done(1);
    let ok = Message::PrepareOk {
        view: 0,
        op: 1,
        checksum: primary.checksum_at(1).unwrap(),
        replica: 2,
    };
    primary.on_message(2, ok);
    std::iter::from_fn(|| primary.poll_action()).for_each(drop);
    assert_eq!(primary.commit_min(), 1);
    let checkpoint = primary.checkpoint(1);
    assert_eq!(primary.journal_len(), 0);
    primary.on_message(
        1,
        Message::RequestPrepare {
            view: 0,
            op: 1,
            replica: 1,
        },
    );
    let out: Vec<Action> = std::iter::from_fn(|| primary.poll_action()).collect();
    assert!(
        matches!(
            out.as_slice(),
            [Action::Send { to: 1, message: Message::StartView { log, .. } }]
                if log.base == 1 && log.base_checksum == checkpoint.checksum
        ),
        "{out:?}"
    );
    // The lagging backup cannot use it: it leaves the group until state transfer exists.
    let mut backup = Replica::new(Config::new(3, 1));
    let Action::Send { message, .. } = out[0].clone() else {
        unreachable!()
    };
    backup.on_message(0, message);
    assert_eq!(backup.status(), Status::Recovering);
    assert_eq!(
        backup.state_transfer_needed(),
        Some(StateTransferNeeded {
            commit_min: 0,
            checkpoint: 1
        })
    );
}

/// A backup rejoins while the primary has not checkpointed yet: it installs the primary's log,
/// holding ops 1..=5 and awaiting the bodies of 6..=10. Before it fetched them, the primary
/// checkpointed at op 8 and dropped them, so its answer to the backup's body request is its log
/// from the checkpoint. That log is no longer than the backup's, yet the backup cannot follow
/// it without the ops below the checkpoint: it needs state transfer (before, it ignored the
/// log as "not longer than ours" and waited for bodies nobody held, forever).
#[test]
fn a_backup_awaiting_bodies_the_primary_checkpointed_away_needs_state_transfer() {
    let entries = log_of(0);
    let mut backup = Replica::open(
        Config::new(3, 1),
        entries[..5].to_vec(),
        ViewState::default(),
    );
    drain(&mut backup);
    let whole = Message::StartView {
        view: 0,
        commit: 10,
        log: Log::of_entries(0, 0, &entries),
    };
    backup.on_message(0, whole);
    let out = settle(&mut backup);
    assert_eq!(backup.status(), Status::Normal, "{out:?}");
    assert_eq!(backup.commit_min(), 5, "its own prefix applied");
    assert!(
        sends(&out)
            .iter()
            .any(|(to, m)| *to == 0 && matches!(m, Message::RequestPrepare { op: 6, .. })),
        "it asks for the first awaited body: {out:?}"
    );

    let from_checkpoint = Message::StartView {
        view: 0,
        commit: 10,
        log: Log::of_entries(8, entries[7].checksum, &entries[8..]),
    };
    backup.on_message(0, from_checkpoint);
    settle(&mut backup);
    assert_eq!(
        backup.state_transfer_needed(),
        Some(StateTransferNeeded {
            commit_min: 5,
            checkpoint: 8
        })
    );
    assert_eq!(backup.status(), Status::Recovering);
    assert_eq!(
        backup.commit_min(),
        5,
        "nothing guessed past its own prefix"
    );
}

/// Replica `replica`'s DoViewChange for view 1 (log view 0, commit 10) naming `log_of(0)` from
/// a checkpoint at `base`.
fn do_view_change_from(replica: u8, base: u64) -> Message {
    let entries = log_of(0);
    let base_checksum = match base {
        0 => 0,
        _ => entries[base as usize - 1].checksum,
    };
    Message::DoViewChange {
        view: 1,
        replica,
        log_view: 0,
        commit: 10,
        log: Log::of_entries(base, base_checksum, &entries[base as usize..]),
    }
}

#[test]
fn a_new_primary_that_needs_state_transfer_gives_its_view_up_at_once() {
    // Replica 1 leads view 1 holding ops 1..=2; replica 2 checkpointed at op 8.
    let mut primary = voting_for_view_1(1, &log_of(0)[..2]);
    settle(&mut primary);
    primary.on_message(2, do_view_change_from(2, 8));
    let sent = sends(&settle(&mut primary));
    assert_eq!(primary.status(), Status::ViewChange);
    assert_eq!(
        primary.state_transfer_needed(),
        Some(StateTransferNeeded {
            commit_min: 0,
            checkpoint: 8
        })
    );
    // No tick passed: the pre-vote a timed-out view change would send, sent now.
    assert_eq!(pre_votes(&sent), [(0, 2), (2, 2)], "{sent:?}");
}

#[test]
fn a_new_primary_installs_the_lowest_checkpointed_of_equal_logs() {
    // Replica 1 of five leads view 1 holding ops 1..=2; replicas 0 and 2 hold the same log of
    // ten ops, replica 0 whole, replica 2 from a checkpoint at op 8.
    let mut primary = Replica::open(
        Config::new(5, 1),
        log_of(0)[..2].to_vec(),
        ViewState::default(),
    );
    settle(&mut primary);
    for voter in [2, 3] {
        let vote = Message::StartViewChange {
            view: 1,
            replica: voter,
        };
        primary.on_message(voter, vote);
    }
    settle(&mut primary);
    for (replica, base) in [(0, 0), (2, 8)] {
        primary.on_message(replica, do_view_change_from(replica, base));
    }
    let sent = sends(&settle(&mut primary));
    assert_eq!(primary.state_transfer_needed(), None);
    assert!(pre_votes(&sent).is_empty(), "{sent:?}");
    assert!(
        sent.iter()
            .any(|(_, message)| matches!(message, Message::RequestPrepare { op: 3, .. })),
        "the bodies it lacks are fetched: {sent:?}"
    );
}

#[test]
fn an_ack_above_a_backups_checkpoint_counts_for_the_ops_below_it() {
    // Replica 1 leads view 1 over ops 1..=10, none known committed: its DoViewChange quorum
    // (itself and replica 2) named commit 0.
    let log = log_of(0);
    let mut primary = voting_for_view_1(1, &log);
    settle(&mut primary);
    let commit_named = Message::DoViewChange {
        view: 1,
        replica: 2,
        log_view: 0,
        commit: 0,
        log: Log::of_entries(0, 0, &log),
    };
    primary.on_message(2, commit_named);
    settle(&mut primary);
    assert_eq!(
        (primary.status(), primary.commit_max()),
        (Status::Normal, 0)
    );
    // Replica 0 committed and checkpointed ops 1..=8 in view 0 (it was not in that quorum):
    // holding view 1's log from its checkpoint on, it acknowledges only above it.
    let ack = Message::PrepareOk {
        view: 1,
        op: 10,
        checksum: log[9].checksum,
        replica: 0,
    };
    primary.on_message(0, ack);
    let out = settle(&mut primary);
    assert_eq!(primary.commit_max(), 10, "{out:?}");
}
