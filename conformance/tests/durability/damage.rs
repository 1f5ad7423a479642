//! Damaged storage: a data directory written by the server (Persisted topic, small segments) is
//! copied, one or two of its files are damaged at seeded random positions — the last segment,
//! a closed segment, an index, the partition journal, the metadata journal, a checkpoint slot;
//! cut short or with bits flipped — and the server is started on the copy. It must either refuse
//! with a non-zero exit and a message naming the damaged file, or start; when it starts:
//!
//! - every message it serves is exactly the one acknowledged at that offset (never a corrupt or
//!   invented one), offsets run 0, 1, 2, … — a prefix of what was written;
//! - a partition it cannot recover is not served, and the log names its directory or file;
//! - when messages were dropped, the log says so ("dropping …");
//! - damage confined to indexes loses nothing: an index is rebuilt from its segment. A segment is
//!   the only copy of its messages (the journal holds a stand-in for each send, not the batch),
//!   so damage there may lose the messages from the damaged record on, served as a prefix;
//! - the partition takes new writes at the next offset, and a second crash recovers the same.

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

type Sent = Vec<(u128, Vec<u8>)>;

fn ident(s: &str) -> Identifier {
    Identifier::named(s).unwrap()
}

/// Writes the pristine directory and returns its messages by offset.
async fn pristine(env: &[(&str, &str)], rng: &mut StdRng) -> (Server, Sent) {
    let mut server = Server::new(env);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let client = server.client().await;
    within(
        "create stream",
        client.create_stream("s", &StreamCreateOptions::default()),
    )
    .await
    .unwrap();
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        durability: Durability::Persisted,
        consumer_offset_durability: Durability::Persisted,
        ..Default::default()
    };
    within(
        "create topic",
        client.create_topic(&ident("s"), "t", &options),
    )
    .await
    .unwrap();
    let mut sent = Sent::new();
    for batch in 0..30u128 {
        let n = rng.random_range(1..=4);
        let mut messages = Vec::new();
        for i in 0..n {
            let id = (batch << 16) | (i as u128 + 1);
            let len = rng.random_range(8..200);
            let mut payload = format!("b{batch}-m{i}-").into_bytes();
            payload.extend((0..len).map(|_| rng.random_range(b'A'..=b'Z')));
            messages.push(
                IggyMessage::builder()
                    .id(id)
                    .payload(bytes::Bytes::from(payload.clone()))
                    .build()
                    .unwrap(),
            );
            sent.push((id, payload));
        }
        within(
            "send",
            client.send_messages(
                &ident("s"),
                &ident("t"),
                &Partitioning::partition_id(0),
                &mut messages,
            ),
        )
        .await
        .expect("send");
    }
    within(
        "store offset",
        client.store_consumer_offset(
            &Consumer::new(ident("c")),
            &ident("s"),
            &ident("t"),
            Some(0),
            3,
        ),
    )
    .await
    .expect("store offset");
    drop(client);
    tokio::task::block_in_place(|| server.kill9());
    (server, sent)
}

#[derive(Debug, Clone)]
enum Damage {
    Truncate { file: PathBuf, at: u64 },
    Flip { file: PathBuf, bits: Vec<u64> },
}

impl Damage {
    fn file(&self) -> &Path {
        match self {
            Damage::Truncate { file, .. } | Damage::Flip { file, .. } => file,
        }
    }

    fn apply(&self) {
        match self {
            Damage::Truncate { file, at } => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(file)
                    .unwrap()
                    .set_len(*at)
                    .unwrap();
            }
            Damage::Flip { file, bits } => {
                let mut bytes = std::fs::read(file).unwrap();
                for bit in bits {
                    bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
                std::fs::write(file, bytes).unwrap();
            }
        }
    }
}

/// What a damage can hit, relative to the data directory.
struct Targets {
    logs: Vec<PathBuf>,
    indexes: Vec<PathBuf>,
    partition_journal: PathBuf,
    metadata_journal: PathBuf,
    /// The partition's checkpoint slots that were written.
    checkpoints: Vec<PathBuf>,
}

fn targets(data: &Path) -> Targets {
    let logs = files_named(data, ".log");
    assert!(
        logs.len() >= 3,
        "small segments give several .log files: {logs:?}"
    );
    let partition_dir = logs[0].parent().unwrap().to_path_buf();
    let checkpoints = ["checkpoint.0", "checkpoint.1"]
        .into_iter()
        .map(|slot| partition_dir.join(slot))
        .filter(|slot| slot.exists())
        .collect();
    Targets {
        indexes: files_named(data, ".index"),
        partition_journal: partition_dir.join("journal.wal"),
        metadata_journal: data.join("metadata").join("journal.wal"),
        checkpoints,
        logs,
    }
}

fn pick(rng: &mut StdRng, file: &Path, flip: bool) -> Option<Damage> {
    let len = std::fs::metadata(file).ok()?.len();
    if len == 0 {
        return None;
    }
    Some(if flip {
        let bits = (0..rng.random_range(1..=3))
            .map(|_| rng.random_range(0..len * 8))
            .collect();
        Damage::Flip {
            file: file.to_path_buf(),
            bits,
        }
    } else {
        Damage::Truncate {
            file: file.to_path_buf(),
            at: rng.random_range(0..len),
        }
    })
}

/// Whether only indexes were damaged: each is rebuilt from its segment, so nothing is lost.
fn indexes_only(damages: &[Damage], targets: &Targets) -> bool {
    damages
        .iter()
        .all(|d| targets.indexes.iter().any(|i| i == d.file()))
}

fn choose(rng: &mut StdRng, t: &Targets) -> Vec<Damage> {
    loop {
        let last = t.logs.last().unwrap();
        let closed = t.logs[..t.logs.len() - 1].choose(rng).unwrap();
        let index = t.indexes.choose(rng).unwrap();
        let kind = rng.random_range(0..11);
        let damages: Vec<Option<Damage>> = match kind {
            0 => vec![pick(rng, last, false)],
            1 => vec![pick(rng, last, true)],
            2 => vec![pick(rng, index, false)],
            3 => vec![pick(rng, index, true)],
            4 => vec![pick(rng, &t.partition_journal, false)],
            5 => vec![pick(rng, &t.partition_journal, true)],
            6 => vec![pick(rng, &t.metadata_journal, false)],
            7 => vec![pick(rng, &t.metadata_journal, true)],
            8 => vec![pick(rng, closed, true)],
            9 => vec![
                pick(rng, last, false),
                pick(rng, &t.partition_journal, false),
            ],
            _ => match t.checkpoints.choose(rng) {
                // Either slot: damage to the older one is survived, damage to the newest falls
                // back to the older one only while the journal still holds the ops after it.
                Some(checkpoint) => {
                    let flip = rng.random_bool(0.5);
                    vec![pick(rng, checkpoint, flip)]
                }
                None => vec![pick(rng, last, false), pick(rng, index, true)],
            },
        };
        if damages.iter().all(Option::is_some) {
            return damages.into_iter().flatten().collect();
        }
    }
}

#[derive(Default, Debug)]
struct Outcomes {
    trials: u64,
    refused_at_start: u64,
    partition_not_served: u64,
    topic_lost_with_metadata: u64,
    served_whole: u64,
    served_prefix: u64,
    messages_checked: u64,
}

/// Reads the partition; `Err` when the server does not serve it.
async fn read_all(client: &IggyClient) -> Result<Vec<IggyMessage>, String> {
    let consumer = Consumer::new(ident("reader"));
    let mut out: Vec<IggyMessage> = Vec::new();
    loop {
        let next = out.last().map_or(0, |m| m.header.offset + 1);
        let polled = within(
            "poll",
            client.poll_messages(
                &ident("s"),
                &ident("t"),
                Some(0),
                &consumer,
                &PollingStrategy::offset(next),
                1000,
                false,
            ),
        )
        .await
        .map_err(|e| format!("{e} (code {})", e.as_code()))?;
        if polled.messages.is_empty() {
            return Ok(out);
        }
        out.extend(polled.messages);
    }
}

fn check_served(messages: &[IggyMessage], sent: &Sent, what: &str) {
    assert!(
        messages.len() <= sent.len(),
        "{what}: {} messages served, only {} were written",
        messages.len(),
        sent.len()
    );
    for (index, message) in messages.iter().enumerate() {
        assert_eq!(
            message.header.offset, index as u64,
            "{what}: offsets must run 0,1,2,…"
        );
        let (id, payload) = &sent[index];
        assert!(
            message.header.id == *id && message.payload[..] == payload[..],
            "{what}: offset {index} serves a message that is not the one written there (corrupt or invented)"
        );
    }
}

async fn trial(
    pristine_data: &Path,
    env: &[(&str, &str)],
    sent: &Sent,
    rng: &mut StdRng,
    number: u64,
    outcomes: &mut Outcomes,
) {
    let mut server = Server::new(env);
    copy_tree(pristine_data, &server.system_path);
    let t = targets(&server.system_path);
    let damages = choose(rng, &t);
    for damage in &damages {
        damage.apply();
    }
    let relative: Vec<String> = damages
        .iter()
        .map(|d| format!("{d:?}").replace(&server.system_path.display().to_string(), "<data>"))
        .collect();
    let what = format!("trial {number}: {relative:?}");
    outcomes.trials += 1;
    let started = tokio::task::block_in_place(|| server.try_spawn(&[]));
    if let Started::Exited(status) = started {
        let log = server.log();
        assert!(
            !status.success(),
            "{what}: the server exited with success instead of serving or refusing"
        );
        assert!(
            damages
                .iter()
                .any(|d| log.contains(&d.file().display().to_string())),
            "{what}: the server refused to start ({status}) without naming the damaged file:\n{}",
            server.log_tail(30)
        );
        outcomes.refused_at_start += 1;
        return;
    }
    let client = server.client().await;
    let topic = within("get topic", client.get_topic(&ident("s"), &ident("t")))
        .await
        .expect("get topic");
    if topic.is_none() {
        assert!(
            damages.iter().any(|d| d.file() == t.metadata_journal),
            "{what}: the topic vanished although the metadata journal was not damaged"
        );
        // A cut inside a record is logged as dropped bytes; a cut at a record boundary leaves a
        // partition directory the metadata no longer knows, which is logged instead.
        let log = server.log();
        assert!(
            log.contains("dropping") || log.contains("not in the metadata"),
            "{what}: metadata ops were dropped without a word in the log"
        );
        outcomes.topic_lost_with_metadata += 1;
        return;
    }
    let served = match read_all(&client).await {
        Ok(messages) => messages,
        Err(error) => {
            let log = server.log();
            let partition_dir = t.partition_journal.parent().unwrap().display().to_string();
            assert!(
                log.contains(&partition_dir)
                    || damages
                        .iter()
                        .any(|d| log.contains(&d.file().display().to_string())),
                "{what}: the partition is not served ({error}) and the log does not name it:\n{}",
                server.log_tail(30)
            );
            outcomes.partition_not_served += 1;
            return;
        }
    };
    check_served(&served, sent, &what);
    outcomes.messages_checked += served.len() as u64;
    if indexes_only(&damages, &t) {
        assert_eq!(
            served.len(),
            sent.len(),
            "{what}: only indexes were damaged, yet messages were lost:\n{}",
            server.log_tail(30)
        );
    }
    if served.len() < sent.len() {
        assert!(
            server.log().contains("dropping"),
            "{what}: {} acknowledged messages were dropped without a word in the log:\n{}",
            sent.len() - served.len(),
            server.log_tail(40)
        );
        outcomes.served_prefix += 1;
    } else {
        outcomes.served_whole += 1;
    }
    // New writes land at the next offset; a second crash recovers the same history.
    let mut late = vec![
        IggyMessage::builder()
            .id(u128::MAX - 1)
            .payload(bytes::Bytes::from_static(b"late"))
            .build()
            .unwrap(),
    ];
    let response = within(
        "send after recovery",
        client.send_messages(
            &ident("s"),
            &ident("t"),
            &Partitioning::partition_id(0),
            &mut late,
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: send after recovery: {e}"));
    assert_eq!(
        response.confirmations[0].base_offset,
        served.len() as u64,
        "{what}: next offset after recovery"
    );
    drop(client);
    tokio::task::block_in_place(|| {
        server.kill9();
        server.spawn(&[]);
    });
    let client = server.client().await;
    let again = read_all(&client)
        .await
        .unwrap_or_else(|e| panic!("{what}: after a second crash: {e}"));
    let mut expected = sent[..served.len()].to_vec();
    expected.push((u128::MAX - 1, b"late".to_vec()));
    check_served(&again, &expected, &format!("{what}, second recovery"));
    assert_eq!(
        again.len(),
        expected.len(),
        "{what}: the second recovery lost messages"
    );
}

async fn damage_trials(test: &str, env: &[(&str, &str)], default_trials: u64) {
    let (seed, _guard) = seed(test);
    let mut rng = rng(seed, 1);
    let started = Instant::now();
    let (pristine_server, sent) = pristine(env, &mut rng).await;
    let trials = knob("DURABILITY_DAMAGE_TRIALS", default_trials);
    let mut outcomes = Outcomes::default();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for number in 0..trials {
        trial(
            &pristine_server.system_path,
            env,
            &sent,
            &mut rng,
            number,
            &mut outcomes,
        )
        .await;
        *kinds.entry("trials".into()).or_default() += 1;
    }
    eprintln!(
        "{test} figures: seed {seed}, {} messages written, {outcomes:?}, elapsed {:.1?}",
        sent.len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_segments_indexes_and_journals_are_recovered_to_a_valid_prefix_or_refused() {
    damage_trials(
        "damaged_segments_indexes_and_journals_are_recovered_to_a_valid_prefix_or_refused",
        &[
            ("IGGY_SYSTEM_DURABILITY", "persisted"),
            ("IGGY_SYSTEM_SEGMENT_SIZE", "2048"),
        ],
        10,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_after_checkpoints_is_recovered_to_a_valid_prefix_or_refused() {
    damage_trials(
        "damage_after_checkpoints_is_recovered_to_a_valid_prefix_or_refused",
        &[
            ("IGGY_SYSTEM_DURABILITY", "persisted"),
            ("IGGY_SYSTEM_SEGMENT_SIZE", "2048"),
            ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "7"),
        ],
        8,
    )
    .await;
}
