//! Reply bodies, each encoded with the generated codec from the node's state.

use crate::metadata::{ConsumerGroup, ResizePolicy, Stream, Topic, TopicDurability, TopicSettings};
use crate::node::{PartitionKey, Shared};
use crate::partition::Polled;
use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::{
    ClusterMetadataResponse, ClusterMetadataResponseV0111, ClusterNodeResponse,
    ClusterNodeResponseV0111, ClusterNodeRole, ClusterNodeStatus, ConsumerGroupDetailsResponse,
    ConsumerGroupMemberResponse, ConsumerGroupResponse, ConsumerOffsetResponse, GetStreamResponse,
    GetStreamResponseV0111, GetTopicResponse, GetTopicResponseV0111, GetTopicsResponse,
    GetTopicsResponseV0111, LoginRegisterResponse, PartitionContext, PartitionResponse,
    PartitionResponseV0111, PartitionRouteResponse, PollPrefix, ReplyResultEntry,
    ReplyResultSection, SendMessagesConfirmationResponse, SendMessagesResponse, StreamResponse,
    StreamResponseV0111, SyncConsumerGroupResponse, TopicHeader, TopicHeaderV0111,
};
use iggy_generated::protocol;
use iggy_storage::StorageError;
use iggy_wire::{WireDecode, WireEncode};

fn encode<T: WireEncode>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.encoded_size());
    value.encode_to(&mut out);
    out
}

/// Result section of a successful result-framed reply.
pub const RESULT_OK: [u8; 4] = [0; 4];

/// Result section rejecting the request at index 0.
pub fn result_rejection(code: ErrorCode) -> Vec<u8> {
    encode(&ReplyResultSection {
        results: vec![ReplyResultEntry {
            index: 0,
            result: code.code(),
        }],
    })
}

/// The rejection a result section carries, if any.
pub fn rejection_of(reply: &[u8]) -> Option<ErrorCode> {
    let mut input = reply;
    let section = ReplyResultSection::decode_from(&mut input).ok()?;
    section
        .results
        .first()
        .map(|entry| ErrorCode::from_code(entry.result).unwrap_or(ErrorCode::Error))
}

pub fn login_response(user_id: u32, session: u64) -> Vec<u8> {
    encode(&LoginRegisterResponse {
        user_id,
        session,
        server_protocol: protocol::CURRENT.packed(),
        server_version: protocol::RELEASE_VERSION,
    })
}

fn topic_figures(shared: &Shared, stream: u32, topic: &Topic) -> (u64, u64) {
    topic.partitions.keys().fold((0, 0), |(size, messages), p| {
        let info = shared.stats((stream, topic.id, *p));
        (size + info.size_bytes, messages + info.messages)
    })
}

/// Which protocol's layouts a reply uses: the version the session logged in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Protocol 0.12.0, what the official SDK speaks.
    Current,
    /// The seed's development protocol 0.11.1.
    V0_11_1,
}

impl Codec {
    pub fn of(protocol: u32) -> Codec {
        if protocol == iggy_generated::protocol::V0_11_1.packed() {
            Codec::V0_11_1
        } else {
            Codec::Current
        }
    }
}

fn topic_header_v0111<'a>(shared: &Shared, stream: u32, topic: &'a Topic) -> TopicHeaderV0111<'a> {
    let head = topic_header(shared, stream, topic);
    TopicHeaderV0111 {
        id: head.id,
        created_at: head.created_at,
        partitions_count: head.partitions_count,
        message_expiry: topic.message_expiry,
        compression_algorithm: topic.compression_algorithm,
        max_topic_size: topic.max_topic_size,
        size_bytes: head.size_bytes,
        messages_count: head.messages_count,
        name: head.name,
        options: head.options,
        derived_options: head.derived_options,
    }
}

fn stream_header_v0111<'a>(shared: &Shared, stream: &'a Stream) -> StreamResponseV0111<'a> {
    let head = stream_header(shared, stream);
    StreamResponseV0111 {
        id: head.id,
        created_at: head.created_at,
        topics_count: head.topics_count,
        size_bytes: head.size_bytes,
        messages_count: head.messages_count,
        name: head.name,
        options: head.options,
    }
}

fn topic_header<'a>(shared: &Shared, stream: u32, topic: &'a Topic) -> TopicHeader<'a> {
    let (size_bytes, messages_count) = topic_figures(shared, stream, topic);
    TopicHeader {
        id: topic.id,
        created_at: topic.created_at,
        partitions_count: topic.partitions.len() as u32,
        size_bytes,
        messages_count,
        name: &topic.name,
        options: &topic.options,
        derived_options: &[],
    }
}

/// Derived options of every stream: stored unencrypted (stream encryption is not built).
static PLAINTEXT_STREAM: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    crate::options::encode(&[(
        "encryption_key_source",
        crate::options::kind::STRING,
        b"none",
    )])
});

fn stream_header<'a>(shared: &Shared, stream: &'a Stream) -> StreamResponse<'a> {
    let (size_bytes, messages_count) =
        stream
            .topics
            .values()
            .fold((0, 0), |(size, messages), topic| {
                let (s, m) = topic_figures(shared, stream.id, topic);
                (size + s, messages + m)
            });
    StreamResponse {
        id: stream.id,
        created_at: stream.created_at,
        topics_count: stream.topics.len() as u32,
        size_bytes,
        messages_count,
        name: &stream.name,
        options: &[],
        derived_options: &PLAINTEXT_STREAM,
    }
}

pub fn stream_details(shared: &Shared, stream: &Stream, codec: Codec) -> Vec<u8> {
    if codec == Codec::V0_11_1 {
        return encode(&GetStreamResponseV0111 {
            stream: stream_header_v0111(shared, stream),
            topics: stream
                .topics
                .values()
                .map(|t| topic_header_v0111(shared, stream.id, t))
                .collect(),
        });
    }
    encode(&GetStreamResponse {
        stream: stream_header(shared, stream),
        topics: stream
            .topics
            .values()
            .map(|t| topic_header(shared, stream.id, t))
            .collect(),
    })
}

pub fn stream_list(shared: &Shared, codec: Codec) -> Vec<u8> {
    let metadata = shared.metadata.borrow();
    let mut out = Vec::new();
    for stream in metadata.streams.values() {
        match codec {
            Codec::Current => stream_header(shared, stream).encode_to(&mut out),
            Codec::V0_11_1 => stream_header_v0111(shared, stream).encode_to(&mut out),
        }
    }
    out
}

pub fn topic_details(shared: &Shared, stream: u32, topic: &Topic, codec: Codec) -> Vec<u8> {
    let partitions: Vec<PartitionResponse> = topic
        .partitions
        .values()
        .map(|p| {
            let info = shared.stats((stream, topic.id, p.id));
            PartitionResponse {
                id: p.id,
                created_at: p.created_at,
                segments_count: info.segments,
                current_offset: info.next_offset.saturating_sub(1),
                size_bytes: info.size_bytes,
                messages_count: info.messages,
                context: PartitionContext {
                    incarnation: p.incarnation,
                    owner_generation: 0,
                    metadata_op: 0,
                },
            }
        })
        .collect();
    match codec {
        Codec::Current => encode(&GetTopicResponse {
            topic: topic_header(shared, stream, topic),
            partitions,
        }),
        Codec::V0_11_1 => encode(&GetTopicResponseV0111 {
            topic: topic_header_v0111(shared, stream, topic),
            // 0.11.1 partitions carry no partition context.
            partitions: partitions
                .iter()
                .map(|p| PartitionResponseV0111 {
                    id: p.id,
                    created_at: p.created_at,
                    segments_count: p.segments_count,
                    current_offset: p.current_offset,
                    size_bytes: p.size_bytes,
                    messages_count: p.messages_count,
                })
                .collect(),
        }),
    }
}

pub fn topic_list(shared: &Shared, stream: u32, codec: Codec) -> Vec<u8> {
    let metadata = shared.metadata.borrow();
    if codec == Codec::V0_11_1 {
        let topics = metadata.streams[&stream]
            .topics
            .values()
            .map(|t| topic_header_v0111(shared, stream, t))
            .collect();
        return encode(&GetTopicsResponseV0111 { topics });
    }
    let topics = metadata.streams[&stream]
        .topics
        .values()
        .map(|t| topic_header(shared, stream, t))
        .collect();
    encode(&GetTopicsResponse { topics })
}

fn group_header(topic: &Topic, group: &ConsumerGroup) -> ConsumerGroupResponse<'static> {
    ConsumerGroupResponse {
        id: group.id,
        partitions_count: topic.partitions.len() as u32,
        members_count: group.members.len() as u32,
        name: "",
    }
}

pub fn group_details(shared: &Shared, topic: &Topic, group: &ConsumerGroup) -> Vec<u8> {
    let partition_ids = topic.partition_ids();
    let members = group
        .members
        .iter()
        .map(|member| ConsumerGroupMemberResponse {
            id: member_id(shared, *member),
            partitions: group
                .assignment(*member, &partition_ids)
                .unwrap_or_default(),
        })
        .collect();
    let mut head = group_header(topic, group);
    head.name = &group.name;
    encode(&ConsumerGroupDetailsResponse {
        group: head,
        members,
    })
}

/// A member's public id: the id of the connection its session was last bound on (what `me`
/// reports as the client id).
fn member_id(shared: &Shared, client: u128) -> u32 {
    shared
        .session_connections
        .borrow()
        .get(&client)
        .copied()
        .unwrap_or(0)
}

pub fn group_list(topic: &Topic) -> Vec<u8> {
    let mut out = Vec::new();
    for group in topic.consumer_groups.values() {
        let mut head = group_header(topic, group);
        head.name = &group.name;
        head.encode_to(&mut out);
    }
    out
}

/// 606: the caller's assignment, or empty when it is not a member.
pub fn group_sync(topic: &Topic, group: &ConsumerGroup, client: u128) -> Vec<u8> {
    match group.assignment(client, &topic.partition_ids()) {
        Some(partitions) => encode(&SyncConsumerGroupResponse {
            generation: group.generation,
            partitions,
        }),
        None => Vec::new(),
    }
}

fn port_of(address: &str) -> u16 {
    address
        .parse::<std::net::SocketAddr>()
        .map_or(0, |a| a.port())
}

/// Encodes a reply that holds this node's roster entry.
fn with_roster_entry(
    shared: &Shared,
    reply: impl FnOnce(ClusterNodeResponse<'_>) -> Vec<u8>,
) -> Vec<u8> {
    let config = &shared.config;
    let served = |t: &crate::config::Transport| if t.enabled { port_of(&t.address) } else { 0 };
    let (name, ip) = (
        format!("iggy-node-{}", shared.replica_id),
        config.advertised_ip(),
    );
    reply(ClusterNodeResponse {
        replica_id: shared.replica_id,
        name: &name,
        ip: &ip,
        tcp_port: served(&config.tcp),
        quic_port: served(&config.quic),
        http_port: served(&config.http),
        websocket_port: served(&config.websocket),
        role: ClusterNodeRole::Leader,
        status: ClusterNodeStatus::Healthy,
    })
}

/// A roster entry in the 0.11.1 layout, which has no replica id.
fn roster_entry_v0111(node: ClusterNodeResponse<'_>) -> ClusterNodeResponseV0111<'_> {
    ClusterNodeResponseV0111 {
        name: node.name,
        ip: node.ip,
        tcp_port: node.tcp_port,
        quic_port: node.quic_port,
        http_port: node.http_port,
        websocket_port: node.websocket_port,
        role: node.role,
        status: node.status,
    }
}

/// 103 and 123 (0.11.1): the caller's session and the primary, which is this node.
pub fn poll_routing(
    shared: &Shared,
    consumer_session: iggy_generated::payloads::SessionIdentity,
) -> Vec<u8> {
    with_roster_entry(shared, |node| {
        encode(&iggy_generated::payloads::PollRoutingResponse {
            consumer_session,
            primary: roster_entry_v0111(node),
        })
    })
}

pub fn cluster_metadata(shared: &Shared, codec: Codec) -> Vec<u8> {
    with_roster_entry(shared, |node| match codec {
        Codec::Current => encode(&ClusterMetadataResponse {
            name: "iggy-cluster",
            nodes: vec![node],
        }),
        Codec::V0_11_1 => encode(&ClusterMetadataResponseV0111 {
            name: "iggy-cluster",
            nodes: vec![roster_entry_v0111(node)],
        }),
    })
}

pub fn partition_route(shared: &Shared, key: PartitionKey) -> Vec<u8> {
    let metadata = shared.metadata.borrow();
    let topic = &metadata.streams[&key.0].topics[&key.1];
    PartitionRouteResponse {
        incarnation: topic.partitions[&key.2].incarnation,
        metadata_op: metadata.commit,
        view: 0,
        partitions_count: topic.partitions.len() as u32,
        primary_replica: shared.replica_id,
    }
    .to_bytes()
    .to_vec()
}

pub fn send_confirmation(key: PartitionKey, base_offset: u64) -> Vec<u8> {
    let confirmation = SendMessagesConfirmationResponse {
        stream_id: key.0,
        topic_id: key.1,
        partition_id: key.2,
        base_offset,
    };
    encode(&SendMessagesResponse {
        confirmations: vec![confirmation],
    })
}

pub fn consumer_offset(partition_id: u32, current_offset: u64, stored_offset: u64) -> Vec<u8> {
    ConsumerOffsetResponse {
        partition_id,
        current_offset,
        stored_offset,
    }
    .to_bytes()
    .to_vec()
}

/// 100: the prefix, then the stored batch records as read.
/// Fills the poll prefix in the headroom of `polled` and returns the buffer, whose first
/// `ReplyHeader::SIZE` bytes are left for the reply header.
pub fn polled(partition_id: u32, polled: Polled, context: PartitionContext) -> Vec<u8> {
    let prefix = PollPrefix {
        partition_id,
        current_offset: polled.current_offset,
        messages_count: polled.batches.messages,
        context,
    };
    let mut frame = polled.batches.bytes;
    let at = iggy_generated::frames::ReplyHeader::SIZE;
    prefix.encode_fixed(&mut frame[at..at + PollPrefix::SIZE]);
    frame
}

/// The error a client gets for a batch that fails admission.
pub fn batch_error(error: StorageError) -> ErrorCode {
    match error {
        StorageError::ChecksumMismatch("message checksum") => ErrorCode::InvalidMessageChecksum,
        StorageError::ChecksumMismatch(_) => ErrorCode::InvalidBatchChecksum,
        _ => ErrorCode::InvalidMessagesSize,
    }
}

/// Topic settings from a create request's options block.
pub fn topic_settings(options: &[u8]) -> Result<TopicSettings, ErrorCode> {
    crate::options::validate(crate::options::TOPIC_OPTIONS, options, &[], true)?;
    let mut settings = TopicSettings {
        options: options.to_vec(),
        ..TopicSettings::default()
    };
    for (key, value) in crate::options::entries(options)? {
        match key {
            "message_expiry" => settings.message_expiry = crate::options::as_u64(value)?,
            "max_topic_size" => settings.max_topic_size = crate::options::as_u64(value)?,
            // Recorded and reported (0.11.1's topic head); messages are stored as sent.
            "compression_algorithm" => {
                settings.compression_algorithm = crate::options::compression_algorithm(value)?
            }
            "partition_resize_policy" => {
                settings.resize_policy = match crate::options::as_str(value)? {
                    "fixed" => ResizePolicy::Fixed,
                    "mutable" | "dynamic" => ResizePolicy::Dynamic,
                    _ => return Err(ErrorCode::InvalidOptionValue),
                }
            }
            "durability" => {
                settings.durability = TopicDurability::parse(crate::options::as_str(value)?)
                    .ok_or(ErrorCode::InvalidOptionValue)?
            }
            "consumer_offset_durability" => {
                settings.consumer_offset_durability =
                    TopicDurability::parse(crate::options::as_str(value)?)
                        .ok_or(ErrorCode::InvalidOptionValue)?
            }
            "segment_size" => settings.segment_size = crate::options::as_u64(value)?,
            _ => {}
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Ident, Metadata};
    use crate::options::{encode, kind};

    #[test]
    fn a_topic_created_with_gzip_keeps_compression_algorithm_2() {
        let block = |value: &[u8]| encode(&[("compression_algorithm", kind::STRING, value)]);
        assert_eq!(topic_settings(&[]).unwrap().compression_algorithm, 1);
        assert_eq!(
            topic_settings(&block(b"none"))
                .unwrap()
                .compression_algorithm,
            1
        );
        for bad in [&b"zstd"[..], b"GZIP", &2u32.to_le_bytes()] {
            assert_eq!(
                topic_settings(&block(bad)).map(|s| s.compression_algorithm),
                Err(ErrorCode::InvalidOptionValue),
                "{bad:?}"
            );
        }

        let gzip = block(b"gzip");
        let settings = topic_settings(&gzip).unwrap();
        assert_eq!(settings.compression_algorithm, 2);
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        let (s, t, _) = m
            .create_topic(&Ident::Id(0), "zipped", 1, settings, 2, 1)
            .unwrap();
        let topic = &m.streams[&s].topics[&t];
        // What the 0.11.1 topic head reports (`topic_header_v0111`) and the snapshot keeps.
        assert_eq!(topic.compression_algorithm, 2);
        assert_eq!(topic.options, gzip, "the block is still reported as sent");
        let restored = crate::metadata_snapshot::decode(&crate::metadata_snapshot::encode(&m))
            .expect("snapshot");
        assert_eq!(restored.streams[&s].topics[&t].compression_algorithm, 2);
    }
}
