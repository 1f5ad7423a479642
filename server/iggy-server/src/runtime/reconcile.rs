//! Start-up reconciliation of partition directories with the recovered metadata, decided here
//! without I/O: the metadata journal is replayed into the model first (no op's disk effect is
//! re-run), then every partition directory is judged once against the final model.
//!
//! Rules (the seed's, and issue 11's):
//! - a live partition is opened; `prepare_partition_dir` then applies the per-directory rules
//!   (same revision: opened with its data; older: discarded, starts empty; newer: refused and
//!   left untouched; no record: adopted with a warning);
//! - a directory no live partition owns is discarded only when a committed delete of exactly
//!   the incarnation its `created.revision` names was replayed; anything else is kept and
//!   reported.
//!
//! Why a live partition's files can never be deleted: a discard names one revision, and
//! `iggy_storage::revision::discard_partition_dir` removes a directory only when its
//! `created.revision` names that revision. The revisions discarded here come from committed
//! deletes, never from the live model ([`plan`] checks it), and an incarnation is unique (the
//! creating op's number and the partition id), so the directory of a live incarnation never
//! names a deleted one.

//!
//! A metadata checkpoint installed by state transfer replaces the model wholesale: the ops
//! between this replica's commit and the checkpoint's op are never applied here, so no delete
//! names what they removed. [`plan_after_transfer`] judges the running partitions and the
//! directories against the new model instead: an incarnation is the op that created it
//! (`incarnation >> 20`) and the partition id, so one created at or below the checkpoint's op
//! and not live in its model was deleted by an op the checkpoint covers, and its directory
//! goes; a live partition is opened (a same-id directory of another incarnation is discarded
//! first, so the new incarnation starts fresh); anything else is kept.

use iggy_metadata::PartitionKey;
use std::collections::{BTreeMap, HashSet};

/// What start-up does with one partition path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskAction {
    /// Open the live partition `key` as `incarnation` (its directory is checked on open).
    Open { key: PartitionKey, incarnation: u64 },
    /// Finish a committed delete: remove the directory if it still names `revision`.
    Discard { key: PartitionKey, revision: u64 },
    /// A directory no live partition owns and no committed delete names: left in place.
    Keep {
        key: PartitionKey,
        found: Option<u64>,
    },
}

/// Decides, from the final model's live partitions (`live`: key → incarnation), the deletes
/// replayed from the journal (`deleted`: key and the incarnation deleted) and the partition
/// directories on disk with the revision each names (`on_disk`), what start-up does.
pub fn plan(
    live: &BTreeMap<PartitionKey, u64>,
    deleted: &HashSet<(PartitionKey, u64)>,
    on_disk: &[(PartitionKey, Option<u64>)],
) -> Vec<DiskAction> {
    let live_incarnations: HashSet<u64> = live.values().copied().collect();
    let mut actions = Vec::new();
    for &(key, found) in on_disk {
        if live.contains_key(&key) {
            continue;
        }
        actions.push(match found {
            Some(revision)
                if deleted.contains(&(key, revision)) && !live_incarnations.contains(&revision) =>
            {
                DiskAction::Discard { key, revision }
            }
            _ => DiskAction::Keep { key, found },
        });
    }
    actions.extend(
        live.iter()
            .map(|(&key, &incarnation)| DiskAction::Open { key, incarnation }),
    );
    actions
}

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

    #[test]
    fn a_reused_path_opens_the_live_incarnation_and_discards_nothing() {
        // Stream 0 created (incarnation 10), deleted, created again (incarnation 20).
        let actions = plan(
            &live(&[((0, 0, 0), 20)]),
            &HashSet::from([((0, 0, 0), 10)]),
            &[((0, 0, 0), Some(20))],
        );
        assert_eq!(
            actions,
            [DiskAction::Open {
                key: (0, 0, 0),
                incarnation: 20
            }]
        );
    }

    #[test]
    fn a_directory_of_a_committed_delete_is_discarded_and_others_are_kept() {
        let actions = plan(
            &live(&[]),
            &HashSet::from([((0, 0, 0), 10), ((0, 0, 1), 11)]),
            &[
                ((0, 0, 0), Some(10)),
                // A revision no replayed delete names (the delete is older than the
                // checkpoint, or a newer incarnation whose create was lost): kept.
                ((0, 0, 1), Some(30)),
                ((0, 0, 2), None),
            ],
        );
        assert_eq!(
            actions,
            [
                DiskAction::Discard {
                    key: (0, 0, 0),
                    revision: 10
                },
                DiskAction::Keep {
                    key: (0, 0, 1),
                    found: Some(30)
                },
                DiskAction::Keep {
                    key: (0, 0, 2),
                    found: None
                },
            ]
        );
    }

    #[test]
    fn a_live_incarnation_is_never_discarded_even_if_a_delete_names_it() {
        // Impossible in a consistent journal; the plan refuses it all the same.
        let actions = plan(
            &live(&[((1, 0, 0), 10)]),
            &HashSet::from([((0, 0, 0), 10)]),
            &[((0, 0, 0), Some(10))],
        );
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, DiskAction::Discard { .. })),
            "{actions:?}"
        );
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
