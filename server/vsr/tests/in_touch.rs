//! Whether a replica knows its view's primary alive: a primary leads only while a quorum
//! answers it (backups answer every Commit heartbeat), a backup only while it hears the primary.

use iggy_vsr::{Action, Config, Message, Replica};

mod support;
use support::*;

/// Delivers every message between the replicas in `links` (pairs that can talk) until quiet.
fn exchange(replicas: &mut [Replica], links: &[(u8, u8)]) {
    loop {
        let mut moved = false;
        for from in 0..replicas.len() {
            for action in drain(&mut replicas[from]) {
                match action {
                    Action::Send { to, message } => {
                        let (a, b) = (from as u8, to);
                        if links.contains(&(a, b)) || links.contains(&(b, a)) {
                            replicas[usize::from(to)].on_message(from as u8, message);
                            moved = true;
                        }
                    }
                    Action::PersistView { state } => {
                        replicas[from].on_view_persisted(state);
                        moved = true;
                    }
                    Action::WritePrepare { op, .. } => {
                        replicas[from].on_write_done(op);
                        moved = true;
                    }
                    _ => {}
                }
            }
        }
        if !moved {
            return;
        }
    }
}

fn group_in_view_one() -> Vec<Replica> {
    // Formatted in view 1: replica 1 leads.
    (0..3)
        .map(|r| Replica::format_in_view(Config::new(3, r), 1))
        .collect()
}

#[test]
fn an_idle_primary_answered_by_its_backups_keeps_leading() {
    let mut replicas = group_in_view_one();
    let all = [(0, 1), (1, 2), (0, 2)];
    for now in (1..=2_000).step_by(5) {
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &all);
        assert!(replicas[1].leads_quorum(), "tick {now}");
        assert!(replicas.iter().all(Replica::in_touch), "tick {now}");
    }
}

#[test]
fn a_primary_cut_off_from_its_backups_stops_claiming_to_lead() {
    let mut replicas = group_in_view_one();
    let timeout = Config::new(3, 0).view_change_timeout_ticks;
    // Replica 1 (the primary) hears nobody; the backups still hear each other.
    for now in 1..=timeout + 10 {
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &[(0, 2)]);
    }
    assert!(replicas[1].is_primary(), "nobody told it otherwise");
    assert!(!replicas[1].leads_quorum() && !replicas[1].in_touch());
    // The backups stopped hearing it too: neither names it as a live primary (they may have
    // moved on to a view of their own).
    for backup in [&replicas[0], &replicas[2]] {
        let names_it = backup.in_touch() && backup.primary_of(backup.view()) == 1;
        assert!(
            !names_it,
            "replica {} still follows replica 1",
            backup.replica()
        );
    }
}

/// A primary a quorum answers never grants a pre-vote, not even one naming a view past its
/// next (a primary grants those only while no quorum is in touch with it: pre_vote.rs).
#[test]
fn a_primary_that_leads_a_quorum_refuses_even_a_later_views_pre_vote() {
    let mut replicas: Vec<Replica> = (0..3)
        .map(|r| Replica::format_in_view(Config::new(3, r), 2))
        .collect();
    let all = [(0, 1), (1, 2), (0, 2)];
    for now in (1..=200).step_by(5) {
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &all);
    }
    assert!(replicas[2].leads_quorum());
    replicas[2].on_message(
        1,
        Message::PreVote {
            view: 4,
            replica: 1,
        },
    );
    let granted = drain(&mut replicas[2]).into_iter().any(|action| {
        matches!(
            action,
            Action::Send {
                message: Message::PreVoteGranted { .. },
                ..
            }
        )
    });
    assert!(!granted, "a primary leading a quorum helped replace itself");
}
