//! State transfer on the replica plane, sans-IO: the frames a partition replica that fell
//! behind its group's checkpoints (`iggy_vsr::Replica::state_transfer_needed`) exchanges with
//! the primary to copy the primary's latest checkpoint and the partition log it covers.
//!
//! RequestStateTransfer (laggard → primary, header only) asks for the primary's latest durable
//! checkpoint; StateTransferTarget answers with it: `commit_op` is the checkpoint's op and the
//! body the checkpoint exactly as `iggy_storage::checkpoint` stores it in a slot (the replica's
//! record, the partition state, their checksum), or no body and `available` false. The laggard
//! then copies the log one RequestStateChunk at a time (`offset`: the batch base offset its log
//! continues from, `len`: a byte budget, artifact 0: the partition log), each answered with a
//! StateChunk of whole stamped batch records from that offset on (never a sliced batch, so
//! every replica's segments stay byte-identical). A chunk whose `offset` differs from the one
//! asked for says the primary no longer holds that offset (retention retired it): the first
//! offset it holds.
//!
//! Every frame is sealed and names a nonce (the transfer session) and the group's incarnation;
//! `decode` refuses another group or incarnation, a zero nonce, a checkpoint whose checksum or
//! op does not hold, and records that do not verify or do not follow each other.

use super::replica_bus::Inbound;
use super::replica_codec::{CodecError, FrameContext, malformed, seal, stamp_generic};
use super::replica_link::{HEADER_SIZE, body_checksum_of};
use bytes::{BufMut, Bytes, BytesMut};
use iggy_generated::frames::{
    Command, METADATA_GROUP, RequestStateChunkHeader, RequestStateTransferHeader, StateChunkHeader,
    StateTransferTargetHeader,
};
use iggy_storage::layout::{batch, read_u32, read_u64};

/// The only artifact a partition transfers besides its checkpoint: the partition log.
pub const PARTITION_LOG_ARTIFACT: u32 = 0;

/// A state-transfer frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transfer {
    /// Laggard to primary: offer your latest checkpoint.
    Request { nonce: u128 },
    /// Primary to laggard: its latest durable checkpoint (`slot`: the bytes of a checkpoint
    /// slot), or none (`slot` empty) with `transient` when asking again soon may get one.
    Target {
        nonce: u128,
        checkpoint_op: u64,
        commit_max: u64,
        slot: Option<Bytes>,
        transient: bool,
    },
    /// Laggard to primary: whole records of the log from batch base offset `offset`, up to
    /// `max_bytes`.
    RequestChunk {
        nonce: u128,
        offset: u64,
        max_bytes: u32,
    },
    /// Primary to laggard: whole records from `offset` on (none when it holds none there).
    Chunk {
        nonce: u128,
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
    let (command, mut header, body) = match transfer {
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
            let header = StateTransferTargetHeader {
                nonce: *nonce,
                commit_op: *checkpoint_op,
                group,
                available: slot.is_some(),
                unavailable_transient: *transient,
                commit_max: *commit_max,
                partition_incarnation: incarnation,
                ..StateTransferTargetHeader::default()
            };
            let body = slot.clone().unwrap_or_default();
            (Command::StateTransferTarget, header.to_bytes(), body)
        }
        Transfer::RequestChunk {
            nonce,
            offset,
            max_bytes,
        } => {
            let header = RequestStateChunkHeader {
                nonce: *nonce,
                offset: *offset,
                group,
                len: *max_bytes,
                artifact: PARTITION_LOG_ARTIFACT,
                partition_incarnation: incarnation,
                ..RequestStateChunkHeader::default()
            };
            (Command::RequestStateChunk, header.to_bytes(), Bytes::new())
        }
        Transfer::Chunk {
            nonce,
            offset,
            records,
        } => {
            let header = StateChunkHeader {
                nonce: *nonce,
                offset: *offset,
                group,
                artifact: PARTITION_LOG_ARTIFACT,
                partition_incarnation: incarnation,
                ..StateChunkHeader::default()
            };
            (Command::StateChunk, header.to_bytes(), records.clone())
        }
    };
    let size = HEADER_SIZE + body.len();
    stamp_generic(
        &mut header,
        context,
        command,
        view,
        size,
        body_checksum_of(&body),
    );
    seal(&mut header);
    let mut frame = BytesMut::with_capacity(size);
    frame.put_slice(&header);
    frame.put_slice(&body);
    frame.freeze()
}

/// A state-transfer frame the bus verified, for the partition group of `context`.
pub fn decode(context: &FrameContext, inbound: &Inbound) -> Result<Transfer, CodecError> {
    let command = inbound.command;
    if inbound.group != context.group {
        return Err(CodecError::Group {
            ours: context.group,
            frame: inbound.group,
        });
    }
    if context.group == METADATA_GROUP {
        return Err(malformed(command, "the metadata group transfers no state"));
    }
    let same_incarnation = |frame: u64| {
        if frame == context.incarnation {
            Ok(())
        } else {
            Err(CodecError::Incarnation {
                group: context.group,
                ours: context.incarnation,
                frame,
            })
        }
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
            same_incarnation(header.partition_incarnation)?;
            Ok(Transfer::Request {
                nonce: nonzero(header.nonce)?,
            })
        }
        Command::StateTransferTarget => {
            let header = StateTransferTargetHeader::decode_fixed(header).map_err(undecodable)?;
            same_incarnation(header.partition_incarnation)?;
            let nonce = nonzero(header.nonce)?;
            let slot = if header.available {
                checkpoint_of(command, &inbound.body, header.commit_op)?;
                Some(inbound.body.clone())
            } else if inbound.body.is_empty() {
                None
            } else {
                return Err(malformed(command, "a body on an unavailable target"));
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
            same_incarnation(header.partition_incarnation)?;
            if header.len == 0 || header.artifact != PARTITION_LOG_ARTIFACT {
                return Err(malformed(
                    command,
                    "len 0, or an artifact other than the log",
                ));
            }
            Ok(Transfer::RequestChunk {
                nonce: nonzero(header.nonce)?,
                offset: header.offset,
                max_bytes: header.len,
            })
        }
        Command::StateChunk => {
            let header = StateChunkHeader::decode_fixed(header).map_err(undecodable)?;
            same_incarnation(header.partition_incarnation)?;
            if header.artifact != PARTITION_LOG_ARTIFACT {
                return Err(malformed(command, "an artifact other than the log"));
            }
            check_records(command, &inbound.body, header.offset)?;
            Ok(Transfer::Chunk {
                nonce: nonzero(header.nonce)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::replica_link::FrameCheck;
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
        let check = FrameCheck {
            cluster: 0xc1,
            peer: from,
            max_frame_size: 1 << 20,
        };
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let verified = check.header(&header).expect("a sealed header");
        check
            .body(&verified, &frame[HEADER_SIZE..])
            .expect("its body");
        Inbound {
            from,
            command: verified.command,
            group: verified.group,
            header: Box::new(header),
            body: frame.slice(HEADER_SIZE..),
        }
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
                slot: Some(slot(40)),
                transient: false,
            },
            Transfer::Target {
                nonce: 5,
                checkpoint_op: 0,
                commit_max: 42,
                slot: None,
                transient: true,
            },
            Transfer::RequestChunk {
                nonce: 5,
                offset: 10,
                max_bytes: 1 << 20,
            },
            Transfer::Chunk {
                nonce: 5,
                offset: 10,
                records: records.clone().into(),
            },
            Transfer::Chunk {
                nonce: 5,
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
            slot: Some(slot),
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
        // The metadata group has no state to transfer.
        let metadata = FrameContext {
            group: METADATA_GROUP,
            incarnation: 0,
            ..context(0, 0)
        };
        let inbound = receive(&encode(&metadata, 3, &Transfer::Request { nonce: 5 }), 0);
        assert!(
            decode(
                &FrameContext {
                    sender: 2,
                    ..metadata
                },
                &inbound
            )
            .is_err()
        );
    }
}
