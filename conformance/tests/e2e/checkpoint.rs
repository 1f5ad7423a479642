//! Partition checkpoints: once a partition's journal passes its limit the partition fsyncs its
//! segments, writes a checkpoint and empties the journal. Messages, offsets and dedup state
//! must come back whole after a crash that lands after any number of checkpoints.

use crate::harness::*;
use iggy::prelude::*;

fn journal_bytes(server: &TestServer) -> u64 {
    let journal = server.data_dir().join("streams/0/topics/0/partitions/0/journal.wal");
    std::fs::metadata(journal).map(|m| m.len()).unwrap_or(0)
}

/// A journal record here: a 256-byte prepare header and a batch of three small messages (a
/// 256-byte batch header and three 64-byte frames with their payloads), under 1 KiB.
const RECORD_MAX: u64 = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_bound_the_journal_and_a_crash_after_them_loses_nothing() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), "[system]\ncheckpoint_journal_ops = 4\n").unwrap();
    tokio::task::block_in_place(|| server.restart());
    {
        let c = server.root_client().await;
        create_stream_and_topic(&c, "s", "t", 1).await;
        for b in 0..20 {
            send_to_partition(&c, &name("s"), &name("t"), 0, msgs(&format!("b{b}"), 3)).await;
        }
        ok("store", within("store", c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 7)).await);
        ok("group", within("group", c.create_consumer_group(&name("s"), &name("t"), "g")).await);
        let options = UserCreateOptions::default();
        let user = c.create_user("alice", "alice-secret", UserStatus::Active, None, &options);
        ok("user", within("user", user).await);
        for i in 0..6 {
            ok("stream", within("stream", c.create_stream(&format!("extra-{i}"), &StreamCreateOptions::default())).await);
        }
        assert!(server.data_dir().join("metadata/checkpoint.0").exists(), "the metadata group took a checkpoint");
        // Five partition checkpoints alternate between the two slots.
        for slot in ["checkpoint.0", "checkpoint.1"] {
            assert!(
                server.data_dir().join("streams/0/topics/0/partitions/0").join(slot).exists(),
                "partition checkpoints alternate: {slot} was written"
            );
        }
        // 21 partition ops were journaled. A checkpoint is written beside the requests, so ops
        // arrive above it while it is written; the records it covers then stay in place (a start
        // steps over them) until they pass 4 MiB (the WAL's COVERED_PREFIX_MAX), and only then
        // are the kept ones moved to a fresh file: the file holds at most that plus the ops since
        // the last checkpoint (4 here, and the one that triggers it).
        let bytes = journal_bytes(&server);
        assert!(bytes <= (4 << 20) + 5 * RECORD_MAX, "checkpoints bound the journal: {bytes} bytes");
    }
    tokio::task::block_in_place(|| server.kill9_and_restart());
    let c = server.root_client().await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(offsets(&polled), (0..60).collect::<Vec<u64>>());
    assert_eq!(payloads(&polled)[59], "b19-2");
    let stored = ok("get", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await)
        .expect("offset survives the checkpoint and the crash");
    assert_eq!(stored.stored_offset, 7);
    let streams = ok("streams", within("streams", c.get_streams()).await);
    assert_eq!(streams.len(), 7, "every stream survives the metadata checkpoint and the crash");
    assert!(ok("group", within("group", c.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).is_some());
    let alice = server.client_as("alice", "alice-secret").await;
    ok("alice logs in after the restart", within("ping", alice.ping()).await);
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, msgs("late", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(60));
}

/// Sent bytes are written once: the batch goes to the partition's segment and the journal
/// record holds a 48-byte stand-in for it, which a restart after SIGKILL resolves from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_batch_is_written_once_and_replayed_from_the_log_after_a_kill() {
    let mut server = TestServer::start();
    let payload = |b: usize, i: usize| format!("{b}-{i}-").repeat(10_000);
    {
        let c = server.root_client().await;
        create_stream_and_topic(&c, "s", "t", 1).await;
        for b in 0..10 {
            let batch = (0..3).map(|i| msg(payload(b, i))).collect();
            send_to_partition(&c, &name("s"), &name("t"), 0, batch).await;
        }
    }
    let partition = server.data_dir().join("streams/0/topics/0/partitions/0");
    let segments: u64 = std::fs::read_dir(&partition)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "log"))
        .map(|entry| entry.metadata().unwrap().len())
        .sum();
    let journal = journal_bytes(&server);
    assert!(segments > 30 * 40_000, "the segment holds every batch: {segments} bytes");
    assert!(journal < 10 * RECORD_MAX, "the journal holds stand-ins, not batches: {journal} bytes");
    tokio::task::block_in_place(|| server.kill9_and_restart());
    let c = server.root_client().await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(offsets(&polled), (0..30).collect::<Vec<u64>>());
    let expected: Vec<String> = (0..10).flat_map(|b| (0..3).map(move |i| payload(b, i))).collect();
    assert_eq!(payloads(&polled), expected);
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, msgs("late", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(30));
}

/// The replica holds every op's body in memory until a checkpoint, so the byte limit counts
/// the batches sent, not the journal file (which holds only stand-ins for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_byte_limit_counts_sent_batches_not_their_stand_ins() {
    let mut server = TestServer::start();
    std::fs::write(server.dir().join("config.toml"), "[system]\ncheckpoint_journal_bytes = 300000\n").unwrap();
    tokio::task::block_in_place(|| server.restart());
    let c = server.root_client().await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    let checkpoint = server.data_dir().join("streams/0/topics/0/partitions/0/checkpoint.0");
    for b in 0..4 {
        let batch = (0..2).map(|i| msg(format!("{b}-{i}-").repeat(25_000))).collect();
        send_to_partition(&c, &name("s"), &name("t"), 0, batch).await;
    }
    // 4 batches of 200 KB each passed 300 KB; their stand-ins are a few hundred bytes.
    assert!(checkpoint.exists(), "a checkpoint was taken once the batches passed the limit");
    assert!(journal_bytes(&server) < 4 * RECORD_MAX);
}

/// Clients that create and delete topics back to back keep partition opens and deletes (the
/// metadata group's effects) running all the time, and no checkpoint is taken while effects
/// run. Before, the metadata group then took none for as long as the load lasted (30 s of eight
/// such clients: 4,512 ops, one checkpoint, a 1.4 MB journal, with a policy of 16 ops): the
/// journal, and its replay at the next start, grew without bound. Now requests wait for the
/// effects once the journal is twice past the policy, and checkpoints follow the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_and_deletes_that_never_pause_still_let_the_metadata_group_checkpoint() {
    let (server, api) = TestServer::start_with_http(&[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "16")]);
    let admin = server.root_client().await;
    ok("stream", within("stream", admin.create_stream("s", &StreamCreateOptions::default())).await);
    let metadata_checkpoints = async || crate::metrics::value(&crate::metrics::scrape(&api).await, "iggy_checkpoint_duration_seconds_count", &[("group_kind", "metadata")]);
    let before = metadata_checkpoints().await;
    // Counted in ops, not seconds: how many ops a second of the load makes depends on the
    // machine (1834 in 8 s on a quiet one, 392 on a loaded one).
    let ops = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..6 {
        let client = server.root_client().await;
        let (ops, stop) = (ops.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut own = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let created = ok("create", within("create", client.create_topic(&name("s"), &format!("t-{c}-{own}"), &topic_options(2))).await);
                ok("delete", within("delete", client.delete_topic(&name("s"), &id(created.id))).await);
                own += 2;
                ops.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    // Read while the clients still run: a checkpoint after they stop proves nothing. Before, none
    // was taken while the clients ran (the first after they stopped); now one follows about
    // every 32 ops (twice the policy), so 3 by 600 ops leaves room for checkpoints' own pace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let (during, done) = loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let done = ops.load(std::sync::atomic::Ordering::Relaxed);
        let during = metadata_checkpoints().await - before;
        if during >= 3.0 || done >= 600 || std::time::Instant::now() > deadline {
            break (during, done);
        }
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    eprintln!("{during} metadata checkpoints during the load, by {done} ops");
    assert!(during >= 3.0, "{during} metadata checkpoints during the load by {done} ops (at least 3 expected by 600 ops)");
}

/// A graceful stop (SIGTERM, as before an upgrade) after checkpoints restarted the metadata
/// journal over its earlier records: what follows the last record is what the earlier use of
/// the file left, not an append a crash cut short. Start-up warned `journal …: dropping N bytes
/// from position P: undecodable header` and `iggy-server verify` reported a "torn tail …: an
/// append a crash cut short", after a stop that was no crash. After a kill -9 too, start-up
/// cuts such bytes with an info line, not a warning after every restart (one is for ops lost
/// in the middle of the journal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_after_the_journal_restarted_is_not_reported_as_a_crash() {
    let mut server = TestServer::start_with_env(&[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "4")]);
    let admin = server.root_client().await;
    ok("stream", within("stream", admin.create_stream("s", &StreamCreateOptions::default())).await);
    // As CLI commands do (a session each: sign-in and logout records between the others), with
    // names of changing lengths, so the last record of a cycle ends inside an earlier one.
    // Four such loops at once, as four shell loops of the CLI.
    let mut loops = Vec::new();
    for c in 0..4 {
        let client = server.root_client().await;
        loops.push(tokio::spawn(async move {
            for i in 0..20 {
                let created = ok("create", within("create", client.create_topic(&name("s"), &format!("t-{c}-{i}-{}", "x".repeat(i % 7)), &topic_options(2))).await);
                ok("delete", within("delete", client.delete_topic(&name("s"), &id(created.id))).await);
                ok("logout", within("logout", client.logout_user()).await);
                ok("login", within("login", client.login_user(ROOT_USER, ROOT_PASSWORD)).await);
            }
        }));
    }
    for churn in loops {
        churn.await.unwrap();
    }
    drop(admin);
    server.stop();
    let out = std::process::Command::new(server_binary()).args(["verify", "--path"]).arg(server.data_dir()).env_remove("RUST_LOG").output().expect("run iggy-server verify");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{printed}");
    server.start_again();
    let log = server.log();
    let warned: Vec<&str> = crate::test_cluster::current_start(&log).lines().filter(|l| l.contains("WARN") && l.contains("journal")).collect();
    assert!(!printed.contains("crash") && warned.is_empty(), "after a graceful stop:\nverify: {printed}\nstart-up: {warned:#?}");

    // After a kill -9 the same: bytes after the last record that no record of the journal
    // follows (what the reused file held, or an append cut short) are cut with an info line;
    // a warning is for ops lost in the middle.
    let client = server.root_client().await;
    ok("topic", within("topic", client.create_topic(&name("s"), "k", &topic_options(1))).await);
    for i in 0..60 {
        let created = ok("create", within("create", client.create_topic(&name("s"), &format!("k-{i}-{}", "y".repeat(i % 5)), &topic_options(1))).await);
        ok("delete", within("delete", client.delete_topic(&name("s"), &id(created.id))).await);
        send_to_partition(&client, &name("s"), &name("k"), 0, msgs(&"z".repeat(i % 9 + 1), i % 4 + 1)).await;
    }
    drop(client);
    server.kill9_and_restart();
    let log = server.log();
    let start = crate::test_cluster::current_start(&log);
    let warned: Vec<&str> = start.lines().filter(|l| l.contains("WARN") && l.contains("journal")).collect();
    assert!(warned.is_empty(), "after a kill -9:\n{warned:#?}");
    let admin = server.root_client().await;
    assert!(ok("stream", within("stream", admin.get_stream(&name("s"))).await).is_some());
}
