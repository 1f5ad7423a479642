//! Storage faults on one node of a 3-node cluster, as an operator meets them. The node whose
//! disk fails stops (exit 74, one `storage failure:` line naming the file and the error: see
//! `disk_full.rs` for the single node), the two others are a quorum and go on, the official
//! SDK's writes go through them without the client doing anything (also when the failed node
//! was the partition's or the metadata group's primary), and once the disk is usable again
//! the node restarts and catches up with nothing acknowledged lost and segment files
//! byte-identical on every replica. The faults: a disk that fills (tmpfs), one that turns
//! read-only on an error (ext4 `errors=remount-ro` on a loop device: `trigger_fs_error`),
//! a supervisor restarting the node on a disk still full, a segment file cut short or removed
//! behind a running node's back, and a disk that hangs (fsfreeze; `disk_stall.rs` for the
//! single node). Needs root.

use crate::disk_full::{STORAGE_FAILURE_EXIT_CODE, Tmpfs, cluster_with_node_2_in, leave_room};
use crate::disk_stall::wait_storage_failure_line;
use crate::harness::*;
use crate::test_cluster::{ClusterOptions, METADATA_GROUP, TestCluster, partition_group, wait_until};
use iggy::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const MESSAGES_PER_BATCH: usize = 8;
/// The SDK retries a write that finds no primary (58) for about 30 s; a send that takes
/// longer than this has hung.
const SEND_LIMIT: Duration = Duration::from_secs(40);

fn batch(tag: &str, number: usize, payload_bytes: usize) -> Vec<String> {
    (0..MESSAGES_PER_BATCH)
        .map(|i| {
            let mut payload = format!("{tag}-b{number}-m{i}-");
            payload.extend(std::iter::repeat_n('x', payload_bytes.saturating_sub(payload.len())));
            payload
        })
        .collect()
}

/// What a workload's sends to one partition came to.
#[derive(Default)]
struct Sent {
    acked: Vec<String>,
    /// Payloads of sends that failed: their outcome is unknown.
    unknown: Vec<String>,
}

impl Sent {
    async fn send(&mut self, client: &IggyClient, (stream, topic): (u32, u32), partition: u32, payloads: Vec<String>) -> Result<Duration, IggyError> {
        let mut messages: Vec<IggyMessage> = payloads.iter().map(|p| msg(p.as_bytes())).collect();
        let started = Instant::now();
        let sent = within_for(
            SEND_LIMIT,
            "send (the SDK's own deadline is about 30 s)",
            client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(partition), &mut messages),
        )
        .await;
        match sent {
            Ok(_) => {
                self.acked.extend(payloads);
                Ok(started.elapsed())
            }
            Err(error) => {
                self.unknown.extend(payloads);
                Err(error)
            }
        }
    }
}

/// Every `.log` segment under `root`, by its path there.
fn segments(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files_under(root)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .map(|path| (path.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&path).unwrap_or_default()))
        .collect()
}

/// Waits until the segment files under every root are byte-identical (at least `files` of them).
async fn wait_identical_segments(cluster: &TestCluster, roots: &[PathBuf], files: usize, laggard: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let first = segments(&roots[0]);
        if first.len() >= files && roots.iter().all(|root| segments(root) == first) {
            return;
        }
        if Instant::now() > deadline {
            let sizes: Vec<Vec<(PathBuf, usize)>> =
                roots.iter().map(|root| segments(root).into_iter().map(|(p, b)| (p, b.len())).collect()).collect();
            panic!("node {laggard} never caught up: {sizes:#?}\n{}", cluster.node(laggard).log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every node serves every acknowledged message of the partition, in order, and nothing that
/// was never sent.
async fn every_node_serves(cluster: &TestCluster, (stream, topic): (u32, u32), partition: u32, sent: &Sent) {
    let acked: HashSet<&String> = sent.acked.iter().collect();
    let unknown: HashSet<&String> = sent.unknown.iter().collect();
    for node in 0..cluster.len() {
        let reader = cluster.root_client(node).await;
        let mut served: Vec<String> = Vec::new();
        loop {
            let polled = poll(&reader, &id(stream), &id(topic), partition, &consumer("r"), PollingStrategy::offset(served.len() as u64), 1000, false).await;
            if polled.messages.is_empty() {
                break;
            }
            served.extend(payloads(&polled));
        }
        assert!(served.iter().all(|p| acked.contains(p) || unknown.contains(p)), "node {node} serves only what was sent");
        let acked_served: Vec<&String> = served.iter().filter(|p| acked.contains(p)).collect();
        assert!(
            acked_served.iter().copied().eq(sent.acked.iter()),
            "node {node} serves {} of the {} acknowledged messages, in order",
            acked_served.len(),
            sent.acked.len()
        );
    }
}

/// The node's `storage failure:` lines: exactly one, naming `path` and one of `errors`.
fn one_storage_failure_line(log: &str, path: &str, errors: &[&str]) -> String {
    let lines: Vec<&str> = log.lines().filter(|line| line.contains("storage failure:")).collect();
    assert_eq!(lines.len(), 1, "one storage failure line, not {}:\n{}", lines.len(), lines.join("\n"));
    assert!(
        lines[0].contains(path) && errors.iter().any(|error| lines[0].contains(error)),
        "the line names the file and the error ({errors:?}): {}",
        lines[0]
    );
    lines[0].to_string()
}

/// Three nodes, each with its data directory on its own disk (`roots`), `env` set on all, and
/// the metadata primary the first election made, with its view: which node's disk a test
/// then fills or hangs is known only once they run.
async fn cluster_on_disks(roots: &[PathBuf], env: &[(&str, &str)]) -> (TestCluster, u8, u32) {
    let options = ClusterOptions {
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        node_env: (0..3).map(|i| (i, vec![("IGGY_SYSTEM_PATH".into(), roots[i].display().to_string())])).collect(),
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let (primary, view) = wait_until(
        "a metadata primary",
        Duration::from_secs(10),
        || cluster.primary(METADATA_GROUP),
        || cluster.describe(METADATA_GROUP),
    )
    .await;
    (cluster, primary, view)
}

/// A topic of `partitions` partitions and the first of them whose primary is `node`.
async fn partition_led_by(cluster: &TestCluster, client: &IggyClient, partitions: u32, node: u8) -> ((u32, u32), u32) {
    let (stream, topic) = create_stream_and_topic(client, "s", "t", partitions).await;
    let groups: Vec<u64> = (0..partitions).map(|p| partition_group(stream.id, topic.id, p)).collect();
    let partition = wait_until(
        &format!("a partition led by node {node}"),
        Duration::from_secs(10),
        || (0..partitions).find(|&p| cluster.primary(groups[p as usize]).is_some_and(|(primary, _)| primary == node)),
        || groups.iter().map(|&g| cluster.describe(g)).collect::<Vec<_>>().join("\n"),
    )
    .await;
    ((stream.id, topic.id), partition)
}

/// The partition primary's disk fills under load: it stops (one line naming the file), the
/// two others elect a new primary, and the SDK's sends to that partition go on through it
/// without an error once the node is gone; with room again the node restarts and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_primary_whose_disk_fills_stops_and_the_sdk_writes_on_through_the_new_primary() {
    let disk = Tmpfs::mount("size=3m");
    let data = disk.data_dir().display().to_string();
    let mut cluster = cluster_with_node_2_in(&data, 1048576);
    let client = cluster.root_client(0).await;
    let (ids, partition) = partition_led_by(&cluster, &client, 3, 2).await;
    let group = partition_group(ids.0, ids.1, partition);
    let (_, view) = cluster.primary(group).unwrap();

    let mut sent = Sent::default();
    let mut stopped_at = None;
    let mut after_stop: Vec<Result<Duration, String>> = Vec::new();
    for number in 0.. {
        let result = sent.send(&client, ids, partition, batch("p", number, 4096)).await.map_err(|e| e.to_string());
        if stopped_at.is_some() {
            after_stop.push(result);
        }
        if stopped_at.is_none() && tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::ZERO)).is_some() {
            stopped_at = Some(number);
        }
        if after_stop.len() == 20 {
            break;
        }
        assert!(number < 400, "node 2 never ran out of room:\n{}", cluster.node(2).log());
    }
    let log = cluster.node(2).log();
    one_storage_failure_line(&log, &data, &["No space left on device"]);
    let new_primary = cluster.wait_new_primary(group, 2, view).await;
    eprintln!("node 2 stopped after batch {stopped_at:?}; new primary {new_primary}; sends after: {after_stop:?}");
    // The send in flight when the primary stopped may fail; every later one is acknowledged.
    let failed: Vec<&Result<Duration, String>> = after_stop.iter().skip(1).filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "sends after the primary stopped failed: {after_stop:?}");

    disk.remount("size=64m");
    cluster.restart(2);
    let roots = [cluster.node(0).data_dir(), cluster.node(1).data_dir(), disk.data_dir()];
    wait_identical_segments(&cluster, &roots, 2, 2).await;
    every_node_serves(&cluster, ids, partition, &sent).await;
}

/// The metadata primary's disk fills: it stops, the others elect a metadata primary, and a
/// client of another node creates topics and sends on without an error once it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_primary_whose_disk_fills_stops_and_topics_are_created_through_the_new_one() {
    // Every node on a disk of its own: which one the first election makes the metadata
    // primary is known only once they run, and its disk is then filled to a little room.
    let disks: Vec<Tmpfs> = (0..3).map(|_| Tmpfs::mount("size=64m")).collect();
    let roots: Vec<PathBuf> = disks.iter().map(Tmpfs::data_dir).collect();
    let (mut cluster, primary, view) = cluster_on_disks(&roots, &[("IGGY_SYSTEM_SEGMENT_SIZE", "1048576")]).await;
    let full = usize::from(primary);
    let other = (full + 1) % 3;
    let client = cluster.root_client(other).await;
    let (ids, partition) = partition_led_by(&cluster, &client, 3, other as u8).await;
    leave_room(&disks[full], 1536 * 1024);
    let data = disks[full].data_dir().display().to_string();

    let mut sent = Sent::default();
    let mut stopped_at = None;
    let mut after_stop: Vec<Result<(), String>> = Vec::new();
    let mut topics = Vec::new();
    for number in 0.. {
        let result = sent.send(&client, ids, partition, batch("p", number, 4096)).await.map(|_| ()).map_err(|e| e.to_string());
        let stopped = stopped_at.is_some();
        if stopped {
            after_stop.push(result);
        }
        if number % 4 == 3 || stopped {
            let topic = format!("extra{number}");
            let created = within_for(SEND_LIMIT, "create topic", client.create_topic(&id(ids.0), &topic, &topic_options(1))).await;
            match created {
                Ok(_) => topics.push(topic),
                Err(error) if stopped => after_stop.push(Err(format!("create {topic}: {error}"))),
                Err(_) => {}
            }
        }
        if stopped_at.is_none() && tokio::task::block_in_place(|| cluster.nodes[full].wait_exit(Duration::ZERO)).is_some() {
            stopped_at = Some(number);
        }
        if after_stop.len() >= 20 {
            break;
        }
        assert!(number < 400, "node {full} never ran out of room:\n{}", cluster.node(full).log());
    }
    let log = cluster.node(full).log();
    one_storage_failure_line(&log, &data, &["No space left on device"]);
    cluster.wait_new_primary(METADATA_GROUP, full, view).await;
    eprintln!("node {full} stopped after batch {stopped_at:?}: after it {after_stop:?}");
    let failed: Vec<&Result<(), String>> = after_stop.iter().skip(1).filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "writes after the metadata primary stopped failed: {after_stop:?}");

    std::fs::remove_file(disks[full].path().join("filler")).expect("free the room");
    cluster.restart(full);
    wait_identical_segments(&cluster, &roots, 2, full).await;
    every_node_serves(&cluster, ids, partition, &sent).await;
    let reader = cluster.root_client(full).await;
    let served: Vec<String> =
        ok("get topics", within("get topics", reader.get_topics(&id(ids.0))).await).into_iter().map(|t| t.name).collect();
    for topic in &topics {
        assert!(served.contains(topic), "acknowledged topic {topic} is served by the restarted node: {served:?}");
    }
}

/// An ext4 filesystem on a loop device, mounted `errors=remount-ro` for the test: `fail` makes
/// the kernel record an error on it, which turns it read-only under the running node (as a
/// disk error does), and `repair` is the operator's way back (unmount, fsck, mount).
pub(crate) struct Ext4 {
    dir: tempfile::TempDir,
    device: String,
}

impl Ext4 {
    pub(crate) fn mount(mib: u64) -> Self {
        let dir = tempfile::Builder::new().prefix("iggy-e2e-ext4-").tempdir().expect("temp dir");
        let image = dir.path().join("image");
        std::fs::File::create(&image).and_then(|file| file.set_len(mib << 20)).expect("the image");
        std::fs::create_dir(dir.path().join("mnt")).expect("mount point");
        let out = Command::new("losetup").args(["-f", "--show"]).arg(&image).output().expect("run losetup");
        assert!(out.status.success(), "losetup: {} (the test needs root and a loop device)", String::from_utf8_lossy(&out.stderr));
        let device = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let disk = Self { dir, device };
        run("mkfs.ext4", &["-q", "-F", &disk.device]);
        disk.mount_again();
        disk
    }

    fn mount_again(&self) {
        let mnt = self.mount_point();
        run("mount", &["-o", "errors=remount-ro", &self.device, mnt.to_str().unwrap()]);
    }

    fn mount_point(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.mount_point().join("data")
    }

    /// An error on the filesystem: the kernel turns it read-only at once.
    pub(crate) fn fail(&self) {
        let name = Path::new(&self.device).file_name().unwrap().to_str().unwrap().to_string();
        std::fs::write(format!("/sys/fs/ext4/{name}/trigger_fs_error"), "e2e").expect("trigger an ext4 error");
    }

    /// Every write to the filesystem blocks until `thaw` (a volume that stops answering).
    pub(crate) fn freeze(&self) {
        run("fsfreeze", &["-f", self.mount_point().to_str().unwrap()]);
    }

    /// Also a cleanup's: a filesystem not frozen is left as it is.
    pub(crate) fn thaw_if_frozen(&self) {
        let _ = Command::new("fsfreeze").arg("-u").arg(self.mount_point()).output();
    }

    /// Unmount, fsck and mount again read-write (the node using it stopped).
    pub(crate) fn repair(&self) {
        run("umount", &[self.mount_point().to_str().unwrap()]);
        let status = Command::new("e2fsck").args(["-f", "-y", &self.device]).output().expect("run e2fsck").status;
        // 0: clean, 1: errors corrected.
        assert!(matches!(status.code(), Some(0 | 1)), "e2fsck: {status}");
        self.mount_again();
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        // A frozen filesystem would hold the unmount.
        self.thaw_if_frozen();
        let _ = Command::new("umount").arg(self.mount_point()).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Node 2's data directory turns read-only while producers write: the node stops (74) with one
/// line naming the file and "Read-only file system", the other two go on acknowledging
/// (after a view change when node 2 led the partition), and once the operator repaired the
/// filesystem node 2 restarts and catches up (what it had journaled but not fsynced the
/// failed filesystem may have dropped), serving every acknowledged message.
async fn read_only_under_load(node_2_leads: bool) {
    let disk = Ext4::mount(64);
    let data = disk.data_dir().display().to_string();
    let mut cluster = cluster_with_node_2_in(&data, 262144);
    let client = cluster.root_client(0).await;
    let leader = if node_2_leads { 2 } else { 0 };
    let (ids, partition) = partition_led_by(&cluster, &client, 3, leader).await;

    let mut sent = Sent::default();
    let mut failed_at = None;
    let mut after_stop: Vec<Result<Duration, String>> = Vec::new();
    let mut stopped = false;
    for number in 0.. {
        if number == 10 {
            // What a node that ran a while holds: its writes so far written back (ext4
            // commits every 5 s), so the error loses only the last ones it did not fsync.
            run("sync", &["-f", &data]);
        }
        if number == 20 {
            disk.fail();
            failed_at = Some(number);
        }
        let result = sent.send(&client, ids, partition, batch("p", number, 1024)).await.map_err(|e| e.to_string());
        if stopped {
            after_stop.push(result);
        }
        if !stopped && tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::ZERO)).is_some() {
            stopped = true;
        }
        if after_stop.len() == 20 {
            break;
        }
        assert!(number < 200, "node 2 went on running on a read-only disk:\n{}", cluster.node(2).log());
    }
    let log = cluster.node(2).log();
    // A write finds the filesystem read-only; an fsync may find its journal aborted first.
    let line = one_storage_failure_line(&log, &data, &["Read-only file system", "Input/output error"]);
    eprintln!("node 2 (leads: {node_2_leads}) failed at {failed_at:?}: {line}; sends after: {after_stop:?}");
    let failed: Vec<&Result<Duration, String>> = after_stop.iter().skip(1).filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "sends after node 2 stopped failed: {after_stop:?}");

    disk.repair();
    cluster.restart(2);
    for number in 1000..1010 {
        ok("send after the restart", sent.send(&client, ids, partition, batch("p", number, 1024)).await);
    }
    let roots = [cluster.node(0).data_dir(), cluster.node(1).data_dir(), disk.data_dir()];
    wait_identical_segments(&cluster, &roots, 2, 2).await;
    every_node_serves(&cluster, ids, partition, &sent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_disk_turns_read_only_stops_and_after_a_repair_catches_up() {
    read_only_under_load(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_primary_whose_disk_turns_read_only_stops_and_after_a_repair_catches_up() {
    read_only_under_load(true).await;
}

/// A supervisor restarts the node whose disk is full (systemd's `Restart=on-failure`) before
/// anyone frees room: each start stops again (74, one line), and meanwhile the two others go
/// on acknowledging every send without an error or a stall; once room is freed the next
/// start stays up and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_again_and_again_on_a_full_disk_does_not_disturb_the_others() {
    let disk = Tmpfs::mount("size=3m");
    let data = disk.data_dir().display().to_string();
    let mut cluster = cluster_with_node_2_in(&data, 1048576);
    let client = cluster.root_client(0).await;
    let (ids, partition) = partition_led_by(&cluster, &client, 3, 2).await;
    let mut sent = Sent::default();
    let mut number = 0;
    while tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::ZERO)).is_none() {
        let _ = sent.send(&client, ids, partition, batch("p", number, 4096)).await;
        number += 1;
        assert!(number < 400, "node 2 never ran out of room:\n{}", cluster.node(2).log());
    }
    // Five starts a second apart (a supervisor's restart delay), each running until it stops
    // by itself, while the producer sends on.
    let mut exits = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut failed = Vec::new();
    for _ in 0..5 {
        tokio::task::block_in_place(|| cluster.nodes[2].start_again_unready());
        let start = Instant::now();
        let mut exited = None;
        while exited.is_none() || start.elapsed() < Duration::from_secs(1) {
            match sent.send(&client, ids, partition, batch("p", number, 1024)).await {
                Ok(took) => slowest = slowest.max(took),
                Err(error) => failed.push(format!("batch {number}: {error}")),
            }
            number += 1;
            if exited.is_none() {
                exited = tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::ZERO)).map(|status| (status.code(), start.elapsed()));
            }
            assert!(start.elapsed() < Duration::from_secs(20), "node 2 kept running on a full disk:\n{}", cluster.node(2).log());
        }
        exits.push(exited.unwrap());
    }
    eprintln!("node 2's starts on a full disk: {exits:?}; slowest send {slowest:?}; failed {failed:?}");
    assert!(exits.iter().all(|(code, _)| *code == Some(74)), "each start stops with 74: {exits:?}");
    assert!(failed.is_empty(), "sends failed while node 2 restarted: {failed:?}");
    assert!(slowest < Duration::from_secs(3), "a send waited {slowest:?} while node 2 restarted");
    let log = cluster.node(2).log();
    for (n, start) in log.split("===== e2e harness: start #").skip(1).enumerate() {
        let lines: Vec<&str> = start.lines().filter(|line| line.contains("storage failure:")).collect();
        assert_eq!(lines.len(), 1, "start {} logs one storage failure line:\n{start}", n + 1);
        assert!(lines[0].contains(&data) && lines[0].contains("No space left on device"), "{}", lines[0]);
        eprintln!("start {}: {}", n + 1, lines[0]);
    }

    let t = Instant::now();
    disk.remount("size=64m");
    cluster.restart(2);
    eprintln!("restart took {:?}", t.elapsed());
    let roots = [cluster.node(0).data_dir(), cluster.node(1).data_dir(), disk.data_dir()];
    wait_identical_segments(&cluster, &roots, 2, 2).await;
    eprintln!("caught up at {:?}", t.elapsed());
    every_node_serves(&cluster, ids, partition, &sent).await;
    eprintln!("served at {:?}", t.elapsed());
}

/// What is done to a backup's segment file behind its back.
#[derive(Debug, Clone, Copy)]
enum Tamper {
    /// Cut to half its length.
    Truncate,
    /// Removed (the node still holds it open).
    Delete,
}

/// A running backup's segment file is cut short or removed behind its back (an operator's
/// mistake, a cleanup script). The other replicas still hold every acknowledged message. With
/// `restart`, the operator restarts the backup at once: recovery drops what the file lost and
/// the backup catches up from its peers. Without, the backup must not go on as if its file
/// held what it wrote (a cut file read back as zeros, a removed one gone at its next start):
/// it stops by itself (74, one line naming the segment), and restarted by its supervisor it
/// catches up. Either way, once the partition's primary then dies (the backup may lead next)
/// every acknowledged message is served, and every replica's segments are identical again.
async fn segment_tampered_on_a_backup(tamper: Tamper, restart: bool) {
    let options = ClusterOptions {
        env: vec![("IGGY_SYSTEM_SEGMENT_SIZE".into(), "1048576".into())],
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    let (stream, topic) = create_stream_and_topic(&client, "s", "t", 1).await;
    let ids = (stream.id, topic.id);
    let group = partition_group(ids.0, ids.1, 0);
    let (primary, view) = cluster.primary(group).expect("a primary");
    let backup = (usize::from(primary) + 1) % 3;
    let mut sent = Sent::default();
    for number in 0..40 {
        ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
    }
    // The backup wrote every batch: one still on its way would write past the cut (a hole of
    // zeros, the file as long as written again), which only a read of it finds.
    cluster.wait_identical_segments(1).await;
    let root = cluster.node(backup).data_dir();
    let segment = files_under(&root).into_iter().find(|p| p.extension().is_some_and(|e| e == "log")).expect("a segment");
    let length = std::fs::metadata(&segment).unwrap().len();
    match tamper {
        Tamper::Truncate => std::fs::OpenOptions::new().write(true).open(&segment).and_then(|f| f.set_len(length / 2)).unwrap(),
        Tamper::Delete => std::fs::remove_file(&segment).unwrap(),
    }
    if restart {
        for number in 40..80 {
            ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
        }
        cluster.stop(backup);
    } else {
        let status = tokio::task::block_in_place(|| cluster.nodes[backup].wait_exit(Duration::from_secs(15)))
            .unwrap_or_else(|| panic!("node {backup} went on running on a segment {tamper:?} behind its back"));
        assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}");
        one_storage_failure_line(&cluster.node(backup).log(), &segment.display().to_string(), &["behind"]);
        for number in 40..80 {
            ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
        }
    }
    cluster.restart(backup);
    for number in 80..90 {
        ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
    }
    cluster.kill9(usize::from(primary));
    let new_primary = cluster.wait_new_primary(group, usize::from(primary), view).await;
    eprintln!("{tamper:?} on node {backup}; primary {primary} killed, new primary {new_primary}\n{}", cluster.node(backup).log().lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect::<Vec<_>>().join("\n"));
    let reader = cluster.root_client((usize::from(primary) + 2) % 3).await;
    let mut served: Vec<String> = Vec::new();
    loop {
        let polled = poll(&reader, &id(ids.0), &id(ids.1), 0, &consumer("r"), PollingStrategy::offset(served.len() as u64), 1000, false).await;
        if polled.messages.is_empty() {
            break;
        }
        served.extend(payloads(&polled));
    }
    assert_eq!(served.len(), sent.acked.len(), "every acknowledged message is served after node {backup}'s segment was tampered with");
    assert!(served == sent.acked, "in order");
    cluster.restart(usize::from(primary));
    cluster.wait_identical_segments(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restarted_after_its_segment_was_cut_short_behind_its_back_catches_up() {
    segment_tampered_on_a_backup(Tamper::Truncate, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restarted_after_its_segment_was_removed_behind_its_back_catches_up() {
    segment_tampered_on_a_backup(Tamper::Delete, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_segment_is_cut_short_behind_its_back_stops_and_catches_up() {
    segment_tampered_on_a_backup(Tamper::Truncate, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_segment_is_removed_behind_its_back_stops_and_catches_up() {
    segment_tampered_on_a_backup(Tamper::Delete, false).await;
}

/// The partition primary's segment is cut short behind its back and written past at once (the
/// lost batches read as zeros, and the file is as long as what was written): the first poll
/// reading them stops the primary (74, one line naming the segment) instead of serving zeros
/// (the SDK failed it with 4025, invalid payload length, and nothing was logged), the poll
/// sent again is answered by the new primary with every acknowledged message, and the
/// restarted node catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_reading_zeros_where_it_wrote_stops_and_the_new_primary_serves_every_message() {
    let mut cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    let (stream, topic) = create_stream_and_topic(&client, "s", "t", 1).await;
    let ids = (stream.id, topic.id);
    let group = partition_group(ids.0, ids.1, 0);
    let (primary, _) = cluster.primary(group).expect("a primary");
    let primary = usize::from(primary);
    let mut sent = Sent::default();
    for number in 0..40 {
        ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
    }
    let root = cluster.node(primary).data_dir();
    let segment = files_under(&root).into_iter().find(|p| p.extension().is_some_and(|e| e == "log")).expect("a segment");
    let length = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&segment).and_then(|f| f.set_len(length / 2)).unwrap();
    for number in 40..50 {
        ok("send", sent.send(&client, ids, 0, batch("p", number, 1024)).await);
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut errors = Vec::new();
    let served = loop {
        let mut served: Vec<String> = Vec::new();
        let read = async {
            loop {
                let polled = client
                    .poll_messages(&id(ids.0), &id(ids.1), Some(0), &consumer("r"), &PollingStrategy::offset(served.len() as u64), 1000, false)
                    .await?;
                if polled.messages.is_empty() {
                    return Ok::<(), IggyError>(());
                }
                served.extend(payloads(&polled));
            }
        };
        match within_for(SEND_LIMIT, "poll", read).await {
            Ok(()) => break served,
            Err(error) => errors.push(error.to_string()),
        }
        assert!(Instant::now() < deadline, "the partition was never read whole: {} polls failed, the last: {:?}", errors.len(), errors.last());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("polls that failed: {errors:?}");
    let status = tokio::task::block_in_place(|| cluster.nodes[primary].wait_exit(Duration::from_secs(5)))
        .unwrap_or_else(|| panic!("node {primary} went on serving a segment cut short behind its back"));
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}");
    one_storage_failure_line(&cluster.node(primary).log(), &segment.display().to_string(), &["behind"]);
    assert_eq!(served.len(), sent.acked.len(), "every acknowledged message is served");
    assert!(served == sent.acked, "in order");
    cluster.restart(primary);
    cluster.wait_identical_segments(1).await;
}

/// The partition primary's disk stops answering (fsfreeze: every write to it blocks, as on a
/// volume that hangs). A write of under a megabyte is done in place on the shard's thread
/// (`iggy_storage::small_write`), so that shard answers nothing; the node's stall detector
/// (`system.max_disk_stall`, 2 s here) stops it with one line naming the stalled operation and
/// file, and closes its connections and replica links at once. The two others elect a new
/// primary, the send in flight to the partition is resolved well before the SDK's 30 s
/// deadline (at once, or `OperationUncertain` proven through the new primary), every later
/// send goes through the new primary, and the node exits 74 once the disk answers again (a
/// thread blocked on a frozen filesystem cannot be killed before). Restarted, it catches up.
/// Before the detector the node hung like a paused process and the send in flight waited out
/// the 30 s. Needs root (ext4 on a loop device).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_primary_whose_disk_hangs_stops_and_catches_up_once_it_answers() {
    let disk = Ext4::mount(64);
    let data = disk.data_dir().display().to_string();
    let node_env = vec![("IGGY_SYSTEM_PATH".into(), data.clone()), ("IGGY_SYSTEM_MAX_DISK_STALL".into(), crate::disk_stall::MAX_DISK_STALL.into())];
    let mut cluster = TestCluster::start_with(3, ClusterOptions { node_env: [(2, node_env)].into(), ..ClusterOptions::default() });
    let thaw = crate::disk_stall::ThawOnDrop(&disk);
    let client = cluster.root_client(0).await;
    let (ids, partition) = partition_led_by(&cluster, &client, 3, 2).await;
    let group = partition_group(ids.0, ids.1, partition);
    let (_, view) = cluster.primary(group).unwrap();
    let mut sent = Sent::default();
    for number in 0..20 {
        ok("send", sent.send(&client, ids, partition, batch("p", number, 1024)).await);
    }
    disk.freeze();
    let frozen = Instant::now();
    let mut results = Vec::new();
    for number in 20..60 {
        let payloads = batch("p", number, 1024);
        let started = Instant::now();
        let result = match sent.send(&client, ids, partition, payloads.clone()).await {
            Ok(took) => Ok(took),
            // The SDK's contract: the lane stays closed until the outcome is proven.
            Err(IggyError::OperationUncertain(op)) => {
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                match within_for(SEND_LIMIT, "resolve_operation", client.resolve_operation(op, deadline)).await {
                    Ok(()) => {
                        sent.unknown.retain(|p| !payloads.contains(p));
                        sent.acked.extend(payloads);
                        Ok(started.elapsed())
                    }
                    Err(error) => Err(format!("uncertain {op}, resolved to {error} after {:?}", started.elapsed())),
                }
            }
            Err(error) => Err(format!("{error} after {:?}", started.elapsed())),
        };
        results.push(result);
    }
    let new_primary = cluster.primary(group);
    let line = wait_storage_failure_line(|| cluster.node(2).log(), Duration::from_secs(15)).await;
    let hung_for = frozen.elapsed();
    let slowest = results.iter().filter_map(|r| r.as_ref().ok()).max().copied();
    let failed: Vec<&Result<Duration, String>> = results.iter().filter(|r| r.is_err()).collect();
    eprintln!("while node 2's disk hung ({hung_for:?}): primary {new_primary:?}, slowest send {slowest:?}, failed {failed:?}; {line}");
    assert!(line.contains("no answer from the disk") && line.contains(&data) && line.contains("iggy-shard-"), "names the stall, its file and shard: {line}");
    assert!(failed.is_empty(), "sends failed while node 2's disk hung: {results:?}");
    assert!(slowest.is_some_and(|took| took < Duration::from_secs(20)), "the send in flight is resolved well before the SDK's 30 s: {results:?}");
    let slow = results.iter().filter(|r| r.as_ref().is_ok_and(|took| *took > Duration::from_secs(5))).count();
    assert!(slow <= 1, "only the send in flight when the disk hung waits: {results:?}");
    assert!(new_primary.is_some_and(|(primary, v)| primary != 2 && v > view), "{}", cluster.describe(group));
    drop(thaw);
    let status = tokio::task::block_in_place(|| cluster.nodes[2].wait_exit(Duration::from_secs(20))).expect("node 2 exits once its disk answers");
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}");
    assert_eq!(cluster.node(2).log().matches("storage failure:").count(), 1, "one line");
    for number in 60..65 {
        ok("send with node 2 stopped", sent.send(&client, ids, partition, batch("p", number, 1024)).await);
    }
    cluster.restart(2);
    for number in 65..70 {
        ok("send after node 2's restart", sent.send(&client, ids, partition, batch("p", number, 1024)).await);
    }
    let roots = [cluster.node(0).data_dir(), cluster.node(1).data_dir(), disk.data_dir()];
    wait_identical_segments(&cluster, &roots, 1, 2).await;
    every_node_serves(&cluster, ids, partition, &sent).await;
}

/// The metadata primary's disk stops answering (fsfreeze): its stall detector stops it within
/// `system.max_disk_stall` (2 s here), the others elect a metadata primary, and a client of
/// another node creates topics and sends on, none waiting anywhere near the SDK's 30 s; after
/// the thaw the node exits 74 and, restarted, serves every topic created meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_primary_whose_disk_hangs_stops_and_topics_are_created_through_the_new_one() {
    // Every node on a disk of its own: which one the first election makes the metadata
    // primary is known only once they run.
    let disks: Vec<Ext4> = (0..3).map(|_| Ext4::mount(64)).collect();
    let roots: Vec<PathBuf> = disks.iter().map(Ext4::data_dir).collect();
    let (mut cluster, primary, view) = cluster_on_disks(&roots, &[("IGGY_SYSTEM_MAX_DISK_STALL", crate::disk_stall::MAX_DISK_STALL)]).await;
    let hung = usize::from(primary);
    let other = (hung + 1) % 3;
    let thaw = crate::disk_stall::ThawOnDrop(&disks[hung]);
    let client = cluster.root_client(other).await;
    let (ids, partition) = partition_led_by(&cluster, &client, 3, other as u8).await;
    let mut sent = Sent::default();
    for number in 0..5 {
        ok("send", sent.send(&client, ids, partition, batch("p", number, 1024)).await);
    }
    disks[hung].freeze();
    let mut topics = Vec::new();
    let mut results: Vec<Result<Duration, String>> = Vec::new();
    for number in 5..25 {
        let started = Instant::now();
        let topic = format!("extra{number}");
        let created = within_for(SEND_LIMIT, "create topic", client.create_topic(&id(ids.0), &topic, &topic_options(1))).await;
        results.push(created.map(|_| started.elapsed()).map_err(|e| format!("create {topic}: {e} after {:?}", started.elapsed())));
        topics.push(topic);
        results.push(sent.send(&client, ids, partition, batch("p", number, 1024)).await.map_err(|e| format!("send {number}: {e}")));
    }
    let data = disks[hung].data_dir().display().to_string();
    let line = wait_storage_failure_line(|| cluster.node(hung).log(), Duration::from_secs(15)).await;
    let slowest = results.iter().filter_map(|r| r.as_ref().ok()).max().copied();
    eprintln!("node {hung} (metadata primary) hung: slowest {slowest:?}, results {results:?}; {line}");
    assert!(line.contains("no answer from the disk") && line.contains(&data), "{line}");
    let failed: Vec<&Result<Duration, String>> = results.iter().filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "writes failed while the metadata primary's disk hung: {results:?}");
    assert!(slowest.is_some_and(|took| took < Duration::from_secs(20)), "none waits anywhere near the SDK's 30 s: {results:?}");
    cluster.wait_new_primary(METADATA_GROUP, hung, view).await;
    drop(thaw);
    let status = tokio::task::block_in_place(|| cluster.nodes[hung].wait_exit(Duration::from_secs(20))).expect("the node exits once its disk answers");
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "{status}");
    cluster.restart(hung);
    let roots: Vec<PathBuf> = disks.iter().map(Ext4::data_dir).collect();
    wait_identical_segments(&cluster, &roots, 1, hung).await;
    every_node_serves(&cluster, ids, partition, &sent).await;
    let reader = cluster.root_client(hung).await;
    let served: Vec<String> =
        ok("get topics", within("get topics", reader.get_topics(&id(ids.0))).await).into_iter().map(|t| t.name).collect();
    for topic in &topics {
        assert!(served.contains(topic), "acknowledged topic {topic} is served by the restarted node: {served:?}");
    }
}
