//! The state a partition checkpoint keeps besides the log itself: the spec's
//! `PartitionCheckpointState` (or the older `PartitionCheckpointStateV3`,
//! `PartitionCheckpointStateV2`, `PartitionCheckpointStateV1` and `PartitionCheckpointStateV0`,
//! read only).

use crate::write::{CREATED_AT_UNKNOWN, OffsetOwner, RESOLVED_AT_UNKNOWN};
use iggy_generated::storage::{
    GroupDeletion, PartitionCheckpointState, PartitionCheckpointStateV0,
    PartitionCheckpointStateV1, PartitionCheckpointStateV2, PartitionCheckpointStateV3,
    StoredOffset,
};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeMap;

/// The `stored_at` of an offset checkpointed before the field existed: older than any plan,
/// so it holds no retirement back at its apply (the plan saw it, or a store the planner did
/// not see replaced it).
pub const STORED_AT_UNKNOWN: u64 = 0;

/// A consumer offset as the partition keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptOffset {
    pub offset: u64,
    /// The metadata op its write was resolved at: the group that stored a group's offset
    /// existed then, so a deletion of that group id at a later op removes it and a deletion at
    /// an earlier op (of a previous group with that id) does not. [`RESOLVED_AT_UNKNOWN`] for
    /// an offset stored before this was kept.
    pub resolved_at: u64,
    /// The metadata op that created the group that stored it (as of the write that stored
    /// it): which instance of a reused group id the offset is. [`CREATED_AT_UNKNOWN`] for a
    /// consumer's, or an offset stored before this was kept.
    pub created_at: u64,
    /// The partition op that stored it: a retirement planned before that op did not see it,
    /// and is held back by it (see `PartitionWrite::RetireSegments`). [`STORED_AT_UNKNOWN`]
    /// for an offset checkpointed before this was kept.
    pub stored_at: u64,
}

/// The state a partition checkpoint keeps.
#[derive(Debug, Default, PartialEq)]
pub struct CheckpointState {
    /// The offset after the last applied send.
    pub next_offset: u64,
    pub offsets: BTreeMap<OffsetOwner, KeptOffset>,
    /// Deleted group id and the metadata op that deleted it.
    pub group_deletions: BTreeMap<u32, u64>,
}

impl CheckpointState {
    /// Decodes the spec's `PartitionCheckpointState`, or an older layout:
    /// `PartitionCheckpointStateV3` (the ops that stored the offsets unknown),
    /// `PartitionCheckpointStateV2` (the owners' creation ops unknown too),
    /// `PartitionCheckpointStateV1` (offsets resolved at an unknown op too) or
    /// `PartitionCheckpointStateV0` (no group deletions either). Each layout extends the one
    /// before by a trailing vector, so the bytes of an older one never decode as a newer one.
    pub fn decode(state: &[u8]) -> Result<CheckpointState, String> {
        let any = decode_any(state)?;
        let count = any.offsets.len();
        let per_offset = |ops: Option<Vec<u64>>, unknown: u64, what: &str| {
            let ops = ops.unwrap_or_else(|| vec![unknown; count]);
            match ops.len() == count {
                true => Ok(ops),
                false => Err(format!(
                    "partition checkpoint state: {count} offsets but {} {what}",
                    ops.len()
                )),
            }
        };
        let resolved_at = per_offset(any.resolved_at, RESOLVED_AT_UNKNOWN, "resolution ops")?;
        let created_at = per_offset(any.created_at, CREATED_AT_UNKNOWN, "creation ops")?;
        let stored_at = per_offset(any.stored_at, STORED_AT_UNKNOWN, "storing ops")?;
        let offsets = (any.offsets.into_iter().zip(resolved_at))
            .zip(created_at.into_iter().zip(stored_at))
            .map(|((stored, resolved_at), (created_at, stored_at))| {
                let kept = KeptOffset {
                    offset: stored.offset,
                    resolved_at,
                    created_at,
                    stored_at,
                };
                (OffsetOwner::of(stored.owner), kept)
            })
            .collect();
        Ok(CheckpointState {
            next_offset: any.next_offset,
            offsets,
            group_deletions: any
                .group_deletions
                .into_iter()
                .map(|deletion| (deletion.group, deletion.metadata_op))
                .collect(),
        })
    }

    /// The spec's `PartitionCheckpointState`.
    pub fn encode(&self) -> Vec<u8> {
        let per_offset = |field: fn(&KeptOffset) -> u64| self.offsets.values().map(field).collect();
        PartitionCheckpointState {
            next_offset: self.next_offset,
            offsets: self
                .offsets
                .iter()
                .map(|(owner, kept)| StoredOffset {
                    owner: owner.record(),
                    offset: kept.offset,
                })
                .collect(),
            group_deletions: self
                .group_deletions
                .iter()
                .map(|(group, op)| GroupDeletion {
                    group: *group,
                    metadata_op: *op,
                })
                .collect(),
            resolved_at: per_offset(|kept| kept.resolved_at),
            created_at: per_offset(|kept| kept.created_at),
            stored_at: per_offset(|kept| kept.stored_at),
        }
        .to_wire_bytes()
    }
}

/// A decoded state of any layout; the per-offset ops a layout lacks are `None`.
struct AnyState {
    next_offset: u64,
    offsets: Vec<StoredOffset>,
    group_deletions: Vec<GroupDeletion>,
    resolved_at: Option<Vec<u64>>,
    created_at: Option<Vec<u64>>,
    stored_at: Option<Vec<u64>>,
}

/// The newest layout `state` decodes as, exactly.
fn decode_any(state: &[u8]) -> Result<AnyState, String> {
    // Each layout is the one before it with one more trailing vector of per-offset ops.
    let any = |next_offset, offsets, group_deletions, ops: [Option<Vec<u64>>; 3]| {
        let [resolved_at, created_at, stored_at] = ops;
        AnyState {
            next_offset,
            offsets,
            group_deletions,
            resolved_at,
            created_at,
            stored_at,
        }
    };
    if let Ok(s) = PartitionCheckpointState::decode_exact(state) {
        let ops = [Some(s.resolved_at), Some(s.created_at), Some(s.stored_at)];
        return Ok(any(s.next_offset, s.offsets, s.group_deletions, ops));
    }
    if let Ok(s) = PartitionCheckpointStateV3::decode_exact(state) {
        let ops = [Some(s.resolved_at), Some(s.created_at), None];
        return Ok(any(s.next_offset, s.offsets, s.group_deletions, ops));
    }
    if let Ok(s) = PartitionCheckpointStateV2::decode_exact(state) {
        let ops = [Some(s.resolved_at), None, None];
        return Ok(any(s.next_offset, s.offsets, s.group_deletions, ops));
    }
    if let Ok(s) = PartitionCheckpointStateV1::decode_exact(state) {
        return Ok(any(
            s.next_offset,
            s.offsets,
            s.group_deletions,
            [None, None, None],
        ));
    }
    let s = PartitionCheckpointStateV0::decode_exact(state)
        .map_err(|_| "partition checkpoint state is malformed".to_string())?;
    Ok(any(
        s.next_offset,
        s.offsets,
        Vec::new(),
        [None, None, None],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(offset: u64, resolved_at: u64, created_at: u64, stored_at: u64) -> KeptOffset {
        KeptOffset {
            offset,
            resolved_at,
            created_at,
            stored_at,
        }
    }

    /// The bytes this build writes (spec/storage.spec: next offset, the u32-counted
    /// `StoredOffset`s of kind, id and offset, the u32-counted `GroupDeletion`s, the u32-counted
    /// resolution ops, the u32-counted owners' creation ops), and the older layouts cut from
    /// them, so a data directory an earlier build left restores.
    #[test]
    fn the_state_keeps_the_layouts_earlier_builds_wrote() {
        let state = CheckpointState {
            next_offset: 0x0102_0304_0506_0708,
            offsets: BTreeMap::from([
                (
                    OffsetOwner::Consumer(9),
                    kept(4, 3, CREATED_AT_UNKNOWN, 0x21),
                ),
                (OffsetOwner::External(2), kept(7, 0x11, 0x10, 0x22)),
            ]),
            group_deletions: BTreeMap::from([(5, 40)]),
        };
        #[rustfmt::skip]
        let written: &[u8] = &[
            8, 7, 6, 5, 4, 3, 2, 1,
            2, 0, 0, 0,
            1, 9, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
            3, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0,
            1, 0, 0, 0,
            5, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0,
            2, 0, 0, 0,
            3, 0, 0, 0, 0, 0, 0, 0,
            0x11, 0, 0, 0, 0, 0, 0, 0,
            2, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0,
            0x10, 0, 0, 0, 0, 0, 0, 0,
            2, 0, 0, 0,
            0x21, 0, 0, 0, 0, 0, 0, 0,
            0x22, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(state.encode(), written);
        assert_eq!(CheckpointState::decode(written).unwrap(), state);
        // Without the storing ops (V3): every offset stored at an unknown op.
        let v3 = &written[..written.len() - 20];
        let restored = CheckpointState::decode(v3).unwrap();
        let mut unknown = state.offsets.clone();
        unknown
            .values_mut()
            .for_each(|kept| kept.stored_at = STORED_AT_UNKNOWN);
        assert_eq!(restored.offsets, unknown);
        // Without the creation ops (V2): every owner's creation op unknown too.
        let v2 = &v3[..v3.len() - 20];
        let restored = CheckpointState::decode(v2).unwrap();
        unknown
            .values_mut()
            .for_each(|kept| kept.created_at = CREATED_AT_UNKNOWN);
        assert_eq!(restored.offsets, unknown);
        assert_eq!(restored.group_deletions, state.group_deletions);
        // Without the resolution ops (V1): every offset resolved at an unknown op.
        let v1 = &v2[..v2.len() - 20];
        let restored = CheckpointState::decode(v1).unwrap();
        assert_eq!(restored.group_deletions, state.group_deletions);
        let unknown: Vec<_> = restored.offsets.values().map(|k| k.resolved_at).collect();
        assert_eq!(unknown, vec![RESOLVED_AT_UNKNOWN; 2]);
        let values: Vec<_> = restored.offsets.values().map(|k| k.offset).collect();
        assert_eq!(values, vec![4, 7]);
        // Without the deletions either (V0).
        let v0 = &v1[..v1.len() - 16];
        let restored = CheckpointState::decode(v0).unwrap();
        assert_eq!(restored.next_offset, state.next_offset);
        assert_eq!(restored.offsets.len(), 2);
        assert!(restored.group_deletions.is_empty());
    }

    #[test]
    fn per_offset_ops_that_do_not_match_the_offsets_are_refused() {
        let state = CheckpointState {
            next_offset: 1,
            offsets: BTreeMap::from([(OffsetOwner::Group(1), kept(4, 3, 2, 9))]),
            group_deletions: BTreeMap::new(),
        };
        // One storing op, creation op or resolution op too many (vectors of 12 bytes each
        // from the end): its count says 2, and 8 more bytes follow it.
        for count_at in [12, 24, 36] {
            let mut bytes = state.encode();
            let count_at = bytes.len() - count_at;
            bytes[count_at] = 2;
            bytes.splice(count_at + 4..count_at + 4, [0; 8]);
            let refused = CheckpointState::decode(&bytes);
            assert!(refused.is_err(), "{count_at}: {refused:?}");
        }
    }
}
