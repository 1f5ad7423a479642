//! The durable view state of one replica: the highest view it took part in and the view of the
//! log its journal holds.
//!
//! Viewstamped Replication Revisited keeps the view volatile and recovers it from the group
//! (the Recovery protocol), which needs a quorum of replicas that did not restart: after a
//! restart of every replica nobody remembers which views were entered or voted in. Here the
//! replica asks the shell to persist its view state ([`crate::Action::PersistView`]) and sends
//! no message naming that view until the shell reports it durable, so a restarted replica knows
//! every view it ever spoke in and rejoins from its own disk.
//!
//! Encoding: `VsrViewState` of spec/storage.spec, sealed like a checkpoint. The shell keeps two
//! slots and writes the one not holding the latest valid state ([`ViewState::latest`] picks the
//! newer valid slot, so a torn write falls back to the previous state, which is the durable
//! one: a write that did not complete was never reported persisted).

use crate::message::{Fnv, ReplicaId};
use iggy_generated::storage::{VSR_VIEW_STATE_MAGIC, VsrViewState};

/// What a replica persists about views. Absent state is `ViewState::default()` (view 0, log
/// view 0): what a freshly formatted replica starts in, and what a data directory written
/// before view states existed means (only groups of one ran, and their view never changes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ViewState {
    /// The highest view this replica voted in (StartViewChange) or entered.
    pub view: u32,
    /// The view whose log the durable journal holds (the last view it was normal in).
    pub log_view: u32,
}

/// Why view-state bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewStateError {
    /// Not a whole record with its magic and seal (torn or corrupt).
    Invalid,
    /// A valid record of another cluster or another replica.
    Foreign { cluster: u128, replica: ReplicaId },
    /// Both slots hold bytes and neither is valid: the latest durable state is unknown.
    BothSlotsInvalid,
}

impl std::fmt::Display for ViewStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewStateError::Invalid => f.write_str("view state torn or corrupt"),
            ViewStateError::Foreign { cluster, replica } => write!(
                f,
                "view state belongs to cluster {cluster:#x}, replica {replica}"
            ),
            ViewStateError::BothSlotsInvalid => f.write_str("both view state slots are invalid"),
        }
    }
}

impl std::error::Error for ViewStateError {}

const SEALED: usize = VsrViewState::SEAL_OFFSET;

impl ViewState {
    /// The encoded record (`VsrViewState`) of `replica` in `cluster`.
    pub fn encode(&self, cluster: u128, replica: ReplicaId) -> [u8; VsrViewState::SIZE] {
        let mut bytes = VsrViewState {
            magic: VSR_VIEW_STATE_MAGIC,
            cluster,
            replica,
            view: self.view,
            log_view: self.log_view,
            seal: 0,
        }
        .to_bytes();
        let seal = Fnv::oneshot(&bytes[..SEALED]);
        bytes[SEALED..].copy_from_slice(&seal.to_le_bytes());
        bytes
    }

    /// Decodes and verifies a record written by `replica` of `cluster`.
    pub fn decode(bytes: &[u8], cluster: u128, replica: ReplicaId) -> Result<Self, ViewStateError> {
        if bytes.len() != VsrViewState::SIZE {
            return Err(ViewStateError::Invalid);
        }
        let record = VsrViewState::decode_fixed(bytes).map_err(|_| ViewStateError::Invalid)?;
        if record.magic != VSR_VIEW_STATE_MAGIC || record.seal != Fnv::oneshot(&bytes[..SEALED]) {
            return Err(ViewStateError::Invalid);
        }
        if record.cluster != cluster || record.replica != replica {
            return Err(ViewStateError::Foreign {
                cluster: record.cluster,
                replica: record.replica,
            });
        }
        if record.log_view > record.view {
            return Err(ViewStateError::Invalid);
        }
        Ok(ViewState {
            view: record.view,
            log_view: record.log_view,
        })
    }

    /// The latest state of two slots (`None`: never written) and the slot the next write goes
    /// to. An invalid slot beside a valid one is a torn write (the valid one is the latest
    /// durable state); an invalid slot beside an empty one is a torn first write (nothing was
    /// ever persisted: the default state). A foreign record is refused outright.
    pub fn latest(
        slots: [Option<&[u8]>; 2],
        cluster: u128,
        replica: ReplicaId,
    ) -> Result<(ViewState, usize), ViewStateError> {
        let mut decoded = [None, None];
        let mut invalid = 0;
        for (index, slot) in slots.iter().enumerate() {
            let Some(bytes) = slot else { continue };
            match ViewState::decode(bytes, cluster, replica) {
                Ok(state) => decoded[index] = Some(state),
                Err(ViewStateError::Invalid) => invalid += 1,
                Err(other) => return Err(other),
            }
        }
        if invalid == 2 {
            return Err(ViewStateError::BothSlotsInvalid);
        }
        // Views only grow, so the newer state is the larger one.
        Ok(match decoded {
            [Some(first), Some(second)] if second > first => (second, 0),
            [Some(first), _] => (first, 1),
            [None, Some(second)] => (second, 0),
            [None, None] => (ViewState::default(), 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_slot_falls_back_to_the_other_and_foreign_state_is_refused() {
        let older = ViewState {
            view: 3,
            log_view: 2,
        };
        let newer = ViewState {
            view: 4,
            log_view: 4,
        };
        let a = older.encode(7, 1);
        let b = newer.encode(7, 1);
        assert_eq!(ViewState::decode(&a, 7, 1), Ok(older));
        assert_eq!(
            ViewState::latest([Some(&a), Some(&b)], 7, 1),
            Ok((newer, 0))
        );
        assert_eq!(
            ViewState::latest([Some(&a), Some(&b[..20])], 7, 1),
            Ok((older, 1))
        );
        let mut flipped = b;
        flipped[22] ^= 1;
        assert_eq!(
            ViewState::latest([Some(&flipped), None], 7, 1),
            Ok((ViewState::default(), 0)),
            "a torn first write: nothing was persisted"
        );
        assert_eq!(
            ViewState::latest([Some(&flipped), Some(&b[..3])], 7, 1),
            Err(ViewStateError::BothSlotsInvalid)
        );
        assert_eq!(
            ViewState::latest([Some(&a), None], 7, 2),
            Err(ViewStateError::Foreign {
                cluster: 7,
                replica: 1
            })
        );
        assert_eq!(
            ViewState::latest([None, None], 7, 1),
            Ok((ViewState::default(), 0))
        );
    }
}
