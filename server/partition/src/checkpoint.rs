//! The state a partition checkpoint keeps besides the log itself: the spec's
//! `PartitionCheckpointState` (or the older `PartitionCheckpointStateV0`, read only).

use crate::write::OffsetOwner;
use iggy_generated::storage::{
    GroupDeletion, PartitionCheckpointState, PartitionCheckpointStateV0, StoredOffset,
};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeMap;

/// The state a partition checkpoint keeps.
#[derive(Debug, Default, PartialEq)]
pub struct CheckpointState {
    /// The offset after the last applied send.
    pub next_offset: u64,
    pub offsets: BTreeMap<OffsetOwner, u64>,
    /// Deleted group id and the metadata op that deleted it.
    pub group_deletions: BTreeMap<u32, u64>,
}

impl CheckpointState {
    /// Decodes the spec's `PartitionCheckpointState`, or the older
    /// `PartitionCheckpointStateV0` (no group deletions).
    pub fn decode(state: &[u8]) -> Result<CheckpointState, String> {
        let bad = |_| "partition checkpoint state is malformed".to_string();
        let (next_offset, offsets, group_deletions) =
            match PartitionCheckpointState::decode_exact(state) {
                Ok(state) => (state.next_offset, state.offsets, state.group_deletions),
                Err(_) => {
                    let state = PartitionCheckpointStateV0::decode_exact(state).map_err(bad)?;
                    (state.next_offset, state.offsets, Vec::new())
                }
            };
        Ok(CheckpointState {
            next_offset,
            offsets: offsets
                .into_iter()
                .map(|stored| (OffsetOwner::of(stored.owner), stored.offset))
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
                .map(|(owner, offset)| StoredOffset {
                    owner: owner.record(),
                    offset: *offset,
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
        }
        .to_wire_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes earlier builds wrote (spec/storage.spec: next offset, the u32-counted
    /// `StoredOffset`s of kind, id and offset, the u32-counted `GroupDeletion`s), so a data
    /// directory they left restores.
    #[test]
    fn the_state_keeps_the_layout_earlier_builds_wrote() {
        let state = CheckpointState {
            next_offset: 0x0102_0304_0506_0708,
            offsets: BTreeMap::from([(OffsetOwner::Consumer(9), 4), (OffsetOwner::External(2), 7)]),
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
        ];
        assert_eq!(state.encode(), written);
        assert_eq!(CheckpointState::decode(written).unwrap(), state);
        // Without the deletions: the layout written before they were kept.
        let v0 = &written[..written.len() - 16];
        let restored = CheckpointState::decode(v0).unwrap();
        assert_eq!(
            (restored.next_offset, &restored.offsets),
            (state.next_offset, &state.offsets)
        );
        assert!(restored.group_deletions.is_empty());
    }
}
