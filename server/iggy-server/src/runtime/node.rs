//! A running node: the metadata group, the partition groups it owns and what connections
//! share. Everything here lives on one compio runtime thread, so plain `RefCell`s suffice: no
//! borrow is held across an `.await`.

use crate::config::Config;
use crate::consensus::figures::GroupFigures;
use crate::consensus::group::{Checkpointing, Durability, Group, GroupHandle, load_checkpoint};
use crate::consensus::log_limit::{LogLimit, Verdict};
use crate::consensus::wal::{Anchor, FileJournal, JournalEntry};
use crate::runtime::metadata_machine::MetadataMachine;
use crate::runtime::partition::PartitionHandle;
use crate::runtime::shared::Shared;
use iggy_generated::frames::{EvictionHeader, EvictionReason, RequestHeader};
use iggy_metadata::Metadata;
use iggy_storage::DataDir;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;

/// Counts open connections against `limits.max_connections`, or the lower bound the open-files
/// limit sets (`host::connections_fit`).
pub struct ConnectionLimiter {
    open: Cell<usize>,
    /// The most open at once since [`ConnectionLimiter::take_peak`] last looked.
    peak: Cell<usize>,
    max: usize,
    /// What sets `max`, for the refusal's warning.
    pub limited_by: &'static str,
}

impl ConnectionLimiter {
    /// The connections open now.
    pub fn open(&self) -> usize {
        self.open.get()
    }

    /// The most connections open at once since the last call (at least those open now).
    pub fn take_peak(&self) -> usize {
        self.peak.replace(self.open.get()).max(self.open.get())
    }
}

pub struct ConnectionGuard {
    limiter: Rc<Node>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let open = &self.limiter.connections.open;
        open.set(open.get() - 1);
    }
}

/// The node as connections see it.
pub struct Node {
    pub shared: Rc<Shared>,
    pub metadata: GroupHandle<()>,
    pub connections: ConnectionLimiter,
    /// Connection ids handed out, for `me` and client listings.
    pub next_connection: Cell<u32>,
    pub clients: RefCell<HashMap<u32, crate::runtime::connection::ClientInfo>>,
    /// Whether this start created the root user (its password is then shown once).
    pub root_created: Cell<bool>,
    /// Connections being refused at capacity (each gets an answer before it closes).
    pub refusals: Cell<usize>,
    /// Requests being handled now, for the drain at shutdown (counted by [`Node::request_started`]).
    in_flight: Cell<usize>,
    /// Set when the drain at shutdown begins: requests that arrive from then on are refused
    /// unexecuted ([`Node::client_request_started`] says so), or the drain could end between two of a
    /// connection's requests and the process exit while the next one runs, its outcome untold.
    stopping: Cell<bool>,
    /// Requests by command and status, and their latencies (`/metrics`).
    pub metrics: crate::runtime::metrics::Metrics,
    /// Personal access tokens lately shown to their creators, by (client, request): a retry
    /// whose first reply was lost gets its token again. Never journaled; see `remember_token`.
    shown_tokens: RefCell<std::collections::VecDeque<((u128, u64), String)>>,
    /// Logins refused because the session table is full: one warning per interval, so a client
    /// retrying its login cannot flood the log.
    pub session_table_full: crate::consensus::log_limit::Throttled,
    /// Sign-ins refused for their credentials, by a hash of the user name: one line per name
    /// per interval, so a client guessing passwords is seen without flooding the log.
    pub refused_sign_ins: RefCell<crate::consensus::log_limit::LogLimit<u64>>,
    /// Failed accepts of the client listeners (out of descriptors, say): one warning per
    /// interval, since every connection waiting in a backlog fails the next accept again.
    pub accept_failed: crate::consensus::log_limit::Throttled,
    /// Connections refused at `limits.max_connections`: one warning per interval.
    pub connection_refused: crate::consensus::log_limit::Throttled,
    /// Polls refused for a message larger than the client reads (`quic.max_reply_size`): one
    /// warning per interval, since its consumer polls it again.
    pub reply_too_large: crate::consensus::log_limit::Throttled,
    /// Request bodies held at once, all connections together (`limits.max_request_bodies_size`).
    pub body_budget: Rc<crate::runtime::body_budget::BodyBudget>,
    /// Evicted connections and headers cut short: one line per client address and kind per
    /// interval ([`Node::log_eviction`], [`Node::log_header_cut_short`]).
    refused_clients: RefCell<LogLimit<(IpAddr, ClientRefusal)>>,
}

/// What a refused client's log line is about, for its rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ClientRefusal {
    Evicted(EvictionReason),
    /// The TLS handshake failed (a client with TLS off, or one that does not trust the
    /// certificate).
    TlsHandshake,
    /// Whether the bytes were a request of the older framing.
    HeaderCutShort {
        older_framing: bool,
    },
}

/// Client addresses whose evictions are limited each on their own; the rest share one limit.
const EVICTION_SOURCES_MAX: usize = 256;

/// At most one warning of a repeating kind (a full session table, failed or refused accepts)
/// this often.
const REPEATED_WARNING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How many shown tokens a node remembers for retries.
const SHOWN_TOKENS_MAX: usize = 64;

/// How long a stopping node waits for the groups it led to move to a new view (a handful of
/// loopback or LAN round trips; past it its peers fall back on the heartbeat timeout).
const STEP_DOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Node {
    /// Logs that `connection` is evicted with `eviction` (the frame about to be written): an
    /// operator sees which clients are turned away and why (an SDK of another protocol, a
    /// malformed login).
    pub fn log_eviction(&self, connection: u32, eviction: &[u8]) {
        let reason = eviction
            .get(EvictionHeader::REASON_OFFSET)
            .and_then(|reason| EvictionReason::from_repr(*reason))
            .unwrap_or_default();
        // Built only for a line written: a client retrying is mostly held back.
        self.log_refused_client(connection, ClientRefusal::Evicted(reason), |address| {
            let why = match reason {
                EvictionReason::IncompatibleProtocol => {
                    let (lowest, highest) = iggy_generated::protocol::admission_window();
                    format!(
                        "its client speaks a protocol outside the ones this server admits \
                         ({lowest} to {highest})"
                    )
                }
                other => format!("{other:?}"),
            };
            format!("connection {connection} from {address} evicted: {why}")
        });
    }

    /// Logs that `connection` sent `received` bytes of a request header (the first of them in
    /// `head`) and nothing more `within` the request timeout, and was closed. When those bytes
    /// are a whole request of the framing before protocol 0.11 (a 4-byte length, then that
    /// many bytes: a command code and its payload), the line says so: such a client (the
    /// Python and Node.js SDKs 0.8 and older) waits for an answer this server cannot give.
    pub fn log_header_cut_short(
        &self,
        connection: u32,
        received: usize,
        head: [u8; 8],
        within: std::time::Duration,
    ) {
        let length = u32::from_le_bytes(head[..4].try_into().expect("four bytes"));
        let older_framing = received >= 8 && usize::try_from(length).ok() == Some(received - 4);
        let kind = ClientRefusal::HeaderCutShort { older_framing };
        self.log_refused_client(connection, kind, |address| {
            let hint = match older_framing {
                true => format!(
                    ": they are a whole request of the framing before protocol 0.11 (command \
                     {}), which this server does not speak (SDKs of that framing: apache-iggy \
                     0.8.0 and older)",
                    u32::from_le_bytes(head[4..].try_into().expect("four bytes"))
                ),
                false => String::new(),
            };
            format!(
                "connection {connection} from {address} closed: {received} bytes of a \
                 {}-byte request header and nothing more within {within:?}{hint}",
                RequestHeader::SIZE
            )
        });
    }

    /// Writes `line(address)` at INFO, at most once per client ip and `kind` per interval with
    /// the count held back since, so a client retrying cannot flood the log.
    /// Logs a client whose TLS handshake on `transport` failed with `error`, at most once per
    /// address per interval: the server said nothing of it, and a client that speaks plain
    /// frames to a TLS port (the commonest TLS mistake) only hears its connection close.
    pub fn log_tls_handshake_failed(
        &self,
        transport: &str,
        peer: std::net::SocketAddr,
        error: &dyn std::fmt::Display,
    ) {
        self.log_refused_address(peer.to_string(), transport, ClientRefusal::TlsHandshake, |at| {
            format!(
                "TLS handshake of {at} failed: {error} (is the client's TLS off, or does it not \
                 trust this server's certificate?)"
            )
        });
    }

    fn log_refused_client(
        &self,
        connection: u32,
        kind: ClientRefusal,
        line: impl FnOnce(String) -> String,
    ) {
        let (address, transport) = match self.clients.borrow().get(&connection) {
            Some(info) => (info.address.clone(), info.transport),
            None => (String::from("an unknown address"), "?"),
        };
        self.log_refused_address(address, transport, kind, line);
    }

    fn log_refused_address(
        &self,
        address: String,
        transport: &str,
        kind: ClientRefusal,
        line: impl FnOnce(String) -> String,
    ) {
        let ip = address
            .parse::<std::net::SocketAddr>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |address| address.ip());
        let verdict = self
            .refused_clients
            .borrow_mut()
            .line(std::time::Instant::now(), (ip, kind));
        let Verdict::Write { held_back, pooled } = verdict else {
            return;
        };
        let held_back = match (held_back, pooled) {
            (0, _) => String::new(),
            (n, false) => format!(" ({n} more from this address held back)"),
            (n, true) => format!(" ({n} more from other addresses held back)"),
        };
        let line = line(format!("{address} over {transport}"));
        tracing::info!("{line}{held_back}");
    }

    /// Remembers a token shown for `request` of `client`, for a retry of that request.
    pub fn remember_token(&self, client: u128, request: u64, token: &str) {
        let mut shown = self.shown_tokens.borrow_mut();
        if shown.len() == SHOWN_TOKENS_MAX {
            shown.pop_front();
        }
        shown.push_back(((client, request), token.to_string()));
    }

    /// The token shown for `request` of `client`, if this process still remembers it.
    pub fn shown_token(&self, client: u128, request: u64) -> Option<String> {
        self.shown_tokens
            .borrow()
            .iter()
            .find(|(key, _)| *key == (client, request))
            .map(|(_, token)| token.clone())
    }

    /// Admits one more connection, or `None` at the limit.
    pub fn admit(self: &Rc<Self>) -> Option<ConnectionGuard> {
        let open = &self.connections.open;
        if open.get() >= self.connections.max {
            return None;
        }
        open.set(open.get() + 1);
        let peak = &self.connections.peak;
        peak.set(peak.get().max(open.get()));
        Some(ConnectionGuard {
            limiter: self.clone(),
        })
    }

    /// Counts a request as in flight, for the drain at shutdown, until the guard is dropped:
    /// also when its handler panics or its connection's task is dropped mid-request, so the
    /// drain never waits out its limit for a request nobody handles any more.
    pub fn request_started(self: &Rc<Self>) -> InFlight {
        self.in_flight.set(self.in_flight.get() + 1);
        InFlight(self.clone())
    }

    /// [`Node::request_started`] for a request read from a client, or `None` once the node
    /// stops: the caller refuses it unexecuted (58 on the binary transports, 503 over HTTP), and
    /// the client sends it again to the node once it is back, or to another.
    pub fn client_request_started(self: &Rc<Self>) -> Option<InFlight> {
        (!self.stopping.get()).then(|| self.request_started())
    }

    /// Waits until no request is in flight (or `limit` passes), then makes every partition's
    /// log and every group's journal durable: what was acknowledged is on disk when the process
    /// exits, under the replicated policy too.
    pub async fn drain(&self, limit: std::time::Duration) {
        self.stopping.set(true);
        let deadline = std::time::Instant::now() + limit;
        while self.in_flight.get() > 0 && std::time::Instant::now() < deadline {
            compio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let partitions: Vec<_> = self
            .shared
            .partitions
            .borrow()
            .values()
            .map(|e| e.handle.clone())
            .collect();
        self.step_down(&partitions, STEP_DOWN_WAIT).await;
        // All at once: each sync is a few fsyncs, one after another they took seconds on a
        // node of thousands of partitions (2,000: 7-12 s, past a container's stop timeout).
        futures_util::future::join_all(partitions.iter().map(|partition| partition.sync())).await;
        self.metadata.sync_journal().await;
    }

    /// In a cluster, the last step of a graceful stop: gives up the node's grant leases (it
    /// judges no client's grants any more), then tells every linked peer that this replica
    /// stops (waiting at most `limit` for the words to be written), so each logs the close of
    /// its link once at INFO instead of warning of a lost link, and a revocation or logout is
    /// not held up waiting for this node's lease to run out.
    pub async fn say_stopping(&self, limit: std::time::Duration) {
        let Some(plane) = &self.shared.plane else {
            return;
        };
        let told = plane.say_stopping(limit).await;
        tracing::info!("told replica(s) {told:?} this replica stops");
    }

    /// In a cluster: hands every group this replica leads to a caught-up backup, and waits (at
    /// most `limit`) until each has left the view it led here, so its peers elect a primary now
    /// instead of after the heartbeat timeout (a rolling restart does not stall writes for
    /// it). A group whose view change has not reached this replica by then falls back on the
    /// timeout, as after a crash.
    async fn step_down(&self, partitions: &[PartitionHandle], limit: std::time::Duration) {
        if self.shared.plane.is_none() {
            return;
        }
        let started = std::time::Instant::now();
        let mut leaving: Vec<(&GroupFigures, u64)> = Vec::new();
        let metadata_view = self.metadata.figures().view();
        if self.metadata.step_down().await {
            leaving.push((self.metadata.figures(), metadata_view));
        }
        for partition in partitions {
            let view = partition.group.figures().view();
            if partition.group.step_down().await {
                leaving.push((partition.group.figures(), view));
            }
        }
        if leaving.is_empty() {
            return;
        }
        let still_leading = |leaving: &[(&GroupFigures, u64)]| {
            leaving
                .iter()
                .filter(|(figures, view)| figures.view() == *view)
                .count()
        };
        while still_leading(&leaving) > 0 && started.elapsed() < limit {
            compio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tracing::info!(
            "stepped down from {} group(s) this replica led: {} moved to a new view within {:?}",
            leaving.len(),
            leaving.len() - still_leading(&leaving),
            started.elapsed()
        );
    }

    /// Opens the metadata journal and replays it (which reopens every partition).
    /// `plane` is the cluster's replica plane (`None` standalone), started before any group
    /// opens: a group's first steps (a rejoin, a view change) already address its peers.
    /// `cut_damaged_journals`: a standalone node cuts its journals at damage that intact ops
    /// follow, the loss accepted, instead of refusing them.
    pub async fn start(
        config: Config,
        data: DataDir,
        replica_id: u8,
        plane: Option<crate::consensus::plane::ReplicaPlane>,
        cut_damaged_journals: bool,
    ) -> std::io::Result<Rc<Node>> {
        use crate::consensus::wal::MiddleDamage;
        let middle_damage = match (&plane, cut_damaged_journals) {
            (Some(_), _) => MiddleDamage::PeersRepair,
            (None, true) => MiddleDamage::CutAccepted,
            (None, false) => MiddleDamage::Refuse,
        };
        let durability = match config.system.durability.as_str() {
            "persisted" => Durability::Persisted,
            _ => Durability::Replicated,
        };
        let shard_count = config.shard_count();
        let replica_count = plane.as_ref().map_or(1, |plane| plane.replica_count());
        let configured = config.limits.max_connections;
        let fit = crate::runtime::host::connections_fit(
            crate::runtime::host::open_files_limit(),
            shard_count,
            usize::from(replica_count) - 1,
        );
        let (max_connections, limited_by) = match fit {
            Some(fit) if fit < configured => {
                tracing::info!(
                    "at most {fit} client connections (limits.max_connections is {configured}): \
                     the open files limit leaves room for no more besides the partitions' half \
                     (raise ulimit -n, or LimitNOFILE= under systemd, for more)"
                );
                (fit, "the open files limit; raise ulimit -n")
            }
            _ => (configured, "limits.max_connections"),
        };
        let memory = crate::runtime::host::memory_limit();
        let body_budget = config.limits.request_bodies_budget(memory);
        if config.limits.max_request_bodies_size == 0 {
            tracing::info!(
                "request bodies held at once: at most {} MiB (limits.max_request_bodies_size: a \
                 quarter of the {} MiB this process may use)",
                body_budget >> 20,
                memory.unwrap_or(0) >> 20
            );
        }
        let frame_max = u64::from(config.limits.max_frame_size);
        if body_budget < frame_max {
            tracing::warn!(
                "limits.max_request_bodies_size ({body_budget} bytes) is below \
                 limits.max_frame_size ({frame_max} bytes): a request body larger than the \
                 budget is read only when no other body or poll reply is held, which under load \
                 can take long; give the budget at least one largest request"
            );
        }
        let ws = &config.websocket;
        if ws.enabled && (ws.max_message_size as u64) < frame_max {
            tracing::warn!(
                "websocket.max_message_size ({} bytes) is below limits.max_frame_size \
                 ({frame_max} bytes): a WebSocket request between the two closes its connection \
                 (1009) unanswered, which the official client reports as an unknown outcome \
                 after its request timeout, where TCP and QUIC refuse it with 4022; give the \
                 WebSocket limits at least one largest request",
                ws.max_message_size
            );
        }
        let shared = Rc::new(Shared {
            config,
            data,
            durability,
            replica_id,
            metadata: RefCell::new(Metadata::default()),
            partitions: RefCell::new(HashMap::new()),
            started_at: std::time::Instant::now(),
            started_at_micros: crate::runtime::clock::now_micros(),
            shards: crate::runtime::shard::Shards::start(shard_count)?,
            // One per core, at most four: each argon2 job holds 19 MiB while it runs.
            offload: crate::runtime::offload::Offload::start(shard_count.min(4))?,
            sessions_here: Default::default(),
            listening: Default::default(),
            retired_traffic: Default::default(),
            unopenable: Default::default(),
            awaiting_descriptors: Default::default(),
            opens_now: Default::default(),
            gone_partitions: Default::default(),
            plane,
            middle_damage,
            retirement: RefCell::new(iggy_metadata::retirement::RetirementEvidence::new(
                replica_count,
            )),
            stamp_clock: Default::default(),
        });
        let metadata_dir = shared.data.root().join("metadata");
        iggy_storage::fail_stop::create_dir_all(&metadata_dir);
        // The checkpoint holds the model as of its op (the spec's MetadataSnapshot); the
        // journal holds the ops after it.
        let start = load_checkpoint(&metadata_dir).await.map_err(|error| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string())
        })?;
        let checkpoint_op = start.op();
        let checkpoint = match start.checkpoint {
            Some(loaded) => {
                let model = iggy_metadata::snapshot::decode(&loaded.state).map_err(|why| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("checkpoint {}: {why}", loaded.path.display()),
                    )
                })?;
                *shared.metadata.borrow_mut() = model;
                Some(loaded.replica)
            }
            None => None,
        };
        // Partitions are opened once the journal has been replayed into the model: see
        // `MetadataMachine::replayed` and `Shared::reconcile_partitions`.
        let journal_path = metadata_dir.join("journal.wal");
        // A checkpoint is written beside a journal, which is emptied but never removed: without
        // it the ops after the checkpoint are lost, and a standalone node has no peer that holds
        // them.
        if shared.plane.is_none() && checkpoint.is_some() && !journal_path.try_exists()? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{} is missing beside the checkpoint at op {checkpoint_op}: the metadata ops \
                     after it are lost, and a standalone node has no peer that holds them. \
                     Nothing was changed. Restore the data directory from a verified backup \
                     (README \"Backup and restore\")",
                    journal_path.display()
                ),
            ));
        }
        let (journal, entries) = FileJournal::open_after_checkpoint(
            &journal_path,
            Anchor::after(checkpoint.as_ref()),
            &start.damaged,
            shared.middle_damage,
        )
        .await?;
        // The metadata machine stows nothing: a stand-in here is not a journal of ours.
        let entries = entries
            .into_iter()
            .map(|entry| match entry {
                JournalEntry::Whole(entry) => Ok(entry),
                JournalEntry::Stowed(entry) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "journal {}: op {} holds a stand-in, but metadata ops are journaled whole",
                        journal_path.display(),
                        entry.op
                    ),
                )),
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        tracing::info!(
            "metadata: checkpoint at op {checkpoint_op}, replaying {} journaled ops",
            entries.len()
        );
        let machine = MetadataMachine::replaying(shared.clone());
        let checkpointing = Checkpointing {
            kind: crate::consensus::figures::GroupKind::Metadata,
            slots: start.slots,
            journal_bytes: shared.checkpoint_journal_bytes(),
            journal_ops: shared.checkpoint_journal_ops(),
            // A replica left behind takes the primary's metadata checkpoint whole (state
            // transfer), so a node down for long does not grow the others' journals.
            past_laggards: Some(shared.checkpoint_laggard_bound()),
        };
        let peers = shared.plane.as_ref().map(|plane| plane.metadata_peers());
        let group = Group::open(
            shared.vsr_config(),
            journal,
            checkpoint,
            entries,
            machine,
            durability,
            false,
            Some(checkpointing),
            "limits.clients_table_max",
            peers,
        )
        .await
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidData, why))?;
        let metadata = group.spawn();
        let node = Rc::new(Node {
            shared,
            metadata,
            connections: ConnectionLimiter {
                open: Cell::new(0),
                peak: Cell::new(0),
                max: max_connections,
                limited_by,
            },
            next_connection: Cell::new(1),
            clients: RefCell::new(HashMap::new()),
            root_created: Cell::new(false),
            refusals: Cell::new(0),
            in_flight: Cell::new(0),
            stopping: Cell::new(false),
            metrics: Default::default(),
            shown_tokens: RefCell::new(std::collections::VecDeque::new()),
            session_table_full: crate::consensus::log_limit::Throttled::new(
                REPEATED_WARNING_INTERVAL,
            ),
            refused_sign_ins: RefCell::new(crate::consensus::log_limit::LogLimit::new(
                REPEATED_WARNING_INTERVAL,
                64,
            )),
            accept_failed: crate::consensus::log_limit::Throttled::new(REPEATED_WARNING_INTERVAL),
            connection_refused: crate::consensus::log_limit::Throttled::new(
                REPEATED_WARNING_INTERVAL,
            ),
            reply_too_large: crate::consensus::log_limit::Throttled::new(REPEATED_WARNING_INTERVAL),
            body_budget: Rc::new(crate::runtime::body_budget::BodyBudget::new(body_budget)),
            refused_clients: RefCell::new(LogLimit::new(
                REPEATED_WARNING_INTERVAL,
                EVICTION_SOURCES_MAX,
            )),
        });
        Ok(node)
    }
}

impl Node {
    /// The node's metrics as Prometheus text: the request counters kept here, and the figures
    /// other shards publish (partition traffic, group views and commits), read now.
    pub fn render_metrics(&self) -> String {
        use crate::consensus::figures::{GroupKind, checkpoint_durations};
        use crate::runtime::metrics::{Gauges, GroupGauge, GroupLabel};
        use iggy_storage::fail_stop::{Synced, fsyncs};
        let mut connections = std::collections::BTreeMap::new();
        for client in self.clients.borrow().values() {
            *connections.entry(client.transport).or_insert(0) += 1;
        }
        let metadata = self.shared.metadata.borrow();
        // Every topic the model holds, with its running partitions' traffic and that of its
        // deleted ones.
        let mut topics = std::collections::BTreeMap::new();
        let retired = self.shared.retired_traffic.borrow();
        for (stream_id, stream) in &metadata.streams {
            for (topic_id, topic) in &stream.topics {
                let key = (*stream_id, *topic_id);
                let traffic = match retired.get(&key) {
                    Some((created_at, traffic)) if *created_at == topic.created_at => *traffic,
                    _ => Default::default(),
                };
                topics.insert(key, traffic);
            }
        }
        let figures = self.metadata.figures();
        let mut groups = vec![group_gauge(GroupLabel::Metadata, figures)];
        let mut partitions: Vec<GroupGauge> = Vec::new();
        for (key, entry) in self.shared.partitions.borrow().iter() {
            if let Some(traffic) = topics.get_mut(&(key.0, key.1)) {
                *traffic += entry.handle.stats.traffic();
            }
            let figures = entry.handle.group.figures();
            partitions.push(group_gauge(GroupLabel::Partition(*key), figures));
        }
        partitions.sort_by_key(|gauge| gauge.group);
        groups.extend(partitions);
        let gauges = Gauges {
            connections,
            // The node's own session (it created the root user) is no client's.
            sessions: metadata
                .sessions
                .iter()
                .filter(|(client, _)| **client != iggy_metadata::machine::SYSTEM_CLIENT)
                .count() as u64,
            request_bodies_held: self.body_budget.held(),
            request_bodies_waiting: self.body_budget.waiting() as u64,
            topics,
            groups,
            fsyncs: Synced::ALL
                .iter()
                .map(|file| (file.label(), fsyncs(*file)))
                .collect(),
            replica_frames: self.shared.plane.as_ref().map(|plane| {
                crate::runtime::metrics::ReplicaFrames {
                    dropped: plane.dropped(),
                    sent: plane.sent(),
                    undeliverable: plane.undeliverable(),
                }
            }),
            replica: self.shared.plane.as_ref().map(|plane| {
                crate::runtime::metrics::ReplicaGauges {
                    id: self.shared.replica_id,
                    restored: plane.restored(),
                    peers_up: plane.peers_up(),
                    clock_offsets: plane.clock_offsets(),
                }
            }),
            checkpoints: GroupKind::ALL
                .iter()
                .map(|kind| (kind.label(), checkpoint_durations(*kind)))
                .collect(),
        };
        self.metrics.render(&gauges)
    }

    /// Registers a new connection for `me` and the client list.
    pub fn open_connection(
        &self,
        address: String,
        transport: &'static str,
    ) -> crate::runtime::connection::Connection {
        let id = self.next_connection.get();
        self.next_connection.set(id.wrapping_add(1).max(1));
        let info = crate::runtime::connection::ClientInfo {
            id,
            address,
            transport,
            user_id: None,
            client: None,
        };
        self.clients.borrow_mut().insert(id, info);
        crate::runtime::connection::Connection {
            id,
            ..Default::default()
        }
    }

    /// The session (its client and user) a connection's requests run as now, for `me` and
    /// the client list.
    pub fn connection_user(&self, connection: u32, client: u128, user_id: u32) {
        if let Some(info) = self.clients.borrow_mut().get_mut(&connection) {
            info.user_id = Some(user_id);
            info.client = Some(client);
        }
    }

    /// The highest request number of `client` this node's replicas hold (committed, or
    /// prepared above their commit), in the metadata group and, with `every_partition`, in
    /// every partition group the node runs (asked together).
    pub async fn latest_request(&self, client: u128, every_partition: bool) -> u64 {
        let partitions: Vec<_> = if every_partition {
            let partitions = self.shared.partitions.borrow();
            partitions
                .values()
                .map(|entry| entry.handle.clone())
                .collect()
        } else {
            Vec::new()
        };
        let asks = partitions
            .iter()
            .map(|partition| partition.group.latest_request(client));
        let held = futures_util::future::join_all(asks).await;
        let metadata = self.metadata.latest_request(client).await;
        held.into_iter().fold(metadata, u64::max)
    }

    pub fn close_connection(&self, connection: &crate::runtime::connection::Connection) {
        self.clients.borrow_mut().remove(&connection.id);
        if let Some(bound) = connection.bound {
            self.shared.session_unbound(bound.client);
        }
    }
}

/// A request in flight (see [`Node::request_started`]).
pub struct InFlight(Rc<Node>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// A group's figures as the metrics report them.
fn group_gauge(
    group: crate::runtime::metrics::GroupLabel,
    figures: &GroupFigures,
) -> crate::runtime::metrics::GroupGauge {
    let role = figures.role();
    crate::runtime::metrics::GroupGauge {
        group,
        view: figures.view(),
        commit: figures.commit(),
        applied: figures.applied(),
        primary: role.primary,
        status: match role.status {
            iggy_vsr::Status::Normal => 0,
            iggy_vsr::Status::ViewChange => 1,
            iggy_vsr::Status::Recovering => 2,
        },
    }
}
