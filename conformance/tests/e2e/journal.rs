//! The journal's checks with the real binary: a data directory whose metadata journal belongs
//! to another cluster is refused at start (naming the journal and both cluster ids, changing
//! nothing), and `iggy-server verify` reports it through the same check; a standalone node's
//! journal damaged in the middle, or gone, is refused, its files left as they are.

use crate::harness::*;
use crate::test_cluster::current_start;
use iggy::prelude::*;
use iggy_generated::frames::PrepareHeader;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Another cluster's id (any nonzero id but this node's).
const FOREIGN_CLUSTER: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

/// This node's cluster id: the default cluster name's, as spec/storage.spec derives it.
fn default_cluster() -> u128 {
    let name = iggy_generated::storage::CLUSTER_NAME_DEFAULT.as_bytes();
    let low = twox_hash::XxHash3_64::oneshot_with_seed(0, name);
    let high = twox_hash::XxHash3_64::oneshot_with_seed(1, name);
    (u128::from(high) << 64) | u128::from(low)
}

/// Stamps `cluster` on every record of the journal at `path`; returns how many it stamped.
fn restamp_cluster(path: &Path, cluster: u128) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut records = 0;
    while at + PrepareHeader::SIZE <= bytes.len() {
        let mut header = PrepareHeader::decode_fixed(&bytes[at..at + PrepareHeader::SIZE]).unwrap();
        assert_eq!(header.cluster, default_cluster(), "record at byte {at}");
        header.cluster = cluster;
        bytes[at..at + PrepareHeader::SIZE].copy_from_slice(&header.to_bytes());
        at += header.size as usize;
        records += 1;
    }
    std::fs::write(path, bytes).unwrap();
    records
}

/// Starts the server alone on `data` with `flags`; a refused start exits by itself, one that
/// comes up is stopped after 30 s (or, with `until` in its output, then). Its status and output.
fn start_alone(data: &Path, flags: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(server_binary())
        .arg("--with-default-root-credentials")
        .args(flags)
        .env("IGGY_SYSTEM_PATH", data)
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iggy-server");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, printed)
}

/// The byte positions of the journal records at `path`, in order.
fn record_positions(path: &Path) -> Vec<usize> {
    let bytes = std::fs::read(path).unwrap();
    let mut positions = Vec::new();
    let mut at = 0;
    while at + PrepareHeader::SIZE <= bytes.len() {
        let header = PrepareHeader::decode_fixed(&bytes[at..at + PrepareHeader::SIZE]).unwrap();
        positions.push(at);
        at += header.size as usize;
    }
    positions
}

/// Flips the first body byte of the `index`th record of the journal at `path`: the record
/// stays whole in length, its body checksum fails.
fn damage_record(path: &Path, index: usize) {
    let at = record_positions(path)[index] + PrepareHeader::SIZE;
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

/// `iggy-server verify` of `data`, which must exit 1 (an error found): its report.
fn verify_finds_errors(data: &Path) -> String {
    verify_exits(data, 1)
}

/// `verify` on `data`, which must exit `code`; its report.
fn verify_exits(data: &Path, code: i32) -> String {
    let verified =
        tokio::task::block_in_place(|| run(&["verify", "--path", data.to_str().unwrap()], data));
    let report = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert_eq!(verified.status.code(), Some(code), "{report}");
    report
}

/// Starts the server alone on `data` expecting its start refused (exit 1) with each of
/// `expected` said, and the data directory left as it was.
fn refused_alone_saying(data: &Path, expected: &[&str]) {
    let before = tree(data);
    let (status, printed) = tokio::task::block_in_place(|| start_alone(data, &[]));
    assert_eq!(status.code(), Some(1), "{printed}");
    for expected in expected {
        assert!(
            printed.contains(expected),
            "{expected:?} missing:\n{printed}"
        );
    }
    assert!(
        tree(data) == before,
        "the refused start changed the data directory"
    );
}

/// The files of `partition`'s segments with `extension` (`log` or `index`), oldest first.
fn segment_files(partition: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(partition)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    files
}

fn run(args: &[&str], data: &Path) -> Output {
    Command::new(server_binary())
        .args(args)
        .env("IGGY_SYSTEM_PATH", data)
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run iggy-server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_of_another_cluster_is_refused_untouched_and_verify_reports_it() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    let copy = tempfile::tempdir().unwrap();
    let data = copy.path().join("data");
    copy_tree(&server.data_dir(), &data);
    let journal = data.join("metadata").join("journal.wal");
    assert!(
        restamp_cluster(&journal, FOREIGN_CLUSTER) > 0,
        "the metadata journal holds ops"
    );
    let before = std::fs::read(&journal).unwrap();

    let report = verify_finds_errors(&data);
    let line = format!("error: {} at byte 0", journal.display());
    assert!(report.contains(&line), "{report}");
    assert!(
        report.contains(&format!("belongs to cluster {FOREIGN_CLUSTER:032x}")),
        "{report}"
    );

    let (started, log) = tokio::task::block_in_place(|| start_alone(&data, &[]));
    assert!(!started.success(), "the start is refused:\n{log}");
    assert!(log.contains(&journal.display().to_string()), "{log}");
    assert!(log.contains(&format!("{FOREIGN_CLUSTER:032x}")), "{log}");
    assert!(
        log.contains(&format!("{:032x}", default_cluster())),
        "{log}"
    );
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        before,
        "the journal is untouched"
    );
}

/// A standalone node's metadata journal with a damaged record that intact ops follow (one byte
/// flipped on disk): start-up dropped every later op, rewrote the journal and came up as a new
/// server with a new root user, its streams gone. It is now refused, the journal untouched and
/// the way out named; started once with `--cut-damaged-journals`, it cuts there, the loss said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_metadata_journal_damaged_in_the_middle_is_refused_until_the_loss_is_accepted()
{
    let mut server = TestServer::start();
    let client = server.root_client().await;
    for name in ["a", "b", "c"] {
        create_stream_and_topic(&client, name, "t", 1).await;
    }
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    let data = server.data_dir();
    let journal = data.join("metadata").join("journal.wal");
    let records = record_positions(&journal).len();
    assert!(records >= 6, "{records} metadata records");
    damage_record(&journal, records - 3);
    let before = tree(&data);

    verify_finds_errors(&data);

    refused_alone_saying(
        &data,
        &[
            journal.display().to_string().as_str(),
            "a standalone node has no peer that holds them",
            "Nothing was changed",
            "--cut-damaged-journals",
        ],
    );
    assert!(tree(&data) == before, "verify changed the data directory");

    tokio::task::block_in_place(|| server.start_again_with(&["--cut-damaged-journals"]));
    assert!(
        current_start(&server.log()).contains("lost (accepted with --cut-damaged-journals)"),
        "{}",
        current_start(&server.log())
    );
    let client = server.root_client().await;
    let streams = ok(
        "get_streams",
        within("get streams", client.get_streams()).await,
    );
    assert!(
        streams.iter().any(|stream| stream.name == "a"),
        "the ops before the damage stay: {streams:?}"
    );
}

/// The payloads `stopped_holding` sends: `m0` to `m{count - 1}`.
fn sent(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("m{i}")).collect()
}

/// A stream `s` with a topic `t` of one partition on `server`, holding [`sent`]`(count)` in as
/// many sends; the server then stopped. The ids and partition 0's directory.
async fn stopped_holding(
    server: &mut TestServer,
    count: usize,
) -> (Identifier, Identifier, PathBuf) {
    let client = server.root_client().await;
    let (stream, topic) = create_stream_and_topic(&client, "s", "t", 1).await;
    let (stream, topic) = (id(stream.id), id(topic.id));
    for payload in sent(count) {
        send_to_partition(&client, &stream, &topic, 0, vec![msg(payload)]).await;
    }
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    let partition = server.data_dir().join("streams/0/topics/0/partitions/0");
    (stream, topic, partition)
}

/// Starts `server` again: the payloads partition 0 of `(stream, topic)` serves from its first.
async fn restarted_serving_partition_0(
    server: &mut TestServer,
    (stream, topic): (&Identifier, &Identifier),
) -> Vec<String> {
    tokio::task::block_in_place(|| server.start_again());
    let client = server.root_client().await;
    let strategy = PollingStrategy::first();
    payloads(
        &poll(
            &client,
            stream,
            topic,
            0,
            &consumer("r"),
            strategy,
            100,
            false,
        )
        .await,
    )
}

/// Starts `server` again and expects partition 0 of `(stream, topic)` not served (3003: its copy
/// could not open), then stops it and expects the partition's files (`partition`) as `before`.
/// That start's log.
async fn restarted_with_partition_0_unserved(
    server: &mut TestServer,
    (stream, topic): (&Identifier, &Identifier),
    partition: &Path,
    before: &std::collections::BTreeMap<std::path::PathBuf, Option<Vec<u8>>>,
) -> String {
    tokio::task::block_in_place(|| server.start_again());
    let client = server.root_client().await;
    let (reader, strategy) = (consumer("r"), PollingStrategy::first());
    let polled = client.poll_messages(stream, topic, Some(0), &reader, &strategy, 20, false);
    let refused = within("poll", polled)
        .await
        .expect_err("the partition is not served");
    assert_eq!(refused.as_code(), 3003, "{refused}");
    let start = current_start(&server.log()).to_string();
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    assert!(tree(partition) == *before, "the partition's files changed");
    start
}

/// A standalone partition whose journal is gone (the seed's missing WAL frontier): start-up
/// replayed nothing and deleted every segment as messages "no journaled op accounts for". The
/// partition is now not served (3003, its files kept), verify reports it, and with its journal
/// back it serves every message again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_partition_whose_journal_is_gone_is_not_served_and_keeps_its_files() {
    let mut server = TestServer::start();
    let (stream, topic, partition) = stopped_holding(&mut server, 5).await;
    let journal = partition.join("journal.wal");
    let kept = tempfile::tempdir().unwrap();
    std::fs::rename(&journal, kept.path().join("journal.wal")).unwrap();
    let before = tree(&partition);

    let data = server.data_dir();
    let report = verify_finds_errors(&data);
    assert!(
        report.contains(&format!("error: {}", journal.display()))
            && report.contains("missing, though the group was written"),
        "{report}"
    );

    let start =
        restarted_with_partition_0_unserved(&mut server, (&stream, &topic), &partition, &before)
            .await;
    assert!(
        start.contains("is missing, but the partition was written"),
        "{start}"
    );

    std::fs::rename(kept.path().join("journal.wal"), &journal).unwrap();
    assert_eq!(
        restarted_serving_partition_0(&mut server, (&stream, &topic)).await,
        sent(5)
    );
}

/// A standalone partition whose checkpoint slots are gone, its journal emptied by the last
/// checkpoint (the state a graceful stop right after one leaves): start-up found every batch
/// unaccounted for and deleted them all. More than the one batch a crash leaves unaccounted now
/// refuses the partition (3003, its files kept), verify reports it (it passed it before), and
/// with its files back it serves every message again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_partition_whose_checkpoints_are_gone_is_not_served_and_keeps_its_files() {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "1")]);
    let (stream, topic, partition) = stopped_holding(&mut server, 12).await;
    let kept = tempfile::tempdir().unwrap();
    copy_tree(&partition, kept.path());
    let slots = ["checkpoint.0", "checkpoint.1"].map(|slot| partition.join(slot));
    assert!(
        slots.iter().any(|slot| slot.exists()),
        "the partition checkpointed"
    );
    for slot in slots.iter().filter(|slot| slot.exists()) {
        std::fs::remove_file(slot).unwrap();
    }
    std::fs::write(partition.join("journal.wal"), b"").unwrap();
    let before = tree(&partition);
    let report = verify_finds_errors(&server.data_dir());
    assert!(
        report.contains("offsets 0..12 (12 batches) are in the log, but neither the journal nor a checkpoint accounts for them"),
        "{report}"
    );

    let start =
        restarted_with_partition_0_unserved(&mut server, (&stream, &topic), &partition, &before)
            .await;
    assert!(
        start.contains("offsets 0..12 (12 batches) are in the log, but neither the journal nor a checkpoint accounts for them"),
        "{start}"
    );

    std::fs::remove_dir_all(&partition).unwrap();
    copy_tree(kept.path(), &partition);
    assert_eq!(
        restarted_serving_partition_0(&mut server, (&stream, &topic)).await,
        sent(12)
    );
}

/// The byte position of the batch holding offset `offset` in the segment log `log` (batches of
/// one message each, as [`stopped_holding`] sends).
fn batch_position(log: &Path, offset: u64) -> usize {
    use iggy_generated::frames::BatchHeader;
    let bytes = std::fs::read(log).unwrap();
    let mut at = 0;
    while at + BatchHeader::SIZE <= bytes.len() {
        let header = BatchHeader::decode_fixed(&bytes[at..at + BatchHeader::SIZE]).unwrap();
        if header.base_offset == offset {
            return at;
        }
        at += header.batch_length as usize;
    }
    panic!("{} holds no batch at offset {offset}", log.display());
}

/// A standalone partition under the persisted policy whose segment was cut short behind the
/// node's back, below what its checkpoint counts (fsynced before the checkpoint was taken):
/// start-up warned "messages lost with the machine" and served what was left. Now the
/// partition is not served (3003, its files kept) until the loss is accepted with
/// `--cut-damaged-journals`, which serves what the segment still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_segment_cut_below_its_fsynced_checkpoint_is_refused_until_the_loss_is_accepted()
 {
    let mut server = TestServer::start_with_env(&[
        ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "1"),
        ("IGGY_SYSTEM_DURABILITY", "persisted"),
    ]);
    let (stream, topic, partition) = stopped_holding(&mut server, 12).await;
    let (log, index) = (
        segment_files(&partition, "log").remove(0),
        segment_files(&partition, "index").remove(0),
    );
    let cut = batch_position(&log, 6);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    let entry = iggy_generated::storage::IndexEntry::SIZE as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(6 * entry)
        .unwrap();
    let before = tree(&partition);

    let start =
        restarted_with_partition_0_unserved(&mut server, (&stream, &topic), &partition, &before)
            .await;
    for expected in [
        "its checkpoint counts messages up to offset 12",
        "but the log ends at 6",
        "--cut-damaged-journals",
    ] {
        assert!(start.contains(expected), "{expected:?} missing:\n{start}");
    }

    tokio::task::block_in_place(|| server.start_again_with(&["--cut-damaged-journals"]));
    assert!(
        current_start(&server.log()).contains("accepted with --cut-damaged-journals"),
        "{}",
        current_start(&server.log())
    );
    tokio::task::block_in_place(|| server.stop());
    assert_eq!(
        restarted_serving_partition_0(&mut server, (&stream, &topic)).await,
        sent(6)
    );
}

/// A standalone data directory whose `metadata/` is gone (removed, or not restored with the
/// rest): the node started a new history with no streams, and the first stream created took
/// the old partition directory over, discarding its messages. The start is now refused with
/// nothing changed, verify reports it, and with its metadata back the node serves every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_node_whose_metadata_is_gone_is_refused_before_anything_changes() {
    let mut server = TestServer::start();
    let (stream, topic, _) = stopped_holding(&mut server, 5).await;
    let data = server.data_dir();
    let kept = tempfile::tempdir().unwrap();
    std::fs::rename(data.join("metadata"), kept.path().join("metadata")).unwrap();
    let before = tree(&data);

    let report = verify_finds_errors(&data);
    assert!(report.contains("no metadata history"), "{report}");

    refused_alone_saying(
        &data,
        &[
            "holds 1 partition directories",
            "no metadata history",
            "Nothing was changed",
            "--fresh",
        ],
    );
    assert!(tree(&data) == before, "verify changed the data directory");

    std::fs::rename(kept.path().join("metadata"), data.join("metadata")).unwrap();
    assert_eq!(
        restarted_serving_partition_0(&mut server, (&stream, &topic)).await,
        sent(5)
    );
}

/// A standalone data directory whose `metadata/` and `streams/` are gone but whose partition
/// initialization records were kept: the start was taken for a new history, and the stream and
/// topic created again got the old incarnation numbers, so their partition was refused (3003)
/// as one initialized before whose files were lost. The start is now refused with nothing
/// changed, naming the records and `--fresh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_start_over_kept_initialization_records_alone_is_refused() {
    let mut server = TestServer::start();
    stopped_holding(&mut server, 5).await;
    let data = server.data_dir();
    std::fs::remove_dir_all(data.join("metadata")).unwrap();
    std::fs::remove_dir_all(data.join("streams")).unwrap();
    let before = tree(&data);
    refused_alone_saying(
        &data,
        &["partition initialization records", "no metadata history", "Nothing was changed", "--fresh"],
    );
    assert!(tree(&data) == before, "the refused start changed the data directory");
}

/// A standalone partition whose oldest segment files were removed while the node was stopped:
/// start-up took it for a retention and served the rest without a word, and verify passed.
/// The partition is now not served (3003, its files kept), verify reports it, and with the
/// segment back it serves every message again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_partition_whose_oldest_segment_was_removed_is_not_served_and_keeps_its_files()
{
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_SEGMENT_SIZE", "1024")]);
    let (stream, topic, partition) = stopped_holding(&mut server, 12).await;
    let logs = segment_files(&partition, "log");
    assert!(logs.len() >= 3, "{logs:?}");
    let kept = tempfile::tempdir().unwrap();
    let oldest = [logs[0].clone(), logs[0].with_extension("index")];
    for file in &oldest {
        std::fs::rename(file, kept.path().join(file.file_name().unwrap())).unwrap();
    }
    let before = tree(&partition);

    let data = server.data_dir();
    let report = verify_finds_errors(&data);
    assert!(
        report.contains("removed behind the node's back"),
        "{report}"
    );

    let start =
        restarted_with_partition_0_unserved(&mut server, (&stream, &topic), &partition, &before)
            .await;
    assert!(start.contains("retained from offset 0"), "{start}");

    for file in &oldest {
        std::fs::rename(kept.path().join(file.file_name().unwrap()), file).unwrap();
    }
    assert_eq!(
        restarted_serving_partition_0(&mut server, (&stream, &topic)).await,
        sent(12)
    );
}

/// A data directory missing a live partition's directory (a backup copied without it, or one
/// removed by hand): verify passed it, and the node it was restored to did not serve the
/// partition (3003). Verify now replays the metadata as start-up does and reports the
/// partition whose initialized directory is gone; the one beside it verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_a_live_partition_whose_directory_is_gone() {
    let mut server = TestServer::start();
    let (_stream, _topic, partition) = stopped_holding(&mut server, 3).await;
    let data = server.data_dir();
    verify_exits(&data, 0);
    let kept = tempfile::tempdir().unwrap();
    std::fs::rename(&partition, kept.path().join("0")).unwrap();

    let report = verify_finds_errors(&data);
    assert!(
        report.contains(&format!("error: {}", partition.display()))
            && report.contains("missing, though the metadata holds this partition"),
        "{report}"
    );
}
