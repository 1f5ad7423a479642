//! The number of replicas a node's metadata history was formed with (spec/storage.spec
//! `ClusterReplicas`, the data directory's `cluster.replicas`), and the start it refuses: one
//! whose roster lists another number of nodes. Every quorum is a majority of the replica count,
//! so a cluster of five shrunk to three could elect a primary from two replicas that never saw
//! a write three of five acknowledged, and one of three grown to five could commit with the two
//! new, empty replicas and one old one. The roster's size is fixed when the history is formed.
//!
//! [`encode`], [`decode`] and [`judge`] are the file and the rule; [`check_or_record`] is the
//! start's shell around them.

use iggy_generated::storage::{CLUSTER_REPLICAS_FILE, CLUSTER_REPLICAS_MAGIC, ClusterReplicas};
use std::path::Path;

/// The file's bytes for a history of `replicas` replicas of `cluster`.
pub fn encode(cluster: u128, replicas: u8) -> Vec<u8> {
    let mut file = ClusterReplicas {
        magic: CLUSTER_REPLICAS_MAGIC,
        cluster,
        replicas,
        checksum: 0,
    };
    file.checksum =
        twox_hash::XxHash3_64::oneshot(&file.to_bytes()[..ClusterReplicas::CHECKSUM_OFFSET]);
    file.to_bytes().to_vec()
}

/// The file `bytes` hold when it is whole and intact, whichever cluster wrote it.
fn intact(bytes: &[u8]) -> Result<ClusterReplicas, String> {
    if bytes.len() != ClusterReplicas::SIZE {
        return Err(format!(
            "{} bytes where {} were written (torn or damaged)",
            bytes.len(),
            ClusterReplicas::SIZE
        ));
    }
    let file = ClusterReplicas::decode_fixed(bytes).map_err(|_| "malformed")?;
    let covered = &bytes[..ClusterReplicas::CHECKSUM_OFFSET];
    if file.magic != CLUSTER_REPLICAS_MAGIC
        || twox_hash::XxHash3_64::oneshot(covered) != file.checksum
    {
        return Err("checksum mismatch (torn or damaged)".into());
    }
    Ok(file)
}

/// The cluster id and replica count an intact file records, whichever cluster it is of.
pub fn recorded(bytes: &[u8]) -> Option<(u128, u8)> {
    intact(bytes).ok().map(|file| (file.cluster, file.replicas))
}

/// The replica count a file of `cluster` records.
pub fn decode(bytes: &[u8], cluster: u128) -> Result<u8, String> {
    let file = intact(bytes)?;
    if file.cluster != cluster {
        return Err(another_cluster(file.cluster, cluster));
    }
    Ok(file.replicas)
}

fn another_cluster(written_by: u128, cluster: u128) -> String {
    format!("written by cluster {written_by:#x}, this node is of cluster {cluster:#x}")
}

/// Whether a history formed by `recorded` replicas may run with a roster of `roster` nodes (a
/// standalone node's is of one).
pub fn judge(recorded: u8, roster: u8) -> Result<(), String> {
    if recorded == roster {
        return Ok(());
    }
    if recorded == 1 {
        return Err(format!(
            "this data directory is a standalone node's (its metadata history was formed by one \
             replica), and [[cluster.nodes]] lists {roster}: a standalone node cannot become a \
             cluster node (its history holds writes no other node has, and a cluster's size \
             cannot change), so the start is refused and nothing was written. Start it \
             standalone (cluster.enabled = false); to run a cluster, start it on empty data \
             directories and move the data through a client"
        ));
    }
    if roster == 1 {
        return Err(format!(
            "this data directory is a node's of a cluster of {recorded} replicas, and \
             cluster.enabled is false: served alone it would fork the cluster's history, and \
             every write it acknowledged would be discarded when the node rejoins, so the start \
             is refused and nothing was written. Start it with its cluster's configuration \
             ([cluster] enabled, the roster and --replica-id)"
        ));
    }
    Err(format!(
        "this node's metadata history was formed by a cluster of {recorded} replicas, and \
         [[cluster.nodes]] now lists {roster}: a cluster's size cannot change, since quorums of \
         {roster} would not meet those that acknowledged its writes (a write {quorum} of \
         {recorded} acknowledged could be lost), so the start is refused and nothing was \
         written. Start it with the roster of {recorded} nodes it was formed with; to run \
         {roster} nodes, start a new cluster on empty data directories and move the data \
         through a client",
        quorum = recorded / 2 + 1,
    ))
}

/// What [`check_or_record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The file was there and agrees with the roster.
    Agrees,
    /// There was no file (a new history, or a directory of a build before it): the roster's
    /// count was written.
    Written,
}

/// At a start of a node whose data directory `dir` holds (or now begins) a metadata history:
/// refuses a roster of another size than the history's, and records the roster's when the
/// directory has no record yet (durably, before the replica plane declares anything).
///
/// A standalone node is a roster of one: its directory records a history of one replica, so a
/// cluster start on it is refused, and a standalone start on a cluster node's is refused in
/// turn. Its record is judged whichever cluster name wrote it: a standalone node's
/// `cluster.name` is not part of its identity.
pub fn check_or_record(dir: &Path, cluster: u128, roster: u8) -> Result<Recorded, String> {
    let path = dir.join(CLUSTER_REPLICAS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let refused = |error: String| {
                format!(
                    "{}: {error}; nothing was changed. Removing the file lets the node start: \
                     it records the roster's node count again (check first that the roster has \
                     the nodes this cluster was formed with)",
                    path.display()
                )
            };
            let file = intact(&bytes).map_err(refused)?;
            let standalone = file.replicas == 1 || roster == 1;
            if !standalone && file.cluster != cluster {
                return Err(refused(another_cluster(file.cluster, cluster)));
            }
            judge(file.replicas, roster).map(|()| Recorded::Agrees)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            iggy_storage::fail_stop::write_atomically_blocking(&path, &encode(cluster, roster));
            Ok(Recorded::Written)
        }
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// A standalone node's history started in a cluster, or a cluster node's started alone, as an
/// intact record says, judged before any other record of the directory (writing nothing): its
/// journal names another cluster too (a standalone node runs under the default name), which
/// would hide the reason and its fix. Anything else is left to [`check_or_record`] and to the
/// checks of the journal and view file, which name a changed `cluster.name`.
pub fn judge_standalone_change(dir: &Path, roster: u8) -> Result<(), String> {
    let bytes = std::fs::read(dir.join(CLUSTER_REPLICAS_FILE)).unwrap_or_default();
    match intact(&bytes) {
        Ok(file) if (file.replicas == 1) != (roster == 1) => judge(file.replicas, roster),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: u128 = 0x1234_5678_9abc_def0;

    #[test]
    fn a_history_runs_only_with_a_roster_of_its_own_size() {
        assert_eq!(judge(3, 3), Ok(()));
        let shrunk = judge(5, 3).unwrap_err();
        assert!(shrunk.contains("cluster of 5 replicas"), "{shrunk}");
        assert!(shrunk.contains("now lists 3"), "{shrunk}");
        assert!(shrunk.contains("3 of 5 acknowledged"), "{shrunk}");
        assert!(judge(3, 5).is_err());
        let standalone = judge(1, 3).unwrap_err();
        assert!(standalone.contains("a standalone node's"), "{standalone}");
        let alone = judge(3, 1).unwrap_err();
        assert!(alone.contains("cluster of 3 replicas"), "{alone}");
        assert!(alone.contains("cluster.enabled is false"), "{alone}");
        assert_eq!(judge(1, 1), Ok(()));
    }

    #[test]
    fn a_standalone_record_is_judged_whichever_cluster_name_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CLUSTER_REPLICAS_FILE);
        assert_eq!(
            check_or_record(dir.path(), CLUSTER, 1),
            Ok(Recorded::Written)
        );
        assert_eq!(recorded(&std::fs::read(&path).unwrap()), Some((CLUSTER, 1)));
        // Renamed, still standalone: agrees; as a cluster of three, refused, named so.
        assert_eq!(
            check_or_record(dir.path(), CLUSTER + 1, 1),
            Ok(Recorded::Agrees)
        );
        let refused = check_or_record(dir.path(), CLUSTER + 1, 3).unwrap_err();
        assert!(refused.contains("a standalone node's"), "{refused}");
        // A cluster node's directory started standalone, under any name.
        std::fs::write(&path, encode(CLUSTER, 3)).unwrap();
        for name in [CLUSTER, CLUSTER + 1] {
            let refused = check_or_record(dir.path(), name, 1).unwrap_err();
            assert!(refused.contains("cluster.enabled is false"), "{refused}");
        }
        assert_eq!(recorded(&std::fs::read(&path).unwrap()), Some((CLUSTER, 3)));
    }

    #[test]
    fn the_file_round_trips_and_a_damaged_or_foreign_one_is_refused() {
        let bytes = encode(CLUSTER, 5);
        assert_eq!(bytes.len(), ClusterReplicas::SIZE);
        assert_eq!(decode(&bytes, CLUSTER), Ok(5));
        let foreign = decode(&bytes, CLUSTER + 1).unwrap_err();
        assert!(foreign.contains("written by cluster"), "{foreign}");
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(decode(&damaged, CLUSTER).is_err(), "byte {at} flipped");
        }
        assert!(decode(&bytes[..20], CLUSTER).is_err());
    }

    #[test]
    fn the_first_start_records_the_roster_and_later_starts_compare_with_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            check_or_record(dir.path(), CLUSTER, 3),
            Ok(Recorded::Written)
        );
        assert_eq!(
            check_or_record(dir.path(), CLUSTER, 3),
            Ok(Recorded::Agrees)
        );
        let path = dir.path().join(CLUSTER_REPLICAS_FILE);
        let before = std::fs::read(&path).unwrap();
        assert!(check_or_record(dir.path(), CLUSTER, 5).is_err());
        assert!(check_or_record(dir.path(), CLUSTER + 1, 3).is_err());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "a refusal writes nothing"
        );
    }
}
