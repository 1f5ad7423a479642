//! Fail-stop storage: a write the disk refuses stops the server at once, with a log line naming
//! the file and the error. Nothing after it is acknowledged, and a restart serves exactly the
//! acknowledged messages. The error is a real one: the server runs with `RLIMIT_FSIZE`, so the
//! write that would grow the partition's segment past the limit fails with EFBIG.

use crate::harness::*;
use iggy::prelude::*;
use std::time::Duration;

/// The child's file size limit: the segment reaches it after a few dozen batches.
const FILE_SIZE_LIMIT: u64 = 1 << 20;
/// `iggy_storage::fail_stop::EXIT_CODE` (sysexits' EX_IOERR).
const STORAGE_FAILURE_EXIT_CODE: i32 = 74;
const MESSAGES_PER_BATCH: usize = 8;
/// Each batch (about 33 KB) is written to the segment in one write.
const PAYLOAD_BYTES: usize = 4096;
/// A server that does not stop by itself within this long has wedged instead.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

fn batch_payloads(batch: u64) -> Vec<String> {
    (0..MESSAGES_PER_BATCH)
        .map(|i| {
            let mut payload = format!("b{batch}-m{i}-");
            payload.extend(std::iter::repeat_n('x', PAYLOAD_BYTES - payload.len()));
            payload
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_segment_write_stops_the_server_naming_the_file_and_loses_nothing_acknowledged() {
    let mut server = TestServer::start_with_file_size_limit(&[], FILE_SIZE_LIMIT);
    // No reconnection attempts: the send the server dies in fails at once.
    let c = IggyClient::from_connection_string(&format!(
        "{}?reconnection_retries=0",
        server.connection_string(ROOT_USER, ROOT_PASSWORD)
    ))
    .expect("valid connection string");
    ok("connect", within("connect + auto-login", c.connect()).await);
    create_stream_and_topic(&c, "s", "t", 1).await;

    let batch_bytes = (MESSAGES_PER_BATCH * PAYLOAD_BYTES) as u64;
    let mut acknowledged: Vec<String> = Vec::new();
    let mut refused = None;
    for batch in 0..2 * FILE_SIZE_LIMIT / batch_bytes {
        let payloads = batch_payloads(batch);
        let mut messages: Vec<IggyMessage> = payloads.iter().map(|p| msg(p.as_bytes())).collect();
        let sent =
            within("send", c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut messages)).await;
        match sent {
            Ok(_) => acknowledged.extend(payloads),
            Err(error) => {
                refused = Some((batch, error));
                break;
            }
        }
    }
    let (refused_batch, error) = refused.expect("a send past the file size limit is not acknowledged");
    assert!(
        (acknowledged.len() as u64) * (PAYLOAD_BYTES as u64) < FILE_SIZE_LIMIT,
        "only batches that fit below the limit were acknowledged ({} messages, then {error})",
        acknowledged.len()
    );

    let status = tokio::task::block_in_place(|| server.wait_exit(EXIT_TIMEOUT))
        .unwrap_or_else(|| panic!("the server kept running after a failed write (batch {refused_batch}: {error})"));
    assert_eq!(status.code(), Some(STORAGE_FAILURE_EXIT_CODE), "exit status {status}");
    let segment = server.data_dir().join("streams/0/topics/0/partitions/0/00000000000000000000.log");
    let log = server.log();
    let line = log
        .lines()
        .find(|line| line.contains("storage failure:"))
        .unwrap_or_else(|| panic!("no storage failure line in the log"));
    assert!(
        line.contains(&format!("write {}: ", segment.display()))
            && line.contains("File too large")
            && line.ends_with("; stopping"),
        "the line names the operation, the file and the error: {line}"
    );
    drop(c);

    // Without the limit the restart recovers every acknowledged message and nothing else: the
    // refused batch, partly written to the segment, is cut as a torn tail.
    server.set_file_size_limit(None);
    tokio::task::block_in_place(|| server.start_again());
    let c = server.root_client().await;
    let mut served: Vec<String> = Vec::new();
    loop {
        let polled = poll(
            &c,
            &name("s"),
            &name("t"),
            0,
            &consumer("reader"),
            PollingStrategy::offset(served.len() as u64),
            1000,
            false,
        )
        .await;
        if polled.messages.is_empty() {
            break;
        }
        assert_eq!(offsets(&polled)[0], served.len() as u64, "offsets run on without a gap");
        served.extend(payloads(&polled));
    }
    assert_eq!(served.len(), acknowledged.len(), "exactly the acknowledged messages are served");
    assert!(served == acknowledged, "every served message is the one acknowledged at its offset");
    let late = send_to_partition(&c, &name("s"), &name("t"), 0, msgs("late", 1)).await;
    assert_eq!(late.confirmations.first().map(|c| c.base_offset), Some(acknowledged.len() as u64));
}

/// `PANIC_EXIT_CODE` of the server (sysexits' EX_SOFTWARE).
const PANIC_EXIT_CODE: i32 = 70;

/// A panic in any task stops the process, logged: the runtime would otherwise end only the
/// task that panicked and leave the node up without it (one was seen answering pings with a
/// group that no longer journaled, its clients waiting out their timeouts), which no
/// supervisor restarts. The debug build's `IGGY_DEBUG_PANIC_AFTER_MS` panics a detached task on
/// purpose once the node serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_any_task_stops_the_server() {
    let mut server = TestServer::start_with_env(&[("IGGY_DEBUG_PANIC_AFTER_MS", "1500")]);
    let status = tokio::task::block_in_place(|| server.wait_exit(EXIT_TIMEOUT));
    let log = server.log();
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(PANIC_EXIT_CODE),
        "the server exits after the panic:\n{log}"
    );
    assert!(
        log.contains("a task panicked") && log.contains("stopping"),
        "{log}"
    );
}
