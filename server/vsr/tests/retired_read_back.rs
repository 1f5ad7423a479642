//! A repair that asks for a body a committed retirement deleted: in a group that checkpoints
//! past laggards, a retirement planned on one replica may delete batches another replica (the
//! one a laggard repairs from) has not checkpointed past yet. That replica can never serve them
//! again, so it checkpoints at once and sends the laggard the log that starts above it (a
//! StartView), which sends the laggard to state transfer; a body that is merely unreadable
//! changes nothing (the laggard asks again).

use bytes::Bytes;
use iggy_vsr::group::{CheckpointPolicy, Durability, GroupCore, JournalBound, Pending, Step};
use iggy_vsr::{Config, Entry, Message, OPERATION_REGISTER, ReadBack, Replica, Status};

mod support;
use support::{pre_votes, registered_log, sends, settle, voting_for_view_1};

/// What one round of a core's steps asked for.
#[derive(Default)]
struct Out {
    read_backs: Vec<u64>,
    sent: Vec<(u8, Message)>,
}

/// Performs the core's steps (every write durable at once, every op applied).
fn run(core: &mut GroupCore<u32>) -> Out {
    let mut out = Out::default();
    while let Some(step) = core.poll() {
        match step {
            Step::Journal { op, .. } => core.journaled(op, false),
            Step::Sync => core.synced(),
            Step::Apply { op, .. } => core.applied(op, Bytes::new(), &[]),
            Step::Send { to, message } => out.sent.push((to, message)),
            Step::ReadBack { op } => out.read_backs.push(op),
            Step::PersistView { state } => core.view_persisted(state),
            Step::Truncate { .. } | Step::Registered { .. } | Step::Answer { .. } => {}
        }
    }
    out
}

/// Replica `replica`'s ack of `core`'s entry at `op` in view 0.
fn prepare_ok(core: &GroupCore<u32>, op: u64, replica: u8) -> Message {
    Message::PrepareOk {
        view: 0,
        op,
        checksum: core.replica().checksum_at(op).expect("an op of the log"),
        replica,
    }
}

/// Replica `replica` of three in view 0, past its checkpoint policy after four ops (so a
/// checkpoint is due as soon as it may leave a replica behind); `past_laggards`: it checkpoints
/// past laggards, but only far beyond its journal.
fn replica_of_three(replica: u8, past_laggards: bool) -> GroupCore<u32> {
    let policy = CheckpointPolicy {
        journal_bytes: u64::MAX,
        journal_ops: 4,
    };
    let mut core = GroupCore::format(
        Config::new(3, replica),
        Durability::Replicated,
        false,
        Some(policy),
    );
    if past_laggards {
        core.checkpoint_past_laggards(JournalBound {
            bytes: u64::MAX,
            ops: 1_000,
        });
    }
    core
}

/// Primary 0 of three (see [`replica_of_three`]) that committed with replica 1 a limits
/// nomination, a register of client 9 and three of its requests (ops 1..=5), applied them and
/// released their bodies; replica 2 acknowledged ops 1..=2 only, so no ordinary checkpoint is
/// due. Returns it with the entries of ops 1..=5 as prepared.
fn primary_with_a_laggard(past_laggards: bool) -> (GroupCore<u32>, Vec<Entry>) {
    let mut core = replica_of_three(0, past_laggards);
    for request in 0..=3 {
        let (operation, body) = match request {
            0 => (OPERATION_REGISTER, Bytes::new()),
            _ => (5, Bytes::from(format!("batch {request}"))),
        };
        core.submit(Pending {
            client: 9,
            request,
            operation,
            body,
            waiter: 0,
        });
        run(&mut core);
        let op = core.replica().op();
        for acked in 1..=op {
            let ack = prepare_ok(&core, acked, 1);
            core.on_message(1, ack);
        }
        run(&mut core);
    }
    let ack = prepare_ok(&core, 2, 2);
    core.on_message(2, ack);
    run(&mut core);
    assert_eq!(core.replica().commit_min(), 5);
    assert_eq!(core.replica().checkpoint_safe(), 2);
    let prepared = (1..=5)
        .map(|op| core.replica().entry(op).unwrap().clone())
        .collect();
    core.release_applied_bodies();
    assert_eq!(
        core.checkpoint_due(0),
        None,
        "past the policy, but replica 2 holds only ops 1..=2 and the bound is far"
    );
    (core, prepared)
}

/// Replica 2 of three in view 0, holding `entries` (committed).
fn laggard(entries: Vec<Entry>) -> Replica {
    let mut laggard = Replica::new(Config::new(3, 2));
    for entry in entries {
        laggard.on_message(
            0,
            Message::Prepare {
                view: 0,
                commit: 2,
                entry,
            },
        );
        settle(&mut laggard);
    }
    assert_eq!(laggard.op(), 2);
    laggard
}

fn ask_from(op: u64) -> Message {
    Message::RequestPrepare {
        view: 0,
        op,
        replica: 2,
    }
}

#[test]
fn a_repair_of_a_retired_body_checkpoints_and_sends_the_laggard_to_state_transfer() {
    let (mut core, prepared) = primary_with_a_laggard(true);
    let mut laggard = laggard(prepared[..2].to_vec());

    core.on_message(2, ask_from(3));
    let out = run(&mut core);
    assert_eq!(
        out.read_backs,
        [3, 4, 5],
        "every requested body was released"
    );
    // A body that could not be read (damaged) is not answered; the laggard asks again.
    for op in 3..=5 {
        core.read_back(op, ReadBack::Unreadable);
    }
    assert!(run(&mut core).sent.is_empty());
    assert_eq!(core.checkpoint_due(0), None, "unreadable is not retired");

    core.on_message(2, ask_from(3));
    assert_eq!(run(&mut core).read_backs, [3, 4, 5]);
    // A committed retirement deleted the batches of ops 3 and 4 here: they can never be served.
    // Op 5's batch lies in the first kept segment: it is sent, and is of no use to the laggard.
    core.read_back(3, ReadBack::Retired);
    core.read_back(4, ReadBack::Retired);
    core.read_back(5, ReadBack::Read(prepared[4].clone()));
    let sent = run(&mut core).sent;
    assert!(
        matches!(&sent[..], [(2, Message::Prepare { entry, .. })] if entry.op == 5),
        "{sent:?}"
    );
    assert_eq!(
        core.checkpoint_due(0),
        Some(5),
        "a checkpoint at the commit, although replica 2 lags and the bound is far"
    );
    core.checkpoint_record(5);
    core.checkpointed();
    let sent = run(&mut core).sent;
    let [(2, Message::StartView { view: 0, log, .. })] = &sent[..] else {
        panic!("the laggard is answered with the checkpointed log once: {sent:?}");
    };
    assert_eq!(log.base, 5);
    assert_eq!(
        core.checkpoint_due(0),
        None,
        "asked once, checkpointed once"
    );

    // The laggard cannot install a log that starts above what it holds: state transfer.
    let start_view = sent[0].1.clone();
    laggard.on_message(0, start_view);
    settle(&mut laggard);
    assert_eq!(laggard.status(), Status::Recovering);
    let needed = laggard.state_transfer_needed().expect("state transfer");
    assert_eq!((needed.commit_min, needed.checkpoint), (2, 5));

    // Its retried request for a checkpointed op gets the same answer, with no read-back.
    core.on_message(2, ask_from(3));
    let out = run(&mut core);
    assert!(out.read_backs.is_empty());
    assert!(matches!(out.sent[..], [(2, Message::StartView { .. })]));
}

#[test]
fn a_group_that_never_checkpoints_past_laggards_does_not_checkpoint_for_a_retired_body() {
    let (mut core, _) = primary_with_a_laggard(false);
    core.on_message(2, ask_from(3));
    assert_eq!(run(&mut core).read_backs, [3, 4, 5]);
    // Such a group retires only what every replica holds, so this cannot happen; were it to,
    // a checkpoint past the laggard would strand it (it cannot transfer state).
    core.read_back(3, ReadBack::Retired);
    assert_eq!(core.checkpoint_due(0), None);
}

/// Backup 1 of three (see [`replica_of_three`]) that journaled, committed and applied
/// `registered_log(0, 5)` from primary 0 (a register, then four requests whose bodies it
/// released); primary 0 announced no op every replica holds.
fn backup_with_released_bodies() -> GroupCore<u32> {
    let mut core = replica_of_three(1, true);
    for entry in registered_log(0, 5) {
        let prepare = Message::Prepare {
            view: 0,
            commit: 0,
            entry,
        };
        core.on_message(0, prepare);
    }
    let commit = Message::Commit {
        view: 0,
        commit: 5,
        checkpoint_safe: 0,
    };
    core.on_message(0, commit);
    run(&mut core);
    assert_eq!(core.replica().commit_min(), 5);
    core.release_applied_bodies();
    core
}

#[test]
fn a_backup_asked_by_a_new_primary_for_a_retired_body_says_so_and_checkpoints() {
    let mut core = backup_with_released_bodies();
    // Replica 2 starts view 2, which it leads; this backup joins and sends its log.
    core.on_message(
        2,
        Message::StartViewChange {
            view: 2,
            replica: 2,
        },
    );
    let sent = run(&mut core).sent;
    assert!(
        sent.iter()
            .any(|(to, message)| *to == 2 && matches!(message, Message::DoViewChange { .. })),
        "{sent:?}"
    );
    // The new primary lacks the bodies from op 2 on; a retirement deleted them here.
    core.on_message(
        2,
        Message::RequestPrepare {
            view: 2,
            op: 2,
            replica: 2,
        },
    );
    assert_eq!(run(&mut core).read_backs, [2, 3, 4, 5]);
    for op in 2..=5 {
        core.read_back(op, ReadBack::Retired);
    }
    // The new primary hears at once that this replica can never serve them, so it need not
    // wait for its view change to time out.
    let told: Vec<(u8, Message)> = run(&mut core).sent;
    let expected: Vec<(u8, Message)> = (2..=5)
        .map(|op| {
            let message = Message::BodyRetired {
                view: 2,
                op,
                replica: 1,
            };
            (2, message)
        })
        .collect();
    assert_eq!(told, expected);
    assert_eq!(core.checkpoint_due(0), Some(5));
    core.checkpoint_record(5);
    core.checkpointed();
    // A backup has no log to start a view with: the log it sends from now on starts above the
    // ops.
    let sent = run(&mut core).sent;
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(core.checkpoint_due(0), None);
    core.on_tick(1_000);
    let logs: Vec<u64> = run(&mut core)
        .sent
        .into_iter()
        .filter_map(|(_, message)| match message {
            Message::DoViewChange { log, .. } => Some(log.base),
            _ => None,
        })
        .collect();
    assert_eq!(
        logs,
        [5],
        "its DoViewChange, sent again, names its checkpoint"
    );
}

/// The RequestPrepares among `sent`, as (to, op).
fn body_requests(sent: &[(u8, Message)]) -> Vec<(u8, u64)> {
    sent.iter()
        .filter_map(|(to, message)| match message {
            Message::RequestPrepare { op, .. } => Some((*to, *op)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_primary_whose_lacking_body_every_holder_retired_moves_on_at_once() {
    let log = registered_log(0, 3);
    // Replica 1 leads view 1 but holds ops 1..=2; replicas 0 and 2 hold op 3 too.
    let mut primary = voting_for_view_1(1, &log[..2]);
    settle(&mut primary);
    for holder in [0, 2] {
        let mut voter = voting_for_view_1(holder, &log);
        let out = settle(&mut voter);
        let (_, do_view_change) = sends(&out)
            .into_iter()
            .find(|(to, message)| *to == 1 && matches!(message, Message::DoViewChange { .. }))
            .expect("a vote for replica 1");
        primary.on_message(holder, do_view_change);
    }
    let asked = body_requests(&sends(&settle(&mut primary)));
    let [(first, 3)] = asked[..] else {
        panic!("op 3's body asked of one holder: {asked:?}");
    };
    let retired = |replica: u8| Message::BodyRetired {
        view: 1,
        op: 3,
        replica,
    };
    // A retirement deleted op 3's batch on the first holder asked: the other one is asked.
    primary.on_message(first, retired(first));
    let other = 2 - first;
    let out = settle(&mut primary);
    assert_eq!(body_requests(&sends(&out)), [(other, 3)], "{out:?}");
    assert_eq!(primary.status(), Status::ViewChange);
    // There too: no replica can fill the log, so the view is given up now, not after the
    // view-change timeout (no tick passed), through the usual pre-vote.
    primary.on_message(other, retired(other));
    let sent = sends(&settle(&mut primary));
    assert_eq!(pre_votes(&sent), [(0, 2), (2, 2)], "{sent:?}");
    assert!(
        body_requests(&sent).is_empty(),
        "nothing left to ask: {sent:?}"
    );
    // A peer grants it (it has not heard a primary of view 1): the view change to view 2
    // starts, which replica 2 leads.
    primary.on_message(
        0,
        Message::PreVoteGranted {
            view: 2,
            replica: 0,
        },
    );
    settle(&mut primary);
    assert_eq!((primary.view(), primary.status()), (2, Status::ViewChange));
    // A tick keeps asking while the round lasts, never for view 3.
    primary.on_tick(1);
    assert_eq!(primary.view(), 2);
}
