//! Reply bodies computed from the model, encoded with the generated codec. Partition figures
//! (sizes, counts, offsets) are runtime state of the partition groups, so they come through
//! [`Figures`]: reads pass the node's live figures, a committed reply passes [`Fresh`] (a
//! resource a committed op just created holds nothing yet), so every replica encodes the same
//! committed reply.

use crate::model::{
    ConsumerGroup, Metadata, ResizePolicy, Stream, Topic, TopicDurability, TopicSettings, User,
};
use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::{
    ConsumerGroupDetailsResponse, ConsumerGroupMemberResponse, ConsumerGroupResponse,
    GetStreamResponse, GetStreamResponseV0111, GetTopicResponse, GetTopicResponseV0111,
    GetTopicsResponse, GetTopicsResponseV0111, LoginRegisterResponse, PartitionContext,
    PartitionResponse, PartitionResponseV0111, ReplyResultEntry, ReplyResultSection,
    StreamResponse, StreamResponseV0111, SyncConsumerGroupResponse, TopicHeader, TopicHeaderV0111,
    UserDetailsResponse, UserDetailsResponseV0111, UserResponse, UserResponseV0111,
};
use iggy_generated::protocol;
use iggy_wire::{WireDecode, WireEncode};

/// A partition's figures as a reply reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionFigures {
    pub messages: u64,
    pub size_bytes: u64,
    pub segments: u32,
    pub next_offset: u64,
}

/// What replies read beyond the model: the partition groups' figures and the connection a
/// session is bound on.
pub trait Figures {
    fn partition(&self, key: (u32, u32, u32)) -> PartitionFigures;
    /// A member's public id: the id of the connection its session was last bound on (what `me`
    /// reports as the client id), 0 when unbound.
    fn member_id(&self, client: u128) -> u32;
}

/// The figures of resources a committed op just created: empty partitions, unbound members.
pub struct Fresh;

impl Figures for Fresh {
    fn partition(&self, _key: (u32, u32, u32)) -> PartitionFigures {
        PartitionFigures::default()
    }
    fn member_id(&self, _client: u128) -> u32 {
        0
    }
}

/// Result section of a successful result-framed reply.
pub const RESULT_OK: [u8; 4] = [0; 4];

/// Result section rejecting the request at index 0.
pub fn result_rejection(code: ErrorCode) -> Vec<u8> {
    (ReplyResultSection {
        results: vec![ReplyResultEntry {
            index: 0,
            result: code.code(),
        }],
    })
    .to_wire_bytes()
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
    (LoginRegisterResponse {
        user_id,
        session,
        server_protocol: protocol::CURRENT.packed(),
        server_version: protocol::RELEASE_VERSION,
    })
    .to_wire_bytes()
}

fn topic_figures(figures: &impl Figures, stream: u32, topic: &Topic) -> (u64, u64) {
    topic.partitions.keys().fold((0, 0), |(size, messages), p| {
        let info = figures.partition((stream, topic.id, *p));
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

fn topic_header_v0111<'a>(
    figures: &impl Figures,
    stream: u32,
    topic: &'a Topic,
) -> TopicHeaderV0111<'a> {
    let head = topic_header(figures, stream, topic);
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

fn stream_header_v0111<'a>(figures: &impl Figures, stream: &'a Stream) -> StreamResponseV0111<'a> {
    stream_header_v0111_for(figures, stream, &|_| true)
}

fn stream_header_v0111_for<'a>(
    figures: &impl Figures,
    stream: &'a Stream,
    visible: &impl Fn(u32) -> bool,
) -> StreamResponseV0111<'a> {
    let head = stream_header_for(figures, stream, visible);
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

fn topic_header<'a>(figures: &impl Figures, stream: u32, topic: &'a Topic) -> TopicHeader<'a> {
    let (size_bytes, messages_count) = topic_figures(figures, stream, topic);
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

fn stream_header<'a>(figures: &impl Figures, stream: &'a Stream) -> StreamResponse<'a> {
    stream_header_for(figures, stream, &|_| true)
}

/// A stream's header counting only the topics `visible` keeps: the count and the sums match
/// the topics a reply lists (the official client checks the count against them).
fn stream_header_for<'a>(
    figures: &impl Figures,
    stream: &'a Stream,
    visible: &impl Fn(u32) -> bool,
) -> StreamResponse<'a> {
    let topics = stream.topics.values().filter(|topic| visible(topic.id));
    let (count, size_bytes, messages_count) =
        topics.fold((0, 0, 0), |(count, size, messages), topic| {
            let (s, m) = topic_figures(figures, stream.id, topic);
            (count + 1, size + s, messages + m)
        });
    StreamResponse {
        id: stream.id,
        created_at: stream.created_at,
        topics_count: count,
        size_bytes,
        messages_count,
        name: &stream.name,
        options: &[],
        derived_options: &PLAINTEXT_STREAM,
    }
}

pub fn stream_details(figures: &impl Figures, stream: &Stream, codec: Codec) -> Vec<u8> {
    stream_details_for(figures, stream, codec, |_| true)
}

/// [`stream_details`] listing and counting only the topics `visible` says the asker may learn
/// of.
pub fn stream_details_for(
    figures: &impl Figures,
    stream: &Stream,
    codec: Codec,
    visible: impl Fn(u32) -> bool,
) -> Vec<u8> {
    let topics = || stream.topics.values().filter(|t| visible(t.id));
    if codec == Codec::V0_11_1 {
        return (GetStreamResponseV0111 {
            stream: stream_header_v0111_for(figures, stream, &visible),
            topics: topics()
                .map(|t| topic_header_v0111(figures, stream.id, t))
                .collect(),
        })
        .to_wire_bytes();
    }
    (GetStreamResponse {
        stream: stream_header_for(figures, stream, &visible),
        topics: topics()
            .map(|t| topic_header(figures, stream.id, t))
            .collect(),
    })
    .to_wire_bytes()
}

pub fn stream_list(metadata: &Metadata, figures: &impl Figures, codec: Codec) -> Vec<u8> {
    let mut out = Vec::new();
    for stream in metadata.streams.values() {
        match codec {
            Codec::Current => stream_header(figures, stream).encode_to(&mut out),
            Codec::V0_11_1 => stream_header_v0111(figures, stream).encode_to(&mut out),
        }
    }
    out
}

pub fn topic_details(figures: &impl Figures, stream: u32, topic: &Topic, codec: Codec) -> Vec<u8> {
    let partitions: Vec<PartitionResponse> = topic
        .partitions
        .values()
        .map(|p| {
            let info = figures.partition((stream, topic.id, p.id));
            PartitionResponse {
                id: p.id,
                created_at: p.created_at,
                // A partition always has its active segment; one not opened yet (just
                // created, `Fresh`, or not yet on this node) has published no figures.
                segments_count: info.segments.max(1),
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
        Codec::Current => (GetTopicResponse {
            topic: topic_header(figures, stream, topic),
            partitions,
        })
        .to_wire_bytes(),
        Codec::V0_11_1 => (GetTopicResponseV0111 {
            topic: topic_header_v0111(figures, stream, topic),
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
        })
        .to_wire_bytes(),
    }
}

pub fn topic_list(
    metadata: &Metadata,
    figures: &impl Figures,
    stream: u32,
    codec: Codec,
) -> Vec<u8> {
    if codec == Codec::V0_11_1 {
        let topics = metadata.streams[&stream]
            .topics
            .values()
            .map(|t| topic_header_v0111(figures, stream, t))
            .collect();
        return (GetTopicsResponseV0111 { topics }).to_wire_bytes();
    }
    let topics = metadata.streams[&stream]
        .topics
        .values()
        .map(|t| topic_header(figures, stream, t))
        .collect();
    (GetTopicsResponse { topics }).to_wire_bytes()
}

fn group_header(topic: &Topic, group: &ConsumerGroup) -> ConsumerGroupResponse<'static> {
    ConsumerGroupResponse {
        id: group.id,
        partitions_count: topic.partitions.len() as u32,
        members_count: group.members.len() as u32,
        name: "",
    }
}

pub fn group_details(figures: &impl Figures, topic: &Topic, group: &ConsumerGroup) -> Vec<u8> {
    let partition_ids = topic.partition_ids();
    let members = group
        .members
        .iter()
        .map(|member| ConsumerGroupMemberResponse {
            id: figures.member_id(*member),
            partitions: group
                .assignment(*member, &partition_ids)
                .unwrap_or_default(),
        })
        .collect();
    let mut head = group_header(topic, group);
    head.name = &group.name;
    (ConsumerGroupDetailsResponse {
        group: head,
        members,
    })
    .to_wire_bytes()
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
        Some(partitions) => (SyncConsumerGroupResponse {
            generation: group.generation,
            partitions,
        })
        .to_wire_bytes(),
        None => Vec::new(),
    }
}

pub fn user_details(metadata: &Metadata, id: u32, codec: Codec) -> Vec<u8> {
    let user = &metadata.users[&id];
    let permissions = if id == crate::model::ROOT_USER_ID {
        Some(crate::permissions::permissions_to_wire(
            &crate::model::Permissions::all(),
        ))
    } else {
        user.permissions
            .as_ref()
            .map(crate::permissions::permissions_to_wire)
    };
    match codec {
        Codec::Current => (UserDetailsResponse {
            user: user_header(user),
            permissions,
        })
        .to_wire_bytes(),
        Codec::V0_11_1 => (UserDetailsResponseV0111 {
            user: user_header_v0111(user),
            permissions,
        })
        .to_wire_bytes(),
    }
}

pub fn user_header_v0111(user: &User) -> UserResponseV0111<'_> {
    UserResponseV0111 {
        id: user.id,
        created_at: user.created_at,
        status: user.status as u8,
        username: &user.username,
        options: &[],
    }
}

pub fn user_header(user: &User) -> UserResponse<'_> {
    UserResponse {
        id: user.id,
        created_at: user.created_at,
        status: user.status as u8,
        username: &user.username,
        options: &[],
        derived_options: &[],
    }
}

/// The reply to a token creation: the committed success with the new token, shown once.
pub fn token_reply(token: &str) -> Vec<u8> {
    let mut out = RESULT_OK.to_vec();
    iggy_generated::payloads::RawPersonalAccessTokenResponse { token }.encode_to(&mut out);
    out
}

/// Topic settings from a create request's options block.
pub fn topic_settings(options: &[u8]) -> Result<TopicSettings, ErrorCode> {
    crate::options::validate(crate::options::TOPIC_OPTIONS, options, &[], true)?;
    let mut settings = TopicSettings {
        options: options.to_vec(),
        ..TopicSettings::default()
    };
    for (key, kind, value) in crate::options::typed_entries(options)? {
        match key {
            "message_expiry" | "max_topic_size" | "segment_size" => {
                let number = crate::options::number(key, kind, value)?;
                match key {
                    "message_expiry" => settings.message_expiry = number,
                    "max_topic_size" => settings.max_topic_size = number,
                    _ => settings.segment_size = number,
                }
            }
            // Recorded and reported (0.11.1's topic head); messages are stored as sent.
            "compression_algorithm" => {
                settings.compression_algorithm = crate::options::compression_algorithm(value)?
            }
            "partition_resize_policy" => settings.resize_policy = ResizePolicy::parse(value)?,
            "durability" => {
                settings.durability = TopicDurability::parse(crate::options::as_str(value)?)
                    .ok_or(ErrorCode::InvalidOptionValue)?
            }
            "consumer_offset_durability" => {
                settings.consumer_offset_durability =
                    TopicDurability::parse(crate::options::as_str(value)?)
                        .ok_or(ErrorCode::InvalidOptionValue)?
            }
            _ => {}
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Ident;
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
        for bad in [&b"zstd"[..], b"gzip2", &2u32.to_le_bytes()] {
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
        let restored = crate::snapshot::decode(&crate::snapshot::encode(&m)).expect("snapshot");
        assert_eq!(restored.streams[&s].topics[&t].compression_algorithm, 2);
    }
}
