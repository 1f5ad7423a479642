use std::collections::BTreeMap;
use std::hash::Hasher;
use std::path::Path;

use iggy_storage::layout::{batch, frame, marker, read_u64, write_u32, write_u64};
use iggy_storage::{StorageError, open_data_dir};

fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn empty_and_missing_dirs_are_initialized_and_reopen() {
    let temporary = tempfile::tempdir().unwrap();
    let missing = temporary.path().join("data");
    open_data_dir(&missing).unwrap();
    let written = std::fs::read_to_string(missing.join(marker::FILE_NAME)).unwrap();
    assert_eq!(written.trim_end(), "IGGY-OWNERSHIP-HISTORY-5");
    open_data_dir(&missing).unwrap();
    open_data_dir(temporary.path().join("data")).unwrap();
}

#[test]
fn foreign_and_older_dirs_are_refused_unmodified() {
    let temporary = tempfile::tempdir().unwrap();
    let foreign = temporary.path().join("foreign");
    std::fs::create_dir_all(foreign.join("streams/0")).unwrap();
    std::fs::write(foreign.join("streams/0/data.log"), b"old bytes").unwrap();
    let before = snapshot(&foreign);
    assert!(matches!(
        open_data_dir(&foreign),
        Err(StorageError::Refused(_))
    ));
    assert_eq!(before, snapshot(&foreign));

    let older = temporary.path().join("older");
    std::fs::create_dir_all(&older).unwrap();
    std::fs::write(older.join(marker::FILE_NAME), b"IGGY-OWNERSHIP-HISTORY-4\n").unwrap();
    std::fs::write(older.join("wal"), b"prepares").unwrap();
    let before = snapshot(&older);
    let error = open_data_dir(&older).unwrap_err();
    assert!(
        error.to_string().contains("IGGY-OWNERSHIP-HISTORY-4"),
        "{error}"
    );
    assert_eq!(before, snapshot(&older));
}

/// A crash during the first start, while the marker was written, leaves only its temporary
/// file (empty, cut short or whole): the next start finishes the initialization instead of
/// refusing the directory forever.
#[test]
fn a_first_start_interrupted_while_writing_the_marker_is_finished_by_the_next_start() {
    let temporary = tempfile::tempdir().unwrap();
    let whole = format!("{}\n", marker::VALUE);
    for (case, left) in [
        ("empty", ""),
        ("cut short", &whole[..7]),
        ("whole", &whole[..]),
    ] {
        let root = temporary.path().join(case.replace(' ', "-"));
        std::fs::create_dir_all(&root).unwrap();
        let leftover = root.join(format!("{}.tmp", marker::FILE_NAME));
        std::fs::write(&leftover, left).unwrap();
        open_data_dir(&root).unwrap_or_else(|error| panic!("{case}: {error}"));
        let written = std::fs::read_to_string(root.join(marker::FILE_NAME)).unwrap();
        assert_eq!(written, whole, "{case}");
        assert!(
            !leftover.exists(),
            "{case}: the temporary marker was renamed into place"
        );
        open_data_dir(&root).unwrap();
    }
}

/// Only our own unfinished marker is taken over: a temporary marker with other bytes, or
/// beside other files, is refused like any foreign directory, before anything is changed.
#[test]
fn a_temporary_marker_that_is_not_ours_is_refused_unmodified() {
    let temporary = tempfile::tempdir().unwrap();
    let tmp_name = format!("{}.tmp", marker::FILE_NAME);

    let foreign_bytes = temporary.path().join("foreign-bytes");
    std::fs::create_dir_all(&foreign_bytes).unwrap();
    std::fs::write(foreign_bytes.join(&tmp_name), b"SOMEONE-ELSES-FORMAT\n").unwrap();
    let before = snapshot(&foreign_bytes);
    assert!(matches!(
        open_data_dir(&foreign_bytes),
        Err(StorageError::Refused(_))
    ));
    assert_eq!(before, snapshot(&foreign_bytes));

    let with_files = temporary.path().join("with-files");
    std::fs::create_dir_all(&with_files).unwrap();
    std::fs::write(with_files.join(&tmp_name), b"IGGY").unwrap();
    std::fs::write(with_files.join("wal"), b"prepares").unwrap();
    let before = snapshot(&with_files);
    assert!(matches!(
        open_data_dir(&with_files),
        Err(StorageError::Refused(_))
    ));
    assert_eq!(before, snapshot(&with_files));
}

/// The QUIC stateless-reset key is made once and kept (the next process must derive the same
/// reset tokens), owner-only; a file that is not a key is replaced by a new one.
#[test]
fn the_quic_reset_key_is_kept_across_opens_and_a_file_not_a_key_is_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let temporary = tempfile::tempdir().unwrap();
    let root = temporary.path().join("data");
    let key_path = root.join(iggy_generated::storage::QUIC_RESET_KEY_FILE);
    let key = |root: &Path| {
        let dir = open_data_dir(root).unwrap();
        compio::runtime::Runtime::new()
            .unwrap()
            .block_on(dir.quic_reset_key())
    };
    let first = key(&root);
    assert_eq!(first.len(), 64);
    assert_ne!(first, vec![0; 64]);
    assert_eq!(std::fs::read(&key_path).unwrap(), first);
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(key(&root), first, "kept by the next open");
    std::fs::write(&key_path, b"short").unwrap();
    let replaced = key(&root);
    assert_eq!(replaced.len(), 64);
    assert_ne!(replaced, first);
    assert_eq!(std::fs::read(&key_path).unwrap(), replaced);
}

fn build_batch(payloads: &[&[u8]]) -> Vec<u8> {
    let messages: Vec<(&[u8], &[u8])> =
        payloads.iter().map(|payload| (*payload, &[][..])).collect();
    build_batch_with_headers(&messages)
}

/// A producer's batch of `(payload, user headers)` messages, checksums set.
fn build_batch_with_headers(messages: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut record = vec![0u8; batch::HEADER_SIZE];
    for (delta, (payload, headers)) in messages.iter().enumerate() {
        let start = record.len();
        record.resize(start + frame::HEADER_SIZE, 0);
        write_u64(&mut record, start + frame::ID, delta as u64 + 1);
        write_u32(&mut record, start + frame::OFFSET_DELTA, delta as u32);
        write_u32(
            &mut record,
            start + frame::PAYLOAD_LENGTH,
            payload.len() as u32,
        );
        write_u32(
            &mut record,
            start + frame::USER_HEADERS_LENGTH,
            headers.len() as u32,
        );
        record.extend_from_slice(payload);
        record.extend_from_slice(headers);
        let checksum = twox_hash::XxHash3_64::oneshot(&record[start + 8..]);
        write_u64(&mut record, start + frame::CHECKSUM, checksum);
    }
    let length = record.len() as u64;
    write_u64(&mut record, batch::BATCH_LENGTH, length);
    write_u32(&mut record, batch::MESSAGE_COUNT, messages.len() as u32);
    let checksum = iggy_storage::batch::compute_checksum(&record);
    write_u64(&mut record, batch::BATCH_CHECKSUM, checksum);
    record
}

#[test]
fn a_stamped_header_is_the_header_stamping_in_place_gives_and_leaves_the_record_alone() {
    let record = build_batch(&[b"one", b"two", b"three"]);
    let header = iggy_storage::batch::stamped_header(&record, 7, 100, 5_000);
    let mut stamped = record.clone();
    iggy_storage::batch::stamp(&mut stamped, 7, 100, 5_000);
    assert_eq!(&header[..], &stamped[..batch::HEADER_SIZE]);
    assert_eq!(record[batch::HEADER_SIZE..], stamped[batch::HEADER_SIZE..]);
    assert_eq!(
        read_u64(&record, batch::BASE_OFFSET),
        0,
        "the received record is untouched"
    );
}

#[test]
fn stamp_recomputes_checksum_and_verify_detects_flips() {
    let mut record = build_batch(&[b"one", b"two", b"three"]);
    assert_eq!(iggy_storage::batch::verify(&record).unwrap(), 3);
    iggy_storage::batch::stamp(&mut record, 7, 100, 5_000);
    assert_eq!(read_u64(&record, batch::BASE_OFFSET), 100);
    assert_eq!(iggy_storage::batch::verify(&record).unwrap(), 3);

    // The checksum is the streaming XxHash3-64 of the header fields, then the frame checksums.
    let mut hasher = twox_hash::XxHash3_64::new();
    for value in [7u64, 100, 5_000, 0, record.len() as u64] {
        hasher.write(&value.to_le_bytes());
    }
    hasher.write(&3u32.to_le_bytes());
    let mut position = batch::HEADER_SIZE;
    for payload in [3usize, 3, 5] {
        hasher.write(&record[position..position + 8]);
        position += frame::HEADER_SIZE + payload;
    }
    assert_eq!(hasher.finish(), read_u64(&record, batch::BATCH_CHECKSUM));

    for bit in [
        0usize,
        8 * 20,
        8 * batch::HEADER_SIZE + 8 * 50,
        8 * (record.len() - 1),
    ] {
        let mut flipped = record.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(iggy_storage::batch::verify(&flipped).is_err(), "bit {bit}");
    }
}

/// One user-header field as the SDK writes it: kind, u32 length, bytes.
fn header_field(kind: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

#[test]
fn user_headers_are_checked_as_the_official_client_reads_them() {
    use iggy_generated::payloads::HeaderKind;
    use iggy_storage::batch::{HeaderFault, HeaderPart, HeaderProblem, check_user_headers};
    let key = header_field(2, b"k");
    // A key of each kind at its longest, then a value of that kind at its shortest.
    let mut every_kind = Vec::new();
    for kind in HeaderKind::ALL {
        let (longest, shortest) = (
            kind.fixed_size().unwrap_or(255),
            kind.fixed_size().unwrap_or(1),
        );
        // A bool is 0 or 1.
        let short_fill = if *kind == HeaderKind::Bool { 0 } else { 2 };
        every_kind.extend(header_field(kind.to_repr(), &vec![1; longest]));
        every_kind.extend(header_field(kind.to_repr(), &vec![short_fill; shortest]));
    }
    assert_eq!(check_user_headers(&[]), Ok(()));
    assert_eq!(check_user_headers(&every_kind), Ok(()));

    let fault = |part, problem| Err(HeaderFault { part, problem });
    let (k, v) = (HeaderPart::Key, HeaderPart::Value);
    let length = |kind, length| HeaderProblem::Length { kind, length };
    let cases: [(&str, Vec<u8>, Result<(), HeaderFault>); 10] = [
        (
            "cut key",
            vec![2, 5, 0, 0, 0, b'k'],
            fault(k, HeaderProblem::Cut),
        ),
        ("no value", key.clone(), fault(v, HeaderProblem::Cut)),
        (
            "cut length",
            [key.clone(), vec![2, 1, 0]].concat(),
            fault(v, HeaderProblem::Cut),
        ),
        (
            "kind 0",
            [header_field(0, b"k"), key.clone()].concat(),
            fault(k, HeaderProblem::UnknownKind(0)),
        ),
        (
            "kind 16",
            [key.clone(), header_field(16, b"v")].concat(),
            fault(v, HeaderProblem::UnknownKind(16)),
        ),
        (
            "empty key",
            [header_field(1, b""), key.clone()].concat(),
            fault(k, length(HeaderKind::Raw, 0)),
        ),
        (
            "256-byte value",
            [key.clone(), header_field(2, &[b'v'; 256])].concat(),
            fault(v, length(HeaderKind::String, 256)),
        ),
        (
            "short uint64",
            [key.clone(), header_field(12, &[1, 2])].concat(),
            fault(v, length(HeaderKind::Uint64, 2)),
        ),
        (
            "bool 5",
            [key.clone(), header_field(3, &[5])].concat(),
            fault(v, HeaderProblem::Bool(5)),
        ),
        (
            "a byte after the pairs",
            [every_kind.clone(), vec![2]].concat(),
            fault(k, HeaderProblem::Cut),
        ),
    ];
    for (what, headers, expected) in cases {
        assert_eq!(check_user_headers(&headers), expected, "{what}");
    }
}

/// A send's user headers are stored as they arrive, whether or not they map to typed headers:
/// the official client's encryptor sends them as one opaque blob.
#[test]
fn an_arriving_batch_keeps_opaque_user_headers() {
    let typed = [
        header_field(2, b"trace"),
        header_field(12, &7u64.to_le_bytes()),
    ]
    .concat();
    let opaque = [0xA5u8; 45];
    let cut_short = header_field(2, b"key without value");
    let batch =
        build_batch_with_headers(&[(b"one", &typed), (b"two", &opaque), (b"three", &cut_short)]);
    assert_eq!(iggy_storage::batch::verify_arriving(&batch).unwrap(), 3);
    assert_eq!(iggy_storage::batch::verify(&batch).unwrap(), 3);
}

/// A send's batch is refused for one message the official client never sends (an empty
/// payload, a payload or user headers over the SDK's limits once encrypted, reserved frame bytes
/// set, an `offset_delta` other than its index), the limits themselves pass; a stored batch of
/// such a message still verifies.
#[test]
fn an_arriving_batch_is_refused_for_a_message_the_sdk_never_builds_a_stored_one_is_not() {
    use iggy_generated::frames::{
        CLIENT_ENCRYPTION_OVERHEAD, MESSAGE_PAYLOAD_SIZE_MAX, USER_HEADERS_SIZE_MAX,
    };
    use iggy_storage::batch::{MessageFault, verify, verify_arriving};
    let overhead = CLIENT_ENCRYPTION_OVERHEAD as usize;
    let largest_payload = vec![b'p'; MESSAGE_PAYLOAD_SIZE_MAX as usize + overhead];
    let over_payload = vec![b'p'; largest_payload.len() + 1];
    // Headers of exactly the builder's limit (400 pairs of 250 bytes), encrypted.
    let pair = [header_field(2, &[b'k'; 10]), header_field(1, &[b'v'; 230])].concat();
    assert_eq!(pair.len() * 400, USER_HEADERS_SIZE_MAX as usize);
    let largest_headers = [pair.repeat(400), vec![0; overhead]].concat();
    let over_headers = [largest_headers.as_slice(), &[0]].concat();

    let at_limits = build_batch_with_headers(&[(&largest_payload, &[]), (b"h", &largest_headers)]);
    assert_eq!(verify_arriving(&at_limits).unwrap(), 2);
    // The second frame's field at `at` set to `value`, both checksums sealed again.
    let second_frame_with = |at: usize, value: u64| {
        let mut record = build_batch(&[b"one", b"two"]);
        let start = batch::HEADER_SIZE + frame::HEADER_SIZE + 3;
        write_u64(&mut record, start + at, value);
        let checksum = twox_hash::XxHash3_64::oneshot(&record[start + 8..]);
        write_u64(&mut record, start + frame::CHECKSUM, checksum);
        let checksum = iggy_storage::batch::compute_checksum(&record);
        write_u64(&mut record, batch::BATCH_CHECKSUM, checksum);
        record
    };
    // offset_delta is a u32 followed by timestamp_delta: keep that one zero.
    let cases: [(&str, Vec<u8>, MessageFault); 6] = [
        (
            "empty",
            build_batch(&[b"one", b""]),
            MessageFault::EmptyPayload,
        ),
        (
            "payload",
            build_batch(&[b"one", &over_payload]),
            MessageFault::PayloadOver(over_payload.len()),
        ),
        (
            "headers",
            build_batch_with_headers(&[(b"one", &[]), (b"h", &over_headers)]),
            MessageFault::HeadersOver(over_headers.len()),
        ),
        (
            "reserved",
            second_frame_with(frame::RESERVED, 5),
            MessageFault::ReservedNotZero { index: 1 },
        ),
        (
            "repeated offset",
            second_frame_with(frame::OFFSET_DELTA, 0),
            MessageFault::OffsetDelta { index: 1, delta: 0 },
        ),
        (
            "skipped offset",
            second_frame_with(frame::OFFSET_DELTA, 7),
            MessageFault::OffsetDelta { index: 1, delta: 7 },
        ),
    ];
    for (what, batch, fault) in cases {
        let refused = verify_arriving(&batch);
        assert!(
            matches!(refused, Err(StorageError::ArrivingMessage(f)) if f == fault),
            "{what}: {refused:?}"
        );
        assert_eq!(verify(&batch).unwrap(), 2, "{what}");
    }
}

#[test]
fn pruning_a_deleted_topic_removes_only_empty_directories() {
    let temporary = tempfile::tempdir().unwrap();
    let data = open_data_dir(temporary.path().join("data")).unwrap();
    let kept = data.partition_dir(0, 1, 0);
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("00000000000000000000.log"), b"x").unwrap();
    std::fs::create_dir_all(data.partition_dir(0, 0, 0).parent().unwrap()).unwrap();
    std::fs::create_dir_all(data.root().join("streams/3")).unwrap();
    assert_eq!(
        data.topic_dirs_on_disk(),
        vec![(0, Some(0)), (0, Some(1)), (3, None)]
    );

    data.prune_deleted(0, Some(0), true).unwrap();
    assert!(
        !data.root().join("streams/0/topics/0").exists(),
        "the empty topic goes"
    );
    assert!(
        kept.join("00000000000000000000.log").exists(),
        "a topic with files stays"
    );
    data.prune_deleted(0, Some(1), true).unwrap();
    assert!(kept.exists(), "and so does its stream, though called gone");
    data.prune_deleted(3, None, true).unwrap();
    data.prune_deleted(9, Some(9), true).unwrap();
    assert_eq!(
        data.topic_dirs_on_disk(),
        vec![(0, Some(1))],
        "the empty stream went; absent ones are no error"
    );
}

/// A data directory is held by one process at a time: a second hold on it is refused while the
/// first lives, taken once it is dropped; no directory yet is no hold; a hold knows when its
/// directory was replaced (`--fresh`).
#[test]
fn a_data_directory_is_held_by_one_holder_at_a_time() {
    use iggy_storage::data_dir::{DirHold, lock_data_dir};
    let held = |path: &std::path::Path| match lock_data_dir(path) {
        Ok(DirHold::Held(lock)) => lock,
        other => panic!("held: {other:?}"),
    };
    let temporary = tempfile::tempdir().unwrap();
    let path = temporary.path().join("data");
    assert!(matches!(lock_data_dir(&path), Ok(DirHold::NoDirectory)));
    std::fs::create_dir(&path).unwrap();
    let first = held(&path);
    assert!(first.holds(&path));
    let refused = lock_data_dir(&path).unwrap_err();
    assert!(refused.contains("in use"), "{refused}");
    drop(first);
    let again = held(&path);
    std::fs::remove_dir(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert!(!again.holds(&path), "a replaced directory is not held");
    assert!(
        std::fs::read_dir(&path).unwrap().next().is_none(),
        "nothing written"
    );
}
