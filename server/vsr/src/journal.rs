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
//!
//! A log installed from headers (a view change) may name ops whose bodies this replica lacks:
//! they wait above the held entries as *awaited* slots (`op() + 1..=head_op()`), are never
//! written, and join the held entries in op order as their bodies arrive (`fill`,
//! `take_filled`). Only held entries count as journaled, durable or committable.

use crate::message::{Entry, EntryHeader, OPERATION_NOMINATE_LIMITS, OPERATION_REGISTER};
use std::collections::{BTreeMap, VecDeque};

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

/// An op of the installed log whose body is not held in op order yet: its header, and the body
/// once one matching it arrived (out of order, waiting for the ops before it).
#[derive(Clone, Debug)]
struct Awaited {
    header: EntryHeader,
    entry: Option<Entry>,
}

/// Log of entries `base.op + 1..=op` with write tracking, then the awaited slots up to
/// `head_op`.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    base: Base,
    entries: Vec<Entry>,
    awaited: VecDeque<Awaited>,
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
            awaited: VecDeque::new(),
            writes_pending: BTreeMap::new(),
        }
    }

    /// The checkpoint the journal starts after.
    pub fn base(&self) -> Base {
        self.base
    }

    /// Highest op held with its body (the base op when no entry is held).
    pub fn op(&self) -> u64 {
        self.base.op + self.entries.len() as u64
    }

    /// Highest op of the installed log, awaited slots included.
    pub fn head_op(&self) -> u64 {
        self.op() + self.awaited.len() as u64
    }

    /// True while the installed log names ops whose bodies are not held in op order.
    pub fn awaiting(&self) -> bool {
        !self.awaited.is_empty()
    }

    /// The header of the op at `op` when it is held or awaited.
    pub fn header_at(&self, op: u64) -> Option<EntryHeader> {
        if op <= self.op() {
            return self.get(op).map(Entry::header);
        }
        let index = usize::try_from(op - self.op() - 1).ok()?;
        self.awaited.get(index).map(|slot| slot.header)
    }

    /// The first awaited op at or after `from` whose body has not arrived.
    pub fn unfilled_from(&self, from: u64) -> Option<u64> {
        let first = self.op() + 1;
        let skip = from.saturating_sub(first);
        self.awaited
            .iter()
            .enumerate()
            .skip(usize::try_from(skip).ok()?)
            .find(|(_, slot)| slot.entry.is_none())
            .map(|(index, _)| first + index as u64)
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

    /// Appends the next entry (nothing may be awaited) and counts one pending write for it.
    pub fn append(&mut self, entry: Entry) {
        assert!(!self.awaiting(), "an op appended above awaited ones");
        self.push_held(entry);
    }

    fn push_held(&mut self, entry: Entry) {
        assert_eq!(entry.op, self.op() + 1);
        *self.writes_pending.entry(entry.op).or_insert(0) += 1;
        self.entries.push(entry);
    }

    /// While awaiting: the primary's next op (`head_op() + 1`), held as an awaited slot until
    /// the ops before it arrive.
    pub fn push_awaited(&mut self, entry: Entry) {
        assert!(self.awaiting(), "nothing awaited: append instead");
        assert_eq!(entry.op, self.head_op() + 1);
        let header = entry.header();
        self.awaited.push_back(Awaited {
            header,
            entry: Some(entry),
        });
    }

    /// Takes `entry` as the body of its awaited slot when it matches the slot's header and no
    /// body arrived yet; returns whether it did. A body whose checksum differs is refused.
    pub fn fill(&mut self, entry: Entry) -> bool {
        let Some(index) = entry.op.checked_sub(self.op() + 1) else {
            return false;
        };
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|index| self.awaited.get_mut(index))
        else {
            return false;
        };
        if slot.entry.is_some() || !slot.header.matches(&entry) {
            return false;
        }
        slot.entry = Some(entry);
        true
    }

    /// Moves the awaited slots whose bodies arrived, from the first one on and in op order, to
    /// the held entries (each counting one pending write); returns them for the shell to write.
    pub fn take_filled(&mut self) -> Vec<Entry> {
        let mut held = Vec::new();
        while self
            .awaited
            .front()
            .is_some_and(|slot| slot.entry.is_some())
        {
            let entry = self.awaited.pop_front().and_then(|slot| slot.entry);
            let entry = entry.expect("a filled slot");
            self.push_held(entry.clone());
            held.push(entry);
        }
        held
    }

    /// Replaces the log above `base` with the one `log` names (headers of ops `base + 1..`).
    /// Headers at or below this journal's base are ignored, and held entries at or below `base`
    /// are kept: the caller has established that both sides agree up to `base`. Held entries
    /// whose checksums match stay held; from the first difference on, held entries are dropped
    /// and the log's ops become awaited slots (keeping a body that arrived for the same header).
    /// Returns the first held op dropped (the durable journal must be truncated below it), or
    /// `None` when no held entry was dropped.
    pub fn replace(&mut self, base: u64, log: Vec<EntryHeader>) -> Option<u64> {
        assert!(base <= self.op(), "a log above a gap");
        let start = base.max(self.base.op);
        let incoming: Vec<EntryHeader> = log.into_iter().filter(|h| h.op > start).collect();
        let ours: Vec<u64> = self
            .entries_after(start)
            .iter()
            .map(|entry| entry.checksum)
            .chain(self.awaited.iter().map(|slot| slot.header.checksum))
            .collect();
        let common = ours
            .iter()
            .zip(incoming.iter())
            .take_while(|(ours, theirs)| **ours == theirs.checksum)
            .count();
        if common == ours.len() && common == incoming.len() {
            return None;
        }
        let first_different = start + common as u64 + 1;
        let dropped = first_different <= self.op();
        let awaited_first = self.op() + 1;
        let mut awaited = std::mem::take(&mut self.awaited);
        if dropped {
            self.entries
                .truncate((first_different - 1 - self.base.op) as usize);
        }
        let held_op = self.op();
        for header in incoming.into_iter().filter(|h| h.op > held_op) {
            let arrived = header
                .op
                .checked_sub(awaited_first)
                .and_then(|index| awaited.get_mut(usize::try_from(index).ok()?))
                .filter(|slot| slot.header == header)
                .and_then(|slot| slot.entry.take());
            self.awaited.push_back(Awaited {
                header,
                entry: arrived,
            });
        }
        dropped.then_some(first_different)
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

    fn headers(entries: &[Entry]) -> Vec<EntryHeader> {
        entries.iter().map(Entry::header).collect()
    }

    #[test]
    fn overwritten_op_is_durable_only_after_its_last_write() {
        let mut journal = Journal::default();
        journal.append(entry(1, 0));
        journal.append(entry(2, 0));
        assert_eq!(
            journal.replace(0, headers(&[entry(1, 0), entry(2, 1)])),
            Some(2)
        );
        assert_eq!(journal.op(), 1, "op 2's new body is awaited");
        assert!(journal.fill(entry(2, 1)));
        assert_eq!(journal.take_filled(), vec![entry(2, 1)]);
        assert!(
            !journal.write_done(2),
            "the first write of op 2 was for the old entry"
        );
        assert!(journal.write_done(2));
        assert!(journal.is_durable(2));
        assert!(journal.write_done(1));
        assert_eq!(journal.replace(0, headers(journal.entries())), None);
    }

    #[test]
    fn awaited_ops_join_the_log_in_op_order_and_only_with_their_own_bodies() {
        let mut journal = Journal::from_entries(Base::default(), vec![entry(1, 0)]);
        let log = [entry(1, 0), entry(2, 1), entry(3, 1)];
        assert_eq!(
            journal.replace(0, headers(&log)),
            None,
            "nothing held dropped"
        );
        assert_eq!((journal.op(), journal.head_op()), (1, 3));
        let forged = Entry::new(2, 1, 1, 2, 1, Bytes::from_static(b"forged"));
        assert!(!journal.fill(forged), "a body its header does not name");
        assert!(journal.fill(entry(3, 1)));
        assert!(journal.take_filled().is_empty(), "op 2 is still missing");
        assert_eq!(journal.unfilled_from(2), Some(2));
        assert_eq!(journal.unfilled_from(3), None);
        assert!(journal.durable_through() == 1 && !journal.is_durable(3));
        assert!(journal.fill(entry(2, 1)));
        assert!(!journal.fill(entry(2, 1)), "already arrived");
        assert_eq!(journal.take_filled(), log[1..].to_vec());
        assert!(!journal.awaiting());
        assert_eq!(journal.durable_through(), 1, "written, not yet durable");
    }

    #[test]
    fn a_reinstalled_log_keeps_the_bodies_that_arrived_for_its_headers() {
        let mut journal = Journal::default();
        let log = [entry(1, 1), entry(2, 1), entry(3, 1)];
        assert_eq!(journal.replace(0, headers(&log[..2])), None);
        assert!(journal.fill(entry(2, 1)));
        assert_eq!(journal.replace(0, headers(&log)), None);
        assert_eq!(journal.head_op(), 3);
        assert!(journal.fill(entry(1, 1)));
        assert_eq!(journal.take_filled().len(), 2, "op 2's body stayed");
        assert_eq!(journal.unfilled_from(3), Some(3));
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
            journal.replace(
                1,
                headers(&[entry(2, 0), entry(3, 0), entry(4, 0), entry(5, 1)])
            ),
            Some(5)
        );
        assert_eq!(journal.header_at(5).unwrap().view, 1);
        assert!(journal.fill(entry(5, 1)));
        assert_eq!(journal.take_filled().len(), 1);
        // A log from a newer base keeps our entries up to it.
        assert_eq!(
            journal.replace(4, headers(&[entry(5, 1), entry(6, 1)])),
            None
        );
        assert_eq!((journal.op(), journal.head_op()), (5, 6));
        assert_eq!(journal.get(4).unwrap().op, 4);
    }
}
