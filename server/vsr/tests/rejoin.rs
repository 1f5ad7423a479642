//! The durable view: no message naming a view leaves before the view state is persisted, and a
//! restarted replica rejoins from its persisted view as a backup.

use bytes::Bytes;
use iggy_vsr::{Action, Config, Entry, Log, Message, Replica, Status, ViewState};

mod support;
use support::*;

#[test]
fn a_vote_for_a_new_view_waits_until_the_view_is_persisted() {
    let mut replica = Replica::new(Config::new(3, 1));
    replica.on_tick(1_000);
    drain(&mut replica);
    let granted = Message::PreVoteGranted {
        view: 1,
        replica: 2,
    };
    replica.on_message(2, granted);
    let out = drain(&mut replica);
    assert_eq!(replica.status(), Status::ViewChange);
    assert_eq!(
        out,
        [Action::PersistView {
            state: ViewState {
                view: 1,
                log_view: 0
            }
        }],
        "the vote for view 1 is held until the view is durable"
    );
    let state = ViewState {
        view: 1,
        log_view: 0,
    };
    replica.on_view_persisted(state);
    let out = drain(&mut replica);
    let votes = sends(&out);
    assert_eq!(votes.len(), 2, "{out:?}");
    assert!(votes.iter().all(|(_, m)| matches!(
        m,
        Message::StartViewChange {
            view: 1,
            replica: 1
        }
    )));
    assert_eq!(replica.persisted_view_state(), state);
}

#[test]
fn a_restarted_primary_does_not_resume_its_view() {
    let state = ViewState {
        view: 3,
        log_view: 3,
    };
    // Replica 0 was the primary of view 3 in a group of three.
    let mut replica = Replica::open(Config::new(3, 0), entries(3, 4), state);
    assert_eq!(replica.status(), Status::ViewChange);
    assert_eq!(replica.view(), 4);
    let out = drain(&mut replica);
    assert_eq!(
        out,
        [Action::PersistView {
            state: ViewState {
                view: 4,
                log_view: 3
            }
        }]
    );
}

#[test]
fn a_restarted_backup_acks_nothing_until_the_start_view_and_its_persisted_log_view() {
    let state = ViewState {
        view: 2,
        log_view: 2,
    };
    let journal = entries(2, 3);
    let mut replica = Replica::open(Config::new(3, 1), journal.clone(), state);
    assert_eq!(replica.status(), Status::Recovering);
    let out = drain(&mut replica);
    // Asked of every peer: the primary of view 2 answers; the primary of a lower view, if the
    // group never joined view 2, moves it past.
    let ask = Message::RequestStartView {
        view: 2,
        replica: 1,
    };
    assert_eq!(sends(&out), [(0, ask.clone()), (2, ask)]);
    // A Prepare of a later view is not acked: it asks that primary for its StartView.
    let mut later = entries(5, 4);
    later[3] = Entry::new(4, 5, 9, 4, 5, Bytes::from_static(b"new"));
    replica.on_message(
        2,
        Message::Prepare {
            view: 5,
            commit: 0,
            entry: later[3].clone(),
        },
    );
    let out = drain(&mut replica);
    assert!(
        sends(&out)
            .iter()
            .all(|(_, m)| matches!(m, Message::RequestStartView { view: 5, .. })),
        "{out:?}"
    );
    // The StartView of view 5 (primary 2): its log keeps ops 1..=3 and adds op 4.
    let mut log_entries = journal.clone();
    log_entries.push(later[3].clone());
    replica.on_message(
        2,
        Message::StartView {
            view: 5,
            commit: 2,
            log: Log::of_entries(0, 0, &log_entries),
        },
    );
    assert_eq!(replica.status(), Status::Normal);
    // The log carries headers: op 4's body is asked of the primary once view 5 is durable (the
    // log view stays 2 until the log of view 5 is held whole).
    let entered = ViewState {
        view: 5,
        log_view: 2,
    };
    assert_eq!(
        drain(&mut replica),
        [Action::PersistView { state: entered }]
    );
    replica.on_view_persisted(entered);
    assert_eq!(
        sends(&drain(&mut replica)),
        [(
            2,
            Message::RequestPrepare {
                view: 5,
                op: 4,
                replica: 1
            }
        )]
    );
    replica.on_message(
        2,
        Message::Prepare {
            view: 5,
            commit: 2,
            entry: later[3].clone(),
        },
    );
    let out = drain(&mut replica);
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::WritePrepare { op: 4, .. })),
        "{out:?}"
    );
    assert!(
        !out.iter().any(|a| matches!(a, Action::Send { .. })),
        "no PrepareOk before view 5 is durable: {out:?}"
    );
    let persisted = ViewState {
        view: 5,
        log_view: 5,
    };
    assert_eq!(
        out.last(),
        Some(&Action::PersistView { state: persisted }),
        "the view state comes after the journal write it names"
    );
    replica.on_view_persisted(persisted);
    let out = drain(&mut replica);
    let acks: Vec<u64> = sends(&out)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Message::PrepareOk { view: 5, op, .. } if to == 2 => Some(op),
            _ => None,
        })
        .collect();
    assert_eq!(
        acks,
        [3],
        "only durable, uncommitted ops are acked: {out:?}"
    );
    replica.on_write_done(4);
    let out = drain(&mut replica);
    assert!(
        sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, Message::PrepareOk { view: 5, op: 4, .. })),
        "{out:?}"
    );
}

#[test]
fn a_group_formatted_in_a_view_is_led_by_that_views_primary_once_the_view_is_durable() {
    // Created in view 4 of three replicas: replica 1 leads, the others follow at once.
    let mut primary = Replica::format_in_view(Config::new(3, 1), 4);
    let backup = Replica::format_in_view(Config::new(3, 2), 4);
    assert!(primary.is_primary() && !backup.is_primary());
    assert_eq!(
        (primary.status(), backup.status()),
        (Status::Normal, Status::Normal)
    );
    primary.on_request(7, 0, iggy_vsr::OPERATION_REGISTER, Bytes::new());
    let out = drain(&mut primary);
    let state = ViewState {
        view: 4,
        log_view: 4,
    };
    assert!(
        out.contains(&Action::PersistView { state }),
        "the view is made durable first: {out:?}"
    );
    assert!(sends(&out).is_empty(), "no prepare before it: {out:?}");
    primary.on_view_persisted(state);
    let prepares = sends(&drain(&mut primary));
    assert!(
        prepares
            .iter()
            .any(|(_, m)| matches!(m, Message::Prepare { view: 4, .. })),
        "{prepares:?}"
    );
}

/// A replica that persisted a view the others never joined (its view change votes were lost,
/// then it restarted) can never return to a lower view: the primary of the group's view, asked
/// for a later view's StartView, moves the group past it while keeping its role, and the
/// replica joins that view change.
#[test]
fn a_replica_ahead_of_the_group_s_view_is_caught_up_by_the_primary() {
    // Replica 2 leads view 2 (of three) with a committed log.
    let mut primary = Replica::format_in_view(Config::new(3, 2), 2);
    settle(&mut primary);
    // Replica 1 restarted in view 3 (primary 0), which nobody else entered.
    let state = ViewState {
        view: 3,
        log_view: 2,
    };
    let mut ahead = Replica::open(Config::new(3, 1), Vec::new(), state);
    let asks = sends(&drain(&mut ahead));
    let (_, ask) = asks
        .into_iter()
        .find(|(to, _)| *to == 2)
        .expect("the restarted replica asks every peer, the primary of view 2 too");
    primary.on_message(1, ask);
    let votes = sends(&settle(&mut primary));
    // View 5 is the next view replica 2 leads.
    assert_eq!(primary.status(), Status::ViewChange);
    assert_eq!(primary.view(), 5);
    let vote = votes
        .iter()
        .find(|(to, _)| *to == 1)
        .map(|(_, message)| message.clone())
        .expect("a StartViewChange for view 5 to the replica ahead");
    assert!(matches!(vote, Message::StartViewChange { view: 5, .. }));
    ahead.on_message(2, vote);
    settle(&mut ahead);
    assert_eq!((ahead.status(), ahead.view()), (Status::ViewChange, 5));
}
