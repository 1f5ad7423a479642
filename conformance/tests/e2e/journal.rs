//! The journal's identity checks with the real binary: a data directory whose metadata journal
//! belongs to another cluster is refused at start (naming the journal and both cluster ids,
//! changing nothing), and `iggy-server verify` reports it through the same check.

use crate::harness::*;
use iggy_generated::frames::PrepareHeader;
use std::path::Path;
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

    let verified =
        tokio::task::block_in_place(|| run(&["verify", "--path", data.to_str().unwrap()], &data));
    let report = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert_eq!(verified.status.code(), Some(1), "{report}");
    let line = format!("error: {} at byte 0", journal.display());
    assert!(report.contains(&line), "{report}");
    assert!(
        report.contains(&format!("belongs to cluster {FOREIGN_CLUSTER:032x}")),
        "{report}"
    );

    let started = tokio::task::block_in_place(|| {
        let mut child = Command::new(server_binary())
            .arg("--with-default-root-credentials")
            .env("IGGY_SYSTEM_PATH", &data)
            .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iggy-server");
        // A refused start exits by itself; a server that came up is a failure, stopped here.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
        }
        child.wait_with_output().unwrap()
    });
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&started.stdout),
        String::from_utf8_lossy(&started.stderr)
    );
    assert!(!started.status.success(), "the start is refused:\n{log}");
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
