//! Client table: per client session its latest request number and cached reply.
//!
//! The table is part of the replicated state: every replica updates it while committing, in log
//! order, so all replicas hold the same table. It is bounded by `clients_table_max`; a new client is
//! refused at capacity and a live entry is never evicted.

use bytes::Bytes;
use std::collections::BTreeMap;

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

/// The table is at `clients_table_max`: a new client was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientsTableFull;

/// The bounded client table.
#[derive(Clone, Debug)]
pub struct ClientTable {
    clients_max: usize,
    sessions: BTreeMap<u128, ClientSession>,
}

impl ClientTable {
    /// Empty table holding at most `clients_max` sessions.
    pub fn new(clients_max: usize) -> Self {
        assert!(clients_max > 0);
        ClientTable {
            clients_max,
            sessions: BTreeMap::new(),
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

    /// True when one more register would exceed the bound.
    pub fn is_full(&self) -> bool {
        self.sessions.len() >= self.clients_max
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

    /// Registers `client` with session number `op`. Fails (without evicting) at capacity.
    pub fn register(&mut self, client: u128, op: u64) -> Result<Bytes, ClientsTableFull> {
        if let Some(existing) = self.sessions.get(&client) {
            return Ok(existing.reply.clone());
        }
        if self.is_full() {
            return Err(ClientsTableFull);
        }
        let reply = Bytes::copy_from_slice(&op.to_le_bytes());
        let session = ClientSession {
            session: op,
            request: 0,
            reply_op: op,
            reply: reply.clone(),
        };
        self.sessions.insert(client, session);
        Ok(reply)
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
        table.register(9, 4).unwrap();
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
    fn capacity_refuses_new_clients_and_keeps_live_ones() {
        let mut table = ClientTable::new(1);
        table.register(1, 1).unwrap();
        assert!(table.is_full());
        assert!(table.register(2, 2).is_err());
        assert!(table.get(1).is_some());
        assert!(table.get(2).is_none());
        // Re-registering a live client is idempotent even at capacity.
        assert_eq!(
            table.register(1, 3).unwrap(),
            Bytes::copy_from_slice(&1u64.to_le_bytes())
        );
    }
}
