//! `iggy-server verify [--path DIR]`: the offline verifier of a stopped node's data directory
//! (or a backup copy of one). It reads what start-up reads, through the same decoders (the
//! format gate, `load_checkpoint`, the journal walk of `wal.rs`, the segment walk of
//! `iggy_storage::partition_log`, the checked records, a cluster node's runs file), and never
//! opens a file for writing.
//!
//! One line per problem (`error:` or `warning:`, the file, the byte offset where known), then a
//! summary line. Warnings are what start-up repairs without losing an acknowledged write (a
//! torn tail a crash left, an index rebuilt from its log); errors are what makes start-up
//! refuse data or drop records that verified once. Exit code: 0 when there is no error
//! (warnings allowed), 1 when there is at least one, 2 for a bad flag (clap).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bytes::Bytes;
use iggy_storage::data_dir::{partition_dir_under, partition_namespace};
use iggy_storage::partition_log::{self, LogCheck};
use iggy_storage::verify::{self as checks, Finding, Severity};

use iggy_generated::storage::{CLUSTER_REPLICAS_FILE, REPLICA_RUNS_FILE, ReplicaRuns};
use iggy_wire::WireDecode;

use crate::consensus::cluster::node_cluster;
use crate::consensus::group::load_checkpoint;
use crate::consensus::plane::metadata_on_disk;
use crate::consensus::replica_count;
use crate::consensus::runs::RunLedger;
use crate::consensus::wal::{self, Anchor, JournalCheck, JournalEntry};
use iggy_generated::frames::MetadataHistory;

/// Exit code when at least one error was found.
pub const EXIT_ERRORS: u8 = 1;

/// Everything the verifier found in one data directory.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Consensus groups whose checkpoint and journal were read (metadata and partitions).
    pub groups: usize,
    /// Partition directories whose segments were walked.
    pub partitions: usize,
}

impl Report {
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    }

    /// The last line the verifier prints.
    pub fn summary(&self, root: &Path) -> String {
        let errors = self.count(Severity::Error);
        let verdict = if errors == 0 { "verified" } else { "FAILED" };
        format!(
            "{verdict}: {} ({} groups, {} partitions): {errors} errors, {} warnings",
            root.display(),
            self.groups,
            self.partitions,
            self.count(Severity::Warning),
        )
    }
}

/// Runs the verifier on `root`, prints its findings and summary to stdout, and returns the
/// exit code.
pub fn main(root: &Path) -> ExitCode {
    let runtime = match compio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("iggy-server verify: cannot start the io_uring runtime: {error}");
            return ExitCode::from(EXIT_ERRORS);
        }
    };
    let report = runtime.block_on(verify(root));
    for finding in &report.findings {
        println!("{finding}");
    }
    println!("{}", report.summary(root));
    if report.count(Severity::Error) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_ERRORS)
    }
}

/// Checks the data directory `root` without changing it.
pub async fn verify(root: &Path) -> Report {
    let mut report = Report::default();
    if !root.is_dir() {
        let message = "not a directory (no data directory to verify)";
        report.findings.push(Finding::error(root, None, message));
        return report;
    }
    if std::fs::read_dir(root).is_ok_and(|mut entries| entries.next().is_none()) {
        let message = "empty: no data directory to verify yet (a start formats an empty one)";
        report.findings.push(Finding::error(root, None, message));
        return report;
    }
    // Held while the check runs, so no server starts on the directory meanwhile; a running
    // one's files change under the check, which may then report what it is in the middle of.
    let _hold = match iggy_storage::data_dir::lock_data_dir(root) {
        Ok(hold) => Some(hold),
        Err(_) => {
            let message = "a running iggy-server holds this directory: its files change while \
                           they are read, so what follows may be what it is in the middle of \
                           (verify a stopped node's directory)";
            report.findings.push(Finding::warning(root, None, message));
            None
        }
    };
    if let Some(finding) = checks::check_marker(root) {
        // Not ours (or of another format): start-up reads nothing else in it, nor does this.
        report.findings.push(finding);
        return report;
    }
    // A cluster node's directory judged under another cluster's configuration (verify run
    // without the node's IGGY_CONFIG_PATH) fails every file that names the cluster for one
    // cause: said once, with the remedy.
    let replica_count = ReplicaCountFile::read(root);
    if let Some(finding) = replica_count.another_clusters() {
        report.findings.push(finding);
        return report;
    }
    let metadata_dir = root.join("metadata");
    let live = match check_group(&metadata_dir, GroupKind::Metadata, &mut report).await {
        Some(Replayed::Metadata(live)) => Some(live),
        _ => None,
    };
    // A cluster node's copy of a partition is judged by its peers too (see
    // `unaccounted_batches`).
    let standalone = replica_count
        .recorded()
        .is_some_and(|(_, replicas)| replicas == 1);
    let (namespaces, findings) = checks::check_initialization(root).await;
    report.findings.extend(findings);
    let (partitions, findings) = checks::partition_dirs(root);
    report.findings.extend(findings);
    if let Some(live) = &live {
        let missing = missing_partition_dirs(root, live, &partitions, &namespaces);
        report.findings.extend(missing);
    }
    for partition in partitions {
        let initialization = namespaces.get(&partition.namespace);
        let findings = checks::check_partition_revision(&partition, initialization).await;
        report.findings.extend(findings);
        report.partitions += 1;
        match partition_log::check(&partition.path).await {
            Ok(log) => {
                report.findings.extend(log.findings.iter().cloned());
                let kind = GroupKind::Partition(&log);
                let replayed = check_group(&partition.path, kind, &mut report).await;
                if let Some(Replayed::Partition { accounted_to }) = replayed
                    && standalone
                {
                    report.findings.extend(unaccounted_batches(
                        &partition.path,
                        &log,
                        accounted_to,
                    ));
                }
            }
            Err(error) => report
                .findings
                .push(Finding::unreadable(&partition.path, &error)),
        }
    }
    if report.partitions > 0 && metadata_on_disk(root) == MetadataHistory::Absent {
        let message = format!(
            "no metadata history (no journal record, no checkpoint) beside {} partition \
             directories: the metadata was lost or removed; a standalone node refuses to start \
             on it (a new history would take those directories over), a cluster node is refused \
             while its peers hold the history (README \"Replace a cluster node's disk\")",
            report.partitions
        );
        report
            .findings
            .push(Finding::error(&metadata_dir, None, message));
    }
    report.findings.extend(checks::check_discarded(root));
    report.findings.extend(check_runs(root));
    report.findings.extend(replica_count.check());
    report
}

/// A directory's `cluster.replicas` (the cluster and replica count its node recorded), read
/// once for the checks that need it.
struct ReplicaCountFile {
    path: PathBuf,
    bytes: std::io::Result<Vec<u8>>,
}

impl ReplicaCountFile {
    fn read(root: &Path) -> ReplicaCountFile {
        let path = root.join(CLUSTER_REPLICAS_FILE);
        let bytes = std::fs::read(&path);
        ReplicaCountFile { path, bytes }
    }

    /// The cluster and replica count an intact file records.
    fn recorded(&self) -> Option<(u128, u8)> {
        replica_count::recorded(self.bytes.as_ref().ok()?)
    }

    /// The error for an intact file naming another cluster than the configuration read;
    /// `None` otherwise (a damaged file is [`ReplicaCountFile::check`]'s).
    fn another_clusters(&self) -> Option<Finding> {
        let (cluster, replicas) = self.recorded()?;
        (cluster != node_cluster()).then(|| {
            Finding::error(
                &self.path,
                None,
                format!(
                    "this directory is a node's of cluster {cluster:#x} ({replicas} replicas), \
                     and the configuration read names cluster.name {:?} ({:#x}): give verify \
                     that node's configuration (IGGY_CONFIG_PATH); nothing else was judged",
                    crate::consensus::cluster::node_cluster_name(),
                    node_cluster()
                ),
            )
        })
    }

    /// A cluster node's file, which each start with a metadata history reads and refuses when
    /// damaged or another cluster's (the roster it is compared with is the configuration's, not
    /// known here).
    fn check(&self) -> Option<Finding> {
        let bytes = match &self.bytes {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                let message = format!("unreadable: {error}");
                return Some(Finding::error(&self.path, None, message));
            }
        };
        let error = replica_count::decode(bytes, node_cluster()).err()?;
        Some(Finding::error(
            &self.path,
            None,
            format!("{error} (start-up refuses it)"),
        ))
    }
}

/// A cluster node's `replica.runs`, which each start with a metadata history reads and refuses
/// when damaged or another cluster's. Whose node it is cannot be told here (no `--replica-id`),
/// so the file is judged under the replica id it names.
fn check_runs(root: &Path) -> Option<Finding> {
    let path = root.join(REPLICA_RUNS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => return Some(Finding::error(&path, None, format!("unreadable: {error}"))),
    };
    let replica = ReplicaRuns::decode_exact(&bytes).map_or(0, |file| file.replica);
    let error = RunLedger::decode(&bytes, node_cluster(), replica).err()?;
    Some(Finding::error(
        &path,
        None,
        format!("{error} (start-up refuses it; README, \"Replace a cluster node's disk\")"),
    ))
}

enum GroupKind<'a> {
    /// The metadata group: a `MetadataSnapshot` checkpoint, every op journaled whole.
    Metadata,
    /// A partition's group over its checked log: stand-ins name batches in that log.
    Partition(&'a LogCheck),
}

/// The live partitions' directories the metadata names that are not on disk though their
/// `partition-initialization` namespace published the incarnation (a backup copy missing one,
/// or one removed by hand): start-up does not serve such a partition. (One not published yet
/// is a creation a crash interrupted, which start-up finishes.)
fn missing_partition_dirs(
    root: &Path,
    live: &std::collections::BTreeMap<(u32, u32, u32), u64>,
    on_disk: &[checks::PartitionDir],
    namespaces: &std::collections::BTreeMap<String, checks::Initialization>,
) -> Vec<Finding> {
    let found: std::collections::HashSet<&str> =
        on_disk.iter().map(|dir| dir.namespace.as_str()).collect();
    live.iter()
        .filter(|&(&(s, t, p), &incarnation)| {
            let namespace = partition_namespace(s, t, p);
            let published = namespaces
                .get(&namespace)
                .and_then(|records| records.created);
            !found.contains(namespace.as_str()) && published >= Some(incarnation)
        })
        .map(|(&(s, t, p), incarnation)| {
            let path = partition_dir_under(root, s, t, p);
            let message = format!(
                "missing, though the metadata holds this partition (incarnation {incarnation}): \
                 start-up does not serve it (3003); restore it from the copy it came from, or \
                 delete the partition"
            );
            Finding::error(&path, None, message)
        })
        .collect()
}

/// The metadata model the checkpoint's `model` and the journal's ops after it replay to, as
/// start-up replays them; `None` when an op is not journaled whole.
fn replayed_model(
    mut model: iggy_metadata::Metadata,
    journal: &JournalCheck,
) -> Option<iggy_metadata::Metadata> {
    for (_, record) in &journal.entries {
        let JournalEntry::Whole(entry) = record else {
            return None;
        };
        match entry.operation {
            iggy_vsr::OPERATION_REGISTER => {
                let _ = iggy_metadata::machine::register(
                    &mut model,
                    entry.op,
                    entry.client,
                    &entry.body,
                );
            }
            iggy_vsr::OPERATION_NOMINATE_LIMITS => {}
            operation => {
                let _ = iggy_metadata::machine::apply(
                    &mut model,
                    entry.op,
                    entry.client,
                    operation,
                    &entry.body,
                );
            }
        }
    }
    Some(model)
}

/// A group's checkpoint (the newest valid slot, through `load_checkpoint` as start-up reads it)
/// and its journal after that checkpoint. For the metadata group, the live partitions its
/// checkpoint and journal replay to (`None` when they cannot be read).
async fn check_group(dir: &Path, kind: GroupKind<'_>, report: &mut Report) -> Option<Replayed> {
    report.groups += 1;
    report.findings.extend(check_view_state(dir));
    let start = match load_checkpoint(dir).await {
        Ok(start) => start,
        Err(error) => {
            // Start-up refuses the group; its journal cannot be judged without the checkpoint.
            let message = format!("{error}; start-up refuses the group");
            report.findings.push(Finding::error(dir, None, message));
            return None;
        }
    };
    // A slot torn by a crash during its in-place write is what the other slot is for; whether
    // the fallback holds is the journal check's question (a gap after the older op is an error).
    for (path, why) in &start.damaged {
        let message = format!("damaged ({why}); start-up uses the other slot");
        report.findings.push(Finding::warning(path, None, message));
    }
    let anchor = Anchor::after(start.checkpoint.as_ref().map(|loaded| &loaded.replica));
    let (checkpoint_path, state) = match start.checkpoint {
        Some(loaded) => (loaded.path, Some(loaded.state)),
        None => (dir.join("checkpoint.0"), None),
    };
    // The state decoded once: checked here, replayed over below. With no checkpoint, the
    // metadata replays from an empty model and a partition's messages are counted from 0.
    let mut snapshot = state.is_none().then(iggy_metadata::Metadata::default);
    let mut checkpointed = 0;
    if let Some(state) = &state {
        let decoded = match &kind {
            GroupKind::Metadata => {
                iggy_metadata::snapshot::decode(state).map(|model| snapshot = Some(model))
            }
            GroupKind::Partition(log) => {
                iggy_partition::CheckpointState::decode(state).map(|decoded| {
                    check_next_offset(&checkpoint_path, decoded.next_offset, log, report);
                    checkpointed = decoded.next_offset;
                })
            }
        };
        if let Err(why) = decoded {
            let message = format!("state does not decode: {why}; start-up refuses the group");
            report
                .findings
                .push(Finding::error(&checkpoint_path, None, message));
        }
    }
    let journal_path = dir.join("journal.wal");
    let bytes = match std::fs::read(&journal_path) {
        Ok(bytes) => Bytes::from(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if let Some(message) = journal_missing(&kind, state.is_some()) {
                report
                    .findings
                    .push(Finding::error(&journal_path, None, message));
            }
            return None;
        }
        Err(error) => {
            let message = format!("unreadable: {error}");
            report
                .findings
                .push(Finding::error(&journal_path, None, message));
            return None;
        }
    };
    let journal = wal::check(&bytes, anchor);
    report
        .findings
        .extend(journal_findings(&journal_path, &journal, &kind));
    match kind {
        GroupKind::Metadata => replayed_model(snapshot?, &journal)
            .map(|model| Replayed::Metadata(model.live_partitions())),
        GroupKind::Partition(_) => {
            accounted_to(checkpointed, &journal).map(|to| Replayed::Partition { accounted_to: to })
        }
    }
}

/// What a group's checkpoint and journal replay to, for the checks across files.
enum Replayed {
    /// The metadata's live partitions, with their incarnations.
    Metadata(std::collections::BTreeMap<(u32, u32, u32), u64>),
    /// The offset after the last message a partition's checkpoint and journal account for.
    Partition { accounted_to: u64 },
}

/// The offset after the last message the checkpoint (counting up to `checkpointed`) and the
/// journal's stand-ins account for; `None` when a send is journaled whole (its offsets are not
/// read here).
fn accounted_to(checkpointed: u64, journal: &JournalCheck) -> Option<u64> {
    let send = iggy_generated::frames::Operation::SendMessages.to_repr();
    let mut to = checkpointed;
    for (_, record) in &journal.entries {
        match record {
            JournalEntry::Stowed(entry) => {
                let stand_in =
                    iggy_generated::storage::StowedBatch::decode_fixed(&entry.body).ok()?;
                to = to.max(stand_in.base_offset + u64::from(stand_in.message_count));
            }
            JournalEntry::Whole(entry) if entry.operation == send => return None,
            JournalEntry::Whole(_) => {}
        }
    }
    Some(to)
}

/// A standalone partition's log holding batches its checkpoint and journal do not account
/// for: one is an append a crash interrupted (never acknowledged), which start-up drops; more
/// is journal or checkpoint history lost (a journal replaced by an older copy, checkpoint
/// slots removed), which start-up refuses. (A cluster node's backup may hold batches of ops
/// a view change discarded; start-up drops them there and its peers decide.)
fn unaccounted_batches(path: &Path, log: &LogCheck, accounted_to: u64) -> Option<Finding> {
    let unaccounted = log
        .batches
        .iter()
        .filter(|(base, _)| *base >= accounted_to)
        .count();
    let range = format!("offsets {accounted_to}..{}", log.next_offset);
    match unaccounted {
        0 => None,
        1 => Some(Finding::warning(
            path,
            None,
            format!(
                "{range} (one batch) are in the log, but no journaled op accounts for them: an \
                 append a crash interrupted (never acknowledged), which start-up drops"
            ),
        )),
        batches => Some(Finding::error(
            path,
            None,
            format!(
                "{range} ({batches} batches) are in the log, but neither the journal nor a \
                 checkpoint accounts for them (a crash leaves at most one): journal or \
                 checkpoint history was lost, and a standalone node refuses the partition"
            ),
        )),
    }
}

/// A group that wrote something and has no journal lost the ops after its checkpoint: a
/// standalone node refuses it (a cluster node copies it from a peer).
fn journal_missing(kind: &GroupKind<'_>, checkpointed: bool) -> Option<String> {
    let written = match kind {
        GroupKind::Metadata => checkpointed,
        GroupKind::Partition(log) => checkpointed || log.next_offset > 0,
    };
    written.then(|| {
        "missing, though the group was written: the ops after its checkpoint are lost; a \
         standalone node refuses the group (a cluster node copies it from a peer)"
            .to_string()
    })
}

/// A cluster group's view state slots (`view.0`, `view.1`), as its open reads them: one slot
/// that does not decode is what the other is for (a warning); both, or a slot another cluster
/// wrote, refuse the group (an error). Whose replica it is cannot be told here, so each slot is
/// judged under the replica id it names.
fn check_view_state(dir: &Path) -> Vec<Finding> {
    use iggy_generated::storage::VsrViewState;
    let mut findings = Vec::new();
    let mut invalid = 0;
    let mut present = 0;
    for slot in ["view.0", "view.1"] {
        let path = dir.join(slot);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                findings.push(Finding::error(&path, None, format!("unreadable: {error}")));
                continue;
            }
        };
        present += 1;
        let replica = VsrViewState::decode_fixed(&bytes).map_or(0, |record| record.replica);
        match iggy_vsr::ViewState::decode(&bytes, node_cluster(), replica) {
            Ok(_) => {}
            Err(iggy_vsr::ViewStateError::Invalid) => {
                invalid += 1;
                let message = "damaged (torn or corrupt); start-up uses the other slot".to_string();
                findings.push(Finding::warning(&path, None, message));
            }
            Err(error) => {
                let message = format!("{error}; start-up refuses the group");
                findings.push(Finding::error(&path, None, message));
            }
        }
    }
    if invalid == 2 && present == 2 {
        findings.clear();
        let message = "both view state slots are damaged: the view this replica voted in is \
                       unknown, and start-up refuses the group"
            .to_string();
        findings.push(Finding::error(dir, None, message));
    }
    findings
}

fn journal_findings(path: &Path, journal: &JournalCheck, kind: &GroupKind<'_>) -> Vec<Finding> {
    let mut findings: Vec<Finding> = journal
        .problems
        .iter()
        .map(|(severity, offset, message)| Finding {
            severity: *severity,
            path: PathBuf::from(path),
            offset: *offset,
            message: message.clone(),
        })
        .collect();
    // Stand-ins past a damaged batch all name batches the log does not hold: the first is said
    // whole, the rest in one line (a 4-byte damage printed 70 lines).
    let mut unheld: Vec<(Option<u64>, u64)> = Vec::new();
    for (position, record) in &journal.entries {
        let at = Some(*position);
        match (kind, record) {
            (_, JournalEntry::Whole(_)) => {}
            (GroupKind::Metadata, JournalEntry::Stowed(entry)) => {
                let message = format!(
                    "op {} holds a stand-in, but metadata ops are journaled whole; start-up \
                     refuses the journal",
                    entry.op
                );
                findings.push(Finding::error(path, at, message));
            }
            (GroupKind::Partition(log), JournalEntry::Stowed(entry)) => {
                if let Some(message) = stand_in_problem(entry, log) {
                    if unheld.is_empty() {
                        findings.push(Finding::error(path, at, message));
                    }
                    unheld.push((at, entry.op));
                }
            }
        }
    }
    if let (Some(&(at, first)), Some(&(_, last))) = (unheld.get(1), unheld.last()) {
        let message = format!(
            "ops {first} to {last} ({} more) name batches the log does not hold either",
            unheld.len() - 1
        );
        findings.push(Finding::error(path, at, message));
    }
    findings
}

/// Why the stand-in `entry` names a batch recovery cannot read back from the log, if it does.
/// A batch below the log's first offset was retired with its segment since, which is fine.
fn stand_in_problem(entry: &iggy_vsr::Entry, log: &LogCheck) -> Option<String> {
    let Ok(stand_in) = iggy_generated::storage::StowedBatch::decode_fixed(&entry.body) else {
        return Some(format!("op {}: its stand-in does not decode", entry.op));
    };
    if stand_in.base_offset < log.first_offset || log.holds(stand_in.base_offset, stand_in.length) {
        return None;
    }
    Some(format!(
        "op {} names the batch at offset {} ({} bytes), which the log does not hold; \
         recovery ends the journal before it (acknowledged messages lost)",
        entry.op, stand_in.base_offset, stand_in.length
    ))
}

/// A checkpoint counting messages the log no longer holds: only a machine crash under the
/// replicated policy (which does not promise them) or damage loses them.
fn check_next_offset(path: &Path, next_offset: u64, log: &LogCheck, report: &mut Report) {
    if next_offset > log.next_offset {
        let message = format!(
            "counts messages up to offset {next_offset}, but the log ends at {}; a standalone \
             node whose checkpoints fsync the segments (a persisted policy) does not serve the \
             partition until the loss is accepted (--cut-damaged-journals), others serve what \
             the log holds",
            log.next_offset
        );
        report.findings.push(Finding::warning(path, None, message));
    }
}
