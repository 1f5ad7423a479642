//! The bodies of partition ops as journaled and the results cached for their retries. Every
//! layout is the spec's (spec/storage.spec); the wire batch inside a send is the client's.

use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::SessionIdentity;
use iggy_generated::storage::{
    DeleteGroupOffsetsOp, DeleteOffsetOp, DeleteOffsetOpV0, OffsetOwnerKind, OffsetOwnerRecord,
    RetireSegmentsOp, SessionRetirementOp, StoreOffsetOp, StoreOffsetOpV0, WriteAppended,
    WriteStatus,
};
use iggy_wire::{WireDecode, WireEncode};

/// Who an offset belongs to, journaled and checkpointed as the wire's consumer kind byte and a
/// u32: a plain consumer (1), a consumer group (2), or an external group (3): the offsets an
/// Iggy consumer group keeps for a membership managed outside Iggy (a Kafka group, say). A
/// group's kind-2 and kind-3 offsets are separate slots and never overwrite each other; a
/// kind-3 offset is never polled and holds no segment back, and both go with the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OffsetOwner {
    Consumer(u32),
    Group(u32),
    External(u32),
}

impl OffsetOwner {
    pub(crate) fn record(self) -> OffsetOwnerRecord {
        let (kind, id) = match self {
            OffsetOwner::Consumer(id) => (OffsetOwnerKind::Consumer, id),
            OffsetOwner::Group(id) => (OffsetOwnerKind::ConsumerGroup, id),
            OffsetOwner::External(id) => (OffsetOwnerKind::ExternalGroup, id),
        };
        OffsetOwnerRecord { kind, id }
    }

    pub(crate) fn of(record: OffsetOwnerRecord) -> OffsetOwner {
        match record.kind {
            OffsetOwnerKind::Consumer => OffsetOwner::Consumer(record.id),
            OffsetOwnerKind::ConsumerGroup => OffsetOwner::Group(record.id),
            OffsetOwnerKind::ExternalGroup => OffsetOwner::External(record.id),
        }
    }
}

/// The `resolved_at` of an offset write journaled, or an offset checkpointed, before the field
/// existed: never refused, and removed by any deletion of its group applied.
pub const RESOLVED_AT_UNKNOWN: u64 = u64::MAX;

/// The body of a partition op as journaled: the primary's decisions plus the client's bytes.
/// Internal to this server (the journal is ours); the wire batch inside is the spec's layout.
pub enum PartitionWrite {
    /// The validated record as the producer sent it, `base_timestamp` stamped by the primary.
    Send { batch: Bytes },
    /// `resolved_at`: the metadata op the owner was resolved at (a group's offsets: the group
    /// existed then). Refused if the owner's group was deleted by a later op, so a request in
    /// flight across a group's deletion leaves nothing a later group with that id would find.
    /// A record journaled before the field existed reads as [`RESOLVED_AT_UNKNOWN`].
    StoreOffset {
        owner: OffsetOwner,
        offset: u64,
        resolved_at: u64,
    },
    DeleteOffset {
        owner: OffsetOwner,
        resolved_at: u64,
    },
    /// DeleteSegments: every closed segment whose messages all lie below `keep_from`, as the
    /// primary planned it from the request. Applying it twice deletes nothing more.
    RetireSegments { keep_from: u64 },
    /// The consumer group `group` was deleted by metadata op `metadata_op` (or, proposed by a
    /// primary's sweep, was not live at it): its offsets (kind 2 and kind 3) resolved before
    /// `metadata_op` go, so a group created later with the same id starts with none. Applied
    /// only when `metadata_op` is above the latest deletion of `group` the partition applied
    /// and above the op that created the partition, so a deletion submitted again (a restart
    /// finishing one a crash interrupted) never removes a later group's offsets.
    DeleteGroupOffsets { group: u32, metadata_op: u64 },
    /// An ordered retirement: these sessions ended in the metadata group, so their writer slots
    /// (client-table rows, with their retry protection) go from this partition's group.
    RetireSessions { sessions: Vec<SessionIdentity> },
}

impl PartitionWrite {
    pub fn operation(&self) -> u8 {
        match self {
            PartitionWrite::Send { .. } => Operation::SendMessages.to_repr(),
            PartitionWrite::StoreOffset { .. } => Operation::StoreConsumerOffset.to_repr(),
            PartitionWrite::DeleteOffset { .. } => Operation::DeleteConsumerOffset.to_repr(),
            PartitionWrite::RetireSegments { .. } => Operation::DeleteSegments.to_repr(),
            PartitionWrite::DeleteGroupOffsets { .. } => Operation::DeleteConsumerGroup.to_repr(),
            PartitionWrite::RetireSessions { .. } => Operation::RetireSession.to_repr(),
        }
    }

    /// The journaled body: the client's batch, or the spec's record of the op
    /// (spec/storage.spec: `StoreOffsetOp`, `DeleteOffsetOp`, `RetireSegmentsOp`,
    /// `DeleteGroupOffsetsOp`, `SessionRetirementOp`).
    pub fn encode(&self) -> Bytes {
        match *self {
            PartitionWrite::Send { ref batch } => batch.clone(),
            PartitionWrite::StoreOffset {
                owner,
                offset,
                resolved_at,
            } => (StoreOffsetOp {
                owner: owner.record(),
                offset,
                resolved_at,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::DeleteOffset { owner, resolved_at } => (DeleteOffsetOp {
                owner: owner.record(),
                resolved_at,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::RetireSegments { keep_from } => {
                (RetireSegmentsOp { keep_from }).to_wire_bytes().into()
            }
            PartitionWrite::DeleteGroupOffsets { group, metadata_op } => {
                (DeleteGroupOffsetsOp { group, metadata_op })
                    .to_wire_bytes()
                    .into()
            }
            PartitionWrite::RetireSessions { ref sessions } => (SessionRetirementOp {
                sessions: sessions.clone(),
            })
            .to_wire_bytes()
            .into(),
        }
    }

    /// The op journaled with `operation` and `body`; `None` when it is no partition op or its
    /// record is malformed.
    pub fn decode(operation: u8, body: &Bytes) -> Option<PartitionWrite> {
        // Records journaled before `resolved_at` existed (the `V0` layouts) read as resolved
        // at an unknown op: never refused.
        match Operation::from_repr(operation)? {
            Operation::SendMessages => Some(PartitionWrite::Send {
                batch: body.clone(),
            }),
            Operation::StoreConsumerOffset => match StoreOffsetOp::decode_exact(body) {
                Ok(op) => Some(PartitionWrite::StoreOffset {
                    owner: OffsetOwner::of(op.owner),
                    offset: op.offset,
                    resolved_at: op.resolved_at,
                }),
                Err(_) => {
                    let op = StoreOffsetOpV0::decode_exact(body).ok()?;
                    Some(PartitionWrite::StoreOffset {
                        owner: OffsetOwner::of(op.owner),
                        offset: op.offset,
                        resolved_at: RESOLVED_AT_UNKNOWN,
                    })
                }
            },
            Operation::DeleteConsumerOffset => match DeleteOffsetOp::decode_exact(body) {
                Ok(op) => Some(PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::of(op.owner),
                    resolved_at: op.resolved_at,
                }),
                Err(_) => Some(PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::of(DeleteOffsetOpV0::decode_exact(body).ok()?.owner),
                    resolved_at: RESOLVED_AT_UNKNOWN,
                }),
            },
            Operation::DeleteSegments => Some(PartitionWrite::RetireSegments {
                keep_from: RetireSegmentsOp::decode_exact(body).ok()?.keep_from,
            }),
            Operation::DeleteConsumerGroup => {
                let op = DeleteGroupOffsetsOp::decode_exact(body).ok()?;
                Some(PartitionWrite::DeleteGroupOffsets {
                    group: op.group,
                    metadata_op: op.metadata_op,
                })
            }
            Operation::RetireSession => Some(PartitionWrite::RetireSessions {
                sessions: SessionRetirementOp::decode_exact(body).ok()?.sessions,
            }),
            _ => None,
        }
    }
}

/// A committed partition write's result, as cached in the client table and replayed to retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    Appended { base_offset: u64, count: u32 },
    Done,
    Failed(ErrorCode),
}

impl WriteResult {
    /// The spec's `WriteAppended` or `WriteStatus` record.
    pub fn encode(self) -> Bytes {
        match self {
            WriteResult::Appended { base_offset, count } => (WriteAppended {
                status: 0,
                base_offset,
                count,
            })
            .to_wire_bytes()
            .into(),
            WriteResult::Done => (WriteStatus { status: 0 }).to_wire_bytes().into(),
            WriteResult::Failed(code) => (WriteStatus {
                status: code.code(),
            })
            .to_wire_bytes()
            .into(),
        }
    }

    pub fn decode(bytes: &[u8]) -> WriteResult {
        let status = WriteStatus::decode_fixed(bytes.get(..WriteStatus::SIZE).unwrap_or(&[]))
            .map_or(1, |record| record.status);
        if status != 0 {
            return WriteResult::Failed(ErrorCode::from_code(status).unwrap_or(ErrorCode::Error));
        }
        match WriteAppended::decode_exact(bytes) {
            Ok(appended) => WriteResult::Appended {
                base_offset: appended.base_offset,
                count: appended.count,
            },
            Err(_) => WriteResult::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_owner_kinds_1_and_2_keep_their_encoding_and_kind_3_is_its_own() {
        let id = 0x0102_0304u32;
        for (owner, kind) in [
            (OffsetOwner::Consumer(id), 1u8),
            (OffsetOwner::Group(id), 2),
            (OffsetOwner::External(id), 3),
        ] {
            let bytes = owner.record().to_wire_bytes();
            assert_eq!(bytes[..], [kind, 4, 3, 2, 1]);
            let record = OffsetOwnerRecord::decode_fixed(&bytes).unwrap();
            assert_eq!(OffsetOwner::of(record), owner);
        }
        assert!(OffsetOwnerRecord::decode_fixed(&[4, 0, 0, 0, 0]).is_err());
        let write = PartitionWrite::DeleteGroupOffsets {
            group: 7,
            metadata_op: 1 << 40,
        };
        let decoded = PartitionWrite::decode(write.operation(), &write.encode());
        assert!(matches!(
            decoded,
            Some(PartitionWrite::DeleteGroupOffsets { group: 7, metadata_op }) if metadata_op == 1 << 40
        ));
    }

    #[test]
    fn offset_writes_journaled_before_resolved_at_existed_still_decode() {
        let operation = Operation::StoreConsumerOffset.to_repr();
        let old = Bytes::from_static(&[3, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            PartitionWrite::decode(operation, &old),
            Some(PartitionWrite::StoreOffset {
                owner: OffsetOwner::External(9),
                offset: 42,
                resolved_at: u64::MAX
            })
        ));
        let new = PartitionWrite::StoreOffset {
            owner: OffsetOwner::Group(9),
            offset: 42,
            resolved_at: 77,
        };
        assert!(matches!(
            PartitionWrite::decode(operation, &new.encode()),
            Some(PartitionWrite::StoreOffset {
                owner: OffsetOwner::Group(9),
                offset: 42,
                resolved_at: 77
            })
        ));
        let operation = Operation::DeleteConsumerOffset.to_repr();
        let old = Bytes::from_static(&[2, 9, 0, 0, 0]);
        assert!(matches!(
            PartitionWrite::decode(operation, &old),
            Some(PartitionWrite::DeleteOffset {
                owner: OffsetOwner::Group(9),
                resolved_at: u64::MAX
            })
        ));
    }

    /// The journal bodies and cached results earlier builds wrote (spec/storage.spec), so their
    /// journals replay and their client tables answer retries.
    #[test]
    fn op_bodies_and_results_keep_the_layouts_earlier_builds_wrote() {
        let store = PartitionWrite::StoreOffset {
            owner: OffsetOwner::Group(9),
            offset: 42,
            resolved_at: 7,
        };
        #[rustfmt::skip]
        let written: &[u8] = &[2, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(store.encode()[..], written[..]);
        let delete = PartitionWrite::DeleteOffset {
            owner: OffsetOwner::Consumer(9),
            resolved_at: 7,
        };
        assert_eq!(delete.encode()[..], [1, 9, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        let retire = PartitionWrite::RetireSegments { keep_from: 300 };
        assert_eq!(retire.encode()[..], [44, 1, 0, 0, 0, 0, 0, 0]);
        let deletion = PartitionWrite::DeleteGroupOffsets {
            group: 3,
            metadata_op: 5,
        };
        assert_eq!(deletion.encode()[..], [3, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        let appended = WriteResult::Appended {
            base_offset: 258,
            count: 3,
        };
        assert_eq!(
            appended.encode()[..],
            [0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]
        );
        assert_eq!(WriteResult::Done.encode()[..], [0, 0, 0, 0]);
        let failed = WriteResult::Failed(ErrorCode::ConsumerOffsetNotFound);
        let code = ErrorCode::ConsumerOffsetNotFound.code().to_le_bytes();
        assert_eq!(failed.encode()[..], code);
    }

    #[test]
    fn write_results_round_trip_through_their_records() {
        for result in [
            WriteResult::Appended {
                base_offset: 1 << 33,
                count: 7,
            },
            WriteResult::Done,
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound),
        ] {
            assert_eq!(WriteResult::decode(&result.encode()), result);
        }
    }
}
