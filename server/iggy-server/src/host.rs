//! What the host reports about this process and machine (for stats, command 10), read from
//! Linux's /proc. A figure that cannot be read is reported as 0 or empty.

/// Bytes of a `Key:   N kB` line in a /proc status-like file.
fn kilobytes(text: &str, key: &str) -> u64 {
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
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    pub read_bytes: u64,
    pub hostname: String,
    pub os_version: String,
    pub kernel_version: String,
    pub threads: u32,
    pub open_files: u64,
    pub open_files_limit: u64,
}

pub fn figures() -> HostFigures {
    let status = read("/proc/self/status");
    let meminfo = read("/proc/meminfo");
    let io = read("/proc/self/io");
    let os_release = read("/etc/os-release");
    let limits = read("/proc/self/limits");
    HostFigures {
        memory_usage: kilobytes(&status, "VmRSS:"),
        total_memory: kilobytes(&meminfo, "MemTotal:"),
        available_memory: kilobytes(&meminfo, "MemAvailable:"),
        read_bytes: io
            .lines()
            .find_map(|line| line.strip_prefix("read_bytes:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0),
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
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_memory_threads_and_open_files() {
        let figures = super::figures();
        assert!(figures.memory_usage > 0 && figures.total_memory >= figures.memory_usage);
        assert!(
            figures.threads >= 1
                && figures.open_files >= 1
                && figures.open_files_limit >= figures.open_files
        );
        assert!(!figures.kernel_version.is_empty());
    }
}
