//! A group's replica clock in the shell: ticks of the process's tick grid, advanced when the
//! group wakes, sleeping through the ticks at which nothing is due (see
//! `iggy_vsr::Replica::next_tick_due`). Sans-IO: instants come in, instants go out.
//!
//! Every group of a process ticks at the same grid instants, so the runtime wakes once per
//! tick for all the groups due then, not once per group (hundreds of idle partition groups each
//! on its own phase kept a node's runtime waking thousands of times a second); and an idle
//! group wakes when something is due (its heartbeat, a timeout), not at every tick.
//!
//! A group held up past its due tick (the process stopped, a long fsync) takes that tick
//! late, so its time slips behind the grid. The clock keeps what slipped: a replica's
//! evidence that it is in touch (a quorum's acknowledgements, its primary's last frame) is
//! as old in real time as the ticks since it plus what slipped since ([`ReplicaClock::lapse`]).

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How far ahead a group with nothing due sleeps at most (a frame wakes it sooner).
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

/// The latest slips a clock tells apart; evidence older than all of them counts every tick
/// the clock ever slipped (earlier, never later, than it would).
const SLIPS_KEPT: usize = 32;

#[derive(Debug)]
pub struct ReplicaClock {
    tick: Duration,
    /// Ticks since the group opened: the replica's time.
    ticks: u64,
    /// The grid instant `ticks` was reached at (or the one before the present, after a stall).
    at: Instant,
    /// The tick the group sleeps until, unless something wakes it sooner.
    due: u64,
    /// Ticks of the grid the group's time did not take, in all.
    slipped: u64,
    /// The latest slips, oldest first: the tick the time went on from, and `slipped` after it.
    slips: VecDeque<(u64, u64)>,
    /// The newest slip no longer in `slips`.
    forgotten: Option<(u64, u64)>,
}

/// When a replica's `in_touch` lapses in real time, as [`ReplicaClock::lapse`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// It does not hold now.
    Lapsed,
    /// It holds until this instant unless the replica hears from its peers first.
    At(Instant),
    /// It always holds (a group of one).
    Never,
}

impl ReplicaClock {
    /// A clock opened at `now`; its first tick is due at the next grid instant.
    pub fn new(tick: Duration, now: Instant) -> Self {
        ReplicaClock {
            tick,
            ticks: 0,
            at: grid_floor(now, tick),
            due: 1,
            slipped: 0,
            slips: VecDeque::new(),
            forgotten: None,
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
        let ticks = (self.ticks + passed).min(self.due.max(self.ticks + 1));
        let lost = self.ticks + passed - ticks;
        self.ticks = ticks;
        self.at = grid_floor(now, self.tick);
        if lost > 0 {
            self.slipped += lost;
            self.slips.push_back((ticks, self.slipped));
            if self.slips.len() > SLIPS_KEPT {
                self.forgotten = self.slips.pop_front();
            }
        }
        Some(self.ticks)
    }

    /// The ticks the group's time slipped after tick `since` (a stall that ended at `since`
    /// itself came before what the group learned at it).
    fn slipped_since(&self, since: u64) -> u64 {
        let before = self
            .slips
            .iter()
            .rev()
            .find(|(resumed, _)| *resumed <= since)
            .or(self
                .forgotten
                .as_ref()
                .filter(|(resumed, _)| *resumed <= since))
            .map_or(0, |(_, slipped)| *slipped);
        self.slipped - before
    }

    /// When a replica whose `in_touch` holds until tick `until` (`iggy_vsr::Replica::
    /// in_touch_until`, 0 or `u64::MAX` as it says) on evidence from tick `evidence` stops
    /// being in touch in real time: the grid instant of `until`, brought forward by what the
    /// clock slipped since the evidence.
    pub fn lapse(&self, until: u64, evidence: u64) -> Lapse {
        match until {
            0 => return Lapse::Lapsed,
            u64::MAX => return Lapse::Never,
            _ => {}
        }
        let ahead = until.saturating_sub(self.ticks);
        let lost = self.slipped_since(evidence);
        let tick_times = |count: u64| {
            u32::try_from(count)
                .ok()
                .and_then(|count| self.tick.checked_mul(count))
        };
        let (Some(ahead), Some(lost)) = (tick_times(ahead), tick_times(lost)) else {
            return Lapse::Lapsed;
        };
        match (self.at + ahead).checked_sub(lost) {
            Some(at) if ahead > lost => Lapse::At(at),
            _ => Lapse::Lapsed,
        }
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
pub fn epoch() -> Instant {
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

    /// A clock at tick 10, at its grid instant.
    fn clock_at_tick_ten() -> (ReplicaClock, Instant) {
        let mut clock = ReplicaClock::new(TICK, Instant::now());
        let first = clock.wake_at();
        clock.advance(first);
        clock.schedule(10);
        let tenth = first + TICK * 9;
        assert_eq!(clock.advance(tenth), Some(10));
        (clock, tenth)
    }

    #[test]
    fn in_touch_lapses_at_the_grid_instant_of_its_tick_while_the_clock_keeps_up() {
        let (mut clock, tenth) = clock_at_tick_ten();
        assert_eq!(clock.lapse(110, 10), Lapse::At(tenth + TICK * 100));
        clock.schedule(50);
        assert_eq!(clock.advance(tenth + TICK * 40), Some(50));
        assert_eq!(clock.lapse(110, 10), Lapse::At(tenth + TICK * 100));
        assert_eq!(clock.lapse(0, 0), Lapse::Lapsed);
        assert_eq!(clock.lapse(u64::MAX, 0), Lapse::Never);
    }

    /// A process stopped for 3 s, 60 ticks: its replica's time takes one tick. Evidence from
    /// before the stop is 63 ticks old in real time, not 4; evidence learned as the group
    /// woke (at the tick its time went on from) is fresh.
    #[test]
    fn a_stall_after_the_evidence_brings_the_lapse_forward_by_what_slipped() {
        let (mut clock, tenth) = clock_at_tick_ten();
        clock.schedule(11);
        let woke = tenth + TICK * 60 + Duration::from_millis(10);
        assert_eq!(clock.advance(woke), Some(11), "the time slipped 59 ticks");
        // Evidence at tick 10, in touch until tick 110: 100 ticks of real time after it.
        assert_eq!(clock.lapse(110, 10), Lapse::At(tenth + TICK * 100));
        // Evidence at tick 10, in touch until tick 60: lapsed during the stall.
        assert_eq!(clock.lapse(60, 10), Lapse::Lapsed);
        // Evidence at tick 11, learned after the stall: 100 ticks from now.
        assert_eq!(clock.lapse(111, 11), Lapse::At(tenth + TICK * 160));
        // A later stall leaves each lapse at its real instant.
        clock.schedule(12);
        let again = tenth + TICK * 80;
        assert_eq!(clock.advance(again), Some(12), "19 more ticks slipped");
        assert_eq!(clock.lapse(111, 11), Lapse::At(tenth + TICK * 160));
        assert_eq!(clock.lapse(210, 10), Lapse::At(tenth + TICK * 200));
    }

    #[test]
    fn evidence_older_than_every_slip_kept_counts_every_slip() {
        let (mut clock, tenth) = clock_at_tick_ten();
        let mut now = tenth;
        for _ in 0..SLIPS_KEPT + 5 {
            clock.schedule(clock.ticks() + 1);
            now += TICK * 3;
            clock.advance(now).expect("a tick passed");
        }
        let slipped = clock.slipped;
        assert_eq!(slipped, 2 * (SLIPS_KEPT as u64 + 5));
        // Evidence from before the first slip counts all of them.
        let until = clock.ticks() + 1000;
        let expected = clock.at + TICK * 1000 - TICK * slipped as u32;
        assert_eq!(clock.lapse(until, 10), Lapse::At(expected));
        // Evidence between forgotten slips counts at least those after it (here, all).
        assert_eq!(clock.lapse(until, 11), Lapse::At(expected));
        // Evidence at the newest slip counts nothing.
        assert_eq!(
            clock.lapse(until, clock.ticks()),
            Lapse::At(clock.at + TICK * 1000)
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
