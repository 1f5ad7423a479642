//! The replica codec, sans-IO: [`Message`] values to whole replica frames and back
//! (spec/frames.spec, "Replica-to-replica frames" and "View-change log body"). It lives here,
//! beside the core, so the server's replica plane and the node simulator judge frames with the
//! same code.
//!
//! `encode` writes one frame, header first, with its checksum (a seal, or a Prepare's identity)
//! and `checksum_body` set, into one buffer sized up front. `decode` reads a frame the receiver
//! has already verified (the server's bus: checksums, release, cluster, sender, size) and
//! judges what that check cannot: that the frame is for the receiver's group and incarnation,
//! that it is a command the VSR core speaks, that its body is well formed, and that every entry
//! it carries rebuilds to the checksum its sender computed. Nothing here panics on a peer's bytes.
//!
//! A Prepare carries its entry's checksum in `request_checksum`: the frame's identity checksum
//! proves the header arrived as sent, the entry checksum that the sender's entry was whole. The
//! frame's `view` is the view it is sent in and bytes 240..244 the view the op was prepared in,
//! so a repair re-sent in a later view keeps both (the identity ignores the frame's view).
//! DoViewChange and StartView bodies carry a [`Log`]: a `ReplicaLogPrefix`, then one
//! fixed-size `ReplicaEntryHeader` per op and no body (a replica fetches the bodies it lacks and
//! checks each against its header's entry checksum).

use crate::{Entry, EntryHeader, Log, Message, ReplicaId};
use bytes::{BufMut, Bytes, BytesMut};
use iggy_generated::frames::{
    Command, CommitHeader, DoViewChangeHeader, GenericHeader, Operation, PreVoteHeader,
    PrepareHeader, PrepareOkHeader, PrimaryRebalanceHeader, PrimaryRebalanceKind,
    RepairRangeReplyHeader, ReplicaEntryHeader, ReplicaLogPrefix, RequestPreparesHeader,
    RequestStartViewHeader, StartViewChangeHeader, StartViewHeader,
};

/// Every replica frame starts with one header of this size.
pub const HEADER_SIZE: usize = GenericHeader::SIZE;

/// The seal: XxHash3-64 of bytes 16..256, widened.
pub fn seal_of(header: &[u8; HEADER_SIZE]) -> u128 {
    u128::from(twox_hash::XxHash3_64::oneshot(
        &header[GenericHeader::CHECKSUM_BODY_OFFSET..],
    ))
}

/// A prepare's identity: XxHash3-64 of the header with checksum and view zeroed, computed as
/// a Prepare (a RepairPrepare keeps the identity of the Prepare it was stored as).
pub fn prepare_identity_of(header: &[u8; HEADER_SIZE]) -> u128 {
    let mut covered = *header;
    covered[..GenericHeader::CHECKSUM_SIZE].fill(0);
    covered[GenericHeader::VIEW_OFFSET..GenericHeader::VIEW_OFFSET + GenericHeader::VIEW_SIZE]
        .fill(0);
    covered[GenericHeader::COMMAND_OFFSET] = Command::Prepare as u8;
    u128::from(twox_hash::XxHash3_64::oneshot(&covered))
}

/// `checksum_body` for `body`: XxHash3-64 widened, 0 for a header-only frame.
pub fn body_checksum_of(body: &[u8]) -> u128 {
    if body.is_empty() {
        0
    } else {
        u128::from(twox_hash::XxHash3_64::oneshot(body))
    }
}

/// A partition's consensus group id on the replica wire (spec/frames.spec): stream in the high
/// 32 bits, topic in the next 12, partition in the low 20.
pub fn partition_group((stream, topic, partition): (u32, u32, u32)) -> u64 {
    (u64::from(stream) << 32) | (u64::from(topic) << 20) | u64::from(partition)
}

/// A frame as its receiver hands it to a group: checked by the receiver (the server's bus:
/// checksums, release, cluster, sender, size) and routed by the group id its header names.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub from: u8,
    pub command: Command,
    pub group: u64,
    pub header: Box<[u8; HEADER_SIZE]>,
    /// The buffer the body was read into, kept (a Prepare's entry shares it).
    pub body: Bytes,
}

impl Inbound {
    /// Whole `frame` from peer `from`, routed to `group`, as a transport that cannot alter bytes
    /// hands it on (the node simulator; tests): no checksum is verified here. `None` for fewer
    /// bytes than a header or an unknown command.
    pub fn unverified(from: ReplicaId, group: u64, frame: &Bytes) -> Option<Self> {
        let header: [u8; HEADER_SIZE] = frame.get(..HEADER_SIZE)?.try_into().ok()?;
        let command = Command::from_repr(header[GenericHeader::COMMAND_OFFSET])?;
        Some(Inbound {
            from,
            command,
            group,
            header: Box::new(header),
            body: frame.slice(HEADER_SIZE..),
        })
    }
}

/// The `PrepareHeader` fields `entry` decides: command, op, view, client, request, operation,
/// and the size of a record whose body is `body_len` bytes. Checksums, cluster, parent and
/// routing are the caller's (a journal, or this codec on the wire). `None` when the
/// operation is not a declared `Operation` or the record would not fit a u32 size.
pub fn entry_header(entry: &Entry, body_len: usize) -> Option<PrepareHeader> {
    Some(PrepareHeader {
        size: u32::try_from(HEADER_SIZE + body_len).ok()?,
        view: entry.view,
        command: Command::Prepare,
        client: entry.client,
        op: entry.op,
        request: entry.request,
        operation: Operation::from_repr(entry.operation)?,
        ..PrepareHeader::default()
    })
}

/// Who frames are written by, or read for, and which group they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameContext {
    pub cluster: u128,
    /// The writing replica (on decode: the receiving one; the sender is the frame's).
    pub sender: ReplicaId,
    /// The consensus group (`METADATA_GROUP`, or stream<<32 | topic<<20 | partition).
    pub group: u64,
    /// The partition's incarnation; 0 only for the metadata group.
    pub incarnation: u64,
}

/// Why a verified frame is not a message for this group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// A replica command the VSR core has no message for (repair ranges, state transfer,
    /// forwards, ...).
    Unsupported(Command),
    /// The frame belongs to another consensus group.
    Group { ours: u64, frame: u64 },
    /// A frame of another incarnation of the group's id: for a partition, a deleted partition
    /// whose id was reused (or the new one's, seen by a replica of the old).
    Incarnation { group: u64, ours: u64, frame: u64 },
    /// The header names a sender other than the peer the frame came from.
    Sender { peer: ReplicaId, named: ReplicaId },
    /// A header or body that is not its command's layout.
    Malformed { command: Command, detail: String },
    /// An entry whose rebuilt checksum differs from the one its sender computed.
    EntryChecksum { op: u64, sent: u128, rebuilt: u64 },
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::Unsupported(command) => {
                write!(f, "{command:?} is not a message of the consensus core")
            }
            CodecError::Group { ours, frame } => {
                write!(f, "a frame of group {frame:#x} reached group {ours:#x}")
            }
            CodecError::Incarnation { group, ours, frame } => write!(
                f,
                "a frame of incarnation {frame} of group {group:#x}, which is at incarnation \
                 {ours} here"
            ),
            CodecError::Sender { peer, named } => {
                write!(f, "a frame from replica {peer} names replica {named}")
            }
            CodecError::Malformed { command, detail } => {
                write!(f, "malformed {command:?}: {detail}")
            }
            CodecError::EntryChecksum { op, sent, rebuilt } => write!(
                f,
                "op {op} rebuilds to checksum {rebuilt:016x}, its sender's is {sent:032x}"
            ),
        }
    }
}

impl std::error::Error for CodecError {}

pub fn malformed(command: Command, detail: impl Into<String>) -> CodecError {
    CodecError::Malformed {
        command,
        detail: detail.into(),
    }
}

/// The whole frame of `message`, written by `context.sender` for `context.group`.
///
/// # Panics
/// When a message's `replica` is not `context.sender` (a replica speaks only for itself), when
/// an entry's operation is not a declared `Operation` (the journal refuses such an entry
/// before any replica could hold it), or when a frame would exceed `u32::MAX` bytes.
pub fn encode(context: &FrameContext, message: &Message) -> Bytes {
    let (group, incarnation) = (context.group, context.incarnation);
    match message {
        Message::Prepare {
            view,
            commit,
            entry,
        } => encode_prepare(context, *view, *commit, entry),
        Message::PrepareOk {
            view,
            op,
            checksum,
            replica,
        } => {
            speaks_for_itself(context, *replica);
            // The official layout has no incarnation field here: the acknowledged entry's
            // checksum tells the primary whether the ack is about its log.
            let header = PrepareOkHeader {
                op: *op,
                prepare_checksum: u128::from(*checksum),
                group,
                ..PrepareOkHeader::default()
            };
            control_frame(context, Command::PrepareOk, *view, header.to_bytes())
        }
        Message::Commit {
            view,
            commit,
            checkpoint_safe,
        } => {
            let header = CommitHeader {
                commit: *commit,
                checkpoint_op: *checkpoint_safe,
                group,
                partition_incarnation: incarnation,
                ..CommitHeader::default()
            };
            control_frame(context, Command::Commit, *view, header.to_bytes())
        }
        Message::StartViewChange { view, replica } => {
            speaks_for_itself(context, *replica);
            let header = StartViewChangeHeader {
                group,
                partition_incarnation: incarnation,
                ..StartViewChangeHeader::default()
            };
            control_frame(context, Command::StartViewChange, *view, header.to_bytes())
        }
        Message::PreVote { view, replica } => {
            speaks_for_itself(context, *replica);
            control_frame(context, Command::PreVote, *view, pre_vote_header(context))
        }
        Message::PrimaryTransfer {
            view,
            target_view,
            target,
            replica,
        } => {
            speaks_for_itself(context, *replica);
            // Ours in the official layout: `namespace` names the group and `created_revision`
            // its incarnation; the grant's `target` is the primary of `partition_view`.
            let header = PrimaryRebalanceHeader {
                namespace: group,
                created_revision: incarnation,
                partition_view: *target_view,
                kind: PrimaryRebalanceKind::PrimaryTransfer,
                ready: true,
                target: *target,
                quorum_age_ns: u64::MAX,
                ..PrimaryRebalanceHeader::default()
            };
            control_frame(context, Command::PrimaryRebalance, *view, header.to_bytes())
        }
        Message::PreVoteGranted { view, replica } => {
            speaks_for_itself(context, *replica);
            control_frame(
                context,
                Command::PreVoteGranted,
                *view,
                pre_vote_header(context),
            )
        }
        Message::DoViewChange {
            view,
            replica,
            log_view,
            commit,
            log,
        } => {
            speaks_for_itself(context, *replica);
            let header = DoViewChangeHeader {
                op: log.op(),
                commit: *commit,
                group,
                log_view: *log_view,
                partition_incarnation: incarnation,
                ..DoViewChangeHeader::default()
            };
            log_frame(
                context,
                Command::DoViewChange,
                *view,
                header.to_bytes(),
                log,
            )
        }
        Message::StartView { view, commit, log } => {
            let header = StartViewHeader {
                op: log.op(),
                commit: *commit,
                group,
                partition_incarnation: incarnation,
                ..StartViewHeader::default()
            };
            log_frame(context, Command::StartView, *view, header.to_bytes(), log)
        }
        Message::RequestPrepare { view, op, replica } => {
            speaks_for_itself(context, *replica);
            let header = RequestPreparesHeader {
                from_op: *op,
                to_op: *op,
                group,
                partition_incarnation: incarnation,
                ..RequestPreparesHeader::default()
            };
            control_frame(context, Command::RequestPrepares, *view, header.to_bytes())
        }
        Message::BodyRetired { view, op, replica } => {
            speaks_for_itself(context, *replica);
            // The official repair terminator for a range the peer no longer holds; ours names
            // the op asked for, whose body a retirement deleted.
            let header = RepairRangeReplyHeader {
                op: *op,
                group,
                partition_incarnation: incarnation,
                ..RepairRangeReplyHeader::default()
            };
            control_frame(context, Command::RangeEvicted, *view, header.to_bytes())
        }
        Message::RequestStartView { view, replica } => {
            speaks_for_itself(context, *replica);
            let header = RequestStartViewHeader {
                group,
                partition_incarnation: incarnation,
                ..RequestStartViewHeader::default()
            };
            control_frame(context, Command::RequestStartView, *view, header.to_bytes())
        }
    }
}

/// The command half of a PreVote or PreVoteGranted: only the group it is about.
fn pre_vote_header(context: &FrameContext) -> [u8; HEADER_SIZE] {
    let header = PreVoteHeader {
        group: context.group,
        partition_incarnation: context.incarnation,
        ..PreVoteHeader::default()
    };
    header.to_bytes()
}

fn speaks_for_itself(context: &FrameContext, replica: ReplicaId) {
    assert_eq!(
        replica, context.sender,
        "replica {} encodes a message in the name of replica {replica}",
        context.sender
    );
}

fn frame_size(size: usize) -> u32 {
    u32::try_from(size).unwrap_or_else(|_| panic!("a replica frame of {size} bytes"))
}

/// Writes the fields every replica frame shares into `header` (the command-specific half is
/// already there). `release` stays 0: release identity travels only in the handshake.
pub fn stamp_generic(
    header: &mut [u8; HEADER_SIZE],
    context: &FrameContext,
    command: Command,
    view: u32,
    size: usize,
    checksum_body: u128,
) {
    let mut put = |at: usize, bytes: &[u8]| header[at..at + bytes.len()].copy_from_slice(bytes);
    put(
        GenericHeader::CHECKSUM_BODY_OFFSET,
        &checksum_body.to_le_bytes(),
    );
    put(
        GenericHeader::CLUSTER_OFFSET,
        &context.cluster.to_le_bytes(),
    );
    put(GenericHeader::SIZE_OFFSET, &frame_size(size).to_le_bytes());
    put(GenericHeader::VIEW_OFFSET, &view.to_le_bytes());
    put(GenericHeader::RELEASE_OFFSET, &0u32.to_le_bytes());
    put(GenericHeader::COMMAND_OFFSET, &[command as u8]);
    put(GenericHeader::REPLICA_OFFSET, &[context.sender]);
}

pub fn seal(header: &mut [u8; HEADER_SIZE]) {
    let seal = seal_of(header);
    header[..GenericHeader::CHECKSUM_SIZE].copy_from_slice(&seal.to_le_bytes());
}

/// A header-only control frame.
/// A sealed frame of `command` in `view`: `header` (its command half filled in) stamped with
/// the shared fields and the checksum of `body`, then `body`.
pub fn sealed_frame(
    context: &FrameContext,
    command: Command,
    view: u32,
    mut header: [u8; HEADER_SIZE],
    body: &[u8],
) -> Bytes {
    let size = HEADER_SIZE + body.len();
    stamp_generic(
        &mut header,
        context,
        command,
        view,
        size,
        body_checksum_of(body),
    );
    seal(&mut header);
    let mut frame = BytesMut::with_capacity(size);
    frame.put_slice(&header);
    frame.put_slice(body);
    frame.freeze()
}

fn control_frame(
    context: &FrameContext,
    command: Command,
    view: u32,
    mut header: [u8; HEADER_SIZE],
) -> Bytes {
    stamp_generic(&mut header, context, command, view, HEADER_SIZE, 0);
    seal(&mut header);
    Bytes::copy_from_slice(&header)
}

/// The header of a Prepare of `entry` sent in `view`, identity-stamped. `parent` stays 0: the
/// frame is judged by its own checksums, and the receiver chains its journal itself.
fn prepare_header(
    context: &FrameContext,
    entry: &Entry,
    view: u32,
    commit: u64,
) -> [u8; HEADER_SIZE] {
    let fields = entry_header(entry, entry.body.len()).unwrap_or_else(|| {
        panic!(
            "op {}: operation {} is not a declared Operation, or its body does not fit a frame",
            entry.op, entry.operation
        )
    });
    let mut reserved = [0u8; 8];
    reserved[..4].copy_from_slice(&entry.view.to_le_bytes());
    let header = PrepareHeader {
        checksum_body: body_checksum_of(&entry.body),
        cluster: context.cluster,
        view,
        replica: context.sender,
        request_checksum: u128::from(entry.checksum),
        commit,
        group: context.group,
        partition_incarnation: context.incarnation,
        reserved,
        ..fields
    };
    let mut bytes = header.to_bytes();
    let identity = prepare_identity_of(&bytes);
    bytes[..PrepareHeader::CHECKSUM_SIZE].copy_from_slice(&identity.to_le_bytes());
    bytes
}

fn encode_prepare(context: &FrameContext, view: u32, commit: u64, entry: &Entry) -> Bytes {
    let size = HEADER_SIZE + entry.body.len();
    let mut frame = BytesMut::with_capacity(size);
    frame.put_slice(&prepare_header(context, entry, view, commit));
    frame.put_slice(&entry.body);
    debug_assert_eq!(frame.len(), size);
    frame.freeze()
}

/// The bytes of `log` as a DoViewChange or StartView body.
fn log_body_len(log: &Log) -> usize {
    ReplicaLogPrefix::SIZE + log.headers.len() * ReplicaEntryHeader::SIZE
}

/// The most entry headers a view-change frame of `max_frame_size` bytes holds: the frame's
/// header, the log prefix, then 64 bytes per op.
pub fn log_headers_max(max_frame_size: u32) -> u64 {
    let room = (max_frame_size as usize).saturating_sub(HEADER_SIZE + ReplicaLogPrefix::SIZE);
    (room / ReplicaEntryHeader::SIZE) as u64
}

/// A DoViewChange or StartView: `header` (its command half), then the log as its body.
fn log_frame(
    context: &FrameContext,
    command: Command,
    view: u32,
    mut header: [u8; HEADER_SIZE],
    log: &Log,
) -> Bytes {
    let size = HEADER_SIZE + log_body_len(log);
    let mut frame = BytesMut::with_capacity(size);
    let capacity = frame.capacity();
    frame.put_bytes(0, HEADER_SIZE);
    let prefix = ReplicaLogPrefix {
        base: log.base,
        base_checksum: log.base_checksum,
        entry_count: u32::try_from(log.headers.len()).expect("a log of fewer than 2^32 ops"),
    };
    frame.put_slice(&prefix.to_bytes());
    for header in &log.headers {
        let record = ReplicaEntryHeader {
            checksum: header.checksum,
            op: header.op,
            client: header.client,
            request: header.request,
            view: header.view,
            operation: header.operation,
        };
        frame.put_slice(&record.to_bytes());
    }
    debug_assert_eq!((frame.len(), frame.capacity()), (size, capacity));
    let checksum_body = body_checksum_of(&frame[HEADER_SIZE..]);
    stamp_generic(&mut header, context, command, view, size, checksum_body);
    seal(&mut header);
    frame[..HEADER_SIZE].copy_from_slice(&header);
    frame.freeze()
}

/// The message of a frame the bus verified, for the group `context` names (the receiver's).
pub fn decode(context: &FrameContext, inbound: &Inbound) -> Result<Message, CodecError> {
    let command = inbound.command;
    let header: &[u8; HEADER_SIZE] = &inbound.header;
    if header[GenericHeader::COMMAND_OFFSET] != command as u8 {
        return Err(malformed(command, "the header names another command"));
    }
    let named = header[GenericHeader::REPLICA_OFFSET];
    if named != inbound.from {
        return Err(CodecError::Sender {
            peer: inbound.from,
            named,
        });
    }
    let header_only = !matches!(
        command,
        Command::Prepare | Command::DoViewChange | Command::StartView
    );
    if header_only && !inbound.body.is_empty() {
        return Err(malformed(
            command,
            format!("a body of {} bytes", inbound.body.len()),
        ));
    }
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    match command {
        Command::Prepare => {
            let prepare = PrepareHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, prepare.group, Some(prepare.partition_incarnation))?;
            if prepare.size as usize != HEADER_SIZE + inbound.body.len() {
                return Err(malformed(command, "the size differs from the frame's"));
            }
            let entry = entry_of(&prepare, inbound.body.clone())?;
            Ok(Message::Prepare {
                view: prepare.view,
                commit: prepare.commit,
                entry,
            })
        }
        Command::DoViewChange | Command::StartView => decode_log_frame(context, inbound),
        _ => decode_control(context, command, header, named),
    }
}

/// The header-only messages.
fn decode_control(
    context: &FrameContext,
    command: Command,
    header: &[u8; HEADER_SIZE],
    sender: ReplicaId,
) -> Result<Message, CodecError> {
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    match command {
        Command::PrepareOk => {
            let ok = PrepareOkHeader::decode_fixed(header).map_err(undecodable)?;
            // No incarnation to judge: the official layout has no field for it. The core
            // counts the ack only for the entry its log holds at `op` (`prepare_checksum`).
            same_group(context, ok.group, None)?;
            let checksum = u64::try_from(ok.prepare_checksum)
                .map_err(|_| malformed(command, "a prepare checksum wider than an entry's"))?;
            Ok(Message::PrepareOk {
                view: ok.view,
                op: ok.op,
                checksum,
                replica: sender,
            })
        }
        Command::Commit => {
            let commit = CommitHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, commit.group, Some(commit.partition_incarnation))?;
            Ok(Message::Commit {
                view: commit.view,
                commit: commit.commit,
                checkpoint_safe: commit.checkpoint_op,
            })
        }
        Command::StartViewChange => {
            let vote = StartViewChangeHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, vote.group, Some(vote.partition_incarnation))?;
            Ok(Message::StartViewChange {
                view: vote.view,
                replica: sender,
            })
        }
        Command::PrimaryRebalance => {
            let grant = PrimaryRebalanceHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, grant.namespace, Some(grant.created_revision))?;
            if grant.kind != PrimaryRebalanceKind::PrimaryTransfer || !grant.ready {
                return Err(malformed(
                    command,
                    format!(
                        "a PrimaryRebalance of kind {:?}: only the PrimaryTransfer grant is served",
                        grant.kind
                    ),
                ));
            }
            Ok(Message::PrimaryTransfer {
                view: grant.view,
                target_view: grant.partition_view,
                target: grant.target,
                replica: sender,
            })
        }
        Command::PreVote | Command::PreVoteGranted => {
            let pre_vote = PreVoteHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(
                context,
                pre_vote.group,
                Some(pre_vote.partition_incarnation),
            )?;
            let (view, replica) = (pre_vote.view, sender);
            Ok(match command {
                Command::PreVote => Message::PreVote { view, replica },
                _ => Message::PreVoteGranted { view, replica },
            })
        }
        Command::RequestPrepares => {
            let request = RequestPreparesHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, request.group, Some(request.partition_incarnation))?;
            // The core asks for one op (and its primary sends a few after it).
            if request.from_op != request.to_op {
                return Err(malformed(
                    command,
                    format!("ops {}..={}, not one op", request.from_op, request.to_op),
                ));
            }
            Ok(Message::RequestPrepare {
                view: request.view,
                op: request.from_op,
                replica: sender,
            })
        }
        Command::RangeEvicted => {
            let evicted = RepairRangeReplyHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, evicted.group, Some(evicted.partition_incarnation))?;
            Ok(Message::BodyRetired {
                view: evicted.view,
                op: evicted.op,
                replica: sender,
            })
        }
        Command::RequestStartView => {
            let request = RequestStartViewHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, request.group, Some(request.partition_incarnation))?;
            Ok(Message::RequestStartView {
                view: request.view,
                replica: sender,
            })
        }
        other => Err(CodecError::Unsupported(other)),
    }
}

/// Refuses a frame of another group, or of another incarnation of this group's id.
/// Whether a frame of `group` (with `incarnation`, for a frame that names one) is for the
/// group `context` names.
pub fn same_group(
    context: &FrameContext,
    group: u64,
    incarnation: Option<u64>,
) -> Result<(), CodecError> {
    if group != context.group {
        return Err(CodecError::Group {
            ours: context.group,
            frame: group,
        });
    }
    match incarnation {
        Some(frame) if frame != context.incarnation => Err(CodecError::Incarnation {
            group,
            ours: context.incarnation,
            frame,
        }),
        _ => Ok(()),
    }
}

/// The entry a Prepare header and its body carry, rebuilt and held to its sender's checksum.
fn entry_of(prepare: &PrepareHeader, body: Bytes) -> Result<Entry, CodecError> {
    if prepare.op == 0 {
        return Err(malformed(Command::Prepare, "op 0"));
    }
    let prepared_view = u32::from_le_bytes(prepare.reserved[..4].try_into().expect("4 bytes"));
    // The bus verified `checksum_body` against the body (0 marks an empty one): the entry
    // checksum reuses that hash instead of hashing a megabyte batch again.
    let body_hash = match prepare.checksum_body {
        0 => twox_hash::XxHash3_64::oneshot(&body),
        verified => verified as u64,
    };
    let entry = Entry::with_body_hash(
        prepare.op,
        prepared_view,
        prepare.client,
        prepare.request,
        prepare.operation.to_repr(),
        body,
        body_hash,
    );
    if u128::from(entry.checksum) != prepare.request_checksum {
        return Err(CodecError::EntryChecksum {
            op: prepare.op,
            sent: prepare.request_checksum,
            rebuilt: entry.checksum,
        });
    }
    Ok(entry)
}

fn decode_log_frame(context: &FrameContext, inbound: &Inbound) -> Result<Message, CodecError> {
    let command = inbound.command;
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    // (view, op, commit, group, incarnation, log_view: a DoViewChange's only)
    let fields = if command == Command::DoViewChange {
        let vote = DoViewChangeHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
        let (group, incarnation) = (vote.group, vote.partition_incarnation);
        (
            vote.view,
            vote.op,
            vote.commit,
            group,
            incarnation,
            Some(vote.log_view),
        )
    } else {
        let start = StartViewHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
        let (group, incarnation) = (start.group, start.partition_incarnation);
        (start.view, start.op, start.commit, group, incarnation, None)
    };
    let (view, op, commit, group, incarnation, log_view) = fields;
    same_group(context, group, Some(incarnation))?;
    let log = decode_log(command, &inbound.body)?;
    if log.op() != op {
        return Err(malformed(
            command,
            format!("the header names op {op}, the log ends at op {}", log.op()),
        ));
    }
    Ok(match log_view {
        Some(log_view) => Message::DoViewChange {
            view,
            replica: inbound.from,
            log_view,
            commit,
            log,
        },
        None => Message::StartView { view, commit, log },
    })
}

/// The log of a DoViewChange or StartView body: its prefix, then exactly `entry_count` entry
/// headers, numbered from `base + 1`. Whether a body fits a header is judged by the replica that
/// fetches it (`EntryHeader::matches`); here only the frame's shape.
fn decode_log(command: Command, body: &Bytes) -> Result<Log, CodecError> {
    let prefix = ReplicaLogPrefix::decode_fixed(body)
        .map_err(|error| malformed(command, format!("log prefix: {error}")))?;
    let count = prefix.entry_count as usize;
    let room = (body.len() - ReplicaLogPrefix::SIZE) / ReplicaEntryHeader::SIZE;
    if count > room {
        return Err(malformed(
            command,
            format!("{count} entry headers in a body with room for {room}"),
        ));
    }
    let end = ReplicaLogPrefix::SIZE + count * ReplicaEntryHeader::SIZE;
    if end != body.len() {
        return Err(malformed(
            command,
            format!("{} bytes after the last entry header", body.len() - end),
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for index in 0..count {
        let at = ReplicaLogPrefix::SIZE + index * ReplicaEntryHeader::SIZE;
        let op = prefix
            .base
            .checked_add(index as u64 + 1)
            .ok_or_else(|| malformed(command, "ops beyond u64"))?;
        let bad = |detail: String| malformed(command, format!("the header of op {op}: {detail}"));
        let record = ReplicaEntryHeader::decode_fixed(&body[at..at + ReplicaEntryHeader::SIZE])
            .map_err(|error| bad(error.to_string()))?;
        if record.op != op {
            return Err(bad(format!("it names op {}", record.op)));
        }
        headers.push(EntryHeader {
            op,
            view: record.view,
            client: record.client,
            request: record.request,
            operation: record.operation,
            checksum: record.checksum,
        });
    }
    Ok(Log {
        base: prefix.base,
        base_checksum: prefix.base_checksum,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_generated::frames::{METADATA_GROUP, RepairRangeReplyHeader};

    const CLUSTER: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;

    const PARTITION: u64 = 2 << 32 | 1 << 20 | 3;
    const INCARNATION: u64 = 7;
    const SENDER: ReplicaId = 1;
    const RECEIVER: ReplicaId = 2;

    fn partition(replica: ReplicaId) -> FrameContext {
        FrameContext {
            cluster: CLUSTER,
            sender: replica,
            group: PARTITION,
            incarnation: INCARNATION,
        }
    }

    fn metadata(replica: ReplicaId) -> FrameContext {
        FrameContext {
            group: METADATA_GROUP,
            incarnation: 0,
            ..partition(replica)
        }
    }

    /// The bytes a peer wrote as its receiver hands them on, once the frame's own checksums
    /// hold (the header's seal or a Prepare's identity, then `checksum_body`); the server's bus
    /// checks the rest (release, cluster, sender, size) and its tests run this codec's frames
    /// through it. Err names the checksum that failed.
    fn deliver(frame: &[u8], peer: ReplicaId) -> Result<Inbound, &'static str> {
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let expected = match header[GenericHeader::COMMAND_OFFSET] {
            command if command == Command::Prepare as u8 => prepare_identity_of(&header),
            _ => seal_of(&header),
        };
        if header[..16] != expected.to_le_bytes() {
            return Err("checksum");
        }
        let checksum_body = &header[GenericHeader::CHECKSUM_BODY_OFFSET..][..16];
        if checksum_body != body_checksum_of(&frame[HEADER_SIZE..]).to_le_bytes() {
            return Err("checksum_body");
        }
        // The group routes the frame to a replica; decode reads the header's own.
        Ok(Inbound::unverified(peer, u64::MAX, &Bytes::copy_from_slice(frame)).unwrap())
    }

    fn entry(op: u64, view: u32, body: &'static [u8]) -> Entry {
        let operation = Operation::SendMessages.to_repr();
        Entry::new(
            op,
            view,
            0xc1_1e47,
            op + 100,
            operation,
            Bytes::from_static(body),
        )
    }

    fn log(base: u64) -> Log {
        let base_checksum = if base == 0 { 0 } else { 0xba5e_c4ec };
        let entries = [
            entry(base + 1, 3, b"first body"),
            entry(base + 2, 3, b""),
            entry(base + 3, 4, &[0xa5; 700]),
        ];
        Log::of_entries(base, base_checksum, &entries)
    }

    fn every_message() -> Vec<Message> {
        vec![
            Message::Prepare {
                view: 4,
                commit: 9,
                entry: entry(10, 4, b"a prepared body"),
            },
            // A repair re-sends an op of an earlier view; an empty body has no body checksum.
            Message::Prepare {
                view: 6,
                commit: 9,
                entry: entry(10, 2, b""),
            },
            Message::PrepareOk {
                view: 4,
                op: 10,
                checksum: entry(10, 4, b"a prepared body").checksum,
                replica: SENDER,
            },
            Message::Commit {
                view: 4,
                commit: 9,
                checkpoint_safe: 7,
            },
            Message::StartViewChange {
                view: 5,
                replica: SENDER,
            },
            Message::DoViewChange {
                view: 5,
                replica: SENDER,
                log_view: 4,
                commit: 11,
                log: log(10),
            },
            Message::DoViewChange {
                view: 1,
                replica: SENDER,
                log_view: 0,
                commit: 0,
                log: Log::default(),
            },
            Message::StartView {
                view: 5,
                commit: 12,
                log: log(0),
            },
            Message::StartView {
                view: 5,
                commit: 40,
                log: Log {
                    base: 40,
                    base_checksum: 0x40,
                    headers: Vec::new(),
                },
            },
            Message::RequestPrepare {
                view: 5,
                op: 11,
                replica: SENDER,
            },
            Message::BodyRetired {
                view: 5,
                op: 11,
                replica: SENDER,
            },
            Message::RequestStartView {
                view: 6,
                replica: SENDER,
            },
            Message::PreVote {
                view: 5,
                replica: SENDER,
            },
            Message::PreVoteGranted {
                view: 5,
                replica: SENDER,
            },
            Message::PrimaryTransfer {
                view: 4,
                target_view: 6,
                target: RECEIVER,
                replica: SENDER,
            },
        ]
    }

    #[test]
    fn partition_groups_pack_their_ids_apart_from_the_metadata_group() {
        assert_eq!(partition_group((3, 2, 1)), 0x3_0020_0001);
        assert_ne!(
            partition_group((u32::MAX >> 1, 4095, 0xfffff)),
            METADATA_GROUP
        );
    }

    #[test]
    fn every_message_round_trips() {
        for context in [partition, metadata] {
            for message in every_message() {
                let frame = encode(&context(SENDER), &message);
                let inbound = deliver(&frame, SENDER)
                    .unwrap_or_else(|reject| panic!("{}: {reject}", message.name()));
                let decoded = decode(&context(RECEIVER), &inbound);
                assert_eq!(decoded.as_ref(), Ok(&message), "{}", message.name());
            }
        }
    }

    #[test]
    fn a_primary_rebalance_other_than_the_transfer_grant_is_refused() {
        let transfer = every_message().pop().unwrap();
        let frame = encode(&partition(SENDER), &transfer);
        let mut grant = PrimaryRebalanceHeader::decode_fixed(&frame[..HEADER_SIZE]).unwrap();
        assert_eq!(
            (grant.kind, grant.partition_view, grant.target),
            (PrimaryRebalanceKind::PrimaryTransfer, 6, RECEIVER)
        );
        grant.kind = PrimaryRebalanceKind::PartitionProbe;
        let mut header = grant.to_bytes();
        seal(&mut header);
        let inbound = deliver(&header, SENDER).unwrap();
        assert!(matches!(
            decode(&partition(RECEIVER), &inbound),
            Err(CodecError::Malformed { .. })
        ));
    }

    #[test]
    fn a_prepare_carries_its_identity_and_the_entry_checksum() {
        let message = &every_message()[1];
        let Message::Prepare { entry, .. } = message else {
            unreachable!()
        };
        let frame = encode(&partition(SENDER), message);
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let prepare = PrepareHeader::decode_fixed(&header).unwrap();
        assert_eq!(prepare.checksum, prepare_identity_of(&header));
        assert_eq!(prepare.request_checksum, u128::from(entry.checksum));
        assert_eq!((prepare.view, prepare.reserved[0]), (6, 2));
        assert_eq!(prepare.parent, 0);
        assert_eq!(prepare.size as usize, frame.len());
        // Re-sent in another view, the prepare keeps its identity.
        let later = Message::Prepare {
            view: 9,
            commit: 9,
            entry: entry.clone(),
        };
        assert_eq!(
            encode(&partition(SENDER), &later)[..16],
            frame[..16],
            "the identity ignores the frame's view"
        );
    }

    #[test]
    fn a_flipped_body_byte_fails_the_body_checksum() {
        for message in [&every_message()[0], &every_message()[5]] {
            let mut frame = encode(&partition(SENDER), message).to_vec();
            let last = frame.len() - 1;
            frame[last] ^= 1;
            let reject = deliver(&frame, SENDER).unwrap_err();
            assert_eq!(reject, "checksum_body", "{}", message.name());
        }
    }

    /// Rewrites the Prepare header at `at` of `frame` and stamps its identity again.
    fn forge_prepare(frame: &mut [u8], at: usize, change: impl Fn(&mut PrepareHeader)) {
        let mut prepare = PrepareHeader::decode_fixed(&frame[at..at + HEADER_SIZE]).unwrap();
        change(&mut prepare);
        let mut header = prepare.to_bytes();
        let identity = prepare_identity_of(&header);
        header[..16].copy_from_slice(&identity.to_le_bytes());
        frame[at..at + HEADER_SIZE].copy_from_slice(&header);
    }

    /// Sets the body checksum of a sealed frame and seals it again, so only decode can object.
    fn reseal(frame: &mut [u8]) {
        let checksum_body = body_checksum_of(&frame[HEADER_SIZE..]);
        let header: &mut [u8; HEADER_SIZE] = (&mut frame[..HEADER_SIZE]).try_into().unwrap();
        header[GenericHeader::CHECKSUM_BODY_OFFSET..][..16]
            .copy_from_slice(&checksum_body.to_le_bytes());
        seal(header);
    }

    #[test]
    fn a_forged_entry_checksum_under_a_valid_identity_is_refused() {
        let forge = |prepare: &mut PrepareHeader| prepare.request_checksum ^= 1;
        let mut prepare = encode(&partition(SENDER), &every_message()[0]).to_vec();
        forge_prepare(&mut prepare, 0, forge);
        let inbound = deliver(&prepare, SENDER).expect("the identity holds");
        let refused = decode(&partition(RECEIVER), &inbound).unwrap_err();
        assert!(
            matches!(refused, CodecError::EntryChecksum { op: 10, .. }),
            "{refused}"
        );

        // A changed field the entry checksum covers is caught the same way.
        let mut prepare = encode(&partition(SENDER), &every_message()[0]).to_vec();
        forge_prepare(&mut prepare, 0, |prepare| prepare.client ^= 1);
        let inbound = deliver(&prepare, SENDER).unwrap();
        assert!(matches!(
            decode(&partition(RECEIVER), &inbound),
            Err(CodecError::EntryChecksum { .. })
        ));
    }

    /// Byte offset of op `base + 1 + index`'s header in a view-change frame.
    fn header_at(index: usize) -> usize {
        HEADER_SIZE + ReplicaLogPrefix::SIZE + index * ReplicaEntryHeader::SIZE
    }

    #[test]
    fn a_view_change_log_carries_headers_and_no_body() {
        let message = &every_message()[5];
        let Message::DoViewChange { log, .. } = message else {
            unreachable!()
        };
        let frame = encode(&partition(SENDER), message);
        assert_eq!(frame.len(), HEADER_SIZE + 32 + 3 * 64);
        assert!(
            !frame.windows(8).any(|window| window == b"first bo"),
            "no body travels"
        );
        let record = ReplicaEntryHeader::decode_fixed(&frame[header_at(2)..][..64]).unwrap();
        let third = log.headers[2];
        assert_eq!(
            (record.op, record.view, record.checksum),
            (third.op, third.view, third.checksum)
        );
    }

    #[test]
    fn a_forged_header_checksum_names_no_body_and_a_changed_header_fails_the_body_checksum() {
        let message = &every_message()[5];
        let genuine = entry(12, 3, b"");
        let mut vote = encode(&partition(SENDER), message).to_vec();
        vote[header_at(1) + ReplicaEntryHeader::CHECKSUM_OFFSET] ^= 1;
        assert_eq!(
            deliver(&vote, SENDER).unwrap_err(),
            "checksum_body",
            "the frame's body checksum covers every header"
        );
        // Resealed by a faulty sender: the frame decodes, but the body its header names can
        // never be supplied, so the replica takes none (EntryHeader::matches).
        reseal(&mut vote);
        let inbound = deliver(&vote, SENDER).expect("the seal holds");
        let Ok(Message::DoViewChange { log, .. }) = decode(&partition(RECEIVER), &inbound) else {
            panic!("decodes")
        };
        let forged = log.headers[1];
        assert_eq!(forged.op, 12);
        assert_ne!(forged.checksum, genuine.checksum);
        assert!(!forged.matches(&genuine));
        assert!(genuine.header().matches(&genuine));
        let mut relabelled = Entry::new(12, 3, 0xc1_1e47, 112, genuine.operation, "x".into());
        relabelled.checksum = forged.checksum;
        assert!(
            !forged.matches(&relabelled),
            "a body must rebuild the checksum"
        );
    }

    #[test]
    fn a_log_of_as_many_headers_as_a_frame_holds_fits_the_frame() {
        let max_frame_size = 1 << 20;
        let count = log_headers_max(max_frame_size);
        let headers = (1..=count)
            .map(|op| entry(op, 1, b"").header())
            .collect::<Vec<_>>();
        let message = Message::StartView {
            view: 2,
            commit: 0,
            log: Log {
                base: 0,
                base_checksum: 0,
                headers,
            },
        };
        let frame = encode(&partition(SENDER), &message);
        assert!(frame.len() <= max_frame_size as usize);
        assert!(frame.len() + ReplicaEntryHeader::SIZE > max_frame_size as usize);
        assert_eq!(count, 16_379);
    }

    #[test]
    fn frames_of_another_incarnation_or_group_are_refused() {
        let recreated = FrameContext {
            incarnation: INCARNATION + 1,
            ..partition(RECEIVER)
        };
        let other_group = FrameContext {
            group: PARTITION + 1,
            ..partition(RECEIVER)
        };
        for message in every_message() {
            let inbound = deliver(&encode(&partition(SENDER), &message), SENDER).unwrap();
            let refused = decode(&recreated, &inbound);
            if matches!(message, Message::PrepareOk { .. }) {
                // The official PrepareOk layout has no incarnation to judge: the core judges
                // the acknowledged entry's checksum it carries (an ack of another log counts
                // for nothing, `iggy-vsr`'s checkpoint_safe tests).
                assert_eq!(refused, Ok(message.clone()));
            } else {
                let expected = CodecError::Incarnation {
                    group: PARTITION,
                    ours: INCARNATION + 1,
                    frame: INCARNATION,
                };
                assert_eq!(refused, Err(expected), "{}", message.name());
            }
            let expected = CodecError::Group {
                ours: PARTITION + 1,
                frame: PARTITION,
            };
            let refused = decode(&other_group, &inbound);
            assert_eq!(refused, Err(expected), "{}", message.name());
            // A metadata group never takes a partition's frame.
            let refused = decode(&metadata(RECEIVER), &inbound).unwrap_err();
            assert!(matches!(refused, CodecError::Group { .. }), "{refused}");
        }
    }

    #[test]
    fn a_frame_naming_another_sender_is_refused() {
        for message in every_message() {
            let mut inbound = deliver(&encode(&partition(SENDER), &message), SENDER).unwrap();
            inbound.from = 0;
            let refused = decode(&partition(RECEIVER), &inbound);
            let expected = CodecError::Sender {
                peer: 0,
                named: SENDER,
            };
            assert_eq!(refused, Err(expected), "{}", message.name());
        }
        // A replica never encodes a message in another replica's name.
        let vote = Message::StartViewChange {
            view: 5,
            replica: 0,
        };
        let encoded = std::panic::catch_unwind(|| encode(&partition(SENDER), &vote));
        assert!(encoded.is_err());
    }

    /// A sealed header-only frame of `command` whose command half is `half`.
    fn control(command: Command, half: [u8; HEADER_SIZE]) -> Vec<u8> {
        control_frame(&partition(SENDER), command, 5, half).to_vec()
    }

    #[test]
    fn commands_the_core_does_not_speak_are_refused() {
        let header = RepairRangeReplyHeader {
            op: 3,
            group: PARTITION,
            partition_incarnation: INCARNATION,
            ..RepairRangeReplyHeader::default()
        };
        let inbound = deliver(&control(Command::RepairDone, header.to_bytes()), SENDER).unwrap();
        assert_eq!(
            decode(&partition(RECEIVER), &inbound),
            Err(CodecError::Unsupported(Command::RepairDone))
        );
    }

    fn refused_as_malformed(frame: &[u8]) -> String {
        let inbound = deliver(frame, SENDER).expect("the bus check passes");
        match decode(&partition(RECEIVER), &inbound) {
            Err(CodecError::Malformed { detail, .. }) => detail,
            other => panic!("not refused as malformed: {other:?}"),
        }
    }

    #[test]
    fn malformed_frames_are_refused() {
        // A request for a range of ops: the core asks for one.
        let range = RequestPreparesHeader {
            from_op: 3,
            to_op: 5,
            group: PARTITION,
            partition_incarnation: INCARNATION,
            ..RequestPreparesHeader::default()
        };
        let detail = refused_as_malformed(&control(Command::RequestPrepares, range.to_bytes()));
        assert!(detail.contains("3..=5"), "{detail}");

        // A body on a header-only frame.
        let mut commit = encode(&partition(SENDER), &every_message()[3]).to_vec();
        commit.extend_from_slice(b"extra");
        let size = commit.len() as u32;
        commit[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&size.to_le_bytes());
        reseal(&mut commit);
        assert!(refused_as_malformed(&commit).contains("a body of 5 bytes"));

        let vote = encode(&partition(SENDER), &every_message()[5]).to_vec();
        const PREFIX: usize = HEADER_SIZE;
        const COUNT_AT: usize = PREFIX + ReplicaLogPrefix::ENTRY_COUNT_OFFSET;
        type Damage = fn(&mut Vec<u8>);
        let cases: [(Damage, &str); 5] = [
            // More entry headers than the body has room for.
            (|v| v[COUNT_AT] = 200, "room for"),
            // One header fewer: the last one's bytes are left over.
            (|v| v[COUNT_AT] = 2, "bytes after the last entry header"),
            // The log starts at another op than its headers name.
            (
                |v| v[PREFIX + ReplicaLogPrefix::BASE_OFFSET] = 11,
                "the header of op 12: it names op 11",
            ),
            // A cut body.
            (|v| v.truncate(v.len() - 1), "room for"),
            // A header's reserved bytes set.
            (|v| v[header_at(0) + 60] = 1, "the header of op 11"),
        ];
        for (change, expected) in cases {
            let mut bad = vote.clone();
            change(&mut bad);
            let size = bad.len() as u32;
            bad[GenericHeader::SIZE_OFFSET..][..4].copy_from_slice(&size.to_le_bytes());
            reseal(&mut bad);
            let detail = refused_as_malformed(&bad);
            assert!(detail.contains(expected), "{expected}: {detail}");
        }

        // The header's op differs from the log's end.
        let mut start = encode(&partition(SENDER), &every_message()[7]).to_vec();
        start[StartViewHeader::OP_OFFSET] = 9;
        reseal(&mut start);
        assert!(refused_as_malformed(&start).contains("names op 9"));
    }

    #[test]
    fn encode_sizes_the_frame_up_front() {
        for message in every_message() {
            let frame = encode(&partition(SENDER), &message);
            let size =
                u32::from_le_bytes(frame[GenericHeader::SIZE_OFFSET..][..4].try_into().unwrap());
            assert_eq!(size as usize, frame.len(), "{}", message.name());
        }
        let Message::DoViewChange { log, .. } = &every_message()[5] else {
            unreachable!()
        };
        assert_eq!(log_body_len(log), 32 + 3 * 64);
    }
}
