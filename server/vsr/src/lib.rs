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
//! * Create with [`Replica::open`]`(config, journal_prefix, view_state)` where `journal_prefix`
//!   is the valid prefix (ops `1..=n`, checksums verified with [`Entry::is_valid`]) of the
//!   durable journal and `view_state` the latest durable [`ViewState`] (`ViewState::default()`
//!   when none was ever persisted), or, once checkpoints exist, with
//!   [`Replica::open_from_checkpoint`]`(config, checkpoint, suffix, view_state)` where `suffix`
//!   is the valid journal prefix after `checkpoint.op` (see *Checkpoints*). `open` is
//!   `open_from_checkpoint` with an empty checkpoint.
//! * Timing is in ticks ([`Config`]): `heartbeat_ticks` (Commit heartbeats), `resend_ticks`
//!   (prepare, pre-vote, view-change, repair and rejoin retransmissions) and
//!   `view_change_timeout_ticks` (a silent primary; a backup adds a tenth of it per replica id
//!   as a stagger; also the silence after which a replica grants a pre-vote). Nothing else
//!   assumes a tick length, so a shell picks any tick and derives the counts from its intervals.
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
//!   - `PersistView{state}`: make every journal write and truncation emitted before it durable,
//!     then write `state` durably (two alternating slots: [`ViewState::encode`], read back with
//!     [`ViewState::latest`]) and call [`Replica::on_view_persisted`]`(state)`. The replica
//!     sends no message naming a view (StartViewChange, DoViewChange, StartView, Prepare,
//!     PrepareOk, Commit) before the view state naming it is durable: such messages wait inside
//!     it. A group of one never emits it (its view never changes).
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
//!     `Refusal::NotPrimary{primary, ..}` tells the client where to go; only a backup in normal
//!     status sends it. A replica changing views or recovering answers `Refusal::NotReady` (a
//!     transient refusal: retry after a pause), never a primary it cannot vouch for.
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
//! are the committed ones. Otherwise it needs **state transfer**, left to its shell: it
//! installs nothing and commits nothing, records why in [`Replica::state_transfer_needed`], and
//! - as a new primary, gives that view up at once: it asks the pre-vote for the next view
//!   (another replica leads it) instead of waiting for the view change to time out;
//! - while rejoining after a restart, stays recovering;
//! - as a backup receiving such a `StartView` (or the `StartView` a primary sends instead of
//!   prepares it checkpointed), leaves normal status (`Status::Recovering`, without the
//!   rejoin timeout, so it does not keep replacing primaries that serve the others) and waits for
//!   a `StartView` it can install.
//!
//! The core does no transfer itself: its shell copies a peer's checkpoint and state (the
//! server does it for its metadata and partition groups, see `consensus/transfer.rs` there) and opens the
//! replica again from that checkpoint ([`group::GroupCore::open`]). Short of that, a replica of
//! a larger group checkpoints only at or below [`Replica::checkpoint_safe`] (and its own
//! `commit_min`), which [`group::GroupCore::checkpoint_due`] respects: the highest op that is
//! committed and that every replica acknowledged holding durably. A `PrepareOk{op}` vouches for
//! the sender's whole journal prefix through `op` in that view's log (a backup acknowledges only
//! its durable prefix, and also reports its head when the head is already committed); the
//! primary takes the minimum over every replica's latest acknowledgement in its view (its own
//! durable prefix included), caps it at its commit, and announces it in
//! `Message::Commit{checkpoint_safe}`. The op stays safe for good: committed entries are in
//! every later view's log and never truncated, so each replica keeps holding them until it
//! checkpoints past them. A replica knows 0 after a restart until it hears a Commit, and a
//! replica that stays down (or never acknowledges) holds every replica's checkpoints back,
//! their journals growing, until it returns. A group of one checkpoints at its commit as
//! before. A group whose shell transfers state may set
//! [`group::GroupCore::checkpoint_past_laggards`]: past that journal size it checkpoints at its
//! `commit_min`, leaving the replicas that lag ([`group::GroupCore::left_behind`]) to state
//! transfer. The simulator's groups keep the rule above (its checker asserts no replica ever
//! needs state transfer) unless `sim::cluster::Cluster::with_state_transfer` has laggards take
//! a peer's checkpoint (its state, and for a partition the log it covers, copied from the peer).
//!
//! ## Protocol
//!
//! Viewstamped Replication Revisited: normal operation (Prepare/PrepareOk/Commit heartbeat),
//! view change (StartViewChange/DoViewChange/StartView, carrying entry headers, not bodies) and
//! prepare repair
//! (RequestPrepare answered by Prepare), with the view made durable instead of VRR's Recovery
//! protocol (which needs a quorum that did not restart, so cannot survive a restart of every
//! replica). What makes a restart safe:
//!
//! - the view state (`view`, `log_view`) is persisted before any message naming it leaves, so
//!   a restarted replica never votes twice in a view or forgets a view it acked ops in;
//! - a replica acks (PrepareOk, or counts its own ack as primary) only ops its journal holds
//!   durably together with every op before them, so a crash loses only unacknowledged writes
//!   and a DoViewChange after a restart never claims an op the replica no longer holds (it
//!   carries its durable log, nothing more);
//! - a new `log_view` is persisted only after the journal holds that view's log (the shell
//!   syncs the journal first), so the journal is never labelled with a view whose log it lacks;
//!   a crash in between leaves a log labelled with the older view, which the view change's
//!   choice (highest log view, then longest log) still handles;
//! - view changes carry headers ([`EntryHeader`]: an entry without its body, its checksum still
//!   covering the body): a DoViewChange names only the entries its sender holds with their
//!   bodies. Installing a header log keeps every held entry whose checksum matches, truncates
//!   from the first difference, and leaves the rest as awaited slots that are never journaled,
//!   acknowledged or applied. A body is taken only when it rebuilds its header's checksum. The
//!   new primary fetches what it lacks from the DoViewChange senders whose logs named it
//!   (`RequestPrepare`, a few batches at once) and sends its StartView only once it holds and
//!   has written the whole log; if a body cannot be had (its holder crashed and lost it) the
//!   view change times out and the next one decides without it, so nothing is discarded
//!   without a DoViewChange quorum. A holder whose body a committed retirement deleted says
//!   so at once (`Message::BodyRetired`); the new primary asks another holder, and with none
//!   left gives the view up at once (the pre-vote for the next view), so a replica that holds
//!   the log leads without waiting for the timeout. Of DoViewChange logs equally long in the
//!   highest log view (the same entries), it installs the one checkpointed lowest. A backup asks the primary, and keeps its previous log view
//!   (acking nothing) until it holds the view's log whole, so a log view always names a log
//!   the journal holds, as before;
//! - a replica leaves its view on a timeout only after a pre-vote: a backup that stops hearing
//!   from its primary, a view change that stalls and a rejoin that finds no primary all first
//!   send `Message::PreVote` naming the next view, and start the view change (raising and
//!   persisting the view) only once a quorum, this replica included, agrees. A peer answers
//!   `Message::PreVoteGranted` unless it is the serving primary or heard from the primary of
//!   its view (or a later one) within `view_change_timeout_ticks`; grants older than that do not
//!   count. A replica cut off from its peers therefore keeps its view however long the cut
//!   lasts, and when it heals no StartViewChange of a view it ran up drags the others through
//!   a view change they did not need. The pre-vote changes nothing durable and votes in
//!   nothing, so it is sent without waiting for a persisted view and safety rests, as before,
//!   on the StartViewChange and DoViewChange quorums. The one exception is a restarted primary
//!   of its persisted view: the primary it would ask about is itself and gone, so it starts the
//!   view change at once (at most one view per restart);
//! - a backup that stayed in its view through a cut catches up by repair (`RequestPrepare`,
//!   answered with a batch of prepares): one request per batch outstanding, again after
//!   `resend_ticks` if the batch is lost, so a long catch-up does not flood the links;
//! - a restarted replica rejoins as a backup (`Status::Recovering`: no acks, no commits) and
//!   asks the primary of its persisted view for its `StartView` (`RequestStartView`; a later
//!   view's primary answers the Prepare or Commit it hears with the same request). The primary
//!   of the persisted view does not resume (it may have lost prepares its backups acked, and
//!   must not prepare a different op under the same view): it starts a view change. A rejoining
//!   replica whose primary stays silent asks for a pre-vote after the usual timeout (restarted
//!   replicas have heard no primary, so they grant at once), so a restart of every replica
//!   elects a primary from the persisted views and durable journals.
//!
//! An op is discarded only when the view change's quorum of DoViewChange logs lacks it, and every
//! committed op is durable on a quorum with a log view at least its own, so the quorum always
//! holds it. A group of one recovers from its journal alone.
//!
//! All of that assumes a replica's disk keeps what it acknowledged. A replica whose journal and
//! view state were restored from an older copy, or lost, does not: counted in a view change it
//! could make the quorum that discards a committed op. The shell opens such a replica with
//! [`Config::restored`]: it asks and grants no pre-vote, sends no StartViewChange or
//! DoViewChange, never leads (formatted as its view's primary it waits recovering), and votes
//! again once it is a backup in normal status holding its view's log durably through every
//! commit the primary announced to it.

//! ## Simulator
//!
//! [`sim::cluster::Cluster`] runs 1, 3 or 5 replicas, each a [`group::GroupCore`] performing its
//! steps as the server's shell does, and a few clients on virtual time over a
//! seeded packet simulator (drop, duplicate, delay/reorder) and simulated storage (in-order
//! writes; a crash loses pending writes and may tear the one in progress; the view state in two
//! slots of a separate file, ordered after the journal only by the sync the core asks for
//! first, so a crash may lose or tear it and a restart falls back to the older slot). Replicas
//! crash and restart (volatile state lost, durable journal, checkpoints and view state kept), at
//! most `f` at a time in groups of three or more, and about half the seeds also crash every
//! replica at once (each losing its unsynced writes), after which the group must elect a
//! primary from its persisted views and finish without losing a committed op. Besides short
//! cuts of one replica from every other node, about 40% of the seeds cut one replica off for
//! 300 to 700 ticks (ten to twenty view-change timeouts); a checker asserts that a replica never
//! raises its view while cut off (a restart during the cut counts from the restart), and the
//! summary reports the most views one climbed (`cut_off_view_rise_max`). Replicas
//! checkpoint when `GroupCore::checkpoint_due` says so, its policy a few ops (a group of one at
//! or just below its commit; larger groups at the core's safe op, with no global knowledge,
//! and a checker confirms that every replica's storage, a crashed one's too, would hold that
//! op after a restart);
//! checkpoints go to two alternating slots and a crash may tear the one being written, so a
//! restart falls back to the previous one. Some seeds run with a client table smaller than the
//! number of clients; there clients end their sessions after a few requests (a committed logout
//! that retires them), waiting registers are refused until then, and a client starts each new
//! session under a new id. Checkers after each step: no two replicas commit different entries or replies
//! at the same op, committed ops are never lost, every client reply is the committed reply of
//! its request, no request executes twice within a session, every replica retires the same
//! clients at the same op, checkpoints at the same op are byte-identical on every replica,
//! the client table stays within its bound, no replica ever needs state transfer, no message
//! leaves a replica before the view (and log view) it names is durable in its storage (a
//! pre-vote names a view its sender has not entered and is exempt), and no replica cut off from
//! the others raises its view. After the
//! fault phase the network heals and every
//! client must finish (liveness). `cargo test -p iggy-vsr --test sim` runs 70 seeds per group
//! size; `VSR_SIM_SEEDS=N` runs N. A failure prints `replicas=R seed=S`; the seed replays it.
//! The cluster runs any state machine through [`sim::machine::Machine`] (the steps a shell
//! performs on it, and a crash that loses its unsynced writes) and [`sim::machine::Workload`]
//! (the clients' requests and a checker of the machines after every step); these tests run
//! the model machine, the `iggy-sim` crate the real partition machine.

pub mod checkpoint;
pub mod client_table;
pub mod codec;
pub mod group;
pub mod journal;
pub mod message;
pub mod replica;
pub mod sim;
pub mod view_state;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use client_table::{ClientSession, ClientTable, NODE_CLIENTS_MIN, Registration, RequestCheck};
pub use message::{
    Entry, EntryHeader, Log, Message, OPERATION_NOMINATE_LIMITS, OPERATION_REGISTER, ReplicaId,
    nominated_clients_max,
};
pub use replica::{Action, Config, ReadBack, Refusal, Replica, StateTransferNeeded, Status};
pub use view_state::{ViewState, ViewStateError};
