//! Link-level liveness of one peer, sans-IO: whether this replica hears from the peer, and
//! when its own keepalive Ping is due. `replica_bus` feeds it `(now, event)` for the peer's
//! links and sends what it asks for; nothing here reads a clock or touches a socket.
//!
//! A link that is up says only that the peer's TCP stack answers: a stopped process keeps its
//! socket open. So each end of a link sends a Ping every keepalive interval and answers every
//! Ping with a Pong (spec/frames.spec `PingHeader`), and any frame heard on the link counts.
//! A peer is Unreachable with no link, or when nothing was heard on its link for longer than
//! the cluster's heartbeat timeout; Healthy otherwise.

use std::time::{Duration, Instant};

/// Keepalives per heartbeat timeout: a peer that answers stays heard through four lost or late
/// Pings before the timeout declares it Unreachable.
pub const KEEPALIVES_PER_TIMEOUT: u32 = 5;

/// What happened on the links with one peer. `generation` names the link: a peer that
/// redials gets a new one, and news of an older link no longer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// A link was admitted; its handshake was the first thing heard on it.
    Admitted { generation: u64 },
    /// A whole verified frame arrived on the link (a Ping, a Pong or consensus traffic).
    Heard { generation: u64 },
    /// The link closed.
    Closed { generation: u64 },
}

/// Heartbeat timeouts of silence after which a live link is closed (`Liveness::close_due`),
/// so its dialer dials afresh: a path that forgot the connection (a NAT or a stateful firewall
/// that lost its state) sends no reset, and TCP would keep retransmitting into it for some 15
/// minutes before either end learned the link is dead. A stopped peer's link is closed too;
/// it is dialed again once the peer answers.
pub const SILENCE_CLOSES_AFTER: u32 = 4;

/// A change in a live link's silence worth a log line (`Liveness::poll_silence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// Nothing heard on the link for this long, past the heartbeat timeout, though it is up.
    Began { silent_for: Duration },
    /// Heard again after this long of a silence reported before.
    Ended { silent_for: Duration },
}

/// The peer's status as the roster (command 12) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerStatus {
    Healthy,
    Unreachable,
}

#[derive(Debug, Clone, Copy)]
struct Link {
    generation: u64,
    heard_at: Instant,
    ping_at: Instant,
    /// `heard_at` when the silence after it was reported: a silence is reported once, and
    /// its end once.
    silent_since: Option<Instant>,
}

/// One peer's liveness. Time passed in must not go backwards; an earlier `now` is treated as
/// the latest one seen.
#[derive(Debug, Clone)]
pub struct Liveness {
    silence_max: Duration,
    keepalive: Duration,
    link: Option<Link>,
}

impl Liveness {
    /// A peer heard from within `silence_max` (the heartbeat timeout) is Healthy; it is pinged
    /// every `silence_max / KEEPALIVES_PER_TIMEOUT`.
    pub fn new(silence_max: Duration) -> Self {
        assert!(!silence_max.is_zero(), "a zero heartbeat timeout");
        let keepalive = silence_max / KEEPALIVES_PER_TIMEOUT;
        assert!(!keepalive.is_zero());
        Liveness {
            silence_max,
            keepalive,
            link: None,
        }
    }

    /// The interval between two Pings on a link.
    pub fn keepalive(&self) -> Duration {
        self.keepalive
    }

    pub fn handle(&mut self, now: Instant, event: LinkEvent) {
        match event {
            LinkEvent::Admitted { generation } => {
                // A newer link replaces the older one; a late admission of an older one is news
                // of a link already replaced.
                if self.link.is_some_and(|link| link.generation > generation) {
                    return;
                }
                self.link = Some(Link {
                    generation,
                    heard_at: now,
                    ping_at: now + self.keepalive,
                    silent_since: None,
                });
            }
            LinkEvent::Heard { generation } => {
                if let Some(link) = self.link.as_mut().filter(|l| l.generation == generation) {
                    link.heard_at = link.heard_at.max(now);
                }
            }
            LinkEvent::Closed { generation } => {
                if self.link.is_some_and(|link| link.generation == generation) {
                    self.link = None;
                }
            }
        }
    }

    pub fn status(&self, now: Instant) -> PeerStatus {
        match self.link {
            Some(link) if now.saturating_duration_since(link.heard_at) <= self.silence_max => {
                PeerStatus::Healthy
            }
            _ => PeerStatus::Unreachable,
        }
    }

    /// The link a Ping is due on now, if any; each answer schedules the next Ping one keepalive
    /// from `now` (a shell that woke late sends one Ping, not the ones it missed).
    pub fn poll_ping(&mut self, now: Instant) -> Option<u64> {
        let keepalive = self.keepalive;
        let link = self.link.as_mut().filter(|link| now >= link.ping_at)?;
        link.ping_at = now + keepalive;
        Some(link.generation)
    }

    /// A live link's silence starting or ending, each reported once: the link stays up (its
    /// peer's TCP stack answers, or nothing tells this end it does not) while nothing comes
    /// over it, a stopped process or frames lost one way. A link's close is reported by the
    /// bus on its own; a link admitted anew starts unreported.
    pub fn poll_silence(&mut self, now: Instant) -> Option<Silence> {
        let silence_max = self.silence_max;
        let link = self.link.as_mut()?;
        match link.silent_since {
            None => {
                let silent_for = now.saturating_duration_since(link.heard_at);
                (silent_for > silence_max).then(|| {
                    link.silent_since = Some(link.heard_at);
                    Silence::Began { silent_for }
                })
            }
            Some(since) if link.heard_at > since => {
                link.silent_since = None;
                Some(Silence::Ended {
                    silent_for: link.heard_at - since,
                })
            }
            Some(_) => None,
        }
    }

    /// How long the live link has been silent, when that is past `SILENCE_CLOSES_AFTER`
    /// heartbeat timeouts: the link is to be closed.
    pub fn close_due(&self, now: Instant) -> Option<Duration> {
        let link = self.link.as_ref()?;
        let silent_for = now.saturating_duration_since(link.heard_at);
        (silent_for > self.silence_max * SILENCE_CLOSES_AFTER).then_some(silent_for)
    }

    /// When `poll_ping` next has a Ping; `None` while no link is up.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.link.map(|link| link.ping_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Virtual time: an origin and offsets from it.
    fn at(origin: Instant, millis: u64) -> Instant {
        origin + Duration::from_millis(millis)
    }

    #[test]
    fn a_peer_without_a_link_is_unreachable_and_is_not_pinged() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        assert_eq!(liveness.status(origin), PeerStatus::Unreachable);
        assert_eq!(liveness.poll_timeout(), None);
        assert_eq!(liveness.poll_ping(at(origin, 60_000)), None);
        // News of a link never admitted changes nothing.
        liveness.handle(origin, LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.status(origin), PeerStatus::Unreachable);
    }

    #[test]
    fn a_peer_heard_within_the_timeout_is_healthy_and_silent_past_it_unreachable() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        assert_eq!(liveness.status(origin), PeerStatus::Healthy);
        // Exactly the timeout of silence is still Healthy; one step past it is not.
        assert_eq!(liveness.status(at(origin, 5_000)), PeerStatus::Healthy);
        assert_eq!(liveness.status(at(origin, 5_001)), PeerStatus::Unreachable);
        // A frame heard revives it, and the silence is counted from there.
        liveness.handle(at(origin, 7_000), LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.status(at(origin, 7_000)), PeerStatus::Healthy);
        assert_eq!(liveness.status(at(origin, 12_000)), PeerStatus::Healthy);
        assert_eq!(liveness.status(at(origin, 12_001)), PeerStatus::Unreachable);
    }

    #[test]
    fn a_peer_answering_every_ping_stays_healthy_and_one_that_stops_does_not() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        liveness.handle(origin, LinkEvent::Admitted { generation: 3 });
        let mut now = origin;
        let mut pings = 0;
        // Ten seconds of a peer whose Pong arrives 10 ms after each Ping.
        while now < at(origin, 10_000) {
            now = liveness.poll_timeout().expect("a link is up");
            assert_eq!(liveness.poll_ping(now), Some(3));
            pings += 1;
            liveness.handle(
                now + Duration::from_millis(10),
                LinkEvent::Heard { generation: 3 },
            );
            assert_eq!(liveness.status(now), PeerStatus::Healthy);
        }
        assert_eq!(
            pings,
            10,
            "one Ping per keepalive of {:?}",
            liveness.keepalive()
        );
        // The peer stops: Pings keep going out, nothing comes back.
        let stopped_at = now + Duration::from_millis(10);
        while now <= stopped_at + TIMEOUT {
            assert_eq!(liveness.status(now), PeerStatus::Healthy);
            now = liveness.poll_timeout().unwrap();
            assert_eq!(liveness.poll_ping(now), Some(3));
        }
        assert_eq!(liveness.status(now), PeerStatus::Unreachable);
        // It resumes and answers the next Ping.
        liveness.handle(now, LinkEvent::Heard { generation: 3 });
        assert_eq!(liveness.status(now), PeerStatus::Healthy);
    }

    #[test]
    fn a_ping_is_due_once_per_keepalive_and_a_late_shell_sends_one() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        assert_eq!(liveness.keepalive(), Duration::from_secs(1));
        assert_eq!(liveness.poll_timeout(), Some(at(origin, 1_000)));
        assert_eq!(liveness.poll_ping(at(origin, 999)), None);
        assert_eq!(liveness.poll_ping(at(origin, 1_000)), Some(1));
        assert_eq!(liveness.poll_ping(at(origin, 1_000)), None);
        // Woken 3.5 s late: one Ping, the next a keepalive later.
        assert_eq!(liveness.poll_ping(at(origin, 5_500)), Some(1));
        assert_eq!(liveness.poll_ping(at(origin, 5_500)), None);
        assert_eq!(liveness.poll_timeout(), Some(at(origin, 6_500)));
    }

    #[test]
    fn only_the_newest_link_counts() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        // The peer redials: the newer link replaces the older before the older's close.
        liveness.handle(at(origin, 100), LinkEvent::Admitted { generation: 2 });
        liveness.handle(at(origin, 200), LinkEvent::Closed { generation: 1 });
        assert_eq!(liveness.status(at(origin, 200)), PeerStatus::Healthy);
        // The old link's last frames are not news of the new one.
        liveness.handle(at(origin, 4_000), LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.status(at(origin, 5_101)), PeerStatus::Unreachable);
        // A late admission of the older link does not replace the newer.
        liveness.handle(at(origin, 5_200), LinkEvent::Admitted { generation: 1 });
        assert_eq!(liveness.status(at(origin, 5_200)), PeerStatus::Unreachable);
        assert_eq!(liveness.poll_ping(at(origin, 5_200)), Some(2));
        // Closing the current link leaves none: Unreachable, and no more Pings.
        liveness.handle(at(origin, 5_300), LinkEvent::Heard { generation: 2 });
        assert_eq!(liveness.status(at(origin, 5_300)), PeerStatus::Healthy);
        liveness.handle(at(origin, 5_400), LinkEvent::Closed { generation: 2 });
        assert_eq!(liveness.status(at(origin, 5_400)), PeerStatus::Unreachable);
        assert_eq!(liveness.poll_timeout(), None);
        assert_eq!(liveness.poll_ping(at(origin, 9_000)), None);
    }

    #[test]
    fn a_live_links_silence_is_reported_once_and_its_end_once() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        assert_eq!(
            liveness.poll_silence(origin),
            None,
            "no link, nothing to report"
        );
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        liveness.handle(at(origin, 1_000), LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.poll_silence(at(origin, 6_000)), None);
        assert_eq!(
            liveness.poll_silence(at(origin, 6_001)),
            Some(Silence::Began {
                silent_for: Duration::from_millis(5_001)
            })
        );
        assert_eq!(
            liveness.poll_silence(at(origin, 9_000)),
            None,
            "reported once"
        );
        liveness.handle(at(origin, 9_500), LinkEvent::Heard { generation: 1 });
        assert_eq!(
            liveness.poll_silence(at(origin, 9_600)),
            Some(Silence::Ended {
                silent_for: Duration::from_millis(8_500)
            })
        );
        assert_eq!(
            liveness.poll_silence(at(origin, 9_700)),
            None,
            "its end once"
        );
        // A second silence is a new one.
        assert_eq!(
            liveness.poll_silence(at(origin, 14_501)),
            Some(Silence::Began {
                silent_for: Duration::from_millis(5_001)
            })
        );
        // A link closed and admitted anew starts unreported: the bus logs the close itself.
        liveness.handle(at(origin, 15_000), LinkEvent::Closed { generation: 1 });
        assert_eq!(liveness.poll_silence(at(origin, 15_000)), None);
        liveness.handle(at(origin, 15_100), LinkEvent::Admitted { generation: 2 });
        assert_eq!(liveness.poll_silence(at(origin, 15_200)), None);
    }

    #[test]
    fn a_live_link_silent_for_four_heartbeat_timeouts_is_to_be_closed() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        assert_eq!(liveness.close_due(at(origin, 60_000)), None, "no link");
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        liveness.handle(at(origin, 1_000), LinkEvent::Heard { generation: 1 });
        // Unreachable after one timeout, closed only after four.
        assert_eq!(liveness.status(at(origin, 6_001)), PeerStatus::Unreachable);
        assert_eq!(liveness.close_due(at(origin, 21_000)), None);
        assert_eq!(
            liveness.close_due(at(origin, 21_001)),
            Some(Duration::from_millis(20_001))
        );
        // Heard in time, it stays.
        liveness.handle(at(origin, 20_000), LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.close_due(at(origin, 21_001)), None);
    }

    #[test]
    fn time_that_goes_backwards_does_not_undo_what_was_heard() {
        let origin = Instant::now();
        let mut liveness = Liveness::new(TIMEOUT);
        liveness.handle(origin, LinkEvent::Admitted { generation: 1 });
        liveness.handle(at(origin, 3_000), LinkEvent::Heard { generation: 1 });
        // A frame stamped earlier (read by another thread a moment before) arrives after.
        liveness.handle(at(origin, 2_000), LinkEvent::Heard { generation: 1 });
        assert_eq!(liveness.status(at(origin, 8_000)), PeerStatus::Healthy);
        assert_eq!(liveness.status(origin), PeerStatus::Healthy);
    }
}
