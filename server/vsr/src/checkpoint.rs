//! Checkpoints: the replicated state a replica needs besides the journal suffix after `op`.
//!
//! The shell's state machine persists its own effects; the replica contributes the client table
//! (sessions, latest requests and cached replies, so duplicates of requests committed before the
//! checkpoint still replay their replies) and the position of the log (`op`, the view and
//! checksum of the entry at `op`).
//!
//! Encoding: `VsrCheckpoint` of spec/storage.spec (the generated `iggy_generated::storage`
//! codec), sealed by the FNV-1a checksum of every byte before the seal; checkpoints of the
//! earlier layout (`VsrCheckpointV0`, no capacity) still decode. A torn or truncated checkpoint
//! fails `decode`.

use crate::client_table::ClientSession;
use crate::message::Fnv;
use bytes::Bytes;
use iggy_generated::storage::{
    VSR_CHECKPOINT_MAGIC, VSR_CHECKPOINT_MAGIC_V0, VsrCheckpoint, VsrCheckpointPrefix,
    VsrCheckpointV0, VsrClientSession,
};
use iggy_wire::{WireDecode, WireEncode};

/// The trailing seal (`seal u64`), which covers every byte before it.
const SEAL_SIZE: usize = size_of::<u64>();

/// Replicated state through `op`, persisted by the shell next to its state machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Every op at or below `op` is committed and applied; the journal restarts at `op + 1`.
    pub op: u64,
    /// View of the entry at `op` (0 when `op` is 0).
    pub view: u32,
    /// Checksum of the entry at `op` (0 when `op` is 0); lets the replica match its journal
    /// against logs of other replicas that checkpointed at `op`.
    pub checksum: u64,
    /// Client table as of `op`, client id order.
    pub clients: Vec<(u128, ClientSession)>,
    /// The client table's committed capacity, once the group nominated one.
    pub clients_max: Option<usize>,
}

/// Why checkpoint bytes were rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// Fewer bytes than the encoding needs (torn or truncated write).
    Truncated,
    /// The bytes do not start with the checkpoint magic.
    BadMagic,
    /// The trailing checksum does not match (torn write or corruption).
    Checksum,
    /// The checksum matched but the fields are inconsistent.
    Malformed,
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            CheckpointError::Truncated => "checkpoint truncated",
            CheckpointError::BadMagic => "not a checkpoint",
            CheckpointError::Checksum => "checkpoint checksum mismatch",
            CheckpointError::Malformed => "checkpoint malformed",
        };
        f.write_str(text)
    }
}

impl std::error::Error for CheckpointError {}

impl Checkpoint {
    /// Serializes the checkpoint (spec/storage.spec `VsrCheckpoint`).
    pub fn encode(&self) -> Vec<u8> {
        let clients_max = self.clients_max.map_or(0, |max| {
            u32::try_from(max).expect("client table capacity fits u32")
        });
        let clients = self
            .clients
            .iter()
            .map(|(client, session)| VsrClientSession {
                client: *client,
                session: session.session,
                request: session.request,
                reply_op: session.reply_op,
                reply: &session.reply,
            })
            .collect();
        let mut record = VsrCheckpoint {
            magic: VSR_CHECKPOINT_MAGIC,
            total_length: 0,
            op: self.op,
            view: self.view,
            checksum: self.checksum,
            clients_max,
            clients,
            seal: 0,
        };
        record.total_length = record.encoded_size() as u64;
        let mut out = record.to_wire_bytes();
        let sealed = out.len() - SEAL_SIZE;
        let seal = Fnv::oneshot(&out[..sealed]);
        out[sealed..].copy_from_slice(&seal.to_le_bytes());
        out
    }

    /// Parses and verifies bytes produced by [`Checkpoint::encode`] (or by a build that wrote
    /// `VsrCheckpointV0`).
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        let prefix = bytes
            .get(..VsrCheckpointPrefix::SIZE)
            .and_then(|prefix| VsrCheckpointPrefix::decode_fixed(prefix).ok())
            .ok_or(CheckpointError::Truncated)?;
        let with_limits = match prefix.magic {
            VSR_CHECKPOINT_MAGIC => true,
            VSR_CHECKPOINT_MAGIC_V0 => false,
            _ => return Err(CheckpointError::BadMagic),
        };
        if prefix.total_length != bytes.len() as u64 {
            return Err(if prefix.total_length > bytes.len() as u64 {
                CheckpointError::Truncated
            } else {
                CheckpointError::Malformed
            });
        }
        let sealed = bytes
            .len()
            .checked_sub(SEAL_SIZE)
            .ok_or(CheckpointError::Truncated)?;
        if seal_of(bytes, sealed) != Fnv::oneshot(&bytes[..sealed]) {
            return Err(CheckpointError::Checksum);
        }
        let malformed = |_| CheckpointError::Malformed;
        let (op, view, checksum, clients_max, rows) = if with_limits {
            let record = VsrCheckpoint::decode_exact(bytes).map_err(malformed)?;
            let clients_max = Some(record.clients_max as usize).filter(|max| *max > 0);
            let (op, view, checksum) = (record.op, record.view, record.checksum);
            (op, view, checksum, clients_max, record.clients)
        } else {
            let record = VsrCheckpointV0::decode_exact(bytes).map_err(malformed)?;
            let (op, view, checksum) = (record.op, record.view, record.checksum);
            (op, view, checksum, None, record.clients)
        };
        let mut clients: Vec<(u128, ClientSession)> = Vec::with_capacity(rows.len());
        for row in rows {
            if clients.last().is_some_and(|(last, _)| *last >= row.client) || row.reply_op > op {
                return Err(CheckpointError::Malformed);
            }
            clients.push((
                row.client,
                ClientSession {
                    session: row.session,
                    request: row.request,
                    reply_op: row.reply_op,
                    reply: Bytes::copy_from_slice(row.reply),
                },
            ));
        }
        Ok(Checkpoint {
            op,
            view,
            checksum,
            clients,
            clients_max,
        })
    }
}

/// The seal stored from `sealed` on: the last field, read before the fields it vouches for.
fn seal_of(bytes: &[u8], sealed: usize) -> u64 {
    let mut seal = [0u8; SEAL_SIZE];
    seal.copy_from_slice(&bytes[sealed..]);
    u64::from_le_bytes(seal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            op: 9,
            view: 2,
            checksum: 77,
            clients: vec![
                (
                    5,
                    ClientSession {
                        session: 1,
                        request: 3,
                        reply_op: 8,
                        reply: Bytes::from_static(b"reply"),
                    },
                ),
                (
                    6,
                    ClientSession {
                        session: 4,
                        request: 0,
                        reply_op: 4,
                        reply: Bytes::copy_from_slice(&4u64.to_le_bytes()),
                    },
                ),
            ],
            clients_max: Some(16),
        }
    }

    #[test]
    fn a_checkpoint_written_before_the_capacity_was_kept_reads_as_not_nominated() {
        // The older layout: its magic, and no capacity field after the checksum.
        let new = sample().encode();
        let mut old = VSR_CHECKPOINT_MAGIC_V0.to_vec();
        old.extend_from_slice(&(new.len() as u64 - 4).to_le_bytes());
        old.extend_from_slice(&new[12..32]);
        old.extend_from_slice(&new[36..new.len() - 8]);
        let seal = Fnv::oneshot(&old);
        old.extend_from_slice(&seal.to_le_bytes());
        let decoded = Checkpoint::decode(&old).expect("older layout decodes");
        assert_eq!(decoded.clients_max, None);
        assert_eq!(decoded.clients, sample().clients);
        assert_eq!(decoded.op, 9);
    }

    /// The layout written before the spec declared it (a hand-written encoder): the
    /// generated codec writes and reads the same bytes, so old checkpoints still load.
    #[test]
    fn the_encoding_is_byte_identical_to_the_hand_written_one() {
        let written_before = "5653504c95000000000000000900000000000000020000004d0000000000000010000000\
            0200000005000000000000000000000000000000010000000000000003000000000000000800000000\
            000000050000007265706c79060000000000000000000000000000000400000000000000000000000000\
            0000040000000000000008000000040000000000000029d36167cbd98193";
        let hex: String = sample()
            .encode()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(hex, written_before.replace(' ', ""));
    }

    #[test]
    fn round_trips() {
        let checkpoint = sample();
        assert_eq!(Checkpoint::decode(&checkpoint.encode()), Ok(checkpoint));
        let empty = Checkpoint::default();
        assert_eq!(Checkpoint::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn every_torn_prefix_and_flipped_byte_is_rejected() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(Checkpoint::decode(&bytes[..len]).is_err(), "prefix {len}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(Checkpoint::decode(&flipped).is_err(), "byte {at}");
        }
    }
}
