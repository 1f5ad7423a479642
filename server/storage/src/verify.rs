//! Read-only checks of a stopped node's data directory, for the offline verifier
//! (`iggy-server verify`). Each check runs the same decoder as start-up, on files opened for
//! reading only, and reports what start-up would do about each problem instead of doing it.
//!
//! Severity rule: a problem start-up resolves without losing an acknowledged write (a torn
//! tail a crash left, an `.index` rebuilt from its `.log`, an interrupted discard) is a
//! warning; anything that makes start-up refuse a partition or drop a record that verified
//! once is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::StorageError;
use crate::layout::marker;
use crate::records::read_checked_u64;
use crate::revision::{CREATED_REVISION, RETIREMENT_FENCE};

/// How bad a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Start-up repairs it without losing an acknowledged write.
    Warning,
    /// Start-up refuses the data or loses records that verified once.
    Error,
}

/// One problem: the file, the byte offset in it where known, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub path: PathBuf,
    pub offset: Option<u64>,
    pub message: String,
}

impl Finding {
    pub fn warning(path: &Path, offset: Option<u64>, message: impl Into<String>) -> Finding {
        Finding::new(Severity::Warning, path, offset, message)
    }

    pub fn error(path: &Path, offset: Option<u64>, message: impl Into<String>) -> Finding {
        Finding::new(Severity::Error, path, offset, message)
    }

    fn new(
        severity: Severity,
        path: &Path,
        offset: Option<u64>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            severity,
            path: path.to_path_buf(),
            offset,
            message: message.into(),
        }
    }

    /// A storage error met while reading `path`, as an error finding.
    pub fn unreadable(path: &Path, error: &StorageError) -> Finding {
        Finding::error(path, None, format!("unreadable: {error}"))
    }
}

impl std::fmt::Display for Finding {
    /// `error: <file> at byte <offset>: <message>` (the offset only where known).
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let severity = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(formatter, "{severity}: {}", self.path.display())?;
        if let Some(offset) = self.offset {
            write!(formatter, " at byte {offset}")?;
        }
        write!(formatter, ": {}", self.message)
    }
}

/// The format marker of the data directory `root`, checked as the start-up gate checks it.
pub fn check_marker(root: &Path) -> Option<Finding> {
    let marker_path = root.join(marker::FILE_NAME);
    match crate::data_dir::check_marker(root) {
        Ok(()) => None,
        Err(error) => Some(Finding::error(&marker_path, None, error.to_string())),
    }
}

/// A checked u64 record (`created.revision`, `retirement.fence`); `Ok(None)` when absent.
pub async fn check_record(path: &Path) -> Result<Option<u64>, Finding> {
    read_checked_u64(path)
        .await
        .map_err(|error| Finding::error(path, Some(0), error.to_string()))
}

/// The records of one `partition-initialization/<stream>-<topic>-<partition>` namespace.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Initialization {
    /// The incarnation last published for the partition.
    pub created: Option<u64>,
    /// The incarnation start-up refuses to serve.
    pub fence: Option<u64>,
}

/// Every namespace under `{root}/partition-initialization`, keyed by its name, with the
/// findings about its records.
pub async fn check_initialization(root: &Path) -> (BTreeMap<String, Initialization>, Vec<Finding>) {
    let dir = root.join(crate::data_dir::PARTITION_INITIALIZATION);
    let mut namespaces = BTreeMap::new();
    let mut findings = Vec::new();
    let names = match sorted_entries(&dir) {
        Ok(names) => names,
        Err(finding) => return (namespaces, finding.into_iter().collect()),
    };
    for (name, path) in names {
        let mut records = Initialization::default();
        for (file, slot) in [
            (CREATED_REVISION, &mut records.created),
            (RETIREMENT_FENCE, &mut records.fence),
        ] {
            match check_record(&path.join(file)).await {
                Ok(value) => *slot = value,
                Err(finding) => findings.push(finding),
            }
        }
        namespaces.insert(name, records);
    }
    (namespaces, findings)
}

/// A partition directory `streams/<s>/topics/<t>/partitions/<p>` and its namespace name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDir {
    pub path: PathBuf,
    /// `<stream>-<topic>-<partition>`, the name of its `partition-initialization` namespace.
    pub namespace: String,
}

/// Every partition directory under `{root}/streams`, in id order of the names as listed.
pub fn partition_dirs(root: &Path) -> (Vec<PartitionDir>, Vec<Finding>) {
    let mut dirs = Vec::new();
    let mut findings = Vec::new();
    let mut list = |dir: &Path| match sorted_entries(dir) {
        Ok(entries) => entries,
        Err(finding) => {
            findings.extend(finding);
            Vec::new()
        }
    };
    for (stream, stream_dir) in list(&root.join("streams")) {
        for (topic, topic_dir) in list(&stream_dir.join("topics")) {
            for (partition, path) in list(&topic_dir.join("partitions")) {
                let namespace = format!("{stream}-{topic}-{partition}");
                dirs.push(PartitionDir { path, namespace });
            }
        }
    }
    (dirs, findings)
}

/// A partition directory's `created.revision` against its namespace's records, as start-up
/// opens it: a fenced incarnation is refused (error); a directory newer than the published
/// incarnation is a publication a crash interrupted, which start-up writes again (warning).
pub async fn check_partition_revision(
    dir: &PartitionDir,
    initialization: Option<&Initialization>,
) -> Vec<Finding> {
    let record = dir.path.join(CREATED_REVISION);
    let revision = match check_record(&record).await {
        Ok(Some(revision)) => revision,
        Ok(None) => {
            let message = "missing: start-up adopts the directory as a legacy one";
            return vec![Finding::warning(&record, None, message)];
        }
        Err(mut finding) => {
            finding.message = match initialization.and_then(|records| records.created) {
                Some(published) => format!(
                    "{}; start-up writes it again if the metadata opens incarnation \
                     {published}, the one its namespace publishes, and refuses the partition \
                     otherwise",
                    finding.message
                ),
                None => format!(
                    "{}; its namespace publishes no incarnation, so start-up refuses the \
                     partition",
                    finding.message
                ),
            };
            return vec![finding];
        }
    };
    let initialization = initialization.copied().unwrap_or_default();
    let mut findings = Vec::new();
    if initialization.fence == Some(revision) {
        let message = format!("incarnation {revision} is fenced; start-up refuses the partition");
        findings.push(Finding::error(&record, None, message));
    }
    match initialization.created {
        Some(published) if published == revision => {}
        Some(published) if published > revision => {
            let message = format!(
                "incarnation {revision}, but its partition-initialization namespace publishes \
                 the newer {published}: the directory is not the one initialized there"
            );
            findings.push(Finding::error(&record, None, message));
        }
        published => {
            let message = format!(
                "incarnation {revision} is not yet published (the namespace names {published:?}); \
                 start-up publishes it"
            );
            findings.push(Finding::warning(&record, None, message));
        }
    }
    findings
}

/// `{root}/discarded-partitions` holds trees whose removal a crash interrupted; start-up
/// finishes it.
pub fn check_discarded(root: &Path) -> Vec<Finding> {
    let dir = root.join("discarded-partitions");
    match sorted_entries(&dir) {
        Ok(entries) => entries
            .into_iter()
            .map(|(_, path)| {
                let message = "a discard a crash interrupted; start-up removes it";
                Finding::warning(&path, None, message)
            })
            .collect(),
        Err(findings) => findings.into_iter().collect(),
    }
}

/// The entries of `dir` by name (none when it does not exist).
fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, Option<Finding>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(Some(Finding::error(dir, None, error.to_string()))),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| Some(Finding::error(dir, None, error.to_string())))?;
        found.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    found.sort();
    Ok(found)
}
