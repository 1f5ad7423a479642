//! Micro-benchmarks of the server's hot path, so a regression shows up as a number:
//! the generated codec (request header, send request), batch verification and stamping, the
//! partition log's append, and the metadata model's lookups by name and creates (every request
//! an official client addresses by name resolves its stream and topic). Run with
//! `cargo bench -p iggy-bench --bench hot_path`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use iggy_generated::frames::{Command, RequestHeader};
use iggy_generated::payloads::{Identifier, Partitioning, SendMessagesRequest};
use iggy_storage::batch;
use iggy_storage::partition_log::{LogConfig, PartitionLog};
use iggy_wire::{WireDecode, WireEncode};

/// A batch record of `count` messages of `size` bytes each, checksums valid, as a producer
/// sends it (server fields zero).
fn batch_record(count: u32, size: usize) -> Vec<u8> {
    use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
    let mut record = vec![0u8; BatchHeader::SIZE];
    for i in 0..count {
        let frame = MessageFrameHeader {
            id: u128::from(i) + 1,
            offset_delta: i,
            payload_length: size as u32,
            ..Default::default()
        };
        let mut bytes = frame.to_bytes().to_vec();
        bytes.extend(std::iter::repeat_n(i as u8, size));
        let checksum = twox_hash::XxHash3_64::oneshot(&bytes[8..]);
        bytes[..8].copy_from_slice(&checksum.to_le_bytes());
        record.extend_from_slice(&bytes);
    }
    let header = BatchHeader {
        batch_length: record.len() as u64,
        message_count: count,
        ..Default::default()
    };
    header.encode_fixed(&mut record[..BatchHeader::SIZE]);
    let checksum = batch::compute_checksum(&record);
    let at = BatchHeader::BATCH_CHECKSUM_OFFSET;
    record[at..at + 8].copy_from_slice(&checksum.to_le_bytes());
    record
}

fn codec(c: &mut Criterion) {
    let header = RequestHeader {
        command: Command::Request,
        size: 256,
        client: 42,
        ..Default::default()
    };
    let bytes = header.to_bytes();
    c.bench_function("codec/request_header_decode", |b| {
        b.iter(|| RequestHeader::decode_fixed(&bytes).unwrap())
    });

    let record = batch_record(1000, 100);
    let stream = 1u32.to_le_bytes();
    let partition = 0u32.to_le_bytes();
    let request = SendMessagesRequest {
        metadata_length: 0,
        stream_id: Identifier {
            kind: 1,
            value: &stream,
        },
        topic_id: Identifier {
            kind: 1,
            value: &stream,
        },
        partitioning: Partitioning {
            kind: 2,
            value: &partition,
        },
        messages_count: 1000,
        batch: &record,
    };
    let mut body = Vec::new();
    request.encode_to(&mut body);
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("send_request_decode_100KB", |b| {
        b.iter(|| SendMessagesRequest::decode_exact(&body).unwrap())
    });
    group.finish();
}

fn batches(c: &mut Criterion) {
    let record = batch_record(1000, 1000);
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Bytes(record.len() as u64));
    group.bench_function("verify_1MB", |b| b.iter(|| batch::verify(&record).unwrap()));
    group.bench_function("stamp_1MB", |b| {
        b.iter_batched(
            || record.clone(),
            |mut r| batch::stamp(&mut r, 0, 7, 1_700_000_000_000_000),
            BatchSize::LargeInput,
        )
    });
    // What the log does instead of stamping a copy: a new header in front of the same frames.
    group.bench_function("stamped_header_1MB", |b| {
        b.iter(|| batch::stamped_header(&record, 0, 7, 1_700_000_000_000_000))
    });
    group.finish();
}

fn log_append(c: &mut Criterion) {
    let runtime = compio::runtime::Runtime::new().expect("io_uring runtime");
    let dir = tempfile::tempdir().unwrap();
    // Retention keeps the benchmark's disk use near 192 MiB however many appends it measures.
    let config = LogConfig {
        segment_size: 64 << 20,
        // The server's default: writeback started every 8 MiB appended.
        writeback_bytes: 8 << 20,
        refuse_corrupt_tail: false,
    };
    let log = std::cell::RefCell::new(
        runtime
            .block_on(PartitionLog::open(dir.path(), config))
            .unwrap(),
    );
    let template = batch_record(1000, 1000);
    let mut group = c.benchmark_group("log");
    group.throughput(Throughput::Bytes(template.len() as u64));
    group.sample_size(30);
    group.measurement_time(std::time::Duration::from_secs(3));
    // The server's append: the received batch (checked once), a stamped header and the frames
    // from the same buffer, into the page cache.
    let received = batch::ValidBatch::check(template.into()).unwrap();
    group.bench_function("append_batch_1MB_buffered", |b| {
        b.iter_batched(
            || {
                let mut log = log.borrow_mut();
                if let Some(keep_from) = log.retention_point(0, None, Some(128 << 20)) {
                    runtime.block_on(log.retire_below(keep_from));
                }
                log.next_offset()
            },
            |offset| {
                runtime
                    .block_on(log.borrow_mut().append_batch(
                        &received,
                        0,
                        offset,
                        1_700_000_000_000_000,
                    ))
                    .unwrap()
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// A stream resolved by name among `n` (the last created: a scan's worst case), and a node's
/// 10,000 streams created one by one (as a start replays them).
fn metadata_names(c: &mut Criterion) {
    use iggy_metadata::model::{Ident, Metadata};
    let mut group = c.benchmark_group("metadata");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(2));
    group.warm_up_time(std::time::Duration::from_millis(500));
    for n in [100u32, 1_000, 10_000] {
        let mut metadata = Metadata::default();
        for i in 0..n {
            metadata.create_stream(&format!("stream-{i}"), 1).unwrap();
        }
        let last = Ident::Name(format!("stream-{}", n - 1));
        group.bench_function(format!("stream_by_name_among_{n}"), |b| {
            b.iter(|| metadata.stream(&last).unwrap().id)
        });
    }
    let names: Vec<String> = (0..10_000).map(|i| format!("stream-{i}")).collect();
    group.bench_function("create_10000_streams", |b| {
        b.iter(|| {
            let mut metadata = Metadata::default();
            for name in &names {
                metadata.create_stream(name, 1).unwrap();
            }
            metadata
        })
    });
    group.finish();
}

criterion_group!(hot_path, codec, batches, log_append, metadata_names);
criterion_main!(hot_path);
