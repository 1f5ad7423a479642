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
