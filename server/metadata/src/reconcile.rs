//! What a replica does with its partitions after it installed a metadata checkpoint copied from
//! a peer (state transfer), decided without I/O.
//!
//! The checkpoint replaces the model wholesale: the ops between the replica's commit and the
//! checkpoint's op are never applied there, so no delete names what they removed. The running
//! partitions and the directories are judged against the new model instead: an incarnation is
//! the op that created it (`incarnation >> 20`) and the partition id, so one created at or below
//! the checkpoint's op and not live in its model was deleted by an op the checkpoint covers, and
//! its directory goes; a live partition is opened (a same-id directory of another incarnation is
//! discarded first, so the new incarnation starts fresh); anything else is kept. A live
//! incarnation's directory is never discarded, whatever key it sits under.

use crate::PartitionKey;
use std::collections::{BTreeMap, HashSet};

/// What installing a transferred metadata checkpoint does with one partition, in order: every
/// stop, then every discard, then every open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferAction {
    /// Stop the running group of `key`: the new model does not hold its `incarnation`.
    Stop { key: PartitionKey, incarnation: u64 },
    /// Remove the directory of `key` if it still names `revision`, an incarnation the new model
    /// proves deleted.
    Discard { key: PartitionKey, revision: u64 },
    /// Open the live partition `key` as `incarnation` (its directory is checked on open).
    Open { key: PartitionKey, incarnation: u64 },
    /// A directory the new model neither holds nor proves deleted: left in place.
    Keep {
        key: PartitionKey,
        found: Option<u64>,
    },
}

/// The op that created `incarnation`.
pub fn created_op(incarnation: u64) -> u64 {
    incarnation >> 20
}

/// Decides, from the transferred model's live partitions (`live`: key → incarnation) as of
/// `checkpoint_op`, the partition groups running here (`running`: key → incarnation) and the
/// partition directories on disk with the revision each names (`on_disk`), what installing the
/// checkpoint does. A running partition that stays live with the same incarnation is left
/// alone: it is neither stopped nor opened again.
pub fn plan_after_transfer(
    live: &BTreeMap<PartitionKey, u64>,
    checkpoint_op: u64,
    running: &BTreeMap<PartitionKey, u64>,
    on_disk: &[(PartitionKey, Option<u64>)],
) -> Vec<TransferAction> {
    let live_incarnations: HashSet<u64> = live.values().copied().collect();
    let stays = |key: &PartitionKey, incarnation: u64| live.get(key) == Some(&incarnation);
    let mut stops = Vec::new();
    let mut discards = Vec::new();
    let mut keeps = Vec::new();
    for (&key, &incarnation) in running {
        if !stays(&key, incarnation) {
            stops.push(TransferAction::Stop { key, incarnation });
        }
    }
    for &(key, found) in on_disk {
        match found {
            Some(revision) if stays(&key, revision) => {}
            Some(revision)
                if created_op(revision) <= checkpoint_op
                    && !live_incarnations.contains(&revision) =>
            {
                discards.push(TransferAction::Discard { key, revision });
            }
            // The live incarnation's open judges a directory of another one (newer: refused
            // and left untouched; no record: adopted with a warning).
            _ if live.contains_key(&key) => {}
            _ => keeps.push(TransferAction::Keep { key, found }),
        }
    }
    let opens = live
        .iter()
        .filter(|(key, incarnation)| running.get(key) != Some(incarnation))
        .map(|(&key, &incarnation)| TransferAction::Open { key, incarnation });
    stops
        .into_iter()
        .chain(discards)
        .chain(keeps)
        .chain(opens)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(entries: &[(PartitionKey, u64)]) -> BTreeMap<PartitionKey, u64> {
        entries.iter().copied().collect()
    }

    /// An incarnation created by op `op` for partition id `partition`, as the model numbers it.
    fn incarnation(op: u64, partition: u32) -> u64 {
        (op << 20) | u64::from(partition)
    }

    #[test]
    fn after_a_transfer_a_partition_deleted_and_recreated_meanwhile_starts_fresh() {
        // The laggard ran (0, 0, 0) as created by op 10; while it was down the stream was
        // deleted and created again with the same ids by op 50. The checkpoint is at op 60.
        let old = incarnation(10, 0);
        let new = incarnation(50, 0);
        let actions = plan_after_transfer(
            &live(&[((0, 0, 0), new)]),
            60,
            &live(&[((0, 0, 0), old)]),
            &[((0, 0, 0), Some(old))],
        );
        assert_eq!(
            actions,
            [
                TransferAction::Stop {
                    key: (0, 0, 0),
                    incarnation: old
                },
                TransferAction::Discard {
                    key: (0, 0, 0),
                    revision: old
                },
                TransferAction::Open {
                    key: (0, 0, 0),
                    incarnation: new
                },
            ]
        );
    }

    #[test]
    fn after_a_transfer_a_partition_created_meanwhile_opens_and_one_deleted_meanwhile_goes() {
        let kept = incarnation(5, 0);
        let deleted = incarnation(8, 1);
        let created = incarnation(40, 0);
        let actions = plan_after_transfer(
            &live(&[((1, 0, 0), kept), ((2, 0, 0), created)]),
            60,
            &live(&[((1, 0, 0), kept), ((1, 0, 1), deleted)]),
            &[((1, 0, 0), Some(kept)), ((1, 0, 1), Some(deleted))],
        );
        assert_eq!(
            actions,
            [
                TransferAction::Stop {
                    key: (1, 0, 1),
                    incarnation: deleted
                },
                TransferAction::Discard {
                    key: (1, 0, 1),
                    revision: deleted
                },
                // The partition live in both models keeps running untouched.
                TransferAction::Open {
                    key: (2, 0, 0),
                    incarnation: created
                },
            ]
        );
    }

    #[test]
    fn after_a_transfer_only_directories_the_checkpoint_proves_deleted_are_discarded() {
        let live_here = incarnation(20, 0);
        let actions = plan_after_transfer(
            &live(&[((0, 0, 0), live_here)]),
            60,
            &live(&[]),
            &[
                // Created after the checkpoint's op: nothing proves it deleted.
                ((3, 0, 0), Some(incarnation(61, 0))),
                // No record: an older server's directory, never judged deleted.
                ((4, 0, 0), None),
                // The live incarnation's own directory.
                ((0, 0, 0), Some(live_here)),
                // A record naming the live incarnation under another key: kept, never removed.
                ((5, 0, 0), Some(live_here)),
                // A same-id directory newer than the live incarnation: its open refuses it.
                ((0, 0, 0), Some(incarnation(70, 0))),
            ],
        );
        assert_eq!(
            actions,
            [
                TransferAction::Keep {
                    key: (3, 0, 0),
                    found: Some(incarnation(61, 0))
                },
                TransferAction::Keep {
                    key: (4, 0, 0),
                    found: None
                },
                TransferAction::Keep {
                    key: (5, 0, 0),
                    found: Some(live_here)
                },
                TransferAction::Open {
                    key: (0, 0, 0),
                    incarnation: live_here
                },
            ]
        );
    }
}
