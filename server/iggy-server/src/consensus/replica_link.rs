//! One replica link, sans-IO: who dials, the handshake steps (through `admission`), the
//! reconnect schedule, and the check every inbound frame passes before anything reads it.
//! `replica_bus` owns the sockets and carries out what this module decides.
//!
//! The inbound check follows spec/frames.spec ("Replica-to-replica frames"): the command byte
//! only picks the checksum kind (sealed or prepare identity), and that checksum is verified
//! before any other field is read. Then the generic fields (release, cluster, sender, size),
//! then the group and, for a partition group, its incarnation. The body is checked against
//! `checksum_body` once it has been read. Every failure is a `Reject` naming its reason: the
//! shell closes the link and logs it; nothing here panics on a peer's bytes.

use super::admission::{self, Admitted, Local, Refusal};
use iggy_generated::frames::{
    Command, CommitAnswerHeader, CommitHeader, CommitQuestionHeader, DoViewChangeHeader,
    FRAME_SEALED_COMMANDS, ForwardWriteHeader, ForwardWriteResultHeader, GenericHeader,
    IDENTITY_CHECKSUM_COMMANDS, METADATA_GROUP, MetadataHistory, PingHeader, PreVoteHeader,
    PrepareHeader, PrepareOkHeader, PrimaryRebalanceHeader, RepairRangeReplyHeader,
    ReplicaHandshakeStatus, RequestPreparesHeader, RequestStartViewHeader, RequestStateChunkHeader,
    RequestStateTransferHeader, StartViewChangeHeader, StartViewHeader, StateChunkHeader,
    StateTransferTargetHeader,
};
use std::time::Duration;

// The frame checksums and header size are the replica codec's (`iggy_vsr::codec`).
pub use iggy_vsr::codec::{HEADER_SIZE, body_checksum_of, prepare_identity_of, seal_of};

/// Whether this node dials `peer` (the lower id dials) or waits for it to dial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Dialer,
    Acceptor,
}

/// This node's role on the link to `peer`; `None` for itself.
pub fn role(local: u8, peer: u8) -> Option<Role> {
    if admission::dials(local, peer) {
        Some(Role::Dialer)
    } else if admission::dials(peer, local) {
        Some(Role::Acceptor)
    } else {
        None
    }
}

/// The dialer's handshake: it writes `opening()`, reads one handshake frame and decides.
pub struct DialerHandshake {
    local: Local,
    peer: u8,
    hello: admission::Frame,
}

impl DialerHandshake {
    /// `history` is what this node declares now about its metadata
    /// (`admission::declared_history`); `nonce` is fresh from a CSPRNG (used with auth on).
    pub fn new(local: Local, peer: u8, history: MetadataHistory, nonce: admission::Nonce) -> Self {
        let hello = admission::hello(&local, peer, history, nonce);
        Self { local, peer, hello }
    }

    /// The first frame on the connection (`ReplicaHello`).
    pub fn opening(&self) -> admission::Frame {
        self.hello
    }

    /// The verdict on the acceptor's answer (`admission::FRAME_SIZE` bytes), and the Finish to
    /// write before acting on it. A refusal of the acceptor's own arrives here too, with the
    /// field it named.
    pub fn answer(&self, frame: &[u8]) -> admission::DialerOutcome {
        admission::admit_challenge(&self.local, self.peer, &self.hello, frame)
    }
}

/// What the acceptor does with a dialer's hello.
#[derive(Debug)]
pub struct AcceptorStep {
    /// The frame to write before anything else: the challenge with its status. `None` when
    /// the hello's seal does not hold: nothing in it can be trusted, not even whom to answer.
    pub answer: Option<admission::Frame>,
    /// Admitted, or refused (the connection closes after the answer is written).
    pub verdict: Result<Admitted, Refusal>,
    /// With auth on and the hello admitted: the dialer's Finish is still to be read and
    /// judged before the link is up.
    pub awaiting_finish: Option<AwaitingFinish>,
}

/// An acceptor's handshake that waits for the dialer's Finish.
#[derive(Debug)]
pub struct AwaitingFinish {
    local: Local,
    hello: admission::Frame,
    challenge: admission::Frame,
}

impl AwaitingFinish {
    /// The verdict on the dialer's Finish (`admission::FRAME_SIZE` bytes).
    pub fn finish(&self, frame: &[u8]) -> Result<(), Refusal> {
        admission::admit_finish(&self.local, &self.hello, &self.challenge, frame)
    }
}

/// The acceptor's handshake: one hello in, one answer out, declaring `history`; `nonce` is
/// fresh from a CSPRNG (used with auth on).
pub fn accept_hello(
    local: &Local,
    frame: &[u8],
    history: MetadataHistory,
    nonce: admission::Nonce,
) -> AcceptorStep {
    let verdict = admission::admit_hello(local, frame);
    let status = match &verdict {
        Ok(_) => Some(ReplicaHandshakeStatus::Ok),
        Err(refusal) => refusal.status,
    };
    let answer = status.map(|status| admission::challenge(local, status, history, nonce, frame));
    let awaiting_finish = match (&verdict, answer, &local.auth) {
        (Ok(_), Some(challenge), Some(_)) => Some(AwaitingFinish {
            local: local.clone(),
            hello: frame.try_into().expect("an admitted hello is one frame"),
            challenge,
        }),
        _ => None,
    };
    AcceptorStep {
        answer,
        verdict,
        awaiting_finish,
    }
}

/// The reconnect schedule: exponential from `base` up to `max`, each delay drawn from the
/// upper half of its step by a seeded generator, so nodes that lost each other together do
/// not redial in lockstep, and a test with a fixed seed sees fixed delays.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    state: u64,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Self {
            base: base.max(Duration::from_millis(1)),
            max: max.max(base),
            attempt: 0,
            state: seed,
        }
    }

    /// The wait before the next attempt; each call is one more failure.
    pub fn next_delay(&mut self) -> Duration {
        // 2^20 steps reach any `max` that fits a Duration long before the shift overflows.
        let step = self.attempt.min(20);
        self.attempt = self.attempt.saturating_add(1);
        let ceiling = self.base.saturating_mul(1 << step).min(self.max);
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_micros()).unwrap_or(u64::MAX);
        let jitter = Duration::from_micros(self.random() % span.saturating_add(1));
        half + jitter
    }

    /// An admitted link starts the schedule over.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// splitmix64: small, fast and good enough to spread delays.
    fn random(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// How a command's `checksum` is computed (spec/frames.spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumKind {
    /// XxHash3-64 of header bytes 16..256, widened.
    Sealed,
    /// XxHash3-64 of the 256 bytes with checksum and view zeroed (a Prepare; a RepairPrepare
    /// hashes as the Prepare it was stored as).
    PrepareIdentity,
}

/// The checksum kind the spec's masks give `command`, for frames carried between replicas.
fn checksum_kind(command: u8) -> Option<ChecksumKind> {
    let bit = 1u64.checked_shl(u32::from(command))?;
    if FRAME_SEALED_COMMANDS & bit != 0 {
        Some(ChecksumKind::Sealed)
    } else if IDENTITY_CHECKSUM_COMMANDS & bit != 0 {
        Some(ChecksumKind::PrepareIdentity)
    } else {
        None
    }
}

/// Where a command's header keeps its consensus group and its partition incarnation. Frames
/// without a group field are metadata-plane traffic (forwards, heartbeats, rebalance and
/// segment-delete exchanges all go through the metadata primary).
fn group_fields(command: Command) -> (Option<usize>, Option<usize>) {
    use Command as C;
    match command {
        C::Prepare | C::RepairPrepare => (
            Some(PrepareHeader::GROUP_OFFSET),
            Some(PrepareHeader::PARTITION_INCARNATION_OFFSET),
        ),
        // The official layout has no incarnation here.
        C::PrepareOk => (Some(PrepareOkHeader::GROUP_OFFSET), None),
        C::Commit => (
            Some(CommitHeader::GROUP_OFFSET),
            Some(CommitHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::StartViewChange => (
            Some(StartViewChangeHeader::GROUP_OFFSET),
            Some(StartViewChangeHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::PreVote | C::PreVoteGranted => (
            Some(PreVoteHeader::GROUP_OFFSET),
            Some(PreVoteHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::DoViewChange => (
            Some(DoViewChangeHeader::GROUP_OFFSET),
            Some(DoViewChangeHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::StartView => (
            Some(StartViewHeader::GROUP_OFFSET),
            Some(StartViewHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::RequestStartView => (
            Some(RequestStartViewHeader::GROUP_OFFSET),
            Some(RequestStartViewHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::RequestPrepares => (
            Some(RequestPreparesHeader::GROUP_OFFSET),
            Some(RequestPreparesHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::RepairDone | C::RangeEvicted => (
            Some(RepairRangeReplyHeader::GROUP_OFFSET),
            Some(RepairRangeReplyHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::RequestStateTransfer => (
            Some(RequestStateTransferHeader::GROUP_OFFSET),
            Some(RequestStateTransferHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::StateTransferTarget => (
            Some(StateTransferTargetHeader::GROUP_OFFSET),
            Some(StateTransferTargetHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::RequestStateChunk => (
            Some(RequestStateChunkHeader::GROUP_OFFSET),
            Some(RequestStateChunkHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::StateChunk => (
            Some(StateChunkHeader::GROUP_OFFSET),
            Some(StateChunkHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::PrimaryRebalance => (
            Some(PrimaryRebalanceHeader::NAMESPACE_OFFSET),
            Some(PrimaryRebalanceHeader::CREATED_REVISION_OFFSET),
        ),
        C::ForwardWrite => (
            Some(ForwardWriteHeader::GROUP_OFFSET),
            Some(ForwardWriteHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::ForwardWriteResult => (
            Some(ForwardWriteResultHeader::GROUP_OFFSET),
            Some(ForwardWriteResultHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::CommitQuestion => (
            Some(CommitQuestionHeader::GROUP_OFFSET),
            Some(CommitQuestionHeader::PARTITION_INCARNATION_OFFSET),
        ),
        C::CommitAnswer => (
            Some(CommitAnswerHeader::GROUP_OFFSET),
            Some(CommitAnswerHeader::PARTITION_INCARNATION_OFFSET),
        ),
        _ => (None, None),
    }
}

/// Why an inbound frame closed its link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// What failed: `checksum`, `command`, `release`, `cluster`, `replica`, `size`,
    /// `checksum_body`, `partition_incarnation`.
    pub reason: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "frame refused: `{}` {}", self.reason, self.detail)
    }
}

fn reject(reason: &'static str, detail: impl Into<String>) -> Reject {
    Reject {
        reason,
        detail: detail.into(),
    }
}

/// A header that passed `FrameCheck::header`: what the shell needs to read the body and
/// route the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub command: Command,
    /// The whole frame, header included.
    pub size: u32,
    /// The consensus group (`METADATA_GROUP` for metadata-plane frames).
    pub group: u64,
    checksum_body: u128,
}

impl Verified {
    /// Body bytes still to read after the header.
    pub fn body_len(&self) -> usize {
        self.size as usize - HEADER_SIZE
    }
}

/// The inbound check of one admitted link.
#[derive(Debug, Clone, Copy)]
pub struct FrameCheck {
    pub cluster: u128,
    /// The admitted peer: every frame on the link must name it as sender.
    pub peer: u8,
    pub max_frame_size: u32,
}

fn u32_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u128_at(bytes: &[u8; HEADER_SIZE], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"))
}

/// A link-level Ping or Pong from `sender` (spec/frames.spec `PingHeader`), sealed.
#[cfg(test)]
pub fn keepalive_frame(cluster: u128, sender: u8, command: Command) -> [u8; HEADER_SIZE] {
    timed_keepalive_frame(cluster, sender, command, Keepalive::default())
}

/// What a Ping or Pong says besides its kind (spec/frames.spec `PingHeader`): the sender's
/// wall clock and, on a Pong, the echo of the Ping's, which a peer learns this node's clock
/// from (`cluster_clock`); the metadata op a Ping's sender applied, and a Pong's grant lease
/// (`grant_lease`). A build before a field sends 0 there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keepalive {
    pub wall_clock: u64,
    pub echo: u64,
    pub metadata_applied: u64,
    pub grants_leases: bool,
    /// The commit a Pong grants a lease at.
    pub lease: Option<u64>,
}

/// A Ping or Pong carrying `fields`, sealed.
pub fn timed_keepalive_frame(
    cluster: u128,
    sender: u8,
    command: Command,
    fields: Keepalive,
) -> [u8; HEADER_SIZE] {
    assert!(
        matches!(command, Command::Ping | Command::Pong),
        "{command:?}"
    );
    ping_header(cluster, sender, command, false, fields)
}

/// What a verified Ping or Pong says (0 and false where a build before a field sent none).
pub fn keepalive_fields(header: &[u8; HEADER_SIZE]) -> Keepalive {
    let read = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    Keepalive {
        wall_clock: read(PingHeader::WALL_CLOCK_OFFSET),
        echo: read(PingHeader::ECHO_OFFSET),
        metadata_applied: read(PingHeader::METADATA_APPLIED_OFFSET),
        grants_leases: header[PingHeader::GRANTS_LEASES_OFFSET] != 0,
        lease: (header[PingHeader::LEASE_GRANTED_OFFSET] != 0)
            .then(|| read(PingHeader::LEASE_COMMIT_OFFSET)),
    }
}

/// The last frame a gracefully stopping `sender` writes on each link, once it gave up its grant
/// leases (`ReplicaPlane::say_stopping`): a Ping with `stopping` and `leases_given_up` set. A
/// peer of a build before the fields answers it as any Ping.
pub fn stopping_frame(cluster: u128, sender: u8) -> [u8; HEADER_SIZE] {
    ping_header(cluster, sender, Command::Ping, true, Keepalive::default())
}

fn ping_header(
    cluster: u128,
    sender: u8,
    command: Command,
    stopping: bool,
    fields: Keepalive,
) -> [u8; HEADER_SIZE] {
    let mut header = PingHeader {
        cluster,
        size: HEADER_SIZE as u32,
        command,
        replica: sender,
        stopping,
        leases_given_up: stopping,
        wall_clock: fields.wall_clock,
        echo: fields.echo,
        metadata_applied: fields.metadata_applied,
        grants_leases: fields.grants_leases,
        lease_granted: fields.lease.is_some(),
        lease_commit: fields.lease.unwrap_or(0),
        ..PingHeader::default()
    }
    .to_bytes();
    let seal = seal_of(&header);
    header[..GenericHeader::CHECKSUM_SIZE].copy_from_slice(&seal.to_le_bytes());
    header
}

/// Whether an outgoing frame (one this node built) is its stopping Ping.
pub fn is_stopping_frame(frame: &[u8]) -> bool {
    frame.len() == HEADER_SIZE
        && frame[GenericHeader::COMMAND_OFFSET] == Command::Ping as u8
        && frame[PingHeader::STOPPING_OFFSET] != 0
}

/// Whether a verified frame is its sender's notice that it stops gracefully (a Ping with
/// `stopping` set; any non-zero byte counts, the seal already vouched for it).
pub fn says_stopping(verified: &Verified, header: &[u8; HEADER_SIZE]) -> bool {
    verified.command == Command::Ping && header[PingHeader::STOPPING_OFFSET] != 0
}

/// Whether a stopping Ping ([`says_stopping`]) also says its sender gave up its grant leases
/// first (a build before the field stops without doing so: its leases run out as any).
pub fn gave_up_leases(verified: &Verified, header: &[u8; HEADER_SIZE]) -> bool {
    says_stopping(verified, header) && header[PingHeader::LEASES_GIVEN_UP_OFFSET] != 0
}

impl FrameCheck {
    /// Checks a header read from the link. The command byte picks the checksum kind and the
    /// checksum is verified before any other field is read: a torn or forged header cannot
    /// steer the size of the next read, the routing or the log line.
    pub fn header(&self, header: &[u8; HEADER_SIZE]) -> Result<Verified, Reject> {
        let command_byte = header[GenericHeader::COMMAND_OFFSET];
        let Some(kind) = checksum_kind(command_byte) else {
            return Err(reject(
                "command",
                format!("command {command_byte} is not a replica frame"),
            ));
        };
        let (expected, what) = match kind {
            ChecksumKind::Sealed => (seal_of(header), "seal"),
            ChecksumKind::PrepareIdentity => (prepare_identity_of(header), "prepare identity"),
        };
        if u128_at(header, GenericHeader::CHECKSUM_OFFSET) != expected {
            return Err(reject(
                "checksum",
                format!("the {what} of a command {command_byte} frame does not hold"),
            ));
        }
        // Verified: the fields may be read from here on.
        let Some(command) = Command::from_repr(command_byte) else {
            return Err(reject(
                "command",
                format!("command {command_byte} is unknown"),
            ));
        };
        if matches!(
            command,
            Command::ReplicaHello | Command::ReplicaChallenge | Command::ReplicaFinish
        ) {
            return Err(reject(
                "command",
                format!("{command:?} after the link was admitted"),
            ));
        }
        let release = u32_at(header, GenericHeader::RELEASE_OFFSET);
        if release != 0 {
            return Err(reject(
                "release",
                format!("{command:?} carries release {release}; replica frames carry 0"),
            ));
        }
        let cluster = u128_at(header, GenericHeader::CLUSTER_OFFSET);
        if cluster != self.cluster {
            return Err(reject(
                "cluster",
                format!("ours {:032x}, the frame's {cluster:032x}", self.cluster),
            ));
        }
        let sender = header[GenericHeader::REPLICA_OFFSET];
        if sender != self.peer {
            return Err(reject(
                "replica",
                format!(
                    "{command:?} names sender {sender} on the link admitted for replica {}",
                    self.peer
                ),
            ));
        }
        let size = u32_at(header, GenericHeader::SIZE_OFFSET);
        if (size as usize) < HEADER_SIZE || size > self.max_frame_size {
            return Err(reject(
                "size",
                format!(
                    "{command:?} of {size} bytes, outside {HEADER_SIZE}..={}",
                    self.max_frame_size
                ),
            ));
        }
        let checksum_body = u128_at(header, GenericHeader::CHECKSUM_BODY_OFFSET);
        if size as usize == HEADER_SIZE && checksum_body != 0 {
            return Err(reject(
                "checksum_body",
                format!("{command:?} has no body but a body checksum {checksum_body:032x}"),
            ));
        }
        if matches!(command, Command::Ping | Command::Pong) && size as usize != HEADER_SIZE {
            return Err(reject(
                "size",
                format!("{command:?} of {size} bytes; a keepalive is header only"),
            ));
        }
        let (group_at, incarnation_at) = group_fields(command);
        let group = group_at.map_or(METADATA_GROUP, |at| u64_at(header, at));
        if let Some(at) = incarnation_at
            && group != METADATA_GROUP
            && u64_at(header, at) == 0
        {
            return Err(reject(
                "partition_incarnation",
                format!(
                    "{command:?} for partition group {group:#x} carries incarnation 0 (a frame \
                     of an older server)"
                ),
            ));
        }
        Ok(Verified {
            command,
            size,
            group,
            checksum_body,
        })
    }

    /// Checks the body read after a verified header.
    pub fn body(&self, verified: &Verified, body: &[u8]) -> Result<(), Reject> {
        if body.len() != verified.body_len() {
            return Err(reject(
                "size",
                format!(
                    "{:?} body of {} bytes, the header says {}",
                    verified.command,
                    body.len(),
                    verified.body_len()
                ),
            ));
        }
        let found = body_checksum_of(body);
        if found != verified.checksum_body {
            return Err(reject(
                "checksum_body",
                format!(
                    "{:?} body hashes to {found:032x}, the header says {:032x}",
                    verified.command, verified.checksum_body
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::consensus::admission::local_identity;
    use iggy_vsr::codec::{FrameContext, Inbound, decode, encode};
    use iggy_vsr::{Entry, Log, Message};

    pub const CLUSTER: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;

    /// `frame` from `peer` of cluster `cluster` through the bus's own checks (the header, then
    /// the body), as a peer receives it: the `Inbound` the bus routes.
    pub(in crate::consensus) fn deliver_in(
        cluster: u128,
        frame: &[u8],
        peer: u8,
    ) -> Result<Inbound, Reject> {
        let check = FrameCheck {
            cluster,
            peer,
            max_frame_size: 1 << 20,
        };
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let verified = check.header(&header)?;
        let body = bytes::Bytes::copy_from_slice(&frame[HEADER_SIZE..]);
        check.body(&verified, &body)?;
        Ok(Inbound {
            from: peer,
            command: verified.command,
            group: verified.group,
            header: Box::new(header),
            body,
        })
    }

    fn local(replica: u8) -> Local {
        Local {
            cluster: CLUSTER,
            replica,
            replica_count: 3,
            identity: local_identity(),
            auth: None,
            roster: 1,
            runs: Default::default(),
        }
    }

    const DIALER_NONCE: admission::Nonce = [0xd1; 32];
    const ACCEPTOR_NONCE: admission::Nonce = [0xa2; 32];

    /// A sealed Commit from `sender` for `group`, with a body when `body` is non-empty (the
    /// layouts allow one on any frame; the check does not care which command carries it).
    pub fn commit_frame(sender: u8, group: u64, incarnation: u64, body: &[u8]) -> Vec<u8> {
        let mut header = [0u8; HEADER_SIZE];
        header[GenericHeader::CLUSTER_OFFSET..][..16].copy_from_slice(&CLUSTER.to_le_bytes());
        let size = (HEADER_SIZE + body.len()) as u32;
        header[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&size.to_le_bytes());
        header[GenericHeader::COMMAND_OFFSET] = Command::Commit as u8;
        header[GenericHeader::REPLICA_OFFSET] = sender;
        header[CommitHeader::COMMIT_OFFSET..][..8].copy_from_slice(&42u64.to_le_bytes());
        header[CommitHeader::GROUP_OFFSET..][..8].copy_from_slice(&group.to_le_bytes());
        header[CommitHeader::PARTITION_INCARNATION_OFFSET..][..8]
            .copy_from_slice(&incarnation.to_le_bytes());
        header[GenericHeader::CHECKSUM_BODY_OFFSET..][..16]
            .copy_from_slice(&body_checksum_of(body).to_le_bytes());
        let seal = seal_of(&header);
        header[..16].copy_from_slice(&seal.to_le_bytes());
        let mut frame = header.to_vec();
        frame.extend_from_slice(body);
        frame
    }

    fn prepare_frame(command: Command, view: u32, body: &[u8]) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        header[GenericHeader::CLUSTER_OFFSET..][..16].copy_from_slice(&CLUSTER.to_le_bytes());
        let size = (HEADER_SIZE + body.len()) as u32;
        header[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&size.to_le_bytes());
        header[GenericHeader::VIEW_OFFSET..][..4].copy_from_slice(&view.to_le_bytes());
        header[GenericHeader::COMMAND_OFFSET] = Command::Prepare as u8;
        header[GenericHeader::REPLICA_OFFSET] = 0;
        header[PrepareHeader::OP_OFFSET..][..8].copy_from_slice(&7u64.to_le_bytes());
        header[PrepareHeader::GROUP_OFFSET..][..8].copy_from_slice(&METADATA_GROUP.to_le_bytes());
        header[GenericHeader::CHECKSUM_BODY_OFFSET..][..16]
            .copy_from_slice(&body_checksum_of(body).to_le_bytes());
        let identity = prepare_identity_of(&header);
        header[..16].copy_from_slice(&identity.to_le_bytes());
        header[GenericHeader::COMMAND_OFFSET] = command as u8;
        header
    }

    fn check() -> FrameCheck {
        FrameCheck {
            cluster: CLUSTER,
            peer: 0,
            max_frame_size: 1024,
        }
    }

    fn head(frame: &[u8]) -> [u8; HEADER_SIZE] {
        frame[..HEADER_SIZE].try_into().unwrap()
    }

    #[test]
    fn roles_follow_the_dial_rule() {
        assert_eq!(role(0, 1), Some(Role::Dialer));
        assert_eq!(role(2, 1), Some(Role::Acceptor));
        assert_eq!(role(1, 1), None);
    }

    #[test]
    fn the_handshake_steps_admit_both_sides_or_refuse_both() {
        let dialer = DialerHandshake::new(local(0), 2, MetadataHistory::Held, DIALER_NONCE);
        let step = accept_hello(
            &local(2),
            &dialer.opening(),
            MetadataHistory::Absent,
            ACCEPTOR_NONCE,
        );
        // Each side learns the other's declared history with its admission.
        let at_acceptor = step.verdict.unwrap();
        assert_eq!(
            (at_acceptor.replica, at_acceptor.history),
            (0, MetadataHistory::Held)
        );
        let at_dialer = dialer.answer(&step.answer.unwrap()).verdict.unwrap();
        assert_eq!(
            (at_dialer.replica, at_dialer.history),
            (2, MetadataHistory::Absent)
        );

        // Another cluster: the acceptor answers with the status, both name `cluster`.
        let other = Local {
            cluster: CLUSTER ^ 1,
            ..local(0)
        };
        let dialer = DialerHandshake::new(other, 2, MetadataHistory::Absent, DIALER_NONCE);
        let step = accept_hello(
            &local(2),
            &dialer.opening(),
            MetadataHistory::Absent,
            ACCEPTOR_NONCE,
        );
        assert_eq!(step.verdict.unwrap_err().field, "cluster");
        assert_eq!(
            dialer
                .answer(&step.answer.unwrap())
                .verdict
                .unwrap_err()
                .field,
            "cluster"
        );

        // A dialer that is not the lower id of the pair (a node started under another
        // replica id than the roster gives its address): both name `replica`.
        let dialer = DialerHandshake::new(local(2), 1, MetadataHistory::Absent, DIALER_NONCE);
        let step = accept_hello(
            &local(1),
            &dialer.opening(),
            MetadataHistory::Absent,
            ACCEPTOR_NONCE,
        );
        assert_eq!(step.verdict.unwrap_err().field, "replica");
        assert_eq!(
            dialer
                .answer(&step.answer.unwrap())
                .verdict
                .unwrap_err()
                .field,
            "replica"
        );

        // A torn hello gets no answer at all.
        let mut torn =
            DialerHandshake::new(local(0), 2, MetadataHistory::Held, DIALER_NONCE).opening();
        torn[200] ^= 1;
        let step = accept_hello(&local(2), &torn, MetadataHistory::Absent, ACCEPTOR_NONCE);
        assert!(step.answer.is_none());
        assert_eq!(step.verdict.unwrap_err().field, "checksum");
    }

    #[test]
    fn backoff_grows_to_its_bound_jittered_and_deterministically() {
        let base = Duration::from_millis(10);
        let max = Duration::from_millis(500);
        let mut a = Backoff::new(base, max, 7);
        let delays: Vec<Duration> = (0..12).map(|_| a.next_delay()).collect();
        for (i, delay) in delays.iter().enumerate() {
            let ceiling = base.saturating_mul(1 << i.min(20)).min(max);
            assert!(
                *delay >= ceiling / 2 && *delay <= ceiling,
                "{i}: {delay:?} outside {:?}..={ceiling:?}",
                ceiling / 2
            );
        }
        assert!(delays.iter().all(|d| *d <= max));
        // The same seed gives the same schedule; another seed another one.
        let mut same = Backoff::new(base, max, 7);
        assert_eq!(
            (0..12).map(|_| same.next_delay()).collect::<Vec<_>>(),
            delays
        );
        let mut other = Backoff::new(base, max, 8);
        assert_ne!(
            (0..12).map(|_| other.next_delay()).collect::<Vec<_>>(),
            delays
        );
        // An admitted link starts over from the base.
        a.reset();
        assert!(a.next_delay() <= base);
        // Many failures never overflow.
        let mut long = Backoff::new(base, Duration::from_secs(3600), 1);
        for _ in 0..1000 {
            assert!(long.next_delay() <= Duration::from_secs(3600));
        }
    }

    #[test]
    fn a_sealed_frame_passes_and_its_body_is_checked_after_the_header() {
        let frame = commit_frame(0, 5 << 32 | 1 << 20 | 3, 9, b"body bytes");
        let verified = check().header(&head(&frame)).unwrap();
        assert_eq!(verified.command, Command::Commit);
        assert_eq!(verified.group, 5 << 32 | 1 << 20 | 3);
        assert_eq!(verified.body_len(), 10);
        check().body(&verified, &frame[HEADER_SIZE..]).unwrap();
        assert_eq!(
            check().body(&verified, b"body bytez").unwrap_err().reason,
            "checksum_body"
        );
        assert_eq!(
            check().body(&verified, b"short").unwrap_err().reason,
            "size"
        );
    }

    #[test]
    fn any_flipped_header_byte_fails_the_seal_first() {
        let frame = commit_frame(0, METADATA_GROUP, 0, b"");
        for at in 0..HEADER_SIZE {
            if at == GenericHeader::COMMAND_OFFSET {
                continue;
            }
            let mut bad = head(&frame);
            bad[at] ^= 0x40;
            let reject = check().header(&bad).unwrap_err();
            assert_eq!(reject.reason, "checksum", "byte {at}: {reject}");
        }
        // A flipped command byte either names no replica frame or fails its own checksum.
        for flipped in 0..=255u8 {
            let mut bad = head(&frame);
            if flipped == Command::Commit as u8 {
                continue;
            }
            bad[GenericHeader::COMMAND_OFFSET] = flipped;
            let reason = check().header(&bad).unwrap_err().reason;
            assert!(
                reason == "checksum" || reason == "command",
                "{flipped}: {reason}"
            );
        }
    }

    #[test]
    fn prepares_carry_an_identity_that_ignores_the_view() {
        let body = b"op body";
        let prepare = prepare_frame(Command::Prepare, 3, body);
        let verified = check().header(&prepare).unwrap();
        assert_eq!(
            (verified.command, verified.group),
            (Command::Prepare, METADATA_GROUP)
        );
        check().body(&verified, body).unwrap();
        // Re-stamped by a later view: the same identity.
        let mut later = prepare;
        later[GenericHeader::VIEW_OFFSET] = 9;
        check().header(&later).unwrap();
        // A repair carries the stored prepare's identity with only the command rewritten.
        let repair = prepare_frame(Command::RepairPrepare, 3, body);
        assert_eq!(
            check().header(&repair).unwrap().command,
            Command::RepairPrepare
        );
        let mut bad = prepare;
        bad[PrepareHeader::OP_OFFSET] ^= 1;
        assert_eq!(check().header(&bad).unwrap_err().reason, "checksum");
        // A seal is not an identity: a Prepare sealed like a control frame is refused.
        let mut sealed = prepare;
        let seal = seal_of(&sealed);
        sealed[..16].copy_from_slice(&seal.to_le_bytes());
        assert_eq!(check().header(&sealed).unwrap_err().reason, "checksum");
    }

    /// Reseals `frame` after `change`, so only the field check can catch it.
    fn resealed(frame: &[u8], change: impl Fn(&mut [u8; HEADER_SIZE])) -> [u8; HEADER_SIZE] {
        let mut header = head(frame);
        change(&mut header);
        let seal = seal_of(&header);
        header[..16].copy_from_slice(&seal.to_le_bytes());
        header
    }

    #[test]
    fn sealed_fields_are_checked_against_the_link() {
        let frame = commit_frame(0, METADATA_GROUP, 0, b"");
        type Tamper = fn(&mut [u8; HEADER_SIZE]);
        let cases: [(Tamper, &str); 8] = [
            (|h| h[GenericHeader::CLUSTER_OFFSET] ^= 1, "cluster"),
            (|h| h[GenericHeader::REPLICA_OFFSET] = 1, "replica"),
            (|h| h[GenericHeader::RELEASE_OFFSET] = 1, "release"),
            (
                |h| h[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&255u32.to_le_bytes()),
                "size",
            ),
            (
                |h| h[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&1025u32.to_le_bytes()),
                "size",
            ),
            (
                |h| h[GenericHeader::CHECKSUM_BODY_OFFSET] = 1,
                "checksum_body",
            ),
            (
                |h| h[GenericHeader::COMMAND_OFFSET] = Command::ReplicaHello as u8,
                "command",
            ),
            (
                |h| h[GenericHeader::COMMAND_OFFSET] = Command::Request as u8,
                "command",
            ),
        ];
        for (change, reason) in cases {
            let reject = check().header(&resealed(&frame, change)).unwrap_err();
            assert_eq!(reject.reason, reason, "{reject}");
        }
        // The largest frame the limits allow passes; the size is the whole frame.
        let at_limit = resealed(&frame, |h| {
            h[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&1024u32.to_le_bytes());
            h[GenericHeader::CHECKSUM_BODY_OFFSET] = 1;
        });
        assert_eq!(check().header(&at_limit).unwrap().body_len(), 768);
    }

    #[test]
    fn partition_frames_with_incarnation_zero_are_refused() {
        let partition = 1 << 32 | 1 << 20 | 1;
        let reject = check()
            .header(&head(&commit_frame(0, partition, 0, b"")))
            .unwrap_err();
        assert_eq!(reject.reason, "partition_incarnation", "{reject}");
        check()
            .header(&head(&commit_frame(0, partition, 1 << 20 | 1, b"")))
            .unwrap();
        // The metadata group has no incarnation.
        check()
            .header(&head(&commit_frame(0, METADATA_GROUP, 0, b"")))
            .unwrap();
        // PrepareOk has no incarnation field (official layout): nothing to refuse.
        let ok = resealed(&commit_frame(0, METADATA_GROUP, 0, b""), |h| {
            h[128..].fill(0);
            h[GenericHeader::COMMAND_OFFSET] = Command::PrepareOk as u8;
            h[PrepareOkHeader::GROUP_OFFSET..][..8].copy_from_slice(&partition.to_le_bytes());
        });
        assert_eq!(check().header(&ok).unwrap().group, partition);
    }

    #[test]
    fn every_replica_command_has_a_checksum_kind_and_a_group() {
        for command in Command::ALL {
            let kind = checksum_kind(*command as u8);
            let carried = !matches!(
                command,
                Command::Reserved
                    | Command::PingClient
                    | Command::PongClient
                    | Command::Request
                    | Command::Reply
                    | Command::Eviction
            );
            assert_eq!(kind.is_some(), carried, "{command:?}");
            let (group, incarnation) = group_fields(*command);
            // A frame with an incarnation field always has a group to judge it by.
            assert!(incarnation.is_none() || group.is_some(), "{command:?}");
        }
        assert_eq!(checksum_kind(64), None);
        assert_eq!(checksum_kind(255), None);
    }

    #[test]
    fn keepalives_are_sealed_header_only_frames_of_no_group() {
        for command in [Command::Ping, Command::Pong] {
            let frame = keepalive_frame(CLUSTER, 0, command);
            let verified = check().header(&frame).unwrap();
            assert_eq!(
                (verified.command, verified.body_len(), verified.group),
                (command, 0, METADATA_GROUP)
            );
            // From another sender, or torn: refused like any control frame.
            let other = keepalive_frame(CLUSTER, 1, command);
            assert_eq!(check().header(&other).unwrap_err().reason, "replica");
            let mut torn = frame;
            torn[200] ^= 1;
            assert_eq!(check().header(&torn).unwrap_err().reason, "checksum");
            // A keepalive carrying a body is no keepalive.
            let with_body = resealed(&frame, |h| {
                h[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&300u32.to_le_bytes());
                h[GenericHeader::CHECKSUM_BODY_OFFSET] = 1;
            });
            assert_eq!(check().header(&with_body).unwrap_err().reason, "size");
        }
    }

    #[test]
    fn a_pong_carries_its_senders_clock_the_pings_it_answers_and_its_lease() {
        let fields = Keepalive {
            wall_clock: 1_700_000_000_000_000,
            echo: 42,
            metadata_applied: 0,
            grants_leases: true,
            lease: Some(7),
        };
        let pong = timed_keepalive_frame(CLUSTER, 0, Command::Pong, fields);
        let verified = check().header(&pong).expect("a sealed keepalive");
        assert_eq!(verified.command, Command::Pong);
        assert_eq!(keepalive_fields(&pong), fields);
        // A lease at commit 0 is a lease, told apart from none.
        let at_zero = Keepalive {
            lease: Some(0),
            ..fields
        };
        let pong = timed_keepalive_frame(CLUSTER, 0, Command::Pong, at_zero);
        assert_eq!(keepalive_fields(&pong).lease, Some(0));
        let ping = Keepalive {
            metadata_applied: 99,
            ..Keepalive::default()
        };
        let frame = timed_keepalive_frame(CLUSTER, 0, Command::Ping, ping);
        assert_eq!(keepalive_fields(&frame), ping);
        // A build before the fields: no sample, no lease, no report.
        assert_eq!(
            keepalive_fields(&keepalive_frame(CLUSTER, 0, Command::Ping)),
            Keepalive::default()
        );
    }

    /// A stopping node's last Ping passes the check as a keepalive (so a peer of a build
    /// before the field answers it as one) and is told apart from every other keepalive.
    #[test]
    fn a_stopping_ping_is_a_keepalive_that_says_so() {
        let frame = stopping_frame(CLUSTER, 0);
        let verified = check().header(&frame).unwrap();
        assert_eq!(
            (verified.command, verified.body_len(), verified.group),
            (Command::Ping, 0, METADATA_GROUP)
        );
        assert!(says_stopping(&verified, &frame));
        assert!(gave_up_leases(&verified, &frame));
        assert!(is_stopping_frame(&frame));
        for command in [Command::Ping, Command::Pong] {
            let frame = keepalive_frame(CLUSTER, 0, command);
            assert!(!says_stopping(&check().header(&frame).unwrap(), &frame));
            assert!(!gave_up_leases(&check().header(&frame).unwrap(), &frame));
            assert!(!is_stopping_frame(&frame));
        }
        // A build before `leases_given_up` stops without giving up its leases.
        let mut older = frame;
        older[PingHeader::LEASES_GIVEN_UP_OFFSET] = 0;
        let seal = seal_of(&older);
        older[..GenericHeader::CHECKSUM_SIZE].copy_from_slice(&seal.to_le_bytes());
        let verified = check().header(&older).unwrap();
        assert!(says_stopping(&verified, &older));
        assert!(!gave_up_leases(&verified, &older));
        // The flag is under the seal: a torn one is refused, not read.
        let mut torn = frame;
        torn[PingHeader::STOPPING_OFFSET] ^= 1;
        assert_eq!(check().header(&torn).unwrap_err().reason, "checksum");
        // Before the field these bytes were reserved and sent as zeros: the frame differs
        // from a plain Ping only there.
        let plain = keepalive_frame(CLUSTER, 0, Command::Ping);
        let differ: Vec<usize> = (16..HEADER_SIZE)
            .filter(|&i| frame[i] != plain[i])
            .collect();
        assert_eq!(
            differ,
            vec![
                PingHeader::STOPPING_OFFSET,
                PingHeader::LEASES_GIVEN_UP_OFFSET
            ]
        );
    }

    /// The codec's frames pass this check and decode to the message encoded, for a partition
    /// group (whose frames carry an incarnation) and the metadata group; a frame of another
    /// group keeps the group its header names, which routes it.
    #[test]
    fn codec_frames_pass_the_check_and_decode_to_their_message() {
        let send = iggy_generated::frames::Operation::SendMessages.to_repr();
        let entry = |op| {
            Entry::new(
                op,
                2,
                0xc1_1e47,
                op,
                send,
                bytes::Bytes::from_static(b"body"),
            )
        };
        let messages = [
            Message::Prepare {
                view: 3,
                commit: 4,
                entry: entry(5),
            },
            Message::Commit {
                view: 3,
                commit: 5,
                checkpoint_safe: 0,
            },
            Message::StartView {
                view: 3,
                commit: 5,
                log: Log::of_entries(0, 0, &[entry(1), entry(2)]),
            },
        ];
        for (group, incarnation) in [(5 << 32 | 1 << 20 | 3, 9), (METADATA_GROUP, 0)] {
            let context = |sender| FrameContext {
                cluster: CLUSTER,
                sender,
                group,
                incarnation,
            };
            for message in &messages {
                let frame = encode(&context(1), message);
                let inbound = deliver_in(CLUSTER, &frame, 1).unwrap();
                assert_eq!(inbound.group, group);
                assert_eq!(decode(&context(2), &inbound).as_ref(), Ok(message));
            }
        }
    }
}
