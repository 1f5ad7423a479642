//! iggy-partition: one partition's replicated state and its state machine, sans-IO.
//!
//! - [`write`]: the journaled op bodies ([`PartitionWrite`]), their offset owners
//!   ([`OffsetOwner`]) and the cached result a client gets ([`WriteResult`]);
//! - [`machine`]: [`Partition`], the consumer offsets, group deletions and offset accounting a
//!   committed op changes, and what it asks of the log ([`Applied`], [`Stow`]), decided from
//!   the facts the log reports ([`Log`]);
//! - [`checkpoint`]: the state a partition checkpoint keeps ([`CheckpointState`]).
//!
//! The shell (`iggy-server`'s `runtime/partition.rs`) carries out every file operation through
//! `iggy_storage::partition_log::PartitionLog` and reports back what it did.
//!
//! **Architecture Invariant:** no compio, no clock, no filesystem or network, no storage crate:
//! the same committed ops over the same log facts give every replica the same offsets, replies
//! and log effects. Every byte layout is a generated `iggy_generated::storage` record.

pub mod checkpoint;
pub mod machine;
pub mod write;

pub use checkpoint::{CheckpointState, KeptOffset};
pub use machine::{Applied, Log, Partition, PollRange, StartAt, Stow};
pub use write::{
    CREATED_AT_UNKNOWN, KEYS_UNLIMITED, NO_OFFSET_HOLD, OffsetOwner, PartitionWrite, RESOLVED_AT_UNKNOWN,
    WriteResult,
};
