//! How an HTTP client maps to a session: a login registers a VSR session (command 40 or 45
//! through the service layer, like a TCP login), and the access token names it (claims `cid`,
//! `sid`). A request with that token runs as that session, with the next request number of the
//! session. The session stays bound while some token of it is unexpired; afterwards the session
//! lease (`system.session_lease_secs`) ends it as for a closed TCP connection. Logout ends the
//! session through the Logout op, so every token naming it is refused from then on (401), also
//! by the other shards and after a restart.

use super::jwt::{Claims, Signer};
use crate::config::Http;
use crate::runtime::connection::Bound;
use crate::runtime::shared::PartitionKey;
use crate::runtime::shared::Shared;
use iggy_generated::errors::ErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

/// What a session's requests serialize on: one partition, or (`None`) the metadata group.
pub type GateKey = Option<PartitionKey>;
type Gate = Arc<futures_util::lock::Mutex<()>>;

/// A session some token names.
struct Live {
    bound: Bound,
    /// Seconds: the latest expiry of a token issued for it.
    expires_at: u64,
    next_request: u64,
    /// A session's requests to one partition (and its metadata writes) run one at a time: a
    /// group's client table takes a session's requests in number order, and a write's reply (or
    /// its deadline) comes before the next request to that partition starts.
    gates: HashMap<GateKey, Gate>,
    in_flight: usize,
}

/// The HTTP API's state on the shard that serves it.
pub struct HttpState {
    pub config: Http,
    signer: Signer,
    live: RefCell<HashMap<u128, Live>>,
    /// Requests of every session in flight on this node.
    in_flight: Cell<usize>,
    /// Identifies this node's anonymous requests (ping, login) to the service layer.
    pub anonymous_client: u128,
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl HttpState {
    pub fn new(config: &Http) -> Result<Self, String> {
        let jwt = &config.jwt;
        let decode = |secret: &str| -> Result<Vec<u8>, String> {
            if jwt.use_base64_secret {
                use base64ct::{Base64, Encoding};
                Base64::decode_vec(secret)
                    .map_err(|e| format!("http.jwt secret is not base64: {e}"))
            } else {
                Ok(secret.as_bytes().to_vec())
            }
        };
        let (encoding, decoding) = if jwt.encoding_secret.is_empty() {
            let secret: [u8; 32] = rand::random();
            tracing::info!(
                "http.jwt: no secret configured, signing access tokens with a random secret for \
                 this process (tokens end with it)"
            );
            (secret.to_vec(), secret.to_vec())
        } else {
            (decode(&jwt.encoding_secret)?, decode(&jwt.decoding_secret)?)
        };
        Ok(Self {
            signer: Signer::new(
                &encoding,
                &decoding,
                &jwt.issuer,
                &jwt.audience,
                jwt.clock_skew_secs,
            ),
            config: config.clone(),
            live: RefCell::new(HashMap::new()),
            in_flight: Cell::new(0),
            anonymous_client: rand::random::<u128>() | 1,
        })
    }

    /// A token for the session `bound` (just registered, or refreshed), and its expiry.
    pub fn issue(&self, bound: Bound) -> (String, u64) {
        let now = now_secs();
        let jwt = &self.config.jwt;
        let claims = Claims {
            jti: format!("{:032x}", rand::random::<u128>()),
            iss: jwt.issuer.clone(),
            aud: jwt.audience.clone(),
            sub: bound.user_id.to_string(),
            cid: format!("{:032x}", bound.client),
            sid: bound.session,
            iat: now,
            nbf: now + jwt.not_before_secs,
            exp: now + jwt.access_token_expiry_secs,
        };
        let mut live = self.live.borrow_mut();
        let entry = live.entry(bound.client).or_insert_with(|| Live {
            bound,
            expires_at: 0,
            next_request: 1,
            gates: HashMap::new(),
            in_flight: 0,
        });
        entry.expires_at = entry.expires_at.max(claims.exp);
        (self.signer.sign(&claims), claims.exp)
    }

    /// The session a bearer token names, if the token is ours and valid and the session is
    /// still held by a token.
    pub fn resolve(&self, token: &str) -> Result<Bound, ErrorCode> {
        if token.is_empty() {
            return Err(ErrorCode::AccessTokenMissing);
        }
        let claims = self
            .signer
            .verify(token, now_secs())
            .map_err(|_| ErrorCode::InvalidAccessToken)?;
        let client =
            u128::from_str_radix(&claims.cid, 16).map_err(|_| ErrorCode::InvalidAccessToken)?;
        let live = self.live.borrow();
        match live.get(&client) {
            Some(entry) if entry.bound.session == claims.sid => Ok(entry.bound),
            _ => Err(ErrorCode::Unauthenticated),
        }
    }

    /// The next request number of `client`'s session.
    pub fn next_request(&self, client: u128) -> Option<u64> {
        let mut live = self.live.borrow_mut();
        let entry = live.get_mut(&client)?;
        let request = entry.next_request;
        entry.next_request += 1;
        Some(request)
    }

    /// The gate `client`'s session holds while a request to `key` runs.
    pub fn gate(&self, client: u128, key: GateKey) -> Option<Gate> {
        let mut live = self.live.borrow_mut();
        let entry = live.get_mut(&client)?;
        Some(entry.gates.entry(key).or_default().clone())
    }

    /// Counts a request of `client` in flight, or says which limit refuses it: 429 the
    /// session's (`http.max_in_flight_per_session`), 503 the node's (`http.max_in_flight`).
    pub fn acquire(&self, client: u128) -> Result<(), u16> {
        let mut live = self.live.borrow_mut();
        let Some(entry) = live.get_mut(&client) else {
            return Err(503);
        };
        if entry.in_flight >= self.config.max_in_flight_per_session {
            return Err(429);
        }
        if self.in_flight.get() >= self.config.max_in_flight {
            return Err(503);
        }
        entry.in_flight += 1;
        self.in_flight.set(self.in_flight.get() + 1);
        Ok(())
    }

    /// A request counted by [`HttpState::acquire`] ended.
    pub fn release(&self, client: u128) {
        if let Some(entry) = self.live.borrow_mut().get_mut(&client) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
        }
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
    }

    /// The session ended by logout (the service layer already unbound it).
    pub fn forget(&self, client: u128) {
        self.live.borrow_mut().remove(&client);
    }

    /// Sessions whose every token expired are unbound: their lease starts now.
    pub fn sweep(&self, shared: &Shared) {
        let now = now_secs();
        let skew = self.config.jwt.clock_skew_secs;
        self.live.borrow_mut().retain(|client, entry| {
            let keep = now < entry.expires_at.saturating_add(skew);
            if !keep {
                shared.session_unbound(*client);
            }
            keep
        });
    }

    /// CORS headers for a reply to a request from `origin`.
    pub fn cors_headers(&self, origin: Option<&str>) -> Vec<(&'static str, String)> {
        let cors = &self.config.cors;
        let Some(origin) = origin.filter(|_| cors.enabled) else {
            return Vec::new();
        };
        let any = cors.allowed_origins.iter().any(|o| o == "*");
        // A wildcard answer cannot carry credentials: the origin is echoed then, and varies.
        let wildcard = any && !cors.allow_credentials;
        let allowed = if wildcard {
            "*".to_string()
        } else if any || cors.allowed_origins.iter().any(|o| o == origin) {
            origin.to_string()
        } else {
            return Vec::new();
        };
        let mut out = vec![("access-control-allow-origin", allowed)];
        if !wildcard {
            out.push(("vary", "origin".into()));
        }
        if cors.allow_credentials {
            out.push(("access-control-allow-credentials", "true".into()));
        }
        if !cors.exposed_headers.is_empty() {
            out.push((
                "access-control-expose-headers",
                cors.exposed_headers.join(", "),
            ));
        }
        out
    }

    /// The extra headers of a preflight (OPTIONS) answer.
    pub fn preflight_headers(&self, private_network: bool) -> Vec<(&'static str, String)> {
        let cors = &self.config.cors;
        let mut out = vec![
            (
                "access-control-allow-methods",
                cors.allowed_methods.join(", "),
            ),
            (
                "access-control-allow-headers",
                cors.allowed_headers.join(", "),
            ),
            ("access-control-max-age", "3600".into()),
        ];
        if private_network && cors.allow_private_network {
            out.push(("access-control-allow-private-network", "true".into()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(per_session: usize, total: usize) -> HttpState {
        let mut config = crate::config::load(None, |_| None).unwrap().http;
        config.max_in_flight_per_session = per_session;
        config.max_in_flight = total;
        HttpState::new(&config).unwrap()
    }

    fn session(state: &HttpState, client: u128) -> String {
        let bound = Bound {
            client,
            session: 9,
            user_id: 0,
            protocol: 0,
        };
        state.issue(bound).0
    }

    #[test]
    fn in_flight_limits_answer_429_for_the_session_and_503_for_the_node() {
        let state = state(2, 3);
        session(&state, 1);
        session(&state, 2);
        assert_eq!(state.acquire(1), Ok(()));
        assert_eq!(state.acquire(1), Ok(()));
        assert_eq!(state.acquire(1), Err(429), "the session's third");
        assert_eq!(state.acquire(2), Ok(()));
        assert_eq!(state.acquire(2), Err(503), "the node's fourth");
        state.release(1);
        assert_eq!(state.acquire(2), Ok(()), "a slot came back");
        assert_eq!(state.acquire(3), Err(503), "no session, no slot");
    }

    #[test]
    fn a_token_names_its_session_until_logout() {
        let state = state(32, 128);
        let token = session(&state, 7);
        let bound = state.resolve(&token).unwrap();
        assert_eq!((bound.client, bound.session), (7, 9));
        assert_eq!(state.next_request(7), Some(1));
        assert_eq!(state.next_request(7), Some(2), "numbers advance");
        state.forget(7);
        assert_eq!(
            state.resolve(&token).err(),
            Some(ErrorCode::Unauthenticated)
        );
        assert_eq!(state.resolve("").err(), Some(ErrorCode::AccessTokenMissing));
        assert_eq!(
            state.resolve("x.y.z").err(),
            Some(ErrorCode::InvalidAccessToken)
        );
    }

    #[test]
    fn one_gate_per_session_and_partition() {
        let state = state(32, 128);
        session(&state, 7);
        let a = state.gate(7, Some((0, 0, 1))).unwrap();
        let again = state.gate(7, Some((0, 0, 1))).unwrap();
        let other = state.gate(7, Some((0, 0, 2))).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert!(!Arc::ptr_eq(&a, &other), "other partitions do not wait");
        let held = a.try_lock().unwrap();
        assert!(again.try_lock().is_none(), "the same partition waits");
        assert!(other.try_lock().is_some());
        drop(held);
    }
}
