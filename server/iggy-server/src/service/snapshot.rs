//! System snapshot (command 11): a ZIP archive of diagnostic files for an operator or a bug
//! report. Entries are stored as they are (Stored) or deflated (Deflated, and each of the
//! compressions this build does not carry: Bzip2, Zstd, Lzma, Xz, which would each add a
//! codec library for a few kilobytes of text; every unzip reads Deflate).

use crate::runtime::node::Node;
use iggy_generated::errors::ErrorCode;
use std::io::Write;

const FILESYSTEM_OVERVIEW: u8 = 1;
const PROCESS_LIST: u8 = 2;
const RESOURCE_USAGE: u8 = 3;
const TEST: u8 = 4;
const SERVER_LOGS: u8 = 5;
const SERVER_CONFIG: u8 = 6;

/// What `server_logs` holds: the server keeps no log file to copy.
const SERVER_LOGS_NOTE: &str = "iggy-server writes its log to stderr ([system.logging] level and \
format) and keeps no log file, so this snapshot holds none: collect it where stderr goes \
(journalctl -u iggy-server, docker logs, the terminal).\n";
const ALL: u8 = 100;

/// The compressions the official client names (Stored, Deflated, Bzip2, Zstd, Lzma, Xz).
const COMPRESSIONS: std::ops::RangeInclusive<u8> = 1..=6;
const STORED: u8 = 1;

/// Refuses, as the official codec does (InvalidCommand), a compression or a snapshot type it
/// does not define: a client asking for one (a newer SDK's) is told so, rather than served an
/// archive without what it asked for. `all` stands alone, as upstream has it.
pub fn check_request(compression: u8, types: &[u8]) -> Result<(), ErrorCode> {
    let known_type =
        |code: &u8| (FILESYSTEM_OVERVIEW..=SERVER_CONFIG).contains(code) || *code == ALL;
    let all_alone = !types.contains(&ALL) || types.len() == 1;
    match COMPRESSIONS.contains(&compression) && types.iter().all(known_type) && all_alone {
        true => Ok(()),
        false => Err(ErrorCode::InvalidCommand),
    }
}

/// Builds the archive with one entry per requested snapshot type this server can produce;
/// `all` is every type but `test` (the official client's `all_snapshot_types`).
pub fn archive(node: &Node, compression: u8, types: &[u8]) -> Result<Vec<u8>, ErrorCode> {
    let wants = |code: u8| types.contains(&code) || (types.contains(&ALL) && code != TEST);
    let mut files: Vec<(&str, String)> = Vec::new();
    if wants(TEST) {
        files.push(("test.txt", "test\n".to_string()));
    }
    if wants(SERVER_CONFIG) {
        files.push(("server_config.txt", format!("{:#?}\n", node.shared.config)));
    }
    if wants(FILESYSTEM_OVERVIEW) {
        files.push(("filesystem_overview.txt", filesystem_overview(node)));
    }
    if wants(PROCESS_LIST) {
        files.push(("process_list.txt", process_list()));
    }
    if wants(RESOURCE_USAGE) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        files.push(("resource_usage.txt", status));
    }
    if wants(SERVER_LOGS) {
        files.push(("server_logs.txt", SERVER_LOGS_NOTE.to_string()));
    }
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = match compression {
        STORED => zip::CompressionMethod::Stored,
        _ => zip::CompressionMethod::Deflated,
    };
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, text) in files {
        writer
            .start_file(name, options)
            .map_err(|_| ErrorCode::SnapshotFileCompletionFailed)?;
        writer
            .write_all(text.as_bytes())
            .map_err(|_| ErrorCode::SnapshotFileCompletionFailed)?;
    }
    let cursor = writer
        .finish()
        .map_err(|_| ErrorCode::SnapshotFileCompletionFailed)?;
    Ok(cursor.into_inner())
}

/// The host's processes from `/proc`, one a line: pid, parent pid, state, resident KiB and
/// program (the name in brackets for a kernel thread). Never the arguments: a snapshot needs
/// only `read_servers`, and another program's arguments may hold its passwords.
fn process_list() -> String {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut out = String::from("PID PPID STATE RSS_KIB PROGRAM (arguments left out)\n");
    for pid in pids {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (state, ppid) = (rest.first().unwrap_or(&"?"), rest.get(1).unwrap_or(&"?"));
        // VmRSS is in kB whatever the page size (kernel threads have none).
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib = crate::runtime::host::kilobytes(&status, "VmRSS:") / 1024;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let program = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
        let command = match String::from_utf8_lossy(program).trim() {
            "" => format!("[{name}]"),
            program => program.to_string(),
        };
        out.push_str(&format!("{pid} {ppid} {state} {rss_kib} {command}\n"));
    }
    out
}

/// The data directory's files with their sizes.
fn filesystem_overview(node: &Node) -> String {
    let mut out = String::new();
    let mut pending = vec![node.shared.data.root().to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(path),
                Ok(meta) => out.push_str(&format!("{:>14} {}\n", meta.len(), path.display())),
                Err(_) => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_compressions_and_types_the_official_client_defines_are_taken() {
        assert_eq!(check_request(1, &[ALL]), Ok(()));
        assert_eq!(check_request(6, &[1, 2, 3, 4, 5, 6]), Ok(()));
        for (compression, types) in [
            (1, &[ALL, 4][..]),
            (1, &[1, ALL]),
            (0, &[4][..]),
            (7, &[4]),
            (255, &[4]),
            (1, &[0]),
            (1, &[7]),
            (1, &[99, 4]),
        ] {
            assert_eq!(
                check_request(compression, types),
                Err(ErrorCode::InvalidCommand),
                "{compression} {types:?}"
            );
        }
    }
}
