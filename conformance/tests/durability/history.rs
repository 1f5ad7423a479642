//! Partition-history rules, one test per rule, each on a directory the test builds from a real
//! partition: `created.revision` naming an older revision (the directory is deleted and the
//! partition starts empty when its namespace publishes that revision too, refused when it
//! publishes the current one), no `created.revision` (the directory is adopted, with a warning), a
//! damaged one (written again when the namespace proves the incarnation, else refused), and
//! `retirement.fence` naming the incarnation (the partition stays offline across boots,
//! its files untouched).

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use std::path::{Path, PathBuf};

fn ident(s: &str) -> Identifier {
    Identifier::named(s).unwrap()
}

fn checked_u64(value: u64) -> Vec<u8> {
    let mut out = value.to_le_bytes().to_vec();
    out.extend_from_slice(&twox_hash::XxHash3_64::oneshot(&value.to_le_bytes()).to_le_bytes());
    out
}

fn read_checked_u64(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes.len(), 16, "{}: a checked u64 record", path.display());
    let value = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(&bytes[8..], &twox_hash::XxHash3_64::oneshot(&value.to_le_bytes()).to_le_bytes());
    value
}

/// A server with one partition holding three messages, killed; returns the partition dir and
/// its namespace dir under partition-initialization/.
async fn written_partition() -> (Server, PathBuf, PathBuf) {
    let mut server = Server::new(&[("IGGY_SYSTEM_DURABILITY", "persisted")]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    within("create stream", client.create_stream("h", &StreamCreateOptions::default())).await.unwrap();
    within("create topic", client.create_topic(&ident("h"), "t", &TopicCreateOptions { partitions_count: Some(1), ..Default::default() }))
        .await
        .unwrap();
    let mut messages: Vec<IggyMessage> =
        (0..3).map(|i| IggyMessage::builder().payload(bytes::Bytes::from(format!("m{i}"))).build().unwrap()).collect();
    within("send", client.send_messages(&ident("h"), &ident("t"), &Partitioning::partition_id(0), &mut messages))
        .await
        .unwrap();
    drop(client);
    tokio::task::block_in_place(|| server.kill9());
    let record = files_named(&server.system_path.join("streams"), "created.revision");
    assert_eq!(record.len(), 1, "the partition directory carries created.revision: {record:?}");
    let partition_dir = record[0].parent().unwrap().to_path_buf();
    let namespaces = files_named(&server.system_path.join("partition-initialization"), "created.revision");
    assert_eq!(namespaces.len(), 1, "the namespace publishes created.revision: {namespaces:?}");
    let namespace_dir = namespaces[0].parent().unwrap().to_path_buf();
    assert_eq!(read_checked_u64(&record[0]), read_checked_u64(&namespaces[0]));
    (server, partition_dir, namespace_dir)
}

async fn served(server: &Server) -> Result<Vec<String>, String> {
    let client = server.client().await;
    within(
        "poll",
        client.poll_messages(&ident("h"), &ident("t"), Some(0), &Consumer::new(ident("r")), &PollingStrategy::offset(0), 100, false),
    )
    .await
    .map(|polled| polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect())
    .map_err(|e| format!("{e} (code {})", e.as_code()))
}

/// The directory an older incarnation of the same ids left (its namespace publishes that one
/// too: the current incarnation never initialized here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_directory_of_an_older_revision_is_deleted_and_starts_empty() {
    let (mut server, partition_dir, namespace_dir) = written_partition().await;
    let record = partition_dir.join("created.revision");
    let revision = read_checked_u64(&record);
    std::fs::write(&record, checked_u64(revision.saturating_sub(1))).unwrap();
    std::fs::write(namespace_dir.join("created.revision"), checked_u64(revision.saturating_sub(1))).unwrap();
    tokio::task::block_in_place(|| server.spawn(&[]));
    assert_eq!(served(&server).await.expect("the partition is served"), Vec::<String>::new(), "it starts empty");
    assert!(server.log().contains("older revision"), "the deletion is logged:\n{}", server.log_tail(20));
    assert_eq!(read_checked_u64(&record), revision, "the directory now names the current revision");
}

/// A directory naming an older incarnation than its namespace publishes is not the one
/// initialized there (the published incarnation wrote its own record before it published):
/// it is refused across boots with its files intact, where a start once deleted it with the
/// incarnation's messages and served the partition from offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_directory_older_than_its_published_incarnation_is_refused_with_its_files_intact() {
    let (mut server, partition_dir, _) = written_partition().await;
    let record = partition_dir.join("created.revision");
    let revision = read_checked_u64(&record);
    std::fs::write(&record, checked_u64(revision.saturating_sub(1))).unwrap();
    let before = hash_tree(&partition_dir);
    for boot in 0..2 {
        tokio::task::block_in_place(|| server.spawn(&[]));
        let result = served(&server).await;
        assert!(result.is_err(), "boot {boot}: the directory must not be served, got {result:?}");
        assert!(server.log().contains("not the one initialized there"), "boot {boot}: the log says why:\n{}", server.log_tail(20));
        tokio::task::block_in_place(|| server.kill9());
        assert_same_tree("the refused partition's files", &before, &hash_tree(&partition_dir));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_directory_without_created_revision_is_adopted_with_a_warning() {
    let (mut server, partition_dir, _) = written_partition().await;
    std::fs::remove_file(partition_dir.join("created.revision")).unwrap();
    tokio::task::block_in_place(|| server.spawn(&[]));
    assert_eq!(served(&server).await.expect("the partition is served"), ["m0", "m1", "m2"]);
    assert!(
        server.log().contains("adopting a nonempty partition directory without created.revision"),
        "the adoption is logged:\n{}",
        server.log_tail(20)
    );
    assert!(partition_dir.join("created.revision").is_file(), "the adopted directory is stamped");
}

/// Flips one bit of the checked record at `path`.
fn damage(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[3] ^= 1;
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_created_revision_whose_namespace_publishes_the_incarnation_is_written_again() {
    let (mut server, partition_dir, _) = written_partition().await;
    let record = partition_dir.join("created.revision");
    let revision = read_checked_u64(&record);
    damage(&record);
    tokio::task::block_in_place(|| server.spawn(&[]));
    assert_eq!(served(&server).await.expect("the partition is served"), ["m0", "m1", "m2"]);
    assert!(server.log().contains("its record is written again"), "the repair is logged:\n{}", server.log_tail(20));
    assert_eq!(read_checked_u64(&record), revision, "the record names the incarnation again");
}

/// Nothing but the damaged record could say which incarnation the directory holds (its
/// namespace record is gone, as in a directory of an older release): the partition is refused
/// across boots with a line naming the file, and its files stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_created_revision_nothing_else_proves_keeps_the_partition_offline_and_its_files_intact() {
    let (mut server, partition_dir, namespace_dir) = written_partition().await;
    let record = partition_dir.join("created.revision");
    damage(&record);
    std::fs::remove_file(namespace_dir.join("created.revision")).unwrap();
    let before = hash_tree(&partition_dir);
    for boot in 0..2 {
        tokio::task::block_in_place(|| server.spawn(&[]));
        let result = served(&server).await;
        assert!(result.is_err(), "boot {boot}: an unproven directory must not be served, got {result:?}");
        let line = format!("{}: damaged", record.display());
        assert!(server.log().contains(&line), "boot {boot}: the log names the record:\n{}", server.log_tail(20));
        tokio::task::block_in_place(|| server.kill9());
        assert_same_tree("the refused partition's files", &before, &hash_tree(&partition_dir));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_fence_keeps_the_incarnation_offline_across_boots_and_its_files_intact() {
    let (mut server, partition_dir, namespace_dir) = written_partition().await;
    let revision = read_checked_u64(&partition_dir.join("created.revision"));
    std::fs::write(namespace_dir.join("retirement.fence"), checked_u64(revision)).unwrap();
    let before = hash_tree(&partition_dir);
    for boot in 0..2 {
        tokio::task::block_in_place(|| server.spawn(&[]));
        let result = served(&server).await;
        assert!(result.is_err(), "boot {boot}: a fenced incarnation must not be served, got {result:?}");
        assert!(server.log().contains("retirement.fence"), "boot {boot}: the log names the fence:\n{}", server.log_tail(20));
        tokio::task::block_in_place(|| server.kill9());
        assert_same_tree("the fenced partition's files", &before, &hash_tree(&partition_dir));
    }
}

/// A metadata journal cut exactly between two records looks like a journal that never held the
/// later ops; the partition directory those ops created is still on disk, and the log names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_journal_cut_at_a_record_boundary_leaves_a_named_unserved_partition() {
    let (mut server, partition_dir, _) = written_partition().await;
    let journal = server.system_path.join("metadata/journal.wal");
    let bytes = std::fs::read(&journal).unwrap();
    // Keep the first record only (the root user): `size` is the prepare header's u32 at 48.
    let first = u32::from_le_bytes(bytes[48..52].try_into().unwrap()) as usize;
    assert!(first < bytes.len(), "the stream and topic ops follow the first record");
    std::fs::write(&journal, &bytes[..first]).unwrap();
    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    assert!(within("get stream", client.get_stream(&ident("h"))).await.unwrap().is_none());
    let log = server.log();
    assert!(
        log.contains(&format!("{}: not in the metadata", partition_dir.display())),
        "the log names the partition the metadata lost:\n{}",
        server.log_tail(20)
    );
    assert!(partition_dir.join("created.revision").exists(), "its files are left in place");
}
