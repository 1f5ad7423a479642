//! A running node: the metadata group, the partition groups it owns and what connections
//! share. Everything here lives on one compio runtime thread, so plain `RefCell`s suffice: no
//! borrow is held across an `.await`.

use crate::config::Config;
use crate::group::{Checkpointing, Durability, Group, GroupHandle, load_checkpoint};
use crate::metadata::{Effect, Metadata};
use crate::metadata_machine::MetadataMachine;
use crate::partition::{PartitionHandle, PartitionInfo};
use crate::reconcile::DiskAction;
use crate::wal::{FileJournal, JournalEntry};
use iggy_storage::DataDir;
use iggy_storage::partition_log::LogConfig;
use iggy_storage::revision::Discarded;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

pub type PartitionKey = (u32, u32, u32);

/// A partition the node serves, with the figures replies report without asking its task.
pub struct PartitionEntry {
    pub handle: PartitionHandle,
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
    /// The shard threads partitions run on.
    pub shards: crate::shard::Shards,
    /// The connection each session was last bound on: its public client id.
    pub session_connections: RefCell<HashMap<u128, u32>>,
    /// Per session: connections bound to it now, and when the last one went away.
    pub session_activity: RefCell<HashMap<u128, SessionActivity>>,
}

/// Whether a session is in use, for its lease.
#[derive(Debug, Clone, Copy)]
pub struct SessionActivity {
    pub bound: u32,
    pub since: std::time::Instant,
}

impl Shared {
    pub fn vsr_config(&self) -> iggy_vsr::Config {
        let mut config = iggy_vsr::Config::new(1, 0);
        config.clients_table_max = self.config.limits.clients_table_max;
        config.pipeline_max = 256;
        config
    }

    fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_size: self.config.system.segment_size,
            message_expiry_us: None,
            max_size: None,
        }
    }

    pub fn partition_dir(&self, key: PartitionKey) -> PathBuf {
        self.data.partition_dir(key.0, key.1, key.2)
    }

    pub fn partition(&self, key: PartitionKey) -> Option<PartitionHandle> {
        self.partitions
            .borrow()
            .get(&key)
            .map(|entry| entry.handle.clone())
    }

    pub fn stats(&self, key: PartitionKey) -> PartitionInfo {
        self.partitions
            .borrow()
            .get(&key)
            .map(|entry| entry.handle.stats.get())
            .unwrap_or_default()
    }

    /// A connection bound itself to `client`'s session.
    pub fn session_bound(&self, client: u128) {
        let mut activity = self.session_activity.borrow_mut();
        let entry = activity.entry(client).or_insert(SessionActivity {
            bound: 0,
            since: std::time::Instant::now(),
        });
        entry.bound += 1;
    }

    /// A connection bound to `client`'s session closed or bound elsewhere.
    pub fn session_unbound(&self, client: u128) {
        if let Some(entry) = self.session_activity.borrow_mut().get_mut(&client) {
            entry.bound = entry.bound.saturating_sub(1);
            entry.since = std::time::Instant::now();
        }
    }

    /// Runs a committed op's effect on disk.
    pub async fn run_effect(&self, effect: Effect) {
        match effect {
            Effect::OpenPartition {
                stream,
                topic,
                partition,
                incarnation,
            } => {
                let key = (stream, topic, partition);
                let namespace = self
                    .data
                    .partition_initialization_dir(&format!("{stream}-{topic}-{partition}"));
                let incarnation_record =
                    (namespace, self.data.discarded_partitions_dir(), incarnation);
                let dir = self.partition_dir(key);
                let (policies, segment_size) = {
                    use crate::metadata::TopicDurability::Persisted;
                    let metadata = self.metadata.borrow();
                    let topic = metadata
                        .streams
                        .get(&stream)
                        .and_then(|s| s.topics.get(&topic));
                    topic.map_or(((false, false), 0), |t| {
                        (
                            (
                                t.durability == Persisted,
                                t.consumer_offset_durability == Persisted,
                            ),
                            t.segment_size,
                        )
                    })
                };
                let mut log_config = self.log_config();
                if segment_size > 0 {
                    log_config.segment_size = segment_size;
                }
                let (vsr, durability) = (self.vsr_config(), self.durability);
                let limits = (
                    self.config.system.checkpoint_journal_bytes,
                    self.config.system.checkpoint_journal_ops.max(1),
                );
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
                        )
                        .await
                    })
                    .await;
                let opened = opened.unwrap_or_else(|| {
                    Err(iggy_storage::StorageError::Refused(format!(
                        "shard {shard} is not running"
                    )))
                });
                match opened {
                    Ok(handle) => {
                        self.partitions
                            .borrow_mut()
                            .insert(key, PartitionEntry { handle });
                    }
                    Err(error) => {
                        tracing::error!("partition {}: cannot open: {error}", dir.display())
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
                let entry = self.partitions.borrow_mut().remove(&key);
                if let Some(entry) = entry {
                    entry.handle.group.stop().await;
                }
                self.discard_partition_dir(key, incarnation, "deleted")
                    .await;
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
                let write = || crate::partition::PartitionWrite::DeleteGroupOffsets {
                    group,
                    metadata_op: op,
                };
                use iggy_generated::errors::ErrorCode;
                for (key, handle) in partitions {
                    // A full pipeline refuses for a moment: wait for it rather than leave the
                    // offsets to a later group with the same id.
                    let mut attempts = 0;
                    loop {
                        let written = handle.write(crate::users::SYSTEM_CLIENT, op, write()).await;
                        match written {
                            Err(ErrorCode::TransientNotAccepted) if attempts < 1000 => {
                                attempts += 1;
                                compio::time::sleep(std::time::Duration::from_millis(5)).await;
                            }
                            // Already applied (a resubmission at start): nothing to do.
                            Ok(_) | Err(ErrorCode::RequestTooOld) => break,
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
            Ok(Discarded::Kept { found }) => tracing::warn!(
                "partition {}: incarnation {incarnation} {why}, but the directory names {found:?}; left in place",
                dir.display()
            ),
            Err(error) => {
                tracing::error!("partition {}: cannot delete: {error}", dir.display())
            }
        }
    }

    /// After the metadata journal was replayed into the model (no disk effect run), brings the
    /// partition directories in line with it once; see `reconcile` for the rules.
    pub async fn reconcile_partitions(&self, deleted: &HashSet<(PartitionKey, u64)>) {
        match iggy_storage::revision::finish_discards(&self.data.discarded_partitions_dir()) {
            Ok(0) => {}
            Ok(finished) => tracing::info!(
                "finished removing {finished} partition directories a crash left half deleted"
            ),
            Err(error) => tracing::error!("cannot finish interrupted partition deletes: {error}"),
        }
        let mut on_disk = Vec::new();
        for (key, dir) in partition_dirs_on_disk(self.data.root()) {
            let record = dir.join(iggy_storage::revision::CREATED_REVISION);
            let found = iggy_storage::records::read_checked_u64(&record)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!("{}: unreadable: {error}", record.display());
                    None
                });
            on_disk.push((key, found));
        }
        let (live, commit) = {
            let metadata = self.metadata.borrow();
            (metadata.live_partitions(), metadata.commit)
        };
        for action in crate::reconcile::plan(&live, deleted, &on_disk) {
            match action {
                DiskAction::Open { key, incarnation } => {
                    self.run_effect(Effect::OpenPartition {
                        stream: key.0,
                        topic: key.1,
                        partition: key.2,
                        incarnation,
                    })
                    .await
                }
                DiskAction::Discard { key, revision } => {
                    self.discard_partition_dir(key, revision, "deleted by a replayed op")
                        .await
                }
                DiskAction::Keep { key, found } => {
                    let newer = found.is_some_and(|revision| revision >> 20 > commit);
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
    }
}

/// Every `streams/<s>/topics/<t>/partitions/<p>` directory under `root`.
fn partition_dirs_on_disk(root: &std::path::Path) -> Vec<(PartitionKey, PathBuf)> {
    // The numbered subdirectories of `dir`.
    let numbered = |dir: &std::path::Path| -> Vec<(u32, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut found: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path())))
            .collect();
        found.sort();
        found
    };
    let mut dirs = Vec::new();
    for (stream, stream_dir) in numbered(&root.join("streams")) {
        for (topic, topic_dir) in numbered(&stream_dir.join("topics")) {
            for (partition, dir) in numbered(&topic_dir.join("partitions")) {
                dirs.push(((stream, topic, partition), dir));
            }
        }
    }
    dirs
}

/// Counts open connections against `limits.max_connections`.
pub struct ConnectionLimiter {
    open: Cell<usize>,
    max: usize,
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
    pub clients: RefCell<HashMap<u32, crate::dispatch::ClientInfo>>,
    root_created: Cell<bool>,
    /// Connections being refused at capacity (each gets an answer before it closes).
    pub refusals: Cell<usize>,
    /// Requests being handled now, for the drain at shutdown.
    pub in_flight: Cell<usize>,
    /// Personal access tokens lately shown to their creators, by (client, request): a retry
    /// whose first reply was lost gets its token again. Never journaled; see `remember_token`.
    shown_tokens: RefCell<std::collections::VecDeque<((u128, u64), String)>>,
}

/// How many shown tokens a node remembers for retries.
const SHOWN_TOKENS_MAX: usize = 64;

impl Node {
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
        Some(ConnectionGuard {
            limiter: self.clone(),
        })
    }

    /// Waits until no request is in flight (or `limit` passes), then makes every partition's
    /// log and every group's journal durable: what was acknowledged is on disk when the process
    /// exits, under the replicated policy too.
    pub async fn drain(&self, limit: std::time::Duration) {
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
        for partition in partitions {
            partition.sync().await;
        }
        self.metadata.sync_journal().await;
    }

    /// Whether this start created the root user (its password is then shown once).
    pub fn created_root(&self) -> bool {
        self.root_created.get()
    }

    /// Opens the metadata journal, replays it (which reopens every partition) and makes sure the
    /// root user exists.
    pub async fn start(
        config: Config,
        data: DataDir,
        replica_id: u8,
        root: (String, String),
    ) -> std::io::Result<Rc<Node>> {
        let durability = match config.system.durability.as_str() {
            "persisted" => Durability::Persisted,
            _ => Durability::Replicated,
        };
        let max_connections = config.limits.max_connections;
        let shard_count = config.shard_count();
        let shared = Rc::new(Shared {
            config,
            data,
            durability,
            replica_id,
            metadata: RefCell::new(Metadata::default()),
            partitions: RefCell::new(HashMap::new()),
            started_at: std::time::Instant::now(),
            shards: crate::shard::Shards::start(shard_count)?,
            session_connections: RefCell::new(HashMap::new()),
            session_activity: RefCell::new(HashMap::new()),
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
                let model = crate::metadata_snapshot::decode(&loaded.state).map_err(|why| {
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
        let (journal, entries) =
            FileJournal::open_after_checkpoint(&journal_path, checkpoint_op, &start.damaged)
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
            slots: start.slots,
            journal_bytes: shared.config.system.checkpoint_journal_bytes,
            journal_ops: shared.config.system.checkpoint_journal_ops.max(1),
        };
        let group = Group::open(
            shared.vsr_config(),
            journal,
            checkpoint,
            entries,
            machine,
            durability,
            false,
            Some(checkpointing),
        )
        .await;
        let metadata = group.spawn();
        let node = Rc::new(Node {
            shared,
            metadata,
            connections: ConnectionLimiter {
                open: Cell::new(0),
                max: max_connections,
            },
            next_connection: Cell::new(1),
            clients: RefCell::new(HashMap::new()),
            root_created: Cell::new(false),
            refusals: Cell::new(0),
            in_flight: Cell::new(0),
            shown_tokens: RefCell::new(std::collections::VecDeque::new()),
        });
        node.ensure_root(root).await;
        Ok(node)
    }

    /// The root user is created by a committed op the first time the node starts.
    async fn ensure_root(&self, (username, password): (String, String)) {
        if self
            .shared
            .metadata
            .borrow()
            .users
            .contains_key(&crate::metadata::ROOT_USER_ID)
        {
            return;
        }
        let hash = crate::users::hash_password(&password);
        match crate::users::create_root(self, &username, &hash).await {
            Ok(()) => {
                self.root_created.set(true);
                tracing::info!("created root user {username:?}");
            }
            Err(code) => tracing::error!("cannot create the root user: {code:?}"),
        }
    }
}

impl Node {
    /// Registers a new connection for `me` and the client list.
    pub fn open_connection(
        &self,
        address: String,
        transport: &'static str,
    ) -> crate::dispatch::Connection {
        let id = self.next_connection.get();
        self.next_connection.set(id.wrapping_add(1).max(1));
        let info = crate::dispatch::ClientInfo {
            id,
            address,
            transport,
            user_id: None,
        };
        self.clients.borrow_mut().insert(id, info);
        crate::dispatch::Connection { id, bound: None }
    }

    pub fn close_connection(&self, connection: &crate::dispatch::Connection) {
        self.clients.borrow_mut().remove(&connection.id);
        if let Some(bound) = connection.bound {
            self.shared.session_unbound(bound.client);
        }
    }
}
