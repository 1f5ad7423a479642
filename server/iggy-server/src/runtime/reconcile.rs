//! Start-up reconciliation of partition directories with the recovered metadata, decided here
//! without I/O: the metadata journal is replayed into the model first (no op's disk effect is
//! re-run), then every partition directory is judged once against the final model.
//!
//! Rules (the seed's, and issue 11's):
//! - a live partition is opened; `prepare_partition_dir` then applies the per-directory rules
//!   (same revision: opened with its data; older: discarded, starts empty; newer: refused and
//!   left untouched; no record: adopted with a warning; a damaged record: written again when
//!   the namespace publishes the incarnation, refused otherwise);
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
//! A metadata checkpoint installed by state transfer replaces the model wholesale; the
//! partitions are then judged by [`plan_after_transfer`] (in `iggy_metadata::reconcile`, so the
//! simulator runs the same plan).

use iggy_metadata::PartitionKey;
pub use iggy_metadata::reconcile::{TransferAction, plan_after_transfer};
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
}
