//! A replica opened restored (`Config::restored`: its data directory was restored from a copy
//! or replaced) may lack ops it acknowledged and views it voted in, so it votes in no view
//! change until it holds its view's log from the primary through the commit announced to it.

use iggy_vsr::{Config, Entry, Log, Message, Replica, Status, ViewState};

mod support;
use support::*;

/// Replica 1 of three, restarted in view 2 (primary 2, which is gone) with ops 1..=2 of that
/// view: the copy it was restored from, or its own journal after a plain restart.
fn reopened(restored: bool) -> Replica {
    let mut config = Config::new(3, 1);
    config.restored = restored;
    let state = ViewState {
        view: 2,
        log_view: 2,
    };
    let mut replica = Replica::open(config, entries(2, 2), state);
    settle(&mut replica);
    replica
}

/// What `replica` sends after a peer asks it for a pre-vote, votes for view 3 and sends it a
/// DoViewChange for view 4 (which replica 1 would lead), and after its own timeouts pass.
fn votes(replica: &mut Replica) -> Vec<Message> {
    let mut sent = Vec::new();
    replica.on_message(
        0,
        Message::PreVote {
            view: 3,
            replica: 0,
        },
    );
    sent.extend(sends(&settle(replica)));
    replica.on_message(
        0,
        Message::StartViewChange {
            view: 3,
            replica: 0,
        },
    );
    sent.extend(sends(&settle(replica)));
    replica.on_tick(10_000);
    sent.extend(sends(&settle(replica)));
    sent.into_iter()
        .map(|(_, message)| message)
        .filter(|message| {
            matches!(
                message,
                Message::PreVote { .. }
                    | Message::PreVoteGranted { .. }
                    | Message::StartViewChange { .. }
                    | Message::DoViewChange { .. }
            )
        })
        .collect()
}

#[test]
fn a_restarted_replica_votes_and_a_restored_one_does_not() {
    let mut restarted = reopened(false);
    assert!(!restarted.is_muted());
    assert!(
        !votes(&mut restarted).is_empty(),
        "a plain restart takes part in view changes"
    );

    let mut restored = reopened(true);
    assert!(restored.is_muted());
    let sent = votes(&mut restored);
    assert!(sent.is_empty(), "a restored replica voted: {sent:?}");
    assert_eq!(
        (restored.status(), restored.view()),
        (Status::Recovering, 2)
    );
}

#[test]
fn a_restored_replica_votes_again_once_it_holds_the_log_through_the_announced_commit() {
    let mut replica = reopened(true);
    // Ops 1..=4 of view 3, led by replica 0, which committed through 4.
    let log: Vec<Entry> = entries(3, 4);
    replica.on_message(
        0,
        Message::StartView {
            view: 3,
            commit: 4,
            log: Log::of_entries(0, 0, &log),
        },
    );
    // The log arrives as headers: the bodies are asked for, and until they are written the
    // replica is muted.
    let out = settle(&mut replica);
    assert_eq!(replica.status(), Status::Normal);
    assert!(replica.is_muted(), "muted before it holds the log: {out:?}");
    for entry in &log {
        replica.on_message(
            0,
            Message::Prepare {
                view: 3,
                commit: 4,
                entry: entry.clone(),
            },
        );
        settle(&mut replica);
    }
    assert!(
        !replica.is_muted(),
        "it holds ops 1..=4 durably, through the commit announced"
    );
    // It votes again: a peer's StartViewChange for view 4 (its own) draws its vote.
    replica.on_message(
        2,
        Message::StartViewChange {
            view: 4,
            replica: 2,
        },
    );
    let sent = sends(&settle(&mut replica));
    assert!(
        sent.iter()
            .any(|(_, m)| matches!(m, Message::StartViewChange { view: 4, .. })),
        "{sent:?}"
    );
}

#[test]
fn a_restored_replica_whose_journal_already_holds_the_view_log_votes_once_it_is_installed() {
    let mut replica = reopened(true);
    replica.on_message(
        0,
        Message::StartView {
            view: 3,
            commit: 2,
            log: Log::of_entries(0, 0, &entries(2, 2)),
        },
    );
    settle(&mut replica);
    assert_eq!(replica.status(), Status::Normal);
    assert!(!replica.is_muted());
}

#[test]
fn a_restored_replica_formatted_as_the_primary_of_its_view_leads_nothing() {
    let mut config = Config::new(3, 2);
    config.restored = true;
    let mut replica = Replica::format_in_view(config.clone(), 2);
    assert_eq!(replica.status(), Status::Recovering);
    assert!(!replica.is_primary());
    replica.on_request(7, 1, 5, bytes::Bytes::from_static(b"w"));
    let out = settle(&mut replica);
    assert!(
        !out.iter()
            .any(|a| matches!(a, iggy_vsr::Action::WritePrepare { .. })),
        "{out:?}"
    );
    // Formatted as a backup it follows its primary as any backup does.
    let backup = Replica::format_in_view(config, 1);
    assert_eq!(backup.status(), Status::Normal);
    assert!(backup.is_muted());
}
