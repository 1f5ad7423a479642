//! Cluster of one: request → WritePrepare → on_write_done → Commit → reply.

use bytes::Bytes;
use iggy_vsr::{Action, Config, OPERATION_REGISTER, Refusal, Replica, ViewState};

mod support;
use support::*;

/// Operation code the test state machine treats as a logout: applying it ends the session of
/// the op's client (the shell retires it with the commit).
const LOGOUT: u8 = 42;

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
                Action::Commit { .. } => apply(replica, &action),
                _ => out.push(action),
            }
        }
    }
    panic!("shell loop did not settle");
}

/// Applies a `Commit` as the test state machine does.
fn apply(replica: &mut Replica, commit: &Action) {
    let Action::Commit {
        op,
        client,
        operation,
        body,
        ..
    } = commit
    else {
        panic!("not a commit: {commit:?}");
    };
    if *operation == LOGOUT {
        replica.retire_with_commit(&[*client]);
    }
    replica.on_committed_reply(*op, Bytes::from(body.to_ascii_uppercase()));
}

#[test]
fn register_request_duplicate_and_restart() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 1;
    let mut journal = Vec::new();
    let mut replica = Replica::open(config.clone(), Vec::new(), ViewState::default());
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

    // Capacity: a second client is refused while the first is live, and nothing is journaled.
    replica.on_request(8, 0, OPERATION_REGISTER, Bytes::new());
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Refuse {
            client: 8,
            request: 0,
            refusal: Refusal::ClientsTableFull
        }]
    );
    assert_eq!(journal.len(), 3);
    // The first logs out (op 4 retires it); then the second registers.
    replica.on_request(7, 3, LOGOUT, Bytes::from_static(b"bye"));
    assert!(matches!(
        drive(&mut replica, &mut journal).as_slice(),
        [Action::Reply { op: 4, .. }]
    ));
    replica.on_request(8, 0, OPERATION_REGISTER, Bytes::new());
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![
            Action::Registered {
                op: 5,
                client: 8,
                body: Bytes::new()
            },
            Action::Reply {
                client: 8,
                request: 0,
                op: 5,
                reply: Bytes::copy_from_slice(&5u64.to_le_bytes())
            }
        ]
    );
    replica.on_request(7, 4, 5, Bytes::new());
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Refuse {
            client: 7,
            request: 4,
            refusal: Refusal::SessionUnknown
        }]
    );

    // Restart from the journal: every op is replayed to a fresh state machine, which retires
    // the logged-out client again at the same op.
    let mut restarted = Replica::open(config, journal.clone(), ViewState::default());
    let mut replayed = Vec::new();
    while let Some(action) = restarted.poll_action() {
        if let Action::Commit { op, .. } = action {
            replayed.push(op);
            apply(&mut restarted, &action);
        }
    }
    assert_eq!(replayed, vec![2, 3, 4]);
    assert_eq!(restarted.commit_min(), 5);
    assert!(
        restarted.clients().get(7).is_none(),
        "the retirement replays"
    );
    assert_eq!(restarted.clients().get(8).unwrap().session, 5);
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

/// Registers `client` and runs `requests` requests (bodies `c{client}r{n}`), returning the ops.
fn register_and_request(
    replica: &mut Replica,
    journal: &mut Vec<iggy_vsr::Entry>,
    client: u128,
    requests: std::ops::RangeInclusive<u64>,
) {
    if *requests.start() == 1 {
        replica.on_request(client, 0, OPERATION_REGISTER, Bytes::new());
        drive(replica, journal);
        assert!(replica.clients().get(client).is_some());
    }
    for request in requests {
        let body = Bytes::from(format!("c{client}r{request}"));
        replica.on_request(client, request, 5, body);
        let out = drive(replica, journal);
        assert!(
            matches!(out.as_slice(), [Action::Reply { request: r, .. }] if *r == request),
            "{out:?}"
        );
    }
}

#[test]
fn a_full_table_refuses_registers_until_a_logout_retires_a_session() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 2;
    let mut journal = Vec::new();
    let mut replica = Replica::open(config.clone(), Vec::new(), ViewState::default());
    register_and_request(&mut replica, &mut journal, 1, 1..=1); // ops 1, 2
    register_and_request(&mut replica, &mut journal, 2, 1..=1); // ops 3, 4
    for _ in 0..2 {
        replica.on_request(3, 0, OPERATION_REGISTER, Bytes::new());
        assert_eq!(
            drive(&mut replica, &mut journal),
            vec![Action::Refuse {
                client: 3,
                request: 0,
                refusal: Refusal::ClientsTableFull
            }]
        );
    }
    // Both live sessions keep their retry protection: a duplicate replays its reply.
    replica.on_request(1, 1, 5, Bytes::from_static(b"c1r1"));
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Reply {
            client: 1,
            request: 1,
            op: 2,
            reply: Bytes::from_static(b"C1R1")
        }]
    );

    // Client 2 logs out at op 5; its slot goes to client 3.
    replica.on_request(2, 2, LOGOUT, Bytes::from_static(b"bye"));
    drive(&mut replica, &mut journal);
    assert!(replica.clients().get(2).is_none());
    register_and_request(&mut replica, &mut journal, 3, 1..=1); // ops 6, 7
    // The retired client's requests, a retry of its logout included, find no session.
    for request in [2, 3] {
        replica.on_request(2, request, 5, Bytes::from_static(b"late"));
        assert_eq!(
            drive(&mut replica, &mut journal),
            vec![Action::Refuse {
                client: 2,
                request,
                refusal: Refusal::SessionUnknown
            }]
        );
    }

    // A checkpoint taken after the retirement holds clients 1 and 3 only, and a replica
    // restored from it is full again.
    let checkpoint = replica.checkpoint(replica.commit_min());
    let clients: Vec<u128> = checkpoint
        .clients
        .iter()
        .map(|(client, _)| *client)
        .collect();
    assert_eq!(clients, vec![1, 3]);
    let decoded = iggy_vsr::Checkpoint::decode(&checkpoint.encode()).unwrap();
    let mut restored =
        Replica::open_from_checkpoint(config, decoded, Vec::new(), ViewState::default());
    assert_eq!(restored.clients(), replica.clients());
    restored.on_request(4, 0, OPERATION_REGISTER, Bytes::new());
    assert!(matches!(
        drain(&mut restored).as_slice(),
        [Action::Refuse {
            refusal: Refusal::ClientsTableFull,
            ..
        }]
    ));
}

#[test]
fn a_request_pipelined_behind_its_clients_logout_is_refused_at_commit() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 1;
    let mut replica = Replica::open(config, Vec::new(), ViewState::default());
    let mut journal = Vec::new();
    register_and_request(&mut replica, &mut journal, 1, 1..=1);
    // Both prepared before either commits: the logout retires client 1 first.
    replica.on_request(1, 2, LOGOUT, Bytes::from_static(b"bye"));
    replica.on_request(1, 3, 5, Bytes::from_static(b"x"));
    let mut writes = Vec::new();
    while let Some(action) = replica.poll_action() {
        if let Action::WritePrepare { op, .. } = action {
            writes.push(op);
        }
    }
    assert_eq!(writes, vec![3, 4]);
    replica.on_write_done(3);
    replica.on_write_done(4);
    let mut commits = Vec::new();
    let mut out = Vec::new();
    while let Some(action) = replica.poll_action() {
        match action {
            Action::Commit { op, .. } => {
                commits.push(op);
                apply(&mut replica, &action);
            }
            other => out.push(other),
        }
    }
    assert_eq!(
        commits,
        vec![3],
        "the retired client's request never executes"
    );
    assert_eq!(
        out.last(),
        Some(&Action::Refuse {
            client: 1,
            request: 3,
            refusal: Refusal::SessionUnknown
        })
    );
    assert_eq!(replica.commit_min(), 4);
}

#[test]
fn registers_are_refused_only_when_the_pipeline_holds_a_full_table_of_them() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 2;
    let mut replica = Replica::open(config, Vec::new(), ViewState::default());
    for client in 1..=3 {
        replica.on_request(client, 0, OPERATION_REGISTER, Bytes::new());
    }
    let out: Vec<Action> = std::iter::from_fn(|| replica.poll_action()).collect();
    assert_eq!(
        out.last(),
        Some(&Action::Refuse {
            client: 3,
            request: 0,
            refusal: Refusal::ClientsTableFull
        })
    );
}

#[test]
fn checkpoint_then_reopen_replays_only_the_suffix_and_keeps_dedup() {
    let config = Config::new(1, 0);
    let mut journal = Vec::new();
    let mut replica = Replica::open(config.clone(), Vec::new(), ViewState::default());
    register_and_request(&mut replica, &mut journal, 7, 1..=2); // ops 1..=3
    register_and_request(&mut replica, &mut journal, 8, 1..=1); // ops 4, 5
    assert_eq!(replica.journal_len(), 5);

    // Checkpoint below the commit: the table is the one as of op 3 (client 8 unknown).
    let checkpoint = replica.checkpoint(3);
    assert_eq!(replica.journal_len(), 2);
    assert_eq!(replica.checkpoint_op(), 3);
    assert!(replica.entry(3).is_none());
    assert_eq!(replica.entry(4).unwrap().op, 4);
    assert_eq!(checkpoint.op, 3);
    assert_eq!(checkpoint.checksum, journal[2].checksum);
    assert_eq!(checkpoint.clients.len(), 1);
    assert_eq!(checkpoint.clients[0].0, 7);
    assert_eq!(checkpoint.clients[0].1.request, 2);

    // The replica keeps working above the checkpoint.
    register_and_request(&mut replica, &mut journal, 7, 3..=3); // op 6
    let bytes = checkpoint.encode();
    let suffix = journal[3..].to_vec();
    let decoded = iggy_vsr::Checkpoint::decode(&bytes).unwrap();
    assert_eq!(decoded, checkpoint);

    let mut reopened =
        Replica::open_from_checkpoint(config.clone(), decoded, suffix, ViewState::default());
    let mut replayed = Vec::new();
    while let Some(action) = reopened.poll_action() {
        match action {
            Action::Commit { op, body, .. } => {
                replayed.push(op);
                reopened.on_committed_reply(op, Bytes::from(body.to_ascii_uppercase()));
            }
            Action::Registered { op, .. } => replayed.push(op),
            _ => {}
        }
    }
    assert_eq!(replayed, vec![4, 5, 6], "only the suffix replays");
    assert_eq!(reopened.commit_min(), 6);
    assert_eq!(reopened.clients(), replica.clients());

    // A full checkpoint of the reopened replica: a duplicate of a request committed before it
    // still replays its cached reply, and an older one is refused.
    let full = reopened.checkpoint(6);
    assert_eq!(reopened.journal_len(), 0);
    let mut reopened =
        Replica::open_from_checkpoint(config, full, Vec::new(), ViewState::default());
    assert_eq!(reopened.poll_action(), None, "nothing to replay");
    assert_eq!(reopened.op(), 6);
    let mut tail = Vec::new();
    reopened.on_request(8, 1, 5, Bytes::from_static(b"c8r1"));
    assert_eq!(
        drive(&mut reopened, &mut tail),
        vec![Action::Reply {
            client: 8,
            request: 1,
            op: 5,
            reply: Bytes::from_static(b"C8R1")
        }]
    );
    reopened.on_request(7, 2, 5, Bytes::new());
    assert_eq!(
        drive(&mut reopened, &mut tail),
        vec![Action::Refuse {
            client: 7,
            request: 2,
            refusal: Refusal::RequestTooOld
        }]
    );
    // New requests continue at op 7, written after the checkpoint.
    reopened.on_request(7, 4, 5, Bytes::from_static(b"n"));
    let out = drive(&mut reopened, &mut tail);
    assert!(matches!(out.as_slice(), [Action::Reply { op: 7, .. }]));
    assert_eq!(reopened.journal_len(), 1);
}

#[test]
fn torn_checkpoint_bytes_are_rejected() {
    let mut journal = Vec::new();
    let mut replica = Replica::open(Config::new(1, 0), Vec::new(), ViewState::default());
    register_and_request(&mut replica, &mut journal, 7, 1..=3);
    let bytes = replica.checkpoint(4).encode();
    assert!(iggy_vsr::Checkpoint::decode(&bytes).is_ok());
    for len in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        assert!(iggy_vsr::Checkpoint::decode(&bytes[..len]).is_err());
    }
    let mut torn = bytes.clone();
    let middle = torn.len() / 2;
    torn[middle..].fill(0);
    assert_eq!(
        iggy_vsr::Checkpoint::decode(&torn),
        Err(iggy_vsr::CheckpointError::Checksum)
    );
}

#[test]
fn a_solo_replica_releases_committed_bodies_keeping_registers_and_cached_replies() {
    let mut journal = Vec::new();
    let mut replica = Replica::open(Config::new(1, 0), Vec::new(), ViewState::default());
    replica.on_request(7, 0, OPERATION_REGISTER, Bytes::from_static(b"who"));
    drive(&mut replica, &mut journal);
    replica.on_request(7, 1, 9, Bytes::from_static(b"a batch"));
    let first = drive(&mut replica, &mut journal);
    assert_eq!(replica.held_body_bytes(), 3 + 7);
    replica.release_committed_bodies();
    assert_eq!(replica.held_body_bytes(), 3, "the register keeps its body");
    // A retry replays the cached reply; later requests commit; a checkpoint reads registers.
    replica.on_request(7, 1, 9, Bytes::from_static(b"a batch"));
    assert_eq!(drive(&mut replica, &mut journal), first);
    replica.on_request(7, 2, 9, Bytes::from_static(b"more"));
    let reply = drive(&mut replica, &mut journal);
    assert!(matches!(&reply[..], [Action::Reply { request: 2, reply, .. }] if reply == "MORE"));
    replica.release_committed_bodies();
    assert_eq!(replica.checkpoint(3).op, 3);
    assert_eq!(replica.held_body_bytes(), 0);
}

#[test]
fn an_older_request_behind_a_pipelined_newer_one_is_answered_not_dropped() {
    let mut journal = Vec::new();
    let mut replica = Replica::open(Config::new(1, 0), Vec::new(), ViewState::default());
    replica.on_request(7, 0, OPERATION_REGISTER, Bytes::new());
    drive(&mut replica, &mut journal);
    // Request 3 is prepared; its journal write has not completed.
    replica.on_request(7, 3, 5, Bytes::from_static(b"three"));
    let pending = drain(&mut replica);
    assert!(
        matches!(pending.as_slice(), [Action::WritePrepare { op: 2, .. }]),
        "{pending:?}"
    );
    // Request 2 arrives after it (another connection of the same session): it can no longer
    // commit, and it is refused at once instead of waiting for a reply that never comes.
    replica.on_request(7, 2, 5, Bytes::from_static(b"two"));
    assert_eq!(
        drain(&mut replica),
        vec![Action::Refuse {
            client: 7,
            request: 2,
            refusal: Refusal::RequestTooOld
        }]
    );
    // A resend of request 3 while it is prepared waits for the same commit.
    replica.on_request(7, 3, 5, Bytes::from_static(b"three"));
    assert_eq!(drain(&mut replica), Vec::new());
    journal.push(match &pending[0] {
        Action::WritePrepare { entry, .. } => entry.clone(),
        _ => unreachable!(),
    });
    replica.on_write_done(2);
    assert_eq!(
        drive(&mut replica, &mut journal),
        vec![Action::Reply {
            client: 7,
            request: 3,
            op: 2,
            reply: Bytes::from_static(b"THREE")
        }]
    );
}

#[test]
fn the_first_committed_nomination_fixes_the_client_table_capacity_for_good() {
    let mut config = Config::new(1, 0);
    config.clients_table_max = 2;
    let mut journal = Vec::new();
    let mut replica = Replica::open(config.clone(), Vec::new(), ViewState::default());
    assert_eq!(replica.clients().nominated(), None);
    replica.nominate_limits(2);
    replica.nominate_limits(2); // already being prepared: nothing more
    drive(&mut replica, &mut journal);
    assert_eq!(journal.len(), 1);
    assert_eq!(replica.clients().nominated(), Some(2));
    // A later nomination, with another value, changes nothing and is not even proposed.
    replica.nominate_limits(50);
    drive(&mut replica, &mut journal);
    assert_eq!(journal.len(), 1);

    // The committed capacity holds: a third client is refused.
    for client in [7, 8, 9] {
        replica.on_request(client, 0, OPERATION_REGISTER, Bytes::new());
        drive(&mut replica, &mut journal);
    }
    assert_eq!(replica.clients().len(), 2);
    assert!(replica.clients().get(9).is_none());

    // A restart configured for 50 replays the nomination and keeps 2, with or without a
    // checkpoint.
    config.clients_table_max = 50;
    let replayed = Replica::open(config.clone(), journal.clone(), ViewState::default());
    assert_eq!(replayed.clients().nominated(), Some(2));
    let checkpoint = replica.checkpoint(replica.commit_min());
    assert_eq!(checkpoint.clients_max, Some(2));
    let decoded = iggy_vsr::Checkpoint::decode(&checkpoint.encode()).unwrap();
    let restored = Replica::open_from_checkpoint(config, decoded, Vec::new(), ViewState::default());
    assert_eq!(restored.clients().nominated(), Some(2));
    assert_eq!(restored.clients().clients_max(), 2);
}
