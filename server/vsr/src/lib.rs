//! # iggy-vsr: a sans-IO Viewstamped Replication core
//!
//! One [`Replica`] runs per consensus group (the metadata group and each partition group).
//! The crate performs no I/O, spawns no threads and never reads a clock: the shell (an io_uring
//! server, or the deterministic simulator in [`sim`]) feeds inputs and executes outputs.
//!
//! ## Driving a replica
//!
//! * Create with [`Replica::open`]`(config, journal_prefix, nonce)` where `journal_prefix` is the
//!   valid prefix (ops `1..=n`, checksums verified with [`Entry::is_valid`]) of the durable journal.
//! * Inputs (`on_*`):
//!   - [`Replica::on_request`]`(client, request_no, operation, body)` — a client request.
//!     Operation [`OPERATION_REGISTER`] registers a session (request number 0); its reply is the
//!     session number (= commit op of the register) as 8 little-endian bytes.
//!   - [`Replica::on_message`]`(from, message)` — a [`Message`] from another replica.
//!   - [`Replica::on_tick`]`(now_ticks)` — virtual time; never goes backwards.
//!   - [`Replica::on_write_done`]`(op)` — a `WritePrepare` for `op` is durable.
//!   - [`Replica::on_committed_reply`]`(op, reply)` — the state machine applied `Commit{op}`.
//! * Outputs: after every input, drain [`Replica::poll_action`] until `None`, executing each
//!   [`Action`] in order:
//!   - `Send{to, message}`: deliver to replica `to` (loss, duplication, reordering are tolerated).
//!   - `WritePrepare{op, entry}` / `TruncateJournal{after_op}`: journal operations, executed in
//!     the order emitted; call `on_write_done(op)` when a write is durable.
//!   - `Commit{op, client, request, operation, body}`: apply to the state machine, answer with
//!     `on_committed_reply(op, reply)` (at most one `Commit` is outstanding). After `open` the
//!     replica replays every committed op from 1: apply them to a fresh state machine (or, if the
//!     state machine is durable, skip already-applied ops but still answer with their replies).
//!   - `Registered{op, client, body}`: a register committed at `op` (the session number); the
//!     state machine records the session from the register's body (no answer expected).
//!   - `Reply{client, request, op, reply}` / `Refuse{client, request, refusal}`: answer the client.
//!     `Refusal::NotPrimary{primary, ..}` tells the client where to go.
//!
//! A group of one is the same code with quorum 1: a request is prepared, journaled
//! (`WritePrepare` → `on_write_done`) and committed right after its own write.
//!
//! ## Client table
//!
//! Per client id: latest request number and its cached reply. A duplicate of the latest request
//! replays the cached reply without re-executing; older requests get `Refusal::RequestTooOld`.
//! The table is bounded by `Config::clients_table_max`: new clients are refused at capacity and
//! live entries are never evicted.
//!
//! ## Protocol
//!
//! Viewstamped Replication Revisited: normal operation (Prepare/PrepareOk/Commit heartbeat),
//! view change (StartViewChange/DoViewChange/StartView, full-log transfer), recovery of a
//! restarted replica (Recovery/RecoveryResponse) and prepare repair (RequestPrepare answered by
//! Prepare). A restarted replica of a multi-replica group does not trust its own state until the
//! group answers; a group of one recovers from its journal alone.

//! ## Simulator
//!
//! [`sim::cluster::Cluster`] runs 1, 3 or 5 replicas and a few clients on virtual time over a
//! seeded packet simulator (drop, duplicate, delay/reorder) and simulated storage (in-order
//! writes; a crash loses pending writes and may tear the one in progress). Replicas crash and
//! restart (volatile state lost, durable journal kept), at most `f` at a time in groups of three
//! or more. Checkers after each step: no two replicas commit different entries or replies at the
//! same op, committed ops are never lost, every client reply is the committed reply of its
//! request, and no request executes twice. After the fault phase the network heals and every
//! client must finish (liveness). `cargo test -p iggy-vsr --test sim` runs 70 seeds per group
//! size; `VSR_SIM_SEEDS=N` runs N. A failure prints `replicas=R seed=S`; the seed replays it.

pub mod checkpoint;
pub mod client_table;
pub mod journal;
pub mod message;
pub mod replica;
pub mod sim;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use client_table::{ClientSession, ClientTable, Registration, RequestCheck};
pub use message::{Entry, Log, Message, OPERATION_REGISTER, ReplicaId};
pub use replica::{Action, Config, Refusal, Replica, StateTransferNeeded, Status};
