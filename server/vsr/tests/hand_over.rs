//! A group with a preferred primary (a partition's creation view spreads them over the nodes)
//! that another replica leads, after a failure, is handed back once the preferred replica is
//! caught up: the primary asks it to start the view change to the next view it leads.

use bytes::Bytes;
use iggy_vsr::{Action, Config, Message, OPERATION_REGISTER, Replica, Status};

mod support;
use support::*;

/// Replica 1 of three, primary of view 1 (its group prefers replica 0), having prepared a
/// register of client 9 that replica 2 acknowledged; replica 0 has acknowledged nothing.
fn leading_for_another() -> Replica {
    let config = Config {
        preferred_primary: Some(0),
        ..Config::new(3, 1)
    };
    let mut primary = Replica::format_in_view(config, 1);
    settle(&mut primary);
    primary.on_request(9, 0, OPERATION_REGISTER, Bytes::new());
    settle(&mut primary);
    let op = primary.op();
    primary.on_message(
        2,
        Message::PrepareOk {
            view: 1,
            op,
            checksum: primary.checksum_at(op).unwrap(),
            replica: 2,
        },
    );
    settle(&mut primary);
    assert_eq!(primary.commit_min(), op);
    primary
}

/// The view the primary asked replica 0 to take the group over in.
fn view_change_to(out: &[Action]) -> Option<u32> {
    sends(out)
        .into_iter()
        .find_map(|(to, message)| match message {
            Message::PrimaryTransfer { target_view, .. } if to == 0 => Some(target_view),
            _ => None,
        })
}

#[test]
fn the_primary_hands_the_group_to_its_preferred_replica_once_that_one_caught_up() {
    let mut primary = leading_for_another();
    let timeout = primary.config().view_change_timeout_ticks;
    let op = primary.op();
    let checksums: Vec<u64> = (0..=op)
        .map(|op| primary.checksum_at(op).unwrap())
        .collect();
    let ack = |op: u64| Message::PrepareOk {
        view: 1,
        op,
        checksum: checksums[op as usize],
        replica: 0,
    };
    // Replica 0 answers but lags behind: no hand-over, however long.
    for now in 1..=timeout * 3 {
        primary.on_message(0, ack(0));
        primary.on_tick(now);
        assert_eq!(view_change_to(&settle(&mut primary)), None, "tick {now}");
        assert_eq!(primary.status(), Status::Normal);
    }
    // Caught up: the next tick asks replica 0 to move the group to view 3, which it leads;
    // the primary itself stays in its view until that view change reaches it.
    primary.on_message(0, ack(op));
    primary.on_tick(timeout * 3 + 1);
    assert_eq!(view_change_to(&settle(&mut primary)), Some(3));
    assert_eq!((primary.status(), primary.view()), (Status::Normal, 1));
    // Asked again only after `resend_ticks`.
    let resend = primary.config().resend_ticks;
    primary.on_message(0, ack(op));
    primary.on_tick(timeout * 3 + 2);
    assert_eq!(view_change_to(&settle(&mut primary)), None);
    primary.on_message(0, ack(op));
    primary.on_tick(timeout * 3 + 1 + resend);
    assert_eq!(view_change_to(&settle(&mut primary)), Some(3));
    // Replica 0's StartViewChange for view 3 moves the old primary along.
    primary.on_message(
        0,
        Message::StartViewChange {
            view: 3,
            replica: 0,
        },
    );
    settle(&mut primary);
    assert_eq!((primary.status(), primary.view()), (Status::ViewChange, 3));
}

#[test]
fn the_preferred_replica_starts_the_view_change_its_primary_asks_for_and_nobody_else_does() {
    // Replica 0, a Normal backup of view 1 (primary 1).
    let backup = || {
        let mut backup = Replica::format_in_view(Config::new(3, 0), 1);
        settle(&mut backup);
        backup
    };
    let transfer = |view: u32, target_view: u32, target: u8| Message::PrimaryTransfer {
        view,
        target_view,
        target,
        replica: 1,
    };
    // From the primary of its view, for a view it leads: it starts that view change.
    let mut replica = backup();
    replica.on_message(1, transfer(1, 3, 0));
    let out = settle(&mut replica);
    assert_eq!((replica.status(), replica.view()), (Status::ViewChange, 3));
    let votes = sends(&out);
    assert!(
        votes
            .iter()
            .any(|(_, m)| matches!(m, Message::StartViewChange { view: 3, .. }))
    );
    // Not from a backup, for a stale view, for a view another replica leads, or for another
    // target.
    let refused = [
        (2, transfer(1, 3, 0)),
        (1, transfer(0, 3, 0)),
        (1, transfer(1, 4, 0)),
        (1, transfer(1, 3, 2)),
    ];
    for (from, message) in refused {
        let mut replica = backup();
        replica.on_message(from, message.clone());
        settle(&mut replica);
        let state = (replica.status(), replica.view());
        assert_eq!(state, (Status::Normal, 1), "from {from}: {message:?}");
    }
}

#[test]
fn a_primary_leads_for_a_view_change_timeout_before_it_hands_over() {
    let mut primary = leading_for_another();
    let timeout = primary.config().view_change_timeout_ticks;
    let op = primary.op();
    for now in 1..timeout {
        primary.on_message(
            0,
            Message::PrepareOk {
                view: 1,
                op,
                checksum: primary.checksum_at(op).unwrap(),
                replica: 0,
            },
        );
        primary.on_tick(now);
        assert_eq!(view_change_to(&settle(&mut primary)), None, "tick {now}");
    }
    primary.on_message(
        0,
        Message::PrepareOk {
            view: 1,
            op,
            checksum: primary.checksum_at(op).unwrap(),
            replica: 0,
        },
    );
    primary.on_tick(timeout);
    assert_eq!(view_change_to(&settle(&mut primary)), Some(3));
}

#[test]
fn without_a_preference_or_as_the_preferred_replica_the_primary_keeps_leading() {
    for preferred in [None, Some(1)] {
        let config = Config {
            preferred_primary: preferred,
            ..Config::new(3, 1)
        };
        let mut primary = Replica::format_in_view(config, 1);
        settle(&mut primary);
        for now in 1..=200 {
            primary.on_message(
                0,
                Message::PrepareOk {
                    view: 1,
                    op: 0,
                    checksum: 0,
                    replica: 0,
                },
            );
            primary.on_tick(now);
            assert_eq!(view_change_to(&settle(&mut primary)), None, "{preferred:?}");
        }
        assert_eq!((primary.status(), primary.view()), (Status::Normal, 1));
    }
}

/// Replica 1, primary of view 1 of three, with one committed op that `acked` acknowledged.
fn primary_acked_by(acked: &[u8]) -> Replica {
    let mut primary = Replica::format_in_view(Config::new(3, 1), 1);
    settle(&mut primary);
    primary.on_request(9, 0, OPERATION_REGISTER, Bytes::new());
    settle(&mut primary);
    let op = primary.op();
    for &replica in acked {
        primary.on_message(
            replica,
            Message::PrepareOk {
                view: 1,
                op,
                checksum: primary.checksum_at(op).unwrap(),
                replica,
            },
        );
    }
    settle(&mut primary);
    primary
}

/// The replica asked to take the group over, and in which view.
fn transfers(out: &[Action]) -> Vec<(u8, u32)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, message)| match message {
            Message::PrimaryTransfer { target_view, .. } => Some((to, target_view)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_primary_stepping_down_hands_the_group_to_its_most_caught_up_backup() {
    // Only replica 2 acknowledged the op: it takes view 2 (which it leads).
    let mut primary = primary_acked_by(&[2]);
    assert_eq!(primary.step_down(), Some(2));
    assert_eq!(transfers(&settle(&mut primary)), [(2, 2)]);
    // The primary keeps its view until the view change reaches it.
    assert_eq!((primary.status(), primary.view()), (Status::Normal, 1));
    // Both acknowledged it: the lowest id, replica 0, which leads view 3.
    let mut primary = primary_acked_by(&[2, 0]);
    assert_eq!(primary.step_down(), Some(0));
    assert_eq!(transfers(&settle(&mut primary)), [(0, 3)]);

    // The backup asked starts the view change at once, as it does for a hand-over.
    let mut backup = Replica::format_in_view(Config::new(3, 2), 1);
    settle(&mut backup);
    backup.on_message(
        1,
        Message::PrimaryTransfer {
            view: 1,
            target_view: 2,
            target: 2,
            replica: 1,
        },
    );
    settle(&mut backup);
    assert_eq!((backup.status(), backup.view()), (Status::ViewChange, 2));
}

#[test]
fn only_a_normal_primary_that_heard_a_backup_steps_down() {
    // A backup, and a replica changing views, lead nothing.
    let mut backup = Replica::format_in_view(Config::new(3, 0), 1);
    settle(&mut backup);
    assert_eq!(backup.step_down(), None);
    let mut changing = primary_acked_by(&[2]);
    changing.on_message(
        2,
        Message::StartViewChange {
            view: 2,
            replica: 2,
        },
    );
    settle(&mut changing);
    assert_eq!(changing.status(), Status::ViewChange);
    assert_eq!(changing.step_down(), None);
    // A group of one has nobody to hand over to.
    let mut solo = Replica::open(
        Config::new(1, 0),
        Vec::new(),
        iggy_vsr::ViewState::default(),
    );
    settle(&mut solo);
    assert_eq!(solo.step_down(), None);
    // Backups not heard for two heartbeats (a view counts every backup heard as it starts)
    // no longer count: nobody to hand the group to.
    let mut stale = primary_acked_by(&[2]);
    let heartbeat = stale.config().heartbeat_ticks;
    stale.on_tick(heartbeat * 2);
    settle(&mut stale);
    assert_eq!(stale.step_down(), None);
}

/// A primary that keeps stepping down (its node cannot judge grants, so it asks every
/// maintenance pass) while the backup it asked takes nothing over (that node declines too, and
/// with no write admitted the acknowledgements stay tied) asks the next backup the next time,
/// not the same one forever: a three-node cluster whose links are slower than a grant lease
/// lasts left one partition refusing every write for as long as that lasted.
#[test]
fn a_primary_stepping_down_again_in_the_same_view_asks_the_backup_it_did_not_ask() {
    let mut primary = primary_acked_by(&[2, 0]);
    let mut asked = Vec::new();
    for _ in 0..4 {
        asked.push(primary.step_down().expect("a backup to ask"));
        settle(&mut primary);
        assert_eq!((primary.status(), primary.view()), (Status::Normal, 1));
    }
    assert_eq!(asked, [0, 2, 0, 2]);
    // With one backup heard, that one is asked every time.
    let mut fresh = primary_acked_by(&[2]);
    assert_eq!(fresh.step_down(), Some(2));
    assert_eq!(
        fresh.step_down(),
        Some(2),
        "the only backup heard is asked again"
    );
}

/// A replica whose node declines to lead (it cannot judge its clients' grants) takes no group
/// handed to it, whoever asks; once it no longer declines, the same request moves the group.
#[test]
fn a_replica_that_declines_to_lead_takes_no_group_handed_to_it() {
    let mut replica = Replica::format_in_view(Config::new(3, 0), 1);
    settle(&mut replica);
    let transfer = Message::PrimaryTransfer {
        view: 1,
        target_view: 3,
        target: 0,
        replica: 1,
    };
    replica.set_declines_to_lead(true);
    replica.on_message(1, transfer.clone());
    let out = settle(&mut replica);
    assert_eq!((replica.status(), replica.view()), (Status::Normal, 1));
    assert!(sends(&out).is_empty(), "{out:?}");
    replica.set_declines_to_lead(false);
    replica.on_message(1, transfer);
    settle(&mut replica);
    assert_eq!((replica.status(), replica.view()), (Status::ViewChange, 3));
}
