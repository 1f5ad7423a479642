//! The write-ahead journal of one consensus group: a file of `[PrepareHeader][body]` records
//! (the generated 256-byte `PrepareHeader`), one per prepared op, in op order.
//!
//! Recovery reads the valid prefix: the first record that is torn, fails its checksum, breaks
//! the op sequence or does not chain to its predecessor ends the journal, and the file is cut
//! there (logged), so a crash in the middle of an append loses only the unacknowledged tail.
//!
//! Chain: every record's `parent` is the checksum of the op before it (the first op after a
//! checkpoint: the checkpoint's, which `iggy_vsr::Checkpoint::checksum` keeps), so a whole,
//! valid record that a reused file still holds after the journal's end, with the very op
//! number recovery expects next, is never replayed. Journals of earlier builds have parent 0
//! everywhere: a zero parent is accepted until the first record with a nonzero one (legacy
//! records only ever precede chained ones), and never after it.
//!
//! Cluster: every record carries its cluster's id (`cluster`, see `consensus::cluster`); a
//! journal whose first record is of another cluster refuses the start before anything is
//! changed. A later record is judged by its chain: the cluster is outside the op's checksum,
//! so one that chains to the record before it is ours with damaged cluster bytes. Cluster 0 is
//! a record of an earlier build, accepted.
//!
//! After a checkpoint that covers every record the journal starts again at position 0 over its
//! old records instead of being truncated: overwriting pages already in the page cache is
//! cheaper than allocating new ones, and an overwrite does not change the file size, so a
//! `fdatasync` has no metadata to write. The old records beyond the new end carry ops at or
//! below the checkpoint, so they end the recovery walk as out of sequence. A checkpoint below
//! the newest record leaves the records it covers in place before the ones it keeps (a start
//! skips them), up to [`COVERED_PREFIX_MAX`] bytes of them: then the kept records move to a
//! fresh file (see [`FileJournal::reset_after_checkpoint`]). So the file holds at most that
//! much more than one checkpoint's worth of journal plus one record.
//!
//! A failed write, truncation or fsync of the journal stops the process (see
//! `iggy_storage::fail_stop`): an op whose record may not be on disk is never acknowledged, and
//! the group does not go on accepting over a journal it cannot trust.

use crate::consensus::group::Journal;
pub use crate::consensus::group::JournalEntry;
use bytes::Bytes;
use compio::fs::{File, OpenOptions};
use compio::io::{AsyncReadAtExt, AsyncWriteAtExt};
use iggy_generated::frames::{Command, PrepareHeader};
use iggy_storage::fail_stop::{OrStop, Synced};
use iggy_storage::stall::{Op, watch, watch_path};
use iggy_storage::verify::Severity;
use iggy_vsr::Entry;
use iggy_vsr::codec::entry_header;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const HEADER_SIZE: usize = PrepareHeader::SIZE;

/// The most bytes of records a checkpoint covers that the journal leaves in place before the
/// records it keeps, instead of moving those to a fresh file (a write and two fsyncs in the
/// group's path). A partition's records are mostly stand-ins of a few hundred bytes, so this
/// is many checkpoints' worth; a start reads them and skips them.
const COVERED_PREFIX_MAX: u64 = 4 << 20;

/// A group's journal file, open for appends.
pub struct FileJournal {
    file: File,
    path: PathBuf,
    /// Stamped on every record.
    cluster: u128,
    /// The op before the first record: the checkpoint the journal continues from.
    base: u64,
    /// Checksum of the op at `base`: the parent of a record appended at `base + 1`.
    base_checksum: u64,
    /// File position of each op's record: `positions[op - base - 1]`.
    positions: Vec<u64>,
    /// Checksum of each op's record, beside `positions`: the parent of the next one.
    checksums: Vec<u64>,
    /// File position of the first record held: the records before it are covered by the
    /// checkpoint (left in place, see [`FileJournal::reset_after_checkpoint`]).
    start: u64,
    /// Where the records end: the next append's position.
    len: u64,
}

/// What a journal continues from and whose it is: the checkpoint's op and the checksum of its
/// entry (the first record's parent), and the cluster every record must carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anchor {
    pub cluster: u128,
    pub op: u64,
    pub checksum: u64,
}

impl Anchor {
    /// The anchor of this node's group that starts from `checkpoint` (`None`: from op 0).
    pub fn after(checkpoint: Option<&iggy_vsr::Checkpoint>) -> Anchor {
        Anchor {
            cluster: crate::consensus::cluster::node_cluster(),
            op: checkpoint.map_or(0, |checkpoint| checkpoint.op),
            checksum: checkpoint.map_or(0, |checkpoint| checkpoint.checksum),
        }
    }
}

/// Why a walk ended at a whole, valid record that does not continue the chain.
const CHAIN_BROKEN: &str = "parent does not chain to the op before it";

/// `checksum_body` of a record holding a stand-in: never zero (zero marks a whole body).
fn stand_in_checksum(stand_in: &[u8]) -> u128 {
    (1u128 << 64) | u128::from(twox_hash::XxHash3_64::oneshot(stand_in))
}

fn encode_header(
    entry: &Entry,
    stand_in: Option<&Bytes>,
    parent: u64,
    cluster: u128,
) -> Option<[u8; HEADER_SIZE]> {
    let body_len = stand_in.map_or(entry.body.len(), |stand_in| stand_in.len());
    let header = PrepareHeader {
        checksum: u128::from(entry.checksum),
        checksum_body: stand_in.map_or(0, |stand_in| stand_in_checksum(stand_in)),
        cluster,
        parent: u128::from(parent),
        ..entry_header(entry, body_len)?
    };
    Some(header.to_bytes())
}

/// A whole record whose checksum holds.
struct Record {
    entry: JournalEntry,
    size: usize,
    parent: u128,
    cluster: u128,
}

/// Decodes the record at the start of `bytes` if it is whole and valid and carries `op` (any
/// op for the first record). Its parent and cluster are the walk's to judge.
fn decode_record(bytes: &Bytes, op: Option<u64>) -> Result<Record, &'static str> {
    if bytes.len() < HEADER_SIZE {
        return Err("torn header");
    }
    let header =
        PrepareHeader::decode_fixed(&bytes[..HEADER_SIZE]).map_err(|_| "undecodable header")?;
    if header.command != Command::Prepare {
        return Err("not a prepare record");
    }
    let size = header.size as usize;
    if size < HEADER_SIZE {
        return Err("record size below the header");
    }
    if size > bytes.len() {
        return Err("torn body");
    }
    if op.is_some_and(|op| header.op != op) || header.op == 0 {
        return Err("op out of sequence");
    }
    let entry = Entry {
        op: header.op,
        view: header.view,
        client: header.client,
        request: header.request,
        operation: header.operation.to_repr(),
        body: bytes.slice(HEADER_SIZE..size),
        checksum: header.checksum as u64,
    };
    if header.checksum >> 64 != 0 {
        return Err("checksum mismatch");
    }
    if header.checksum_body != 0 {
        if header.checksum_body != stand_in_checksum(&entry.body) {
            return Err("stand-in checksum mismatch");
        }
        return Ok(Record {
            entry: JournalEntry::Stowed(entry),
            size,
            parent: header.parent,
            cluster: header.cluster,
        });
    }
    if !entry.is_valid() {
        return Err("checksum mismatch");
    }
    Ok(Record {
        entry: JournalEntry::Whole(entry),
        size,
        parent: header.parent,
        cluster: header.cluster,
    })
}

/// Whether `record` may follow `previous` (the walk's last record, `None` at the start of the
/// file) in a journal anchored at `anchor`, and if so whether the journal is chained from it
/// on (`chained`: a record with a nonzero parent was seen; after one, a zero parent is a record
/// of an earlier build left behind, not a legacy journal going on).
fn chain(
    record: &Record,
    previous: Option<&JournalEntry>,
    anchor: Anchor,
    chained: bool,
) -> Result<bool, &'static str> {
    let op = record.entry.entry().op;
    let expected = match previous {
        Some(previous) => Some(previous.entry().checksum),
        None if op == anchor.op + 1 => Some(anchor.checksum),
        // The file starts with ops the checkpoint covers: their predecessor is gone.
        None => None,
    };
    let linked = match expected {
        Some(expected) => record.parent == u128::from(expected),
        None => true,
    };
    if linked {
        Ok(chained || record.parent != 0)
    } else if record.parent == 0 && !chained {
        Ok(false)
    } else {
        Err(CHAIN_BROKEN)
    }
}

/// A record of a cluster other than `ours` (0 is an earlier build's record: any cluster's).
fn foreign(record: &Record, ours: u128) -> bool {
    record.cluster != 0 && record.cluster != ours
}

/// The start-up error for a record of another cluster at `position` of `path`.
fn foreign_error(path: &Path, (position, op, cluster): (usize, u64, u128), ours: u128) -> String {
    format!(
        "journal {}: the record at byte {position} (op {op}) belongs to cluster {cluster:032x}, \
         not this node's cluster {ours:032x} (cluster.name {:?}): a journal of another \
         cluster, or a damaged header; start-up refuses it and changes nothing",
        path.display(),
        crate::consensus::cluster::node_cluster_name()
    )
}

/// What a recovery walk found in a journal's bytes.
struct Walk {
    /// The valid records from the start of the file, in op order.
    entries: Vec<JournalEntry>,
    /// File position of each of `entries`.
    positions: Vec<u64>,
    /// Where the valid records end.
    end: usize,
    /// Position and reason of the torn or corrupt record that ended the walk; `None` when it
    /// ended at the end of the file or at the records of an earlier cycle (overwritten by
    /// later appends, see the module note).
    damage: Option<(usize, &'static str)>,
    /// A record of another cluster where the walk stood: its position, op and cluster. The
    /// walk stops there; start-up refuses the journal.
    foreign: Option<(usize, u64, u128)>,
    /// Position and reason of a damaged record among those the checkpoint covers, which the
    /// walk stepped over to the checkpoint's next op (nothing of it is replayed).
    covered_damage: Option<(usize, &'static str)>,
}

/// Walks the valid prefix of a journal anchored at `anchor`.
fn walk(bytes: &Bytes, anchor: Anchor) -> Walk {
    let checkpoint = anchor.op;
    let mut entries: Vec<JournalEntry> = Vec::new();
    let mut positions = Vec::new();
    let mut position = 0usize;
    let mut chained = false;
    let mut foreign_record = None;
    let mut covered_damage = None;
    let damage = loop {
        if position >= bytes.len() {
            break None;
        }
        let expected = entries
            .first()
            .map(|first| first.entry().op + entries.len() as u64);
        match decode_record(&bytes.slice(position..), expected) {
            // The first record says whose journal it is; a later one that chains to it is
            // ours whatever its cluster bytes say (damage the verifier reports).
            Ok(record) if entries.is_empty() && foreign(&record, anchor.cluster) => {
                foreign_record = Some((position, record.entry.entry().op, record.cluster));
                break None;
            }
            Ok(record) => match chain(&record, entries.last(), anchor, chained) {
                Ok(now_chained) => {
                    chained = now_chained;
                    positions.push(position as u64);
                    entries.push(record.entry);
                    position += record.size;
                }
                Err(why) => break Some((position, why)),
            },
            Err(_)
                if expected
                    .is_some_and(|expected| stale(bytes, position, expected, checkpoint)) =>
            {
                break None;
            }
            Err(why) => {
                // Damage among the records a checkpoint covers (left in place before the ones
                // it keeps, see `FileJournal::reset_after_checkpoint`) costs nothing when the
                // checkpoint's next op follows whole and chained to it: the walk goes on there.
                let covered = entries
                    .last()
                    .is_none_or(|last| last.entry().op <= checkpoint);
                match covered.then(|| next_after_checkpoint(bytes, position, anchor)) {
                    Some(Some(next)) if covered_damage.is_none() => {
                        covered_damage = Some((position, why));
                        entries.clear();
                        positions.clear();
                        position = next;
                    }
                    _ => break Some((position, why)),
                }
            }
        }
    };
    Walk {
        entries,
        positions,
        end: position,
        damage,
        foreign: foreign_record,
        covered_damage,
    }
}

/// The position of the first whole record after the damaged one at `damaged` that carries the
/// op after `anchor`'s checkpoint and chains to it.
fn next_after_checkpoint(bytes: &Bytes, damaged: usize, anchor: Anchor) -> Option<usize> {
    let (at, op) = continuation(bytes, damaged, anchor.op + 1, anchor.op)?;
    let record = decode_record(&bytes.slice(at..), Some(op)).ok()?;
    (op == anchor.op + 1 && record.parent == u128::from(anchor.checksum)).then_some(at)
}

/// Whether a whole record of an earlier cycle (an op the checkpoint covers, below `expected`)
/// starts at `position`.
fn stale(bytes: &Bytes, position: usize, expected: u64, checkpoint: u64) -> bool {
    decode_record(&bytes.slice(position..), None).is_ok_and(|old| {
        let op = old.entry.entry().op;
        op < expected && op <= checkpoint
    })
}

fn gap(first_op: u64, checkpoint: u64) -> String {
    format!("starts at op {first_op}, after its checkpoint at op {checkpoint}: ops are missing")
}

/// Why a standalone node's journal damaged in the middle is refused, and what the operator
/// can do.
fn middle_damage_refusal(
    path: &Path,
    (at, why): (usize, impl std::fmt::Display),
    expected: u64,
    (next_at, op): (usize, u64),
) -> String {
    format!(
        "journal {}: a damaged record at byte {at} ({why}), with op {op} of this journal intact \
         at byte {next_at} after it: recovery would drop ops {expected} on, and a standalone \
         node has no peer that holds them. Nothing was changed. Restore the data directory \
         from a verified backup (README \"Backup and restore\"); or, if losing those ops is \
         accepted (a power loss under the replicated policy, which does not promise to survive \
         one, can leave this), start once with --cut-damaged-journals",
        path.display()
    )
}

/// The verifier's reading of a journal: the records recovery keeps, and what is wrong.
#[derive(Debug, Default)]
pub struct JournalCheck {
    /// The records above the checkpoint that recovery replays, with their file positions.
    pub entries: Vec<(u64, JournalEntry)>,
    /// `(severity, byte position, message)` of each problem.
    pub problems: Vec<(Severity, Option<u64>, String)>,
}

/// Checks the bytes of a journal anchored at `anchor`, as [`FileJournal::open`] would recover
/// it but without cutting anything.
///
/// The record that ends the walk is a *torn tail* (a warning: recovery cuts it, and it held no
/// acknowledged op) when it runs past the end of the file, or when it is whole but nothing
/// after it continues the op sequence (an append over an earlier cycle's records that a crash
/// cut short looks like that). It is *corruption* (an error) when a valid record of the same
/// cycle follows it: recovery would drop that acknowledged op and every one after it. A record
/// that does not chain with nothing of the current cycle after it is a *stale record* a reused
/// file still holds (a warning: recovery cuts it). A record of another cluster is an error:
/// start-up refuses the journal.
pub fn check(bytes: &Bytes, anchor: Anchor) -> JournalCheck {
    let checkpoint = anchor.op;
    let Walk {
        entries,
        positions,
        damage,
        foreign,
        covered_damage,
        ..
    } = walk(bytes, anchor);
    let mut problems = Vec::new();
    if let Some((at, why)) = covered_damage {
        problems.push((
            Severity::Warning,
            Some(at as u64),
            format!(
                "damaged record ({why}) among the ops the checkpoint at op {checkpoint} covers: \
                 recovery steps over it to op {}",
                checkpoint + 1
            ),
        ));
    }
    if let Some((at, op, cluster)) = foreign {
        problems.push((
            Severity::Error,
            Some(at as u64),
            format!(
                "op {op} belongs to cluster {cluster:032x}, not this node's cluster {:032x} \
                 (cluster.name {:?} of the configuration read; a node's directory is judged \
                 by its own configuration: IGGY_CONFIG_PATH); start-up refuses the journal",
                anchor.cluster,
                crate::consensus::cluster::node_cluster_name()
            ),
        ));
    }
    if let Some((at, why)) = damage {
        let (expected, continued) = past_damage(bytes, at, &entries, checkpoint);
        let left = bytes.len() - at;
        match continued {
            Some((next_at, op)) => problems.push((
                Severity::Error,
                Some(at as u64),
                format!(
                    "corrupt record ({why}) in the middle: op {op} follows at byte {next_at}; \
                     recovery would drop op {expected} and every op after it"
                ),
            )),
            None if why == CHAIN_BROKEN => problems.push((
                Severity::Warning,
                Some(at as u64),
                format!(
                    "stale record ({left} bytes, op {expected} whose {why}): an earlier use of \
                     the file left it; recovery cuts it"
                ),
            )),
            None => problems.push((
                Severity::Warning,
                Some(at as u64),
                format!(
                    "torn tail ({left} bytes, {why}): what an earlier use of the file left \
                     after its end (a journal is reused from its start after each \
                     checkpoint), or an append a crash cut short; recovery cuts it"
                ),
            )),
        }
    }
    for (position, record) in positions.iter().zip(&entries) {
        if !header_as_written(bytes, *position as usize, record, anchor.cluster) {
            problems.push((
                Severity::Error,
                Some(*position),
                format!(
                    "op {}: header bytes outside its checksum differ from what the server \
                     writes (damage recovery does not detect)",
                    record.entry().op
                ),
            ));
        }
    }
    let first_op = entries
        .first()
        .map_or(checkpoint + 1, |entry| entry.entry().op);
    if first_op > checkpoint + 1 {
        problems.push((Severity::Error, Some(0), gap(first_op, checkpoint)));
    }
    let skipped = (checkpoint + 1).saturating_sub(first_op) as usize;
    JournalCheck {
        entries: positions.into_iter().zip(entries).skip(skipped).collect(),
        problems,
    }
}

/// Whether the header at `position` is byte for byte the one `append` writes for `record` in
/// a journal of `cluster`: the op's checksum does not cover every header byte (the walk has
/// judged its parent already, so it is taken as read; cluster 0 is an earlier build's).
fn header_as_written(bytes: &Bytes, position: usize, record: &JournalEntry, cluster: u128) -> bool {
    let Some(Ok(read)) = bytes
        .get(position..position + HEADER_SIZE)
        .map(PrepareHeader::decode_fixed)
    else {
        return false;
    };
    let parent = read.parent as u64;
    let cluster = if read.cluster == 0 { 0 } else { cluster };
    let written = match record {
        JournalEntry::Whole(entry) => encode_header(entry, None, parent, cluster),
        JournalEntry::Stowed(entry) => encode_header(entry, Some(&entry.body), parent, cluster),
    };
    written.is_some_and(|header| bytes.get(position..position + HEADER_SIZE) == Some(&header[..]))
}

/// The op a walk that stopped at the damage at `damaged` expected there (the one after its last
/// valid record, `entries`', or after the checkpoint), and what [`continuation`] finds past it.
fn past_damage(
    bytes: &Bytes,
    damaged: usize,
    entries: &[JournalEntry],
    checkpoint: u64,
) -> (u64, Option<(usize, u64)>) {
    let expected = entries
        .last()
        .map_or(checkpoint + 1, |last| last.entry().op + 1);
    (expected, continuation(bytes, damaged, expected, checkpoint))
}

/// The first whole record after the damaged one at `damaged` that belongs to the current
/// cycle (op at or above `expected` and above the checkpoint): its position and op. The
/// damaged record's size is followed when its header holds one that lands on such a record;
/// otherwise every later position is tried.
fn continuation(
    bytes: &Bytes,
    damaged: usize,
    expected: u64,
    checkpoint: u64,
) -> Option<(usize, u64)> {
    let current = |at: usize| {
        decode_record(&bytes.slice(at..), None)
            .ok()
            .map(|record| record.entry.entry().op)
            .filter(|op| *op >= expected && *op > checkpoint)
            .map(|op| (at, op))
    };
    let declared = PrepareHeader::decode_fixed(bytes.get(damaged..damaged + HEADER_SIZE)?)
        .ok()
        .map(|header| damaged + header.size as usize)
        .filter(|next| *next > damaged + HEADER_SIZE && *next < bytes.len());
    if let Some(found) = declared.and_then(current) {
        return Some(found);
    }
    (damaged + 1..=bytes.len().saturating_sub(HEADER_SIZE)).find_map(current)
}

/// What opening a journal does with a damaged record that intact ops of the journal follow
/// (damage in the middle, never what a crash leaves: appends are written one after another,
/// so a crash tears only the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiddleDamage {
    /// Cut the journal at the damage: the group's peers hold the ops after it and bring them
    /// back.
    PeersRepair,
    /// Refuse the journal before anything is changed: no peer holds the ops after the damage
    /// (a standalone node), so cutting would lose acknowledged writes.
    Refuse,
    /// Cut the journal at the damage on a standalone node, the loss accepted by the operator
    /// (`--cut-damaged-journals`).
    CutAccepted,
}

impl FileJournal {
    /// Opens (or creates) the journal at `path` and returns it with its valid entries above
    /// the anchor's checkpoint (ops at or below it are covered by a checkpoint: a crash between
    /// writing the checkpoint and emptying the journal leaves them behind, and they are
    /// skipped). A record of another cluster refuses the journal before the file is touched.
    /// Damage in the middle is cut: the journal of a group whose peers repair it.
    #[cfg(test)]
    pub async fn open(
        path: &Path,
        anchor: Anchor,
    ) -> std::io::Result<(FileJournal, Vec<JournalEntry>)> {
        FileJournal::open_with(path, anchor, MiddleDamage::PeersRepair).await
    }

    /// [`FileJournal::open`], with damage in the middle handled as `middle` says.
    pub async fn open_with(
        path: &Path,
        anchor: Anchor,
        middle: MiddleDamage,
    ) -> std::io::Result<(FileJournal, Vec<JournalEntry>)> {
        let checkpoint = anchor.op;
        let (bytes, created) = match compio::fs::read(path).await {
            Ok(bytes) => (Bytes::from(bytes), false),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => (Bytes::new(), true),
            Err(error) => return Err(error),
        };
        let Walk {
            mut entries,
            positions,
            end: position,
            damage,
            foreign,
            covered_damage,
        } = walk(&bytes, anchor);
        if let Some((at, why)) = covered_damage {
            tracing::warn!(
                "journal {}: a damaged record at position {at} ({why}) among the ops the checkpoint at op {checkpoint} covers: skipped",
                path.display()
            );
        }
        if let Some(foreign) = foreign {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                foreign_error(path, foreign, anchor.cluster),
            ));
        }
        if let Some((at, why)) = damage {
            match past_damage(&bytes, at, &entries, checkpoint) {
                (expected, Some((next_at, op))) if middle == MiddleDamage::Refuse => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        middle_damage_refusal(path, (at, why), expected, (next_at, op)),
                    ));
                }
                (expected, Some((next_at, op))) if middle == MiddleDamage::CutAccepted => {
                    tracing::warn!(
                        "journal {}: dropping {} bytes from position {at}: {why}, with op {op} \
                         of this journal at byte {next_at} after it: ops from {expected} on are \
                         lost (accepted with --cut-damaged-journals)",
                        path.display(),
                        bytes.len() - at
                    )
                }
                (expected, Some((next_at, op))) => tracing::warn!(
                    "journal {}: dropping {} bytes from position {at}: {why}, with op {op} of \
                     this journal at byte {next_at} after it: ops from {expected} on are lost \
                     here (a peer that holds them brings them back)",
                    path.display(),
                    bytes.len() - at
                ),
                // Nothing of this journal follows: an append a crash cut short, or bytes an
                // earlier use of the reused file left (after most restarts): said, not warned.
                (_, None) => tracing::info!(
                    "journal {}: cutting {} bytes at position {at} after its last record ({why}: \
                     a stale record of an earlier use of the file, or an append a crash cut \
                     short)",
                    path.display(),
                    bytes.len() - at
                ),
            }
        }
        let damaged = damage.is_some();
        let first_op = entries.first().map(|entry| entry.entry().op);
        let watched = watch_path(Op::Open, Synced::Journal, path);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .read(true)
            .open(path)
            .await
            .or_stop("open", path);
        drop(watched);
        if created {
            iggy_storage::fail_stop::sync_parent(path);
        }
        let first_op = first_op.unwrap_or(checkpoint + 1);
        if first_op > checkpoint + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("journal {}: {}", path.display(), gap(first_op, checkpoint)),
            ));
        }
        if damaged {
            let _watch = watch(Op::Truncate, Synced::Journal, file.as_raw_fd());
            file.set_len(position as u64)
                .await
                .or_stop("truncate", path);
            file.sync_all().await.or_stop("fsync", path);
            iggy_storage::fail_stop::count_fsync(iggy_storage::fail_stop::Synced::Journal);
        }
        let skipped = (checkpoint + 1 - first_op) as usize;
        let kept = entries.split_off(skipped.min(entries.len()));
        if kept.is_empty() {
            // Every record is covered by the checkpoint: start over at position 0.
            let journal = FileJournal {
                file,
                path: path.to_path_buf(),
                cluster: anchor.cluster,
                base: checkpoint,
                base_checksum: anchor.checksum,
                positions: Vec::new(),
                checksums: Vec::new(),
                start: 0,
                len: 0,
            };
            return Ok((journal, kept));
        }
        let checksums = entries
            .iter()
            .chain(&kept)
            .map(|record| record.entry().checksum)
            .collect();
        // Appends go above the records, never at `base + 1`, unless `base` is the checkpoint.
        let base_checksum = if first_op == checkpoint + 1 {
            anchor.checksum
        } else {
            0
        };
        let journal = FileJournal {
            file,
            path: path.to_path_buf(),
            cluster: anchor.cluster,
            base: first_op - 1,
            base_checksum,
            positions,
            checksums,
            start: 0,
            len: position as u64,
        };
        Ok((journal, kept))
    }
}

impl FileJournal {
    /// Refuses the journal at `path` when its first record belongs to a cluster other than
    /// `cluster`, reading only that header: a group whose state machine repairs its own files
    /// on open asks this first, so a foreign directory is refused before anything in it
    /// changes. A missing, short or undecodable journal is left to [`FileJournal::open`].
    pub fn refuse_foreign(path: &Path, cluster: u128) -> std::io::Result<()> {
        use std::io::Read;
        let mut header = [0u8; HEADER_SIZE];
        let read = match std::fs::File::open(path) {
            Ok(mut file) => file.read_exact(&mut header),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        let Some(first) = read
            .ok()
            .and_then(|()| PrepareHeader::decode_fixed(&header).ok())
        else {
            return Ok(());
        };
        if first.cluster == 0 || first.cluster == cluster {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            foreign_error(path, (0, first.op, first.cluster), cluster),
        ))
    }

    /// [`FileJournal::open`] after the checkpoint a group starts from. When a checkpoint file
    /// was found `damaged`, the one loaded may be older than the newest written, and it is
    /// usable only while the journal still holds every op after it (the fallback rule of
    /// `iggy_storage::checkpoint`): otherwise the start is refused naming the damaged file.
    pub async fn open_after_checkpoint(
        path: &Path,
        anchor: Anchor,
        damaged: &[(PathBuf, String)],
        middle: MiddleDamage,
    ) -> std::io::Result<(FileJournal, Vec<JournalEntry>)> {
        let checkpoint = anchor.op;
        let opened = FileJournal::open_with(path, anchor, middle).await;
        if damaged.is_empty() {
            return opened;
        }
        let damaged: Vec<String> = damaged
            .iter()
            .map(|(file, why)| format!("{} ({why})", file.display()))
            .collect();
        match opened {
            Ok(opened) => {
                tracing::warn!(
                    "journal {}: continues from the checkpoint at op {checkpoint}; damaged: {}",
                    path.display(),
                    damaged.join(", ")
                );
                Ok(opened)
            }
            Err(error) => Err(std::io::Error::new(
                error.kind(),
                format!(
                    "{error}; the checkpoint that covered them is damaged: {}",
                    damaged.join(", ")
                ),
            )),
        }
    }
}

impl Journal for FileJournal {
    async fn append(&mut self, entry: &Entry, stand_in: Option<&Bytes>) -> std::io::Result<()> {
        let unencodable = |why: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("op {}: {why}", entry.op),
            )
        };
        let index = entry
            .op
            .checked_sub(self.base + 1)
            .filter(|index| *index as usize <= self.positions.len())
            .ok_or_else(|| unencodable("does not follow the journal"))?
            as usize;
        let parent = match index {
            0 => self.base_checksum,
            _ => self.checksums[index - 1],
        };
        let header = encode_header(entry, stand_in, parent, self.cluster)
            .ok_or_else(|| unencodable("not encodable as a prepare"))?;
        let position = self.len;
        let body = stand_in.unwrap_or(&entry.body);
        let watched = watch(Op::Write, Synced::Journal, self.file.as_raw_fd());
        if body.len() <= iggy_storage::small_write::SMALL_WRITE_MAX {
            // Small records are copied into the page cache in place (see small_write).
            iggy_storage::small_write::write_all_vectored_at(
                &self.file,
                &[&header, body],
                position,
            )
            .or_stop("write", &self.path);
        } else {
            // The body is written from the received buffer, behind its header, in one write.
            let mut file = &self.file;
            let parts = [Bytes::copy_from_slice(&header), body.clone()];
            file.write_vectored_all_at(parts, position)
                .await
                .0
                .or_stop("write", &self.path);
        }
        drop(watched);
        self.positions.truncate(index);
        self.positions.push(position);
        self.checksums.truncate(index);
        self.checksums.push(entry.checksum);
        self.len = position + (HEADER_SIZE + body.len()) as u64;
        Ok(())
    }

    async fn sync(&mut self) {
        let _watch = watch(Op::Fsync, Synced::Journal, self.file.as_raw_fd());
        self.file.sync_data().await.or_stop("fsync", &self.path);
        iggy_storage::fail_stop::count_fsync(iggy_storage::fail_stop::Synced::Journal);
    }

    async fn reset_after_checkpoint(&mut self, op: u64) {
        FileJournal::reset_after_checkpoint(self, op).await
    }

    async fn reset_to(&mut self, op: u64, checksum: u64) {
        FileJournal::reset_to(self, op, checksum).await
    }

    fn len_bytes(&self) -> u64 {
        self.len - self.start
    }

    async fn read(&self, op: u64) -> Option<JournalEntry> {
        FileJournal::read(self, op).await
    }

    async fn trim(&mut self) {
        FileJournal::trim(self).await
    }

    async fn truncate_after(&mut self, op: u64) {
        let index = op.saturating_sub(self.base) as usize;
        if let Some(&position) = self.positions.get(index) {
            self.positions.truncate(index);
            self.checksums.truncate(index);
            self.len = position;
            let _watch = watch(Op::Truncate, Synced::Journal, self.file.as_raw_fd());
            self.file
                .set_len(position)
                .await
                .or_stop("truncate", &self.path);
        }
    }
}

impl FileJournal {
    /// Cuts the file after its last record, for a graceful stop (safe at any moment: nothing
    /// after the last record is ever read back). After a checkpoint the
    /// journal starts again over its own file without shortening it (see the module note), so
    /// the cycle that ends here may end inside a longer record of an earlier one: the next
    /// start would find that fragment after the last record and report what a crash leaves
    /// (a torn tail), though none happened. A crash still leaves it, and recovery cuts it.
    pub async fn trim(&mut self) {
        let _watch = watch(Op::Truncate, Synced::Journal, self.file.as_raw_fd());
        self.file
            .set_len(self.len)
            .await
            .or_stop("truncate", &self.path);
        self.file.sync_data().await.or_stop("fsync", &self.path);
    }

    /// The journaled record of `op`, read back from the file (a replica that released a
    /// committed body from memory serves a peer's repair from here); `None` when the journal
    /// does not hold `op` or its record no longer checks out.
    pub async fn read(&self, op: u64) -> Option<JournalEntry> {
        let index = usize::try_from(op.checked_sub(self.base + 1)?).ok()?;
        let position = *self.positions.get(index)?;
        let end = self.positions.get(index + 1).copied().unwrap_or(self.len);
        let buffer = Vec::with_capacity(usize::try_from(end - position).ok()?);
        let compio::BufResult(read, bytes) = self.file.read_exact_at(buffer, position).await;
        read.or_stop("read", &self.path);
        match decode_record(&Bytes::from(bytes), Some(op)) {
            Ok(record) if record.entry.entry().checksum == self.checksums[index] => {
                Some(record.entry)
            }
            Ok(_) => None,
            Err(why) => {
                tracing::error!("{}: op {op} reads back damaged: {why}", self.path.display());
                None
            }
        }
    }

    /// Empties the journal to continue after the checkpoint at `op` whose entry has `checksum`
    /// (a checkpoint installed by state transfer, above every record held): the file is cut to
    /// nothing, so no record of before the transfer is ever read again.
    pub async fn reset_to(&mut self, op: u64, checksum: u64) {
        self.base = op;
        self.base_checksum = checksum;
        self.positions.clear();
        self.checksums.clear();
        self.start = 0;
        self.len = 0;
        let _watch = watch(Op::Truncate, Synced::Journal, self.file.as_raw_fd());
        self.file.set_len(0).await.or_stop("truncate", &self.path);
    }

    /// Drops the records a checkpoint at `op` made redundant. When it covers every record the
    /// journal empties: the next append overwrites the first record (see the module note) and
    /// chains to op `op`, which the journal holds (a checkpoint is taken at a journaled op).
    /// A checkpoint may be below the newest record (a larger group checkpoints at the op every
    /// replica holds; any group goes on preparing while its checkpoint is written): the records
    /// it covers stay where they are, unwritten, and a start skips them, as after a crash just
    /// after the checkpoint; the file is not touched, so nothing waits for a disk. Once they
    /// pass [`COVERED_PREFIX_MAX`] bytes, the records above `op` move to the start of a fresh
    /// file that replaces the journal atomically, so a crash leaves the old file (its records
    /// after the checkpoint still chain from it) or the new one.
    pub async fn reset_after_checkpoint(&mut self, op: u64) {
        let held = match op.checked_sub(self.base) {
            Some(held) => held as usize,
            None => panic!(
                "a checkpoint at op {op}, below the journal's base {}",
                self.base
            ),
        };
        if held > 0 {
            self.base_checksum = *self
                .checksums
                .get(held - 1)
                .expect("a checkpoint at an op the journal holds");
        }
        self.base = op;
        if held == self.positions.len() {
            self.positions.clear();
            self.checksums.clear();
            self.start = 0;
            self.len = 0;
            return;
        }
        let from = self.positions[held];
        if from <= COVERED_PREFIX_MAX {
            self.positions.drain(..held);
            self.checksums.drain(..held);
            self.start = from;
            return;
        }
        let suffix = vec![0; (self.len - from) as usize];
        let compio::BufResult(read, suffix) = self.file.read_exact_at(suffix, from).await;
        read.or_stop("read", &self.path);
        iggy_storage::fail_stop::write_atomically(&self.path, suffix).await;
        self.file = OpenOptions::new()
            .write(true)
            .read(true)
            .open(&self.path)
            .await
            .or_stop("open", &self.path);
        self.positions.drain(..held);
        self.checksums.drain(..held);
        for position in &mut self.positions {
            *position -= from;
        }
        self.start = 0;
        self.len -= from;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_generated::frames::Operation;

    #[test]
    fn the_replicas_own_operations_are_declared_operations_so_records_carry_them() {
        for operation in [
            iggy_vsr::OPERATION_REGISTER,
            iggy_vsr::OPERATION_NOMINATE_LIMITS,
        ] {
            let entry = Entry::new(1, 0, 0, 0, operation, Bytes::from_static(b"\x10\0\0\0"));
            let header = encode_header(&entry, None, 0, 1).expect("a declared operation");
            let mut record = header.to_vec();
            record.extend_from_slice(&entry.body);
            let decoded = decode_record(&Bytes::from(record), Some(1)).unwrap();
            assert_eq!(decoded.entry.entry(), &entry);
        }
        assert_eq!(
            Operation::NominateLimits.to_repr(),
            iggy_vsr::OPERATION_NOMINATE_LIMITS
        );
    }

    /// Opens the journal and expects only whole records.
    async fn open_whole(path: &Path, anchor: Anchor) -> std::io::Result<(FileJournal, Vec<Entry>)> {
        let (journal, entries) = FileJournal::open(path, anchor).await?;
        let whole = entries
            .into_iter()
            .map(|entry| match entry {
                JournalEntry::Whole(entry) => entry,
                JournalEntry::Stowed(entry) => panic!("op {} is stowed", entry.op),
            })
            .collect();
        Ok((journal, whole))
    }

    /// The anchor of a journal of this node's cluster checkpointed at `op`, whose ops all
    /// carry `body` (see `entry`).
    fn anchor(op: u64, body: &'static [u8]) -> Anchor {
        Anchor {
            cluster: crate::consensus::cluster::node_cluster(),
            op,
            checksum: if op == 0 { 0 } else { entry(op, body).checksum },
        }
    }

    fn start_anchor(start: &iggy_storage::checkpoint::Start<iggy_vsr::Checkpoint>) -> Anchor {
        Anchor::after(start.checkpoint.as_ref().map(|loaded| &loaded.replica))
    }

    fn entry(op: u64, body: &'static [u8]) -> Entry {
        Entry::new(
            op,
            0,
            7,
            op,
            Operation::CreateStream.to_repr(),
            Bytes::from_static(body),
        )
    }

    #[compio::test]
    async fn a_record_reads_back_by_op_whole_or_stowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = open_whole(&path, anchor(0, b"abcd")).await.unwrap();
        let stand_in = Bytes::from_static(b"stand-in");
        journal.append(&entry(1, b"one"), None).await.unwrap();
        journal
            .append(&entry(2, b"two"), Some(&stand_in))
            .await
            .unwrap();
        journal.append(&entry(3, b"three"), None).await.unwrap();
        assert_eq!(
            journal.read(1).await,
            Some(JournalEntry::Whole(entry(1, b"one")))
        );
        let stowed = Entry {
            body: stand_in.clone(),
            ..entry(2, b"two")
        };
        assert_eq!(journal.read(2).await, Some(JournalEntry::Stowed(stowed)));
        assert_eq!(
            journal.read(3).await,
            Some(JournalEntry::Whole(entry(3, b"three")))
        );
        assert_eq!(journal.read(0).await, None);
        assert_eq!(journal.read(4).await, None);
        // A record damaged on disk is not served.
        journal.sync().await;
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(journal.read(3).await, None);
        assert!(journal.read(1).await.is_some());
    }

    #[compio::test]
    async fn appended_entries_survive_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, entries) = open_whole(&path, anchor(0, b"abcd")).await.unwrap();
        assert!(entries.is_empty());
        for op in 1..=3 {
            journal.append(&entry(op, b"hello"), None).await.unwrap();
        }
        journal.sync().await;
        drop(journal);
        let full = std::fs::metadata(&path).unwrap().len();
        // Tear the last record in the middle of its body.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 2)
            .unwrap();
        let (_, entries) = open_whole(&path, anchor(0, b"abcd")).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"hello"), entry(2, b"hello")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * (HEADER_SIZE as u64 + 5)
        );
    }

    #[compio::test]
    async fn ops_covered_by_the_checkpoint_are_skipped_and_a_gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"x")).await.unwrap();
        for op in 1..=4 {
            journal.append(&entry(op, b"x"), None).await.unwrap();
        }
        drop(journal);
        let (mut journal, entries) = open_whole(&path, anchor(2, b"x")).await.unwrap();
        assert_eq!(entries, vec![entry(3, b"x"), entry(4, b"x")]);
        journal.reset_after_checkpoint(4).await;
        journal.append(&entry(5, b"y"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(4, b"x")).await.unwrap();
        assert_eq!(entries, vec![entry(5, b"y")]);
        assert!(
            FileJournal::open(&path, anchor(2, b"x")).await.is_err(),
            "ops 3 and 4 are missing"
        );
    }

    #[compio::test]
    async fn a_journal_reset_to_a_transferred_checkpoint_continues_after_it_and_holds_nothing_older()
     {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"x")).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"x"), None).await.unwrap();
        }
        // A peer's checkpoint at op 9, whose entry this journal never held.
        let installed = anchor(9, b"t");
        journal.reset_to(installed.op, installed.checksum).await;
        assert_eq!(journal.len_bytes(), 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "cut to nothing");
        assert!(journal.read(3).await.is_none());
        assert!(
            journal.append(&entry(11, b"y"), None).await.is_err(),
            "op 10 comes first"
        );
        journal.append(&entry(10, b"y"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, installed).await.unwrap();
        assert_eq!(
            entries,
            vec![entry(10, b"y")],
            "chained to the checkpoint's entry"
        );
    }

    /// A journal at `path` of ops 1 to 5 (body `x`), after a checkpoint at op 3.
    async fn five_ops_checkpointed_at_3(path: &Path) -> FileJournal {
        let (mut journal, _) = FileJournal::open(path, anchor(0, b"x")).await.unwrap();
        for op in 1..=5 {
            journal.append(&entry(op, b"x"), None).await.unwrap();
        }
        journal.reset_after_checkpoint(3).await;
        journal
    }

    #[compio::test]
    async fn a_checkpoint_below_the_newest_op_keeps_the_ops_above_it_and_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let full = 5 * (HEADER_SIZE as u64 + 1);
        let mut journal = five_ops_checkpointed_at_3(&path).await;
        let record = HEADER_SIZE as u64 + 1;
        // Nothing written: the covered records stay, and a start from the checkpoint skips
        // them, so no write or fsync waits on the group's path.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), full);
        assert_eq!(journal.len_bytes(), 2 * record, "ops 4 and 5");
        let (_, entries) = open_whole(&path, anchor(3, b"x")).await.unwrap();
        assert_eq!(entries, vec![entry(4, b"x"), entry(5, b"x")]);
        journal.append(&entry(6, b"y"), None).await.unwrap();
        journal.truncate_after(5).await;
        journal.append(&entry(6, b"z"), None).await.unwrap();
        assert_eq!(
            journal.read(6).await,
            Some(JournalEntry::Whole(entry(6, b"z")))
        );
        let (_, entries) = open_whole(&path, anchor(3, b"x")).await.unwrap();
        assert_eq!(
            entries,
            vec![entry(4, b"x"), entry(5, b"x"), entry(6, b"z")],
            "the kept records chain from the checkpoint and to what follows"
        );
        // A later checkpoint past them all starts the file over.
        journal.reset_after_checkpoint(6).await;
        assert_eq!(journal.len_bytes(), 0);
        journal.append(&entry(7, b"w"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(6, b"z")).await.unwrap();
        assert_eq!(entries, vec![entry(7, b"w")]);
    }

    #[compio::test]
    async fn a_damaged_record_among_the_covered_ones_loses_none_of_the_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        drop(five_ops_checkpointed_at_3(&path).await);
        // Op 2's body byte flipped: its checksum fails.
        let record = HEADER_SIZE + 1;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[record + HEADER_SIZE] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let checked = check(&Bytes::from(bytes.clone()), anchor(3, b"x"));
        assert_eq!(
            checked
                .entries
                .iter()
                .map(|(_, e)| e.entry().op)
                .collect::<Vec<_>>(),
            vec![4, 5]
        );
        assert!(
            checked
                .problems
                .iter()
                .all(|(severity, _, _)| *severity == Severity::Warning),
            "{:?}",
            checked.problems
        );
        assert_eq!(checked.problems.len(), 1, "{:?}", checked.problems);
        let (mut journal, entries) = open_whole(&path, anchor(3, b"x")).await.unwrap();
        assert_eq!(entries, vec![entry(4, b"x"), entry(5, b"x")]);
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
        journal.append(&entry(6, b"y"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(3, b"x")).await.unwrap();
        assert_eq!(
            entries,
            vec![entry(4, b"x"), entry(5, b"x"), entry(6, b"y")]
        );
        // The same damage with the checkpoint before it is in the ops replayed: cut there.
        let (_, entries) = open_whole(&path, anchor(1, b"x")).await.unwrap();
        assert!(entries.is_empty(), "{entries:?}");
    }

    #[compio::test]
    async fn past_the_covered_bound_the_ops_above_a_checkpoint_move_to_a_fresh_file() {
        static BODY: [u8; 1 << 20] = [7; 1 << 20];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, &BODY)).await.unwrap();
        let ops = COVERED_PREFIX_MAX / (1 << 20) + 2;
        for op in 1..=ops {
            journal.append(&entry(op, &BODY), None).await.unwrap();
        }
        let record = HEADER_SIZE as u64 + (1 << 20);
        journal.reset_after_checkpoint(ops - 1).await;
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            record,
            "op {ops} alone"
        );
        assert_eq!(journal.len_bytes(), record);
        journal.append(&entry(ops + 1, b"y"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(ops - 1, &BODY)).await.unwrap();
        assert_eq!(entries, vec![entry(ops, &BODY), entry(ops + 1, b"y")]);
        assert!(
            FileJournal::open(&path, anchor(ops - 2, &BODY))
                .await
                .is_err(),
            "op {} is gone with the checkpoint",
            ops - 1
        );
    }

    #[compio::test]
    async fn after_a_checkpoint_records_are_overwritten_in_place_and_old_ones_end_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        for op in 1..=5 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        let full = std::fs::metadata(&path).unwrap().len();
        journal.reset_after_checkpoint(5).await;
        for op in 6..=7 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            full,
            "overwritten, not grown"
        );
        let (mut journal, entries) = open_whole(&path, anchor(5, b"abcd")).await.unwrap();
        assert_eq!(entries, vec![entry(6, b"abcd"), entry(7, b"abcd")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            full,
            "old records are not a damaged tail"
        );
        // Appends continue after op 7, over the old op 3.
        journal.append(&entry(8, b"abcd"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(5, b"abcd")).await.unwrap();
        assert_eq!(entries.last(), Some(&entry(8, b"abcd")));
        assert_eq!(entries.len(), 3);
        // A checkpoint past every record: the journal starts over at position 0.
        let (mut journal, entries) = open_whole(&path, anchor(8, b"abcd")).await.unwrap();
        assert!(entries.is_empty());
        journal.append(&entry(9, b"abcd"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, anchor(8, b"abcd")).await.unwrap();
        assert_eq!(entries, vec![entry(9, b"abcd")]);
    }

    #[compio::test]
    async fn a_stowed_record_keeps_the_ops_checksum_and_its_stand_in_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        let stowed = entry(1, b"the body, kept elsewhere");
        let stand_in = Bytes::from_static(b"where");
        journal.append(&stowed, Some(&stand_in)).await.unwrap();
        journal.append(&entry(2, b"whole"), None).await.unwrap();
        drop(journal);
        let written = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            written,
            2 * HEADER_SIZE as u64 + 5 + 5,
            "the stand-in, not the body"
        );
        let (_, entries) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        let recovered = Entry {
            body: stand_in,
            ..stowed.clone()
        };
        assert_eq!(
            recovered.checksum, stowed.checksum,
            "the op's checksum is kept"
        );
        assert_eq!(
            entries,
            vec![
                JournalEntry::Stowed(recovered),
                JournalEntry::Whole(entry(2, b"whole"))
            ]
        );
        // A damaged stand-in ends the journal before its op.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_SIZE + 2] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        assert!(entries.is_empty());
    }

    /// A group's checkpoint at `op`, written as `maybe_checkpoint` does: into the next slot,
    /// then the journal emptied.
    async fn checkpoint_at(
        slots: &mut iggy_storage::checkpoint::CheckpointSlots,
        journal: &mut FileJournal,
        op: u64,
    ) -> std::path::PathBuf {
        let replica = iggy_vsr::Checkpoint {
            op,
            view: 0,
            checksum: entry(op, b"abcd").checksum,
            clients: Vec::new(),
            clients_max: None,
        };
        let slot = slots.write(&replica.encode(), b"state").await;
        journal.reset_after_checkpoint(op).await;
        slot
    }

    fn damage(path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(path, bytes).unwrap();
    }

    /// The start after a damaged newest checkpoint: the older slot is used while the journal
    /// still holds the ops after it (a crash right after the checkpoint write), and refused,
    /// naming the damaged slot, once later ops overwrote them.
    #[compio::test]
    async fn a_damaged_newest_checkpoint_falls_back_only_while_the_journal_covers_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let mut slots = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap()
            .slots;
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        checkpoint_at(&mut slots, &mut journal, 3).await;
        for op in 4..=6 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        let newest = checkpoint_at(&mut slots, &mut journal, 6).await;
        drop(journal);
        damage(&newest);

        let start = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap();
        assert!(start.checkpoint.is_some(), "the older slot is valid");
        assert_eq!(start.op(), 3, "the start uses the older checkpoint");
        assert_eq!(start.damaged[0].0, newest);
        let (mut journal, entries) = FileJournal::open_after_checkpoint(
            &path,
            start_anchor(&start),
            &start.damaged,
            MiddleDamage::PeersRepair,
        )
        .await
        .unwrap();
        let ops: Vec<u64> = entries.iter().map(|entry| entry.entry().op).collect();
        assert_eq!(
            ops,
            vec![4, 5, 6],
            "the journal still holds every op after it"
        );

        // The group went on: checkpoint 6 rewritten, op 7 over the journal's first record.
        let mut slots = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap()
            .slots;
        let rewritten = checkpoint_at(&mut slots, &mut journal, 6).await;
        assert_eq!(rewritten, newest, "the damaged slot is the one rewritten");
        journal.append(&entry(7, b"abcd"), None).await.unwrap();
        drop(journal);
        damage(&rewritten);
        let start = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap();
        assert_eq!(start.op(), 3);
        let refused = FileJournal::open_after_checkpoint(
            &path,
            start_anchor(&start),
            &start.damaged,
            MiddleDamage::PeersRepair,
        )
        .await
        .err()
        .expect("ops 4 to 6 are gone from the journal");
        let message = refused.to_string();
        assert!(message.contains("ops are missing"), "{message}");
        assert!(message.contains(&newest.display().to_string()), "{message}");
    }

    #[compio::test]
    async fn a_flipped_bit_ends_the_journal_at_that_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abc"), None).await.unwrap();
        }
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_SIZE + 3 + HEADER_SIZE + 1] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = open_whole(&path, anchor(0, b"abcd")).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"abc")]);
    }

    /// A standalone node's journal damaged in the middle: `Refuse` changes no byte and names
    /// the ops a cut would lose and the way out; `CutAccepted` cuts as a cluster node's does.
    /// A damaged last record is cut under every policy (what a crash leaves).
    #[compio::test]
    async fn middle_damage_is_refused_untouched_or_cut_when_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abc"), None).await.unwrap();
        }
        drop(journal);
        let whole = std::fs::read(&path).unwrap();
        let record = HEADER_SIZE + 3;
        let mut damaged = whole.clone();
        damaged[record + HEADER_SIZE + 1] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let refused = FileJournal::open_with(&path, anchor(0, b"abcd"), MiddleDamage::Refuse)
            .await
            .err()
            .expect("op 3 follows the damaged op 2");
        let message = refused.to_string();
        for expected in [
            "byte 259",
            "op 3 of this journal",
            "drop ops 2 on",
            "--cut-damaged-journals",
        ] {
            assert!(
                message.contains(expected),
                "{expected:?} missing: {message}"
            );
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "nothing was changed"
        );

        let (_, entries) =
            FileJournal::open_with(&path, anchor(0, b"abcd"), MiddleDamage::CutAccepted)
                .await
                .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), record as u64);

        let mut torn_last = whole.clone();
        torn_last[2 * record + HEADER_SIZE + 1] ^= 1;
        std::fs::write(&path, &torn_last).unwrap();
        let (_, entries) = FileJournal::open_with(&path, anchor(0, b"abcd"), MiddleDamage::Refuse)
            .await
            .unwrap();
        assert_eq!(entries.len(), 2, "a damaged last record is cut");
    }

    /// `check` (the verifier) reads a journal as `open` recovers it, without cutting: a
    /// record running past the end, or a damaged last record, is a torn tail (warning); a
    /// damaged record that live ops follow is corruption (error); an earlier cycle's records
    /// after a checkpoint are no problem; a journal starting after its checkpoint's next op is
    /// an error.
    #[compio::test]
    async fn check_tells_a_torn_tail_from_corruption_in_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"abcd")).await.unwrap();
        for op in 1..=4 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        let record = HEADER_SIZE + 4;
        let whole = Bytes::from(std::fs::read(&path).unwrap());
        let clean = check(&whole, anchor(0, b"abcd"));
        assert!(clean.problems.is_empty(), "{:?}", clean.problems);
        let positions: Vec<u64> = clean.entries.iter().map(|(at, _)| *at).collect();
        assert_eq!(positions, vec![0, 260, 520, 780]);
        assert_eq!(
            check(&whole, anchor(2, b"abcd")).entries.len(),
            2,
            "ops above the checkpoint"
        );

        let torn = check(&whole.slice(..whole.len() - 3), anchor(0, b"abcd"));
        assert_eq!(torn.entries.len(), 3);
        assert_eq!(torn.problems.len(), 1);
        let (severity, at, message) = &torn.problems[0];
        assert_eq!(
            (*severity, *at),
            (Severity::Warning, Some(3 * record as u64))
        );
        assert!(
            message.starts_with("torn tail (257 bytes, torn body)"),
            "{message}"
        );

        let flipped = |at: usize| {
            let mut bytes = whole.to_vec();
            bytes[at] ^= 1;
            Bytes::from(bytes)
        };
        let last = check(&flipped(3 * record + HEADER_SIZE + 1), anchor(0, b"abcd"));
        assert_eq!(last.problems[0].0, Severity::Warning, "{:?}", last.problems);
        // In the body, in the op number, in the size, in the parent: recovery would stop at op 2.
        let (op_field, size_field) = (PrepareHeader::OP_OFFSET, PrepareHeader::SIZE_OFFSET);
        for at in [
            record + HEADER_SIZE + 1,
            record + op_field,
            record + size_field,
            record + PrepareHeader::PARENT_OFFSET,
        ] {
            let middle = check(&flipped(at), anchor(0, b"abcd"));
            assert_eq!(middle.entries.len(), 1, "byte {at}");
            let (severity, position, message) = &middle.problems[0];
            assert_eq!(
                (*severity, *position),
                (Severity::Error, Some(record as u64)),
                "byte {at}"
            );
            assert!(
                message.contains("in the middle: op 3 follows at byte 520"),
                "{message}"
            );
        }
        // A header byte no checksum covers (reserved): recovery replays the op anyway.
        let reserved = PrepareHeader::RESERVED_FRAME_OFFSET;
        let unchecked = check(&flipped(record + reserved), anchor(0, b"abcd"));
        assert_eq!(unchecked.entries.len(), 4);
        assert_eq!(unchecked.problems.len(), 1, "{:?}", unchecked.problems);
        let (severity, position, message) = &unchecked.problems[0];
        assert_eq!(
            (*severity, *position),
            (Severity::Error, Some(record as u64))
        );
        assert!(
            message.contains("op 2: header bytes outside its checksum"),
            "{message}"
        );

        // A later record's cluster bytes are outside its checksum too: it chains to op 1, so
        // it is op 2 of this journal with damaged bytes. The first record's are another
        // cluster's, which start-up refuses.
        let cluster = check(
            &flipped(record + PrepareHeader::CLUSTER_OFFSET),
            anchor(0, b"abcd"),
        );
        assert_eq!(cluster.entries.len(), 4);
        let (severity, position, message) = &cluster.problems[0];
        assert_eq!(
            (*severity, *position),
            (Severity::Error, Some(record as u64))
        );
        assert!(
            message.contains("op 2: header bytes outside its checksum"),
            "{message}"
        );
        let first = check(&flipped(PrepareHeader::CLUSTER_OFFSET), anchor(0, b"abcd"));
        assert!(first.entries.is_empty());
        let (severity, position, message) = &first.problems[0];
        assert_eq!((*severity, *position), (Severity::Error, Some(0)));
        assert!(message.contains("op 1 belongs to cluster"), "{message}");

        // A checkpoint at op 4, then ops 5 and 6 over the old ops 1 and 2: ops 3 and 4 behind
        // them are an earlier cycle, not damage.
        let (mut journal, _) = FileJournal::open(&path, anchor(4, b"abcd")).await.unwrap();
        for op in 5..=6 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        let cycled = Bytes::from(std::fs::read(&path).unwrap());
        let after = check(&cycled, anchor(4, b"abcd"));
        assert!(after.problems.is_empty(), "{:?}", after.problems);
        assert_eq!(after.entries.len(), 2);
        let gap = check(&cycled, anchor(2, b"abcd"));
        assert!(
            gap.problems.iter().any(|(severity, at, message)| {
                *severity == Severity::Error
                    && *at == Some(0)
                    && message.contains("ops are missing")
            }),
            "{:?}",
            gap.problems
        );
    }

    /// Rewrites the header of the record at `at` through `change`.
    fn rewrite_header(bytes: &mut [u8], at: usize, change: impl FnOnce(&mut PrepareHeader)) {
        let mut header = PrepareHeader::decode_fixed(&bytes[at..at + HEADER_SIZE]).unwrap();
        change(&mut header);
        bytes[at..at + HEADER_SIZE].copy_from_slice(&header.to_bytes());
    }

    /// The parent `append` wrote in the record at `at`.
    fn parent_at(bytes: &[u8], at: usize) -> u128 {
        PrepareHeader::decode_fixed(&bytes[at..at + HEADER_SIZE])
            .unwrap()
            .parent
    }

    #[test]
    fn a_record_follows_only_the_record_its_parent_names() {
        let record = |op: u64, parent: u64| Record {
            entry: JournalEntry::Whole(entry(op, b"abcd")),
            size: HEADER_SIZE + 4,
            parent: u128::from(parent),
            cluster: 1,
        };
        let previous = JournalEntry::Whole(entry(4, b"abcd"));
        let checksum = previous.entry().checksum;
        let anchor = anchor(4, b"abcd");
        // Linked to the previous record, or to the checkpoint at the start of the file.
        assert_eq!(
            chain(&record(5, checksum), Some(&previous), anchor, false),
            Ok(true)
        );
        assert_eq!(chain(&record(5, checksum), None, anchor, false), Ok(true));
        // Another parent: a record of another history.
        assert_eq!(
            chain(&record(5, checksum ^ 1), Some(&previous), anchor, false),
            Err(CHAIN_BROKEN)
        );
        assert_eq!(
            chain(&record(5, checksum ^ 1), None, anchor, false),
            Err(CHAIN_BROKEN)
        );
        // Parent 0: an earlier build's record, until the journal is chained.
        assert_eq!(
            chain(&record(5, 0), Some(&previous), anchor, false),
            Ok(false)
        );
        assert_eq!(
            chain(&record(5, 0), Some(&previous), anchor, true),
            Err(CHAIN_BROKEN)
        );
        // The file starts with an op the checkpoint covers: its predecessor is gone.
        assert_eq!(chain(&record(3, 77), None, anchor, false), Ok(true));
        // Op 1 chains to op 0, whose checksum is 0.
        assert_eq!(
            chain(&record(1, 0), None, Anchor::default(), false),
            Ok(false)
        );
    }

    /// A reused file: the journal of one history (ops 1 to 4) overwritten by a shorter one
    /// (ops 1 and 2) of the same record sizes. The old op 3 behind the new op 2 is whole, valid
    /// and the op recovery expects next; only its parent tells it is not the new op 2's
    /// successor.
    #[compio::test]
    async fn a_stale_record_with_the_expected_op_after_the_end_is_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"")).await.unwrap();
        for op in 1..=4 {
            journal.append(&entry(op, b"old!"), None).await.unwrap();
        }
        drop(journal);
        let old = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"")).await.unwrap();
        for op in 1..=2 {
            journal.append(&entry(op, b"new!"), None).await.unwrap();
        }
        drop(journal);
        let mut reused = std::fs::read(&path).unwrap();
        let record = reused.len() / 2;
        reused.extend_from_slice(&old[2 * record..]);
        std::fs::write(&path, &reused).unwrap();
        let stale = Bytes::from(reused.clone());
        assert!(
            decode_record(&stale.slice(2 * record..), Some(3)).is_ok(),
            "the old op 3 is a valid record of the op expected next"
        );

        let checked = check(&stale, anchor(0, b""));
        assert_eq!(checked.entries.len(), 2);
        let (severity, position, message) = &checked.problems[0];
        assert_eq!(
            (*severity, *position),
            (Severity::Error, Some(2 * record as u64)),
            "the old op 4 follows it: the verifier cannot tell it from damage"
        );
        assert!(message.contains(CHAIN_BROKEN), "{message}");

        let (_, entries) = open_whole(&path, anchor(0, b"")).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"new!"), entry(2, b"new!")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * record as u64,
            "recovery cuts the stale records"
        );

        // Without parents (an earlier build's records) the same file replays the old ops.
        for at in (0..reused.len()).step_by(record) {
            rewrite_header(&mut reused, at, |header| header.parent = 0);
        }
        std::fs::write(&path, &reused).unwrap();
        let (_, entries) = open_whole(&path, anchor(0, b"")).await.unwrap();
        assert_eq!(
            entries,
            vec![
                entry(1, b"new!"),
                entry(2, b"new!"),
                entry(3, b"old!"),
                entry(4, b"old!")
            ]
        );
    }

    /// The first record after a checkpoint chains to the checkpoint's op, and a journal of an
    /// earlier build (parents 0) goes on chained: its legacy records replay, the new ones
    /// chain, and a zero parent after them ends the journal.
    #[compio::test]
    async fn records_chain_across_a_checkpoint_and_after_a_legacy_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"")).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        journal.reset_after_checkpoint(3).await;
        journal.append(&entry(4, b"abcd"), None).await.unwrap();
        drop(journal);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            parent_at(&bytes, 0),
            u128::from(entry(3, b"abcd").checksum),
            "op 4 chains to the checkpoint's op"
        );
        let (_, entries) = open_whole(&path, anchor(3, b"abcd")).await.unwrap();
        assert_eq!(entries, vec![entry(4, b"abcd")]);
        let other = Anchor {
            checksum: 99,
            ..anchor(3, b"abcd")
        };
        let (_, entries) = open_whole(&path, other).await.unwrap();
        assert!(entries.is_empty(), "a checkpoint of another history");

        // An earlier build's journal: no parent, no cluster.
        std::fs::remove_file(&path).unwrap();
        let (mut journal, _) = FileJournal::open(&path, anchor(0, b"")).await.unwrap();
        for op in 1..=2 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        let mut legacy = std::fs::read(&path).unwrap();
        let record = legacy.len() / 2;
        for at in [0, record] {
            rewrite_header(&mut legacy, at, |header| {
                header.parent = 0;
                header.cluster = 0;
            });
        }
        std::fs::write(&path, &legacy).unwrap();
        let (mut journal, entries) = open_whole(&path, anchor(0, b"")).await.unwrap();
        assert_eq!(entries.len(), 2, "a legacy journal recovers");
        journal.append(&entry(3, b"abcd"), None).await.unwrap();
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            parent_at(&bytes, 2 * record),
            u128::from(entry(2, b"abcd").checksum)
        );
        let (_, entries) = open_whole(&path, anchor(0, b"")).await.unwrap();
        assert_eq!(entries.len(), 3);
        // A legacy record after a chained one is one an earlier build left behind.
        let legacy_op_4 = entry(4, b"abcd");
        bytes.extend_from_slice(&encode_header(&legacy_op_4, None, 0, 0).unwrap());
        bytes.extend_from_slice(&legacy_op_4.body);
        let stale = Bytes::from(bytes.clone());
        assert!(decode_record(&stale.slice(3 * record..), Some(4)).is_ok());
        std::fs::write(&path, &bytes).unwrap();
        let (_, entries) = open_whole(&path, anchor(0, b"")).await.unwrap();
        assert_eq!(
            entries.len(),
            3,
            "the zero parent after a chained record ends it"
        );
    }

    /// A journal of another cluster is refused, naming the file and both ids, and left as it
    /// was; records of an earlier build (cluster 0) are any cluster's.
    #[compio::test]
    async fn a_journal_of_another_cluster_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let theirs = Anchor {
            cluster: crate::consensus::cluster::cluster_id("theirs"),
            ..anchor(0, b"")
        };
        let (mut journal, _) = FileJournal::open(&path, theirs).await.unwrap();
        for op in 1..=2 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        // A torn tail recovery would otherwise cut.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"torn");
        std::fs::write(&path, &bytes).unwrap();
        let ours = anchor(0, b"");
        let early = FileJournal::refuse_foreign(&path, ours.cluster).expect_err("refused");
        assert!(early.to_string().contains("belongs to cluster"), "{early}");
        FileJournal::refuse_foreign(&path, theirs.cluster).expect("its own cluster's");
        let refused = FileJournal::open(&path, ours).await.err().expect("refused");
        let message = refused.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains(&format!("{:032x}", theirs.cluster)),
            "{message}"
        );
        assert!(
            message.contains(&format!("{:032x}", ours.cluster)),
            "{message}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing changed");
        let checked = check(&Bytes::from(bytes.clone()), ours);
        assert_eq!(checked.problems[0].0, Severity::Error);

        let record = (bytes.len() - 4) / 2;
        for at in [0, record] {
            rewrite_header(&mut bytes, at, |header| header.cluster = 0);
        }
        std::fs::write(&path, &bytes).unwrap();
        let (_, entries) = open_whole(&path, ours).await.unwrap();
        assert_eq!(entries.len(), 2, "cluster 0: an earlier build's records");
    }
}
