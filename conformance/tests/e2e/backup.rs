//! README's backup and restore procedure, followed with the real binary: stop the server
//! (SIGTERM), copy its data directory, `iggy-server verify` the copy, restore it, verify
//! again, start, and read every message back. The verifier must change no byte, must reject a
//! damaged copy naming the damaged file, and must pass a directory a SIGKILL left (a torn tail
//! is a warning, not an error).

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Partition 0 takes enough sends to checkpoint (its journal restarts over old records and a
/// checkpoint file appears) and to roll segments; partition 1 stays below both limits.
const SENDS: [(u32, usize); 2] = [(0, 120), (1, 30)];
const MESSAGES_PER_SEND: usize = 10;
const SERVER_ENV: [(&str, &str); 2] = [
    ("IGGY_SYSTEM_SEGMENT_SIZE", "262144"),
    ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "50"),
];

fn payload(partition: u32, send: usize, message: usize) -> String {
    // About 1 KiB, so partition 0 spans several 256 KiB segments.
    format!("p{partition}-s{send}-m{message}-{}", "x".repeat(1000))
}

/// A server holding [`SENDS`] in stream `s`, topic `t`.
async fn server_with_messages() -> TestServer {
    let server = TestServer::start_with_env(&SERVER_ENV);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    for (partition, sends) in SENDS {
        for send in 0..sends {
            let batch = (0..MESSAGES_PER_SEND)
                .map(|message| msg(payload(partition, send, message)))
                .collect();
            send_to_partition(&client, &name("s"), &name("t"), partition, batch).await;
        }
    }
    server
}

fn verify(dir: &Path) -> Output {
    Command::new(server_binary())
        .args(["verify", "--path"])
        .arg(dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run iggy-server verify")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every file under `dir` with a hash of its bytes, its length and its modification time.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u64, u64, std::time::SystemTime)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let metadata = entry.metadata().unwrap();
            if metadata.is_dir() {
                pending.push(entry.path());
            }
            let bytes = if metadata.is_file() {
                std::fs::read(entry.path()).unwrap()
            } else {
                Vec::new()
            };
            let hash = twox_hash::XxHash3_64::oneshot(&bytes);
            files.insert(
                entry.path(),
                (hash, metadata.len(), metadata.modified().unwrap()),
            );
        }
    }
    files
}

fn chmod_recursive(dir: &Path, mode: &str) {
    let status = Command::new("chmod")
        .args(["-R", mode])
        .arg(dir)
        .status()
        .expect("run chmod");
    assert!(status.success(), "chmod -R {mode} {}", dir.display());
}

fn flip_middle_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    assert!(bytes.len() > 2, "{} is too short to damage", file.display());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

fn partition_dir(data: &Path, partition: u32) -> PathBuf {
    // The first stream and topic created get id 0.
    data.join(format!("streams/0/topics/0/partitions/{partition}"))
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

/// Whether a group in `dir` has written a checkpoint (either of its two slots).
fn has_checkpoint(dir: &Path) -> bool {
    ["checkpoint.0", "checkpoint.1"]
        .iter()
        .any(|slot| dir.join(slot).is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_restore_follow_the_readme_procedure_and_every_message_comes_back() {
    let mut server = server_with_messages().await;
    // 1. Stop: SIGTERM, and the server exits cleanly.
    let status = tokio::task::block_in_place(|| server.stop()).expect("server was running");
    assert!(status.success(), "SIGTERM exit: {status}");
    let data = server.data_dir();
    assert!(
        has_checkpoint(&partition_dir(&data, 0)),
        "partition 0 checkpointed"
    );
    assert!(
        segment_logs(&partition_dir(&data, 0)).len() > 1,
        "partition 0 rolled segments"
    );

    // 2. Copy the data directory.
    let backup_root = tempfile::tempdir().unwrap();
    let backup = backup_root.path().join("data");
    copy_tree(&data, &backup);

    // 3. Verify the copy, read-only: no file may change, appear or disappear.
    chmod_recursive(&backup, "a-w");
    let before = fingerprint(&backup);
    let verified = verify(&backup);
    let after = fingerprint(&backup);
    chmod_recursive(&backup, "u+w");
    assert_eq!(
        verified.status.code(),
        Some(0),
        "verify the backup:\n{}",
        stdout(&verified)
    );
    let summary = stdout(&verified);
    assert!(
        summary.contains("verified:") && summary.contains("0 errors, 0 warnings"),
        "{summary}"
    );
    assert!(
        summary.contains("(3 groups, 2 partitions)"),
        "metadata and both partitions: {summary}"
    );
    assert_eq!(before, after, "verify changed the directory it checked");

    // 4. Restore: the node's directory is lost and replaced by the backup; verify it there.
    std::fs::remove_dir_all(&data).unwrap();
    copy_tree(&backup, &data);
    let verified = verify(&data);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "verify the restored directory:\n{}",
        stdout(&verified)
    );

    // 5. Start on the restored directory and read every message back.
    tokio::task::block_in_place(|| server.start_again());
    let client = server.root_client().await;
    for (partition, sends) in SENDS {
        let expected: Vec<String> = (0..sends)
            .flat_map(|send| {
                (0..MESSAGES_PER_SEND).map(move |message| payload(partition, send, message))
            })
            .collect();
        let mut read = Vec::new();
        while read.len() < expected.len() {
            let polled = poll(
                &client,
                &name("s"),
                &name("t"),
                partition,
                &consumer("restore-check"),
                PollingStrategy::offset(read.len() as u64),
                1000,
                false,
            )
            .await;
            assert!(
                !polled.messages.is_empty(),
                "partition {partition} ends at {} messages",
                read.len()
            );
            read.extend(payloads(&polled));
        }
        assert_eq!(read, expected, "partition {partition} after the restore");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_rejects_a_damaged_copy_naming_the_damaged_file() {
    let mut server = server_with_messages().await;
    tokio::task::block_in_place(|| server.stop());
    let copies = tempfile::tempdir().unwrap();

    // A byte flipped in the middle of a closed segment of partition 0.
    let segment_damaged = copies.path().join("segment");
    copy_tree(&server.data_dir(), &segment_damaged);
    let segment = segment_logs(&partition_dir(&segment_damaged, 0))[0].clone();
    flip_middle_byte(&segment);
    let verified = verify(&segment_damaged);
    let report = stdout(&verified);
    assert_eq!(
        verified.status.code(),
        Some(1),
        "a damaged segment fails:\n{report}"
    );
    let line = format!("error: {} at byte ", segment.display());
    assert!(
        report.contains(&line),
        "the segment is named with an offset:\n{report}"
    );
    assert!(
        report.lines().last().unwrap().starts_with("FAILED: "),
        "{report}"
    );

    // A byte flipped in the middle of partition 1's journal (never checkpointed: every record
    // in it is live, so the damaged one is followed by acknowledged ops).
    let journal_damaged = copies.path().join("journal");
    copy_tree(&server.data_dir(), &journal_damaged);
    let journal = partition_dir(&journal_damaged, 1).join("journal.wal");
    flip_middle_byte(&journal);
    let verified = verify(&journal_damaged);
    let report = stdout(&verified);
    assert_eq!(
        verified.status.code(),
        Some(1),
        "a damaged journal fails:\n{report}"
    );
    let line = format!("error: {} at byte ", journal.display());
    assert!(
        report.contains(&line),
        "the journal is named with an offset:\n{report}"
    );
    // Corruption, not a torn tail: where the flipped byte lands decides which check names it
    // (a record's checksum, or header bytes no checksum covers compared with what the server
    // writes), and both are errors with later acknowledged ops behind them.
    assert!(
        report.contains("in the middle") || report.contains("differ from what the server writes"),
        "{report}"
    );

    // The undamaged directory still verifies: the failures above are the flipped bytes.
    assert_eq!(verify(&server.data_dir()).status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_left_by_sigkill_during_sends_verifies_and_starts() {
    let mut server = TestServer::start_with_env(&SERVER_ENV);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    let sender = server.root_client().await;
    let acknowledged = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = acknowledged.clone();
    // The SDK reconnects after the kill instead of failing, so the task is aborted.
    let sending = tokio::spawn(async move {
        for send in 0u32.. {
            let mut batch: Vec<IggyMessage> = (0..MESSAGES_PER_SEND)
                .map(|message| msg(payload(send % 2, send as usize, message)))
                .collect();
            let partitioning = Partitioning::partition_id(send % 2);
            if sender
                .send_messages(&name("s"), &name("t"), &partitioning, &mut batch)
                .await
                .is_ok()
            {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    // Kill once partition 0 has checkpointed, with sends in flight.
    let partition = partition_dir(&server.data_dir(), 0);
    within_for(
        std::time::Duration::from_secs(60),
        "a checkpoint of partition 0",
        async {
            while !has_checkpoint(&partition) {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        },
    )
    .await;
    tokio::task::block_in_place(|| server.kill9());
    sending.abort();
    let acknowledged = acknowledged.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        acknowledged > 50,
        "{acknowledged} sends acknowledged before the kill"
    );

    let verified = verify(&server.data_dir());
    let report = stdout(&verified);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "a SIGKILL leaves only repairable damage:\n{report}"
    );
    assert!(!report.contains("error:"), "{report}");
    tokio::task::block_in_place(|| server.start_again());
    let client = server.root_client().await;
    let topic = ok(
        "get topic",
        within("get", client.get_topic(&name("s"), &name("t"))).await,
    )
    .expect("topic");
    // A process crash loses no acknowledged write.
    assert!(
        topic.messages_count >= acknowledged * MESSAGES_PER_SEND as u64,
        "{} messages, {acknowledged} sends acknowledged",
        topic.messages_count
    );
}

/// A cluster node's `replica.runs` (its numbered starts, README "Replace a cluster node's
/// disk") or `cluster.replicas` (the replica count its history was formed with) damaged in a
/// copy: start-up refuses the directory naming the file, so the verifier, which "checks what
/// start-up reads", must fail it too, naming the file; an intact one passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_nodes_damaged_runs_or_replica_count_file_fails_verification_as_its_start_does() {
    let mut cluster = crate::test_cluster::TestCluster::start(1);
    let client = cluster.root_client(0).await;
    ok("create stream", within("create stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    drop(client);
    // A start with a metadata history numbers its run in replica.runs.
    cluster.stop(0);
    cluster.restart(0);
    cluster.stop(0);
    let data = cluster.node(0).data_dir();
    let config = cluster._config_dir.path().join("cluster.toml");
    let verify_node = || {
        Command::new(server_binary())
            .args(["verify", "--path"])
            .arg(&data)
            .env("IGGY_CONFIG_PATH", &config)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run iggy-server verify")
    };
    let intact = verify_node();
    assert_eq!(intact.status.code(), Some(0), "{}", stdout(&intact));
    // Without the node's configuration (another cluster name): one error saying so, not one
    // per file that names the cluster.
    let unconfigured = verify(&data);
    let printed = stdout(&unconfigured);
    let errors: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{printed}");
    assert!(
        errors[0].contains("give verify that node's configuration"),
        "{printed}"
    );

    for file in ["replica.runs", "cluster.replicas"] {
        let path = data.join(file);
        assert!(path.is_file(), "no {}", path.display());
        let kept = std::fs::read(&path).unwrap();
        flip_middle_byte(&path);
        let damaged = verify_node();
        let printed = stdout(&damaged);
        assert_eq!(damaged.status.code(), Some(1), "{file}: {printed}");
        assert!(printed.lines().any(|l| l.starts_with("error:") && l.contains(file)), "{printed}");

        cluster.nodes[0].start_again_unready();
        let status = cluster.nodes[0].wait_exit(std::time::Duration::from_secs(20)).unwrap_or_else(|| panic!("start-up refuses the damaged {file}"));
        assert!(!status.success(), "{status}");
        let log = cluster.node(0).log();
        assert!(crate::test_cluster::current_start(&log).contains(file), "{log}");
        std::fs::write(&path, kept).unwrap();
    }
    assert_eq!(verify_node().status.code(), Some(0), "both files restored");
}

/// `verify` on an empty directory says there is nothing to verify (it said the directory "is
/// not empty and has no marker"), and on a running server's directory it warns that the files
/// change as they are read (it reported "verified" without a word); neither changes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_an_empty_directory_and_warns_of_a_running_server() {
    let empty = tempfile::tempdir().unwrap();
    let out = verify(empty.path());
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("empty: no data directory to verify yet"),
        "{said}"
    );
    assert!(!said.contains("not empty"), "{said}");
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);

    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let out = verify(&server.data_dir());
    let said = stdout(&out);
    assert!(
        said.contains("a running iggy-server holds this directory"),
        "{said}"
    );
    let stream = within("get_stream", client.get_stream(&name("s"))).await;
    assert!(ok("get_stream", stream).is_some(), "the server serves on");
}

/// One damaged batch early in a partition's log: `verify` names the damage and the first
/// journaled op whose batch is past it, then one line for all the later ones (it printed a
/// line per op, 70 for 4 damaged bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_says_the_ops_past_one_damaged_batch_in_one_line() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    for send in 0..20 {
        let batch: Vec<IggyMessage> = (0..MESSAGES_PER_SEND)
            .map(|message| msg(payload(0, send, message)))
            .collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, batch).await;
    }
    // Killed, so the journal keeps its stand-ins (a graceful stop checkpoints them away).
    tokio::task::block_in_place(|| server.kill9());
    let log = segment_logs(&partition_dir(&server.data_dir(), 0))[0].clone();
    let mut bytes = std::fs::read(&log).unwrap();
    assert!(bytes.len() > 1000, "{} bytes", bytes.len());
    bytes[600..604].copy_from_slice(&[0xff; 4]);
    std::fs::write(&log, bytes).unwrap();
    let printed = stdout(&verify(&server.data_dir()));
    let naming: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains("names the batch at offset"))
        .collect();
    assert_eq!(naming.len(), 1, "{printed}");
    let rest: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains("more) name batches the log does not hold either"))
        .collect();
    assert_eq!(rest.len(), 1, "{printed}");
}
