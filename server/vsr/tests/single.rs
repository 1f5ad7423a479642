//! Cluster of one: request → WritePrepare → on_write_done → Commit → reply.

use bytes::Bytes;
use iggy_vsr::{Action, Config, OPERATION_REGISTER, Refusal, Replica};

fn drain(replica: &mut Replica) -> Vec<Action> {
    std::iter::from_fn(|| replica.poll_action()).collect()
}

/// Runs the shell loop: journal writes complete at once, the state machine echoes upper-case.
fn drive(replica: &mut Replica, journal: &mut Vec<iggy_vsr::Entry>) -> Vec<Action> {
    let mut out = Vec::new();
    for _ in 0..100 {
        let actions = drain(replica);
        if actions.is_empty() {
            return out;
        }
        for action in actions {
            match &action {
                Action::WritePrepare { op, entry } => {
                    journal.truncate(*op as usize - 1);
                    journal.push(entry.clone());
                    replica.on_write_done(*op);
                }
                Action::Commit { op, body, .. } => {
                    replica.on_committed_reply(*op, Bytes::from(body.to_ascii_uppercase()));
                }
                _ => out.push(action),
            }
        }
    }
    panic!("shell loop did not settle");
}

#[test]
fn register_request_duplicate_and_restart() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 1;
    let mut journal = Vec::new();
    let mut replica = Replica::open(config.clone(), Vec::new(), 1);
    replica.on_request(7, 0, OPERATION_REGISTER, Bytes::new());
    let out = drive(&mut replica, &mut journal);
    assert_eq!(
        out,
        vec![
            Action::Registered {
                op: 1,
                client: 7,
                body: Bytes::new()
            },
            Action::Reply {
                client: 7,
                request: 0,
                op: 1,
                reply: Bytes::copy_from_slice(&1u64.to_le_bytes())
            }
        ]
    );

    let first_reply = vec![Action::Reply {
        client: 7,
        request: 1,
        op: 2,
        reply: Bytes::from_static(b"ABC"),
    }];
    replica.on_request(7, 1, 5, Bytes::from_static(b"abc"));
    let out = drive(&mut replica, &mut journal);
    assert_eq!(out, first_reply);
    assert_eq!(replica.commit_min(), 2);

    // Duplicate of the latest: the original reply replayed byte for byte, nothing journaled.
    replica.on_request(7, 1, 5, Bytes::from_static(b"abc"));
    let out = drive(&mut replica, &mut journal);
    assert_eq!(out, first_reply);
    assert_eq!(journal.len(), 2);

    replica.on_request(7, 2, 5, Bytes::from_static(b"x"));
    drive(&mut replica, &mut journal);
    replica.on_request(7, 1, 5, Bytes::from_static(b"abc"));
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Refuse {
            client: 7,
            request: 1,
            refusal: Refusal::RequestTooOld
        }]
    );

    // Capacity: a second client evicts the first (the oldest latest request).
    replica.on_request(8, 0, OPERATION_REGISTER, Bytes::new());
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![
            Action::Evicted { client: 7 },
            Action::Registered {
                op: 4,
                client: 8,
                body: Bytes::new()
            },
            Action::Reply {
                client: 8,
                request: 0,
                op: 4,
                reply: Bytes::copy_from_slice(&4u64.to_le_bytes())
            }
        ]
    );
    replica.on_request(7, 3, 5, Bytes::new());
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Refuse {
            client: 7,
            request: 3,
            refusal: Refusal::SessionUnknown
        }]
    );

    // Restart from the journal: every op is replayed to a fresh state machine.
    let mut restarted = Replica::open(config, journal.clone(), 2);
    let mut replayed = Vec::new();
    while let Some(action) = restarted.poll_action() {
        if let Action::Commit { op, body, .. } = action {
            replayed.push(op);
            restarted.on_committed_reply(op, Bytes::from(body.to_ascii_uppercase()));
        }
    }
    assert_eq!(replayed, vec![2, 3]);
    assert_eq!(restarted.commit_min(), 4);
    assert!(restarted.clients().get(7).is_none(), "the eviction replays");
    assert_eq!(restarted.clients().get(8).unwrap().session, 4);
}

#[test]
fn commit_waits_for_the_journal_write() {
    let mut replica = Replica::new(Config::new(1, 0));
    replica.on_request(1, 0, OPERATION_REGISTER, Bytes::new());
    let actions = drain(&mut replica);
    assert!(matches!(
        actions.as_slice(),
        [Action::WritePrepare { op: 1, .. }]
    ));
    assert_eq!(
        replica.commit_min(),
        0,
        "not committed before the write is durable"
    );
    replica.on_write_done(1);
    assert!(matches!(
        drain(&mut replica).as_slice(),
        [
            Action::Registered { op: 1, .. },
            Action::Reply { op: 1, .. }
        ]
    ));
}
