//! Grant leases: when a node that does not lead the metadata group may judge a client's
//! grants by its own copy of the metadata, and when a change that takes grants away may be
//! answered. Without them a node behind its metadata primary (cut off from it, stopped for a
//! while, or just a commit broadcast late) kept accepting the sends of a user whose grant was
//! revoked, after the revocation was answered.
//!
//! - A node judges by its copy while it leads the metadata group (in touch with a quorum, its
//!   view's log applied), or while it holds a lease: its metadata primary answers each of its
//!   Pings with a grant naming the primary's commit, and the lease runs `duration` from when
//!   this node sent that Ping, by its own clock (a Pong held up on the way grants less, never
//!   more), for as long as its copy applied the grant's commit. Without one it answers 58 (the
//!   client retries), never a refusal it cannot vouch for.
//! - Every Ping reports the metadata op its sender applied. A change that takes grants away is
//!   answered once every other node reported it applied, or once no grant made before it can
//!   still run: the primary knows the grants it made (and, for the grants of a primary before
//!   it, waits a lease from when it began leading); a node that relayed the change knows none,
//!   and waits a lease from when it learned the change committed.
//! - A node long without a lease would refuse every write to the partitions it leads: after two
//!   heartbeat timeouts they decline to lead and hand themselves over (`runtime/maintenance.rs`
//!   `LeaseWatch`).
//!
//! What it assumes: a deposed primary stops granting once it no longer hears a quorum, which
//! happens before a new view can commit anything (as a primary's own reads assume), and clocks
//! that run at nearly the same rate (`expiry` adds an eighth). A metadata primary of a build
//! before leases grants none; its backups then judge by their copies as that build did.
//!
//! Sans-IO: the shell reports each Ping sent and heard, each Pong heard, the grants it makes,
//! and asks with `Instant`s it reads.

use super::figures::GroupFigures;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pings remembered per peer, to find the one a Pong echoes (one per keepalive is sent: a
/// Pong older than these grants nothing worth having).
const PINGS_KEPT: usize = 8;

/// Where this node's metadata replica stands, as judging and granting need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataStand {
    /// It leads its view in touch with a quorum and applied its view's log.
    pub leads: bool,
    pub view: u64,
    /// The primary of its view (itself when it leads).
    pub primary: u8,
    /// Its commit number.
    pub commit: u64,
    /// The highest op it applied to the node's metadata copy.
    pub applied: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    until: Instant,
    commit: u64,
}

/// One node's leases: the one it holds, the grants it made, and its peers' reports.
#[derive(Debug)]
pub struct LeaseBook {
    me: u8,
    /// A node of a roster of one judges by its copy, which is the only one.
    standalone: bool,
    duration: Duration,
    /// Per peer: the Pings sent to it, as (wall clock stamped, when), the latest last.
    pings: Vec<VecDeque<(u64, Instant)>>,
    /// The grants held, each valid on its own terms: a later one asks a later commit applied,
    /// so the earlier ones keep this node judging while it applies it.
    held: VecDeque<Held>,
    /// When the latest grant this node was given runs out (`None`: never given one).
    held_until: Option<Instant>,
    /// Per peer: whether its latest Pong said it grants leases (`None`: no Pong yet).
    grants_leases: Vec<Option<bool>>,
    /// Per peer: the highest metadata op it reported applied.
    reported: Vec<u64>,
    /// Per peer, as the metadata primary: the grants sent it, by commit, with when the latest
    /// of each went (those older than `expiry` are dropped).
    granted: Vec<BTreeMap<u64, Instant>>,
    /// The view this node leads and since when it saw itself lead it.
    leading: Option<(u64, Instant)>,
    /// This node stops gracefully: it gave up its leases and takes no new one.
    stopping: bool,
    /// Per peer: it said it stops, having given up every lease (from any primary), and was not
    /// heard since: it judges nothing until its next process is granted anew.
    stopped: Vec<bool>,
}

impl LeaseBook {
    pub fn new(me: u8, replicas: u8, duration: Duration) -> Self {
        let n = usize::from(replicas);
        LeaseBook {
            me,
            standalone: replicas <= 1,
            duration,
            pings: vec![VecDeque::new(); n],
            held: VecDeque::new(),
            held_until: None,
            grants_leases: vec![None; n],
            reported: vec![0; n],
            granted: vec![BTreeMap::new(); n],
            leading: None,
            stopping: false,
            stopped: vec![false; n],
        }
    }

    /// How long after a grant went out it surely ran out on its holder: the lease, an eighth
    /// for clocks that run at different rates, and a tenth of a second for a grant built from
    /// a commit the primary had not yet published.
    pub fn expiry(&self) -> Duration {
        self.duration + self.duration / 8 + Duration::from_millis(100)
    }

    /// This node sent `peer` a Ping stamped `wall_clock`.
    pub fn ping_sent(&mut self, peer: u8, wall_clock: u64, now: Instant) {
        let Some(pings) = self.pings.get_mut(usize::from(peer)) else {
            return;
        };
        if pings.len() == PINGS_KEPT {
            pings.pop_front();
        }
        pings.push_back((wall_clock, now));
    }

    /// `peer`'s Ping reported it applied metadata op `applied` (0: a build before the field).
    /// A peer heard runs (its next process, once it stopped), until its Ping says it stops.
    pub fn ping_heard(&mut self, peer: u8, applied: u64) {
        if let Some(reported) = self.reported.get_mut(usize::from(peer)) {
            *reported = (*reported).max(applied);
        }
        if let Some(stopped) = self.stopped.get_mut(usize::from(peer)) {
            *stopped = false;
        }
    }

    /// `peer`'s Pong to the Ping stamped `echo`: whether its build grants leases, and the
    /// commit it granted a lease at, if it did.
    pub fn pong_heard(&mut self, peer: u8, echo: u64, grants_leases: bool, grant: Option<u64>) {
        let index = usize::from(peer);
        let Some(flag) = self.grants_leases.get_mut(index) else {
            return;
        };
        *flag = Some(grants_leases);
        let (Some(commit), true, false) = (grant, grants_leases, self.stopping) else {
            return;
        };
        let Some(&(_, sent)) = self.pings[index].iter().find(|(wall, _)| *wall == echo) else {
            return;
        };
        let until = sent + self.duration;
        self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
        if self.held.len() == PINGS_KEPT {
            self.held.pop_front();
        }
        self.held.push_back(Held { until, commit });
    }

    /// The grant this node puts in its Pong to `peer`, as `stand` says: its commit when it
    /// leads, recorded as sent now.
    pub fn grant_for(&mut self, peer: u8, stand: MetadataStand, now: Instant) -> Option<u64> {
        self.note_stand(stand, now);
        if !stand.leads {
            return None;
        }
        let expiry = self.expiry();
        // A peer granted a lease runs (its next process, once it stopped).
        if let Some(stopped) = self.stopped.get_mut(usize::from(peer)) {
            *stopped = false;
        }
        let granted = self.granted.get_mut(usize::from(peer))?;
        granted.retain(|_, at| *at + expiry > now);
        granted.insert(stand.commit, now);
        Some(stand.commit)
    }

    /// This node stops gracefully: it judges no client's grants from now on (a request still
    /// arriving is answered 58, and its client goes to another node) and drops the leases it
    /// holds, so it may say it stops (`peer_stops` on the others).
    pub fn relinquish(&mut self) {
        self.stopping = true;
        self.held.clear();
    }

    /// `peer` said it stops gracefully, having given up its leases first (`relinquish`): the
    /// grants this node made it hold nothing any more, nor do those of any primary before, so
    /// a fence need not wait for it (a primary that just took over the metadata group waited
    /// a lease for it: every logout through it right after a graceful stop of the one before).
    /// Grants made to its next process are recorded as any.
    pub fn peer_stops(&mut self, peer: u8) {
        if let Some(granted) = self.granted.get_mut(usize::from(peer)) {
            granted.clear();
        }
        if let Some(stopped) = self.stopped.get_mut(usize::from(peer)) {
            *stopped = true;
        }
    }

    fn note_stand(&mut self, stand: MetadataStand, now: Instant) {
        self.leading = match self.leading {
            _ if !stand.leads => None,
            Some((view, since)) if view == stand.view => Some((view, since)),
            _ => Some((stand.view, now)),
        };
    }

    /// Whether this node may judge a client's grants by its metadata copy now (`replicas` 1:
    /// a standalone node always may).
    pub fn may_judge(&mut self, stand: MetadataStand, now: Instant) -> bool {
        self.note_stand(stand, now);
        if self.stopping {
            return false;
        }
        if self.standalone || stand.leads {
            return true;
        }
        if self.grants_leases.get(usize::from(stand.primary)) == Some(&Some(false)) {
            return true;
        }
        self.held.retain(|held| now < held.until);
        self.held.iter().any(|held| stand.applied >= held.commit)
    }

    /// Until when a request this node may not judge now waits for a lease before it is
    /// answered 58: a lease that ran out less than a lease ago most likely came from a
    /// metadata primary that went silent, whose successor the live nodes elect about when it
    /// runs out and which grants at the next Ping; waited for until a lease after it ran out.
    /// `None` (answer at once): never granted one, long without one (cut off from the
    /// primary), or stopping.
    pub fn regained_by(&self, now: Instant) -> Option<Instant> {
        let by = self.held_until? + self.duration;
        (now < by && !self.stopping).then_some(by)
    }

    /// Whether a change that took grants away, committed at `op`, may be answered: every
    /// other node reported applying it, said it stops, or can no longer hold a grant made
    /// before it.
    /// `learned_at`: when this node learned it committed.
    pub fn fence_clear(
        &mut self,
        op: u64,
        stand: MetadataStand,
        learned_at: Instant,
        now: Instant,
    ) -> bool {
        self.note_stand(stand, now);
        let expiry = self.expiry();
        let me = usize::from(self.me);
        (0..self.reported.len())
            .filter(|&peer| peer != me && self.reported[peer] < op && !self.stopped[peer])
            .all(|peer| match self.leading {
                Some((_, since)) => {
                    since + expiry <= now
                        && self.granted[peer]
                            .range(..op)
                            .all(|(_, &at)| at + expiry <= now)
                }
                None => learned_at + expiry <= now,
            })
    }
}

/// The node's [`LeaseBook`], shared by the replica bus (which sends and answers the Pings) and
/// the connections (which judge grants and answer revocations), all on shard 0; it reads the
/// metadata group's published figures once that group runs.
#[derive(Debug)]
pub struct NodeLeases {
    me: u8,
    book: RefCell<LeaseBook>,
    metadata: RefCell<Option<Arc<GroupFigures>>>,
    /// Each running link's Pinger, told of a metadata op applied here that a fence waits on
    /// (`Self::report_applied`).
    reporters: RefCell<Vec<futures_channel::mpsc::UnboundedSender<u64>>>,
}

impl NodeLeases {
    pub fn new(me: u8, replicas: u8, duration: Duration) -> Self {
        NodeLeases {
            me,
            book: RefCell::new(LeaseBook::new(me, replicas, duration)),
            metadata: RefCell::new(None),
            reporters: RefCell::new(Vec::new()),
        }
    }

    /// A link's Pinger hears here of each op [`Self::report_applied`] names, for as long as
    /// it keeps the receiver.
    pub fn reports(&self) -> futures_channel::mpsc::UnboundedReceiver<u64> {
        let (sender, receiver) = futures_channel::mpsc::unbounded();
        self.reporters.borrow_mut().push(sender);
        receiver
    }

    /// This node applied metadata op `op`, which took grants or a session away: every link
    /// pings its peer now instead of at its next keepalive, reporting it, so whichever node
    /// waits to answer it (`fence_clear`) hears within a round trip.
    pub fn report_applied(&self, op: u64) {
        self.reporters
            .borrow_mut()
            .retain(|reporter| reporter.unbounded_send(op).is_ok());
    }

    /// From now on, stands where the metadata group's replica `figures` says.
    pub fn follow_metadata(&self, figures: Arc<GroupFigures>) {
        *self.metadata.borrow_mut() = Some(figures);
    }

    fn stand(&self) -> Option<MetadataStand> {
        let metadata = self.metadata.borrow();
        let figures = metadata.as_ref()?;
        let role = figures.role();
        Some(MetadataStand {
            leads: role.is_primary(self.me) && role.in_touch && role.applied_view_log,
            view: figures.view(),
            primary: role.primary,
            commit: figures.commit(),
            applied: figures.applied(),
        })
    }

    /// The metadata op this node applied, for its Pings (0 before the group runs).
    pub fn applied(&self) -> u64 {
        self.stand().map_or(0, |stand| stand.applied)
    }

    pub fn ping_sent(&self, peer: u8, wall_clock: u64, now: Instant) {
        self.book.borrow_mut().ping_sent(peer, wall_clock, now);
    }

    pub fn ping_heard(&self, peer: u8, applied: u64) {
        self.book.borrow_mut().ping_heard(peer, applied);
    }

    pub fn pong_heard(&self, peer: u8, echo: u64, grants_leases: bool, grant: Option<u64>) {
        self.book
            .borrow_mut()
            .pong_heard(peer, echo, grants_leases, grant);
    }

    /// This node stops gracefully ([`LeaseBook::relinquish`]); before it says so.
    pub fn relinquish(&self) {
        self.book.borrow_mut().relinquish();
    }

    /// `peer` said it stops gracefully ([`LeaseBook::peer_stops`]).
    pub fn peer_stops(&self, peer: u8) {
        self.book.borrow_mut().peer_stops(peer);
    }

    /// The lease this node's Pong to `peer` grants, if its metadata replica leads.
    pub fn grant_for(&self, peer: u8, now: Instant) -> Option<u64> {
        let stand = self.stand()?;
        self.book.borrow_mut().grant_for(peer, stand, now)
    }

    /// Whether this node may judge a client's grants by its metadata copy now.
    pub fn may_judge(&self, now: Instant) -> bool {
        self.stand()
            .is_some_and(|stand| self.book.borrow_mut().may_judge(stand, now))
    }

    /// Until when a request waits for a lease this node lost moments ago
    /// ([`LeaseBook::regained_by`]).
    pub fn regained_by(&self, now: Instant) -> Option<Instant> {
        self.book.borrow().regained_by(now)
    }

    /// Whether a change taking grants away, committed at `op` (learned at `learned_at`), may
    /// be answered now ([`LeaseBook::fence_clear`]).
    pub fn fence_clear(&self, op: u64, learned_at: Instant, now: Instant) -> bool {
        self.stand().is_none_or(|stand| {
            self.book
                .borrow_mut()
                .fence_clear(op, stand, learned_at, now)
        })
    }

    /// The longest [`Self::fence_clear`] can stay false once the change committed.
    pub fn fence_longest(&self) -> Duration {
        let expiry = self.book.borrow().expiry();
        expiry * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(10);

    fn at(origin: Instant, millis: u64) -> Instant {
        origin + Duration::from_millis(millis)
    }

    fn backup(applied: u64) -> MetadataStand {
        MetadataStand {
            leads: false,
            view: 1,
            primary: 1,
            commit: applied,
            applied,
        }
    }

    fn primary(commit: u64) -> MetadataStand {
        MetadataStand {
            leads: true,
            view: 1,
            primary: 1,
            commit,
            applied: commit,
        }
    }

    #[test]
    fn a_standalone_node_and_a_leading_primary_judge_without_a_lease() {
        let origin = Instant::now();
        let mut solo = LeaseBook::new(0, 1, LEASE);
        assert!(solo.may_judge(backup(0), origin));
        let mut leader = LeaseBook::new(1, 3, LEASE);
        assert!(leader.may_judge(primary(5), origin));
        assert!(
            !leader.may_judge(backup(5), origin),
            "a backup without a lease"
        );
    }

    #[test]
    fn a_lease_runs_from_the_ping_not_from_the_pong_and_needs_its_commit_applied() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(0, 3, LEASE);
        book.ping_sent(1, 111, at(origin, 0));
        // The Pong arrives 4 s late: the lease still ends 10 s after the Ping went.
        book.pong_heard(1, 111, true, Some(7));
        assert!(
            !book.may_judge(backup(6), at(origin, 4_000)),
            "commit 7 not applied"
        );
        assert!(book.may_judge(backup(7), at(origin, 4_000)));
        assert!(book.may_judge(backup(7), at(origin, 9_999)));
        assert!(!book.may_judge(backup(7), at(origin, 10_000)), "ran out");
        // A Pong echoing a Ping never sent grants nothing.
        book.pong_heard(1, 999, true, Some(7));
        assert!(!book.may_judge(backup(7), at(origin, 10_000)));
    }

    #[test]
    fn a_lease_lost_moments_ago_is_waited_for_and_one_long_gone_or_never_had_is_not() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(0, 3, LEASE);
        assert_eq!(book.regained_by(origin), None, "never granted one");
        book.ping_sent(1, 1, at(origin, 0));
        book.pong_heard(1, 1, true, Some(4));
        book.ping_sent(1, 2, at(origin, 2_000));
        book.pong_heard(1, 2, true, Some(5));
        // The latest grant runs out at 12 s: a successor's is waited for until 22 s.
        assert!(!book.may_judge(backup(5), at(origin, 12_000)));
        assert_eq!(
            book.regained_by(at(origin, 12_000)),
            Some(at(origin, 22_000))
        );
        assert_eq!(
            book.regained_by(at(origin, 21_999)),
            Some(at(origin, 22_000))
        );
        assert_eq!(
            book.regained_by(at(origin, 22_000)),
            None,
            "cut off: at once"
        );
        book.relinquish();
        assert_eq!(book.regained_by(at(origin, 12_000)), None, "stopping");
    }

    #[test]
    fn each_grant_holds_on_its_own_terms_while_a_later_ones_commit_is_applied() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(0, 3, LEASE);
        book.ping_sent(1, 1, at(origin, 0));
        book.ping_sent(1, 2, at(origin, 1_000));
        book.pong_heard(1, 1, true, Some(4));
        book.pong_heard(1, 2, true, Some(9));
        // Commit 9 not applied yet: the grant at 4 still holds, until its own end.
        assert!(book.may_judge(backup(8), at(origin, 5_000)));
        assert!(book.may_judge(backup(8), at(origin, 9_999)));
        assert!(!book.may_judge(backup(8), at(origin, 10_000)));
        assert!(book.may_judge(backup(9), at(origin, 10_999)));
        assert!(!book.may_judge(backup(9), at(origin, 11_000)));
    }

    #[test]
    fn backups_of_a_primary_of_a_build_before_leases_judge_by_their_copies() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(0, 3, LEASE);
        assert!(!book.may_judge(backup(3), origin), "no Pong yet");
        book.ping_sent(1, 5, origin);
        book.pong_heard(1, 5, false, None);
        assert!(book.may_judge(backup(3), origin));
        // A Pong of another peer of the older build says nothing of the primary's.
        let mut book = LeaseBook::new(0, 3, LEASE);
        book.pong_heard(2, 5, false, None);
        assert!(!book.may_judge(backup(3), origin));
    }

    #[test]
    fn a_primary_answers_a_revocation_once_every_peer_applied_it() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(1, 3, LEASE);
        assert_eq!(book.grant_for(0, primary(4), origin), Some(4));
        assert_eq!(book.grant_for(2, primary(4), origin), Some(4));
        let later = at(origin, LEASE.as_millis() as u64 * 2);
        assert_eq!(book.grant_for(0, primary(9), later), Some(9));
        assert_eq!(book.grant_for(2, primary(9), later), Some(9));
        // Revocation at op 10: both peers hold grants at 9.
        assert!(!book.fence_clear(10, primary(10), later, later));
        book.ping_heard(0, 10);
        assert!(
            !book.fence_clear(10, primary(10), later, later),
            "peer 2 not yet"
        );
        book.ping_heard(2, 11);
        assert!(book.fence_clear(10, primary(10), later, later));
    }

    #[test]
    fn a_primary_answers_a_revocation_once_the_grants_before_it_ran_out() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(1, 3, LEASE);
        let expiry = book.expiry();
        book.grant_for(0, primary(1), origin);
        let led = origin + expiry;
        // Peer 2 is down: never granted, never reports. Peer 0 was granted at commit 9.
        book.grant_for(0, primary(9), led);
        assert!(!book.fence_clear(10, primary(10), led, led));
        assert!(!book.fence_clear(
            10,
            primary(10),
            led,
            led + expiry - Duration::from_millis(1)
        ));
        assert!(book.fence_clear(10, primary(10), led, led + expiry));
        // A grant made after the commit, at the commit, holds nothing up.
        book.grant_for(0, primary(10), led + expiry);
        assert!(book.fence_clear(10, primary(10), led, led + expiry));
    }

    /// A node stopping gracefully gives up its leases before it says so; its peers' primary
    /// then need not wait out what it granted it, and grants its next process as any.
    #[test]
    fn a_primary_need_not_wait_out_the_grants_of_a_peer_that_said_it_stops() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(1, 3, LEASE);
        book.grant_for(0, primary(1), origin);
        let led = origin + book.expiry();
        book.grant_for(0, primary(9), led);
        book.grant_for(2, primary(9), led);
        book.ping_heard(0, 10);
        assert!(
            !book.fence_clear(10, primary(10), led, led),
            "peer 2 holds a grant at 9"
        );
        book.peer_stops(2);
        assert!(book.fence_clear(10, primary(10), led, led));
        // Its next process is granted at commit 10 and holds up the fence at 11 until it
        // reports applying it.
        book.grant_for(2, primary(10), led);
        book.ping_heard(0, 11);
        assert!(!book.fence_clear(11, primary(11), led, led));
        book.ping_heard(2, 11);
        assert!(book.fence_clear(11, primary(11), led, led));

        // A primary that just took over waits a lease for what its predecessor granted, except
        // for a peer that said it stops (here the predecessor itself); and a node that relays
        // a change likewise.
        let mut new = LeaseBook::new(1, 3, LEASE);
        let took_over = origin + Duration::from_secs(60);
        new.ping_heard(2, 10);
        assert!(!new.fence_clear(10, primary(10), took_over, took_over));
        new.peer_stops(0);
        assert!(new.fence_clear(10, primary(10), took_over, took_over));
        let mut relaying = LeaseBook::new(2, 3, LEASE);
        relaying.ping_heard(1, 10);
        relaying.peer_stops(0);
        assert!(relaying.fence_clear(10, backup(10), took_over, took_over));
        // Its next process, once heard, is waited for as any peer.
        new.ping_heard(0, 3);
        assert!(!new.fence_clear(10, primary(10), took_over, took_over));

        // The node that stops judges nothing from then on, and takes no lease a late Pong grants.
        let mut stopping = LeaseBook::new(0, 3, LEASE);
        stopping.ping_sent(1, 1, origin);
        stopping.pong_heard(1, 1, true, Some(7));
        assert!(stopping.may_judge(backup(7), origin));
        stopping.ping_sent(1, 2, origin);
        stopping.relinquish();
        assert!(!stopping.may_judge(backup(7), origin));
        stopping.pong_heard(1, 2, true, Some(7));
        assert!(!stopping.may_judge(backup(7), origin));
        assert!(
            !stopping.may_judge(primary(7), origin),
            "not even while it leads"
        );
    }

    #[test]
    fn a_new_primary_waits_out_the_grants_of_the_one_before() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(1, 3, LEASE);
        let expiry = book.expiry();
        // It begins leading at origin, grants nobody, and a revocation commits at once.
        assert!(!book.fence_clear(10, primary(10), origin, origin));
        assert!(!book.fence_clear(10, primary(10), origin, origin + expiry / 2));
        assert!(book.fence_clear(10, primary(10), origin, origin + expiry));
        // Leading a later view starts the wait again.
        let next = MetadataStand {
            view: 2,
            ..primary(12)
        };
        assert!(!book.fence_clear(12, next, origin + expiry, origin + expiry));
    }

    #[test]
    fn a_node_that_relayed_a_revocation_waits_a_lease_from_learning_it() {
        let origin = Instant::now();
        let mut book = LeaseBook::new(0, 3, LEASE);
        let expiry = book.expiry();
        assert!(!book.fence_clear(10, backup(10), origin, origin));
        assert!(book.fence_clear(10, backup(10), origin, origin + expiry));
        let mut book = LeaseBook::new(0, 3, LEASE);
        book.ping_heard(1, 10);
        book.ping_heard(2, 10);
        assert!(
            book.fence_clear(10, backup(10), origin, origin),
            "both applied it"
        );
    }

    /// Every running link's Pinger hears of an op applied that a fence waits on; a link that
    /// ended (its receiver dropped) is told nothing more.
    #[test]
    fn an_applied_op_a_fence_waits_on_reaches_every_running_links_pinger() {
        let leases = NodeLeases::new(0, 3, LEASE);
        let (mut first, second) = (leases.reports(), leases.reports());
        drop(second);
        leases.report_applied(7);
        leases.report_applied(9);
        assert_eq!(first.try_recv().ok(), Some(7));
        assert_eq!(first.try_recv().ok(), Some(9));
        assert_eq!(
            leases.reporters.borrow().len(),
            1,
            "the ended link is let go"
        );
    }
}
