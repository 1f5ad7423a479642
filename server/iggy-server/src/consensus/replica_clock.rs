//! A group's replica clock in the shell: ticks of the process's tick grid, advanced when the
//! group wakes, sleeping through the ticks at which nothing is due (see
//! `iggy_vsr::Replica::next_tick_due`). Sans-IO: instants come in, instants go out.
//!
//! Every group of a process ticks at the same grid instants, so the runtime wakes once per
//! tick for all the groups due then, not once per group (hundreds of idle partition groups each
//! on its own phase kept a node's runtime waking thousands of times a second); and an idle
//! group wakes when something is due (its heartbeat, a timeout), not at every tick.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How far ahead a group with nothing due sleeps at most (a frame wakes it sooner).
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

#[derive(Debug)]
pub struct ReplicaClock {
    tick: Duration,
    /// Ticks since the group opened: the replica's time.
    ticks: u64,
    /// The grid instant `ticks` was reached at (or the one before the present, after a stall).
    at: Instant,
    /// The tick the group sleeps until, unless something wakes it sooner.
    due: u64,
}

impl ReplicaClock {
    /// A clock opened at `now`; its first tick is due at the next grid instant.
    pub fn new(tick: Duration, now: Instant) -> Self {
        ReplicaClock {
            tick,
            ticks: 0,
            at: grid_floor(now, tick),
            due: 1,
        }
    }

    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// The group woke at `now` (its sleep ran out, or a frame or a request came): the ticks
    /// of the grid that passed since the last advance, but never past the tick that was due.
    /// A group held up (a long fsync, a busy shard) takes its due tick late, and its time
    /// slips by the delay: its timers fire once, not in a burst, as under a dense clock that
    /// took one tick per wake. The new time, if it moved.
    pub fn advance(&mut self, now: Instant) -> Option<u64> {
        let passed = grid_index(now, self.tick).saturating_sub(grid_index(self.at, self.tick));
        if passed == 0 {
            return None;
        }
        self.ticks = (self.ticks + passed).min(self.due.max(self.ticks + 1));
        self.at = grid_floor(now, self.tick);
        Some(self.ticks)
    }

    /// The group's next due tick (after the present one), as its replica and shell say.
    pub fn schedule(&mut self, due: u64) {
        self.due = due.max(self.ticks + 1);
    }

    /// The instant the group's sleep runs out: the grid instant of its due tick.
    pub fn wake_at(&self) -> Instant {
        let ahead = self.due - self.ticks;
        let sleep = u32::try_from(ahead)
            .ok()
            .and_then(|ahead| self.tick.checked_mul(ahead))
            .map_or(LONGEST_SLEEP, |sleep| sleep.min(LONGEST_SLEEP));
        self.at + sleep
    }
}

/// The process's tick grid starts at its first clock.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn grid_index(at: Instant, tick: Duration) -> u64 {
    let elapsed = at.saturating_duration_since(epoch()).as_nanos();
    u64::try_from(elapsed / tick.as_nanos().max(1)).unwrap_or(u64::MAX)
}

/// The grid instant at or before `at`.
fn grid_floor(at: Instant, tick: Duration) -> Instant {
    let index = grid_index(at, tick);
    let nanos = u128::from(index) * tick.as_nanos().max(1);
    epoch() + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(50);

    /// The instants a clock opened at `opened` wakes at when every tick is due.
    fn wakes_from(opened: Instant, count: usize) -> Vec<Instant> {
        let mut clock = ReplicaClock::new(TICK, opened);
        let mut wakes = Vec::new();
        for _ in 0..count {
            let at = clock.wake_at();
            wakes.push(at);
            clock.advance(at).expect("a tick passed");
            clock.schedule(clock.ticks() + 1);
        }
        wakes
    }

    #[test]
    fn groups_opened_at_different_instants_wake_at_the_same_instants() {
        let start = Instant::now();
        let first = wakes_from(start, 8);
        for offset_ms in [1, 7, 23, 49, 120] {
            let later = wakes_from(start + Duration::from_millis(offset_ms), 4);
            for at in &later {
                assert!(
                    first.contains(at),
                    "a group opened {offset_ms} ms later wakes at {at:?}, off the first group's {first:?}"
                );
            }
        }
    }

    #[test]
    fn a_group_sleeps_until_its_due_tick_and_takes_it_at_once() {
        let opened = Instant::now();
        let mut clock = ReplicaClock::new(TICK, opened);
        let first = clock.wake_at();
        assert_eq!(clock.advance(first), Some(1));
        clock.schedule(11);
        let wake = clock.wake_at();
        assert_eq!(wake - first, TICK * 10);
        assert_eq!(
            clock.advance(wake),
            Some(11),
            "the ten ticks slept through at once"
        );
    }

    #[test]
    fn a_frame_between_due_ticks_brings_the_clock_to_the_present() {
        let opened = Instant::now();
        let mut clock = ReplicaClock::new(TICK, opened);
        let first = clock.wake_at();
        clock.advance(first);
        clock.schedule(100);
        assert_eq!(clock.advance(first + TICK / 2), None, "no tick passed");
        assert_eq!(clock.advance(first + TICK * 4 + TICK / 2), Some(5));
        assert_eq!(clock.advance(first + TICK * 7), Some(8));
    }

    #[test]
    fn a_group_held_up_past_its_due_tick_takes_that_tick_not_a_burst() {
        let opened = Instant::now();
        let mut clock = ReplicaClock::new(TICK, opened);
        let first = clock.wake_at();
        clock.advance(first);
        clock.schedule(3);
        let late = first + TICK * 40 + Duration::from_millis(20);
        assert_eq!(
            clock.advance(late),
            Some(3),
            "the clock stops at the due tick"
        );
        clock.schedule(4);
        let next = clock.wake_at();
        assert!(
            next > late && next <= late + TICK,
            "the next tick is the grid's next instant: {:?} after {:?}",
            next - first,
            late - first
        );
    }

    #[test]
    fn a_group_with_nothing_due_sleeps_an_hour_at_most() {
        let opened = Instant::now();
        let mut clock = ReplicaClock::new(TICK, opened);
        let first = clock.wake_at();
        clock.advance(first);
        clock.schedule(u64::MAX);
        assert_eq!(clock.wake_at(), first + LONGEST_SLEEP);
    }
}
