//! A consensus group's durable view state (`iggy_vsr::ViewState`): two slot files, `view.0` and
//! `view.1`, beside the group's checkpoint slots, each a spec/storage.spec `VsrViewState`
//! record. The replica asks for a write only when its view changes (never in a group of one),
//! after the journal is synced; the shell writes the slot not holding the latest state, fsyncs
//! it (fail-stop), and only then lets the replica send messages naming the view.
//!
//! Absent files are view 0, log view 0: a new group, or a data directory written before view
//! states existed (only groups of one ran, and their view never changes).

use iggy_vsr::{ReplicaId, ViewState, ViewStateError};
use std::path::{Path, PathBuf};

const SLOTS: [&str; 2] = ["view.0", "view.1"];

/// The view state slots of one group's directory.
#[derive(Debug)]
pub struct ViewFile {
    dir: PathBuf,
    cluster: u128,
    replica: ReplicaId,
    /// The slot the next write goes to (not the one holding the latest state).
    next_slot: usize,
}

impl ViewFile {
    /// Reads the latest valid state of `dir`'s slots, written by `replica` of `cluster`. A
    /// foreign record, or two slots both torn, is an error: the group must not guess a view.
    pub fn load(
        dir: &Path,
        cluster: u128,
        replica: ReplicaId,
    ) -> Result<(ViewState, ViewFile), String> {
        let slots = read_slots(dir)?;
        let (state, next_slot) =
            ViewState::latest([slots[0].as_deref(), slots[1].as_deref()], cluster, replica)
                .map_err(|error| match error {
                    ViewStateError::Foreign {
                        cluster: owner_cluster,
                        replica: owner,
                    } => foreign(dir, (owner_cluster, owner), (cluster, replica)),
                    _ => format!("{}: {error}", dir.display()),
                })?;
        let file = ViewFile {
            dir: dir.to_path_buf(),
            cluster,
            replica,
            next_slot,
        };
        Ok((state, file))
    }

    /// Refuses `dir` if another replica or cluster wrote its view state: checked at start,
    /// before anything in the data directory is opened or modified (a slot that cannot be read
    /// or decoded is left for the group's open to judge as a storage failure).
    pub fn refuse_foreign(dir: &Path, cluster: u128, replica: ReplicaId) -> Result<(), String> {
        let Ok(slots) = read_slots(dir) else {
            return Ok(());
        };
        match ViewState::latest([slots[0].as_deref(), slots[1].as_deref()], cluster, replica) {
            Err(ViewStateError::Foreign {
                cluster: owner_cluster,
                replica: owner,
            }) => Err(foreign(dir, (owner_cluster, owner), (cluster, replica))),
            _ => Ok(()),
        }
    }

    /// Writes `state` durably into the older slot (a failed write or fsync stops the process).
    pub async fn persist(&mut self, state: ViewState) {
        let path = self.dir.join(SLOTS[self.next_slot]);
        let bytes = state.encode(self.cluster, self.replica).to_vec();
        iggy_storage::fail_stop::write_atomically(&path, bytes).await;
        self.next_slot = 1 - self.next_slot;
    }
}

fn read_slots(dir: &Path) -> Result<[Option<Vec<u8>>; 2], String> {
    let mut slots: [Option<Vec<u8>>; 2] = [None, None];
    for (slot, name) in SLOTS.iter().enumerate() {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => slots[slot] = Some(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(format!("{}: {error}", path.display())),
        }
    }
    Ok(slots)
}

/// The refusal of a view state `owner` (cluster, replica) wrote, found by `node`.
fn foreign(dir: &Path, owner: (u128, ReplicaId), node: (u128, ReplicaId)) -> String {
    let ((owner_cluster, owner), (cluster, replica)) = (owner, node);
    if owner == replica {
        // The same replica id: the configured cluster.name changed (an edited copy of the
        // shared file), or the directory is another cluster's node of the same id.
        return format!(
            "{}: view state written by replica {owner} of cluster {owner_cluster:#x}, but this \
             node's cluster.name derives cluster {cluster:#x}: the directory was created under \
             another cluster.name. Start it with the cluster.name its peers run (the shared \
             configuration), or, if this is another cluster's directory, on its own \
             system.path",
            dir.display()
        );
    }
    format!(
        "{}: view state written by replica {owner} of cluster {owner_cluster:#x}, but this node \
         is replica {replica} of cluster {cluster:#x}: this is another node's data directory; \
         start each node on its own (system.path) with its own --replica-id",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[compio::test]
    async fn absent_slots_are_view_zero_and_a_written_state_reads_back_from_alternating_slots() {
        let dir = tempfile::tempdir().unwrap();
        let (state, mut file) = ViewFile::load(dir.path(), 7, 2).unwrap();
        assert_eq!(state, ViewState::default());
        let first = ViewState {
            view: 4,
            log_view: 3,
        };
        let second = ViewState {
            view: 5,
            log_view: 5,
        };
        file.persist(first).await;
        file.persist(second).await;
        assert!(dir.path().join("view.0").exists() && dir.path().join("view.1").exists());
        let (state, _) = ViewFile::load(dir.path(), 7, 2).unwrap();
        assert_eq!(state, second);
        // A torn newest slot falls back to the older one.
        let newest = dir.path().join("view.1");
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(ViewFile::load(dir.path(), 7, 2).unwrap().0, first);
        assert!(
            ViewFile::load(dir.path(), 7, 1).is_err(),
            "another replica's state is refused"
        );
        assert!(
            ViewFile::load(dir.path(), 8, 2).is_err(),
            "another cluster's state is refused"
        );
    }

    /// A node started on another replica's data directory (a copy of node 1's under node 2's
    /// path) is told so: whose state it found, which node it is, and what to do; the refusal
    /// named the owner only.
    #[compio::test]
    async fn another_replicas_view_state_is_refused_naming_both_replicas() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut file) = ViewFile::load(dir.path(), 7, 1).unwrap();
        file.persist(ViewState {
            view: 3,
            log_view: 3,
        })
        .await;
        let refusal = ViewFile::load(dir.path(), 7, 2).unwrap_err();
        for expected in [
            "written by replica 1",
            "this node is replica 2",
            "another node's data directory",
        ] {
            assert!(refusal.contains(expected), "{expected:?}: {refusal}");
        }
    }
}
