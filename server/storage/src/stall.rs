//! Disk stall detection: a disk that stops answering stops the process.
//!
//! A write or fsync to a hung volume (a frozen filesystem, a lost network disk) does not fail:
//! it blocks in the kernel. A small write is done in place on the shard's thread
//! ([`crate::small_write`]), so the shard, and every connection and group on it, answers
//! nothing, with no line logged. Every durable write, fsync, truncation, creation, rename and
//! removal registers itself here while in flight ([`watch`]); a plain thread outside the shards
//! (they may be the ones blocked) looks at them every tick and, once one has been in flight
//! longer than `system.max_disk_stall`, fail-stops the process like a failed write
//! ([`crate::fail_stop`]: one `storage failure:` line naming the operation, the file (from its
//! descriptor, or the path a creation, rename or removal was given), the thread and how long
//! it has been stalled; exit code 74).
//!
//! A thread blocked in the kernel on a frozen filesystem cannot be killed: the process is not
//! reaped, and keeps its descriptors open, until the disk answers again. So before exiting the
//! detector shuts down every socket of the process (TCP clients and peers see the connection
//! end and a listener refuses new ones), which is what makes the node fail-stop for them.
//!
//! Cost on the write path: a thread-local slot taken from a bitmask, two stores (the second a
//! release, a plain store on x86) and a relaxed load of a coarse clock the detector advances
//! (no syscall, no lock, no allocation), and one store to release it: 5 to 9 ns measured
//! against 0.6 to 1.1 µs for a 1 KB pwrite (bench/README.md).

use crate::fail_stop::Synced;
use std::cell::Cell;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What an operation in flight does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Write = 1,
    Fsync,
    Truncate,
    Open,
    Create,
    Rename,
    Remove,
    /// A start of writeback (`sync_file_range`), which may wait for the device's queue.
    Writeback,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Write,
        Op::Fsync,
        Op::Truncate,
        Op::Open,
        Op::Create,
        Op::Rename,
        Op::Remove,
        Op::Writeback,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Fsync => "fsync",
            Op::Truncate => "truncate",
            Op::Open => "open",
            Op::Create => "create",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::Writeback => "start writeback of",
        }
    }
}

/// Operations one thread can have watched at once; further ones go unwatched. A compio shard
/// has many io_uring operations in flight at once, but on a hung disk the ones holding the
/// slots are the oldest and never complete, so the stall is still seen.
const SLOTS_PER_THREAD: usize = 64;

/// One watched operation: `since` is 0 while the slot is free, else the coarse clock's value
/// when it started plus one; `what` packs the operation, the file kind and the descriptor;
/// `path` names the file of an operation without a descriptor (a creation, rename, removal:
/// rare, so a lock and a copy there cost nothing that matters).
struct Slot {
    since: AtomicU64,
    what: AtomicU64,
    path: Mutex<Option<PathBuf>>,
}

/// The slots of one thread (threads that exit hand theirs to the next thread that starts).
struct ThreadSlots {
    thread: Mutex<String>,
    in_use: AtomicBool,
    slots: [Slot; SLOTS_PER_THREAD],
}

/// Every thread's slots, for the detector. Grows by one entry per thread that ever watched an
/// operation concurrently with the others (a thread's entry is reused after it exits).
static THREADS: Mutex<Vec<&'static ThreadSlots>> = Mutex::new(Vec::new());

/// Milliseconds since [`epoch`], advanced by the detector every tick (so a watched operation
/// reads a clock, not the time, and a start is up to a tick early).
static CLOCK_MS: AtomicU64 = AtomicU64::new(0);

/// Whether a detector runs: without one nothing is recorded.
static ENABLED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

struct Local {
    slots: Cell<Option<&'static ThreadSlots>>,
    /// The name the stop line gives this thread, when not its own ([`name_this_thread`]).
    name: std::cell::RefCell<Option<String>>,
    /// Bit `i` set: slot `i` is taken.
    taken: Cell<u64>,
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.get() {
            // A watch that outlived its thread (leaked) must not read as a stall forever.
            for slot in &slots.slots {
                slot.since.store(0, Ordering::Release);
            }
            slots.in_use.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            slots: Cell::new(None),
            name: std::cell::RefCell::new(None),
            taken: Cell::new(0),
        }
    };
}

fn current_thread_name() -> String {
    if let Ok(Some(name)) = LOCAL.try_with(|local| local.name.borrow().clone()) {
        return name;
    }
    let thread = std::thread::current();
    thread
        .name()
        .map_or_else(|| format!("{:?}", thread.id()), str::to_string)
}

/// Names the calling thread in the stop line (shard 0 runs on the process's main thread).
pub fn name_this_thread(name: &str) {
    let _ = LOCAL.try_with(|local| {
        *local.name.borrow_mut() = Some(name.to_string());
        if let Some(slots) = local.slots.get() {
            *slots
                .thread
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = name.to_string();
        }
    });
}

fn thread_slots() -> &'static ThreadSlots {
    let name = current_thread_name();
    let mut threads = THREADS.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(free) = threads.iter().find(|slots| {
        slots
            .in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }) {
        *free
            .thread
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = name;
        return free;
    }
    let slots: &'static ThreadSlots = Box::leak(Box::new(ThreadSlots {
        thread: Mutex::new(name),
        in_use: AtomicBool::new(true),
        slots: std::array::from_fn(|_| Slot {
            since: AtomicU64::new(0),
            what: AtomicU64::new(0),
            path: Mutex::new(None),
        }),
    }));
    threads.push(slots);
    slots
}

fn pack(op: Op, file: Synced, fd: RawFd) -> u64 {
    (op as u64) << 40 | (file as u64) << 32 | u64::from(fd as u32)
}

fn unpack(what: u64) -> (Option<Op>, Option<Synced>, Option<RawFd>) {
    let op = Op::ALL.into_iter().find(|op| *op as u64 == what >> 40);
    let file = Synced::ALL
        .into_iter()
        .find(|file| *file as u64 == (what >> 32) & 0xff);
    let fd = what as u32 as i32;
    (op, file, (fd >= 0).then_some(fd))
}

/// An operation being watched; dropping it (the operation returned) ends the watch. Not
/// `Send`: the slot is the thread's, released on the thread that took it.
#[must_use = "the watch ends when this is dropped"]
pub struct InFlight {
    slot: Option<(&'static ThreadSlots, u32)>,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((slots, index)) = self.slot {
            slots.slots[index as usize]
                .since
                .store(0, Ordering::Release);
            let _ = LOCAL.try_with(|local| local.taken.set(local.taken.get() & !(1 << index)));
        }
    }
}

/// Watches `op` on the open file `fd` of kind `file` until the returned guard is dropped (the
/// stop line names the file from the descriptor).
pub fn watch(op: Op, file: Synced, fd: RawFd) -> InFlight {
    begin(op, file, fd, None)
}

/// Watches `op` on `path` (a file of kind `file` with no descriptor at hand: a creation,
/// rename or removal) until the returned guard is dropped.
pub fn watch_path(op: Op, file: Synced, path: &Path) -> InFlight {
    begin(op, file, -1, Some(path))
}

fn begin(op: Op, file: Synced, fd: RawFd, path: Option<&Path>) -> InFlight {
    let unwatched = InFlight {
        slot: None,
        _thread_bound: std::marker::PhantomData,
    };
    if !ENABLED.load(Ordering::Relaxed) {
        return unwatched;
    }
    LOCAL
        .try_with(|local| {
            let taken = local.taken.get();
            let index = (!taken).trailing_zeros();
            if index as usize >= SLOTS_PER_THREAD {
                return None;
            }
            let slots = match local.slots.get() {
                Some(slots) => slots,
                None => {
                    let slots = thread_slots();
                    local.slots.set(Some(slots));
                    slots
                }
            };
            local.taken.set(taken | 1 << index);
            let slot = &slots.slots[index as usize];
            if fd < 0 {
                *slot
                    .path
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner()) = path.map(Path::to_path_buf);
            }
            slot.what.store(pack(op, file, fd), Ordering::Relaxed);
            slot.since
                .store(CLOCK_MS.load(Ordering::Relaxed) + 1, Ordering::Release);
            Some((slots, index))
        })
        .ok()
        .flatten()
        .map_or(unwatched, |slot| InFlight {
            slot: Some(slot),
            _thread_bound: std::marker::PhantomData,
        })
}

/// One operation in flight as the detector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The thread it runs on (a shard's name, `iggy-shard-N`).
    pub thread: String,
    /// The clock (milliseconds) when it started, up to a tick early.
    pub since_ms: u64,
    pub op: Option<Op>,
    pub file: Option<Synced>,
    pub fd: Option<RawFd>,
    /// The file, for an operation without a descriptor.
    pub path: Option<PathBuf>,
}

/// An operation in flight past the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub watched: Watched,
    /// How long it has been in flight (at least; a tick more at most).
    pub stalled: Duration,
}

/// The detector's judgement, sans-IO: given the operations in flight and the clock, which one
/// stalled. A start is recorded up to a tick early, so an operation counts as stalled only past
/// `limit` plus a tick. A detector that itself ran late (the process or the machine was paused:
/// SIGSTOP, a VM freeze) restarts every measure from when it ran again, so a pause of the whole
/// process is never taken for a stalled disk.
#[derive(Debug, Clone)]
pub struct Detector {
    limit: Duration,
    tick: Duration,
    last_check_ms: Option<u64>,
    resumed_ms: u64,
}

impl Detector {
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            tick: Self::tick_for(limit),
            last_check_ms: None,
            resumed_ms: 0,
        }
    }

    /// How often the detector looks: a twentieth of the limit, between 10 ms and 250 ms.
    pub fn tick_for(limit: Duration) -> Duration {
        (limit / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
    }

    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// A check at `now_ms` (the same clock as the starts): the longest stalled operation past
    /// the limit, if any.
    pub fn check(
        &mut self,
        now_ms: u64,
        in_flight: impl IntoIterator<Item = Watched>,
    ) -> Option<Stall> {
        let tick_ms = self.tick.as_millis() as u64;
        if let Some(last) = self.last_check_ms {
            // Four ticks late: this thread did not run, so nothing measured across that gap
            // says anything about the disk.
            if now_ms.saturating_sub(last) > 4 * tick_ms {
                self.resumed_ms = now_ms;
            }
        }
        self.last_check_ms = Some(now_ms);
        let limit_ms = self.limit.as_millis() as u64 + tick_ms;
        in_flight
            .into_iter()
            .map(|watched| {
                let stalled = now_ms.saturating_sub(watched.since_ms.max(self.resumed_ms));
                (stalled, watched)
            })
            .filter(|(stalled, _)| *stalled > limit_ms)
            .max_by_key(|(stalled, _)| *stalled)
            .map(|(stalled, watched)| Stall {
                watched,
                stalled: Duration::from_millis(stalled),
            })
    }
}

/// The operations in flight on every thread now.
fn in_flight() -> Vec<Watched> {
    let threads = THREADS.lock().unwrap_or_else(|poison| poison.into_inner());
    let mut watched = Vec::new();
    for slots in threads.iter() {
        for slot in &slots.slots {
            let since = slot.since.load(Ordering::Acquire);
            if since == 0 {
                continue;
            }
            let what = slot.what.load(Ordering::Relaxed);
            let (op, file, fd) = unpack(what);
            let path = match fd {
                Some(_) => None,
                None => slot
                    .path
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .clone(),
            };
            // Taken again in between: a new operation, not the one read.
            if slot.since.load(Ordering::Acquire) != since {
                continue;
            }
            watched.push(Watched {
                thread: slots
                    .thread
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .clone(),
                since_ms: since - 1,
                op,
                file,
                fd,
                path,
            });
        }
    }
    watched
}

/// Starts the detector thread with `limit` (`system.max_disk_stall`; zero starts nothing).
/// `key` names the setting in the stop line.
pub fn start(limit: Duration, key: &'static str) {
    if limit.is_zero() {
        return;
    }
    let started = epoch();
    ENABLED.store(true, Ordering::Relaxed);
    let mut detector = Detector::new(limit);
    std::thread::Builder::new()
        .name("iggy-disk-stall".into())
        .spawn(move || {
            loop {
                std::thread::sleep(detector.tick());
                let now_ms = started.elapsed().as_millis() as u64;
                CLOCK_MS.store(now_ms, Ordering::Relaxed);
                if let Some(stall) = detector.check(now_ms, in_flight()) {
                    stop(&stall, limit, key);
                }
            }
        })
        .expect("spawn the disk stall detector");
}

/// Logs the stall as a storage failure, shuts down every socket and exits with
/// [`crate::fail_stop::EXIT_CODE`].
fn stop(stall: &Stall, limit: Duration, key: &str) -> ! {
    let watched = &stall.watched;
    let file = watched
        .fd
        .and_then(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .or_else(|| watched.path.clone())
        .map_or_else(
            || format!("a {}", watched.file.map_or("file", Synced::label)),
            |path| path.display().to_string(),
        );
    let op = watched.op.map_or("operation on", Op::label);
    let message = format!(
        "storage failure: {op} {file}: no answer from the disk for {:.1} s (over {key} = {:?}), \
         on thread {}; stopping",
        stall.stalled.as_secs_f64(),
        limit,
        watched.thread
    );
    crate::fail_stop::stop_stalled(&message, shut_down_sockets)
}

/// Shuts down every socket the process holds but its standard streams (under systemd stderr
/// is the journal's socket, and the stop line is still to be written): a thread blocked in the
/// kernel keeps the process, and so its descriptors, alive past its exit.
fn shut_down_sockets() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<RawFd>().ok())
        else {
            continue;
        };
        if fd <= libc::STDERR_FILENO {
            continue;
        }
        // SAFETY: fstat and shutdown on a descriptor number; neither touches our memory but
        // `stat`, which is ours. A descriptor closed meanwhile fails harmlessly.
        unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(thread: &str, since_ms: u64) -> Watched {
        Watched {
            thread: thread.into(),
            since_ms,
            op: Some(Op::Fsync),
            file: Some(Synced::Segment),
            fd: Some(7),
            path: None,
        }
    }

    #[test]
    fn an_operation_stalls_only_past_the_limit_and_a_tick() {
        let mut detector = Detector::new(Duration::from_secs(2));
        assert_eq!(detector.tick(), Duration::from_millis(100));
        let mut now = 0;
        let mut stalled = None;
        while stalled.is_none() {
            now += 100;
            stalled = detector.check(
                now,
                [watched("iggy-shard-0", 50), watched("iggy-shard-1", 0)],
            );
        }
        // 2 s + a tick after the older one started: that one is named.
        assert_eq!(now, 2200);
        let stall = stalled.unwrap();
        assert_eq!(stall.watched.thread, "iggy-shard-1");
        assert_eq!(stall.stalled, Duration::from_millis(2200));
    }

    #[test]
    fn operations_that_keep_completing_never_stall() {
        let mut detector = Detector::new(Duration::from_secs(2));
        for now in (1000..60_000).step_by(100) {
            // Each check sees a different operation, each started a second ago.
            assert_eq!(
                detector.check(now, [watched("iggy-shard-0", now - 1000)]),
                None
            );
            assert_eq!(detector.check(now, []), None);
        }
    }

    #[test]
    fn a_pause_of_the_whole_process_is_not_a_stall() {
        let mut detector = Detector::new(Duration::from_secs(2));
        assert_eq!(detector.check(100, [watched("iggy-shard-0", 50)]), None);
        // The detector ran again 30 s later (SIGSTOP, a VM freeze): the operation is measured
        // from then.
        assert_eq!(detector.check(30_100, [watched("iggy-shard-0", 50)]), None);
        let mut now = 30_100;
        let stall = loop {
            now += 100;
            if let Some(stall) = detector.check(now, [watched("iggy-shard-0", 50)]) {
                break stall;
            }
        };
        assert_eq!(now, 32_300);
        assert_eq!(stall.stalled, Duration::from_millis(2200));
    }

    #[test]
    fn the_tick_is_a_twentieth_of_the_limit_within_bounds() {
        assert_eq!(
            Detector::tick_for(Duration::from_secs(20)),
            Duration::from_secs(1) / 4
        );
        assert_eq!(
            Detector::tick_for(Duration::from_secs(2)),
            Duration::from_millis(100)
        );
        assert_eq!(
            Detector::tick_for(Duration::from_millis(50)),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn what_is_in_flight_packs_and_unpacks() {
        for op in Op::ALL {
            for file in Synced::ALL {
                for fd in [-1, 0, 3, i32::MAX] {
                    let (o, f, d) = unpack(pack(op, file, fd));
                    assert_eq!((o, f, d), (Some(op), Some(file), (fd >= 0).then_some(fd)));
                }
            }
        }
    }

    #[test]
    fn a_watch_holds_a_slot_of_its_thread_until_dropped() {
        ENABLED.store(true, Ordering::Relaxed);
        // Other tests of this crate may watch too, on their own threads: this thread's only.
        let mine = |op: Op| {
            in_flight()
                .into_iter()
                .filter(|w| w.thread == current_thread_name() && w.op == Some(op))
                .count()
        };
        let first = watch_path(Op::Rename, Synced::Directory, Path::new("/d/a"));
        let second = watch_path(Op::Rename, Synced::Directory, Path::new("/d/b"));
        assert_eq!(mine(Op::Rename), 2);
        let paths: Vec<_> = in_flight()
            .into_iter()
            .filter(|w| w.thread == current_thread_name() && w.op == Some(Op::Rename))
            .map(|w| (w.fd, w.path))
            .collect();
        assert!(paths.contains(&(None, Some("/d/a".into()))), "{paths:?}");
        assert!(paths.contains(&(None, Some("/d/b".into()))), "{paths:?}");
        drop(first);
        assert_eq!(mine(Op::Rename), 1);
        let many: Vec<InFlight> = (0..SLOTS_PER_THREAD + 3)
            .map(|_| watch(Op::Remove, Synced::Record, 3))
            .collect();
        // One slot is the second's; the rest of the 64 are taken, the others unwatched.
        assert_eq!(mine(Op::Remove), SLOTS_PER_THREAD - 1);
        drop(many);
        drop(second);
        assert_eq!(mine(Op::Remove) + mine(Op::Rename), 0);
    }
}
