//! The metadata model as a snapshot (the spec's `MetadataSnapshot`): what the metadata group's
//! checkpoint keeps, so its journal can be emptied and a start replays only the ops after it.
//! A snapshot of format 10 (`MetadataSnapshotV10`, no prefix) is still read.

use crate::model::{
    ConsumerGroup, Metadata, Partition, PersonalAccessToken, ResizePolicy, Stream, Topic,
    TopicDurability, User, UserStatus,
};
use crate::permissions::{permissions_from_wire, permissions_to_wire};
use crate::session::Session;
use iggy_generated::protocol::SNAPSHOT_FORMAT;
use iggy_generated::storage::{
    MetadataSnapshot, MetadataSnapshotPrefix, MetadataSnapshotV10, SNAPSHOT_MAGIC,
    SnapshotConsumerGroup, SnapshotConsumerGroupV10, SnapshotPartition, SnapshotSession,
    SnapshotStream, SnapshotStreamV10, SnapshotToken, SnapshotTopic, SnapshotTopicV10,
    SnapshotUser,
};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::BTreeMap;

fn durability_code(durability: TopicDurability) -> u8 {
    match durability {
        TopicDurability::Replicated => 0,
        TopicDurability::Persisted => 1,
    }
}

fn durability_of(code: u8) -> TopicDurability {
    if code == 1 {
        TopicDurability::Persisted
    } else {
        TopicDurability::Replicated
    }
}

fn topic_snapshot(topic: &Topic) -> SnapshotTopic<'_> {
    SnapshotTopic {
        id: topic.id,
        name: &topic.name,
        created_at: topic.created_at,
        message_expiry: topic.message_expiry,
        max_topic_size: topic.max_topic_size,
        compression_algorithm: topic.compression_algorithm,
        replication_factor: topic.replication_factor,
        resize_policy: u8::from(topic.resize_policy == ResizePolicy::Fixed),
        durability: durability_code(topic.durability),
        consumer_offset_durability: durability_code(topic.consumer_offset_durability),
        segment_size: topic.segment_size,
        options: &topic.options,
        groups_changed_at_op: topic.groups_changed_at_op,
        partitions: topic
            .partitions
            .values()
            .map(|p| SnapshotPartition {
                id: p.id,
                created_at: p.created_at,
                incarnation: p.incarnation,
            })
            .collect(),
        consumer_groups: topic
            .consumer_groups
            .values()
            .map(|g| SnapshotConsumerGroup {
                id: g.id,
                name: &g.name,
                created_at_op: g.created_at_op,
                generation: g.generation,
                members: g.members.clone(),
            })
            .collect(),
    }
}

/// Encodes the whole model.
pub fn encode(metadata: &Metadata) -> Vec<u8> {
    let snapshot = MetadataSnapshot {
        magic: SNAPSHOT_MAGIC,
        format: SNAPSHOT_FORMAT,
        commit: metadata.commit,
        system_requests: metadata.system_requests,
        streams: metadata
            .streams
            .values()
            .map(|s| SnapshotStream {
                id: s.id,
                name: &s.name,
                created_at: s.created_at,
                topics: s.topics.values().map(topic_snapshot).collect(),
            })
            .collect(),
        users: metadata
            .users
            .values()
            .map(|u| SnapshotUser {
                id: u.id,
                username: &u.username,
                password_hash: &u.password_hash,
                status: u.status as u8,
                created_at: u.created_at,
                permissions: u.permissions.as_ref().map(permissions_to_wire),
            })
            .collect(),
        tokens: metadata
            .tokens
            .iter()
            .map(|t| SnapshotToken {
                user_id: t.user_id,
                name: &t.name,
                token_hash: t.token_hash,
                expiry_at: t.expiry_at.unwrap_or(0),
            })
            .collect(),
        sessions: {
            // In client order: the same model encodes to the same bytes on every replica.
            let mut sessions: Vec<SnapshotSession> = metadata
                .sessions
                .iter()
                .map(|(client, s)| SnapshotSession {
                    client: *client,
                    session: s.session,
                    user_id: s.user_id,
                    protocol: s.protocol,
                    bind_secret: s.bind_secret,
                })
                .collect();
            sessions.sort_by_key(|session| session.client);
            sessions
        },
    };
    let mut out = Vec::with_capacity(snapshot.encoded_size());
    snapshot.encode_to(&mut out);
    out
}

/// Decodes a snapshot into a model: of this build's format, or of format 10 (groups and
/// topics read from it keep no creation or group change op: 0, unknown).
pub fn decode(bytes: &[u8]) -> Result<Metadata, String> {
    let malformed = |error| format!("metadata snapshot: {error:?}");
    let prefix = bytes
        .get(..MetadataSnapshotPrefix::SIZE)
        .and_then(|prefix| MetadataSnapshotPrefix::decode_fixed(prefix).ok());
    let snapshot = match prefix {
        Some(prefix) if prefix.magic == SNAPSHOT_MAGIC => {
            if prefix.format != SNAPSHOT_FORMAT {
                return Err(format!(
                    "metadata snapshot of format {}: this build reads formats 10 and {SNAPSHOT_FORMAT}",
                    prefix.format
                ));
            }
            MetadataSnapshot::decode_exact(bytes).map_err(malformed)?
        }
        // Format 10 starts with its commit, never as large as the magic reads.
        _ => of_format_10(MetadataSnapshotV10::decode_exact(bytes).map_err(malformed)?),
    };
    let mut metadata = Metadata {
        commit: snapshot.commit,
        system_requests: snapshot.system_requests,
        ..Default::default()
    };
    for s in &snapshot.streams {
        let topics = s
            .topics
            .iter()
            .map(|t| {
                let topic = Topic {
                    id: t.id,
                    name: t.name.to_string(),
                    created_at: t.created_at,
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| {
                            (
                                p.id,
                                Partition {
                                    id: p.id,
                                    created_at: p.created_at,
                                    incarnation: p.incarnation,
                                },
                            )
                        })
                        .collect(),
                    message_expiry: t.message_expiry,
                    max_topic_size: t.max_topic_size,
                    compression_algorithm: t.compression_algorithm,
                    replication_factor: t.replication_factor,
                    resize_policy: if t.resize_policy == 1 {
                        ResizePolicy::Fixed
                    } else {
                        ResizePolicy::Dynamic
                    },
                    durability: durability_of(t.durability),
                    consumer_offset_durability: durability_of(t.consumer_offset_durability),
                    segment_size: t.segment_size,
                    options: t.options.to_vec(),
                    groups_changed_at_op: t.groups_changed_at_op,
                    consumer_groups: t
                        .consumer_groups
                        .iter()
                        .map(|g| {
                            let group = ConsumerGroup {
                                id: g.id,
                                name: g.name.to_string(),
                                created_at_op: g.created_at_op,
                                members: g.members.clone(),
                                generation: g.generation,
                                owners: BTreeMap::new(),
                            };
                            (g.id, group)
                        })
                        .collect(),
                };
                (t.id, topic)
            })
            .collect::<crate::named::Named<_>>();
        let stream = Stream {
            id: s.id,
            name: s.name.to_string(),
            created_at: s.created_at,
            topics,
        };
        metadata.streams.insert(s.id, stream);
    }
    for u in &snapshot.users {
        let user = User {
            id: u.id,
            username: u.username.to_string(),
            password_hash: u.password_hash.to_string(),
            status: if u.status == 2 {
                UserStatus::Inactive
            } else {
                UserStatus::Active
            },
            permissions: u.permissions.as_ref().map(permissions_from_wire),
            created_at: u.created_at,
        };
        metadata.users.insert(u.id, user);
    }
    metadata.tokens = snapshot
        .tokens
        .iter()
        .map(|t| PersonalAccessToken {
            user_id: t.user_id,
            name: t.name.to_string(),
            token_hash: t.token_hash,
            expiry_at: (t.expiry_at != 0).then_some(t.expiry_at),
        })
        .collect();
    for s in &snapshot.sessions {
        let session = Session {
            session: s.session,
            user_id: s.user_id,
            protocol: s.protocol,
            bind_secret: s.bind_secret,
        };
        metadata.sessions.register(s.client, session);
    }
    Ok(metadata)
}

/// A format-10 snapshot in this format's shape: its groups' creation ops and its topics' group
/// change ops are unknown (0).
fn of_format_10<'a>(old: MetadataSnapshotV10<'a>) -> MetadataSnapshot<'a> {
    let group = |g: SnapshotConsumerGroupV10<'a>| SnapshotConsumerGroup {
        id: g.id,
        name: g.name,
        created_at_op: 0,
        generation: g.generation,
        members: g.members,
    };
    let topic = |t: SnapshotTopicV10<'a>| SnapshotTopic {
        id: t.id,
        name: t.name,
        created_at: t.created_at,
        message_expiry: t.message_expiry,
        max_topic_size: t.max_topic_size,
        compression_algorithm: t.compression_algorithm,
        replication_factor: t.replication_factor,
        resize_policy: t.resize_policy,
        durability: t.durability,
        consumer_offset_durability: t.consumer_offset_durability,
        segment_size: t.segment_size,
        options: t.options,
        partitions: t.partitions,
        groups_changed_at_op: 0,
        consumer_groups: t.consumer_groups.into_iter().map(group).collect(),
    };
    let stream = |s: SnapshotStreamV10<'a>| SnapshotStream {
        id: s.id,
        name: s.name,
        created_at: s.created_at,
        topics: s.topics.into_iter().map(topic).collect(),
    };
    MetadataSnapshot {
        magic: SNAPSHOT_MAGIC,
        format: SNAPSHOT_FORMAT,
        commit: old.commit,
        system_requests: old.system_requests,
        streams: old.streams.into_iter().map(stream).collect(),
        users: old.users,
        tokens: old.tokens,
        sessions: old.sessions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Ident, TopicSettings};

    #[test]
    fn a_model_survives_its_snapshot() {
        let mut metadata = Metadata::default();
        metadata.create_stream("orders", 10).unwrap();
        let settings = TopicSettings {
            options: vec![1, 2, 3],
            ..Default::default()
        };
        metadata
            .create_topic(&Ident::Id(0), "created", 3, settings, 7, 11)
            .unwrap();
        metadata
            .create_group(&Ident::Id(0), &Ident::Id(0), "g", 30)
            .unwrap();
        metadata
            .join_group(&Ident::Id(0), &Ident::Id(0), &Ident::Id(0), 99)
            .unwrap();
        metadata
            .create_user("alice", "hash".into(), UserStatus::Active, None, 12)
            .unwrap();
        metadata.sessions.register(
            99,
            Session {
                session: 4,
                user_id: 0,
                protocol: 0x3000,
                bind_secret: [5; 32],
            },
        );
        metadata.commit = 42;
        let restored = decode(&encode(&metadata)).unwrap();
        assert_eq!(encode(&restored), encode(&metadata));
        assert_eq!(restored.commit, 42);
        let (_, topic) = restored
            .topic(
                &Ident::Name("orders".into()),
                &Ident::Name("created".into()),
            )
            .unwrap();
        assert_eq!(
            (topic.partitions.len(), topic.options.clone()),
            (3, vec![1, 2, 3])
        );
        assert_eq!(topic.consumer_groups[&0].members, vec![99]);
        assert_eq!(topic.consumer_groups[&0].created_at_op, 30);
        assert_eq!(topic.groups_changed_at_op, 30);
        assert_eq!(restored.sessions.get(99).unwrap().session, 4);
        assert!(decode(&encode(&metadata)[..20]).is_err());
    }

    /// A format-10 snapshot: commit 42, stream 0 "s" holding topic 0 "t" (one partition,
    /// incarnation 7) with group 0 "g" of one member (client 99, generation 2), no user, token
    /// or session. These are the bytes the format-10 encoder wrote for that model.
    const FORMAT_10: &str = concat!(
        "2a00000000000000",
        "0000000000000000",
        "01000000",
        "00000000",
        "0173",
        "0500000000000000",
        "01000000",
        "00000000",
        "0174",
        "0600000000000000",
        "0000000000000000",
        "0000000000000000",
        "01",
        "01",
        "00",
        "00",
        "00",
        "0000000000000000",
        "00000000",
        "01000000",
        "00000000",
        "0600000000000000",
        "0700000000000000",
        "01000000",
        "00000000",
        "0167",
        "0200000000000000",
        "01000000",
        "63000000000000000000000000000000",
        "00000000",
        "00000000",
        "00000000",
    );

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_snapshot_of_format_10_reads_with_unknown_group_creation_ops() {
        let bytes = hex(FORMAT_10);
        // The bytes are the format-10 layout the spec keeps as `MetadataSnapshotV10`.
        let old = MetadataSnapshotV10::decode_exact(&bytes).unwrap();
        assert_eq!(old.to_wire_bytes(), bytes);
        let restored = decode(&bytes).unwrap();
        assert_eq!(restored.commit, 42);
        let topic = &restored.streams[&0].topics[&0];
        assert_eq!((topic.name.as_str(), topic.created_at), ("t", 6));
        assert_eq!(topic.partitions[&0].incarnation, 7);
        assert_eq!(topic.groups_changed_at_op, 0);
        let group = &topic.consumer_groups[&0];
        assert_eq!(
            (group.name.as_str(), group.created_at_op, group.generation),
            ("g", 0, 2)
        );
        assert_eq!(group.members, vec![99]);
        // Written again, it is of this build's format and reads back the same.
        let written = encode(&restored);
        assert_eq!(written[..8], SNAPSHOT_MAGIC);
        assert_eq!(encode(&decode(&written).unwrap()), written);
    }

    #[test]
    fn a_snapshot_of_an_unknown_format_is_refused_by_name() {
        let mut bytes = encode(&Metadata::default());
        bytes[MetadataSnapshotPrefix::FORMAT_OFFSET] = 12;
        let refused = decode(&bytes).unwrap_err();
        assert!(refused.contains("format 12"), "{refused}");
    }

    #[test]
    fn equal_models_encode_to_equal_bytes_whatever_order_sessions_arrived_in() {
        let session = |client: u128| Session {
            session: client as u64,
            user_id: 1,
            protocol: 0,
            bind_secret: [client as u8; 32],
        };
        let (mut forward, mut backward) = (Metadata::default(), Metadata::default());
        for client in 1..=64u128 {
            forward.sessions.register(client, session(client));
        }
        for client in (1..=64u128).rev() {
            backward.sessions.register(client, session(client));
        }
        assert_eq!(encode(&forward), encode(&backward));
    }
}
