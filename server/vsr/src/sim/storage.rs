//! Simulated journal storage: writes complete in order after a delay; a crash loses the
//! pending writes and may tear the one in progress (its checksum then fails on open).

use super::Rng;
use crate::message::Entry;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// One queued journal operation.
#[derive(Clone, Debug)]
enum Write {
    Prepare(Entry),
    Truncate(u64),
}

/// Durable journal of one replica plus its write queue.
#[derive(Debug, Default)]
pub struct Storage {
    durable: BTreeMap<u64, Entry>,
    pending: VecDeque<(u64, Write)>,
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

    /// Completes due operations; returns the ops whose prepare writes completed.
    pub fn tick(&mut self, now: u64) -> Vec<u64> {
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
            }
        }
        done
    }

    /// Crash: pending writes are lost; the first may land torn.
    pub fn crash(&mut self, rng: &mut Rng) {
        if let Some((_, Write::Prepare(entry))) = self.pending.front()
            && rng.chance(50)
        {
            let mut torn = entry.clone();
            let keep = torn.body.len() / 2;
            torn.body = Bytes::from([&torn.body[..keep], b"\xff"].concat());
            self.durable.insert(torn.op, torn);
        }
        self.pending.clear();
    }

    /// The valid contiguous prefix from op 1, as a replica opens it.
    pub fn open(&self) -> Vec<Entry> {
        let mut prefix = Vec::new();
        while let Some(entry) = self.durable.get(&(prefix.len() as u64 + 1)) {
            if !entry.is_valid() {
                break;
            }
            prefix.push(entry.clone());
        }
        prefix
    }
}
