use iggy_storage::StorageError;
use iggy_storage::revision::{
    Discarded, PartitionDirState, discard_partition_dir, finish_discards, prepare_partition_dir,
    write_retirement_fence,
};
use std::path::{Path, PathBuf};

/// A data directory in a temporary folder with partition 0 of topic 0 of stream 0: its
/// directory, its namespace records and the tree discarded directories go to.
struct DataDir {
    temporary: tempfile::TempDir,
    partition: PathBuf,
    namespace: PathBuf,
    discarded: PathBuf,
}

impl DataDir {
    fn new() -> Self {
        let temporary = tempfile::tempdir().unwrap();
        let root = temporary.path();
        DataDir {
            partition: root.join("streams/0/topics/0/partitions/0"),
            namespace: root.join("partition-initialization/0-0-0"),
            discarded: root.join("discarded-partitions"),
            temporary,
        }
    }

    fn root(&self) -> &Path {
        self.temporary.path()
    }

    async fn prepare(&self, incarnation: u64) -> Result<PartitionDirState, StorageError> {
        prepare_partition_dir(
            &self.partition,
            &self.namespace,
            &self.discarded,
            incarnation,
        )
        .await
    }

    async fn discard(&self, incarnation: u64) -> Result<Discarded, StorageError> {
        discard_partition_dir(&self.partition, &self.discarded, incarnation).await
    }
}

fn block_on(test: impl Future<Output = ()>) {
    compio::runtime::Runtime::new().unwrap().block_on(test);
}

/// A directory naming an older incarnation than the one its namespace published was not
/// left by that older incarnation's delete (a new incarnation publishes itself only after
/// writing its directory's record): a start once discarded it with the published
/// incarnation's messages and served the partition empty from offset 0.
#[test]
fn a_directory_older_than_its_published_incarnation_is_refused_unmodified() {
    block_on(async {
        let dir = DataDir::new();
        assert_eq!(dir.prepare(8).await.unwrap(), PartitionDirState::Created);
        std::fs::write(
            dir.partition.join("00000000000000000000.log"),
            b"acknowledged",
        )
        .unwrap();
        // The directory's record says 3: put back from elsewhere, or damaged into a valid value.
        let other = DataDir::new();
        other.prepare(3).await.unwrap();
        std::fs::copy(
            other.partition.join("created.revision"),
            dir.partition.join("created.revision"),
        )
        .unwrap();
        for incarnation in [8, 9] {
            let refused = dir.prepare(incarnation).await;
            assert!(
                matches!(&refused, Err(StorageError::Refused(why)) if why.contains("not the one initialized there")),
                "{refused:?}"
            );
            assert!(
                dir.partition.join("00000000000000000000.log").exists(),
                "nothing was modified"
            );
        }
    });
}

#[test]
fn created_revision_rules_and_fence() {
    block_on(async {
        let dir = DataDir::new();
        let (partition, namespace, discarded) = (&dir.partition, &dir.namespace, &dir.discarded);
        assert_eq!(dir.prepare(3).await.unwrap(), PartitionDirState::Created);
        std::fs::write(partition.join("00000000000000000000.log"), b"x").unwrap();
        assert_eq!(dir.prepare(3).await.unwrap(), PartitionDirState::Existing);
        assert!(partition.join("00000000000000000000.log").exists());
        assert_eq!(
            dir.prepare(5).await.unwrap(),
            PartitionDirState::ReplacedOlder { older: 3 }
        );
        assert!(!partition.join("00000000000000000000.log").exists());
        assert_eq!(
            std::fs::read_dir(discarded).unwrap().count(),
            0,
            "the discarded tree is removed"
        );
        assert!(dir.prepare(4).await.is_err());

        let legacy = dir.root().join("streams/0/topics/0/partitions/1");
        std::fs::create_dir_all(&legacy).unwrap();
        std::fs::write(legacy.join("00000000000000000000.log"), b"x").unwrap();
        let legacy_namespace = dir.root().join("partition-initialization/0.0.1");
        assert_eq!(
            prepare_partition_dir(&legacy, &legacy_namespace, discarded, 1)
                .await
                .unwrap(),
            PartitionDirState::AdoptedLegacy
        );
        assert!(legacy.join("00000000000000000000.log").exists());

        write_retirement_fence(namespace, 5).await;
        std::fs::remove_dir_all(partition).unwrap();
        assert!(dir.prepare(5).await.is_err());
    });
}

#[test]
fn a_published_incarnation_whose_directory_is_missing_is_refused_not_recreated_empty() {
    block_on(async {
        let dir = DataDir::new();
        let partition = &dir.partition;
        dir.prepare(7).await.unwrap();
        std::fs::remove_dir_all(partition).unwrap();
        let refused = dir.prepare(7).await;
        assert!(format!("{}", refused.unwrap_err()).contains("is missing"));
        assert!(!partition.exists(), "nothing is created in its place");
        // A new incarnation of the same ids starts empty.
        assert_eq!(dir.prepare(9).await.unwrap(), PartitionDirState::Created);
    });
}

/// Flips one bit of the checked record at `path`.
fn damage(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[3] ^= 1;
    std::fs::write(path, bytes).unwrap();
}

/// Every file under `dir` with its bytes, to show a refusal modified nothing.
fn tree(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(tree(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

/// A damaged created.revision is not read as an absent one (which adopts the directory): its
/// namespace publishing the incarnation opened proves the directory that incarnation's, and
/// its record is written again; otherwise the partition is refused naming the file, and
/// nothing under the data directory changes.
#[test]
fn a_damaged_created_revision_is_restored_only_when_its_namespace_proves_the_incarnation() {
    block_on(async {
        let dir = DataDir::new();
        let (partition, namespace) = (&dir.partition, &dir.namespace);
        let record = partition.join("created.revision");
        dir.prepare(7).await.unwrap();
        std::fs::write(partition.join("00000000000000000000.log"), b"acknowledged").unwrap();

        // Proven: the namespace publishes 7, the incarnation opened.
        damage(&record);
        assert_eq!(dir.prepare(7).await.unwrap(), PartitionDirState::Existing);
        assert_eq!(
            iggy_storage::records::read_checked_u64(&record)
                .await
                .unwrap(),
            Some(7)
        );
        assert_eq!(
            std::fs::read(partition.join("00000000000000000000.log")).unwrap(),
            b"acknowledged"
        );

        // Unproven: the namespace record is absent (a directory of an older release), or
        // publishes another incarnation; neither an adoption nor a discard of an older one.
        damage(&record);
        let namespace_record = namespace.join("created.revision");
        for (published, opened) in [(None, 7), (Some(7), 9)] {
            match published {
                None => std::fs::remove_file(&namespace_record).unwrap(),
                Some(published) => {
                    iggy_storage::records::write_checked_u64(&namespace_record, published).await
                }
            }
            let before = tree(dir.root());
            let refused = dir.prepare(opened).await.unwrap_err().to_string();
            for expected in [
                record.display().to_string(),
                "damaged".into(),
                "restore the record from a backup".into(),
                "remove the damaged record".into(),
            ] {
                assert!(refused.contains(&expected), "{expected}: {refused}");
            }
            assert_eq!(tree(dir.root()), before, "nothing was modified: {refused}");
        }

        // A damaged fence or namespace record is refused naming its file.
        iggy_storage::records::write_checked_u64(&record, 7).await;
        for file in ["retirement.fence", "created.revision"] {
            let damaged = namespace.join(file);
            iggy_storage::records::write_checked_u64(&damaged, 7).await;
            damage(&damaged);
            let before = tree(dir.root());
            let refused = dir.prepare(7).await.unwrap_err().to_string();
            assert!(
                refused.contains(&damaged.display().to_string()) && refused.contains("damaged"),
                "{refused}"
            );
            assert_eq!(tree(dir.root()), before, "nothing was modified: {refused}");
            std::fs::remove_file(&damaged).unwrap();
        }

        // A delete never removes a directory whose record it cannot read.
        damage(&record);
        let refused = dir.discard(7).await.unwrap_err().to_string();
        assert!(refused.contains(&record.display().to_string()), "{refused}");
        assert!(partition.join("00000000000000000000.log").exists());
    });
}

/// A node deleted incarnation 7, opened 9 under the same ids and deleted it too; a restart from
/// a metadata checkpoint before 7's delete finds 7 live again. Its directory is gone and the
/// namespace names the newer 9: 7 was deleted here, so it is refused, never started over empty
/// (a quorum of such nodes would form a new group of the deleted incarnation with another
/// history; the node simulator's `SIM_SEED=3005`, 5 nodes).
#[test]
fn an_incarnation_older_than_the_published_one_is_refused_over_no_directory() {
    block_on(async {
        let dir = DataDir::new();
        let partition = &dir.partition;
        dir.prepare(7).await.unwrap();
        assert_eq!(dir.discard(7).await.unwrap(), Discarded::Removed);
        dir.prepare(9).await.unwrap();
        assert_eq!(dir.discard(9).await.unwrap(), Discarded::Removed);
        let refused = dir.prepare(7).await;
        assert!(format!("{}", refused.unwrap_err()).contains("is missing"));
        assert!(!partition.exists(), "nothing is created in its place");
    });
}

#[test]
fn a_discard_removes_only_the_named_revision() {
    block_on(async {
        let dir = DataDir::new();
        let partition = &dir.partition;
        assert_eq!(dir.discard(3).await.unwrap(), Discarded::Absent);
        dir.prepare(8).await.unwrap();
        std::fs::write(partition.join("00000000000000000000.log"), b"live").unwrap();
        // A delete of an earlier incarnation of the same ids never touches the live one.
        assert_eq!(
            dir.discard(3).await.unwrap(),
            Discarded::Kept { found: Some(8) }
        );
        assert_eq!(
            std::fs::read(partition.join("00000000000000000000.log")).unwrap(),
            b"live"
        );
        assert_eq!(dir.discard(8).await.unwrap(), Discarded::Removed);
        assert!(!partition.exists());
        // A directory without created.revision is nobody's to remove.
        std::fs::create_dir_all(partition).unwrap();
        std::fs::write(partition.join("00000000000000000000.log"), b"x").unwrap();
        assert_eq!(
            dir.discard(8).await.unwrap(),
            Discarded::Kept { found: None }
        );
        assert!(partition.join("00000000000000000000.log").exists());
    });
}

#[test]
fn a_discard_interrupted_after_its_rename_is_finished_at_the_next_start() {
    let temporary = tempfile::tempdir().unwrap();
    let discarded = temporary.path().join("discarded-partitions");
    // What a crash between the rename and the removal leaves.
    std::fs::create_dir_all(discarded.join("12582912/nested")).unwrap();
    std::fs::write(
        discarded.join("12582912/nested/00000000000000000000.log"),
        b"x",
    )
    .unwrap();
    assert_eq!(finish_discards(&discarded).unwrap(), 1);
    assert_eq!(std::fs::read_dir(&discarded).unwrap().count(), 0);
    assert_eq!(
        finish_discards(&temporary.path().join("absent")).unwrap(),
        0
    );
}

/// The verifier reads the incarnation records as start-up applies them: a directory whose
/// namespace publishes it verifies; a fenced one, a newer publication and a damaged record are
/// errors; an unpublished one (a crash between the two writes) is a warning.
#[test]
fn verify_reads_incarnation_records_as_start_up_applies_them() {
    use iggy_storage::verify::{
        Severity, check_discarded, check_initialization, check_partition_revision, partition_dirs,
    };
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let root = temporary.path();
        let discarded = root.join("discarded-partitions");
        for (partition, revision) in [(0, 3), (1, 4), (2, 6)] {
            let dir = root.join(format!("streams/0/topics/0/partitions/{partition}"));
            let namespace = root.join(format!("partition-initialization/0-0-{partition}"));
            prepare_partition_dir(&dir, &namespace, &discarded, revision)
                .await
                .unwrap();
        }
        let severities = |findings: &[iggy_storage::verify::Finding]| {
            findings
                .iter()
                .map(|finding| finding.severity)
                .collect::<Vec<_>>()
        };
        let check_all = || async {
            let (namespaces, mut findings) = check_initialization(root).await;
            let (dirs, listed) = partition_dirs(root);
            findings.extend(listed);
            assert_eq!(dirs.len(), 3);
            let mut per_dir = Vec::new();
            for dir in &dirs {
                per_dir.push(check_partition_revision(dir, namespaces.get(&dir.namespace)).await);
            }
            (findings, per_dir)
        };
        let (findings, per_dir) = check_all().await;
        assert_eq!(findings, vec![]);
        assert!(per_dir.iter().all(Vec::is_empty), "{per_dir:?}");

        write_retirement_fence(&root.join("partition-initialization/0-0-0"), 3).await;
        iggy_storage::records::write_checked_u64(
            &root.join("partition-initialization/0-0-1/created.revision"),
            9,
        )
        .await;
        iggy_storage::records::write_checked_u64(
            &root.join("partition-initialization/0-0-2/created.revision"),
            5,
        )
        .await;
        let (findings, per_dir) = check_all().await;
        assert_eq!(findings, vec![]);
        assert_eq!(
            severities(&per_dir[0]),
            [Severity::Error],
            "fenced: {:?}",
            per_dir[0]
        );
        assert!(per_dir[0][0].message.contains("fenced"));
        assert_eq!(
            severities(&per_dir[1]),
            [Severity::Error],
            "newer publication: {:?}",
            per_dir[1]
        );
        assert_eq!(
            severities(&per_dir[2]),
            [Severity::Warning],
            "unpublished: {:?}",
            per_dir[2]
        );

        let record = root.join("streams/0/topics/0/partitions/2/created.revision");
        let mut bytes = std::fs::read(&record).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&record, bytes).unwrap();
        let (_, per_dir) = check_all().await;
        assert_eq!(severities(&per_dir[2]), [Severity::Error]);
        assert_eq!(
            (&per_dir[2][0].path, per_dir[2][0].offset),
            (&record, Some(0))
        );

        assert_eq!(check_discarded(root), vec![]);
        std::fs::create_dir_all(discarded.join("7")).unwrap();
        assert_eq!(severities(&check_discarded(root)), [Severity::Warning]);
    });
}

#[test]
fn opening_an_existing_published_incarnation_writes_nothing() {
    use std::os::unix::fs::MetadataExt;
    block_on(async {
        let dir = DataDir::new();
        assert_eq!(dir.prepare(3).await.unwrap(), PartitionDirState::Created);
        let files = |dir: &DataDir| {
            [&dir.partition, &dir.namespace].map(|folder| {
                let record = std::fs::metadata(folder.join("created.revision")).unwrap();
                (record.ino(), record.mtime_nsec())
            })
        };
        let before = files(&dir);
        // A restart opens the partition again: a disk with no space left must still allow it.
        assert_eq!(dir.prepare(3).await.unwrap(), PartitionDirState::Existing);
        assert_eq!(files(&dir), before, "no record was written again");
    });
}
