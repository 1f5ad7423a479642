//! Crash loop: producers (the official SDK, one client each) write to a Persisted topic and a
//! default-policy topic while the server is SIGKILLed at seeded random moments, under the
//! `persisted` and the default `replicated` server policy (chosen per cycle by the seed). After
//! every restart the whole of every partition is read back and checked:
//!
//! - every acknowledged message is present, at the offset its acknowledgement named, intact
//!   (id and payload as sent) — under Persisted by contract, and under the default policy too,
//!   since a journal write that reached the OS survives a process crash (defaults.toml);
//! - offsets run 0, 1, 2, … with no gap and none served twice, and an offset once served keeps
//!   the same message across later crashes (history is never rewritten);
//! - each producer's messages appear in the order it sent them, each at most once, and nothing
//!   appears that was not sent or that a previous restart had shown to be absent;
//! - the consumer offset stored last (acknowledged) survives, or one whose store was in flight
//!   at the kill.
//!
//! Each restart picks a partition checkpoint interval (8, 64, 512 or 8192 ops) by seed, so kills
//! land before, during and after checkpoints. A quarter of the restarts (by seed) are themselves killed 0-120 ms after spawn, in the middle
//! of recovery, before the real restart.
//!
//! Short mode: 10 kills. Long mode: `DURABILITY_KILLS=100`. A companion test wipes the partition
//! files between a kill and the restart and expects the checker to fail, so it is not vacuous.

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const STREAM: &str = "crash";
/// (name, Persisted messages and offsets).
const TOPICS: [(&str, bool); 2] = [("persisted", true), ("default", false)];
const PARTITIONS: u32 = 2;
/// (producer, topic index, partition): two producers share partition 0 of the Persisted topic.
const PRODUCERS: [(u32, usize, u32); 5] = [(1, 0, 0), (2, 0, 0), (3, 0, 1), (4, 1, 0), (5, 1, 1)];
const CONSUMER: &str = "keeper";

fn ident(s: &str) -> Identifier {
    Identifier::named(s).unwrap()
}

fn message_id(producer: u32, seq: u64) -> u128 {
    (u128::from(producer) << 64) | u128::from(seq + 1)
}

/// The payload of `producer`'s message `seq`: recognisable text plus seeded filler.
fn payload(producer: u32, seq: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64((u64::from(producer) << 48) ^ seq);
    let mut out = format!("p{producer}-s{seq}-").into_bytes();
    let filler = rng.random_range(0..96);
    out.extend((0..filler).map(|_| rng.random_range(b'a'..=b'z')));
    out
}

#[derive(Default)]
struct ProducerLog {
    next_seq: u64,
    /// seq -> offset: acknowledged, or observed after a restart (then it must stay).
    known: BTreeMap<u64, u64>,
    /// Sent, outcome unknown (the call failed or was cut by the kill).
    uncertain: BTreeSet<u64>,
    acknowledged: u64,
}

#[derive(Default)]
struct OffsetLog {
    last_acked: Option<u64>,
    /// Stores in flight at the kill (values above `last_acked`).
    uncertain: Vec<u64>,
    acknowledged: u64,
}

struct State {
    producers: BTreeMap<u32, Mutex<ProducerLog>>,
    offsets: [Mutex<OffsetLog>; 2],
    /// Per topic: 1 + the highest acknowledged offset of partition 0 (0 = none yet).
    high_water: [AtomicU64; 2],
    stop: AtomicBool,
}

#[derive(Default, Debug)]
struct Figures {
    kills: u64,
    recovery_kills: u64,
    persisted_cycles: u64,
    messages_checked: u64,
    offsets_checked: u64,
    send_errors: u64,
}

async fn create_topics(client: &IggyClient) {
    within("create stream", client.create_stream(STREAM, &StreamCreateOptions::default()))
        .await
        .expect("create stream");
    for (name, persisted) in TOPICS {
        let mut options = TopicCreateOptions { partitions_count: Some(PARTITIONS), ..Default::default() };
        if persisted {
            options.durability = Durability::Persisted;
            options.consumer_offset_durability = Durability::Persisted;
        }
        within("create topic", client.create_topic(&ident(STREAM), name, &options))
            .await
            .expect("create topic");
    }
}

async fn produce(client: IggyClient, state: Arc<State>, producer: u32, topic: usize, partition: u32, seed: u64) {
    let mut rng = rng(seed, u64::from(producer));
    let topic_name = TOPICS[topic].0;
    while !state.stop.load(Ordering::SeqCst) {
        let count = rng.random_range(1..=4u64);
        let seqs: Vec<u64> = {
            let mut log = state.producers[&producer].lock().unwrap();
            let first = log.next_seq;
            log.next_seq += count;
            let seqs: Vec<u64> = (first..first + count).collect();
            log.uncertain.extend(seqs.iter().copied());
            seqs
        };
        let mut messages: Vec<IggyMessage> = seqs
            .iter()
            .map(|&seq| {
                IggyMessage::builder()
                    .id(message_id(producer, seq))
                    .payload(bytes::Bytes::from(payload(producer, seq)))
                    .build()
                    .unwrap()
            })
            .collect();
        let sent = tokio::time::timeout(
            Duration::from_secs(10),
            client.send_messages(&ident(STREAM), &ident(topic_name), &Partitioning::partition_id(partition), &mut messages),
        )
        .await;
        match sent {
            Ok(Ok(response)) => {
                let base = response.confirmations.first().expect("a confirmation").base_offset;
                let mut log = state.producers[&producer].lock().unwrap();
                for (i, seq) in seqs.iter().enumerate() {
                    log.uncertain.remove(seq);
                    log.known.insert(*seq, base + i as u64);
                }
                log.acknowledged += count;
                if partition == 0 {
                    state.high_water[topic].fetch_max(base + count, Ordering::SeqCst);
                }
            }
            // The kill: the outcome of this send stays uncertain, and the producer stops.
            _ => return,
        }
        let pause = rng.random_range(0..4);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

async fn store_offsets(client: IggyClient, state: Arc<State>, topic: usize, seed: u64) {
    let mut rng = rng(seed, 100 + topic as u64);
    let topic_name = TOPICS[topic].0;
    while !state.stop.load(Ordering::SeqCst) {
        let high = state.high_water[topic].load(Ordering::SeqCst);
        let last = state.offsets[topic].lock().unwrap().last_acked;
        if high > 0 && last.is_none_or(|last| high - 1 > last) {
            let value = high - 1;
            state.offsets[topic].lock().unwrap().uncertain.push(value);
            let stored = tokio::time::timeout(
                Duration::from_secs(10),
                client.store_consumer_offset(
                    &Consumer::new(ident(CONSUMER)),
                    &ident(STREAM),
                    &ident(topic_name),
                    Some(0),
                    value,
                ),
            )
            .await;
            match stored {
                Ok(Ok(())) => {
                    let mut log = state.offsets[topic].lock().unwrap();
                    log.last_acked = Some(value);
                    log.uncertain.clear();
                    log.acknowledged += 1;
                }
                _ => return,
            }
        }
        let pause = rng.random_range(2..15);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Every message of one partition, in offset order.
async fn read_partition(client: &IggyClient, topic: &str, partition: u32) -> Vec<IggyMessage> {
    let mut out: Vec<IggyMessage> = Vec::new();
    let consumer = Consumer::new(ident("verifier"));
    loop {
        let next = out.last().map_or(0, |m| m.header.offset + 1);
        let polled = within(
            "poll for verification",
            client.poll_messages(&ident(STREAM), &ident(topic), Some(partition), &consumer, &PollingStrategy::offset(next), 1000, false),
        )
        .await
        .unwrap_or_else(|e| panic!("poll {topic}/{partition} from {next}: {e}"));
        if polled.messages.is_empty() {
            return out;
        }
        let first = polled.messages[0].header.offset;
        assert_eq!(first, next, "{topic}/{partition}: a poll from offset {next} starts at {first}");
        out.extend(polled.messages);
    }
}

/// Checks every partition against the producers' logs and resolves uncertain sends.
async fn verify(client: &IggyClient, state: &State, figures: &mut Figures, cycle: u64) {
    for (topic_index, (topic, _)) in TOPICS.iter().enumerate() {
        for partition in 0..PARTITIONS {
            let messages = read_partition(client, topic, partition).await;
            let owners: Vec<u32> = PRODUCERS
                .iter()
                .filter(|(_, t, p)| *t == topic_index && *p == partition)
                .map(|(id, _, _)| *id)
                .collect();
            // seq -> offset as served now, per producer.
            let mut served: BTreeMap<u32, BTreeMap<u64, u64>> = owners.iter().map(|p| (*p, BTreeMap::new())).collect();
            for (index, message) in messages.iter().enumerate() {
                let offset = message.header.offset;
                let at = format!("cycle {cycle}: {topic}/{partition} offset {offset}");
                assert_eq!(offset, index as u64, "{at}: offsets must run 0,1,2,… (a gap or an offset served twice)");
                let producer = (message.header.id >> 64) as u32;
                let seq = (message.header.id as u64).checked_sub(1).unwrap_or_else(|| panic!("{at}: message id 0"));
                assert!(owners.contains(&producer), "{at}: message of producer {producer}, which never wrote here");
                assert_eq!(&message.payload[..], &payload(producer, seq)[..], "{at}: payload of p{producer} s{seq} is not intact");
                let mine = served.get_mut(&producer).unwrap();
                if let Some((&last, _)) = mine.last_key_value() {
                    assert!(seq > last, "{at}: p{producer} s{seq} after s{last}: out of order or served twice");
                }
                mine.insert(seq, offset);
            }
            for producer in owners {
                let mine = &served[&producer];
                let mut log = state.producers[&producer].lock().unwrap();
                for (seq, offset) in &log.known {
                    match mine.get(seq) {
                        Some(now) => assert_eq!(
                            now, offset,
                            "cycle {cycle}: {topic}/{partition}: p{producer} s{seq} was at offset {offset}, now at {now}"
                        ),
                        None => panic!(
                            "cycle {cycle}: {topic}/{partition}: p{producer} s{seq} (acknowledged or served at offset {offset}) is missing after the crash"
                        ),
                    }
                }
                for (seq, offset) in mine {
                    if !log.known.contains_key(seq) {
                        assert!(
                            log.uncertain.contains(seq),
                            "cycle {cycle}: {topic}/{partition} offset {offset}: p{producer} s{seq} was never sent, or was absent after an earlier crash"
                        );
                        log.known.insert(*seq, *offset);
                    }
                }
                // Uncertain sends not served now are gone for good: they must never appear later.
                log.uncertain.clear();
                figures.messages_checked += mine.len() as u64;
            }
        }
        // The consumer offset of partition 0.
        let stored = within(
            "get consumer offset",
            client.get_consumer_offset(&Consumer::new(ident(CONSUMER)), &ident(STREAM), &ident(topic), Some(0)),
        )
        .await
        .unwrap_or_else(|e| panic!("get consumer offset of {topic}: {e}"))
        .map(|info| info.stored_offset);
        let mut log = state.offsets[topic_index].lock().unwrap();
        match (stored, log.last_acked) {
            (None, None) => {}
            (None, Some(acked)) => panic!("cycle {cycle}: {topic}: the stored consumer offset {acked} was lost"),
            (Some(value), acked) => assert!(
                Some(value) == acked || log.uncertain.contains(&value),
                "cycle {cycle}: {topic}: consumer offset {value} served, but {acked:?} was acknowledged last (in flight: {:?})",
                log.uncertain
            ),
        }
        if stored.is_some() {
            figures.offsets_checked += 1;
        }
        log.last_acked = stored;
        log.uncertain.clear();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_seeded_sigkill_loop() {
    let (seed, _guard) = seed("acknowledged_writes_survive_a_seeded_sigkill_loop");
    crash_loop(seed, knob("DURABILITY_KILLS", 10), false).await;
}

/// The checker is not vacuous: when the partition files are wiped between the kill and the
/// restart (what a server that lost acknowledged writes would show), the loop fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "is missing after the crash")]
async fn the_crash_checker_catches_a_lost_acknowledged_write() {
    let (seed, mut guard) = seed("the_crash_checker_catches_a_lost_acknowledged_write");
    guard.failure_expected = true;
    crash_loop(seed, 1, true).await;
}

/// Removes every partition's journal and segments (the metadata stays).
fn wipe_partitions(data: &std::path::Path) {
    for suffix in [".log", ".index", "journal.wal", "checkpoint.0", "checkpoint.1"] {
        for file in files_named(&data.join("streams"), suffix) {
            std::fs::remove_file(file).unwrap();
        }
    }
}

async fn crash_loop(seed: u64, kills: u64, sabotage: bool) {
    let mut rng = rng(seed, 0);
    let started = Instant::now();
    let state = Arc::new(State {
        producers: PRODUCERS.iter().map(|(p, _, _)| (*p, Mutex::new(ProducerLog::default()))).collect(),
        offsets: [Mutex::new(OffsetLog::default()), Mutex::new(OffsetLog::default())],
        high_water: [AtomicU64::new(0), AtomicU64::new(0)],
        stop: AtomicBool::new(false),
    });
    let mut figures = Figures::default();
    let mut server = Server::new(&[]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    create_topics(&server.client().await).await;
    for cycle in 0..=kills {
        if cycle > 0 {
            let persisted = rng.random_bool(0.5);
            server.set_env("IGGY_SYSTEM_DURABILITY", persisted.then_some("persisted"));
            figures.persisted_cycles += u64::from(persisted);
            // Partition checkpoints (segments synced per policy, journal emptied) at seeded
            // intervals, so crashes land before, during and after them.
            let checkpoint_ops = ["8", "64", "512", "8192"][rng.random_range(0..4)];
            server.set_env("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", Some(checkpoint_ops));
            if !sabotage && rng.random_bool(0.25) {
                // A crash during recovery itself: the next start must still find everything.
                let delay = Duration::from_millis(rng.random_range(0..120));
                tokio::task::block_in_place(|| server.start_and_kill_after(delay));
                figures.recovery_kills += 1;
            }
            tokio::task::block_in_place(|| server.spawn(&[]));
            let client = server.client().await;
            verify(&client, &state, &mut figures, cycle).await;
        }
        if cycle == kills {
            break;
        }
        // Producers and offset keepers, each on its own connection.
        state.stop.store(false, Ordering::SeqCst);
        let mut tasks = Vec::new();
        for (producer, topic, partition) in PRODUCERS {
            let client = server.client().await;
            let cycle_seed = seed ^ (cycle << 20);
            tasks.push(tokio::spawn(produce(client, state.clone(), producer, topic, partition, cycle_seed)));
        }
        for topic in 0..TOPICS.len() {
            let client = server.client().await;
            tasks.push(tokio::spawn(store_offsets(client, state.clone(), topic, seed ^ (cycle << 20))));
        }
        let window = if sabotage {
            400
        } else if rng.random_bool(0.15) {
            rng.random_range(0..30)
        } else {
            rng.random_range(30..700)
        };
        tokio::time::sleep(Duration::from_millis(window)).await;
        tokio::task::block_in_place(|| server.kill9());
        figures.kills += 1;
        if sabotage {
            wipe_partitions(&server.system_path);
        }
        state.stop.store(true, Ordering::SeqCst);
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
    }
    let acknowledged: u64 = state.producers.values().map(|l| l.lock().unwrap().acknowledged).sum();
    let stores: u64 = state.offsets.iter().map(|l| l.lock().unwrap().acknowledged).sum();
    let _ = figures.send_errors;
    eprintln!(
        "crash loop figures: seed {seed}, kills survived {} (+{} during recovery), cycles under the persisted server policy {}, \
         acknowledged messages {acknowledged}, message checks after restarts {}, acknowledged offset stores {stores}, \
         consumer offsets checked {}, elapsed {:.1?}",
        figures.kills,
        figures.recovery_kills,
        figures.persisted_cycles,
        figures.messages_checked,
        figures.offsets_checked,
        started.elapsed()
    );
    assert!(acknowledged > 0, "no send was ever acknowledged");
}
