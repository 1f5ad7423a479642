//! `fail_stop` from several threads at once (shards whose writes fail on one full disk): the
//! process logs one `storage failure` line, the first, and exits 74.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};

const CHILD: &str = "IGGY_STORAGE_TEST_FAIL_STOP_CHILD";
const NAME: &str = "storage_failures_on_several_threads_at_once_log_one_line_and_exit_74";

#[test]
fn storage_failures_on_several_threads_at_once_log_one_line_and_exit_74() {
    if std::env::var_os(CHILD).is_some() {
        let barrier = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let path = format!("/data/segment-{i}.log");
                    iggy_storage::fail_stop::fail_stop(
                        "write",
                        Path::new(&path),
                        &std::io::Error::other("No space left on device"),
                    );
                })
            })
            .collect();
        for thread in threads {
            let _ = thread.join();
        }
        unreachable!("fail_stop returned");
    }
    let test_binary = std::env::current_exe().unwrap();
    for run in 0..20 {
        let out = Command::new(&test_binary)
            .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains("storage failure:"))
            .collect();
        assert_eq!(out.status.code(), Some(74), "run {run}: {stderr}");
        assert_eq!(lines.len(), 1, "run {run}: {lines:#?}");
    }
}
