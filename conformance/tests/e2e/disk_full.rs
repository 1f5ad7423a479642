//! A full disk for real: the data directory on a small tmpfs that the workload fills. The write
//! that finds no space (a segment's, a journal's, a checkpoint's, a new partition's directory or
//! file) stops the server (exit 74) with a line naming the file and "No space left on device";
//! a restart once there is room serves every acknowledged message, offset and topic, and
//! nothing unacknowledged but the one request the server died in. In a 3-node cluster the node
//! whose disk fills stops while the other two go on, and catches up once it has room again.
//! `fail_stop.rs` covers the
//! same path with an EFBIG from `RLIMIT_FSIZE`; this one needs root (mount).

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `iggy_storage::fail_stop::EXIT_CODE` (sysexits' EX_IOERR).
pub(crate) const STORAGE_FAILURE_EXIT_CODE: i32 = 74;
/// A server that does not stop by itself within this long has wedged instead.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
const MESSAGES_PER_BATCH: usize = 8;

/// A tmpfs mounted for the test, unmounted when dropped (after the server using it stopped).
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(options: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("iggy-e2e-tmpfs-").tempdir().expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -t tmpfs -o {options}: {status} (the test needs root)");
        Self { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.path().join("data")
    }

    /// Grows (or shrinks) the mounted filesystem in place: the operator freeing room.
    pub(crate) fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {options}: {status}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

/// A server whose data directory is on `disk`, stopping at its first failed storage operation.
fn server_on(disk: &Tmpfs, extra: &[(&str, &str)]) -> TestServer {
    let data = disk.data_dir().display().to_string();
    let mut env = vec![("IGGY_SYSTEM_PATH", data.as_str())];
    env.extend_from_slice(extra);
    TestServer::start_with_env(&env)
}

/// A client that does not reconnect: the request the server dies in fails at once.
async fn single_shot_client(server: &TestServer) -> IggyClient {
    let client = IggyClient::from_connection_string(&format!(
        "{}?reconnection_retries=0",
        server.connection_string(ROOT_USER, ROOT_PASSWORD)
    ))
    .expect("valid connection string");
    ok("connect", within("connect + auto-login", client.connect()).await);
    client
}

/// Waits for the server to stop by itself and returns the storage failure line of its log.
fn storage_failure_line(server: &mut TestServer, what: &str) -> String {
    let status = server
        .wait_exit(EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("the server kept running on a full disk ({what})"));
    let log = server.log();
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "exit status {status}:\n{log}");
    log.lines()
        .find(|line| line.contains("storage failure:"))
        .unwrap_or_else(|| panic!("no storage failure line in the log:\n{log}"))
        .to_string()
}

fn batch(partition: u32, number: usize, payload_bytes: usize) -> Vec<String> {
    (0..MESSAGES_PER_BATCH)
        .map(|i| {
            let mut payload = format!("p{partition}-b{number}-m{i}-");
            payload.extend(std::iter::repeat_n('x', payload_bytes.saturating_sub(payload.len())));
            payload
        })
        .collect()
}

/// Every message partition `partition` of `s`/`t` serves, in offset order.
async fn served(client: &IggyClient, partition: u32) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    loop {
        let polled = poll(
            client,
            &name("s"),
            &name("t"),
            partition,
            &consumer("reader"),
            PollingStrategy::offset(all.len() as u64),
            1000,
            false,
        )
        .await;
        if polled.messages.is_empty() {
            return all;
        }
        assert_eq!(offsets(&polled)[0], all.len() as u64, "offsets run on without a gap");
        all.extend(payloads(&polled));
    }
}

/// What a round's workload writes until the disk is full.
#[derive(Debug, Clone, Copy)]
enum Workload {
    /// Batches of 8 messages of this many bytes to both partitions, an offset stored every 5
    /// batches and a topic created every 16: mostly segment writes.
    Messages(usize),
    /// Offsets of ever more consumers: partition journal writes and checkpoints that grow.
    Offsets,
    /// Topics created: the metadata journal, its checkpoints, new partitions' files.
    Topics,
}

/// What the workload had acknowledged when the server stopped.
#[derive(Default)]
struct Acknowledged {
    messages: [Vec<String>; 2],
    /// The offset last stored for each consumer, by partition.
    offsets: [BTreeMap<String, u64>; 2],
    topics: Vec<String>,
}

/// The request the server died in, whose outcome is unknown.
enum Failed {
    Send(u32, Vec<String>),
    StoreOffset(u32, String, u64),
    CreateTopic(String),
}

async fn send(client: &IggyClient, acked: &mut Acknowledged, partition: u32, payloads: Vec<String>) -> Result<(), (Failed, IggyError)> {
    let mut messages: Vec<IggyMessage> = payloads.iter().map(|p| msg(p.as_bytes())).collect();
    let sent =
        within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(partition), &mut messages)).await;
    match sent {
        Ok(_) => {
            acked.messages[partition as usize].extend(payloads);
            Ok(())
        }
        Err(error) => Err((Failed::Send(partition, payloads), error)),
    }
}

async fn store(client: &IggyClient, acked: &mut Acknowledged, partition: u32, name_: String, offset: u64) -> Result<(), (Failed, IggyError)> {
    let stored =
        within("store offset", client.store_consumer_offset(&consumer(&name_), &name("s"), &name("t"), Some(partition), offset)).await;
    match stored {
        Ok(()) => {
            acked.offsets[partition as usize].insert(name_, offset);
            Ok(())
        }
        Err(error) => Err((Failed::StoreOffset(partition, name_, offset), error)),
    }
}

async fn create_topic(client: &IggyClient, acked: &mut Acknowledged, topic: String) -> Result<(), (Failed, IggyError)> {
    match within("create topic", client.create_topic(&name("s"), &topic, &topic_options(1))).await {
        Ok(_) => {
            acked.topics.push(topic);
            Ok(())
        }
        Err(error) => Err((Failed::CreateTopic(topic), error)),
    }
}

/// Runs `workload` until a request fails; returns that request.
async fn fill(client: &IggyClient, acked: &mut Acknowledged, workload: Workload) -> (Failed, IggyError) {
    let failed = async {
        for number in 0.. {
            let partition = (number % 2) as u32;
            match workload {
                Workload::Messages(payload_bytes) => {
                    send(client, acked, partition, batch(partition, number, payload_bytes)).await?;
                    if number % 5 == 4 {
                        let offset = acked.messages[partition as usize].len() as u64 - 1;
                        store(client, acked, partition, "c".into(), offset).await?;
                    }
                    if number % 16 == 15 {
                        create_topic(client, acked, format!("extra{number}")).await?;
                    }
                }
                Workload::Offsets => store(client, acked, partition, format!("consumer-{number}"), (number % 8) as u64).await?,
                Workload::Topics => create_topic(client, acked, format!("extra{number}")).await?,
            }
        }
        unreachable!()
    };
    let result: Result<(), (Failed, IggyError)> = failed.await;
    result.expect_err("the loop ends only by a failed request")
}

/// Fills `disk` with a file until only about `room` bytes are free.
pub(crate) fn leave_room(disk: &Tmpfs, room: u64) {
    let path = std::ffi::CString::new(disk.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct it fills.
    let free = unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0, "statvfs");
        stat.f_bavail * stat.f_frsize
    };
    let filler = vec![0u8; free.saturating_sub(room) as usize];
    std::fs::write(disk.path().join("filler"), filler).expect("write the filler");
}

/// Rounds on disks of a few sizes and workloads, so the failing write lands on different files
/// (segments, journals, checkpoint slots, a new topic's files): each stops the server naming
/// it, and once the disk has room again everything acknowledged is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_server_naming_the_file_and_with_room_again_everything_acknowledged_is_served() {
    let mut failed_files = Vec::new();
    let rounds = [
        (3 * 1024, Workload::Messages(4096)),
        (3 * 1024 + 700, Workload::Messages(4096)),
        (1024 + 100, Workload::Messages(40)),
        (200, Workload::Offsets),
        (200, Workload::Topics),
    ];
    for (room_kib, workload) in rounds {
        let disk = Tmpfs::mount("size=16m");
        let mut server = server_on(
            &disk,
            &[
                // Segments roll, and groups checkpoint, several times before the disk fills.
                ("IGGY_SYSTEM_SEGMENT_SIZE", "1048576"),
                ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "24"),
            ],
        );
        let client = single_shot_client(&server).await;
        create_stream_and_topic(&client, "s", "t", 2).await;
        let mut acked = Acknowledged::default();
        for partition in 0..2 {
            if let Err((_, error)) = send(&client, &mut acked, partition, batch(partition, 0, 100)).await {
                panic!("first batch: {error}");
            }
        }
        leave_room(&disk, room_kib * 1024);
        let what = format!("{workload:?} in {room_kib} KiB");
        let (failed, error) = fill(&client, &mut acked, workload).await;
        drop(client);
        let line = tokio::task::block_in_place(|| storage_failure_line(&mut server, &format!("{what}, after {error}")));
        assert!(
            line.contains(&disk.data_dir().display().to_string())
                && line.contains("No space left on device")
                && line.ends_with("; stopping"),
            "{what}: the line names the file and the error: {line}"
        );
        let failed_file = line.split("storage failure: ").nth(1).unwrap_or(&line).replace(&disk.path().display().to_string(), "");
        failed_files.push(format!("{what}: {failed_file}"));

        std::fs::remove_file(disk.path().join("filler")).expect("free the room");
        tokio::task::block_in_place(|| server.start_again());
        let client = server.root_client().await;
        for partition in 0..2u32 {
            let served = served(&client, partition).await;
            let acked_here = &acked.messages[partition as usize];
            let mut expected = vec![acked_here.clone()];
            if let Failed::Send(p, payloads) = &failed
                && *p == partition
            {
                // The request the server died in may have been made durable before it stopped.
                expected.push(acked_here.iter().chain(payloads).cloned().collect());
            }
            assert!(
                expected.contains(&served),
                "{what}: partition {partition} serves {} messages, {} were acknowledged",
                served.len(),
                acked_here.len()
            );
            for (name_, offset) in &acked.offsets[partition as usize] {
                let stored = ok(
                    "get offset",
                    within("get offset", client.get_consumer_offset(&consumer(name_), &name("s"), &name("t"), Some(partition))).await,
                )
                .map(|info| info.stored_offset);
                assert_eq!(stored, Some(*offset), "{what}: partition {partition}, consumer {name_}");
            }
            if let Failed::StoreOffset(p, name_, offset) = &failed
                && *p == partition
            {
                let stored = ok(
                    "get offset",
                    within("get offset", client.get_consumer_offset(&consumer(name_), &name("s"), &name("t"), Some(partition))).await,
                )
                .map(|info| info.stored_offset);
                assert!([None, Some(*offset)].contains(&stored), "{what}: the unacknowledged store of {name_}: {stored:?}");
            }
        }
        let topics: Vec<String> =
            ok("get topics", within("get topics", client.get_topics(&name("s"))).await).into_iter().map(|t| t.name).collect();
        for topic in &acked.topics {
            assert!(topics.contains(topic), "{what}: acknowledged topic {topic} is served: {topics:?}");
        }
        for topic in &topics {
            let unacked_create = matches!(&failed, Failed::CreateTopic(t) if t == topic);
            assert!(topic == "t" || acked.topics.contains(topic) || unacked_create, "{what}: topic {topic} was never created");
        }
        // And it serves on: a send to each partition lands after what is there.
        for partition in 0..2u32 {
            let before = served(&client, partition).await.len() as u64;
            let late = send_to_partition(&client, &name("s"), &name("t"), partition, msgs("late", 1)).await;
            assert_eq!(late.confirmations.first().map(|c| c.base_offset), Some(before), "{what}");
        }
        drop(client);
        tokio::task::block_in_place(|| server.stop());
    }
    eprintln!("failed writes: {failed_files:#?}");
}

/// Out of inodes (files, not bytes) when a topic is created: the create is committed before its
/// partition's directory is made, so the server stops at the directory, refuses to start while
/// there are no inodes (the same line, before it serves), and with inodes again opens the
/// topic and serves every topic acknowledged before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_inodes_at_a_topic_create_stops_the_server_and_with_inodes_again_the_topics_are_served() {
    let disk = Tmpfs::mount("size=64m,nr_inodes=48");
    let mut server = server_on(&disk, &[]);
    let client = single_shot_client(&server).await;
    ok("create stream", within("create stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    let mut acked = Vec::new();
    let refused = loop {
        let topic = format!("t{}", acked.len());
        match within("create topic", client.create_topic(&name("s"), &topic, &topic_options(1))).await {
            Ok(_) => {}
            Err(error) => break (topic, error),
        }
        send_to_partition(&client, &name("s"), &name(&topic), 0, msgs(&topic, 1)).await;
        acked.push(topic);
        assert!(acked.len() < 48, "48 inodes do not hold 48 topics");
    };
    drop(client);
    let line = tokio::task::block_in_place(|| storage_failure_line(&mut server, &format!("topic {}: {}", refused.0, refused.1)));
    assert!(line.contains("No space left on device"), "{line}");

    // Still no inodes: the start replays the committed create and stops at the same place.
    tokio::task::block_in_place(|| server.start_again_unready());
    let status = tokio::task::block_in_place(|| server.wait_exit(EXIT_TIMEOUT)).expect("a start without inodes stops");
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}");

    disk.remount("nr_inodes=4096");
    tokio::task::block_in_place(|| server.start_again());
    let client = server.root_client().await;
    let topics: Vec<String> =
        ok("get topics", within("get topics", client.get_topics(&name("s"))).await).into_iter().map(|t| t.name).collect();
    for topic in &acked {
        assert!(topics.contains(topic), "acknowledged topic {topic} is served: {topics:?}");
        let polled = poll(&client, &name("s"), &name(topic), 0, &consumer("r"), PollingStrategy::offset(0), 10, false).await;
        assert_eq!(payloads(&polled), vec![format!("{topic}-0")], "topic {topic}");
    }
    // The topic whose create the server died in was committed: it is there, and takes messages.
    assert!(topics.contains(&refused.0), "{topics:?}");
    send_to_partition(&client, &name("s"), &name(&refused.0), 0, msgs("late", 1)).await;
    drop(client);
    tokio::task::block_in_place(|| server.stop());
}

/// Three nodes, node 2's data directory `data` (on a disk a test fills or breaks); with a
/// `segment_size` other than 0, every node's `system.segment_size`.
pub(crate) fn cluster_with_node_2_in(data: &str, segment_size: u64) -> crate::test_cluster::TestCluster {
    use crate::test_cluster::{ClusterOptions, TestCluster};
    let env = match segment_size {
        0 => Vec::new(),
        size => vec![("IGGY_SYSTEM_SEGMENT_SIZE".into(), size.to_string())],
    };
    let options = ClusterOptions { env, node_env: [(2, vec![("IGGY_SYSTEM_PATH".into(), data.to_string())])].into(), ..ClusterOptions::default() };
    TestCluster::start_with(3, options)
}

/// In a 3-node cluster one node's disk fills: that node stops (74) naming the file, the other
/// two go on committing (a quorum), and once its disk has room again the node restarts,
/// catches up and holds the same segments as its peers, with every acknowledged message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_node_whose_disk_fills_stops_and_with_room_again_catches_up() {
    let disk = Tmpfs::mount("size=2m");
    let data = disk.data_dir().display().to_string();
    let mut cluster = cluster_with_node_2_in(&data, 1048576);
    let client = cluster.root_client(0).await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let mut acked: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut number = 0;
    let mut stopped_at = None;
    // Until node 2 stops, then as much again.
    while stopped_at.is_none_or(|at| number < 2 * at) {
        let payloads = batch(0, number, 4096);
        let mut messages: Vec<IggyMessage> = payloads.iter().map(|p| msg(p.as_bytes())).collect();
        let sent = within_for(
            Duration::from_secs(30),
            "send",
            client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages),
        )
        .await;
        match sent {
            Ok(_) => acked.extend(payloads),
            Err(_) => unknown.extend(payloads),
        }
        number += 1;
        if stopped_at.is_none() && tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::ZERO)).is_some() {
            stopped_at = Some(number);
        }
        assert!(number < 400, "node 2 never ran out of room:\n{}", cluster.node(2).log());
    }
    let log = cluster.node(2).log();
    let line = log.lines().find(|line| line.contains("storage failure:")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(&data) && line.contains("No space left on device"), "{line}");
    assert!(acked.len() > stopped_at.unwrap() * MESSAGES_PER_BATCH, "the two others went on committing");

    eprintln!(
        "node 2 stopped after batch {}: {} messages acknowledged, {} of unknown outcome",
        stopped_at.unwrap(),
        acked.len(),
        unknown.len()
    );
    disk.remount("size=64m");
    cluster.restart(2);
    // Node 2's data directory is on the tmpfs, not where the harness keeps the others'.
    let roots = [cluster.node(0).data_dir(), cluster.node(1).data_dir(), disk.data_dir()];
    let segments = |root: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(root)
            .into_iter()
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .map(|path| (path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap_or_default()))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(segments(&roots[0]).len() >= 2 && roots.iter().all(|root| segments(root) == segments(&roots[0]))) {
        let sizes: Vec<Vec<(PathBuf, usize)>> =
            roots.iter().map(|root| segments(root).into_iter().map(|(p, b)| (p, b.len())).collect()).collect();
        assert!(std::time::Instant::now() < deadline, "node 2 never caught up: {sizes:#?}\n{}", cluster.node(2).log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for node in 0..3 {
        let reader = cluster.root_client(node).await;
        let mut served: Vec<String> = Vec::new();
        loop {
            let polled = poll(&reader, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::offset(served.len() as u64), 1000, false).await;
            if polled.messages.is_empty() {
                break;
            }
            served.extend(payloads(&polled));
        }
        let mut unacked = served.iter().filter(|p| !acked.contains(p));
        assert!(unacked.all(|p| unknown.contains(p)), "node {node} serves only what was sent");
        let acked_served: Vec<&String> = served.iter().filter(|p| acked.contains(p)).collect();
        assert!(acked_served.iter().copied().eq(acked.iter()), "node {node} serves every acknowledged message, in order");
    }
}

/// A node whose data directory's filesystem has little room left warns, naming the directory
/// and what is left, at start and then once a minute while it stays low: the write that finds
/// no room stops the node, and before this nothing said it was coming (nor, after a restart
/// on a disk still full, why the node stopped again within seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_warns_when_its_disk_has_little_room_left() {
    let disk = Tmpfs::mount("size=8m");
    let server = server_on(&disk, &[]);
    let data = disk.data_dir().display().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = server.log();
        if let Some(line) = log.lines().find(|line| line.contains("free on its filesystem")) {
            assert!(line.contains("WARN") && line.contains(&data) && line.contains("exit 74"), "{line}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no warning of the little room left:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
