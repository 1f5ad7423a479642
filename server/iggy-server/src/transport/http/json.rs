//! The JSON shapes of the HTTP API, as the official client (`iggy =0.11.1-edge.2`) serializes
//! and deserializes them, and their conversion from the generated binary replies.

use base64ct::{Base64, Encoding};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
use iggy_generated::payloads as wire;
use iggy_storage::batch::{HeaderFault, check_user_headers, for_each_user_header};
use iggy_wire::WireEncode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An option entry of a stream, topic or user: its value as text, its kind, its provenance.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct OptionValue {
    pub value: String,
    pub kind: &'static str,
    pub explicit: bool,
}

pub type Options = BTreeMap<String, OptionValue>;

/// The user-header kind names (snake_case), by wire value kind.
const KINDS: [&str; 16] = [
    "", "raw", "string", "bool", "int8", "int16", "int32", "int64", "int128", "uint8", "uint16",
    "uint32", "uint64", "uint128", "float32", "float64",
];

/// The wire code of a user-header kind name (`"uint64"` → 12).
fn kind_code(name: &str) -> Option<u8> {
    KINDS
        .iter()
        .position(|k| !k.is_empty() && *k == name)
        .map(|code| code as u8)
}

/// Why a send's list of typed user headers was refused: JSON that does not say what they are,
/// or headers the official client would not map back (`iggy_storage::batch::check_user_headers`).
#[derive(Debug, PartialEq)]
pub enum HeadersRefused {
    Json(String),
    Unreadable(HeaderFault),
}

/// The binary user headers of a send from the official client's structured list: entries
/// `{"key":{"kind","value"},"value":{"kind","value"}}` with base64 values, each written as the
/// key kind, u32 length, key, value kind, u32 length, value.
pub fn user_headers(entries: &[serde_json::Value]) -> Result<Vec<u8>, HeadersRefused> {
    let field = |entry: &serde_json::Value, name: &str| -> Result<(u8, Vec<u8>), String> {
        let field = entry
            .get(name)
            .ok_or_else(|| format!("a user header needs `{name}`"))?;
        let kind = field
            .get("kind")
            .and_then(|k| k.as_str())
            .and_then(kind_code)
            .ok_or_else(|| format!("user header `{name}` has no known kind"))?;
        let value = field
            .get("value")
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("user header `{name}` needs a base64 value"))?;
        let value =
            Base64::decode_vec(value).map_err(|_| format!("user header `{name}` is not base64"))?;
        Ok((kind, value))
    };
    let mut out = Vec::new();
    for entry in entries {
        let (key_kind, key) = field(entry, "key").map_err(HeadersRefused::Json)?;
        let (value_kind, value) = field(entry, "value").map_err(HeadersRefused::Json)?;
        wire::OptionEntry {
            key_kind,
            key: &key,
            value_kind,
            value: &value,
        }
        .encode_to(&mut out);
    }
    check_user_headers(&out).map_err(HeadersRefused::Unreadable)?;
    Ok(out)
}

/// The reversible text of an option value of `kind`.
fn option_text(kind: u8, value: &[u8]) -> Option<String> {
    fn int<const N: usize>(value: &[u8]) -> Option<[u8; N]> {
        value.try_into().ok()
    }
    Some(match kind {
        1 => Base64::encode_string(value),
        2 => std::str::from_utf8(value).ok()?.to_string(),
        3 => match value {
            [0] => "false".into(),
            [1] => "true".into(),
            _ => return None,
        },
        4 => i8::from_le_bytes(int(value)?).to_string(),
        5 => i16::from_le_bytes(int(value)?).to_string(),
        6 => i32::from_le_bytes(int(value)?).to_string(),
        7 => i64::from_le_bytes(int(value)?).to_string(),
        8 => i128::from_le_bytes(int(value)?).to_string(),
        9 => u8::from_le_bytes(int(value)?).to_string(),
        10 => u16::from_le_bytes(int(value)?).to_string(),
        11 => u32::from_le_bytes(int(value)?).to_string(),
        12 => u64::from_le_bytes(int(value)?).to_string(),
        13 => u128::from_le_bytes(int(value)?).to_string(),
        14 => format!("0x{:08x}", u32::from_le_bytes(int(value)?)),
        15 => format!("0x{:016x}", u64::from_le_bytes(int(value)?)),
        _ => return None,
    })
}

/// The options map of a resource from its explicit and derived option blocks.
pub fn options(explicit: &[u8], derived: &[u8]) -> Options {
    let mut out = Options::new();
    for (block, is_explicit) in [(derived, false), (explicit, true)] {
        for (key, kind, value) in iggy_metadata::options::typed_entries(block).unwrap_or_default() {
            let Some(text) = option_text(kind, value) else {
                continue;
            };
            let kind = KINDS.get(kind as usize).copied().unwrap_or("raw");
            out.insert(
                key.to_string(),
                OptionValue {
                    value: text,
                    kind,
                    explicit: is_explicit,
                },
            );
        }
    }
    out
}

/// The number an options block gives `key`, else 0.
fn option_number(block: &[u8], key: &str) -> u64 {
    iggy_metadata::options::typed_entries(block)
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _, _)| *k == key)
        .and_then(|(k, kind, value)| iggy_metadata::options::number(k, kind, value).ok())
        .unwrap_or(0)
}

/// The text an options block gives `key`.
fn option_string(block: &[u8], key: &str) -> Option<String> {
    iggy_metadata::options::typed_entries(block)
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _, _)| *k == key)
        .and_then(|(_, _, value)| iggy_metadata::options::as_str(value).ok())
        .map(str::to_string)
}

/// An option the request gave that the catalog refuses, with the key it names.
#[derive(Debug, PartialEq, Eq)]
pub struct OptionRefused {
    pub error: ErrorCode,
    pub key: String,
}

/// An options block from a flat JSON map (`{key: bool | integer | string}`); integers take the
/// kind the option catalog gives the key (u64 otherwise). Each entry is checked against the
/// catalog as a `create` (else an update) checks it, so a refusal names its key; the
/// committed op checks the whole block again.
pub fn options_block(
    input: &serde_json::Map<String, serde_json::Value>,
    catalog: &[iggy_metadata::options::OptionSpec],
    create: bool,
) -> Result<Vec<u8>, OptionRefused> {
    let mut block = Vec::new();
    for (key, value) in input {
        let refused = |error| OptionRefused {
            error,
            key: key.clone(),
        };
        let (kind, bytes) = option_value(catalog, key, value).map_err(refused)?;
        let one = iggy_metadata::options::encode(&[(key.as_str(), kind, bytes.as_slice())]);
        // Text for a typed option (`"preallocate_segments": "true"`) as its kind's value.
        let one = iggy_metadata::options::canonical(catalog, &one).unwrap_or(one);
        iggy_metadata::options::validate(catalog, &one, &[], create).map_err(refused)?;
        block.extend(one);
    }
    Ok(block)
}

/// One JSON option value as its wire kind and bytes.
fn option_value(
    catalog: &[iggy_metadata::options::OptionSpec],
    key: &str,
    value: &serde_json::Value,
) -> Result<(u8, Vec<u8>), ErrorCode> {
    use iggy_metadata::options::kind;
    let declared = catalog.iter().find(|o| o.key == key).map(|o| o.kind);
    let number: u64 = match value {
        serde_json::Value::Bool(b) => return Ok((kind::BOOL, vec![*b as u8])),
        serde_json::Value::Number(n) => n.as_u64().ok_or(ErrorCode::InvalidOptionValue)?,
        // A number may travel as decimal text (above 2^53 the official client sends it so).
        serde_json::Value::String(s)
            if matches!(declared, Some(kind::UINT64 | kind::UINT32))
                && s.bytes().all(|b| b.is_ascii_digit())
                && !s.is_empty() =>
        {
            s.parse().map_err(|_| ErrorCode::InvalidOptionValue)?
        }
        serde_json::Value::String(s) => return Ok((kind::STRING, s.as_bytes().to_vec())),
        _ => return Err(ErrorCode::InvalidOptionValue),
    };
    Ok(match declared {
        Some(kind::UINT32) => (
            kind::UINT32,
            u32::try_from(number)
                .map_err(|_| ErrorCode::InvalidOptionValue)?
                .to_le_bytes()
                .to_vec(),
        ),
        _ => (kind::UINT64, number.to_le_bytes().to_vec()),
    })
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Clone, Copy, Default)]
pub struct PartitionContext {
    pub incarnation: u64,
    pub owner_generation: u64,
    pub metadata_op: u64,
}

impl From<wire::PartitionContext> for PartitionContext {
    fn from(c: wire::PartitionContext) -> Self {
        Self {
            incarnation: c.incarnation,
            owner_generation: c.owner_generation,
            metadata_op: c.metadata_op,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Stream {
    pub id: u32,
    pub created_at: u64,
    pub name: String,
    pub size: u64,
    pub messages_count: u64,
    pub topics_count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<Topic>>,
    pub options: Options,
}

impl Stream {
    pub fn of(s: &wire::StreamResponse<'_>, topics: Option<&[wire::TopicHeader<'_>]>) -> Self {
        Self {
            id: s.id,
            created_at: s.created_at,
            name: s.name.to_string(),
            size: s.size_bytes,
            messages_count: s.messages_count,
            topics_count: s.topics_count,
            topics: topics.map(|t| t.iter().map(|t| Topic::of(t, None)).collect()),
            options: options(s.options, s.derived_options),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Topic {
    pub id: u32,
    pub created_at: u64,
    pub name: String,
    pub size: u64,
    pub messages_count: u64,
    pub partitions_count: u32,
    /// Protocol 0.11's typed settings beside `options`: a 0.11 client (apache-iggy 0.9.0, the
    /// Python SDK) refuses a topic without them ("Invalid JSON response"), and 0.12.0 clients
    /// read `options` and ignore them. The values the metadata model keeps: the explicit
    /// option, else 0 (the server default) and "none".
    pub message_expiry: u64,
    pub compression_algorithm: String,
    pub max_topic_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<Partition>>,
    pub options: Options,
}

impl Topic {
    pub fn of(t: &wire::TopicHeader<'_>, partitions: Option<&[wire::PartitionResponse]>) -> Self {
        Self {
            id: t.id,
            created_at: t.created_at,
            name: t.name.to_string(),
            size: t.size_bytes,
            messages_count: t.messages_count,
            partitions_count: t.partitions_count,
            message_expiry: option_number(t.options, "message_expiry"),
            compression_algorithm: option_string(t.options, "compression_algorithm")
                .unwrap_or_else(|| "none".to_string()),
            max_topic_size: option_number(t.options, "max_topic_size"),
            partitions: partitions.map(|p| p.iter().map(Partition::of).collect()),
            options: options(t.options, t.derived_options),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Partition {
    pub id: u32,
    pub created_at: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub size: u64,
    pub messages_count: u64,
    pub context: PartitionContext,
}

impl Partition {
    fn of(p: &wire::PartitionResponse) -> Self {
        Self {
            id: p.id,
            created_at: p.created_at,
            segments_count: p.segments_count,
            current_offset: p.current_offset,
            size: p.size_bytes,
            messages_count: p.messages_count,
            context: p.context.into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ConsumerGroup {
    pub id: u32,
    pub name: String,
    pub partitions_count: u32,
    pub members_count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<ConsumerGroupMember>>,
}

#[derive(Debug, Serialize)]
pub struct ConsumerGroupMember {
    pub id: u32,
    pub partitions_count: u32,
    pub partitions: Vec<u32>,
}

impl ConsumerGroup {
    pub fn of(
        g: &wire::ConsumerGroupResponse<'_>,
        members: Option<&[wire::ConsumerGroupMemberResponse]>,
    ) -> Self {
        Self {
            id: g.id,
            name: g.name.to_string(),
            partitions_count: g.partitions_count,
            members_count: g.members_count,
            members: members.map(|m| {
                m.iter()
                    .map(|m| ConsumerGroupMember {
                        id: m.id,
                        partitions_count: m.partitions.len() as u32,
                        partitions: m.partitions.clone(),
                    })
                    .collect()
            }),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PolledMessages {
    pub context: PartitionContext,
    pub partition_id: u32,
    pub current_offset: u64,
    pub count: u32,
    pub messages: Vec<Message>,
}

#[derive(Debug, Serialize)]
pub struct Message {
    pub header: MessageHeader,
    pub payload: String,
    pub user_headers: UserHeaders,
}

/// A message's user headers as the official type writes them: a list of typed entries when
/// they map to typed headers, else (an encrypting client's blob) the raw bytes as base64 text;
/// none as an empty list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum UserHeaders {
    Typed(Vec<HeaderEntry>),
    Raw(String),
    None([u8; 0]),
}

/// One typed user header: its key and its value.
#[derive(Debug, Serialize, PartialEq)]
pub struct HeaderEntry {
    pub key: HeaderFieldJson,
    pub value: HeaderFieldJson,
}

/// A key or a value: its kind's name and its bytes in base64.
#[derive(Debug, Serialize, PartialEq)]
pub struct HeaderFieldJson {
    pub kind: &'static str,
    pub value: String,
}

impl UserHeaders {
    /// `headers` (a message's stored user headers) as a poll reply carries them.
    pub fn of(headers: &[u8]) -> UserHeaders {
        if headers.is_empty() {
            return UserHeaders::None([]);
        }
        let json = |field: wire::HeaderField<'_>| HeaderFieldJson {
            kind: KINDS[usize::from(field.kind)],
            value: Base64::encode_string(field.value),
        };
        let mut entries = Vec::new();
        let walked = for_each_user_header(headers, |key, value| {
            entries.push(HeaderEntry {
                key: json(key),
                value: json(value),
            })
        });
        match walked {
            Ok(()) => UserHeaders::Typed(entries),
            Err(_) => UserHeaders::Raw(Base64::encode_string(headers)),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MessageHeader {
    pub checksum: u64,
    pub id: u128,
    pub offset: u64,
    pub timestamp: u64,
    pub origin_timestamp: u64,
    pub user_headers_length: u32,
    pub payload_length: u32,
    pub reserved: u64,
}

/// The messages of a poll reply's batches.
pub fn polled(reply: &wire::PollMessagesResponse<'_>) -> Result<PolledMessages, ErrorCode> {
    let mut messages = Vec::new();
    let mut batches = reply.batches;
    while !batches.is_empty() {
        let header = BatchHeader::decode_fixed(batches).map_err(|_| ErrorCode::InvalidFormat)?;
        let len = header.batch_length as usize;
        if len < BatchHeader::SIZE || len > batches.len() {
            return Err(ErrorCode::InvalidFormat);
        }
        let mut frames = &batches[BatchHeader::SIZE..len];
        for _ in 0..header.message_count {
            let frame =
                MessageFrameHeader::decode_fixed(frames).map_err(|_| ErrorCode::InvalidFormat)?;
            let payload_end = MessageFrameHeader::SIZE + frame.payload_length as usize;
            let end = payload_end + frame.user_headers_length as usize;
            if end > frames.len() {
                return Err(ErrorCode::InvalidFormat);
            }
            let headers = &frames[payload_end..end];
            messages.push(Message {
                header: MessageHeader {
                    checksum: frame.checksum,
                    id: frame.id,
                    offset: header.base_offset + frame.offset_delta as u64,
                    // Arrival is stamped once per batch; a message's delta is from the
                    // batch's origin to its own (how the official client reads a batch).
                    timestamp: header.base_timestamp,
                    origin_timestamp: header.origin_timestamp + frame.timestamp_delta as u64,
                    user_headers_length: frame.user_headers_length,
                    payload_length: frame.payload_length,
                    reserved: 0,
                },
                payload: Base64::encode_string(&frames[MessageFrameHeader::SIZE..payload_end]),
                user_headers: UserHeaders::of(headers),
            });
            frames = &frames[end..];
        }
        batches = &batches[len..];
    }
    Ok(PolledMessages {
        context: reply.prefix.context.into(),
        partition_id: reply.prefix.partition_id,
        current_offset: reply.prefix.current_offset,
        count: messages.len() as u32,
        messages,
    })
}

/// A message of a send body.
pub struct OutgoingMessage {
    pub id: u128,
    pub payload: Vec<u8>,
    pub user_headers: Vec<u8>,
}

/// A random UUIDv4 as a u128 (what the official binary client puts in place of a zero id).
fn uuid_v4() -> u128 {
    let random: u128 = rand::random();
    let versioned = (random & !(0xf << 76)) | (0x4 << 76);
    (versioned & !(0x3 << 62)) | (0x2 << 62)
}

/// The batch record of a send: header (server fields zero) and message frames with their
/// checksums, as a client builds it. A zero id becomes a random UUIDv4, as the official binary
/// client does before it checksums a message, so a message sent over HTTP without an id gets one.
pub fn batch(messages: &[OutgoingMessage], origin_timestamp: u64) -> Vec<u8> {
    let mut out = vec![0u8; BatchHeader::SIZE];
    for (index, message) in messages.iter().enumerate() {
        let start = out.len();
        let frame = MessageFrameHeader {
            checksum: 0,
            id: match message.id {
                0 => uuid_v4(),
                id => id,
            },
            offset_delta: index as u32,
            timestamp_delta: 0,
            user_headers_length: message.user_headers.len() as u32,
            payload_length: message.payload.len() as u32,
        };
        out.extend_from_slice(&frame.to_bytes());
        out.extend_from_slice(&message.payload);
        out.extend_from_slice(&message.user_headers);
        let checksum = twox_hash::XxHash3_64::oneshot(&out[start + 8..]);
        out[start..start + 8].copy_from_slice(&checksum.to_le_bytes());
    }
    let header = BatchHeader {
        origin_timestamp,
        batch_length: out.len() as u64,
        message_count: messages.len() as u32,
        ..Default::default()
    };
    out[..BatchHeader::SIZE].copy_from_slice(&header.to_bytes());
    let checksum = iggy_storage::batch::compute_checksum(&out);
    out[BatchHeader::BATCH_CHECKSUM_OFFSET..BatchHeader::BATCH_CHECKSUM_OFFSET + 8]
        .copy_from_slice(&checksum.to_le_bytes());
    out
}

#[derive(Debug, Serialize, Deserialize, Clone, Default, PartialEq)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Debug, Serialize, Deserialize, Clone, Default, PartialEq)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: Option<BTreeMap<u32, TopicPermissions>>,
}

#[derive(Debug, Serialize, Deserialize, Clone, Default, PartialEq)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Debug, Serialize, Deserialize, Clone, Default, PartialEq)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: Option<BTreeMap<u32, StreamPermissions>>,
}

impl Permissions {
    pub fn of(p: &wire::WirePermissions) -> Self {
        let g = &p.global;
        let streams: BTreeMap<u32, StreamPermissions> = p
            .streams
            .iter()
            .map(|s| {
                let topics: BTreeMap<u32, TopicPermissions> = s
                    .topics
                    .iter()
                    .map(|t| {
                        (
                            t.topic_id,
                            TopicPermissions {
                                manage_topic: t.manage_topic,
                                read_topic: t.read_topic,
                                poll_messages: t.poll_messages,
                                send_messages: t.send_messages,
                            },
                        )
                    })
                    .collect();
                (
                    s.stream_id,
                    StreamPermissions {
                        manage_stream: s.manage_stream,
                        read_stream: s.read_stream,
                        manage_topics: s.manage_topics,
                        read_topics: s.read_topics,
                        poll_messages: s.poll_messages,
                        send_messages: s.send_messages,
                        topics: (!topics.is_empty()).then_some(topics),
                    },
                )
            })
            .collect();
        Self {
            global: GlobalPermissions {
                manage_servers: g.manage_servers,
                read_servers: g.read_servers,
                manage_users: g.manage_users,
                read_users: g.read_users,
                manage_streams: g.manage_streams,
                read_streams: g.read_streams,
                manage_topics: g.manage_topics,
                read_topics: g.read_topics,
                poll_messages: g.poll_messages,
                send_messages: g.send_messages,
            },
            streams: (!streams.is_empty()).then_some(streams),
        }
    }

    pub fn to_wire(&self) -> wire::WirePermissions {
        let g = &self.global;
        wire::WirePermissions {
            global: wire::WireGlobalPermissions {
                manage_servers: g.manage_servers,
                read_servers: g.read_servers,
                manage_users: g.manage_users,
                read_users: g.read_users,
                manage_streams: g.manage_streams,
                read_streams: g.read_streams,
                manage_topics: g.manage_topics,
                read_topics: g.read_topics,
                poll_messages: g.poll_messages,
                send_messages: g.send_messages,
            },
            streams: self
                .streams
                .iter()
                .flatten()
                .map(|(id, s)| wire::WireStreamPermissions {
                    stream_id: *id,
                    manage_stream: s.manage_stream,
                    read_stream: s.read_stream,
                    manage_topics: s.manage_topics,
                    read_topics: s.read_topics,
                    poll_messages: s.poll_messages,
                    send_messages: s.send_messages,
                    topics: s
                        .topics
                        .iter()
                        .flatten()
                        .map(|(id, t)| wire::WireTopicPermissions {
                            topic_id: *id,
                            manage_topic: t.manage_topic,
                            read_topic: t.read_topic,
                            poll_messages: t.poll_messages,
                            send_messages: t.send_messages,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct User {
    pub id: u32,
    pub created_at: u64,
    pub status: &'static str,
    pub username: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Option<Permissions>>,
    pub options: Options,
}

impl User {
    pub fn of(u: &wire::UserResponse<'_>, permissions: Option<Option<Permissions>>) -> Self {
        Self {
            id: u.id,
            created_at: u.created_at,
            status: if u.status == 1 { "active" } else { "inactive" },
            username: u.username.to_string(),
            permissions,
            options: options(u.options, u.derived_options),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Stats {
    pub process_id: u32,
    pub cpu_usage: f32,
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    pub run_time: u64,
    pub start_time: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub messages_size_bytes: u64,
    pub streams_count: u32,
    pub topics_count: u32,
    pub partitions_count: u32,
    pub segments_count: u32,
    pub messages_count: u64,
    pub clients_count: u32,
    pub consumer_groups_count: u32,
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub iggy_server_version: String,
    pub iggy_server_semver: Option<u32>,
    /// Keyed `"<stream>-<topic>-<partition>"`.
    pub cache_metrics: BTreeMap<String, CacheMetrics>,
    pub threads_count: u32,
    pub free_disk_space: u64,
    pub total_disk_space: u64,
    pub open_files_count: u64,
    pub open_files_limit: u64,
}

#[derive(Debug, Serialize)]
pub struct CacheMetrics {
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f32,
}

impl Stats {
    pub fn of(s: &wire::StatsResponse<'_>) -> Self {
        Self {
            process_id: s.process_id,
            cpu_usage: f32::from_bits(s.cpu_usage),
            total_cpu_usage: f32::from_bits(s.total_cpu_usage),
            memory_usage: s.memory_usage,
            total_memory: s.total_memory,
            available_memory: s.available_memory,
            run_time: s.run_time,
            start_time: s.start_time,
            read_bytes: s.read_bytes,
            written_bytes: s.written_bytes,
            messages_size_bytes: s.messages_size_bytes,
            streams_count: s.streams_count,
            topics_count: s.topics_count,
            partitions_count: s.partitions_count,
            segments_count: s.segments_count,
            messages_count: s.messages_count,
            clients_count: s.clients_count,
            consumer_groups_count: s.consumer_groups_count,
            hostname: s.hostname.to_string(),
            os_name: s.os_name.to_string(),
            os_version: s.os_version.to_string(),
            kernel_version: s.kernel_version.to_string(),
            iggy_server_version: s.iggy_server_version.to_string(),
            iggy_server_semver: (s.iggy_server_semver != 0).then_some(s.iggy_server_semver),
            cache_metrics: s
                .cache_metrics
                .iter()
                .map(|m| {
                    (
                        format!("{}-{}-{}", m.stream_id, m.topic_id, m.partition_id),
                        CacheMetrics {
                            hits: m.hits,
                            misses: m.misses,
                            hit_ratio: f32::from_bits(m.hit_ratio),
                        },
                    )
                })
                .collect(),
            threads_count: s.threads_count,
            free_disk_space: s.free_disk_space,
            total_disk_space: s.total_disk_space,
            open_files_count: s.open_files_count,
            open_files_limit: s.open_files_limit,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Client {
    pub client_id: u32,
    pub user_id: Option<u32>,
    pub address: String,
    pub transport: &'static str,
    pub consumer_groups_count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_groups: Option<Vec<ConsumerGroupInfo>>,
}

#[derive(Debug, Serialize)]
pub struct ConsumerGroupInfo {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

impl Client {
    pub fn of(
        c: &wire::ClientResponse<'_>,
        groups: Option<&[wire::ConsumerGroupInfoResponse]>,
    ) -> Self {
        Self {
            client_id: c.client_id,
            user_id: (c.user_id != u32::MAX).then_some(c.user_id),
            address: c.address.to_string(),
            // Upstream's HTTP API names transports as the official `TransportProtocol` prints
            // them (WebSocket is "ws"); the SDK's HTTP model takes any string, and its binary
            // client turns the number into "TCP", "QUIC", "HTTP" or "WebSocket" itself.
            transport: match c.transport {
                1 => "tcp",
                2 => "quic",
                3 => "http",
                4 => "ws",
                _ => "unknown",
            },
            consumer_groups_count: c.consumer_groups_count,
            consumer_groups: groups.map(|g| {
                g.iter()
                    .map(|g| ConsumerGroupInfo {
                        stream_id: g.stream_id,
                        topic_id: g.topic_id,
                        group_id: g.group_id,
                    })
                    .collect()
            }),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct OptionSpec {
    pub key: String,
    pub kind: &'static str,
    pub updatable: bool,
    pub resettable: bool,
    pub secret: bool,
    pub read_only: bool,
    pub critical: bool,
    pub default_value: Vec<u8>,
    pub description: String,
}

impl OptionSpec {
    pub fn of(o: &wire::OptionDescriptor<'_>) -> Self {
        let flag = |bit: u8| o.flags & (1 << bit) != 0;
        Self {
            key: o.key.to_string(),
            kind: KINDS.get(o.kind as usize).copied().unwrap_or("raw"),
            updatable: flag(0),
            resettable: flag(1),
            secret: flag(2),
            read_only: flag(3),
            critical: flag(4),
            default_value: o.default_value.to_vec(),
            description: o.description.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll writes headers that map to typed ones as the list a send takes (the official
    /// type's form), and other bytes (an encrypting client's blob) as base64 text.
    #[test]
    fn polled_headers_are_typed_entries_when_they_map_and_raw_text_else() {
        let entries = serde_json::json!([
            {"key": {"kind": "string", "value": "dHJhY2U="}, "value": {"kind": "uint64", "value": "BwAAAAAAAAA="}},
            {"key": {"kind": "raw", "value": "/w=="}, "value": {"kind": "bool", "value": "AQ=="}},
        ]);
        let bytes = user_headers(entries.as_array().unwrap()).unwrap();
        let polled = serde_json::to_value(UserHeaders::of(&bytes)).unwrap();
        assert_eq!(polled, entries);
        let opaque = [0xA5u8; 30];
        let polled = serde_json::to_value(UserHeaders::of(&opaque)).unwrap();
        assert_eq!(polled, serde_json::json!(Base64::encode_string(&opaque)));
        let cut = &bytes[..bytes.len() - 1];
        assert!(matches!(UserHeaders::of(cut), UserHeaders::Raw(_)));
        assert_eq!(
            serde_json::to_value(UserHeaders::of(&[])).unwrap(),
            serde_json::json!([])
        );
    }

    #[test]
    fn user_headers_the_official_client_cannot_read_are_refused() {
        let entry = |key_kind: &str, key: &[u8], value_kind: &str, value: &[u8]| {
            serde_json::json!({
                "key": {"kind": key_kind, "value": Base64::encode_string(key)},
                "value": {"kind": value_kind, "value": Base64::encode_string(value)},
            })
        };
        let good = [
            entry("string", b"trace", "uint64", &7u64.to_le_bytes()),
            entry("raw", &[0xff; 255], "bool", &[1]),
        ];
        let bytes = user_headers(&good).unwrap();
        assert_eq!(check_user_headers(&bytes), Ok(()));
        for (bad, expected) in [
            (
                entry("string", &[b'k'; 256], "bool", &[1]),
                "key of kind string is 1 to 255 bytes, not 256",
            ),
            (
                entry("string", b"", "bool", &[1]),
                "key of kind string is 1 to 255 bytes, not 0",
            ),
            (
                entry("string", b"k", "uint32", &[1, 2]),
                "value of kind uint32 is 4 bytes, not 2",
            ),
            (
                entry("string", b"k", "raw", &[0; 300]),
                "value of kind raw is 1 to 255 bytes, not 300",
            ),
        ] {
            let Err(HeadersRefused::Unreadable(fault)) = user_headers(&[bad]) else {
                panic!("{expected}: refused as unreadable");
            };
            assert!(fault.to_string().contains(expected), "{fault}");
        }
        let unknown_kind = serde_json::json!({"key": {"kind": "text", "value": "aw=="}});
        assert!(matches!(
            user_headers(&[unknown_kind]),
            Err(HeadersRefused::Json(reason)) if reason.contains("no known kind")
        ));
        // The binary form is checked the same way: an unknown kind, a cut entry.
        let mut unknown = bytes.clone();
        unknown[0] = 16;
        let fault = check_user_headers(&unknown).unwrap_err();
        assert!(fault.to_string().contains("unknown kind 16"), "{fault}");
        let fault = check_user_headers(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(fault.to_string().contains("end inside"), "{fault}");
    }

    #[test]
    fn the_json_kind_names_are_the_spec_header_kinds() {
        use iggy_generated::payloads::HeaderKind;
        for (code, name) in KINDS.iter().enumerate() {
            let kind = HeaderKind::from_repr(code as u8);
            assert_eq!(kind.is_some(), !name.is_empty(), "kind {code}");
            if let Some(kind) = kind {
                assert_eq!(format!("{kind:?}").to_lowercase(), *name);
            }
        }
    }

    fn frame_ids(batch: &[u8]) -> Vec<u128> {
        let mut ids = Vec::new();
        let mut at = BatchHeader::SIZE;
        while at < batch.len() {
            let frame = MessageFrameHeader::decode_fixed(&batch[at..at + MessageFrameHeader::SIZE])
                .unwrap();
            ids.push(frame.id);
            at += MessageFrameHeader::SIZE
                + frame.payload_length as usize
                + frame.user_headers_length as usize;
        }
        ids
    }

    #[test]
    fn a_zero_id_becomes_a_random_uuid_v4_and_a_given_id_is_kept() {
        let message = |id| OutgoingMessage {
            id,
            payload: b"x".to_vec(),
            user_headers: Vec::new(),
        };
        let ids = frame_ids(&batch(&[message(0), message(0), message(42)], 1));
        assert_eq!(ids.len(), 3);
        for id in &ids[..2] {
            assert_ne!(*id, 0);
            assert_eq!((id >> 76) & 0xf, 4, "version 4: {id:032x}");
            assert_eq!((id >> 62) & 0x3, 2, "RFC 4122 variant: {id:032x}");
        }
        assert_ne!(ids[0], ids[1], "each message its own id");
        assert_eq!(ids[2], 42);
    }
}
