//! Foreign storage and `--fresh`:
//!
//! - a system path holding another format's data — no `storage.format` marker, the older
//!   marker `IGGY-OWNERSHIP-HISTORY-4`, a marker of random bytes, a marker that is a directory,
//!   random files and directories, a regular file instead of a directory — is refused: the
//!   server exits non-zero, before listening, with a message naming the path, and every file
//!   and directory is byte-for-byte as before (hashed before and after);
//! - `--fresh` deletes exactly the configured system path — siblings, a prefix-named sibling
//!   (`data.bak`) and the target of a symlink inside the data directory survive — and only
//!   when given: a start without it keeps the data.

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use rand::rngs::StdRng;
use rand::Rng;
use std::path::Path;
use std::time::Duration;

fn random_tree(rng: &mut StdRng, dir: &Path, depth: u32) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..rng.random_range(1..5) {
        let name = format!("{}{i}", ["seg", "log", "x", "meta", "00000000000000000000"][rng.random_range(0..5)]);
        if depth > 0 && rng.random_bool(0.3) {
            random_tree(rng, &dir.join(name), depth - 1);
        } else {
            let len = rng.random_range(0..4096);
            std::fs::write(dir.join(name), random_bytes(rng, len)).unwrap();
        }
    }
}

/// Builds one foreign directory at `path`; returns its description.
fn build(case: u32, rng: &mut StdRng, path: &Path) -> &'static str {
    match case {
        0 => {
            random_tree(rng, path, 2);
            "random files, no marker"
        }
        1 => {
            std::fs::create_dir_all(path.join("streams/0/topics/0/partitions/0")).unwrap();
            std::fs::write(path.join("storage.format"), "IGGY-OWNERSHIP-HISTORY-4\n").unwrap();
            std::fs::create_dir_all(path.join("metadata")).unwrap();
            std::fs::write(path.join("metadata/journal.wal"), random_bytes(rng, 1000)).unwrap();
            std::fs::write(path.join("streams/0/topics/0/partitions/0/00000000000000000000.log"), random_bytes(rng, 700)).unwrap();
            "older marker IGGY-OWNERSHIP-HISTORY-4"
        }
        2 => {
            random_tree(rng, path, 1);
            std::fs::write(path.join("storage.format"), random_bytes(rng, 40)).unwrap();
            "a marker of random bytes"
        }
        3 => {
            std::fs::create_dir_all(path.join("storage.format")).unwrap();
            std::fs::write(path.join("storage.format/IGGY-OWNERSHIP-HISTORY-5"), b"").unwrap();
            "a marker that is a directory"
        }
        4 => {
            std::fs::create_dir_all(path.join("metadata")).unwrap();
            std::fs::write(path.join("metadata/journal.wal"), random_bytes(rng, 2000)).unwrap();
            std::fs::create_dir_all(path.join("streams/1/topics/1/partitions/0")).unwrap();
            "our layout without a marker"
        }
        _ => {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, random_bytes(rng, 128)).unwrap();
            "a regular file instead of a directory"
        }
    }
}

#[test]
fn foreign_data_directories_are_refused_before_any_change() {
    let (seed, _guard) = seed("foreign_data_directories_are_refused_before_any_change");
    let mut rng = rng(seed, 2);
    for case in 0..6 {
        let mut server = Server::new(&[]);
        let what = build(case, &mut rng, &server.system_path);
        let before = hash_tree(server.root());
        // The server writes its log into the root; compare everything but the log.
        let log_name = server.log_path().file_name().unwrap().to_owned();
        let (status, log) = server.run_expecting_exit(&[], Duration::from_secs(15));
        let mut after = hash_tree(server.root());
        after.remove(Path::new(&log_name));
        let status = status.unwrap_or_else(|| panic!("{what}: the server kept running on a foreign directory:\n{log}"));
        assert!(!status.success(), "{what}: exit status {status} on a foreign directory");
        let path = server.system_path.display().to_string();
        assert!(log.contains(&path), "{what}: the refusal does not name the directory {path}:\n{log}");
        assert!(!log.contains("listening"), "{what}: the server listened before refusing:\n{log}");
        assert_same_tree(what, &before, &after);
        eprintln!("refused ({what}): {}", log.lines().rfind(|l| l.contains(&path)).unwrap_or(""));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_deletes_exactly_the_system_path_and_only_when_given() {
    let (seed, _guard) = seed("fresh_deletes_exactly_the_system_path_and_only_when_given");
    let mut rng = rng(seed, 3);
    let mut server = Server::new(&[]);
    let root = server.root().to_path_buf();
    // Neighbours that must survive.
    random_tree(&mut rng, &root.join("sibling"), 2);
    random_tree(&mut rng, &root.join("data.bak"), 1);
    random_tree(&mut rng, &root.join("victim"), 1);
    std::fs::write(root.join("data-notes.txt"), b"not the data directory").unwrap();

    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    within("create", client.create_stream("old", &StreamCreateOptions::default())).await.unwrap();
    drop(client);
    tokio::task::block_in_place(|| server.kill9());
    // A symlink inside the data directory pointing outside it.
    std::os::unix::fs::symlink(root.join("victim"), server.system_path.join("link-to-victim")).unwrap();

    let outside = |root: &Path| {
        let mut tree = hash_tree(root);
        tree.retain(|path, _| !path.starts_with("data/") && path != Path::new("data") && path != Path::new("server.log"));
        tree
    };
    let before = outside(&root);

    // Without --fresh the data stays.
    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    let old = within("get", client.get_stream(&Identifier::named("old").unwrap())).await.unwrap();
    assert!(old.is_some(), "a start without --fresh keeps the data");
    drop(client);
    tokio::task::block_in_place(|| server.kill9());

    // With --fresh the system path starts empty; nothing outside it changes.
    tokio::task::block_in_place(|| server.spawn(&["--fresh"]));
    let client = server.client().await;
    let old = within("get", client.get_stream(&Identifier::named("old").unwrap())).await.unwrap();
    assert!(old.is_none(), "--fresh removed the old data");
    within("create", client.create_stream("new", &StreamCreateOptions::default())).await.unwrap();
    drop(client);
    tokio::task::block_in_place(|| server.kill9());
    assert!(!server.system_path.join("link-to-victim").exists(), "--fresh removed the whole system path");
    assert!(server.system_path.join("storage.format").is_file(), "the fresh directory carries the marker");
    assert_same_tree("--fresh: outside the system path", &before, &outside(&root));

    // And the next plain start keeps what the fresh one wrote.
    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    let new = within("get", client.get_stream(&Identifier::named("new").unwrap())).await.unwrap();
    assert!(new.is_some(), "data written after --fresh survives a plain restart");
}
