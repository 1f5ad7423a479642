//! The replicated metadata state: streams, topics, partitions, consumer groups, users, personal
//! access tokens and sessions. Pure and deterministic: every change is a committed metadata op
//! applied in op order, with the timestamp the primary chose before preparing it, so replaying
//! the journal rebuilds exactly this state. No I/O here; the shell acts on the returned effects.

use crate::named::{HasName, Named};
use crate::session::Sessions;
use iggy_generated::errors::ErrorCode;
use std::collections::BTreeMap;

/// A partition by its stream, topic and partition ids.
pub type PartitionKey = (u32, u32, u32);

/// A resource named by number or by name (the wire `Identifier`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ident {
    Id(u32),
    Name(String),
}

impl std::fmt::Display for Ident {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ident::Id(id) => write!(formatter, "{id}"),
            Ident::Name(name) => write!(formatter, "{name:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: BTreeMap<u32, TopicPermissions>,
}

impl StreamPermissions {
    /// Whether this grants anything within the stream (an entry may be all false).
    pub fn grants_any(&self) -> bool {
        self.manage_stream
            || self.read_stream
            || self.manage_topics
            || self.read_topics
            || self.poll_messages
            || self.send_messages
            || self
                .topics
                .values()
                .any(|t| t.manage_topic || t.read_topic || t.poll_messages || t.send_messages)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: BTreeMap<u32, StreamPermissions>,
}

impl Permissions {
    pub fn all() -> Self {
        let global = GlobalPermissions {
            manage_servers: true,
            read_servers: true,
            manage_users: true,
            read_users: true,
            manage_streams: true,
            read_streams: true,
            manage_topics: true,
            read_topics: true,
            poll_messages: true,
            send_messages: true,
        };
        Permissions {
            global,
            streams: BTreeMap::new(),
        }
    }
}

/// What a request needs, from the command table's `perm` column plus the resource it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    None,
    ReadServers,
    ManageUsers,
    ReadUsers,
    ManageStreams,
    ReadStreams,
    ManageStream(u32),
    ReadStream(u32),
    /// A stream's details (get_stream): the SDK's producer and consumer ask them at start, so
    /// whoever holds any grant within the stream may learn them too.
    DescribeStream(u32),
    ManageTopics(u32),
    ReadTopics(u32),
    ManageTopic(u32, u32),
    ReadTopic(u32, u32),
    /// A topic's details (get_topic): the SDK asks them for the partition count before a
    /// balanced or keyed send, so a producer or consumer of the topic may learn them too.
    DescribeTopic(u32, u32),
    PollMessages(u32, u32),
    SendMessages(u32, u32),
}

impl Permissions {
    /// Whether these permissions grant `need`. Broader grants imply narrower ones, as the
    /// seed's permission model has it: manage implies read, stream grants cover their topics.
    pub fn allows(&self, need: Need) -> bool {
        let g = &self.global;
        let stream = |id: u32| self.streams.get(&id);
        let topic = |s: u32, t: u32| stream(s).and_then(|sp| sp.topics.get(&t));
        match need {
            Need::None => true,
            Need::ReadServers => g.manage_servers || g.read_servers,
            Need::ManageUsers => g.manage_users,
            Need::ReadUsers => g.manage_users || g.read_users,
            Need::ManageStreams => g.manage_streams,
            Need::ReadStreams => g.manage_streams || g.read_streams,
            Need::ManageStream(s) => g.manage_streams || stream(s).is_some_and(|p| p.manage_stream),
            Need::ReadStream(s) => {
                self.allows(Need::ManageStream(s))
                    || g.read_streams
                    || stream(s).is_some_and(|p| p.read_stream)
            }
            Need::DescribeStream(s) => {
                self.allows(Need::ReadStream(s))
                    || g.manage_topics
                    || g.read_topics
                    || g.poll_messages
                    || g.send_messages
                    || stream(s).is_some_and(StreamPermissions::grants_any)
            }
            Need::ManageTopics(s) => {
                g.manage_streams
                    || g.manage_topics
                    || stream(s).is_some_and(|p| p.manage_stream || p.manage_topics)
            }
            Need::ReadTopics(s) => {
                self.allows(Need::ManageTopics(s))
                    || self.allows(Need::ReadStream(s))
                    || g.read_topics
                    || stream(s).is_some_and(|p| p.read_topics)
            }
            Need::ManageTopic(s, t) => {
                self.allows(Need::ManageTopics(s)) || topic(s, t).is_some_and(|p| p.manage_topic)
            }
            Need::ReadTopic(s, t) => {
                self.allows(Need::ManageTopic(s, t))
                    || self.allows(Need::ReadTopics(s))
                    || topic(s, t).is_some_and(|p| p.read_topic)
            }
            Need::DescribeTopic(s, t) => {
                self.allows(Need::ReadTopic(s, t))
                    || self.allows(Need::PollMessages(s, t))
                    || self.allows(Need::SendMessages(s, t))
            }
            Need::PollMessages(s, t) => {
                g.poll_messages
                    || self.allows(Need::ReadTopic(s, t))
                    || stream(s).is_some_and(|p| p.poll_messages)
                    || topic(s, t).is_some_and(|p| p.poll_messages)
            }
            Need::SendMessages(s, t) => {
                g.send_messages
                    || self.allows(Need::ManageTopic(s, t))
                    || stream(s).is_some_and(|p| p.send_messages)
                    || topic(s, t).is_some_and(|p| p.send_messages)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStatus {
    Active = 1,
    Inactive = 2,
}

#[derive(Debug, Clone)]
pub struct User {
    pub id: u32,
    pub username: String,
    /// PHC string (argon2id).
    pub password_hash: String,
    pub status: UserStatus,
    pub permissions: Option<Permissions>,
    pub created_at: u64,
}

impl User {
    pub fn allows(&self, need: Need) -> bool {
        need == Need::None
            || self.id == ROOT_USER_ID
            || self.permissions.as_ref().is_some_and(|p| p.allows(need))
    }
}

pub const ROOT_USER_ID: u32 = 0;

#[derive(Debug, Clone)]
pub struct PersonalAccessToken {
    pub user_id: u32,
    pub name: String,
    /// Hash of the token; the token itself is shown once, at creation.
    pub token_hash: [u8; 32],
    /// Microseconds since the epoch; `None` never expires.
    pub expiry_at: Option<u64>,
}

/// When a partition write is acknowledged (the topic's `durability` and
/// `consumer_offset_durability` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopicDurability {
    /// Journaled to the OS: survives a process crash.
    #[default]
    Replicated,
    /// Journal fsynced first: survives a machine crash.
    Persisted,
}

impl TopicDurability {
    /// `replicated` or `persisted`, in any ASCII case (the official `Durability`'s `FromStr`).
    pub fn parse(value: &str) -> Option<Self> {
        match crate::options::keyword(value.as_bytes(), &["replicated", "persisted"]) {
            Ok("replicated") => Some(TopicDurability::Replicated),
            Ok(_) => Some(TopicDurability::Persisted),
            Err(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizePolicy {
    Dynamic,
    Fixed,
}

impl ResizePolicy {
    /// A `partition_resize_policy` value: `fixed`, or `mutable` (`dynamic`, the older name),
    /// in any ASCII case (the official `PartitionResizePolicy`'s `FromStr`).
    pub fn parse(value: &[u8]) -> Result<Self, ErrorCode> {
        match crate::options::keyword(value, &["fixed", "mutable", "dynamic"])? {
            "fixed" => Ok(ResizePolicy::Fixed),
            _ => Ok(ResizePolicy::Dynamic),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Partition {
    pub id: u32,
    pub created_at: u64,
    /// Non-zero and fixed for this partition's history: the metadata op that created it.
    pub incarnation: u64,
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub id: u32,
    pub name: String,
    /// The metadata op that created the group (0: unknown, read from a snapshot of format 10).
    /// An offset of its id resolved before it belongs to an earlier group with the same id.
    pub created_at_op: u64,
    /// Members in join order: client ids of their sessions.
    pub members: Vec<u128>,
    /// Changes whenever the membership (and so the assignment) changes. Polls report it as
    /// their `owner_generation`, which the official consumer trusts to name one owner's history
    /// (it skips offsets it consumed under the same generation), so it starts at the creating
    /// op shifted as partition incarnations are: a group created again under a deleted group's
    /// id starts above every generation its predecessor reached (barring 2^20 changes).
    pub generation: u64,
    /// Each partition's owner and the generation from which it has owned the partition without
    /// a break, as this node applied the group's changes. Kept in memory only: a group restored
    /// from a snapshot knows no owner from before the generation it restored, which
    /// [`ConsumerGroup::admits_captured_owner`] then asks for.
    pub owners: BTreeMap<u32, (u128, u64)>,
}

impl ConsumerGroup {
    /// Partitions of `partition_ids` assigned to `member`: round robin over members in
    /// join order, so every partition has exactly one owner.
    pub fn assignment(&self, member: u128, partition_ids: &[u32]) -> Option<Vec<u32>> {
        let index = self.members.iter().position(|m| *m == member)?;
        let count = self.members.len();
        Some(
            partition_ids
                .iter()
                .enumerate()
                .filter(|(i, _)| i % count == index)
                .map(|(_, p)| *p)
                .collect(),
        )
    }

    /// The membership or the topic's partitions (now `partition_ids`) changed: a new
    /// generation, and each partition whose owner changed is owned from it.
    pub fn reassign(&mut self, partition_ids: &[u32]) {
        self.generation += 1;
        let owners = partition_ids
            .iter()
            .filter_map(|&partition| {
                let owner = self.owner_of(partition, partition_ids)?;
                let since = match self.owners.get(&partition) {
                    Some(&(before, since)) if before == owner => since,
                    _ => self.generation,
                };
                Some((partition, (owner, since)))
            })
            .collect();
        self.owners = owners;
    }

    pub fn owner_of(&self, partition: u32, partition_ids: &[u32]) -> Option<u128> {
        let position = partition_ids.iter().position(|p| *p == partition)?;
        if self.members.is_empty() {
            return None;
        }
        Some(self.members[position % self.members.len()])
    }

    /// Whether a request of `client` that captured the owner generation `captured` (the
    /// `owner_generation` of the poll that delivered its position; 0: none captured) still acts
    /// as `partition`'s owner: `client` owns it now and has owned it without a break since
    /// `captured` (a generation of this group: not one of a deleted group that had its id, all
    /// below this group's first, nor one it has not reached). A member that lost the partition
    /// is refused whatever it captured, and so is one that got it back later for a position it
    /// read before it lost it: a late commit never moves a later owner's offset back. Where
    /// this node knows no owner history (a group restored from a snapshot), only captures of
    /// the current generation pass.
    pub fn admits_captured_owner(
        &self,
        captured: u64,
        client: u128,
        partition: u32,
        partition_ids: &[u32],
    ) -> bool {
        if captured == 0 {
            return true;
        }
        // A group saved by a build before generations started at the creating op counted
        // them from 1 (below the shifted op): its predecessors' cannot be told apart, as then.
        let shifted = self.created_at_op << 20;
        let first = if self.generation >= shifted {
            shifted
        } else {
            1
        };
        if !(first..=self.generation).contains(&captured)
            || self.owner_of(partition, partition_ids) != Some(client)
        {
            return false;
        }
        let since = match self.owners.get(&partition) {
            Some(&(owner, since)) if owner == client => since,
            _ => self.generation,
        };
        captured >= since
    }
}

#[derive(Debug, Clone)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub partitions: BTreeMap<u32, Partition>,
    pub message_expiry: u64,
    pub max_topic_size: u64,
    pub compression_algorithm: u8,
    pub replication_factor: u8,
    pub resize_policy: ResizePolicy,
    pub durability: TopicDurability,
    pub consumer_offset_durability: TopicDurability,
    /// Segment size in bytes; 0 = the server's configured size.
    pub segment_size: u64,
    /// The explicit options as the client set them (an options block), reported back as is.
    pub options: Vec<u8>,
    /// The metadata op of the latest creation or deletion of one of its consumer groups (the
    /// topic's creation op before any; 0: unknown, read from a snapshot of format 10): while it
    /// and a partition's state stay the same, which of its group offsets are orphaned does not
    /// change.
    pub groups_changed_at_op: u64,
    pub consumer_groups: BTreeMap<u32, ConsumerGroup>,
}

impl HasName for Topic {
    fn name(&self) -> &str {
        &self.name
    }
    fn set_name(&mut self, name: String) {
        self.name = name;
    }
}

impl Topic {
    pub fn partition_ids(&self) -> Vec<u32> {
        self.partitions.keys().copied().collect()
    }

    /// Each consumer group's id and the op that created it (0 when unknown: read from a
    /// snapshot of format 10).
    pub fn live_groups(&self) -> BTreeMap<u32, u64> {
        self.consumer_groups
            .values()
            .map(|group| (group.id, group.created_at_op))
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub topics: Named<Topic>,
}

impl HasName for Stream {
    fn name(&self) -> &str {
        &self.name
    }
    fn set_name(&mut self, name: String) {
        self.name = name;
    }
}

/// The whole replicated metadata state.
#[derive(Debug, Default)]
pub struct Metadata {
    pub streams: Named<Stream>,
    pub users: BTreeMap<u32, User>,
    pub tokens: Vec<PersonalAccessToken>,
    pub sessions: Sessions,
    /// The last metadata op applied.
    pub commit: u64,
    /// Requests the node itself has committed (root creation, session lease expiry); the next
    /// one is numbered one higher.
    pub system_requests: u64,
}

/// What the shell must do on disk after an op changed the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Open (creating if needed) the log of a partition.
    OpenPartition {
        stream: u32,
        topic: u32,
        partition: u32,
        incarnation: u64,
    },
    /// Stop a partition and delete its files, which only the named (deleted) incarnation's
    /// directory may hold: a later incarnation of the same ids is never touched.
    DeletePartition {
        stream: u32,
        topic: u32,
        partition: u32,
        incarnation: u64,
    },
    /// A consumer group was deleted by metadata op `op`: its offsets (kind 2 and kind 3) go
    /// from every partition of its topic, through a committed op of each partition's group
    /// that names `op` (applied once, and never to a partition created after `op`).
    DeleteGroupOffsets {
        stream: u32,
        topic: u32,
        group: u32,
        op: u64,
    },
    /// The sessions of `clients` ended and every partition retired them: their slots in the
    /// metadata group's client table free up with this op (the last step of an ordered
    /// retirement).
    ReleaseSessionSlots { clients: Vec<u128> },
}

/// Lowest unused key: ids are 0-based and reused after deletion, like a slab.
fn lowest_free<V>(map: &BTreeMap<u32, V>) -> u32 {
    let mut candidate = 0;
    for key in map.keys() {
        if *key != candidate {
            break;
        }
        candidate += 1;
    }
    candidate
}

fn find_named<'a, V: HasName>(named: &'a Named<V>, ident: &Ident) -> Option<&'a V> {
    match ident {
        Ident::Id(id) => named.get(id),
        Ident::Name(name) => named.by_name(name),
    }
}

fn find<'a, V>(
    map: &'a BTreeMap<u32, V>,
    ident: &Ident,
    name_of: impl Fn(&V) -> &str,
) -> Option<&'a V> {
    match ident {
        Ident::Id(id) => map.get(id),
        Ident::Name(name) => map.values().find(|v| name_of(v) == name),
    }
}

/// A user name as creating a user takes it: 3 to 50 bytes, no control character.
pub fn check_username(username: &str) -> Result<(), ErrorCode> {
    match (3..=50).contains(&username.len()) && valid_name(username) {
        true => Ok(()),
        false => Err(ErrorCode::InvalidUsername),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && !name.chars().any(char::is_control)
}

/// Topic settings chosen at creation.
#[derive(Debug, Clone)]
pub struct TopicSettings {
    pub message_expiry: u64,
    pub max_topic_size: u64,
    pub compression_algorithm: u8,
    pub replication_factor: u8,
    pub resize_policy: ResizePolicy,
    pub durability: TopicDurability,
    pub consumer_offset_durability: TopicDurability,
    pub segment_size: u64,
    pub options: Vec<u8>,
}

impl Default for TopicSettings {
    fn default() -> Self {
        TopicSettings {
            message_expiry: 0,
            max_topic_size: 0,
            compression_algorithm: 1,
            replication_factor: 1,
            resize_policy: ResizePolicy::Dynamic,
            durability: TopicDurability::Replicated,
            consumer_offset_durability: TopicDurability::Replicated,
            segment_size: 0,
            options: Vec::new(),
        }
    }
}

pub const MAX_PARTITIONS_PER_TOPIC: u32 = 100_000;

/// Topics of one stream: a partition's consensus group id packs the topic id into 12 bits
/// (spec/frames.spec), as the official client packs its namespaces (`MAX_TOPICS`); a 4097th
/// topic would take topic 0's groups. Ids are the lowest free, so they stay below this.
pub const MAX_TOPICS_PER_STREAM: usize = 1 << 12;

/// Streams: the official client packs a stream id into 20 bits of its namespaces
/// (`MAX_STREAMS`), so a stream id beyond them would reach another stream's partitions there.
pub const MAX_STREAMS: usize = 1 << 20;

impl Metadata {
    // ----- lookups -----

    pub fn stream(&self, ident: &Ident) -> Result<&Stream, ErrorCode> {
        find_named(&self.streams, ident).ok_or(match ident {
            Ident::Id(_) => ErrorCode::StreamIdNotFound,
            Ident::Name(_) => ErrorCode::StreamNameNotFound,
        })
    }

    pub fn topic(&self, stream: &Ident, topic: &Ident) -> Result<(&Stream, &Topic), ErrorCode> {
        let stream = self.stream(stream)?;
        let topic = find_named(&stream.topics, topic).ok_or(match topic {
            Ident::Id(_) => ErrorCode::TopicIdNotFound,
            Ident::Name(_) => ErrorCode::TopicNameNotFound,
        })?;
        Ok((stream, topic))
    }

    fn topic_mut(&mut self, stream: &Ident, topic: &Ident) -> Result<&mut Topic, ErrorCode> {
        let (s, t) = self.topic(stream, topic).map(|(s, t)| (s.id, t.id))?;
        Ok(self
            .streams
            .get_mut(&s)
            .and_then(|s| s.topics.get_mut(&t))
            .expect("found above"))
    }

    pub fn group(
        &self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
    ) -> Result<(&Stream, &Topic, &ConsumerGroup), ErrorCode> {
        let (stream, topic) = self.topic(stream, topic)?;
        let group = find(&topic.consumer_groups, group, |g| &g.name).ok_or(match group {
            Ident::Id(_) => ErrorCode::ConsumerGroupIdNotFound,
            Ident::Name(_) => ErrorCode::ConsumerGroupNameNotFound,
        })?;
        Ok((stream, topic, group))
    }

    pub fn user(&self, ident: &Ident) -> Result<&User, ErrorCode> {
        find(&self.users, ident, |u| &u.username).ok_or(ErrorCode::ResourceNotFound)
    }

    /// The revision of the partition set, what a session's retirement evidence covers: the
    /// highest incarnation of a live partition (0 with none). A replica reports an ended
    /// session retired on every partition copy it hosts for its model's set, with this number;
    /// FinalizeSession names the revision its quorum of reports shared and releases nothing
    /// once the model's differs.
    ///
    /// Derived from the model, not counted: it is the same on every replica at the same op and
    /// needs no snapshot field. Sound because an incarnation (`(op << 20) | id`) is unique and
    /// every new one exceeds all before it (its creating op is later): any create, of a
    /// stream's, topic's or partition's partitions, or a recreation under reused ids, raises
    /// it. A delete lowers it only when it removes the highest one, and may leave it as it
    /// was; but a set is always a subset of every earlier set with the same revision: each of
    /// its partitions has an incarnation at most that revision, so it was created no later
    /// than the earlier set's highest one and was live then, unless deleted before, and a
    /// deleted incarnation never comes back. So evidence gathered at an earlier model with the
    /// same revision covers every partition of the later one. Segment deletion, purges and
    /// offsets leave it alone.
    pub fn partition_set_revision(&self) -> u64 {
        self.streams
            .values()
            .flat_map(|stream| stream.topics.values())
            .flat_map(|topic| topic.partitions.values())
            .map(|partition| partition.incarnation)
            .max()
            .unwrap_or(0)
    }

    /// Every live partition, by key, with its incarnation.
    pub fn live_partitions(&self) -> BTreeMap<(u32, u32, u32), u64> {
        let mut live = BTreeMap::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for partition in topic.partitions.values() {
                    live.insert((stream.id, topic.id, partition.id), partition.incarnation);
                }
            }
        }
        live
    }

    // ----- streams -----

    pub fn create_stream(&mut self, name: &str, now: u64) -> Result<u32, ErrorCode> {
        if !valid_name(name) {
            return Err(ErrorCode::InvalidStreamName);
        }
        if self.streams.id_of(name).is_some() {
            return Err(ErrorCode::StreamNameAlreadyExists);
        }
        if self.streams.len() >= MAX_STREAMS {
            return Err(ErrorCode::TooManyStreams);
        }
        let id = self.streams.lowest_free();
        let stream = Stream {
            id,
            name: name.to_string(),
            created_at: now,
            topics: Named::default(),
        };
        self.streams.insert(id, stream);
        Ok(id)
    }

    pub fn delete_stream(&mut self, ident: &Ident) -> Result<Vec<Effect>, ErrorCode> {
        let id = self.stream(ident)?.id;
        let stream = self.streams.remove(&id).expect("found above");
        // Its grants go with it: the id is reused, and a grant must not reach the stream
        // created next under it.
        for permissions in self
            .users
            .values_mut()
            .filter_map(|u| u.permissions.as_mut())
        {
            permissions.streams.remove(&id);
        }
        Ok(stream
            .topics
            .values()
            .flat_map(|t| {
                t.partitions.values().map(move |p| Effect::DeletePartition {
                    stream: id,
                    topic: t.id,
                    partition: p.id,
                    incarnation: p.incarnation,
                })
            })
            .collect())
    }

    pub fn rename_stream(&mut self, ident: &Ident, name: &str) -> Result<(), ErrorCode> {
        if !valid_name(name) {
            return Err(ErrorCode::InvalidStreamName);
        }
        let id = self.stream(ident)?.id;
        if self.streams.id_of(name).is_some_and(|other| other != id) {
            return Err(ErrorCode::StreamNameAlreadyExists);
        }
        self.streams.rename(id, name);
        Ok(())
    }

    // ----- topics and partitions -----

    pub fn create_topic(
        &mut self,
        stream: &Ident,
        name: &str,
        partitions: u32,
        settings: TopicSettings,
        op: u64,
        now: u64,
    ) -> Result<(u32, u32, Vec<Effect>), ErrorCode> {
        if !valid_name(name) {
            return Err(ErrorCode::InvalidTopicName);
        }
        if partitions > MAX_PARTITIONS_PER_TOPIC {
            return Err(ErrorCode::TooManyPartitions);
        }
        if settings.replication_factor == 0 {
            return Err(ErrorCode::InvalidReplicationFactor);
        }
        let stream_id = self.stream(stream)?.id;
        let stream = self.streams.get_mut(&stream_id).expect("found");
        if stream.topics.id_of(name).is_some() {
            return Err(ErrorCode::TopicNameAlreadyExists);
        }
        if stream.topics.len() >= MAX_TOPICS_PER_STREAM {
            return Err(ErrorCode::TooManyTopics);
        }
        let id = stream.topics.lowest_free();
        let mut topic = Topic {
            id,
            name: name.to_string(),
            created_at: now,
            partitions: BTreeMap::new(),
            message_expiry: settings.message_expiry,
            max_topic_size: settings.max_topic_size,
            compression_algorithm: settings.compression_algorithm,
            replication_factor: settings.replication_factor,
            resize_policy: settings.resize_policy,
            durability: settings.durability,
            consumer_offset_durability: settings.consumer_offset_durability,
            segment_size: settings.segment_size,
            options: settings.options.clone(),
            groups_changed_at_op: op,
            consumer_groups: BTreeMap::new(),
        };
        let effects = add_partitions(stream_id, &mut topic, partitions, op, now);
        stream.topics.insert(id, topic);
        Ok((stream_id, id, effects))
    }

    pub fn delete_topic(
        &mut self,
        stream: &Ident,
        topic: &Ident,
    ) -> Result<Vec<Effect>, ErrorCode> {
        let (s, t) = self.topic(stream, topic).map(|(s, t)| (s.id, t.id))?;
        let topic = self
            .streams
            .get_mut(&s)
            .expect("found")
            .topics
            .remove(&t)
            .expect("found");
        // As for a stream: a grant on this topic must not reach the next one under its id.
        for permissions in self
            .users
            .values_mut()
            .filter_map(|u| u.permissions.as_mut())
        {
            if let Some(stream) = permissions.streams.get_mut(&s) {
                stream.topics.remove(&t);
            }
        }
        Ok(topic
            .partitions
            .values()
            .map(|p| Effect::DeletePartition {
                stream: s,
                topic: t,
                partition: p.id,
                incarnation: p.incarnation,
            })
            .collect())
    }

    pub fn create_partitions(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        count: u32,
        op: u64,
        now: u64,
    ) -> Result<Vec<Effect>, ErrorCode> {
        let stream_id = self.stream(stream)?.id;
        let topic = self.topic_mut(stream, topic)?;
        if topic.resize_policy == ResizePolicy::Fixed {
            return Err(ErrorCode::PartitionResizeDisabled);
        }
        if count == 0 {
            return Err(ErrorCode::InvalidPartitionsCount);
        }
        if topic.partitions.len() as u64 + u64::from(count) > u64::from(MAX_PARTITIONS_PER_TOPIC) {
            return Err(ErrorCode::TooManyPartitions);
        }
        Ok(add_partitions(stream_id, topic, count, op, now))
    }

    /// Deletes the `count` highest-numbered partitions.
    pub fn delete_partitions(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        count: u32,
    ) -> Result<Vec<Effect>, ErrorCode> {
        let stream_id = self.stream(stream)?.id;
        let topic = self.topic_mut(stream, topic)?;
        if topic.resize_policy == ResizePolicy::Fixed {
            return Err(ErrorCode::PartitionResizeDisabled);
        }
        if count == 0 || count as usize > topic.partitions.len() {
            return Err(ErrorCode::InvalidPartitionsCount);
        }
        let doomed: Vec<u32> = topic
            .partitions
            .keys()
            .rev()
            .take(count as usize)
            .copied()
            .collect();
        let removed: Vec<Partition> = doomed
            .iter()
            .filter_map(|id| topic.partitions.remove(id))
            .collect();
        let partition_ids = topic.partition_ids();
        for group in topic.consumer_groups.values_mut() {
            group.reassign(&partition_ids);
        }
        Ok(removed
            .into_iter()
            .map(|partition| Effect::DeletePartition {
                stream: stream_id,
                topic: topic.id,
                partition: partition.id,
                incarnation: partition.incarnation,
            })
            .collect())
    }

    /// Applies `name`, `message_expiry`, `max_topic_size`, `compression_algorithm`,
    /// `replication_factor` and `partition_resize_policy` options to a topic. The block and
    /// the reset keys are checked against the topic catalog first, here, so that 0.12.0's
    /// resource.update (16) and 0.11.1's topic.update (304) refuse the same updates.
    pub fn update_topic(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        block: &[u8],
        reset: &[&str],
    ) -> Result<(), ErrorCode> {
        crate::options::validate(crate::options::TOPIC_OPTIONS, block, reset, false)?;
        let options = crate::options::typed_entries(block)?;
        let stream_id = self.stream(stream)?.id;
        let topic_id = self.topic(stream, topic)?.1.id;
        let mut updated = self.streams[&stream_id].topics[&topic_id].clone();
        for key in reset {
            match *key {
                "message_expiry" => updated.message_expiry = 0,
                "max_topic_size" => updated.max_topic_size = 0,
                _ => {}
            }
        }
        for (key, kind, value) in options {
            match key {
                "name" => {
                    let name = crate::options::as_str(value)?;
                    if !valid_name(name) {
                        return Err(ErrorCode::InvalidTopicName);
                    }
                    let held_by = self.streams[&stream_id].topics.id_of(name);
                    if held_by.is_some_and(|other| other != topic_id) {
                        return Err(ErrorCode::TopicNameAlreadyExists);
                    }
                    updated.name = name.to_string();
                }
                "message_expiry" => {
                    updated.message_expiry = crate::options::number(key, kind, value)?
                }
                "max_topic_size" => {
                    updated.max_topic_size = crate::options::number(key, kind, value)?
                }
                "compression_algorithm" => {
                    updated.compression_algorithm = crate::options::compression_algorithm(value)?
                }
                "replication_factor" => {
                    updated.replication_factor = crate::options::as_u64(value)? as u8
                }
                "partition_resize_policy" => updated.resize_policy = ResizePolicy::parse(value)?,
                _ => return Err(ErrorCode::UnsupportedOptionKey),
            }
        }
        // The name is the topic's own field, not one of its options: a renamed topic lists the
        // options an unrenamed one with the same settings lists.
        let merged = crate::options::merge(&updated.options, block, reset)?;
        updated.options = crate::options::merge(&merged, &[], &["name"])?;
        self.streams
            .get_mut(&stream_id)
            .expect("found")
            .topics
            .insert(topic_id, updated);
        Ok(())
    }

    // ----- consumer groups -----

    /// Creates a group by the metadata op `op`.
    pub fn create_group(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        name: &str,
        op: u64,
    ) -> Result<u32, ErrorCode> {
        if !valid_name(name) {
            return Err(ErrorCode::InvalidConsumerGroupName);
        }
        let topic = self.topic_mut(stream, topic)?;
        if topic.consumer_groups.values().any(|g| g.name == name) {
            return Err(ErrorCode::ConsumerGroupNameAlreadyExists);
        }
        let id = lowest_free(&topic.consumer_groups);
        topic.groups_changed_at_op = op;
        topic.consumer_groups.insert(
            id,
            ConsumerGroup {
                id,
                name: name.to_string(),
                created_at_op: op,
                members: Vec::new(),
                generation: op << 20,
                owners: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    /// Deletes the group (metadata op `op`); its offsets in the topic's partitions go with it
    /// (the returned effect).
    pub fn delete_group(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
        op: u64,
    ) -> Result<Effect, ErrorCode> {
        let (s, t, g) = self.group(stream, topic, group)?;
        let (stream, topic, group) = (s.id, t.id, g.id);
        let changed = self
            .streams
            .get_mut(&stream)
            .and_then(|s| s.topics.get_mut(&topic))
            .expect("found");
        changed.groups_changed_at_op = op;
        changed.consumer_groups.remove(&group);
        Ok(Effect::DeleteGroupOffsets {
            stream,
            topic,
            group,
            op,
        })
    }

    fn group_mut(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
    ) -> Result<&mut ConsumerGroup, ErrorCode> {
        let id = self.group(stream, topic, group)?.2.id;
        Ok(self
            .topic_mut(stream, topic)?
            .consumer_groups
            .get_mut(&id)
            .expect("found"))
    }

    pub fn join_group(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
        member: u128,
    ) -> Result<(), ErrorCode> {
        let partition_ids = self.topic(stream, topic)?.1.partition_ids();
        let group = self.group_mut(stream, topic, group)?;
        if !group.members.contains(&member) {
            group.members.push(member);
            group.reassign(&partition_ids);
        }
        Ok(())
    }

    pub fn leave_group(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
        member: u128,
    ) -> Result<(), ErrorCode> {
        let partition_ids = self.topic(stream, topic)?.1.partition_ids();
        let group = self.group_mut(stream, topic, group)?;
        let before = group.members.len();
        group.members.retain(|m| *m != member);
        if group.members.len() == before {
            return Err(ErrorCode::ConsumerGroupMemberNotFound);
        }
        group.reassign(&partition_ids);
        Ok(())
    }

    /// Ends every session of `user_id` (the user was deactivated or deleted).
    pub fn end_sessions_of(&mut self, user_id: u32) {
        let clients: Vec<u128> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.user_id == user_id)
            .map(|(client, _)| *client)
            .collect();
        for client in clients {
            self.sessions.end(client);
            self.leave_all_groups(client);
        }
    }

    /// Removes `member` from every group (its session ended).
    pub fn leave_all_groups(&mut self, member: u128) {
        for stream in self.streams.values_mut() {
            for topic in stream.topics.values_mut() {
                let partition_ids = topic.partition_ids();
                for group in topic.consumer_groups.values_mut() {
                    let before = group.members.len();
                    group.members.retain(|m| *m != member);
                    if group.members.len() != before {
                        group.reassign(&partition_ids);
                    }
                }
            }
        }
    }

    // ----- users and tokens -----

    pub fn create_user(
        &mut self,
        username: &str,
        password_hash: String,
        status: UserStatus,
        permissions: Option<Permissions>,
        now: u64,
    ) -> Result<u32, ErrorCode> {
        check_username(username)?;
        if self.users.values().any(|u| u.username == username) {
            return Err(ErrorCode::UserAlreadyExists);
        }
        self.grants_exist(permissions.as_ref())?;
        let id = lowest_free(&self.users);
        self.users.insert(
            id,
            User {
                id,
                username: username.to_string(),
                password_hash,
                status,
                permissions,
                created_at: now,
            },
        );
        Ok(id)
    }

    pub fn delete_user(&mut self, ident: &Ident) -> Result<u32, ErrorCode> {
        let id = self.user(ident)?.id;
        if id == ROOT_USER_ID {
            return Err(ErrorCode::CannotDeleteUser);
        }
        self.users.remove(&id);
        self.tokens.retain(|t| t.user_id != id);
        self.end_sessions_of(id);
        Ok(id)
    }

    pub fn update_permissions(
        &mut self,
        ident: &Ident,
        permissions: Option<Permissions>,
    ) -> Result<(), ErrorCode> {
        let id = self.user(ident)?.id;
        if id == ROOT_USER_ID {
            return Err(ErrorCode::CannotChangePermissions);
        }
        self.grants_exist(permissions.as_ref())?;
        self.users.get_mut(&id).expect("found").permissions = permissions;
        Ok(())
    }

    /// Every stream and topic `permissions` grants on exists (the SDK's contract for
    /// create_user and update_permissions): ids are reused, so a grant on a missing one would
    /// reach whatever is created next under it, which its deletion otherwise prevents.
    fn grants_exist(&self, permissions: Option<&Permissions>) -> Result<(), ErrorCode> {
        for (stream_id, stream_grant) in permissions.iter().flat_map(|p| &p.streams) {
            let stream = self
                .streams
                .get(stream_id)
                .ok_or(ErrorCode::StreamIdNotFound)?;
            if stream_grant
                .topics
                .keys()
                .any(|t| !stream.topics.contains_key(t))
            {
                return Err(ErrorCode::TopicIdNotFound);
            }
        }
        Ok(())
    }

    pub fn set_password(&mut self, ident: &Ident, password_hash: String) -> Result<(), ErrorCode> {
        let id = self.user(ident)?.id;
        self.users.get_mut(&id).expect("found").password_hash = password_hash;
        Ok(())
    }

    /// Renames or (de)activates a user, at the request of user `by`. Root is never
    /// deactivated, and only root renames root: a user manager taking root's name could have
    /// root's operators sign in as a user of its making.
    pub fn update_user(
        &mut self,
        by: u32,
        ident: &Ident,
        username: Option<&str>,
        status: Option<UserStatus>,
    ) -> Result<(), ErrorCode> {
        let id = self.user(ident)?.id;
        let root_renamed = username.is_some() && by != ROOT_USER_ID;
        let root_deactivated = status == Some(UserStatus::Inactive);
        if id == ROOT_USER_ID && (root_renamed || root_deactivated) {
            return Err(ErrorCode::CannotModifyRootUser);
        }
        if let Some(name) = username {
            if name.len() < 3 || name.len() > 50 || !valid_name(name) {
                return Err(ErrorCode::InvalidUsername);
            }
            if self
                .users
                .values()
                .any(|u| u.username == name && u.id != id)
            {
                return Err(ErrorCode::UserAlreadyExists);
            }
        }
        let user = self.users.get_mut(&id).expect("found");
        if let Some(name) = username {
            user.username = name.to_string();
        }
        if let Some(status) = status {
            user.status = status;
            if status == UserStatus::Inactive {
                self.end_sessions_of(id);
            }
        }
        Ok(())
    }

    pub const TOKENS_PER_USER_MAX: usize = 100;

    pub fn create_token(&mut self, token: PersonalAccessToken) -> Result<(), ErrorCode> {
        if !(3..=30).contains(&token.name.len()) || !valid_name(&token.name) {
            return Err(ErrorCode::InvalidPersonalAccessTokenName);
        }
        let owned: Vec<_> = self
            .tokens
            .iter()
            .filter(|t| t.user_id == token.user_id)
            .collect();
        if owned.iter().any(|t| t.name == token.name) {
            return Err(ErrorCode::PersonalAccessTokenAlreadyExists);
        }
        if owned.len() >= Self::TOKENS_PER_USER_MAX {
            return Err(ErrorCode::PersonalAccessTokensLimitReached);
        }
        self.tokens.push(token);
        Ok(())
    }

    pub fn delete_token(&mut self, user_id: u32, name: &str) -> Result<(), ErrorCode> {
        let before = self.tokens.len();
        self.tokens
            .retain(|t| !(t.user_id == user_id && t.name == name));
        if self.tokens.len() == before {
            return Err(ErrorCode::ResourceNotFound);
        }
        Ok(())
    }
}

fn add_partitions(stream: u32, topic: &mut Topic, count: u32, op: u64, now: u64) -> Vec<Effect> {
    let first = topic
        .partitions
        .keys()
        .next_back()
        .map_or(0, |last| last + 1);
    (first..first + count)
        .map(|id| {
            // The creating op names the history; the partition index keeps it unique per op.
            let incarnation = (op << 20) | u64::from(id & 0xF_FFFF);
            topic.partitions.insert(
                id,
                Partition {
                    id,
                    created_at: now,
                    incarnation,
                },
            );
            let partition_ids = topic.partition_ids();
            for group in topic.consumer_groups.values_mut() {
                group.reassign(&partition_ids);
            }
            Effect::OpenPartition {
                stream,
                topic: topic.id,
                partition: id,
                incarnation,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_zero_based_and_reuse_the_lowest_free_slot() {
        let mut m = Metadata::default();
        assert_eq!(m.create_stream("a", 1), Ok(0));
        assert_eq!(m.create_stream("b", 1), Ok(1));
        assert_eq!(
            m.create_stream("a", 1),
            Err(ErrorCode::StreamNameAlreadyExists)
        );
        m.delete_stream(&Ident::Id(0)).unwrap();
        assert_eq!(m.create_stream("c", 1), Ok(0));
        assert_eq!(m.stream(&Ident::Name("b".into())).unwrap().id, 1);
    }

    /// A partition's group id has 12 bits for its topic: a stream's 4097th topic (id 4096)
    /// once took topic 0's groups in a cluster, and topic 0 took no more writes.
    #[test]
    fn a_stream_holds_at_most_4096_topics_and_a_freed_id_is_taken_again() {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        let stream = Ident::Id(0);
        for t in 0..MAX_TOPICS_PER_STREAM {
            let created = m.create_topic(&stream, &format!("t{t}"), 0, TopicSettings::default(), 2, 1);
            assert_eq!(created.map(|(_, id, _)| id), Ok(t as u32));
        }
        let over = m.create_topic(&stream, "over", 0, TopicSettings::default(), 3, 1);
        assert_eq!(over.map(|(_, id, _)| id), Err(ErrorCode::TooManyTopics));
        m.delete_topic(&stream, &Ident::Id(7)).unwrap();
        let again = m.create_topic(&stream, "again", 0, TopicSettings::default(), 4, 1);
        assert_eq!(again.map(|(_, id, _)| id), Ok(7));
        assert_eq!(m.create_stream("another", 1), Ok(1), "the limit is per stream");
    }

    /// Filled directly (a million creates would each look through every name), then created
    /// through: the limit a partition group's id packs stream ids into.
    #[test]
    fn a_node_holds_at_most_2_pow_20_streams_and_a_freed_id_is_taken_again() {
        let mut m = Metadata::default();
        for id in 0..MAX_STREAMS as u32 - 1 {
            let stream = Stream {
                id,
                name: id.to_string(),
                created_at: 1,
                topics: Named::default(),
            };
            m.streams.insert(id, stream);
        }
        let last = MAX_STREAMS as u32 - 1;
        assert_eq!(m.create_stream("last", 1), Ok(last));
        assert_eq!(m.create_stream("over", 1), Err(ErrorCode::TooManyStreams));
        m.delete_stream(&Ident::Id(7)).unwrap();
        assert_eq!(m.create_stream("again", 1), Ok(7));
    }

    /// Root keeps its name against user managers (one renamed it and created a user under
    /// the name root's operators sign in with) and is never deactivated; a refused update
    /// changes nothing, the rename it carried included.
    #[test]
    fn only_root_renames_root_and_a_refused_update_changes_nothing() {
        let mut m = Metadata::default();
        let create = |m: &mut Metadata, name| {
            m.create_user(name, String::new(), UserStatus::Active, None, 3)
        };
        assert_eq!(create(&mut m, "iggy"), Ok(ROOT_USER_ID));
        let manager = create(&mut m, "manager").unwrap();
        let root = Ident::Id(ROOT_USER_ID);
        assert_eq!(
            m.update_user(manager, &root, Some("iggy2"), None),
            Err(ErrorCode::CannotModifyRootUser)
        );
        assert_eq!(
            m.update_user(
                ROOT_USER_ID,
                &root,
                Some("admin"),
                Some(UserStatus::Inactive)
            ),
            Err(ErrorCode::CannotModifyRootUser)
        );
        assert_eq!(m.users[&ROOT_USER_ID].username, "iggy");
        assert_eq!(
            m.update_user(ROOT_USER_ID, &root, Some("admin"), None),
            Ok(())
        );
        assert_eq!(m.users[&ROOT_USER_ID].username, "admin");
        let renamed = m.update_user(manager, &Ident::Id(manager), Some("ops"), None);
        assert_eq!(renamed, Ok(()));
    }

    #[test]
    fn a_grant_on_a_missing_stream_or_topic_is_refused_and_changes_nothing() {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        m.create_topic(&Ident::Id(0), "t", 1, TopicSettings::default(), 2, 1)
            .unwrap();
        let on = |stream: u32, topics: &[u32]| Permissions {
            global: GlobalPermissions::default(),
            streams: [(
                stream,
                StreamPermissions {
                    read_stream: true,
                    topics: topics
                        .iter()
                        .map(|t| (*t, TopicPermissions::default()))
                        .collect(),
                    ..Default::default()
                },
            )]
            .into(),
        };
        let create = |m: &mut Metadata, p| {
            m.create_user("guest", String::new(), UserStatus::Active, Some(p), 3)
        };
        assert_eq!(create(&mut m, on(1, &[])), Err(ErrorCode::StreamIdNotFound));
        assert_eq!(create(&mut m, on(0, &[1])), Err(ErrorCode::TopicIdNotFound));
        assert!(m.users.is_empty());
        m.create_user("root", String::new(), UserStatus::Active, None, 3)
            .unwrap();
        let user = create(&mut m, on(0, &[0])).unwrap();
        for (refused, code) in [
            (on(1, &[]), ErrorCode::StreamIdNotFound),
            (on(0, &[0, 1]), ErrorCode::TopicIdNotFound),
        ] {
            assert_eq!(
                m.update_permissions(&Ident::Id(user), Some(refused)),
                Err(code)
            );
        }
        assert_eq!(m.users[&user].permissions, Some(on(0, &[0])));
    }

    #[test]
    fn deleting_a_stream_or_topic_takes_its_grants_with_it() {
        let mut m = Metadata::default();
        m.create_stream("kept", 1).unwrap();
        m.create_stream("gone", 1).unwrap();
        for (name, op) in [("t", 2), ("u", 3)] {
            m.create_topic(&Ident::Id(0), name, 1, TopicSettings::default(), op, 1)
                .unwrap();
        }
        let topic = TopicPermissions {
            poll_messages: true,
            ..Default::default()
        };
        let stream = |topics: &[u32]| StreamPermissions {
            read_stream: true,
            topics: topics.iter().map(|t| (*t, topic)).collect(),
            ..Default::default()
        };
        let permissions = Permissions {
            global: GlobalPermissions::default(),
            streams: [(0, stream(&[0, 1])), (1, stream(&[]))].into(),
        };
        let user = m
            .create_user(
                "guest",
                String::new(),
                UserStatus::Active,
                Some(permissions),
                1,
            )
            .unwrap();
        m.delete_stream(&Ident::Id(1)).unwrap();
        m.delete_topic(&Ident::Id(0), &Ident::Id(1)).unwrap();
        let left = m.users[&user].permissions.clone().unwrap();
        assert_eq!(left.streams.keys().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(
            left.streams[&0].topics.keys().copied().collect::<Vec<_>>(),
            vec![0]
        );
    }

    #[test]
    fn topics_get_partitions_with_distinct_nonzero_incarnations() {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        let (_, topic, effects) = m
            .create_topic(&Ident::Id(0), "t", 3, TopicSettings::default(), 7, 1)
            .unwrap();
        assert_eq!((topic, effects.len()), (0, 3));
        let (_, t) = m.topic(&Ident::Id(0), &Ident::Name("t".into())).unwrap();
        let incarnations: Vec<u64> = t.partitions.values().map(|p| p.incarnation).collect();
        assert!(incarnations.iter().all(|i| *i != 0));
        assert_eq!(incarnations.len(), 3);
        assert_ne!(incarnations[0], incarnations[1]);
    }

    #[test]
    fn fixed_topics_refuse_partition_changes() {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        let settings = TopicSettings {
            resize_policy: ResizePolicy::Fixed,
            ..Default::default()
        };
        m.create_topic(&Ident::Id(0), "t", 1, settings, 2, 1)
            .unwrap();
        let (s, t) = (Ident::Id(0), Ident::Id(0));
        assert_eq!(
            m.create_partitions(&s, &t, 1, 3, 1),
            Err(ErrorCode::PartitionResizeDisabled)
        );
        assert_eq!(
            m.delete_partitions(&s, &t, 1),
            Err(ErrorCode::PartitionResizeDisabled)
        );
    }

    #[test]
    fn topic_updates_are_checked_against_the_catalog_and_refused_whole() {
        use crate::options::{encode, kind};
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        m.create_topic(&Ident::Id(0), "t", 1, TopicSettings::default(), 2, 1)
            .unwrap();
        let (s, t) = (Ident::Id(0), Ident::Id(0));
        let rename = ("name", kind::STRING, &b"renamed"[..]);
        let refused = [
            // Create-only: "gzip" was once read as the integer 0x70697a67.
            (
                encode(&[rename, ("compression_algorithm", kind::STRING, b"gzip")]),
                ErrorCode::OptionNotUpdatable,
            ),
            (
                encode(&[rename, ("durability", kind::STRING, b"persisted")]),
                ErrorCode::OptionNotUpdatable,
            ),
            (
                encode(&[rename, ("message_expiry", kind::UINT64, &[1, 2, 3])]),
                ErrorCode::InvalidOptionValue,
            ),
            (
                encode(&[rename, ("no_such_option", kind::STRING, b"x")]),
                ErrorCode::UnsupportedOptionKey,
            ),
        ];
        for (block, code) in refused {
            assert_eq!(m.update_topic(&s, &t, &block, &[]), Err(code));
        }
        assert_eq!(
            m.update_topic(&s, &t, &encode(&[rename]), &["segment_size"]),
            Err(ErrorCode::OptionNotUpdatable)
        );
        let topic = &m.streams[&0].topics[&0];
        assert_eq!((topic.name.as_str(), topic.compression_algorithm), ("t", 1));

        let expiry = 7u64.to_le_bytes();
        let accepted = encode(&[rename, ("message_expiry", kind::UINT64, &expiry)]);
        m.update_topic(&s, &t, &accepted, &[]).unwrap();
        let topic = &m.streams[&0].topics[&0];
        assert_eq!((topic.name.as_str(), topic.message_expiry), ("renamed", 7));
        // The name is no option: the block lists what was set, as an unrenamed topic's does.
        assert_eq!(topic.options, encode(&[("message_expiry", kind::UINT64, &expiry)]));
    }

    /// The official consumer drops polled messages at or below the offset it last consumed
    /// while a poll reports the owner generation it consumed under: a group created again under
    /// a deleted group's id must report none of the generations its predecessor did, or the
    /// consumer skips the new group's first messages as already read.
    #[test]
    fn a_group_created_again_under_a_deleted_groups_id_reports_new_generations() {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        m.create_topic(&Ident::Id(0), "t", 2, TopicSettings::default(), 2, 1)
            .unwrap();
        let (s, t, g) = (Ident::Id(0), Ident::Id(0), Ident::Id(0));
        let generation = |m: &Metadata| m.streams[&0].topics[&0].consumer_groups[&0].generation;
        m.create_group(&s, &t, "g", 3).unwrap();
        let mut predecessor = vec![generation(&m)];
        for client in [7, 8] {
            m.join_group(&s, &t, &g, client).unwrap();
            predecessor.push(generation(&m));
        }
        // Several changes in one op: partitions added, then both members' sessions ended.
        m.create_partitions(&s, &t, 3, 6, 1).unwrap();
        predecessor.push(generation(&m));
        m.leave_all_groups(7);
        m.leave_all_groups(8);
        predecessor.push(generation(&m));
        m.delete_group(&s, &t, &g, 8).unwrap();

        m.create_group(&s, &t, "g", 9).unwrap();
        let mut successor = vec![generation(&m)];
        for client in [7, 8, 9] {
            m.join_group(&s, &t, &g, client).unwrap();
            successor.push(generation(&m));
        }
        let reused: Vec<&u64> = successor
            .iter()
            .filter(|g| predecessor.contains(g))
            .collect();
        assert!(reused.is_empty(), "{predecessor:?} then {successor:?}");
        assert!(successor[0] > *predecessor.iter().max().unwrap());
    }

    /// A captured owner generation admits only the partition's current owner, under one of
    /// this group's generations; nothing captured is not judged here.
    /// Stream 0, its topic 0 of `partitions` partitions, and its group 0 created by op 3 with
    /// client 7 its only member.
    fn one_member_group(partitions: u32) -> Metadata {
        let mut m = Metadata::default();
        m.create_stream("s", 1).unwrap();
        m.create_topic(
            &Ident::Id(0),
            "t",
            partitions,
            TopicSettings::default(),
            2,
            1,
        )
        .unwrap();
        let (s, t, g) = (Ident::Id(0), Ident::Id(0), Ident::Id(0));
        m.create_group(&s, &t, "g", 3).unwrap();
        m.join_group(&s, &t, &g, 7).unwrap();
        m
    }

    #[test]
    fn a_captured_owner_generation_admits_only_the_current_owner_of_this_group() {
        let mut m = one_member_group(2);
        let (s, t, g) = (Ident::Id(0), Ident::Id(0), Ident::Id(0));
        let group = |m: &Metadata| m.streams[&0].topics[&0].consumer_groups[&0].clone();
        let (partitions, captured) = ([0, 1], group(&m).generation);
        assert!(group(&m).admits_captured_owner(captured, 7, 1, &partitions));
        assert!(!group(&m).admits_captured_owner(captured + 1, 7, 1, &partitions));
        // Below the group's first generation (its creating op, 3, shifted): a predecessor's.
        assert!(!group(&m).admits_captured_owner((3 << 20) - 1, 7, 1, &partitions));
        assert!(group(&m).admits_captured_owner(0, 8, 1, &partitions));

        // Client 8 joins and takes partition 1; 7 keeps partition 0 under its old capture.
        m.join_group(&s, &t, &g, 8).unwrap();
        assert!(!group(&m).admits_captured_owner(captured, 7, 1, &partitions));
        assert!(group(&m).admits_captured_owner(captured, 7, 0, &partitions));
        assert!(group(&m).admits_captured_owner(group(&m).generation, 8, 1, &partitions));
    }

    /// A member that lost a partition and got it back acts as its owner only for positions it
    /// read since: a commit of a position read before it lost the partition moved the
    /// interim owner's offset back (its messages delivered again). A partition that never
    /// changed hands keeps admitting older captures; a group restored from a snapshot only the
    /// current generation's.
    #[test]
    fn a_partition_owned_again_admits_only_captures_from_after_it_came_back() {
        let mut m = one_member_group(2);
        let (s, t, g) = (Ident::Id(0), Ident::Id(0), Ident::Id(0));
        let group = |m: &Metadata| m.streams[&0].topics[&0].consumer_groups[&0].clone();
        let partitions = [0, 1];
        let before = group(&m).generation;
        m.join_group(&s, &t, &g, 8).unwrap();
        assert!(!group(&m).admits_captured_owner(before, 7, 1, &partitions));
        m.leave_group(&s, &t, &g, 8).unwrap();
        let back = group(&m).generation;
        assert!(
            !group(&m).admits_captured_owner(before, 7, 1, &partitions),
            "read before it lost partition 1"
        );
        assert!(group(&m).admits_captured_owner(back, 7, 1, &partitions));
        assert!(
            group(&m).admits_captured_owner(before, 7, 0, &partitions),
            "partition 0 never changed hands"
        );
        let mut restored = group(&m);
        restored.owners.clear();
        assert!(!restored.admits_captured_owner(before, 7, 0, &partitions));
        assert!(restored.admits_captured_owner(back, 7, 0, &partitions));
    }

    /// A group saved by a build before generations started at the creating op (its generation
    /// counted from 1, below `created_at_op << 20`) still admits its owner's captured
    /// generation after an upgrade: otherwise every auto-commit of its members is refused.
    /// Restored from a snapshot, it knows no owner history, so an earlier capture is refused.
    #[test]
    fn a_group_whose_generations_predate_the_creation_shift_admits_its_owner() {
        let mut legacy = one_member_group(1).streams[&0].topics[&0].consumer_groups[&0].clone();
        legacy.generation = 2;
        legacy.owners.clear();
        assert!(legacy.admits_captured_owner(2, 7, 0, &[0]));
        assert!(
            !legacy.admits_captured_owner(1, 7, 0, &[0]),
            "no owner history before the restored generation"
        );
        assert!(
            !legacy.admits_captured_owner(3, 7, 0, &[0]),
            "not reached yet"
        );
        assert!(
            !legacy.admits_captured_owner(2, 8, 0, &[0]),
            "not the owner"
        );
    }

    #[test]
    fn group_assignment_covers_every_partition_once() {
        let group = ConsumerGroup {
            id: 0,
            name: "g".into(),
            members: vec![5, 9],
            generation: 3,
            ..Default::default()
        };
        let partitions = [0, 1, 2, 3, 4];
        let a = group.assignment(5, &partitions).unwrap();
        let b = group.assignment(9, &partitions).unwrap();
        assert_eq!((a, b), (vec![0, 2, 4], vec![1, 3]));
        assert_eq!(group.owner_of(3, &partitions), Some(9));
        assert_eq!(group.assignment(1, &partitions), None);
    }

    #[test]
    fn permissions_imply_narrower_grants() {
        let mut p = Permissions::default();
        assert!(!p.allows(Need::SendMessages(1, 2)));
        p.global.read_streams = true;
        assert!(p.allows(Need::PollMessages(1, 2)));
        assert!(!p.allows(Need::SendMessages(1, 2)));
        let mut stream = StreamPermissions::default();
        stream.topics.insert(
            2,
            TopicPermissions {
                send_messages: true,
                ..Default::default()
            },
        );
        p.streams.insert(1, stream);
        assert!(p.allows(Need::SendMessages(1, 2)));
        assert!(!p.allows(Need::SendMessages(1, 3)));
    }

    #[test]
    fn a_topics_producers_and_consumers_may_describe_it_and_its_stream_and_nothing_more() {
        let on_topic = |grant: TopicPermissions| {
            let mut stream = StreamPermissions::default();
            stream.topics.insert(2, grant);
            Permissions {
                streams: BTreeMap::from([(1, stream)]),
                ..Default::default()
            }
        };
        let sender = on_topic(TopicPermissions {
            send_messages: true,
            ..Default::default()
        });
        let poller = on_topic(TopicPermissions {
            poll_messages: true,
            ..Default::default()
        });
        for p in [&sender, &poller] {
            assert!(p.allows(Need::DescribeStream(1)));
            assert!(!p.allows(Need::DescribeStream(3)));
            assert!(!p.allows(Need::ReadStream(1)));
            assert!(p.allows(Need::DescribeTopic(1, 2)));
            assert!(!p.allows(Need::DescribeTopic(1, 3)));
            assert!(!p.allows(Need::ReadTopic(1, 2)));
            assert!(!p.allows(Need::ReadTopics(1)));
        }
        let mut global = Permissions::default();
        global.global.send_messages = true;
        assert!(global.allows(Need::DescribeTopic(7, 9)));
        assert!(global.allows(Need::DescribeStream(7)));
        assert!(!global.allows(Need::ReadStreams));
        assert!(!Permissions::default().allows(Need::DescribeTopic(1, 2)));
        // An entry for the stream that grants nothing opens nothing.
        let empty = on_topic(TopicPermissions::default());
        assert!(!empty.allows(Need::DescribeStream(1)));
        assert!(!empty.allows(Need::DescribeTopic(1, 2)));
    }
}
