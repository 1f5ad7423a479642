//! # iggy-vsr: a sans-IO Viewstamped Replication core
//!
//! One [`Replica`] runs per consensus group (the metadata group and each partition group).
//! The crate performs no I/O, spawns no threads and never reads a clock: the shell (an io_uring
//! server, or the deterministic simulator in [`sim`]) feeds inputs and executes outputs.
//!
//! A server drives a replica through [`group::GroupCore`], which adds what every group's shell
//! needs around it (the requests waiting for their commit, implicit registers, group-commit
//! sync batching, the checkpoint policy) and is what the simulator runs too.
//!
//! ## Driving a replica
//!
//! * Create with [`Replica::open`]`(config, journal_prefix, nonce)` where `journal_prefix` is the
//!   valid prefix (ops `1..=n`, checksums verified with [`Entry::is_valid`]) of the durable journal,
//!   or, once checkpoints exist, with [`Replica::open_from_checkpoint`]`(config, checkpoint,
//!   suffix, nonce)` where `suffix` is the valid journal prefix after `checkpoint.op` (see
//!   *Checkpoints*). `open` is `open_from_checkpoint` with an empty checkpoint.
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
//!     `on_committed_reply(op, reply)` (at most one `Commit` is outstanding). After opening, the
//!     replica replays every committed op above the checkpoint (from 1 after `open`): apply them
//!     to the state machine restored to the checkpoint (or, if the state machine is durable past
//!     it, skip already-applied ops but still answer with their replies).
//!   - `Registered{op, client, body}`: a register committed at `op` (the session number); the
//!     state machine records the session from the register's body (no answer expected).
//!   - While a `Commit` is being applied, the shell may call `retire_with_commit(clients)`
//!     when the committed op ends those clients' sessions; their slots free up with that op.
//!   - `Reply{client, request, op, reply}` / `Refuse{client, request, refusal}`: answer the client.
//!     `Refusal::NotPrimary{primary, ..}` tells the client where to go.
//!
//! A group of one is the same code with quorum 1: a request is prepared, journaled
//! (`WritePrepare` → `on_write_done`) and committed right after its own write.
//!
//! ## Client table
//!
//! Per client id: session, latest request number, its op and its cached reply. A duplicate of
//! the latest request replays the cached reply without re-executing; older requests get
//! `Refusal::RequestTooOld`. The table is bounded by the group's committed capacity (nominated
//! by its first op from `Config::clients_table_max`). A live session is never evicted: a
//! register is refused with `Refusal::ClientsTableFull` while live sessions and the registers in
//! the pipeline hold every slot, and a register that still commits at capacity (one prepared by
//! an earlier primary) registers nothing. Slots come back by ordered retirement only: a
//! committed op whose application ends sessions (the shell calls `retire_with_commit`) frees
//! their slots at that op on every replica; a retired client's later requests (and its
//! requests still in the pipeline) are refused with `Refusal::SessionUnknown`.
//!
//! Requests do not carry the session number, so the table cannot tell a retired session's
//! request from a new session's request with the same id and number. After `SessionUnknown`
//! a client must not retry an unanswered request under a new session: its outcome is unknown.
//! Re-registering with the same id starts a new session (request numbers restart at 1); using
//! a new client id per session is safer.
//!
//! ## Checkpoints
//!
//! The replica holds the journal entries above its latest checkpoint in memory
//! ([`Replica::journal_len`] counts them), plus the replies of ops executed since then. Once the
//! state machine's effects of every op `<= op` are durable (`op <= commit_min`), the shell calls
//! [`Replica::checkpoint`]`(op)`: the replica forgets entries `<= op` and returns a
//! [`Checkpoint`] (op, view and checksum of the entry at `op`, and the client table as of `op`,
//! so duplicates of requests committed before it still replay their replies). The shell persists
//! [`Checkpoint::encode`] atomically or in alternating slots ([`Checkpoint::decode`] rejects torn
//! or corrupt bytes, so it falls back to the previous slot), and only then drops its journal
//! prefix `<= op`. `entry(op)` is `None` at or below [`Replica::checkpoint_op`]; op numbers stay
//! absolute.
//!
//! In groups of more than one, logs travel as suffixes ([`Log`]: base op, checksum of the entry
//! at the base, entries above it). A replica that misses ops at or below another replica's
//! checkpoint (repair of a checkpointed op, a view-change or recovery log starting above its
//! commit) can use that log only if it holds the same entry at the log's base: a log holding
//! `(op, view)` holds the prefix the primary of that view had, so its own entries up to the base
//! are the committed ones. Otherwise it needs **state transfer, which is not implemented**: it
//! installs nothing and commits nothing, records why in [`Replica::state_transfer_needed`], and
//! - as a new primary, stays in view change (the view times out and another replica leads);
//! - while recovering, stays recovering;
//! - as a backup receiving such a `StartView` (or the `StartView` a primary sends instead of
//!   prepares it checkpointed), enters recovery with a nonce derived from its current one and
//!   accepts only a view at least as high as the one it left.
//!
//! Such a replica is lost to the group until state transfer lands. To avoid it, checkpoint a
//! multi-replica group only at ops every replica has committed and holds durably, as the
//! simulator does.
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
//! [`sim::cluster::Cluster`] runs 1, 3 or 5 replicas, each a [`group::GroupCore`] performing its
//! steps as the server's shell does, and a few clients on virtual time over a
//! seeded packet simulator (drop, duplicate, delay/reorder) and simulated storage (in-order
//! writes; a crash loses pending writes and may tear the one in progress). Replicas crash and
//! restart (volatile state lost, durable journal and checkpoints kept), at most `f` at a time in
//! groups of three or more. Replicas checkpoint every few ops (a group of one at or just below
//! its commit; larger groups only at an op every replica has committed and holds durably);
//! checkpoints go to two alternating slots and a crash may tear the one being written, so a
//! restart falls back to the previous one. Some seeds run with a client table smaller than the
//! number of clients; there clients end their sessions after a few requests (a committed logout
//! that retires them), waiting registers are refused until then, and a client starts each new
//! session under a new id. Checkers after each step: no two replicas commit different entries or replies
//! at the same op, committed ops are never lost, every client reply is the committed reply of
//! its request, no request executes twice within a session, every replica retires the same
//! clients at the same op, checkpoints at the same op are byte-identical on every replica,
//! the client table stays within its bound, and no replica ever needs state transfer. After the fault phase the network heals and every
//! client must finish (liveness). `cargo test -p iggy-vsr --test sim` runs 70 seeds per group
//! size; `VSR_SIM_SEEDS=N` runs N. A failure prints `replicas=R seed=S`; the seed replays it.

pub mod checkpoint;
pub mod client_table;
pub mod group;
pub mod journal;
pub mod message;
pub mod replica;
pub mod sim;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use client_table::{ClientSession, ClientTable, NODE_CLIENTS_MIN, Registration, RequestCheck};
pub use message::{
    Entry, Log, Message, OPERATION_NOMINATE_LIMITS, OPERATION_REGISTER, ReplicaId,
    nominated_clients_max,
};
pub use replica::{Action, Config, Refusal, Replica, StateTransferNeeded, Status};
