//! # iggy-sim: the deterministic simulator over the real partition state machine
//!
//! [`iggy_vsr::sim::cluster::Cluster`] runs 3 or 5 replicas of the server's `GroupCore` on
//! virtual time over a seeded network that drops, duplicates, delays and reorders packets,
//! cuts replicas off, crashes up to `f` of them at a time and, on about half the seeds, every
//! replica at once, with simulated storage whose unsynced writes are lost at a crash (see the
//! `iggy_vsr::sim` docs). This crate plugs in the real [`iggy_partition::Partition`] as each
//! replica's state machine ([`machine::PartitionMachine`]) over an in-memory log with the same
//! fault model ([`log::SimLog`]: writes are durable only once synced; a crash keeps an
//! in-order prefix of the rest), driven the way the server's shell drives it: sends stowed in
//! the log as they are journaled (the journal keeps the stand-in), stowed batches dropped on a
//! journal truncation, the checkpoint state restored over the log at a restart, stowed bodies
//! read back from the log, and unaccounted log messages dropped after the replay.
//!
//! [`workload::PartitionWorkload`] makes the clients' requests (batches of varying sizes,
//! malformed batches, offset stores, session retirements) and checks, after every step, that
//! the replicas' committed prefixes agree (the cluster's own checkers) and that the partition's
//! history is linearizable: every acknowledged send is readable at its offsets, in order,
//! exactly once, with the bytes sent, on every replica that committed it; offsets are dense;
//! a poll on a replica in normal status never returns an uncommitted or lost message.
//!
//! A failure names its seed (`replicas=R seed=S`); `SIM_SEED=S cargo nextest run --workspace
//! -E 'package(iggy-sim)'` replays it. The default run covers a couple hundred seeds;
//! `SIM_SEEDS=N` runs N seeds per group size (the long form: `SIM_SEEDS=10000`).
//!
//! **Architecture Invariant:** the simulator runs the unchanged sans-IO crates (`iggy-vsr`,
//! `iggy-partition`); no compio, no clock, no filesystem, no `iggy-storage`.

pub mod log;
pub mod machine;
pub mod metadata_machine;
pub mod metadata_workload;
pub mod workload;

pub use machine::PartitionMachine;
pub use metadata_machine::MetadataMachine;
pub use metadata_workload::{MetadataRunFigures, MetadataWorkload};
pub use workload::{Figures, History, PartitionWorkload};
