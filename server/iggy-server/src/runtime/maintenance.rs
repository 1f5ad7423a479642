//! Background upkeep on the node's runtime: topic retention (message expiry, maximum topic
//! size), the leases of sessions no connection is bound to, the ordered retirement that
//! gives an ended session's client-table slots back, and the deletion of expired personal
//! access tokens.
//!
//! Each of them proposes ops, so in a cluster each is done by the primary of the group the op
//! goes to: the metadata primary expires sessions and releases their slots, a partition's
//! primary retires its segments and writer slots. The other replicas skip that part (they get
//! its effects by replication) instead of having every proposal refused.
//!
//! A session is cluster-wide, but each node only sees its own connections: so every backup
//! reports the sessions bound on it to the metadata primary (a session heartbeat every quarter
//! lease), which counts them as active. A session expires only when no node holds it.

use crate::consensus::figures::GroupRole;
use crate::consensus::group::Outcome;
use crate::runtime::node::Node;
use crate::runtime::partition::PartitionHandle;
use crate::runtime::shared::PartitionKey;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{DeletePersonalAccessTokenRequest, SessionIdentity};
use iggy_generated::storage::SessionFinalizeOp;
use iggy_metadata::Metadata;
use iggy_metadata::machine::SYSTEM_CLIENT;
use iggy_metadata::machine::envelope;
use iggy_metadata::options::limit;
use iggy_metadata::retirement::RetirementReport;
use iggy_wire::WireEncode;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Runs forever: one retention pass, one lease check and one retirement pass per interval.
pub async fn run(node: Rc<Node>) {
    let config = &node.shared.config.system;
    let interval = Duration::from_millis(config.maintenance_interval_ms.max(10));
    let lease = Duration::from_secs(config.session_lease_secs);
    let mut retirement = Retirement::default();
    let mut orphan_sweep = OrphanSweep::default();
    let mut file_checks = FileChecks::default();
    if node.shared.replica_count() > 1 {
        compio::runtime::spawn(report_sessions(node.clone(), lease)).detach();
    }
    let low_room = crate::consensus::log_limit::Throttled::new(LOW_ROOM_WARNING_INTERVAL);
    warn_of_low_room(&node, &low_room);
    let mut quorum = QuorumWatch::new(Instant::now());
    let mut lease_watch = LeaseWatch::default();
    let mut closed_connections = ClosedConnections::default();
    for pass in 1u64.. {
        compio::time::sleep(interval).await;
        warn_of_low_room(&node, &low_room);
        quorum.pass(&node, Instant::now());
        lease_watch.pass(&node, Instant::now()).await;
        file_checks.pass(&node, pass);
        keep_stamp_offset(&node);
        retention(&node).await;
        expire_sessions(&node, lease).await;
        delete_expired_tokens(&node).await;
        retirement.pass(&node, pass).await;
        orphan_sweep.pass(&node).await;
        judge_gone_partitions(&node);
        release_restored(&node);
        node.shared.retry_deferred_opens().await;
        let connections = &node.connections;
        if closed_connections.pass(connections.take_peak(), connections.open()) {
            crate::runtime::host::give_back_free_memory();
        }
    }
}

/// Connections closed since the memory was last given back after a burst of them, past which
/// it is given back again.
const CLOSED_CONNECTIONS_TRIM: usize = 256;

/// Whether many connections closed since the peak last seen: the allocator kept what they
/// held (4,000 idle connections took a node from 12 to 106 MiB resident, and it stayed there
/// once they closed; rounds of such bursts grew it further).
#[derive(Debug, Default)]
struct ClosedConnections {
    peak: usize,
}

impl ClosedConnections {
    /// One pass: `peak` the most connections open since the last, `open` those open now.
    /// True when at least [`CLOSED_CONNECTIONS_TRIM`] fewer are open than at the peak; the
    /// count starts again from those open.
    fn pass(&mut self, peak: usize, open: usize) -> bool {
        self.peak = self.peak.max(peak);
        if self.peak >= open + CLOSED_CONNECTIONS_TRIM {
            self.peak = open;
            return true;
        }
        false
    }
}

/// Passes between two checks of the files of a partition that applied nothing since its last.
const IDLE_FILE_CHECK_EVERY: u64 = 8;

/// Each partition on the node checks that its active segment's file is still there and as long
/// as what was written to it (a file removed or cut short behind the node's back stops it):
/// every pass while it applies ops, and once every `IDLE_FILE_CHECK_EVERY` passes while it
/// applies none (staggered: a pass checks that share of the idle ones). A check wakes the
/// partition's task; a node of thousands of idle partitions spent a third of its idle CPU
/// waking each of them every pass.
#[derive(Default)]
struct FileChecks {
    /// Per partition: the incarnation and the op it had applied at its last check.
    checked_at: HashMap<PartitionKey, (u64, u64)>,
}

impl FileChecks {
    fn pass(&mut self, node: &Node, pass: u64) {
        let partitions = node.shared.partitions.borrow();
        self.checked_at
            .retain(|key, _| partitions.contains_key(key));
        for (turn, (key, entry)) in (pass..).zip(partitions.iter()) {
            let now = (entry.incarnation, entry.handle.group.figures().applied());
            let changed = self.checked_at.get(key) != Some(&now);
            if changed || turn.is_multiple_of(IDLE_FILE_CHECK_EVERY) {
                entry.handle.check_files();
                self.checked_at.insert(*key, now);
            }
        }
    }
}

/// A node started restored (`--restored`, the marker in its data directory) leaves that state
/// once its metadata group holds a view's log from its primary and applied what it knows
/// committed, and every live partition of its model runs, each past its restored state too:
/// the marker is removed, and groups opened later (a partition created now) open as any other.
fn release_restored(node: &Node) {
    let Some(plane) = node.shared.plane.as_ref() else {
        return;
    };
    if !plane.restored() {
        return;
    }
    let figures = node.metadata.figures();
    let role = figures.role();
    if role.muted || !role.reached(figures.applied(), figures.commit()) {
        return;
    }
    let partitions = node.shared.partitions.borrow();
    let caught_up = partitions.values().all(|entry| {
        let role = entry.handle.group.figures().role();
        !role.muted && role.status == iggy_vsr::Status::Normal
    });
    let metadata = node.shared.metadata.borrow();
    let all_open = metadata.streams.iter().all(|(stream_id, stream)| {
        stream.topics.iter().all(|(topic_id, topic)| {
            topic.partitions.keys().all(|partition_id| {
                partitions.contains_key(&(*stream_id, *topic_id, *partition_id))
            })
        })
    });
    if !caught_up || !all_open {
        return;
    }
    let root = std::path::Path::new(&node.shared.config.system.path);
    let marker = iggy_storage::data_dir::restored_marker(root);
    match iggy_storage::data_dir::remove_restored_marker(root) {
        Ok(()) => {
            plane.set_restored(false);
            tracing::info!(
                "restored node caught up: every group holds its view's log from the primary; \
                 removed {} and it votes in view changes again",
                marker.display()
            );
        }
        Err(error) => tracing::warn!("cannot remove {}: {error}", marker.display()),
    }
}

/// How often a node whose disk stays nearly full says so again.
const LOW_ROOM_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Warns (at most once per interval) when the data directory's filesystem has little room
/// left: the write that finds none stops the node, and the operator should hear of it first.
fn warn_of_low_room(node: &Node, throttle: &crate::consensus::log_limit::Throttled) {
    let path = std::path::Path::new(&node.shared.config.system.path);
    let space = crate::runtime::host::disk_space(path);
    let frame = u64::from(node.shared.config.limits.max_frame_size);
    if let Some(warning) = crate::runtime::host::low_room_warning(path, space, frame)
        && throttle.due(Instant::now()).is_some()
    {
        tracing::warn!("{warning}");
    }
}

/// A cluster node that holds no grant lease (`consensus/grant_lease.rs`: it does not hear its
/// metadata primary, a link cut one way or a partition between the two) judges no grant, so
/// every write to the partitions it leads would be answered 58 for as long as that lasts. Once
/// it has lasted two heartbeat timeouts (longer than a metadata primary's failover), its
/// partition groups decline to lead: each one it leads hands itself to a caught-up backup,
/// whose node can judge, and none takes a group handed to it; once the lease is back they may
/// lead again (the preferred-primary hand-over brings its partitions back).
#[derive(Debug, Default)]
struct LeaseWatch {
    /// When this node was first seen without a lease, while it still is.
    lapsed_since: Option<Instant>,
    declining: bool,
    /// Whether this lapse's hand-over was logged: a group still led here is offered again every
    /// pass (to the next backup when the one asked declines), said once.
    said: bool,
}

impl LeaseWatch {
    async fn pass(&mut self, node: &Node, now: Instant) {
        if node.shared.plane.is_none() {
            return;
        }
        let lapsed = node.shared.may_judge().is_err();
        let patience = node.shared.config.cluster.heartbeat_timeout * 2;
        let Some(declines) = self.judge(lapsed, now, patience) else {
            return;
        };
        let groups: Vec<_> = node
            .shared
            .partitions
            .borrow()
            .values()
            .map(|entry| entry.handle.group.clone())
            .collect();
        let mut handed = 0;
        for group in &groups {
            handed += usize::from(group.decline_to_lead(declines).await);
        }
        let replica = node.shared.replica_id;
        match (declines, handed) {
            (true, 0) => {}
            (true, handed) if std::mem::replace(&mut self.said, true) => tracing::debug!(
                "replica {replica}: still no grant lease: {handed} partition groups led here \
                 offered to a backup again"
            ),
            (true, handed) => tracing::warn!(
                "replica {replica}: no grant lease from the metadata primary for over \
                 {patience:?} (it is not heard): {handed} partition groups led here handed to \
                 a backup, and this node leads none until it hears the primary again"
            ),
            (false, _) => {
                self.said = false;
                tracing::info!(
                    "replica {replica}: grant lease back: its partition groups may lead again"
                )
            }
        }
    }

    /// What the groups are told this pass: `Some(true)` to decline (every pass while the lease
    /// stays lapsed past `patience`: a group elected meanwhile hands itself over too),
    /// `Some(false)` once, when the lease is back; `None` otherwise.
    fn judge(&mut self, lapsed: bool, now: Instant, patience: Duration) -> Option<bool> {
        if !lapsed {
            self.lapsed_since = None;
            return std::mem::take(&mut self.declining).then_some(false);
        }
        let since = *self.lapsed_since.get_or_insert(now);
        if now < since + patience {
            return None;
        }
        self.declining = true;
        Some(true)
    }
}

/// How often a node whose metadata group has no quorum says so.
const NO_QUORUM_WARNING_INTERVAL: Duration = Duration::from_secs(30);

/// Says why a cluster node serves nothing: its metadata group has been without a quorum (not
/// Normal and in touch) for two heartbeat timeouts, as when it started while most of its
/// peers are down. Once at WARN, then every `NO_QUORUM_WARNING_INTERVAL` while it lasts.
struct QuorumWatch {
    /// When the metadata group last had its quorum, or the node started.
    had_quorum_at: Instant,
    warned_at: Option<Instant>,
    /// When the last pass ran.
    passed_at: Instant,
}

impl QuorumWatch {
    fn new(now: Instant) -> Self {
        Self {
            had_quorum_at: now,
            warned_at: None,
            passed_at: now,
        }
    }

    /// A pass at `now`: one longer than `patience` after the last says this process did not
    /// run meanwhile (stopped, SIGSTOP, a suspended machine), which tells nothing of its
    /// quorum: judged from now on, not reported as a quorum lost for the whole stop once the
    /// process runs again (before it has heard its peers since).
    fn resumed(&mut self, now: Instant, patience: Duration) {
        if now.duration_since(self.passed_at) > patience {
            self.had_quorum_at = now;
            self.warned_at = None;
        }
        self.passed_at = now;
    }

    fn pass(&mut self, node: &Node, now: Instant) {
        let Some(plane) = node.shared.plane.as_ref() else {
            return;
        };
        let figures = node.metadata.figures();
        let role = figures.role();
        let (heard, unheard): (Vec<_>, Vec<_>) =
            plane.peers_up().into_iter().partition(|(_, up)| *up);
        let heard: Vec<u8> = heard.into_iter().map(|(peer, _)| peer).collect();
        let unheard: Vec<u8> = unheard.into_iter().map(|(peer, _)| peer).collect();
        let patience = node.shared.config.cluster.heartbeat_timeout * 2;
        self.resumed(now, patience);
        let replicas = plane.replica_count();
        if let Some(warning) = self.judge(now, role, (&heard, &unheard), replicas, patience) {
            tracing::warn!("replica {}: {warning}", node.shared.replica_id);
        }
    }

    /// The warning due at `now`, if any, for a metadata group in `role` of a cluster of
    /// `replicas` whose node hears the peers `heard` and not those `unheard`.
    fn judge(
        &mut self,
        now: Instant,
        role: crate::consensus::figures::GroupRole,
        (heard, unheard): (&[u8], &[u8]),
        replicas: u8,
        patience: Duration,
    ) -> Option<String> {
        if role.status == iggy_vsr::Status::Normal && role.in_touch {
            self.had_quorum_at = now;
            self.warned_at = None;
            return None;
        }
        let without = now.duration_since(self.had_quorum_at);
        let due = self
            .warned_at
            .is_none_or(|at| now.duration_since(at) >= NO_QUORUM_WARNING_INTERVAL);
        if without < patience || !due {
            return None;
        }
        self.warned_at = Some(now);
        let quorum = usize::from(replicas) / 2 + 1;
        // Peers heard (their links carry frames) while the group is out of touch: what they
        // send is late or lost on the way (a slow or lossy link), not absent.
        let hears = match heard.len() + 1 >= quorum {
            true => format!(
                "hears {} of its {} peers, but its frames from them are too late or lost \
                 (a slow or lossy replica network?)",
                heard.len(),
                replicas - 1
            ),
            false => format!(
                "hears {} of its {} peers (not {unheard:?})",
                heard.len(),
                replicas - 1
            ),
        };
        Some(format!(
            "no quorum for {}s: the metadata group is {:?} and this node {hears}; {quorum} of \
             the {replicas} replicas must run and reach each other before anything is served \
             (start the nodes that are down, or check the replica network)",
            without.as_secs(),
            role.status,
        ))
    }
}

/// Partitions whose directory was gone when an op opened them (`Shared::gone_partitions`):
/// once the metadata is current, each still live is reported as the error it is (its files
/// were lost); the others a later op deleted, so there is nothing to report.
fn judge_gone_partitions(node: &Node) {
    if node.shared.gone_partitions.borrow().is_empty() {
        return;
    }
    let figures = node.metadata.figures();
    if !metadata_current(figures.role(), figures.applied(), figures.commit()) {
        return;
    }
    let live = node.shared.metadata.borrow().live_partitions();
    for (key, incarnation, why) in std::mem::take(&mut *node.shared.gone_partitions.borrow_mut()) {
        if live.get(&key) == Some(&incarnation) {
            tracing::error!("{why}");
        } else {
            tracing::info!(
                "partition {key:?}: incarnation {incarnation}, whose directory was gone, was deleted by a later op"
            );
        }
    }
}

/// Whether this node's metadata model is current enough to judge which consumer groups are
/// live: its replica serves in touch with its primary (or leads a quorum) and applied every op
/// it knows committed. A model that lags (recovering, in a view change, cut off, still
/// applying) could call a group it has not heard of yet orphaned.
fn metadata_current(role: GroupRole, applied: u64, known_committed: u64) -> bool {
    role.reached(applied, known_committed)
}

/// A topic's consumer groups as of the model's op.
struct TopicGroups {
    /// Group id → the op that created it (0: unknown, read from a snapshot of format 10, so an
    /// offset a recreated group would inherit is not told apart).
    live: BTreeMap<u32, u64>,
    /// The op of the topic's latest group creation or deletion.
    changed_at_op: u64,
}

fn live_groups(metadata: &Metadata) -> HashMap<(u32, u32), TopicGroups> {
    let mut out = HashMap::new();
    for stream in metadata.streams.values() {
        for topic in stream.topics.values() {
            let groups = TopicGroups {
                live: topic.live_groups(),
                changed_at_op: topic.groups_changed_at_op,
            };
            out.insert((stream.id, topic.id), groups);
        }
    }
    out
}

/// What a partition's sweep found nothing in. Which group offsets are orphaned depends only on
/// the partition's state (its incarnation and the ops its copy applied) and on its topic's
/// groups, which change only with a group creation or deletion: while all three stay, a sweep
/// would find nothing again. (A later model changes nothing else: an offset a sweep holds back
/// because it was resolved after the model's op is a group's created since, a topic change.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SweptClean {
    incarnation: u64,
    groups_changed_at_op: u64,
    applied: u64,
}

/// A deleted consumer group's offsets go from each partition through an op its primary
/// submits when it applies the deletion; a primary that never applied it (it caught up by a
/// state transfer past it) or a partition changing views for longer than that submission
/// waits leaves them, for a later group with the same id to inherit. So each pass, on every
/// partition this node leads, the group offsets no live group owns (of a deleted id, or
/// resolved before the live group's creation) are deleted through the same committed op,
/// judged against this node's model only while that model is current. A partition whose last
/// sweep found nothing is asked again only once that may have changed ([`SweptClean`]).
#[derive(Default)]
struct OrphanSweep {
    clean: HashMap<PartitionKey, SweptClean>,
}

impl OrphanSweep {
    async fn pass(&mut self, node: &Node) {
        let figures = node.metadata.figures();
        if !metadata_current(figures.role(), figures.applied(), figures.commit()) {
            return;
        }
        let (metadata_op, groups, partitions) = {
            let metadata = node.shared.metadata.borrow();
            let partitions = metadata.live_partitions();
            (metadata.commit, live_groups(&metadata), partitions)
        };
        self.clean.retain(|key, _| partitions.contains_key(key));
        for (key, incarnation) in partitions {
            let Some(topic) = groups.get(&(key.0, key.1)) else {
                continue;
            };
            let Some(partition) = node.shared.partition(key) else {
                continue;
            };
            let partition_figures = partition.group.figures();
            if !primary(node, partition_figures.role()) {
                continue;
            }
            let swept = SweptClean {
                incarnation,
                groups_changed_at_op: topic.changed_at_op,
                applied: partition_figures.applied(),
            };
            if self.clean.get(&key) == Some(&swept) {
                continue;
            }
            self.clean.remove(&key);
            let deletions = match partition
                .orphaned_group_offsets(topic.live.clone(), metadata_op)
                .await
            {
                Ok(deletions) => deletions,
                Err(_) => continue,
            };
            if deletions.is_empty() {
                // Judged at the state of `swept.applied` only if the read applied nothing more.
                if partition_figures.applied() == swept.applied {
                    self.clean.insert(key, swept);
                }
                continue;
            }
            delete_orphaned_group_offsets(&partition, key, deletions).await;
        }
    }
}

async fn delete_orphaned_group_offsets(
    partition: &PartitionHandle,
    key: PartitionKey,
    deletions: Vec<(u32, u64)>,
) {
    for (group, deletion_op) in deletions {
        match partition
            .delete_orphaned_group_offsets(group, deletion_op)
            .await
        {
            Ok(()) => tracing::info!(
                "partition {key:?}: deleted the offsets of consumer group {group} no live group owns (as of metadata op {deletion_op})"
            ),
            // The next pass looks again.
            Err(error) => tracing::warn!(
                "partition {key:?}: offsets of consumer group {group} no live group owns not deleted: {error:?}"
            ),
        }
    }
}

/// Per partition: the topic's expiry and its share of the topic's maximum size.
fn retention_limits(metadata: &Metadata) -> Vec<(PartitionKey, Option<u64>, Option<u64>)> {
    let mut out = Vec::new();
    for stream in metadata.streams.values() {
        for topic in stream.topics.values() {
            let expiry = limit(topic.message_expiry);
            let count = topic.partitions.len().max(1) as u64;
            let max_size = limit(topic.max_topic_size).map(|size| size / count);
            for partition in topic.partitions.keys() {
                out.push(((stream.id, topic.id, *partition), expiry, max_size));
            }
        }
    }
    out
}

/// One retention pass: each partition over a limit retires its oldest segments through a
/// committed op (planned here, as the primary). Expiry is judged by the time a quorum of the
/// replicas' clocks have reached (`ReplicaPlane::quorum_now`), never later than this node's
/// own: a primary whose clock jumped ahead would retire, for every replica, messages the
/// policy still keeps. While that time is not known (too few peers heard lately) no message
/// expires; size retention goes on.
async fn retention(node: &Node) {
    let limits = retention_limits(&node.shared.metadata.borrow());
    let (own, now) = expiry_clock(node);
    for (key, expiry, max_size) in limits {
        let (now, expiry) = match now {
            Some(now) => (now, expiry),
            None => (own, None),
        };
        if expiry.is_none() && max_size.is_none() {
            continue;
        }
        let Some(partition) = node.shared.partition(key) else {
            continue;
        };
        if !primary(node, partition.group.figures().role()) {
            continue;
        }
        match partition.retention(now, expiry, max_size).await {
            Ok(Some(keep_from)) => {
                tracing::debug!("partition {key:?}: retention kept the log from offset {keep_from}")
            }
            Ok(None) => {}
            // The next pass plans again from the log as it is then.
            Err(error) => tracing::warn!("partition {key:?}: retention not committed: {error:?}"),
        }
    }
}

/// A clock this far off the replicas' quorum moves the stamps of messages sent here.
const STAMP_TOLERANCE: Duration = Duration::from_secs(1);

/// Keeps `Shared::stamp_clock`'s offset: a node whose clock is more than `STAMP_TOLERANCE` off the time
/// a quorum of the replicas' clocks reached stamps messages with that time (logged when it
/// changes), so a primary whose clock is behind does not stamp messages in the past (a replica
/// with a good clock, primary later, would expire them early).
fn keep_stamp_offset(node: &Node) {
    let Some(plane) = &node.shared.plane else {
        return;
    };
    let own = crate::runtime::clock::now_micros();
    let offset = crate::consensus::cluster_clock::stamp_offset(
        own,
        plane.quorum_clock(own),
        STAMP_TOLERANCE,
    );
    let before = node.shared.stamp_clock.set_offset(offset);
    if (offset == 0) != (before == 0) {
        match offset {
            0 => tracing::info!(
                "replica {}: this node's clock agrees with its peers' again",
                node.shared.replica_id
            ),
            _ => tracing::warn!(
                "replica {}: this node's clock is {:.1}s {} the time a quorum of the replicas' \
                 clocks reached: messages sent here are stamped with that time, and expiry \
                 judged by it (fix the host's clock: NTP)",
                node.shared.replica_id,
                offset.unsigned_abs() as f64 / 1e6,
                if offset > 0 { "behind" } else { "ahead of" },
            ),
        }
    }
}

/// This node's wall clock, and the time expiries are judged by: in a cluster, the time a
/// quorum of the replicas' clocks reached (`ReplicaPlane::quorum_now`), `None` while too few
/// peers were heard lately; a standalone node's own.
fn expiry_clock(node: &Node) -> (u64, Option<u64>) {
    let own = crate::runtime::clock::now_micros();
    match &node.shared.plane {
        Some(plane) => (own, plane.quorum_now(own)),
        None => (own, Some(own)),
    }
}

/// Whether this replica is the primary of a group in `role`, so its proposals are accepted.
fn primary(node: &Node, role: GroupRole) -> bool {
    role.is_primary(node.shared.replica_id)
}

/// How often a backup reports its bound sessions: four reports per lease, so one or two lost
/// on the way still leave one in time; at least 100 ms apart, and at most 15 s (a long lease
/// still hears from its backups at that pace, which costs little).
fn heartbeat_interval(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(15))
}

/// Runs forever on a node of a cluster: as a metadata backup, reports the sessions bound on
/// this node to the metadata primary. Its own loop, so a slow retention pass never delays it.
async fn report_sessions(node: Rc<Node>, lease: Duration) {
    let interval = heartbeat_interval(lease);
    loop {
        compio::time::sleep(interval).await;
        if primary(&node, node.metadata.figures().role()) {
            continue;
        }
        let sessions = node.shared.sessions_bound_here();
        if !sessions.is_empty() {
            node.metadata.report_sessions(sessions);
        }
    }
}

/// Ends expired sessions through the metadata group, one committed logout each. Only the
/// metadata primary does: a session bound on a backup stays active through that backup's
/// reports (`report_sessions`). On any other replica every session's idle time starts again,
/// so a replica that becomes primary gives each session a full lease from then on, within which
/// the backups, once they follow it, report theirs to it, rather than ending at once sessions
/// whose connections are bound on other replicas.
async fn expire_sessions(node: &Node, lease: Duration) {
    let is_primary = primary(node, node.metadata.figures().role());
    let live: Vec<u128> = node
        .shared
        .metadata
        .borrow()
        .sessions
        .iter()
        .map(|(client, _)| *client)
        .filter(|client| *client != SYSTEM_CLIENT)
        .collect();
    let token_lifetime = Duration::from_secs(node.shared.config.http.jwt.access_token_expiry_secs);
    let expired = node.shared.sessions_here.borrow_mut().lease_pass(
        &live,
        is_primary,
        (lease, token_lifetime),
        Instant::now(),
    );
    for client in expired {
        let now = node.shared.stamp_now();
        let (user, operation) = (iggy_metadata::ROOT_USER_ID, Operation::Logout);
        match submit_system(node, now, user, operation, &client.to_le_bytes()).await {
            Outcome::Committed { .. } => {
                node.shared.sessions_here.borrow_mut().expired(client);
                let over_http = if crate::runtime::shared::is_http_client(client) {
                    " (an HTTP session: no token of it can still be valid)"
                } else {
                    ""
                };
                tracing::info!(
                    "session of client {client:032x} expired after {lease:?} without a connection{over_http}"
                );
            }
            outcome => not_committed(
                &outcome,
                format_args!("session expiry of client {client:032x}"),
            ),
        }
    }
}

/// Deletes expired personal access tokens through the metadata group, one committed delete
/// each in its owner's name, as upstream's token cleaner does: an expired token logs nobody
/// in, but would keep its name taken and count towards its owner's limit. Only the metadata
/// primary does, by the replicas' clocks (`expiry_clock`).
async fn delete_expired_tokens(node: &Node) {
    if !primary(node, node.metadata.figures().role()) {
        return;
    }
    // Judged as message expiry is: a primary whose clock jumped ahead deletes no token early.
    let (_, Some(expired_by)) = expiry_clock(node) else {
        return;
    };
    let now = node.shared.stamp_now();
    let expired: Vec<(u32, String)> = node
        .shared
        .metadata
        .borrow()
        .tokens
        .iter()
        .filter(|token| token.expiry_at.is_some_and(|at| at <= expired_by))
        .map(|token| (token.user_id, token.name.clone()))
        .collect();
    for (user_id, name) in expired {
        let request = DeletePersonalAccessTokenRequest { name: &name }.to_wire_bytes();
        let operation = Operation::DeletePersonalAccessToken;
        match submit_system(node, now, user_id, operation, &request).await {
            Outcome::Committed { .. } => {
                tracing::info!("personal access token {name:?} of user {user_id} expired; deleted")
            }
            outcome => not_committed(
                &outcome,
                format_args!("deletion of expired token {name:?} of user {user_id}"),
            ),
        }
    }
}

/// Logs a maintenance op of the metadata primary that did not commit: at INFO when this replica
/// lost the lead meanwhile (a primary resumed after a stop, deposed while its pass ran; its
/// successor's pass does the work), else at WARN.
fn not_committed(outcome: &Outcome, what: std::fmt::Arguments<'_>) {
    use iggy_vsr::Refusal;
    match outcome {
        Outcome::Failed | Outcome::Refused(Refusal::NotPrimary { .. } | Refusal::NotReady) => {
            tracing::info!(
                "{what} not committed: this replica no longer leads the metadata group \
                 ({outcome:?}); the primary's own pass does it"
            )
        }
        _ => tracing::warn!("{what} not committed: {outcome:?}"),
    }
}

/// Submits a metadata op of the node's system client (numbered after its last committed one)
/// in `user_id`'s name, stamped `now` (microseconds), and waits for its outcome.
async fn submit_system(
    node: &Node,
    now: u64,
    user_id: u32,
    operation: Operation,
    request: &[u8],
) -> Outcome {
    let number = node.shared.metadata.borrow().system_requests + 1;
    let body = envelope(now, user_id, request);
    node.metadata
        .submit(SYSTEM_CLIENT, number, operation.to_repr(), body)
        .await
}

/// Sessions one retirement op names at most (the official `MAX_SESSIONS_PER_RETIREMENT`).
const SESSIONS_PER_OP: usize = 128;

/// With no ended session waiting, the partitions are still scanned every this many passes for
/// writer slots a write racing its session's end left behind.
const IDLE_SCAN_EVERY: u64 = 60;

/// Ordered retirement of ended sessions (logout or lease expiry): a full client table refuses
/// new sessions and writers, and never evicts a live one, so an ended session's slots must come
/// back in order. First each partition group commits a RetireSession op naming the sessions
/// that still hold a writer slot there; then the metadata group commits a FinalizeSession op
/// that releases their session slots, once a quorum of the metadata group's replicas reported
/// them retired on every partition copy they host. Only then may the same client id register
/// again: no partition keeps an old session's request numbers that a new session's requests
/// could collide with. The metadata machine re-checks at apply that a named session is not live
/// and that the partition set is still the one the reports covered.
///
/// Every node reports, each pass, the ended sessions its metadata model knows that no copy it
/// hosts of its model's partition set holds a writer slot of
/// ([`iggy_metadata::Metadata::partition_set_revision`] names that set): a backup to the
/// metadata primary (SessionRetirementProgress frames), the primary to its own evidence
/// (`Shared::retirement`). A copy counts only while it is [`current`]; one that is not, or a
/// partition of the set this node does not run yet, holds every ended session out of its
/// report (a copy that could not open, `Shared::unopenable`, holds none: it serves nothing).
/// A session is reported only once two passes in a row found it so: a write admitted just
/// before its session ended can still register its writer slot a moment later, on every
/// replica alike, which no number of replicas reporting at once would see.
#[derive(Default)]
struct Retirement {
    /// Ended sessions, as (client, session), no partition copy here held at the previous pass.
    clean: HashSet<(u128, u64)>,
    /// Per partition, the highest op its copy here knew committed at the previous pass.
    committed_before: HashMap<PartitionKey, u64>,
}

/// Whether a partition copy's writer slots can judge a session retired: its replica serves in
/// touch with its primary (or leads a quorum) and has applied every op it knew committed at
/// the previous pass (`committed_before`, none at the first). A backup repairing a gap after a
/// restart or a cut is behind that mark for as many passes as it takes; in steady state the
/// copy trails its primary by one commit announcement, which the two clean passes cover.
fn current(role: GroupRole, applied: u64, committed_before: Option<u64>) -> bool {
    role.reached(applied, committed_before.unwrap_or(0))
}

impl Retirement {
    async fn pass(&mut self, node: &Node, pass: u64) {
        // The metadata group's slots whose sessions ended (the node's own clients left out).
        let slots = node.metadata.clients().await;
        let ended: Vec<(u128, u64)> = slots
            .into_iter()
            .filter(|(client, _)| !live(node, *client))
            .collect();
        if ended.is_empty() && !pass.is_multiple_of(IDLE_SCAN_EVERY) {
            self.clean.clear();
            return;
        }
        let (revision, keys): (u64, Vec<_>) = {
            let metadata = node.shared.metadata.borrow();
            let keys = metadata.live_partitions().into_iter().collect();
            (metadata.partition_set_revision(), keys)
        };
        let found = self.retire_writers(node, &ended, keys).await;
        let clean_now: HashSet<(u128, u64)> = ended
            .iter()
            .filter(|(client, _)| !found.contains(client))
            .copied()
            .collect();
        let retired: Vec<(u128, u64)> = ended
            .iter()
            .filter(|session| clean_now.contains(session) && self.clean.contains(session))
            .copied()
            .collect();
        self.clean = clean_now;
        let figures = node.metadata.figures();
        if !primary(node, figures.role()) {
            if node.shared.replica_count() > 1 {
                node.metadata.report_retirement(revision, retired);
            }
            return;
        }
        let current_revision = node.shared.metadata.borrow().partition_set_revision();
        let releasable = {
            let mut evidence = node.shared.retirement.borrow_mut();
            evidence.observe(figures.view(), current_revision);
            evidence.report(RetirementReport {
                replica: node.shared.replica_id,
                view: figures.view(),
                revision,
                sessions: retired,
                incomplete: false,
            });
            evidence.releasable()
        };
        let releasable: Vec<(u128, u64)> = ended
            .iter()
            .filter(|session| releasable.binary_search(session).is_ok())
            .copied()
            .collect();
        release(node, current_revision, &releasable).await;
    }

    /// Reads the writer slots of every partition copy of the set `keys` this node hosts, has
    /// each partition this node leads retire those of ended sessions (RetireSession), and
    /// returns the clients of `ended` held back on this node: a slot left somewhere, a copy
    /// not [`current`], a partition not running here yet (one that could not open holds
    /// nothing back).
    async fn retire_writers(
        &mut self,
        node: &Node,
        ended: &[(u128, u64)],
        keys: Vec<(PartitionKey, u64)>,
    ) -> HashSet<u128> {
        let mut found = HashSet::new();
        let mut committed_now = HashMap::new();
        for (key, incarnation) in keys {
            let Some(partition) = node.shared.partition(key) else {
                // A copy that could not open serves nothing and registers no writer until the
                // operator repairs it: it holds nothing back, so the node's other partitions
                // and new logins go on (the seed). One not running yet (opening) can vouch for
                // nothing.
                if !node.shared.unopenable(key, incarnation) {
                    found.extend(ended.iter().map(|(client, _)| *client));
                }
                continue;
            };
            let writers = partition.writers().await;
            let figures = partition.group.figures();
            committed_now.insert(key, figures.commit());
            let before = self.committed_before.get(&key).copied();
            if !current(figures.role(), figures.applied(), before) {
                found.extend(ended.iter().map(|(client, _)| *client));
            }
            // Checked after the writers are read: a writer slot exists only for a session that
            // was live when it registered, so one missing now has ended for good.
            let commit = node.shared.metadata.borrow().commit;
            let retiring: Vec<SessionIdentity> = writers
                .into_iter()
                .filter(|(client, _)| !live(node, *client))
                .map(|(client, session)| identity(client, session, commit))
                .collect();
            // Held here whoever retires it: the slot is released only once no partition does.
            found.extend(retiring.iter().map(|identity| identity.client_id));
            if !primary(node, partition.group.figures().role()) {
                continue;
            }
            for batch in retiring.chunks(SESSIONS_PER_OP) {
                if let Err(error) = partition.retire_sessions(batch.to_vec()).await {
                    tracing::warn!(
                        "partition {key:?}: retirement of {} ended sessions not committed: {error:?}",
                        batch.len()
                    );
                }
            }
        }
        self.committed_before = committed_now;
        found
    }
}

/// As the metadata primary: commits FinalizeSession ops releasing `sessions`, which a quorum
/// reported retired on the partition set of `revision`, at most [`SESSIONS_PER_OP`] an op.
async fn release(node: &Node, revision: u64, sessions: &[(u128, u64)]) {
    let commit = node.shared.metadata.borrow().commit;
    for batch in sessions.chunks(SESSIONS_PER_OP) {
        let finalize = SessionFinalizeOp {
            partition_set_revision: revision,
            sessions: batch
                .iter()
                .map(|(client, session)| identity(*client, *session, commit))
                .collect(),
        }
        .to_wire_bytes();
        let now = node.shared.stamp_now();
        let (user, operation) = (iggy_metadata::ROOT_USER_ID, Operation::FinalizeSession);
        match submit_system(node, now, user, operation, &finalize).await {
            Outcome::Committed { .. } => {
                node.shared.retirement.borrow_mut().released(batch);
                tracing::info!(
                    "released the slots of {} ended sessions (partition set revision {revision})",
                    batch.len()
                );
            }
            outcome => not_committed(
                &outcome,
                format_args!("release of {} ended sessions", batch.len()),
            ),
        }
    }
}

/// Whether `client` has a live session in the metadata model.
fn live(node: &Node, client: u128) -> bool {
    node.shared.metadata.borrow().sessions.get(client).is_some()
}

fn identity(client: u128, session: u64, metadata_commit: u64) -> SessionIdentity {
    SessionIdentity {
        client_id: client,
        session,
        metadata_watermark: metadata_commit.max(session),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_given_back_once_a_burst_of_connections_closed() {
        let mut closed = ClosedConnections::default();
        // Growing and holding: nothing closed.
        assert!(!closed.pass(100, 100));
        assert!(!closed.pass(4000, 4000));
        // Fewer than the threshold closed.
        assert!(!closed.pass(4000, 3800));
        // The burst closed: once, then not again until another burst closes.
        assert!(closed.pass(3800, 10));
        assert!(!closed.pass(10, 10));
        // A burst that opened and closed between two passes counts by its peak.
        assert!(closed.pass(3000, 12));
        assert!(!closed.pass(12, 12));
    }

    use iggy_metadata::Ident;
    use iggy_vsr::Status;

    fn role(status: Status, in_touch: bool) -> GroupRole {
        GroupRole {
            status,
            primary: 0,
            in_touch,
            muted: false,
            applied_view_log: true,
        }
    }

    #[test]
    fn orphaned_offsets_are_judged_only_by_a_model_in_touch_that_applied_what_it_knew() {
        let serving = role(Status::Normal, true);
        assert!(metadata_current(serving, 12, 12));
        assert!(
            !metadata_current(serving, 11, 12),
            "still applying an op it knows committed (a group created there)"
        );
        assert!(
            !metadata_current(role(Status::Normal, false), 12, 12),
            "cut off from its primary: commits it has not heard of"
        );
        for status in [Status::ViewChange, Status::Recovering] {
            assert!(!metadata_current(role(status, true), 12, 12), "{status:?}");
        }
    }

    #[test]
    fn the_live_groups_of_each_topic_come_from_the_model() {
        let mut metadata = Metadata::default();
        let stream = Ident::Id(0);
        let topic = Ident::Id(0);
        metadata.create_stream("s", 1).unwrap();
        let settings = iggy_metadata::TopicSettings::default();
        metadata
            .create_topic(&stream, "t", 1, settings, 2, 1)
            .unwrap();
        let kept = metadata.create_group(&stream, &topic, "kept", 3).unwrap();
        let gone = metadata.create_group(&stream, &topic, "gone", 4).unwrap();
        metadata
            .delete_group(&stream, &topic, &Ident::Id(gone), 5)
            .unwrap();
        let groups = live_groups(&metadata);
        assert_eq!(groups.len(), 1);
        let topic_groups = &groups[&(0, 0)];
        assert_eq!(topic_groups.live, BTreeMap::from([(kept, 3)]));
        assert_eq!(topic_groups.changed_at_op, 5);
    }

    #[test]
    fn a_copy_judges_retirement_only_in_touch_and_applied_past_the_previous_commit() {
        let serving = role(Status::Normal, true);
        assert!(
            current(serving, 5, None),
            "first pass: nothing to compare with"
        );
        assert!(
            current(serving, 12, Some(12)),
            "applied all it knew committed"
        );
        assert!(current(serving, 14, Some(12)), "and more since");
        assert!(
            !current(serving, 11, Some(12)),
            "a copy still applying what it knew committed a pass ago lags"
        );
        assert!(
            !current(role(Status::Normal, false), 12, Some(12)),
            "a backup that stopped hearing from its primary"
        );
        for status in [Status::ViewChange, Status::Recovering] {
            assert!(!current(role(status, true), 12, Some(12)), "{status:?}");
        }
    }

    #[test]
    fn a_node_without_a_lease_past_its_patience_declines_to_lead_until_the_lease_is_back() {
        let origin = Instant::now();
        let patience = Duration::from_secs(10);
        let at = |secs: u64| origin + Duration::from_secs(secs);
        let mut watch = LeaseWatch::default();
        assert_eq!(watch.judge(false, at(0), patience), None);
        assert_eq!(watch.judge(true, at(1), patience), None);
        assert_eq!(watch.judge(true, at(10), patience), None);
        assert_eq!(watch.judge(true, at(11), patience), Some(true));
        assert_eq!(
            watch.judge(true, at(12), patience),
            Some(true),
            "every pass while it lasts"
        );
        assert_eq!(watch.judge(false, at(13), patience), Some(false));
        assert_eq!(watch.judge(false, at(14), patience), None, "told once");
        // A lapse that ends within the patience declines nothing.
        assert_eq!(watch.judge(true, at(20), patience), None);
        assert_eq!(watch.judge(false, at(25), patience), None);
        assert_eq!(
            watch.judge(true, at(26), patience),
            None,
            "the patience starts again"
        );
        assert_eq!(watch.judge(true, at(35), patience), None);
    }

    /// A process stopped (SIGSTOP) for longer than the patience judges its quorum from when it
    /// runs again: it said "no quorum for 90s … hears 2 of its 2 peers" on SIGCONT.
    /// The metadata group's role on a backup of primary 1, `status` and `in_touch` as given.
    fn backup_role(
        status: iggy_vsr::Status,
        in_touch: bool,
    ) -> crate::consensus::figures::GroupRole {
        crate::consensus::figures::GroupRole {
            status,
            primary: 1,
            in_touch,
            muted: false,
            applied_view_log: true,
        }
    }

    #[test]
    fn a_process_that_did_not_run_judges_its_quorum_from_when_it_runs_again() {
        let out_of_touch = backup_role(iggy_vsr::Status::Normal, false);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let patience = Duration::from_secs(10);
        let mut watch = QuorumWatch::new(start);
        watch.resumed(at(1), patience);
        // Stopped from 1 s to 91 s: its first pass after does not count the stop.
        watch.resumed(at(91), patience);
        assert_eq!(
            watch.judge(at(91), out_of_touch, (&[0, 2], &[]), 3, patience),
            None
        );
        watch.resumed(at(92), patience);
        assert_eq!(
            watch.judge(at(92), out_of_touch, (&[0, 2], &[]), 3, patience),
            None
        );
        // Passes that keep running count as before.
        for second in 93..=101 {
            watch.resumed(at(second), patience);
        }
        assert!(
            watch
                .judge(at(101), out_of_touch, (&[0, 2], &[]), 3, patience)
                .is_some()
        );
    }

    #[test]
    fn a_node_without_a_quorum_warns_after_two_heartbeat_timeouts_then_every_30_s() {
        use iggy_vsr::Status::{Normal, Recovering};
        let role = backup_role;
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let patience = Duration::from_secs(10);
        let mut watch = QuorumWatch::new(start);
        assert_eq!(
            watch.judge(at(9), role(Recovering, false), (&[], &[]), 3, patience),
            None
        );
        let warning = watch
            .judge(at(10), role(Recovering, false), (&[], &[0, 2]), 3, patience)
            .expect("due");
        for said in [
            "no quorum for 10s",
            "Recovering",
            "hears 0 of its 2 peers (not [0, 2])",
            "2 of the 3",
        ] {
            assert!(warning.contains(said), "{said:?} in {warning}");
        }
        assert_eq!(
            watch.judge(at(39), role(Recovering, false), (&[2], &[]), 3, patience),
            None
        );
        let warning = watch
            .judge(at(40), role(Recovering, false), (&[2], &[]), 3, patience)
            .expect("due");
        assert!(
            warning.contains("hears 1 of its 2 peers, but its frames from them are too late"),
            "a quorum of links up: {warning}"
        );
        // A backup that no longer hears its primary has no quorum either; once in touch again
        // the clock starts over.
        assert_eq!(
            watch.judge(at(41), role(Normal, true), (&[0, 2], &[]), 3, patience),
            None
        );
        assert_eq!(
            watch.judge(at(50), role(Normal, false), (&[2], &[]), 3, patience),
            None
        );
        assert!(
            watch
                .judge(at(51), role(Normal, false), (&[2], &[]), 3, patience)
                .is_some()
        );
    }
}
