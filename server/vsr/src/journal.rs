//! The replica's in-memory view of its journal: the log of prepared entries above the latest
//! checkpoint plus, per op, how many journal writes the shell still has in flight.
//!
//! The durable journal itself lives in the shell (disk in production, `sim::storage` in tests).
//! The replica asks for writes with `Action::WritePrepare` / `Action::TruncateJournal` and learns
//! durability through `Replica::on_write_done`. An op is durable when every write issued for it
//! has completed, so a late completion of an overwritten entry never marks its successor durable.
//!
//! Entries at or below the checkpoint op (the journal's *base*) are forgotten: `get` returns
//! `None` for them, `entries` starts at `base + 1`, and `op` stays absolute.

use crate::message::{Entry, OPERATION_NOMINATE_LIMITS, OPERATION_REGISTER};
use std::collections::BTreeMap;

/// The last op covered by a checkpoint: the journal holds only the ops after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Base {
    /// Checkpoint op (0: nothing checkpointed).
    pub op: u64,
    /// View of the entry at `op` (0 when `op` is 0).
    pub view: u32,
    /// Checksum of the entry at `op` (0 when `op` is 0).
    pub checksum: u64,
}

/// Log of entries `base.op + 1..=op` with write tracking.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    base: Base,
    entries: Vec<Entry>,
    writes_pending: BTreeMap<u64, u32>,
}

impl Journal {
    /// A journal holding `entries` above `base`; they must be ops `base.op + 1..` in order; all
    /// counted durable.
    pub fn from_entries(base: Base, entries: Vec<Entry>) -> Self {
        for (index, entry) in entries.iter().enumerate() {
            assert_eq!(
                entry.op,
                base.op + index as u64 + 1,
                "journal entries must be contiguous from the checkpoint"
            );
        }
        Journal {
            base,
            entries,
            writes_pending: BTreeMap::new(),
        }
    }

    /// The checkpoint the journal starts after.
    pub fn base(&self) -> Base {
        self.base
    }

    /// Highest op in the log (the base op when no entry is held).
    pub fn op(&self) -> u64 {
        self.base.op + self.entries.len() as u64
    }

    /// Number of entries held in memory.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at `op`, if held (never for ops at or below the base).
    pub fn get(&self, op: u64) -> Option<&Entry> {
        if op <= self.base.op {
            return None;
        }
        self.entries.get((op - self.base.op - 1) as usize)
    }

    /// Checksum of the entry at `op` when it is held or is the base (`Some(0)` for op 0).
    pub fn checksum_at(&self, op: u64) -> Option<u64> {
        if op == self.base.op {
            return Some(self.base.checksum);
        }
        self.get(op).map(|entry| entry.checksum)
    }

    /// All held entries (ops `base.op + 1..=op()`), op order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Held entries with an op greater than `op`.
    pub fn entries_after(&self, op: u64) -> &[Entry] {
        let skip = op
            .saturating_sub(self.base.op)
            .min(self.entries.len() as u64);
        &self.entries[skip as usize..]
    }

    /// Drops the bodies of the held entries `from..=through` except registers and limit
    /// nominations (a checkpoint reads those), keeping their checksums: for entries no one will
    /// read again.
    pub fn release_bodies(&mut self, from: u64, through: u64) {
        let from = from.max(self.base.op + 1);
        let through = through.min(self.op());
        for op in from..=through {
            let entry = &mut self.entries[(op - self.base.op - 1) as usize];
            if entry.operation != OPERATION_REGISTER && entry.operation != OPERATION_NOMINATE_LIMITS
            {
                entry.body = bytes::Bytes::new();
            }
        }
    }

    /// Appends the next entry and counts one pending write for it.
    pub fn append(&mut self, entry: Entry) {
        assert_eq!(entry.op, self.op() + 1);
        *self.writes_pending.entry(entry.op).or_insert(0) += 1;
        self.entries.push(entry);
    }

    /// Replaces the log above `base` with `log` (ops `base + 1..`). Entries of `log` at or below
    /// this journal's base are ignored, and held entries at or below `base` are kept: the caller
    /// has established that both sides agree up to `base`. Returns the first op that differs
    /// (entries from it on must be rewritten and anything above `log`'s end truncated), or `None`
    /// when nothing changed.
    pub fn replace(&mut self, base: u64, log: Vec<Entry>) -> Option<u64> {
        assert!(base <= self.op(), "a log above a gap");
        let start = base.max(self.base.op);
        let incoming: Vec<Entry> = log.into_iter().filter(|e| e.op > start).collect();
        let ours = self.entries_after(start);
        let common = ours
            .iter()
            .zip(incoming.iter())
            .take_while(|(ours, theirs)| ours.checksum == theirs.checksum)
            .count();
        if common == ours.len() && common == incoming.len() {
            return None;
        }
        let first_different = start + common as u64 + 1;
        self.entries
            .truncate((first_different - 1 - self.base.op) as usize);
        for entry in incoming.into_iter().skip(common) {
            self.append(entry);
        }
        Some(first_different)
    }

    /// Forgets every entry at or below `op` (which must be held or be the base).
    pub fn forget_through(&mut self, op: u64) {
        if op <= self.base.op {
            return;
        }
        let entry = self.get(op).expect("checkpoint op in the journal");
        let base = Base {
            op,
            view: entry.view,
            checksum: entry.checksum,
        };
        let forgotten = (op - self.base.op) as usize;
        self.entries.drain(..forgotten);
        self.base = base;
    }

    /// Records one completed write for `op`; returns true when `op` became durable.
    pub fn write_done(&mut self, op: u64) -> bool {
        match self.writes_pending.get_mut(&op) {
            None => false,
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    self.writes_pending.remove(&op);
                    op > self.base.op && op <= self.op()
                } else {
                    false
                }
            }
        }
    }

    /// The highest op up to which every held entry is durable (the base when the first one
    /// is not): acknowledging it vouches for the whole prefix, which survives a crash even if
    /// the shell completes writes out of order.
    pub fn durable_through(&self) -> u64 {
        let held = self.base.op + 1..=self.op();
        if held.is_empty() {
            return self.base.op;
        }
        match self.writes_pending.range(held).next() {
            Some((op, _)) => op - 1,
            None => self.op(),
        }
    }

    /// True when `op` is held and no write for it is in flight.
    pub fn is_durable(&self, op: u64) -> bool {
        op > self.base.op && op <= self.op() && !self.writes_pending.contains_key(&op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn entry(op: u64, view: u32) -> Entry {
        Entry::new(op, view, 1, op, 1, Bytes::new())
    }

    #[test]
    fn overwritten_op_is_durable_only_after_its_last_write() {
        let mut journal = Journal::default();
        journal.append(entry(1, 0));
        journal.append(entry(2, 0));
        assert_eq!(journal.replace(0, vec![entry(1, 0), entry(2, 1)]), Some(2));
        assert!(
            !journal.write_done(2),
            "the first write of op 2 was for the old entry"
        );
        assert!(journal.write_done(2));
        assert!(journal.is_durable(2));
        assert!(journal.write_done(1));
        assert_eq!(journal.replace(0, journal.entries().to_vec()), None);
    }

    #[test]
    fn the_durable_prefix_stops_below_the_first_write_in_flight() {
        let mut journal = Journal::from_entries(Base::default(), vec![entry(1, 0)]);
        assert_eq!(journal.durable_through(), 1);
        for op in 2..=4 {
            journal.append(entry(op, 0));
        }
        assert!(journal.write_done(3));
        assert_eq!(journal.durable_through(), 1, "op 2 is still in flight");
        assert!(journal.write_done(2));
        assert_eq!(journal.durable_through(), 3);
        journal.forget_through(3);
        assert_eq!(
            journal.durable_through(),
            3,
            "the base, while op 4 is in flight"
        );
        assert!(journal.write_done(4));
        assert_eq!(journal.durable_through(), 4);
    }

    #[test]
    fn forgotten_prefix_keeps_absolute_ops() {
        let mut journal = Journal::default();
        for op in 1..=5 {
            journal.append(entry(op, 0));
        }
        journal.forget_through(3);
        assert_eq!(journal.op(), 5);
        assert_eq!(journal.len(), 2);
        assert!(journal.get(3).is_none());
        assert_eq!(journal.get(4).unwrap().op, 4);
        assert_eq!(journal.checksum_at(3), Some(entry(3, 0).checksum));
        assert_eq!(journal.entries_after(4).len(), 1);
        assert!(
            !journal.write_done(2),
            "a forgotten op never becomes durable"
        );
        // A log from an older base: the part we forgot is ignored, the rest compared.
        assert_eq!(
            journal.replace(1, vec![entry(2, 0), entry(3, 0), entry(4, 0), entry(5, 1)]),
            Some(5)
        );
        assert_eq!(journal.get(5).unwrap().view, 1);
        // A log from a newer base keeps our entries up to it.
        assert_eq!(journal.replace(4, vec![entry(5, 1), entry(6, 1)]), Some(6));
        assert_eq!(journal.op(), 6);
        assert_eq!(journal.get(4).unwrap().op, 4);
    }
}
