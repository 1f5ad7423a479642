//! The wall clock, read only where the node decides something with a timestamp (a primary
//! stamping an op, a lease check); committed state never reads it.

/// Microseconds since the Unix epoch (declared inward, where the replica links read it too).
pub use crate::consensus::wall_clock::now_micros;
use std::sync::atomic::{AtomicI64, Ordering};

/// The time this node stamps messages with and dates tokens by: its wall clock moved by an
/// offset the maintenance pass keeps (`cluster_clock::stamp_offset`: 0 unless the clock is off
/// the replicas' quorum by more than a second). Each pass also anchors the wall clock to the
/// monotonic one; should the wall clock step away from that anchor before the next pass (a VM
/// resumed from a snapshot, a bad NTP step), the anchor runs on by monotonic time until the
/// pass judges the step against the peers: in that gap a primary stamped messages an hour
/// ahead, and stamps never go back, so its partitions' later messages all carried that time.
/// Clones share the offset and anchor, across threads: the partitions' groups on every shard
/// stamp by it.
#[derive(Clone, Debug)]
pub struct StampClock(std::sync::Arc<Moved>);

#[derive(Debug)]
struct Moved {
    offset: AtomicI64,
    /// The wall clock minus the monotonic one at the last `set_offset`, in microseconds;
    /// `UNANCHORED` before it.
    anchor: AtomicI64,
}

const UNANCHORED: i64 = i64::MIN;

/// A wall clock this far from its anchor stepped since the last pass (monotonic and wall
/// clocks drift apart by far less between passes).
const STEP: u64 = 1_000_000;

impl Default for StampClock {
    fn default() -> Self {
        Self(std::sync::Arc::new(Moved {
            offset: AtomicI64::new(0),
            anchor: AtomicI64::new(UNANCHORED),
        }))
    }
}

impl StampClock {
    /// Microseconds since the Unix epoch by the moved clock.
    pub fn now_micros(&self) -> u64 {
        let anchor = self.0.anchor.load(Ordering::Relaxed);
        stamp_time(now_micros(), monotonic_micros(), self.offset(), anchor)
    }

    pub fn offset(&self) -> i64 {
        self.0.offset.load(Ordering::Relaxed)
    }

    /// Sets the offset and anchors the wall clock to the monotonic one; returns the offset
    /// before.
    pub fn set_offset(&self, offset: i64) -> i64 {
        let anchor = i128::from(now_micros()) - i128::from(monotonic_micros());
        let anchor = i64::try_from(anchor).unwrap_or(UNANCHORED);
        self.0.anchor.store(anchor, Ordering::Relaxed);
        self.0.offset.swap(offset, Ordering::Relaxed)
    }
}

/// The moved time: `wall` plus `offset`, unless `wall` stepped more than `STEP` from where the
/// `anchor` puts it by the `monotonic` clock, then the anchored time plus `offset`.
fn stamp_time(wall: u64, monotonic: u64, offset: i64, anchor: i64) -> u64 {
    let anchored = match anchor {
        UNANCHORED => None,
        anchor => u64::try_from(i128::from(monotonic) + i128::from(anchor)).ok(),
    };
    let base = match anchored {
        Some(anchored) if anchored.abs_diff(wall) > STEP => anchored,
        _ => wall,
    };
    base.saturating_add_signed(offset)
}

/// Microseconds of the monotonic clock since this process first read it.
fn monotonic_micros() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000_000;

    #[test]
    fn a_wall_clock_step_between_passes_is_not_followed_until_the_next() {
        let wall = 10 * HOUR;
        let mono = 5_000_000;
        let anchor = (wall - mono) as i64;
        // Wall and monotonic went on together (50 ms of drift is no step): the wall clock.
        assert_eq!(
            stamp_time(wall + 2_050_000, mono + 2_000_000, 0, anchor),
            wall + 2_050_000
        );
        assert_eq!(
            stamp_time(wall + 2_000_000, mono + 2_000_000, -300, anchor),
            wall + 1_999_700
        );
        // Stepped an hour ahead, or back: the anchored time.
        assert_eq!(
            stamp_time(wall + HOUR + 10, mono + 10, 0, anchor),
            wall + 10
        );
        assert_eq!(
            stamp_time(wall - HOUR + 10, mono + 10, 0, anchor),
            wall + 10
        );
        // The offset a pass set (this clock an hour behind the peers) applies to either.
        assert_eq!(
            stamp_time(wall - HOUR + 10, mono + 10, HOUR as i64, anchor),
            wall + HOUR + 10
        );
        // Before the first pass: the wall clock.
        assert_eq!(stamp_time(wall + HOUR, mono, 0, UNANCHORED), wall + HOUR);
    }

    #[test]
    fn set_offset_anchors_the_clock_it_moves() {
        let clock = StampClock::default();
        assert_eq!(clock.set_offset(-5), 0);
        let (before, moved, after) = (now_micros(), clock.now_micros(), now_micros());
        assert!(
            before - 5 <= moved && moved <= after - 5,
            "{before} {moved} {after}"
        );
    }
}
