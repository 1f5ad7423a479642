//! What a consensus group publishes for the node's metrics: its replica's view and commit, and
//! how long its checkpoints take. A group's task writes them with relaxed atomic stores (it
//! may run on any shard); `/metrics` reads them on shard 0 when it renders. Each figure is
//! exact on its own; two figures may be read from neighbouring moments.

use super::replica_clock::{Lapse, epoch};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which kind of group a figure belongs to (a label of the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Metadata,
    Partition,
}

impl GroupKind {
    pub const ALL: [GroupKind; 2] = [GroupKind::Metadata, GroupKind::Partition];

    pub fn label(self) -> &'static str {
        match self {
            GroupKind::Metadata => "metadata",
            GroupKind::Partition => "partition",
        }
    }
}

/// A group's replica state as its task last published it.
#[derive(Debug, Default)]
pub struct GroupFigures {
    view: AtomicU64,
    commit: AtomicU64,
    applied: AtomicU64,
    /// The status (low byte: 0 normal, 1 view change, 2 recovering) and the primary of `view`
    /// (second byte), muted (bit 17), applied its view's log (bit 18) and when it stops being
    /// in touch (bits 20..64, [`in_touch_bits`]), packed so a reader never sees one without
    /// the others.
    role: AtomicU64,
    /// The client table's capacity: the one the group committed with its first op, the
    /// configured one until then.
    clients_max: AtomicU64,
}

/// Where the in-touch lapse sits in the role word: whole milliseconds since the process's
/// epoch, rounded down (never later than the replica's), 0 when not in touch, all ones when
/// it never lapses.
const IN_TOUCH_SHIFT: u32 = 20;
const IN_TOUCH_NEVER: u64 = u64::MAX >> IN_TOUCH_SHIFT;

fn in_touch_bits(lapse: Lapse) -> u64 {
    match lapse {
        Lapse::Lapsed => 0,
        Lapse::Never => IN_TOUCH_NEVER,
        Lapse::At(at) => {
            let millis = at.saturating_duration_since(epoch()).as_millis();
            u64::try_from(millis).map_or(IN_TOUCH_NEVER - 1, |ms| ms.min(IN_TOUCH_NEVER - 1))
        }
    }
}

/// Whether a lapse packed by [`in_touch_bits`] is still ahead at `now()`.
fn in_touch_at(bits: u64, now: impl FnOnce() -> Instant) -> bool {
    match bits {
        0 => false,
        IN_TOUCH_NEVER => true,
        millis => now().saturating_duration_since(epoch()) < Duration::from_millis(millis),
    }
}

/// Where a group's replica stands, as the routing of client requests needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRole {
    pub status: iggy_vsr::Status,
    /// The primary of the replica's current view (the one it serves, or moves to).
    pub primary: u8,
    /// The replica knows that primary alive (`iggy_vsr::Replica::in_touch`): a primary cut
    /// off from its quorum, or a backup that stopped hearing from it, is not. Judged by the
    /// clock when the role is read: a replica whose process stood still past its evidence
    /// (stopped, a stalled runtime) is out of touch before its group runs again.
    pub in_touch: bool,
    /// Opened restored, the replica still waits for a whole view's log before it votes in a
    /// view change (`iggy_vsr::Config::restored`).
    pub muted: bool,
    /// The replica applied the log its view started with (`iggy_vsr::Replica::applied_view_log`):
    /// before, its state may be older than what clients were answered.
    pub applied_view_log: bool,
}

impl GroupRole {
    /// Whether this replica, `me`, serves as the primary of its view right now.
    pub fn is_primary(&self, me: u8) -> bool {
        self.status == iggy_vsr::Status::Normal && self.primary == me
    }

    /// Whether a replica in this role that applied through `applied` stands at `wanted`: it
    /// serves in touch with its primary (or leads a quorum), since one recovering, changing
    /// views or cut off may miss commits it does not know of, applied the log its view started
    /// with (ops answered before the view began), and applied at least `wanted`.
    pub fn reached(&self, applied: u64, wanted: u64) -> bool {
        self.status == iggy_vsr::Status::Normal
            && self.in_touch
            && self.applied_view_log
            && applied >= wanted
    }
}

impl GroupFigures {
    /// Publishes `replica`'s state; `in_touch` is when its `in_touch` lapses in real time
    /// (`ReplicaClock::lapse`).
    pub(crate) fn publish(&self, replica: &iggy_vsr::Replica, in_touch: Lapse) {
        use iggy_vsr::Status;
        let status = match replica.status() {
            Status::Normal => 0,
            Status::ViewChange => 1,
            Status::Recovering => 2,
        };
        let primary = u64::from(replica.primary_of(replica.view()));
        self.view
            .store(u64::from(replica.view()), Ordering::Relaxed);
        self.commit.store(replica.commit_max(), Ordering::Relaxed);
        self.applied.store(replica.commit_min(), Ordering::Relaxed);
        let clients_max = replica.clients().clients_max() as u64;
        self.clients_max.store(clients_max, Ordering::Relaxed);
        let in_touch = match replica.in_touch() {
            true => in_touch_bits(in_touch) << IN_TOUCH_SHIFT,
            false => 0,
        };
        let muted = u64::from(replica.is_muted()) << 17;
        let applied_view_log = u64::from(replica.applied_view_log()) << 18;
        self.role.store(
            status | primary << 8 | in_touch | muted | applied_view_log,
            Ordering::Relaxed,
        );
    }

    /// The replica's status and its view's primary, in touch as of now.
    pub fn role(&self) -> GroupRole {
        self.role_at(Instant::now)
    }

    /// The role with its in-touch judged at `now()` (the clock is read only for a lapse that
    /// is neither past nor never).
    fn role_at(&self, now: impl FnOnce() -> Instant) -> GroupRole {
        use iggy_vsr::Status;
        let role = self.role.load(Ordering::Relaxed);
        GroupRole {
            status: match role & 0xff {
                0 => Status::Normal,
                1 => Status::ViewChange,
                _ => Status::Recovering,
            },
            primary: (role >> 8) as u8,
            in_touch: in_touch_at(role >> IN_TOUCH_SHIFT, now),
            muted: role >> 17 & 1 == 1,
            applied_view_log: role >> 18 & 1 == 1,
        }
    }

    pub fn view(&self) -> u64 {
        self.view.load(Ordering::Relaxed)
    }

    /// The highest op the replica knows committed (its VSR commit number).
    pub fn commit(&self) -> u64 {
        self.commit.load(Ordering::Relaxed)
    }

    /// The highest op the replica applied to its state machine (at most [`Self::commit`]).
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// The client table's capacity (0 before the group first published).
    pub fn clients_max(&self) -> usize {
        self.clients_max.load(Ordering::Relaxed) as usize
    }
}

/// Upper bounds (seconds) of the checkpoint duration buckets: from a small partition's state
/// written to the page cache to a large model behind fsynced segments.
pub const CHECKPOINT_BOUNDS: [f64; 10] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// A histogram many threads add to without a lock.
pub struct AtomicHistogram {
    /// Per bound, the observations at most it and above the bound before (not cumulative).
    buckets: [AtomicU64; CHECKPOINT_BOUNDS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A histogram's counts read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HistogramCounts {
    pub buckets: [u64; CHECKPOINT_BOUNDS.len()],
    pub count: u64,
    pub sum_seconds: f64,
}

impl AtomicHistogram {
    const fn new() -> Self {
        AtomicHistogram {
            buckets: [const { AtomicU64::new(0) }; CHECKPOINT_BOUNDS.len()],
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(bucket) = CHECKPOINT_BOUNDS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> HistogramCounts {
        HistogramCounts {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// Checkpoint durations of every group since the process started, by [`GroupKind`]: a
/// checkpoint is rare and the groups of a kind are many, so one histogram per kind.
static CHECKPOINTS: [AtomicHistogram; GroupKind::ALL.len()] =
    [AtomicHistogram::new(), AtomicHistogram::new()];

/// A group of `kind` took a checkpoint in `elapsed` (state made durable, slot written).
pub fn checkpoint_taken(kind: GroupKind, elapsed: Duration) {
    CHECKPOINTS[kind as usize].observe(elapsed);
}

pub fn checkpoint_durations(kind: GroupKind) -> HistogramCounts {
    CHECKPOINTS[kind as usize].counts()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_role_names_the_status_and_the_primary_of_the_view() {
        let figures = GroupFigures::default();
        // A backup (replica 2) of a group of three in view 4: replica 1 leads.
        let replica = iggy_vsr::Replica::open(
            iggy_vsr::Config::new(3, 2),
            Vec::new(),
            iggy_vsr::ViewState {
                view: 4,
                log_view: 4,
            },
        );
        figures.publish(&replica, Lapse::Never);
        let role = figures.role();
        assert_eq!(figures.view(), 4);
        assert_eq!(role.primary, 1);
        // A restarted replica rejoins as a backup: not serving, whoever its view names.
        assert_eq!(role.status, iggy_vsr::Status::Recovering);
        assert!(!role.is_primary(1) && !role.is_primary(2));
        assert!(!role.in_touch, "a rejoining replica knows no live primary");
        let normal = GroupRole {
            status: iggy_vsr::Status::Normal,
            primary: 1,
            in_touch: true,
            muted: false,
            applied_view_log: true,
        };
        assert!(normal.is_primary(1) && !normal.is_primary(2));
    }

    /// A role is in touch until the lapse it was published with, judged when the role is
    /// read: a reader after the lapse sees it out of touch though the group published nothing
    /// since (its process stood still).
    #[test]
    fn a_published_role_is_in_touch_until_its_lapse_when_read() {
        let figures = GroupFigures::default();
        // A backup (replica 2) of view 1, led by replica 1.
        let mut replica = iggy_vsr::Replica::format_in_view(iggy_vsr::Config::new(3, 2), 1);
        replica.on_tick(1);
        assert!(
            replica.in_touch(),
            "a backup formatted in its view follows its primary"
        );
        let now = Instant::now();
        let lapse = now + Duration::from_secs(5);
        figures.publish(&replica, Lapse::At(lapse));
        assert!(figures.role_at(|| now).in_touch);
        assert!(
            figures
                .role_at(|| lapse - Duration::from_millis(2))
                .in_touch
        );
        assert!(!figures.role_at(|| lapse).in_touch);
        assert!(!figures.role_at(|| lapse + Duration::from_secs(60)).in_touch);
        assert!(figures.role_at(|| now).is_primary(1));

        figures.publish(&replica, Lapse::Lapsed);
        assert!(!figures.role_at(|| now).in_touch);
        figures.publish(&replica, Lapse::Never);
        assert!(
            figures
                .role_at(|| now + Duration::from_secs(86_400 * 365))
                .in_touch
        );
        // The replica's own word comes first: out of touch, whatever the lapse says.
        replica.on_tick(1_000);
        assert!(!replica.in_touch());
        figures.publish(&replica, Lapse::Never);
        assert!(!figures.role_at(|| now).in_touch);
    }

    #[test]
    fn a_histogram_buckets_each_observation_once() {
        let histogram = AtomicHistogram::new();
        histogram.observe(Duration::from_micros(500));
        histogram.observe(Duration::from_millis(30));
        histogram.observe(Duration::from_secs(60));
        let counts = histogram.counts();
        assert_eq!(counts.count, 3);
        assert_eq!(counts.buckets[0], 1);
        assert_eq!(counts.buckets[5], 1, "0.03 s falls under 0.05");
        assert_eq!(
            counts.buckets.iter().sum::<u64>(),
            2,
            "60 s is only in +Inf"
        );
        assert!((counts.sum_seconds - 60.0305).abs() < 1e-9);
    }
}
