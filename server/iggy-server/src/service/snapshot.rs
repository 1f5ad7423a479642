//! System snapshot (command 11): a ZIP archive of diagnostic files for an operator or a bug
//! report. Entries are stored uncompressed whatever compression the client asks for.

use crate::runtime::node::Node;
use iggy_generated::errors::ErrorCode;
use std::io::Write;

const FILESYSTEM_OVERVIEW: u8 = 1;
const RESOURCE_USAGE: u8 = 3;
const TEST: u8 = 4;
const SERVER_CONFIG: u8 = 6;
const ALL: u8 = 100;

/// Builds the archive with one entry per requested snapshot type this server can produce.
pub fn archive(node: &Node, types: &[u8]) -> Result<Vec<u8>, ErrorCode> {
    let wants = |code: u8| types.contains(&code) || types.contains(&ALL);
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
    if wants(RESOURCE_USAGE) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        files.push(("resource_usage.txt", status));
    }
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
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
