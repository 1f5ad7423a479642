//! Helpers the replica tests share (each test file includes this module).
#![allow(dead_code)] // not every test file uses every helper

use bytes::Bytes;
use iggy_vsr::{Action, Config, Entry, Message, OPERATION_REGISTER, Replica, ReplicaId, ViewState};

/// Every action the replica has ready, in order.
pub fn drain(replica: &mut Replica) -> Vec<Action> {
    std::iter::from_fn(|| replica.poll_action()).collect()
}

/// The messages among `actions`, with their destinations.
pub fn sends(actions: &[Action]) -> Vec<(u8, Message)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send { to, message } => Some((*to, message.clone())),
            _ => None,
        })
        .collect()
}

/// The pre-votes among `sent`: to whom, for which view.
pub fn pre_votes(sent: &[(ReplicaId, Message)]) -> Vec<(ReplicaId, u32)> {
    sent.iter()
        .filter_map(|(to, message)| match message {
            Message::PreVote { view, .. } => Some((*to, *view)),
            _ => None,
        })
        .collect()
}

/// Ops `1..=ops` prepared in `view`, each with a small distinct body.
pub fn entries(view: u32, ops: u64) -> Vec<Entry> {
    (1..=ops)
        .map(|op| Entry::new(op, view, 9, op, 5, Bytes::from(format!("b{op}"))))
        .collect()
}

/// Ops `1..=ops` of `view`: a register of client 9, then its requests.
pub fn registered_log(view: u32, ops: u64) -> Vec<Entry> {
    (1..=ops)
        .map(|op| {
            let operation = if op == 1 { OPERATION_REGISTER } else { 5 };
            Entry::new(
                op,
                view,
                9,
                op - 1,
                operation,
                Bytes::from(format!("b{op}")),
            )
        })
        .collect()
}

/// Performs every local action at once (view states and writes durable, commits applied) and
/// returns what the replica did, sends included.
pub fn settle(replica: &mut Replica) -> Vec<Action> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let Some(action) = replica.poll_action() else {
            return out;
        };
        match &action {
            Action::PersistView { state } => replica.on_view_persisted(*state),
            Action::WritePrepare { op, .. } => replica.on_write_done(*op),
            Action::Commit { op, .. } => replica.on_committed_reply(*op, Bytes::from_static(b"ok")),
            _ => {}
        }
        out.push(action);
    }
    panic!("the replica never settles");
}

/// Replica `replica` of three, restarted with `log` (log view 0), moved into the view change
/// to view 1 by replica 2's vote (replica 0's when `replica` is 2).
pub fn voting_for_view_1(replica: ReplicaId, log: &[Entry]) -> Replica {
    let mut voter = Replica::open(Config::new(3, replica), log.to_vec(), ViewState::default());
    settle(&mut voter);
    let from = if replica == 2 { 0 } else { 2 };
    voter.on_message(
        from,
        Message::StartViewChange {
            view: 1,
            replica: from,
        },
    );
    voter
}

/// Delivers the messages among `out` sent by `from` that are addressed to `to`.
pub fn deliver(from: ReplicaId, out: &[Action], to: &mut Replica) {
    for (addressee, message) in sends(out) {
        if addressee == to.replica() {
            to.on_message(from, message);
        }
    }
}
