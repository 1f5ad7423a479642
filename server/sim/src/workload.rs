//! The partition's clients and the checker of its history.
//!
//! Clients send batches of 1 to 6 messages (each message id unique in the run), now and then a
//! malformed batch (refused, taking no offsets), store consumer and group offsets, and end
//! their sessions with a `RetireSessions` op. Every committed op's reply feeds a [`History`]:
//! the message committed at each offset (offsets dense from 0, each message id once), the next
//! offset after each op and the stored offsets. The checks:
//!
//! - every acknowledged send names the offsets its messages got, holding exactly the bytes
//!   sent, in order;
//! - after every step, each live replica's committed next offset is the history's at its
//!   commit, and a poll on a replica in normal status (random start: offset, first, last,
//!   timestamp, a consumer's next) returns exactly the committed messages of its range, so
//!   never an uncommitted one nor one lost and replaced; every 64 ticks and at the end, each
//!   live replica's whole committed log is read back and compared;
//! - at the end, every acknowledged send is read back at its offsets on every replica that
//!   committed it, and a replica that applied every op holds the history's consumer offsets.

use crate::log::{SimLog, frame_end};
use crate::machine::{PartitionMachine, RestartFigures};
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
use iggy_generated::payloads::SessionIdentity;
use iggy_partition::{OffsetOwner, PartitionWrite, StartAt, WriteResult};
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::machine::{NodeView, Workload};
use iggy_vsr::{Entry, Status};
use std::collections::{BTreeMap, HashMap};

/// What one client request does.
#[derive(Clone, Debug)]
enum Request {
    /// A well-formed batch of these message frames.
    Send {
        frames: Vec<Bytes>,
    },
    /// A batch whose length field lies: refused, taking no offsets.
    Malformed,
    Store {
        owner: OffsetOwner,
        offset: u64,
    },
    Logout,
}

/// A request as first made: retries send the same bytes.
#[derive(Clone, Debug)]
struct Planned {
    request: Request,
    operation: u8,
    body: Bytes,
}

/// Counts of what a run exercised.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Sends acknowledged to their client, each checked against the history.
    pub sends_acknowledged: u64,
    /// Messages in those sends.
    pub messages_acknowledged: u64,
    /// Messages committed (the history's length).
    pub messages_committed: u64,
    /// Malformed batches refused.
    pub malformed_refused: u64,
    /// Offset stores acknowledged.
    pub stores_acknowledged: u64,
    /// Polls checked, and the messages they returned.
    pub polls: u64,
    pub messages_polled: u64,
    /// Whole committed logs read back and compared.
    pub full_reads: u64,
    /// Over every replica's restarts.
    pub restarts: RestartFigures,
}

/// The committed history every replica must agree with.
#[derive(Debug, Default)]
pub struct History {
    /// The frame of the message committed at each offset (dense from 0).
    messages: Vec<Bytes>,
    /// The offset of each committed message id.
    ids: HashMap<u128, u64>,
    /// The next offset after each committed op that appended.
    next_after: BTreeMap<u64, u64>,
    /// Consumer and group offsets after the latest committed op.
    offsets: BTreeMap<OffsetOwner, u64>,
    /// The latest op applied.
    last_op: u64,
}

impl History {
    /// Op `op` appended `frames` at `base_offset`.
    pub fn commit_send(
        &mut self,
        op: u64,
        base_offset: u64,
        frames: &[Bytes],
    ) -> Result<(), String> {
        if base_offset != self.messages.len() as u64 {
            return Err(format!(
                "op {op} appended at offset {base_offset}, but the next offset is {}",
                self.messages.len()
            ));
        }
        for frame in frames {
            let offset = self.messages.len() as u64;
            if let Some(earlier) = self.ids.insert(message_id(frame), offset) {
                return Err(format!(
                    "op {op}: message {} committed at offsets {earlier} and {offset}",
                    message_id(frame)
                ));
            }
            self.messages.push(frame.clone());
        }
        self.next_after.insert(op, self.messages.len() as u64);
        Ok(())
    }

    /// The next offset once every op up to `op` is applied.
    pub fn next_offset_at(&self, op: u64) -> u64 {
        self.next_after
            .range(..=op)
            .next_back()
            .map_or(0, |(_, next)| *next)
    }

    /// A read of `expected` messages from `start` returned `messages`: they must be exactly the
    /// committed ones at those offsets.
    pub fn check_read(
        &self,
        start: u64,
        expected: u32,
        messages: &[(u64, Bytes)],
    ) -> Result<(), String> {
        if messages.len() != expected as usize {
            return Err(format!(
                "a read of {expected} messages from offset {start} returned {}",
                messages.len()
            ));
        }
        for (position, (offset, frame)) in messages.iter().enumerate() {
            if *offset != start + position as u64 {
                return Err(format!(
                    "a read from offset {start} returned offset {offset} at position {position}"
                ));
            }
            match self.messages.get(*offset as usize) {
                Some(committed) if committed == frame => {}
                Some(_) => {
                    return Err(format!(
                        "offset {offset} holds other bytes than the message committed there"
                    ));
                }
                None => return Err(format!("offset {offset} was never committed")),
            }
        }
        Ok(())
    }
}

/// The partition workload of one seed.
#[derive(Debug)]
pub struct PartitionWorkload {
    seed: u64,
    rng: Rng,
    requests: HashMap<(u128, u64), Planned>,
    history: History,
    /// Acknowledged sends: (op, base offset, frames).
    acknowledged: Vec<(u64, u64, Vec<Bytes>)>,
    next_message_id: u128,
    /// The timestamp of the next batch, in microseconds.
    clock: u64,
    figures: Figures,
}

impl PartitionWorkload {
    /// The workload for `seed` (its own random stream, apart from the faults').
    pub fn new(seed: u64) -> Self {
        PartitionWorkload {
            seed,
            rng: Rng::new(seed ^ 0x9a27_1710),
            requests: HashMap::new(),
            history: History::default(),
            acknowledged: Vec::new(),
            next_message_id: 1,
            clock: 1_000_000,
            figures: Figures::default(),
        }
    }

    /// What the run exercised.
    pub fn figures(&self) -> Figures {
        Figures {
            messages_committed: self.history.messages.len() as u64,
            ..self.figures.clone()
        }
    }

    fn fail(&self, what: String) -> ! {
        panic!("seed {}: partition checker: {what}", self.seed)
    }

    fn plan(&mut self, client: u128, logout: bool) -> Planned {
        self.clock += 1 + self.rng.below(1_000);
        let roll = self.rng.below(100);
        let request = if logout {
            Request::Logout
        } else if roll < 55 {
            let count = 1 + self.rng.below(6);
            let frames = (0..count)
                .map(|index| {
                    let id = self.next_message_id;
                    self.next_message_id += 1;
                    let payload: Vec<u8> = (0..self.rng.below(48))
                        .map(|_| self.rng.next_u64() as u8)
                        .collect();
                    let headers_length = if self.rng.chance(20) {
                        self.rng.below(12) as usize
                    } else {
                        0
                    };
                    frame(id, index as u32, &payload, &vec![0xab; headers_length])
                })
                .collect();
            Request::Send { frames }
        } else if roll < 60 {
            Request::Malformed
        } else {
            let id = self.rng.below(3) as u32;
            let owner = if self.rng.chance(50) {
                OffsetOwner::Consumer(id)
            } else {
                OffsetOwner::Group(id)
            };
            let offset = self.rng.below(self.history.messages.len() as u64 + 1);
            Request::Store { owner, offset }
        };
        let write = match &request {
            Request::Send { frames } => PartitionWrite::Send {
                batch: batch_of_frames(self.clock, frames),
            },
            Request::Malformed => {
                let mut batch = batch_of_frames(self.clock, &[frame(0, 0, b"m", b"")]).to_vec();
                let length = BatchHeader::BATCH_LENGTH_OFFSET;
                batch[length] = batch[length].wrapping_add(1);
                PartitionWrite::Send {
                    batch: batch.into(),
                }
            }
            Request::Store { owner, offset } => PartitionWrite::StoreOffset {
                owner: *owner,
                offset: *offset,
                resolved_at: 0,
            },
            Request::Logout => PartitionWrite::RetireSessions {
                sessions: vec![SessionIdentity {
                    client_id: client,
                    session: 1,
                    metadata_watermark: 0,
                }],
            },
        };
        Planned {
            request,
            operation: write.operation(),
            body: write.encode(),
        }
    }

    /// A poll on a random replica in normal status, checked against the history.
    fn poll(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        let index = self.rng.below(nodes.len() as u64) as usize;
        let node = &nodes[index];
        if node.replica.is_none_or(|r| r.status() != Status::Normal) {
            return;
        }
        let next = node.machine.committed_next_offset();
        let start = match self.rng.below(5) {
            0 => StartAt::Offset(self.rng.below(next + 3)),
            1 => StartAt::First,
            2 => StartAt::Last,
            3 => StartAt::Timestamp(1_000_000 + self.rng.below(self.clock - 1_000_000 + 1)),
            _ => StartAt::Next(OffsetOwner::Consumer(self.rng.below(3) as u32)),
        };
        let count = self.rng.below(12) as u32;
        let (range, messages) = node.machine.poll(start, count);
        if range.start + u64::from(range.count) > next {
            self.fail(format!(
                "replica {index} served offsets up to {} past its committed {next}",
                range.start + u64::from(range.count)
            ));
        }
        if let Err(why) = self.history.check_read(range.start, range.count, &messages) {
            self.fail(format!("replica {index} poll {start:?}: {why}"));
        }
        self.figures.polls += 1;
        self.figures.messages_polled += messages.len() as u64;
    }

    /// Reads each live replica's whole committed log back.
    fn read_all(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        for (index, node) in nodes.iter().enumerate() {
            if node.replica.is_none() {
                continue;
            }
            let next = node.machine.committed_next_offset();
            let (range, messages) = node.machine.poll(StartAt::Offset(0), next as u32);
            if let Err(why) = self.history.check_read(0, next as u32, &messages) {
                self.fail(format!("replica {index} full read ({range:?}): {why}"));
            }
            self.figures.full_reads += 1;
        }
    }
}

impl Workload for PartitionWorkload {
    type Machine = PartitionMachine;

    fn machine(&self, replica_count: u8, _replica: u8) -> PartitionMachine {
        PartitionMachine::new(replica_count)
    }

    fn request(&mut self, client: u128, request: u64, logout: bool) -> (u8, Bytes) {
        if !self.requests.contains_key(&(client, request)) {
            let planned = self.plan(client, logout);
            self.requests.insert((client, request), planned);
        }
        let planned = &self.requests[&(client, request)];
        (planned.operation, planned.body.clone())
    }

    fn committed(&mut self, op: u64, entry: &Entry, reply: &Bytes) {
        self.history.last_op = op;
        let result = WriteResult::decode(reply);
        match PartitionWrite::decode(entry.operation, &entry.body) {
            Some(PartitionWrite::Send { batch }) => match result {
                WriteResult::Appended { base_offset, count } => {
                    let frames = frames_of(&batch);
                    if frames.len() != count as usize {
                        self.fail(format!(
                            "op {op} appended {count} of {} messages",
                            frames.len()
                        ));
                    }
                    if let Err(why) = self.history.commit_send(op, base_offset, &frames) {
                        self.fail(why);
                    }
                }
                WriteResult::Failed(ErrorCode::InvalidMessagesSize)
                    if SimLog::check(batch.clone()).is_none() => {}
                other => self.fail(format!("op {op}: a send committed as {other:?}")),
            },
            Some(PartitionWrite::StoreOffset { owner, offset, .. }) => {
                if result != WriteResult::Done {
                    self.fail(format!("op {op}: an offset store committed as {result:?}"));
                }
                self.history.offsets.insert(owner, offset);
            }
            Some(PartitionWrite::RetireSessions { .. }) if result == WriteResult::Done => {}
            _ => self.fail(format!("op {op}: unexpected operation {}", entry.operation)),
        }
    }

    fn acknowledged(&mut self, client: u128, request: u64, op: u64, reply: &Bytes) {
        let Some(planned) = self.requests.get(&(client, request)) else {
            self.fail(format!("client {client} request {request} was never made"));
        };
        let request_made = planned.request.clone();
        match (request_made, WriteResult::decode(reply)) {
            (Request::Send { frames }, WriteResult::Appended { base_offset, count }) => {
                if count as usize != frames.len() {
                    self.fail(format!(
                        "op {op} acknowledged {count} of {} messages",
                        frames.len()
                    ));
                }
                let read: Vec<(u64, Bytes)> = (base_offset..).zip(frames.iter().cloned()).collect();
                if let Err(why) = self.history.check_read(base_offset, count, &read) {
                    self.fail(format!("acknowledged send at op {op}: {why}"));
                }
                self.figures.sends_acknowledged += 1;
                self.figures.messages_acknowledged += u64::from(count);
                self.acknowledged.push((op, base_offset, frames));
            }
            (Request::Malformed, WriteResult::Failed(ErrorCode::InvalidMessagesSize)) => {
                self.figures.malformed_refused += 1;
            }
            (Request::Store { .. }, WriteResult::Done) => self.figures.stores_acknowledged += 1,
            (Request::Logout, WriteResult::Done) => {}
            (request, result) => self.fail(format!(
                "client {client} request {request:?} acknowledged as {result:?}"
            )),
        }
    }

    fn check_step(&mut self, _seed: u64, now: u64, nodes: &[NodeView<'_, PartitionMachine>]) {
        for (index, node) in nodes.iter().enumerate() {
            let Some(replica) = node.replica else {
                continue;
            };
            let expected = self.history.next_offset_at(replica.commit_min());
            let next = node.machine.committed_next_offset();
            if next != expected {
                self.fail(format!(
                    "replica {index} at commit {} serves up to offset {next}, the history {expected}",
                    replica.commit_min()
                ));
            }
        }
        if self.rng.chance(25) {
            self.poll(nodes);
        }
        if now.is_multiple_of(64) {
            self.read_all(nodes);
        }
    }

    fn check_end(&mut self, _seed: u64, nodes: &[NodeView<'_, PartitionMachine>]) {
        self.read_all(nodes);
        for node in nodes {
            let restarts = node.machine.restart_figures();
            self.figures.restarts.stowed_restored += restarts.stowed_restored;
            self.figures.restarts.journals_cut += restarts.journals_cut;
            self.figures.restarts.unaccounted_dropped += restarts.unaccounted_dropped;
        }
        for (index, node) in nodes.iter().enumerate() {
            let Some(replica) = node.replica else {
                continue;
            };
            for (op, base_offset, frames) in &self.acknowledged {
                if replica.commit_min() < *op {
                    continue;
                }
                let (_, messages) = node
                    .machine
                    .poll(StartAt::Offset(*base_offset), frames.len() as u32);
                let sent: Vec<&Bytes> = frames.iter().collect();
                let read: Vec<&Bytes> = messages.iter().map(|(_, frame)| frame).collect();
                if read != sent {
                    self.fail(format!(
                        "replica {index}: the send acknowledged at op {op} does not read back at offset {base_offset}"
                    ));
                }
            }
            if replica.commit_min() >= self.history.last_op
                && node.machine.core().offsets() != &self.history.offsets
            {
                self.fail(format!("replica {index} holds other consumer offsets"));
            }
        }
    }
}

/// A message frame: the spec's 48-byte header, then the payload and user headers.
pub fn frame(id: u128, offset_delta: u32, payload: &[u8], headers: &[u8]) -> Bytes {
    let header = MessageFrameHeader {
        checksum: 0,
        id,
        offset_delta,
        timestamp_delta: 0,
        user_headers_length: headers.len() as u32,
        payload_length: payload.len() as u32,
    };
    [&header.to_bytes()[..], payload, headers].concat().into()
}

/// A batch of `frames` stamped at `timestamp`, as a producer sends it.
pub fn batch_of_frames(timestamp: u64, frames: &[Bytes]) -> Bytes {
    let length = BatchHeader::SIZE + frames.iter().map(Bytes::len).sum::<usize>();
    let header = BatchHeader {
        partition_id: 0,
        base_offset: 0,
        base_timestamp: timestamp,
        origin_timestamp: timestamp,
        batch_length: length as u64,
        batch_checksum: 0,
        message_count: frames.len() as u32,
    };
    let mut batch = header.to_bytes().to_vec();
    frames
        .iter()
        .for_each(|frame| batch.extend_from_slice(frame));
    batch.into()
}

/// A batch of messages `(id, payload)` stamped at `timestamp`.
pub fn encode_batch<'a>(
    timestamp: u64,
    messages: impl IntoIterator<Item = (u128, &'a [u8])>,
) -> Bytes {
    let frames: Vec<Bytes> = messages
        .into_iter()
        .enumerate()
        .map(|(index, (id, payload))| frame(id, index as u32, payload, b""))
        .collect();
    batch_of_frames(timestamp, &frames)
}

/// The frames of a well-formed batch.
fn frames_of(batch: &Bytes) -> Vec<Bytes> {
    let Some(checked) = SimLog::check(batch.clone()) else {
        return Vec::new();
    };
    let mut position = BatchHeader::SIZE;
    (0..checked.count)
        .map(|_| {
            let end = frame_end(batch, position).expect("a checked batch");
            let frame = batch.slice(position..end);
            position = end;
            frame
        })
        .collect()
}

fn message_id(frame: &[u8]) -> u128 {
    MessageFrameHeader::decode_fixed(&frame[..MessageFrameHeader::SIZE]).map_or(0, |h| h.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::appended;
    use iggy_vsr::sim::machine::Machine;

    fn send(machine: &mut PartitionMachine, op: u64, id: u128) -> (u64, Vec<Bytes>) {
        let frames = vec![
            frame(id, 0, b"first", b""),
            frame(id + 1, 1, b"second", b"h"),
        ];
        let body = batch_of_frames(5, &frames);
        let operation = PartitionWrite::Send {
            batch: body.clone(),
        }
        .operation();
        let reply = machine.apply(op, 1, operation, &body).reply;
        let (base_offset, count) = appended(&reply).expect("appended");
        assert_eq!(count, 2);
        (base_offset, frames)
    }

    /// The checker is not vacuous: a replica whose log holds one flipped byte, or that serves
    /// a message at the wrong offset, or a message never committed, fails the read check.
    #[test]
    fn a_corrupted_or_misplaced_read_fails_the_checker() {
        let mut machine = PartitionMachine::new(3);
        let mut history = History::default();
        for (op, id) in [(1, 10), (2, 20)] {
            let (base_offset, frames) = send(&mut machine, op, id);
            history.commit_send(op, base_offset, &frames).unwrap();
        }
        let (range, messages) = machine.poll(StartAt::First, 10);
        assert_eq!(range.count, 4);
        history
            .check_read(range.start, range.count, &messages)
            .unwrap();

        machine.log_mut().corrupt(2);
        let (range, messages) = machine.poll(StartAt::First, 10);
        let error = history
            .check_read(range.start, range.count, &messages)
            .unwrap_err();
        assert!(error.contains("offset 2 holds other bytes"), "{error}");

        let mut shifted = messages.clone();
        shifted.remove(0);
        assert!(
            history.check_read(0, 3, &shifted).is_err(),
            "a message at the wrong offset"
        );
        assert!(
            history.check_read(0, 4, &messages[..3]).is_err(),
            "a short read"
        );
        let uncommitted = [(4, frame(99, 0, b"x", b""))];
        let error = history.check_read(4, 1, &uncommitted).unwrap_err();
        assert!(error.contains("never committed"), "{error}");
    }

    /// A history refuses a gap in the offsets and a message committed twice.
    #[test]
    fn the_history_refuses_a_gap_and_a_duplicate_message() {
        let mut history = History::default();
        let frames = vec![frame(1, 0, b"a", b"")];
        history.commit_send(1, 0, &frames).unwrap();
        assert!(
            history
                .commit_send(2, 5, &[frame(2, 0, b"b", b"")])
                .is_err()
        );
        let error = history.commit_send(3, 1, &frames).unwrap_err();
        assert!(error.contains("committed at offsets 0 and 1"), "{error}");
        assert_eq!(history.next_offset_at(1), 1);
        assert_eq!(history.next_offset_at(0), 0);
    }

    /// A malformed batch is refused by the real machine and takes no offsets.
    #[test]
    fn a_malformed_batch_takes_no_offsets() {
        let mut workload = PartitionWorkload::new(1);
        let mut machine = PartitionMachine::new(1);
        let mut planned = workload.plan(7, false);
        while !matches!(planned.request, Request::Malformed) {
            planned = workload.plan(7, false);
        }
        let reply = machine.apply(1, 7, planned.operation, &planned.body).reply;
        assert_eq!(
            WriteResult::decode(&reply),
            WriteResult::Failed(ErrorCode::InvalidMessagesSize)
        );
        assert_eq!(machine.committed_next_offset(), 0);
    }
}
