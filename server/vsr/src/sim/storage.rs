//! Simulated journal storage: writes complete in order after a delay; a crash loses the
//! pending writes and may tear the one in progress (its checksum then fails on open).
//!
//! A record journaled with a stand-in for its body (the machine stowed the body in its own
//! storage) carries a seal over the stand-in, as the server's journal record carries its own
//! checksum, so a torn stand-in is detected on open too.
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
use super::machine::Journaled;
use crate::checkpoint::Checkpoint;
use crate::message::{Entry, Fnv};
use crate::view_state::ViewState;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// One queued journal operation.
#[derive(Clone, Debug)]
enum Write {
    Prepare(Record),
    Truncate(u64),
    Checkpoint {
        op: u64,
        bytes: Vec<u8>,
        state: Vec<u8>,
    },
}

/// A journal record: the entry as journaled and, for a stand-in, the seal over its body.
#[derive(Clone, Debug)]
struct Record {
    entry: Entry,
    stand_in_seal: Option<u64>,
}

impl Record {
    fn is_valid(&self) -> bool {
        match self.stand_in_seal {
            None => self.entry.is_valid(),
            Some(seal) => Fnv::oneshot(&self.entry.body) == seal,
        }
    }
}

/// A view state write in flight: completion tick, slot and bytes.
type ViewWrite = (u64, usize, Vec<u8>);

/// The simulator's cluster id: view states name it like the server's do.
const CLUSTER: u128 = 0x5157;

/// Durable journal of one replica plus its write queue.
#[derive(Debug, Default)]
pub struct Storage {
    durable: BTreeMap<u64, Record>,
    pending: VecDeque<(u64, Write)>,
    /// Checkpoint slots: encoded checkpoint and the state machine snapshot at its op.
    slots: [Option<(Vec<u8>, Vec<u8>)>; 2],
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
    /// Queues a prepare write completing at `at`, with `stand_in` journaled in place of the
    /// body when the machine stowed it.
    pub fn write(&mut self, at: u64, entry: Entry, stand_in: Option<Bytes>) {
        let at = self.pending.back().map_or(at, |(last, _)| at.max(*last));
        let record = match stand_in {
            None => Record {
                entry,
                stand_in_seal: None,
            },
            Some(stand_in) => Record {
                stand_in_seal: Some(Fnv::oneshot(&stand_in)),
                entry: Entry {
                    body: stand_in,
                    ..entry
                },
            },
        };
        self.pending.push_back((at, Write::Prepare(record)));
    }

    /// Queues a truncation, ordered after earlier writes.
    pub fn truncate(&mut self, after_op: u64) {
        let at = self.pending.back().map_or(0, |(last, _)| *last);
        self.pending.push_back((at, Write::Truncate(after_op)));
    }

    /// Queues a checkpoint write (with the state machine snapshot `state` at `op`) completing
    /// at `at`; once durable, the journal prefix up to `op` is dropped.
    pub fn write_checkpoint(&mut self, at: u64, op: u64, bytes: Vec<u8>, state: Vec<u8>) {
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

    /// Whether a checkpoint write is still queued.
    pub fn checkpoint_pending(&self) -> bool {
        self.pending
            .iter()
            .any(|(_, write)| matches!(write, Write::Checkpoint { .. }))
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
                Write::Prepare(record) => {
                    done.push(record.entry.op);
                    self.durable.insert(record.entry.op, record);
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
            Some((_, Write::Prepare(record))) if rng.chance(50) => {
                let mut torn = record.clone();
                let keep = torn.entry.body.len() / 2;
                torn.entry.body = Bytes::from([&torn.entry.body[..keep], b"\xff"].concat());
                self.durable.insert(torn.entry.op, torn);
            }
            Some((_, Write::Checkpoint { bytes, state, .. })) if rng.chance(50) => {
                let torn = bytes[..bytes.len() / 2].to_vec();
                // The torn slot held the older checkpoint; the next write reuses it.
                self.slots[self.next_slot] = Some((torn, state.clone()));
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

    /// State transfer: a peer's checkpoint (`bytes`, `state` at `op`) replaces the journal
    /// and every write in flight, durably at once (the server writes the checkpoint, then
    /// empties its journal anchored at it).
    pub fn install_checkpoint(&mut self, op: u64, bytes: Vec<u8>, state: Vec<u8>) {
        assert!(
            op > self.checkpoint_op,
            "a transfer moves the checkpoint forward"
        );
        self.pending.clear();
        self.slots[self.next_slot] = Some((bytes, state));
        self.next_slot = 1 - self.next_slot;
        self.checkpoint_op = op;
        self.durable.clear();
    }

    /// Op of the latest completed checkpoint (0 when none).
    pub fn checkpoint_op(&self) -> u64 {
        self.checkpoint_op
    }

    /// The latest valid checkpoint (with its state snapshot) and the valid contiguous journal
    /// records after it, as a replica opens them.
    pub fn open(&self) -> (Option<(Checkpoint, Vec<u8>)>, Vec<Journaled>) {
        let checkpoint = self
            .slots
            .iter()
            .flatten()
            .filter_map(|(bytes, state)| Some((Checkpoint::decode(bytes).ok()?, state.clone())))
            .max_by_key(|(checkpoint, _)| checkpoint.op);
        let base = checkpoint.as_ref().map_or(0, |(c, _)| c.op);
        let mut suffix = Vec::new();
        while let Some(record) = self.durable.get(&(base + suffix.len() as u64 + 1)) {
            if !record.is_valid() {
                break;
            }
            suffix.push(Journaled {
                entry: record.entry.clone(),
                stowed: record.stand_in_seal.is_some(),
            });
        }
        (checkpoint, suffix)
    }

    /// The record of op `op` as the journal holds it now, written or still queued (a read
    /// sees what the file was given, synced or not); `None` when it is gone or torn.
    pub fn read(&self, op: u64) -> Option<Journaled> {
        let mut record = None;
        for (_, write) in self.pending.iter().rev() {
            match write {
                Write::Prepare(queued) if queued.entry.op == op => {
                    record = Some(queued);
                    break;
                }
                Write::Truncate(after_op) if *after_op < op => return None,
                _ => {}
            }
        }
        let record = record.or_else(|| self.durable.get(&op))?;
        record.is_valid().then(|| Journaled {
            entry: record.entry.clone(),
            stowed: record.stand_in_seal.is_some(),
        })
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
            .is_some_and(|record| record.entry.checksum == checksum)
    }
}
