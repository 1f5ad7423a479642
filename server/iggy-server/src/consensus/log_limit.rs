//! A limit on repeated log lines, per source: a source's first line is written, then at most one
//! per interval, each saying how many of that source's lines were held back since the last one
//! written. The replica listener passes every warning an unauthenticated connection can cause
//! through it, keyed by the connection's ip and the warning's kind (a refusal's field), so a
//! stranger opening connections cannot flood the log, while a misconfigured peer (another
//! secret, release or CA) still shows up at once and then once per interval with its count.
//!
//! Sans-IO: the caller passes the time. The table of sources is bounded; while it is full, new
//! sources share one pooled window, and a forgotten source's count moves to that pool, so no
//! held-back line goes uncounted.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// What to do with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it, with `held_back` lines held back since the last one written for its source;
    /// `pooled` when the source shares the pool (the table was full), so the count is the
    /// pool's.
    Write { held_back: u64, pooled: bool },
    /// Count it and write nothing.
    HoldBack,
}

/// When a source last had a line written and how many it had held back since.
#[derive(Debug, Clone, Copy)]
struct Window {
    written_at: Instant,
    held_back: u64,
}

/// The limit: one window per source, up to `sources_max`, and the pool.
#[derive(Debug)]
pub struct LogLimit<Source> {
    interval: Duration,
    sources_max: usize,
    sources: HashMap<Source, Window>,
    pool: Option<Window>,
    /// Lines of forgotten sources, held back and not yet reported by a pooled line.
    pool_held_back: u64,
}

impl<Source: Eq + Hash + Copy> LogLimit<Source> {
    /// At most one line per `interval` for each of up to `sources_max` sources, and one per
    /// `interval` for all others together.
    pub fn new(interval: Duration, sources_max: usize) -> Self {
        assert!(sources_max > 0, "a limit tracks at least one source");
        assert!(!interval.is_zero(), "a zero interval limits nothing");
        LogLimit {
            interval,
            sources_max,
            sources: HashMap::new(),
            pool: None,
            pool_held_back: 0,
        }
    }

    /// Judges a line of `source` at `now` (which must not go backwards).
    pub fn line(&mut self, now: Instant, source: Source) -> Verdict {
        if !self.sources.contains_key(&source) && self.sources.len() >= self.sources_max {
            self.forget_quiet_sources(now);
        }
        let interval = self.interval;
        if let Some(window) = self.sources.get_mut(&source) {
            return judge(window, now, interval, false);
        }
        if self.sources.len() < self.sources_max {
            self.sources.insert(
                source,
                Window {
                    written_at: now,
                    held_back: 0,
                },
            );
            return Verdict::Write {
                held_back: 0,
                pooled: false,
            };
        }
        match &mut self.pool {
            Some(window) => {
                window.held_back += std::mem::take(&mut self.pool_held_back);
                judge(window, now, interval, true)
            }
            None => {
                self.pool = Some(Window {
                    written_at: now,
                    held_back: 0,
                });
                Verdict::Write {
                    held_back: std::mem::take(&mut self.pool_held_back),
                    pooled: true,
                }
            }
        }
    }

    /// Forgets every source whose interval has passed, so a new one gets a window of its own;
    /// their held-back counts move to the pool, reported with its next line.
    fn forget_quiet_sources(&mut self, now: Instant) {
        let interval = self.interval;
        let mut forgotten_held_back = 0;
        self.sources.retain(|_, window| {
            let quiet = now.saturating_duration_since(window.written_at) >= interval;
            if quiet {
                forgotten_held_back += window.held_back;
            }
            !quiet
        });
        self.pool_held_back += forgotten_held_back;
        debug_assert!(self.sources.len() <= self.sources_max);
    }
}

/// Writes when `window`'s interval has passed (resetting its count), else holds back.
fn judge(window: &mut Window, now: Instant, interval: Duration, pooled: bool) -> Verdict {
    if now.saturating_duration_since(window.written_at) < interval {
        window.held_back += 1;
        return Verdict::HoldBack;
    }
    let held_back = std::mem::take(&mut window.held_back);
    window.written_at = now;
    Verdict::Write { held_back, pooled }
}

/// One kind of warning, written at most once per interval (a single-source [`LogLimit`]).
/// Shared by the tasks of one shard, so it judges through `&self`.
#[derive(Debug)]
pub struct Throttled(std::cell::RefCell<LogLimit<()>>);

impl Throttled {
    pub fn new(interval: Duration) -> Self {
        Throttled(std::cell::RefCell::new(LogLimit::new(interval, 1)))
    }

    /// Whether to write the warning at `now`: how many were held back since the last one
    /// written, or `None` to hold this one back.
    pub fn due(&self, now: Instant) -> Option<u64> {
        match self.0.borrow_mut().line(now, ()) {
            Verdict::Write { held_back, .. } => Some(held_back),
            Verdict::HoldBack => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    fn write(held_back: u64) -> Verdict {
        Verdict::Write {
            held_back,
            pooled: false,
        }
    }

    #[test]
    fn a_source_writes_its_first_line_then_one_per_interval_with_the_count_held_back() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut limit = LogLimit::new(INTERVAL, 4);
        assert_eq!(limit.line(at(0), 'a'), write(0));
        for second in 1..10 {
            assert_eq!(
                limit.line(at(second), 'a'),
                Verdict::HoldBack,
                "at {second}s"
            );
        }
        // Another source is not held back by the first one's flood.
        assert_eq!(limit.line(at(5), 'b'), write(0));
        assert_eq!(limit.line(at(6), 'b'), Verdict::HoldBack);
        assert_eq!(limit.line(at(10), 'a'), write(9));
        assert_eq!(limit.line(at(11), 'a'), Verdict::HoldBack);
        // After a quiet spell the next line is written at once, with what was held back.
        assert_eq!(limit.line(at(100), 'a'), write(1));
        assert_eq!(limit.line(at(200), 'a'), write(0));
        assert_eq!(limit.line(at(201), 'b'), write(1));
    }

    #[test]
    fn sources_past_the_table_share_the_pool_and_no_held_back_line_goes_uncounted() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut limit = LogLimit::new(INTERVAL, 2);
        assert_eq!(limit.line(at(0), 1), write(0));
        assert_eq!(limit.line(at(0), 2), write(0));
        assert_eq!(limit.line(at(1), 1), Verdict::HoldBack);
        // The table is full and nobody in it is quiet: 3 and 4 share the pool.
        let pooled = |held_back| Verdict::Write {
            held_back,
            pooled: true,
        };
        assert_eq!(limit.line(at(1), 3), pooled(0));
        assert_eq!(limit.line(at(2), 4), Verdict::HoldBack);
        assert_eq!(limit.line(at(3), 3), Verdict::HoldBack);
        assert_eq!(limit.line(at(4), 1), Verdict::HoldBack);
        // At 10 s sources 1 and 2 are quiet and forgotten, so 5 and then 4 get windows of
        // their own; source 1's two held-back lines join the pool's two, written with the
        // pool's next line.
        assert_eq!(limit.line(at(10), 5), write(0));
        assert_eq!(limit.line(at(11), 4), write(0));
        assert_eq!(limit.line(at(12), 6), pooled(4));
        assert_eq!(limit.line(at(13), 7), Verdict::HoldBack);
        assert_eq!(limit.sources.len(), 2);
    }

    #[test]
    fn a_flood_of_many_lines_writes_one_per_interval_in_all() {
        let start = Instant::now();
        let mut limit = LogLimit::new(INTERVAL, 64);
        let mut written = 0;
        let mut counted = 0;
        // A thousand lines a second for a minute, from 16 sources in turn.
        for millisecond in 0..60_000u64 {
            let now = start + Duration::from_millis(millisecond);
            match limit.line(now, millisecond % 16) {
                Verdict::Write { held_back, pooled } => {
                    assert!(!pooled);
                    written += 1;
                    counted += 1 + held_back;
                }
                Verdict::HoldBack => {}
            }
        }
        // Each source writes at 0, 10, ..., 50 s: six lines, and the last one's window still
        // holds what followed it.
        assert_eq!(written, 16 * 6);
        let pending: u64 = limit.sources.values().map(|w| w.held_back).sum();
        assert_eq!(counted + pending, 60_000);
    }
}
