//! View changes carry entry headers, not bodies: a replica keeps its own entries whose checksums
//! match the canonical log, fetches the other bodies with RequestPrepare and takes a body only
//! when it matches its header. It never journals, acknowledges or commits an op it lacks.

use bytes::Bytes;
use iggy_vsr::{Action, Config, Entry, Log, Message, Replica, Status, ViewState};

mod support;
use support::*;

fn written(out: &[Action]) -> Vec<u64> {
    out.iter()
        .filter_map(|action| match action {
            Action::WritePrepare { op, .. } => Some(*op),
            _ => None,
        })
        .collect()
}

fn committed(out: &[Action]) -> Vec<u64> {
    out.iter()
        .filter_map(|action| match action {
            Action::Commit { op, .. } => Some(*op),
            _ => None,
        })
        .collect()
}

fn acked(out: &[Action]) -> Vec<u64> {
    sends(out)
        .into_iter()
        .filter_map(|(_, message)| match message {
            Message::PrepareOk { op, .. } => Some(op),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_primary_fetches_a_body_it_lacks_from_the_do_view_change_sender_then_commits() {
    let log = registered_log(0, 3);
    // Replica 1 leads view 1 but holds ops 1..=2; replica 2 holds op 3 too.
    let mut primary = voting_for_view_1(1, &log[..2]);
    let mut sender = voting_for_view_1(2, &log);
    let out = settle(&mut sender);
    let do_view_change = sends(&out)
        .into_iter()
        .find(|(to, message)| *to == 1 && matches!(message, Message::DoViewChange { .. }))
        .expect("replica 2 votes for replica 1");
    let Message::DoViewChange { log: sent, .. } = &do_view_change.1 else {
        unreachable!()
    };
    assert_eq!(sent, &Log::of_entries(0, 0, &log), "headers, not bodies");
    settle(&mut primary);
    primary.on_message(2, do_view_change.1.clone());
    let out = settle(&mut primary);
    assert_eq!(
        primary.status(),
        Status::ViewChange,
        "op 3's body is missing"
    );
    assert!(written(&out).is_empty() && committed(&out).is_empty());
    assert!(
        !sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, Message::StartView { .. })),
        "no StartView before the log is held: {out:?}"
    );
    assert_eq!(
        sends(&out),
        [(
            2,
            Message::RequestPrepare {
                view: 1,
                op: 3,
                replica: 1
            }
        )],
        "asked of the sender whose log named op 3"
    );
    deliver(1, &out, &mut sender);
    let served = settle(&mut sender);
    assert!(
        matches!(
            sends(&served).as_slice(),
            [(1, Message::Prepare { view: 0, entry, .. })] if *entry == log[2]
        ),
        "the sender serves op 3 as a prepare of its log view's log: {served:?}"
    );
    deliver(2, &served, &mut primary);
    let out = settle(&mut primary);
    assert_eq!(primary.status(), Status::Normal);
    assert!(primary.is_primary());
    assert_eq!(written(&out), [3]);
    let start_views: Vec<_> = sends(&out)
        .into_iter()
        .filter_map(|(to, m)| matches!(m, Message::StartView { .. }).then_some(to))
        .collect();
    assert_eq!(start_views, [0, 2]);
    // Replica 2's DoViewChange named commit 0; op 3 commits with replica 2's ack.
    assert!(committed(&out).is_empty(), "{out:?}");
    deliver(1, &out, &mut sender);
    let acks = settle(&mut sender);
    assert_eq!(acked(&acks), [1, 2, 3], "the sender holds the whole log");
    deliver(2, &acks, &mut primary);
    let out = settle(&mut primary);
    assert_eq!(committed(&out), [2, 3]);
    assert_eq!(primary.commit_min(), 3);
}

#[test]
fn a_new_primary_refuses_a_body_that_does_not_match_the_header() {
    let log = registered_log(0, 3);
    let mut primary = voting_for_view_1(1, &log[..2]);
    settle(&mut primary);
    primary.on_message(
        2,
        Message::DoViewChange {
            view: 1,
            replica: 2,
            log_view: 0,
            commit: 2,
            log: Log::of_entries(0, 0, &log),
        },
    );
    settle(&mut primary);
    let forged = Entry::new(3, 0, 9, 2, 5, Bytes::from_static(b"forged"));
    let mut relabelled = forged.clone();
    relabelled.checksum = log[2].checksum;
    for entry in [forged, relabelled] {
        let prepare = Message::Prepare {
            view: 0,
            commit: 2,
            entry,
        };
        primary.on_message(0, prepare);
    }
    let out = settle(&mut primary);
    assert!(written(&out).is_empty(), "{out:?}");
    assert_eq!(primary.status(), Status::ViewChange);
    let genuine = Message::Prepare {
        view: 0,
        commit: 2,
        entry: log[2].clone(),
    };
    primary.on_message(0, genuine);
    let out = settle(&mut primary);
    assert_eq!(written(&out), [3]);
    assert_eq!(primary.status(), Status::Normal);
    assert_eq!(
        committed(&out),
        [2],
        "the quorum's commit, from its own journal"
    );
}

#[test]
fn a_backup_repairs_a_start_view_body_from_the_primary_and_acks_nothing_before() {
    let log = registered_log(1, 4);
    // Replica 2 restarted in view 1 (primary 1) holding ops 1..=2 of its log (log view 0:
    // it never held view 1's log whole).
    let state = ViewState {
        view: 1,
        log_view: 0,
    };
    let mut backup = Replica::open(Config::new(3, 2), log[..2].to_vec(), state);
    settle(&mut backup);
    backup.on_message(
        1,
        Message::StartView {
            view: 1,
            commit: 3,
            log: Log::of_entries(0, 0, &log),
        },
    );
    let out = settle(&mut backup);
    assert_eq!(backup.status(), Status::Normal);
    assert!(written(&out).is_empty());
    assert!(acked(&out).is_empty(), "no ack before view 1's log is held");
    assert_eq!(committed(&out), [2], "committed ops it holds are applied");
    assert!(
        sends(&out).contains(&(
            1,
            Message::RequestPrepare {
                view: 1,
                op: 3,
                replica: 2
            }
        )),
        "{out:?}"
    );
    // A forged op 3 from the primary is refused; op 4 arrives out of order and waits.
    let forged = Entry::new(3, 1, 9, 2, 5, Bytes::from_static(b"forged"));
    for entry in [forged, log[3].clone()] {
        let prepare = Message::Prepare {
            view: 1,
            commit: 3,
            entry,
        };
        backup.on_message(1, prepare);
    }
    let out = settle(&mut backup);
    assert!(
        written(&out).is_empty() && acked(&out).is_empty(),
        "{out:?}"
    );
    assert_eq!(backup.persisted_view_state().log_view, 0);
    let genuine = Message::Prepare {
        view: 1,
        commit: 3,
        entry: log[2].clone(),
    };
    backup.on_message(1, genuine);
    let out = settle(&mut backup);
    assert_eq!(written(&out), [3, 4]);
    assert_eq!(backup.persisted_view_state().log_view, 1);
    assert_eq!(committed(&out), [3]);
    assert_eq!(
        acked(&out),
        [2, 3, 4],
        "the head of its durable log, then each op as its write completes"
    );
}
