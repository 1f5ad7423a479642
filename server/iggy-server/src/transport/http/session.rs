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
use crate::runtime::shared::Shared;
use iggy_generated::errors::ErrorCode;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A session some token names.
struct Live {
    bound: Bound,
    /// Seconds: the latest expiry of a token issued for it.
    expires_at: u64,
    next_request: u64,
    /// Writes of one session run one at a time: the VSR client table takes a session's requests
    /// in order, and a write's reply (or its deadline) comes before the next starts.
    writes: Rc<futures_util::lock::Mutex<()>>,
}

/// The HTTP API's state on the shard that serves it.
pub struct HttpState {
    pub config: Http,
    signer: Signer,
    live: RefCell<HashMap<u128, Live>>,
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
            writes: Rc::new(futures_util::lock::Mutex::new(())),
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

    /// The gate a write of `client`'s session holds while it runs.
    pub fn write_gate(&self, client: u128) -> Option<Rc<futures_util::lock::Mutex<()>>> {
        self.live
            .borrow()
            .get(&client)
            .map(|entry| entry.writes.clone())
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
        let allowed = if any && !cors.allow_credentials {
            "*".to_string()
        } else if any || cors.allowed_origins.iter().any(|o| o == origin) {
            origin.to_string()
        } else {
            return Vec::new();
        };
        let mut out = vec![("access-control-allow-origin", allowed)];
        if !(any && !cors.allow_credentials) {
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
