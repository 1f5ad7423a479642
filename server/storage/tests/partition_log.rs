use std::path::{Path, PathBuf};

use iggy_storage::StorageError;
use iggy_storage::layout::{batch, frame, index_entry, read_u32, read_u64, write_u32, write_u64};
use iggy_storage::partition_log::{self, LogConfig, PartitionLog};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PARTITION: u64 = 3;

fn run<F: Future>(future: F) -> F::Output {
    compio::runtime::Runtime::new().unwrap().block_on(future)
}

fn config(segment_size: u64) -> LogConfig {
    LogConfig {
        segment_size,
        writeback_bytes: 0,
        refuse_corrupt_tail: false,
    }
}

fn payload(offset: u64) -> Vec<u8> {
    let length = (offset * 7 % 23 + 1) as usize;
    (0..length)
        .map(|index| (offset as u8).wrapping_add(index as u8))
        .collect()
}

fn user_headers(offset: u64) -> Vec<u8> {
    if offset.is_multiple_of(3) {
        vec![0xAB; (offset % 5 + 1) as usize]
    } else {
        Vec::new()
    }
}

/// A stamped batch of `count` messages starting at `base_offset`.
fn make_batch(base_offset: u64, count: u32, timestamp: u64) -> Vec<u8> {
    let mut record = vec![0u8; batch::HEADER_SIZE];
    for delta in 0..count {
        let offset = base_offset + u64::from(delta);
        let start = record.len();
        record.resize(start + frame::HEADER_SIZE, 0);
        write_u64(&mut record, start + frame::ID, offset + 1);
        write_u32(&mut record, start + frame::OFFSET_DELTA, delta);
        write_u32(&mut record, start + frame::TIMESTAMP_DELTA, delta * 10);
        let body = payload(offset);
        let headers = user_headers(offset);
        write_u32(
            &mut record,
            start + frame::PAYLOAD_LENGTH,
            body.len() as u32,
        );
        write_u32(
            &mut record,
            start + frame::USER_HEADERS_LENGTH,
            headers.len() as u32,
        );
        record.extend_from_slice(&body);
        record.extend_from_slice(&headers);
        let checksum = twox_hash::XxHash3_64::oneshot(&record[start + 8..]);
        write_u64(&mut record, start + frame::CHECKSUM, checksum);
    }
    let length = record.len() as u64;
    write_u64(&mut record, batch::BATCH_LENGTH, length);
    write_u64(&mut record, batch::ORIGIN_TIMESTAMP, 1_000);
    write_u32(&mut record, batch::MESSAGE_COUNT, count);
    iggy_storage::batch::stamp(&mut record, PARTITION, base_offset, timestamp);
    iggy_storage::batch::verify(&record).unwrap();
    record
}

/// Every message in `bytes` as (offset, base_timestamp, payload); each batch must verify.
fn decode(bytes: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut messages = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let length = read_u64(bytes, position + batch::BATCH_LENGTH) as usize;
        let record = &bytes[position..position + length];
        let count = iggy_storage::batch::verify(record).unwrap();
        assert_eq!(read_u64(record, batch::PARTITION_ID), PARTITION);
        let base = read_u64(record, batch::BASE_OFFSET);
        let timestamp = read_u64(record, batch::BASE_TIMESTAMP);
        let mut at = batch::HEADER_SIZE;
        for _ in 0..count {
            let delta = read_u32(record, at + frame::OFFSET_DELTA);
            let body = read_u32(record, at + frame::PAYLOAD_LENGTH) as usize;
            let headers = read_u32(record, at + frame::USER_HEADERS_LENGTH) as usize;
            let offset = base + u64::from(delta);
            let start = at + frame::HEADER_SIZE;
            assert_eq!(
                &record[start + body..start + body + headers],
                &user_headers(offset)[..]
            );
            messages.push((offset, timestamp, record[start..start + body].to_vec()));
            at = start + body + headers;
        }
        position += length;
    }
    assert_eq!(position, bytes.len());
    messages
}

/// Appends batches of the given sizes; batch `n` gets base timestamp `(n + 1) * 100`.
/// Returns the record lengths.
async fn append_batches(log: &mut PartitionLog, sizes: &[u32]) -> Vec<usize> {
    let mut lengths = Vec::new();
    for &size in sizes {
        let offset = log.next_offset();
        let record = make_batch(offset, size, timestamp_of(offset));
        lengths.push(record.len());
        log.append(record).await.unwrap();
        assert_eq!(log.next_offset(), offset + u64::from(size));
    }
    lengths
}

/// The base timestamp used for a batch starting at `offset`.
fn timestamp_of(offset: u64) -> u64 {
    10_000 + offset * 100
}

/// Reads `[start, start + max)` and checks it against the generated messages, given the
/// retained range `[first, next)` and the batch boundaries (for timestamps).
async fn check_read(log: &mut PartitionLog, start: u64, max: u32, bases: &[u64]) {
    let read = log.read_from(start, max).await.unwrap();
    let from = start.max(log.first_offset());
    let to = (from + u64::from(max)).min(log.next_offset()).max(from);
    let messages = decode(&read.bytes);
    assert_eq!(
        read.messages as usize,
        messages.len(),
        "start {start} max {max}"
    );
    assert_eq!(messages.len() as u64, to - from, "start {start} max {max}");
    assert_eq!(
        read.last_offset,
        if to > from { Some(to - 1) } else { None }
    );
    for (index, (offset, timestamp, body)) in messages.into_iter().enumerate() {
        assert_eq!(offset, from + index as u64);
        let base = *bases.iter().rev().find(|base| **base <= offset).unwrap();
        assert_eq!(timestamp, timestamp_of(base));
        assert_eq!(body, payload(offset));
    }
}

fn batch_bases(sizes: &[u32]) -> Vec<u64> {
    let mut bases = Vec::new();
    let mut next = 0;
    for size in sizes {
        bases.push(next);
        next += u64::from(*size);
    }
    bases
}

async fn check_all_reads(log: &mut PartitionLog, bases: &[u64]) {
    let next = log.next_offset();
    for start in 0..=next + 1 {
        for max in [1, 2, 3, 5, 8, 13, 1000] {
            check_read(log, start, max, bases).await;
        }
    }
}

fn segment_files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == extension))
        .collect();
    files.sort();
    files
}

fn total_log_bytes(dir: &Path) -> u64 {
    segment_files(dir, "log")
        .iter()
        .map(|path| std::fs::metadata(path).unwrap().len())
        .sum()
}

fn flip_bit(path: &Path, position: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[position] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn the_active_segment_is_written_back_every_writeback_bytes_and_only_when_asked() {
    use iggy_storage::partition_log::writebacks_started;
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        // Asked for none: appends start none.
        let mut log = PartitionLog::open(temporary.path(), config(1 << 30))
            .await
            .unwrap();
        let lengths = append_batches(&mut log, &[2_000; 8]).await;
        compio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(writebacks_started(), 0);
        drop(log);
        // Every 64 KiB: a start per batch (each is longer), unless the previous one is still
        // running (the next then covers more), so at least one and at most one per batch.
        assert!(
            lengths.iter().all(|length| *length > 64 << 10),
            "{lengths:?}"
        );
        let asked = LogConfig {
            writeback_bytes: 64 << 10,
            ..config(1 << 30)
        };
        let mut log = PartitionLog::open(temporary.path(), asked).await.unwrap();
        let sizes = [2_000; 8];
        append_batches(&mut log, &sizes).await;
        let patience = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while writebacks_started() == 0 && std::time::Instant::now() < patience {
            compio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let started = writebacks_started();
        assert!(
            (1..=sizes.len() as u64).contains(&started),
            "{started} starts"
        );
        // The log reads back whole, before and after a reopen.
        let bases = batch_bases(&[2_000; 16]);
        check_read(&mut log, 0, u32::MAX, &bases).await;
        drop(log);
        let mut log = PartitionLog::open(temporary.path(), asked).await.unwrap();
        check_read(&mut log, 0, u32::MAX, &bases).await;
    });
}

#[test]
fn received_batches_are_stored_with_stamped_headers_small_and_large() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1 << 30)).await.unwrap();
        let mut expected = Vec::new();
        // Below and above SMALL_WRITE_MAX: written in place, and through io_uring.
        let mut largest = 0;
        for count in [3u32, 40_000, 2] {
            let base = log.next_offset();
            let stamped = make_batch(base, count, timestamp_of(base));
            largest = largest.max(stamped.len());
            // As the producer sent it: the server-owned fields are not filled in.
            let mut received = stamped.clone();
            for field in [
                batch::PARTITION_ID,
                batch::BASE_OFFSET,
                batch::BASE_TIMESTAMP,
            ] {
                write_u64(&mut received, field, 0);
            }
            write_u64(&mut received, batch::BATCH_CHECKSUM, 0x5EED);
            let received = iggy_storage::batch::ValidBatch::check(received.into()).unwrap();
            log.append_batch(&received, PARTITION, base, timestamp_of(base))
                .await
                .unwrap();
            let read = log.read_from(base, count).await.unwrap();
            assert_eq!(read.bytes, stamped, "{count} messages");
            expected.extend_from_slice(&stamped);
        }
        assert!(largest > iggy_storage::small_write::SMALL_WRITE_MAX);
        drop(log);
        let mut log = PartitionLog::open(dir, config(1 << 30)).await.unwrap();
        assert_eq!(log.read_from(0, u32::MAX).await.unwrap().bytes, expected);
    });
}

#[test]
fn empty_log_then_append_and_read_round_trip() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path().join("partition");
        let mut log = PartitionLog::open(&dir, config(1 << 20)).await.unwrap();
        assert_eq!(
            (log.next_offset(), log.first_offset(), log.messages_count()),
            (0, 0, 0)
        );
        assert_eq!((log.size_bytes(), log.segments_count()), (0, 1));
        assert!(dir.join("00000000000000000000.log").exists());
        assert!(dir.join("00000000000000000000.index").exists());
        let empty = log.read_from(0, 10).await.unwrap();
        assert_eq!(
            (empty.bytes.len(), empty.messages, empty.last_offset),
            (0, 0, None)
        );
        assert_eq!(log.offset_at_timestamp(0), None);

        let sizes = [3, 1, 5, 2];
        let lengths = append_batches(&mut log, &sizes).await;
        assert_eq!(log.messages_count(), 11);
        assert_eq!(log.size_bytes(), lengths.iter().sum::<usize>() as u64);
        assert_eq!(log.size_bytes(), total_log_bytes(&dir));
        log.sync().await;

        // Whole batches come back byte for byte.
        let whole = log.read_from(0, 1000).await.unwrap();
        let mut expected = Vec::new();
        for (index, size) in sizes.iter().enumerate() {
            let base = batch_bases(&sizes)[index];
            expected.extend_from_slice(&make_batch(base, *size, timestamp_of(base)));
        }
        assert_eq!(whole.bytes, expected);
        assert_eq!((whole.messages, whole.last_offset), (11, Some(10)));

        // Every start and length: sliced first and last batches, both in one batch.
        check_all_reads(&mut log, &batch_bases(&sizes)).await;

        // The index holds one entry per batch.
        let index = std::fs::read(dir.join("00000000000000000000.index")).unwrap();
        assert_eq!(index.len(), sizes.len() * index_entry::SIZE);
        let mut position = 0u64;
        for (number, base) in batch_bases(&sizes).into_iter().enumerate() {
            let entry = &index[number * index_entry::SIZE..];
            assert_eq!(read_u64(entry, index_entry::OFFSET), base);
            assert_eq!(read_u64(entry, index_entry::TIMESTAMP), timestamp_of(base));
            assert_eq!(read_u64(entry, index_entry::POSITION), position);
            position += lengths[number] as u64;
        }
    });
}

#[test]
fn sliced_reads_keep_base_offset_and_deltas() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 20))
            .await
            .unwrap();
        append_batches(&mut log, &[6]).await;
        let read = log.read_from(2, 3).await.unwrap();
        assert_eq!(read_u64(&read.bytes, batch::BASE_OFFSET), 0);
        assert_eq!(read_u32(&read.bytes, batch::MESSAGE_COUNT), 3);
        assert_eq!(
            read_u64(&read.bytes, batch::BATCH_LENGTH),
            read.bytes.len() as u64
        );
        assert_eq!(
            read_u32(&read.bytes, batch::HEADER_SIZE + frame::OFFSET_DELTA),
            2
        );
        assert_eq!(
            decode(&read.bytes).iter().map(|m| m.0).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
    });
}

#[test]
fn append_rejects_wrong_offsets_and_empty_batches() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 20))
            .await
            .unwrap();
        append_batches(&mut log, &[2]).await;
        assert!(matches!(
            log.append(make_batch(5, 1, 1)).await,
            Err(StorageError::InvalidBatch(_))
        ));
        assert!(matches!(
            log.append(make_batch(0, 1, 1)).await,
            Err(StorageError::InvalidBatch(_))
        ));
        assert!(matches!(
            log.append(make_batch(2, 0, 1)).await,
            Err(StorageError::InvalidBatch(_))
        ));
        let mut short = make_batch(2, 2, 1);
        short.pop();
        assert!(matches!(
            log.append(short).await,
            Err(StorageError::InvalidBatch(_))
        ));
        assert_eq!(log.next_offset(), 2);
        append_batches(&mut log, &[1]).await;
        check_all_reads(&mut log, &[0, 2]).await;
    });
}

/// Sizes whose records roll a 1 KiB segment several times.
const ROLL_SIZES: [u32; 12] = [4, 7, 1, 9, 3, 3, 12, 2, 5, 8, 1, 6];

#[test]
fn rolls_segments_reads_across_them_and_reopens() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        let lengths = append_batches(&mut log, &ROLL_SIZES).await;
        let bases = batch_bases(&ROLL_SIZES);
        assert!(log.segments_count() >= 3, "{}", log.segments_count());
        assert_eq!(segment_files(dir, "log").len() as u32, log.segments_count());
        assert_eq!(
            segment_files(dir, "index").len() as u32,
            log.segments_count()
        );
        assert_eq!(log.size_bytes(), lengths.iter().sum::<usize>() as u64);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        // Every closed segment reached the segment size; each starts on a batch boundary.
        let logs = segment_files(dir, "log");
        for path in &logs[..logs.len() - 1] {
            assert!(std::fs::metadata(path).unwrap().len() >= 1024);
            let start: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            assert!(bases.contains(&start));
        }
        check_all_reads(&mut log, &bases).await;
        let whole = log.read_from(0, u32::MAX).await.unwrap();
        let (next, segments) = (log.next_offset(), log.segments_count());
        log.sync().await;
        drop(log);

        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        assert_eq!((log.next_offset(), log.segments_count()), (next, segments));
        assert_eq!(log.messages_count(), next);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        assert_eq!(log.read_from(0, u32::MAX).await.unwrap(), whole);
        check_all_reads(&mut log, &bases).await;
        // Appending continues where it left off.
        append_batches(&mut log, &[3]).await;
        let mut bases = bases;
        bases.push(next);
        check_all_reads(&mut log, &bases).await;
    });
}

#[test]
fn open_rolls_a_full_active_segment_under_a_smaller_segment_size() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 20))
            .await
            .unwrap();
        append_batches(&mut log, &[5, 5]).await;
        drop(log);
        let mut log = PartitionLog::open(temporary.path(), config(100))
            .await
            .unwrap();
        assert_eq!(log.segments_count(), 2);
        append_batches(&mut log, &[1]).await;
        assert_eq!(log.segments_count(), 3);
        check_all_reads(&mut log, &[0, 5, 10]).await;
    });
}

#[test]
fn torn_tail_recovers_to_the_last_whole_record() {
    run(async {
        let mut random = StdRng::seed_from_u64(0x1667);
        let sizes = [2, 5, 1, 3, 4, 2];
        let bases = batch_bases(&sizes);
        for round in 0..40 {
            let temporary = tempfile::tempdir().unwrap();
            let dir = temporary.path();
            // A closed first segment (first batch) and the active one with the rest.
            let first_length = make_batch(0, sizes[0], timestamp_of(0)).len() as u64;
            let mut log = PartitionLog::open(dir, config(first_length)).await.unwrap();
            append_batches(&mut log, &sizes[..1]).await;
            drop(log);
            let mut log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
            let lengths = append_batches(&mut log, &sizes[1..]).await;
            assert_eq!(log.segments_count(), 2);
            drop(log);

            let active = segment_files(dir, "log").pop().unwrap();
            let full = std::fs::metadata(&active).unwrap().len();
            let cut = if round == 0 {
                0
            } else {
                random.random_range(0..full)
            };
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&active)
                .unwrap();
            file.set_len(cut).unwrap();
            drop(file);

            // Whole records below the cut survive.
            let mut kept_bytes = 0u64;
            let mut kept_batches = 0;
            for length in &lengths {
                if kept_bytes + *length as u64 > cut {
                    break;
                }
                kept_bytes += *length as u64;
                kept_batches += 1;
            }
            let expected_next = bases[1]
                + sizes[1..1 + kept_batches]
                    .iter()
                    .map(|size| u64::from(*size))
                    .sum::<u64>();
            let mut log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
            assert_eq!(log.next_offset(), expected_next, "round {round} cut {cut}");
            assert_eq!(std::fs::metadata(&active).unwrap().len(), kept_bytes);
            let index = active.with_extension("index");
            assert_eq!(
                std::fs::metadata(&index).unwrap().len(),
                (kept_batches * index_entry::SIZE) as u64
            );
            check_all_reads(&mut log, &bases).await;
            // The recovered log takes appends again and reopens cleanly.
            append_batches(&mut log, &[2]).await;
            let mut appended = bases[..1 + kept_batches].to_vec();
            appended.push(expected_next);
            check_all_reads(&mut log, &appended).await;
            drop(log);
            let log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
            assert_eq!(log.next_offset(), expected_next + 2);
        }
    });
}

#[test]
fn flipped_bit_in_the_last_segment_drops_the_tail_from_that_record() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let sizes = [2, 3, 4];
        let mut log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
        let lengths = append_batches(&mut log, &sizes).await;
        drop(log);
        let path = dir.join("00000000000000000000.log");

        // A payload bit of the last record.
        flip_bit(
            &path,
            lengths[0] + lengths[1] + batch::HEADER_SIZE + frame::HEADER_SIZE,
        );
        let mut log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
        assert_eq!(log.next_offset(), 5);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (lengths[0] + lengths[1]) as u64
        );
        check_all_reads(&mut log, &[0, 2]).await;
        drop(log);

        // The base_offset of the middle record: dropped with everything after it.
        flip_bit(&path, lengths[0] + batch::BASE_OFFSET);
        let mut log = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
        assert_eq!(log.next_offset(), 2);
        assert_eq!(log.size_bytes(), lengths[0] as u64);
        check_all_reads(&mut log, &[0]).await;
    });
}

/// With `refuse_corrupt_tail` (a standalone node), a whole record of the last segment that
/// fails verification refuses the log with nothing cut: the intact records after it are
/// acknowledged messages no peer holds. A record cut short (what a crash leaves) is still cut.
#[test]
fn a_corrupt_whole_record_in_the_last_segment_refuses_the_log_when_asked_and_changes_nothing() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let refusing = LogConfig {
            refuse_corrupt_tail: true,
            ..config(1 << 20)
        };
        let mut log = PartitionLog::open(dir, refusing).await.unwrap();
        let lengths = append_batches(&mut log, &[2, 3, 4]).await;
        drop(log);
        let path = dir.join("00000000000000000000.log");
        flip_bit(&path, lengths[0] + batch::HEADER_SIZE + frame::HEADER_SIZE);
        let damaged = std::fs::read(&path).unwrap();
        let Err(refused) = PartitionLog::open(dir, refusing).await else {
            panic!("a corrupt whole record before intact ones is refused");
        };
        assert!(
            refused.to_string().contains("--cut-damaged-journals"),
            "{refused}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), damaged, "nothing was cut");

        let whole = damaged.len() as u64;
        std::fs::write(&path, &damaged[..damaged.len() - 3]).unwrap();
        flip_bit(&path, lengths[0] + batch::HEADER_SIZE + frame::HEADER_SIZE);
        let log = PartitionLog::open(dir, refusing).await.unwrap();
        assert_eq!(log.next_offset(), 5, "the torn last record is cut");
        assert!(std::fs::metadata(&path).unwrap().len() < whole);
    });
}

/// The oldest segments removed behind the node's back (no committed retirement) looked like a
/// retention: a standalone node served the rest silently and verify passed. The offset a
/// retirement keeps the log from is recorded first, so a log starting past it is refused when
/// asked (nothing changed) and reported by the check; otherwise (a cluster node, or the loss
/// accepted) served with a warning, the record moved to what is left.
#[test]
fn oldest_segments_removed_by_hand_are_told_from_a_retirement() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let refusing = LogConfig {
            refuse_corrupt_tail: true,
            ..config(600)
        };
        let mut log = PartitionLog::open(dir, refusing).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        assert!(log.segments_count() >= 4);
        let kept_from = log.retire_point(1, u64::MAX);
        log.retire_below(kept_from).await;
        drop(log);
        let reopened = PartitionLog::open(dir, refusing).await.unwrap();
        assert_eq!(
            reopened.first_offset(),
            kept_from,
            "a retirement is not a loss"
        );
        drop(reopened);
        assert!(partition_log::check(dir).await.unwrap().findings.is_empty());

        for path in segment_files(dir, "log").iter().take(1) {
            std::fs::remove_file(path).unwrap();
            std::fs::remove_file(path.with_extension("index")).unwrap();
        }
        let before = every_file(dir);
        let Err(refused) = PartitionLog::open(dir, refusing).await else {
            panic!("a log whose oldest segment was removed by hand is refused");
        };
        let refused = refused.to_string();
        assert!(
            refused.contains(&format!("retained from offset {kept_from}")),
            "{refused}"
        );
        assert!(
            every_file(dir) == before,
            "the refused open changed nothing"
        );
        let checked = partition_log::check(dir).await.unwrap();
        assert!(
            checked
                .findings
                .iter()
                .any(|f| f.severity == iggy_storage::verify::Severity::Error),
            "{:?}",
            checked.findings
        );

        let served = PartitionLog::open(dir, config(600)).await.unwrap();
        let first = served.first_offset();
        assert!(first > kept_from);
        drop(served);
        let again = PartitionLog::open(dir, refusing).await.unwrap();
        assert_eq!(
            again.first_offset(),
            first,
            "the accepted loss is not refused again"
        );
    });
}

#[test]
fn corruption_in_an_earlier_segment_is_an_error_naming_the_file() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(600)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        assert!(log.segments_count() >= 3);
        drop(log);
        let logs = segment_files(dir, "log");
        let victim = &logs[1];
        let length = std::fs::metadata(victim).unwrap().len() as usize;
        flip_bit(victim, length - 1);
        let before = std::fs::read(victim).unwrap();
        let error = PartitionLog::open(dir, config(600)).await.unwrap_err();
        let name = victim.file_name().unwrap().to_str().unwrap();
        assert!(error.to_string().contains(name), "{error}");
        assert!(error.to_string().contains("checksum"), "{error}");
        // Nothing was truncated.
        assert_eq!(std::fs::read(victim).unwrap(), before);

        // A torn non-last segment is an error too.
        flip_bit(victim, length - 1);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(victim)
            .unwrap();
        file.set_len(length as u64 - 3).unwrap();
        drop(file);
        let error = PartitionLog::open(dir, config(600)).await.unwrap_err();
        assert!(error.to_string().contains(name), "{error}");
    });
}

#[test]
fn missing_or_short_index_is_rebuilt() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        drop(log);
        let indexes = segment_files(dir, "index");
        let originals: Vec<Vec<u8>> = indexes
            .iter()
            .map(|path| std::fs::read(path).unwrap())
            .collect();
        std::fs::remove_file(&indexes[0]).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&indexes[1])
            .unwrap();
        file.set_len(originals[1].len() as u64 - 5).unwrap();
        drop(file);
        let mut garbage = originals[2].clone();
        garbage.extend_from_slice(&[7; 24]);
        std::fs::write(&indexes[2], garbage).unwrap();
        // An index without a log is removed.
        std::fs::write(dir.join("00000000000000099999.index"), [1u8; 24]).unwrap();

        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        for (path, original) in indexes.iter().zip(&originals) {
            assert_eq!(
                &std::fs::read(path).unwrap(),
                original,
                "{}",
                path.display()
            );
        }
        assert!(!dir.join("00000000000000099999.index").exists());
        check_all_reads(&mut log, &batch_bases(&ROLL_SIZES)).await;
    });
}

#[test]
fn truncate_from_boundaries_mid_batch_and_earlier_segments() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let bases = batch_bases(&ROLL_SIZES);
        let total: u64 = ROLL_SIZES.iter().map(|size| u64::from(*size)).sum();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        let segments = log.segments_count();

        // At or past the end: nothing happens.
        log.truncate_from(total).await.unwrap();
        log.truncate_from(total + 10).await.unwrap();
        assert_eq!((log.next_offset(), log.segments_count()), (total, segments));

        // Mid-batch in the last batch: the batch is sliced on disk.
        log.truncate_from(total - 2).await.unwrap();
        assert_eq!(log.next_offset(), total - 2);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        check_all_reads(&mut log, &bases).await;

        // On a batch boundary in an earlier segment: later segments are removed.
        let boundary = bases[3];
        log.truncate_from(boundary).await.unwrap();
        assert_eq!(log.next_offset(), boundary);
        assert!(log.segments_count() < segments);
        assert_eq!(segment_files(dir, "log").len() as u32, log.segments_count());
        assert_eq!(
            segment_files(dir, "index").len() as u32,
            log.segments_count()
        );
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        check_all_reads(&mut log, &bases).await;

        // Mid-batch in an earlier batch, then reopen: the sliced record verifies.
        let middle = bases[1] + 3;
        log.truncate_from(middle).await.unwrap();
        assert_eq!(log.next_offset(), middle);
        check_all_reads(&mut log, &bases).await;
        log.sync().await;
        drop(log);
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        assert_eq!(log.next_offset(), middle);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        check_all_reads(&mut log, &bases).await;
        let index = std::fs::read(segment_files(dir, "index").pop().unwrap()).unwrap();
        assert_eq!(index.len(), 2 * index_entry::SIZE);

        // Appends continue from the truncation point.
        append_batches(&mut log, &[4]).await;
        check_all_reads(&mut log, &[0, bases[1], middle]).await;

        // Truncating to the first offset empties the log.
        log.truncate_from(0).await.unwrap();
        assert_eq!(
            (log.next_offset(), log.messages_count(), log.size_bytes()),
            (0, 0, 0)
        );
        assert_eq!(log.segments_count(), 1);
        append_batches(&mut log, &[2]).await;
        check_all_reads(&mut log, &[0]).await;
    });
}

#[test]
fn truncate_below_the_first_offset_restarts_there() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        log.delete_oldest_segments(2).await;
        let first = log.first_offset();
        assert!(first > 5);
        log.truncate_from(5).await.unwrap();
        assert_eq!(
            (log.first_offset(), log.next_offset(), log.segments_count()),
            (5, 5, 1)
        );
        assert_eq!(
            segment_files(dir, "log"),
            vec![dir.join("00000000000000000005.log")]
        );
        append_batches(&mut log, &[3]).await;
        drop(log);
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        assert_eq!((log.first_offset(), log.next_offset()), (5, 8));
        check_all_reads(&mut log, &[5]).await;
    });
}

#[test]
fn delete_oldest_segments_never_deletes_the_active_one() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        let bases = batch_bases(&ROLL_SIZES);
        let segments = log.segments_count();
        let next = log.next_offset();
        assert_eq!(log.delete_oldest_segments(0).await, 0);
        assert_eq!(log.delete_oldest_segments(1).await, 1);
        let first = log.first_offset();
        assert!(first > 0 && bases.contains(&first));
        assert_eq!(log.messages_count(), next - first);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        assert!(!dir.join("00000000000000000000.log").exists());
        assert!(!dir.join("00000000000000000000.index").exists());
        // A read below the first offset starts at it.
        check_all_reads(&mut log, &bases).await;
        assert_eq!(log.read_from(0, 1).await.unwrap().last_offset, Some(first));

        assert_eq!(log.delete_oldest_segments(100).await, segments - 2);
        assert_eq!(log.segments_count(), 1);
        assert_eq!(log.delete_oldest_segments(1).await, 0);
        assert_eq!(log.next_offset(), next);
        check_all_reads(&mut log, &bases).await;
        drop(log);
        let log = PartitionLog::open(dir, config(1024)).await.unwrap();
        assert_eq!(log.next_offset(), next);
        assert_eq!(log.segments_count(), 1);
    });
}

/// Retention as the node runs it: the point decided, then the segments below it retired.
async fn retain(
    log: &mut PartitionLog,
    now_us: u64,
    message_expiry_us: Option<u64>,
    max_size: Option<u64>,
) -> u32 {
    match log.retention_point(now_us, message_expiry_us, max_size) {
        Some(keep_from) => log.retire_below(keep_from).await,
        None => 0,
    }
}

#[test]
fn retention_by_size() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        let size = log.size_bytes();
        assert_eq!(retain(&mut log, u64::MAX, None, None).await, 0);
        drop(log);

        let max_size = size / 2;
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        let segments = log.segments_count();
        let sizes: Vec<u64> = segment_files(dir, "log")
            .iter()
            .map(|path| std::fs::metadata(path).unwrap().len())
            .collect();
        let deleted = retain(&mut log, 0, None, Some(max_size)).await;
        assert!(deleted > 0);
        assert_eq!(log.segments_count(), segments - deleted);
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
        // The maximum bounds the closed segments (the active one does not count), and only
        // what it must goes: with the last segment deleted back, they would not fit.
        let closed = log.size_bytes() - sizes.last().unwrap();
        assert!(closed <= max_size);
        assert!(closed + sizes[deleted as usize - 1] > max_size);
        // Already within the limit: nothing more to delete.
        assert_eq!(retain(&mut log, 0, None, Some(max_size)).await, 0);
        check_all_reads(&mut log, &batch_bases(&ROLL_SIZES)).await;

        // Size retention keeps the newest closed segment whatever its size.
        retain(&mut log, 0, None, Some(1)).await;
        assert_eq!(log.segments_count(), 2);
    });
}

#[test]
fn retention_by_expiry() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let expiry = 1_000;
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        let logs = segment_files(dir, "log");
        let second_start: u64 = logs[1]
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let third_start: u64 = logs[2]
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // The newest batch of the first segment is the last one starting before the second.
        let bases = batch_bases(&ROLL_SIZES);
        let newest_first = timestamp_of(
            *bases
                .iter()
                .rev()
                .find(|base| **base < second_start)
                .unwrap(),
        );
        let newest_second = timestamp_of(
            *bases
                .iter()
                .rev()
                .find(|base| **base < third_start)
                .unwrap(),
        );

        // Not yet older than now - expiry.
        assert_eq!(
            retain(&mut log, newest_first + expiry, Some(expiry), None).await,
            0
        );
        assert_eq!(retain(&mut log, 0, Some(expiry), None).await, 0);
        assert_eq!(
            retain(&mut log, newest_first + expiry + 1, Some(expiry), None).await,
            1
        );
        assert_eq!(log.first_offset(), second_start);
        assert_eq!(
            retain(&mut log, newest_second + expiry + 1, Some(expiry), None).await,
            1
        );
        assert_eq!(log.first_offset(), third_start);
        // Everything expired: only the active segment stays.
        retain(&mut log, u64::MAX, Some(expiry), None).await;
        assert_eq!(log.segments_count(), 1);
        assert_eq!(
            log.next_offset(),
            bases.last().unwrap() + u64::from(*ROLL_SIZES.last().unwrap())
        );
        assert_eq!(log.size_bytes(), total_log_bytes(dir));
    });
}

#[test]
fn offset_at_timestamp_finds_the_first_batch_at_or_after() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        append_batches(&mut log, &ROLL_SIZES).await;
        assert!(log.segments_count() > 2);
        let bases = batch_bases(&ROLL_SIZES);
        assert_eq!(log.offset_at_timestamp(0), Some(0));
        for base in &bases {
            let timestamp = timestamp_of(*base);
            assert_eq!(log.offset_at_timestamp(timestamp), Some(*base));
            let next = bases.iter().find(|other| **other > *base).copied();
            assert_eq!(log.offset_at_timestamp(timestamp + 1), next);
        }
        assert_eq!(log.offset_at_timestamp(u64::MAX), None);
        drop(log);
        let log = PartitionLog::open(dir, config(1024)).await.unwrap();
        assert_eq!(
            log.offset_at_timestamp(timestamp_of(bases[5]) - 1),
            Some(bases[5])
        );

        // Out-of-order base timestamps: the first batch at or after still wins.
        let other = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(other.path(), config(1 << 20))
            .await
            .unwrap();
        for (offset, timestamp) in [(0, 500), (1, 300), (2, 700), (3, 600)] {
            log.append(make_batch(offset, 1, timestamp)).await.unwrap();
        }
        assert_eq!(log.offset_at_timestamp(400), Some(0));
        assert_eq!(log.offset_at_timestamp(550), Some(2));
        assert_eq!(log.offset_at_timestamp(650), Some(2));
        assert_eq!(log.offset_at_timestamp(701), None);
    });
}

#[test]
fn append_rejects_malformed_frames() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 20))
            .await
            .unwrap();
        let mut record = make_batch(0, 2, 1);
        write_u32(
            &mut record,
            batch::HEADER_SIZE + frame::PAYLOAD_LENGTH,
            10_000,
        );
        assert!(matches!(
            log.append(record).await,
            Err(StorageError::InvalidBatch(_))
        ));
        assert_eq!((log.next_offset(), log.size_bytes()), (0, 0));
    });
}

/// One message of the model: its offset and the base timestamp of the batch holding it.
#[derive(Debug, Clone, Copy)]
struct ModelMessage {
    offset: u64,
    timestamp: u64,
}

async fn check_against_model(
    log: &mut PartitionLog,
    dir: &Path,
    model: &[ModelMessage],
    random: &mut StdRng,
) {
    let first = model.first().map(|message| message.offset);
    assert_eq!(log.first_offset(), first.unwrap_or(log.next_offset()));
    assert_eq!(log.messages_count(), model.len() as u64);
    if let Some(last) = model.last() {
        assert_eq!(log.next_offset(), last.offset + 1);
    }
    assert_eq!(log.size_bytes(), total_log_bytes(dir));
    assert_eq!(segment_files(dir, "log").len() as u32, log.segments_count());
    for _ in 0..4 {
        let start =
            log.first_offset().saturating_sub(2) + random.random_range(0..model.len() as u64 + 4);
        let max = random.random_range(1..20);
        let read = log.read_from(start, max).await.unwrap();
        let skip = start.saturating_sub(log.first_offset()) as usize;
        let expected: Vec<_> = model.iter().skip(skip).take(max as usize).collect();
        let messages = decode(&read.bytes);
        assert_eq!(messages.len(), expected.len(), "start {start} max {max}");
        assert_eq!(read.messages as usize, expected.len());
        assert_eq!(
            read.last_offset,
            expected.last().map(|message| message.offset)
        );
        for ((offset, timestamp, body), model) in messages.into_iter().zip(expected) {
            assert_eq!((offset, timestamp), (model.offset, model.timestamp));
            assert_eq!(body, payload(offset));
        }
    }
    for _ in 0..3 {
        let timestamp = random.random_range(0..4_000);
        let expected = model
            .iter()
            .find(|message| message.timestamp >= timestamp)
            .map(|message| message.offset);
        assert_eq!(
            log.offset_at_timestamp(timestamp),
            expected,
            "timestamp {timestamp}"
        );
    }
}

#[test]
fn random_operations_match_a_model() {
    run(async {
        let mut random = StdRng::seed_from_u64(0x5EED);
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let segment_size = 700;
        let mut log = PartitionLog::open(dir, config(segment_size)).await.unwrap();
        let mut model: Vec<ModelMessage> = Vec::new();
        let mut clock = 0u64;
        let mut most_segments = 0;
        for step in 0..600 {
            match random.random_range(0..100) {
                0..60 => {
                    let offset = log.next_offset();
                    let count = random.random_range(1..7);
                    // Mostly forward, sometimes backwards.
                    clock = if random.random_bool(0.1) {
                        clock.saturating_sub(30)
                    } else {
                        clock + random.random_range(0..20)
                    };
                    log.append(make_batch(offset, count, clock)).await.unwrap();
                    for delta in 0..u64::from(count) {
                        model.push(ModelMessage {
                            offset: offset + delta,
                            timestamp: clock,
                        });
                    }
                }
                60..72 => {
                    let first = log.first_offset();
                    let offset = first + random.random_range(0..=model.len() as u64);
                    log.truncate_from(offset).await.unwrap();
                    model.truncate((offset - first) as usize);
                }
                72..80 => {
                    let before = log.segments_count();
                    let deleted = log.delete_oldest_segments(random.random_range(0..3)).await;
                    assert_eq!(log.segments_count(), before - deleted);
                    let first = log.first_offset();
                    model.retain(|message| message.offset >= first);
                }
                80..90 => {
                    log.sync().await;
                    drop(log);
                    log = PartitionLog::open(dir, config(segment_size)).await.unwrap();
                }
                _ => {}
            }
            if step % 50 == 0 {
                // Indexes match what a rebuild from the logs produces.
                let indexes: Vec<Vec<u8>> = segment_files(dir, "index")
                    .iter()
                    .map(|path| std::fs::read(path).unwrap())
                    .collect();
                for path in segment_files(dir, "index") {
                    std::fs::remove_file(path).unwrap();
                }
                drop(log);
                log = PartitionLog::open(dir, config(segment_size)).await.unwrap();
                let rebuilt: Vec<Vec<u8>> = segment_files(dir, "index")
                    .iter()
                    .map(|path| std::fs::read(path).unwrap())
                    .collect();
                assert_eq!(indexes, rebuilt, "step {step}");
            }
            check_against_model(&mut log, dir, &model, &mut random).await;
            most_segments = most_segments.max(log.segments_count());
        }
        assert!(most_segments >= 5, "{most_segments}");
    });
}

fn segment_logs(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    logs.sort();
    logs
}

fn every_file(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

/// The verifier's walk reads what open reads and changes nothing: a torn tail of the last
/// segment is a warning, a whole record failing its checksum is an error in the last segment
/// as in any other, and a stale index is a warning (open rebuilds it).
#[test]
fn check_tells_a_torn_tail_from_corruption_and_changes_nothing() {
    use iggy_storage::partition_log::check;
    use iggy_storage::verify::Severity;
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let mut log = PartitionLog::open(path, config(600)).await.unwrap();
        // Two batches per segment; the ninth alone in the last one.
        for base in (0..36).step_by(4) {
            log.append(make_batch(base, 4, 100 + base)).await.unwrap();
        }
        drop(log);
        let clean = check(path).await.unwrap();
        assert_eq!(clean.findings, vec![]);
        assert_eq!((clean.first_offset, clean.next_offset), (0, 36));
        assert_eq!(clean.batches.len(), 9);
        let (last_batch, last_length) = *clean.batches.last().unwrap();
        assert!(clean.holds(last_batch, last_length) && !clean.holds(last_batch, last_length + 1));
        let logs = segment_logs(path);
        assert_eq!(logs.len(), 5);
        let last = logs.last().unwrap().clone();
        let whole = std::fs::read(&last).unwrap();
        assert_eq!(whole.len() as u64, last_length);

        // Torn: the last record runs past the end of the file.
        std::fs::write(&last, &whole[..whole.len() - 5]).unwrap();
        let before = every_file(path);
        let torn = check(path).await.unwrap();
        assert_eq!(every_file(path), before, "check changed a file");
        assert_eq!(torn.findings.len(), 1, "{:?}", torn.findings);
        let finding = &torn.findings[0];
        assert_eq!(
            (finding.severity, &finding.path, finding.offset),
            (Severity::Warning, &last, Some(0))
        );
        assert!(
            finding.message.starts_with("torn tail"),
            "{}",
            finding.message
        );
        assert_eq!(torn.next_offset, 32);

        // Whole but damaged: an error, though open would cut it like a tail.
        std::fs::write(&last, &whole).unwrap();
        flip(&last, batch::HEADER_SIZE + frame::HEADER_SIZE);
        let corrupt = check(path).await.unwrap();
        assert_eq!(corrupt.findings.len(), 1, "{:?}", corrupt.findings);
        assert_eq!(corrupt.findings[0].severity, Severity::Error);
        assert!(
            corrupt.findings[0].message.contains("message checksum"),
            "{}",
            corrupt.findings[0]
        );
        std::fs::write(&last, &whole).unwrap();

        // A closed segment: open refuses the partition.
        flip(&logs[1], batch::HEADER_SIZE + frame::HEADER_SIZE);
        let closed = check(path).await.unwrap();
        assert_eq!(closed.findings.len(), 1, "{:?}", closed.findings);
        assert_eq!(
            (closed.findings[0].severity, &closed.findings[0].path),
            (Severity::Error, &logs[1])
        );
        assert!(closed.findings[0].message.contains("refuses the partition"));
        flip(&logs[1], batch::HEADER_SIZE + frame::HEADER_SIZE);

        // A damaged index: a warning naming the byte where it departs from the log.
        let index = logs[2].with_extension("index");
        flip(&index, index_entry::SIZE + 1);
        let stale = check(path).await.unwrap();
        assert_eq!(stale.findings.len(), 1, "{:?}", stale.findings);
        let finding = &stale.findings[0];
        assert_eq!(
            (finding.severity, &finding.path, finding.offset),
            (
                Severity::Warning,
                &index,
                Some(index_entry::SIZE as u64 + 1)
            )
        );
    });
}

/// A segment's records are fsynced before the next segment is created, without a `sync` call:
/// a machine crash never leaves a later segment behind an earlier one's unsynced tail (which
/// recovery would refuse as a damaged earlier segment).
#[test]
fn a_full_segment_is_fsynced_before_the_next_one_is_created() {
    use iggy_storage::fail_stop::{Synced, fsyncs};
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1024))
            .await
            .unwrap();
        let before = fsyncs(Synced::Segment);
        let mut rolls = 0;
        while rolls < 3 {
            let segments = log.segments_count();
            append_batches(&mut log, &[3]).await;
            if log.segments_count() > segments {
                rolls += 1;
                assert_eq!(
                    fsyncs(Synced::Segment) - before,
                    rolls,
                    "roll {rolls}: the full segment was fsynced first"
                );
            }
        }
    });
}

/// A log of [`ROLL_SIZES`] batches (their lengths) in segments of 1024 bytes and an empty log
/// to copy it into, each in a folder of its own.
struct SourceAndCopy {
    source_dir: tempfile::TempDir,
    source: PartitionLog,
    lengths: Vec<usize>,
    copy_dir: tempfile::TempDir,
    copy: PartitionLog,
}

impl SourceAndCopy {
    async fn set_up() -> Self {
        let (source_dir, copy_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut source = PartitionLog::open(source_dir.path(), config(1024))
            .await
            .unwrap();
        let lengths = append_batches(&mut source, &ROLL_SIZES).await;
        let copy = PartitionLog::open(copy_dir.path(), config(1024))
            .await
            .unwrap();
        SourceAndCopy {
            source_dir,
            source,
            lengths,
            copy_dir,
            copy,
        }
    }
}

/// Copies `source`'s records from `copy`'s end up to `end` into `copy`, in chunks of at most
/// 300 bytes (or one record longer than that), as a state transfer does.
async fn copy_records(source: &mut PartitionLog, copy: &mut PartitionLog, end: u64) {
    while copy.next_offset() < end {
        let chunk = source
            .records_from(copy.next_offset(), 300, end)
            .await
            .unwrap()
            .unwrap();
        let mut position = 0;
        let mut records = 0;
        while position < chunk.len() {
            let length = read_u64(&chunk, position + batch::BATCH_LENGTH) as usize;
            copy.append(chunk[position..position + length].to_vec())
                .await
                .unwrap();
            position += length;
            records += 1;
        }
        assert!(chunk.len() <= 300 || records == 1, "{} bytes", chunk.len());
    }
}

#[test]
fn records_from_reads_whole_records_within_a_budget_and_they_append_byte_identical_elsewhere() {
    run(async {
        let SourceAndCopy {
            source_dir,
            mut source,
            lengths,
            copy_dir,
            mut copy,
        } = SourceAndCopy::set_up().await;
        let bases = batch_bases(&ROLL_SIZES);
        assert!(source.segments_count() >= 3);
        let end = source.next_offset();
        // Not a batch start, or past the end: no records to copy.
        assert_eq!(
            source
                .records_from(bases[1] + 1, 1 << 20, end)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            source.records_from(end, 1 << 20, end).await.unwrap(),
            Some(Vec::new())
        );
        // A budget below one record still reads that whole record.
        let one = source
            .records_from(bases[2], 1, end)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(one.len(), lengths[2]);
        // `end` stops at the batch that starts there.
        let two = source
            .records_from(bases[2], 1 << 20, bases[4])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(two.len(), lengths[2] + lengths[3]);
        // Copied in chunks of at most 300 bytes (across every segment) into another log.
        copy_records(&mut source, &mut copy, end).await;
        source.sync().await;
        copy.sync().await;
        assert_eq!(
            every_file(source_dir.path()).len(),
            every_file(copy_dir.path()).len()
        );
        for ((source_path, source_bytes), (copy_path, copy_bytes)) in every_file(source_dir.path())
            .into_iter()
            .zip(every_file(copy_dir.path()))
        {
            assert_eq!(source_path.file_name(), copy_path.file_name());
            assert!(
                source_bytes == copy_bytes,
                "{} differs",
                copy_path.display()
            );
        }
        // After a retirement the retired start is no longer served.
        let kept_from = source.retire_point(1, u64::MAX);
        source.retire_below(kept_from).await;
        assert_eq!(source.records_from(0, 1 << 20, end).await.unwrap(), None);
        assert!(
            source
                .records_from(kept_from, 1 << 20, end)
                .await
                .unwrap()
                .is_some()
        );
    });
}

/// A replica whose peers retired everything it holds restarts its log at the peers' first
/// retained offset and copies on: its segments come out byte-identical to the source's. A crash
/// between the rename and the emptying of the last segment reopens as that same empty log.
#[test]
fn a_log_restarted_past_its_end_copies_on_byte_identical_and_survives_a_crash_in_between() {
    run(async {
        let SourceAndCopy {
            source_dir,
            mut source,
            copy_dir,
            mut copy,
            ..
        } = SourceAndCopy::set_up().await;
        let end = source.next_offset();
        // The copy holds the first two segments and a part of the third.
        let held = source.retire_point(2, u64::MAX) + 1;
        let held = batch_bases(&ROLL_SIZES)
            .into_iter()
            .find(|base| *base >= held)
            .unwrap();
        copy_records(&mut source, &mut copy, held).await;
        assert!(copy.segments_count() >= 3);
        // The source retires past everything the copy holds.
        let kept_from = source.retire_point(4, u64::MAX);
        assert!(kept_from > copy.next_offset());
        source.retire_below(kept_from).await;
        assert_eq!(source.first_offset(), kept_from);
        assert_eq!(source.records_from(held, 1 << 20, end).await.unwrap(), None);

        copy.restart_at(kept_from).await;
        assert_eq!(
            (
                copy.first_offset(),
                copy.next_offset(),
                copy.segments_count()
            ),
            (kept_from, kept_from, 1)
        );
        assert_eq!((copy.size_bytes(), copy.messages_count()), (0, 0));
        let first_name = format!("{kept_from:020}");
        assert_eq!(
            every_file(copy_dir.path())
                .into_iter()
                .map(|(path, bytes)| (path.file_stem().unwrap().to_owned(), bytes.len()))
                .collect::<Vec<_>>(),
            vec![
                (first_name.clone().into(), 0),
                (first_name.into(), 0),
                ("retained".into(), 16)
            ],
            "one empty segment at the source's first offset, and the offset it is retained from"
        );
        copy_records(&mut source, &mut copy, end).await;
        source.sync().await;
        copy.sync().await;
        let names = |dir: &Path| {
            every_file(dir)
                .into_iter()
                .map(|(path, bytes)| (path.file_name().unwrap().to_owned(), bytes))
                .collect::<Vec<_>>()
        };
        assert!(names(copy_dir.path()) == names(source_dir.path()));
        drop(copy);
        let mut copy = PartitionLog::open(copy_dir.path(), config(1024))
            .await
            .unwrap();
        assert_eq!((copy.first_offset(), copy.next_offset()), (kept_from, end));
        check_all_reads(&mut copy, &batch_bases(&ROLL_SIZES)).await;

        // A crash after the last segment's log was renamed, before its index was and before it
        // was emptied: its records do not start at its name, and the log reopens empty there.
        let crashed_dir = tempfile::tempdir().unwrap();
        let dir = crashed_dir.path();
        let mut crashed = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
        append_batches(&mut crashed, &[4, 7]).await;
        crashed.sync().await;
        drop(crashed);
        std::fs::rename(
            dir.join(format!("{:020}.log", 0)),
            dir.join(format!("{:020}.log", 40)),
        )
        .unwrap();
        let reopened = PartitionLog::open(dir, config(1 << 20)).await.unwrap();
        assert_eq!((reopened.first_offset(), reopened.next_offset()), (40, 40));
        assert_eq!(
            segment_files(dir, "index"),
            vec![dir.join(format!("{:020}.index", 40))]
        );
    });
}

/// Descriptors this process holds open (nextest runs each test in a process of its own).
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Files one log may hold open however many segments it keeps: the active segment's `.log`
/// and `.index`, and a few closed `.log` files kept for reads.
const LOG_DESCRIPTORS_MAX: usize = 2 + partition_log::CLOSED_LOGS_OPEN_MAX;

#[test]
fn a_log_of_many_closed_segments_keeps_a_bounded_number_of_files_open() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let before = open_descriptors();
        let held = || open_descriptors().saturating_sub(before);
        // A segment size below one record: every batch closes its segment.
        let sizes = [3u32; 60];
        let bases = batch_bases(&sizes);
        let mut log = PartitionLog::open(dir, config(64)).await.unwrap();
        append_batches(&mut log, &sizes).await;
        assert!(log.segments_count() > 60, "{}", log.segments_count());
        assert!(held() <= LOG_DESCRIPTORS_MAX, "appending: {} open", held());

        // Reads of every closed segment return every message in order, and open each segment
        // only for as long as a few stay open.
        check_all_reads(&mut log, &bases).await;
        assert!(held() <= LOG_DESCRIPTORS_MAX, "reading: {} open", held());
        let whole = log.read_from(0, u32::MAX).await.unwrap();
        assert_eq!(whole.messages, 180);

        // A retirement closes what it deletes.
        assert_eq!(log.retire_below(bases[30]).await, 30);
        assert!(held() <= LOG_DESCRIPTORS_MAX, "retired: {} open", held());
        check_all_reads(&mut log, &bases).await;

        // Recovery walks every segment and keeps few of them open.
        log.sync().await;
        drop(log);
        assert_eq!(held(), 0, "a dropped log holds nothing");
        let mut log = PartitionLog::open(dir, config(64)).await.unwrap();
        assert!(held() <= LOG_DESCRIPTORS_MAX, "reopened: {} open", held());
        check_all_reads(&mut log, &bases).await;
        assert!(held() <= LOG_DESCRIPTORS_MAX, "reading: {} open", held());

        // A truncation into a closed segment makes it the active one, and appends go on.
        log.truncate_from(bases[40] + 1).await.unwrap();
        assert!(held() <= LOG_DESCRIPTORS_MAX, "truncated: {} open", held());
        append_batches(&mut log, &[3, 3]).await;
        let mut bases = bases[..41].to_vec();
        bases.extend([bases[40] + 1, bases[40] + 4]);
        check_all_reads(&mut log, &bases).await;
        assert!(held() <= LOG_DESCRIPTORS_MAX, "appended: {} open", held());
        drop(log);
        assert_eq!(held(), 0, "a dropped log holds nothing");
    });
}

#[test]
fn a_read_stops_before_the_batch_that_would_pass_its_byte_bound_and_cuts_a_first_one_over_it() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path();
        let mut log = PartitionLog::open(dir, config(1024)).await.unwrap();
        let lengths = append_batches(&mut log, &ROLL_SIZES).await;
        let bases = batch_bases(&ROLL_SIZES);
        let whole = log.read_from(0, u32::MAX).await.unwrap();
        for start in [0, 1, bases[2], bases[2] + 1] {
            for max_bytes in [
                0,
                1,
                lengths[0],
                lengths[0] + lengths[1],
                1500,
                4000,
                usize::MAX,
            ] {
                let read = log
                    .read_from_with_headroom(start, u32::MAX, 16, max_bytes)
                    .await
                    .unwrap();
                let records = &read.bytes[16..];
                let messages = decode(records);
                // At least one message, whatever the bound; within it otherwise.
                assert!(!messages.is_empty(), "start {start} max_bytes {max_bytes}");
                assert!(
                    records.len() <= max_bytes || messages.len() == 1,
                    "start {start}: {} bytes over {max_bytes}",
                    records.len()
                );
                // The messages run on from `start` as an unbounded read's do.
                for (index, (offset, _, body)) in messages.iter().enumerate() {
                    assert_eq!(*offset, start + index as u64);
                    assert_eq!(*body, payload(*offset));
                }
                assert_eq!(read.messages as usize, messages.len());
                assert_eq!(read.last_offset, Some(start + messages.len() as u64 - 1));
                let next = messages.last().unwrap().0 + 1;
                if max_bytes == usize::MAX {
                    assert_eq!(next, log.next_offset());
                } else if let Some(at) = bases.iter().position(|base| *base == next) {
                    // Stopped at a batch boundary, the next batch not fitting.
                    assert!(records.len() + lengths[at] > max_bytes);
                } else if next < log.next_offset() {
                    // Cut inside the first batch, which alone is over the bound: one message
                    // more would not fit.
                    let first_batch_end = *bases.iter().find(|base| **base > start).unwrap();
                    assert!(
                        next < first_batch_end,
                        "start {start} max_bytes {max_bytes}"
                    );
                    let one_more = log
                        .read_from_with_headroom(start, read.messages + 1, 0, usize::MAX)
                        .await
                        .unwrap();
                    assert!(one_more.bytes.len() > max_bytes);
                }
            }
        }
        assert_eq!(
            log.read_from_with_headroom(0, u32::MAX, 0, usize::MAX)
                .await
                .unwrap(),
            whole
        );
    });
}

/// The active segment's file removed or cut short behind the log's back is found by
/// `check_active_file` (the node stops on it; a removed one is written back first); one grown or
/// intact is not.
#[test]
fn an_active_segment_removed_or_cut_short_behind_the_logs_back_is_found() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 30))
            .await
            .unwrap();
        append_batches(&mut log, &[3, 4, 5]).await;
        log.check_active_file().unwrap();
        let path = segment_files(temporary.path(), "log").pop().unwrap();
        let length = std::fs::metadata(&path).unwrap().len();

        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(length + 10).unwrap();
        log.check_active_file().unwrap();
        file.set_len(length - 1).unwrap();
        let found = log.check_active_file().unwrap_err().to_string();
        assert!(
            found.contains(&path.display().to_string()) && found.contains("cut to"),
            "{found}"
        );
        file.set_len(length).unwrap();
        log.check_active_file().unwrap();

        let written = std::fs::read(&path).unwrap();
        let index_path = path.with_extension("index");
        let index = std::fs::read(&index_path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&index_path).unwrap();
        let found = log.check_active_file().unwrap_err().to_string();
        assert!(
            found.contains("removed") && found.contains("written back"),
            "{found}"
        );
        // Written back from the open files, whole, for the next start (a single node has no
        // peer to catch up from).
        assert!(
            std::fs::read(&path).unwrap() == written,
            "the log is back, byte for byte"
        );
        assert!(
            std::fs::read(&index_path).unwrap() == index,
            "the index is back too"
        );
    });
}

/// A segment cut short behind the log's back and then written past (zeros where batches were):
/// reads of those batches fail naming the file, instead of serving the zeros as records.
#[test]
fn batches_a_file_cut_short_behind_the_logs_back_lost_are_not_read_as_records() {
    run(async {
        let temporary = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(temporary.path(), config(1 << 30))
            .await
            .unwrap();
        let lengths = append_batches(&mut log, &[3, 4, 5]).await;
        let path = segment_files(temporary.path(), "log").pop().unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(lengths[0] as u64 + 10).unwrap();
        append_batches(&mut log, &[2]).await;
        log.check_active_file().unwrap();

        // The first batch is intact; the second and third read zeros.
        assert_eq!(log.read_from(0, 3).await.unwrap().messages, 3);
        for (start, count) in [(0, 4), (3, 1), (5, 2), (7, 5), (0, 100)] {
            let found = log.read_from(start, count).await.unwrap_err().to_string();
            assert!(
                found.contains(&path.display().to_string()) && found.contains("behind"),
                "{start}+{count}: {found}"
            );
        }
        assert_eq!(log.read_from(12, 2).await.unwrap().messages, 2);
        assert!(log.record_at(3, lengths[1] as u64).await.is_err());
        assert!(log.records_from(0, 1 << 20, 14).await.is_err());
    });
}
