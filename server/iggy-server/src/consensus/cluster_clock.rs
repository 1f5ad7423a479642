//! The time a quorum of the replicas' wall clocks have reached, learned from the replica
//! links' Pings and Pongs (spec/frames.spec `PingHeader`: each carries its sender's wall clock,
//! a Pong echoes its Ping's). A primary plans message expiry with it rather than with its own
//! clock alone: a node whose clock jumped ahead (a VM resumed from a snapshot, a bad NTP step)
//! would otherwise retire, for every replica, messages the retention policy still keeps.
//!
//! Sans-IO: the shell hands in each Pong's three clock readings and asks with its own clock.

use std::time::{Duration, Instant};

/// A Pong whose round trip took longer says too little about the peer's clock.
const ROUND_TRIP_MAX_MICROS: u64 = 10_000_000;

/// What one Pong told of a peer's clock: its reading, and when (by this node's monotonic clock)
/// it was heard. The peer's clock is then estimated by monotonic time, not as an offset from
/// this node's wall clock: a step of this node's clock (a VM resumed from a snapshot, a bad NTP
/// step) would otherwise move every peer's estimate with it until their next Pongs, and a
/// primary judged expiry and stamped messages by the stepped clock in that gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// The peer's wall clock as it built the Pong.
    pub peer_micros: u64,
    /// Half the round trip: the peer's clock read at most twice this more when it was heard.
    pub error_micros: u64,
    /// When the Pong was read (monotonic).
    pub at: Instant,
}

impl ClockSample {
    /// The sample a Pong gives: our Ping was built at `sent` by our clock, the Pong read at
    /// `received` by it (at `at`, monotonic), and the peer built the Pong at `theirs` by its
    /// own. `None` when a field is missing (0: a build before them) or the readings make no
    /// round trip (our clock stepped meanwhile, or the trip took over 10 s).
    pub fn of_pong(sent: u64, received: u64, theirs: u64, at: Instant) -> Option<Self> {
        if sent == 0 || theirs == 0 || received < sent {
            return None;
        }
        let round_trip = received - sent;
        if round_trip > ROUND_TRIP_MAX_MICROS {
            return None;
        }
        Some(Self {
            peer_micros: theirs,
            error_micros: round_trip.div_ceil(2),
            at,
        })
    }

    /// The least the peer's clock reads at `now` (monotonic): it built the Pong before it was
    /// heard, and has run since.
    fn peer_at_least(&self, now: Instant) -> u64 {
        let since = u64::try_from(now.saturating_duration_since(self.at).as_micros());
        self.peer_micros.saturating_add(since.unwrap_or(u64::MAX))
    }

    /// The peer's clock minus ours (reading `own` at `now`), by the middle of its estimate.
    pub fn offset_micros(&self, own: u64, now: Instant) -> i64 {
        let peer = i128::from(self.peer_at_least(now)) + i128::from(self.error_micros);
        i64::try_from(peer - i128::from(own)).unwrap_or(i64::MAX)
    }
}

/// [`quorum_clock`], never later than `own`: the time expiries are judged by, so that neither
/// a clock ahead nor the estimate's error expires anything before this node's clock would.
pub fn quorum_now(
    own: u64,
    samples: &[ClockSample],
    quorum: usize,
    fresh: Duration,
    at: Instant,
) -> Option<u64> {
    quorum_clock(own, samples, quorum, fresh, at).map(|time| time.min(own))
}

/// The time, by our clock reading `own`, that at least `quorum` replicas' clocks (ours
/// included) have reached, judged from the peers' `samples` taken within `fresh` of `at`.
/// `None` while fewer than a quorum of clocks are known.
pub fn quorum_clock(
    own: u64,
    samples: &[ClockSample],
    quorum: usize,
    fresh: Duration,
    at: Instant,
) -> Option<u64> {
    let mut clocks: Vec<u64> = samples
        .iter()
        .filter(|sample| at.saturating_duration_since(sample.at) <= fresh)
        .map(|sample| sample.peer_at_least(at))
        .collect();
    clocks.push(own);
    if clocks.len() < quorum.max(1) {
        return None;
    }
    clocks.sort_unstable_by(|a, b| b.cmp(a));
    Some(clocks[quorum.max(1) - 1])
}

/// How far a primary stamps messages from its own clock: the quorum's time minus its own when
/// they differ by more than `tolerance` (a clock that jumped, not the estimate's error), else 0.
/// A primary whose clock is behind would otherwise stamp messages in the past, and a replica
/// with a good clock, primary later, would expire them early.
pub fn stamp_offset(own: u64, quorum_clock: Option<u64>, tolerance: Duration) -> i64 {
    let Some(time) = quorum_clock else {
        return 0;
    };
    let offset = i128::from(time) - i128::from(own);
    match offset.unsigned_abs() > tolerance.as_micros() {
        true => i64::try_from(offset).unwrap_or(0),
        false => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000_000;

    /// A peer `offset` microseconds off this node's clock reading `own`, sampled at `at`
    /// within 100 µs.
    fn peer_at(own: u64, offset: i64, at: Instant) -> ClockSample {
        ClockSample {
            peer_micros: own.saturating_add_signed(offset - 100),
            error_micros: 100,
            at,
        }
    }

    #[test]
    fn a_pong_gives_the_peers_offset_within_half_the_round_trip() {
        let at = Instant::now();
        // Our Ping at 1_000, the Pong read at 1_400; the peer stamped it 50_200 (50 ms ahead).
        let sample = ClockSample::of_pong(1_000, 1_400, 50_200, at).expect("a sample");
        assert_eq!(sample.offset_micros(1_400, at), 49_000);
        assert_eq!(sample.error_micros, 200);
        assert_eq!(
            sample.peer_at_least(at + Duration::from_micros(600)),
            50_800
        );
        // Behind us.
        let behind = ClockSample::of_pong(HOUR, HOUR + 10, 1_000, at).expect("a sample");
        assert!(behind.offset_micros(HOUR + 10, at) < 0);
        for (sent, received, theirs) in [(0, 10, 5), (10, 20, 0), (20, 10, 15), (1, 20_000_002, 5)]
        {
            assert_eq!(ClockSample::of_pong(sent, received, theirs, at), None);
        }
    }

    #[test]
    fn a_clock_ahead_of_the_others_plans_with_the_quorums_time() {
        let at = Instant::now();
        let fresh = Duration::from_secs(15);
        let now = 10 * HOUR;
        // This node's clock is an hour ahead of both peers (which agree within a millisecond).
        let peer = |offset| peer_at(now, offset, at);
        let peers = [peer(-(HOUR as i64)), peer(-(HOUR as i64) + 1_000)];
        let agreed = quorum_now(now, &peers, 2, fresh, at).expect("a quorum of clocks");
        assert!(
            agreed <= now - HOUR + 1_000 && agreed > now - HOUR - 1_000,
            "{agreed}"
        );
        // One peer agrees with us: a quorum of three has reached our time.
        let one_agrees = [peer(-(HOUR as i64)), peer(0)];
        assert_eq!(quorum_now(now, &one_agrees, 2, fresh, at), Some(now - 100));
        // Peers ahead of us never move our time later than our own clock.
        assert_eq!(
            quorum_now(now, &[peer(HOUR as i64)], 2, fresh, at),
            Some(now)
        );
        // Five replicas, a quorum of three: the third-latest clock.
        let five = [
            peer(-10_000),
            peer(-20_000),
            peer(-(HOUR as i64)),
            peer(-(2 * HOUR as i64)),
        ];
        assert_eq!(quorum_now(now, &five, 3, fresh, at), Some(now - 20_100));
    }

    #[test]
    fn a_clock_behind_the_quorums_stamps_with_the_quorums_time() {
        let at = Instant::now();
        let fresh = Duration::from_secs(15);
        let tolerance = Duration::from_secs(1);
        let now = 10 * HOUR;
        let peer = |offset| peer_at(now, offset, at);
        // An hour behind both peers: stamps an hour later than its clock; expiry still judges
        // by its own (earlier) time.
        let ahead_of_us = [peer(HOUR as i64), peer(HOUR as i64 + 500)];
        let clock = quorum_clock(now, &ahead_of_us, 2, fresh, at);
        assert_eq!(clock, Some(now + HOUR - 100));
        assert_eq!(stamp_offset(now, clock, tolerance), HOUR as i64 - 100);
        assert_eq!(quorum_now(now, &ahead_of_us, 2, fresh, at), Some(now));
        // Within the tolerance (the estimate's error, a few milliseconds of drift): its own.
        let close = quorum_clock(now, &[peer(-300_000), peer(-200_000)], 2, fresh, at);
        assert_eq!(stamp_offset(now, close, tolerance), 0);
        assert_eq!(stamp_offset(now, None, tolerance), 0);
        // An hour ahead: stamps back to the quorum's time.
        let behind_us = quorum_clock(
            now,
            &[peer(-(HOUR as i64)), peer(-(HOUR as i64))],
            2,
            fresh,
            at,
        );
        assert_eq!(
            stamp_offset(now, behind_us, tolerance),
            -(HOUR as i64) - 100
        );
    }

    /// This node's clock stepped an hour ahead a second after the peers' Pongs (which found
    /// every clock agreeing): their estimates run on by monotonic time, not with the step, so
    /// expiry is judged and messages stamped by the peers' time at once, not after their next
    /// Pongs (before, `quorum_now` read the stepped time for that gap, and the primary
    /// expired messages an hour young for every replica).
    #[test]
    fn a_step_of_this_nodes_clock_moves_no_peers_estimate() {
        let heard = Instant::now();
        let fresh = Duration::from_secs(15);
        let tolerance = Duration::from_secs(1);
        let then = 10 * HOUR;
        let peers = [peer_at(then, 0, heard), peer_at(then, 500, heard)];
        let later = heard + Duration::from_secs(1);
        let true_now = then + 1_000_000;
        let stepped = true_now + HOUR;
        let judged = quorum_now(stepped, &peers, 2, fresh, later).expect("a quorum of clocks");
        assert!(
            judged.abs_diff(true_now) < 1_000,
            "{judged} against {true_now}"
        );
        let clock = quorum_clock(stepped, &peers, 2, fresh, later);
        let offset = stamp_offset(stepped, clock, tolerance);
        assert!(offset.unsigned_abs().abs_diff(HOUR) < 1_000, "{offset}");
        // A step back: stamps move forward to the peers' time; expiry by the stepped clock,
        // which expires nothing early.
        let back = true_now - HOUR;
        let clock = quorum_clock(back, &peers, 2, fresh, later);
        assert!(stamp_offset(back, clock, tolerance).abs_diff(HOUR as i64) < 1_000);
        assert_eq!(quorum_now(back, &peers, 2, fresh, later), Some(back));
    }

    #[test]
    fn without_fresh_samples_of_a_quorum_there_is_no_time() {
        let at = Instant::now();
        let fresh = Duration::from_secs(15);
        let old = ClockSample {
            peer_micros: HOUR,
            error_micros: 10,
            at,
        };
        let later = at + Duration::from_secs(16);
        assert_eq!(quorum_now(HOUR, &[old], 2, fresh, later), None);
        assert_eq!(quorum_now(HOUR, &[], 2, fresh, at), None);
        // A replica alone (or a cluster of one) has its own time.
        assert_eq!(quorum_now(HOUR, &[], 1, fresh, at), Some(HOUR));
    }
}
