//! The state a partition checkpoint keeps besides the log itself: the spec's
//! `PartitionCheckpointState` (or the older `PartitionCheckpointStateV1` and
//! `PartitionCheckpointStateV0`, read only).

use crate::write::{OffsetOwner, RESOLVED_AT_UNKNOWN};
use iggy_generated::storage::{
    GroupDeletion, PartitionCheckpointState, PartitionCheckpointStateV0,
    PartitionCheckpointStateV1, StoredOffset,
};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeMap;

/// A consumer offset as the partition keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptOffset {
    pub offset: u64,
    /// The metadata op its write was resolved at: the group that stored a group's offset
    /// existed then, so a deletion of that group id at a later op removes it and a deletion at
    /// an earlier op (of a previous group with that id) does not. [`RESOLVED_AT_UNKNOWN`] for
    /// an offset stored before this was kept.
    pub resolved_at: u64,
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
    /// `PartitionCheckpointStateV1` (offsets resolved at an unknown op) or
    /// `PartitionCheckpointStateV0` (no group deletions either). Each layout extends the one
    /// before by a trailing vector, so the bytes of an older one never decode as a newer one.
    pub fn decode(state: &[u8]) -> Result<CheckpointState, String> {
        let bad = |_| "partition checkpoint state is malformed".to_string();
        let (next_offset, offsets, group_deletions, resolved_at) =
            match PartitionCheckpointState::decode_exact(state) {
                Ok(state) => (
                    state.next_offset,
                    state.offsets,
                    state.group_deletions,
                    Some(state.resolved_at),
                ),
                Err(_) => match PartitionCheckpointStateV1::decode_exact(state) {
                    Ok(state) => (
                        state.next_offset,
                        state.offsets,
                        state.group_deletions,
                        None,
                    ),
                    Err(_) => {
                        let state = PartitionCheckpointStateV0::decode_exact(state).map_err(bad)?;
                        (state.next_offset, state.offsets, Vec::new(), None)
                    }
                },
            };
        let resolved_at = resolved_at.unwrap_or_else(|| vec![RESOLVED_AT_UNKNOWN; offsets.len()]);
        if resolved_at.len() != offsets.len() {
            return Err(format!(
                "partition checkpoint state: {} offsets but {} resolution ops",
                offsets.len(),
                resolved_at.len()
            ));
        }
        Ok(CheckpointState {
            next_offset,
            offsets: offsets
                .into_iter()
                .zip(resolved_at)
                .map(|(stored, resolved_at)| {
                    let kept = KeptOffset {
                        offset: stored.offset,
                        resolved_at,
                    };
                    (OffsetOwner::of(stored.owner), kept)
                })
                .collect(),
            group_deletions: group_deletions
                .into_iter()
                .map(|deletion| (deletion.group, deletion.metadata_op))
                .collect(),
        })
    }

    /// The spec's `PartitionCheckpointState`.
    pub fn encode(&self) -> Vec<u8> {
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
            resolved_at: self.offsets.values().map(|kept| kept.resolved_at).collect(),
        }
        .to_wire_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(offset: u64, resolved_at: u64) -> KeptOffset {
        KeptOffset {
            offset,
            resolved_at,
        }
    }

    /// The bytes this build writes (spec/storage.spec: next offset, the u32-counted
    /// `StoredOffset`s of kind, id and offset, the u32-counted `GroupDeletion`s, the u32-counted
    /// resolution ops), and the older layouts cut from them, so a data directory an earlier
    /// build left restores.
    #[test]
    fn the_state_keeps_the_layouts_earlier_builds_wrote() {
        let state = CheckpointState {
            next_offset: 0x0102_0304_0506_0708,
            offsets: BTreeMap::from([
                (OffsetOwner::Consumer(9), kept(4, 3)),
                (OffsetOwner::External(2), kept(7, 0x11)),
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
        ];
        assert_eq!(state.encode(), written);
        assert_eq!(CheckpointState::decode(written).unwrap(), state);
        // Without the resolution ops (V1): every offset resolved at an unknown op.
        let v1 = &written[..written.len() - 20];
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
    fn resolution_ops_that_do_not_match_the_offsets_are_refused() {
        let state = CheckpointState {
            next_offset: 1,
            offsets: BTreeMap::from([(OffsetOwner::Group(1), kept(4, 3))]),
            group_deletions: BTreeMap::new(),
        };
        let mut bytes = state.encode();
        // One resolution op too many: the count says 2, and 8 more bytes follow.
        let count_at = bytes.len() - 12;
        bytes[count_at] = 2;
        bytes.extend_from_slice(&[0; 8]);
        assert!(CheckpointState::decode(&bytes).is_err());
    }
}
