//! The bodies of partition ops as journaled and the results cached for their retries. Every
//! layout is the spec's (spec/storage.spec); the wire batch inside a send is the client's.

use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::SessionIdentity;
use iggy_generated::storage::{
    DeleteGroupOffsetsOp, DeleteOffsetOp, DeleteOffsetOpV0, DeleteOffsetOpV1, OffsetOwnerKind,
    OffsetOwnerRecord, RetireSegmentsOp, RetireSegmentsOpV0, SessionRetirementOp, StoreOffsetOp,
    StoreOffsetOpV0, StoreOffsetOpV1, StoreOffsetOpV2, WriteAppended, WriteStatus,
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

/// The `owner_created_at` of a consumer's offset write (no group), of one journaled before the
/// field existed, or of a group whose creation op its node's model does not know: no instance
/// of a group id is told from another by it, so no write or read is judged by it.
pub const CREATED_AT_UNKNOWN: u64 = 0;

/// The `keys_max` of an offset store that sets no limit on the keys a partition keeps: one
/// journaled by a build that had none.
pub const KEYS_UNLIMITED: u32 = 0;

/// The `planned_at` of a retirement no offset holds back: a retention pass (message expiry and
/// size caps delete what consumers have not read, as the topic's settings say), or one journaled
/// before plans named their op.
pub const NO_OFFSET_HOLD: u64 = u64::MAX;

/// The body of a partition op as journaled: the primary's decisions plus the client's bytes.
/// Internal to this server (the journal is ours); the wire batch inside is the spec's layout.
pub enum PartitionWrite {
    /// The validated record as the producer sent it, `base_timestamp` stamped by the primary.
    Send { batch: Bytes },
    /// `resolved_at`: the metadata op the owner was resolved at (a group's offsets: the group
    /// existed then). Refused if the owner's group was deleted by a later op, so a request in
    /// flight across a group's deletion leaves nothing a later group with that id would find.
    /// A record journaled before the field existed reads as [`RESOLVED_AT_UNKNOWN`].
    ///
    /// `owner_created_at`: the metadata op that created the owner group, so a group id's
    /// instances are told apart: a store of a deleted instance that commits after a later
    /// instance's store is refused instead of replacing it (its deletion may not have reached
    /// this partition yet), and a delete finds only its own instance's offset.
    /// [`CREATED_AT_UNKNOWN`] for a consumer, or in a record journaled before the field existed.
    ///
    /// `keys_max`: the offset keys the partition keeps, as the proposing node's configuration
    /// says; a store of a new key when the partition holds that many is refused (3024). Carried
    /// in the op so every replica, and every replay, judges it by the same number.
    /// [`KEYS_UNLIMITED`] in a record journaled before the field existed.
    StoreOffset {
        owner: OffsetOwner,
        offset: u64,
        resolved_at: u64,
        owner_created_at: u64,
        keys_max: u32,
    },
    DeleteOffset {
        owner: OffsetOwner,
        resolved_at: u64,
        owner_created_at: u64,
    },
    /// DeleteSegments: every closed segment whose messages all lie below `keep_from`, as a
    /// replica planned it from the request with every op up to `planned_at` applied. An
    /// offset stored by a later op (which the planner did not see) holds it back when applied,
    /// so every replica deletes the same, and never what a consumer has not committed;
    /// [`NO_OFFSET_HOLD`] for a retention pass. Applying it twice deletes nothing more.
    RetireSegments { keep_from: u64, planned_at: u64 },
    /// The consumer group `group` was deleted by metadata op `metadata_op` (or, proposed by a
    /// primary's sweep, was not live at it): its offsets (kind 2 and kind 3) stored by a group
    /// created before `metadata_op` (where the offset does not keep that creation op: resolved
    /// before it) go, so a group created later with the same id starts with none. Applied
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
                owner_created_at,
                keys_max,
            } => (StoreOffsetOp {
                owner: owner.record(),
                offset,
                resolved_at,
                owner_created_at,
                keys_max,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::DeleteOffset {
                owner,
                resolved_at,
                owner_created_at,
            } => (DeleteOffsetOp {
                owner: owner.record(),
                resolved_at,
                owner_created_at,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::RetireSegments {
                keep_from,
                planned_at,
            } => (RetireSegmentsOp {
                keep_from,
                planned_at,
            })
            .to_wire_bytes()
            .into(),
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

    /// [`Self::encode`], consuming the write: a send's batch is handed on, not shared.
    pub fn into_encoded(self) -> Bytes {
        match self {
            PartitionWrite::Send { batch } => batch,
            write => write.encode(),
        }
    }

    /// The op journaled with `operation` and `body`; `None` when it is no partition op or its
    /// record is malformed.
    pub fn decode(operation: u8, body: &Bytes) -> Option<PartitionWrite> {
        match Operation::from_repr(operation)? {
            Operation::SendMessages => Some(PartitionWrite::Send {
                batch: body.clone(),
            }),
            Operation::StoreConsumerOffset => decode_store(body),
            Operation::DeleteConsumerOffset => decode_delete(body),
            Operation::DeleteSegments => decode_retirement(body),
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

/// A `StoreOffsetOp`, or an older layout told by its exact size: records journaled before
/// `keys_max` existed (`V2`) read with no key limit (the build that wrote them had none), before
/// `owner_created_at` existed (`V1`) with the owner's creation op unknown too, and those
/// journaled before `resolved_at` existed (`V0`) resolved at an unknown op too: never refused.
fn decode_store(body: &[u8]) -> Option<PartitionWrite> {
    let (owner, offset, resolved_at, owner_created_at, keys_max) = match body.len() {
        StoreOffsetOpV0::SIZE => {
            let op = StoreOffsetOpV0::decode_exact(body).ok()?;
            let (resolved_at, created_at) = (RESOLVED_AT_UNKNOWN, CREATED_AT_UNKNOWN);
            (op.owner, op.offset, resolved_at, created_at, KEYS_UNLIMITED)
        }
        StoreOffsetOpV1::SIZE => {
            let op = StoreOffsetOpV1::decode_exact(body).ok()?;
            let created_at = CREATED_AT_UNKNOWN;
            (
                op.owner,
                op.offset,
                op.resolved_at,
                created_at,
                KEYS_UNLIMITED,
            )
        }
        StoreOffsetOpV2::SIZE => {
            let op = StoreOffsetOpV2::decode_exact(body).ok()?;
            let created_at = op.owner_created_at;
            (
                op.owner,
                op.offset,
                op.resolved_at,
                created_at,
                KEYS_UNLIMITED,
            )
        }
        _ => {
            let op = StoreOffsetOp::decode_exact(body).ok()?;
            let created_at = op.owner_created_at;
            (op.owner, op.offset, op.resolved_at, created_at, op.keys_max)
        }
    };
    Some(PartitionWrite::StoreOffset {
        owner: OffsetOwner::of(owner),
        offset,
        resolved_at,
        owner_created_at,
        keys_max,
    })
}

/// A `RetireSegmentsOp`, or a `RetireSegmentsOpV0` (told by its size) journaled before plans
/// named the op they were made at: its plan stands as it was.
fn decode_retirement(body: &[u8]) -> Option<PartitionWrite> {
    let (keep_from, planned_at) = match body.len() {
        RetireSegmentsOpV0::SIZE => (
            RetireSegmentsOpV0::decode_exact(body).ok()?.keep_from,
            NO_OFFSET_HOLD,
        ),
        _ => {
            let op = RetireSegmentsOp::decode_exact(body).ok()?;
            (op.keep_from, op.planned_at)
        }
    };
    Some(PartitionWrite::RetireSegments {
        keep_from,
        planned_at,
    })
}

/// A `DeleteOffsetOp`, or an older layout told by its exact size, read as
/// [`decode_store`] reads a store's.
fn decode_delete(body: &[u8]) -> Option<PartitionWrite> {
    let (owner, resolved_at, owner_created_at) = match body.len() {
        DeleteOffsetOpV0::SIZE => {
            let op = DeleteOffsetOpV0::decode_exact(body).ok()?;
            (op.owner, RESOLVED_AT_UNKNOWN, CREATED_AT_UNKNOWN)
        }
        DeleteOffsetOpV1::SIZE => {
            let op = DeleteOffsetOpV1::decode_exact(body).ok()?;
            (op.owner, op.resolved_at, CREATED_AT_UNKNOWN)
        }
        _ => {
            let op = DeleteOffsetOp::decode_exact(body).ok()?;
            (op.owner, op.resolved_at, op.owner_created_at)
        }
    };
    Some(PartitionWrite::DeleteOffset {
        owner: OffsetOwner::of(owner),
        resolved_at,
        owner_created_at,
    })
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

    /// Offset writes journaled by earlier builds replay: before `resolved_at` existed (`V0`:
    /// resolved at an unknown op) and before `owner_created_at` existed (`V1`: the owner's
    /// creation op unknown), each told by its exact size.
    #[test]
    fn offset_writes_journaled_before_resolved_at_or_owner_created_at_existed_still_decode() {
        let store = Operation::StoreConsumerOffset.to_repr();
        let delete = Operation::DeleteConsumerOffset.to_repr();
        let cases: [(u8, &[u8], PartitionWrite); 4] = [
            (
                store,
                &[3, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0],
                PartitionWrite::StoreOffset {
                    owner: OffsetOwner::External(9),
                    offset: 42,
                    resolved_at: RESOLVED_AT_UNKNOWN,
                    owner_created_at: CREATED_AT_UNKNOWN,
                    keys_max: KEYS_UNLIMITED,
                },
            ),
            (
                store,
                &[
                    2, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 77, 0, 0, 0, 0, 0, 0, 0,
                ],
                PartitionWrite::StoreOffset {
                    owner: OffsetOwner::Group(9),
                    offset: 42,
                    resolved_at: 77,
                    owner_created_at: CREATED_AT_UNKNOWN,
                    keys_max: KEYS_UNLIMITED,
                },
            ),
            (
                delete,
                &[2, 9, 0, 0, 0],
                PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::Group(9),
                    resolved_at: RESOLVED_AT_UNKNOWN,
                    owner_created_at: CREATED_AT_UNKNOWN,
                },
            ),
            (
                delete,
                &[2, 9, 0, 0, 0, 77, 0, 0, 0, 0, 0, 0, 0],
                PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::Group(9),
                    resolved_at: 77,
                    owner_created_at: CREATED_AT_UNKNOWN,
                },
            ),
        ];
        for (operation, old, expected) in cases {
            let decoded = PartitionWrite::decode(operation, &Bytes::copy_from_slice(old));
            assert_eq!(decoded.map(|write| write.encode()), Some(expected.encode()));
        }
        for size in [4, 12, 14, 22, 30] {
            let body = Bytes::from(vec![1; size]);
            assert!(
                PartitionWrite::decode(store, &body).is_none(),
                "{size} bytes"
            );
            assert!(
                PartitionWrite::decode(delete, &body).is_none(),
                "{size} bytes"
            );
        }
    }

    /// The journal bodies and cached results this build writes (spec/storage.spec), and those
    /// earlier builds wrote, so their journals replay and their client tables answer retries.
    #[test]
    fn op_bodies_and_results_keep_the_layouts_earlier_builds_wrote() {
        let store = PartitionWrite::StoreOffset {
            owner: OffsetOwner::Group(9),
            offset: 42,
            resolved_at: 7,
            owner_created_at: 5,
            keys_max: 10_000,
        };
        #[rustfmt::skip]
        let written: &[u8] = &[
            2, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0,
            0x10, 0x27, 0, 0,
        ];
        assert_eq!(store.encode()[..], written[..]);
        // Journaled before keys_max existed: no limit.
        let before = Bytes::copy_from_slice(&written[..29]);
        let decoded = PartitionWrite::decode(store.operation(), &before);
        assert!(matches!(
            decoded,
            Some(PartitionWrite::StoreOffset { offset: 42, owner_created_at: 5, keys_max, .. })
                if keys_max == KEYS_UNLIMITED
        ));
        let delete = PartitionWrite::DeleteOffset {
            owner: OffsetOwner::Consumer(9),
            resolved_at: 7,
            owner_created_at: CREATED_AT_UNKNOWN,
        };
        #[rustfmt::skip]
        let written: &[u8] = &[1, 9, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(delete.encode()[..], written[..]);
        for write in [store, delete] {
            let decoded = PartitionWrite::decode(write.operation(), &write.encode());
            assert_eq!(
                decoded.map(|decoded| decoded.encode()),
                Some(write.encode())
            );
        }
        let retire = PartitionWrite::RetireSegments {
            keep_from: 300,
            planned_at: 7,
        };
        #[rustfmt::skip]
        let written: &[u8] = &[44, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(retire.encode()[..], written[..]);
        let decoded = PartitionWrite::decode(retire.operation(), &retire.encode());
        assert_eq!(
            decoded.map(|decoded| decoded.encode()),
            Some(retire.encode())
        );
        // Journaled before plans named their op: the plan stands, no offset holds it back.
        let before = Bytes::from_static(&[44, 1, 0, 0, 0, 0, 0, 0]);
        let decoded = PartitionWrite::decode(retire.operation(), &before);
        assert!(matches!(
            decoded,
            Some(PartitionWrite::RetireSegments {
                keep_from: 300,
                planned_at: NO_OFFSET_HOLD
            })
        ));
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
