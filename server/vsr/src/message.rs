//! Messages exchanged between replicas, and the prepared log entry they carry.

use bytes::Bytes;

/// Index of a replica inside its consensus group, `0..replica_count`.
pub type ReplicaId = u8;

/// Operation code reserved for session registration. Requests with this code are executed by the
/// replica itself (they create a client-table entry) and never reach the state machine.
pub const OPERATION_REGISTER: u8 = 0;

/// Operation code of a group's limits nomination, executed by the replica itself: its body is
/// the client table's capacity (`u32`, little-endian). The first one a group commits fixes the
/// capacity for good (checkpoints keep it); later ones change nothing, so a changed
/// configuration never resizes a group that has committed its limit. The spec declares it
/// (`Operation::NominateLimits` in spec/frames.spec), so journal records carry it.
pub const OPERATION_NOMINATE_LIMITS: u8 = 4;

/// The capacity a nomination's body names (`None` when malformed or zero).
pub fn nominated_clients_max(body: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = body.try_into().ok()?;
    let clients_max = u32::from_le_bytes(bytes) as usize;
    (clients_max > 0).then_some(clients_max)
}

/// One prepared operation: the unit that is journaled, replicated and committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Position in the log, starting at 1.
    pub op: u64,
    /// View in which the primary prepared this entry.
    pub view: u32,
    /// Client id that sent the request.
    pub client: u128,
    /// Client request number (0 is the register request).
    pub request: u64,
    /// Operation code, opaque to the replica except `OPERATION_REGISTER`.
    pub operation: u8,
    /// Request body, opaque to the replica.
    pub body: Bytes,
    /// Checksum over every other field, so a torn journal write is detected on open.
    pub checksum: u64,
}

impl Entry {
    /// Builds an entry and seals it with its checksum.
    pub fn new(op: u64, view: u32, client: u128, request: u64, operation: u8, body: Bytes) -> Self {
        let body_hash = twox_hash::XxHash3_64::oneshot(&body);
        Entry::with_body_hash(op, view, client, request, operation, body, body_hash)
    }

    /// [`Entry::new`] for a body whose XxHash3-64 the caller already verified (a replica frame's
    /// `checksum_body` is that hash): a megabyte body is not hashed a second time.
    pub fn with_body_hash(
        op: u64,
        view: u32,
        client: u128,
        request: u64,
        operation: u8,
        body: Bytes,
        body_hash: u64,
    ) -> Self {
        let mut entry = Entry {
            op,
            view,
            client,
            request,
            operation,
            body,
            checksum: 0,
        };
        entry.checksum = entry.checksum_over(body_hash);
        entry
    }

    /// Recomputes the checksum from the fields: FNV-1a over the header fields and the body's
    /// XxHash3-64 (the body can be megabytes: a byte-at-a-time hash over it dominated the
    /// server's produce path).
    /// The hashed bytes are spec/storage.spec's `EntryChecksumInput`.
    pub fn compute_checksum(&self) -> u64 {
        self.checksum_over(twox_hash::XxHash3_64::oneshot(&self.body))
    }

    fn checksum_over(&self, body_hash: u64) -> u64 {
        let input = iggy_generated::storage::EntryChecksumInput {
            op: self.op,
            view: self.view,
            client: self.client,
            request: self.request,
            operation: self.operation,
            body_length: self.body.len() as u64,
            body_hash,
        };
        Fnv::oneshot(&input.to_bytes())
    }

    /// True when the stored checksum matches the fields.
    pub fn is_valid(&self) -> bool {
        self.checksum == self.compute_checksum()
    }

    /// The entry without its body: what a view change carries.
    pub fn header(&self) -> EntryHeader {
        EntryHeader {
            op: self.op,
            view: self.view,
            client: self.client,
            request: self.request,
            operation: self.operation,
            checksum: self.checksum,
        }
    }
}

/// An [`Entry`] without its body. The checksum still covers the body (its length and hash), so
/// a body fetched from any replica is checked against the header with [`EntryHeader::matches`]:
/// a view change carries headers, and the bodies follow from the replicas that hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    /// Position in the log, starting at 1.
    pub op: u64,
    /// View in which the primary prepared the entry.
    pub view: u32,
    /// Client id that sent the request.
    pub client: u128,
    /// Client request number.
    pub request: u64,
    /// Operation code.
    pub operation: u8,
    /// The entry's checksum, over the fields and the body.
    pub checksum: u64,
}

impl EntryHeader {
    /// True when `entry` is the one this header names: the same fields, and a checksum that its
    /// body recomputes (a forged or torn body does not).
    pub fn matches(&self, entry: &Entry) -> bool {
        entry.header() == *self && entry.is_valid()
    }
}

/// Small FNV-1a hasher: deterministic across platforms and runs, no dependency.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Fnv {
    /// Starts from the FNV offset basis.
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    /// Mixes bytes in.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
    /// The hash of `bytes` alone.
    pub fn oneshot(bytes: &[u8]) -> u64 {
        let mut hash = Fnv::new();
        hash.write(bytes);
        hash.finish()
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Fnv::new()
    }
}

/// A log transferred in a view change or to a rejoining replica: the headers of the sender's
/// entries above its checkpoint. Bodies do not travel with it (a log can hold gigabytes of
/// batches): a receiver keeps its own entries whose checksums match and fetches the other
/// bodies with `RequestPrepare`, checking each against its header.
///
/// `headers` are ops `base + 1..=base + headers.len()`. The ops at or below `base` are committed
/// (the sender checkpointed them); `base_checksum` is the checksum of the sender's entry at `base`
/// (0 when `base` is 0), which lets a receiver that holds that entry vouch for its own prefix.
/// The sender holds the body of every header it sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log {
    /// The sender's checkpoint op.
    pub base: u64,
    /// Checksum of the entry at `base`.
    pub base_checksum: u64,
    /// Headers of the entries `base + 1..`.
    pub headers: Vec<EntryHeader>,
}

impl Log {
    /// The log of `entries` (ops `base + 1..` in order).
    pub fn of_entries(base: u64, base_checksum: u64, entries: &[Entry]) -> Self {
        Log {
            base,
            base_checksum,
            headers: entries.iter().map(Entry::header).collect(),
        }
    }

    /// Highest op of the log.
    pub fn op(&self) -> u64 {
        self.base + self.headers.len() as u64
    }

    /// The header at `op`, if the log holds one (never at or below `base`).
    pub fn header_at(&self, op: u64) -> Option<&EntryHeader> {
        let index = op.checked_sub(self.base + 1)?;
        self.headers.get(usize::try_from(index).ok()?)
    }
}

/// A replica-to-replica message. Every message names the view it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Primary to backups: append `entry`; `commit` piggybacks the primary's commit number.
    /// Also the answer to `RequestPrepare` (repair); a replica that serves a new primary's
    /// request for bodies during a view change names its `log_view` (the log the entry is from).
    Prepare {
        view: u32,
        commit: u64,
        entry: Entry,
    },
    /// Backup to primary: this replica's journal holds `view`'s log durably through `op` (every
    /// op from its checkpoint up to `op`, not only `op`). Sent for each op above the sender's
    /// commit, and for the head of its durable log when that is not above its commit (the
    /// primary learns how far every journal reaches, for [`Message::Commit`]'s
    /// `checkpoint_safe`). `checksum` is the checksum of the sender's entry at `op` (0 when it
    /// holds none there): the primary counts the ack only when its own log has that entry, so
    /// an ack of another log under the same group (a deleted partition incarnation's backup,
    /// whose frames reach the recreated group's replicas) counts for nothing.
    PrepareOk {
        view: u32,
        op: u64,
        checksum: u64,
        replica: ReplicaId,
    },
    /// Primary heartbeat carrying its commit number and the highest op every replica of the
    /// group is known to hold durably among the committed ops: any replica may checkpoint at
    /// or below it (and at or below its own commit) without leaving another replica in need of
    /// state transfer. On the wire it is the Commit header's `checkpoint_op`.
    Commit {
        view: u32,
        commit: u64,
        checkpoint_safe: u64,
    },
    /// A replica that stopped hearing from its primary (or whose view change stalled) asks
    /// whether the others lost it too, before it starts a view change to `view`. It votes in
    /// nothing and changes no state: a replica cut off from its peers asks in vain and so never
    /// raises its view. `view` is the one the sender would move to (not yet its own).
    PreVote { view: u32, replica: ReplicaId },
    /// Answer to a [`Message::PreVote`] for `view`: the sender has not heard from a primary of
    /// its own view within the view-change timeout either (or is changing views itself). A
    /// sender that still hears its primary does not answer.
    PreVoteGranted { view: u32, replica: ReplicaId },
    /// A replica suspects the primary and votes to move to `view`.
    StartViewChange { view: u32, replica: ReplicaId },
    /// To the new primary of `view`: the sender's log (headers), last normal view and commit
    /// number. The sender holds every body the log names and serves it on request.
    DoViewChange {
        view: u32,
        replica: ReplicaId,
        log_view: u32,
        commit: u64,
        log: Log,
    },
    /// New primary to all: the canonical log of `view` (headers; the bodies a backup lacks it
    /// asks the primary for).
    /// Also the answer to a `RequestPrepare` for an op the primary already checkpointed.
    StartView { view: u32, commit: u64, log: Log },
    /// Backup to primary: send me the prepare at `op` (and a few after it). Also the new primary
    /// of `view` to a DoViewChange sender, for the bodies of the canonical log it lacks.
    RequestPrepare {
        view: u32,
        op: u64,
        replica: ReplicaId,
    },
    /// A DoViewChange sender to the new primary of `view` that asked it for the body of `op`
    /// (a `RequestPrepare` of its body fetch): a committed retirement deleted that body here,
    /// so this replica can never serve it (on the wire: RangeEvicted). The primary asks another
    /// holder, or, when none is left, moves on to the next view at once instead of waiting
    /// for its view change to time out.
    BodyRetired {
        view: u32,
        op: u64,
        replica: ReplicaId,
    },
    /// A lagging or restarted replica asks the primary of `view` (or of a later view) for its
    /// `StartView`.
    RequestStartView { view: u32, replica: ReplicaId },
    /// The primary of `view` to its group's preferred replica, caught up: start the view
    /// change to `target_view`, which the receiver leads (on the wire: PrimaryRebalance with
    /// kind PrimaryTransfer). The primary itself stays in `view` until that view change
    /// reaches it, so a primary cut off at that moment raises no view.
    PrimaryTransfer {
        view: u32,
        target_view: u32,
        /// The preferred replica: the receiver, and the primary of `target_view`.
        target: ReplicaId,
        replica: ReplicaId,
    },
}

impl Message {
    /// The view the message names.
    pub fn view(&self) -> u32 {
        match self {
            Message::Prepare { view, .. }
            | Message::PrepareOk { view, .. }
            | Message::Commit { view, .. }
            | Message::PreVote { view, .. }
            | Message::PreVoteGranted { view, .. }
            | Message::StartViewChange { view, .. }
            | Message::DoViewChange { view, .. }
            | Message::StartView { view, .. }
            | Message::RequestPrepare { view, .. }
            | Message::BodyRetired { view, .. }
            | Message::RequestStartView { view, .. }
            | Message::PrimaryTransfer { view, .. } => *view,
        }
    }

    /// Short name for logs and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Prepare { .. } => "prepare",
            Message::PrepareOk { .. } => "prepare_ok",
            Message::Commit { .. } => "commit",
            Message::PreVote { .. } => "pre_vote",
            Message::PreVoteGranted { .. } => "pre_vote_granted",
            Message::StartViewChange { .. } => "start_view_change",
            Message::DoViewChange { .. } => "do_view_change",
            Message::StartView { .. } => "start_view",
            Message::RequestPrepare { .. } => "request_prepare",
            Message::BodyRetired { .. } => "body_retired",
            Message::RequestStartView { .. } => "request_start_view",
            Message::PrimaryTransfer { .. } => "primary_transfer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned from the hand-written hasher the spec's `EntryChecksumInput` replaced: journal
    /// records and checkpoints on disk hold these checksums.
    #[test]
    fn the_checksum_hashes_the_same_bytes_as_before_the_spec_declared_them() {
        let entry = Entry::new(7, 2, 0x1122, 9, 3, Bytes::from_static(b"hello"));
        assert_eq!(entry.checksum, 0xea29_a86e_cf67_1fe0);
    }

    #[test]
    fn an_entry_over_a_verified_body_hash_seals_as_one_that_hashed_its_body() {
        let body = Bytes::from_static(b"a batch");
        let hash = twox_hash::XxHash3_64::oneshot(&body);
        let entry = Entry::new(4, 1, 9, 2, 3, body.clone());
        assert_eq!(Entry::with_body_hash(4, 1, 9, 2, 3, body, hash), entry);
    }

    #[test]
    fn a_header_accepts_only_the_body_its_checksum_names() {
        let entry = Entry::new(3, 1, 7, 2, 5, Bytes::from_static(b"hello"));
        let header = entry.header();
        assert!(header.matches(&entry));
        let forged = Entry::new(3, 1, 7, 2, 5, Bytes::from_static(b"jello"));
        assert!(
            !header.matches(&forged),
            "another body seals another checksum"
        );
        let mut relabelled = forged.clone();
        relabelled.checksum = header.checksum;
        assert!(
            !header.matches(&relabelled),
            "a copied checksum does not fit the body"
        );
    }

    #[test]
    fn checksum_detects_a_torn_body() {
        let entry = Entry::new(3, 1, 7, 2, 5, Bytes::from_static(b"hello"));
        assert!(entry.is_valid());
        let mut torn = entry.clone();
        torn.body = Bytes::from_static(b"hell");
        assert!(!torn.is_valid());
    }
}
