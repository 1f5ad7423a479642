//! Simulated journal storage: writes complete in order after a delay; a crash loses the
//! pending writes and may tear the one in progress (its checksum then fails on open).
//!
//! Checkpoints are written to two alternating slots with the state machine snapshot beside
//! them; the journal prefix is dropped only once a checkpoint write completes, so a torn
//! checkpoint falls back to the previous slot with the journal it still needs.
//!
//! The view state goes to two slots of its own, written independently of the journal queue (a
//! separate file: nothing orders it behind journal writes except the sync the group core asks
//! for first): a crash loses a pending view write or tears it, and a restart takes the newer
//! valid slot.

use super::Rng;
use crate::checkpoint::Checkpoint;
use crate::message::Entry;
use crate::view_state::ViewState;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// One queued journal operation.
#[derive(Clone, Debug)]
enum Write {
    Prepare(Entry),
    Truncate(u64),
    Checkpoint { op: u64, bytes: Vec<u8>, state: u64 },
}

/// A view state write in flight: completion tick, slot and bytes.
type ViewWrite = (u64, usize, Vec<u8>);

/// The simulator's cluster id: view states name it like the server's do.
const CLUSTER: u128 = 0x5157;

/// Durable journal of one replica plus its write queue.
#[derive(Debug, Default)]
pub struct Storage {
    durable: BTreeMap<u64, Entry>,
    pending: VecDeque<(u64, Write)>,
    /// Checkpoint slots: encoded checkpoint and the state machine snapshot at its op.
    slots: [Option<(Vec<u8>, u64)>; 2],
    /// Slot the next checkpoint write goes to.
    next_slot: usize,
    /// Op of the latest completed checkpoint.
    checkpoint_op: u64,
    /// The view state's two slots.
    view_slots: [Option<Vec<u8>>; 2],
    /// The view state write in flight (the core waits for it before asking for another).
    view_write: Option<ViewWrite>,
}

impl Storage {
    /// Queues a prepare write completing at `at`.
    pub fn write(&mut self, at: u64, entry: Entry) {
        let at = self.pending.back().map_or(at, |(last, _)| at.max(*last));
        self.pending.push_back((at, Write::Prepare(entry)));
    }

    /// Queues a truncation, ordered after earlier writes.
    pub fn truncate(&mut self, after_op: u64) {
        let at = self.pending.back().map_or(0, |(last, _)| *last);
        self.pending.push_back((at, Write::Truncate(after_op)));
    }

    /// Queues a checkpoint write (with the state machine snapshot `state` at `op`) completing
    /// at `at`; once durable, the journal prefix up to `op` is dropped.
    pub fn write_checkpoint(&mut self, at: u64, op: u64, bytes: Vec<u8>, state: u64) {
        let at = self.pending.back().map_or(at, |(last, _)| at.max(*last));
        self.pending
            .push_back((at, Write::Checkpoint { op, bytes, state }));
    }

    /// Queues a write of `replica`'s view state completing at `at`, into the slot that does not
    /// hold the latest valid state.
    pub fn write_view(&mut self, at: u64, replica: u8, state: ViewState) {
        assert!(self.view_write.is_none(), "one view state write at a time");
        let slots = [self.view_slots[0].as_deref(), self.view_slots[1].as_deref()];
        let (_, slot) = ViewState::latest(slots, CLUSTER, replica).expect("own view state");
        let bytes = state.encode(CLUSTER, replica).to_vec();
        self.view_write = Some((at, slot, bytes));
    }

    /// Whether a view state write is still queued.
    pub fn view_pending(&self) -> bool {
        self.view_write.is_some()
    }

    /// The latest durable view state of `replica`, as a restart reads it.
    pub fn view_state(&self, replica: u8) -> ViewState {
        let slots = [self.view_slots[0].as_deref(), self.view_slots[1].as_deref()];
        ViewState::latest(slots, CLUSTER, replica)
            .expect("a torn write leaves the other slot valid")
            .0
    }

    /// Whether journal writes (prepares or truncations) are still queued.
    pub fn prepares_pending(&self) -> bool {
        self.pending
            .iter()
            .any(|(_, write)| matches!(write, Write::Prepare(_) | Write::Truncate(_)))
    }

    /// Completes due operations; returns the ops whose prepare writes completed.
    pub fn tick(&mut self, now: u64) -> Vec<u64> {
        if self
            .view_write
            .as_ref()
            .is_some_and(|(at, _, _)| *at <= now)
        {
            let (_, slot, bytes) = self.view_write.take().unwrap();
            self.view_slots[slot] = Some(bytes);
        }
        let mut done = Vec::new();
        while self.pending.front().is_some_and(|(at, _)| *at <= now) {
            match self.pending.pop_front().unwrap().1 {
                Write::Prepare(entry) => {
                    done.push(entry.op);
                    self.durable.insert(entry.op, entry);
                }
                Write::Truncate(after_op) => {
                    self.durable.retain(|op, _| *op <= after_op);
                }
                Write::Checkpoint { op, bytes, state } => {
                    self.slots[self.next_slot] = Some((bytes, state));
                    self.next_slot = 1 - self.next_slot;
                    self.checkpoint_op = self.checkpoint_op.max(op);
                    self.durable.retain(|at, _| *at > op);
                }
            }
        }
        done
    }

    /// Crash: pending writes are lost; the first may land torn.
    pub fn crash(&mut self, rng: &mut Rng) {
        match self.pending.front() {
            Some((_, Write::Prepare(entry))) if rng.chance(50) => {
                let mut torn = entry.clone();
                let keep = torn.body.len() / 2;
                torn.body = Bytes::from([&torn.body[..keep], b"\xff"].concat());
                self.durable.insert(torn.op, torn);
            }
            Some((_, Write::Checkpoint { bytes, state, .. })) if rng.chance(50) => {
                let torn = bytes[..bytes.len() / 2].to_vec();
                // The torn slot held the older checkpoint; the next write reuses it.
                self.slots[self.next_slot] = Some((torn, *state));
            }
            _ => {}
        }
        self.pending.clear();
        if let Some((_, slot, bytes)) = self.view_write.take()
            && rng.chance(50)
        {
            self.view_slots[slot] = Some(bytes[..bytes.len() / 2].to_vec());
        }
    }

    /// Op of the latest completed checkpoint (0 when none).
    pub fn checkpoint_op(&self) -> u64 {
        self.checkpoint_op
    }

    /// The latest valid checkpoint (with its state snapshot) and the valid contiguous journal
    /// after it, as a replica opens them.
    pub fn open(&self) -> (Option<(Checkpoint, u64)>, Vec<Entry>) {
        let checkpoint = self
            .slots
            .iter()
            .flatten()
            .filter_map(|(bytes, state)| Some((Checkpoint::decode(bytes).ok()?, *state)))
            .max_by_key(|(checkpoint, _)| checkpoint.op);
        let base = checkpoint.as_ref().map_or(0, |(c, _)| c.op);
        let mut suffix = Vec::new();
        while let Some(entry) = self.durable.get(&(base + suffix.len() as u64 + 1)) {
            if !entry.is_valid() {
                break;
            }
            suffix.push(entry.clone());
        }
        (checkpoint, suffix)
    }

    /// True when a restart would hold op `op` with `checksum` (or a checkpoint at or past it).
    pub fn holds(&self, op: u64, checksum: u64) -> bool {
        let (checkpoint, suffix) = self.open();
        let base = checkpoint.map_or(0, |(c, _)| c.op);
        if base >= op {
            return true;
        }
        suffix
            .get((op - base - 1) as usize)
            .is_some_and(|entry| entry.checksum == checksum)
    }
}
