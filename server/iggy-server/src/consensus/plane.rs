//! The replica plane of a node in a cluster: the bus it started, and what each consensus group
//! needs to take part (its frames' identity, its inbound frames, its clock and its replica
//! configuration). A standalone node has none: its groups are clusters of one.
//!
//! The plane also carries what this node declares about its metadata history in every
//! handshake, and, for a node that starts without metadata, gathers its peers' declarations
//! before any group opens (`gate_start`): a node erased while its peers kept their history
//! must not format a new one into their cluster.

use super::admission::{self, StartGate, StartVerdict};
use super::grant_lease::NodeLeases;
use super::link_liveness::PeerStatus;
use super::replica_bus::{
    BusConfig, BusEvent, BusSender, HistorySource, Inbound, ReplicaBus, Router,
};
use super::runs_file::RunsState;
use futures_channel::mpsc;
use iggy_generated::frames::{METADATA_GROUP, MetadataHistory};
use iggy_vsr::codec::{FrameContext, partition_group};
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// One tick of every group's replica clock. The `[cluster]` intervals are counted in it, so it
/// is shorter than the shortest of them; a longer tick would wake idle groups less often.
pub const TICK: Duration = Duration::from_millis(50);

/// Inbound frames a group's channel holds before the bus drops more (VSR retransmits).
const GROUP_INBOUND_CAPACITY: usize = 1024;

/// The running plane, kept by the node (the bus lives on the thread that started it).
pub struct ReplicaPlane {
    bus: ReplicaBus,
    sender: BusSender,
    router: Arc<Router>,
    cluster: u128,
    replica: u8,
    replica_count: u8,
    timing: Timing,
    /// Bytes of a state-transfer chunk's body: the largest frame less its header.
    transfer_chunk_bytes: u32,
    /// The bus's events until the start gate has read them (then a task drains them).
    events: Option<mpsc::Receiver<BusEvent>>,
    declaration: Rc<Declaration>,
    /// The data directory holds the restored-node marker (`--restored`): every group opened
    /// while it is set opens restored (`iggy_vsr::Config::restored`).
    restored: std::cell::Cell<bool>,
    /// This node's runs, kept in the data directory (`runs_file`).
    runs: Rc<RunsState>,
    /// When this node may judge grants by its metadata copy, and when a revocation may be
    /// answered (`grant_lease`).
    leases: Rc<NodeLeases>,
}

/// What this node declares about its metadata history: what it found on disk at start, and,
/// once its metadata group runs, the commit that group publishes.
struct Declaration {
    at_start: MetadataHistory,
    metadata_commit: RefCell<Option<Box<dyn Fn() -> u64>>>,
}

impl Declaration {
    fn declared_to(&self, peer_linked_before: bool) -> MetadataHistory {
        let commit = self
            .metadata_commit
            .borrow()
            .as_ref()
            .map_or(0, |commit| commit());
        admission::declared_history(self.at_start, commit, peer_linked_before)
    }
}

/// The metadata group's journal, beside its checkpoint slots in `<data>/metadata/`.
pub const METADATA_JOURNAL: &str = "journal.wal";

/// Whether the data directory `data_dir` holds a metadata history: a checkpoint slot file, or
/// a journal with any bytes in it (recovery judges what of it is valid). Reads only file
/// metadata and creates nothing; a missing data directory holds none. A file that cannot be
/// examined counts as held: the node then starts as it always did, and opening its groups
/// reports the error.
pub fn metadata_on_disk(data_dir: &Path) -> MetadataHistory {
    let metadata = data_dir.join("metadata");
    let checkpoints = iggy_storage::checkpoint::SLOT_FILE_NAMES
        .iter()
        .chain([&iggy_storage::checkpoint::EARLIER_FILE_NAME]);
    let holds = |name: &str, at_least: u64| match std::fs::metadata(metadata.join(name)) {
        Ok(file) => file.len() >= at_least,
        Err(error) => error.kind() != std::io::ErrorKind::NotFound,
    };
    // A checkpoint slot is written whole or not at all (a torn one still says a checkpoint
    // was taken); an empty journal is what a group opened without ever journaling leaves.
    if checkpoints.into_iter().any(|name| holds(name, 0)) || holds(METADATA_JOURNAL, 1) {
        MetadataHistory::Held
    } else {
        MetadataHistory::Absent
    }
}

/// The `[cluster]` intervals, in ticks of [`TICK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_ticks: u64,
    pub view_change_timeout_ticks: u64,
    pub resend_ticks: u64,
    pub hand_back_settle_ticks: u64,
}

impl Timing {
    /// The primary's commit heartbeat every `commit_broadcast_interval`; a backup that hears
    /// nothing for `heartbeat_timeout` starts a view change; prepares and view-change messages
    /// are resent every `prepare_retransmit_interval`. Each is at least one tick. A group goes
    /// back to its preferred primary only once that node has been heard for twice the heartbeat
    /// timeout after coming back: the official client redials a node it lost on a backoff of up
    /// to 10 s, and a group handed back at once (0.1 s after a crashed node restarted) stalled
    /// its writers until they reached it (7 to 9 s under a 3 s timeout).
    pub fn from_config(cluster: &crate::config::Cluster) -> Self {
        let ticks = |interval: Duration| (interval.as_millis() / TICK.as_millis()).max(1) as u64;
        Timing {
            heartbeat_ticks: ticks(cluster.commit_broadcast_interval),
            view_change_timeout_ticks: ticks(cluster.heartbeat_timeout),
            resend_ticks: ticks(cluster.prepare_retransmit_interval),
            hand_back_settle_ticks: ticks(cluster.heartbeat_timeout * 2),
        }
    }
}

/// What one group needs to reach its peers: handed to `Group::open`.
pub struct Peers {
    pub bus: BusSender,
    pub inbound: mpsc::Receiver<Inbound>,
    pub frames: FrameContext,
    pub tick: Duration,
    /// The most bytes of a checkpoint slot one state-transfer frame carries (a metadata slot
    /// longer than this travels in chunks).
    pub transfer_chunk_bytes: u32,
    /// Set for a group created just now (no journal, no view state): the view every replica
    /// formats it in, chosen by its creation ([`created_view`]).
    pub created_view: Option<u32>,
}

impl ReplicaPlane {
    /// Binds this replica's listener and starts dialing its peers. `at_start` is the metadata
    /// history this node found on disk ([`metadata_on_disk`]); with none, call
    /// [`ReplicaPlane::gate_start`] before any group opens.
    pub async fn start(
        config: &crate::config::Config,
        replica: u8,
        at_start: MetadataHistory,
        runs: Rc<RunsState>,
    ) -> Result<Self, String> {
        let declaration = Rc::new(Declaration {
            at_start,
            metadata_commit: RefCell::new(None),
        });
        let declared = declaration.clone();
        let history = HistorySource::new(move |linked| declared.declared_to(linked));
        let replicas = u8::try_from(config.cluster.nodes.len()).unwrap_or(u8::MAX);
        // A lease of one heartbeat timeout: renewed by every Ping (five a timeout), it outlasts
        // a metadata primary's death until about when its successor is elected, and a
        // revocation waits at most a little longer than it, inside a request's time.
        let leases = Rc::new(NodeLeases::new(
            replica,
            replicas,
            config.cluster.heartbeat_timeout,
        ));
        let bus_config =
            BusConfig::from_config(config, replica, history, runs.clone(), leases.clone())?;
        let listen = bus_config.listen;
        let replica_count = bus_config.local.replica_count;
        let cluster = bus_config.local.cluster;
        let (bus, events) = ReplicaBus::start(bus_config)
            .await
            .map_err(|error| format!("cannot bind the replica listener {listen}: {error}"))?;
        let header = iggy_generated::frames::StateChunkHeader::SIZE as u32;
        let mut plane = ReplicaPlane {
            transfer_chunk_bytes: config.limits.max_frame_size.saturating_sub(header).max(1),
            sender: bus.sender(),
            router: bus.router(),
            bus,
            cluster,
            replica,
            replica_count,
            timing: Timing::from_config(&config.cluster),
            events: Some(events),
            declaration,
            restored: std::cell::Cell::new(false),
            runs,
            leases,
        };
        if at_start == MetadataHistory::Held {
            plane.drain_events();
        }
        Ok(plane)
    }

    /// The bus logs every event itself; once the start gate is past, nobody else watches them.
    fn drain_events(&mut self) {
        if let Some(mut events) = self.events.take() {
            compio::runtime::spawn(async move {
                use futures_util::StreamExt;
                while events.next().await.is_some() {}
            })
            .detach();
        }
    }

    /// For a node that found no metadata history on disk: listens to its peers' handshakes
    /// until one declares a history (refuse), every peer declared none, or `within` passed
    /// with a majority declaring none (a new cluster starts); short of a majority it warns and
    /// listens on, every `within`. Nothing is written meanwhile.
    pub async fn gate_start(&mut self, within: Duration) -> StartVerdict {
        use futures_util::StreamExt;
        let mut gate = StartGate::new(self.replica, self.replica_count);
        let mut events = self
            .events
            .take()
            .expect("the start gate runs once, before the events are drained");
        let mut deadline = std::time::Instant::now() + within;
        let verdict = loop {
            if let Some(verdict) = gate.poll_verdict() {
                break verdict;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match compio::time::timeout(left, events.next()).await {
                Ok(Some(BusEvent::Admitted { peer, history })) => {
                    gate.handle_admitted(peer, history)
                }
                Ok(Some(_)) => {}
                Ok(None) => break gate.verdict_at_deadline(),
                Err(_) => match gate.verdict_at_deadline() {
                    StartVerdict::Undecided { silent } => {
                        tracing::warn!(
                            "replica {}: no metadata history here, and replicas {silent:?} have not \
                             answered: waiting for a majority of the cluster to declare none \
                             before formatting a new one (if they hold the cluster's history, \
                             this node's was erased and it must not start empty)",
                            self.replica
                        );
                        deadline = std::time::Instant::now() + within;
                    }
                    verdict => break verdict,
                },
            }
        };
        self.events = Some(events);
        self.drain_events();
        verdict
    }

    /// From now on, declares a history to every peer linked with this node before once
    /// `metadata_commit` (the metadata group's published commit) is above 0: a node that
    /// formatted a new cluster tells a peer that restarts erased (`admission::declared_history`).
    pub fn follow_metadata_commit(&self, metadata_commit: impl Fn() -> u64 + 'static) {
        *self.declaration.metadata_commit.borrow_mut() = Some(Box::new(metadata_commit));
    }

    pub fn replica_count(&self) -> u8 {
        self.replica_count
    }

    /// This node's grant leases (`grant_lease`).
    pub fn leases(&self) -> &NodeLeases {
        &self.leases
    }

    /// Gives up this node's grant leases (it judges no client's grants from now on), then tells
    /// the linked peers it stops gracefully, having done so (`ReplicaBus::say_stopping`).
    pub async fn say_stopping(&self, within: Duration) -> Vec<u8> {
        self.leases.relinquish();
        self.bus.say_stopping(within).await
    }

    /// The time, by this node's wall clock reading `own` (microseconds since the epoch), that
    /// a quorum of the replicas' clocks have reached (`cluster_clock::quorum_now`, from the
    /// peers' Pongs of the last two heartbeat timeouts); `None` while too few are known.
    pub fn quorum_now(&self, own: u64) -> Option<u64> {
        let (samples, quorum, fresh) = self.clocks();
        super::cluster_clock::quorum_now(own, &samples, quorum, fresh, std::time::Instant::now())
    }

    /// The time a quorum of the replicas' clocks have reached, by this node's clock reading
    /// `own`, later than `own` when this node's clock is behind (`cluster_clock::quorum_clock`).
    pub fn quorum_clock(&self, own: u64) -> Option<u64> {
        let (samples, quorum, fresh) = self.clocks();
        super::cluster_clock::quorum_clock(own, &samples, quorum, fresh, std::time::Instant::now())
    }

    /// Per peer with a clock sample: its clock minus this node's, in microseconds.
    pub fn clock_offsets(&self) -> Vec<(u8, i64)> {
        self.sender.clock_offsets()
    }

    /// The peers' clock samples, the quorum, and how old a sample may be (two heartbeat
    /// timeouts: a peer heard within it sent Pongs well within it).
    fn clocks(&self) -> (Vec<super::cluster_clock::ClockSample>, usize, Duration) {
        let fresh = TICK * u32::try_from(self.timing.heartbeat_ticks * 2).unwrap_or(u32::MAX);
        let quorum = usize::from(self.replica_count) / 2 + 1;
        (self.sender.clock_samples(), quorum, fresh)
    }

    /// Each peer (every replica but this one) and whether this node hears from it now.
    pub fn peers_up(&self) -> Vec<(u8, bool)> {
        (0..self.replica_count)
            .filter(|peer| *peer != self.replica)
            .map(|peer| (peer, self.status(peer) == PeerStatus::Healthy))
            .collect()
    }

    /// Whether this node hears from `peer` now (`BusSender::status`); this node itself is
    /// Healthy.
    pub fn status(&self, peer: u8) -> PeerStatus {
        match peer == self.replica {
            true => PeerStatus::Healthy,
            false => self.sender.status(peer),
        }
    }

    /// Frames dropped so far by each peer's send queue (full, or waiting too long for a link).
    pub fn dropped(&self) -> Vec<(u8, u64)> {
        (0..self.replica_count)
            .filter(|peer| *peer != self.replica)
            .map(|peer| (peer, self.sender.dropped(peer)))
            .collect()
    }

    /// Frames and bytes written to each peer's links so far.
    pub fn sent(&self) -> Vec<(u8, u64, u64)> {
        (0..self.replica_count)
            .filter(|peer| *peer != self.replica)
            .map(|peer| {
                let (frames, bytes) = self.sender.sent(peer);
                (peer, frames, bytes)
            })
            .collect()
    }

    /// Inbound frames no group took.
    pub fn undeliverable(&self) -> u64 {
        self.router.undeliverable()
    }

    /// A replica configuration of a group of this cluster with the cluster's timing.
    pub fn vsr_config(&self, mut config: iggy_vsr::Config) -> iggy_vsr::Config {
        config.replica_count = self.replica_count;
        config.replica = self.replica;
        config.heartbeat_ticks = self.timing.heartbeat_ticks;
        config.view_change_timeout_ticks = self.timing.view_change_timeout_ticks;
        config.resend_ticks = self.timing.resend_ticks;
        config.hand_back_settle_ticks = self.timing.hand_back_settle_ticks;
        config.restored = self.restored.get();
        config
    }

    /// A node that started without a metadata history opened its data directory: its runs
    /// are kept there from now.
    pub fn attach_runs(&self, data_dir: &Path) {
        self.runs.attach(data_dir);
    }

    /// Whether groups open restored (see the field).
    pub fn restored(&self) -> bool {
        self.restored.get()
    }

    pub fn set_restored(&self, restored: bool) {
        self.restored.set(restored);
    }

    /// The metadata group's peers.
    pub fn metadata_peers(&self) -> Peers {
        self.peers(METADATA_GROUP, 0)
    }

    /// A partition group's peers: frames of another incarnation of the same ids are refused.
    pub fn partition_peers(&self, key: (u32, u32, u32), incarnation: u64) -> Peers {
        self.peers(partition_group(key), incarnation)
    }

    fn peers(&self, group: u64, incarnation: u64) -> Peers {
        Peers {
            bus: self.sender.clone(),
            inbound: self.router.subscribe(group, GROUP_INBOUND_CAPACITY),
            frames: FrameContext {
                cluster: self.cluster,
                sender: self.replica,
                group,
                incarnation,
            },
            tick: TICK,
            transfer_chunk_bytes: self.transfer_chunk_bytes,
            created_view: None,
        }
    }
}

/// The view a new partition's group starts in, so the partitions a cluster creates spread their
/// primaries over the replicas (primary = view mod replicas): the metadata op that created it
/// (the incarnation's high bits, committed, so every replica computes the same) plus the
/// partition id.
pub fn created_view(incarnation: u64, partition: u32, replica_count: u8) -> u32 {
    let op = incarnation >> 20;
    ((op + u64::from(partition)) % u64::from(replica_count.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_intervals_become_ticks() {
        let cluster = crate::config::Cluster::default();
        // Upstream's defaults: 500 ms heartbeat, 5 s timeout, 250 ms prepare resend.
        assert_eq!(
            Timing::from_config(&cluster),
            Timing {
                heartbeat_ticks: 10,
                view_change_timeout_ticks: 100,
                resend_ticks: 5,
                hand_back_settle_ticks: 200
            }
        );
        let tiny = crate::config::Cluster {
            prepare_retransmit_interval: Duration::from_millis(1),
            ..cluster
        };
        assert_eq!(Timing::from_config(&tiny).resend_ticks, 1);
    }

    #[test]
    fn metadata_is_on_disk_with_a_journal_record_or_a_checkpoint_and_looking_creates_nothing() {
        let scratch = tempfile::tempdir().unwrap();
        let data = scratch.path().join("data");
        // A brand-new (missing) data directory holds none, and stays missing.
        assert_eq!(metadata_on_disk(&data), MetadataHistory::Absent);
        assert!(!data.exists());
        // A data directory with partitions but no metadata (its metadata/ erased) holds none.
        std::fs::create_dir_all(data.join("streams")).unwrap();
        assert_eq!(metadata_on_disk(&data), MetadataHistory::Absent);
        // A group opened without ever journaling leaves an empty journal: still none.
        let metadata = data.join("metadata");
        std::fs::create_dir_all(&metadata).unwrap();
        std::fs::write(metadata.join("journal.wal"), b"").unwrap();
        assert_eq!(metadata_on_disk(&data), MetadataHistory::Absent);
        std::fs::write(metadata.join("journal.wal"), [1u8; 300]).unwrap();
        assert_eq!(metadata_on_disk(&data), MetadataHistory::Held);
        // A checkpoint alone (the journal restarted after it) is a history too.
        for name in ["checkpoint.0", "checkpoint.1", "checkpoint"] {
            std::fs::write(metadata.join("journal.wal"), b"").unwrap();
            std::fs::write(metadata.join(name), b"slot").unwrap();
            assert_eq!(metadata_on_disk(&data), MetadataHistory::Held, "{name}");
            std::fs::remove_file(metadata.join(name)).unwrap();
        }
        assert_eq!(metadata_on_disk(&data), MetadataHistory::Absent);
    }

    #[test]
    fn the_partitions_of_one_creation_spread_their_primaries() {
        let incarnation = 7 << 20 | 3;
        let views: Vec<u32> = (0..6).map(|p| created_view(incarnation, p, 3)).collect();
        assert_eq!(views, [1, 2, 0, 1, 2, 0]);
        assert_eq!(created_view(incarnation, 5, 1), 0);
    }
}
