//! Client table: per client session its latest request number and cached reply.
//!
//! The table is part of the replicated state: every replica updates it while committing, in log
//! order, so all replicas hold the same table. It is bounded by `clients_table_max`: a register
//! committed at capacity is refused, never paid for by evicting a live client (its retry
//! protection would go with it). Slots come back only by ordered retirement: a committed op
//! names the clients whose sessions ended, and every replica retires them at that op.

use bytes::Bytes;
use std::collections::BTreeMap;

/// Client ids from this one up are the node's own clients (the system client that proposes
/// expiries and retirements, the retention pass): always admitted and not counted against the
/// capacity, so a table full of users can still be retired.
pub const NODE_CLIENTS_MIN: u128 = u128::MAX - 15;

/// What the table holds for one registered client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSession {
    /// Session number: the op number at which the register request committed.
    pub session: u64,
    /// Latest committed request number.
    pub request: u64,
    /// Op at which `request` committed.
    pub reply_op: u64,
    /// Reply bytes of `request`, replayed for duplicates.
    pub reply: Bytes,
}

/// Classification of an incoming request against the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestCheck {
    /// Not seen yet: prepare it.
    New,
    /// Duplicate of the latest committed request: replay this reply.
    Duplicate { op: u64, reply: Bytes },
    /// Older than the latest committed request.
    TooOld,
    /// The client has no session (and the request is not a register).
    SessionUnknown,
}

/// Outcome of committing a register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// A new session numbered `session` (the register's op).
    New { session: u64 },
    /// The client already had session `session`; nothing changed.
    Existing { session: u64 },
    /// Every slot is taken: nothing changed, the client stays unregistered.
    Full,
}

impl Registration {
    /// The session number, which is also the register's reply (8 little-endian bytes); `None`
    /// for a register refused at capacity.
    pub fn session(&self) -> Option<u64> {
        match self {
            Registration::New { session } | Registration::Existing { session } => Some(*session),
            Registration::Full => None,
        }
    }
}

/// The bounded client table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTable {
    clients_max: usize,
    /// Whether `clients_max` is the group's committed nomination (else the configuration's).
    nominated: bool,
    sessions: BTreeMap<u128, ClientSession>,
}

impl ClientTable {
    /// Empty table holding at most `clients_max` sessions.
    pub fn new(clients_max: usize) -> Self {
        assert!(clients_max > 0);
        ClientTable {
            clients_max,
            nominated: false,
            sessions: BTreeMap::new(),
        }
    }

    /// The capacity.
    pub fn clients_max(&self) -> usize {
        self.clients_max
    }

    /// The committed capacity, once the group nominated one.
    pub fn nominated(&self) -> Option<usize> {
        self.nominated.then_some(self.clients_max)
    }

    /// A committed nomination: fixes the capacity unless one was committed before. Sessions
    /// beyond a smaller capacity stay until they are retired.
    pub fn nominate(&mut self, clients_max: usize) {
        if !self.nominated {
            self.clients_max = clients_max;
            self.nominated = true;
        }
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when no client is registered.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Sessions that count against the capacity (every one but the node's own clients).
    pub fn counted(&self) -> usize {
        self.sessions.len() - self.sessions.range(NODE_CLIENTS_MIN..).count()
    }

    /// True when one more register of a counted client would exceed the bound.
    pub fn is_full(&self) -> bool {
        self.counted() >= self.clients_max
    }

    /// The session of `client`, if registered.
    pub fn get(&self, client: u128) -> Option<&ClientSession> {
        self.sessions.get(&client)
    }

    /// Classifies `request` from `client`; `register` is true for a register request.
    pub fn check(&self, client: u128, request: u64, register: bool) -> RequestCheck {
        match self.sessions.get(&client) {
            None if register => RequestCheck::New,
            None => RequestCheck::SessionUnknown,
            Some(session) if request < session.request => RequestCheck::TooOld,
            Some(session) if request == session.request || register => {
                if register && request != session.request {
                    return RequestCheck::TooOld;
                }
                RequestCheck::Duplicate {
                    op: session.reply_op,
                    reply: session.reply.clone(),
                }
            }
            Some(_) => RequestCheck::New,
        }
    }

    /// Registers `client` with session number `op`. At capacity nothing changes and the register
    /// is refused. Registering a live client changes nothing.
    pub fn register(&mut self, client: u128, op: u64) -> Registration {
        if let Some(existing) = self.sessions.get(&client) {
            return Registration::Existing {
                session: existing.session,
            };
        }
        if client < NODE_CLIENTS_MIN && self.is_full() {
            return Registration::Full;
        }
        let session = ClientSession {
            session: op,
            request: 0,
            reply_op: op,
            reply: Bytes::copy_from_slice(&op.to_le_bytes()),
        };
        self.sessions.insert(client, session);
        Registration::New { session: op }
    }

    /// Retires `client` (its session ended by a committed op): its slot is free for a new
    /// register. Whether it was registered.
    pub fn retire(&mut self, client: u128) -> bool {
        self.sessions.remove(&client).is_some()
    }

    /// Every session, client id order (for checkpoints).
    pub fn rows(&self) -> Vec<(u128, ClientSession)> {
        self.sessions
            .iter()
            .map(|(client, session)| (*client, session.clone()))
            .collect()
    }

    /// A table restored from `rows`, with the committed capacity `nominated` if there is one
    /// (else `clients_max`). Every row is kept, even beyond the capacity (a checkpoint of an
    /// earlier build, or a capacity configured smaller before any was committed): a live
    /// session's retry protection is never dropped, and registers are refused until enough
    /// sessions retire.
    pub fn from_rows(
        clients_max: usize,
        nominated: Option<usize>,
        rows: Vec<(u128, ClientSession)>,
    ) -> Self {
        let mut table = ClientTable::new(nominated.unwrap_or(clients_max));
        table.nominated = nominated.is_some();
        table.sessions.extend(rows);
        table
    }

    /// Records the committed reply of `request`. The client must be registered and the request
    /// number must advance.
    pub fn record(&mut self, client: u128, request: u64, op: u64, reply: Bytes) {
        let session = self
            .sessions
            .get_mut(&client)
            .expect("record for an unregistered client");
        assert!(request > session.request, "request numbers must advance");
        session.request = request;
        session.reply_op = op;
        session.reply = reply;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_replays_and_older_is_refused() {
        let mut table = ClientTable::new(2);
        assert_eq!(table.check(9, 1, false), RequestCheck::SessionUnknown);
        assert_eq!(table.check(9, 0, true), RequestCheck::New);
        table.register(9, 4);
        assert_eq!(table.get(9).unwrap().session, 4);
        assert_eq!(table.check(9, 1, false), RequestCheck::New);
        table.record(9, 1, 5, Bytes::from_static(b"r1"));
        table.record(9, 2, 6, Bytes::from_static(b"r2"));
        assert_eq!(
            table.check(9, 2, false),
            RequestCheck::Duplicate {
                op: 6,
                reply: Bytes::from_static(b"r2")
            }
        );
        assert_eq!(table.check(9, 1, false), RequestCheck::TooOld);
        assert_eq!(table.check(9, 3, false), RequestCheck::New);
    }

    #[test]
    fn capacity_refuses_new_clients_until_one_retires() {
        let mut table = ClientTable::new(2);
        assert_eq!(table.register(1, 1), Registration::New { session: 1 });
        table.register(2, 2);
        assert!(table.is_full());
        table.record(1, 1, 3, Bytes::from_static(b"r"));
        // Full: the third client is refused and both live sessions keep their replies.
        assert_eq!(table.register(3, 4), Registration::Full);
        assert_eq!(Registration::Full.session(), None);
        assert!(table.get(3).is_none());
        assert_eq!(
            table.check(1, 1, false),
            RequestCheck::Duplicate {
                op: 3,
                reply: Bytes::from_static(b"r")
            }
        );
        // Re-registering a live client is idempotent even at capacity.
        assert_eq!(table.register(1, 5), Registration::Existing { session: 1 });
        assert_eq!(table.len(), 2);
        // A retirement frees one slot, once.
        assert!(table.retire(2));
        assert!(!table.retire(2));
        assert_eq!(table.register(3, 6), Registration::New { session: 6 });
        let restored = ClientTable::from_rows(2, None, table.rows());
        assert_eq!(restored, table);
    }

    #[test]
    fn the_nodes_own_clients_are_admitted_at_capacity_and_not_counted() {
        let mut table = ClientTable::new(1);
        table.register(1, 1);
        assert!(table.is_full());
        assert_eq!(
            table.register(u128::MAX, 2),
            Registration::New { session: 2 }
        );
        assert_eq!(
            table.register(NODE_CLIENTS_MIN, 3),
            Registration::New { session: 3 }
        );
        assert_eq!(table.counted(), 1);
        assert_eq!(table.register(NODE_CLIENTS_MIN - 1, 4), Registration::Full);
        table.retire(1);
        assert_eq!(table.register(2, 5), Registration::New { session: 5 });
    }

    #[test]
    fn a_restored_table_over_its_capacity_keeps_every_session() {
        let mut table = ClientTable::new(3);
        for client in 1..=3 {
            table.register(client, client as u64);
        }
        let restored = ClientTable::from_rows(3, Some(2), table.rows());
        assert_eq!(restored.len(), 3, "no live session is dropped");
        assert_eq!(restored.clients_max(), 2);
        let mut restored = restored;
        assert_eq!(restored.register(4, 9), Registration::Full);
        restored.retire(1);
        assert_eq!(
            restored.register(4, 9),
            Registration::Full,
            "still at capacity"
        );
        restored.retire(2);
        assert_eq!(restored.register(4, 9), Registration::New { session: 9 });
    }
}
