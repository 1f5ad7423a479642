//! # iggy-sim: the deterministic simulator over the real partition and metadata machines
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
//! read back from the log, and unaccounted log messages dropped after the replay. The log
//! rolls segments every two or three batches, and a committed `DeleteSegments` deletes the
//! closed ones below its `keep_from`, durably at once (as the server fsyncs the directory);
//! a restart accounts for journaled sends whose batch a later retirement deleted. The sim's
//! shell deletes only messages of the ops its group allows (`GroupCore::retirable_through`:
//! every replica holds them; these groups never checkpoint past a laggard), as the server
//! bounds where it plans a retirement (`Partition::retirable_below`): otherwise a backup
//! lagging behind a retirement never catches up (see [`machine`]).
//!
//! [`workload::PartitionWorkload`] makes the clients' requests (batches of varying sizes,
//! malformed batches, offset stores, segment retirements below 0, an acknowledged offset or
//! past the committed end, session retirements) and checks, after every step, that the
//! replicas' committed prefixes agree (the cluster's own checkers) and that the partition's
//! history is linearizable: every acknowledged send at or above the committed retirement point
//! is readable at its offsets, in order, exactly once, with the bytes sent, on every replica
//! that committed it; offsets are dense from the log's first offset, which lies at or below
//! the retirement point and never moves back below the committed end (no retired message
//! returns); a poll on a replica in normal status never returns an uncommitted or lost
//! message.
//!
//! [`metadata_machine::MetadataMachine`] runs the real metadata state machine
//! (`iggy_metadata::machine`: registers open sessions, committed ops are applied and their
//! partition effects run on a simulated disk of partition directories, a checkpoint is the
//! encoded snapshot, a restart decodes it and replays the journal), and
//! [`metadata_workload::MetadataWorkload`] drives it with streams, topics, partitions and users
//! created and deleted from small pools of names and ids, so ids freed by a delete are handed
//! out again, with request bodies built by the generated encoders inside the journaled
//! envelope. Its checker keeps a reference model built from the committed ops alone: every
//! committed reply is the reference's (the id it assigns, or the code it refuses with); each
//! live replica's model is the reference at its commit, and replicas at the same commit (after
//! applying, at every checkpoint, at every restore) hold the same snapshot; every partition
//! effect names the incarnation on disk; every acknowledged create holds, with its id, on every
//! replica that committed it unless a later op removed it, and nothing a delete removed
//! returns. The snapshot is compared with its sessions sorted: the model keeps them in a hash
//! map, so equal models may encode them in different orders.
//!
//! [`node::NodeWorld`] runs both together, as the server's nodes host them: 3 or 5 nodes, each
//! with a metadata replica and the partition replicas its own metadata replica's effects
//! created (each node at its own time), one [`Cluster`](iggy_vsr::sim::cluster::Cluster) per
//! group (per partition incarnation) stepped in lockstep under one fault plan per node: a
//! crash takes every group of the node down at once (unsynced writes lost), a restart reopens
//! the metadata replica and then the partitions its replayed model runs, a cut isolates all of
//! them, about half the seeds crash every node at once. A node formats a partition's replica
//! when it applies the create, discards it (files too) when it applies the delete or its
//! start-up or state-transfer reconciliation finds it deleted, and never runs an incarnation it
//! does not host, so packets for it are dropped. Streams, topics and partitions are created and
//! deleted from small id pools, so ids are reused; each incarnation's clients send to its group
//! from its create's commit until its delete's, with message ids unique in the run. Checks:
//! each group's own (committed prefixes agree; every acknowledged send reads back at its
//! offsets, in order, once, on every replica that committed it; reads serve only the
//! incarnation's own messages); after every tick every node whose metadata replica is up runs
//! exactly the incarnations its model holds live (a deleted one stopped on every node that
//! applied the delete), and a node never starts an incarnation it deleted over no files; after
//! the load every metadata replica reaches the same commit, and nodes at the same commit run
//! the same incarnations. On half the seeds the groups checkpoint past laggards (one node
//! staying down long on most of them), which catch up by state transfer, a partition replica
//! copying a peer's log ([`machine`]); at the end every replica of a live partition group
//! reaches one commit and holds the same records. Consumer groups are created, deleted and
//! recreated under reused ids, their offsets stored in the partitions and their deletions
//! carried there late; every replica holds the offsets the committed ops leave, and a
//! recreated group is never served its predecessor's offset.
//!
//! A failure names its seed (`replicas=R seed=S`); `SIM_SEED=S cargo nextest run --workspace
//! -E 'package(iggy-sim)'` replays it. The default run covers a couple hundred seeds (the node
//! simulation 20 per node count); `SIM_SEEDS=N` runs N seeds per group or node count (the long
//! form: `SIM_SEEDS=10000`).
//!
//! **Architecture Invariant:** the simulator runs the unchanged sans-IO crates (`iggy-vsr`,
//! `iggy-partition`, `iggy-metadata`); no compio, no clock, no filesystem, no `iggy-storage`.

pub mod log;
pub mod machine;
pub mod metadata_machine;
pub mod metadata_workload;
pub mod node;
pub mod workload;

pub use machine::PartitionMachine;
pub use metadata_machine::MetadataMachine;
pub use metadata_workload::{MetadataRunFigures, MetadataWorkload};
pub use node::{NodeFigures, NodeSettings, NodeWorld};
pub use workload::{Figures, History, PartitionWorkload};
