//! The metadata group's state machine: decodes a committed metadata op with the generated
//! codec, applies it to [`Metadata`], runs its effects on disk (partition logs opened or
//! deleted) and encodes the reply the client gets (result section, then the payload).

use crate::group::StateMachine;
use crate::metadata::{Effect, Ident};
use crate::node::{PartitionKey, Shared};
use crate::replies;
use crate::session::Session;
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{
    ConsumerGroupIdRequest, CreateConsumerGroupRequest, CreatePartitionsRequest,
    CreateStreamRequest, CreateTopicRequest, DeletePartitionsRequest, SessionRecord,
    StreamIdRequest, TopicIdRequest,
};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::HashSet;
use std::rc::Rc;

/// A metadata op's body as journaled: what the primary decided (time, acting user) and the
/// client's request bytes. `Envelope` is this server's journal format, not a wire type.
pub struct Envelope<'a> {
    pub timestamp: u64,
    pub user_id: u32,
    pub request: &'a [u8],
}

impl<'a> Envelope<'a> {
    pub fn encode(timestamp: u64, user_id: u32, request: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(12 + request.len());
        out.extend_from_slice(&timestamp.to_le_bytes());
        out.extend_from_slice(&user_id.to_le_bytes());
        out.extend_from_slice(request);
        out.into()
    }

    pub fn decode(body: &'a [u8]) -> Option<Envelope<'a>> {
        Some(Envelope {
            timestamp: u64::from_le_bytes(body.get(..8)?.try_into().ok()?),
            user_id: u32::from_le_bytes(body.get(8..12)?.try_into().ok()?),
            request: &body[12..],
        })
    }
}

/// Decodes a wire identifier into a metadata [`Ident`].
pub fn ident(identifier: &iggy_generated::payloads::Identifier<'_>) -> Result<Ident, ErrorCode> {
    match (identifier.kind, identifier.value.len()) {
        (1, 4) => Ok(Ident::Id(u32::from_le_bytes(
            identifier.value.try_into().expect("4 bytes"),
        ))),
        (2, 1..=255) => std::str::from_utf8(identifier.value)
            .map(|name| Ident::Name(name.to_string()))
            .map_err(|_| ErrorCode::InvalidIdentifier),
        _ => Err(ErrorCode::InvalidIdentifier),
    }
}

pub struct MetadataMachine {
    pub shared: Rc<Shared>,
    /// While the journal replays at start: the partition incarnations its committed deletes
    /// removed. No op's disk effect runs during the replay; the directories are reconciled
    /// with the final model once, in [`StateMachine::replayed`].
    replay_deletes: Option<HashSet<(PartitionKey, u64)>>,
    /// While the journal replays at start: the group deletions it holds, in op order. Their
    /// offsets go from the reopened partitions in [`StateMachine::replayed`] (a crash may have
    /// interrupted the deletion; a partition that already applied it ignores it).
    replay_group_deletes: Vec<Effect>,
}

/// Result-framed reply: success with `payload`, or the rejection.
fn framed(result: Result<Vec<u8>, ErrorCode>) -> Bytes {
    match result {
        Ok(payload) => {
            let mut out = replies::RESULT_OK.to_vec();
            out.extend_from_slice(&payload);
            out.into()
        }
        Err(code) => Bytes::copy_from_slice(&replies::result_rejection(code)),
    }
}

fn decode<'a, T: WireDecode<'a>>(bytes: &'a [u8]) -> Result<T, ErrorCode> {
    T::decode_exact(bytes).map_err(|_| ErrorCode::InvalidFormat)
}

impl MetadataMachine {
    /// A machine about to replay its journal (see `replay_deletes`).
    pub fn replaying(shared: Rc<Shared>) -> Self {
        MetadataMachine {
            shared,
            replay_deletes: Some(HashSet::new()),
            replay_group_deletes: Vec::new(),
        }
    }

    /// Applies one op to the state; returns the reply and the effects to run.
    fn apply_op(&self, op: u64, client: u128, operation: u8, body: &[u8]) -> (Bytes, Vec<Effect>) {
        let Some(envelope) = Envelope::decode(body) else {
            return (framed(Err(ErrorCode::InvalidCommand)), Vec::new());
        };
        let Some(operation) = Operation::from_repr(operation) else {
            return (framed(Err(ErrorCode::InvalidCommand)), Vec::new());
        };
        let now = envelope.timestamp;
        let mut metadata = self.shared.metadata.borrow_mut();
        metadata.commit = op;
        let metadata = &mut *metadata;
        let mut effects = Vec::new();
        let request = envelope.request;
        if client == crate::users::SYSTEM_CLIENT {
            metadata.system_requests += 1;
        }
        // Replies use the layouts of the protocol the client logged in with.
        let codec = replies::Codec::of(metadata.sessions.get(client).map_or(0, |s| s.protocol));
        let result: Result<Vec<u8>, ErrorCode> = (|| match operation {
            Operation::Logout => {
                // The node ends an expired session by naming its client in the body.
                let target = match <[u8; 16]>::try_from(request) {
                    Ok(bytes) if client == crate::users::SYSTEM_CLIENT => {
                        u128::from_le_bytes(bytes)
                    }
                    _ => client,
                };
                if metadata.sessions.end(target).is_some() {
                    metadata.leave_all_groups(target);
                }
                // Logout's reply is not result-framed.
                Ok(Vec::new())
            }
            Operation::CreateStream => {
                let request: CreateStreamRequest = decode(request)?;
                crate::options::validate(
                    crate::options::STREAM_OPTIONS,
                    request.options,
                    &[],
                    true,
                )?;
                let id = metadata.create_stream(request.name, now)?;
                Ok(replies::stream_details(
                    &self.shared,
                    &metadata.streams[&id],
                    codec,
                ))
            }
            Operation::DeleteStream => {
                let request: StreamIdRequest = decode(request)?;
                effects = metadata.delete_stream(&ident(&request.stream_id)?)?;
                Ok(Vec::new())
            }
            Operation::CreateTopic => {
                let request: CreateTopicRequest = decode(request)?;
                let settings = replies::topic_settings(request.options)?;
                let stream = ident(&request.stream_id)?;
                let (s, t, opened) = metadata.create_topic(
                    &stream,
                    request.name,
                    request.partitions_count,
                    settings,
                    op,
                    now,
                )?;
                effects = opened;
                let topic = &metadata.streams[&s].topics[&t];
                Ok(replies::topic_details(&self.shared, s, topic, codec))
            }
            Operation::DeleteTopic => {
                let request: TopicIdRequest = decode(request)?;
                effects = metadata
                    .delete_topic(&ident(&request.stream_id)?, &ident(&request.topic_id)?)?;
                Ok(Vec::new())
            }
            Operation::CreatePartitions => {
                let request: CreatePartitionsRequest = decode(request)?;
                let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
                effects = metadata.create_partitions(&s, &t, request.partitions_count, op, now)?;
                Ok(Vec::new())
            }
            Operation::DeletePartitions => {
                let request: DeletePartitionsRequest = decode(request)?;
                let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
                effects = metadata.delete_partitions(&s, &t, request.partitions_count)?;
                Ok(Vec::new())
            }
            Operation::CreateConsumerGroup => {
                let request: CreateConsumerGroupRequest = decode(request)?;
                let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
                let id = metadata.create_group(&s, &t, request.name)?;
                let (_, topic, group) = metadata.group(&s, &t, &Ident::Id(id))?;
                Ok(replies::group_details(&self.shared, topic, group))
            }
            Operation::DeleteConsumerGroup => {
                let request: ConsumerGroupIdRequest = decode(request)?;
                let ids = (
                    ident(&request.stream_id)?,
                    ident(&request.topic_id)?,
                    ident(&request.group_id)?,
                );
                effects = vec![metadata.delete_group(&ids.0, &ids.1, &ids.2, op)?];
                Ok(Vec::new())
            }
            Operation::JoinConsumerGroup => {
                let request: ConsumerGroupIdRequest = decode(request)?;
                let ids = (
                    ident(&request.stream_id)?,
                    ident(&request.topic_id)?,
                    ident(&request.group_id)?,
                );
                metadata.join_group(&ids.0, &ids.1, &ids.2, client)?;
                Ok(Vec::new())
            }
            Operation::LeaveConsumerGroup => {
                let request: ConsumerGroupIdRequest = decode(request)?;
                let ids = (
                    ident(&request.stream_id)?,
                    ident(&request.topic_id)?,
                    ident(&request.group_id)?,
                );
                metadata.leave_group(&ids.0, &ids.1, &ids.2, client)?;
                Ok(Vec::new())
            }
            Operation::DeleteSegments => Ok(Vec::new()),
            // 0.11.1's per-resource updates (204, 304): a name and an options block.
            Operation::UpdateStream => {
                let request: iggy_generated::payloads::UpdateStreamRequest = decode(request)?;
                let stream = ident(&request.stream_id)?;
                metadata.rename_stream(&stream, request.name)?;
                Ok(Vec::new())
            }
            Operation::UpdateTopic => {
                let request: iggy_generated::payloads::UpdateTopicRequest = decode(request)?;
                let (stream, topic) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
                let name = crate::options::encode(&[(
                    "name",
                    crate::options::kind::STRING,
                    request.name.as_bytes(),
                )]);
                let block = crate::options::merge(&name, request.options, &[])?;
                metadata.update_topic(&stream, &topic, &block, &[])?;
                Ok(Vec::new())
            }
            _ => {
                crate::wire_users::apply(metadata, operation, envelope.user_id, request, now, codec)
            }
        })();
        let reply = match operation {
            Operation::Logout | Operation::DeleteSegments => match result {
                Ok(payload) => payload.into(),
                Err(code) => Bytes::copy_from_slice(&replies::result_rejection(code)),
            },
            _ => framed(result),
        };
        (reply, effects)
    }
}

impl StateMachine for MetadataMachine {
    type Read = ();

    async fn apply(&mut self, op: u64, client: u128, operation: u8, body: Bytes) -> Bytes {
        let (reply, effects) = self.apply_op(op, client, operation, &body);
        match &mut self.replay_deletes {
            Some(deletes) => {
                for effect in effects {
                    match effect {
                        Effect::DeletePartition {
                            stream,
                            topic,
                            partition,
                            incarnation,
                        } => {
                            deletes.insert(((stream, topic, partition), incarnation));
                        }
                        Effect::DeleteGroupOffsets { .. } => {
                            self.replay_group_deletes.push(effect);
                        }
                        Effect::OpenPartition { .. } => {}
                    }
                }
            }
            None => {
                for effect in effects {
                    self.shared.run_effect(effect).await;
                }
            }
        }
        reply
    }

    async fn replayed(&mut self) {
        let deletes = self.replay_deletes.take().unwrap_or_default();
        self.shared.reconcile_partitions(&deletes).await;
        for effect in std::mem::take(&mut self.replay_group_deletes) {
            self.shared.run_effect(effect).await;
        }
    }

    fn registered(&mut self, op: u64, client: u128, body: &Bytes) {
        let mut metadata = self.shared.metadata.borrow_mut();
        metadata.commit = op;
        match SessionRecord::decode_fixed(body) {
            Ok(record) => metadata.sessions.register(
                client,
                Session {
                    session: op,
                    user_id: record.user_id,
                    protocol: record.protocol_version,
                    bind_secret: record.bind_secret,
                },
            ),
            Err(_) => tracing::error!("register at op {op} has an undecodable session record"),
        }
    }

    /// A session pushed out of the full client table ends as a logout would.
    fn evicted(&mut self, client: u128) {
        let mut metadata = self.shared.metadata.borrow_mut();
        if metadata.sessions.end(client).is_some() {
            tracing::info!("session of client {client:032x} evicted from the full client table");
            metadata.leave_all_groups(client);
        }
    }

    async fn checkpoint(&mut self) -> std::io::Result<Vec<u8>> {
        // Partition logs keep their own checkpoints; the model is the whole metadata state.
        Ok(crate::metadata_snapshot::encode(
            &self.shared.metadata.borrow(),
        ))
    }

    async fn read(&mut self, _read: ()) {}
}

/// Encodes a session record for a register.
pub fn session_record(user_id: u32, protocol: u32, bind_secret: [u8; 32]) -> Bytes {
    let record = SessionRecord {
        user_id,
        protocol_version: protocol,
        bind_secret,
    };
    let mut out = Vec::with_capacity(SessionRecord::SIZE);
    record.encode_to(&mut out);
    out.into()
}
