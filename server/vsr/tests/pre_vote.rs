//! The pre-vote: a replica that stops hearing from its primary (or whose view change stalls, or
//! whose rejoin finds no primary) first asks its peers whether they lost the primary too, and
//! moves to a new view only with a quorum of grants (its own included). A replica cut off from
//! its peers therefore keeps its view however long the cut lasts.

use iggy_vsr::{Action, Config, Message, Replica, ReplicaId, Status, ViewState};

mod support;
use support::*;

/// Drains the replica's actions as a shell with instant storage would (view states and
/// journal writes durable at once) and returns what it sends.
fn drain_durably(replica: &mut Replica) -> Vec<(ReplicaId, Message)> {
    let mut sent = Vec::new();
    for _ in 0..1_000 {
        let Some(action) = replica.poll_action() else {
            return sent;
        };
        match action {
            Action::Send { to, message } => sent.push((to, message)),
            Action::PersistView { state } => replica.on_view_persisted(state),
            Action::WritePrepare { op, .. } => replica.on_write_done(op),
            _ => {}
        }
    }
    panic!("the replica kept emitting actions");
}

fn grants(sent: &[(ReplicaId, Message)]) -> Vec<(ReplicaId, u32)> {
    sent.iter()
        .filter_map(|(to, message)| match message {
            Message::PreVoteGranted { view, .. } => Some((*to, *view)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_backup_cut_off_from_its_peers_never_raises_its_view() {
    let mut backup = Replica::new(Config::new(3, 1));
    let mut asked = 0;
    for now in 1..=10_000 {
        backup.on_tick(now);
        let sent = drain_durably(&mut backup);
        assert!(
            sent.iter()
                .all(|(_, message)| matches!(message, Message::PreVote { view: 1, .. })),
            "tick {now}: {sent:?}"
        );
        asked += pre_votes(&sent).len();
    }
    assert_eq!((backup.view(), backup.status()), (0, Status::Normal));
    assert_eq!(backup.persisted_view_state(), ViewState::default());
    // It keeps asking (every resend period, both peers), so it rejoins once the cut heals.
    let resend_ticks = backup.config().resend_ticks as usize;
    assert!(asked >= 2 * (10_000 - 33) / resend_ticks, "{asked}");
}

#[test]
fn a_stalled_view_change_asks_again_before_moving_on() {
    let mut backup = Replica::new(Config::new(3, 1));
    backup.on_tick(100);
    drain_durably(&mut backup);
    backup.on_message(
        2,
        Message::PreVoteGranted {
            view: 1,
            replica: 2,
        },
    );
    drain_durably(&mut backup);
    assert_eq!((backup.view(), backup.status()), (1, Status::ViewChange));
    // Then cut off: the view change never completes, and the view stays 1.
    for now in 101..=5_000 {
        backup.on_tick(now);
        let sent = drain_durably(&mut backup);
        assert!(
            pre_votes(&sent).iter().all(|(_, view)| *view == 2),
            "{sent:?}"
        );
    }
    assert_eq!((backup.view(), backup.status()), (1, Status::ViewChange));
    assert_eq!(backup.persisted_view_state().view, 1);
    // A grant for an earlier round counts for nothing; one for the round asked moves it on.
    backup.on_message(
        0,
        Message::PreVoteGranted {
            view: 1,
            replica: 0,
        },
    );
    assert_eq!(backup.view(), 1);
    backup.on_message(
        0,
        Message::PreVoteGranted {
            view: 2,
            replica: 0,
        },
    );
    assert_eq!((backup.view(), backup.status()), (2, Status::ViewChange));
}

#[test]
fn a_restarted_backup_whose_primary_stays_silent_asks_before_replacing_it() {
    let state = ViewState {
        view: 3,
        log_view: 3,
    };
    let mut restarted = Replica::open(Config::new(3, 1), entries(3, 2), state);
    assert_eq!(restarted.status(), Status::Recovering);
    let mut asked = Vec::new();
    for now in 1..=3_000 {
        restarted.on_tick(now);
        asked.extend(pre_votes(&drain_durably(&mut restarted)));
    }
    assert_eq!(
        (restarted.view(), restarted.status()),
        (3, Status::Recovering)
    );
    assert!(!asked.is_empty() && asked.iter().all(|(_, view)| *view == 4));
    restarted.on_message(
        2,
        Message::PreVoteGranted {
            view: 4,
            replica: 2,
        },
    );
    assert_eq!(
        (restarted.view(), restarted.status()),
        (4, Status::ViewChange)
    );
}

#[test]
fn a_pre_vote_is_refused_by_a_peer_that_still_hears_its_primary() {
    let mut backup = Replica::new(Config::new(3, 2));
    let heartbeat = Message::Commit {
        view: 0,
        commit: 0,
        checkpoint_safe: 0,
    };
    let asking = Message::PreVote {
        view: 1,
        replica: 1,
    };
    backup.on_tick(100);
    backup.on_message(0, heartbeat.clone());
    drain_durably(&mut backup);
    backup.on_tick(110);
    backup.on_message(1, asking.clone());
    assert_eq!(grants(&drain_durably(&mut backup)), []);
    // The primary itself never helps replace itself.
    let mut primary = Replica::new(Config::new(3, 0));
    primary.on_tick(10_000);
    drain_durably(&mut primary);
    primary.on_message(1, asking.clone());
    assert_eq!(grants(&drain_durably(&mut primary)), []);
    assert!(primary.is_primary());
    // Silent for the view-change timeout, the backup grants, and changes nothing itself.
    let timeout = backup.config().view_change_timeout_ticks;
    backup.on_tick(100 + timeout);
    drain_durably(&mut backup);
    backup.on_message(1, asking);
    assert_eq!(grants(&drain_durably(&mut backup)), [(1, 1)]);
    assert_eq!((backup.view(), backup.status()), (0, Status::Normal));
}

#[test]
fn a_quorum_of_grants_starts_the_view_change_and_the_group_moves_on() {
    // Three replicas; the primary of view 0 is gone. Replicas 1 and 2 talk to each other.
    let mut replicas = [
        Replica::new(Config::new(3, 1)),
        Replica::new(Config::new(3, 2)),
    ];
    let index = |replica: ReplicaId| usize::from(replica) - 1;
    for now in 1..=200 {
        let mut in_flight = Vec::new();
        for replica in &mut replicas {
            replica.on_tick(now);
            let from = replica.replica();
            in_flight.extend(drain_durably(replica).into_iter().map(|sent| (from, sent)));
        }
        // Delivered within the tick, and whatever they answer too; replica 0 hears nothing.
        while let Some((from, (to, message))) = in_flight.pop() {
            if to == 0 {
                continue;
            }
            let receiver = &mut replicas[index(to)];
            receiver.on_message(from, message);
            let answers = drain_durably(receiver);
            in_flight.extend(answers.into_iter().map(|sent| (to, sent)));
        }
        if replicas.iter().all(|replica| replica.view() == 1) {
            assert!(now >= 33, "not before replica 1's silence timeout ({now})");
            break;
        }
    }
    assert!(replicas[0].is_primary(), "replica 1 leads view 1");
    assert_eq!(
        (replicas[1].view(), replicas[1].status()),
        (1, Status::Normal)
    );
    assert_eq!(replicas[1].persisted_view_state().view, 1);
}

#[test]
fn five_replicas_need_two_grants_and_old_grants_expire() {
    let mut backup = Replica::new(Config::new(5, 1));
    backup.on_tick(100);
    drain(&mut backup);
    let grant = |replica| Message::PreVoteGranted { view: 1, replica };
    backup.on_message(2, grant(2));
    assert_eq!(backup.status(), Status::Normal, "two of five are no quorum");
    // A grant older than the view-change timeout no longer counts with a new one.
    let timeout = backup.config().view_change_timeout_ticks;
    backup.on_tick(100 + timeout);
    drain(&mut backup);
    backup.on_message(3, grant(3));
    assert_eq!(backup.status(), Status::Normal);
    backup.on_message(4, grant(4));
    assert_eq!((backup.view(), backup.status()), (1, Status::ViewChange));
}

/// A backup that stayed in its view through a cut (no view change, so no StartView with the
/// whole log) catches up by repair: one request per batch of prepares, not one per prepare
/// received, which would multiply the traffic until the links drop it.
#[test]
fn a_backup_back_from_a_cut_asks_for_each_batch_of_prepares_once() {
    let mut backup = Replica::new(Config::new(3, 1));
    let log = entries(0, 20);
    let requests = |sent: &[(ReplicaId, Message)]| -> Vec<u64> {
        sent.iter()
            .filter_map(|(_, message)| match message {
                Message::RequestPrepare { op, .. } => Some(*op),
                _ => None,
            })
            .collect()
    };
    backup.on_tick(1);
    let heartbeat = Message::Commit {
        view: 0,
        commit: 20,
        checkpoint_safe: 0,
    };
    backup.on_message(0, heartbeat.clone());
    assert_eq!(requests(&drain_durably(&mut backup)), [1]);
    let mut asked = Vec::new();
    for entry in &log[..8] {
        let prepare = Message::Prepare {
            view: 0,
            commit: 20,
            entry: entry.clone(),
        };
        backup.on_message(0, prepare);
        asked.extend(requests(&drain_durably(&mut backup)));
    }
    assert_eq!(asked, [9], "the next batch once this one is in");
    // A lost batch is asked for again after the resend period, not before.
    backup.on_message(0, heartbeat.clone());
    assert_eq!(requests(&drain_durably(&mut backup)), []);
    backup.on_tick(1 + backup.config().resend_ticks);
    backup.on_message(0, heartbeat);
    assert_eq!(requests(&drain_durably(&mut backup)), [9]);
    assert_eq!(backup.op(), 8);
}

/// A replica formatted fresh as the primary of its partition's creation view, after its peers
/// had moved that group on to a later view without it (it was down when the partition was
/// created), hears no backup: they drop its frames of an older view. When the primary of their
/// view dies too, the surviving backup's pre-vote names a view past the stale primary's next
/// one. Refused, the group could never change views again: the backup needs a second grant,
/// and the stale primary never leaves its view (seen in a seeded cluster history).
#[test]
fn a_primary_of_a_superseded_view_that_leads_no_quorum_grants_a_later_views_pre_vote() {
    let mut stale = Replica::format_in_view(Config::new(3, 2), 2);
    assert!(stale.is_primary());
    stale.on_tick(10_000);
    drain_durably(&mut stale);
    assert!(!stale.leads_quorum());
    stale.on_message(
        1,
        Message::PreVote {
            view: 4,
            replica: 1,
        },
    );
    assert_eq!(grants(&drain_durably(&mut stale)), [(1, 4)]);
    // Its own view's next one is still refused: a primary cut off from its group is not
    // replaced through itself (the existing rule above).
    stale.on_message(
        1,
        Message::PreVote {
            view: 3,
            replica: 1,
        },
    );
    assert_eq!(grants(&drain_durably(&mut stale)), []);
}

/// Ticks `replicas` (ids 1 and 2 of a group of three whose replica 0 is down) from `from` to
/// `to`, delivering every message between them at once and dropping those to replica 0.
fn run_without_replica_0(replicas: &mut [Replica; 2], ticks: std::ops::RangeInclusive<u64>) {
    for now in ticks {
        let mut in_flight = Vec::new();
        for replica in replicas.iter_mut() {
            replica.on_tick(now);
            let from = replica.replica();
            in_flight.extend(drain_durably(replica).into_iter().map(|(to, m)| (from, to, m)));
        }
        while let Some((from, to, message)) = in_flight.pop() {
            if to == 0 {
                continue;
            }
            let replica = &mut replicas[usize::from(to) - 1];
            replica.on_message(from, message);
            let sender = replica.replica();
            in_flight.extend(drain_durably(replica).into_iter().map(|(to, m)| (sender, to, m)));
        }
    }
}

/// A group created while its first primary's node is down: the backups waited out the silence
/// timeout (a heartbeat timeout of stalled first writes on every new partition led by the dead
/// node). Backups the shell told the primary is down (`suspect_primary`) ask for pre-votes at
/// their next tick and grant each other's, so they leave its view within a few ticks; told
/// nothing, they are still in it then.
#[test]
fn backups_told_their_new_groups_primary_is_down_leave_its_view_at_once() {
    let formatted = || [1, 2].map(|r| Replica::format_in_view(Config::new(3, r), 0));
    let mut untold = formatted();
    run_without_replica_0(&mut untold, 1..=5);
    assert!(untold.iter().all(|r| r.view() == 0), "without a word they wait");

    let mut told = formatted();
    for replica in &mut told {
        replica.suspect_primary();
    }
    run_without_replica_0(&mut told, 1..=5);
    assert!(
        told.iter().all(|r| r.view() >= 1),
        "views {:?}",
        told.iter().map(Replica::view).collect::<Vec<_>>()
    );
    assert!(told[0].config().view_change_timeout_ticks > 5);
}
