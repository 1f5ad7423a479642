//! Checkpoints: the replicated state a replica needs besides the journal suffix after `op`.
//!
//! The shell's state machine persists its own effects; the replica contributes the client table
//! (sessions, latest requests and cached replies, so duplicates of requests committed before the
//! checkpoint still replay their replies) and the position of the log (`op`, the view and
//! checksum of the entry at `op`).
//!
//! Encoding (little-endian): magic `u32`, total length `u64` (every byte, checksum included),
//! `op u64`, `view u32`, `checksum u64`, the committed client-table capacity `u32` (0: none
//! nominated yet; absent in checkpoints with the older magic), client count `u32`, then per client `client u128`,
//! `session u64`, `request u64`, `reply_op u64`, reply length `u32`, reply bytes; and last the
//! FNV-1a checksum `u64` of every preceding byte. A torn or truncated checkpoint fails `decode`.

use crate::client_table::ClientSession;
use crate::message::Fnv;
use bytes::Bytes;

const MAGIC: u32 = 0x4c50_5356; // "VSPL"
/// Checkpoints written before the capacity was kept (no `clients_max` field).
const MAGIC_WITHOUT_LIMITS: u32 = 0x4b50_5356; // "VSPK"
const HEADER: usize = 4 + 8 + 8 + 4 + 8 + 4 + 4;
const ROW: usize = 16 + 8 + 8 + 8 + 4;

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
    /// Serializes the checkpoint (see the module doc for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let replies: usize = self.clients.iter().map(|(_, s)| s.reply.len()).sum();
        let total = HEADER + self.clients.len() * ROW + replies + 8;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&(total as u64).to_le_bytes());
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.view.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        let clients_max = self.clients_max.map_or(0, |max| {
            u32::try_from(max).expect("client table capacity fits u32")
        });
        out.extend_from_slice(&clients_max.to_le_bytes());
        let count = u32::try_from(self.clients.len()).expect("client count fits u32");
        out.extend_from_slice(&count.to_le_bytes());
        for (client, session) in &self.clients {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&session.session.to_le_bytes());
            out.extend_from_slice(&session.request.to_le_bytes());
            out.extend_from_slice(&session.reply_op.to_le_bytes());
            let len = u32::try_from(session.reply.len()).expect("reply length fits u32");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&session.reply);
        }
        let mut hash = Fnv::new();
        hash.write(&out);
        out.extend_from_slice(&hash.finish().to_le_bytes());
        debug_assert_eq!(out.len(), total);
        out
    }

    /// Parses and verifies bytes produced by [`Checkpoint::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        if bytes.len() < HEADER - 4 + 8 {
            return Err(CheckpointError::Truncated);
        }
        let mut reader = Reader { bytes, at: 0 };
        let with_limits = match reader.u32()? {
            MAGIC => true,
            MAGIC_WITHOUT_LIMITS => false,
            _ => return Err(CheckpointError::BadMagic),
        };
        let total = reader.u64()?;
        if total != bytes.len() as u64 {
            return Err(if total > bytes.len() as u64 {
                CheckpointError::Truncated
            } else {
                CheckpointError::Malformed
            });
        }
        let body = &bytes[..bytes.len() - 8];
        let stored = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
        let mut hash = Fnv::new();
        hash.write(body);
        if hash.finish() != stored {
            return Err(CheckpointError::Checksum);
        }
        let mut reader = Reader {
            bytes: body,
            at: 12,
        };
        let op = reader.u64()?;
        let view = reader.u32()?;
        let checksum = reader.u64()?;
        let clients_max = match with_limits {
            true => Some(reader.u32()? as usize).filter(|max| *max > 0),
            false => None,
        };
        let count = reader.u32()? as usize;
        if count > body.len() / ROW {
            return Err(CheckpointError::Malformed);
        }
        let mut clients: Vec<(u128, ClientSession)> = Vec::with_capacity(count);
        for _ in 0..count {
            let client = reader.u128()?;
            let session = reader.u64()?;
            let request = reader.u64()?;
            let reply_op = reader.u64()?;
            let len = reader.u32()? as usize;
            let reply = Bytes::copy_from_slice(reader.take(len)?);
            if clients.last().is_some_and(|(last, _)| *last >= client) || reply_op > op {
                return Err(CheckpointError::Malformed);
            }
            clients.push((
                client,
                ClientSession {
                    session,
                    request,
                    reply_op,
                    reply,
                },
            ));
        }
        if reader.at != body.len() {
            return Err(CheckpointError::Malformed);
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

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], CheckpointError> {
        let end = self.at.checked_add(len).ok_or(CheckpointError::Malformed)?;
        let slice = self
            .bytes
            .get(self.at..end)
            .ok_or(CheckpointError::Malformed)?;
        self.at = end;
        Ok(slice)
    }
    fn u32(&mut self) -> Result<u32, CheckpointError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, CheckpointError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn u128(&mut self) -> Result<u128, CheckpointError> {
        Ok(u128::from_le_bytes(self.take(16)?.try_into().unwrap()))
    }
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
        let mut old = MAGIC_WITHOUT_LIMITS.to_le_bytes().to_vec();
        old.extend_from_slice(&(new.len() as u64 - 4).to_le_bytes());
        old.extend_from_slice(&new[12..32]);
        old.extend_from_slice(&new[36..new.len() - 8]);
        let mut hash = Fnv::new();
        hash.write(&old);
        old.extend_from_slice(&hash.finish().to_le_bytes());
        let decoded = Checkpoint::decode(&old).expect("older layout decodes");
        assert_eq!(decoded.clients_max, None);
        assert_eq!(decoded.clients, sample().clients);
        assert_eq!(decoded.op, 9);
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
