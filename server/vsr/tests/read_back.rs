//! A replica of a group of more than one releases committed bodies from memory once applied;
//! a peer that still needs one (a lagging backup's repair) gets it read back from the journal
//! (`Action::ReadBack`), and only the entry the replica holds at that op is sent.

use bytes::Bytes;
use iggy_vsr::{Action, Config, Entry, Message, OPERATION_REGISTER, ReadBack, Replica};

mod support;
use support::*;

/// Primary 0 of three in view 0 that committed and applied a register of client 9 and two of
/// its requests, backup 1 acknowledging each; backup 2 heard nothing. Returns it with the ops
/// of the two requests.
fn primary_with_committed_requests() -> (Replica, [u64; 2]) {
    let mut primary = Replica::format_in_view(Config::new(3, 0), 0);
    settle(&mut primary);
    let mut ops = [0; 2];
    for request in 0..=2u64 {
        let (operation, body) = match request {
            0 => (OPERATION_REGISTER, Bytes::new()),
            _ => (5, Bytes::from(format!("body {request}"))),
        };
        primary.on_request(9, request, operation, body);
        settle(&mut primary);
        let op = primary.op();
        primary.on_message(
            1,
            Message::PrepareOk {
                view: 0,
                op,
                checksum: primary.checksum_at(op).unwrap(),
                replica: 1,
            },
        );
        settle(&mut primary);
        assert_eq!(primary.commit_min(), op, "request {request} committed");
        if request > 0 {
            ops[request as usize - 1] = op;
        }
    }
    (primary, ops)
}

fn prepares_to(out: &[Action], to: u8) -> Vec<Entry> {
    sends(out)
        .into_iter()
        .filter(|(target, _)| *target == to)
        .filter_map(|(_, message)| match message {
            Message::Prepare { entry, .. } => Some(entry),
            _ => None,
        })
        .collect()
}

#[test]
fn a_released_body_is_read_back_for_a_lagging_backup() {
    let (mut primary, [first, second]) = primary_with_committed_requests();
    let register = first - 1;
    let held = |primary: &Replica, op: u64| primary.entry(op).unwrap().clone();
    let (register_entry, first_entry, second_entry) = (
        held(&primary, register),
        held(&primary, first),
        held(&primary, second),
    );
    primary.release_committed_bodies();
    assert!(
        primary.entry(first).unwrap().body.is_empty(),
        "the request's body left memory"
    );
    assert_eq!(
        primary.entry(register).unwrap().body,
        register_entry.body,
        "a register keeps its body"
    );

    let ask = Message::RequestPrepare {
        view: 0,
        op: register,
        replica: 2,
    };
    primary.on_message(2, ask.clone());
    let out = drain(&mut primary);
    // The register goes at once; the released ops wait for their read-back, asked once each.
    assert_eq!(prepares_to(&out, 2), std::slice::from_ref(&register_entry));
    let reads: Vec<u64> = out
        .iter()
        .filter_map(|action| match action {
            Action::ReadBack { op } => Some(*op),
            _ => None,
        })
        .collect();
    assert_eq!(reads, [first, second]);
    // Asked again before the read finished: no second read.
    primary.on_message(2, ask);
    let again = drain(&mut primary);
    assert!(
        !again.iter().any(|a| matches!(a, Action::ReadBack { .. })),
        "{again:?}"
    );

    // A record that is not the entry held at that op (another body) is not sent.
    let forged = Entry::new(second, 0, 9, 2, 5, Bytes::from_static(b"another body"));
    primary.on_read_back(second, ReadBack::Read(forged));
    assert!(prepares_to(&drain(&mut primary), 2).is_empty());
    // An unreadable record sends nothing either; the backup asks again.
    primary.on_read_back(first, ReadBack::Unreadable);
    assert!(prepares_to(&drain(&mut primary), 2).is_empty());

    primary.on_message(
        2,
        Message::RequestPrepare {
            view: 0,
            op: first,
            replica: 2,
        },
    );
    let out = drain(&mut primary);
    assert!(out.contains(&Action::ReadBack { op: first }));
    assert!(out.contains(&Action::ReadBack { op: second }));
    primary.on_read_back(second, ReadBack::Read(second_entry.clone()));
    primary.on_read_back(first, ReadBack::Read(first_entry.clone()));
    assert_eq!(
        prepares_to(&drain(&mut primary), 2),
        [second_entry, first_entry]
    );
}
