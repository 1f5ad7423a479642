//! A replica restarts with journal records whose bodies its state machine retired before the
//! crash (a partition's journal keeps a short stand-in for a batch written to its log, and a
//! later segment deletion removed the batch): the shell opens it with those stand-ins as the
//! bodies, which do not rebuild the entries' checksums. The replica must never send such a body
//! as the op's (its peers would refuse it as forged): when it leads and a peer needs the op, it
//! answers as for any retired body.

use bytes::Bytes;
use iggy_vsr::{Action, Message};

mod support;
use support::*;

/// The prepares among `out` whose bodies do not rebuild their entries' checksums.
fn forged_prepares(out: &[Action]) -> Vec<(u8, u64)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, message)| match message {
            Message::Prepare { entry, .. } if !entry.is_valid() => Some((to, entry.op)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_restarted_primary_never_sends_a_stand_in_as_the_body_of_an_op() {
    let log = registered_log(0, 3);
    // Replica 1 journaled op 3's batch in its log, which a retirement then deleted.
    let mut restarted_log = log.clone();
    restarted_log[2].body = Bytes::from_static(b"stand-in");
    assert!(!restarted_log[2].is_valid());
    let mut primary = voting_for_view_1(1, &restarted_log);
    // Replica 2 lags: it holds ops 1..=2.
    let mut backup = voting_for_view_1(2, &log[..2]);
    let votes = settle(&mut backup);
    settle(&mut primary);
    deliver(2, &votes, &mut primary);
    let mut sent = settle(&mut primary);
    assert!(primary.is_primary(), "replica 1 leads view 1: {sent:?}");
    // The backup takes the new view and repairs the op it lacks from the primary.
    deliver(1, &sent, &mut backup);
    let asks = settle(&mut backup);
    assert!(
        sends(&asks)
            .iter()
            .any(|(to, m)| *to == 1 && matches!(m, Message::RequestPrepare { op: 3, .. })),
        "the backup asks for op 3: {asks:?}"
    );
    deliver(2, &asks, &mut primary);
    sent.extend(settle(&mut primary));
    // The primary's pipeline resends its uncommitted ops to the replicas that did not ack.
    for now in [10, 20, 30] {
        primary.on_tick(now);
        sent.extend(settle(&mut primary));
    }
    assert_eq!(forged_prepares(&sent), [], "{sent:?}");
    // A whole op is still served: the backup's repair of op 2 from the primary is answered.
    primary.on_message(
        2,
        Message::RequestPrepare {
            view: 1,
            op: 2,
            replica: 2,
        },
    );
    let served = settle(&mut primary);
    assert!(
        sends(&served)
            .iter()
            .any(|(to, m)| *to == 2
                && matches!(m, Message::Prepare { entry, .. } if *entry == log[1])),
        "{served:?}"
    );
    assert_eq!(forged_prepares(&served), []);
    // Once op 3 commits (replica 0 holds it), the backup's repair of it is answered as for a
    // retired body: the primary wants a checkpoint past it (then sends its log, and the
    // backup turns to state transfer).
    assert_eq!(primary.checkpoint_wanted(), None);
    for entry in &log {
        primary.on_message(
            0,
            Message::PrepareOk {
                view: 1,
                op: entry.op,
                checksum: entry.checksum,
                replica: 0,
            },
        );
    }
    settle(&mut primary);
    assert_eq!(primary.commit_min(), 3);
    primary.on_message(
        2,
        Message::RequestPrepare {
            view: 1,
            op: 3,
            replica: 2,
        },
    );
    assert_eq!(forged_prepares(&settle(&mut primary)), []);
    assert_eq!(primary.checkpoint_wanted(), Some(3));
}
