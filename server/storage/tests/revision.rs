use iggy_storage::revision::{PartitionDirState, prepare_partition_dir, write_retirement_fence};

#[test]
fn created_revision_rules_and_fence() {
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let partition = temporary.path().join("streams/0/topics/0/partitions/0");
        let namespace = temporary.path().join("partition-initialization/0.0.0");
        assert_eq!(prepare_partition_dir(&partition, &namespace, 3).await.unwrap(), PartitionDirState::Created);
        std::fs::write(partition.join("00000000000000000000.log"), b"x").unwrap();
        assert_eq!(prepare_partition_dir(&partition, &namespace, 3).await.unwrap(), PartitionDirState::Existing);
        assert!(partition.join("00000000000000000000.log").exists());
        assert_eq!(prepare_partition_dir(&partition, &namespace, 5).await.unwrap(), PartitionDirState::ReplacedOlder { older: 3 });
        assert!(!partition.join("00000000000000000000.log").exists());
        assert!(prepare_partition_dir(&partition, &namespace, 4).await.is_err());

        let legacy = temporary.path().join("streams/0/topics/0/partitions/1");
        std::fs::create_dir_all(&legacy).unwrap();
        std::fs::write(legacy.join("00000000000000000000.log"), b"x").unwrap();
        let legacy_namespace = temporary.path().join("partition-initialization/0.0.1");
        assert_eq!(prepare_partition_dir(&legacy, &legacy_namespace, 1).await.unwrap(), PartitionDirState::AdoptedLegacy);
        assert!(legacy.join("00000000000000000000.log").exists());

        write_retirement_fence(&namespace, 5).await.unwrap();
        std::fs::remove_dir_all(&partition).unwrap();
        assert!(prepare_partition_dir(&partition, &namespace, 5).await.is_err());
    });
}
