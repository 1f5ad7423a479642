//! The seed's durability and retry contracts as an SDK user relying on them meets them in a
//! 3-node cluster under `persisted` durability ("crash-safe send retries require Persisted;
//! crash-safe explicit offset retries require Persisted and Quorum"): an offset store the SDK
//! acknowledged (its default Quorum ack) survives a kill -9 of the partition's primary and of
//! every node at once, and a read never shows an offset below one already acknowledged; the
//! high-level producer's acknowledged sends, retried by the SDK across a kill -9 of the node it
//! talks to, are stored once each and in order.

use crate::cluster::{all_groups, create_topic};
use crate::harness::*;
use crate::test_cluster::*;
use futures_util::StreamExt;
use iggy::clients::producer_error_callback::{ErrorCallback, ErrorCtx};
use iggy::prelude::*;
use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Messages in the partition: each store names one of them, one higher than the last.
const MESSAGES: u64 = 4000;
/// Stores acknowledged between two steps of the test.
const STEP: u64 = 15;
const NOTHING_ACKNOWLEDGED: u64 = u64::MAX;

/// The cluster's `system.durability`: persisted, or `SDK_FAILOVER_DURABILITY` (replicated runs
/// the same tests under the default policy, whose contract is weaker only for power loss).
fn durability_options() -> ClusterOptions {
    let durability =
        std::env::var("SDK_FAILOVER_DURABILITY").unwrap_or_else(|_| "persisted".to_string());
    ClusterOptions {
        env: vec![("IGGY_SYSTEM_DURABILITY".to_string(), durability)],
        ..ClusterOptions::default()
    }
}

/// Kills every node at once with kill -9, restarts them and waits until each is Normal in
/// `groups`.
async fn kill9_every_node_and_restart(cluster: &mut TestCluster, groups: &[u64]) {
    for node in 0..cluster.len() {
        cluster.kill9(node);
    }
    for node in 0..cluster.len() {
        cluster.restart(node);
    }
    for node in 0..cluster.len() {
        cluster.wait_normal(node, groups).await;
    }
}

/// One task storing offsets 0, 1, 2, … for consumer "c" on partition 0, one call at a time, and
/// reading the offset back after each acknowledged store.
struct OffsetWriter {
    acknowledged: Arc<AtomicU64>,
    count: Arc<AtomicU64>,
    /// (acknowledged, read back) pairs where the read was below the acknowledged store.
    backwards: Arc<Mutex<Vec<(u64, u64)>>>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<u64>,
}

impl OffsetWriter {
    fn start(client: Arc<IggyClient>, stream: u32, topic: u32) -> Self {
        let acknowledged = Arc::new(AtomicU64::new(NOTHING_ACKNOWLEDGED));
        let count = Arc::new(AtomicU64::new(0));
        let backwards = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn({
            let (acknowledged, count) = (acknowledged.clone(), count.clone());
            let (backwards, failures) = (backwards.clone(), failures.clone());
            async move {
                let c = consumer("c");
                let mut next = 0;
                while !*stopped.borrow() && next < MESSAGES {
                    let offset = next;
                    next += 1;
                    let stored = tokio::time::timeout(
                        Duration::from_secs(30),
                        client.store_consumer_offset(&c, &id(stream), &id(topic), Some(0), offset),
                    )
                    .await;
                    match stored {
                        Ok(Ok(())) => {
                            acknowledged.store(offset, Ordering::SeqCst);
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(Err(e)) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("store {offset}: {e}"));
                            continue;
                        }
                        Err(_) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("store {offset}: timed out"));
                            continue;
                        }
                    }
                    let read = tokio::time::timeout(
                        Duration::from_secs(30),
                        client.get_consumer_offset(&c, &id(stream), &id(topic), Some(0)),
                    )
                    .await;
                    match read {
                        Ok(Ok(Some(info))) if info.stored_offset < offset => {
                            backwards.lock().unwrap().push((offset, info.stored_offset));
                        }
                        Ok(Ok(None)) => backwards.lock().unwrap().push((offset, u64::MAX)),
                        Ok(Ok(Some(_))) => {}
                        Ok(Err(e)) => failures
                            .lock()
                            .unwrap()
                            .push(format!("get after {offset}: {e}")),
                        Err(_) => failures
                            .lock()
                            .unwrap()
                            .push(format!("get after {offset}: timed out")),
                    }
                }
                next - 1
            }
        });
        Self {
            acknowledged,
            count,
            backwards,
            failures,
            stop,
            task,
        }
    }

    /// Waits until `STEP` more stores were acknowledged.
    async fn wait_progress(&self, what: &str) {
        let from = self.count.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count.load(Ordering::SeqCst) < from + STEP {
            assert!(
                Instant::now() < deadline,
                "{what}: no {STEP} offset stores acknowledged in 60 s (failures {:?})",
                self.failures.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the task: the last acknowledged store and the last one attempted.
    async fn finish(self) -> (u64, u64) {
        let _ = self.stop.send(true);
        let attempted = self.task.await.expect("offset writer task");
        (self.acknowledged.load(Ordering::SeqCst), attempted)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persisted_offset_stores_survive_kill9_of_the_primary_and_of_every_node_and_never_go_back()
{
    let options = durability_options();
    let mut cluster = TestCluster::start_with(3, options);
    let client = Arc::new(cluster.root_client(0).await);
    let (stream, topic, partition_groups) = create_topic(&client, 1).await;
    let groups = all_groups(&partition_groups);
    for batch in 0..MESSAGES / 500 {
        let texts = (0..500)
            .map(|i| msg(format!("m{}", batch * 500 + i)))
            .collect();
        send_to_partition(&client, &id(stream), &id(topic), 0, texts).await;
    }
    let writer = OffsetWriter::start(client.clone(), stream, topic);
    writer.wait_progress("before any kill").await;

    let group = partition_groups[0];
    let (primary, view) = cluster.primary(group).expect("a partition primary");
    let victim = usize::from(primary);
    cluster.kill9(victim);
    cluster.wait_new_primary(group, victim, view).await;
    writer.wait_progress("partition primary killed").await;
    cluster.restart(victim);
    for node in 0..3 {
        cluster.wait_normal(node, &groups).await;
    }
    writer.wait_progress("after its restart").await;

    kill9_every_node_and_restart(&mut cluster, &groups).await;
    writer.wait_progress("after every node was killed").await;

    let backwards = writer.backwards.lock().unwrap().clone();
    let failures = writer.failures.lock().unwrap().clone();
    let (acknowledged, attempted) = writer.finish().await;
    assert!(
        backwards.is_empty(),
        "reads below an acknowledged store (stored, read): {backwards:?}"
    );
    for node in 0..3 {
        let reader = cluster.root_client(node).await;
        let info = ok(
            "get_consumer_offset",
            within(
                "get offset",
                reader.get_consumer_offset(&consumer("c"), &id(stream), &id(topic), Some(0)),
            )
            .await,
        )
        .expect("an offset stored for c");
        assert!(
            (acknowledged..=attempted).contains(&info.stored_offset),
            "node {node} serves offset {} (last acknowledged {acknowledged}, last attempted \
             {attempted})",
            info.stored_offset
        );
    }
    eprintln!(
        "killed node {victim} (primary of the partition), then every node; last acknowledged \
         store {acknowledged}, last attempted {attempted}, failed calls {failures:?}"
    );
}

/// A direct `IggyProducer` (batches of 10, 2 ms linger) connected to node 0 sends 10 messages a
/// call to the single partition while node 0 (the node it talks to), then the partition's
/// primary, then every node at once are killed with kill -9 and restarted. Every call that returned Ok is stored exactly
/// once, in the order sent; a call that failed is stored at most once; nothing is stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_producers_acknowledged_sends_survive_kill9_of_its_node_once_each_in_order() {
    producer_through_kill9_of_its_node(false).await;
}

/// The same through a background `IggyProducer`: its `send` only queues, so a queued call is
/// stored exactly once, in order, unless the producer handed it to its error callback (its
/// contract for a write that failed for good); nothing is stored twice. While every node is
/// down the SDK fails queued writes at once with Disconnected (8) and hands them over (1 run in
/// 5 here: 10,247 of 16,984 calls), and one whose reply the kill took as unknown outcome
/// (14006) though it was stored: both are the SDK's documented contract, not the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_producers_queued_sends_survive_kill9_of_its_node_once_each_in_order() {
    producer_through_kill9_of_its_node(true).await;
}

/// Keeps the call number of every message a background producer gave up on.
#[derive(Debug, Default)]
struct RecordingErrorCallback {
    given_up: Arc<Mutex<BTreeSet<u64>>>,
    causes: Arc<Mutex<BTreeSet<String>>>,
}

impl ErrorCallback for RecordingErrorCallback {
    fn call(
        &self,
        ctx: ErrorCtx,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        let cause = format!("{} ({})", ctx.cause, ctx.cause.as_code());
        self.causes.lock().unwrap().insert(cause);
        let mut given_up = self.given_up.lock().unwrap();
        for message in ctx.messages.iter() {
            given_up.insert(call_of(&String::from_utf8_lossy(&message.payload)));
        }
        Box::pin(async {})
    }
}

/// The call number of message text `c<call>-<i>`.
fn call_of(text: &str) -> u64 {
    let call = text
        .trim_start_matches('c')
        .split('-')
        .next()
        .unwrap_or_default();
    call.parse().expect("a call number")
}

async fn producer_through_kill9_of_its_node(background: bool) {
    let options = durability_options();
    let mut cluster = TestCluster::start_with(3, options);
    let admin = cluster.root_client(1).await;
    let (stream, topic, partition_groups) = create_topic(&admin, 1).await;
    let groups = all_groups(&partition_groups);
    let client = cluster.root_client(0).await;
    let builder = client.producer("s", "t").unwrap();
    let given_up = Arc::new(Mutex::new(BTreeSet::new()));
    let causes = Arc::new(Mutex::new(BTreeSet::new()));
    let builder = if background {
        let callback = RecordingErrorCallback {
            given_up: given_up.clone(),
            causes: causes.clone(),
        };
        builder.background(
            BackgroundConfig::builder()
                .batch_length(10)
                .linger_time(IggyDuration::from(2000))
                .error_callback(Arc::new(Box::new(callback)))
                .build(),
        )
    } else {
        builder.direct(
            DirectConfig::builder()
                .batch_length(10)
                .linger_time(IggyDuration::from(2000))
                .build(),
        )
    };
    let producer = builder.partitioning(Partitioning::partition_id(0)).build();
    ok("producer init", within("init", producer.init()).await);
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sender = tokio::spawn({
        let (acknowledged, failed, calls) = (acknowledged.clone(), failed.clone(), calls.clone());
        async move {
            let mut call = 0u64;
            while !*stopped.borrow() {
                let batch: Vec<IggyMessage> =
                    (0..10).map(|i| msg(format!("c{call}-{i}"))).collect();
                match tokio::time::timeout(Duration::from_secs(30), producer.send(batch)).await {
                    Ok(Ok(_)) => acknowledged.lock().unwrap().push(call),
                    Ok(Err(e)) => failed
                        .lock()
                        .unwrap()
                        .push((call, format!("{e} ({})", e.as_code()))),
                    Err(_) => failed.lock().unwrap().push((call, "timed out".to_string())),
                }
                call += 1;
                calls.store(call, Ordering::SeqCst);
            }
            producer.shutdown().await;
        }
    });
    let progress = async |what: &str| {
        let from = acknowledged.lock().unwrap().len();
        wait_until(
            what,
            Duration::from_secs(60),
            || (acknowledged.lock().unwrap().len() >= from + STEP as usize).then_some(()),
            || format!("failed calls {:?}", failed.lock().unwrap()),
        )
        .await;
    };
    progress("before any kill").await;
    cluster.kill9(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(0);
    for node in 0..3 {
        cluster.wait_normal(node, &groups).await;
    }
    progress("after node 0 restarted").await;
    let group = partition_groups[0];
    let (primary, view) = cluster.primary(group).expect("a partition primary");
    let victim = usize::from(primary);
    cluster.kill9(victim);
    cluster.wait_new_primary(group, victim, view).await;
    progress("partition primary killed").await;
    cluster.restart(victim);
    for node in 0..3 {
        cluster.wait_normal(node, &groups).await;
    }
    progress("after its restart").await;
    kill9_every_node_and_restart(&mut cluster, &groups).await;
    progress("after every node was killed").await;
    let _ = stop.send(true);
    within_for(Duration::from_secs(60), "sender task", sender)
        .await
        .expect("sender task");

    let acknowledged = acknowledged.lock().unwrap().clone();
    let failed = failed.lock().unwrap().clone();
    let reader = cluster.root_client(1).await;
    // Page through the partition: a background producer may have stored more than one poll takes.
    let mut texts = Vec::new();
    loop {
        let polled = poll(
            &reader,
            &id(stream),
            &id(topic),
            0,
            &consumer("reader"),
            PollingStrategy::offset(texts.len() as u64),
            10_000,
            false,
        )
        .await;
        if polled.messages.is_empty() {
            break;
        }
        let from = texts.len() as u64;
        let want: Vec<u64> = (from..from + polled.messages.len() as u64).collect();
        assert_eq!(offsets(&polled), want, "offsets without a gap");
        texts.extend(payloads(&polled));
    }
    let stored: Vec<u64> = texts
        .chunks(10)
        .map(|chunk| {
            let call = call_of(&chunk[0]);
            let want: Vec<String> = (0..10).map(|i| format!("c{call}-{i}")).collect();
            assert_eq!(chunk, want, "a call's 10 messages are stored together");
            call
        })
        .collect();
    let mut unique = stored.clone();
    unique.dedup();
    assert_eq!(
        unique, stored,
        "a call stored twice (failed calls {failed:?})"
    );
    let in_order = stored.windows(2).all(|w| w[0] < w[1]);
    assert!(in_order, "calls stored out of order: {stored:?}");
    let given_up = given_up.lock().unwrap().clone();
    let causes = causes.lock().unwrap().clone();
    eprintln!("given up {} calls: {causes:?}", given_up.len());
    let missing: Vec<u64> = acknowledged
        .iter()
        .copied()
        .filter(|call| !stored.contains(call) && !given_up.contains(call))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged calls missing: {missing:?} (failed {failed:?})"
    );
    eprintln!(
        "background {background}: killed node 0, node {victim} (primary of the partition), then \
         every node; \
         {} calls, {} acknowledged, {} stored, {} given up, failed {failed:?}",
        calls.load(Ordering::SeqCst),
        acknowledged.len(),
        stored.len(),
        given_up.len()
    );
}

/// A standalone `IggyConsumer` (consumer "c", next, auto-commit on poll) connected to node 0
/// reads a partition while a writer on node 1 keeps sending; node 0 is killed with kill -9 and
/// restarted midway. The consumer reads every message sent, in order. Auto-commit polls have
/// the weaker contract (an auto-committed offset can be lost with the crash), so a message may
/// be delivered again; the test reports how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_committing_consumer_reads_every_message_across_kill9_of_its_node() {
    const TOTAL: usize = 300;
    let options = durability_options();
    let mut cluster = TestCluster::start_with(3, options);
    let admin = cluster.root_client(1).await;
    let (stream, topic, partition_groups) = create_topic(&admin, 1).await;
    let groups = all_groups(&partition_groups);
    let send = async |from: usize, to: usize| {
        for i in from..to {
            send_to_partition(
                &admin,
                &id(stream),
                &id(topic),
                0,
                vec![msg(format!("w-{i}"))],
            )
            .await;
        }
    };
    send(0, TOTAL / 3).await;
    let client = cluster.root_client(0).await;
    let mut reader = client
        .consumer("c", "s", "t", 0)
        .unwrap()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval(IggyDuration::from_str("10ms").unwrap())
        .batch_length(5)
        .build();
    ok("consumer init", within("init", reader.init()).await);
    let mut seen: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let mut read_until = async |count: usize, what: &str, seen: &mut Vec<String>| {
        let read = async {
            while seen.iter().collect::<BTreeSet<_>>().len() < count {
                match reader.next().await.expect("stream ended") {
                    Ok(m) => seen.push(String::from_utf8_lossy(&m.message.payload).into_owned()),
                    Err(e) => errors.push(format!("{e} ({})", e.as_code())),
                }
            }
        };
        within_for(Duration::from_secs(60), what, read).await;
    };
    read_until(TOTAL / 6, "before the kill", &mut seen).await;
    cluster.kill9(0);
    send(TOTAL / 3, 2 * TOTAL / 3).await;
    cluster.restart(0);
    for node in 0..3 {
        cluster.wait_normal(node, &groups).await;
    }
    send(2 * TOTAL / 3, TOTAL).await;
    read_until(TOTAL, "after the restart", &mut seen).await;

    let mut first_seen: Vec<&String> = Vec::new();
    for text in &seen {
        if !first_seen.contains(&text) {
            first_seen.push(text);
        }
    }
    let want: Vec<String> = (0..TOTAL).map(|i| format!("w-{i}")).collect();
    assert_eq!(
        first_seen,
        want.iter().collect::<Vec<_>>(),
        "every message read, first in send order (errors: {errors:?})"
    );
    eprintln!(
        "consumer on node 0 through its kill -9: {} deliveries of {TOTAL} messages ({} again), \
         errors {errors:?}",
        seen.len(),
        seen.len() - TOTAL
    );
}
