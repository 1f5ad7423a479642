//! The four scenarios, driven through the official SDK's low-level `send_messages` and
//! `poll_messages` (one connection, or over http one login, per actor), with data checks on what comes back.

use crate::args::{Params, Scenario, Transport};
use crate::stats::{ActorResult, KindReport, fmt_int};
use bytes::Bytes;
use iggy::prelude::*;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bound on one SDK call; a server that does not answer within it is reported as hung.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A consumer that sees no new message for this long while more are due reports it.
const STALL_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "t";
const GROUP: &str = "bench-cg";

async fn call<T, F: Future<Output = Result<T, IggyError>>>(
    what: &str,
    fut: F,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: error {e} (code {})", e.as_code())),
        Err(_) => Err(format!("{what}: no reply within {CALL_TIMEOUT:?} (hang)")),
    }
}

fn ident(s: &str) -> Identifier {
    Identifier::named(s).expect("valid name")
}

fn stream_name(i: u32) -> String {
    format!("bench-{i}")
}

/// Retries a connect and login until one works (a cluster elects its primaries and creates
/// the root user after its nodes accept connections) or `within` passes.
pub async fn wait_for_login(
    address: &str,
    p: &Params,
    within: std::time::Duration,
) -> Result<(), String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match connect(address, p, p.nodelay).await {
            Ok(client) => {
                let _ = client.disconnect().await;
                return Ok(());
            }
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

pub async fn connect(address: &str, p: &Params, nodelay: bool) -> Result<IggyClient, String> {
    let conn = match p.transport {
        Transport::Tcp => format!(
            "iggy://iggy:iggy@{address}{}",
            if nodelay { "?nodelay=true" } else { "" }
        ),
        Transport::Quic => format!("iggy+quic://iggy:iggy@{address}"),
        Transport::Ws => format!("iggy+ws://iggy:iggy@{address}"),
        // The credentials are required by the parser but not used: no auto-login over HTTP.
        Transport::Http => format!("iggy+http://iggy:iggy@{address}"),
    };
    let client = IggyClient::from_connection_string(&conn).map_err(|e| format!("client: {e}"))?;
    call("connect + login", client.connect()).await?;
    if p.transport == Transport::Http {
        // No auto-login over HTTP: each client gets its own token (its own session).
        call("login", client.login_user("iggy", "iggy")).await?;
    }
    Ok(client)
}

/// Polls each of `partitions` of `stream`'s topic once, untimed, and returns how long that
/// took. A poll goes to the partition's primary, so afterwards the client holds a link to it:
/// in a cluster the SDK signs in on one node and dials the others in the background, each
/// after a random pause of up to its reconnection interval (1 s by default), and a call to a
/// partition whose primary has no link yet retries with backoff until one is bound. Timed, that
/// wait (up to 1.7 s on 3 local nodes) would be the first batch's latency and every run's max.
async fn reach_partitions(
    client: &IggyClient,
    stream: &Identifier,
    partitions: u32,
) -> Result<Duration, String> {
    let started = Instant::now();
    let consumer = Consumer::new(ident("bench-warm-up"));
    for partition in 0..partitions {
        call(
            &format!("warm-up poll of partition {partition}"),
            client.poll_messages(
                stream,
                &ident(TOPIC),
                Some(partition),
                &consumer,
                &PollingStrategy::offset(0),
                1,
                false,
            ),
        )
        .await?;
    }
    Ok(started.elapsed())
}

/// A client that has reached `partitions` of `stream` ([`reach_partitions`]); `warm_up` keeps
/// the slowest such warm-up of the actor kind.
async fn connect_reaching(
    address: &str,
    p: &Params,
    stream: &Identifier,
    partitions: u32,
    warm_up: &mut Duration,
) -> Result<IggyClient, String> {
    let client = connect(address, p, p.nodelay).await?;
    *warm_up = (*warm_up).max(reach_partitions(&client, stream, partitions).await?);
    Ok(client)
}

/// Deterministic payloads; with a size range, `BATCH_VARIANTS` batches of random sizes rotate.
const BATCH_VARIANTS: usize = 8;

fn payload(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    Bytes::from(
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>(),
    )
}

/// The payloads an actor sends, batch by batch (batch `b` is `variants[b % len]`).
#[derive(Clone)]
struct Payloads {
    variants: Arc<Vec<Vec<Bytes>>>,
}

impl Payloads {
    fn new(p: &Params, actor: u32) -> Payloads {
        let variants = if p.message_size_min == p.message_size_max {
            1
        } else {
            BATCH_VARIANTS
        };
        let mut rng = 0x2545_F491_4F6C_DD1D_u64 ^ ((actor as u64 + 1) << 32);
        let span = (p.message_size_max - p.message_size_min + 1) as u64;
        let shared = payload(p.message_size_max as usize, 7 + actor as u64);
        let v = (0..variants)
            .map(|_| {
                (0..p.messages_per_batch)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let len = p.message_size_min as u64 + rng % span;
                        shared.slice(..len as usize)
                    })
                    .collect()
            })
            .collect();
        Payloads {
            variants: Arc::new(v),
        }
    }

    fn batch(&self, b: u64) -> &[Bytes] {
        &self.variants[(b % self.variants.len() as u64) as usize]
    }

    /// The payload of the message at `offset` of a pinned partition written by this actor.
    fn at(&self, offset: u64, per_batch: u64) -> &Bytes {
        &self.batch(offset / per_batch)[(offset % per_batch) as usize]
    }

    fn messages(&self) -> Vec<Vec<IggyMessage>> {
        self.variants
            .iter()
            .map(|batch| {
                batch
                    .iter()
                    .map(|p| {
                        IggyMessage::builder()
                            .payload(p.clone())
                            .build()
                            .expect("valid message")
                    })
                    .collect()
            })
            .collect()
    }
}

/// Shared progress counters, printed once a second while a phase runs.
#[derive(Clone, Default)]
pub struct Progress {
    counters: Arc<Mutex<Vec<ProgressCounter>>>,
}

/// A counter's label, its live count, and the count printed last.
type ProgressCounter = (String, Arc<AtomicU64>, u64);

impl Progress {
    fn counter(&self, kind: &str, expected: u64) -> Arc<AtomicU64> {
        let c = Arc::new(AtomicU64::new(0));
        self.counters
            .lock()
            .unwrap()
            .push((kind.to_string(), c.clone(), expected));
        c
    }

    fn spawn_printer(&self, quiet: bool) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, this) = (stop.clone(), self.clone());
        let handle = tokio::spawn(async move {
            let start = Instant::now();
            let mut last: HashMap<String, u64> = HashMap::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                if quiet {
                    continue;
                }
                let mut line = format!("  [{:>5.1}s]", start.elapsed().as_secs_f64());
                for (kind, c, expected) in this.counters.lock().unwrap().iter() {
                    let now = c.load(Ordering::Relaxed);
                    let prev = last.insert(kind.clone(), now).unwrap_or(0);
                    line.push_str(&format!(
                        "  {kind} {}/{} msgs ({}/s)",
                        fmt_int(now as f64),
                        fmt_int(*expected as f64),
                        fmt_int((now - prev) as f64)
                    ));
                }
                eprintln!("{line}");
            }
        });
        (stop, handle)
    }
}

/// A topic of `partitions` partitions with the run's durability.
fn topic_options(p: &Params, partitions: u32) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        durability: if p.persisted() {
            Durability::Persisted
        } else {
            Durability::Replicated
        },
        ..Default::default()
    }
}

/// Stream `name`, created empty: a reused server may hold a previous run's.
async fn fresh_stream(admin: &IggyClient, name: &str) -> Result<(), String> {
    let _ = tokio::time::timeout(CALL_TIMEOUT, admin.delete_stream(&ident(name))).await;
    call(
        &format!("create stream {name}"),
        admin.create_stream(name, &StreamCreateOptions::default()),
    )
    .await?;
    Ok(())
}

/// Streams `bench-0..`, each with topic `t`; for the balanced scenario also group `bench-cg`.
async fn setup(admin: &IggyClient, p: &Params) -> Result<(), String> {
    let options = topic_options(p, p.effective_partitions());
    for i in 0..p.streams() {
        let name = stream_name(i);
        fresh_stream(admin, &name).await?;
        call(
            &format!("create topic {name}/{TOPIC}"),
            admin.create_topic(&ident(&name), TOPIC, &options),
        )
        .await?;
    }
    if p.scenario == Scenario::Balanced {
        call(
            "create consumer group",
            admin.create_consumer_group(&ident(&stream_name(0)), &ident(TOPIC), GROUP),
        )
        .await?;
    }
    Ok(())
}

/// The idle scenario's topics: `partitions` spread evenly over `topics` topics of one stream.
pub async fn create_idle_partitions(
    admin: &IggyClient,
    p: &Params,
    topics: u32,
    partitions: u32,
) -> Result<(), String> {
    let name = stream_name(0);
    fresh_stream(admin, &name).await?;
    for topic in 0..topics {
        // The first `partitions % topics` topics take one more.
        let count = partitions / topics + u32::from(topic < partitions % topics);
        let options = topic_options(p, count);
        let topic_name = format!("{TOPIC}-{topic}");
        call(
            &format!("create topic {name}/{topic_name} of {count} partitions"),
            admin.create_topic(&ident(&name), &topic_name, &options),
        )
        .await?;
    }
    Ok(())
}

fn bytes_of(batch: &[IggyMessage]) -> u64 {
    batch.iter().map(|m| m.payload.len() as u64).sum()
}

struct Producer {
    actor: u32,
    client: IggyClient,
    stream: Identifier,
    partitioning: Partitioning,
    batches: Vec<Vec<IggyMessage>>,
}

impl Producer {
    async fn run(
        mut self,
        count: u64,
        counter: Arc<AtomicU64>,
        start: Instant,
    ) -> Result<ActorResult, String> {
        let mut r = ActorResult {
            actor: self.actor,
            latencies_ns: Vec::with_capacity(count as usize),
            ..Default::default()
        };
        let topic = ident(TOPIC);
        for b in 0..count {
            let idx = (b % self.batches.len() as u64) as usize;
            let batch = &mut self.batches[idx];
            let t = Instant::now();
            call(
                &format!("producer {} send batch {b}", self.actor),
                self.client
                    .send_messages(&self.stream, &topic, &self.partitioning, batch),
            )
            .await?;
            r.latencies_ns.push(t.elapsed().as_nanos() as u64);
            r.messages += batch.len() as u64;
            r.payload_bytes += bytes_of(batch);
            counter.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        r.elapsed = start.elapsed();
        Ok(r)
    }
}

/// Checks one poll of a pinned partition: contiguous offsets from `from`, payloads as sent.
fn check_pinned(
    actor: u32,
    polled: &PolledMessages,
    from: u64,
    payloads: &Payloads,
    per_batch: u64,
) -> Result<u64, String> {
    let mut bytes = 0;
    for (i, m) in polled.messages.iter().enumerate() {
        let want = from + i as u64;
        if m.header.offset != want {
            return Err(format!(
                "consumer {actor}: poll from offset {from} returned offset {} at index {i} (want {want})",
                m.header.offset
            ));
        }
        let expected = payloads.at(want, per_batch);
        // Lengths always; full bytes for the first message of each poll (cheap, catches shifts).
        if m.payload.len() != expected.len() || (i == 0 && m.payload != *expected) {
            return Err(format!(
                "consumer {actor}: payload of offset {want} differs from what was sent ({} B vs {} B)",
                m.payload.len(),
                expected.len()
            ));
        }
        bytes += m.payload.len() as u64;
    }
    Ok(bytes)
}

struct PinnedConsumer {
    actor: u32,
    client: IggyClient,
    stream: Identifier,
    payloads: Payloads,
}

impl PinnedConsumer {
    async fn run(
        self,
        expected: u64,
        per_batch: u32,
        counter: Arc<AtomicU64>,
        start: Instant,
    ) -> Result<ActorResult, String> {
        let mut r = ActorResult {
            actor: self.actor,
            ..Default::default()
        };
        let consumer = Consumer::new(ident(&format!("bench-consumer-{}", self.actor)));
        let topic = ident(TOPIC);
        let mut offset = 0u64;
        let mut last_progress = Instant::now();
        while offset < expected {
            let t = Instant::now();
            let polled = call(
                &format!("consumer {} poll offset {offset}", self.actor),
                self.client.poll_messages(
                    &self.stream,
                    &topic,
                    Some(0),
                    &consumer,
                    &PollingStrategy::offset(offset),
                    per_batch,
                    false,
                ),
            )
            .await?;
            let latency = t.elapsed();
            if polled.messages.is_empty() {
                r.empty_polls += 1;
                if last_progress.elapsed() > STALL_TIMEOUT {
                    return Err(format!(
                        "consumer {}: poll at offset {offset} keeps returning nothing, though {expected} messages were sent (current_offset {})",
                        self.actor, polled.current_offset
                    ));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            last_progress = Instant::now();
            r.payload_bytes += check_pinned(
                self.actor,
                &polled,
                offset,
                &self.payloads,
                per_batch as u64,
            )?;
            let n = polled.messages.len() as u64;
            offset += n;
            r.messages += n;
            r.latencies_ns.push(latency.as_nanos() as u64);
            counter.fetch_add(n, Ordering::Relaxed);
        }
        r.elapsed = start.elapsed();
        Ok(r)
    }
}

struct GroupConsumer {
    actor: u32,
    client: IggyClient,
}

impl GroupConsumer {
    async fn run(
        self,
        total: u64,
        per_batch: u32,
        consumed: Arc<AtomicU64>,
        next_offsets: Arc<Mutex<HashMap<u32, u64>>>,
        start: Instant,
    ) -> Result<ActorResult, String> {
        let mut r = ActorResult {
            actor: self.actor,
            ..Default::default()
        };
        let (stream, topic) = (ident(&stream_name(0)), ident(TOPIC));
        let group = Consumer::group(ident(GROUP));
        let mut last_progress = Instant::now();
        while consumed.load(Ordering::Relaxed) < total {
            let t = Instant::now();
            let polled = call(
                &format!("group consumer {} poll", self.actor),
                self.client.poll_messages(
                    &stream,
                    &topic,
                    None,
                    &group,
                    &PollingStrategy::next(),
                    per_batch,
                    true,
                ),
            )
            .await?;
            let latency = t.elapsed();
            if polled.messages.is_empty() {
                r.empty_polls += 1;
                if last_progress.elapsed() > STALL_TIMEOUT {
                    return Err(format!(
                        "group consumer {}: no message for {STALL_TIMEOUT:?} though the group has consumed {} of {total} (partition {})",
                        self.actor,
                        consumed.load(Ordering::Relaxed),
                        polled.partition_id
                    ));
                }
                tokio::time::sleep(Duration::from_micros(500)).await;
                continue;
            }
            last_progress = Instant::now();
            {
                // Each partition is read once, in order, across the group.
                let mut next = next_offsets.lock().unwrap();
                let want = next.entry(polled.partition_id).or_insert(0);
                for m in &polled.messages {
                    if m.header.offset != *want {
                        return Err(format!(
                            "group consumer {}: partition {} delivered offset {} where {} was due (skip or duplicate)",
                            self.actor, polled.partition_id, m.header.offset, *want
                        ));
                    }
                    *want += 1;
                }
            }
            let n = polled.messages.len() as u64;
            r.messages += n;
            r.payload_bytes += polled
                .messages
                .iter()
                .map(|m| m.payload.len() as u64)
                .sum::<u64>();
            r.latencies_ns.push(latency.as_nanos() as u64);
            consumed.fetch_add(n, Ordering::Relaxed);
        }
        r.elapsed = start.elapsed();
        Ok(r)
    }
}

struct ProducingConsumer {
    actor: u32,
    client: IggyClient,
    stream: Identifier,
    payloads: Payloads,
    batches: Vec<Vec<IggyMessage>>,
}

impl ProducingConsumer {
    async fn run(
        mut self,
        count: u64,
        per_batch: u32,
        counter: Arc<AtomicU64>,
        start: Instant,
    ) -> Result<ActorResult, String> {
        let mut r = ActorResult {
            actor: self.actor,
            latencies_ns: Vec::with_capacity(count as usize),
            ..Default::default()
        };
        let topic = ident(TOPIC);
        let consumer = Consumer::new(ident(&format!("bench-pc-{}", self.actor)));
        let partitioning = Partitioning::partition_id(0);
        let mut offset = 0u64;
        for b in 0..count {
            let idx = (b % self.batches.len() as u64) as usize;
            let batch = &mut self.batches[idx];
            let t = Instant::now();
            call(
                &format!("producing consumer {} send batch {b}", self.actor),
                self.client
                    .send_messages(&self.stream, &topic, &partitioning, batch),
            )
            .await?;
            let until = offset + batch.len() as u64;
            let polled_from = Instant::now();
            while offset < until {
                let polled = call(
                    &format!("producing consumer {} poll offset {offset}", self.actor),
                    self.client.poll_messages(
                        &self.stream,
                        &topic,
                        Some(0),
                        &consumer,
                        &PollingStrategy::offset(offset),
                        (until - offset) as u32,
                        false,
                    ),
                )
                .await?;
                if polled.messages.is_empty() {
                    r.empty_polls += 1;
                    r.empty_polls += 1;
                    if polled_from.elapsed() > STALL_TIMEOUT {
                        return Err(format!(
                            "producing consumer {}: batch {b} was acknowledged but polling offset {offset} returns nothing (current_offset {})",
                            self.actor, polled.current_offset
                        ));
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                r.payload_bytes += check_pinned(
                    self.actor,
                    &polled,
                    offset,
                    &self.payloads,
                    per_batch as u64,
                )?;
                offset += polled.messages.len() as u64;
            }
            r.latencies_ns.push(t.elapsed().as_nanos() as u64);
            r.messages += batch.len() as u64;
            counter.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        r.elapsed = start.elapsed();
        Ok(r)
    }
}

async fn join_all<T: Send + 'static>(
    handles: Vec<tokio::task::JoinHandle<Result<T, String>>>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for h in handles {
        match h.await {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("actor task panicked: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("\n"))
    }
}

async fn producers(
    address: &str,
    p: &Params,
    actors: u32,
    balanced: bool,
    progress: &Progress,
    quiet: bool,
) -> Result<KindReport, String> {
    let mut list = Vec::new();
    let mut warm_up = Duration::ZERO;
    for actor in 0..actors {
        let stream = ident(&stream_name(if balanced { 0 } else { actor }));
        let partitions = if balanced {
            p.effective_partitions()
        } else {
            1
        };
        list.push(Producer {
            actor,
            client: connect_reaching(address, p, &stream, partitions, &mut warm_up).await?,
            stream,
            partitioning: if balanced {
                Partitioning::balanced()
            } else {
                Partitioning::partition_id(0)
            },
            batches: Payloads::new(p, actor).messages(),
        });
    }
    let counter = progress.counter(
        "producer",
        actors as u64 * p.batches * p.messages_per_batch as u64,
    );
    let (stop, printer) = progress.spawn_printer(quiet);
    let start = Instant::now();
    let handles = list
        .into_iter()
        .map(|a| tokio::spawn(a.run(p.batches, counter.clone(), start)))
        .collect();
    let results = join_all(handles).await;
    stop.store(true, Ordering::Relaxed);
    let _ = printer.await;
    let mut report = KindReport::new("producer", results?);
    report.warm_up_ms = warm_up.as_secs_f64() * 1e3;
    Ok(report)
}

/// Runs the scenario against the server at `address`; one report per actor kind.
pub async fn run(address: &str, p: &Params, quiet: bool) -> Result<Vec<KindReport>, String> {
    let admin = connect(address, p, false).await?;
    setup(&admin, p).await?;
    let per_actor = p.batches * p.messages_per_batch as u64;
    let progress = Progress::default();
    let reports = match p.scenario {
        Scenario::PinnedProducer => {
            vec![producers(address, p, p.producers, false, &progress, quiet).await?]
        }
        Scenario::PinnedConsumer => {
            if !quiet {
                eprintln!(
                    "  seeding {} streams with {per_actor} messages each",
                    p.consumers
                );
            }
            let seed = producers(address, p, p.consumers, false, &progress, quiet).await?;
            let mut list = Vec::new();
            let mut warm_up = Duration::ZERO;
            for actor in 0..p.consumers {
                let stream = ident(&stream_name(actor));
                list.push(PinnedConsumer {
                    actor,
                    client: connect_reaching(address, p, &stream, 1, &mut warm_up).await?,
                    stream,
                    payloads: Payloads::new(p, actor),
                });
            }
            let progress = Progress::default();
            let counter = progress.counter("consumer", per_actor * p.consumers as u64);
            let (stop, printer) = progress.spawn_printer(quiet);
            let start = Instant::now();
            let handles = list
                .into_iter()
                .map(|a| {
                    tokio::spawn(a.run(per_actor, p.messages_per_batch, counter.clone(), start))
                })
                .collect();
            let results = join_all(handles).await;
            stop.store(true, Ordering::Relaxed);
            let _ = printer.await;
            let mut consumers = KindReport::new("consumer", results?);
            consumers.warm_up_ms = warm_up.as_secs_f64() * 1e3;
            vec![seed, consumers]
        }
        Scenario::Balanced => {
            let total = per_actor * p.producers as u64;
            let mut group = Vec::new();
            let mut warm_up = Duration::ZERO;
            let (stream, partitions) = (ident(&stream_name(0)), p.effective_partitions());
            for actor in 0..p.consumers {
                let client =
                    connect_reaching(address, p, &stream, partitions, &mut warm_up).await?;
                call(
                    &format!("group consumer {actor} join"),
                    client.join_consumer_group(&stream, &ident(TOPIC), &ident(GROUP)),
                )
                .await?;
                group.push(GroupConsumer { actor, client });
            }
            let consumed = progress.counter("consumer", total);
            let next_offsets = Arc::new(Mutex::new(HashMap::new()));
            let start = Instant::now();
            let handles: Vec<_> = group
                .into_iter()
                .map(|a| {
                    tokio::spawn(a.run(
                        total,
                        p.messages_per_batch,
                        consumed.clone(),
                        next_offsets.clone(),
                        start,
                    ))
                })
                .collect();
            let produced = producers(address, p, p.producers, true, &progress, quiet).await;
            let consumers = join_all(handles).await;
            let mut consumers = KindReport::new("consumer", consumers?);
            consumers.warm_up_ms = warm_up.as_secs_f64() * 1e3;
            vec![produced?, consumers]
        }
        Scenario::Idle => return Err("idle sends nothing: `idle::measure` runs it".into()),
        Scenario::EndToEnd => {
            let mut list = Vec::new();
            let mut warm_up = Duration::ZERO;
            for actor in 0..p.producers {
                let payloads = Payloads::new(p, actor);
                let stream = ident(&stream_name(actor));
                list.push(ProducingConsumer {
                    actor,
                    client: connect_reaching(address, p, &stream, 1, &mut warm_up).await?,
                    stream,
                    batches: payloads.messages(),
                    payloads,
                });
            }
            let counter = progress.counter("producing_consumer", per_actor * p.producers as u64);
            let (stop, printer) = progress.spawn_printer(quiet);
            let start = Instant::now();
            let handles = list
                .into_iter()
                .map(|a| {
                    tokio::spawn(a.run(p.batches, p.messages_per_batch, counter.clone(), start))
                })
                .collect();
            let results = join_all(handles).await;
            stop.store(true, Ordering::Relaxed);
            let _ = printer.await;
            let mut report = KindReport::new("producing_consumer", results?);
            report.warm_up_ms = warm_up.as_secs_f64() * 1e3;
            vec![report]
        }
    };
    Ok(reports)
}
