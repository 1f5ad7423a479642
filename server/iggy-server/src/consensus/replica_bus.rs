//! The replica bus: TCP links between the replicas of a cluster, on compio. It binds the
//! replica listener at the roster's `ip:tcp_replica`, dials the peers this node dials (the
//! lower id dials, `replica_link::role`), admits each link through `admission` within a
//! deadline, and then carries frames: a verified 256-byte header and its body. What to check
//! and when to redial is decided in `replica_link`; this file only moves bytes.
//!
//! A roster `ip` may be a DNS host name (`config::NodeHost`): a dial resolves it at every
//! attempt (`Resolver`), so a peer that restarted at another address (a StatefulSet pod) is
//! found on the next attempt, and a name that does not resolve yet is a failed dial, retried
//! after the backoff and logged at most once per `UNRESOLVED_WARNING_INTERVAL`. A node whose
//! own entry is a name binds the wildcard address (`listen_address`). Admission never looks at
//! addresses: a peer is admitted by its cluster, replica id, identity and, when configured,
//! the shared secret and its certificate; the source address of an inbound connection only
//! keys the limit on warnings about it.
//!
//! The bus is lossy by design, as VSR expects: each peer has a bounded outgoing queue (in
//! frames and in bytes) and a full queue drops (and counts) the frame instead of blocking the
//! caller; inbound frames go to a bounded channel per consensus group and are dropped (and
//! counted) when it is full or nobody listens for that group. Retransmission is the consensus
//! layer's job. A peer that stops reading (a stopped process keeps its socket open) stalls only
//! its link's writer: its queue fills to the bound and later frames for it are dropped, while
//! every other peer's queue keeps moving; once it reads again the queue drains. A frame waits
//! for a link to its peer at most `BusConfig::link_wait_max` (the consensus layer's longest
//! resend interval): by then anything still needed was sent again, so a peer coming back after
//! an outage is not first fed the frames of the outage, and a down peer's queue holds only the
//! last moments' frames.
//!
//! Each link also keeps its peer's liveness (`link_liveness`): it sends a Ping every keepalive
//! interval, answers each Ping with a Pong, and marks the peer heard on every verified frame.
//! Ping and Pong end here; no consensus group sees them.
//!
//! With `[cluster.tls]` every link runs a mutual TLS handshake (`replica_tls`) before the
//! admission handshake; a TLS failure, or a peer with TLS meeting one without, is refused on
//! this side with the field `tls` and its cause.

use super::admission::{self, Local};
use super::cluster_clock::ClockSample;
use super::grant_lease::NodeLeases;
use super::link_liveness::{LinkEvent, Liveness, PeerStatus, SILENCE_CLOSES_AFTER, Silence};
use super::link_stream::{HandshakeRead, LinkReader, LinkStream, LinkWriter};
use super::log_limit::{LogLimit, Throttled, Verdict};
use super::replica_link::{self, Backoff, DialerHandshake, FrameCheck, HEADER_SIZE};
use super::replica_tls::{self, ReplicaTls};
use super::runs::RunLedger;
use super::runs_file::RunsState;
use super::wall_clock;
use crate::config::NodeHost;
use bytes::Bytes;
use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use futures_channel::{mpsc, oneshot};
use iggy_generated::frames::{Command, GenericHeader, MetadataHistory};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Frames a peer's outgoing queue holds before it drops. Every partition group sends each peer
/// a heartbeat or the answer to one in the same tick (groups tick on one grid, and those one op
/// created share their heartbeat phase), so the queue takes one such burst of 8000 groups
/// (4 MiB of 256-byte frames); upstream's 256 dropped the heartbeats of an idle node of 1800
/// partitions by the hundred each second, and its backups timed their primaries out.
pub const PEER_QUEUE_CAPACITY: usize = 16 * 1024;
/// Bytes a peer's outgoing queue holds before it drops: frame count alone would let a stopped
/// peer pin thousands of frames of up to `limits.max_frame_size` each. A frame larger than this still
/// goes into an empty queue, so every frame the limits allow can be sent.
pub const PEER_QUEUE_BYTES_MAX: usize = 64 << 20;
/// The most bytes of queued frames a link's writer sends in one write (a larger frame alone).
const WRITE_BATCH_BYTES: usize = 256 << 10;
/// The largest replica frame accepted or sent when `limits.max_frame_size` is below it. That
/// limit is the client protocol's: a peer whose own is higher (raised on it first, in a
/// rolling change) prepares a client's frame as large, and a replica plane held to this
/// node's lower limit refused it, closing the link at every retransmission for good. Peers are
/// admitted cluster members, and a frame's size is checked against this before its body is read.
pub const REPLICA_FRAME_SIZE_FLOOR: u32 = 1 << 30;
/// The first reconnect delay and the longest one.
pub const BACKOFF_BASE: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Bus events kept for a reader that has fallen behind; older news is dropped.
const EVENTS_CAPACITY: usize = 1024;
/// Inbound handshakes in progress at once (at least; see `BusConfig::from_config`): a connection
/// accepted beyond them is closed unheard. Each holds a task and a file descriptor until it is
/// admitted or the handshake timeout passes, so without a bound anyone who reaches the replica
/// port could exhaust this process's descriptors.
pub const INBOUND_HANDSHAKES_MAX: usize = 64;
/// Warnings about inbound connections (refusals, timeouts, the cap): an address's first of each
/// kind is logged, then at most one per interval with the count held back, so a stranger
/// opening connections cannot flood the log while a misconfigured peer still shows at once.
pub const INBOUND_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// Source addresses and kinds with a warning window of their own; the others share one.
const INBOUND_WARNING_SOURCES_MAX: usize = 64;
/// A peer's name that does not resolve is logged once, then at most once per interval with the
/// count of failed lookups since (a pod not scheduled yet has no DNS record for minutes).
pub const UNRESOLVED_WARNING_INTERVAL: Duration = Duration::from_secs(30);

/// A peer's replica address as the roster gives it: an IP or a host name, and its
/// `tcp_replica` port. A name is resolved at each dial attempt, never kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddress {
    pub host: NodeHost,
    pub port: u16,
}

impl From<SocketAddr> for PeerAddress {
    fn from(address: SocketAddr) -> Self {
        PeerAddress {
            host: NodeHost::Ip(address.ip()),
            port: address.port(),
        }
    }
}

impl std::fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host {
            NodeHost::Ip(ip) => write!(f, "{}", SocketAddr::new(ip, self.port)),
            NodeHost::Name(ref name) => write!(f, "{name}:{}", self.port),
        }
    }
}

/// What a dial attempt connects to: the addresses a peer's roster address stands for now.
type Resolved = std::io::Result<Vec<SocketAddr>>;
/// A lookup in progress.
type Lookup = std::pin::Pin<Box<dyn std::future::Future<Output = Resolved>>>;

/// Turns a peer's address into socket addresses, once per dial attempt. The system one asks
/// the host's resolver (getaddrinfo, on compio's blocking pool, so a slow lookup never stalls
/// the shard); tests give their own.
#[derive(Clone)]
pub struct Resolver(Rc<dyn Fn(&PeerAddress) -> Lookup>);

impl Resolver {
    pub fn new<F>(resolve: impl Fn(&PeerAddress) -> F + 'static) -> Self
    where
        F: std::future::Future<Output = Resolved> + 'static,
    {
        Resolver(Rc::new(move |address| Box::pin(resolve(address))))
    }

    /// An IP as it is; a name through the host's resolver (`/etc/hosts`, DNS).
    pub fn system() -> Self {
        Self::new(|address: &PeerAddress| {
            let address = address.clone();
            async move {
                match &address.host {
                    NodeHost::Ip(ip) => Ok(vec![SocketAddr::new(*ip, address.port)]),
                    NodeHost::Name(name) => {
                        use compio::net::ToSocketAddrsAsync;
                        let name = (name.as_str(), address.port);
                        Ok(name.to_socket_addrs_async().await?.collect())
                    }
                }
            }
        })
    }

    async fn resolve(&self, address: &PeerAddress) -> Resolved {
        (self.0)(address).await
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

/// Where the replica listener of a node at `host` binds: an IP literal, as the roster gives it;
/// for a name, the wildcard address, since the name's address is not known before the name
/// resolves (a pod's DNS record appears once the pod runs) and changes at each restart.
/// IPv6's wildcard, which takes IPv4 connections too unless `net.ipv6.bindv6only` is set;
/// `bind` falls back to IPv4's where the host has no IPv6.
pub fn listen_address(host: &NodeHost, port: u16) -> SocketAddr {
    match host {
        NodeHost::Ip(ip) => SocketAddr::new(*ip, port),
        NodeHost::Name(_) => SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port),
    }
}

/// What the bus of one node needs.
#[derive(Debug, Clone)]
pub struct BusConfig {
    pub local: Local,
    /// Where the replica listener binds: this node's `ip:tcp_replica` (`listen_address`).
    pub listen: SocketAddr,
    /// Every other replica's `ip:tcp_replica`, by replica id.
    pub peers: BTreeMap<u8, PeerAddress>,
    /// Resolves a peer's address at each dial attempt.
    pub resolver: Resolver,
    /// The largest frame, header included, either way: `limits.max_frame_size`, at least
    /// [`REPLICA_FRAME_SIZE_FLOOR`].
    pub max_frame_size: u32,
    /// Connect plus handshake must finish within it, on either side.
    pub handshake_timeout: Duration,
    /// Inbound handshakes in progress at once; a connection beyond them is closed unheard.
    pub inbound_handshakes_max: usize,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub peer_queue_capacity: usize,
    pub peer_queue_bytes_max: usize,
    /// The longest a frame queued while no link to its peer is up waits for one: older frames
    /// are dropped (and counted) when a link is admitted or a frame is queued.
    pub link_wait_max: Duration,
    /// A peer heard from within it is Healthy (`cluster.heartbeat_timeout`); each link is
    /// pinged every `link_liveness::KEEPALIVES_PER_TIMEOUT`th of it.
    pub silence_max: Duration,
    /// Seeds the reconnect jitter.
    pub seed: u64,
    /// What this node declares about its metadata history, read for every handshake frame.
    pub history: HistorySource,
    /// This node's runs (`local.runs` is replaced by their ledger whenever a handshake frame
    /// is built), and where what the links teach is kept.
    pub runs: Rc<RunsState>,
    /// `[cluster.tls]`: `None` when links are plain TCP.
    pub tls: Option<ReplicaTls>,
    /// The node's grant leases: the Pings report to it and the Pongs carry its grants.
    pub leases: Rc<NodeLeases>,
}

/// What this node declares about its metadata history, asked each time a handshake frame is
/// built, with whether the peer has had an admitted link with this bus before
/// (`admission::declared_history`): a node that started empty declares a history once it has one.
#[derive(Clone)]
pub struct HistorySource(Rc<dyn Fn(bool) -> MetadataHistory>);

impl HistorySource {
    pub fn new(declared: impl Fn(bool) -> MetadataHistory + 'static) -> Self {
        HistorySource(Rc::new(declared))
    }

    /// Always `history`.
    #[cfg(test)]
    pub fn fixed(history: MetadataHistory) -> Self {
        Self::new(move |_| history)
    }

    /// The declaration to a peer that was (`true`) or was never linked with this bus before.
    pub fn declared_to(&self, peer_linked_before: bool) -> MetadataHistory {
        (self.0)(peer_linked_before)
    }
}

impl std::fmt::Debug for HistorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HistorySource({:?} to a new peer, {:?} to a linked one)",
            self.declared_to(false),
            self.declared_to(true)
        )
    }
}

impl BusConfig {
    /// The bus of replica `replica` from the `[cluster]` roster and the limits, declaring
    /// `history` in its handshakes.
    pub fn from_config(
        config: &crate::config::Config,
        replica: u8,
        history: HistorySource,
        runs: Rc<RunsState>,
        leases: Rc<NodeLeases>,
    ) -> Result<Self, String> {
        let cluster = &config.cluster;
        let address = |id: u8| {
            let node = cluster
                .nodes
                .iter()
                .find(|n| n.replica_id == id)
                .ok_or_else(|| format!("no cluster.nodes entry has replica_id = {id}"))?;
            let port = node
                .ports
                .tcp_replica
                .ok_or_else(|| format!("cluster node {:?} has no ports.tcp_replica", node.name))?;
            Ok::<_, String>(PeerAddress {
                host: node.host.clone(),
                port,
            })
        };
        let own = address(replica)?;
        let listen = listen_address(&own.host, own.port);
        let peers: BTreeMap<u8, PeerAddress> = cluster
            .nodes
            .iter()
            .filter(|n| n.replica_id != replica)
            .map(|n| Ok((n.replica_id, address(n.replica_id)?)))
            .collect::<Result<_, String>>()?;
        let cluster_id = super::cluster::cluster_id(&cluster.name);
        // A peer has one handshake live, two while this node still waits out one it abandoned.
        let inbound_handshakes_max = INBOUND_HANDSHAKES_MAX.max(2 * peers.len());
        Ok(Self {
            local: Local {
                cluster: cluster_id,
                replica,
                replica_count: u8::try_from(cluster.nodes.len())
                    .map_err(|_| "too many cluster nodes".to_string())?,
                identity: admission::local_identity(),
                auth: peer_auth(&cluster.auth),
                roster: cluster.roster_digest(),
                runs: RunLedger::default(),
            },
            listen,
            peers,
            resolver: Resolver::system(),
            max_frame_size: config.limits.max_frame_size.max(REPLICA_FRAME_SIZE_FLOOR),
            handshake_timeout: cluster.heartbeat_timeout,
            inbound_handshakes_max,
            backoff_base: BACKOFF_BASE,
            backoff_max: BACKOFF_MAX,
            peer_queue_capacity: PEER_QUEUE_CAPACITY,
            peer_queue_bytes_max: PEER_QUEUE_BYTES_MAX,
            link_wait_max: cluster
                .commit_broadcast_interval
                .max(cluster.prepare_retransmit_interval)
                .max(cluster.view_change_retransmit_interval),
            silence_max: cluster.heartbeat_timeout,
            seed: cluster_id as u64 ^ u64::from(replica),
            history,
            runs,
            tls: ReplicaTls::from_config(&cluster.tls)?,
            leases,
        })
    }
}

/// The MAC keys of `[cluster.auth]`; `None` when it is disabled.
fn peer_auth(auth: &crate::config::ClusterAuth) -> Option<admission::PeerAuth> {
    let previous = &auth.previous_shared_secret;
    auth.enabled.then(|| {
        admission::PeerAuth::new(
            auth.shared_secret.as_bytes(),
            (!previous.is_empty()).then(|| previous.as_bytes()),
        )
    })
}

/// A verified frame from an admitted peer: the replica codec's input.
pub use iggy_vsr::codec::Inbound;

/// What happened on the bus, for whoever watches it (tests, diagnostics). Each is logged too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusEvent {
    /// A link admitted; `history` is what the peer declared in its handshake frame.
    Admitted { peer: u8, history: MetadataHistory },
    /// A handshake refused, on this side: `field` names what differs. `peer` is `None` when
    /// the refused frame could not be trusted to say who sent it.
    Refused {
        peer: Option<u8>,
        field: &'static str,
        detail: String,
    },
    /// An admitted link ended: a refused frame (`reason` names the check), an I/O error, the
    /// peer closing, or a newer link from the same peer. `graceful` when the peer said first
    /// that it stops (`ReplicaBus::say_stopping`).
    Closed {
        peer: u8,
        reason: String,
        graceful: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Not a replica of this roster (or this node itself).
    UnknownPeer(u8),
    /// Not a frame: shorter than a header, longer than the limit, or its `size` field is not
    /// its length.
    Malformed(String),
    /// The peer's queue is full; the frame was dropped and counted.
    QueueFull,
}

/// One peer's outgoing queue, shared between senders on any thread and the link's writer, and
/// what this node hears from that peer.
struct Outbox {
    state: Mutex<OutboxState>,
    capacity: usize,
    bytes_max: usize,
    link_wait_max: Duration,
    dropped: AtomicU64,
    /// Frames written to the peer's links, and their bytes.
    sent_frames: AtomicU64,
    sent_bytes: AtomicU64,
    /// The generation of the admitted link that drains this queue, 0 while none is up.
    linked: AtomicU64,
    liveness: Mutex<Liveness>,
    /// This node's stopping Ping was written to the peer's link (`ReplicaBus::say_stopping`).
    stopping_written: AtomicBool,
    /// What the peer's latest Pong told of its clock (`cluster_clock`).
    clock: Mutex<Option<ClockSample>>,
}

struct OutboxState {
    /// Each frame with when it was queued.
    queue: VecDeque<(Instant, Bytes)>,
    /// The bytes of every frame in `queue`.
    queued_bytes: usize,
    writer: Option<Waker>,
}

impl Outbox {
    fn new(
        capacity: usize,
        bytes_max: usize,
        link_wait_max: Duration,
        silence_max: Duration,
    ) -> Self {
        Outbox {
            state: Mutex::new(OutboxState {
                queue: VecDeque::new(),
                queued_bytes: 0,
                writer: None,
            }),
            capacity,
            bytes_max,
            link_wait_max,
            dropped: AtomicU64::new(0),
            sent_frames: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            linked: AtomicU64::new(0),
            liveness: Mutex::new(Liveness::new(silence_max)),
            stopping_written: AtomicBool::new(false),
            clock: Mutex::new(None),
        }
    }

    fn push(&self, now: Instant, frame: Bytes) -> Result<(), SendError> {
        let mut state = self.state.lock().expect("outbox lock");
        if self.linked.load(Ordering::Relaxed) == 0 {
            self.expire(&mut state, now);
        }
        let over_bytes =
            !state.queue.is_empty() && state.queued_bytes + frame.len() > self.bytes_max;
        if state.queue.len() >= self.capacity || over_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::QueueFull);
        }
        state.queued_bytes += frame.len();
        state.queue.push_back((now, frame));
        if let Some(writer) = state.writer.take() {
            writer.wake();
        }
        Ok(())
    }

    /// Drops (and counts) the frames that waited longer than `link_wait_max` for a link: the
    /// oldest first, so the queue's front is its oldest frame.
    fn expire(&self, state: &mut OutboxState, now: Instant) {
        while let Some((queued_at, frame)) = state.queue.front()
            && now.saturating_duration_since(*queued_at) > self.link_wait_max
        {
            state.queued_bytes -= frame.len();
            state.queue.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A link was admitted: it starts with the frames that have not waited too long for it.
    fn link_admitted(&self, now: Instant, generation: u64) {
        let mut state = self.state.lock().expect("outbox lock");
        self.expire(&mut state, now);
        self.linked.store(generation, Ordering::Relaxed);
    }

    fn link_event(&self, now: Instant, event: LinkEvent) {
        self.liveness
            .lock()
            .expect("liveness lock")
            .handle(now, event);
    }

    fn liveness_status(&self, now: Instant) -> PeerStatus {
        self.liveness.lock().expect("liveness lock").status(now)
    }

    fn is_empty(&self) -> bool {
        self.state.lock().expect("outbox lock").queue.is_empty()
    }

    /// Moves the frames queued at the front, up to `room` bytes in all (none when the first is
    /// larger), into `taken`: those a writer sends with the one it popped. The lock is held
    /// for the pops only; the writer copies them after.
    fn pop_more(&self, mut room: usize, taken: &mut Vec<Bytes>) {
        let mut state = self.state.lock().expect("outbox lock");
        while state
            .queue
            .front()
            .is_some_and(|(_, frame)| frame.len() <= room)
        {
            let (_, frame) = state.queue.pop_front().expect("a front frame");
            room -= frame.len();
            state.queued_bytes -= frame.len();
            taken.push(frame);
        }
    }

    async fn pop(&self) -> Bytes {
        std::future::poll_fn(|cx| {
            let mut state = self.state.lock().expect("outbox lock");
            match state.queue.pop_front() {
                Some((_, frame)) => {
                    state.queued_bytes -= frame.len();
                    Poll::Ready(frame)
                }
                None => {
                    state.writer = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

/// Sends frames to peers without waiting: cloneable, usable from any thread.
#[derive(Clone)]
pub struct BusSender {
    outboxes: Arc<BTreeMap<u8, Arc<Outbox>>>,
    max_frame_size: u32,
}

impl BusSender {
    /// Queues `frame` (a whole frame, header first) for `peer`. Never blocks: a full queue
    /// drops the frame and counts it.
    pub fn send(&self, peer: u8, frame: Bytes) -> Result<(), SendError> {
        let outbox = self
            .outboxes
            .get(&peer)
            .ok_or(SendError::UnknownPeer(peer))?;
        let size = frame
            .get(GenericHeader::SIZE_OFFSET..GenericHeader::SIZE_OFFSET + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        if frame.len() > self.max_frame_size as usize || size != Some(frame.len() as u32) {
            return Err(SendError::Malformed(format!(
                "{} bytes with size field {size:?} (limit {})",
                frame.len(),
                self.max_frame_size
            )));
        }
        outbox.push(Instant::now(), frame)
    }

    /// Whether an admitted link with `peer` is up now (heard from or not: see `status`).
    #[cfg_attr(not(test), allow(dead_code))] // for tests and diagnostics
    pub fn linked(&self, peer: u8) -> bool {
        self.outboxes
            .get(&peer)
            .is_some_and(|o| o.linked.load(Ordering::Relaxed) != 0)
    }

    /// What each peer's latest Pong told of its clock.
    pub fn clock_samples(&self) -> Vec<ClockSample> {
        self.peer_clocks()
            .into_iter()
            .map(|(_, sample)| sample)
            .collect()
    }

    /// Per peer with a sample: its clock minus this node's, in microseconds.
    pub fn clock_offsets(&self) -> Vec<(u8, i64)> {
        let (own, now) = (wall_clock::now_micros(), Instant::now());
        let clocks = self.peer_clocks().into_iter();
        clocks
            .map(|(peer, sample)| (peer, sample.offset_micros(own, now)))
            .collect()
    }

    fn peer_clocks(&self) -> Vec<(u8, ClockSample)> {
        self.outboxes
            .iter()
            .filter_map(|(peer, outbox)| {
                Some((*peer, (*outbox.clock.lock().expect("clock lock"))?))
            })
            .collect()
    }

    /// Healthy while an admitted link with `peer` is up and something was heard on it within
    /// the heartbeat timeout; Unreachable otherwise (also for a peer not in the roster).
    pub fn status(&self, peer: u8) -> PeerStatus {
        self.outboxes
            .get(&peer)
            .map_or(PeerStatus::Unreachable, |outbox| {
                outbox.liveness_status(Instant::now())
            })
    }

    /// Frames to `peer` dropped so far: its queue was full, or they waited too long for a link.
    pub fn dropped(&self, peer: u8) -> u64 {
        self.outboxes
            .get(&peer)
            .map_or(0, |o| o.dropped.load(Ordering::Relaxed))
    }

    /// Frames written to `peer`'s links so far, and their bytes (keepalives included).
    pub fn sent(&self, peer: u8) -> (u64, u64) {
        self.outboxes.get(&peer).map_or((0, 0), |o| {
            (
                o.sent_frames.load(Ordering::Relaxed),
                o.sent_bytes.load(Ordering::Relaxed),
            )
        })
    }
}

/// Inbound frames by consensus group: each consumer subscribes its group with a bounded
/// channel; the receiver may live on any thread.
#[derive(Default)]
pub struct Router {
    consumers: Mutex<HashMap<u64, mpsc::Sender<Inbound>>>,
    undeliverable: AtomicU64,
}

impl Router {
    /// The frames for `group` from now on (a later subscription of the same group replaces
    /// this one). `capacity` frames wait before more are dropped.
    pub fn subscribe(&self, group: u64, capacity: usize) -> mpsc::Receiver<Inbound> {
        let (sender, receiver) = mpsc::channel(capacity);
        self.consumers
            .lock()
            .expect("router lock")
            .insert(group, sender);
        receiver
    }

    /// Frames dropped so far: no consumer for their group, or its channel full.
    pub fn undeliverable(&self) -> u64 {
        self.undeliverable.load(Ordering::Relaxed)
    }

    fn deliver(&self, frame: Inbound) {
        let mut consumers = self.consumers.lock().expect("router lock");
        let delivered = match consumers.get_mut(&frame.group) {
            Some(sender) => match sender.try_send(frame) {
                Ok(()) => true,
                Err(error) => {
                    if error.is_disconnected() {
                        let group = error.into_inner().group;
                        consumers.remove(&group);
                    }
                    false
                }
            },
            None => false,
        };
        if !delivered {
            self.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The live link of one peer: its generation, and the signal that ends it when a newer link
/// from the same peer is admitted.
struct LinkSlot {
    generation: u64,
    _supersede: oneshot::Sender<()>,
}

struct Shared {
    config: BusConfig,
    router: Arc<Router>,
    outboxes: Arc<BTreeMap<u8, Arc<Outbox>>>,
    events: RefCell<mpsc::Sender<BusEvent>>,
    links: RefCell<HashMap<u8, LinkSlot>>,
    generations: Cell<u64>,
    /// Every peer admitted since this bus started.
    linked_before: RefCell<std::collections::BTreeSet<u8>>,
    /// Inbound connections accepted and not yet admitted or given up.
    inbound_handshakes: Cell<usize>,
    /// Limits warnings per source ip and kind (a refusal's field, or what went wrong), so each
    /// new reason shows at once.
    inbound_warnings: RefCell<LogLimit<(IpAddr, &'static str)>>,
}

/// One inbound handshake in progress, counted against `inbound_handshakes_max` until dropped.
struct HandshakeSlot(Rc<Shared>);

impl HandshakeSlot {
    /// A slot, or `None` when `inbound_handshakes_max` are in progress.
    fn take(shared: &Rc<Shared>) -> Option<Self> {
        let in_progress = shared.inbound_handshakes.get();
        if in_progress >= shared.config.inbound_handshakes_max {
            return None;
        }
        shared.inbound_handshakes.set(in_progress + 1);
        Some(HandshakeSlot(shared.clone()))
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let count = &self.0.inbound_handshakes;
        debug_assert!(count.get() > 0);
        count.set(count.get() - 1);
    }
}

impl Shared {
    /// The run of `peer` that a live link carries (admitted, and heard within the heartbeat
    /// timeout), when a hello declares another one `run`: a second process claiming the same
    /// replica id, not the peer redialing (its own run) or restarted (its old link went quiet
    /// or closed). Replaced, the healthy node's link flapped, or the peers judged it a stale
    /// copy by the newcomer's later run and it stopped.
    fn live_under_another_run(&self, peer: u8, run: super::runs::Run) -> Option<super::runs::Run> {
        if !self.links.borrow().contains_key(&peer) {
            return None;
        }
        let outbox = self.outboxes.get(&peer)?;
        if outbox.liveness_status(Instant::now()) != PeerStatus::Healthy {
            return None;
        }
        let linked = self.config.runs.ledger().sighting(peer)?;
        (linked != run).then_some(linked)
    }

    /// The metadata history this node declares to `peer` now.
    fn declared_to(&self, peer: u8) -> MetadataHistory {
        let linked = self.linked_before.borrow().contains(&peer);
        self.config.history.declared_to(linked)
    }

    fn event(&self, event: BusEvent) {
        // A watcher that fell behind loses news, never the bus its progress.
        let _ = self.events.borrow_mut().try_send(event);
    }

    /// This node as it admits a link whose TLS session exports `channel_binding`: with
    /// `[cluster.auth]` on, the handshake MACs are keyed to that session.
    fn local_on(&self, channel_binding: Option<&[u8; 32]>) -> Local {
        let local = self.config.local.clone();
        Local {
            auth: match (local.auth, channel_binding) {
                (Some(auth), Some(binding)) => Some(auth.bound_to_channel(binding)),
                (auth, _) => auth,
            },
            runs: self.config.runs.ledger(),
            ..local
        }
    }

    /// A refusal of this node's dial to `peer`.
    fn refused(&self, peer: u8, refusal: &admission::Refusal) {
        let local = self.config.local.replica;
        self.stop_if_stale(refusal);
        tracing::warn!("replica {local}: link with replica {peer}: {refusal}");
        self.refusal_event(Some(peer), refusal);
    }

    /// A refusal that found this node's own data directory older than the node was stops
    /// the process (`RunsState::stop_as_stale_copy`).
    fn stop_if_stale(&self, refusal: &admission::Refusal) {
        if refusal.stops_this_node() {
            self.config.runs.stop_as_stale_copy(refusal);
        }
    }

    /// A refusal of the inbound connection from `from`, claiming to be `peer` when its hello
    /// could be trusted to say so. Every refusal is an event; the log line is limited.
    fn refused_inbound(&self, from: SocketAddr, peer: Option<u8>, refusal: &admission::Refusal) {
        self.stop_if_stale(refusal);
        match peer {
            Some(peer) => {
                let line = format_args!("link with replica {peer}: {refusal}");
                self.inbound_warning(from, refusal.field, line)
            }
            None => {
                let line = format_args!("inbound replica link: {refusal}");
                self.inbound_warning(from, refusal.field, line)
            }
        }
        self.refusal_event(peer, refusal);
    }

    fn refusal_event(&self, peer: Option<u8>, refusal: &admission::Refusal) {
        self.event(BusEvent::Refused {
            peer,
            field: refusal.field,
            detail: refusal.detail.clone(),
        });
    }

    /// Logs a warning of `kind` about the inbound connection from `from`, unless its address
    /// had one of that kind within `INBOUND_WARNING_INTERVAL`; the next one written says how
    /// many were held back.
    fn inbound_warning(&self, from: SocketAddr, kind: &'static str, line: std::fmt::Arguments<'_>) {
        let local = self.config.local.replica;
        let verdict = self
            .inbound_warnings
            .borrow_mut()
            .line(Instant::now(), (from.ip(), kind));
        let ip = from.ip();
        match verdict {
            Verdict::HoldBack => {}
            Verdict::Write { held_back: 0, .. } => tracing::warn!("replica {local}: {line}"),
            Verdict::Write {
                held_back,
                pooled: false,
            } => tracing::warn!(
                "replica {local}: {line} ({held_back} more like it about connections from {ip} \
                 held back since the last one)"
            ),
            Verdict::Write {
                held_back,
                pooled: true,
            } => tracing::warn!(
                "replica {local}: {line} ({held_back} more warnings about connections from \
                 sources past the first {INBOUND_WARNING_SOURCES_MAX} held back)"
            ),
        }
    }
}

/// A running bus. Dropping it ends every task it started: the listener, the dialers and the
/// links close.
pub struct ReplicaBus {
    shared: Rc<Shared>,
    #[cfg_attr(not(test), allow(dead_code))]
    local_addr: SocketAddr,
    _tasks: Vec<JoinHandle<()>>,
}

impl ReplicaBus {
    /// Binds the replica listener and starts dialing. The receiver reports what happens.
    pub async fn start(
        config: BusConfig,
    ) -> std::io::Result<(ReplicaBus, mpsc::Receiver<BusEvent>)> {
        let listener = bind(config.listen).await?;
        let local_addr = listener.local_addr()?;
        let outboxes = config
            .peers
            .keys()
            .map(|&peer| {
                let outbox = Outbox::new(
                    config.peer_queue_capacity,
                    config.peer_queue_bytes_max,
                    config.link_wait_max,
                    config.silence_max,
                );
                (peer, Arc::new(outbox))
            })
            .collect();
        let (events, receiver) = mpsc::channel(EVENTS_CAPACITY);
        let shared = Rc::new(Shared {
            config,
            router: Arc::new(Router::default()),
            outboxes: Arc::new(outboxes),
            events: RefCell::new(events),
            links: RefCell::new(HashMap::new()),
            generations: Cell::new(0),
            linked_before: RefCell::new(std::collections::BTreeSet::new()),
            inbound_handshakes: Cell::new(0),
            inbound_warnings: RefCell::new(LogLimit::new(
                INBOUND_WARNING_INTERVAL,
                INBOUND_WARNING_SOURCES_MAX,
            )),
        });
        let local = shared.config.local.replica;
        let links = match shared.config.tls {
            Some(_) => "mutual TLS",
            None => "plain TCP",
        };
        tracing::info!("replica {local}: replica listener on {local_addr} (links over {links})");
        let mut tasks = vec![compio::runtime::spawn(accept_loop(
            shared.clone(),
            listener,
        ))];
        for (&peer, address) in &shared.config.peers {
            if replica_link::role(local, peer) == Some(replica_link::Role::Dialer) {
                tasks.push(compio::runtime::spawn(dial_loop(
                    shared.clone(),
                    peer,
                    address.clone(),
                )));
            }
        }
        let bus = ReplicaBus {
            shared,
            local_addr,
            _tasks: tasks,
        };
        Ok((bus, receiver))
    }

    /// The address the replica listener bound (the configured one, with its port resolved).
    #[cfg_attr(not(test), allow(dead_code))] // for tests and diagnostics
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn sender(&self) -> BusSender {
        BusSender {
            outboxes: self.shared.outboxes.clone(),
            max_frame_size: self.shared.config.max_frame_size,
        }
    }

    pub fn router(&self) -> Arc<Router> {
        self.shared.router.clone()
    }

    /// Tells every linked peer that this node stops gracefully (a Ping with `stopping` set,
    /// queued behind what the groups sent), and waits until each was written or `within`
    /// passes: the peers then log the close that follows as a graceful stop, not a lost link.
    /// Returns the peers told. The last thing a node does before it exits; a peer not linked
    /// now, or whose queue is full, sees the close as a lost link.
    pub async fn say_stopping(&self, within: Duration) -> Vec<u8> {
        let local = &self.shared.config.local;
        let frame =
            Bytes::copy_from_slice(&replica_link::stopping_frame(local.cluster, local.replica));
        let queued: Vec<(u8, &Arc<Outbox>)> = self
            .shared
            .outboxes
            .iter()
            .filter(|(_, outbox)| outbox.linked.load(Ordering::Relaxed) != 0)
            .filter(|(_, outbox)| outbox.push(Instant::now(), frame.clone()).is_ok())
            .map(|(&peer, outbox)| (peer, outbox))
            .collect();
        let deadline = Instant::now() + within;
        let written = || {
            queued
                .iter()
                .filter(|(_, outbox)| outbox.stopping_written.load(Ordering::Relaxed))
                .map(|&(peer, _)| peer)
                .collect::<Vec<u8>>()
        };
        while written().len() < queued.len() && Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(2)).await;
        }
        written()
    }

    /// The peers with an admitted link right now.
    #[cfg_attr(not(test), allow(dead_code))] // for tests and diagnostics
    pub fn connected(&self) -> Vec<u8> {
        let mut peers: Vec<u8> = self.shared.links.borrow().keys().copied().collect();
        peers.sort_unstable();
        peers
    }

    /// Inbound connections accepted whose handshake has not ended yet.
    #[cfg(test)]
    fn inbound_handshakes(&self) -> usize {
        self.shared.inbound_handshakes.get()
    }
}

/// Binds the replica listener. The port of a process that just died may be held for a moment
/// while its io_uring is torn down, so `AddrInUse` is retried for a few seconds.
async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut address = address;
    loop {
        match TcpListener::bind(address).await {
            // A host without IPv6 (disabled in the kernel): IPv4's wildcard instead.
            Err(error)
                if address.ip() == IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
                    && (error.raw_os_error() == Some(libc::EAFNOSUPPORT)
                        || error.kind() == std::io::ErrorKind::AddrNotAvailable) =>
            {
                tracing::info!(
                    "replica listener: cannot bind {address} ({error}); binding IPv4's wildcard"
                );
                address.set_ip(std::net::Ipv4Addr::UNSPECIFIED.into());
            }
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                compio::time::sleep(Duration::from_millis(50)).await;
            }
            result => return result,
        }
    }
}

/// Accepts inbound links; each runs the acceptor's handshake, then the link, on its own task.
/// The tasks are owned here, so dropping the bus (which drops this loop) ends them. A
/// connection accepted while `inbound_handshakes_max` handshakes are in progress is closed at
/// once: its dialer, if it is a peer, retries after its backoff.
async fn accept_loop(shared: Rc<Shared>, listener: TcpListener) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("replica listener: accept failed: {error}");
                compio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = HandshakeSlot::take(&shared) else {
            drop(stream);
            let max = shared.config.inbound_handshakes_max;
            shared.inbound_warning(
                from,
                "cap",
                format_args!(
                    "replica listener: closed the connection from {from} unheard: {max} inbound \
                     handshakes are in progress, the most allowed"
                ),
            );
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.retain(|task| !task.is_finished());
        connections.push(compio::runtime::spawn(inbound(
            shared.clone(),
            stream,
            from,
            slot,
        )));
    }
}

/// A refusal by the TLS layer, or of a peer whose TLS setting differs from ours.
fn tls_refusal(detail: String) -> admission::Refusal {
    admission::Refusal {
        status: None,
        field: "tls",
        detail,
    }
}

/// What a link without TLS concludes from the start of a TLS record.
fn peer_speaks_tls(what: &str) -> admission::Refusal {
    tls_refusal(format!(
        "the peer sent {what}: it has cluster.tls enabled and this node has not"
    ))
}

/// The acceptor's side of one connection: the handshake while `slot` counts it, then the link.
async fn inbound(shared: Rc<Shared>, stream: TcpStream, from: SocketAddr, slot: HandshakeSlot) {
    let Some((stream, admitted)) = inbound_handshake(&shared, stream, from).await else {
        return;
    };
    drop(slot);
    run_link(&shared, stream, admitted).await;
}

/// What is left of the handshake timeout at `deadline`.
fn left_until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// TLS when configured, then the admission handshake, all within one handshake timeout (the
/// dialer gives up after one too, so a step that waited longer would only hold the slot).
/// `None` when the connection is refused or fails; every refusal and timeout is reported.
async fn inbound_handshake(
    shared: &Shared,
    stream: TcpStream,
    from: SocketAddr,
) -> Option<(LinkStream, admission::Admitted)> {
    let within = shared.config.handshake_timeout;
    let deadline = Instant::now() + within;
    let (mut stream, tls_peer, channel_binding) = match &shared.config.tls {
        None => (LinkStream::Plain(stream), None, None),
        Some(tls) => match compio::time::timeout(left_until(deadline), tls.accept(stream)).await {
            Ok(Ok(link)) => (
                LinkStream::Tls(Box::new(link.stream)),
                Some(link.peer),
                Some(link.channel_binding),
            ),
            Ok(Err(error)) => {
                let cause = replica_tls::handshake_cause(&error);
                shared.refused_inbound(from, None, &tls_refusal(format!("from {from}: {cause}")));
                return None;
            }
            Err(_) => {
                shared.inbound_warning(
                    from,
                    "timeout",
                    format_args!(
                        "replica listener: {from} finished no TLS handshake within {within:?}"
                    ),
                );
                return None;
            }
        },
    };
    let local = shared.local_on(channel_binding.as_ref());
    let reading = stream.read_handshake_frame::<HEADER_SIZE>();
    let hello = match compio::time::timeout(left_until(deadline), reading).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(HandshakeRead::PeerSpeaksTls(what))) => {
            let refusal = peer_speaks_tls(&format!("{what} from {from}"));
            shared.refused_inbound(from, None, &refusal);
            return None;
        }
        Ok(Err(HandshakeRead::Io(error))) => {
            tracing::debug!("replica listener: {from} closed before its hello: {error}");
            return None;
        }
        Err(_) => {
            shared.inbound_warning(
                from,
                "timeout",
                format_args!("replica listener: {from} sent no hello within {within:?}"),
            );
            return None;
        }
    };
    // Only the declaration depends on the sender named here; admission judges the frame.
    let history = shared.declared_to(hello[GenericHeader::REPLICA_OFFSET]);
    let step = replica_link::accept_hello(&local, &hello, history, rand::random());
    if let Ok(admitted) = &step.verdict
        && let Some(linked) = shared.live_under_another_run(admitted.replica, admitted.runs.run)
    {
        let (peer, run) = (admitted.replica, admitted.runs.run);
        let detail = format!(
            "replica {peer} at {from} declares {run}, but a live link with replica {peer} \
             (heard within cluster.heartbeat_timeout) carries its {linked}: refused, the live \
             link kept. Two processes claim replica {peer}: stop the one that should not run (a \
             node being replaced must be stopped before its replacement starts)"
        );
        shared.inbound_warning(from, "duplicate", format_args!("{detail}"));
        shared.event(BusEvent::Refused {
            peer: Some(peer),
            field: "duplicate",
            detail,
        });
        return None;
    }
    if let (Ok(admitted), Some(peer_certificate), Some(tls)) =
        (&step.verdict, &tls_peer, &shared.config.tls)
    {
        // The CA vouched for the certificate; the roster says which ip it must name.
        let named = match shared.config.peers.get(&admitted.replica) {
            Some(address) => peer_certificate.check_named(tls, &address.host),
            None => Err("it is not in the roster".to_string()),
        };
        if let Err(problem) = named {
            shared.refused_inbound(from, Some(admitted.replica), &tls_refusal(problem));
            return None;
        }
    }
    if let Some(answer) = step.answer {
        let writing = stream.write_all(answer.to_vec());
        let write = compio::time::timeout(left_until(deadline), writing).await;
        if !matches!(write, Ok(Ok(()))) {
            tracing::debug!("replica listener: cannot answer {from}");
            return None;
        }
    }
    let admitted = match step.verdict {
        Ok(admitted) => admitted,
        Err(refusal) => {
            // Only a sealed hello says who sent it.
            let peer = refusal.status.map(|_| hello[GenericHeader::REPLICA_OFFSET]);
            shared.refused_inbound(from, peer, &refusal);
            return None;
        }
    };
    if let Some(awaiting) = step.awaiting_finish {
        let peer = admitted.replica;
        let reading = stream.read_handshake_frame::<HEADER_SIZE>();
        let finish = match compio::time::timeout(left_until(deadline), reading).await {
            Ok(Ok(finish)) => finish,
            Ok(Err(HandshakeRead::Io(error))) => {
                shared.inbound_warning(
                    from,
                    "finish",
                    format_args!(
                        "replica {peer} at {from} closed before finishing the authenticated \
                         handshake: {}",
                        replica_tls::cause(&error)
                    ),
                );
                return None;
            }
            Ok(Err(HandshakeRead::PeerSpeaksTls(what))) => {
                shared.refused_inbound(from, Some(peer), &peer_speaks_tls(what));
                return None;
            }
            Err(_) => {
                shared.inbound_warning(
                    from,
                    "timeout",
                    format_args!(
                        "replica {peer} at {from} sent no handshake finish within {within:?}"
                    ),
                );
                return None;
            }
        };
        if let Err(refusal) = awaiting.finish(&finish) {
            shared.refused_inbound(from, Some(peer), &refusal);
            return None;
        }
    }
    Some((stream, admitted))
}

/// The dialer's side of the link to `peer`: resolve, connect, handshake, carry frames, and
/// after any failure wait out the backoff and start again.
async fn dial_loop(shared: Rc<Shared>, peer: u8, address: PeerAddress) {
    let config = &shared.config;
    let mut backoff = Backoff::new(
        config.backoff_base,
        config.backoff_max,
        config.seed ^ (u64::from(peer) << 32),
    );
    let local = config.local.replica;
    // The handshake timeout is the cluster's heartbeat timeout.
    let mut lookups = Lookups::new(local, peer, config.handshake_timeout);
    loop {
        let attempt = dial(&shared, peer, &address, &mut lookups);
        match compio::time::timeout(config.handshake_timeout, attempt).await {
            Ok(Ok((stream, admitted))) => {
                backoff.reset();
                run_link(&shared, stream, admitted).await;
            }
            Ok(Err(Some(refusal))) => shared.refused(peer, &refusal),
            Ok(Err(None)) => {}
            Err(_) => tracing::debug!(
                "replica {local}: no link with replica {peer} at {address} within {:?}",
                config.handshake_timeout
            ),
        }
        compio::time::sleep(backoff.next_delay()).await;
    }
}

/// How long, in heartbeat timeouts, every dial of a peer may fail to connect before it is a
/// warning (a minute by default): a peer starting a moment later, or stopped for a restart, is
/// normal.
const UNREACHABLE_WARNING_AFTER_TIMEOUTS: u32 = 12;

/// One dial loop's record of its peer's name lookups and connects: a failed lookup is a warning
/// naming the name, and connects that failed for `warn_after` one naming the
/// address, limited to one per `UNRESOLVED_WARNING_INTERVAL` (with the count held back); the
/// first lookup success after failures says what the name resolved to.
struct Lookups {
    local: u8,
    peer: u8,
    warnings: Throttled,
    failed: bool,
    /// When the connects started failing, while every one since has.
    unreachable_since: Option<Instant>,
    warn_after: Duration,
}

impl Lookups {
    fn new(local: u8, peer: u8, heartbeat_timeout: Duration) -> Self {
        Lookups {
            local,
            peer,
            warnings: Throttled::new(UNRESOLVED_WARNING_INTERVAL),
            failed: false,
            unreachable_since: None,
            warn_after: heartbeat_timeout * UNREACHABLE_WARNING_AFTER_TIMEOUTS,
        }
    }

    /// A connect to the peer succeeded.
    fn reached(&mut self) {
        self.unreachable_since = None;
    }

    fn failed(&mut self, address: &PeerAddress, why: &str) {
        self.failed = true;
        let (local, peer) = (self.local, self.peer);
        match self.warnings.due(Instant::now()) {
            None => tracing::debug!(
                "replica {local}: replica {peer}'s address {address} does not resolve: {why}"
            ),
            Some(held_back) => tracing::warn!(
                "replica {local}: replica {peer}'s address {address} does not resolve ({why}); \
                 dialing it again after the backoff{}",
                match held_back {
                    0 => String::new(),
                    n => format!(" ({n} more failed lookups since the last warning)"),
                }
            ),
        }
    }

    /// `address` resolved to `socket`, which refused or did not answer the connection: once
    /// every connect failed for `warn_after`, a warning at most every
    /// `UNRESOLVED_WARNING_INTERVAL`, so a roster address no peer listens on (a wrong
    /// `tcp_replica`) is named, not only blamed on lost frames; so is a peer down that long.
    fn unreachable(&mut self, address: &PeerAddress, socket: SocketAddr, error: &std::io::Error) {
        let (local, peer, now) = (self.local, self.peer, Instant::now());
        let since = *self.unreachable_since.get_or_insert(now);
        let due = match now.duration_since(since) >= self.warn_after {
            true => self.warnings.due(now),
            false => None,
        };
        match due {
            None => tracing::debug!(
                "replica {local}: cannot connect to replica {peer} at {address} ({socket}): \
                 {error}"
            ),
            Some(held_back) => tracing::warn!(
                "replica {local}: cannot connect to replica {peer} at {address} ({socket}): \
                 {error}, and so has every dial for {}s; dialing it again after the backoff{}",
                now.duration_since(since).as_secs(),
                match held_back {
                    0 => String::new(),
                    n => format!(" ({n} more failed dials since the last warning)"),
                }
            ),
        }
    }

    fn resolved(&mut self, address: &PeerAddress, found: &[SocketAddr]) {
        let (local, peer) = (self.local, self.peer);
        if std::mem::take(&mut self.failed) {
            tracing::info!(
                "replica {local}: replica {peer}'s address {address} resolves to {found:?}"
            );
        } else if matches!(address.host, NodeHost::Name(_)) {
            tracing::debug!("replica {local}: replica {peer}'s address {address} is {found:?}");
        }
    }
}

/// Resolves `address` for this attempt and connects to the first of its addresses that
/// answers. `None` when it does not resolve or nothing answers (reported through `lookups`).
async fn connect(
    shared: &Shared,
    address: &PeerAddress,
    lookups: &mut Lookups,
) -> Option<TcpStream> {
    let found = match shared.config.resolver.resolve(address).await {
        Ok(found) if !found.is_empty() => found,
        Ok(_) => {
            lookups.failed(address, "no addresses");
            return None;
        }
        Err(error) => {
            lookups.failed(address, &error.to_string());
            return None;
        }
    };
    lookups.resolved(address, &found);
    for socket in &found {
        match TcpStream::connect(*socket).await {
            Ok(stream) => {
                lookups.reached();
                return Some(stream);
            }
            Err(error) => lookups.unreachable(address, *socket, &error),
        }
    }
    None
}

/// Connects and runs the dialer's handshake (TLS first when configured). `Err(None)` is a
/// failure to reach the peer (a name that does not resolve or an address that refuses the
/// connection: a warning at most every 30 s; a handshake cut short, at debug), `Err(Some(_))` a
/// refusal.
async fn dial(
    shared: &Shared,
    peer: u8,
    address: &PeerAddress,
    lookups: &mut Lookups,
) -> Result<(LinkStream, admission::Admitted), Option<admission::Refusal>> {
    let local = shared.config.local.replica;
    let unreachable = |what: &str, error: std::io::Error| {
        tracing::debug!("replica {local}: {what} replica {peer} at {address}: {error}");
        None
    };
    let stream = connect(shared, address, lookups).await.ok_or(None)?;
    let _ = stream.set_nodelay(true);
    let (mut stream, channel_binding) = match &shared.config.tls {
        None => (LinkStream::Plain(stream), None),
        Some(tls) => match tls.connect(stream, &address.host).await {
            Ok(link) => (
                LinkStream::Tls(Box::new(link.stream)),
                Some(link.channel_binding),
            ),
            Err(error) => return Err(Some(tls_refusal(replica_tls::handshake_cause(&error)))),
        },
    };
    let handshake = DialerHandshake::new(
        shared.local_on(channel_binding.as_ref()),
        peer,
        shared.declared_to(peer),
        // rand's thread generator is a CSPRNG (ChaCha, seeded and reseeded by the OS).
        rand::random(),
    );
    stream
        .write_all(handshake.opening().to_vec())
        .await
        .map_err(|e| unreachable("cannot greet", e))?;
    let answer = match stream.read_handshake_frame::<HEADER_SIZE>().await {
        Ok(answer) => answer,
        Err(HandshakeRead::PeerSpeaksTls(what)) => return Err(Some(peer_speaks_tls(what))),
        // A peer that refuses this node's TLS certificate says so only once the hello is sent.
        Err(HandshakeRead::Io(error)) if replica_tls::is_tls_failure(&error) => {
            return Err(Some(tls_refusal(replica_tls::cause(&error))));
        }
        Err(HandshakeRead::Io(error))
            if error.kind() == std::io::ErrorKind::UnexpectedEof && stream.is_tls() =>
        {
            return Err(Some(tls_refusal(
                "the peer closed the connection without answering the hello; its log says why"
                    .into(),
            )));
        }
        // Without TLS, a peer with `[cluster.tls]` answers the hello with a TLS alert (above),
        // and one that refuses answers with its reason: a close is a peer stopping or starting,
        // seen at every restart of a peer, not a refusal to warn of.
        Err(HandshakeRead::Io(error)) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(unreachable("no answer to the hello from", error));
        }
        Err(HandshakeRead::Io(error)) => return Err(unreachable("no answer from", error)),
    };
    let outcome = handshake.answer(&answer);
    if let Some(finish) = outcome.finish {
        // Written on a refusal too, so the acceptor logs why; a failed write only loses that.
        let written = stream.write_all(finish.to_vec()).await;
        if let (Err(error), Ok(_)) = (written, &outcome.verdict) {
            return Err(unreachable("cannot finish the handshake with", error));
        }
    }
    let admitted = outcome.verdict.map_err(Some)?;
    Ok((stream, admitted))
}

/// Carries frames over an admitted link until it fails, the peer closes it, or a newer link
/// from the same peer replaces it.
async fn run_link(shared: &Rc<Shared>, stream: LinkStream, admitted: admission::Admitted) {
    let peer = admitted.replica;
    // Kept before the link carries a frame: the peer's run, and ours when it was restored.
    shared.config.runs.learn(peer, admitted.runs);
    let local = shared.config.local.replica;
    let generation = shared.generations.get() + 1;
    shared.generations.set(generation);
    let (supersede, superseded) = oneshot::channel::<()>();
    // A dialer redials only after its old link failed, so a second link from the same peer
    // means the old one is dead on the other side (the peer restarted): the newer one wins.
    let replaced = shared.links.borrow_mut().insert(
        peer,
        LinkSlot {
            generation,
            _supersede: supersede,
        },
    );
    drop(replaced);
    shared.linked_before.borrow_mut().insert(peer);
    let history = admitted.history;
    tracing::info!(
        "replica {local}: link with replica {peer} admitted (metadata history {history:?})"
    );
    shared.event(BusEvent::Admitted { peer, history });

    let check = FrameCheck {
        cluster: shared.config.local.cluster,
        peer,
        max_frame_size: shared.config.max_frame_size,
    };
    let outbox = shared.outboxes.get(&peer).cloned();
    if let Some(outbox) = &outbox {
        outbox.link_admitted(Instant::now(), generation);
        outbox.link_event(Instant::now(), LinkEvent::Admitted { generation });
    }
    let cluster = shared.config.local.cluster;
    let leases = shared.config.leases.clone();
    let link = outbox.clone().map(|outbox| LinkKeepalive {
        outbox,
        generation,
        cluster,
        local,
        peer,
        leases: leases.clone(),
    });
    let (reader, writer) = stream.split();
    // Set when the peer says it stops gracefully: the close that follows is no fault.
    let stopping = Rc::new(Cell::new(false));
    let reading = Box::pin(read_frames(
        reader,
        check,
        shared.router.clone(),
        shared.config.handshake_timeout,
        link,
        stopping.clone(),
    ));
    let writer_outbox = outbox.clone();
    let writing = Box::pin(async move {
        match writer_outbox {
            Some(outbox) => write_frames(writer, &outbox).await,
            None => std::future::pending().await,
        }
    });
    let pinger_outbox = outbox.clone();
    let pinging = Box::pin(async move {
        match pinger_outbox {
            Some(outbox) => send_pings(&outbox, &leases, cluster, (local, peer)).await,
            None => std::future::pending().await,
        }
    });
    let replacing = Box::pin(async move {
        let _ = superseded.await;
        "a newer link from the same replica replaced it".to_string()
    });
    let reason = {
        use futures_util::future::{Either, select};
        let sending = select(writing, pinging);
        match select(reading, select(sending, replacing)).await {
            Either::Left((reason, _)) => reason,
            Either::Right((Either::Left((Either::Left((reason, _)), _)), _)) => reason,
            Either::Right((Either::Left((Either::Right((reason, _)), _)), _)) => reason,
            Either::Right((Either::Right((reason, _)), _)) => reason,
        }
    };
    {
        let mut links = shared.links.borrow_mut();
        if links
            .get(&peer)
            .is_some_and(|slot| slot.generation == generation)
        {
            links.remove(&peer);
        }
    }
    if let Some(outbox) = &outbox {
        // A newer link of the same peer keeps its mark (and its liveness).
        let _ = outbox
            .linked
            .compare_exchange(generation, 0, Ordering::Relaxed, Ordering::Relaxed);
        outbox.link_event(Instant::now(), LinkEvent::Closed { generation });
    }
    if stopping.get() {
        tracing::info!(
            "replica {local}: replica {peer} stopped (graceful): link with replica {peer} \
             closed: {reason}"
        );
    } else {
        tracing::warn!("replica {local}: link with replica {peer} closed: {reason}");
    }
    shared.event(BusEvent::Closed {
        peer,
        reason,
        graceful: stopping.get(),
    });
}

/// What the reader of one link does for the peer's liveness: mark every verified frame heard
/// and answer each Ping.
struct LinkKeepalive {
    outbox: Arc<Outbox>,
    generation: u64,
    /// What a Pong is stamped with.
    cluster: u128,
    local: u8,
    peer: u8,
    /// What the Pings report to and the Pongs grant from.
    leases: Rc<NodeLeases>,
}

/// Reads, verifies and routes frames; returns why it stopped. A link may be idle between
/// frames (the peer's Pings and the consensus heartbeats judge a silent peer), but a body must
/// follow its header within `body_within`, so a stalled peer cannot hold a half-read frame
/// forever. Ping and Pong stop here: a Ping is answered through the outbox (dropped with the
/// rest when the queue is full), and neither reaches a group.
/// The slowest a link may carry a frame's body before it counts as stalled: 1 MiB/s.
const BODY_BYTES_PER_SECOND_MIN: u64 = 1 << 20;

/// How long the body of a `len`-byte frame may take once its header arrived: `base` (the
/// heartbeat timeout) plus its size at the slowest rate a live link is allowed. A fixed
/// deadline closed the link of a large frame on any link slower than size / timeout (64 MiB
/// in 5 s is 13 MB/s, a 100 Mbit link), every time it was resent.
fn body_deadline(base: Duration, len: usize) -> Duration {
    base + Duration::from_secs_f64(len as f64 / BODY_BYTES_PER_SECOND_MIN as f64)
}

async fn read_frames(
    mut stream: LinkReader,
    check: FrameCheck,
    router: Arc<Router>,
    body_within: Duration,
    keepalive: Option<LinkKeepalive>,
    stopping: Rc<Cell<bool>>,
) -> String {
    loop {
        let header = match stream.read_header::<HEADER_SIZE>().await {
            Ok(header) => header,
            Err(error) => return closed(error),
        };
        let verified = match check.header(&header) {
            Ok(verified) => verified,
            Err(reject) => return reject.to_string(),
        };
        let len = verified.body_len();
        let body = if len == 0 {
            Vec::new()
        } else {
            let within = body_deadline(body_within, len);
            match compio::time::timeout(within, stream.read_body(len)).await {
                Ok(Ok(body)) => body,
                // Said apart from a close between frames: a frame cut short is a connection
                // reset or a broken path, not a peer that stopped.
                Ok(Err(error)) => {
                    let command = verified.command;
                    return format!(
                        "{} within a {command:?} frame's {len}-byte body",
                        closed(error)
                    );
                }
                Err(_) => {
                    return format!(
                        "the body of a {:?} frame ({len} bytes) did not arrive within \
                         {within:?}",
                        verified.command
                    );
                }
            }
        };
        if let Err(reject) = check.body(&verified, &body) {
            return reject.to_string();
        }
        if replica_link::says_stopping(&verified, &header) {
            stopping.set(true);
        }
        if let Some(keepalive) = &keepalive {
            let generation = keepalive.generation;
            let outbox = &keepalive.outbox;
            outbox.link_event(Instant::now(), LinkEvent::Heard { generation });
            match verified.command {
                // Answered with this node's clock, the Ping's own echoed, and a grant lease
                // when this node leads the metadata group.
                // A peer that stops is granted no more; one that gave up its leases first
                // holds none of those it was granted.
                Command::Ping => {
                    let ping = replica_link::keepalive_fields(&header);
                    let now = Instant::now();
                    let leases = &keepalive.leases;
                    leases.ping_heard(keepalive.peer, ping.metadata_applied);
                    if replica_link::gave_up_leases(&verified, &header) {
                        leases.peer_stops(keepalive.peer);
                    }
                    let lease = match stopping.get() {
                        true => None,
                        false => leases.grant_for(keepalive.peer, now),
                    };
                    let fields = replica_link::Keepalive {
                        wall_clock: wall_clock::now_micros(),
                        echo: ping.wall_clock,
                        grants_leases: true,
                        lease,
                        ..Default::default()
                    };
                    let pong = replica_link::timed_keepalive_frame(
                        keepalive.cluster,
                        keepalive.local,
                        Command::Pong,
                        fields,
                    );
                    let _ = outbox.push(now, Bytes::copy_from_slice(&pong));
                }
                Command::Pong => {
                    let pong = replica_link::keepalive_fields(&header);
                    let read = wall_clock::now_micros();
                    if let Some(sample) =
                        ClockSample::of_pong(pong.echo, read, pong.wall_clock, Instant::now())
                    {
                        *outbox.clock.lock().expect("clock lock") = Some(sample);
                    }
                    keepalive.leases.pong_heard(
                        keepalive.peer,
                        pong.echo,
                        pong.grants_leases,
                        pong.lease,
                    );
                }
                _ => {}
            }
        }
        if matches!(verified.command, Command::Ping | Command::Pong) {
            continue;
        }
        router.deliver(Inbound {
            from: check.peer,
            command: verified.command,
            group: verified.group,
            header: Box::new(header),
            body: Bytes::from(body),
        });
    }
}

/// Queues a Ping whenever the peer's liveness says one is due, for as long as the link runs.
/// A full queue drops it like any frame: the peer then has other frames to hear, or is not
/// reading at all. Each time it wakes it also logs a silence of the link starting or ending:
/// a link that stays up while nothing comes over it (a stopped process, frames lost one way)
/// is otherwise seen only in the roster, and the refusals (58) a node out of touch with its
/// primary answers would name no cause. A silence past `SILENCE_CLOSES_AFTER` heartbeat
/// timeouts ends the link (the reason returned), so it is dialed afresh. A metadata op a
/// fence waits on, applied here (`NodeLeases::report_applied`), is reported by a Ping at once.
async fn send_pings(
    outbox: &Outbox,
    leases: &NodeLeases,
    cluster: u128,
    (local, peer): (u8, u8),
) -> String {
    use futures_util::StreamExt;
    use futures_util::future::{Either, select};
    let mut reports = leases.reports();
    loop {
        let (due, keepalive) = {
            let liveness = outbox.liveness.lock().expect("liveness lock");
            (liveness.poll_timeout(), liveness.keepalive())
        };
        let slept_from = Instant::now();
        let sleep = std::pin::pin!(async {
            match due {
                Some(due) => compio::time::sleep_until(due).await,
                // The link's close is being recorded; the link ends before this wakes again.
                None => compio::time::sleep(keepalive).await,
            }
        });
        if let Either::Right((Some(op), _)) = select(sleep, reports.next()).await {
            ping(outbox, leases, cluster, (local, peer), op);
            continue;
        }
        let now = Instant::now();
        // Woken a keepalive late, this process was the one stopped (SIGSTOP, a stalled
        // host): what the peer sent meanwhile is still unread, so its silence is not judged
        // until the next wake.
        let woke_late = due.map_or(slept_from, |due| due.max(slept_from)) + keepalive < now;
        let (ping_due, silence, close) = {
            let mut liveness = outbox.liveness.lock().expect("liveness lock");
            let silence = (!woke_late).then(|| liveness.poll_silence(now)).flatten();
            let close = (!woke_late).then(|| liveness.close_due(now)).flatten();
            (liveness.poll_ping(now), silence, close)
        };
        if let Some(silent_for) = close {
            return format!(
                "heard nothing from replica {peer} for {silent_for:?} ({SILENCE_CLOSES_AFTER} \
                 heartbeat timeouts): closed to dial afresh, as a path that forgot the \
                 connection never says so"
            );
        }
        if ping_due.is_some() {
            ping(outbox, leases, cluster, (local, peer), 0);
        }
        match silence {
            Some(Silence::Began { silent_for }) => tracing::warn!(
                "replica {local}: heard nothing from replica {peer} for {silent_for:?} though \
                 the link is up (Unreachable: the process stopped, or its frames are lost on \
                 the way)"
            ),
            Some(Silence::Ended { silent_for }) => tracing::info!(
                "replica {local}: replica {peer} heard again after {silent_for:?} of silence"
            ),
            None => {}
        }
    }
}

/// Queues a Ping reporting the metadata op this node applied (at least `applied`: an op the
/// model holds before the group publishes it).
fn ping(
    outbox: &Outbox,
    leases: &NodeLeases,
    cluster: u128,
    (local, peer): (u8, u8),
    applied: u64,
) {
    let now = Instant::now();
    let wall_clock = wall_clock::now_micros();
    let fields = replica_link::Keepalive {
        wall_clock,
        metadata_applied: leases.applied().max(applied),
        ..Default::default()
    };
    let ping = replica_link::timed_keepalive_frame(cluster, local, Command::Ping, fields);
    leases.ping_sent(peer, wall_clock, now);
    let _ = outbox.push(now, Bytes::copy_from_slice(&ping));
}

/// Writes queued frames in order; returns why it stopped. The frames queued behind the one
/// it pops go in the same write, up to `WRITE_BATCH_BYTES` (a larger frame goes alone, as
/// popped): a tick's heartbeats or the view-change messages of thousands of groups take a few
/// writes, not one write and one runtime turn each, which kept a restart of every node of 1800
/// partitions from serving for two minutes while their full queues dropped frames. Under TLS
/// the writes made while more are queued go out together, flushed once the queue is empty.
/// A failed write loses the frames it held, as the link does (VSR retransmits); the frames
/// still queued wait for the next link.
async fn write_frames(mut stream: LinkWriter, outbox: &Outbox) -> String {
    // Reused by every write, so a batch allocates nothing: the frames taken behind the popped
    // one, and the bytes of all of them in order.
    let mut taken: Vec<Bytes> = Vec::new();
    let mut batch: Vec<u8> = Vec::with_capacity(WRITE_BATCH_BYTES);
    loop {
        let first = outbox.pop().await;
        outbox.pop_more(WRITE_BATCH_BYTES.saturating_sub(first.len()), &mut taken);
        let frames = 1 + taken.len() as u64;
        let stopping = std::iter::once(&first)
            .chain(&taken)
            .any(|frame| replica_link::is_stopping_frame(frame));
        let (written, bytes) = if taken.is_empty() {
            // Alone, it is written as queued, without a copy.
            let bytes = first.len();
            (stream.write_frame(first).await, bytes)
        } else {
            batch.extend_from_slice(&first);
            for frame in taken.drain(..) {
                batch.extend_from_slice(&frame);
            }
            let bytes = batch.len();
            let (written, returned) = stream.write_batch(std::mem::take(&mut batch)).await;
            batch = returned;
            batch.clear();
            (written, bytes)
        };
        if let Err(error) = written {
            return format!("write failed: {}", replica_tls::cause(&error));
        }
        outbox.sent_frames.fetch_add(frames, Ordering::Relaxed);
        outbox.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        // The stopping Ping is flushed at once: the process exits once it is written.
        if (stopping || outbox.is_empty())
            && let Err(error) = stream.flush().await
        {
            return format!("write failed: {}", replica_tls::cause(&error));
        }
        if stopping {
            outbox.stopping_written.store(true, Ordering::Relaxed);
        }
    }
}

fn closed(error: std::io::Error) -> String {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        "the peer closed the connection".into()
    } else {
        format!("read failed: {}", replica_tls::cause(&error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::admission::local_identity;
    use crate::consensus::replica_link::tests::{CLUSTER, commit_frame};
    use compio::BufResult;
    use compio::io::{AsyncReadExt, AsyncWriteExt};
    use futures_util::StreamExt;
    use iggy_generated::frames::METADATA_GROUP;

    /// Long enough for a loaded machine; every wait ends as soon as its event arrives.
    const PATIENCE: Duration = Duration::from_secs(20);

    /// Distinct free loopback addresses (bound together, then released for the buses).
    fn free_addresses(n: usize) -> Vec<SocketAddr> {
        let listeners: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        listeners.iter().map(|l| l.local_addr().unwrap()).collect()
    }

    /// The runs of a node with no data directory: run 0, never judged.
    fn no_runs(replica: u8) -> Rc<RunsState> {
        Rc::new(RunsState::start(CLUSTER, replica, None, false).unwrap())
    }

    /// The lease book of `replica` in a roster of `replicas` (no test here judges grants).
    fn leases(replica: u8, replicas: u8) -> Rc<NodeLeases> {
        Rc::new(NodeLeases::new(replica, replicas, Duration::from_secs(10)))
    }

    fn config(replica: u8, roster: &[SocketAddr]) -> BusConfig {
        BusConfig {
            local: Local {
                cluster: CLUSTER,
                replica,
                replica_count: roster.len() as u8,
                identity: local_identity(),
                auth: None,
                roster: 1,
                runs: RunLedger::default(),
            },
            listen: roster[replica as usize],
            peers: roster
                .iter()
                .enumerate()
                .filter(|(id, _)| *id != replica as usize)
                .map(|(id, address)| (id as u8, PeerAddress::from(*address)))
                .collect(),
            resolver: Resolver::system(),
            max_frame_size: 1 << 20,
            handshake_timeout: Duration::from_secs(5),
            inbound_handshakes_max: INBOUND_HANDSHAKES_MAX,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(200),
            peer_queue_capacity: 8,
            peer_queue_bytes_max: PEER_QUEUE_BYTES_MAX,
            link_wait_max: Duration::from_secs(60),
            silence_max: Duration::from_secs(5),
            seed: u64::from(replica),
            history: HistorySource::fixed(MetadataHistory::Absent),
            runs: no_runs(replica),
            tls: None,
            leases: leases(replica, roster.len() as u8),
        }
    }

    struct Node {
        bus: ReplicaBus,
        events: mpsc::Receiver<BusEvent>,
        backlog: Vec<BusEvent>,
        inbox: mpsc::Receiver<Inbound>,
    }

    async fn start(config: BusConfig) -> Node {
        let (bus, events) = ReplicaBus::start(config).await.unwrap();
        let inbox = bus.router().subscribe(METADATA_GROUP, 64);
        Node {
            bus,
            events,
            backlog: Vec::new(),
            inbox,
        }
    }

    /// The oldest event not yet waited for that `wanted` accepts; the others stay for later
    /// waits (links come up in any order).
    async fn wait_for(node: &mut Node, what: &str, wanted: impl Fn(&BusEvent) -> bool) -> BusEvent {
        if let Some(at) = node.backlog.iter().position(&wanted) {
            return node.backlog.remove(at);
        }
        let search = async {
            while let Some(event) = node.events.next().await {
                if wanted(&event) {
                    return event;
                }
                node.backlog.push(event);
            }
            panic!("event stream ended waiting for {what}");
        };
        compio::time::timeout(PATIENCE, search)
            .await
            .unwrap_or_else(|_| panic!("no {what} within {PATIENCE:?}"))
    }

    async fn admitted(node: &mut Node, peer: u8) {
        wait_for(
            node,
            &format!("admission of {peer}"),
            |e| matches!(e, BusEvent::Admitted { peer: p, .. } if *p == peer),
        )
        .await;
    }

    async fn received(node: &mut Node) -> Inbound {
        compio::time::timeout(PATIENCE, node.inbox.next())
            .await
            .expect("a frame within the patience")
            .expect("inbox open")
    }

    /// Sends `body` until it arrives: a frame queued before the link came up is delivered
    /// once it does, but one written into a link the peer is just closing may be lost (the
    /// bus is lossy; VSR retransmits, and so does this helper).
    async fn deliver(from: &Node, to: &mut Node, body: &[u8]) -> Inbound {
        let sender = from.bus.sender();
        let peer = to.bus.shared.config.local.replica;
        let me = from.bus.shared.config.local.replica;
        let frame = Bytes::from(commit_frame(me, METADATA_GROUP, 0, body));
        let attempt = async {
            loop {
                let _ = sender.send(peer, frame.clone());
                if let Ok(Some(inbound)) =
                    compio::time::timeout(Duration::from_millis(300), to.inbox.next()).await
                    && inbound.body == body
                {
                    return inbound;
                }
            }
        };
        compio::time::timeout(PATIENCE, attempt)
            .await
            .expect("delivered within the patience")
    }

    #[compio::test]
    async fn three_buses_exchange_frames_in_every_direction() {
        let roster = free_addresses(3);
        let mut nodes = Vec::new();
        for replica in 0..3 {
            nodes.push(start(config(replica, &roster)).await);
        }
        for (me, node) in nodes.iter_mut().enumerate() {
            for peer in (0..3u8).filter(|p| *p as usize != me) {
                admitted(node, peer).await;
            }
        }
        for from in 0..3u8 {
            for to in (0..3u8).filter(|t| *t != from) {
                let body = format!("from {from} to {to}").into_bytes();
                let frame = commit_frame(from, METADATA_GROUP, 0, &body);
                nodes[from as usize]
                    .bus
                    .sender()
                    .send(to, Bytes::from(frame.clone()))
                    .unwrap();
                let inbound = received(&mut nodes[to as usize]).await;
                assert_eq!(inbound.from, from);
                assert_eq!(inbound.command, Command::Commit);
                assert_eq!(inbound.group, METADATA_GROUP);
                assert_eq!(inbound.body, body);
                assert_eq!(&inbound.header[..], &frame[..HEADER_SIZE]);
            }
        }
        // Frames of a group nobody subscribed are counted, not delivered to another group.
        let partition = 1 << 32 | 1 << 20 | 1;
        let sub = nodes[1].bus.router().subscribe(partition, 4);
        drop(sub);
        let undeliverable = nodes[1].bus.router().undeliverable();
        nodes[0]
            .bus
            .sender()
            .send(1, Bytes::from(commit_frame(0, partition, 5, b"")))
            .unwrap();
        // Behind it, a metadata frame: once that arrives, the partition frame was handled.
        let (first, rest) = nodes.split_at_mut(1);
        deliver(&first[0], &mut rest[0], b"after").await;
        assert_eq!(nodes[1].bus.router().undeliverable(), undeliverable + 1);
        assert_eq!(nodes[0].bus.connected(), vec![1, 2]);
        assert_eq!(nodes[2].bus.connected(), vec![0, 1]);
    }

    /// Starts replica 0 changed by `change` and an honest replica 1, and returns the refusal
    /// each side reported.
    async fn refusals(change: impl Fn(&mut BusConfig)) -> (BusEvent, BusEvent) {
        refusals_between(change, |_| {}).await
    }

    /// Starts replica 0 changed by `dialer` and replica 1 changed by `acceptor`, and returns
    /// the refusal each side reported.
    async fn refusals_between(
        dialer: impl Fn(&mut BusConfig),
        acceptor: impl Fn(&mut BusConfig),
    ) -> (BusEvent, BusEvent) {
        let roster = free_addresses(2);
        let mut zero = config(0, &roster);
        dialer(&mut zero);
        let mut one = config(1, &roster);
        acceptor(&mut one);
        let mut dialer = start(zero).await;
        let mut acceptor = start(one).await;
        let refused = |e: &BusEvent| matches!(e, BusEvent::Refused { .. });
        let at_acceptor = wait_for(&mut acceptor, "a refusal at the acceptor", refused).await;
        let at_dialer = wait_for(&mut dialer, "a refusal at the dialer", refused).await;
        assert!(dialer.bus.connected().is_empty());
        assert!(acceptor.bus.connected().is_empty());
        (at_acceptor, at_dialer)
    }

    fn field(event: &BusEvent) -> &'static str {
        match event {
            BusEvent::Refused { field, .. } => field,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[compio::test]
    async fn a_peer_of_another_cluster_release_or_storage_format_is_refused_on_both_sides() {
        let padded = |text: &str, len: usize| {
            let mut out = vec![0u8; len];
            out[..text.len()].copy_from_slice(text.as_bytes());
            out
        };
        let (at_acceptor, at_dialer) = refusals(|c| {
            c.local.cluster = crate::consensus::cluster::cluster_id("another-cluster")
        })
        .await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("cluster", "cluster")
        );
        assert!(
            matches!(&at_acceptor, BusEvent::Refused { peer: Some(0), .. }),
            "{at_acceptor:?}"
        );

        let (at_acceptor, at_dialer) = refusals(|c| {
            c.local
                .identity
                .release
                .copy_from_slice(&padded("iggy-rs/9.9.9", 20))
        })
        .await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("release", "release")
        );
        match &at_dialer {
            BusEvent::Refused { detail, .. } => {
                assert!(detail.contains("iggy-rs/9.9.9"), "{detail}")
            }
            other => panic!("{other:?}"),
        }

        let (at_acceptor, at_dialer) = refusals(|c| {
            c.local
                .identity
                .storage_marker
                .copy_from_slice(&padded("IGGY-OWNERSHIP-HISTORY-4", 32))
        })
        .await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("storage_marker", "storage_marker")
        );
    }

    fn detail(event: &BusEvent) -> &str {
        match event {
            BusEvent::Refused { detail, .. } => detail,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    fn with_tls(tls: replica_tls::ReplicaTls) -> impl Fn(&mut BusConfig) {
        move |c: &mut BusConfig| c.tls = Some(tls.clone())
    }

    #[compio::test]
    async fn tls_peers_of_one_ca_link_and_exchange_frames_with_and_without_a_secret() {
        let authority = replica_tls::test_certificates::Authority::new();
        for secret in [None, Some("the cluster's secret, 32 bytes or more")] {
            let roster = free_addresses(2);
            let (mut zero, mut one) = (config(0, &roster), config(1, &roster));
            for c in [&mut zero, &mut one] {
                with_tls(authority.tls("127.0.0.1"))(c);
                c.local.auth = secret.map(|s| admission::PeerAuth::new(s.as_bytes(), None));
            }
            let (mut a, mut b) = (start(zero).await, start(one).await);
            admitted(&mut a, 1).await;
            admitted(&mut b, 0).await;
            deliver(&a, &mut b, b"encrypted one way").await;
            deliver(&b, &mut a, b"and the other").await;
            // A frame of many TLS records arrives whole, with frames behind it in order.
            let large = vec![0x5a; 300 << 10];
            let sender = a.bus.sender();
            sender
                .send(1, Bytes::from(commit_frame(0, METADATA_GROUP, 1, &large)))
                .unwrap();
            sender
                .send(
                    1,
                    Bytes::from(commit_frame(0, METADATA_GROUP, 2, b"behind")),
                )
                .unwrap();
            assert_eq!(received(&mut b).await.body, large);
            assert_eq!(&received(&mut b).await.body[..], b"behind");
        }
    }

    /// Frames queued faster than a link writes go out in batches: small ones many to a write,
    /// one larger than a batch alone, one that would pass a batch's bytes in the next; each
    /// arrives whole and in the order queued, over plain TCP and TLS.
    #[compio::test]
    async fn frames_written_in_batches_arrive_whole_and_in_order() {
        let authority = replica_tls::test_certificates::Authority::new();
        for tls in [false, true] {
            let roster = free_addresses(2);
            let (mut zero, mut one) = (config(0, &roster), config(1, &roster));
            for c in [&mut zero, &mut one] {
                c.peer_queue_capacity = 4096;
                if tls {
                    with_tls(authority.tls("127.0.0.1"))(c);
                }
            }
            let (mut a, mut b) = (start(zero).await, start(one).await);
            b.inbox = b.bus.router().subscribe(METADATA_GROUP, 8192);
            admitted(&mut a, 1).await;
            admitted(&mut b, 0).await;
            deliver(&a, &mut b, b"linked").await;
            // Sizes around the batch's: many small, one past a batch, one just under it.
            let bodies: Vec<Vec<u8>> = (0..3000u32)
                .map(|i| {
                    let len = match i {
                        1000 => WRITE_BATCH_BYTES + 1000,
                        2000 => WRITE_BATCH_BYTES - 4096,
                        _ => (i as usize * 37) % 700,
                    };
                    let mut body = vec![(i % 251) as u8; len];
                    body.extend_from_slice(&i.to_le_bytes());
                    body
                })
                .collect();
            let sender = a.bus.sender();
            for (op, body) in bodies.iter().enumerate() {
                sender
                    .send(
                        1,
                        Bytes::from(commit_frame(0, METADATA_GROUP, op as u64 + 1, body)),
                    )
                    .unwrap();
            }
            for body in &bodies {
                // A retried "linked" may still come first.
                let mut inbound = received(&mut b).await;
                while &inbound.body[..] == b"linked" {
                    inbound = received(&mut b).await;
                }
                assert_eq!(&inbound.body, body, "tls {tls}");
            }
            let outbox = &a.bus.shared.outboxes[&1];
            assert_eq!(outbox.dropped.load(Ordering::Relaxed), 0);
        }
    }

    #[compio::test]
    async fn a_peer_whose_certificate_another_ca_signed_is_refused_on_both_sides() {
        use replica_tls::test_certificates::Authority;
        let (ours, theirs) = (Authority::new(), Authority::new());
        // The dialer meets an acceptor it cannot verify.
        let (at_acceptor, at_dialer) = refusals_between(
            with_tls(ours.tls("127.0.0.1")),
            with_tls(theirs.tls("127.0.0.1")),
        )
        .await;
        assert_eq!((field(&at_acceptor), field(&at_dialer)), ("tls", "tls"));
        assert!(
            detail(&at_dialer).contains("UnknownIssuer"),
            "{at_dialer:?}"
        );
        assert!(detail(&at_dialer).contains("not signed by this node's cluster.tls.ca_file"));
        assert!(
            detail(&at_acceptor).contains("refused this node's certificate"),
            "{at_acceptor:?}"
        );
        // The acceptor meets a dialer it cannot verify (the dialer trusts the acceptor's CA).
        let (at_acceptor, at_dialer) = refusals_between(
            with_tls(theirs.tls_trusting("127.0.0.1", &ours)),
            with_tls(ours.tls("127.0.0.1")),
        )
        .await;
        assert_eq!((field(&at_acceptor), field(&at_dialer)), ("tls", "tls"));
        assert!(
            detail(&at_acceptor).contains("UnknownIssuer"),
            "{at_acceptor:?}"
        );
        assert!(
            detail(&at_dialer).contains("refused this node's certificate"),
            "{at_dialer:?}"
        );
    }

    #[compio::test]
    async fn a_node_with_tls_and_one_without_refuse_each_other_on_both_sides() {
        let authority = replica_tls::test_certificates::Authority::new();
        for (dialer_tls, acceptor_tls) in [(true, false), (false, true)] {
            let tls = |on: bool| {
                let tls = on.then(|| authority.tls("127.0.0.1"));
                move |c: &mut BusConfig| c.tls = tls.clone()
            };
            let (at_acceptor, at_dialer) =
                refusals_between(tls(dialer_tls), tls(acceptor_tls)).await;
            assert_eq!((field(&at_acceptor), field(&at_dialer)), ("tls", "tls"));
            let plain_side = if dialer_tls { &at_acceptor } else { &at_dialer };
            assert!(
                detail(plain_side).contains("cluster.tls enabled"),
                "{plain_side:?}"
            );
            let tls_side = if dialer_tls { &at_dialer } else { &at_acceptor };
            assert!(detail(tls_side).contains("cluster.tls"), "{tls_side:?}");
        }
    }

    #[compio::test]
    async fn a_certificate_that_does_not_name_the_roster_ip_is_refused_either_way() {
        let authority = replica_tls::test_certificates::Authority::new();
        // The acceptor's certificate names another ip: the dialer's TLS refuses it.
        let (at_acceptor, at_dialer) = refusals_between(
            with_tls(authority.tls("127.0.0.1")),
            with_tls(authority.tls("127.0.0.9")),
        )
        .await;
        assert_eq!((field(&at_acceptor), field(&at_dialer)), ("tls", "tls"));
        assert!(
            detail(&at_dialer).contains("does not name its roster ip"),
            "{at_dialer:?}"
        );
        // The dialer's: the acceptor refuses it once the hello says which replica it claims.
        let (at_acceptor, at_dialer) = refusals_between(
            with_tls(authority.tls("127.0.0.9")),
            with_tls(authority.tls("127.0.0.1")),
        )
        .await;
        assert_eq!((field(&at_acceptor), field(&at_dialer)), ("tls", "tls"));
        assert!(
            matches!(&at_acceptor, BusEvent::Refused { peer: Some(0), .. }),
            "{at_acceptor:?}"
        );
        assert!(detail(&at_acceptor).contains("does not name its roster ip 127.0.0.1"));
        assert!(
            detail(&at_dialer).contains("without answering"),
            "{at_dialer:?}"
        );
    }

    #[compio::test]
    async fn peers_sharing_a_secret_link_and_a_wrong_or_missing_secret_is_refused_on_both_sides() {
        const SECRET: &str = "the cluster's secret, 32 bytes or more";
        let keyed = |secret: &'static str| {
            move |c: &mut BusConfig| {
                c.local.auth = Some(admission::PeerAuth::new(secret.as_bytes(), None))
            }
        };
        let roster = free_addresses(2);
        let (mut zero, mut one) = (config(0, &roster), config(1, &roster));
        keyed(SECRET)(&mut zero);
        keyed(SECRET)(&mut one);
        let (mut a, mut b) = (start(zero).await, start(one).await);
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        deliver(&a, &mut b, b"over an authenticated link").await;
        drop((a, b));

        let (at_acceptor, at_dialer) =
            refusals_between(keyed(SECRET), keyed("another secret, 32 bytes or more")).await;
        assert_eq!((field(&at_acceptor), field(&at_dialer)), ("mac", "mac"));
        let (at_acceptor, at_dialer) = refusals_between(keyed(SECRET), |_| {}).await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("auth_mode", "auth_mode")
        );
        let (at_acceptor, at_dialer) = refusals_between(|_| {}, keyed(SECRET)).await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("auth_mode", "auth_mode")
        );
    }

    #[compio::test]
    async fn a_peer_under_another_replica_id_than_the_roster_says_is_refused_on_both_sides() {
        // At the address the roster gives replica 1 runs a node started as replica 2: the
        // hello names the replica 0 meant to reach, so the impostor refuses too.
        let roster = free_addresses(2);
        let mut honest = start(config(0, &roster)).await;
        let mut impostor = config(1, &roster);
        impostor.local.replica = 2;
        impostor.local.replica_count = 3;
        let mut impostor = start(impostor).await;
        let refused = |e: &BusEvent| matches!(e, BusEvent::Refused { .. });
        let at_impostor = wait_for(&mut impostor, "a refusal at the impostor", refused).await;
        let at_honest = wait_for(&mut honest, "a refusal at the dialer", refused).await;
        assert_eq!(
            (field(&at_impostor), field(&at_honest)),
            ("replica", "replica")
        );
        match &at_impostor {
            BusEvent::Refused { detail, .. } => {
                assert!(detail.contains("dialed replica 1"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        assert!(honest.bus.connected().is_empty() && impostor.bus.connected().is_empty());
        drop((honest, impostor));

        // Replica 0's roster is another one: it believes it is replica 2 of 4 and that the
        // honest replica 1's address is replica 3's, so it dials there as a higher id.
        let (at_acceptor, at_dialer) = refusals(|c| {
            let honest = c.peers[&1].clone();
            c.local.replica = 2;
            c.local.replica_count = 4;
            c.peers = BTreeMap::from([(3, honest)]);
        })
        .await;
        assert_eq!(
            (field(&at_acceptor), field(&at_dialer)),
            ("replica", "replica")
        );
    }

    #[compio::test]
    async fn a_tampered_frame_closes_the_link_and_the_link_comes_back() {
        let roster = free_addresses(2);
        let mut a = start(config(0, &roster)).await;
        let mut b = start(config(1, &roster)).await;
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        deliver(&a, &mut b, b"before").await;

        let good = commit_frame(0, METADATA_GROUP, 0, b"payload");
        let mut in_body = good.clone();
        *in_body.last_mut().unwrap() ^= 1;
        let mut in_header = good.clone();
        in_header[100] ^= 1;
        for (tampered, reason) in [(in_body, "checksum_body"), (in_header, "checksum")] {
            // Only what this tampered frame causes counts.
            while a.events.try_recv().is_ok() {}
            while b.events.try_recv().is_ok() {}
            a.backlog.clear();
            b.backlog.clear();
            a.bus.sender().send(1, Bytes::from(tampered)).unwrap();
            let closed = wait_for(&mut b, "the tampered link closing", |e| {
                matches!(e, BusEvent::Closed { peer: 0, .. })
            })
            .await;
            match closed {
                BusEvent::Closed { reason: why, .. } => {
                    assert!(why.contains(&format!("`{reason}`")), "{why}")
                }
                other => panic!("{other:?}"),
            }
            // The tampered frame was not delivered; the dialer notices the close and redials.
            assert!(b.inbox.try_recv().is_err());
            admitted(&mut a, 1).await;
            admitted(&mut b, 0).await;
            deliver(&a, &mut b, b"after").await;
            // The other direction works too.
            deliver(&b, &mut a, b"back").await;
        }
    }

    /// A peer that says it stops before it goes is logged (and reported) as a graceful stop;
    /// the same peer gone without a word is a lost link.
    #[compio::test]
    async fn a_peer_that_says_it_stops_closes_gracefully_and_one_that_vanishes_does_not() {
        let roster = free_addresses(2);
        let mut a = start(config(0, &roster)).await;
        for says in [true, false] {
            let mut b = start(config(1, &roster)).await;
            admitted(&mut a, 1).await;
            admitted(&mut b, 0).await;
            deliver(&a, &mut b, b"before").await;
            if says {
                assert_eq!(b.bus.say_stopping(PATIENCE).await, vec![0]);
            }
            drop(b);
            let closed = wait_for(&mut a, "the peer's link closing", |e| {
                matches!(e, BusEvent::Closed { peer: 1, .. })
            })
            .await;
            match closed {
                BusEvent::Closed { graceful, .. } => assert_eq!(graceful, says),
                other => panic!("{other:?}"),
            }
        }
    }

    #[compio::test]
    async fn a_restarted_peer_is_reconnected() {
        let roster = free_addresses(3);
        let mut a = start(config(0, &roster)).await;
        let mut c = start(config(2, &roster)).await;
        let b = start(config(1, &roster)).await;
        admitted(&mut a, 1).await;
        admitted(&mut c, 1).await;
        drop(b);
        for node in [&mut a, &mut c] {
            wait_for(node, "the killed peer's link closing", |e| {
                matches!(e, BusEvent::Closed { peer: 1, .. })
            })
            .await;
        }
        let mut b = start(config(1, &roster)).await;
        admitted(&mut b, 0).await;
        admitted(&mut b, 2).await;
        admitted(&mut a, 1).await;
        admitted(&mut c, 1).await;
        deliver(&a, &mut b, b"a to b").await;
        deliver(&b, &mut c, b"b to c").await;
        deliver(&c, &mut b, b"c to b").await;
    }

    /// The addresses each host name stands for now, and how many lookups were made.
    #[derive(Clone, Default)]
    struct Names {
        table: Rc<RefCell<HashMap<String, Vec<SocketAddr>>>>,
        lookups: Rc<Cell<usize>>,
    }

    impl Names {
        /// A resolver of this table: a name not in it does not resolve, as a pod's name before
        /// its pod runs; an IP is itself.
        fn resolver(&self) -> Resolver {
            let names = self.clone();
            Resolver::new(move |address: &PeerAddress| {
                names.lookups.set(names.lookups.get() + 1);
                let found = match &address.host {
                    NodeHost::Ip(ip) => Ok(vec![SocketAddr::new(*ip, address.port)]),
                    NodeHost::Name(name) => {
                        names.table.borrow().get(name).cloned().ok_or_else(|| {
                            std::io::Error::new(std::io::ErrorKind::NotFound, "no such host")
                        })
                    }
                };
                std::future::ready(found)
            })
        }

        fn set(&self, name: &str, addresses: &[SocketAddr]) {
            self.table
                .borrow_mut()
                .insert(name.to_string(), addresses.to_vec());
        }

        /// Waits until `more` lookups were made after `since`.
        async fn looked_up(&self, since: usize, more: usize) {
            let deadline = Instant::now() + PATIENCE;
            while self.lookups.get() < since + more {
                assert!(Instant::now() < deadline, "no lookup within {PATIENCE:?}");
                compio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    fn name_of(replica: u8) -> String {
        format!("replica-{replica}.iggy-headless.test")
    }

    /// `config(replica, roster)` with each peer named `name_of(peer)` instead of its ip,
    /// resolved through `names` (which this fills with the roster's addresses).
    fn named_config(replica: u8, roster: &[SocketAddr], names: &Names) -> BusConfig {
        let mut config = config(replica, roster);
        for (&peer, address) in config.peers.iter_mut() {
            names.set(&name_of(peer), &[roster[usize::from(peer)]]);
            address.host = NodeHost::Name(name_of(peer));
        }
        config.resolver = names.resolver();
        config
    }

    #[compio::test]
    async fn a_named_peer_is_resolved_at_each_dial_and_found_at_its_new_address() {
        let names = Names::default();
        let addresses = free_addresses(3);
        let (roster, moved_to) = (&addresses[..2], addresses[2]);
        let mut zero = named_config(0, roster, &names);
        // Replica 1's name does not resolve yet: the dialer keeps trying, it does not stop.
        names.table.borrow_mut().clear();
        zero.backoff_max = Duration::from_millis(50);
        let mut a = start(zero).await;
        names.looked_up(0, 3).await;
        assert!(a.bus.connected().is_empty());
        // Its pod runs: the name resolves and the next dial links.
        names.set(&name_of(1), &[roster[1]]);
        let mut b = start(config(1, roster)).await;
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        deliver(&a, &mut b, b"by name").await;
        // It restarts at another address; the name follows it. The old address comes first
        // and refuses: the dial goes on to the next one.
        drop(b);
        wait_for(&mut a, "the restarted peer's link closing", |e| {
            matches!(e, BusEvent::Closed { peer: 1, .. })
        })
        .await;
        let before = names.lookups.get();
        names.set(&name_of(1), &[roster[1], moved_to]);
        let mut b = start(BusConfig {
            listen: moved_to,
            ..config(1, roster)
        })
        .await;
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        assert!(
            names.lookups.get() > before,
            "the dial looked the name up again"
        );
        deliver(&a, &mut b, b"at the new address").await;
        deliver(&b, &mut a, b"and back").await;
    }

    #[compio::test]
    async fn a_node_named_in_the_roster_listens_on_the_wildcard_for_ipv4_and_ipv6_peers() {
        let own = NodeHost::Name(name_of(1));
        let port = free_addresses(1)[0].port();
        let listen = listen_address(&own, port);
        assert!(
            listen.ip().is_unspecified() && listen.port() == port,
            "{listen}"
        );
        // Replica 0 dials it at 127.0.0.1 (an IPv4 peer) through its name.
        let names = Names::default();
        let roster = [
            free_addresses(1)[0],
            SocketAddr::from(([127, 0, 0, 1], port)),
        ];
        let mut a = start(named_config(0, &roster, &names)).await;
        let mut b = start(BusConfig {
            listen,
            ..config(1, &roster)
        })
        .await;
        assert!(b.bus.local_addr().ip().is_unspecified());
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        deliver(&a, &mut b, b"to the wildcard").await;
    }

    #[compio::test]
    async fn tls_peers_named_by_host_names_verify_dns_sans_either_way() {
        let authority = replica_tls::test_certificates::Authority::new();
        let names = Names::default();
        let tls_named = |replica: u8, roster: &[SocketAddr], certified: &str| {
            let mut config = named_config(replica, roster, &names);
            config.tls = Some(authority.tls(certified));
            config
        };
        // Each certificate names its node's roster name as a DNS SAN: linked.
        let roster = free_addresses(2);
        let mut a = start(tls_named(0, &roster, &name_of(0))).await;
        let mut b = start(tls_named(1, &roster, &name_of(1))).await;
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        deliver(&a, &mut b, b"encrypted, named").await;
        drop((a, b));
        // The acceptor's certificate names another host: the dialer's TLS refuses it.
        let roster = free_addresses(2);
        let (mut dialer, mut acceptor) = (
            start(tls_named(0, &roster, &name_of(0))).await,
            start(tls_named(1, &roster, "replica-9.iggy-headless.test")).await,
        );
        let refused = |e: &BusEvent| matches!(e, BusEvent::Refused { .. });
        let at_dialer = wait_for(&mut dialer, "a refusal at the dialer", refused).await;
        assert_eq!(field(&at_dialer), "tls");
        assert!(
            detail(&at_dialer).contains("does not name its roster ip"),
            "{at_dialer:?}"
        );
        wait_for(&mut acceptor, "a refusal at the acceptor", refused).await;
        drop((dialer, acceptor));
        // The dialer's certificate names another host (an IP, its address): the acceptor
        // refuses it once the hello says it is replica 0, whose roster entry is a name.
        let roster = free_addresses(2);
        let (mut dialer, mut acceptor) = (
            start(tls_named(0, &roster, "127.0.0.1")).await,
            start(tls_named(1, &roster, &name_of(1))).await,
        );
        let at_acceptor = wait_for(&mut acceptor, "a refusal at the acceptor", refused).await;
        assert!(
            matches!(
                &at_acceptor,
                BusEvent::Refused {
                    peer: Some(0),
                    field: "tls",
                    ..
                }
            ),
            "{at_acceptor:?}"
        );
        let expected = format!(
            "does not name its roster host name {} as a DNS SAN",
            name_of(0)
        );
        assert!(detail(&at_acceptor).contains(&expected), "{at_acceptor:?}");
        wait_for(&mut dialer, "a refusal at the dialer", refused).await;
    }

    /// The history `node`'s event log says `peer` declared at its latest admission.
    async fn declared_by(node: &mut Node, peer: u8) -> MetadataHistory {
        let event = wait_for(
            node,
            &format!("admission of {peer}"),
            |e| matches!(e, BusEvent::Admitted { peer: p, .. } if *p == peer),
        )
        .await;
        match event {
            BusEvent::Admitted { history, .. } => history,
            other => unreachable!("{other:?}"),
        }
    }

    #[compio::test]
    async fn each_handshake_declares_the_history_built_for_that_peer_then() {
        let roster = free_addresses(3);
        // Replica 0 declares a history only to a peer linked with it before (as a node that
        // formatted a new cluster does once it committed); replicas 1 and 2 declare theirs.
        let asked = Rc::new(RefCell::new(Vec::new()));
        let record = asked.clone();
        let mut a = start(BusConfig {
            history: HistorySource::new(move |linked| {
                record.borrow_mut().push(linked);
                match linked {
                    true => MetadataHistory::Held,
                    false => MetadataHistory::Absent,
                }
            }),
            ..config(0, &roster)
        })
        .await;
        let held = |replica| BusConfig {
            history: HistorySource::fixed(MetadataHistory::Held),
            ..config(replica, &roster)
        };
        let mut b = start(held(1)).await;
        assert_eq!(declared_by(&mut a, 1).await, MetadataHistory::Held);
        assert_eq!(declared_by(&mut b, 0).await, MetadataHistory::Absent);
        // Replica 1 restarts: replica 0 redials it, a peer linked before.
        drop(b);
        wait_for(&mut a, "the link closing", |e| {
            matches!(e, BusEvent::Closed { peer: 1, .. })
        })
        .await;
        let mut b = start(held(1)).await;
        assert_eq!(declared_by(&mut b, 0).await, MetadataHistory::Held);
        assert_eq!(declared_by(&mut a, 1).await, MetadataHistory::Held);
        // Replica 2 was never linked: it is told none.
        let mut c = start(held(2)).await;
        assert_eq!(declared_by(&mut c, 0).await, MetadataHistory::Absent);
        assert_eq!(declared_by(&mut a, 2).await, MetadataHistory::Held);
        let asked = asked.borrow();
        assert_eq!(asked.first(), Some(&false), "{asked:?}");
        assert!(asked.contains(&true), "{asked:?}");
    }

    #[compio::test]
    async fn the_roster_gives_each_bus_its_listener_and_peers() {
        let roster = free_addresses(3);
        let mut vars = std::collections::HashMap::from([
            ("IGGY_CLUSTER_ENABLED".to_string(), "true".to_string()),
            ("IGGY_CLUSTER_NAME".to_string(), "bus-test".to_string()),
        ]);
        for (id, address) in roster.iter().enumerate() {
            let var = |field: &str| format!("IGGY_CLUSTER_NODES_{id}_{field}");
            vars.insert(var("NAME"), format!("node-{id}"));
            vars.insert(var("IP"), address.ip().to_string());
            vars.insert(var("REPLICA_ID"), id.to_string());
            vars.insert(var("PORTS_TCP_REPLICA"), address.port().to_string());
            // The client transports need their ports too (never bound here; below the
            // ephemeral range the replica ports come from).
            for (k, transport) in ["TCP", "QUIC", "HTTP", "WEBSOCKET"].iter().enumerate() {
                let port = 20_000 + 10 * id + k;
                vars.insert(var(&format!("PORTS_{transport}")), port.to_string());
            }
        }
        let config = crate::config::load(None, |k| vars.get(k).cloned()).unwrap();
        let one = BusConfig::from_config(
            &config,
            1,
            HistorySource::fixed(MetadataHistory::Held),
            no_runs(1),
            leases(1, 3),
        )
        .unwrap();
        assert_eq!(one.listen, roster[1]);
        assert_eq!(
            one.peers,
            BTreeMap::from([(0, roster[0].into()), (2, roster[2].into())])
        );
        assert_eq!(
            (
                one.local.cluster,
                one.local.replica,
                one.local.replica_count
            ),
            (crate::consensus::cluster::cluster_id("bus-test"), 1, 3)
        );
        assert_eq!(one.local.identity, local_identity());
        assert_eq!(one.max_frame_size, REPLICA_FRAME_SIZE_FLOOR);
        assert_eq!(
            (one.backoff_base, one.backoff_max, one.peer_queue_capacity),
            (BACKOFF_BASE, BACKOFF_MAX, PEER_QUEUE_CAPACITY)
        );
        assert_eq!(one.peer_queue_bytes_max, PEER_QUEUE_BYTES_MAX);
        assert_eq!(one.inbound_handshakes_max, INBOUND_HANDSHAKES_MAX);
        assert_eq!(one.silence_max, config.cluster.heartbeat_timeout);
        assert!(
            BusConfig::from_config(
                &config,
                3,
                HistorySource::fixed(MetadataHistory::Held),
                no_runs(3),
                leases(3, 3),
            )
            .is_err()
        );
        // Two of them admit each other (frames of this cluster need its id, so only the
        // links are checked here).
        let zero = BusConfig::from_config(
            &config,
            0,
            HistorySource::fixed(MetadataHistory::Held),
            no_runs(0),
            leases(0, 3),
        )
        .unwrap();
        let mut a = start(zero).await;
        let mut b = start(one).await;
        assert_eq!(a.bus.local_addr(), roster[0]);
        assert_eq!(b.bus.local_addr(), roster[1]);
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
    }

    #[compio::test]
    async fn a_newer_link_from_the_same_replica_replaces_the_older() {
        // A restarted peer may redial before its old connection is seen dead: the newer
        // admitted link wins. Here a second bus under replica 0's id plays the restarted one.
        let roster = free_addresses(2);
        let mut old = start(config(0, &roster)).await;
        let mut b = start(config(1, &roster)).await;
        admitted(&mut old, 1).await;
        admitted(&mut b, 0).await;
        let mut restarted = config(0, &roster);
        restarted.listen = free_addresses(1)[0];
        let mut new = start(restarted).await;
        admitted(&mut new, 1).await;
        let closed = wait_for(&mut b, "the older link replaced", |e| {
            matches!(e, BusEvent::Closed { peer: 0, .. })
        })
        .await;
        match closed {
            BusEvent::Closed { reason, .. } => assert!(reason.contains("newer link"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The old one sees its link end; the new one carries frames. (Two live nodes under
        // one id keep replacing each other, each time logged: a misconfiguration to fix.)
        wait_for(&mut old, "the replaced link closing", |e| {
            matches!(e, BusEvent::Closed { peer: 1, .. })
        })
        .await;
        drop(old);
        deliver(&new, &mut b, b"from the restarted one").await;
    }

    /// A second process under a replica id whose live link carries another run (an operator
    /// started a node's replacement while it ran): its links replaced the healthy node's, which
    /// flapped, or was judged a stale copy by the newcomer's later run and stopped. The
    /// newcomer is refused while the live link is heard; the healthy node's link stays.
    #[compio::test]
    async fn a_second_process_under_a_live_replicas_id_is_refused_and_the_live_link_kept() {
        let roster = free_addresses(2);
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let numbered = |replica: u8, dir: &tempfile::TempDir, restored: bool| {
            let mut config = config(replica, &roster);
            let runs = RunsState::start(CLUSTER, replica, Some(dir.path()), restored).unwrap();
            config.runs = Rc::new(runs);
            config
        };
        let mut live = start(numbered(0, &dirs[0], false)).await;
        let mut b = start(numbered(1, &dirs[1], false)).await;
        admitted(&mut live, 1).await;
        admitted(&mut b, 0).await;
        // Started with --restored (a restored run is never judged a stale copy), as the
        // operator replacing the node would.
        let other_dir = tempfile::tempdir().unwrap();
        let mut second = numbered(0, &other_dir, true);
        second.listen = free_addresses(1)[0];
        let _second = start(second).await;
        let refused = wait_for(&mut b, "the second process refused", |e| {
            matches!(
                e,
                BusEvent::Refused {
                    peer: Some(0),
                    field: "duplicate",
                    ..
                }
            )
        })
        .await;
        assert!(
            matches!(&refused, BusEvent::Refused { detail, .. } if detail.contains("Two processes claim replica 0")),
            "{refused:?}"
        );
        assert!(
            !b.backlog
                .iter()
                .any(|e| matches!(e, BusEvent::Closed { peer: 0, .. })),
            "the live link was kept: {:?}",
            b.backlog
        );
        deliver(&live, &mut b, b"from the live one").await;
    }

    /// Whether the bus closed `stream` (a read ends, with nothing or an error) within `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        use compio::io::AsyncRead;
        let read = compio::time::timeout(within, stream.read(Vec::with_capacity(1))).await;
        matches!(read, Ok(BufResult(Ok(0) | Err(_), _)))
    }

    #[compio::test]
    async fn beyond_the_handshake_cap_a_connection_is_closed_at_once_and_a_peer_links_after_the_flood()
     {
        let roster = free_addresses(2);
        let timeout = Duration::from_secs(3);
        let cap = 4;
        let mut b = start(BusConfig {
            handshake_timeout: timeout,
            inbound_handshakes_max: cap,
            ..config(1, &roster)
        })
        .await;
        // A flood: connections that never say a word hold every handshake slot.
        let mut flood = Vec::new();
        for _ in 0..cap {
            flood.push(TcpStream::connect(roster[1]).await.unwrap());
        }
        let flooded_at = Instant::now();
        let all_held = async {
            while b.bus.inbound_handshakes() < cap {
                compio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        compio::time::timeout(PATIENCE, all_held)
            .await
            .expect("the flood accepted within the patience");
        // One more is closed unheard, long before any handshake timeout.
        let mut over = TcpStream::connect(roster[1]).await.unwrap();
        let opened_at = Instant::now();
        assert!(closed_within(&mut over, PATIENCE).await);
        assert!(
            opened_at.elapsed() < timeout / 2,
            "closed after {:?}",
            opened_at.elapsed()
        );
        assert_eq!(b.bus.inbound_handshakes(), cap);
        // A real peer is turned away as well while the flood lasts, and links once the
        // flood's handshakes time out and free their slots.
        let mut a = start(config(0, &roster)).await;
        admitted(&mut b, 0).await;
        assert!(
            flooded_at.elapsed() >= timeout,
            "admitted {:?} after the flood, which held every slot for {timeout:?}",
            flooded_at.elapsed()
        );
        admitted(&mut a, 1).await;
        for stream in &mut flood {
            assert!(closed_within(stream, PATIENCE).await);
        }
        // The admitted link holds no slot.
        assert_eq!(b.bus.inbound_handshakes(), 0);
        deliver(&a, &mut b, b"after the flood").await;
    }

    #[compio::test]
    async fn a_body_that_never_follows_its_header_closes_the_link() {
        let roster = free_addresses(2);
        let mut acceptor = config(1, &roster);
        acceptor.handshake_timeout = Duration::from_millis(300);
        let mut b = start(acceptor).await;
        // A raw replica 0: handshake, then a header announcing 10 body bytes, then silence.
        let mut stream = TcpStream::connect(roster[1]).await.unwrap();
        let dialer = config(0, &roster).local;
        let hello = admission::hello(&dialer, 1, MetadataHistory::Absent, [0; 32]);
        let BufResult(written, _) = stream.write_all(hello.to_vec()).await;
        written.unwrap();
        let BufResult(read, answer) = stream.read_exact([0u8; HEADER_SIZE]).await;
        read.unwrap();
        admission::admit_challenge(&dialer, 1, &hello, &answer)
            .verdict
            .unwrap();
        admitted(&mut b, 0).await;
        let frame = commit_frame(0, METADATA_GROUP, 0, b"ten bytes!");
        let BufResult(written, _) = stream.write_all(frame[..HEADER_SIZE].to_vec()).await;
        written.unwrap();
        let closed = wait_for(&mut b, "the stalled link closing", |e| {
            matches!(e, BusEvent::Closed { peer: 0, .. })
        })
        .await;
        match closed {
            BusEvent::Closed { reason, .. } => {
                assert!(reason.contains("did not arrive within"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(b.inbox.try_recv().is_err());
    }

    #[compio::test]
    async fn a_full_queue_drops_and_counts_without_blocking() {
        let roster = free_addresses(2);
        // Replica 1 never starts: replica 0's queue for it fills.
        let a = start(config(0, &roster)).await;
        let sender = a.bus.sender();
        let frame = Bytes::from(commit_frame(0, METADATA_GROUP, 0, b""));
        for _ in 0..8 {
            sender.send(1, frame.clone()).unwrap();
        }
        for _ in 0..3 {
            assert_eq!(sender.send(1, frame.clone()), Err(SendError::QueueFull));
        }
        assert_eq!(sender.dropped(1), 3);
        assert_eq!(
            sender.send(7, frame.clone()),
            Err(SendError::UnknownPeer(7))
        );
        assert_eq!(
            sender.send(0, frame.clone()),
            Err(SendError::UnknownPeer(0))
        );
        assert!(matches!(
            sender.send(1, Bytes::copy_from_slice(&frame[..100])),
            Err(SendError::Malformed(_))
        ));
    }

    #[compio::test]
    async fn a_queue_full_in_bytes_drops_but_an_empty_one_takes_any_frame() {
        let roster = free_addresses(3);
        // Neither peer starts: replica 0's queues only fill.
        let a = start(BusConfig {
            peer_queue_bytes_max: 600,
            ..config(0, &roster)
        })
        .await;
        let sender = a.bus.sender();
        let header_only = Bytes::from(commit_frame(0, METADATA_GROUP, 0, b""));
        sender.send(1, header_only.clone()).unwrap();
        sender.send(1, header_only.clone()).unwrap();
        // 768 bytes would exceed 600, though the queue holds only two of its eight frames.
        assert_eq!(
            sender.send(1, header_only.clone()),
            Err(SendError::QueueFull)
        );
        assert_eq!(sender.dropped(1), 1);
        // A frame larger than the whole budget still goes into an empty queue, and only then.
        let large = Bytes::from(commit_frame(0, METADATA_GROUP, 0, &[7u8; 700]));
        sender.send(2, large.clone()).unwrap();
        assert_eq!(sender.send(2, header_only), Err(SendError::QueueFull));
        assert_eq!(sender.send(2, large), Err(SendError::QueueFull));
        assert_eq!(sender.dropped(2), 2);
    }

    /// Every partition group a node holds sends its peer a heartbeat (as primary) or the answer
    /// to one (as backup) in the same tick: groups tick on one grid and those created by one
    /// op share their heartbeat phase. A node of 4000 groups (2000 partitions at the default
    /// open files limit of 20,000, more with a higher one) must not drop them: a dropped
    /// heartbeat is a backup timing out its primary.
    #[test]
    fn one_tick_of_heartbeats_of_thousands_of_groups_fits_a_peers_queue() {
        let outbox = Outbox::new(
            PEER_QUEUE_CAPACITY,
            PEER_QUEUE_BYTES_MAX,
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        outbox.link_admitted(Instant::now(), 1);
        let now = Instant::now();
        for group in 0..4000u64 {
            let frame = crate::consensus::replica_link::tests::commit_frame(0, group, 1, &[]);
            outbox
                .push(now, Bytes::from(frame))
                .unwrap_or_else(|e| panic!("group {group}: {e:?}"));
        }
        assert_eq!(outbox.dropped.load(Ordering::Relaxed), 0);
    }

    /// A writer takes the frames queued behind the one it popped, in order, up to its batch's
    /// bytes, and leaves a frame that would pass them for the next write.
    #[test]
    fn a_writer_takes_the_queued_frames_in_order_up_to_its_batch() {
        let outbox = Outbox::new(
            64,
            PEER_QUEUE_BYTES_MAX,
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        outbox.link_admitted(Instant::now(), 1);
        let now = Instant::now();
        for byte in 0..10u8 {
            outbox.push(now, Bytes::from(vec![byte; 300])).unwrap();
        }
        outbox.push(now, Bytes::from(vec![10u8; 2000])).unwrap();
        let mut taken = Vec::new();
        outbox.pop_more(1000, &mut taken);
        assert_eq!(
            taken.drain(..).map(|frame| frame[0]).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        outbox.pop_more(WRITE_BATCH_BYTES, &mut taken);
        assert_eq!(
            taken.drain(..).map(|frame| frame[0]).collect::<Vec<_>>(),
            [3, 4, 5, 6, 7, 8, 9, 10]
        );
        outbox.pop_more(WRITE_BATCH_BYTES, &mut taken);
        assert!(taken.is_empty());
        assert_eq!(outbox.state.lock().unwrap().queued_bytes, 0);
    }

    #[test]
    fn a_frame_waits_for_a_link_at_most_link_wait_max() {
        let wait = Duration::from_millis(500);
        let outbox = Outbox::new(8, PEER_QUEUE_BYTES_MAX, wait, Duration::from_secs(5));
        let frame = |byte: u8| Bytes::from(vec![byte; 300]);
        let start = Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        // No link: frames queue, and each push first drops those that waited too long.
        outbox.push(at(0), frame(1)).unwrap();
        outbox.push(at(400), frame(2)).unwrap();
        outbox.push(at(600), frame(3)).unwrap();
        assert_eq!(
            outbox.dropped.load(Ordering::Relaxed),
            1,
            "frame 1 waited 600 ms"
        );
        // The link comes up at 1000 ms: frame 2 waited 600 ms, frame 3 400 ms.
        outbox.link_admitted(at(1000), 1);
        assert_eq!(outbox.dropped.load(Ordering::Relaxed), 2);
        // While a link is up nothing expires: a slow peer's frames wait their turn.
        outbox.push(at(1100), frame(4)).unwrap();
        outbox.push(at(5000), frame(5)).unwrap();
        assert_eq!(outbox.dropped.load(Ordering::Relaxed), 2);
        let state = outbox.state.lock().unwrap();
        let left: Vec<u8> = state.queue.iter().map(|(_, frame)| frame[0]).collect();
        assert_eq!(left, [3, 4, 5]);
        assert_eq!(state.queued_bytes, 900);
    }

    #[compio::test]
    async fn a_peer_back_from_an_outage_is_not_fed_the_frames_queued_during_it() {
        let roster = free_addresses(2);
        let wait = Duration::from_millis(100);
        let mut a = start(BusConfig {
            link_wait_max: wait,
            ..config(0, &roster)
        })
        .await;
        let sender = a.bus.sender();
        // Replica 1 is down while this frame is queued for it, for longer than it may wait.
        let stale = Bytes::from(commit_frame(0, METADATA_GROUP, 0, b"during the outage"));
        sender.send(1, stale).unwrap();
        compio::time::sleep(wait * 3).await;
        let mut b = start(config(1, &roster)).await;
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        let fresh = Bytes::from(commit_frame(0, METADATA_GROUP, 0, b"after the outage"));
        let fresh_len = fresh.len() as u64;
        sender.send(1, fresh).unwrap();
        let first = received(&mut b).await;
        assert_eq!(
            &first.body[..],
            b"after the outage",
            "the frame of the outage came first"
        );
        assert_eq!(sender.dropped(1), 1);
        // Written frames are counted (keepalives too), dropped ones are not.
        let (frames, bytes) = sender.sent(1);
        assert!(
            frames >= 1 && bytes >= fresh_len,
            "{frames} frames, {bytes} bytes"
        );
        assert_eq!(sender.sent(0), (0, 0), "no link to itself");
    }

    #[compio::test]
    async fn linked_buses_keep_each_other_healthy_with_pings_no_group_sees() {
        let roster = free_addresses(2);
        let quick = |replica| BusConfig {
            silence_max: Duration::from_millis(1000),
            ..config(replica, &roster)
        };
        let mut a = start(quick(0)).await;
        let mut b = start(quick(1)).await;
        assert_eq!(a.bus.sender().status(1), PeerStatus::Unreachable);
        admitted(&mut a, 1).await;
        admitted(&mut b, 0).await;
        // No consensus traffic for two and a half timeouts: only the keepalives are heard.
        for _ in 0..25 {
            compio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(a.bus.sender().status(1), PeerStatus::Healthy);
            assert_eq!(b.bus.sender().status(0), PeerStatus::Healthy);
        }
        assert!(a.inbox.try_recv().is_err() && b.inbox.try_recv().is_err());
        assert_eq!(a.bus.router().undeliverable(), 0);
        assert_eq!(b.bus.router().undeliverable(), 0);
        // A peer that is gone is Unreachable at once: its link closed.
        drop(b);
        wait_for(&mut a, "the link closing", |e| {
            matches!(e, BusEvent::Closed { peer: 1, .. })
        })
        .await;
        assert_eq!(a.bus.sender().status(1), PeerStatus::Unreachable);
    }

    /// The next frame on a raw link from the bus of replica 1, verified.
    async fn next_frame(stream: &mut TcpStream) -> Command {
        let check = FrameCheck {
            cluster: CLUSTER,
            peer: 1,
            max_frame_size: 1 << 20,
        };
        let read = compio::time::timeout(PATIENCE, stream.read_exact([0u8; HEADER_SIZE])).await;
        let BufResult(result, header) = read.expect("a frame within the patience");
        result.unwrap();
        let verified = check.header(&header).unwrap();
        assert_eq!(verified.body_len(), 0, "{:?}", verified.command);
        verified.command
    }

    #[test]
    fn a_large_body_is_given_time_by_its_size_and_a_small_one_the_timeout() {
        let base = Duration::from_secs(5);
        assert_eq!(body_deadline(base, 0), base);
        assert!(body_deadline(base, 4096) < base + Duration::from_millis(5));
        // 64 MiB at 1 MiB/s on top of the timeout: a 100 Mbit link (12.5 MB/s) carries it in
        // about 5.4 s, which the fixed 5 s deadline refused every time.
        assert_eq!(
            body_deadline(base, 64 << 20),
            base + Duration::from_secs(64)
        );
    }

    #[compio::test]
    async fn a_linked_peer_that_falls_silent_is_unreachable_until_it_is_heard_again() {
        let roster = free_addresses(2);
        let mut b = start(BusConfig {
            silence_max: Duration::from_millis(500),
            ..config(1, &roster)
        })
        .await;
        // A raw replica 0 (a process that stops is one that says nothing): handshake, then
        // silence while the bus's Pings pile up unread.
        let mut stream = TcpStream::connect(roster[1]).await.unwrap();
        let dialer = config(0, &roster).local;
        let hello = admission::hello(&dialer, 1, MetadataHistory::Absent, [0; 32]);
        let BufResult(written, _) = stream.write_all(hello.to_vec()).await;
        written.unwrap();
        let silent_since = Instant::now();
        let BufResult(read, answer) = stream.read_exact([0u8; HEADER_SIZE]).await;
        read.unwrap();
        admission::admit_challenge(&dialer, 1, &hello, &answer)
            .verdict
            .unwrap();
        admitted(&mut b, 0).await;
        let sender = b.bus.sender();
        let unreachable = async {
            while sender.status(0) == PeerStatus::Healthy {
                compio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        compio::time::timeout(PATIENCE, unreachable)
            .await
            .expect("Unreachable within the patience");
        assert!(
            silent_since.elapsed() > Duration::from_millis(500),
            "Unreachable after {:?} of silence",
            silent_since.elapsed()
        );
        assert!(sender.linked(0), "the silent peer's link stays up");
        // The bus kept pinging it every keepalive (a fifth of the timeout).
        assert_eq!(next_frame(&mut stream).await, Command::Ping);
        assert_eq!(next_frame(&mut stream).await, Command::Ping);

        // It speaks again with a Ping: answered with a Pong, Healthy again, and no group saw it.
        let ping = replica_link::keepalive_frame(CLUSTER, 0, Command::Ping);
        let BufResult(written, _) = stream.write_all(ping.to_vec()).await;
        written.unwrap();
        let answered = async { while next_frame(&mut stream).await != Command::Pong {} };
        compio::time::timeout(PATIENCE, answered)
            .await
            .expect("a Pong within the patience");
        assert_eq!(sender.status(0), PeerStatus::Healthy);
        assert!(b.inbox.try_recv().is_err());
        assert_eq!(b.bus.router().undeliverable(), 0);
    }
}
