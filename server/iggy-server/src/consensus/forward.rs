//! Forwarding on the replica plane, sans-IO: a backup that authenticated a client's Register
//! proposes it to the metadata primary (ForwardRegister, body = the session record) and the
//! primary answers with the committed session (ForwardRegisterResult); the SDK signs in on
//! whichever node it reached first. A client write for a group this replica does not lead (a
//! DeleteSegments the SDK sends to the metadata primary, for a partition another node leads)
//! goes to that group's primary as a ForwardWrite, answered with the committed reply.

use super::replica_bus::Inbound;
use super::replica_codec::{CodecError, FrameContext, malformed, seal, stamp_generic};
use super::replica_link::{HEADER_SIZE, body_checksum_of};
use bytes::{BufMut, Bytes, BytesMut};
use iggy_generated::frames::{
    Command, ForwardRegisterHeader, ForwardRegisterOutcome, ForwardRegisterResultHeader,
    ForwardWriteHeader, ForwardWriteOutcome, ForwardWriteResultHeader, METADATA_GROUP, Operation,
};

/// A forwarding frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Backup to metadata primary: commit this Register (`record` is the session record the
    /// backup built after checking the credentials of `user_id`).
    Register {
        client: u128,
        nonce: u128,
        user_id: u32,
        record: Bytes,
    },
    /// Metadata primary to backup: the verdict; `session` is the register's op when Ok.
    RegisterResult {
        nonce: u128,
        client: u128,
        session: u64,
        outcome: ForwardRegisterOutcome,
    },
    /// A client's write for the sender's group (its group and incarnation are the frame's).
    Write {
        client: u128,
        nonce: u128,
        request: u64,
        operation: u8,
        body: Bytes,
    },
    /// The group's primary to the relaying replica: the verdict and, committed, the reply.
    WriteResult {
        nonce: u128,
        op: u64,
        outcome: ForwardWriteOutcome,
        reply: Bytes,
    },
}

/// Whether `command` is a forwarding frame (they travel in the metadata group's channel).
pub fn is_forward(command: Command) -> bool {
    matches!(
        command,
        Command::ForwardRegister
            | Command::ForwardRegisterResult
            | Command::ForwardWrite
            | Command::ForwardWriteResult
    )
}

/// The whole frame of `forward`, sent in `view` by `context.sender`.
pub fn encode(context: &FrameContext, view: u32, forward: &Forward) -> Bytes {
    let (command, mut header, body) = match forward {
        Forward::Register {
            client,
            nonce,
            user_id,
            record,
        } => {
            let header = ForwardRegisterHeader {
                client: *client,
                nonce: *nonce,
                user_id: *user_id,
                ..ForwardRegisterHeader::default()
            };
            (Command::ForwardRegister, header.to_bytes(), record.clone())
        }
        Forward::RegisterResult {
            nonce,
            client,
            session,
            outcome,
        } => {
            let header = ForwardRegisterResultHeader {
                nonce: *nonce,
                client: *client,
                epoch: *session,
                outcome: *outcome,
                ..ForwardRegisterResultHeader::default()
            };
            (
                Command::ForwardRegisterResult,
                header.to_bytes(),
                Bytes::new(),
            )
        }
        Forward::Write {
            client,
            nonce,
            request,
            operation,
            body,
        } => {
            let header = ForwardWriteHeader {
                client: *client,
                nonce: *nonce,
                request: *request,
                group: context.group,
                partition_incarnation: context.incarnation,
                operation: Operation::from_repr(*operation).unwrap_or_else(|| {
                    panic!("a forwarded write of undeclared operation {operation}")
                }),
                ..ForwardWriteHeader::default()
            };
            (Command::ForwardWrite, header.to_bytes(), body.clone())
        }
        Forward::WriteResult {
            nonce,
            op,
            outcome,
            reply,
        } => {
            let header = ForwardWriteResultHeader {
                nonce: *nonce,
                op: *op,
                group: context.group,
                partition_incarnation: context.incarnation,
                outcome: *outcome,
                ..ForwardWriteResultHeader::default()
            };
            (
                Command::ForwardWriteResult,
                header.to_bytes(),
                reply.clone(),
            )
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

/// A forwarding frame the bus verified, for the group of `context` (the receiver's).
pub fn decode(context: &FrameContext, inbound: &Inbound) -> Result<Forward, CodecError> {
    let command = inbound.command;
    if inbound.group != context.group {
        return Err(CodecError::Group {
            ours: context.group,
            frame: inbound.group,
        });
    }
    let registers = matches!(
        command,
        Command::ForwardRegister | Command::ForwardRegisterResult
    );
    if registers && context.group != METADATA_GROUP {
        return Err(malformed(
            command,
            "a register forward outside the metadata group",
        ));
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
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    match command {
        Command::ForwardRegister => {
            let header =
                ForwardRegisterHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            if header.client == 0 || header.nonce == 0 {
                return Err(malformed(command, "client or nonce 0"));
            }
            Ok(Forward::Register {
                client: header.client,
                nonce: header.nonce,
                user_id: header.user_id,
                record: inbound.body.clone(),
            })
        }
        Command::ForwardRegisterResult => {
            if !inbound.body.is_empty() {
                return Err(malformed(command, "a body on a header-only frame"));
            }
            let header = ForwardRegisterResultHeader::decode_fixed(&inbound.header[..])
                .map_err(undecodable)?;
            Ok(Forward::RegisterResult {
                nonce: header.nonce,
                client: header.client,
                session: header.epoch,
                outcome: header.outcome,
            })
        }
        Command::ForwardWrite => {
            let header =
                ForwardWriteHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_incarnation(header.partition_incarnation)?;
            if header.client == 0 || header.nonce == 0 {
                return Err(malformed(command, "client or nonce 0"));
            }
            Ok(Forward::Write {
                client: header.client,
                nonce: header.nonce,
                request: header.request,
                operation: header.operation.to_repr(),
                body: inbound.body.clone(),
            })
        }
        Command::ForwardWriteResult => {
            let header =
                ForwardWriteResultHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_incarnation(header.partition_incarnation)?;
            Ok(Forward::WriteResult {
                nonce: header.nonce,
                op: header.op,
                outcome: header.outcome,
                reply: inbound.body.clone(),
            })
        }
        other => Err(CodecError::Unsupported(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::replica_link::FrameCheck;

    fn context(sender: u8) -> FrameContext {
        FrameContext {
            cluster: 0xc1,
            sender,
            group: METADATA_GROUP,
            incarnation: 0,
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

    #[test]
    fn a_register_and_its_verdict_cross_the_plane_intact() {
        for forward in [
            Forward::Register {
                client: 0xabc,
                nonce: 7,
                user_id: 3,
                record: Bytes::from_static(b"session record"),
            },
            Forward::RegisterResult {
                nonce: 7,
                client: 0xabc,
                session: 42,
                outcome: ForwardRegisterOutcome::Ok,
            },
            Forward::RegisterResult {
                nonce: 8,
                client: 0xabc,
                session: 0,
                outcome: ForwardRegisterOutcome::NotPrimary,
            },
        ] {
            let frame = encode(&context(2), 5, &forward);
            let inbound = receive(&frame, 2);
            assert!(is_forward(inbound.command));
            assert_eq!(decode(&context(1), &inbound).unwrap(), forward);
        }
    }

    #[test]
    fn a_relayed_write_and_its_reply_cross_the_plane_for_their_partition_only() {
        let partition = |sender, incarnation| FrameContext {
            cluster: 0xc1,
            sender,
            group: 0x3_0020_0001,
            incarnation,
        };
        let write = Forward::Write {
            client: 0xabc,
            nonce: 9,
            request: 4,
            operation: iggy_generated::frames::Operation::DeleteSegments.to_repr(),
            body: Bytes::from_static(b"retire below offset 6"),
        };
        let result = Forward::WriteResult {
            nonce: 9,
            op: 41,
            outcome: ForwardWriteOutcome::Committed,
            reply: Bytes::from_static(b"reply"),
        };
        for forward in [write.clone(), result] {
            let inbound = receive(&encode(&partition(2, 7), 3, &forward), 2);
            assert!(is_forward(inbound.command));
            assert_eq!(
                inbound.group, 0x3_0020_0001,
                "routed to the partition's group"
            );
            assert_eq!(decode(&partition(0, 7), &inbound).unwrap(), forward);
            // Another incarnation of the same ids (deleted and created again) refuses it.
            assert!(matches!(
                decode(&partition(0, 8), &inbound),
                Err(CodecError::Incarnation { .. })
            ));
        }
        // A register forward outside the metadata group is refused.
        let register = Forward::Register {
            client: 1,
            nonce: 1,
            user_id: 0,
            record: Bytes::new(),
        };
        let inbound = receive(&encode(&partition(2, 7), 3, &register), 2);
        assert!(decode(&partition(0, 7), &inbound).is_err());
    }

    #[test]
    fn a_tampered_record_or_a_zero_nonce_is_refused() {
        let forward = Forward::Register {
            client: 1,
            nonce: 9,
            user_id: 0,
            record: Bytes::from_static(b"record"),
        };
        let mut frame = encode(&context(1), 0, &forward).to_vec();
        let last = frame.len() - 1;
        frame[last] ^= 1;
        let check = FrameCheck {
            cluster: 0xc1,
            peer: 1,
            max_frame_size: 1 << 20,
        };
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let verified = check.header(&header).unwrap();
        assert!(check.body(&verified, &frame[HEADER_SIZE..]).is_err());
        let zero = Forward::Register {
            client: 1,
            nonce: 0,
            user_id: 0,
            record: Bytes::from_static(b"record"),
        };
        let inbound = receive(&encode(&context(1), 0, &zero), 1);
        assert!(decode(&context(2), &inbound).is_err());
    }
}
