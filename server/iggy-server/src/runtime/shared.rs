//! What the node's parts share on shard 0: the configuration, the metadata model, the partition
//! groups by key, and per-session activity; and the disk effects of committed metadata ops
//! (partitions opened, deleted, reconciled at start). Everything here lives on one compio runtime
//! thread, so plain `RefCell`s suffice: no borrow is held across an `.await`.

use crate::config::Config;
use crate::consensus::group::Durability;
use crate::runtime::partition::{PartitionHandle, PartitionInfo, Traffic};
use crate::runtime::reconcile::DiskAction;
use iggy_metadata::{Effect, Metadata};
use iggy_storage::DataDir;
use iggy_storage::partition_log::LogConfig;
use iggy_storage::revision::Discarded;
use iggy_vsr::codec::log_headers_max;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

pub use iggy_metadata::PartitionKey;

/// A partition the node serves, with the figures replies report without asking its task.
pub struct PartitionEntry {
    pub handle: PartitionHandle,
    /// The incarnation the group runs (a transferred metadata checkpoint may name another).
    pub incarnation: u64,
}

/// State shared by the metadata machine, the partition groups and the connections.
pub struct Shared {
    pub config: Config,
    pub data: DataDir,
    pub durability: Durability,
    pub replica_id: u8,
    pub metadata: RefCell<Metadata>,
    pub partitions: RefCell<HashMap<PartitionKey, PartitionEntry>>,
    pub started_at: std::time::Instant,
    /// The wall-clock time of `started_at` (microseconds since the epoch), read once: stats
    /// report it as the process's start time.
    pub started_at_micros: u64,
    /// The shard threads partitions run on.
    pub shards: crate::runtime::shard::Shards,
    /// The threads password checks and hashes run on, off the shard threads.
    pub offload: crate::runtime::offload::Offload,
    /// The sessions this node's connections bind (`SessionsHere`).
    pub sessions_here: RefCell<SessionsHere>,
    /// The ports the transports listen on.
    pub listening: ListeningPorts,
    /// The traffic of deleted partitions whose topic lives on, by (stream, topic) with the
    /// topic's `created_at` (a topic recreated under the same ids starts from zero), so a
    /// topic's counters never go down when one of its partitions goes.
    pub retired_traffic: RefCell<HashMap<(u32, u32), (u64, Traffic)>>,
    /// Partitions whose copy here could not open (refused, logged), with the incarnation: not
    /// served until the operator repairs them and restarts the node.
    pub unopenable: RefCell<HashMap<PartitionKey, u64>>,
    /// Partitions not opened because this process was out of file descriptors (logged once),
    /// with the incarnation: not served yet (requests wait, then 58), their directories left
    /// untouched, and opened again by the maintenance pass once descriptors free up
    /// (`retry_deferred_opens`).
    pub awaiting_descriptors: RefCell<HashMap<PartitionKey, u64>>,
    /// Partition opens in flight, with the incarnation: the descriptors each will take are
    /// counted before another open starts.
    pub opens_now: RefCell<HashMap<PartitionKey, u64>>,
    /// Partitions an op opened whose directory was gone while their namespace published that
    /// incarnation or a later one, with the refusal: judged once the metadata is current
    /// (`runtime/maintenance.rs`), an error only if the incarnation is still live then.
    pub gone_partitions: RefCell<Vec<(PartitionKey, u64, String)>>,
    /// The replica bus and the groups' part in it, in a cluster; `None` standalone.
    pub plane: Option<crate::consensus::plane::ReplicaPlane>,
    /// What opening a journal damaged in the middle does: peers repair a cluster node's; a
    /// standalone node's is refused, unless started with `--cut-damaged-journals`.
    pub middle_damage: crate::consensus::wal::MiddleDamage,
    /// As the metadata primary: which replicas reported which ended sessions retired on every
    /// partition copy they host (peers' reports arrive through the metadata group, this
    /// node's own from the retirement pass, `runtime/maintenance.rs`, which releases them).
    pub retirement: RefCell<iggy_metadata::retirement::RetirementEvidence>,
    /// The clock this node stamps the messages it is sent with (its wall clock moved by
    /// `cluster_clock::stamp_offset`, kept by the maintenance pass). Shared with the
    /// partitions' groups, which stamp the batches they prepare, and the HTTP sessions, whose
    /// access tokens it dates and judges.
    pub stamp_clock: crate::runtime::clock::StampClock,
}

/// A committed op's disk effect with what it reads from its topic as of its op (see
/// [`Shared::plan_effect`]).
pub struct PlannedEffect {
    effect: Effect,
    /// The effect's topic, when the model held it.
    topic: Option<TopicFacts>,
}

impl PlannedEffect {
    /// Whether this is a partition open (those of one op run side by side).
    pub fn opens(&self) -> bool {
        matches!(self.effect, Effect::OpenPartition { .. })
    }
}

/// What a partition's open or delete reads from its topic.
#[derive(Debug, Clone, Copy)]
struct TopicFacts {
    /// Whether messages and consumer offsets are fsynced before they are acknowledged.
    persisted: (bool, bool),
    segment_size: u64,
    created_at: u64,
}

/// The port each running transport listens on, once bound (a configured port 0 binds an
/// ephemeral one): what cluster metadata advertises.
#[derive(Debug, Default)]
pub struct ListeningPorts(RefCell<std::collections::BTreeMap<&'static str, u16>>);

impl ListeningPorts {
    pub fn set(&self, transport: &'static str, port: u16) {
        self.0.borrow_mut().insert(transport, port);
    }

    pub fn get(&self, transport: &str) -> Option<u16> {
        self.0.borrow().get(transport).copied()
    }
}

/// Whether a session is in use, for its lease.
#[derive(Debug, Clone, Copy)]
pub struct SessionActivity {
    pub bound: u32,
    pub since: std::time::Instant,
    /// An HTTP session let go by this node's sweep when the last token of it this node saw
    /// expired: no token it knows of is valid, so only the lease is left (see
    /// [`SessionsHere::lease_pass`]).
    pub tokens_expired: bool,
}

impl SessionActivity {
    fn idle_since(since: std::time::Instant) -> Self {
        Self {
            bound: 0,
            since,
            tokens_expired: false,
        }
    }
}

/// The top 32 bits of every HTTP session's client id ("HTTP"): the node draws an HTTP
/// session's id (a binary client draws its own, and a random one carries this tag once in
/// 2^32 draws), so a lease pass can tell a session whose tokens may outlive every node's
/// memory of them (a restart, a failover) from one of a connection.
const HTTP_CLIENT_TAG: u128 = 0x4854_5450;

/// A new client id for an HTTP login's session: random, tagged as HTTP's, never 0.
pub fn new_http_client_id() -> u128 {
    (rand::random::<u128>() >> 32) | (HTTP_CLIENT_TAG << 96) | 1
}

/// Whether `client` is an HTTP session's id ([`new_http_client_id`]).
pub fn is_http_client(client: u128) -> bool {
    client >> 96 == HTTP_CLIENT_TAG
}

/// What this node knows of sessions beyond the metadata model: the connection each session was
/// last bound on (its public client id), and per session the connections bound to it now and
/// when the last one went away (what its lease reads).
#[derive(Debug, Default)]
pub struct SessionsHere {
    connections: HashMap<u128, u32>,
    activity: HashMap<u128, SessionActivity>,
    /// Per session, the latest request this node took: its number and what it asked.
    latest_requests: HashMap<u128, RequestIdentity>,
    /// Sessions ended by their client's Logout, with when this node applied it: the logout
    /// may not be answered yet (a fence waits, `service::dispatch::fenced`).
    logged_out: HashMap<u128, (u64, std::time::Instant)>,
}

/// What a request asked, as far as its header tells: a different request under a number
/// already taken would otherwise be answered with the first one's cached reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestIdentity {
    pub request: u64,
    /// The client's random identity of a metadata request (0 for partition requests).
    pub checksum: u128,
    pub operation: u8,
}

impl SessionsHere {
    /// A connection bound itself to `client`'s session (`connection`: its id, when it has one
    /// to report as the member id).
    pub fn bound(&mut self, client: u128, connection: Option<u32>) {
        let entry = self
            .activity
            .entry(client)
            .or_insert(SessionActivity::idle_since(std::time::Instant::now()));
        entry.bound += 1;
        entry.tokens_expired = false;
        if let Some(connection) = connection {
            self.connections.insert(client, connection);
        }
    }

    /// A connection bound to `client`'s session closed or bound elsewhere.
    pub fn unbound(&mut self, client: u128) {
        if let Some(entry) = self.activity.get_mut(&client) {
            entry.bound = entry.bound.saturating_sub(1);
            entry.since = std::time::Instant::now();
        }
    }

    /// Every token of HTTP session `client` that this node saw expired: unbound, with only
    /// the lease left.
    pub fn tokens_expired(&mut self, client: u128) {
        self.unbound(client);
        if let Some(entry) = self.activity.get_mut(&client) {
            entry.tokens_expired = true;
        }
    }

    /// Takes `client`'s request `identity`, or refuses it when this node took a different
    /// request (another checksum or operation) under the same number: only a resend of the
    /// same request may be answered from the client table. Numbers below the latest go on
    /// (the client table answers them).
    pub fn take_request(&mut self, client: u128, identity: RequestIdentity) -> Result<(), ()> {
        match self.latest_requests.get(&client) {
            Some(seen) if seen.request == identity.request && *seen != identity => Err(()),
            Some(seen) if seen.request >= identity.request => Ok(()),
            _ => {
                self.latest_requests.insert(client, identity);
                Ok(())
            }
        }
    }

    /// The connection `client`'s session was last bound on here, 0 for none.
    pub fn member_id(&self, client: u128) -> u32 {
        self.connections.get(&client).copied().unwrap_or(0)
    }

    /// The clients with a connection bound here now.
    pub fn bound_here(&self) -> impl Iterator<Item = u128> + '_ {
        self.activity
            .iter()
            .filter(|(_, activity)| activity.bound > 0)
            .map(|(client, _)| *client)
    }

    /// Marks each reported (client, session) active at `now` when it is the client's live
    /// session (`live_session`); a report of an ended or older session renews nothing.
    pub fn renew_held(
        &mut self,
        live_session: impl Fn(u128) -> Option<u64>,
        reported: &[(u128, u64)],
        now: std::time::Instant,
    ) {
        renew_held_sessions(&mut self.activity, live_session, reported, now);
    }

    /// One lease pass over the `live` sessions of the model: as the metadata primary, those of
    /// them idle (no connection bound here, none reported elsewhere) for `lease` by `now`,
    /// which the caller ends; on any other replica none, and every idle session's time starts
    /// again (a replica that becomes primary gives each a full lease). An HTTP session is held
    /// `token_lifetime` longer unless this node saw its tokens expire: a token of it that the
    /// node which saw it no longer remembers (restarted, died, or was the previous primary) is
    /// valid for at most that long after that node last held it, and the official HTTP client
    /// never signs in again by itself. First it forgets the sessions that ended (not live, no
    /// connection bound here): a logout, another node's expiry or a retirement ends them
    /// without passing here, and each would otherwise keep its entries for good.
    pub fn lease_pass(
        &mut self,
        live: &[u128],
        primary: bool,
        (lease, token_lifetime): (std::time::Duration, std::time::Duration),
        now: std::time::Instant,
    ) -> Vec<u128> {
        let live_set: HashSet<u128> = live.iter().copied().collect();
        self.activity
            .retain(|client, activity| activity.bound > 0 || live_set.contains(client));
        let activity = &self.activity;
        self.connections
            .retain(|client, _| live_set.contains(client) || activity.contains_key(client));
        self.latest_requests
            .retain(|client, _| live_set.contains(client) || activity.contains_key(client));
        if !primary {
            for activity in self.activity.values_mut() {
                if activity.bound == 0 {
                    activity.since = now;
                }
            }
            return Vec::new();
        }
        live.iter()
            .copied()
            .filter(|client| {
                // A session restored from the journal counts as idle from the node's start.
                let entry = self
                    .activity
                    .entry(*client)
                    .or_insert(SessionActivity::idle_since(now));
                let held = if is_http_client(*client) && !entry.tokens_expired {
                    lease + token_lifetime
                } else {
                    lease
                };
                entry.bound == 0 && now.duration_since(entry.since) >= held
            })
            .collect()
    }

    /// `client`'s session `session` ended by its Logout, applied here at `now`; entries older
    /// than `kept` go.
    pub fn logged_out(
        &mut self,
        client: u128,
        session: u64,
        now: std::time::Instant,
        kept: std::time::Duration,
    ) {
        self.logged_out
            .retain(|_, (_, at)| now.duration_since(*at) < kept);
        self.logged_out.insert(client, (session, now));
    }

    /// Whether `client`'s session `session` ended by a Logout applied here less than `kept`
    /// before `now`: its answer may still be on its way to the client.
    pub fn logging_out(
        &self,
        client: u128,
        session: u64,
        now: std::time::Instant,
        kept: std::time::Duration,
    ) -> bool {
        self.logged_out
            .get(&client)
            .is_some_and(|&(ended, at)| ended == session && now.duration_since(at) < kept)
    }

    /// `client`'s session ended by its lease.
    pub fn expired(&mut self, client: u128) {
        self.activity.remove(&client);
        self.latest_requests.remove(&client);
    }

    /// Sessions with an entry here, for the tests.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.activity.len().max(self.connections.len())
    }
}

impl Shared {
    /// The time a message sent now is stamped with, and a metadata op (a token's expiry counts
    /// from it) or a token login is judged by: this node's wall clock, moved by `stamp_clock`.
    pub fn stamp_now(&self) -> u64 {
        self.stamp_clock.now_micros()
    }

    /// Replicas in every consensus group: the roster's size in a cluster, else 1.
    pub fn replica_count(&self) -> u8 {
        self.plane.as_ref().map_or(1, |plane| plane.replica_count())
    }

    /// A group checkpoints once its journal holds this many bytes (a view change carries no
    /// bodies, so a cluster's journals are bounded like a single node's).
    pub fn checkpoint_journal_bytes(&self) -> u64 {
        self.config.system.checkpoint_journal_bytes
    }

    /// ...or this many ops. In a cluster a view change names every op above a group's
    /// checkpoint in one frame, 64 bytes a header (`iggy_vsr::codec::log_headers_max`: about a
    /// million in a 64 MiB `limits.max_frame_size`); a group checkpoints at half of that at
    /// most, so the ops that arrive while its checkpoint waits for a slower replica still fit.
    pub fn checkpoint_journal_ops(&self) -> usize {
        let configured = self.config.system.checkpoint_journal_ops.max(1);
        match self.plane {
            Some(_) => {
                let headers_max = log_headers_max(self.config.limits.max_frame_size) / 2;
                configured.min(usize::try_from(headers_max).unwrap_or(usize::MAX).max(1))
            }
            None => configured,
        }
    }

    /// Past this journal size a group (metadata or partition) checkpoints without waiting for a replica that
    /// stays behind (which then catches up by state transfer): four times the policy, the ops
    /// kept well within what one view-change frame names.
    pub fn checkpoint_laggard_bound(&self) -> iggy_vsr::group::JournalBound {
        let ops = self.checkpoint_journal_ops().saturating_mul(4);
        let ops = match self.plane {
            Some(_) => {
                let headers_max = log_headers_max(self.config.limits.max_frame_size) * 3 / 4;
                ops.min(usize::try_from(headers_max).unwrap_or(usize::MAX).max(1))
            }
            None => ops,
        };
        iggy_vsr::group::JournalBound {
            bytes: self.checkpoint_journal_bytes().saturating_mul(4),
            ops,
        }
    }

    /// The metadata group's replica configuration.
    pub fn vsr_config(&self) -> iggy_vsr::Config {
        let mut config = iggy_vsr::Config::new(1, 0);
        config.clients_table_max = self.config.limits.clients_table_max;
        config.pipeline_max = 256;
        match &self.plane {
            Some(plane) => plane.vsr_config(config),
            None => config,
        }
    }

    /// A partition group's replica configuration: its client table holds writers.
    pub fn partition_vsr_config(&self) -> iggy_vsr::Config {
        let mut config = self.vsr_config();
        config.clients_table_max = self.config.limits.dedup_clients_max;
        config
    }

    fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_size: self.config.system.segment_size,
            writeback_bytes: self.config.system.segment_writeback_bytes,
            refuse_corrupt_tail: self.middle_damage == crate::consensus::wal::MiddleDamage::Refuse,
        }
    }

    pub fn partition_dir(&self, key: PartitionKey) -> PathBuf {
        self.data.partition_dir(key.0, key.1, key.2)
    }

    /// Whether this node's copy of `key` at `incarnation` could not open (see `unopenable`).
    pub fn unopenable(&self, key: PartitionKey, incarnation: u64) -> bool {
        self.unopenable.borrow().get(&key) == Some(&incarnation)
    }

    /// The incarnation of partition `key` the model holds live, if any.
    pub fn live_incarnation(&self, key: PartitionKey) -> Option<u64> {
        let metadata = self.metadata.borrow();
        metadata
            .streams
            .get(&key.0)
            .and_then(|s| s.topics.get(&key.1))
            .and_then(|t| t.partitions.get(&key.2))
            .map(|p| p.incarnation)
    }

    /// Whether the model holds partition `key` live while this node has not opened that
    /// incarnation yet and its copy did not fail to open: the metadata op's effects are
    /// opening it.
    pub fn opening(&self, key: PartitionKey) -> bool {
        self.live_incarnation(key).is_some_and(|live| {
            !self.unopenable(key, live)
                && self
                    .partitions
                    .borrow()
                    .get(&key)
                    .map(|entry| entry.incarnation)
                    != Some(live)
        })
    }

    /// The running group of partition `key`, when it runs the incarnation the model holds
    /// live: the metadata group's effects run behind its model (a partition deleted and
    /// created again under the same ids may still run its deleted incarnation for a moment,
    /// which no request must reach).
    pub fn partition(&self, key: PartitionKey) -> Option<PartitionHandle> {
        let live = self.live_incarnation(key);
        self.partitions
            .borrow()
            .get(&key)
            .filter(|entry| Some(entry.incarnation) == live)
            .map(|entry| entry.handle.clone())
    }

    pub fn stats(&self, key: PartitionKey) -> PartitionInfo {
        self.partitions
            .borrow()
            .get(&key)
            .map(|entry| entry.handle.stats.get())
            .unwrap_or_default()
    }

    /// A connection bound itself to `client`'s session (`connection`: see `SessionsHere::bound`).
    pub fn session_bound(&self, client: u128, connection: Option<u32>) {
        self.sessions_here.borrow_mut().bound(client, connection);
    }

    /// A connection bound to `client`'s session closed or bound elsewhere.
    pub fn session_unbound(&self, client: u128) {
        self.sessions_here.borrow_mut().unbound(client);
    }

    /// Every token of HTTP session `client` this node saw expired (it held the session bound
    /// for them).
    pub fn session_tokens_expired(&self, client: u128) {
        self.sessions_here.borrow_mut().tokens_expired(client);
    }

    /// Another node reports these (client, session) pairs bound to its connections: each
    /// session still live here counts as active now, so the metadata primary's lease (which
    /// only sees this node's own connections) does not end it. A pair naming an older session
    /// of its client is ignored.
    pub fn sessions_held_elsewhere(&self, sessions: &[(u128, u64)]) {
        let metadata = self.metadata.borrow();
        self.sessions_here.borrow_mut().renew_held(
            |client| metadata.sessions.get(client).map(|live| live.session),
            sessions,
            std::time::Instant::now(),
        );
    }

    /// The sessions bound to a connection of this node, as (client, session).
    pub fn sessions_bound_here(&self) -> Vec<(u128, u64)> {
        let metadata = self.metadata.borrow();
        self.sessions_here
            .borrow()
            .bound_here()
            .filter_map(|client| {
                let live = metadata.sessions.get(client)?;
                Some((client, live.session))
            })
            .collect()
    }

    /// Runs a committed op's effect on disk, reading what it needs from the model now.
    pub async fn run_effect(&self, effect: Effect) {
        self.run_planned(self.plan_effect(effect)).await
    }

    /// `effect` with what it reads from the model, read now: as its op applies, so that the
    /// effect may run later (the metadata group's effects task, `runtime/metadata_machine.rs`)
    /// as it would have then, whatever later ops did to its topic (deleted it, or created
    /// another under the same ids).
    pub fn plan_effect(&self, effect: Effect) -> PlannedEffect {
        let topic = match &effect {
            Effect::OpenPartition { stream, topic, .. }
            | Effect::DeletePartition { stream, topic, .. } => {
                use iggy_metadata::TopicDurability::Persisted;
                let metadata = self.metadata.borrow();
                let topic = metadata
                    .streams
                    .get(stream)
                    .and_then(|s| s.topics.get(topic));
                topic.map(|t| TopicFacts {
                    persisted: (
                        t.durability == Persisted,
                        t.consumer_offset_durability == Persisted,
                    ),
                    segment_size: t.segment_size,
                    created_at: t.created_at,
                })
            }
            Effect::DeleteGroupOffsets { .. } | Effect::ReleaseSessionSlots { .. } => None,
        };
        PlannedEffect { effect, topic }
    }

    /// Runs a committed op's effect on disk, as [`Self::plan_effect`] planned it.
    pub async fn run_planned(&self, planned: PlannedEffect) {
        let PlannedEffect {
            effect,
            topic: facts,
        } = planned;
        match effect {
            // Released by the metadata group itself (`StateMachine::take_retired`).
            Effect::ReleaseSessionSlots { .. } => {}
            Effect::OpenPartition {
                stream,
                topic,
                partition,
                incarnation,
            } => {
                let key = (stream, topic, partition);
                // Being opened already (a deferred open's retry meeting a reconcile's open).
                if self.opens_now.borrow().get(&key) == Some(&incarnation) {
                    return tracing::debug!(
                        "partition {key:?}: incarnation {incarnation} is being opened already"
                    );
                }
                #[cfg(debug_assertions)]
                slow_partition_open_on_purpose().await;
                let namespace = self.data.partition_initialization_dir(
                    &iggy_storage::data_dir::partition_namespace(stream, topic, partition),
                );
                let incarnation_record =
                    (namespace, self.data.discarded_partitions_dir(), incarnation);
                let dir = self.partition_dir(key);
                // A directory naming a newer incarnation was created by a later committed op
                // that this node applied before: this incarnation's delete follows in the ops
                // it re-applies on its way back (ids are reused), so there is nothing to open.
                let record = dir.join(iggy_storage::revision::CREATED_REVISION);
                if let Ok(Some(found)) = iggy_storage::records::read_checked_u64(&record).await
                    && found > incarnation
                {
                    return tracing::info!(
                        "partition {}: incarnation {incarnation} not opened: the directory \
                         holds {found}, created by a later op",
                        dir.display()
                    );
                }
                let (policies, segment_size) =
                    facts.map_or(((false, false), 0), |t| (t.persisted, t.segment_size));
                let mut log_config = self.log_config();
                if segment_size > 0 {
                    log_config.segment_size = segment_size;
                }
                let (vsr, durability) = (self.partition_vsr_config(), self.durability);
                let peers = self
                    .plane
                    .as_ref()
                    .map(|plane| plane.partition_peers(key, incarnation));
                let middle_damage = self.middle_damage;
                let clock = self.stamp_clock.clone();
                let limits = (
                    self.checkpoint_journal_bytes(),
                    self.checkpoint_journal_ops(),
                    self.checkpoint_laggard_bound(),
                );
                // A file open that fails on the way stops the node (fail-stop storage): an open
                // without descriptors for it and some headroom waits for the opens in flight,
                // and with none in flight is deferred, its directory untouched.
                if let Err(why) = self.descriptors_for_open().await {
                    return self.defer_open(key, incarnation, &dir, &why);
                }
                self.opens_now.borrow_mut().insert(key, incarnation);
                let shard = self.shards.owner(key);
                let task_dir = dir.clone();
                // The partition's log, journal and group live on its owning shard.
                let opened = self
                    .shards
                    .run_on(shard, move || async move {
                        PartitionHandle::open(
                            &task_dir,
                            partition,
                            incarnation_record,
                            log_config,
                            vsr,
                            durability,
                            policies,
                            limits,
                            (peers, middle_damage),
                            clock,
                        )
                        .await
                    })
                    .await;
                self.opens_now.borrow_mut().remove(&key);
                let opened = opened.unwrap_or_else(|| {
                    Err(iggy_storage::StorageError::Refused(format!(
                        "shard {shard} is not running"
                    )))
                });
                match opened {
                    Ok(handle) => {
                        self.unopenable.borrow_mut().remove(&key);
                        if self
                            .awaiting_descriptors
                            .borrow_mut()
                            .remove(&key)
                            .is_some()
                        {
                            tracing::info!(
                                "partition {}: opened (incarnation {incarnation}), after waiting \
                                 for file descriptors",
                                dir.display()
                            );
                        }
                        self.partitions.borrow_mut().insert(
                            key,
                            PartitionEntry {
                                handle,
                                incarnation,
                            },
                        );
                    }
                    // Gone, though this incarnation or a later one was initialized here: in
                    // a cluster, a delete this node applied before a restart removed it (a
                    // replica of a larger group applies the ops after its checkpoint again on
                    // its way back, that delete among them), or its files were lost; which one
                    // shows once the metadata caught up. A node alone replays its whole journal
                    // into the model before it opens anything, so there it is a loss at once.
                    Err(error @ iggy_storage::StorageError::PartitionDirMissing(_))
                        if self.replica_count() > 1 =>
                    {
                        tracing::info!(
                            "partition {}: incarnation {incarnation} not opened, its directory \
                             is gone: judged once this node's metadata is current (a later op \
                             deleted it, or it is reported)",
                            dir.display()
                        );
                        self.unopenable.borrow_mut().insert(key, incarnation);
                        let why = format!("partition {}: cannot open: {error}", dir.display());
                        self.gone_partitions
                            .borrow_mut()
                            .push((key, incarnation, why));
                    }
                    // Out of descriptors despite the headroom (taken meanwhile by connections):
                    // nothing was served from it, so it waits like one deferred before its open.
                    Err(iggy_storage::StorageError::Io { error, .. })
                        if crate::runtime::host::out_of_descriptors(&error) =>
                    {
                        self.defer_open(key, incarnation, &dir, &Starved::Exhausted(error));
                    }
                    Err(error) => {
                        tracing::error!("partition {}: cannot open: {error}", dir.display());
                        self.unopenable.borrow_mut().insert(key, incarnation);
                    }
                }
            }
            Effect::DeletePartition {
                stream,
                topic,
                partition,
                incarnation,
            } => {
                let key = (stream, topic, partition);
                // The group stops (its queued work done, its files closed) before its directory
                // goes: no checkpoint can be renamed into a path a later incarnation will own.
                self.stop_partition(key, facts.map(|t| t.created_at)).await;
                self.discard_partition_dir(key, incarnation, "deleted")
                    .await;
                self.prune_deleted_dirs(stream, Some(topic));
            }
            Effect::DeleteGroupOffsets {
                stream,
                topic,
                group,
                op,
            } => {
                let mut partitions: Vec<(PartitionKey, PartitionHandle)> = self
                    .partitions
                    .borrow()
                    .iter()
                    .filter(|(key, _)| (key.0, key.1) == (stream, topic))
                    .map(|(key, entry)| (*key, entry.handle.clone()))
                    .collect();
                partitions.sort_by_key(|(key, _)| *key);
                // The node's own client, numbered by the metadata op: a resubmission at start
                // is a duplicate the partition answers from its client table (and the write
                // names `op`, so one the table forgot is not applied twice either).
                let write = || iggy_partition::PartitionWrite::DeleteGroupOffsets {
                    group,
                    metadata_op: op,
                };
                use iggy_generated::errors::ErrorCode;
                for (key, handle) in partitions {
                    // A full pipeline refuses for a moment: wait for it rather than leave the
                    // offsets to a later group with the same id.
                    let mut attempts = 0;
                    loop {
                        let written = handle
                            .write(iggy_metadata::machine::SYSTEM_CLIENT, op, write())
                            .await;
                        match written {
                            Err(ErrorCode::TransientNotAccepted) if attempts < 1000 => {
                                attempts += 1;
                                compio::time::sleep(std::time::Duration::from_millis(5)).await;
                            }
                            // Already applied (a resubmission at start): nothing to do.
                            Ok(_) | Err(ErrorCode::RequestTooOld) => break,
                            // In a cluster the partition's primary (another node) submits it;
                            // if none does (it skipped this op, or the partition changed views
                            // past these retries), the primaries' sweep of orphaned group
                            // offsets (runtime::maintenance) deletes them.
                            Err(ErrorCode::NotPrimary) => break,
                            Err(error) => {
                                tracing::error!(
                                    "partition {key:?}: offsets of deleted consumer group {group} (op {op}) not deleted: {error:?}"
                                );
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Waits until a partition may open: within this node's descriptor budget
    /// (`host::partitions_fit`, counting the partitions running and the opens in flight, as
    /// the proposer of a create counts the model's) and with `host::OPEN_HEADROOM` descriptors
    /// free now (probed: connections, or the system's limit, may have taken them; then it
    /// waits for the opens in flight to finish). Why not, when it may not.
    async fn descriptors_for_open(&self) -> Result<(), Starved> {
        use crate::runtime::host;
        loop {
            let in_flight = self.opens_now.borrow().len() as u64;
            let running = self.partitions.borrow().len() as u64;
            let limit = host::open_files_limit();
            if !host::partitions_fit(running + in_flight + 1, limit) {
                return Err(Starved::Budget {
                    running: running + in_flight,
                    limit: limit.unwrap_or(0),
                });
            }
            match host::descriptors_free(self.data.root(), host::OPEN_HEADROOM) {
                Err(error) if host::out_of_descriptors(&error) => {
                    if in_flight == 0 {
                        return Err(Starved::Exhausted(error));
                    }
                    compio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                // Room, or a probe that failed otherwise: the open reports what is wrong.
                _ => return Ok(()),
            }
        }
    }

    /// Records that partition `key` at `incarnation` waits for descriptors, with an ERROR the
    /// first time (the maintenance pass retries it quietly).
    fn defer_open(
        &self,
        key: PartitionKey,
        incarnation: u64,
        dir: &std::path::Path,
        why: &Starved,
    ) {
        let before = self
            .awaiting_descriptors
            .borrow_mut()
            .insert(key, incarnation);
        if before == Some(incarnation) {
            return tracing::debug!(
                "partition {}: still waiting for file descriptors: {why}",
                dir.display()
            );
        }
        tracing::error!(
            "partition {}: not opened (incarnation {incarnation}): {why}. It is not served on \
             this node until it opens (requests are answered as not ready, 58, and its peers \
             keep it); the open is retried every maintenance pass and its copy catches up \
             from its peers then",
            dir.display(),
        );
    }

    /// Opens again the partitions that waited for descriptors and still live as the same
    /// incarnation, one at a time; stops at the first that still finds no room.
    pub async fn retry_deferred_opens(&self) {
        let mut waiting: Vec<(PartitionKey, u64)> = self
            .awaiting_descriptors
            .borrow()
            .iter()
            .map(|(key, incarnation)| (*key, *incarnation))
            .collect();
        waiting.sort_unstable();
        for (key, incarnation) in waiting {
            let running = self.partitions.borrow().get(&key).map(|e| e.incarnation);
            if self.live_incarnation(key) != Some(incarnation) || running == Some(incarnation) {
                self.awaiting_descriptors.borrow_mut().remove(&key);
                continue;
            }
            self.open_partition(key, incarnation).await;
            if self.awaiting_descriptors.borrow().get(&key) == Some(&incarnation) {
                break;
            }
        }
    }

    /// Opens partition `key` as `incarnation` (the same effect as its create's).
    async fn open_partition(&self, key: PartitionKey, incarnation: u64) {
        self.run_effect(Effect::OpenPartition {
            stream: key.0,
            topic: key.1,
            partition: key.2,
            incarnation,
        })
        .await
    }

    /// Stops the group of partition `key`, if one runs: its queued work is done and its files
    /// closed when this returns. `topic_created_at` is its topic's, when the topic lives on.
    async fn stop_partition(&self, key: PartitionKey, topic_created_at: Option<u64>) {
        self.unopenable.borrow_mut().remove(&key);
        self.awaiting_descriptors.borrow_mut().remove(&key);
        let entry = self.partitions.borrow_mut().remove(&key);
        if let Some(entry) = entry {
            entry.handle.group.stop().await;
            self.retire_traffic(key, entry.handle.stats.traffic(), topic_created_at);
        }
    }

    /// Keeps a deleted partition's traffic for its topic's counters while the topic lives
    /// (`created_at`: the topic's, `None` when it went with the partition).
    fn retire_traffic(&self, key: PartitionKey, traffic: Traffic, created_at: Option<u64>) {
        let topic = (key.0, key.1);
        let mut retired = self.retired_traffic.borrow_mut();
        match created_at {
            Some(created_at) => {
                let entry = retired.entry(topic).or_default();
                if entry.0 != created_at {
                    *entry = (created_at, Traffic::default());
                }
                entry.1 += traffic;
            }
            // The topic went with it: its counters go too.
            None => {
                retired.remove(&topic);
            }
        }
    }

    /// Removes the directory of partition `key` if it names the deleted `incarnation`.
    async fn discard_partition_dir(&self, key: PartitionKey, incarnation: u64, why: &str) {
        let live = self.metadata.borrow().live_partitions().get(&key).copied();
        if live == Some(incarnation) {
            // Unreachable by construction (an effect names an incarnation the model dropped);
            // refusing costs nothing and guards the files.
            return tracing::error!(
                "partition {key:?}: refusing to discard live incarnation {incarnation}"
            );
        }
        let dir = self.partition_dir(key);
        let discarded = self.data.discarded_partitions_dir();
        match iggy_storage::revision::discard_partition_dir(&dir, &discarded, incarnation).await {
            Ok(Discarded::Removed) => tracing::info!(
                "partition {}: incarnation {incarnation} {why}, its directory removed",
                dir.display()
            ),
            Ok(Discarded::Absent) => {}
            // The later incarnation of these ids (see the open above): its files stay.
            Ok(Discarded::Kept { found: Some(found) }) if found > incarnation => tracing::info!(
                "partition {}: incarnation {incarnation} {why}; the directory holds the later {found}",
                dir.display()
            ),
            Ok(Discarded::Kept { found }) => tracing::warn!(
                "partition {}: incarnation {incarnation} {why}, but the directory names {found:?}; left in place",
                dir.display()
            ),
            Err(error) => {
                tracing::error!("partition {}: cannot delete: {error}", dir.display())
            }
        }
    }

    /// Removes the directories of `topic` (none: only the stream's) and of `stream` that no
    /// live partition needs any more (`DataDir::prune_deleted`). A topic or stream with a live
    /// partition keeps them: that partition's open may be under way on a shard (a deferred
    /// one), and an open of a partition that is not live yet comes in a later op's effects,
    /// which run after this one's.
    fn prune_deleted_dirs(&self, stream: u32, topic: Option<u32>) {
        let (topic, stream_gone) = {
            let metadata = self.metadata.borrow();
            let topics = metadata.streams.get(&stream).map(|s| &s.topics);
            let live = |topic: &iggy_metadata::model::Topic| !topic.partitions.is_empty();
            let gone = |topic: &u32| !topics.and_then(|t| t.get(topic)).is_some_and(live);
            (
                topic.filter(gone),
                !topics.is_some_and(|topics| topics.values().any(live)),
            )
        };
        if topic.is_none() && !stream_gone {
            return;
        }
        if let Err(error) = self.data.prune_deleted(stream, topic, stream_gone) {
            // An empty directory left is harmless: the next start tries again.
            tracing::warn!(
                "stream {stream}: cannot remove a deleted topic's or stream's directory: {error}"
            );
        }
    }

    /// Every topic and stream directory no live partition needs (see `prune_deleted_dirs`).
    fn prune_all_deleted_dirs(&self) {
        for (stream, topic) in self.data.topic_dirs_on_disk() {
            self.prune_deleted_dirs(stream, topic);
        }
    }

    /// After the metadata journal was replayed into the model (no disk effect run), brings the
    /// partition directories in line with it once; see `reconcile` for the rules.
    pub async fn reconcile_partitions(&self, deleted: &HashSet<(PartitionKey, u64)>) {
        let on_disk = self.partition_revisions_on_disk().await;
        let (live, commit) = {
            let metadata = self.metadata.borrow();
            (metadata.live_partitions(), metadata.commit)
        };
        for action in crate::runtime::reconcile::plan(&live, deleted, &on_disk) {
            match action {
                DiskAction::Open { key, incarnation } => {
                    self.open_partition(key, incarnation).await
                }
                DiskAction::Discard { key, revision } => {
                    self.discard_partition_dir(key, revision, "deleted by a replayed op")
                        .await
                }
                DiskAction::Keep { key, found } => {
                    let newer = found.is_some_and(|revision| revision >> 20 > commit);
                    if newer && self.plane.is_some() {
                        // A rejoining replica commits its metadata only once its group
                        // installed the current view: the op that created it comes then.
                        tracing::info!(
                            "{}: created by an op this replica has not committed yet; it opens once the replica has caught up",
                            self.partition_dir(key).display()
                        );
                        continue;
                    }
                    tracing::warn!(
                        "{}: not in the metadata ({}); its messages are not served, its files are left in place",
                        self.partition_dir(key).display(),
                        if newer {
                            "it names an incarnation newer than any committed op"
                        } else {
                            "the ops that created it are missing: a damaged metadata journal?"
                        }
                    );
                }
            }
        }
        self.prune_all_deleted_dirs();
    }
}

impl Shared {
    /// Every partition directory with the revision its `created.revision` names, after
    /// finishing the discards a crash interrupted.
    async fn partition_revisions_on_disk(&self) -> Vec<(PartitionKey, Option<u64>)> {
        match iggy_storage::revision::finish_discards(&self.data.discarded_partitions_dir()) {
            Ok(0) => {}
            Ok(finished) => tracing::info!(
                "finished removing {finished} partition directories a crash left half deleted"
            ),
            Err(error) => tracing::error!("cannot finish interrupted partition deletes: {error}"),
        }
        let mut on_disk = Vec::new();
        for (key, dir) in self.data.partition_dirs_on_disk() {
            let record = dir.join(iggy_storage::revision::CREATED_REVISION);
            let found = iggy_storage::records::read_checked_u64(&record)
                .await
                .unwrap_or_else(|error| {
                    // Never discarded on it: only a record that reads names a revision a
                    // committed delete can match (a live partition's open judges it again).
                    tracing::warn!("{}: unreadable: {error}", record.display());
                    None
                });
            on_disk.push((key, found));
        }
        on_disk
    }

    /// The model was replaced by a metadata checkpoint at `checkpoint_op` copied from a peer
    /// (state transfer): brings the running partitions and their directories in line with it,
    /// as a start would; see `reconcile::plan_after_transfer` for the rules.
    pub async fn reconcile_after_transfer(&self, checkpoint_op: u64) {
        let on_disk = self.partition_revisions_on_disk().await;
        let live = self.metadata.borrow().live_partitions();
        let running: std::collections::BTreeMap<PartitionKey, u64> = self
            .partitions
            .borrow()
            .iter()
            .map(|(key, entry)| (*key, entry.incarnation))
            .collect();
        use crate::runtime::reconcile::{TransferAction, plan_after_transfer};
        for action in plan_after_transfer(&live, checkpoint_op, &running, &on_disk) {
            match action {
                TransferAction::Stop { key, incarnation } => {
                    tracing::info!(
                        "partition {key:?}: incarnation {incarnation} is not in the transferred metadata (op {checkpoint_op}); stopped"
                    );
                    let created_at = self
                        .plan_effect(Effect::DeletePartition {
                            stream: key.0,
                            topic: key.1,
                            partition: key.2,
                            incarnation,
                        })
                        .topic
                        .map(|t| t.created_at);
                    self.stop_partition(key, created_at).await;
                }
                TransferAction::Discard { key, revision } => {
                    let why =
                        format!("deleted before the transferred metadata's op {checkpoint_op}");
                    self.discard_partition_dir(key, revision, &why).await
                }
                TransferAction::Open { key, incarnation } => {
                    self.open_partition(key, incarnation).await
                }
                TransferAction::Keep { key, found } => tracing::warn!(
                    "{}: not in the transferred metadata (op {checkpoint_op}), which does not prove it deleted (it names {found:?}); its files are left in place",
                    self.partition_dir(key).display()
                ),
            }
        }
        self.prune_all_deleted_dirs();
    }
}

/// Why a partition's open waits for file descriptors (`Shared::descriptors_for_open`).
#[derive(Debug)]
enum Starved {
    /// Another partition would take this node past its descriptor budget: `running`
    /// partitions run or are opening under an open-files limit of `limit`.
    Budget { running: u64, limit: u64 },
    /// Opening files failed for want of descriptors (EMFILE or ENFILE).
    Exhausted(std::io::Error),
}

impl std::fmt::Display for Starved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::runtime::host::DESCRIPTORS_PER_PARTITION as EACH;
        match self {
            Starved::Budget { running, limit } => write!(
                f,
                "this node has {running} partitions open or opening, and its open files \
                 limit of {limit} \
                 (ulimit -n; LimitNOFILE= under systemd) leaves room for {} (partitions may \
                 take half of it, {EACH} descriptors each: the other half keeps connections, \
                 segment rolls and checkpoints from running out, which would stop the node); \
                 raise the limit (on the running process too: prlimit --nofile) or delete \
                 partitions",
                limit / 2 / EACH
            ),
            Starved::Exhausted(error) => write!(
                f,
                "out of file descriptors ({error}): {}",
                crate::runtime::host::descriptor_limit_named(error)
            ),
        }
    }
}

/// Debug builds only: `IGGY_DEBUG_PARTITION_OPEN_DELAY_MS` makes every partition open wait that
/// long first, as a slow disk would: the test that a metadata op whose effects outlast the
/// heartbeat timeout keeps its group's primary (e2e `scale`).
#[cfg(debug_assertions)]
async fn slow_partition_open_on_purpose() {
    static DELAY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        std::env::var("IGGY_DEBUG_PARTITION_OPEN_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
    });
    if let Some(ms) = *delay {
        compio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Marks each reported (client, session) active at `now` in `activity` when it is the client's
/// live session (`live_session`); a report of an ended or older session renews nothing.
fn renew_held_sessions(
    activity: &mut HashMap<u128, SessionActivity>,
    live_session: impl Fn(u128) -> Option<u64>,
    reported: &[(u128, u64)],
    now: std::time::Instant,
) {
    for (client, session) in reported {
        if live_session(*client) == Some(*session) {
            let entry = activity
                .entry(*client)
                .or_insert(SessionActivity::idle_since(now));
            entry.since = now;
            entry.tokens_expired = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_logout_is_remembered_for_its_session_only_and_for_as_long_as_kept() {
        let mut here = SessionsHere::default();
        let (start, kept) = (Instant::now(), Duration::from_secs(10));
        here.logged_out(7, 70, start, kept);
        assert!(here.logging_out(7, 70, start + Duration::from_secs(9), kept));
        assert!(
            !here.logging_out(7, 71, start, kept),
            "another session of the client"
        );
        assert!(!here.logging_out(8, 70, start, kept), "another client");
        assert!(
            !here.logging_out(7, 70, start + kept, kept),
            "forgotten once kept"
        );
        // Entries older than kept go as others come.
        here.logged_out(8, 80, start + kept, kept);
        assert_eq!(here.logged_out.len(), 1);
    }

    #[test]
    fn a_lease_pass_keeps_nothing_of_sessions_that_ended() {
        let start = Instant::now();
        let lease = Duration::from_secs(60);
        let mut here = SessionsHere::default();
        // A thousand sessions came and went: each bound on a connection, then logged out or
        // gone with its connection, and no longer live in the model.
        for client in 1..=1000u128 {
            here.bound(client, Some(client as u32));
            here.unbound(client);
        }
        // One a peer reported while it lived (a backup learns of sessions so).
        here.renew_held(|_| Some(1), &[(2000, 1)], start);
        // Session 7 is live and bound (over HTTP, no connection id), 8 live and idle.
        here.bound(7, None);
        for primary in [false, true] {
            let expired = here.lease_pass(&[7, 8], primary, (lease, Duration::ZERO), start);
            assert!(expired.is_empty(), "{expired:?}");
        }
        assert_eq!(
            here.len(),
            2,
            "only the live sessions 7 and 8 keep an entry"
        );
        assert_eq!(here.member_id(7), 7, "a live session keeps its member id");
        assert_eq!(here.bound_here().collect::<Vec<_>>(), [7]);
        // Past the lease the idle live session expires, the bound one does not.
        assert_eq!(
            here.lease_pass(&[7, 8], true, (lease, Duration::ZERO), start + lease),
            [8]
        );
    }

    #[test]
    fn an_http_session_no_node_remembers_is_held_while_a_token_of_it_may_be_valid() {
        let start = Instant::now();
        let (lease, lifetime) = (Duration::from_secs(60), Duration::from_secs(3600));
        let (http, binary) = (new_http_client_id(), 0x1234_u128 << 96 | 7);
        assert!(is_http_client(http) && !is_http_client(binary));
        let live = [http, binary];
        let mut here = SessionsHere::default();
        // Restored at start: no node holds either, and a token of the HTTP one may be valid
        // for a token lifetime.
        assert!(
            here.lease_pass(&live, true, (lease, lifetime), start)
                .is_empty()
        );
        assert_eq!(
            here.lease_pass(&live, true, (lease, lifetime), start + lease),
            [binary]
        );
        let held = start + lease + lifetime - Duration::from_secs(1);
        assert!(
            here.lease_pass(&[http], true, (lease, lifetime), held)
                .is_empty()
        );
        let ended = start + lease + lifetime;
        assert_eq!(
            here.lease_pass(&[http], true, (lease, lifetime), ended),
            [http]
        );

        // Bound here by a token, then let go when this node saw its tokens expire: only the
        // lease is left.
        let mut here = SessionsHere::default();
        here.bound(http, None);
        here.tokens_expired(http);
        let later = Instant::now();
        assert_eq!(
            here.lease_pass(&[http], true, (lease, lifetime), later + lease),
            [http]
        );
        // Reported by a backup after that: a token of it is held there, the hold is back.
        here.renew_held(|_| Some(1), &[(http, 1)], later);
        assert!(
            here.lease_pass(&[http], true, (lease, lifetime), later + lease)
                .is_empty()
        );
    }

    #[test]
    fn a_report_renews_only_the_live_session_of_its_client() {
        let start = Instant::now();
        let later = start + Duration::from_secs(30);
        let idle = SessionActivity::idle_since(start);
        let mut activity = HashMap::from([(1u128, idle), (2u128, idle)]);
        // Client 1's live session is 10, client 2's is 20, client 3 has none.
        let live = |client| match client {
            1 => Some(10),
            2 => Some(20),
            _ => None,
        };
        renew_held_sessions(&mut activity, live, &[(1, 10), (2, 19), (3, 30)], later);
        assert_eq!(activity[&1].since, later, "the live session is active now");
        assert_eq!(
            activity[&2].since, start,
            "an older session's report renews nothing"
        );
        assert!(
            !activity.contains_key(&3),
            "nor does a report of an ended one"
        );
        // A session first seen in a report starts its idle time at the report.
        renew_held_sessions(&mut activity, |_| Some(40), &[(4, 40)], later);
        assert_eq!((activity[&4].bound, activity[&4].since), (0, later));
    }
}
