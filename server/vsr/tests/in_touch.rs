//! Whether a replica knows its view's primary alive: a primary leads only while a quorum
//! answers it (backups answer every Commit heartbeat), a backup only while it hears the primary.

use iggy_vsr::{Action, Config, Message, Replica, Status};

mod support;
use support::*;

/// Delivers every message between the replicas in `links` (pairs that can talk) until quiet.
fn exchange(replicas: &mut [Replica], links: &[(u8, u8)]) {
    while deliver_round(replicas, |a, b| {
        links.contains(&(a, b)) || links.contains(&(b, a))
    }) {}
}

/// One round: every replica's pending actions carried out, its messages delivered where
/// `passes(from, to)`. Returns whether anything moved.
fn deliver_round(replicas: &mut [Replica], passes: impl Fn(u8, u8) -> bool) -> bool {
    let mut moved = false;
    for from in 0..replicas.len() {
        for action in drain(&mut replicas[from]) {
            match action {
                Action::Send { to, message } if passes(from as u8, to) => {
                    replicas[usize::from(to)].on_message(from as u8, message);
                    moved = true;
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
    moved
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

/// Delivers the messages between the replicas along `directions` (sender, receiver) only,
/// until quiet: a one-way loss where a pair has one direction and not the other.
fn exchange_one_way(replicas: &mut [Replica], directions: &[(u8, u8)]) {
    while deliver_round(replicas, |a, b| directions.contains(&(a, b))) {}
}

/// Every direction between three replicas but those in `lost`.
fn directions_but(lost: &[(u8, u8)]) -> Vec<(u8, u8)> {
    (0..3u8)
        .flat_map(|a| (0..3u8).map(move |b| (a, b)))
        .filter(|&(a, b)| a != b && !lost.contains(&(a, b)))
        .collect()
}

/// A primary whose frames reach both backups but hears neither (its receive path is broken,
/// a one-way loss): it no longer leads a quorum, and its backups, which still hear it, must
/// not follow it forever. It goes quiet, they stop hearing it and elect another primary; once
/// it hears again it follows the new view.
#[test]
fn a_primary_that_hears_neither_backup_is_replaced_and_follows_once_it_hears_again() {
    let mut replicas = group_in_view_one();
    let timeout = Config::new(3, 0).view_change_timeout_ticks;
    let deaf = directions_but(&[(0, 1), (2, 1)]);
    let mut now = 0;
    for _ in 0..timeout * 8 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange_one_way(&mut replicas, &deaf);
    }
    assert!(!replicas[1].leads_quorum());
    for backup in [&replicas[0], &replicas[2]] {
        assert!(
            backup.in_touch() && backup.view() > 1 && backup.primary_of(backup.view()) != 1,
            "replica {} follows a primary other than replica 1 in a later view (view {}, \
             status {:?}, in touch {})",
            backup.replica(),
            backup.view(),
            backup.status(),
            backup.in_touch()
        );
    }
    let all = directions_but(&[]);
    for _ in 0..timeout * 4 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange_one_way(&mut replicas, &all);
    }
    let view = replicas[0].view();
    assert!(
        replicas
            .iter()
            .all(|r| r.view() == view && r.status() == Status::Normal && r.in_touch()),
        "every replica Normal in view {view}: {:?}",
        replicas
            .iter()
            .map(|r| (r.view(), r.status()))
            .collect::<Vec<_>>()
    );
}

/// A primary both backups stopped answering for longer than the view-change timeout (one is
/// down for good, the other was cut off both ways and comes back): it is quiet by then, yet
/// the group must lead a quorum again once the backup is back.
#[test]
fn a_primary_left_without_a_quorum_leads_again_once_a_backup_is_back() {
    let mut replicas = group_in_view_one();
    let timeout = Config::new(3, 0).view_change_timeout_ticks;
    let mut now = 0;
    for _ in 0..timeout * 4 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange_one_way(&mut replicas, &[]);
    }
    assert!(!replicas[1].leads_quorum());
    // Replica 2 stays away; replicas 0 and 1 hear each other again.
    let back = [(0, 1), (1, 0)];
    for _ in 0..timeout * 8 {
        now += 1;
        for replica in replicas.iter_mut().take(2) {
            replica.on_tick(now);
        }
        exchange_one_way(&mut replicas, &back);
    }
    let leader = replicas
        .iter()
        .take(2)
        .find(|r| r.leads_quorum())
        .map(Replica::replica);
    assert!(
        leader.is_some(),
        "replica 0 or 1 leads a quorum: {:?}",
        replicas
            .iter()
            .map(|r| (r.view(), r.status(), r.in_touch()))
            .collect::<Vec<_>>()
    );
}

/// A quiet primary that joins a view change for a view it would lead again is no longer the
/// Normal primary of anything: a pre-vote reaching it before its next tick is not answered
/// with a heartbeat of the view it is changing to.
#[test]
fn a_quiet_primary_in_a_view_change_sends_no_heartbeat() {
    let mut replicas = group_in_view_one();
    let timeout = Config::new(3, 0).view_change_timeout_ticks;
    let mut now = 0;
    for _ in 0..timeout * 3 {
        now += 1;
        replicas[1].on_tick(now);
        drain(&mut replicas[1]);
    }
    assert!(!replicas[1].leads_quorum());
    // The next view replica 1 leads again.
    let view = (2..).find(|&v| replicas[1].primary_of(v) == 1).unwrap();
    replicas[1].on_message(0, Message::StartViewChange { view, replica: 0 });
    assert_eq!(
        (replicas[1].view(), replicas[1].status()),
        (view, Status::ViewChange)
    );
    let view = view + 1;
    replicas[1].on_message(2, Message::PreVote { view, replica: 2 });
    // Its view state durable, whatever it holds for that goes out.
    let mut sent = Vec::new();
    loop {
        let actions = drain(&mut replicas[1]);
        if actions.is_empty() {
            break;
        }
        sent.extend(sends(&actions));
        for action in actions {
            if let Action::PersistView { state } = action {
                replicas[1].on_view_persisted(state);
            }
        }
    }
    let heartbeats: Vec<_> = sent
        .into_iter()
        .filter(|(_, message)| matches!(message, Message::Commit { .. }))
        .collect();
    assert!(heartbeats.is_empty(), "{heartbeats:?}");
}

/// After a restart of every replica each one's commit starts from its checkpoint, below ops
/// that committed (and were answered) before: the new view's primary is Normal and leads a
/// quorum before it committed them again. Until it applied the log its view started with it
/// must not count as serving reads (`applied_view_log`), or a reader would find older state
/// than it was answered before the restart; once the view's log is committed again, every
/// replica serves.
#[test]
fn after_a_restart_of_every_replica_none_serves_reads_before_applying_its_views_log() {
    let state = iggy_vsr::ViewState {
        view: 2,
        log_view: 2,
    };
    let mut replicas: Vec<Replica> = (0..3)
        .map(|r| {
            let mut replica = Replica::open(Config::new(3, r), entries(2, 3), state);
            settle(&mut replica);
            replica
        })
        .collect();
    assert!(replicas.iter().all(|r| r.commit_min() == 0));
    let mut seen_leading_before_applying = false;
    'ticks: for now in 1..=2_000 {
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        // One round of deliveries at a time, looking at the primary between them.
        loop {
            let moved = deliver_round(&mut replicas, |_, _| true);
            for replica in &replicas {
                if replica.status() == Status::Normal
                    && replica.leads_quorum()
                    && replica.commit_min() < 3
                {
                    seen_leading_before_applying = true;
                    assert!(
                        !replica.applied_view_log(),
                        "a primary that has not applied its view's log serves reads"
                    );
                }
            }
            if !moved {
                break;
            }
        }
        if replicas
            .iter()
            .all(|r| r.status() == Status::Normal && r.commit_min() == 3)
        {
            break 'ticks;
        }
    }
    assert!(
        seen_leading_before_applying,
        "the primary led before it applied its view's log"
    );
    assert!(
        replicas
            .iter()
            .all(|r| r.commit_min() == 3 && r.applied_view_log()),
        "every replica applied the view's log and serves"
    );
}

fn five_in_view_one() -> Vec<Replica> {
    (0..5)
        .map(|r| Replica::format_in_view(Config::new(5, r), 1))
        .collect()
}

/// Five replicas split into two (the primary, 1, and its backup 2) and three: the three elect
/// a new view, and the backup on the primary's side must not stay in touch with a primary
/// that leads no quorum (a client asking it for the route would be sent there, and refused,
/// over and over). The quiet primary answers its pre-votes with no heartbeat: one backup does
/// not make a quorum of five.
#[test]
fn a_backup_split_off_with_its_primary_from_a_quorum_of_five_is_not_in_touch() {
    let mut replicas = five_in_view_one();
    let timeout = Config::new(5, 0).view_change_timeout_ticks;
    let split = [(1, 2), (0, 3), (0, 4), (3, 4)];
    let mut now = 0;
    for _ in 0..timeout * 20 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &split);
        if now > timeout * 4 {
            assert!(!replicas[1].leads_quorum(), "tick {now}");
            assert!(
                !replicas[2].in_touch(),
                "tick {now}: replica 2 in touch with primary 1"
            );
        }
    }
    let leaders: Vec<u8> = [0, 3, 4]
        .iter()
        .filter(|&&r| replicas[r].leads_quorum())
        .map(|&r| r as u8)
        .collect();
    assert_eq!(leaders.len(), 1, "the three elect a primary: {leaders:?}");
}

/// The quiet primary of five whose backups come back two at once leads again: each asks it
/// in a pre-vote, and once the askers of the last view-change timeout make a quorum with it,
/// it answers them all with a heartbeat.
#[test]
fn a_quiet_primary_of_five_leads_again_once_two_backups_are_back() {
    let mut replicas = five_in_view_one();
    let timeout = Config::new(5, 0).view_change_timeout_ticks;
    let mut now = 0;
    for _ in 0..timeout * 4 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &[]);
    }
    assert!(!replicas[1].leads_quorum());
    // Replicas 3 and 4 stay away; 0, 1 and 2 hear each other again.
    let back = [(0, 1), (1, 2), (0, 2)];
    for _ in 0..timeout * 10 {
        now += 1;
        for replica in replicas.iter_mut().take(3) {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &back);
    }
    let leader = replicas
        .iter()
        .take(3)
        .find(|r| r.leads_quorum())
        .map(Replica::replica);
    assert!(
        leader.is_some(),
        "one of 0, 1 and 2 leads a quorum: {:?}",
        replicas
            .iter()
            .map(|r| (r.view(), r.status(), r.in_touch()))
            .collect::<Vec<_>>()
    );
}

/// `in_touch_until` names the tick `in_touch` lapses at unless the replica hears from its
/// peers first (the shell turns it into an instant): fixed while nothing is heard, 0 once it
/// lapsed, `u64::MAX` for a group of one.
#[test]
fn in_touch_until_is_the_tick_in_touch_lapses_at_when_nothing_is_heard() {
    let mut replicas = group_in_view_one();
    let all = [(0, 1), (1, 2), (0, 2)];
    let mut now = 0;
    for _ in 0..200 {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &all);
    }
    // Replica 1 leads view 1; replica 0 follows it.
    let untils = [replicas[0].in_touch_until(), replicas[1].in_touch_until()];
    assert!(
        untils.iter().all(|&until| until > now),
        "{untils:?} at {now}"
    );
    // From now on nobody hears anybody.
    while now <= untils[0].max(untils[1]) {
        now += 1;
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
        }
        exchange(&mut replicas, &[]);
        for (r, until) in [(0, untils[0]), (1, untils[1])] {
            let replica = &replicas[r];
            assert_eq!(replica.in_touch(), now < until, "replica {r} at {now}");
            let expected = if now < until { until } else { 0 };
            assert_eq!(replica.in_touch_until(), expected, "replica {r} at {now}");
        }
    }

    let mut solo = Replica::format_in_view(Config::new(1, 0), 0);
    solo.on_tick(1_000_000);
    assert!(solo.in_touch());
    assert_eq!(solo.in_touch_until(), u64::MAX);
}
