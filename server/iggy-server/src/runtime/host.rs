//! What the host reports about this process and machine (for stats, command 10), read from
//! Linux's /proc and statvfs(2). A figure that cannot be read is reported as 0 or empty.

use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// Bytes of a `Key:   N kB` line in a /proc status-like file.
/// Returns the heap's free memory to the system: glibc keeps freed chunks amid live ones for
/// the life of the process. Called after events that free much at once (a start's replay, many
/// connections closed), never on the hot path.
pub fn give_back_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub fn kilobytes(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub struct HostFigures {
    /// This process's CPU use in percent of one core (up to 100 per core).
    pub cpu_usage: f32,
    /// The whole machine's busy time in percent of all its cores (0..=100).
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    /// This process's disk reads and writes (`/proc/self/io`), as upstream reports them.
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub hostname: String,
    pub os_version: String,
    pub kernel_version: String,
    pub threads: u32,
    pub open_files: u64,
    pub open_files_limit: u64,
    /// Bytes of the data directory's filesystem an unprivileged writer may still use.
    pub free_disk_space: u64,
    pub total_disk_space: u64,
}

/// The figures now; disk space is that of the filesystem holding `data_dir`.
pub fn figures(data_dir: &Path) -> HostFigures {
    let status = read("/proc/self/status");
    let meminfo = read("/proc/meminfo");
    let io = read("/proc/self/io");
    let os_release = read("/etc/os-release");
    let limits = read("/proc/self/limits");
    let cpu = cpu_usage();
    let disk = disk_space(data_dir);
    HostFigures {
        cpu_usage: cpu.process,
        total_cpu_usage: cpu.machine,
        memory_usage: kilobytes(&status, "VmRSS:"),
        total_memory: kilobytes(&meminfo, "MemTotal:"),
        available_memory: kilobytes(&meminfo, "MemAvailable:"),
        read_bytes: io_figure(&io, "read_bytes:"),
        written_bytes: io_figure(&io, "write_bytes:"),
        hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
        os_version: os_release
            .lines()
            .find_map(|line| line.strip_prefix("PRETTY_NAME="))
            .map(|name| name.trim_matches('"').to_string())
            .unwrap_or_default(),
        kernel_version: read("/proc/sys/kernel/osrelease").trim().to_string(),
        threads: status
            .lines()
            .find_map(|line| line.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0),
        open_files: std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count() as u64),
        open_files_limit: limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line.split_whitespace().nth(3))
            .and_then(|soft| soft.parse().ok())
            .unwrap_or(0),
        free_disk_space: disk.free,
        total_disk_space: disk.total,
    }
}

/// One `/proc/self/io` figure (0 when the kernel does not keep them).
fn io_figure(io: &str, key: &str) -> u64 {
    io.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskSpace {
    pub free: u64,
    pub total: u64,
    /// Inodes an unprivileged writer may still take, and all of them (0: the filesystem, such as
    /// btrfs, sets no limit).
    pub inodes_free: u64,
    pub inodes_total: u64,
}

/// Space of the filesystem holding `path`: free counts only blocks an unprivileged writer may
/// use (`f_bavail`), since the server does not run as root.
pub fn disk_space(path: &Path) -> DiskSpace {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return DiskSpace::default();
    };
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is NUL-terminated and `stat` is writable memory of the right type.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return DiskSpace::default();
    }
    // SAFETY: statvfs succeeded, so it filled `stat` (and it was zeroed before).
    let stat = unsafe { stat.assume_init() };
    // The fields are 32-bit on 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    let (fragment, available, blocks) = (
        stat.f_frsize as u64,
        stat.f_bavail as u64,
        stat.f_blocks as u64,
    );
    #[allow(clippy::unnecessary_cast)]
    let (inodes_free, inodes_total) = (stat.f_favail as u64, stat.f_files as u64);
    DiskSpace {
        free: available.saturating_mul(fragment),
        total: blocks.saturating_mul(fragment),
        inodes_free,
        inodes_total,
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CpuUsage {
    /// This process, in percent of one core: up to `100 * cores`.
    process: f32,
    /// The machine, in percent of all its cores: up to 100.
    machine: f32,
}

/// CPU time counters read together, so that two samples bound one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuSample {
    /// Seconds since boot (/proc/uptime): the clock /proc/self/stat's start time counts on.
    uptime: f64,
    /// This process's user and system time (all threads), in clock ticks.
    process_ticks: u64,
    /// When this process started, in seconds since boot.
    process_started_at: f64,
    /// The machine's busy time (everything but idle and iowait), in clock ticks, all cores.
    machine_busy_ticks: u64,
    machine_total_ticks: u64,
    cores: u32,
    ticks_per_second: f64,
}

impl CpuSample {
    fn read() -> Option<CpuSample> {
        // SAFETY: sysconf only reads a configuration value.
        let ticks_per_second = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
            ticks if ticks > 0 => ticks as f64,
            _ => 100.0,
        };
        let uptime = read("/proc/uptime")
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let process = process_stat(&read("/proc/self/stat"))?;
        let machine = machine_stat(&read("/proc/stat"))?;
        Some(CpuSample {
            uptime,
            process_ticks: process.cpu_ticks,
            process_started_at: process.start_ticks as f64 / ticks_per_second,
            machine_busy_ticks: machine.busy_ticks,
            machine_total_ticks: machine.total_ticks,
            cores: machine.cores,
            ticks_per_second,
        })
    }

    /// The counters as they stood when this process started: no process CPU time yet, and
    /// the machine's counters taken as zero (so the first figure covers the time since boot).
    fn at_process_start(&self) -> CpuSample {
        CpuSample {
            uptime: self.process_started_at,
            process_ticks: 0,
            machine_busy_ticks: 0,
            machine_total_ticks: 0,
            ..*self
        }
    }
}

/// Usage between two samples; an empty interval reads as 0.
fn usage_between(earlier: &CpuSample, later: &CpuSample) -> CpuUsage {
    let wall_seconds = later.uptime - earlier.uptime;
    let process_seconds =
        later.process_ticks.saturating_sub(earlier.process_ticks) as f64 / later.ticks_per_second;
    let process = if wall_seconds > 0.0 {
        process_seconds / wall_seconds * 100.0
    } else {
        0.0
    };
    let busy = later
        .machine_busy_ticks
        .saturating_sub(earlier.machine_busy_ticks);
    let total = later
        .machine_total_ticks
        .saturating_sub(earlier.machine_total_ticks);
    let machine = if total > 0 {
        busy as f64 / total as f64 * 100.0
    } else {
        0.0
    };
    // Tick and uptime granularity (10 ms) can push a short interval's ratio past its bound.
    CpuUsage {
        process: process.clamp(0.0, 100.0 * f64::from(later.cores.max(1))) as f32,
        machine: machine.clamp(0.0, 100.0) as f32,
    }
}

/// An interval shorter than this would be mostly tick rounding; a stats call that comes
/// sooner gets the previous call's figures.
const CPU_INTERVAL_MIN_SECONDS: f64 = 1.0;

/// The sample the previous figure was measured up to, and that figure.
static LAST_CPU: Mutex<Option<(CpuSample, CpuUsage)>> = Mutex::new(None);

/// CPU usage since the previous call (at least `CPU_INTERVAL_MIN_SECONDS` back); the first
/// call measures the process since it started and the machine since boot.
fn cpu_usage() -> CpuUsage {
    let Some(now) = CpuSample::read() else {
        return CpuUsage::default();
    };
    let mut last = LAST_CPU.lock().unwrap_or_else(PoisonError::into_inner);
    let usage = match *last {
        Some((previous, usage)) if now.uptime - previous.uptime < CPU_INTERVAL_MIN_SECONDS => {
            return usage;
        }
        Some((previous, _)) => usage_between(&previous, &now),
        None => usage_between(&now.at_process_start(), &now),
    };
    *last = Some((now, usage));
    usage
}

struct ProcessStat {
    cpu_ticks: u64,
    start_ticks: u64,
}

/// utime + stime (fields 14, 15) and starttime (22) of a /proc/<pid>/stat line.
fn process_stat(stat: &str) -> Option<ProcessStat> {
    // The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(ProcessStat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
    })
}

struct MachineStat {
    busy_ticks: u64,
    total_ticks: u64,
    cores: u32,
}

/// The first `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal guest
/// guest_nice. Guest time is already counted in user and nice, so it is left out of the total.
fn machine_stat(stat: &str) -> Option<MachineStat> {
    let mut lines = stat.lines();
    let times: Vec<u64> = lines
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = times.iter().sum();
    let idle = times.get(3).copied().unwrap_or(0) + times.get(4).copied().unwrap_or(0);
    let cores = lines.take_while(|line| line.starts_with("cpu")).count() as u32;
    Some(MachineStat {
        busy_ticks: total.saturating_sub(idle),
        total_ticks: total,
        cores,
    })
}

/// Descriptors a partition keeps open while it runs, at most: its journal, its active segment
/// and that segment's index, and the closed segments' logs kept open for reads (however many
/// segments it holds, see `iggy_storage::partition_log::CLOSED_LOGS_OPEN_MAX`).
pub const DESCRIPTORS_PER_PARTITION: u64 =
    3 + iggy_storage::partition_log::CLOSED_LOGS_OPEN_MAX as u64;

/// This process's open-files limit (`RLIMIT_NOFILE`, soft), or `None` when unlimited or
/// unreadable.
pub fn open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the one struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Raises the open-files limit to its hard limit (systemd's default soft limit of 1024 would
/// run a node out of descriptors at a few hundred partitions) and returns the limit then in
/// force. A failure keeps the soft limit.
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) and setrlimit(2) read or write the one struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    open_files_limit()
}

/// The memory this process may use: the machine's (`MemTotal`), or its cgroup's limit when
/// lower (a container's `memory.max`, v2, or `memory.limit_in_bytes`, v1); `None` when
/// unreadable.
pub fn memory_limit() -> Option<u64> {
    let total = Some(kilobytes(&read("/proc/meminfo"), "MemTotal:")).filter(|&bytes| bytes > 0);
    let cgroup = cgroup_memory_limit(&read("/proc/self/cgroup"), |path| {
        std::fs::read_to_string(path).ok()
    });
    match (total, cgroup) {
        (Some(total), Some(cgroup)) => Some(total.min(cgroup)),
        (total, cgroup) => total.or(cgroup),
    }
}

/// The memory limit of the cgroup named in `cgroups` (`/proc/self/cgroup`), read through
/// `read_file`; `None` when it sets none ("max", or v1's huge "unlimited" value).
fn cgroup_memory_limit(cgroups: &str, read_file: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let parse = |text: Option<String>| text?.trim().parse::<u64>().ok();
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        let limit = match controllers {
            // v2: one hierarchy; a container sees its own cgroup at the root.
            "" => parse(read_file(&format!("/sys/fs/cgroup{path}/memory.max")))
                .or_else(|| parse(read_file("/sys/fs/cgroup/memory.max"))),
            v1 if v1.split(',').any(|controller| controller == "memory") => parse(read_file(
                &format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
            ))
            .or_else(|| parse(read_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"))),
            _ => continue,
        };
        // v1 reports "no limit" as a page-rounded i64::MAX.
        if let Some(limit) = limit.filter(|&limit| limit < 1 << 60) {
            return Some(limit);
        }
    }
    None
}

/// Whether a node running `partitions` partitions keeps within `limit` descriptors: the
/// partitions may take at most half of them, the rest staying free for connections, segments
/// being rolled and checkpoint files. `None` (no limit) always fits.
pub fn partitions_fit(partitions: u64, limit: Option<u64>) -> bool {
    limit.is_none_or(|limit| partitions.saturating_mul(DESCRIPTORS_PER_PARTITION) <= limit / 2)
}

/// Descriptors a partition's open finds free before it starts (probed), besides the budget
/// (`partitions_fit`): connections, or the system's limit, may have taken what the budget
/// leaves, and a file open that fails on the way stops the node.
pub const OPEN_HEADROOM: u64 = 32;

/// Whether this process can open `wanted` more descriptors now: opens that many handles of
/// `dir` (a directory that exists) and closes them. The error of the first that fails; only
/// [`out_of_descriptors`] errors say there is no room (another, a missing `dir` say, is left
/// for the open itself to report).
pub fn descriptors_free(dir: &Path, wanted: u64) -> std::io::Result<()> {
    let mut held = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0));
    for _ in 0..wanted {
        held.push(std::fs::File::open(dir)?);
    }
    Ok(())
}

/// Whether `error` is the process (EMFILE) or the system (ENFILE) out of file descriptors.
pub fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// What an operator raises when `error` ([`out_of_descriptors`]) happened, naming the limit.
pub fn descriptor_limit_named(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENFILE) => {
            "the system's open files limit (fs.file-max) is reached: raise it or close files \
             elsewhere"
                .to_string()
        }
        _ => match open_files_limit() {
            Some(limit) => format!(
                "this process reached its open files limit of {limit} (ulimit -n; LimitNOFILE= \
                 under systemd): raise it, or free descriptors (fewer partitions or connections)"
            ),
            None => "this process is out of file descriptors".to_string(),
        },
    }
}

/// Inodes below which a node warns: a topic create takes a few per partition.
const LOW_INODES: u64 = 1024;

/// The warning a node gives when the filesystem of its data directory `path` has little room
/// left: fewer than two of the largest frames' bytes (`frame`), or few inodes. `None` when
/// there is room, and for a `space` that could not be read (all zero).
pub fn low_room_warning(path: &Path, space: DiskSpace, frame: u64) -> Option<String> {
    let limits_inodes = space.inodes_total > 0;
    let low_bytes = space.total > 0 && space.free < frame.saturating_mul(2);
    let low_inodes = limits_inodes && space.inodes_free < LOW_INODES;
    (low_bytes || low_inodes).then(|| {
        let inodes = match limits_inodes {
            true => space.inodes_free.to_string(),
            false => "unlimited".to_string(),
        };
        format!(
            "data directory {}: {} KiB and {inodes} inodes free on its filesystem; a write \
             that finds no room stops the node (exit 74): free some before it runs out",
            path.display(),
            space.free / 1024,
        )
    })
}

/// Descriptors a node keeps for itself besides its partitions' and its connections': the
/// standard streams, listeners and the QUIC socket, the metadata journal, and the files a
/// checkpoint, a segment roll or a directory fsync opens for a moment.
const NODE_DESCRIPTORS: u64 = 64;
/// Each shard's io_uring and wakeup eventfd.
const DESCRIPTORS_PER_SHARD: u64 = 2;
/// Each peer's replica links, dialed and accepted.
const DESCRIPTORS_PER_PEER: u64 = 2;
/// Connections over the limit answered a refusal at once, each holding its descriptor for a
/// moment (`transport::tcp`).
pub const REFUSALS_MAX: usize = 64;
/// The connections a node admits however low its limit: it must still be reachable.
const CONNECTIONS_MIN: u64 = 8;

/// The client connections a node may hold within `limit` descriptors: the half its partitions
/// may not take, less its own (`shards` runtimes, `peers` replica peers) and the refusals being
/// answered. Connections beyond it would take the descriptors a checkpoint or a new partition
/// needs, and a file open that fails stops the node. `None` (no limit): no bound.
pub fn connections_fit(limit: Option<u64>, shards: usize, peers: usize) -> Option<usize> {
    let limit = limit?;
    let own = NODE_DESCRIPTORS
        + DESCRIPTORS_PER_SHARD * shards as u64
        + DESCRIPTORS_PER_PEER * peers as u64
        + REFUSALS_MAX as u64;
    let fit = (limit / 2).saturating_sub(own).max(CONNECTIONS_MIN);
    Some(usize::try_from(fit).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_threads_and_open_files() {
        let figures = figures(Path::new("."));
        assert!(figures.memory_usage > 0 && figures.total_memory >= figures.memory_usage);
        assert!(
            figures.threads >= 1
                && figures.open_files >= 1
                && figures.open_files_limit >= figures.open_files
        );
        assert!(!figures.kernel_version.is_empty());
    }

    #[test]
    fn disk_space_of_a_directory_is_measured_and_free_fits_in_total() {
        let dir = tempfile::tempdir().unwrap();
        let space = disk_space(dir.path());
        assert!(space.total > 0, "{space:?}");
        assert!(space.free <= space.total, "{space:?}");
        assert_eq!(
            disk_space(&dir.path().join("missing")),
            DiskSpace::default()
        );
    }

    #[test]
    fn cpu_usage_is_within_its_bounds_and_counts_this_process_working() {
        let cores = CpuSample::read().expect("/proc is readable").cores;
        assert!(cores >= 1);
        let first = cpu_usage();
        // Burn CPU for longer than the minimum interval so the second figure is a new one.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(1100);
        let mut spin = 0u64;
        while std::time::Instant::now() < until {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let second = cpu_usage();
        for usage in [first, second] {
            assert!(
                (0.0..=100.0 * cores as f32).contains(&usage.process),
                "{usage:?} on {cores} cores"
            );
            assert!((0.0..=100.0).contains(&usage.machine), "{usage:?}");
        }
        assert!(second.process > 0.0, "a busy second shows: {second:?}");
        assert!(second.machine > 0.0, "{second:?}");
    }

    #[test]
    fn proc_stat_lines_are_parsed() {
        let process = process_stat("42 (a b) c) S 1 1 1 0 -1 0 0 0 0 0 7 5 0 0 20 0 3 0 900 0 0")
            .expect("parsed");
        assert_eq!((process.cpu_ticks, process.start_ticks), (12, 900));
        let machine = machine_stat(
            "cpu  10 2 3 80 5 0 0 0 4 0\ncpu0 5 1 1 40 2 0 0 0 2 0\ncpu1 5 1 2 40 3 0 0 0 2 0\nintr 1",
        )
        .expect("parsed");
        assert_eq!(
            (machine.busy_ticks, machine.total_ticks, machine.cores),
            (15, 100, 2)
        );
        let earlier = CpuSample {
            uptime: 10.0,
            process_ticks: 100,
            process_started_at: 1.0,
            machine_busy_ticks: 50,
            machine_total_ticks: 400,
            cores: 2,
            ticks_per_second: 100.0,
        };
        let later = CpuSample {
            uptime: 12.0,
            process_ticks: 250,
            machine_busy_ticks: 150,
            machine_total_ticks: 800,
            ..earlier
        };
        assert_eq!(
            usage_between(&earlier, &later),
            CpuUsage {
                process: 75.0,
                machine: 25.0
            }
        );
    }

    #[test]
    fn little_room_warns_naming_the_directory_and_what_is_left() {
        let path = Path::new("/data");
        let frame = 64 << 20;
        let space = |free: u64, inodes_free: u64, inodes_total: u64| DiskSpace {
            free,
            total: 1 << 41,
            inodes_free,
            inodes_total,
        };
        assert_eq!(
            low_room_warning(path, space(1 << 40, 1 << 20, 1 << 21), frame),
            None
        );
        // No inode limit: 0 of 0.
        assert_eq!(low_room_warning(path, space(1 << 40, 0, 0), frame), None);
        let bytes = low_room_warning(path, space(100 << 20, 1 << 20, 1 << 21), frame).unwrap();
        assert!(
            bytes.starts_with("data directory /data: 102400 KiB and 1048576 inodes free"),
            "{bytes}"
        );
        assert!(low_room_warning(path, space(1 << 40, 10, 1 << 21), frame).is_some());
        // Unreadable: nothing to say.
        assert_eq!(low_room_warning(path, DiskSpace::default(), frame), None);
    }

    #[test]
    fn connections_take_what_the_partitions_and_the_node_leave() {
        // 10,000 of 20,000 for connections, less 64 own, 4 for 2 shards and 64 refusals.
        assert_eq!(connections_fit(Some(20_000), 2, 0), Some(9_868));
        // Two peers' links.
        assert_eq!(connections_fit(Some(20_000), 2, 2), Some(9_864));
        assert_eq!(connections_fit(Some(1024), 1, 0), Some(382));
        assert_eq!(connections_fit(Some(128), 2, 0), Some(8));
        assert_eq!(connections_fit(None, 2, 0), None);
    }

    #[test]
    fn the_cgroup_memory_limit_is_read_for_v2_and_v1_and_max_means_none() {
        let files = |path: &str| match path {
            "/sys/fs/cgroup/system.slice/iggy.service/memory.max" => Some("1073741824\n".into()),
            "/sys/fs/cgroup/memory.max" => Some("max\n".into()),
            "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes" => Some("536870912\n".into()),
            "/sys/fs/cgroup/memory/memory.limit_in_bytes" => Some("9223372036854771712\n".into()),
            _ => None,
        };
        let v2 = "0::/system.slice/iggy.service\n";
        assert_eq!(cgroup_memory_limit(v2, files), Some(1 << 30));
        assert_eq!(cgroup_memory_limit("0::/\n", files), None, "max");
        let v1 = "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n";
        assert_eq!(cgroup_memory_limit(v1, files), Some(512 << 20));
        assert_eq!(
            cgroup_memory_limit("4:memory:/\n", files),
            None,
            "unlimited"
        );
        assert!(memory_limit().is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn descriptors_are_probed_and_running_out_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        descriptors_free(dir.path(), 8).unwrap();
        let missing = descriptors_free(&dir.path().join("missing"), 1).unwrap_err();
        assert!(!out_of_descriptors(&missing), "{missing}");
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let enfile = std::io::Error::from_raw_os_error(libc::ENFILE);
        assert!(out_of_descriptors(&emfile) && out_of_descriptors(&enfile));
        assert!(descriptor_limit_named(&enfile).contains("fs.file-max"));
        let named = descriptor_limit_named(&emfile);
        match open_files_limit() {
            Some(limit) => assert!(named.contains(&format!("limit of {limit}")), "{named}"),
            None => assert!(named.contains("out of file descriptors"), "{named}"),
        }
    }

    #[test]
    fn partitions_may_take_half_of_the_descriptors() {
        // 5 descriptors each: 102 partitions take 510 of the 512 they may.
        assert_eq!(DESCRIPTORS_PER_PARTITION, 5);
        assert!(partitions_fit(102, Some(1024)));
        assert!(!partitions_fit(103, Some(1024)));
        assert!(partitions_fit(0, Some(0)));
        assert!(!partitions_fit(1, Some(5)));
        assert!(partitions_fit(u64::MAX, None));
    }
}
