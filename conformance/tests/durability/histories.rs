//! Model-based histories: seeded sequences of metadata and data operations, driven through the
//! official SDK against the real binary, checked step by step against a small in-memory model
//! and in full after every restart (SIGTERM or SIGKILL) and at the end.
//!
//! A history is a list of [`Step`]s: create/delete stream, create/delete topic (1–3 partitions),
//! create partitions, delete partitions (the highest-numbered go), send a small batch to an
//! explicit partition, poll (checked against the model), store a consumer offset, create a
//! consumer group and join it, delete a group, create/delete a user, create/delete a personal
//! access token, restart by SIGTERM, restart by SIGKILL. Names come from small pools, so names
//! and ids are reused after deletes; most steps are valid against the model, a few are not and
//! the model predicts their error code. Each history runs on its own server and temp dir with
//! checkpoint thresholds drawn per history (`system.checkpoint_journal_ops` 2–40,
//! `system.checkpoint_journal_bytes` 4 KiB–1 MB, so both the metadata group and every partition
//! checkpoint inside a history), one or two shards, the `replicated` or `persisted` policy and
//! sometimes a small segment size. Every acknowledged write must survive SIGKILL under both.
//!
//! The model assigns ids as the server must: the lowest free id, 0-based, for streams, topics,
//! consumer groups and users; partitions are appended after the highest existing id and deleted
//! from the top. Every create checks the id the server returns against the model.
//!
//! After every restart and at the end the server is compared with the model: streams, topics
//! (partition ids, counts and message counts), every acknowledged message at its offset with its
//! id and bytes, every consumer offset of every pool consumer (stored ones and absent ones),
//! consumer groups, users, tokens, and on disk every partition directory the model holds.
//!
//! A failing history is shrunk and printed as a numbered list with the seed and a replay command:
//! the steps after the failing one go, then each server setting that can take its default does
//! (one shard, `replicated`, default segment size, default checkpoint thresholds), then chunks
//! of steps and single steps (delta debugging); every candidate runs on a fresh server, and a
//! change stays when the candidate fails in the same way (the same kind of failure).
//!
//! Cluster mode (`histories/cluster.rs`): the same histories, each on a fresh 3-node cluster
//! (`TestCluster`, shared with the e2e suite) with the SDK given one node's address; restarts
//! become a node (the metadata primary, a partition's primary, or any) killed by SIGKILL or
//! SIGTERM and left down for 0–3 steps, or a restart of all three nodes; the full check runs
//! once the cluster is Normal again. A step the SDK answers with an error of unknown outcome
//! (a failover in progress) is resolved through `resolve_operation`, or else by the state: the
//! model adopts the step as applied or as not applied, whichever the full check confirms, and
//! fails the history when neither does. Its knobs and rules are in that file's header.
//!
//! Knobs: `DURABILITY_HISTORIES` (default 48), `DURABILITY_HISTORY_STEPS` (default 30),
//! `DURABILITY_HISTORY_FIRST` (index of the first history, to replay one of a seed's histories),
//! `DURABILITY_SHRINK_SECS` (shrinking budget, default 180), `DURABILITY_HISTORY_DELETES=0`
//! (no delete steps: for bisecting, not the default), `DURABILITY_SEED`.

use crate::harness::within_for;
use crate::support::*;
use crate::test_cluster::TestCluster;
use futures_util::FutureExt;
use iggy::prelude::*;
use rand::Rng;
use rand::rngs::StdRng;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod cluster;
use cluster::Who;

/// How long one SDK call of a history may take: the SDK's own 30 s deadline and some slack (in
/// a cluster a call may wait out a view change; a call that hangs fails the history).
const CALL_LIMIT: Duration = Duration::from_secs(35);

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    within_for(CALL_LIMIT, what, fut).await
}

// ----- pools -----

const STREAM_NAMES: u8 = 3;
const TOPIC_NAMES: u8 = 3;
const GROUP_NAMES: u8 = 2;
const USER_NAMES: u8 = 3;
const TOKEN_NAMES: u8 = 3;
const CONSUMERS: u8 = 2;
/// A numeric id no resource of a history ever takes (the pools are small): a missing resource
/// addressed by id.
const MISSING_ID: u32 = 77;
const POLL_PAGE: u32 = 1000;
const ROOT: &str = "iggy";

fn stream_name(s: u8) -> String {
    format!("s{s}")
}
fn topic_name(t: u8) -> String {
    format!("t{t}")
}
fn group_name(g: u8) -> String {
    format!("g{g}")
}
fn user_name(u: u8) -> String {
    format!("user{u}")
}
fn token_name(k: u8) -> String {
    format!("tok{k}")
}
fn consumer_name(c: u8) -> String {
    format!("c{c}")
}

fn numeric(id: u32) -> Identifier {
    Identifier::numeric(id).unwrap()
}
fn named(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

// ----- histories -----

/// A topic as a step addresses it: stream and topic by pool name, sent by id or by name.
#[derive(Clone, Copy, Debug, PartialEq)]
struct At {
    s: u8,
    t: u8,
    by_id: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    CreateStream { s: u8 },
    DeleteStream { s: u8, by_id: bool },
    CreateTopic { at: At, partitions: u32 },
    DeleteTopic { at: At },
    CreatePartitions { at: At, count: u32 },
    DeletePartitions { at: At, count: u32 },
    /// Messages as (id, payload), to `Partitioning::partition_id(p)`.
    Send { at: At, p: u32, messages: Vec<(u128, Vec<u8>)> },
    Poll { at: At, p: u32, offset: u64, count: u32 },
    StoreOffset { at: At, p: u32, consumer: u8, offset: u64 },
    /// DeleteSegments: up to `count` of the partition's oldest closed segments.
    DeleteSegments { at: At, p: u32, count: u32 },
    /// Create the group, then join it (when the create succeeds).
    CreateGroup { at: At, g: u8 },
    DeleteGroup { at: At, g: u8 },
    CreateUser { u: u8 },
    DeleteUser { u: u8, by_id: bool },
    CreateToken { k: u8 },
    DeleteToken { k: u8 },
    Restart { kill: bool },
    /// Cluster histories: SIGKILL (or SIGTERM) one node and leave it down; the next steps run
    /// on the other two, possibly while they change view. With `in_flight`, the signal goes
    /// that many milliseconds into the next step, while its request may be on the way.
    NodeDown { who: Who, kill: bool, in_flight: Option<u8> },
    /// Cluster histories: start the node that is down, wait until every node is Normal in
    /// every group, check everything.
    NodeUp,
    /// Cluster histories: SIGKILL (or SIGTERM) all three nodes, start them, check everything.
    RestartAll { kill: bool },
    /// The checker's self-test only: SIGKILL, delete every partition's files, start again.
    WipePartitionsAfterKill,
}

fn how(by_id: bool) -> &'static str {
    if by_id { "by id" } else { "by name" }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", stream_name(self.s), topic_name(self.t))
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::CreateStream { s } => write!(f, "create stream {}", stream_name(*s)),
            Step::DeleteStream { s, by_id } => write!(f, "delete stream {} ({})", stream_name(*s), how(*by_id)),
            Step::CreateTopic { at, partitions } => write!(
                f,
                "create topic {} with {partitions} partition(s) in stream {} ({})",
                topic_name(at.t),
                stream_name(at.s),
                how(at.by_id)
            ),
            Step::DeleteTopic { at } => write!(f, "delete topic {at} ({})", how(at.by_id)),
            Step::CreatePartitions { at, count } => write!(f, "create {count} partition(s) in {at} ({})", how(at.by_id)),
            Step::DeletePartitions { at, count } => write!(f, "delete {count} partition(s) of {at} ({})", how(at.by_id)),
            Step::Send { at, p, messages } => {
                let bytes: usize = messages.iter().map(|(_, m)| m.len()).sum();
                write!(f, "send {} message(s), {bytes} payload bytes, to {at} partition {p} ({})", messages.len(), how(at.by_id))
            }
            Step::Poll { at, p, offset, count } => {
                write!(f, "poll {count} from offset {offset} of {at} partition {p} ({})", how(at.by_id))
            }
            Step::StoreOffset { at, p, consumer, offset } => write!(
                f,
                "store offset {offset} for consumer {} on {at} partition {p} ({})",
                consumer_name(*consumer),
                how(at.by_id)
            ),
            Step::DeleteSegments { at, p, count } => {
                write!(f, "delete {count} segment(s) of {at} partition {p} ({})", how(at.by_id))
            }
            Step::CreateGroup { at, g } => {
                write!(f, "create consumer group {} on {at} and join it ({})", group_name(*g), how(at.by_id))
            }
            Step::DeleteGroup { at, g } => write!(f, "delete consumer group {} of {at} ({})", group_name(*g), how(at.by_id)),
            Step::CreateUser { u } => write!(f, "create user {}", user_name(*u)),
            Step::DeleteUser { u, by_id } => write!(f, "delete user {} ({})", user_name(*u), how(*by_id)),
            Step::CreateToken { k } => write!(f, "create personal access token {}", token_name(*k)),
            Step::DeleteToken { k } => write!(f, "delete personal access token {}", token_name(*k)),
            Step::Restart { kill: false } => write!(f, "restart by SIGTERM"),
            Step::Restart { kill: true } => write!(f, "restart by SIGKILL"),
            Step::NodeDown { who, kill, in_flight } => {
                let signal = if *kill { "SIGKILL" } else { "SIGTERM" };
                match in_flight {
                    Some(ms) => write!(f, "{signal} {who} {ms} ms into the next step, leave it down"),
                    None => write!(f, "{signal} {who}, leave it down"),
                }
            }
            Step::NodeUp => write!(f, "start the node that is down"),
            Step::RestartAll { kill } => {
                write!(f, "restart all three nodes by {}", if *kill { "SIGKILL" } else { "SIGTERM" })
            }
            Step::WipePartitionsAfterKill => write!(f, "SIGKILL, wipe every partition's files, start (self-test)"),
        }
    }
}

/// The server's configuration for one history.
#[derive(Clone, Debug)]
struct Config {
    /// A 3-node cluster (the nodes share every setting), the SDK given node `entry`'s address;
    /// None: one server.
    cluster: Option<u8>,
    /// (journal ops, journal bytes); None: the server's defaults (only the shrinker tries it).
    checkpoint: Option<(u64, u64)>,
    shards: u32,
    persisted: bool,
    segment_size: Option<u64>,
}

impl Config {
    fn draw(rng: &mut StdRng) -> Self {
        // Log-uniform 4 KiB .. 1 MB.
        let checkpoint_bytes = (4096f64 * (1_000_000f64 / 4096f64).powf(rng.random::<f64>())) as u64;
        Config {
            cluster: None,
            // Half the histories checkpoint every few ops: a partition sees only a few ops in a
            // history, the metadata group a few dozen. A fifth keep the defaults, so a journal
            // spans many small segments (what a segment deletion then has to replay around).
            checkpoint: (!rng.random_bool(0.2)).then(|| {
                let ops = if rng.random_bool(0.5) { rng.random_range(2..=5) } else { rng.random_range(6..=40) };
                (ops, checkpoint_bytes)
            }),
            shards: if rng.random_bool(0.4) { 2 } else { 1 },
            persisted: rng.random_bool(0.3),
            // Small enough that a few sends roll a segment, so DeleteSegments has closed
            // segments to retire while their sends are still journaled.
            segment_size: rng.random_bool(0.4).then(|| rng.random_range(512..=4096)),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![("IGGY_RUNTIME_SHARDS".to_string(), self.shards.to_string())];
        if let Some((ops, bytes)) = self.checkpoint {
            env.push(("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS".to_string(), ops.to_string()));
            env.push(("IGGY_SYSTEM_CHECKPOINT_JOURNAL_BYTES".to_string(), bytes.to_string()));
        }
        if self.persisted {
            env.push(("IGGY_SYSTEM_DURABILITY".to_string(), "persisted".to_string()));
        }
        if let Some(size) = self.segment_size {
            env.push(("IGGY_SYSTEM_SEGMENT_SIZE".to_string(), size.to_string()));
        }
        env
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<String> = self.env().iter().map(|(k, v)| format!("{k}={v}")).collect();
        let defaults = if self.checkpoint.is_none() { " (default checkpoint thresholds)" } else { "" };
        if let Some(entry) = self.cluster {
            write!(f, "3 nodes, the SDK given node {entry}; ")?;
        }
        write!(f, "{}{defaults}", env.join(" "))
    }
}

#[derive(Clone, Debug)]
struct History {
    config: Config,
    steps: Vec<Step>,
}

// ----- the model -----

/// What the model says a step returns.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Ok,
    /// Created with this id.
    Id(u32),
    /// A send: its confirmation names these ids and this base offset.
    Sent { stream: u32, topic: u32, partition: u32, base: u64 },
    /// A poll: these (offset, id, payload).
    Polled(Vec<(u64, u128, Vec<u8>)>),
    /// Refused with this error code.
    Err(u32),
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Ok => write!(f, "ok"),
            Expect::Id(id) => write!(f, "id {id}"),
            Expect::Sent { stream, topic, partition, base } => {
                write!(f, "base offset {base} in {stream}/{topic}/{partition}")
            }
            Expect::Polled(messages) => match (messages.first(), messages.last()) {
                (Some(first), Some(last)) => write!(f, "offsets {}..={}", first.0, last.0),
                _ => write!(f, "no messages"),
            },
            Expect::Err(code) => write!(f, "error {code} ({})", IggyError::from_code_as_string(*code)),
        }
    }
}

#[derive(Clone, Debug)]
struct MStream {
    name: u8,
    topics: BTreeMap<u32, MTopic>,
}

#[derive(Clone, Debug)]
struct MTopic {
    name: u8,
    partitions: BTreeMap<u32, MPartition>,
    /// Group id -> group pool name.
    groups: BTreeMap<u32, u8>,
}

#[derive(Clone, Debug, Default)]
struct MPartition {
    /// (id, payload) in offset order.
    messages: Vec<(u128, Vec<u8>)>,
    /// The first offset still served: DeleteSegments retired everything below it (the server
    /// decides where segments end, so the runner learns it from the server and checks it).
    first: u64,
    /// Consumer pool index -> stored offset.
    offsets: BTreeMap<u8, u64>,
}

#[derive(Clone, Debug)]
struct Model {
    streams: BTreeMap<u32, MStream>,
    /// User id -> username (root is 0).
    users: BTreeMap<u32, String>,
    /// Root's personal access tokens.
    tokens: BTreeSet<String>,
}

fn lowest_free<V>(map: &BTreeMap<u32, V>) -> u32 {
    (0..).find(|id| !map.contains_key(id)).unwrap()
}

// Error codes the model predicts (spec/errors.spec).
const RESOURCE_NOT_FOUND: u32 = 20;
const USER_ALREADY_EXISTS: u32 = 46;
const TOKEN_ALREADY_EXISTS: u32 = 51;
const STREAM_ID_NOT_FOUND: u32 = 1009;
const STREAM_NAME_NOT_FOUND: u32 = 1010;
const STREAM_NAME_EXISTS: u32 = 1012;
const TOPIC_ID_NOT_FOUND: u32 = 2010;
const TOPIC_NAME_NOT_FOUND: u32 = 2011;
const TOPIC_NAME_EXISTS: u32 = 2013;
const INVALID_PARTITIONS_COUNT: u32 = 2019;
const PARTITION_NOT_FOUND: u32 = 3007;
const INVALID_OFFSET: u32 = 4100;
const GROUP_ID_NOT_FOUND: u32 = 5000;
const GROUP_NAME_NOT_FOUND: u32 = 5003;
const GROUP_NAME_EXISTS: u32 = 5004;

impl Model {
    fn new() -> Self {
        Model { streams: BTreeMap::new(), users: BTreeMap::from([(0, ROOT.to_string())]), tokens: BTreeSet::new() }
    }

    fn stream_id(&self, s: u8) -> Option<u32> {
        self.streams.iter().find(|(_, st)| st.name == s).map(|(id, _)| *id)
    }

    fn topic_id(&self, s: u8, t: u8) -> Option<(u32, u32)> {
        let sid = self.stream_id(s)?;
        let tid = self.streams[&sid].topics.iter().find(|(_, tp)| tp.name == t).map(|(id, _)| *id)?;
        Some((sid, tid))
    }

    fn user_id(&self, u: u8) -> Option<u32> {
        let name = user_name(u);
        self.users.iter().find(|(_, n)| **n == name).map(|(id, _)| *id)
    }

    fn stream_ident(&self, s: u8, by_id: bool) -> Identifier {
        if by_id { numeric(self.stream_id(s).unwrap_or(MISSING_ID)) } else { named(&stream_name(s)) }
    }

    fn topic_ident(&self, at: At) -> Identifier {
        if at.by_id {
            numeric(self.topic_id(at.s, at.t).map_or(MISSING_ID, |(_, t)| t))
        } else {
            named(&topic_name(at.t))
        }
    }

    fn group_ident(&self, at: At, g: u8) -> Identifier {
        if at.by_id {
            let id = self
                .topic_id(at.s, at.t)
                .and_then(|(s, t)| self.streams[&s].topics[&t].groups.iter().find(|(_, n)| **n == g).map(|(id, _)| *id));
            numeric(id.unwrap_or(MISSING_ID))
        } else {
            named(&group_name(g))
        }
    }

    fn user_ident(&self, u: u8, by_id: bool) -> Identifier {
        if by_id { numeric(self.user_id(u).unwrap_or(MISSING_ID)) } else { named(&user_name(u)) }
    }

    /// The topic's ids, or the error code the server must answer.
    fn locate(&self, at: At) -> Result<(u32, u32), u32> {
        if self.stream_id(at.s).is_none() {
            return Err(if at.by_id { STREAM_ID_NOT_FOUND } else { STREAM_NAME_NOT_FOUND });
        }
        self.topic_id(at.s, at.t).ok_or(if at.by_id { TOPIC_ID_NOT_FOUND } else { TOPIC_NAME_NOT_FOUND })
    }

    fn topic_mut(&mut self, (s, t): (u32, u32)) -> &mut MTopic {
        self.streams.get_mut(&s).unwrap().topics.get_mut(&t).unwrap()
    }

    fn partition_mut(&mut self, at: At, p: u32) -> Result<(u32, u32, &mut MPartition), u32> {
        let (s, t) = self.locate(at)?;
        let partition = self.topic_mut((s, t)).partitions.get_mut(&p).ok_or(PARTITION_NOT_FOUND)?;
        Ok((s, t, partition))
    }

    /// Applies `step` and says what the server must answer.
    fn apply(&mut self, step: &Step) -> Expect {
        match self.apply_inner(step) {
            Ok(expect) => expect,
            Err(code) => Expect::Err(code),
        }
    }

    fn apply_inner(&mut self, step: &Step) -> Result<Expect, u32> {
        Ok(match step {
            Step::CreateStream { s } => {
                if self.stream_id(*s).is_some() {
                    return Err(STREAM_NAME_EXISTS);
                }
                let id = lowest_free(&self.streams);
                self.streams.insert(id, MStream { name: *s, topics: BTreeMap::new() });
                Expect::Id(id)
            }
            Step::DeleteStream { s, by_id } => {
                let id = self.stream_id(*s).ok_or(if *by_id { STREAM_ID_NOT_FOUND } else { STREAM_NAME_NOT_FOUND })?;
                self.streams.remove(&id);
                Expect::Ok
            }
            Step::CreateTopic { at, partitions } => {
                let sid =
                    self.stream_id(at.s).ok_or(if at.by_id { STREAM_ID_NOT_FOUND } else { STREAM_NAME_NOT_FOUND })?;
                let stream = self.streams.get_mut(&sid).unwrap();
                if stream.topics.values().any(|t| t.name == at.t) {
                    return Err(TOPIC_NAME_EXISTS);
                }
                let id = lowest_free(&stream.topics);
                let partitions = (0..*partitions).map(|p| (p, MPartition::default())).collect();
                stream.topics.insert(id, MTopic { name: at.t, partitions, groups: BTreeMap::new() });
                Expect::Id(id)
            }
            Step::DeleteTopic { at } => {
                let (s, t) = self.locate(*at)?;
                self.streams.get_mut(&s).unwrap().topics.remove(&t);
                Expect::Ok
            }
            Step::CreatePartitions { at, count } => {
                let ids = self.locate(*at)?;
                if *count == 0 {
                    return Err(INVALID_PARTITIONS_COUNT);
                }
                let topic = self.topic_mut(ids);
                let first = topic.partitions.keys().next_back().map_or(0, |last| last + 1);
                for p in first..first + count {
                    topic.partitions.insert(p, MPartition::default());
                }
                Expect::Ok
            }
            Step::DeletePartitions { at, count } => {
                let ids = self.locate(*at)?;
                let topic = self.topic_mut(ids);
                if *count == 0 || *count as usize > topic.partitions.len() {
                    return Err(INVALID_PARTITIONS_COUNT);
                }
                for _ in 0..*count {
                    topic.partitions.pop_last();
                }
                Expect::Ok
            }
            Step::Send { at, p, messages } => {
                let (stream, topic, partition) = self.partition_mut(*at, *p)?;
                let base = partition.messages.len() as u64;
                partition.messages.extend(messages.iter().cloned());
                Expect::Sent { stream, topic, partition: *p, base }
            }
            Step::DeleteSegments { at, p, .. } => {
                self.partition_mut(*at, *p)?;
                Expect::Ok
            }
            Step::Poll { at, p, offset, count } => {
                let (_, _, partition) = self.partition_mut(*at, *p)?;
                let from = (*offset).max(partition.first) as usize;
                let from = from.min(partition.messages.len());
                let to = (from + *count as usize).min(partition.messages.len());
                Expect::Polled(
                    partition.messages[from..to]
                        .iter()
                        .enumerate()
                        .map(|(i, (id, payload))| ((from + i) as u64, *id, payload.clone()))
                        .collect(),
                )
            }
            Step::StoreOffset { at, p, consumer, offset } => {
                let (_, _, partition) = self.partition_mut(*at, *p)?;
                // A partition that never held a message takes no offset, 0 included.
                if partition.messages.is_empty() {
                    return Err(INVALID_OFFSET);
                }
                partition.offsets.insert(*consumer, *offset);
                Expect::Ok
            }
            Step::CreateGroup { at, g } => {
                let ids = self.locate(*at)?;
                let topic = self.topic_mut(ids);
                if topic.groups.values().any(|n| n == g) {
                    return Err(GROUP_NAME_EXISTS);
                }
                let id = lowest_free(&topic.groups);
                topic.groups.insert(id, *g);
                Expect::Id(id)
            }
            Step::DeleteGroup { at, g } => {
                let ids = self.locate(*at)?;
                let topic = self.topic_mut(ids);
                let id = topic
                    .groups
                    .iter()
                    .find(|(_, n)| *n == g)
                    .map(|(id, _)| *id)
                    .ok_or(if at.by_id { GROUP_ID_NOT_FOUND } else { GROUP_NAME_NOT_FOUND })?;
                topic.groups.remove(&id);
                Expect::Ok
            }
            Step::CreateUser { u } => {
                if self.user_id(*u).is_some() {
                    return Err(USER_ALREADY_EXISTS);
                }
                let id = lowest_free(&self.users);
                self.users.insert(id, user_name(*u));
                Expect::Id(id)
            }
            Step::DeleteUser { u, .. } => {
                let id = self.user_id(*u).ok_or(RESOURCE_NOT_FOUND)?;
                self.users.remove(&id);
                Expect::Ok
            }
            Step::CreateToken { k } => {
                if !self.tokens.insert(token_name(*k)) {
                    return Err(TOKEN_ALREADY_EXISTS);
                }
                Expect::Ok
            }
            Step::DeleteToken { k } => {
                if !self.tokens.remove(&token_name(*k)) {
                    return Err(RESOURCE_NOT_FOUND);
                }
                Expect::Ok
            }
            Step::Restart { .. }
            | Step::NodeDown { .. }
            | Step::NodeUp
            | Step::RestartAll { .. }
            | Step::WipePartitionsAfterKill => Expect::Ok,
        })
    }

    /// Every (stream id, topic id, partition id) with its partition, in order.
    fn partitions(&self) -> Vec<(u32, u32, u32, &MPartition)> {
        let mut out = Vec::new();
        for (s, stream) in &self.streams {
            for (t, topic) in &stream.topics {
                for (p, partition) in &topic.partitions {
                    out.push((*s, *t, *p, partition));
                }
            }
        }
        out
    }
}

// ----- the generator -----

/// Weighted step kinds; the delete kinds are left out with `DURABILITY_HISTORY_DELETES=0`.
#[derive(Clone, Copy, Debug)]
enum Kind {
    CreateStream,
    DeleteStream,
    CreateTopic,
    DeleteTopic,
    CreatePartitions,
    DeletePartitions,
    Send,
    Poll,
    StoreOffset,
    DeleteSegments,
    CreateGroup,
    DeleteGroup,
    CreateUser,
    DeleteUser,
    CreateToken,
    DeleteToken,
    RestartTerm,
    RestartKill,
}

const KINDS: [(Kind, u32, bool); 18] = [
    // (kind, weight, is a delete)
    (Kind::CreateStream, 6, false),
    (Kind::DeleteStream, 4, true),
    (Kind::CreateTopic, 7, false),
    (Kind::DeleteTopic, 3, true),
    (Kind::CreatePartitions, 3, false),
    (Kind::DeletePartitions, 4, true),
    (Kind::Send, 24, false),
    (Kind::Poll, 4, false),
    (Kind::StoreOffset, 4, false),
    (Kind::DeleteSegments, 3, true),
    (Kind::CreateGroup, 2, false),
    (Kind::DeleteGroup, 1, true),
    (Kind::CreateUser, 2, false),
    (Kind::DeleteUser, 2, true),
    (Kind::CreateToken, 2, false),
    (Kind::DeleteToken, 2, true),
    (Kind::RestartTerm, 3, false),
    (Kind::RestartKill, 4, false),
];

/// The probability that a drawn step is deliberately invalid (the model predicts the error).
const INVALID: f64 = 0.06;

fn draw_kind(rng: &mut StdRng, deletes: bool) -> Kind {
    let kinds: Vec<(Kind, u32)> = KINDS.iter().filter(|(_, _, d)| deletes || !d).map(|(k, w, _)| (*k, *w)).collect();
    let total: u32 = kinds.iter().map(|(_, w)| w).sum();
    let mut pick = rng.random_range(0..total);
    for (kind, weight) in kinds {
        if pick < weight {
            return kind;
        }
        pick -= weight;
    }
    unreachable!()
}

fn at(rng: &mut StdRng, s: u8, t: u8) -> At {
    At { s, t, by_id: rng.random_bool(0.5) }
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[rng.random_range(0..items.len())])
}

struct Generator {
    model: Model,
    next_message_id: u128,
    deletes: bool,
    /// The last send's partition: sends go back to it half the time, so some partitions see
    /// enough ops to checkpoint within a history.
    last_send: Option<(u8, u8, u32)>,
}

impl Generator {
    fn topics(&self) -> Vec<(u8, u8)> {
        let mut out = Vec::new();
        for stream in self.model.streams.values() {
            for topic in stream.topics.values() {
                out.push((stream.name, topic.name));
            }
        }
        out
    }

    /// (stream name, topic name, partition id, messages held).
    fn partitions(&self) -> Vec<(u8, u8, u32, usize)> {
        let mut out = Vec::new();
        for stream in self.model.streams.values() {
            for topic in stream.topics.values() {
                for (p, partition) in &topic.partitions {
                    out.push((stream.name, topic.name, *p, partition.messages.len()));
                }
            }
        }
        out
    }

    /// One step, or None when the drawn kind has nothing to act on.
    fn draw(&mut self, rng: &mut StdRng) -> Option<Step> {
        let invalid = rng.random_bool(INVALID);
        let stream_names: Vec<u8> = self.model.streams.values().map(|s| s.name).collect();
        let free_stream_names: Vec<u8> = (0..STREAM_NAMES).filter(|s| !stream_names.contains(s)).collect();
        match draw_kind(rng, self.deletes) {
            Kind::CreateStream => {
                let s = if invalid { pick(rng, &stream_names)? } else { pick(rng, &free_stream_names)? };
                Some(Step::CreateStream { s })
            }
            Kind::DeleteStream => {
                let s = if invalid { pick(rng, &free_stream_names)? } else { pick(rng, &stream_names)? };
                Some(Step::DeleteStream { s, by_id: rng.random_bool(0.5) })
            }
            Kind::CreateTopic => {
                let s = pick(rng, &stream_names)?;
                let sid = self.model.stream_id(s).unwrap();
                let taken: Vec<u8> = self.model.streams[&sid].topics.values().map(|t| t.name).collect();
                let free: Vec<u8> = (0..TOPIC_NAMES).filter(|t| !taken.contains(t)).collect();
                let t = if invalid { pick(rng, &taken)? } else { pick(rng, &free)? };
                Some(Step::CreateTopic { at: at(rng, s, t), partitions: rng.random_range(1..=3) })
            }
            Kind::DeleteTopic => {
                let (s, t) = if invalid {
                    // A topic name the stream does not hold.
                    let s = pick(rng, &stream_names)?;
                    let sid = self.model.stream_id(s).unwrap();
                    let taken: Vec<u8> = self.model.streams[&sid].topics.values().map(|t| t.name).collect();
                    (s, pick(rng, &(0..TOPIC_NAMES).filter(|t| !taken.contains(t)).collect::<Vec<_>>())?)
                } else {
                    pick(rng, &self.topics())?
                };
                Some(Step::DeleteTopic { at: at(rng, s, t) })
            }
            Kind::CreatePartitions => {
                let (s, t) = pick(rng, &self.topics())?;
                Some(Step::CreatePartitions { at: at(rng, s, t), count: rng.random_range(1..=3) })
            }
            Kind::DeletePartitions => {
                let (s, t) = pick(rng, &self.topics())?;
                let (sid, tid) = self.model.topic_id(s, t).unwrap();
                let held = self.model.streams[&sid].topics[&tid].partitions.len() as u32;
                let count = if invalid {
                    held + 1
                } else if held == 0 {
                    return None;
                } else if rng.random_bool(0.15) {
                    held // every partition: the next create starts at id 0 again
                } else {
                    rng.random_range(1..=held.min(2))
                };
                Some(Step::DeletePartitions { at: at(rng, s, t), count })
            }
            Kind::Send => {
                let (s, t, p) = if invalid {
                    let (s, t) = pick(rng, &self.topics())?;
                    let (sid, tid) = self.model.topic_id(s, t).unwrap();
                    let next = self.model.streams[&sid].topics[&tid].partitions.keys().next_back().map_or(0, |p| p + 1);
                    (s, t, next)
                } else {
                    let partitions: Vec<(u8, u8, u32)> = self.partitions().iter().map(|(s, t, p, _)| (*s, *t, *p)).collect();
                    let hot = self.last_send.filter(|last| partitions.contains(last));
                    let target = match hot {
                        Some(last) if rng.random_bool(0.5) => last,
                        _ => pick(rng, &partitions)?,
                    };
                    self.last_send = Some(target);
                    target
                };
                let count = rng.random_range(1..=20);
                let messages = (0..count)
                    .map(|_| {
                        let id = self.next_message_id;
                        self.next_message_id += 1;
                        let len = rng.random_range(1..=64);
                        (id, random_bytes(rng, len))
                    })
                    .collect();
                Some(Step::Send { at: at(rng, s, t), p, messages })
            }
            Kind::Poll => {
                let (s, t, p, held) = pick(rng, &self.partitions())?;
                let offset = rng.random_range(0..=held as u64);
                Some(Step::Poll { at: at(rng, s, t), p, offset, count: rng.random_range(1..=30) })
            }
            Kind::DeleteSegments => {
                // The partition sent to most: only a partition with closed segments has any.
                let (s, t, p, _) = self.partitions().into_iter().max_by_key(|(.., held)| *held)?;
                Some(Step::DeleteSegments { at: at(rng, s, t), p, count: rng.random_range(1..=3) })
            }
            Kind::StoreOffset => {
                let (s, t, p, held) = pick(rng, &self.partitions())?;
                let offset = rng.random_range(0..held.max(1) as u64);
                Some(Step::StoreOffset { at: at(rng, s, t), p, consumer: rng.random_range(0..CONSUMERS), offset })
            }
            Kind::CreateGroup => {
                let (s, t) = pick(rng, &self.topics())?;
                let (sid, tid) = self.model.topic_id(s, t).unwrap();
                let taken: Vec<u8> = self.model.streams[&sid].topics[&tid].groups.values().copied().collect();
                let free: Vec<u8> = (0..GROUP_NAMES).filter(|g| !taken.contains(g)).collect();
                let g = if invalid { pick(rng, &taken)? } else { pick(rng, &free)? };
                Some(Step::CreateGroup { at: at(rng, s, t), g })
            }
            Kind::DeleteGroup => {
                let (s, t) = pick(rng, &self.topics())?;
                let (sid, tid) = self.model.topic_id(s, t).unwrap();
                let taken: Vec<u8> = self.model.streams[&sid].topics[&tid].groups.values().copied().collect();
                let free: Vec<u8> = (0..GROUP_NAMES).filter(|g| !taken.contains(g)).collect();
                let g = if invalid { pick(rng, &free)? } else { pick(rng, &taken)? };
                Some(Step::DeleteGroup { at: at(rng, s, t), g })
            }
            Kind::CreateUser => {
                let (taken, free): (Vec<u8>, Vec<u8>) = (0..USER_NAMES).partition(|u| self.model.user_id(*u).is_some());
                let u = if invalid { pick(rng, &taken)? } else { pick(rng, &free)? };
                Some(Step::CreateUser { u })
            }
            Kind::DeleteUser => {
                let (taken, free): (Vec<u8>, Vec<u8>) = (0..USER_NAMES).partition(|u| self.model.user_id(*u).is_some());
                let u = if invalid { pick(rng, &free)? } else { pick(rng, &taken)? };
                Some(Step::DeleteUser { u, by_id: rng.random_bool(0.5) })
            }
            Kind::CreateToken => {
                let (taken, free): (Vec<u8>, Vec<u8>) =
                    (0..TOKEN_NAMES).partition(|k| self.model.tokens.contains(&token_name(*k)));
                let k = if invalid { pick(rng, &taken)? } else { pick(rng, &free)? };
                Some(Step::CreateToken { k })
            }
            Kind::DeleteToken => {
                let (taken, free): (Vec<u8>, Vec<u8>) =
                    (0..TOKEN_NAMES).partition(|k| self.model.tokens.contains(&token_name(*k)));
                let k = if invalid { pick(rng, &free)? } else { pick(rng, &taken)? };
                Some(Step::DeleteToken { k })
            }
            Kind::RestartTerm => Some(Step::Restart { kill: false }),
            Kind::RestartKill => Some(Step::Restart { kill: true }),
        }
    }
}

/// A history of `len` steps from `rng`, with the server configuration it runs under.
fn generate(rng: &mut StdRng, len: usize, deletes: bool) -> History {
    let config = Config::draw(rng);
    History { config, steps: generate_steps(rng, len, deletes) }
}

/// `len` steps of a history, restarts as single-server `Restart` steps.
fn generate_steps(rng: &mut StdRng, len: usize, deletes: bool) -> Vec<Step> {
    let mut generator = Generator { model: Model::new(), next_message_id: 1, deletes, last_send: None };
    let mut steps = Vec::with_capacity(len);
    while steps.len() < len {
        if let Some(step) = generator.draw(rng) {
            generator.model.apply(&step);
            // A deletion's segments are retired while the sends that filled them may still be
            // journaled: a restart soon after replays exactly those.
            let retires = matches!(step, Step::DeleteSegments { .. });
            steps.push(step);
            if retires && rng.random_bool(0.5) {
                steps.push(Step::Restart { kill: rng.random_bool(0.5) });
            }
        }
    }
    steps.truncate(len);
    steps
}

// ----- running a history -----

#[derive(Clone, Debug)]
struct Failure {
    /// The step the failure showed at (`steps.len()` for the final check).
    step: usize,
    /// What failed, without the particulars: shrinking keeps a candidate that fails the same way.
    kind: String,
    detail: String,
    /// A step the server answered with an error that leaves its outcome unknown (the SDK gave
    /// up across a failover): the cluster runner settles it (`cluster.rs`); a single server
    /// has no failover, so there it stays a failure.
    unknown: Option<Box<IggyError>>,
}

fn fail<T>(step: usize, kind: &str, detail: String) -> Result<T, Failure> {
    Err(Failure { step, kind: kind.to_string(), detail, unknown: None })
}

#[derive(Default, Debug)]
struct Figures {
    histories: u64,
    steps: u64,
    expected_errors: u64,
    sigterm_restarts: u64,
    sigkill_restarts: u64,
    checks: u64,
    messages_acknowledged: u64,
    messages_checked: u64,
    offsets_checked: u64,
    /// Starts that restored a metadata checkpoint past op 0 (from the server log).
    metadata_checkpoint_starts: u64,
    /// Partitions found holding a checkpoint file at a full check.
    partition_checkpoints: u64,
    /// Messages retired by DeleteSegments steps (the partition's first offset moved).
    messages_retired: u64,
    /// Cluster histories: nodes taken down (by SIGKILL or SIGTERM) while they led the metadata
    /// group, while they led a partition (and not the metadata group), while they led nothing.
    downs_of_metadata_primary: u64,
    downs_of_partition_primary: u64,
    downs_of_backup: u64,
    /// Cluster histories: full checks where a topic's message counts matched the model only
    /// after a wait (the answering node's replica had not learned the last commits yet).
    lagging_counts: u64,
    /// Cluster histories: partition directories a node created only after the check began
    /// (a node back from being down, still catching up on the metadata log).
    lagging_directories: u64,
    /// Cluster histories: nodes signalled while a client's step ran.
    in_flight_signals: u64,
    /// Cluster histories: restarts of all three nodes.
    whole_cluster_restarts: u64,
    /// Cluster histories: steps run while a node was down.
    steps_with_a_node_down: u64,
    /// Cluster histories: steps whose outcome the SDK left unknown, proved applied by
    /// `resolve_operation`, found applied in the state, found not applied in the state.
    unknown_outcomes: u64,
    unknown_proved_applied: u64,
    unknown_found_applied: u64,
    unknown_found_not_applied: u64,
}

/// What a history runs on.
enum Target<'a> {
    Single(&'a mut Server),
    /// The node a `NodeDown` step left down, if any.
    Cluster { cluster: &'a mut TestCluster, down: Option<usize> },
}

struct Runner<'a> {
    target: Target<'a>,
    client: IggyClient,
    /// This connection's client id (for the group membership check), fetched once.
    client_id: Option<u32>,
    model: Model,
    figures: &'a mut Figures,
    /// Cluster histories: the node a `NodeDown` step with `in_flight` takes down during the
    /// next step, by SIGKILL or not, after so many milliseconds.
    armed: Option<(usize, bool, u8)>,
}

/// Checks an SDK result against the model's prediction; `Some(value)` when both say success.
fn outcome<T>(i: usize, step: &Step, expect: &Expect, got: Result<T, IggyError>) -> Result<Option<T>, Failure> {
    match (expect, got) {
        (Expect::Err(code), Ok(_)) => fail(
            i,
            "unexpected success",
            format!("step {}: {step}: the model expects error {code} ({}), the server said ok", i + 1, IggyError::from_code_as_string(*code)),
        ),
        (Expect::Err(_), Err(e)) if cluster::outcome_unknown(&e) => {
            let detail = format!("step {}: {step}: the model expects {expect}, the server said {e} (code {})", i + 1, e.as_code());
            Err(Failure { step: i, kind: "unexpected error".to_string(), detail, unknown: Some(Box::new(e)) })
        }
        (Expect::Err(code), Err(e)) if e.as_code() != *code => fail(
            i,
            "a different error code",
            format!("step {}: {step}: the model expects error {code}, the server said {e} (code {})", i + 1, e.as_code()),
        ),
        (Expect::Err(_), Err(_)) => Ok(None),
        (_, Err(e)) => {
            let detail = format!("step {}: {step}: the model expects {expect}, the server said {e} (code {})", i + 1, e.as_code());
            let unknown = cluster::outcome_unknown(&e).then(|| Box::new(e));
            Err(Failure { step: i, kind: "unexpected error".to_string(), detail, unknown })
        }
        (_, Ok(value)) => Ok(Some(value)),
    }
}

fn check_id(i: usize, step: &Step, expect: &Expect, got: u32) -> Result<(), Failure> {
    match expect {
        Expect::Id(id) if *id == got => Ok(()),
        _ => fail(
            i,
            "a create returned another id",
            format!("step {}: {step}: the model assigns {expect} (lowest free id), the server returned id {got}", i + 1),
        ),
    }
}

impl<'a> Runner<'a> {
    fn new(target: Target<'a>, client: IggyClient, figures: &'a mut Figures) -> Self {
        Runner { target, client, client_id: None, model: Model::new(), figures, armed: None }
    }

    /// Runs `history` from a fresh model, then shuts the client down.
    async fn drive(mut self, history: &History, progress: &Cell<Option<usize>>) -> Result<(), Failure> {
        let result = self.run(history, progress).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.shutdown()).await;
        result
    }

    async fn run(&mut self, history: &History, progress: &Cell<Option<usize>>) -> Result<(), Failure> {
        for (i, step) in history.steps.iter().enumerate() {
            progress.set(Some(i));
            if let Target::Cluster { down: Some(_), .. } = self.target {
                self.figures.steps_with_a_node_down += 1;
            }
            let before = self.model.clone();
            let signal = self.signal_in_flight(i, step)?;
            let result = self.step(i, step).await;
            self.reap_in_flight(i, signal)?;
            match result {
                Ok(()) => {}
                Err(Failure { unknown: Some(error), .. }) if matches!(self.target, Target::Cluster { .. }) => {
                    self.settle_unknown_outcome(i, step, before, *error).await?;
                }
                Err(failure) => return Err(failure),
            }
            self.figures.steps += 1;
        }
        progress.set(Some(history.steps.len()));
        let end = history.steps.len();
        if let Target::Cluster { .. } = self.target {
            // A node a shrunk history left down comes up for the final check.
            let signal = self.signal_in_flight(end, &Step::NodeUp)?;
            self.reap_in_flight(end, signal)?;
            self.node_up(end).await?;
        }
        self.verify(end, "at the end").await
    }

    async fn step(&mut self, i: usize, step: &Step) -> Result<(), Failure> {
        let c = &self.client;
        let m = &self.model;
        match step {
            Step::CreateStream { s } => {
                let expect = self.model.apply(step);
                let got = within("create stream", c.create_stream(&stream_name(*s), &StreamCreateOptions::default())).await;
                if let Some(details) = outcome(i, step, &expect, got)? {
                    check_id(i, step, &expect, details.id)?;
                }
                self.count(&expect);
            }
            Step::DeleteStream { s, by_id } => {
                let ident = m.stream_ident(*s, *by_id);
                let expect = self.model.apply(step);
                outcome(i, step, &expect, within("delete stream", c.delete_stream(&ident)).await)?;
                self.count(&expect);
            }
            Step::CreateTopic { at, partitions } => {
                let stream = m.stream_ident(at.s, at.by_id);
                let expect = self.model.apply(step);
                let options = TopicCreateOptions { partitions_count: Some(*partitions), ..Default::default() };
                let got = within("create topic", c.create_topic(&stream, &topic_name(at.t), &options)).await;
                if let Some(details) = outcome(i, step, &expect, got)? {
                    check_id(i, step, &expect, details.id)?;
                    let mut ids: Vec<u32> = details.partitions.iter().map(|p| p.id).collect();
                    ids.sort();
                    if ids != (0..*partitions).collect::<Vec<_>>() || details.partitions_count != *partitions {
                        return fail(
                            i,
                            "a created topic's partitions differ",
                            format!(
                                "step {}: {step}: partition ids {ids:?} (count {}), the model expects 0..{partitions}",
                                i + 1,
                                details.partitions_count
                            ),
                        );
                    }
                }
                self.count(&expect);
            }
            Step::DeleteTopic { at } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                outcome(i, step, &expect, within("delete topic", c.delete_topic(&stream, &topic)).await)?;
                self.count(&expect);
            }
            Step::CreatePartitions { at, count } | Step::DeletePartitions { at, count } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let got = if matches!(step, Step::CreatePartitions { .. }) {
                    within("create partitions", c.create_partitions(&stream, &topic, *count)).await
                } else {
                    within("delete partitions", c.delete_partitions(&stream, &topic, *count)).await
                };
                if outcome(i, step, &expect, got)?.is_some() {
                    // The partition ids now: appended after the highest, deleted from the top.
                    let (s, t) = self.model.locate(*at).unwrap();
                    let want: Vec<u32> = self.model.streams[&s].topics[&t].partitions.keys().copied().collect();
                    let details = within("get topic", c.get_topic(&numeric(s), &numeric(t))).await;
                    let got: Option<Vec<u32>> = match details {
                        Ok(Some(details)) => {
                            let mut ids: Vec<u32> = details.partitions.iter().map(|p| p.id).collect();
                            ids.sort();
                            Some(ids)
                        }
                        _ => None,
                    };
                    if got.as_ref() != Some(&want) {
                        return fail(
                            i,
                            "partition ids differ after a resize",
                            format!("step {}: {step}: topic {s}/{t} holds partitions {got:?}, the model {want:?}", i + 1),
                        );
                    }
                }
                self.count(&expect);
            }
            Step::Send { at, p, messages } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let mut batch: Vec<IggyMessage> = messages
                    .iter()
                    .map(|(id, payload)| {
                        IggyMessage::builder().id(*id).payload(bytes::Bytes::from(payload.clone())).build().unwrap()
                    })
                    .collect();
                let got = within("send messages", c.send_messages(&stream, &topic, &Partitioning::partition_id(*p), &mut batch))
                    .await;
                if let Some(response) = outcome(i, step, &expect, got)? {
                    let Expect::Sent { stream, topic, partition, base } = expect else { unreachable!() };
                    let confirmed: Vec<(u32, u32, u32, u64)> = response
                        .confirmations
                        .iter()
                        .map(|c| (c.stream_id, c.topic_id, c.partition_id, c.base_offset))
                        .collect();
                    if confirmed != [(stream, topic, partition, base)] {
                        return fail(
                            i,
                            "a send confirmation differs",
                            format!(
                                "step {}: {step}: confirmations (stream, topic, partition, base offset) {confirmed:?}, the model expects {:?}",
                                i + 1,
                                [(stream, topic, partition, base)]
                            ),
                        );
                    }
                    self.figures.messages_acknowledged += messages.len() as u64;
                }
                self.count(&expect);
            }
            Step::DeleteSegments { at, p, count } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let got = within("delete segments", c.delete_segments(&stream, &topic, *p, *count)).await;
                if outcome(i, step, &expect, got)?.is_some() {
                    // Where the partition now starts: never earlier than before, never past
                    // its end, never past a message a consumer has not committed.
                    let consumer = Consumer::new(named("checker"));
                    let polled = within(
                        "poll first",
                        c.poll_messages(&stream, &topic, Some(*p), &consumer, &PollingStrategy::first(), 1, false),
                    )
                    .await;
                    let polled = match polled {
                        Ok(polled) => polled,
                        Err(e) => return fail(i, "a read failed", format!("step {}: poll first: {e}", i + 1)),
                    };
                    let (_, _, partition) = self.model.partition_mut(*at, *p).expect("applied above");
                    let end = partition.messages.len() as u64;
                    let first = polled.messages.first().map_or(end, |m| m.header.offset);
                    let committed = partition.offsets.values().min().map_or(u64::MAX, |o| o + 1);
                    let past_a_consumer = first > partition.first && first > committed;
                    if first < partition.first || first > end || past_a_consumer {
                        return fail(
                            i,
                            "segment deletion out of bounds",
                            format!(
                                "step {}: {step}: the partition now starts at {first}; before {}, end {end}, lowest committed offset + 1 = {committed}",
                                i + 1,
                                partition.first
                            ),
                        );
                    }
                    self.figures.messages_retired += first - partition.first;
                    partition.first = first;
                }
                self.count(&expect);
            }
            Step::Poll { at, p, offset, count } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let consumer = Consumer::new(named("checker"));
                let got = within(
                    "poll messages",
                    c.poll_messages(&stream, &topic, Some(*p), &consumer, &PollingStrategy::offset(*offset), *count, false),
                )
                .await;
                if let Some(polled) = outcome(i, step, &expect, got)? {
                    let got: Vec<(u64, u128, Vec<u8>)> =
                        polled.messages.iter().map(|m| (m.header.offset, m.header.id, m.payload.to_vec())).collect();
                    let Expect::Polled(want) = &expect else { unreachable!() };
                    if &got != want {
                        return fail(
                            i,
                            "a poll differs from the model",
                            format!("step {}: {step}: {}", i + 1, describe_difference(want, &got)),
                        );
                    }
                    self.figures.messages_checked += got.len() as u64;
                }
                self.count(&expect);
            }
            Step::StoreOffset { at, p, consumer, offset } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let who = Consumer::new(named(&consumer_name(*consumer)));
                let got =
                    within("store consumer offset", c.store_consumer_offset(&who, &stream, &topic, Some(*p), *offset)).await;
                outcome(i, step, &expect, got)?;
                self.count(&expect);
            }
            Step::CreateGroup { at, g } => {
                let (stream, topic) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at));
                let expect = self.model.apply(step);
                let got = within("create consumer group", c.create_consumer_group(&stream, &topic, &group_name(*g))).await;
                if let Some(details) = outcome(i, step, &expect, got)? {
                    check_id(i, step, &expect, details.id)?;
                    let group = numeric(details.id);
                    let joined = within("join consumer group", c.join_consumer_group(&stream, &topic, &group)).await;
                    if let Err(e) = joined {
                        return fail(i, "join failed", format!("step {}: {step}: join: {e} (code {})", i + 1, e.as_code()));
                    }
                    // A client id names this client's connection on the node that answers: in
                    // a cluster the metadata primary, which a failover changes. There it is read
                    // each time, and read again once on a mismatch (the primary may have changed
                    // between the two reads).
                    let cluster = matches!(self.target, Target::Cluster { .. });
                    if cluster {
                        self.client_id = None;
                    }
                    let mut reads_left = if cluster { 2 } else { 1 };
                    loop {
                        let me = match self.client_id {
                            Some(id) => id,
                            None => match within("get me", c.get_me()).await {
                                Ok(me) => *self.client_id.insert(me.client_id),
                                Err(e) => return fail(i, "get me failed", format!("step {}: get_me: {e}", i + 1)),
                            },
                        };
                        let details = within("get consumer group", c.get_consumer_group(&stream, &topic, &group)).await;
                        let members: Option<Vec<u32>> =
                            details.ok().flatten().map(|d| d.members.iter().map(|m| m.id).collect());
                        if members.as_ref().is_some_and(|members| members.contains(&me)) {
                            break;
                        }
                        reads_left -= 1;
                        if reads_left == 0 {
                            return fail(
                                i,
                                "a joined group does not list its member",
                                format!("step {}: {step}: client {me} joined, the group's members are {members:?}", i + 1),
                            );
                        }
                        self.client_id = None;
                    }
                }
                self.count(&expect);
            }
            Step::DeleteGroup { at, g } => {
                let (stream, topic, group) = (m.stream_ident(at.s, at.by_id), m.topic_ident(*at), m.group_ident(*at, *g));
                let expect = self.model.apply(step);
                outcome(i, step, &expect, within("delete consumer group", c.delete_consumer_group(&stream, &topic, &group)).await)?;
                self.count(&expect);
            }
            Step::CreateUser { u } => {
                let expect = self.model.apply(step);
                let got = within(
                    "create user",
                    c.create_user(&user_name(*u), "secret-password", UserStatus::Active, None, &UserCreateOptions::default()),
                )
                .await;
                if let Some(details) = outcome(i, step, &expect, got)? {
                    check_id(i, step, &expect, details.id)?;
                }
                self.count(&expect);
            }
            Step::DeleteUser { u, by_id } => {
                let ident = m.user_ident(*u, *by_id);
                let expect = self.model.apply(step);
                outcome(i, step, &expect, within("delete user", c.delete_user(&ident)).await)?;
                self.count(&expect);
            }
            Step::CreateToken { k } => {
                let expect = self.model.apply(step);
                let got = within(
                    "create token",
                    c.create_personal_access_token(&token_name(*k), PersonalAccessTokenExpiry::NeverExpire),
                )
                .await;
                outcome(i, step, &expect, got)?;
                self.count(&expect);
            }
            Step::DeleteToken { k } => {
                let expect = self.model.apply(step);
                outcome(i, step, &expect, within("delete token", c.delete_personal_access_token(&token_name(*k))).await)?;
                self.count(&expect);
            }
            Step::Restart { kill } | Step::RestartAll { kill } => {
                self.restart(i, *kill, false).await?;
                let when = format!("after step {} ({step})", i + 1);
                self.verify(i, &when).await?;
            }
            Step::NodeDown { who, kill, in_flight } => self.node_down(i, *who, *kill, *in_flight).await?,
            Step::NodeUp => {
                self.node_up(i).await?;
                let when = format!("after step {} ({step})", i + 1);
                self.verify(i, &when).await?;
            }
            Step::WipePartitionsAfterKill => {
                self.restart(i, true, true).await?;
                let when = format!("after step {} ({step})", i + 1);
                self.verify(i, &when).await?;
            }
        }
        Ok(())
    }

    fn count(&mut self, expect: &Expect) {
        if matches!(expect, Expect::Err(_)) {
            self.figures.expected_errors += 1;
        }
    }

    /// Stops the server (SIGTERM, or SIGKILL), starts it again on the same directory and
    /// connects a fresh client.
    async fn restart(&mut self, i: usize, kill: bool, wipe: bool) -> Result<(), Failure> {
        let Target::Single(server) = &mut self.target else {
            return self.restart_all(i, kill).await;
        };
        let server: &mut Server = server;
        if kill {
            tokio::task::block_in_place(|| server.kill9());
            let _ = tokio::time::timeout(Duration::from_secs(5), self.client.shutdown()).await;
            self.figures.sigkill_restarts += 1;
        } else {
            let _ = within("shutdown client", self.client.shutdown()).await;
            let stopped = tokio::task::block_in_place(|| stop_gracefully(server));
            if let Err(waited) = stopped {
                return fail(i, "SIGTERM did not stop the server", format!("step {}: still running {waited:?} after SIGTERM", i + 1));
            }
            self.figures.sigterm_restarts += 1;
        }
        if wipe {
            wipe_partitions(&server.system_path);
        }
        tokio::task::block_in_place(|| server.spawn(&[]));
        self.client = server.client().await;
        self.client_id = None;
        Ok(())
    }

    /// The whole server against the model.
    async fn verify(&mut self, i: usize, when: &str) -> Result<(), Failure> {
        self.figures.checks += 1;
        let c = &self.client;
        let model = &self.model;
        let unexpected = |what: &str, e: IggyError| {
            fail::<()>(i, "a read failed", format!("{when}: {what}: {e} (code {})", e.as_code())).unwrap_err()
        };

        // Streams.
        let streams = within("get streams", c.get_streams()).await.map_err(|e| unexpected("get_streams", e))?;
        let got: BTreeMap<u32, (String, u32)> =
            streams.iter().map(|s| (s.id, (s.name.clone(), s.topics_count))).collect();
        let want: BTreeMap<u32, (String, u32)> =
            model.streams.iter().map(|(id, s)| (*id, (stream_name(s.name), s.topics.len() as u32))).collect();
        if got != want {
            return fail(i, "streams differ", format!("{when}: streams (id -> name, topics) {got:?}, the model {want:?}"));
        }

        for (sid, stream) in &model.streams {
            let topics =
                within("get topics", c.get_topics(&numeric(*sid))).await.map_err(|e| unexpected("get_topics", e))?;
            let got: BTreeMap<u32, (String, u32)> =
                topics.iter().map(|t| (t.id, (t.name.clone(), t.partitions_count))).collect();
            let want: BTreeMap<u32, (String, u32)> = stream
                .topics
                .iter()
                .map(|(id, t)| (*id, (topic_name(t.name), t.partitions.len() as u32)))
                .collect();
            if got != want {
                return fail(
                    i,
                    "topics differ",
                    format!("{when}: stream {sid}: topics (id -> name, partitions) {got:?}, the model {want:?}"),
                );
            }
            for (tid, topic) in &stream.topics {
                let (s, t) = (numeric(*sid), numeric(*tid));
                let details = within("get topic", c.get_topic(&s, &t)).await.map_err(|e| unexpected("get_topic", e))?;
                let Some(details) = details else {
                    return fail(i, "topics differ", format!("{when}: topic {sid}/{tid} is listed but not found"));
                };
                let got: BTreeMap<u32, u64> = details.partitions.iter().map(|p| (p.id, p.messages_count)).collect();
                let want: BTreeMap<u32, u64> =
                    topic.partitions.iter().map(|(id, p)| (*id, p.messages.len() as u64 - p.first)).collect();
                if got.keys().ne(want.keys()) || details.partitions_count != want.len() as u32 {
                    return fail(
                        i,
                        "partitions differ",
                        format!(
                            "{when}: topic {sid}/{tid}: partitions {:?} (count {}), the model {:?}",
                            got.keys().collect::<Vec<_>>(),
                            details.partitions_count,
                            want.keys().collect::<Vec<_>>()
                        ),
                    );
                }
                // The messages: every acknowledged one at its offset, intact, nothing more.
                for (pid, partition) in &topic.partitions {
                    let served = read_all(c, &s, &t, *pid).await.map_err(|e| unexpected("poll", e))?;
                    let want: Vec<(u64, u128, Vec<u8>)> = partition
                        .messages
                        .iter()
                        .enumerate()
                        .skip(partition.first as usize)
                        .map(|(o, (id, payload))| (o as u64, *id, payload.clone()))
                        .collect();
                    if served != want {
                        return fail(
                            i,
                            "partition content differs",
                            format!(
                                "{when}: partition {sid}/{tid}/{pid} ({}/{}): {}",
                                stream_name(stream.name),
                                topic_name(topic.name),
                                describe_difference(&want, &served)
                            ),
                        );
                    }
                    self.figures.messages_checked += served.len() as u64;
                }
                // Message counts as the topic reports them. In a cluster the node answering
                // reports its own replica's count, which learns the last commits with the
                // partition primary's next commit broadcast (500 ms): it has a few to get there.
                let mut got = got;
                let settled_by = Instant::now() + Duration::from_secs(5);
                while got != want && matches!(self.target, Target::Cluster { .. }) && Instant::now() < settled_by {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Ok(Some(details)) = within("get topic", c.get_topic(&s, &t)).await {
                        got = details.partitions.iter().map(|p| (p.id, p.messages_count)).collect();
                        self.figures.lagging_counts += u64::from(got == want);
                    }
                }
                if got != want {
                    return fail(
                        i,
                        "partition message counts differ",
                        format!("{when}: topic {sid}/{tid}: messages_count per partition {got:?}, the model {want:?}"),
                    );
                }
                // Consumer offsets: stored ones survive, none appears that was not stored.
                for (pid, partition) in &topic.partitions {
                    for consumer in 0..CONSUMERS {
                        let who = Consumer::new(named(&consumer_name(consumer)));
                        let got = within("get consumer offset", c.get_consumer_offset(&who, &s, &t, Some(*pid)))
                            .await
                            .map_err(|e| unexpected("get_consumer_offset", e))?
                            .map(|info| info.stored_offset);
                        let want = partition.offsets.get(&consumer).copied();
                        if got != want {
                            return fail(
                                i,
                                "a consumer offset differs",
                                format!(
                                    "{when}: partition {sid}/{tid}/{pid}: consumer {} has stored offset {got:?}, the model {want:?}",
                                    consumer_name(consumer)
                                ),
                            );
                        }
                        self.figures.offsets_checked += u64::from(got.is_some());
                    }
                }
                // Consumer groups.
                let groups = within("get consumer groups", c.get_consumer_groups(&s, &t))
                    .await
                    .map_err(|e| unexpected("get_consumer_groups", e))?;
                let got: BTreeMap<u32, (String, u32)> =
                    groups.iter().map(|g| (g.id, (g.name.clone(), g.partitions_count))).collect();
                let want: BTreeMap<u32, (String, u32)> = topic
                    .groups
                    .iter()
                    .map(|(id, g)| (*id, (group_name(*g), topic.partitions.len() as u32)))
                    .collect();
                if got != want {
                    return fail(
                        i,
                        "consumer groups differ",
                        format!("{when}: topic {sid}/{tid}: groups (id -> name, partitions) {got:?}, the model {want:?}"),
                    );
                }
            }
        }

        // Users and tokens.
        let users = within("get users", c.get_users()).await.map_err(|e| unexpected("get_users", e))?;
        let got: BTreeMap<u32, String> = users.iter().map(|u| (u.id, u.username.clone())).collect();
        if got != model.users {
            return fail(i, "users differ", format!("{when}: users {got:?}, the model {:?}", model.users));
        }
        let tokens =
            within("get tokens", c.get_personal_access_tokens()).await.map_err(|e| unexpected("get_personal_access_tokens", e))?;
        let got: BTreeSet<String> = tokens.iter().map(|t| t.name.clone()).collect();
        if got != model.tokens {
            return fail(i, "tokens differ", format!("{when}: root's tokens {got:?}, the model {:?}", model.tokens));
        }

        // On disk: no directory the model still owns is gone, on any node (every node holds a
        // replica of every partition).
        let system_paths: Vec<Option<std::path::PathBuf>> = match &self.target {
            Target::Single(server) => vec![Some(server.system_path.clone())],
            // A node that is down missed what happened meanwhile: it is checked once it is up.
            Target::Cluster { cluster, down } => (0..cluster.len())
                .map(|n| if Some(n) == *down { None } else { Some(cluster.node(n).data_dir()) })
                .collect(),
        };
        for (node, system_path) in system_paths.iter().enumerate() {
            let Some(system_path) = system_path else { continue };
            for (s, t, p, _) in model.partitions() {
                let dir = partition_dir(system_path, s, t, p);
                // A node back from being down creates the partitions it missed as it catches up
                // on the metadata log, which may still run when its groups are Normal.
                let caught_up_by = Instant::now() + Duration::from_secs(10);
                if !dir.is_dir() && system_paths.len() > 1 {
                    while !dir.is_dir() && Instant::now() < caught_up_by {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    self.figures.lagging_directories += u64::from(dir.is_dir());
                }
                if !dir.is_dir() {
                    let whose = if system_paths.len() > 1 { format!(" (node {node})") } else { String::new() };
                    return fail(i, "a partition directory is missing", format!("{when}: {}{whose} does not exist", dir.display()));
                }
                self.figures.partition_checkpoints += u64::from(dir.join("checkpoint.0").is_file());
            }
        }
        Ok(())
    }
}

fn partition_dir(system_path: &Path, s: u32, t: u32, p: u32) -> std::path::PathBuf {
    system_path.join(format!("streams/{s}/topics/{t}/partitions/{p}"))
}

/// Every message of one partition as (offset, id, payload), in pages from offset 0.
async fn read_all(
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
) -> Result<Vec<(u64, u128, Vec<u8>)>, IggyError> {
    let consumer = Consumer::new(named("checker"));
    let mut out: Vec<(u64, u128, Vec<u8>)> = Vec::new();
    loop {
        let next = out.last().map_or(0, |m| m.0 + 1);
        let polled = within(
            "poll for verification",
            client.poll_messages(stream, topic, Some(partition), &consumer, &PollingStrategy::offset(next), POLL_PAGE, false),
        )
        .await?;
        if polled.messages.is_empty() {
            return Ok(out);
        }
        let page: Vec<_> = polled.messages.iter().map(|m| (m.header.offset, m.header.id, m.payload.to_vec())).collect();
        let stalled = page.last().is_some_and(|m| m.0 < next);
        out.extend(page);
        if stalled {
            // A page that does not advance: what was served is returned as is (the comparison
            // names it), rather than polling forever.
            return Ok(out);
        }
    }
}

/// Where two lists of (offset, id, payload) first differ.
fn describe_difference(want: &[(u64, u128, Vec<u8>)], got: &[(u64, u128, Vec<u8>)]) -> String {
    let show = |m: Option<&(u64, u128, Vec<u8>)>| match m {
        Some((offset, id, payload)) => format!("offset {offset} id {id} payload {} bytes", payload.len()),
        None => "nothing".to_string(),
    };
    let at = want.iter().zip(got).position(|(w, g)| w != g).unwrap_or(want.len().min(got.len()));
    format!(
        "the model holds {} message(s), the server serves {}; first difference at index {at}: model {}, server {}",
        want.len(),
        got.len(),
        show(want.get(at)),
        show(got.get(at))
    )
}

/// SIGTERM and wait for the exit; `Err(waited)` (after a SIGKILL) if it did not exit in 10 s.
fn stop_gracefully(server: &mut Server) -> Result<(), Duration> {
    let Some(pid) = server.pid() else { return Ok(()) };
    // SAFETY: kill(2) on our own child, not yet reaped (`alive` reaps it only once it exited).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let started = Instant::now();
    while server.alive() {
        if started.elapsed() > Duration::from_secs(10) {
            server.kill9();
            return Err(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Reaped already; this only clears the handle (no signal goes to an exited child).
    server.kill9();
    Ok(())
}

/// Removes every partition's journal, segments and checkpoint (the metadata stays).
fn wipe_partitions(data: &Path) {
    for suffix in [".log", ".index", "journal.wal", "checkpoint.0", "checkpoint.1"] {
        for file in files_named(&data.join("streams"), suffix) {
            std::fs::remove_file(file).unwrap();
        }
    }
}

// ----- one run on a fresh server, panics included -----

static PANIC_LOCATION: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// Set while this thread runs a history: its panics are failures to shrink, not news.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Panics inside a history (a call that timed out, a server that would not start) become
/// failures to shrink; on the thread running it this hook records where they happened instead
/// of printing each one. Every other panic goes to the previous hook.
fn install_quiet_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|quiet| quiet.get()) {
                *PANIC_LOCATION.lock().unwrap() = info.location().map(|l| l.to_string());
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `history` on a fresh server (or cluster). The failure (if any) and the server log's
/// tail (each node's).
async fn run_history(history: &History, figures: &mut Figures) -> Result<(), (Failure, String)> {
    if history.config.cluster.is_some() {
        return cluster::run_cluster_history(history, figures).await;
    }
    let env = history.config.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut server = Server::new(&env);
    // The step running (None: the first start).
    let progress: Cell<Option<usize>> = Cell::new(None);
    let result = run_quietly(history, &progress, async {
        tokio::task::block_in_place(|| server.spawn(&[]));
        let client = server.client().await;
        Runner::new(Target::Single(&mut server), client, figures).drive(history, &progress).await
    })
    .await;
    figures.histories += 1;
    let log = if result.is_err() { server.log_tail(60) } else { String::new() };
    tokio::task::block_in_place(|| server.kill9());
    figures.metadata_checkpoint_starts += metadata_checkpoint_starts(&server.log());
    result.map_err(|failure| (failure, log))
}

/// Starts that restored a metadata checkpoint past op 0, from a server log.
fn metadata_checkpoint_starts(log: &str) -> u64 {
    log.lines()
        .filter_map(|line| line.split("metadata: checkpoint at op ").nth(1))
        .filter(|rest| rest.split(',').next().is_some_and(|op| op.trim() != "0"))
        .count() as u64
}

/// Awaits a history's run with its panics (a call that timed out, a server that would not
/// start) turned into failures at the step `progress` names.
async fn run_quietly(
    history: &History,
    progress: &Cell<Option<usize>>,
    run: impl Future<Output = Result<(), Failure>>,
) -> Result<(), Failure> {
    install_quiet_panic_hook();
    QUIET.with(|quiet| quiet.set(true));
    let result = AssertUnwindSafe(run).catch_unwind().await;
    QUIET.with(|quiet| quiet.set(false));
    match result {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".to_string());
            let location = PANIC_LOCATION.lock().unwrap().take().unwrap_or_default();
            // The kind: the message up to its particulars (the first ':' or '(').
            let kind: String = message.split([':', '(', '\n']).next().unwrap_or("").trim().chars().take(60).collect();
            let at = match progress.get() {
                None => "the first start".to_string(),
                Some(i) => history.steps.get(i).map_or("the final check".to_string(), |s| format!("step {} ({s})", i + 1)),
            };
            Err(Failure {
                step: progress.get().unwrap_or(0),
                kind: format!("panic: {kind}"),
                detail: format!("{at}: panicked at {location}: {}", message.chars().take(2000).collect::<String>()),
                unknown: None,
            })
        }
    }
}

// ----- shrinking -----

struct Shrunk {
    history: History,
    failure: Failure,
    log: String,
    runs: u64,
    elapsed: Duration,
    out_of_time: bool,
}

/// Delta debugging over the steps: drop everything after the failing step, then chunks of
/// halving size, then single steps until no single removal still fails the same way.
async fn shrink(history: &History, failure: Failure, log: String, budget: Duration) -> Shrunk {
    let started = Instant::now();
    let mut best = Shrunk { history: history.clone(), failure, log, runs: 0, elapsed: Duration::ZERO, out_of_time: false };
    let mut scratch = Figures::default();

    async fn attempt(best: &mut Shrunk, candidate: Vec<Step>, scratch: &mut Figures) -> bool {
        let config = best.history.config.clone();
        attempt_with(best, config, candidate, scratch).await
    }

    async fn attempt_with(best: &mut Shrunk, config: Config, candidate: Vec<Step>, scratch: &mut Figures) -> bool {
        let candidate = History { config, steps: candidate };
        best.runs += 1;
        match run_history(&candidate, scratch).await {
            Err((failure, log)) if failure.kind == best.failure.kind => {
                eprintln!(
                    "histories: shrink: {} -> {} steps on [{}] still fail ({})",
                    best.history.steps.len(),
                    candidate.steps.len(),
                    candidate.config,
                    failure.kind
                );
                best.history = candidate;
                best.failure = failure;
                best.log = log;
                true
            }
            _ => false,
        }
    }

    async fn truncate(best: &mut Shrunk, scratch: &mut Figures) {
        if best.failure.step + 1 < best.history.steps.len() {
            let candidate = best.history.steps[..=best.failure.step].to_vec();
            attempt(best, candidate, scratch).await;
        }
    }

    truncate(&mut best, &mut scratch).await;
    // A simpler server first, one setting at a time: the defaults where they still fail.
    let simpler: [fn(&mut Config); 4] = [
        |c| c.shards = 1,
        |c| c.persisted = false,
        |c| c.segment_size = None,
        |c| c.checkpoint = None,
    ];
    for simplify in simpler {
        let mut config = best.history.config.clone();
        simplify(&mut config);
        if config.env() != best.history.config.env() {
            let steps = best.history.steps.clone();
            attempt_with(&mut best, config, steps, &mut scratch).await;
        }
    }
    let mut chunk = (best.history.steps.len() / 2).max(1);
    'passes: loop {
        let mut removed = false;
        let mut start = 0;
        while start < best.history.steps.len() {
            if started.elapsed() > budget {
                best.out_of_time = true;
                break 'passes;
            }
            let end = (start + chunk).min(best.history.steps.len());
            let mut candidate = best.history.steps.clone();
            candidate.drain(start..end);
            if attempt(&mut best, candidate, &mut scratch).await {
                removed = true;
                truncate(&mut best, &mut scratch).await;
            } else {
                start += chunk;
            }
        }
        if chunk == 1 {
            if !removed {
                break;
            }
        } else {
            chunk = (chunk / 2).max(1);
        }
    }
    best.elapsed = started.elapsed();
    best
}

/// The history as a numbered list, each step with what the model says it returns.
fn render(history: &History) -> String {
    let mut model = Model::new();
    let mut out = String::new();
    for (i, step) in history.steps.iter().enumerate() {
        let expect = model.apply(step);
        let expect = match (&expect, step) {
            (Expect::Ok, Step::Restart { .. } | Step::NodeUp | Step::RestartAll { .. } | Step::WipePartitionsAfterKill) => {
                "then check everything".to_string()
            }
            (Expect::Polled(_), _) | (Expect::Sent { .. }, _) | (Expect::Err(_), _) | (Expect::Id(_), _) => expect.to_string(),
            (Expect::Ok, _) => "ok".to_string(),
        };
        out += &format!("  {:>3}. {step}  ->  {expect}\n", i + 1);
    }
    out += &format!("  {:>3}. check everything\n", history.steps.len() + 1);
    out
}

// ----- the tests -----

fn print_figures(figures: &Figures, started: Instant) {
    eprintln!(
        "histories figures: histories {}, steps {} ({} refused as the model predicted), restarts {} (SIGTERM {}, SIGKILL {}), \
         full checks {}, messages acknowledged {}, message reads checked {}, stored consumer offsets checked {}, \
         starts from a metadata checkpoint past op 0 {}, partitions holding a checkpoint at a full check {}, \
         messages retired by segment deletion {}, elapsed {:.1?}",
        figures.histories,
        figures.steps,
        figures.expected_errors,
        figures.sigterm_restarts + figures.sigkill_restarts,
        figures.sigterm_restarts,
        figures.sigkill_restarts,
        figures.checks,
        figures.messages_acknowledged,
        figures.messages_checked,
        figures.offsets_checked,
        figures.metadata_checkpoint_starts,
        figures.partition_checkpoints,
        figures.messages_retired,
        started.elapsed()
    );
    if figures.downs_of_metadata_primary + figures.downs_of_partition_primary + figures.downs_of_backup + figures.whole_cluster_restarts > 0 {
        eprintln!(
            "histories cluster figures: nodes taken down {} (the metadata primary {}, a partition primary {}, a backup of every group {}; \
             {} of them while a step ran), \
             whole-cluster restarts {}, steps run with a node down {}, steps of unknown outcome {} (proved applied by the SDK {}, \
             found applied {}, found not applied {}), message counts that matched only after a wait {}, \
             partition directories that appeared only after a wait {}",
            figures.downs_of_metadata_primary + figures.downs_of_partition_primary + figures.downs_of_backup,
            figures.downs_of_metadata_primary,
            figures.downs_of_partition_primary,
            figures.downs_of_backup,
            figures.in_flight_signals,
            figures.whole_cluster_restarts,
            figures.steps_with_a_node_down,
            figures.unknown_outcomes,
            figures.unknown_proved_applied,
            figures.unknown_found_applied,
            figures.unknown_found_not_applied,
            figures.lagging_counts,
            figures.lagging_directories,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_histories_agree_with_the_model_across_restarts() {
    let knobs = Knobs { histories: "DURABILITY_HISTORIES", steps: "DURABILITY_HISTORY_STEPS", first: "DURABILITY_HISTORY_FIRST" };
    let test = "seeded_histories_agree_with_the_model_across_restarts";
    let figures = seeded_histories(test, &knobs, 48, generate).await;
    assert!((figures.sigkill_restarts > 0 && figures.sigterm_restarts > 0) || figures.histories < 4, "both restart kinds ran");
}

/// The environment variables of one seeded-histories test.
struct Knobs {
    histories: &'static str,
    steps: &'static str,
    first: &'static str,
}

/// Runs the seed's histories `first..first + histories` drawn by `generate`; the first that
/// fails is shrunk and the test panics with it. The figures of a passing run.
async fn seeded_histories(
    test: &str,
    knobs: &Knobs,
    default_histories: u64,
    generate: fn(&mut StdRng, usize, bool) -> History,
) -> Figures {
    let (seed, _guard) = seed(test);
    let histories = knob(knobs.histories, default_histories);
    let steps = knob(knobs.steps, 30) as usize;
    let first = knob(knobs.first, 0);
    let deletes = knob("DURABILITY_HISTORY_DELETES", 1) != 0;
    let budget = Duration::from_secs(knob("DURABILITY_SHRINK_SECS", 180));
    let started = Instant::now();
    let mut figures = Figures::default();
    for index in first..first + histories {
        let history = generate(&mut rng(seed, index + 1), steps, deletes);
        let Err((failure, log)) = run_history(&history, &mut figures).await else { continue };
        eprintln!(
            "histories: history {index} of seed {seed} failed: {}\n  {}\nshrinking (budget {budget:?}) ...",
            failure.kind,
            failure.detail
        );
        let shrunk = shrink(&history, failure, log, budget).await;
        print_figures(&figures, started);
        panic!(
            "history {index} of DURABILITY_SEED={seed} fails: {kind}\n{detail}\n\n\
             server: {config}\n\
             shortest history found ({n} of {m} steps; {runs} reruns in {elapsed:.1?}{cut}):\n{list}\n\
             replay: DURABILITY_SEED={seed} {first_knob}={index} {histories_knob}=1 {steps_knob}={steps} \
             cargo nextest run --workspace -E 'binary(durability) & test(/{test}/)' --no-capture\n\n\
             server log of the shortest history (tail):\n{log}",
            kind = shrunk.failure.kind,
            detail = shrunk.failure.detail,
            config = shrunk.history.config,
            n = shrunk.history.steps.len(),
            m = history.steps.len(),
            runs = shrunk.runs,
            elapsed = shrunk.elapsed,
            cut = if shrunk.out_of_time { "; shrinking stopped at DURABILITY_SHRINK_SECS" } else { "" },
            list = render(&shrunk.history),
            log = shrunk.log,
            first_knob = knobs.first,
            histories_knob = knobs.histories,
            steps_knob = knobs.steps,
        );
    }
    print_figures(&figures, started);
    assert!(figures.messages_acknowledged > 0, "no send was acknowledged in {histories} histories");
    figures
}

/// The checker and the shrinker are not vacuous: a history whose partition files are wiped
/// between a SIGKILL and the restart (what a server that lost acknowledged writes would show)
/// fails with "partition content differs", and shrinks to the few steps that write a message
/// and wipe it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_checker_catches_lost_messages_and_shrinks_the_history() {
    let test = "the_history_checker_catches_lost_messages_and_shrinks_the_history";
    let (seed, _guard) = seed(test);
    let mut rng = rng(seed, 0);
    // No deletes: the wipe must be the only way to lose a message here.
    let mut history = generate(&mut rng, 8, false);
    history.steps.splice(
        0..0,
        [
            Step::CreateStream { s: 0 },
            Step::CreateTopic { at: At { s: 0, t: 0, by_id: false }, partitions: 1 },
            Step::Send { at: At { s: 0, t: 0, by_id: true }, p: 0, messages: vec![(1u128 << 64, b"kept?".to_vec())] },
        ],
    );
    history.steps.push(Step::WipePartitionsAfterKill);
    history.steps.push(Step::Restart { kill: false });
    let mut figures = Figures::default();
    let (failure, log) = run_history(&history, &mut figures).await.expect_err("the wiped history must fail");
    assert_eq!(failure.kind, "partition content differs", "{failure:?}\n{log}");
    let shrunk = shrink(&history, failure, log, Duration::from_secs(120)).await;
    let list = render(&shrunk.history);
    eprintln!("histories self-test: shrunk {} -> {} steps in {} reruns:\n{list}", history.steps.len(), shrunk.history.steps.len(), shrunk.runs);
    assert!(!shrunk.out_of_time, "shrinking took longer than its budget");
    let steps = &shrunk.history.steps;
    assert_eq!(steps.last(), Some(&Step::WipePartitionsAfterKill), "the shrunk history ends with the wipe:\n{list}");
    assert!(steps.iter().any(|s| matches!(s, Step::Send { .. })), "the shrunk history keeps a send:\n{list}");
    assert!(steps.len() <= 5, "shrunk to at most create stream, create topic, (create partitions,) send, wipe:\n{list}");
}
