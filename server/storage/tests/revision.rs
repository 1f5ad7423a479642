use iggy_storage::revision::{
    Discarded, PartitionDirState, discard_partition_dir, finish_discards, prepare_partition_dir,
    write_retirement_fence,
};

#[test]
fn created_revision_rules_and_fence() {
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let discarded = temporary.path().join("discarded-partitions");
        let partition = temporary.path().join("streams/0/topics/0/partitions/0");
        let namespace = temporary.path().join("partition-initialization/0.0.0");
        assert_eq!(prepare_partition_dir(&partition, &namespace, &discarded, 3).await.unwrap(), PartitionDirState::Created);
        std::fs::write(partition.join("00000000000000000000.log"), b"x").unwrap();
        assert_eq!(prepare_partition_dir(&partition, &namespace, &discarded, 3).await.unwrap(), PartitionDirState::Existing);
        assert!(partition.join("00000000000000000000.log").exists());
        assert_eq!(
            prepare_partition_dir(&partition, &namespace, &discarded, 5).await.unwrap(),
            PartitionDirState::ReplacedOlder { older: 3 }
        );
        assert!(!partition.join("00000000000000000000.log").exists());
        assert_eq!(std::fs::read_dir(&discarded).unwrap().count(), 0, "the discarded tree is removed");
        assert!(prepare_partition_dir(&partition, &namespace, &discarded, 4).await.is_err());

        let legacy = temporary.path().join("streams/0/topics/0/partitions/1");
        std::fs::create_dir_all(&legacy).unwrap();
        std::fs::write(legacy.join("00000000000000000000.log"), b"x").unwrap();
        let legacy_namespace = temporary.path().join("partition-initialization/0.0.1");
        assert_eq!(
            prepare_partition_dir(&legacy, &legacy_namespace, &discarded, 1).await.unwrap(),
            PartitionDirState::AdoptedLegacy
        );
        assert!(legacy.join("00000000000000000000.log").exists());

        write_retirement_fence(&namespace, 5).await;
        std::fs::remove_dir_all(&partition).unwrap();
        assert!(prepare_partition_dir(&partition, &namespace, &discarded, 5).await.is_err());
    });
}

#[test]
fn a_published_incarnation_whose_directory_is_missing_is_refused_not_recreated_empty() {
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let discarded = temporary.path().join("discarded-partitions");
        let partition = temporary.path().join("streams/0/topics/0/partitions/0");
        let namespace = temporary.path().join("partition-initialization/0-0-0");
        prepare_partition_dir(&partition, &namespace, &discarded, 7).await.unwrap();
        std::fs::remove_dir_all(&partition).unwrap();
        let refused = prepare_partition_dir(&partition, &namespace, &discarded, 7).await;
        assert!(format!("{}", refused.unwrap_err()).contains("is missing"));
        assert!(!partition.exists(), "nothing is created in its place");
        // A new incarnation of the same ids starts empty.
        assert_eq!(prepare_partition_dir(&partition, &namespace, &discarded, 9).await.unwrap(), PartitionDirState::Created);
    });
}

#[test]
fn a_discard_removes_only_the_named_revision() {
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let discarded = temporary.path().join("discarded-partitions");
        let partition = temporary.path().join("streams/0/topics/0/partitions/0");
        let namespace = temporary.path().join("partition-initialization/0-0-0");
        assert_eq!(discard_partition_dir(&partition, &discarded, 3).await.unwrap(), Discarded::Absent);
        prepare_partition_dir(&partition, &namespace, &discarded, 8).await.unwrap();
        std::fs::write(partition.join("00000000000000000000.log"), b"live").unwrap();
        // A delete of an earlier incarnation of the same ids never touches the live one.
        assert_eq!(
            discard_partition_dir(&partition, &discarded, 3).await.unwrap(),
            Discarded::Kept { found: Some(8) }
        );
        assert_eq!(std::fs::read(partition.join("00000000000000000000.log")).unwrap(), b"live");
        assert_eq!(discard_partition_dir(&partition, &discarded, 8).await.unwrap(), Discarded::Removed);
        assert!(!partition.exists());
        // A directory without created.revision is nobody's to remove.
        std::fs::create_dir_all(&partition).unwrap();
        std::fs::write(partition.join("00000000000000000000.log"), b"x").unwrap();
        assert_eq!(
            discard_partition_dir(&partition, &discarded, 8).await.unwrap(),
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
    std::fs::write(discarded.join("12582912/nested/00000000000000000000.log"), b"x").unwrap();
    assert_eq!(finish_discards(&discarded).unwrap(), 1);
    assert_eq!(std::fs::read_dir(&discarded).unwrap().count(), 0);
    assert_eq!(finish_discards(&temporary.path().join("absent")).unwrap(), 0);
}
