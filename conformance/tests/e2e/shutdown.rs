//! The official high-level consumer's shutdown against a fresh server: a consumer-group member
//! that consumed everything sends its final offset stores and a group leave, and each must be
//! answered promptly (issue 13: about one run in six hung for 20 s or more).

use crate::harness::*;
use futures_util::StreamExt;
use iggy::prelude::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const MESSAGES: usize = 5_000;
const PARTITIONS: u32 = 3;

/// One run of the flow on a fresh server; returns how long `shutdown` took.
async fn produce_consume_shutdown(run: usize) -> Duration {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", PARTITIONS).await;

    let producer = client
        .producer("s", "t")
        .unwrap()
        .background(BackgroundConfig::builder().build())
        .partitioning(Partitioning::balanced())
        .build();
    ok("producer.init", within("producer init", producer.init()).await);

    let consumer_client = server.root_client().await;
    let mut consumer = consumer_client
        .consumer_group("workers", "s", "t")
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .batch_length(1000)
        .build();
    // Odd runs consume while the producer sends; even runs produce everything first.
    let produce_first = run.is_multiple_of(2);
    if !produce_first {
        ok("consumer.init", within("consumer init", consumer.init()).await);
    }
    for start in (0..MESSAGES).step_by(100) {
        let batch = (start..start + 100).map(|i| msg(format!("m-{i}"))).collect();
        ok("producer.send", within("send", producer.send(batch)).await);
    }
    if produce_first {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ok("consumer.init", within("consumer init", consumer.init()).await);
    }

    let mut seen = BTreeSet::new();
    let consume = async {
        while seen.len() < MESSAGES {
            let message = ok("consumer message", consumer.next().await.expect("the consumer stream ended"));
            seen.insert(String::from_utf8_lossy(&message.message.payload).into_owned());
        }
    };
    within_for(Duration::from_secs(30), "consume every message", consume).await;
    assert_eq!(seen.len(), MESSAGES, "run {run}: every message received");

    let started = Instant::now();
    ok("consumer.shutdown", within_for(Duration::from_secs(60), "consumer shutdown", consumer.shutdown()).await);
    let took = started.elapsed();
    producer.shutdown().await;
    if took > Duration::from_secs(2) {
        eprintln!("run {run}: shutdown took {took:?}; server log:\n{}", server.log());
    }
    took
}

/// `SHUTDOWN_RUNS` (default 50) fresh servers, each through the whole flow (a background
/// producer, a group consumer with auto-commit on poll, `next`, batches of 1000, three
/// partitions, 5,000 messages, a separate client each); every shutdown returns within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consumer_shuts_down_promptly_after_consuming_everything() {
    let runs: usize = std::env::var("SHUTDOWN_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let mut slow = Vec::new();
    let mut longest = Duration::ZERO;
    for run in 0..runs {
        let took = produce_consume_shutdown(run).await;
        longest = longest.max(took);
        if took > Duration::from_secs(2) {
            slow.push((run, took));
        }
    }
    eprintln!("{runs} runs, longest shutdown {longest:?}");
    assert!(slow.is_empty(), "shutdowns slower than 2 s (run, time): {slow:?}");
}
