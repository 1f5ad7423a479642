use iggy_storage::records::{read_checked_u64, write_checked_u64};

#[test]
fn checked_u64_round_trip_and_corruption() {
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let temporary = tempfile::tempdir().unwrap();
        let path = temporary.path().join("created.revision");
        assert_eq!(read_checked_u64(&path).await.unwrap(), None);
        write_checked_u64(&path, 42).await;
        assert_eq!(read_checked_u64(&path).await.unwrap(), Some(42));
        assert_eq!(std::fs::read(&path).unwrap().len(), 16);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(read_checked_u64(&path).await.is_err());
    });
}
