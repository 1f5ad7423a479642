//! State transfer on the replica plane, sans-IO: the frames a replica that fell behind its
//! group's checkpoints (`iggy_vsr::Replica::state_transfer_needed`) exchanges with the primary
//! to copy the primary's latest checkpoint and, for a partition, the log it covers.
//!
//! The metadata group's checkpoint is its whole state (the metadata snapshot), so its transfer
//! copies no log: the target carries the checkpoint slot whole when it fits one frame
//! (`limits.max_frame_size`), and `decode` refuses a whole target whose state is not a metadata
//! snapshot as of the checkpoint's op. A longer slot is announced by its length and XxHash3-64
//! (`Offered::InChunks`) and fetched with RequestStateChunk/StateChunk of the metadata
//! checkpoint artifact, byte offsets into the slot the server lent to that transfer; the
//! laggard checks the assembled slot (length, checksum, the checkpoint's op, the snapshot's op)
//! before it installs it. Each group takes only its own artifact: the log for a partition, the
//! slot for the metadata group.
//!
//! RequestStateTransfer (laggard → primary, header only) asks for the primary's latest durable
//! checkpoint; StateTransferTarget answers with it: `commit_op` is the checkpoint's op and the
//! body the checkpoint exactly as `iggy_storage::checkpoint` stores it in a slot (the replica's
//! record, the partition state, their checksum), or no body and `available` false. The laggard
//! then copies the log one RequestStateChunk at a time (`offset`: the batch base offset its log
//! continues from, `len`: a byte budget, artifact 0: the partition log), each answered with a
//! StateChunk of whole stamped batch records from that offset on (never a sliced batch, so
//! every replica's segments stay byte-identical). A chunk with no records whose `offset` lies
//! above the one asked for says the peer no longer holds that offset (committed retirements,
//! retention or DeleteSegments, deleted it): the first offset it holds. Everything the laggard
//! holds lies below it and was retired by the group, so the laggard discards its log, restarts
//! it empty at that offset (a segment boundary of the peer's, so the segments it copies stay
//! byte-identical) and copies on; a peer that retired past the offered state's end sends the
//! transfer back for a newer checkpoint.
//!
//! Every frame is sealed and names a nonce (the transfer session) and the group's incarnation
//! (0 for the metadata group); `decode` refuses another group or incarnation, a zero nonce, a
//! checkpoint whose checksum or op does not hold, and records that do not verify or do not
//! follow each other.

use super::replica_bus::Inbound;
use bytes::Bytes;
use iggy_generated::frames::{
    Command, METADATA_GROUP, RequestStateChunkHeader, RequestStateTransferHeader,
    SLOT_MANIFEST_MAGIC, StateChunkHeader, StateTransferSlotManifest, StateTransferTargetHeader,
};
pub use iggy_generated::frames::{METADATA_CHECKPOINT_ARTIFACT, PARTITION_LOG_ARTIFACT};
use iggy_storage::layout::{batch, read_u32, read_u64};
use iggy_vsr::codec::{CodecError, FrameContext, malformed, same_group, sealed_frame};

/// What a StateTransferTarget offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// No checkpoint.
    Nothing,
    /// The checkpoint slot's bytes, whole.
    Whole(Bytes),
    /// A metadata checkpoint slot too long for one frame: its length and XxHash3-64 (the body
    /// is the spec's `StateTransferSlotManifest`); its bytes are fetched in chunks of
    /// [`METADATA_CHECKPOINT_ARTIFACT`].
    InChunks { length: u64, checksum: u64 },
}

/// How a server offers checkpoint `slot` when one frame carries at most `chunk_bytes` of it:
/// whole when it fits (or in a partition group, whose slot never grows past a frame), else in
/// chunks.
pub fn offer(slot: &Bytes, chunk_bytes: u32, metadata: bool) -> Offered {
    if !metadata || slot.len() <= chunk_bytes as usize {
        return Offered::Whole(slot.clone());
    }
    Offered::InChunks {
        length: slot.len() as u64,
        checksum: twox_hash::XxHash3_64::oneshot(slot),
    }
}

/// The bytes of `slot` a metadata chunk request for `max_bytes` at byte `offset` is answered
/// with (none past its end).
pub fn slot_chunk(slot: &Bytes, offset: u64, max_bytes: u32) -> Bytes {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(slot.len());
    let end = start.saturating_add(max_bytes as usize).min(slot.len());
    slot.slice(start..end)
}

/// The checkpoint slots a serving replica offered in chunks, one per peer that asked (its
/// latest transfer's nonce): a slot's pieces keep coming from the copy offered even after a
/// newer checkpoint replaces it, and laggards fetching at once do not displace each other's
/// copy (a copy per peer, so at most the other replicas' count; peers offered the same
/// checkpoint share its bytes).
#[derive(Debug, Default)]
pub struct LentSlots {
    by_peer: Vec<(u8, u128, Bytes)>,
}

impl LentSlots {
    /// `slot` is offered in chunks to `peer`'s transfer `nonce`; any earlier transfer of that
    /// peer is over (a laggard runs one transfer at a time).
    pub fn lend(&mut self, peer: u8, nonce: u128, slot: Bytes) {
        self.by_peer.retain(|(lent_to, _, _)| *lent_to != peer);
        self.by_peer.push((peer, nonce, slot));
    }

    /// The bytes a chunk request of transfer `nonce` at byte `offset` is answered with (see
    /// [`slot_chunk`]); none when no slot was lent to that transfer.
    pub fn chunk(&self, nonce: u128, offset: u64, max_bytes: u32) -> Bytes {
        self.by_peer
            .iter()
            .find(|(_, lent_nonce, _)| *lent_nonce == nonce)
            .map_or_else(Bytes::new, |(_, _, slot)| {
                slot_chunk(slot, offset, max_bytes)
            })
    }
}

/// A state-transfer frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transfer {
    /// Laggard to primary: offer your latest checkpoint.
    Request { nonce: u128 },
    /// Primary to laggard: its latest durable checkpoint (`slot`: the bytes of a checkpoint
    /// slot, or how to fetch them), or none with `transient` when asking again soon may get
    /// one.
    Target {
        nonce: u128,
        checkpoint_op: u64,
        commit_max: u64,
        slot: Offered,
        transient: bool,
    },
    /// Laggard to primary: from `artifact` at `offset`, up to `max_bytes`: whole records of
    /// the log from batch base offset `offset` ([`PARTITION_LOG_ARTIFACT`]), or the metadata
    /// checkpoint slot's bytes from byte `offset` ([`METADATA_CHECKPOINT_ARTIFACT`]).
    RequestChunk {
        nonce: u128,
        artifact: u32,
        offset: u64,
        max_bytes: u32,
    },
    /// Primary to laggard: `artifact`'s bytes from `offset` on (none when it holds none there).
    Chunk {
        nonce: u128,
        artifact: u32,
        offset: u64,
        records: Bytes,
    },
}

/// Whether `command` is a state-transfer frame.
pub fn is_transfer(command: Command) -> bool {
    matches!(
        command,
        Command::RequestStateTransfer
            | Command::StateTransferTarget
            | Command::RequestStateChunk
            | Command::StateChunk
    )
}

/// The whole frame of `transfer`, sent in `view` by `context.sender`.
pub fn encode(context: &FrameContext, view: u32, transfer: &Transfer) -> Bytes {
    let (group, incarnation) = (context.group, context.incarnation);
    let (command, header, body) = match transfer {
        Transfer::Request { nonce } => {
            let header = RequestStateTransferHeader {
                nonce: *nonce,
                group,
                partition_incarnation: incarnation,
                ..RequestStateTransferHeader::default()
            };
            (
                Command::RequestStateTransfer,
                header.to_bytes(),
                Bytes::new(),
            )
        }
        Transfer::Target {
            nonce,
            checkpoint_op,
            commit_max,
            slot,
            transient,
        } => {
            let body = match slot {
                Offered::Nothing => Bytes::new(),
                Offered::Whole(bytes) => bytes.clone(),
                Offered::InChunks { length, checksum } => {
                    let manifest = StateTransferSlotManifest {
                        magic: SLOT_MANIFEST_MAGIC,
                        slot_length: *length,
                        slot_checksum: *checksum,
                    };
                    Bytes::copy_from_slice(&manifest.to_bytes())
                }
            };
            let header = StateTransferTargetHeader {
                nonce: *nonce,
                commit_op: *checkpoint_op,
                group,
                available: *slot != Offered::Nothing,
                unavailable_transient: *transient,
                commit_max: *commit_max,
                partition_incarnation: incarnation,
                ..StateTransferTargetHeader::default()
            };
            (Command::StateTransferTarget, header.to_bytes(), body)
        }
        Transfer::RequestChunk {
            nonce,
            artifact,
            offset,
            max_bytes,
        } => {
            let header = RequestStateChunkHeader {
                nonce: *nonce,
                offset: *offset,
                group,
                len: *max_bytes,
                artifact: *artifact,
                partition_incarnation: incarnation,
                ..RequestStateChunkHeader::default()
            };
            (Command::RequestStateChunk, header.to_bytes(), Bytes::new())
        }
        Transfer::Chunk {
            nonce,
            artifact,
            offset,
            records,
        } => {
            let header = StateChunkHeader {
                nonce: *nonce,
                offset: *offset,
                group,
                artifact: *artifact,
                partition_incarnation: incarnation,
                ..StateChunkHeader::default()
            };
            (Command::StateChunk, header.to_bytes(), records.clone())
        }
    };
    sealed_frame(context, command, view, header, &body)
}

/// A state-transfer frame the bus verified, for the group of `context`.
pub fn decode(context: &FrameContext, inbound: &Inbound) -> Result<Transfer, CodecError> {
    let command = inbound.command;
    same_group(context, inbound.group, None)?;
    let metadata = context.group == METADATA_GROUP;
    // A partition copies its log; the metadata group only its checkpoint slot, in pieces.
    let artifact = if metadata {
        METADATA_CHECKPOINT_ARTIFACT
    } else {
        PARTITION_LOG_ARTIFACT
    };
    let foreign_artifact = |found: u32| {
        (found != artifact).then(|| {
            malformed(
                command,
                format!("artifact {found} where the group's is {artifact}"),
            )
        })
    };
    let header_only = matches!(
        command,
        Command::RequestStateTransfer | Command::RequestStateChunk
    );
    if header_only && !inbound.body.is_empty() {
        return Err(malformed(command, "a body on a header-only frame"));
    }
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    let nonzero = |nonce: u128| {
        if nonce == 0 {
            Err(malformed(command, "nonce 0"))
        } else {
            Ok(nonce)
        }
    };
    let header = &inbound.header[..];
    match command {
        Command::RequestStateTransfer => {
            let header = RequestStateTransferHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            Ok(Transfer::Request {
                nonce: nonzero(header.nonce)?,
            })
        }
        Command::StateTransferTarget => {
            let header = StateTransferTargetHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            let nonce = nonzero(header.nonce)?;
            let manifest = (inbound.body.len() == StateTransferSlotManifest::SIZE)
                .then(|| StateTransferSlotManifest::decode_fixed(&inbound.body).ok())
                .flatten()
                .filter(|manifest| manifest.magic == SLOT_MANIFEST_MAGIC);
            let slot = if !header.available {
                if !inbound.body.is_empty() {
                    return Err(malformed(command, "a body on an unavailable target"));
                }
                Offered::Nothing
            } else if let Some(manifest) = manifest {
                // Checked whole once fetched (Fetch::on_chunk).
                if !metadata || manifest.slot_length == 0 {
                    return Err(malformed(
                        command,
                        "a slot in chunks outside the metadata group, or an empty one",
                    ));
                }
                Offered::InChunks {
                    length: manifest.slot_length,
                    checksum: manifest.slot_checksum,
                }
            } else {
                let (_, state) = checkpoint_of(command, &inbound.body, header.commit_op)?;
                if metadata {
                    metadata_snapshot_of(command, &state, header.commit_op)?;
                }
                Offered::Whole(inbound.body.clone())
            };
            Ok(Transfer::Target {
                nonce,
                checkpoint_op: header.commit_op,
                commit_max: header.commit_max,
                slot,
                transient: header.unavailable_transient,
            })
        }
        Command::RequestStateChunk => {
            let header = RequestStateChunkHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            if let Some(refused) = foreign_artifact(header.artifact) {
                return Err(refused);
            }
            if header.len == 0 {
                return Err(malformed(command, "len 0"));
            }
            Ok(Transfer::RequestChunk {
                nonce: nonzero(header.nonce)?,
                artifact,
                offset: header.offset,
                max_bytes: header.len,
            })
        }
        Command::StateChunk => {
            let header = StateChunkHeader::decode_fixed(header).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            if let Some(refused) = foreign_artifact(header.artifact) {
                return Err(refused);
            }
            // Slot bytes are checked whole, against the target's checksum, once fetched.
            if !metadata {
                check_records(command, &inbound.body, header.offset)?;
            }
            Ok(Transfer::Chunk {
                nonce: nonzero(header.nonce)?,
                artifact,
                offset: header.offset,
                records: inbound.body.clone(),
            })
        }
        other => Err(CodecError::Unsupported(other)),
    }
}

/// The replica checkpoint and the state machine's state of checkpoint slot bytes, checked: the
/// slot's checksum, the replica record's seal, and its op (`op`).
pub fn checkpoint_of(
    command: Command,
    slot: &[u8],
    op: u64,
) -> Result<(iggy_vsr::Checkpoint, Vec<u8>), CodecError> {
    let (replica, state) = iggy_storage::checkpoint::decode(slot)
        .map_err(|why| malformed(command, format!("checkpoint slot: {why}")))?;
    let checkpoint = iggy_vsr::Checkpoint::decode(replica)
        .map_err(|error| malformed(command, format!("replica checkpoint: {error}")))?;
    if checkpoint.op != op || op == 0 {
        return Err(malformed(
            command,
            format!("a checkpoint at op {} offered as op {op}", checkpoint.op),
        ));
    }
    Ok((checkpoint, state.to_vec()))
}

/// The metadata model a metadata checkpoint's state holds, checked to be a snapshot as of the
/// checkpoint's op (`op`): a replica installs it whole in place of its own.
pub fn metadata_snapshot_of(
    command: Command,
    state: &[u8],
    op: u64,
) -> Result<iggy_metadata::Metadata, CodecError> {
    let model = iggy_metadata::snapshot::decode(state)
        .map_err(|why| malformed(command, format!("metadata checkpoint: {why}")))?;
    if model.commit != op {
        return Err(malformed(
            command,
            format!(
                "a metadata snapshot of op {} in a checkpoint at op {op}",
                model.commit
            ),
        ));
    }
    Ok(model)
}

/// Every record of a chunk body verifies (layout, message and batch checksums) and they follow
/// each other from `offset`.
fn check_records(command: Command, records: &[u8], offset: u64) -> Result<(), CodecError> {
    let mut position = 0;
    let mut next = offset;
    while position < records.len() {
        let rest = &records[position..];
        if rest.len() < batch::HEADER_SIZE {
            return Err(malformed(command, "a partial record"));
        }
        let length = read_u64(rest, batch::BATCH_LENGTH);
        let record = usize::try_from(length)
            .ok()
            .and_then(|length| rest.get(..length))
            .ok_or_else(|| malformed(command, "a record longer than the chunk"))?;
        let count = iggy_storage::batch::verify(record)
            .map_err(|error| malformed(command, format!("record at {next}: {error}")))?;
        if read_u64(record, batch::BASE_OFFSET) != next {
            return Err(malformed(
                command,
                format!("a record out of place at {next}"),
            ));
        }
        debug_assert_eq!(read_u32(record, batch::MESSAGE_COUNT), count);
        next += u64::from(count);
        position += record.len();
    }
    Ok(())
}

/// Ticks a transfer waits for an answer before asking again (1 s at the 50 ms tick).
pub const RESEND_TICKS: u64 = 20;

/// Record bytes one chunk asks for (a single record longer than this still comes whole).
pub const CHUNK_BYTES: u32 = 1 << 20;

/// The laggard's side of one state transfer, sans-IO: whom it asks, what it accepted, and how
/// far the copy of the log got. The shell performs the I/O it hands out (sends, the state
/// machine's begin, append and install) and feeds the answers back.
#[derive(Debug)]
pub struct Fetch {
    nonce: u128,
    /// The peers to ask, in turn (the primary of the replica's view first).
    peers: Vec<u8>,
    asking: usize,
    /// The lowest checkpoint op worth installing: the base of the log that could not be.
    needed_op: u64,
    asked_at: u64,
    phase: Phase,
    /// The bytes of a checkpoint slot fetched in chunks so far ([`Phase::Slot`]).
    slot: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a StateTransferTarget.
    Target,
    /// Fetching the checkpoint slot the target announced, at `op`, of `length` bytes whose
    /// XxHash3-64 is `checksum`, from the target's sender.
    Slot { op: u64, length: u64, checksum: u64 },
    /// A target accepted; the state machine is preparing its log.
    Beginning,
    /// Asking whether the peer still holds `first`, where this replica's log starts, before
    /// copying from `next` up to `until`: the checkpoint carries committed retirements this
    /// replica never applied, and the segments they deleted must go here too.
    Probe { first: u64, next: u64, until: u64 },
    /// Copying the log: records from `next` are asked for, up to `until`.
    Chunks { next: u64, until: u64 },
}

/// A checkpoint a peer offered, checked and worth installing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub from: u8,
    pub checkpoint: iggy_vsr::Checkpoint,
    /// The slot's two parts, to write into this replica's own slot.
    pub replica: Vec<u8>,
    pub state: Vec<u8>,
}

/// What a chunk means for the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkVerdict {
    /// Not for this transfer, or not the chunk asked for last: nothing to do.
    Ignored,
    /// Append these records (those below the target's end), then call [`Fetch::appended`].
    Append(Bytes),
    /// The peer no longer holds the offset asked for, and holds from `held_from` on, within
    /// the offered state: committed retirements deleted every offset this replica's log holds
    /// and those up to `held_from` from the group. Discard the log and restart it empty at
    /// `held_from` (durably), then call [`Fetch::restarted`].
    Restart { asked: u64, held_from: u64 },
    /// The peer retired past the offered state's end (`until`): this offer cannot be
    /// completed over the peer's log, and the transfer starts over for a newer checkpoint.
    Overtaken {
        asked: u64,
        held_from: u64,
        until: u64,
    },
    /// The answer to the probe of where this replica's log starts: `retired_below`, the peer's
    /// first retained offset when committed retirements deleted offsets this log still holds
    /// (delete them here, below it), then call [`Fetch::probed`].
    Probed { retired_below: Option<u64> },
    /// Send this (the next piece of a checkpoint slot, or, after one that did not check out, a
    /// new request to the next peer).
    Ask(u8, Transfer),
    /// The checkpoint slot fetched in pieces is whole and checks out: the offer.
    Fetched(Offer),
}

/// What a StateTransferTarget means for the transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// A checkpoint worth installing, whole.
    Offer(Offer),
    /// A checkpoint worth installing whose slot comes in pieces: send this request.
    Ask(u8, Transfer),
}

impl Fetch {
    /// A transfer for a replica whose log could not be installed for want of checkpoint
    /// `needed_op`; asks `peers[0]` first. Returns the request to send.
    pub fn start(nonce: u128, peers: Vec<u8>, needed_op: u64, now: u64) -> (Fetch, u8, Transfer) {
        assert!(!peers.is_empty(), "a transfer needs a peer");
        let fetch = Fetch {
            nonce,
            peers,
            asking: 0,
            needed_op,
            asked_at: now,
            phase: Phase::Target,
            slot: Vec::new(),
        };
        let to = fetch.peer();
        (fetch, to, Transfer::Request { nonce })
    }

    fn peer(&self) -> u8 {
        self.peers[self.asking % self.peers.len()]
    }

    /// Whether the log is being copied (the replica's own consensus must stay still).
    pub fn copying(&self) -> bool {
        self.phase != Phase::Target
    }

    /// The tick `on_tick` may act at: the last frame's resend.
    pub fn due(&self) -> u64 {
        self.asked_at + RESEND_TICKS
    }

    /// The frame to send again, to the next peer, when the last one went unanswered for
    /// [`RESEND_TICKS`]: any peer that committed the offered state's records holds them
    /// byte for byte, so a chunk request may go to another peer than the target's.
    pub fn on_tick(&mut self, now: u64) -> Option<(u8, Transfer)> {
        if now < self.asked_at + RESEND_TICKS {
            return None;
        }
        self.asked_at = now;
        match self.phase {
            Phase::Target => {
                self.asking += 1;
                Some((self.peer(), Transfer::Request { nonce: self.nonce }))
            }
            Phase::Beginning => None,
            Phase::Probe { first, .. } => {
                self.asking += 1;
                Some((self.peer(), self.probe_request(first)))
            }
            // Another peer's newest slot may be another: the transfer starts over there.
            Phase::Slot { .. } => {
                self.phase = Phase::Target;
                self.slot.clear();
                self.asking += 1;
                Some((self.peer(), Transfer::Request { nonce: self.nonce }))
            }
            Phase::Chunks { next, .. } => {
                self.asking += 1;
                Some((self.peer(), self.chunk_request(next)))
            }
        }
    }

    fn chunk_request(&self, offset: u64) -> Transfer {
        Transfer::RequestChunk {
            nonce: self.nonce,
            artifact: PARTITION_LOG_ARTIFACT,
            offset,
            max_bytes: CHUNK_BYTES,
        }
    }

    /// A request for the record at `first` (any peer answers at least one whole record, or
    /// none and its first retained offset): a few bytes asked, only the answer's offset counts.
    fn probe_request(&self, first: u64) -> Transfer {
        Transfer::RequestChunk {
            nonce: self.nonce,
            artifact: PARTITION_LOG_ARTIFACT,
            offset: first,
            max_bytes: 1,
        }
    }

    fn slot_request(&self) -> (u8, Transfer) {
        let request = Transfer::RequestChunk {
            nonce: self.nonce,
            artifact: METADATA_CHECKPOINT_ARTIFACT,
            offset: self.slot.len() as u64,
            max_bytes: CHUNK_BYTES,
        };
        (self.peer(), request)
    }

    /// A StateTransferTarget from `from`: accepted when it answers this transfer's request
    /// with a checkpoint at or above the one needed (a lower one could not be continued from);
    /// `None` otherwise, and the next peer is asked at the next resend.
    pub fn on_target(&mut self, from: u8, transfer: &Transfer) -> Option<Accepted> {
        let Transfer::Target {
            nonce,
            checkpoint_op,
            slot,
            ..
        } = transfer
        else {
            return None;
        };
        if *nonce != self.nonce || from != self.peer() || self.phase != Phase::Target {
            return None;
        }
        if *checkpoint_op < self.needed_op {
            return None;
        }
        match slot {
            Offered::Nothing => None,
            Offered::Whole(slot) => {
                let offer = offer_of(from, slot, *checkpoint_op)?;
                self.phase = Phase::Beginning;
                Some(Accepted::Offer(offer))
            }
            Offered::InChunks { length, checksum } => {
                self.phase = Phase::Slot {
                    op: *checkpoint_op,
                    length: *length,
                    checksum: *checksum,
                };
                self.slot.clear();
                let (to, request) = self.slot_request();
                Some(Accepted::Ask(to, request))
            }
        }
    }

    /// A piece of the checkpoint slot being fetched: the next request, or the offer once the
    /// slot is whole and checks out (its length and checksum as the target announced, its
    /// checkpoint of the announced op, its state a metadata snapshot of that op).
    fn on_slot_chunk(&mut self, from: u8, offset: u64, bytes: &Bytes, now: u64) -> ChunkVerdict {
        let Phase::Slot {
            op,
            length,
            checksum,
        } = self.phase
        else {
            return ChunkVerdict::Ignored;
        };
        let held = self.slot.len() as u64;
        if offset != held || bytes.is_empty() || held + bytes.len() as u64 > length {
            // An earlier answer, or a peer whose slot is not the one announced: the resend
            // starts over.
            return ChunkVerdict::Ignored;
        }
        self.slot.extend_from_slice(bytes);
        self.asked_at = now;
        if (self.slot.len() as u64) < length {
            let (to, request) = self.slot_request();
            return ChunkVerdict::Ask(to, request);
        }
        let slot = std::mem::take(&mut self.slot);
        let checked = twox_hash::XxHash3_64::oneshot(&slot) == checksum;
        let offer = checked
            .then(|| offer_of(from, &slot, op))
            .flatten()
            .filter(|offer| metadata_snapshot_of(Command::StateChunk, &offer.state, op).is_ok());
        match offer {
            Some(offer) => {
                self.phase = Phase::Beginning;
                ChunkVerdict::Fetched(offer)
            }
            None => {
                tracing::warn!(
                    "state transfer: the checkpoint slot of op {op} from replica {from} does not check out; asking the next peer"
                );
                self.phase = Phase::Target;
                self.asking += 1;
                ChunkVerdict::Ask(self.peer(), Transfer::Request { nonce: self.nonce })
            }
        }
    }

    /// The state machine's log holds every committed record below `next` and must reach
    /// `until` (the offered state's end): the first chunk request, or `None` when the log is
    /// complete already (install now).
    /// A log holding records (from `first`) first asks whether the peer still holds `first`.
    pub fn begin(&mut self, first: u64, next: u64, until: u64, now: u64) -> Option<(u8, Transfer)> {
        assert_eq!(
            self.phase,
            Phase::Beginning,
            "begin follows an accepted offer"
        );
        if first < next {
            self.phase = Phase::Probe { first, next, until };
            self.asked_at = now;
            return Some((self.peer(), self.probe_request(first)));
        }
        self.phase = Phase::Chunks { next, until };
        self.appended(next, now)
    }

    /// The probe was answered (and what it found retired deleted here): the first chunk
    /// request, or `None` when the log is complete already (install now).
    pub fn probed(&mut self, now: u64) -> Option<(u8, Transfer)> {
        let Phase::Probe { next, until, .. } = self.phase else {
            panic!("probed outside the probe");
        };
        self.phase = Phase::Chunks { next, until };
        self.appended(next, now)
    }

    /// A StateChunk from `from`, received at tick `now`.
    pub fn on_chunk(&mut self, from: u8, transfer: &Transfer, now: u64) -> ChunkVerdict {
        let Transfer::Chunk {
            nonce,
            artifact,
            offset,
            records,
        } = transfer
        else {
            return ChunkVerdict::Ignored;
        };
        if *nonce != self.nonce || from != self.peer() {
            return ChunkVerdict::Ignored;
        }
        if *artifact == METADATA_CHECKPOINT_ARTIFACT {
            return self.on_slot_chunk(from, *offset, records, now);
        }
        if let Phase::Probe { first, next, .. } = self.phase {
            // The peer holds `first`: nothing this log holds was retired. It holds from a later
            // offset on: what lies below it was retired, within this log or past its end (then
            // the copy from `next` finds it out and restarts the log).
            return match (*offset == first, records.is_empty()) {
                (true, false) => ChunkVerdict::Probed {
                    retired_below: None,
                },
                (false, true) if *offset > first => ChunkVerdict::Probed {
                    retired_below: (*offset <= next).then_some(*offset),
                },
                _ => ChunkVerdict::Ignored,
            };
        }
        let Phase::Chunks { next, until } = self.phase else {
            return ChunkVerdict::Ignored;
        };
        if *offset != next {
            if records.is_empty() && *offset > next {
                let (asked, held_from) = (next, *offset);
                if held_from > until {
                    return ChunkVerdict::Overtaken {
                        asked,
                        held_from,
                        until,
                    };
                }
                return ChunkVerdict::Restart { asked, held_from };
            }
            // An answer to an earlier request, already appended or overtaken.
            return ChunkVerdict::Ignored;
        }
        let records = records_below(records, until);
        if records.is_empty() {
            // The peer has not committed that far: the resend asks the next one.
            return ChunkVerdict::Ignored;
        }
        ChunkVerdict::Append(records)
    }

    /// The log was restarted empty at `offset` (the peer's first retained offset, see
    /// [`ChunkVerdict::Restart`]): the next chunk request, or `None` when that is the offered
    /// state's end (install now).
    pub fn restarted(&mut self, offset: u64, now: u64) -> Option<(u8, Transfer)> {
        let Phase::Chunks { next, until } = self.phase else {
            panic!("a log restarts only during the copy");
        };
        assert!(
            next < offset && offset <= until,
            "a restart moves the log forward within the offered state"
        );
        self.appended(offset, now)
    }

    /// The log now ends at `next`: the next chunk request, or `None` once it reached the
    /// offered state's end (install now).
    pub fn appended(&mut self, next: u64, now: u64) -> Option<(u8, Transfer)> {
        let Phase::Chunks { until, .. } = self.phase else {
            panic!("appended outside the copy");
        };
        self.phase = Phase::Chunks { next, until };
        if next >= until {
            return None;
        }
        self.asked_at = now;
        Some((self.peer(), self.chunk_request(next)))
    }
}

/// The offer of checkpoint slot bytes `slot` from `from`, when they hold a checkpoint of `op`.
fn offer_of(from: u8, slot: &[u8], op: u64) -> Option<Offer> {
    let (checkpoint, state) = checkpoint_of(Command::StateTransferTarget, slot, op).ok()?;
    let (replica, _) = iggy_storage::checkpoint::decode(slot).ok()?;
    Some(Offer {
        from,
        checkpoint,
        replica: replica.to_vec(),
        state,
    })
}

/// The records of a checked chunk whose base offset is below `until`.
fn records_below(records: &Bytes, until: u64) -> Bytes {
    let mut position = 0;
    while position < records.len() {
        let record = &records[position..];
        if read_u64(record, batch::BASE_OFFSET) >= until {
            break;
        }
        position += read_u64(record, batch::BATCH_LENGTH) as usize;
    }
    records.slice(..position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::replica_link::tests::deliver_in;
    use iggy_storage::layout::{frame, write_u32, write_u64};

    const PARTITION: u64 = 0x3_0020_0001;

    fn context(sender: u8, incarnation: u64) -> FrameContext {
        FrameContext {
            cluster: 0xc1,
            sender,
            group: PARTITION,
            incarnation,
        }
    }

    /// Through the bus's own checks, as a peer receives it.
    fn receive(frame: &Bytes, from: u8) -> Inbound {
        deliver_in(0xc1, frame, from).expect("a frame the bus admits")
    }

    /// A stamped record of `count` one-byte messages at `base_offset`.
    fn record(base_offset: u64, count: u32) -> Vec<u8> {
        let mut record = vec![0u8; batch::HEADER_SIZE];
        for delta in 0..count {
            let start = record.len();
            record.resize(start + frame::HEADER_SIZE, 0);
            write_u32(&mut record, start + frame::OFFSET_DELTA, delta);
            write_u32(&mut record, start + frame::PAYLOAD_LENGTH, 1);
            record.push(delta as u8);
            let checksum = twox_hash::XxHash3_64::oneshot(&record[start + 8..]);
            write_u64(&mut record, start + frame::CHECKSUM, checksum);
        }
        let length = record.len() as u64;
        write_u64(&mut record, batch::BATCH_LENGTH, length);
        write_u32(&mut record, batch::MESSAGE_COUNT, count);
        iggy_storage::batch::stamp(&mut record, 1, base_offset, 77);
        record
    }

    fn slot(op: u64) -> Bytes {
        let checkpoint = iggy_vsr::Checkpoint {
            op,
            view: 2,
            checksum: 99,
            ..iggy_vsr::Checkpoint::default()
        };
        iggy_storage::checkpoint::encode(&checkpoint.encode(), b"partition state").into()
    }

    #[test]
    fn every_transfer_frame_crosses_the_plane_intact() {
        let mut records = record(10, 3);
        records.extend(record(13, 2));
        for transfer in [
            Transfer::Request { nonce: 5 },
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 40,
                commit_max: 42,
                slot: Offered::Whole(slot(40)),
                transient: false,
            },
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 0,
                commit_max: 42,
                slot: Offered::Nothing,
                transient: true,
            },
            Transfer::RequestChunk {
                nonce: 5,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 10,
                max_bytes: 1 << 20,
            },
            Transfer::Chunk {
                nonce: 5,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 10,
                records: records.clone().into(),
            },
            Transfer::Chunk {
                nonce: 5,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 15,
                records: Bytes::new(),
            },
        ] {
            let inbound = receive(&encode(&context(0, 7), 3, &transfer), 0);
            assert!(is_transfer(inbound.command));
            assert_eq!(inbound.group, PARTITION, "routed to the partition's group");
            assert_eq!(decode(&context(2, 7), &inbound).unwrap(), transfer);
            // Another incarnation of the same ids refuses it, and so does another group.
            assert!(matches!(
                decode(&context(2, 8), &inbound),
                Err(CodecError::Incarnation { .. })
            ));
            let other = FrameContext {
                group: PARTITION + 1,
                ..context(2, 7)
            };
            assert!(matches!(
                decode(&other, &inbound),
                Err(CodecError::Group { .. })
            ));
        }
    }

    #[test]
    fn a_forged_checkpoint_or_record_and_a_zero_nonce_are_refused() {
        let target = |slot: Bytes, checkpoint_op| Transfer::Target {
            nonce: 5,
            checkpoint_op,
            commit_max: 42,
            slot: Offered::Whole(slot),
            transient: false,
        };
        // The frame is sealed over the altered bytes: only the codec's checks can refuse them.
        let mut forged = slot(40).to_vec();
        forged[20] ^= 1;
        for refused in [
            target(forged.into(), 40),
            target(slot(40), 41),
            Transfer::Request { nonce: 0 },
        ] {
            let inbound = receive(&encode(&context(0, 7), 3, &refused), 0);
            assert!(decode(&context(2, 7), &inbound).is_err(), "{refused:?}");
        }
        let chunk = |offset, records: Vec<u8>| Transfer::Chunk {
            nonce: 5,
            artifact: PARTITION_LOG_ARTIFACT,
            offset,
            records: records.into(),
        };
        let mut damaged = record(10, 3);
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        let mut gap = record(10, 3);
        gap.extend(record(14, 1));
        let whole = record(10, 3);
        for refused in [
            chunk(10, damaged),
            chunk(11, whole.clone()),
            chunk(10, gap),
            chunk(10, whole[..whole.len() - 1].to_vec()),
        ] {
            let inbound = receive(&encode(&context(0, 7), 3, &refused), 0);
            assert!(decode(&context(2, 7), &inbound).is_err());
        }
    }

    fn metadata_context(sender: u8) -> FrameContext {
        FrameContext {
            group: METADATA_GROUP,
            incarnation: 0,
            ..context(sender, 0)
        }
    }

    /// A metadata checkpoint slot at `op` whose snapshot says it is of op `snapshot_op`.
    fn metadata_slot(op: u64, snapshot_op: u64) -> Bytes {
        metadata_slot_with(op, snapshot_op, 1)
    }

    /// A metadata checkpoint slot at `op` whose snapshot of op `snapshot_op` holds `streams`
    /// streams.
    fn metadata_slot_with(op: u64, snapshot_op: u64, streams: usize) -> Bytes {
        let mut model = iggy_metadata::Metadata::default();
        for stream in 0..streams {
            model.create_stream(&format!("stream-{stream}"), 1).unwrap();
        }
        model.commit = snapshot_op;
        let checkpoint = iggy_vsr::Checkpoint {
            op,
            view: 2,
            checksum: 99,
            ..iggy_vsr::Checkpoint::default()
        };
        let state = iggy_metadata::snapshot::encode(&model);
        iggy_storage::checkpoint::encode(&checkpoint.encode(), &state).into()
    }

    #[test]
    fn the_metadata_group_transfers_its_snapshot_by_request_and_target() {
        for transfer in [
            Transfer::Request { nonce: 5 },
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 40,
                commit_max: 42,
                slot: Offered::Whole(metadata_slot(40, 40)),
                transient: false,
            },
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 0,
                commit_max: 42,
                slot: Offered::Nothing,
                transient: true,
            },
        ] {
            let inbound = receive(&encode(&metadata_context(0), 3, &transfer), 0);
            assert_eq!(
                inbound.group, METADATA_GROUP,
                "routed to the metadata group"
            );
            assert_eq!(decode(&metadata_context(2), &inbound).unwrap(), transfer);
            // A partition group never takes the metadata group's frames.
            assert!(matches!(
                decode(&context(2, 7), &inbound),
                Err(CodecError::Group { .. })
            ));
        }
        let Transfer::Target {
            slot: Offered::Whole(slot),
            ..
        } = decode(
            &metadata_context(2),
            &receive(
                &encode(
                    &metadata_context(0),
                    3,
                    &Transfer::Target {
                        nonce: 5,
                        checkpoint_op: 40,
                        commit_max: 42,
                        slot: Offered::Whole(metadata_slot(40, 40)),
                        transient: false,
                    },
                ),
                0,
            ),
        )
        .unwrap()
        else {
            panic!("an available target");
        };
        let (_, state) = checkpoint_of(Command::StateTransferTarget, &slot, 40).unwrap();
        let model = metadata_snapshot_of(Command::StateTransferTarget, &state, 40).unwrap();
        assert_eq!(model.streams.len(), 1, "the snapshot's streams arrive");
    }

    #[test]
    fn a_metadata_target_that_is_not_its_snapshot_and_metadata_chunks_are_refused() {
        let target = |slot: Bytes| Transfer::Target {
            nonce: 5,
            checkpoint_op: 40,
            commit_max: 42,
            slot: Offered::Whole(slot),
            transient: false,
        };
        let mut forged = metadata_slot(40, 40).to_vec();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        for refused in [
            // A partition's state where the metadata snapshot belongs.
            target(slot(40)),
            // A snapshot of another op than the checkpoint's.
            target(metadata_slot(40, 39)),
            // Bytes changed under the slot's checksum.
            target(forged.into()),
            // The metadata checkpoint is the whole state: there is no log to copy.
            Transfer::RequestChunk {
                nonce: 5,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 0,
                max_bytes: 1 << 20,
            },
            Transfer::Chunk {
                nonce: 5,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 10,
                records: record(10, 3).into(),
            },
            Transfer::Request { nonce: 0 },
        ] {
            let inbound = receive(&encode(&metadata_context(0), 3, &refused), 0);
            assert!(
                decode(&metadata_context(2), &inbound).is_err(),
                "{refused:?}"
            );
        }
        // A frame naming an incarnation for the metadata group is some partition's, forged.
        let foreign = FrameContext {
            incarnation: 7,
            ..metadata_context(0)
        };
        let inbound = receive(&encode(&foreign, 3, &Transfer::Request { nonce: 5 }), 0);
        assert!(matches!(
            decode(&metadata_context(2), &inbound),
            Err(CodecError::Incarnation { .. })
        ));
    }

    #[test]
    fn a_fetch_asks_its_peers_in_turn_accepts_a_high_enough_checkpoint_and_copies_up_to_its_end() {
        let (mut fetch, to, request) = Fetch::start(9, vec![0, 2], 40, 100);
        assert_eq!((to, &request), (0, &Transfer::Request { nonce: 9 }));
        // Unanswered: the next peer is asked after the resend interval.
        assert_eq!(fetch.on_tick(110), None);
        assert_eq!(
            fetch.on_tick(120),
            Some((2, Transfer::Request { nonce: 9 }))
        );
        let target = |nonce, op, slot: Offered| Transfer::Target {
            nonce,
            checkpoint_op: op,
            commit_max: 50,
            slot,
            transient: false,
        };
        // Another peer, another nonce, no checkpoint, or one too low: nothing accepted.
        assert_eq!(
            fetch.on_target(0, &target(9, 40, Offered::Whole(slot(40)))),
            None
        );
        assert_eq!(
            fetch.on_target(2, &target(8, 40, Offered::Whole(slot(40)))),
            None
        );
        assert_eq!(fetch.on_target(2, &target(9, 0, Offered::Nothing)), None);
        assert_eq!(
            fetch.on_target(2, &target(9, 39, Offered::Whole(slot(39)))),
            None
        );
        let Some(Accepted::Offer(offer)) =
            fetch.on_target(2, &target(9, 45, Offered::Whole(slot(45))))
        else {
            panic!("a whole checkpoint at op 45");
        };
        assert_eq!((offer.from, offer.checkpoint.op), (2, 45));
        assert_eq!(offer.state, b"partition state");
        assert!(fetch.copying());
        // The log was truncated empty at 10; the offered state ends at 15.
        let asked = fetch.begin(10, 10, 15, 130);
        let chunk_request = |offset| Transfer::RequestChunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset,
            max_bytes: CHUNK_BYTES,
        };
        assert_eq!(asked, Some((2, chunk_request(10))));
        // The peer's log goes on past the state's end: only the records below it are kept.
        let mut records = record(10, 3);
        records.extend(record(13, 2));
        records.extend(record(15, 4));
        let chunk = |offset, records: Vec<u8>| Transfer::Chunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset,
            records: records.into(),
        };
        let ChunkVerdict::Append(kept) = fetch.on_chunk(2, &chunk(10, records.clone()), 0) else {
            panic!("the chunk asked for");
        };
        assert_eq!(kept.len(), record(10, 3).len() + record(13, 2).len());
        // A late duplicate of an earlier answer changes nothing.
        assert_eq!(
            fetch.on_chunk(2, &chunk(7, record(7, 3)), 0),
            ChunkVerdict::Ignored
        );
        assert_eq!(
            fetch.appended(15, 131),
            None,
            "the log reached the state's end"
        );
    }

    /// A fetch whose log ends at 3, empty, and must reach the offered state's end, 20.
    fn copying_from_3_to_20() -> Fetch {
        let (mut fetch, _, _) = Fetch::start(9, vec![1], 40, 0);
        let offered = Transfer::Target {
            nonce: 9,
            checkpoint_op: 40,
            commit_max: 40,
            slot: Offered::Whole(slot(40)),
            transient: false,
        };
        fetch.on_target(1, &offered).unwrap();
        assert!(fetch.begin(3, 3, 20, 0).is_some());
        fetch
    }

    /// A fetch whose log holds 0..14 (from 0) and must reach the offered state's end, 30: it
    /// first asks whether the peer still holds offset 0.
    fn probing_0_then_copying_from_14_to_30() -> Fetch {
        let (mut fetch, _, _) = Fetch::start(9, vec![1], 40, 0);
        let offered = Transfer::Target {
            nonce: 9,
            checkpoint_op: 40,
            commit_max: 40,
            slot: Offered::Whole(slot(40)),
            transient: false,
        };
        fetch.on_target(1, &offered).unwrap();
        let probe = Transfer::RequestChunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset: 0,
            max_bytes: 1,
        };
        assert_eq!(fetch.begin(0, 14, 30, 0), Some((1, probe.clone())));
        assert_eq!(fetch.on_tick(RESEND_TICKS), Some((1, probe)), "asked again");
        fetch
    }

    /// A log holding offsets the group retired by ops the offered checkpoint carries (never
    /// replayed here) deletes them before it copies on from its end, which the peer still
    /// holds; else it kept and served them (e2e `cluster_maintenance`).
    #[test]
    fn a_fetch_first_asks_whether_the_peer_still_holds_where_the_log_starts() {
        let next_chunk = Transfer::RequestChunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset: 14,
            max_bytes: CHUNK_BYTES,
        };
        // The peer holds from 12 on: below it goes here too, then the copy from 14.
        let mut fetch = probing_0_then_copying_from_14_to_30();
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(12), 0),
            ChunkVerdict::Probed {
                retired_below: Some(12)
            }
        );
        assert_eq!(fetch.probed(1), Some((1, next_chunk.clone())));
        // A late answer to the probe is no chunk of the copy.
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(12), 0),
            ChunkVerdict::Ignored
        );

        // The peer still holds 0: nothing retired.
        let mut fetch = probing_0_then_copying_from_14_to_30();
        let held = Transfer::Chunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset: 0,
            records: record(0, 2).into(),
        };
        assert_eq!(
            fetch.on_chunk(1, &held, 0),
            ChunkVerdict::Probed {
                retired_below: None
            }
        );
        assert_eq!(fetch.probed(1), Some((1, next_chunk)));

        // The peer retired past the log's end: the copy from 14 finds it out and restarts.
        let mut fetch = probing_0_then_copying_from_14_to_30();
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(20), 0),
            ChunkVerdict::Probed {
                retired_below: None
            }
        );
        assert!(fetch.probed(1).is_some());
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(20), 0),
            ChunkVerdict::Restart {
                asked: 14,
                held_from: 20
            }
        );
    }

    fn empty_chunk(offset: u64) -> Transfer {
        Transfer::Chunk {
            nonce: 9,
            artifact: PARTITION_LOG_ARTIFACT,
            offset,
            records: Bytes::new(),
        }
    }

    #[test]
    fn a_fetch_restarts_the_log_at_the_peers_first_offset_when_the_group_retired_past_it() {
        let mut fetch = copying_from_3_to_20();
        // Unanswered chunk requests are sent again (to the next peer; here the only one).
        let again = fetch.on_tick(RESEND_TICKS).unwrap();
        assert_eq!(again.0, 1);
        // A peer that has not committed the offset asked for answers with nothing: ignored.
        assert_eq!(fetch.on_chunk(1, &empty_chunk(3), 0), ChunkVerdict::Ignored);
        // The peer retired offsets below 12: the log restarts there and the copy goes on.
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(12), 0),
            ChunkVerdict::Restart {
                asked: 3,
                held_from: 12
            }
        );
        let asked = fetch.restarted(12, RESEND_TICKS + 1);
        assert_eq!(
            asked,
            Some((
                1,
                Transfer::RequestChunk {
                    nonce: 9,
                    artifact: PARTITION_LOG_ARTIFACT,
                    offset: 12,
                    max_bytes: CHUNK_BYTES
                }
            ))
        );
        // An empty answer at 12 (a peer that has not committed that far) changes nothing.
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(12), 0),
            ChunkVerdict::Ignored
        );
        let ChunkVerdict::Append(records) = fetch.on_chunk(
            1,
            &Transfer::Chunk {
                nonce: 9,
                artifact: PARTITION_LOG_ARTIFACT,
                offset: 12,
                records: record(12, 8).into(),
            },
            0,
        ) else {
            panic!("the records from the restart");
        };
        assert_eq!(records.len(), record(12, 8).len());
        assert_eq!(fetch.appended(20, RESEND_TICKS + 2), None, "install now");

        // A peer holding from exactly the state's end: an empty log there is the whole copy.
        let mut fetch = copying_from_3_to_20();
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(20), 0),
            ChunkVerdict::Restart {
                asked: 3,
                held_from: 20
            }
        );
        assert_eq!(fetch.restarted(20, 1), None, "install now");
    }

    #[test]
    fn laggards_fetching_a_slot_in_chunks_at_once_each_keep_their_own_copy() {
        let (older, newer) = (Bytes::from(vec![1u8; 40]), Bytes::from(vec![2u8; 40]));
        let mut lent = LentSlots::default();
        lent.lend(1, 0xa, older.clone());
        // A second laggard asks after a newer checkpoint replaced the first one's slot.
        lent.lend(3, 0xb, newer.clone());
        assert_eq!(lent.chunk(0xa, 8, 16), older.slice(8..24));
        assert_eq!(lent.chunk(0xb, 32, 16), newer.slice(32..40));
        assert!(lent.chunk(0xc, 0, 16).is_empty(), "no slot was lent to 0xc");
    }

    #[test]
    fn a_peers_new_transfer_ends_the_copy_lent_to_its_previous_one() {
        let mut lent = LentSlots::default();
        lent.lend(2, 0xa, Bytes::from(vec![1u8; 40]));
        lent.lend(2, 0xb, Bytes::from(vec![2u8; 40]));
        assert!(lent.chunk(0xa, 0, 16).is_empty());
        assert_eq!(lent.chunk(0xb, 0, 4), Bytes::from(vec![2u8; 4]));
        assert_eq!(lent.by_peer.len(), 1, "one copy per peer");
    }

    #[test]
    fn a_peer_that_retired_past_the_offered_state_sends_the_transfer_back_for_a_newer_one() {
        let mut fetch = copying_from_3_to_20();
        assert_eq!(
            fetch.on_chunk(1, &empty_chunk(21), 0),
            ChunkVerdict::Overtaken {
                asked: 3,
                held_from: 21,
                until: 20
            }
        );
    }

    #[test]
    fn a_metadata_slot_longer_than_a_frame_is_offered_in_chunks_whose_frames_cross_the_plane() {
        let slot = metadata_slot_with(40, 40, 3);
        assert_eq!(
            offer(&slot, slot.len() as u32, true),
            Offered::Whole(slot.clone()),
            "a slot that fits one frame goes whole"
        );
        assert_eq!(
            offer(&slot, 10, false),
            Offered::Whole(slot.clone()),
            "a partition's slot always goes whole"
        );
        let Offered::InChunks { length, checksum } = offer(&slot, 10, true) else {
            panic!("a metadata slot longer than a frame goes in chunks");
        };
        assert_eq!(length, slot.len() as u64);
        assert_eq!(slot_chunk(&slot, 4, 10), slot.slice(4..14));
        assert_eq!(
            slot_chunk(&slot, length - 3, 10),
            slot.slice(slot.len() - 3..)
        );
        assert!(slot_chunk(&slot, length + 1, 10).is_empty());
        for transfer in [
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 40,
                commit_max: 42,
                slot: Offered::InChunks { length, checksum },
                transient: false,
            },
            Transfer::RequestChunk {
                nonce: 5,
                artifact: METADATA_CHECKPOINT_ARTIFACT,
                offset: 10,
                max_bytes: 10,
            },
            Transfer::Chunk {
                nonce: 5,
                artifact: METADATA_CHECKPOINT_ARTIFACT,
                offset: 10,
                records: slot_chunk(&slot, 10, 10),
            },
        ] {
            let inbound = receive(&encode(&metadata_context(0), 3, &transfer), 0);
            assert_eq!(decode(&metadata_context(2), &inbound).unwrap(), transfer);
            // A partition group takes neither the metadata group's frames...
            assert!(matches!(
                decode(&context(2, 7), &inbound),
                Err(CodecError::Group { .. })
            ));
            // ...nor, under its own group id, a slot in chunks or the metadata artifact.
            let inbound = receive(&encode(&context(0, 7), 3, &transfer), 0);
            assert!(decode(&context(2, 7), &inbound).is_err(), "{transfer:?}");
            // A zero nonce is refused as on every transfer frame.
            let zero = match transfer.clone() {
                Transfer::Target {
                    checkpoint_op,
                    commit_max,
                    slot,
                    transient,
                    ..
                } => Transfer::Target {
                    nonce: 0,
                    checkpoint_op,
                    commit_max,
                    slot,
                    transient,
                },
                Transfer::RequestChunk {
                    artifact,
                    offset,
                    max_bytes,
                    ..
                } => Transfer::RequestChunk {
                    nonce: 0,
                    artifact,
                    offset,
                    max_bytes,
                },
                Transfer::Chunk {
                    artifact,
                    offset,
                    records,
                    ..
                } => Transfer::Chunk {
                    nonce: 0,
                    artifact,
                    offset,
                    records,
                },
                Transfer::Request { .. } => unreachable!(),
            };
            let inbound = receive(&encode(&metadata_context(0), 3, &zero), 0);
            assert!(decode(&metadata_context(2), &inbound).is_err(), "{zero:?}");
        }
    }

    /// Serves `fetch`'s requests for the slot from `slot` with `budget` bytes a frame, through
    /// the codec, until it has the offer or asks something else; `damage` alters one chunk.
    fn fetch_slot(
        fetch: &mut Fetch,
        first: (u8, Transfer),
        slot: &Bytes,
        budget: u32,
        damage: bool,
    ) -> (ChunkVerdict, usize) {
        let mut asked = first;
        let mut chunks = 0;
        loop {
            let (
                to,
                Transfer::RequestChunk {
                    nonce,
                    artifact,
                    offset,
                    max_bytes,
                },
            ) = asked
            else {
                return (ChunkVerdict::Ask(asked.0, asked.1), chunks);
            };
            assert_eq!(artifact, METADATA_CHECKPOINT_ARTIFACT);
            let mut bytes = slot_chunk(slot, offset, max_bytes.min(budget)).to_vec();
            if damage && chunks == 2 {
                bytes[0] ^= 1;
            }
            let chunk = Transfer::Chunk {
                nonce,
                artifact,
                offset,
                records: bytes.into(),
            };
            let inbound = receive(&encode(&metadata_context(to), 3, &chunk), to);
            let chunk = decode(&metadata_context(9), &inbound).unwrap();
            chunks += 1;
            match fetch.on_chunk(to, &chunk, chunks as u64) {
                ChunkVerdict::Ask(to, request) => asked = (to, request),
                verdict => return (verdict, chunks),
            }
        }
    }

    #[test]
    fn a_fetch_assembles_a_metadata_slot_in_chunks_and_installs_it_only_when_it_checks_out() {
        let slot = metadata_slot_with(40, 40, 200);
        let budget = 256;
        assert!(slot.len() > 8 * budget as usize, "{} bytes", slot.len());
        let target = Transfer::Target {
            nonce: 9,
            checkpoint_op: 40,
            commit_max: 40,
            slot: offer(&slot, budget, true),
            transient: false,
        };
        let (mut fetch, _, _) = Fetch::start(9, vec![1, 2], 40, 0);
        let Some(Accepted::Ask(to, request)) = fetch.on_target(1, &target) else {
            panic!("a slot in chunks is asked for");
        };
        assert_eq!(to, 1);
        assert!(
            fetch.copying(),
            "the replica stays still while the slot comes"
        );
        let (verdict, chunks) = fetch_slot(&mut fetch, (to, request.clone()), &slot, budget, false);
        assert_eq!(chunks, slot.len().div_ceil(budget as usize));
        let ChunkVerdict::Fetched(fetched) = verdict else {
            panic!("the whole slot: {verdict:?}");
        };
        assert_eq!((fetched.from, fetched.checkpoint.op), (1, 40));
        let model = metadata_snapshot_of(Command::StateChunk, &fetched.state, 40).unwrap();
        assert_eq!(
            model.streams.len(),
            200,
            "every stream of the snapshot arrives"
        );

        // A slot whose bytes changed on the way fails its checksum: the next peer is asked
        // afresh, and nothing is offered.
        let (mut fetch, _, _) = Fetch::start(9, vec![1, 2], 40, 0);
        let Some(Accepted::Ask(to, request)) = fetch.on_target(1, &target) else {
            panic!("a slot in chunks is asked for");
        };
        let (verdict, _) = fetch_slot(&mut fetch, (to, request), &slot, budget, true);
        assert_eq!(
            verdict,
            ChunkVerdict::Ask(2, Transfer::Request { nonce: 9 }),
            "a damaged slot is never installed"
        );
        // A slot whose announced checksum matches bytes that are not a checkpoint of the op is
        // refused all the same.
        let other = metadata_slot_with(41, 41, 200);
        let forged = Transfer::Target {
            nonce: 9,
            checkpoint_op: 40,
            commit_max: 40,
            slot: offer(&other, budget, true),
            transient: false,
        };
        let Some(Accepted::Ask(to, request)) = fetch.on_target(2, &forged) else {
            panic!("a slot in chunks is asked for");
        };
        let (verdict, _) = fetch_slot(&mut fetch, (to, request), &other, budget, false);
        assert_eq!(
            verdict,
            ChunkVerdict::Ask(1, Transfer::Request { nonce: 9 })
        );
        // An unanswered piece starts the transfer over with the next peer.
        let (mut fetch, _, _) = Fetch::start(9, vec![1, 2], 40, 0);
        fetch.on_target(1, &target).unwrap();
        assert_eq!(
            fetch.on_tick(RESEND_TICKS),
            Some((2, Transfer::Request { nonce: 9 }))
        );
    }
}
