//! The metadata group's clients and the checker of its history.
//!
//! Each client registers with a session record (a user id, protocol 0.12.0 or 0.11.1), then
//! creates and deletes streams, topics, partitions and users (and, in the node simulation,
//! consumer groups: [`MetadataWorkload::with_consumer_groups`]) from small pools of names and
//! ids, so names collide, lookups miss and ids freed by a delete are handed out again (the class
//! of bug where a re-created stream's id reached a deleted stream's data). Now and then a
//! request does not decode. Bodies are what the primary journals: the generated request
//! encoders inside the [`Envelope`](iggy_metadata::machine::Envelope) (its time from the
//! workload's virtual clock, never a real one).
//!
//! The checker keeps a [`Reference`]: streams, topics, partitions (with incarnations), consumer
//! groups (with their creation ops) and users
//! as the spec describes them (ids the lowest free, 0-based), built from the committed ops alone.
//! The checks:
//!
//! - every committed reply is the reference's outcome: the rejection code it predicts, or
//!   success with the id it assigns (and, for a topic, its partitions);
//! - after every step, each live replica's model, projected to the reference's terms, is the
//!   reference at the replica's commit; and any two replicas whose models are at the same
//!   commit (after applying, at every checkpoint, at every restore) hold the same snapshot;
//! - every effect a replica ran fits its partition directories (a delete names the
//!   incarnation on disk, an open never lands on a live one), and after every step the
//!   directories whose creating op the model holds are exactly the model's live partitions
//!   (but one an open refuses over a newer incarnation's directory);
//! - at the end (and every 64 ticks), on every replica that committed an acknowledged create,
//!   the created resource is there with the acknowledged id, unless a later committed op
//!   removed it; a resource an acknowledged delete removed never reappears.

use crate::metadata_machine::{MetadataFigures, MetadataMachine, canonical_snapshot};
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{
    ConsumerGroupDetailsResponse, ConsumerGroupIdRequest, CreateConsumerGroupRequest,
    CreatePartitionsRequest, CreateStreamRequest, CreateTopicRequest, CreateUserRequest,
    DeletePartitionsRequest, DeleteUserRequest, GetStreamResponse, GetStreamResponseV0111,
    GetTopicResponse, GetTopicResponseV0111, Identifier, StreamIdRequest, TopicIdRequest,
    UserDetailsResponse, UserDetailsResponseV0111,
};
use iggy_generated::protocol;
use iggy_metadata::machine::{envelope, session_record};
use iggy_metadata::replies::{RESULT_OK, rejection_of};
use iggy_metadata::{Ident, Metadata, ROOT_USER_ID};
use iggy_vsr::Entry;
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::machine::{NodeView, Workload};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::{BTreeMap, HashMap};

/// Names drawn from small pools so creates collide and deletes free ids for reuse.
const STREAM_NAMES: u64 = 4;
const TOPIC_NAMES: u64 = 3;
const USER_NAMES: u64 = 4;
const GROUP_NAMES: u64 = 2;
/// Ids drawn below this (some never exist).
const IDS: u64 = 5;

/// What one client request does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    CreateStream {
        name: String,
    },
    DeleteStream {
        stream: Ident,
    },
    CreateTopic {
        stream: Ident,
        name: String,
        partitions: u32,
    },
    DeleteTopic {
        stream: Ident,
        topic: Ident,
    },
    CreatePartitions {
        stream: Ident,
        topic: Ident,
        count: u32,
    },
    DeletePartitions {
        stream: Ident,
        topic: Ident,
        count: u32,
    },
    CreateUser {
        name: String,
    },
    DeleteUser {
        user: Ident,
    },
    CreateGroup {
        stream: Ident,
        topic: Ident,
        name: String,
    },
    DeleteGroup {
        stream: Ident,
        topic: Ident,
        group: Ident,
    },
    /// A stream creation whose request bytes end early: refused as undecodable.
    Malformed,
    Logout,
}

/// A wire identifier's kind and value bytes.
fn identifier_parts(ident: &Ident) -> (u8, Vec<u8>) {
    match ident {
        Ident::Id(id) => (1, id.to_le_bytes().to_vec()),
        Ident::Name(name) => (2, name.as_bytes().to_vec()),
    }
}

fn identifier<'a>(parts: &'a (u8, Vec<u8>)) -> Identifier<'a> {
    Identifier {
        kind: parts.0,
        value: &parts.1,
    }
}

impl Request {
    /// The operation code and the request bytes, with the server's generated encoders.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let stream_topic =
            |stream: &Ident, topic: &Ident| (identifier_parts(stream), identifier_parts(topic));
        match self {
            Request::CreateStream { name } => (
                Operation::CreateStream.to_repr(),
                CreateStreamRequest { name, options: &[] }.to_wire_bytes(),
            ),
            Request::DeleteStream { stream } => {
                let stream = identifier_parts(stream);
                let request = StreamIdRequest {
                    stream_id: identifier(&stream),
                };
                (Operation::DeleteStream.to_repr(), request.to_wire_bytes())
            }
            Request::CreateTopic {
                stream,
                name,
                partitions,
            } => {
                let stream = identifier_parts(stream);
                let request = CreateTopicRequest {
                    stream_id: identifier(&stream),
                    partitions_count: *partitions,
                    name,
                    options: &[],
                };
                (Operation::CreateTopic.to_repr(), request.to_wire_bytes())
            }
            Request::DeleteTopic { stream, topic } => {
                let (stream, topic) = stream_topic(stream, topic);
                let request = TopicIdRequest {
                    stream_id: identifier(&stream),
                    topic_id: identifier(&topic),
                };
                (Operation::DeleteTopic.to_repr(), request.to_wire_bytes())
            }
            Request::CreatePartitions {
                stream,
                topic,
                count,
            } => {
                let (stream, topic) = stream_topic(stream, topic);
                let request = CreatePartitionsRequest {
                    stream_id: identifier(&stream),
                    topic_id: identifier(&topic),
                    partitions_count: *count,
                };
                (
                    Operation::CreatePartitions.to_repr(),
                    request.to_wire_bytes(),
                )
            }
            Request::DeletePartitions {
                stream,
                topic,
                count,
            } => {
                let (stream, topic) = stream_topic(stream, topic);
                let request = DeletePartitionsRequest {
                    stream_id: identifier(&stream),
                    topic_id: identifier(&topic),
                    partitions_count: *count,
                };
                (
                    Operation::DeletePartitions.to_repr(),
                    request.to_wire_bytes(),
                )
            }
            Request::CreateUser { name } => {
                // Hashed by the service before it proposes; any string stands in here.
                let request = CreateUserRequest {
                    username: name,
                    password: "hashed-secret",
                    status: 1,
                    permissions: None,
                    options: &[],
                };
                (Operation::CreateUser.to_repr(), request.to_wire_bytes())
            }
            Request::DeleteUser { user } => {
                let user = identifier_parts(user);
                let request = DeleteUserRequest {
                    user_id: identifier(&user),
                };
                (Operation::DeleteUser.to_repr(), request.to_wire_bytes())
            }
            Request::CreateGroup {
                stream,
                topic,
                name,
            } => {
                let (stream, topic) = stream_topic(stream, topic);
                let request = CreateConsumerGroupRequest {
                    stream_id: identifier(&stream),
                    topic_id: identifier(&topic),
                    name,
                };
                (
                    Operation::CreateConsumerGroup.to_repr(),
                    request.to_wire_bytes(),
                )
            }
            Request::DeleteGroup {
                stream,
                topic,
                group,
            } => {
                let (stream, topic) = stream_topic(stream, topic);
                let group = identifier_parts(group);
                let request = ConsumerGroupIdRequest {
                    stream_id: identifier(&stream),
                    topic_id: identifier(&topic),
                    group_id: identifier(&group),
                };
                (
                    Operation::DeleteConsumerGroup.to_repr(),
                    request.to_wire_bytes(),
                )
            }
            Request::Malformed => {
                let mut request = CreateStreamRequest {
                    name: "malformed",
                    options: &[],
                }
                .to_wire_bytes();
                request.pop();
                (Operation::CreateStream.to_repr(), request)
            }
            Request::Logout => (Operation::Logout.to_repr(), Vec::new()),
        }
    }
}

/// Where a resource lives: the ids that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    Stream(u32),
    Topic(u32, u32),
    Partition(u32, u32, u32),
    User(u32),
    /// A consumer group of a topic.
    Group(u32, u32, u32),
}

/// What a committed op did, as the reference predicts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The id a create assigned (and, for a topic, its partition count).
    pub id: Option<(u32, u32)>,
    /// Resources created and removed: (where, marker). A marker (creation time, or a
    /// partition's incarnation) tells one life of an id from the next.
    pub created: Vec<(Path, u64)>,
    pub removed: Vec<(Path, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ReferenceTopic {
    name: String,
    created_at: u64,
    /// Partition id → incarnation.
    partitions: BTreeMap<u32, u64>,
    /// Consumer group id → (name, the op that created it).
    groups: BTreeMap<u32, (String, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ReferenceStream {
    name: String,
    created_at: u64,
    topics: BTreeMap<u32, ReferenceTopic>,
}

/// The metadata as the spec describes it, for the resources the workload touches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reference {
    streams: BTreeMap<u32, ReferenceStream>,
    /// User id → (name, creation time).
    users: BTreeMap<u32, (String, u64)>,
}

/// The consumer groups of each topic: (stream, topic) → group id → the op that created it.
pub type TopicGroups = BTreeMap<(u32, u32), BTreeMap<u32, u64>>;

/// Ids are 0-based and the lowest free one is assigned.
fn lowest_free<V>(map: &BTreeMap<u32, V>) -> u32 {
    (0..).find(|id| !map.contains_key(id)).expect("a free id")
}

fn find_id<V>(map: &BTreeMap<u32, V>, ident: &Ident, name_of: impl Fn(&V) -> &str) -> Option<u32> {
    match ident {
        Ident::Id(id) => map.contains_key(id).then_some(*id),
        Ident::Name(name) => map
            .iter()
            .find(|(_, v)| name_of(v) == name)
            .map(|(id, _)| *id),
    }
}

impl Reference {
    /// A real model in the reference's terms.
    pub fn of(model: &Metadata) -> Reference {
        let streams = model
            .streams
            .iter()
            .map(|(id, stream)| {
                let topics = stream
                    .topics
                    .iter()
                    .map(|(id, topic)| {
                        let partitions = topic
                            .partitions
                            .iter()
                            .map(|(id, partition)| (*id, partition.incarnation))
                            .collect();
                        let groups = topic
                            .consumer_groups
                            .iter()
                            .map(|(id, group)| (*id, (group.name.clone(), group.created_at_op)))
                            .collect();
                        let topic = ReferenceTopic {
                            name: topic.name.clone(),
                            created_at: topic.created_at,
                            partitions,
                            groups,
                        };
                        (*id, topic)
                    })
                    .collect();
                let stream = ReferenceStream {
                    name: stream.name.clone(),
                    created_at: stream.created_at,
                    topics,
                };
                (*id, stream)
            })
            .collect();
        let users = model
            .users
            .iter()
            .map(|(id, user)| (*id, (user.username.clone(), user.created_at)))
            .collect();
        Reference { streams, users }
    }

    /// The partitions with their incarnations.
    pub fn partitions(&self) -> BTreeMap<(u32, u32, u32), u64> {
        let mut partitions = BTreeMap::new();
        for (s, stream) in &self.streams {
            for (t, topic) in &stream.topics {
                for (p, incarnation) in &topic.partitions {
                    partitions.insert((*s, *t, *p), *incarnation);
                }
            }
        }
        partitions
    }

    /// The consumer groups of every topic.
    pub fn groups(&self) -> TopicGroups {
        let mut groups = BTreeMap::new();
        for (s, stream) in &self.streams {
            for (t, topic) in &stream.topics {
                let ids = topic
                    .groups
                    .iter()
                    .map(|(id, (_, created))| (*id, *created))
                    .collect();
                groups.insert((*s, *t), ids);
            }
        }
        groups
    }

    /// The marker of the resource at `path`, if it exists.
    pub fn marker(&self, path: Path) -> Option<u64> {
        match path {
            Path::Stream(s) => self.streams.get(&s).map(|stream| stream.created_at),
            Path::Topic(s, t) => self
                .streams
                .get(&s)
                .and_then(|stream| stream.topics.get(&t))
                .map(|topic| topic.created_at),
            Path::Partition(s, t, p) => self
                .streams
                .get(&s)
                .and_then(|stream| stream.topics.get(&t))
                .and_then(|topic| topic.partitions.get(&p).copied()),
            Path::User(u) => self.users.get(&u).map(|(_, created_at)| *created_at),
            Path::Group(s, t, g) => self
                .streams
                .get(&s)
                .and_then(|stream| stream.topics.get(&t))
                .and_then(|topic| topic.groups.get(&g))
                .map(|(_, created)| *created),
        }
    }

    fn stream(&self, ident: &Ident) -> Result<u32, ErrorCode> {
        find_id(&self.streams, ident, |s| &s.name).ok_or(match ident {
            Ident::Id(_) => ErrorCode::StreamIdNotFound,
            Ident::Name(_) => ErrorCode::StreamNameNotFound,
        })
    }

    fn topic(&self, stream: &Ident, topic: &Ident) -> Result<(u32, u32), ErrorCode> {
        let s = self.stream(stream)?;
        let t = find_id(&self.streams[&s].topics, topic, |t| &t.name).ok_or(match topic {
            Ident::Id(_) => ErrorCode::TopicIdNotFound,
            Ident::Name(_) => ErrorCode::TopicNameNotFound,
        })?;
        Ok((s, t))
    }

    /// Applies committed op `op`, made at `now`: what it did, or the rejection it gets.
    pub fn apply(&mut self, op: u64, now: u64, request: &Request) -> Result<Outcome, ErrorCode> {
        let mut outcome = Outcome::default();
        match request {
            Request::CreateStream { name } => {
                if self.streams.values().any(|s| &s.name == name) {
                    return Err(ErrorCode::StreamNameAlreadyExists);
                }
                let id = lowest_free(&self.streams);
                let stream = ReferenceStream {
                    name: name.clone(),
                    created_at: now,
                    topics: BTreeMap::new(),
                };
                self.streams.insert(id, stream);
                outcome.id = Some((id, 0));
                outcome.created.push((Path::Stream(id), now));
            }
            Request::DeleteStream { stream } => {
                let s = self.stream(stream)?;
                let stream = self.streams.remove(&s).expect("found");
                outcome.removed.push((Path::Stream(s), stream.created_at));
                for (t, topic) in &stream.topics {
                    outcome.removed.push((Path::Topic(s, *t), topic.created_at));
                    topic_removed(topic, (s, *t), &mut outcome);
                }
            }
            Request::CreateTopic {
                stream,
                name,
                partitions,
            } => {
                let s = self.stream(stream)?;
                let topics = &mut self.streams.get_mut(&s).expect("found").topics;
                if topics.values().any(|t| &t.name == name) {
                    return Err(ErrorCode::TopicNameAlreadyExists);
                }
                let t = lowest_free(topics);
                let mut topic = ReferenceTopic {
                    name: name.clone(),
                    created_at: now,
                    partitions: BTreeMap::new(),
                    groups: BTreeMap::new(),
                };
                add_partitions(&mut topic, (s, t), *partitions, op, &mut outcome);
                topics.insert(t, topic);
                outcome.id = Some((t, *partitions));
                outcome.created.push((Path::Topic(s, t), now));
            }
            Request::DeleteTopic { stream, topic } => {
                let (s, t) = self.topic(stream, topic)?;
                let topic = self.streams.get_mut(&s).expect("found").topics.remove(&t);
                let topic = topic.expect("found");
                outcome.removed.push((Path::Topic(s, t), topic.created_at));
                topic_removed(&topic, (s, t), &mut outcome);
            }
            Request::CreatePartitions {
                stream,
                topic,
                count,
            } => {
                let (s, t) = self.topic(stream, topic)?;
                if *count == 0 {
                    return Err(ErrorCode::InvalidPartitionsCount);
                }
                let topic = self.streams.get_mut(&s).expect("found");
                let topic = topic.topics.get_mut(&t).expect("found");
                add_partitions(topic, (s, t), *count, op, &mut outcome);
            }
            Request::DeletePartitions {
                stream,
                topic,
                count,
            } => {
                let (s, t) = self.topic(stream, topic)?;
                let topic = self.streams.get_mut(&s).expect("found");
                let topic = topic.topics.get_mut(&t).expect("found");
                if *count == 0 || *count as usize > topic.partitions.len() {
                    return Err(ErrorCode::InvalidPartitionsCount);
                }
                for _ in 0..*count {
                    let (p, incarnation) = topic.partitions.pop_last().expect("counted");
                    outcome
                        .removed
                        .push((Path::Partition(s, t, p), incarnation));
                }
            }
            Request::CreateUser { name } => {
                if self.users.values().any(|(username, _)| username == name) {
                    return Err(ErrorCode::UserAlreadyExists);
                }
                let id = lowest_free(&self.users);
                self.users.insert(id, (name.clone(), now));
                outcome.id = Some((id, 0));
                outcome.created.push((Path::User(id), now));
            }
            Request::DeleteUser { user } => {
                let id = find_id(&self.users, user, |(name, _)| name)
                    .ok_or(ErrorCode::ResourceNotFound)?;
                if id == ROOT_USER_ID {
                    return Err(ErrorCode::CannotDeleteUser);
                }
                let (_, created_at) = self.users.remove(&id).expect("found");
                outcome.removed.push((Path::User(id), created_at));
            }
            Request::CreateGroup {
                stream,
                topic,
                name,
            } => {
                let (s, t) = self.topic(stream, topic)?;
                let topic = self.streams.get_mut(&s).expect("found");
                let groups = &mut topic.topics.get_mut(&t).expect("found").groups;
                if groups.values().any(|(group, _)| group == name) {
                    return Err(ErrorCode::ConsumerGroupNameAlreadyExists);
                }
                let g = lowest_free(groups);
                groups.insert(g, (name.clone(), op));
                outcome.id = Some((g, 0));
                outcome.created.push((Path::Group(s, t, g), op));
            }
            Request::DeleteGroup {
                stream,
                topic,
                group,
            } => {
                let (s, t) = self.topic(stream, topic)?;
                let topic = self.streams.get_mut(&s).expect("found");
                let groups = &mut topic.topics.get_mut(&t).expect("found").groups;
                let g = find_id(groups, group, |(name, _)| name).ok_or(match group {
                    Ident::Id(_) => ErrorCode::ConsumerGroupIdNotFound,
                    Ident::Name(_) => ErrorCode::ConsumerGroupNameNotFound,
                })?;
                let (_, created) = groups.remove(&g).expect("found");
                outcome.removed.push((Path::Group(s, t, g), created));
            }
            Request::Malformed => return Err(ErrorCode::InvalidFormat),
            Request::Logout => {}
        }
        Ok(outcome)
    }
}

/// What a deleted topic took with it: its partitions and consumer groups.
fn topic_removed(topic: &ReferenceTopic, (s, t): (u32, u32), outcome: &mut Outcome) {
    for (p, incarnation) in &topic.partitions {
        outcome
            .removed
            .push((Path::Partition(s, t, *p), *incarnation));
    }
    for (g, (_, created)) in &topic.groups {
        outcome.removed.push((Path::Group(s, t, *g), *created));
    }
}

/// Partitions after the topic's highest, each named by the creating op (the incarnation).
fn add_partitions(
    topic: &mut ReferenceTopic,
    (s, t): (u32, u32),
    count: u32,
    op: u64,
    outcome: &mut Outcome,
) {
    let first = topic
        .partitions
        .keys()
        .next_back()
        .map_or(0, |last| last + 1);
    for p in first..first + count {
        let incarnation = (op << 20) | u64::from(p);
        topic.partitions.insert(p, incarnation);
        outcome
            .created
            .push((Path::Partition(s, t, p), incarnation));
    }
}

/// Whether `reply` is the committed reply `expected` predicts for `request`; why not.
pub fn check_reply(
    request: &Request,
    expected: &Result<Outcome, ErrorCode>,
    reply: &[u8],
) -> Result<(), String> {
    if *request == Request::Logout {
        // Logout's reply is not result-framed: it is empty.
        return match reply.is_empty() {
            true => Ok(()),
            false => Err(format!("a logout replied {reply:?}")),
        };
    }
    let outcome = match expected {
        Err(code) => {
            return match rejection_of(reply) {
                Some(found) if found == *code => Ok(()),
                found => Err(format!(
                    "expected {code:?}, the reply rejects with {found:?}"
                )),
            };
        }
        Ok(outcome) => outcome,
    };
    let Some(payload) = reply.strip_prefix(&RESULT_OK[..]) else {
        return Err(format!(
            "expected success, the reply rejects with {:?}",
            rejection_of(reply)
        ));
    };
    let found = match request {
        Request::CreateStream { .. } => GetStreamResponse::decode_exact(payload)
            .map(|r| r.stream.id)
            .or_else(|_| GetStreamResponseV0111::decode_exact(payload).map(|r| r.stream.id))
            .map(|id| (id, 0)),
        Request::CreateTopic { .. } => GetTopicResponse::decode_exact(payload)
            .map(|r| (r.topic.id, r.partitions.len() as u32))
            .or_else(|_| {
                GetTopicResponseV0111::decode_exact(payload)
                    .map(|r| (r.topic.id, r.partitions.len() as u32))
            }),
        Request::CreateGroup { .. } => {
            ConsumerGroupDetailsResponse::decode_exact(payload).map(|r| (r.group.id, 0))
        }
        Request::CreateUser { .. } => UserDetailsResponse::decode_exact(payload)
            .map(|r| r.user.id)
            .or_else(|_| UserDetailsResponseV0111::decode_exact(payload).map(|r| r.user.id))
            .map(|id| (id, 0)),
        _ if payload.is_empty() => return Ok(()),
        _ => {
            return Err(format!(
                "an empty success expected, the reply holds {payload:?}"
            ));
        }
    };
    match found {
        Ok(found) if Some(found) == outcome.id => Ok(()),
        Ok(found) => Err(format!(
            "the reply names {found:?}, expected {:?}",
            outcome.id
        )),
        Err(error) => Err(format!("the reply's payload does not decode: {error:?}")),
    }
}

/// Counts of what a run exercised.
#[derive(Clone, Debug, Default)]
pub struct MetadataRunFigures {
    /// Creates acknowledged (streams, topics, partitions, users), and those whose id a
    /// deleted resource held before.
    pub creates_acknowledged: u64,
    pub ids_reused: u64,
    /// Deletes acknowledged.
    pub deletes_acknowledged: u64,
    /// Requests acknowledged as refused (the reference predicted the code).
    pub refusals_acknowledged: u64,
    /// Snapshots compared across replicas at equal commits, and replica models compared with
    /// the reference.
    pub snapshots_compared: u64,
    pub references_compared: u64,
    /// Over every replica.
    pub machines: MetadataFigures,
}

/// A committed op as the checker keeps it.
#[derive(Clone, Debug)]
struct Committed {
    op: u64,
    outcome: Outcome,
}

/// The metadata workload of one seed.
#[derive(Debug)]
pub struct MetadataWorkload {
    seed: u64,
    rng: Rng,
    /// Each request as first made, with its time, operation and body: retries send the same.
    requests: HashMap<(u128, u64), (Request, u64, u8, Bytes)>,
    /// Each client's session: (user id, protocol).
    sessions: HashMap<u128, (u32, u32)>,
    /// The reference after each committed op, and what the op did.
    references: BTreeMap<u64, Reference>,
    outcomes: BTreeMap<u64, Result<Outcome, ErrorCode>>,
    /// Acknowledged ops that created or removed something.
    acknowledged: Vec<Committed>,
    /// Every path a committed create used, so a reused id is counted.
    used: BTreeMap<Path, u64>,
    /// Per model commit: the replica that first showed it and its canonical snapshot.
    snapshots: BTreeMap<u64, (usize, Vec<u8>)>,
    /// Per replica: the model commit last checked and how many of its snapshots were read.
    checked: Vec<(Option<u64>, usize)>,
    /// The request time, in microseconds.
    clock: u64,
    /// Of the requests, the percent that create or delete consumer groups (0 by default).
    group_percent: u64,
    /// Of the requests, the percent that delete one partition of a topic that is mostly live
    /// or add it back (0 by default): the last partition's id returns, a new incarnation of
    /// the same ids.
    partition_churn_percent: u64,
    /// The topic whose partition the last churn request deleted: the next one adds it back.
    churned: Option<(Ident, Ident)>,
    /// Committed consumer-group deletions: (stream, topic, group, op).
    group_deletions: Vec<(u32, u32, u32, u64)>,
    figures: MetadataRunFigures,
}

impl MetadataWorkload {
    /// The workload for `seed` (its own random stream, apart from the faults').
    pub fn new(seed: u64) -> Self {
        MetadataWorkload {
            seed,
            rng: Rng::new(seed ^ 0x3e7a_da7a),
            requests: HashMap::new(),
            sessions: HashMap::new(),
            references: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            acknowledged: Vec::new(),
            used: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            checked: Vec::new(),
            clock: 1_000_000,
            group_percent: 0,
            partition_churn_percent: 0,
            churned: None,
            group_deletions: Vec::new(),
            figures: MetadataRunFigures::default(),
        }
    }

    /// The same workload creating and deleting consumer groups (from a pool of two names per
    /// topic, so ids are reused and groups recreated) in `percent` of its requests.
    pub fn with_consumer_groups(mut self, percent: u64) -> Self {
        self.group_percent = percent;
        self
    }

    /// The same workload deleting one partition of a mostly live topic, then adding one to it
    /// (the request after), in `percent` of its requests, so partitions are recreated under
    /// their ids often (a delete frees the last partition's id and the add takes it back).
    pub fn with_partition_churn(mut self, percent: u64) -> Self {
        self.partition_churn_percent = percent;
        self
    }

    /// The latest committed op and the consumer groups after it: (stream, topic) → group id
    /// → the op that created it.
    pub fn committed_groups(&self) -> (u64, TopicGroups) {
        self.references
            .last_key_value()
            .map_or((0, BTreeMap::new()), |(op, reference)| {
                (*op, reference.groups())
            })
    }

    /// Every committed consumer-group deletion, in op order: (stream, topic, group, op).
    pub fn group_deletions(&self) -> &[(u32, u32, u32, u64)] {
        &self.group_deletions
    }

    /// What the run exercised.
    pub fn figures(&self) -> MetadataRunFigures {
        self.figures.clone()
    }

    fn fail(&self, what: String) -> ! {
        panic!("seed {}: metadata checker: {what}", self.seed)
    }

    /// The latest committed op and the partitions live after it.
    pub fn committed_partitions(&self) -> (u64, BTreeMap<(u32, u32, u32), u64>) {
        self.references
            .last_key_value()
            .map_or((0, BTreeMap::new()), |(op, reference)| {
                (*op, reference.partitions())
            })
    }

    /// The reference once every op up to `op` is applied.
    pub fn reference_at(&self, op: u64) -> Reference {
        self.references
            .range(..=op)
            .next_back()
            .map(|(_, reference)| reference.clone())
            .unwrap_or_default()
    }

    fn ident(&mut self, names: u64, prefix: &str) -> Ident {
        if self.rng.chance(25) {
            Ident::Name(format!("{prefix}{}", self.rng.below(names)))
        } else {
            Ident::Id(self.rng.below(IDS) as u32)
        }
    }

    fn plan(&mut self, logout: bool) -> Request {
        if logout {
            return Request::Logout;
        }
        let roll = self.rng.below(100);
        let stream = self.ident(STREAM_NAMES, "s");
        let topic = self.ident(TOPIC_NAMES, "t");
        let count = self.rng.below(4) as u32;
        if self.group_percent > 0 && self.rng.chance(self.group_percent) {
            // Mostly the live streams and topics: groups are created where partitions are.
            let (stream, topic) = (Ident::Id(self.rng.below(2) as u32), Ident::Id(0));
            return match self.rng.chance(55) {
                true => Request::CreateGroup {
                    stream,
                    topic,
                    name: format!("g{}", self.rng.below(GROUP_NAMES)),
                },
                false => Request::DeleteGroup {
                    stream,
                    topic,
                    group: self.ident(GROUP_NAMES, "g"),
                },
            };
        }
        if self.partition_churn_percent > 0 && self.rng.chance(self.partition_churn_percent) {
            if let Some((stream, topic)) = self.churned.take() {
                return Request::CreatePartitions {
                    stream,
                    topic,
                    count: 1,
                };
            }
            let (stream, topic) = (Ident::Id(self.rng.below(2) as u32), Ident::Id(0));
            self.churned = Some((stream.clone(), topic.clone()));
            return Request::DeletePartitions {
                stream,
                topic,
                count: 1,
            };
        }
        match roll {
            0..20 => Request::CreateStream {
                name: format!("s{}", self.rng.below(STREAM_NAMES)),
            },
            20..30 => Request::DeleteStream { stream },
            30..50 => Request::CreateTopic {
                stream,
                name: format!("t{}", self.rng.below(TOPIC_NAMES)),
                partitions: count,
            },
            50..58 => Request::DeleteTopic { stream, topic },
            58..68 => Request::CreatePartitions {
                stream,
                topic,
                count,
            },
            68..76 => Request::DeletePartitions {
                stream,
                topic,
                count,
            },
            76..88 => Request::CreateUser {
                name: format!("user{}", self.rng.below(USER_NAMES)),
            },
            88..97 => Request::DeleteUser {
                user: self.ident(USER_NAMES, "user"),
            },
            _ => Request::Malformed,
        }
    }

    /// Compares a replica's model with the reference and, at equal commits, with the other
    /// replicas' snapshots (its own checkpoints and restores included).
    fn check_model(&mut self, index: usize, machine: &MetadataMachine) -> Result<(), String> {
        if let Some(fault) = machine.disk_faults().first() {
            return Err(format!("replica {index}: {fault}"));
        }
        let model = machine.model();
        // Besides the live partitions, only directories a restart kept for an op it has not
        // applied again yet; while applied ops' effects wait, the directories lag the model.
        if !machine.effects_pending() && machine.running_partitions() != machine.partitions_to_run()
        {
            return Err(format!(
                "replica {index} at commit {}: partition directories {:?}, live partitions {:?}",
                model.commit,
                machine.disk(),
                model.live_partitions()
            ));
        }
        if self.checked.len() <= index {
            self.checked.resize(index + 1, (None, 0));
        }
        let (last_commit, read) = self.checked[index];
        for (commit, snapshot) in &machine.snapshots()[read..] {
            self.compare_snapshot(index, *commit, snapshot.clone())?;
        }
        self.checked[index].1 = machine.snapshots().len();
        if last_commit == Some(model.commit) {
            return Ok(());
        }
        self.checked[index].0 = Some(model.commit);
        self.compare_snapshot(index, model.commit, canonical_snapshot(model))?;
        let expected = self.reference_at(model.commit);
        let projected = Reference::of(model);
        if projected != expected {
            return Err(format!(
                "replica {index} at commit {}: the model {projected:?} is not the reference \
                 {expected:?}",
                model.commit,
            ));
        }
        self.figures.references_compared += 1;
        Ok(())
    }

    fn compare_snapshot(
        &mut self,
        index: usize,
        commit: u64,
        snapshot: Vec<u8>,
    ) -> Result<(), String> {
        match self.snapshots.get(&commit) {
            Some((first, canonical)) if *canonical != snapshot => Err(format!(
                "replica {index}'s snapshot at commit {commit} differs from replica {first}'s"
            )),
            Some(_) => {
                self.figures.snapshots_compared += 1;
                Ok(())
            }
            None => {
                self.snapshots.insert(commit, (index, snapshot));
                Ok(())
            }
        }
    }

    /// Every acknowledged create holds on the replica (unless a later committed op removed
    /// it), and nothing an acknowledged op removed is back.
    fn check_acknowledged(&self, index: usize, model: &Metadata) -> Result<(), String> {
        let projected = Reference::of(model);
        let reference = self.reference_at(model.commit);
        for committed in self.acknowledged.iter().filter(|c| c.op <= model.commit) {
            for (path, marker) in &committed.outcome.created {
                let live = reference.marker(*path) == Some(*marker);
                if live != (projected.marker(*path) == Some(*marker)) {
                    let (replica, reference) = match live {
                        true => ("missing from", "live in"),
                        false => ("still on", "removed from"),
                    };
                    return Err(format!(
                        "replica {index} at commit {}: {path:?} created at op {} is {replica} \
                         the replica, yet {reference} the reference",
                        model.commit, committed.op,
                    ));
                }
            }
            for (path, marker) in &committed.outcome.removed {
                if projected.marker(*path) == Some(*marker) {
                    return Err(format!(
                        "replica {index} at commit {}: {path:?} removed at op {} is back",
                        model.commit, committed.op
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_nodes(&mut self, nodes: &[NodeView<'_, MetadataMachine>], acknowledged: bool) {
        for (index, node) in nodes.iter().enumerate() {
            if node.replica.is_none() {
                continue;
            }
            let mut result = self.check_model(index, node.machine);
            if acknowledged && result.is_ok() {
                result = self.check_acknowledged(index, node.machine.model());
            }
            if let Err(why) = result {
                self.fail(why);
            }
        }
    }
}

impl Workload for MetadataWorkload {
    type Machine = MetadataMachine;

    fn machine(&self, _replica_count: u8, _replica: u8) -> MetadataMachine {
        MetadataMachine::default()
    }

    fn register(&mut self, client: u128) -> Bytes {
        let user_id = self.rng.below(3) as u32;
        let protocol = if self.rng.chance(30) {
            protocol::V0_11_1.packed()
        } else {
            protocol::CURRENT.packed()
        };
        let (user_id, protocol) = *self.sessions.entry(client).or_insert((user_id, protocol));
        session_record(user_id, protocol, [client as u8; 32])
    }

    fn request(&mut self, client: u128, request: u64, logout: bool) -> (u8, Bytes) {
        if !self.requests.contains_key(&(client, request)) {
            self.clock += 1 + self.rng.below(1_000);
            let planned = self.plan(logout);
            let (operation, body) = planned.encode();
            let user_id = self.sessions.get(&client).map_or(ROOT_USER_ID, |s| s.0);
            let body = envelope(self.clock, user_id, &body);
            let made = (planned, self.clock, operation, body);
            self.requests.insert((client, request), made);
        }
        let (_, _, operation, body) = &self.requests[&(client, request)];
        (*operation, body.clone())
    }

    fn committed(&mut self, op: u64, entry: &Entry, reply: &Bytes) {
        let Some((request, now, _, _)) = self.requests.get(&(entry.client, entry.request)) else {
            self.fail(format!("op {op} commits a request never made"));
        };
        let (request, now) = (request.clone(), *now);
        let mut reference = self.reference_at(op);
        let expected = reference.apply(op, now, &request);
        if let Err(why) = check_reply(&request, &expected, reply) {
            self.fail(format!("op {op} {request:?}: {why}"));
        }
        self.references.insert(op, reference);
        if let (Request::DeleteGroup { .. }, Ok(outcome)) = (&request, &expected) {
            for (path, _) in &outcome.removed {
                if let Path::Group(s, t, g) = path {
                    self.group_deletions.push((*s, *t, *g, op));
                }
            }
        }
        if let Ok(outcome) = &expected {
            for (path, _) in &outcome.created {
                if self.used.insert(*path, op).is_some() {
                    self.figures.ids_reused += 1;
                }
            }
        }
        self.outcomes.insert(op, expected);
    }

    fn acknowledged(&mut self, client: u128, request: u64, op: u64, _reply: &Bytes) {
        // The reply is the canonical one (the cluster checks), which `committed` checked.
        let Some(outcome) = self.outcomes.get(&op) else {
            self.fail(format!(
                "client {client} request {request} acknowledged at op {op}, never committed"
            ));
        };
        match outcome.clone() {
            Ok(outcome) if outcome.created.is_empty() && outcome.removed.is_empty() => {}
            Ok(outcome) => {
                self.figures.creates_acknowledged += u64::from(!outcome.created.is_empty());
                self.figures.deletes_acknowledged += u64::from(!outcome.removed.is_empty());
                self.acknowledged.push(Committed { op, outcome });
            }
            Err(_) => self.figures.refusals_acknowledged += 1,
        }
    }

    fn check_step(&mut self, _seed: u64, now: u64, nodes: &[NodeView<'_, MetadataMachine>]) {
        self.check_nodes(nodes, now.is_multiple_of(64));
    }

    fn check_end(&mut self, _seed: u64, nodes: &[NodeView<'_, MetadataMachine>]) {
        self.check_nodes(nodes, true);
        for node in nodes {
            let figures = node.machine.figures();
            let total = &mut self.figures.machines;
            total.snapshots_restored += figures.snapshots_restored;
            total.snapshots_transferred += figures.snapshots_transferred;
            total.transfer_discards += figures.transfer_discards;
            total.partitions_opened += figures.partitions_opened;
            total.partitions_deleted += figures.partitions_deleted;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_vsr::sim::machine::Machine;

    const CLIENT: u128 = 7;

    /// A workload and replicas' machines driven as the cluster drives them: every op applied
    /// on each machine, committed and acknowledged to the workload.
    struct Harness {
        workload: MetadataWorkload,
        machines: Vec<MetadataMachine>,
        op: u64,
        request: u64,
    }

    impl Harness {
        fn new(replicas: usize) -> Self {
            let mut harness = Harness {
                workload: MetadataWorkload::new(1),
                machines: (0..replicas).map(|_| MetadataMachine::default()).collect(),
                op: 0,
                request: 0,
            };
            harness.op += 1;
            let body = harness.workload.register(CLIENT);
            for machine in &mut harness.machines {
                machine.registered(harness.op, CLIENT, &body);
            }
            harness
        }

        /// Commits `request` on every machine; the workload checks its reply.
        fn commit(&mut self, request: Request) -> Bytes {
            self.op += 1;
            self.request += 1;
            self.workload.clock += 10;
            let (operation, body) = request.encode();
            let body = envelope(self.workload.clock, ROOT_USER_ID, &body);
            let made = (request, self.workload.clock, operation, body.clone());
            self.workload.requests.insert((CLIENT, self.request), made);
            let mut replies: Vec<Bytes> = self
                .machines
                .iter_mut()
                .map(|machine| {
                    let reply = machine.apply(self.op, CLIENT, operation, &body).reply;
                    machine.effects_done(self.op);
                    reply
                })
                .collect();
            replies.dedup();
            assert_eq!(replies.len(), 1, "every replica replies the same");
            let entry = Entry::new(self.op, 0, CLIENT, self.request, operation, body);
            self.workload.committed(self.op, &entry, &replies[0]);
            self.workload
                .acknowledged(CLIENT, self.request, self.op, &replies[0]);
            replies.remove(0)
        }

        fn check(&mut self, index: usize) -> Result<(), String> {
            self.workload.check_model(index, &self.machines[index])?;
            self.workload
                .check_acknowledged(index, self.machines[index].model())
        }
    }

    fn stream(name: &str) -> Request {
        Request::CreateStream { name: name.into() }
    }

    fn topic(stream: u32, name: &str, partitions: u32) -> Request {
        Request::CreateTopic {
            stream: Ident::Id(stream),
            name: name.into(),
            partitions,
        }
    }

    /// A history with a stream deleted and its id reused by the next create.
    fn reused_stream_history(harness: &mut Harness) {
        harness.commit(stream("s0"));
        harness.commit(topic(0, "t0", 2));
        harness.commit(Request::DeleteStream {
            stream: Ident::Id(0),
        });
        harness.commit(stream("s1"));
        harness.commit(topic(0, "t0", 1));
        for index in 0..harness.machines.len() {
            harness.check(index).expect("the real machines pass");
        }
        assert_eq!(
            harness.workload.figures.ids_reused, 3,
            "stream, topic, partition 0"
        );
    }

    /// The reply check is not vacuous: a create that names another id than the lowest free
    /// one, or a refusal with another code, fails it.
    #[test]
    fn a_reply_with_another_id_or_code_fails_the_checker() {
        let mut reference = Reference::default();
        let created = reference.apply(1, 10, &stream("s0")).unwrap();
        assert_eq!(created.id, Some((0, 0)));
        let mut model = Metadata::default();
        model.create_stream("other", 1).unwrap();
        let id = model.create_stream("s0", 10).unwrap();
        assert_eq!(id, 1);
        let reply = [
            &RESULT_OK[..],
            &iggy_metadata::replies::stream_details(
                &iggy_metadata::replies::Fresh,
                &model.streams[&id],
                iggy_metadata::replies::Codec::Current,
            ),
        ]
        .concat();
        let error = check_reply(&stream("s0"), &Ok(created), &reply).unwrap_err();
        assert!(
            error.contains("names (1, 0), expected Some((0, 0))"),
            "{error}"
        );

        let refused = reference.apply(2, 11, &stream("s0"));
        assert_eq!(refused, Err(ErrorCode::StreamNameAlreadyExists));
        let other = iggy_metadata::replies::result_rejection(ErrorCode::InvalidStreamName);
        assert!(check_reply(&stream("s0"), &refused, &other).is_err());
        let right = iggy_metadata::replies::result_rejection(ErrorCode::StreamNameAlreadyExists);
        check_reply(&stream("s0"), &refused, &right).unwrap();
    }

    /// A replica whose model drifted (a renamed stream) fails both the reference and the
    /// snapshot comparison with a replica at the same commit.
    #[test]
    fn a_replica_that_diverged_fails_the_checker() {
        let mut harness = Harness::new(2);
        reused_stream_history(&mut harness);
        harness.commit(stream("s2"));
        harness.check(0).unwrap();
        harness.machines[1]
            .model_mut()
            .streams
            .get_mut(&1)
            .unwrap()
            .name = "drifted".into();
        let error = harness.check(1).unwrap_err();
        assert!(error.contains("differs from replica 0"), "{error}");
        // Alone at its commit, the drift still fails against the reference.
        harness.workload.snapshots.clear();
        harness.workload.checked.clear();
        let error = harness.check(1).unwrap_err();
        assert!(error.contains("is not the reference"), "{error}");
    }

    /// An acknowledged create missing from a replica, or an acknowledged delete undone, fails
    /// the acknowledgement check.
    #[test]
    fn a_lost_create_or_an_undone_delete_fails_the_checker() {
        let mut harness = Harness::new(1);
        reused_stream_history(&mut harness);
        let model = harness.machines[0].model_mut();
        let topic = model
            .streams
            .get_mut(&0)
            .unwrap()
            .topics
            .remove(&0)
            .unwrap();
        let error = harness
            .workload
            .check_acknowledged(0, harness.machines[0].model())
            .unwrap_err();
        assert!(error.contains("created at op 6 is missing"), "{error}");

        // The deleted stream's first life back under its id.
        let model = harness.machines[0].model_mut();
        model.streams.get_mut(&0).unwrap().topics.insert(0, topic);
        model.streams.get_mut(&0).unwrap().created_at = harness.workload.requests[&(CLIENT, 1)].1;
        let error = harness
            .workload
            .check_acknowledged(0, harness.machines[0].model())
            .unwrap_err();
        assert!(
            error.contains("Stream(0) created at op 2 is still on the replica"),
            "{error}"
        );
        // Checked by the delete's acknowledgement alone too.
        harness
            .workload
            .acknowledged
            .retain(|committed| committed.op != 2);
        let error = harness
            .workload
            .check_acknowledged(0, harness.machines[0].model())
            .unwrap_err();
        assert!(
            error.contains("Stream(0) removed at op 4 is back"),
            "{error}"
        );
    }

    /// A delete whose effect names another incarnation than the directory on disk (what
    /// deleting by key alone would destroy) is caught by the disk check.
    #[test]
    fn a_delete_of_another_incarnation_fails_the_checker() {
        let mut harness = Harness::new(1);
        harness.commit(stream("s0"));
        harness.commit(topic(0, "t0", 1));
        harness.check(0).unwrap();
        let partition = harness.machines[0]
            .model_mut()
            .streams
            .get_mut(&0)
            .unwrap()
            .topics
            .get_mut(&0)
            .unwrap()
            .partitions
            .get_mut(&0)
            .unwrap();
        partition.incarnation += 1;
        harness.commit(Request::DeleteStream {
            stream: Ident::Id(0),
        });
        let error = harness.check(0).unwrap_err();
        assert!(error.contains("deletes partition (0, 0, 0)"), "{error}");
    }

    /// Two replicas with the same sessions give the same canonical snapshot whatever order
    /// their sessions were registered in.
    #[test]
    fn the_canonical_snapshot_does_not_depend_on_session_order() {
        let clients: Vec<u128> = (1..40).collect();
        let mut forward = Metadata::default();
        let mut backward = Metadata::default();
        for client in &clients {
            let record = session_record(0, 0, [1; 32]);
            iggy_metadata::machine::register(&mut forward, 5, *client, &record).unwrap();
        }
        for client in clients.iter().rev() {
            let record = session_record(0, 0, [1; 32]);
            iggy_metadata::machine::register(&mut backward, 5, *client, &record).unwrap();
        }
        assert_eq!(canonical_snapshot(&forward), canonical_snapshot(&backward));
    }
}
