//! How an HTTP client maps to a session: a login registers a logical session (command 40 or 45
//! through the service layer, like a TCP login, with a fresh bind secret), and the access token
//! names it (claims `cid`, `sid`, and `bph`, a one-way hash of its bind secret). A node binds
//! the session on first sight of a token signed with its secret, as a binary BindSession does
//! (once its metadata reached the session's register, if the session table still holds it with
//! that number, user and bind secret), so with `[http.jwt]` secrets shared by every node (and
//! kept across restarts) a token works on each of them and after a restart; with the random
//! per-process secret of an empty configuration it works only on the process that issued it.
//! A request with that token runs as that session, numbered by [`request_number`]. The session
//! stays bound on a node while some token of it that the node saw is unexpired; afterwards the
//! session lease (`system.session_lease_secs`) ends it as for a closed TCP connection. A session
//! no live node remembers holding (a restart, a failover) is kept for a token lifetime beyond
//! the lease (`SessionsHere::lease_pass`), so its tokens work until they expire. Logout
//! (through any node) ends the session through the Logout op, so every token naming it is
//! refused from then on (401) by every node once it applied the logout, also after a restart;
//! so do lease expiry and the deactivation or deletion of its user.

use super::jwt::{Claims, Signer, bind_proof_hash};
use crate::config::Http;
use crate::runtime::connection::Bound;
use crate::runtime::node::Node;
use crate::runtime::shared::PartitionKey;
use crate::runtime::shared::Shared;
use iggy_generated::errors::ErrorCode;
use iggy_metadata::session::Session;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

/// What a session's requests serialize on: one partition, or (`None`) the metadata group.
pub type GateKey = Option<PartitionKey>;
type Gate = Arc<futures_util::lock::Mutex<()>>;

/// A session bound on this node by a token naming it.
struct Live {
    bound: Bound,
    /// Seconds: the latest expiry of a token of it this node issued or saw.
    expires_at: u64,
    /// The time part of the latest request number this node gave it (see [`request_number`]).
    last_request_micros: u64,
    /// Whether this node numbered one of its requests since it bound it.
    numbered: bool,
    /// A session's requests to one partition (and its metadata writes) run one at a time: a
    /// group's client table takes a session's requests in number order, and a write's reply (or
    /// its deadline) comes before the next request to that partition starts.
    gates: HashMap<GateKey, Gate>,
    in_flight: usize,
}

/// What this node holds for the session a token names.
#[derive(Debug)]
enum Held {
    Bound(Bound),
    /// Bound here, but the replicated session table no longer holds it (logout through another
    /// node, lease expiry, its user deactivated or deleted).
    Ended,
    /// Not bound here (issued by another node or an earlier process): bound on first sight.
    NotHere,
}

/// The HTTP API's state on the shard that serves it.
pub struct HttpState {
    pub config: Http,
    signer: Signer,
    /// Tags this node's request numbers, so no other node's number for a session equals one.
    replica_id: u8,
    live: RefCell<HashMap<u128, Live>>,
    /// Requests of every session in flight on this node.
    in_flight: Cell<usize>,
    /// Identifies this node's anonymous requests (ping, login) to the service layer.
    pub anonymous_client: u128,
    /// Logins refused by `http.max_sessions_per_user`: warned of at most every 10 s.
    pub capped_logins: crate::consensus::log_limit::Throttled,
    /// The clock its tokens are dated and judged by: `Shared::stamp_clock`, moved so that a
    /// node whose clock is off the replicas' quorum time neither
    /// issues tokens other nodes find expired (or long-lived) nor refuses theirs.
    clock: crate::runtime::clock::StampClock,
}

/// The request number of an HTTP session's next request through this node: the wall clock's
/// microseconds above the node's replica id, or, if that is not later, one past the later of
/// the last this node gave the session and `held` (the highest number of the session's client
/// this node's replicas hold). An HTTP client does not number its requests, and several nodes
/// (and a node's next process) serve its session, each numbering on its own: their numbers
/// never coincide (the low byte differs; a number equal to one already committed would be
/// answered with that request's reply) and grow past what the node's replicas hold, so no clock
/// is trusted for that: a process whose clock stepped back since its previous one (which
/// committed numbers the replicas hold) still numbers above them, and a node whose clock is
/// behind another's numbers above the other's requests its replicas hold. The clock keeps the
/// nodes' numbers apart in time: a request the replicas here have not seen yet (relayed through
/// another node a moment ago) is still numbered above while the nodes' clocks agree more
/// closely than the client's requests follow each other. One numbered below the latest its
/// group committed for the session is refused (RequestTooOld), never run.
fn request_number(last_micros: &mut u64, now_micros: u64, held: u64, replica_id: u8) -> u64 {
    let micros = now_micros.max(*last_micros + 1).max((held >> 8) + 1);
    *last_micros = micros;
    (micros << 8) | u64::from(replica_id)
}

/// Whether `session` (from the replicated session table) is the one `claims` name: its number,
/// its user and its bind secret.
fn names(claims: &Claims, session: &Session) -> bool {
    let proof = bind_proof_hash(&session.bind_secret);
    let same_proof = proof.len() == claims.bph.len()
        && proof
            .bytes()
            .zip(claims.bph.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    session.session == claims.sid && claims.sub == session.user_id.to_string() && same_proof
}

impl HttpState {
    pub fn new(config: &Http, replica_id: u8) -> Result<Self, String> {
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
                 this process (tokens end with it, and other nodes refuse them)"
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
            replica_id,
            live: RefCell::new(HashMap::new()),
            in_flight: Cell::new(0),
            anonymous_client: rand::random::<u128>() | 1,
            capped_logins: crate::consensus::log_limit::Throttled::new(
                std::time::Duration::from_secs(10),
            ),
            clock: Default::default(),
        })
    }

    /// Dates and judges tokens by `clock` (see `clock`).
    pub fn with_clock(mut self, clock: crate::runtime::clock::StampClock) -> Self {
        self.clock = clock;
        self
    }

    /// Seconds since the epoch by this node's stamp clock.
    fn now_secs(&self) -> u64 {
        self.clock.now_micros() / 1_000_000
    }

    /// A token for the session `bound` (just registered with the bind secret `bind_proof` is
    /// the hash of, or refreshed), and its expiry.
    pub fn issue(&self, bound: Bound, bind_proof: &str) -> (String, u64) {
        let now = self.now_secs();
        let jwt = &self.config.jwt;
        let claims = Claims {
            jti: format!("{:032x}", rand::random::<u128>()),
            iss: jwt.issuer.clone(),
            aud: jwt.audience.clone(),
            sub: bound.user_id.to_string(),
            cid: format!("{:032x}", bound.client),
            sid: bound.session,
            bph: bind_proof.to_string(),
            iat: now,
            nbf: now + jwt.not_before_secs,
            exp: now + jwt.access_token_expiry_secs,
        };
        let mut live = self.live.borrow_mut();
        let entry = live.entry(bound.client).or_insert_with(|| Live::new(bound));
        entry.expires_at = entry.expires_at.max(claims.exp);
        (self.signer.sign(&claims), claims.exp)
    }

    /// The claims of a bearer token, if it is one this node's secret signed and valid now.
    pub fn verify(&self, token: &str) -> Result<Claims, ErrorCode> {
        if token.is_empty() {
            return Err(ErrorCode::AccessTokenMissing);
        }
        self.signer
            .verify(token, self.now_secs())
            .map_err(|_| ErrorCode::InvalidAccessToken)
    }

    /// The session a bearer token names, with the token's claims: bound here already, or bound
    /// now from the replicated session table (waiting, in a cluster, until this replica applied
    /// the session's register).
    pub async fn authenticate(
        &self,
        node: &Node,
        token: &str,
    ) -> Result<(Bound, Claims), ErrorCode> {
        let claims = self.verify(token)?;
        let client = client_of(&claims)?;
        let live_session = node
            .shared
            .metadata
            .borrow()
            .sessions
            .get(client)
            .map(|s| s.session);
        match self.held(client, claims.sid, live_session) {
            Held::Bound(bound) => return Ok((bound, claims)),
            Held::Ended => {
                self.unbind(client, &node.shared);
                return Err(ErrorCode::Unauthenticated);
            }
            Held::NotHere => {}
        }
        let session =
            crate::service::dispatch::session_at_watermark(node, claims.sid, |sessions| {
                sessions.get(client).filter(|s| names(&claims, s)).copied()
            })
            .await?;
        let bound = self.adopt(client, session, &claims, &node.shared);
        Ok((bound, claims))
    }

    /// What this node holds for `client`'s session `session`, given the number of the session
    /// the replicated table holds for `client` (`None`: none).
    fn held(&self, client: u128, session: u64, live_session: Option<u64>) -> Held {
        match self.live.borrow().get(&client) {
            Some(entry) if entry.bound.session == session && live_session == Some(session) => {
                Held::Bound(entry.bound)
            }
            Some(_) => Held::Ended,
            None => Held::NotHere,
        }
    }

    /// Binds `session`, which a token with `claims` names, on this node (unless a request with
    /// another of its tokens bound it meanwhile).
    fn adopt(&self, client: u128, session: Session, claims: &Claims, shared: &Shared) -> Bound {
        let mut live = self.live.borrow_mut();
        let entry = live.entry(client).or_insert_with(|| {
            shared.session_bound(client, None);
            let bound = Bound {
                client,
                session: session.session,
                user_id: session.user_id,
                protocol: session.protocol,
            };
            tracing::info!(
                "session {} of client {client:032x} (user {}) bound by an http access token",
                session.session,
                session.user_id
            );
            Live::new(bound)
        });
        entry.expires_at = entry.expires_at.max(claims.exp);
        entry.bound
    }

    /// The next request number of `client`'s session, above `held` (the highest request
    /// number of the client that the replicas of the groups it may reach hold on this node),
    /// numbered by `now_micros`: this node's wall clock, or the replicas' quorum time when it
    /// is off by more than a second (`Shared::stamp_now`), so nodes number alike.
    pub fn next_request(&self, client: u128, held: u64, now_micros: u64) -> Option<u64> {
        let mut live = self.live.borrow_mut();
        let entry = live.get_mut(&client)?;
        entry.numbered = true;
        Some(request_number(
            &mut entry.last_request_micros,
            now_micros,
            held,
            self.replica_id,
        ))
    }

    /// Whether this node numbered a request of `client`'s session since it bound it here
    /// (unbound: `None`).
    pub fn numbered(&self, client: u128) -> Option<bool> {
        self.live.borrow().get(&client).map(|entry| entry.numbered)
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

    /// How many sessions of `user_id` this node holds for unexpired tokens (and the replicated
    /// table still holds): what `http.max_sessions_per_user` bounds.
    pub fn sessions_of(&self, user_id: u32, shared: &Shared) -> usize {
        let metadata = shared.metadata.borrow();
        self.live
            .borrow()
            .iter()
            .filter(|(client, entry)| {
                entry.bound.user_id == user_id
                    && metadata.sessions.get(**client).map(|s| s.session)
                        == Some(entry.bound.session)
            })
            .count()
    }

    /// The session ended by logout (the service layer already unbound it).
    pub fn forget(&self, client: u128) {
        self.live.borrow_mut().remove(&client);
    }

    /// The session ended elsewhere (or this node lets it go without a logout): its lease
    /// starts now.
    pub fn unbind(&self, client: u128, shared: &Shared) {
        if self.live.borrow_mut().remove(&client).is_some() {
            shared.session_unbound(client);
        }
    }

    /// Sessions whose every token expired are unbound: their lease starts now.
    pub fn sweep(&self, shared: &Shared) {
        let now = self.now_secs();
        let skew = self.config.jwt.clock_skew_secs;
        self.live.borrow_mut().retain(|client, entry| {
            let keep = now < entry.expires_at.saturating_add(skew);
            if !keep {
                shared.session_tokens_expired(*client);
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
        // An origin's scheme and host are case-insensitive, and browsers send them lower
        // case: `http://A.example` configured once matched no browser.
        } else if any
            || cors
                .allowed_origins
                .iter()
                .any(|o| o.eq_ignore_ascii_case(origin))
        {
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

impl Live {
    fn new(bound: Bound) -> Self {
        Live {
            bound,
            expires_at: 0,
            last_request_micros: 0,
            numbered: false,
            gates: HashMap::new(),
            in_flight: 0,
        }
    }
}

/// The client id a token's `cid` names.
fn client_of(claims: &Claims) -> Result<u128, ErrorCode> {
    u128::from_str_radix(&claims.cid, 16).map_err(|_| ErrorCode::InvalidAccessToken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Http {
        crate::config::load(None, |_| None).unwrap().http
    }

    fn state(per_session: usize, total: usize) -> HttpState {
        let mut config = config();
        config.max_in_flight_per_session = per_session;
        config.max_in_flight = total;
        HttpState::new(&config, 0).unwrap()
    }

    fn bound(client: u128) -> Bound {
        Bound {
            client,
            session: 9,
            user_id: 0,
            protocol: 0,
        }
    }

    fn session(state: &HttpState, client: u128) -> String {
        state.issue(bound(client), &bind_proof_hash(&[5; 32])).0
    }

    /// Browsers send an origin's scheme and host lower case; one configured with capitals
    /// once matched none of them.
    #[test]
    fn a_configured_origin_matches_whatever_the_case_of_its_scheme_and_host() {
        let mut config = config();
        config.cors.enabled = true;
        config.cors.allowed_origins = vec!["HTTP://A.example:8080".into()];
        let state = HttpState::new(&config, 0).unwrap();
        let headers = state.cors_headers(Some("http://a.example:8080"));
        let allowed = headers
            .iter()
            .find(|(name, _)| *name == "access-control-allow-origin");
        assert_eq!(
            allowed.map(|(_, value)| value.as_str()),
            Some("http://a.example:8080")
        );
        assert!(state.cors_headers(Some("http://b.example:8080")).is_empty());
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
    fn a_token_names_its_bound_session_while_the_session_table_holds_it() {
        let state = state(32, 128);
        let token = session(&state, 7);
        let claims = state.verify(&token).unwrap();
        assert_eq!((client_of(&claims), claims.sid), (Ok(7), 9));
        assert!(matches!(state.held(7, 9, Some(9)), Held::Bound(b) if b.session == 9));
        assert!(
            matches!(state.held(7, 9, None), Held::Ended),
            "ended through another node (or its lease, or its user)"
        );
        assert!(
            matches!(state.held(7, 9, Some(10)), Held::Ended),
            "the table holds another session of the client"
        );
        assert!(
            matches!(state.held(8, 9, Some(9)), Held::NotHere),
            "issued elsewhere: bound on first sight"
        );
        state.forget(7);
        assert!(matches!(state.held(7, 9, Some(9)), Held::NotHere));
        assert_eq!(state.verify("").err(), Some(ErrorCode::AccessTokenMissing));
        assert_eq!(
            state.verify("x.y.z").err(),
            Some(ErrorCode::InvalidAccessToken)
        );
    }

    #[test]
    fn a_token_binds_only_the_registration_it_was_issued_for() {
        let state = state(32, 128);
        let claims = state.verify(&session(&state, 7)).unwrap();
        let registered = Session {
            session: 9,
            user_id: 0,
            protocol: 0,
            bind_secret: [5; 32],
        };
        assert!(names(&claims, &registered));
        let other_secret = Session {
            bind_secret: [6; 32],
            ..registered
        };
        assert!(
            !names(&claims, &other_secret),
            "another registration's secret"
        );
        let other_number = Session {
            session: 10,
            ..registered
        };
        assert!(!names(&claims, &other_number), "another session number");
        let other_user = Session {
            user_id: 1,
            ..registered
        };
        assert!(!names(&claims, &other_user), "another user");
    }

    #[test]
    fn configured_secrets_verify_every_node_s_tokens_and_random_ones_only_their_own() {
        let mut shared = config();
        shared.jwt.encoding_secret = "shared".into();
        shared.jwt.decoding_secret = "shared".into();
        let (issuer, other_node) = (
            HttpState::new(&shared, 0).unwrap(),
            HttpState::new(&shared, 1).unwrap(),
        );
        let token = session(&issuer, 7);
        let claims = other_node.verify(&token).unwrap();
        assert_eq!(claims, issuer.verify(&token).unwrap());
        let (random, next_process) = (state(32, 128), state(32, 128));
        let token = session(&random, 7);
        assert!(random.verify(&token).is_ok());
        assert_eq!(
            next_process.verify(&token).err(),
            Some(ErrorCode::InvalidAccessToken)
        );
        assert_eq!(
            other_node.verify(&token).err(),
            Some(ErrorCode::InvalidAccessToken),
            "signed with another secret"
        );
    }

    #[test]
    fn tokens_are_dated_and_judged_by_the_clock_moved_by_the_nodes_offset() {
        let mut shared = config();
        shared.jwt.encoding_secret = "shared".into();
        shared.jwt.decoding_secret = "shared".into();
        // Two hours: past any access token's expiry (`http.jwt.access_token_expiry_secs`).
        let clock = crate::runtime::clock::StampClock::default();
        clock.set_offset(-7_200_000_000);
        let behind = HttpState::new(&shared, 0)
            .unwrap()
            .with_clock(clock.clone());
        let right = HttpState::new(&shared, 1).unwrap();
        let old = session(&behind, 7);
        assert!(behind.verify(&old).is_ok(), "valid by the moved clock");
        assert_eq!(
            right.verify(&old).err(),
            Some(ErrorCode::InvalidAccessToken),
            "dated two hours ago: expired by the right clock"
        );
        assert_eq!(
            behind.verify(&session(&right, 8)).err(),
            Some(ErrorCode::InvalidAccessToken),
            "not valid yet by the moved clock"
        );
        clock.set_offset(0);
        assert!(
            right.verify(&session(&behind, 9)).is_ok(),
            "the offset is read live"
        );
    }

    #[test]
    fn request_numbers_grow_never_repeat_and_tell_nodes_apart() {
        let mut last = 0;
        let first = request_number(&mut last, 1_000, 0, 2);
        assert_eq!(first, (1_000 << 8) | 2);
        let same_micro = request_number(&mut last, 1_000, 0, 2);
        let clock_back = request_number(&mut last, 900, 0, 2);
        assert!(
            first < same_micro && same_micro < clock_back,
            "strictly growing"
        );
        let mut other_node = 0;
        assert_ne!(
            request_number(&mut other_node, 1_001, 0, 3),
            same_micro,
            "another node at the same microsecond"
        );
        // The next process (or another node) binds the session later: numbered above.
        let mut next_process = 0;
        assert!(request_number(&mut next_process, 2_000, 0, 2) > clock_back);
    }

    #[test]
    fn a_restarted_node_whose_clock_stepped_back_numbers_above_what_its_replicas_hold() {
        const SECOND: u64 = 1_000_000;
        let before = state(32, 128);
        session(&before, 7);
        let committed = before.next_request(7, 0, 100 * SECOND).unwrap();
        // The next process: its clock stepped back 5 s (NTP, or another clock after a move),
        // its replicas hold the number the previous process committed.
        let after = state(32, 128);
        session(&after, 7);
        let first = after.next_request(7, committed, 95 * SECOND).unwrap();
        assert!(
            first > committed,
            "{first} would be answered with the reply of {committed} (equal) or refused (below)"
        );
        let next = after.next_request(7, 0, 95 * SECOND).unwrap();
        assert!(next > first, "still growing while the clock is behind");
    }

    #[test]
    fn a_node_whose_clock_is_behind_another_numbers_above_what_its_replicas_hold() {
        const SECOND: u64 = 1_000_000;
        let (ahead, behind) = (state(32, 128), HttpState::new(&config(), 1).unwrap());
        session(&ahead, 7);
        session(&behind, 7);
        let through_ahead = ahead.next_request(7, 0, 100 * SECOND).unwrap();
        // 2 s behind, asked 1 s later: above the request its replicas hold.
        let through_behind = behind.next_request(7, through_ahead, 99 * SECOND).unwrap();
        assert!(through_behind > through_ahead);
        // Back on the node ahead, with the clock's numbers above again.
        let again = ahead
            .next_request(7, through_behind, 100 * SECOND + 1)
            .unwrap();
        assert!(again > through_behind);
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
