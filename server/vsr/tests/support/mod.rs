//! Helpers the replica tests share (each test file includes this module).
#![allow(dead_code)] // not every test file uses every helper

use bytes::Bytes;
use iggy_vsr::{Action, Entry, Message, OPERATION_REGISTER, Replica};

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
