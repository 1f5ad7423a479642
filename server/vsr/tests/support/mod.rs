//! Helpers the replica tests share (each test file includes this module).
#![allow(dead_code)] // not every test file uses every helper

use bytes::Bytes;
use iggy_vsr::{Action, Entry, Message, Replica};

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
