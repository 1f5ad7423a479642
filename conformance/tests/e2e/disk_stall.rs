//! A disk that stops answering: the data directory on an ext4 loop device frozen with
//! `fsfreeze` (every write to it blocks in the kernel, as on a hung volume). The node's stall
//! detector (`system.max_disk_stall`, 2 s here) stops it: one `storage failure:` line naming
//! the stalled operation, its file and the shard, its connections closed at once, exit code 74
//! once the kernel lets its blocked thread go (at the thaw: a thread blocked on a frozen
//! filesystem cannot be killed). Without it the node hung with no line. The 3-node form is
//! `cluster_disk::a_partition_primary_whose_disk_hangs_*`. Needs root (loop device, mount).

use crate::cluster_disk::Ext4;
use crate::disk_full::STORAGE_FAILURE_EXIT_CODE;
use crate::harness::*;
use iggy::prelude::*;
use std::time::{Duration, Instant};

/// The stall limit the tests configure (the default is 20 s).
pub(crate) const MAX_DISK_STALL: &str = "2s";

/// Thaws `disk` when dropped: declared after the server, it runs first, so a failing test
/// does not leave the server's kill waiting on a frozen filesystem forever.
pub(crate) struct ThawOnDrop<'a>(pub(crate) &'a Ext4);

impl Drop for ThawOnDrop<'_> {
    fn drop(&mut self) {
        self.0.thaw_if_frozen();
    }
}

/// Waits up to `limit` for the `storage failure:` line in `log()`, returning it.
pub(crate) async fn wait_storage_failure_line(log: impl Fn() -> String, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = log();
        if let Some(line) = text.lines().find(|line| line.contains("storage failure:")) {
            return line.to_string();
        }
        assert!(Instant::now() < deadline, "no storage failure line within {limit:?}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn batch(number: usize) -> Vec<String> {
    (0..8).map(|i| format!("b{number}-m{i}-{}", "x".repeat(512))).collect()
}

/// A single node whose disk hangs under a producer stops with a line naming the stall: the
/// send in flight fails at once with the node's connections closed (no waiting out a
/// deadline), a new connection is refused, the process exits 74 once the disk answers, and a
/// restart serves every acknowledged message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_disk_hangs_stops_with_a_line_naming_the_stall() {
    let disk = Ext4::mount(64);
    let data = disk.data_dir().display().to_string();
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_PATH", &data), ("IGGY_SYSTEM_MAX_DISK_STALL", MAX_DISK_STALL)]);
    let thaw = ThawOnDrop(&disk);
    let client = IggyClient::from_connection_string(&format!("{}?reconnection_retries=0", server.connection_string(ROOT_USER, ROOT_PASSWORD)))
        .expect("valid connection string");
    ok("connect", within("connect + auto-login", client.connect()).await);
    create_stream_and_topic(&client, "s", "t", 1).await;
    let mut acked: Vec<String> = Vec::new();
    for number in 0..10 {
        let payloads = batch(number);
        let mut messages: Vec<IggyMessage> = payloads.iter().map(|p| msg(p.as_bytes())).collect();
        ok("send", within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await);
        acked.extend(payloads);
    }
    disk.freeze();
    let frozen = Instant::now();
    let in_flight = batch(10);
    let mut messages: Vec<IggyMessage> = in_flight.iter().map(|p| msg(p.as_bytes())).collect();
    let sent = within_for(Duration::from_secs(40), "send to a node whose disk hangs", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await;
    let answered = frozen.elapsed();
    assert!(sent.is_err(), "a send acknowledged by a node whose disk hangs");
    assert!(answered < Duration::from_secs(15), "the send in flight came back only after {answered:?}: {sent:?}");
    let line = wait_storage_failure_line(|| server.log(), Duration::from_secs(15)).await;
    eprintln!("after {answered:?}: {sent:?}; {line}");
    assert!(line.contains("no answer from the disk") && line.contains("system.max_disk_stall"), "{line}");
    assert!(line.contains(&data) && line.contains("iggy-shard-"), "names the file and the shard: {line}");
    // Its listener was shut down with its connections: a client is refused, not left waiting.
    let connect = std::net::TcpStream::connect_timeout(&server.address().parse().unwrap(), Duration::from_secs(5));
    assert!(connect.is_err(), "a node that stopped for a hung disk still accepts connections");
    drop(thaw);
    let status = tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(20))).expect("the node exits once the disk answers");
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}:\n{}", server.log());
    assert_eq!(server.log().matches("storage failure:").count(), 1, "one line:\n{}", server.log());
    tokio::task::block_in_place(|| server.start_again());
    let reader = server.root_client().await;
    let polled = poll(&reader, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::offset(0), 1000, false).await;
    let served = payloads(&polled);
    assert!(served.len() >= acked.len() && served[..acked.len()] == acked[..], "every acknowledged message, in order: {} served, {} acked", served.len(), acked.len());
    assert!(served.len() == acked.len() || served[acked.len()..] == in_flight[..], "nothing but the send in flight besides");
}

/// A node started on a disk that hangs opens (a start that finds its files in place reads
/// and writes nothing), and the first write, a login's session op in the metadata journal,
/// stops it with the line naming the journal; the login fails instead of hanging, and a start
/// once the disk answers serves what was acknowledged before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_on_a_disk_that_hangs_stops_at_its_first_write() {
    let disk = Ext4::mount(64);
    let data = disk.data_dir().display().to_string();
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_PATH", &data), ("IGGY_SYSTEM_MAX_DISK_STALL", MAX_DISK_STALL)]);
    let thaw = ThawOnDrop(&disk);
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let acked = batch(0);
    let mut messages: Vec<IggyMessage> = acked.iter().map(|p| msg(p.as_bytes())).collect();
    ok("send", within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await);
    drop(client);
    tokio::task::block_in_place(|| server.stop());
    disk.freeze();
    tokio::task::block_in_place(|| server.start_again());
    let started = Instant::now();
    let client = IggyClient::from_connection_string(&format!("{}?reconnection_retries=0", server.connection_string(ROOT_USER, ROOT_PASSWORD)))
        .expect("valid connection string");
    let login = within_for(Duration::from_secs(40), "connect + login on a hung disk", client.connect()).await;
    let answered = started.elapsed();
    assert!(login.is_err(), "a login committed on a hung disk");
    assert!(answered < Duration::from_secs(15), "the login came back only after {answered:?}: {login:?}");
    let log = || server.log().split("===== e2e harness: start #2").nth(1).unwrap_or_default().to_string();
    let line = wait_storage_failure_line(log, Duration::from_secs(15)).await;
    eprintln!("after {answered:?}: {login:?}; {line}");
    assert!(line.contains("no answer from the disk") && line.contains(&format!("{data}/metadata/")), "names the metadata group's file: {line}");
    drop(thaw);
    let status = tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(20))).expect("the node exits once the disk answers");
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}:\n{}", server.log());
    tokio::task::block_in_place(|| server.start_again());
    let reader = server.root_client().await;
    let polled = poll(&reader, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::offset(0), 1000, false).await;
    assert_eq!(payloads(&polled), acked);
}
