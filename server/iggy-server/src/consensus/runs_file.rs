//! The shell of [`super::runs`]: the data directory's `replica.runs` file, read and advanced at
//! start, rewritten when a link teaches the node something, and the stop of a node that a peer
//! found to be an older copy of itself.

use super::admission::Refusal;
use super::runs::{Declared, RunLedger};
use iggy_generated::storage::REPLICA_RUNS_FILE;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// The exit code of a node that found its data directory to be an older copy (EX_TEMPFAIL:
/// the restart it is stopped for starts it restored).
pub const STALE_COPY_EXIT_CODE: i32 = 75;

/// A node's runs while it runs: the ledger the handshakes read, and the file it is kept in
/// once the data directory is this node's (`None` before a node that starts empty opened it).
#[derive(Debug)]
pub struct RunsState {
    cluster: u128,
    replica: u8,
    ledger: RefCell<RunLedger>,
    file: RefCell<Option<PathBuf>>,
}

impl RunsState {
    /// The runs of this start. With a metadata history on disk (`data_dir` given) the file is
    /// read, the run advanced and written durably before this returns, so no handshake ever
    /// declares a run the disk does not hold. Without one the run is 0 (never judged) and the
    /// file is written once [`RunsState::attach`] names the opened directory.
    pub fn start(
        cluster: u128,
        replica: u8,
        data_dir: Option<&Path>,
        restored: bool,
    ) -> Result<Self, String> {
        let (ledger, file) = match data_dir {
            Some(dir) => {
                let path = dir.join(REPLICA_RUNS_FILE);
                let previous = match std::fs::read(&path) {
                    Ok(bytes) => Some(RunLedger::decode(&bytes, cluster, replica).map_err(
                        |error| {
                            format!(
                                "{}: {error}; nothing was changed. Removing the file lets the \
                                 node start, and its peers then judge it as a copy they cannot \
                                 place (it restarts restored once)",
                                path.display()
                            )
                        },
                    )?),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                    Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
                };
                let ledger = RunLedger::start(previous, true, restored, rand::random());
                (ledger, Some(path))
            }
            None => (RunLedger::start(None, false, restored, 0), None),
        };
        match &file {
            Some(path) => tracing::info!(
                "replica {replica}: this start is {} ({})",
                ledger.own(),
                path.display()
            ),
            None => tracing::info!(
                "replica {replica}: no metadata history at start: this run is not numbered"
            ),
        }
        let state = RunsState {
            cluster,
            replica,
            ledger: RefCell::new(ledger),
            file: RefCell::new(file),
        };
        state.persist();
        Ok(state)
    }

    /// The ledger as a handshake built now declares it.
    pub fn ledger(&self) -> RunLedger {
        self.ledger.borrow().clone()
    }

    /// The data directory of a node that started empty is open: its runs are kept from now.
    pub fn attach(&self, data_dir: &Path) {
        *self.file.borrow_mut() = Some(data_dir.join(REPLICA_RUNS_FILE));
        self.persist();
    }

    /// A link with `peer` admitted on `theirs`: remembered, and written before any later
    /// handshake (blocking: a few bytes, at admissions only).
    pub fn learn(&self, peer: u8, theirs: Declared) {
        if self.ledger.borrow_mut().learn(peer, theirs) {
            self.persist();
        }
    }

    fn persist(&self) {
        if let Some(path) = self.file.borrow().as_ref() {
            let bytes = self.ledger.borrow().encode(self.cluster, self.replica);
            iggy_storage::fail_stop::write_atomically_blocking(path, &bytes);
        }
    }

    /// A peer found this node's data directory older than this node was (`refusal` says
    /// how): the restored marker is written, so the next start votes in no view change until
    /// caught up, and the process stops at once, before any group of it counts in a view
    /// change with that older log.
    pub fn stop_as_stale_copy(&self, refusal: &Refusal) -> ! {
        let dir = self
            .file
            .borrow()
            .as_ref()
            .and_then(|path| path.parent().map(Path::to_path_buf))
            .expect("only a node with a runs file declares a run a peer can judge");
        let marker = iggy_storage::data_dir::restored_marker(&dir);
        let written = iggy_storage::data_dir::write_restored_marker(&dir);
        let line = format!(
            "replica {}: {}; wrote {} and stopped: start the node again and it starts \
             restored, catching up from its peers before it votes (README \"Replace a cluster \
             node's disk\")",
            self.replica,
            refusal.detail,
            marker.display()
        );
        match written {
            Ok(()) => {
                tracing::error!("{line}");
                eprintln!("iggy-server: {line}");
            }
            Err(error) => {
                tracing::error!("{line} (the marker could not be written: {error})");
                eprintln!(
                    "iggy-server: {line}: the marker could not be written ({error}): start it \
                     with --restored"
                );
            }
        }
        std::process::exit(STALE_COPY_EXIT_CODE)
    }
}
