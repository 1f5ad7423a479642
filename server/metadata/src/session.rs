//! Logical sessions: created by a committed register, bound to connections by login or
//! BindSession, ended by logout. Part of the replicated metadata state, so a session survives a
//! disconnect and a restart. Pure data; no I/O.

use std::collections::HashMap;

/// One logical session, keyed by the client id that registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// The session number: the metadata op that committed the register.
    pub session: u64,
    pub user_id: u32,
    /// Packed protocol version the client logged in with; its codec serves the session.
    pub protocol: u32,
    /// Proves that a reconnecting connection belongs to the client that registered: the
    /// hash the service made of the client's secret (a secret reaches this crate hashed), which
    /// a bind must present hashed the same way.
    pub bind_secret: [u8; 32],
}

/// Why a bind or login was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindError {
    /// No such session (never registered, or logged out).
    Unknown,
    /// The bind secret or session number does not match.
    Mismatch,
}

#[derive(Debug, Default)]
pub struct Sessions {
    by_client: HashMap<u128, Session>,
}

impl Sessions {
    /// Records a committed register. A retried register of the same client replaces nothing: the
    /// first commit wins (the replica replays its reply).
    pub fn register(&mut self, client: u128, session: Session) {
        self.by_client.entry(client).or_insert(session);
    }

    pub fn get(&self, client: u128) -> Option<&Session> {
        self.by_client.get(&client)
    }

    /// Ends a session (logout). Returns the session that ended.
    pub fn end(&mut self, client: u128) -> Option<Session> {
        self.by_client.remove(&client)
    }

    /// Checks a BindSession from a new connection.
    pub fn bind(
        &self,
        client: u128,
        session: u64,
        secret: &[u8; 32],
    ) -> Result<Session, BindError> {
        let found = self.by_client.get(&client).ok_or(BindError::Unknown)?;
        if found.session != session || !constant_time_eq(&found.bind_secret, secret) {
            return Err(BindError::Mismatch);
        }
        Ok(*found)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u128, &Session)> {
        self.by_client.iter()
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }
}

/// Compares secrets without an early exit, so timing does not reveal a prefix.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(number: u64) -> Session {
        Session {
            session: number,
            user_id: 0,
            protocol: 0x3000,
            bind_secret: [7; 32],
        }
    }

    #[test]
    fn bind_needs_the_same_session_and_secret() {
        let mut sessions = Sessions::default();
        sessions.register(9, session(4));
        assert_eq!(sessions.bind(9, 4, &[7; 32]), Ok(session(4)));
        assert_eq!(sessions.bind(9, 5, &[7; 32]), Err(BindError::Mismatch));
        assert_eq!(sessions.bind(9, 4, &[8; 32]), Err(BindError::Mismatch));
        assert_eq!(sessions.bind(1, 4, &[7; 32]), Err(BindError::Unknown));
    }

    #[test]
    fn first_register_wins_and_logout_ends_it() {
        let mut sessions = Sessions::default();
        sessions.register(9, session(4));
        sessions.register(9, session(6));
        assert_eq!(sessions.get(9).unwrap().session, 4);
        assert_eq!(sessions.end(9), Some(session(4)));
        assert_eq!(sessions.bind(9, 4, &[7; 32]), Err(BindError::Unknown));
    }
}
