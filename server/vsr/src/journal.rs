//! The replica's in-memory view of its journal: the log of prepared entries plus, per op, how
//! many journal writes the shell still has in flight.
//!
//! The durable journal itself lives in the shell (disk in production, `sim::storage` in tests).
//! The replica asks for writes with `Action::WritePrepare` / `Action::TruncateJournal` and learns
//! durability through `Replica::on_write_done`. An op is durable when every write issued for it
//! has completed, so a late completion of an overwritten entry never marks its successor durable.

use crate::message::Entry;
use std::collections::BTreeMap;

/// Log of entries `1..=op` with write tracking.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    entries: Vec<Entry>,
    writes_pending: BTreeMap<u64, u32>,
}

impl Journal {
    /// A journal holding `entries`, which must be ops `1..=n` in order; all counted durable.
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        for (index, entry) in entries.iter().enumerate() {
            assert_eq!(
                entry.op,
                index as u64 + 1,
                "journal entries must be contiguous from 1"
            );
        }
        Journal {
            entries,
            writes_pending: BTreeMap::new(),
        }
    }

    /// Highest op in the log (0 when empty).
    pub fn op(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The entry at `op`, if present.
    pub fn get(&self, op: u64) -> Option<&Entry> {
        if op == 0 {
            return None;
        }
        self.entries.get(op as usize - 1)
    }

    /// All entries, op order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Appends the next entry and counts one pending write for it.
    pub fn append(&mut self, entry: Entry) {
        assert_eq!(entry.op, self.op() + 1);
        *self.writes_pending.entry(entry.op).or_insert(0) += 1;
        self.entries.push(entry);
    }

    /// Replaces the log with `log`. Returns the first op that differs (entries from it on must be
    /// rewritten and anything above `log`'s end truncated), or `None` when nothing changed.
    pub fn replace(&mut self, log: Vec<Entry>) -> Option<u64> {
        let common = self
            .entries
            .iter()
            .zip(log.iter())
            .take_while(|(ours, theirs)| ours.checksum == theirs.checksum)
            .count();
        if common == self.entries.len() && common == log.len() {
            return None;
        }
        let first_different = common as u64 + 1;
        self.entries.truncate(common);
        for entry in log.into_iter().skip(common) {
            self.append(entry);
        }
        Some(first_different)
    }

    /// Records one completed write for `op`; returns true when `op` became durable.
    pub fn write_done(&mut self, op: u64) -> bool {
        match self.writes_pending.get_mut(&op) {
            None => false,
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    self.writes_pending.remove(&op);
                    op <= self.op()
                } else {
                    false
                }
            }
        }
    }

    /// True when `op` is present and no write for it is in flight.
    pub fn is_durable(&self, op: u64) -> bool {
        op >= 1 && op <= self.op() && !self.writes_pending.contains_key(&op)
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
        assert_eq!(journal.replace(vec![entry(1, 0), entry(2, 1)]), Some(2));
        assert!(
            !journal.write_done(2),
            "the first write of op 2 was for the old entry"
        );
        assert!(journal.write_done(2));
        assert!(journal.is_durable(2));
        assert!(journal.write_done(1));
        assert_eq!(journal.replace(journal.entries().to_vec()), None);
    }
}
