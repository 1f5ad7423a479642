//! A cluster node's runs, sans-IO: how a node restored from an older copy of its data
//! directory is told apart from the node it was, before it takes part in any group.
//!
//! A copy restored after its node ran on (a disk replaced from last night's backup) holds
//! fewer ops than the node acknowledged and voted for. Counted in a view change with the one
//! peer that held those ops down, it and the third node would elect a view without them
//! (README "Replace a cluster node's disk"). Each start of a node with a metadata history is a
//! *run*, numbered one above the last in the data directory's `replica.runs` file (with a
//! random nonce) and made durable before any link; every peer remembers the latest run of the
//! node it linked with. Copies are taken of a stopped node, so the run after the copy is one
//! its peers saw; the restored copy starts a run of that same number under another nonce (or a
//! lower one), and a peer that saw the later run refuses it (`Stale`). The copy reads the same
//! verdict from the peer's sighting of it, which the handshake carries back: it writes the
//! restored marker and stops, and its next start is restored (no vote in a view change until
//! it holds its view's log).
//!
//! What this cannot see: a copy whose later runs no live peer linked with (the only peers that
//! did are down), or a peer whose own `replica.runs` was lost. A run of 0 (a node that started
//! without a metadata history, or a build before runs) is never judged, nor is a restored run.

use iggy_generated::frames::ReplicaRunDeclaration;
use iggy_generated::storage::{REPLICA_RUNS_MAGIC, ReplicaRunSighting, ReplicaRuns};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeMap;
use std::hash::Hasher;

/// One run (start) of a node: its number (from 1; 0 is "not declared") and random nonce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    pub number: u64,
    pub nonce: u64,
}

impl Run {
    /// Whether `self`, a run a node declares, is older than `seen`, a run of the same node
    /// linked with before: a lower number, or the same number started again (another nonce).
    /// Undeclared runs on either side judge nothing.
    pub fn older_than(self, seen: Run) -> bool {
        self.number != 0
            && seen.number != 0
            && (self.number < seen.number
                || (self.number == seen.number && self.nonce != seen.nonce))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {} (nonce {:016x})", self.number, self.nonce)
    }
}

/// A handshake frame's declaration, decoded: the sender's run, its sighting of the receiver,
/// and whether the sender starts restored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Declared {
    pub run: Run,
    pub seen: Run,
    pub restored: bool,
}

impl Declared {
    pub fn from_wire(wire: &ReplicaRunDeclaration) -> Self {
        Declared {
            run: Run {
                number: wire.run,
                nonce: wire.run_nonce,
            },
            seen: Run {
                number: wire.seen_run,
                nonce: wire.seen_nonce,
            },
            restored: wire.restored != 0,
        }
    }

    pub fn to_wire(self) -> ReplicaRunDeclaration {
        ReplicaRunDeclaration {
            run: self.run.number,
            run_nonce: self.run.nonce,
            seen_run: self.seen.number,
            seen_nonce: self.seen.nonce,
            restored: u8::from(self.restored),
        }
    }
}

/// Which side of a handshake is the older copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// The peer declared a run older than one of it this node linked with.
    Peer { declared: Run, seen: Run },
    /// The peer linked with a later run of this node than the one it runs: this node's data
    /// directory is the older copy.
    ThisNode { running: Run, seen_by_peer: Run },
}

/// The judgment of one handshake: `mine` is what this node declares to the peer, `theirs`
/// what the peer declared. This node is judged first: when both look older to each other,
/// the one that stops is this one, and a peer never refuses a node it must catch up from.
pub fn judge(mine: Declared, theirs: Declared) -> Result<(), Stale> {
    if !mine.restored && mine.run.older_than(theirs.seen) {
        return Err(Stale::ThisNode {
            running: mine.run,
            seen_by_peer: theirs.seen,
        });
    }
    if !theirs.restored && theirs.run.older_than(mine.seen) {
        return Err(Stale::Peer {
            declared: theirs.run,
            seen: mine.seen,
        });
    }
    Ok(())
}

/// What a node keeps about runs: its own, whether it started restored, and the latest run of
/// each peer it linked with. The shell persists it (`encode`) whenever `learn` changed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunLedger {
    own: Run,
    restored: bool,
    sightings: BTreeMap<u8, Run>,
}

impl RunLedger {
    /// The ledger of a start: `previous` is what the runs file held (`None`: no file), and
    /// `held_history` whether the node found a metadata history on disk. With one, the run is
    /// numbered one above the file's, with `nonce`; without one (a node that starts empty)
    /// the run is 0 and not judged, as nothing of it can be a copy.
    pub fn start(
        previous: Option<RunLedger>,
        held_history: bool,
        restored: bool,
        nonce: u64,
    ) -> Self {
        let previous = previous.unwrap_or_default();
        let own = match held_history {
            true => Run {
                number: previous.own.number.saturating_add(1),
                nonce,
            },
            false => Run::default(),
        };
        RunLedger {
            own,
            restored,
            sightings: previous.sightings,
        }
    }

    pub fn own(&self) -> Run {
        self.own
    }

    pub fn sighting(&self, peer: u8) -> Option<Run> {
        self.sightings.get(&peer).copied()
    }

    /// What this node declares to `peer` in a handshake frame.
    pub fn declared_to(&self, peer: u8) -> Declared {
        Declared {
            run: self.own,
            seen: self.sighting(peer).unwrap_or_default(),
            restored: self.restored,
        }
    }

    /// After a link with `peer` was admitted on `theirs`: its run is remembered if later than
    /// the one seen, and a restored node takes a run above any of its own the peer saw, so
    /// that its next start is one no peer saw either. Returns whether anything changed (the
    /// shell then persists the ledger before the next handshake it builds counts on it).
    pub fn learn(&mut self, peer: u8, theirs: Declared) -> bool {
        let mut changed = false;
        let seen = self.sightings.entry(peer).or_default();
        if theirs.run.number > seen.number {
            *seen = theirs.run;
            changed = true;
        }
        if self.restored && theirs.seen.number >= self.own.number && theirs.seen != self.own {
            self.own.number = theirs.seen.number + 1;
            changed = true;
        }
        changed
    }

    /// The runs file's bytes (spec/storage.spec `ReplicaRuns`).
    pub fn encode(&self, cluster: u128, replica: u8) -> Vec<u8> {
        let mut file = ReplicaRuns {
            magic: REPLICA_RUNS_MAGIC,
            cluster,
            replica,
            run: self.own.number,
            nonce: self.own.nonce,
            sightings: self
                .sightings
                .iter()
                .map(|(&replica, run)| ReplicaRunSighting {
                    replica,
                    run: run.number,
                    nonce: run.nonce,
                })
                .collect(),
            checksum: 0,
        };
        // The checksum covers every byte before it: encode once to learn them, then for good.
        let bytes = file.to_wire_bytes();
        file.checksum = checksum(&bytes[..bytes.len() - CHECKSUM_SIZE]);
        file.to_wire_bytes()
    }

    /// A runs file's content, written by `replica` of `cluster`; its restored flag is unset
    /// (that is the marker's, per start).
    pub fn decode(bytes: &[u8], cluster: u128, replica: u8) -> Result<RunLedger, String> {
        let covered = bytes.len().checked_sub(CHECKSUM_SIZE).ok_or("truncated")?;
        let file = ReplicaRuns::decode_exact(bytes).map_err(|_| "truncated or malformed")?;
        if file.magic != REPLICA_RUNS_MAGIC || checksum(&bytes[..covered]) != file.checksum {
            return Err("checksum mismatch (torn or damaged)".into());
        }
        if file.cluster != cluster || file.replica != replica {
            return Err(format!(
                "written by replica {} of cluster {:#x}, this is replica {replica} of cluster \
                 {cluster:#x}",
                file.replica, file.cluster
            ));
        }
        Ok(RunLedger {
            own: Run {
                number: file.run,
                nonce: file.nonce,
            },
            restored: false,
            sightings: file
                .sightings
                .iter()
                .map(|s| {
                    let run = Run {
                        number: s.run,
                        nonce: s.nonce,
                    };
                    (s.replica, run)
                })
                .collect(),
        })
    }
}

const CHECKSUM_SIZE: usize = 8;

fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = twox_hash::XxHash3_64::new();
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(number: u64, nonce: u64) -> Run {
        Run { number, nonce }
    }

    /// Node R's ledger after `starts` starts, each linked with peer 0 (whose ledger is
    /// returned too).
    fn linked_starts(starts: u64) -> (RunLedger, RunLedger) {
        let mut r = RunLedger::default();
        let mut peer = RunLedger::start(None, true, false, 7);
        for start in 1..=starts {
            r = RunLedger::start(Some(r), true, false, 100 + start);
            assert_eq!(judge(r.declared_to(0), peer.declared_to(1)), Ok(()));
            assert_eq!(judge(peer.declared_to(1), r.declared_to(0)), Ok(()));
            peer.learn(1, r.declared_to(0));
            r.learn(0, peer.declared_to(1));
        }
        (r, peer)
    }

    #[test]
    fn each_start_with_a_history_is_a_run_one_above_the_last_and_a_relink_is_admitted() {
        let (r, peer) = linked_starts(3);
        assert_eq!(r.own(), run(3, 103));
        assert_eq!(peer.sighting(1), Some(run(3, 103)));
        // The same run linking again (a link that failed and was redialed).
        assert_eq!(judge(peer.declared_to(1), r.declared_to(0)), Ok(()));
        // A start without a history declares nothing.
        let empty = RunLedger::start(Some(r), false, false, 9);
        assert_eq!(empty.own(), Run::default());
        assert_eq!(judge(peer.declared_to(1), empty.declared_to(0)), Ok(()));
    }

    #[test]
    fn a_copy_restored_after_its_node_ran_on_is_refused_by_the_peer_and_sees_it_itself() {
        // R stopped and copied after two runs; it ran a third (the peer saw it).
        let (copy, _) = linked_starts(2);
        let (_, peer) = linked_starts(3);
        // The copy starts: run 3 again, another nonce.
        let restored = RunLedger::start(Some(copy.clone()), true, false, 999);
        assert_eq!(restored.own(), run(3, 999));
        assert_eq!(
            judge(peer.declared_to(1), restored.declared_to(0)),
            Err(Stale::Peer {
                declared: run(3, 999),
                seen: run(3, 103)
            })
        );
        assert_eq!(
            judge(restored.declared_to(0), peer.declared_to(1)),
            Err(Stale::ThisNode {
                running: run(3, 999),
                seen_by_peer: run(3, 103)
            })
        );
        // An even older copy: a lower number.
        let older = RunLedger::start(Some(linked_starts(1).0), true, false, 5);
        assert!(matches!(
            judge(older.declared_to(0), peer.declared_to(1)),
            Err(Stale::ThisNode { .. })
        ));
    }

    #[test]
    fn a_restored_start_is_admitted_and_takes_a_run_above_what_its_peers_saw() {
        let (copy, _) = linked_starts(2);
        let (_, mut peer) = linked_starts(5);
        let mut restored = RunLedger::start(Some(copy), true, true, 999);
        assert_eq!(judge(peer.declared_to(1), restored.declared_to(0)), Ok(()));
        assert_eq!(judge(restored.declared_to(0), peer.declared_to(1)), Ok(()));
        assert!(
            !peer.learn(1, restored.declared_to(0)),
            "an older run is not remembered"
        );
        assert!(restored.learn(0, peer.declared_to(1)));
        assert_eq!(restored.own(), run(6, 999));
        assert!(!restored.learn(0, peer.declared_to(1)), "learned once");
        // Its next start, not restored, is one the peer never saw.
        let next = RunLedger::start(Some(restored.clone()), true, false, 1000);
        assert_eq!(next.own(), run(7, 1000));
        assert_eq!(judge(next.declared_to(0), peer.declared_to(1)), Ok(()));
        assert_eq!(judge(peer.declared_to(1), next.declared_to(0)), Ok(()));
        // A node restored on an empty directory (run 0) learns too.
        let mut empty = RunLedger::start(None, false, true, 3);
        assert!(empty.learn(0, peer.declared_to(1)));
        assert_eq!(empty.own().number, 6);
    }

    #[test]
    fn undeclared_runs_judge_nothing() {
        let (_, peer) = linked_starts(4);
        // A peer of a build before runs declares zeros.
        assert_eq!(judge(peer.declared_to(1), Declared::default()), Ok(()));
        assert_eq!(judge(Declared::default(), peer.declared_to(1)), Ok(()));
    }

    #[test]
    fn the_file_round_trips_and_a_damaged_or_foreign_one_is_refused() {
        let (r, _) = linked_starts(2);
        let (mut with_sightings, _) = linked_starts(1);
        with_sightings.learn(2, r.declared_to(0));
        let bytes = with_sightings.encode(0xabc, 1);
        assert_eq!(RunLedger::decode(&bytes, 0xabc, 1), Ok(with_sightings));
        let mut damaged = bytes.clone();
        damaged[30] ^= 1;
        assert!(RunLedger::decode(&damaged, 0xabc, 1).is_err());
        assert!(RunLedger::decode(&bytes[..bytes.len() - 1], 0xabc, 1).is_err());
        let foreign = RunLedger::decode(&bytes, 0xabd, 1).unwrap_err();
        assert!(foreign.contains("cluster"), "{foreign}");
        assert!(RunLedger::decode(&bytes, 0xabc, 2).is_err());
    }
}
