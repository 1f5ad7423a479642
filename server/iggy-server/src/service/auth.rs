//! Users, passwords and personal access tokens: credential checks at login, the permissions a
//! user op needs, and the user ops of the metadata state machine. Passwords and tokens are
//! hashed before they reach the journal; a new token is shown to its creator once.

use crate::consensus::group::Outcome;
use crate::runtime::node::Node;
use crate::runtime::shared::Shared;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_metadata::machine::envelope;
use iggy_metadata::machine::{SYSTEM_CLIENT, token_hash};
use iggy_metadata::{Need, ROOT_USER_ID, UserStatus};
use std::rc::Rc;

fn argon() -> argon2::Argon2<'static> {
    argon2::Argon2::default()
}

/// `password`'s argon2 hash, computed on the offload threads (see `runtime::offload`).
pub async fn hash_password(shared: &Shared, password: &str) -> String {
    let password = password.to_owned();
    shared.offload.run(move || hash_now(&password)).await
}

/// Whether `password` is the one `hash` was made from, checked on the offload threads.
pub async fn password_matches(shared: &Shared, hash: String, password: &str) -> bool {
    let password = password.to_owned();
    shared
        .offload
        .run(move || matches_now(&hash, &password))
        .await
}

fn hash_now(password: &str) -> String {
    #[cfg(debug_assertions)]
    slow_password_work_on_purpose();
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>()).expect("16-byte salt encodes");
    argon()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2 hashes any password")
        .to_string()
}

fn matches_now(hash: &str, password: &str) -> bool {
    #[cfg(debug_assertions)]
    slow_password_work_on_purpose();
    PasswordHash::new(hash).is_ok_and(|parsed| {
        argon()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// Debug builds only: `IGGY_DEBUG_PASSWORD_WORK_DELAY_MS` makes every password check and hash
/// block its thread that much longer, as argon2 on a slow or busy CPU would: the test that a
/// login in progress holds no other client's requests (e2e `auth`).
#[cfg(debug_assertions)]
fn slow_password_work_on_purpose() {
    static DELAY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        std::env::var("IGGY_DEBUG_PASSWORD_WORK_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
    });
    if let Some(ms) = *delay {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Checks a username and password; the user's id, or the error the client gets.
pub async fn verify_password(
    shared: &Shared,
    username: &str,
    password: &str,
) -> Result<u32, ErrorCode> {
    let found = {
        let metadata = shared.metadata.borrow();
        metadata
            .users
            .values()
            .find(|u| u.username == username)
            .map(|user| (user.password_hash.clone(), user.id, user.status))
    };
    let Some((hash, id, status)) = found else {
        // As long as a wrong password of a user that exists: the answer's timing does not
        // tell which user names exist.
        let password = password.to_owned();
        let _ = shared
            .offload
            .run(move || matches_now(unknown_user_hash(), &password))
            .await;
        return Err(ErrorCode::InvalidCredentials);
    };
    if !password_matches(shared, hash, password).await {
        return Err(ErrorCode::InvalidCredentials);
    }
    if status != UserStatus::Active {
        return Err(ErrorCode::UserInactive);
    }
    Ok(id)
}

/// A hash no password matches (of random bytes, made once with the users' parameters): what a
/// login naming no user is checked against.
fn unknown_user_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| {
        let salt =
            SaltString::encode_b64(&rand::random::<[u8; 16]>()).expect("16-byte salt encodes");
        let secret: [u8; 32] = rand::random();
        argon()
            .hash_password(&secret, &salt)
            .expect("argon2 hashes any bytes")
            .to_string()
    })
}

pub fn verify_token(shared: &Shared, token: &str, now: u64) -> Result<u32, ErrorCode> {
    let hash = token_hash(token);
    let metadata = shared.metadata.borrow();
    let found = metadata
        .tokens
        .iter()
        .find(|t| t.token_hash == hash)
        .ok_or(ErrorCode::InvalidPersonalAccessToken)?;
    if found.expiry_at.is_some_and(|at| at <= now) {
        return Err(ErrorCode::PersonalAccessTokenExpired);
    }
    let user = metadata
        .users
        .get(&found.user_id)
        .ok_or(ErrorCode::InvalidCredentials)?;
    if user.status != UserStatus::Active {
        return Err(ErrorCode::UserInactive);
    }
    Ok(user.id)
}

impl Shared {
    /// Whether `user_id`'s grants allow `need`, judged by this node's metadata copy: 41 when
    /// they do not; 58 when this node may not judge by its copy now (a cluster node holding
    /// no grant lease, `consensus::grant_lease`: its copy may miss a revocation answered
    /// already; the client retries).
    pub fn judge(&self, user_id: u32, need: Need) -> Result<(), ErrorCode> {
        self.judge_any(user_id, &[need])
    }

    /// [`Self::judge`], passed when the grants allow any of `needs`.
    pub fn judge_any(&self, user_id: u32, needs: &[Need]) -> Result<(), ErrorCode> {
        self.may_judge()?;
        match needs.iter().any(|&need| self.user_allows(user_id, need)) {
            true => Ok(()),
            false => Err(ErrorCode::Unauthorized),
        }
    }

    /// Whether this node may judge grants by its metadata copy now (always, standalone).
    pub fn may_judge(&self) -> Result<(), ErrorCode> {
        match &self.plane {
            Some(plane) if !plane.leases().may_judge(std::time::Instant::now()) => {
                Err(ErrorCode::TransientNotAccepted)
            }
            _ => Ok(()),
        }
    }

    /// What the copy says of `user_id`'s grants, without asking whether this node may judge
    /// by it: only to tell one refusal from another.
    pub fn user_allows(&self, user_id: u32, need: Need) -> bool {
        self.metadata
            .borrow()
            .users
            .get(&user_id)
            .is_some_and(|user| user.allows(need))
    }
}

/// The root user is created by a committed op the first time the node starts, by the metadata
/// primary: on a standalone node (always its primary) before this returns; in a cluster, by
/// whichever replica is or becomes the metadata primary while no root user exists, from a task
/// this starts, and the other replicas get the user by replication. Every replica must be
/// given the same credentials, since any of them may be the one that creates it.
pub async fn ensure_root(node: &Rc<Node>, (username, password): (String, String)) {
    if root_exists(node) {
        return;
    }
    if is_metadata_primary(node) {
        create_root_now(node, &username, &password).await;
        return;
    }
    // A restarted replica's copy applies its journal again only once its group's view commits
    // it, so a root user of its history is not there yet either.
    tracing::info!(
        "root user not in this node's applied metadata yet: it comes by replication from the \
         metadata primary, which creates it in a new cluster (replica {} is not the primary now)",
        node.shared.replica_id
    );
    compio::runtime::spawn(root_by_primary(node.clone(), username, password)).detach();
}

/// How often a replica that is not the metadata primary looks again for the root user.
const ROOT_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Waits until the root user exists (replicated from the primary) or this replica is the
/// metadata primary with no root user, which then creates it. Ends with the first of the two:
/// it runs only while a cluster has no root user, that is until its first primary serves.
async fn root_by_primary(node: Rc<Node>, username: String, password: String) {
    loop {
        if root_exists(&node) {
            return tracing::info!("root user {username:?} replicated from the metadata primary");
        }
        // A replica that created it while a view change was under way sends the same requests
        // (client and numbers) again: the client table answers a committed one.
        if is_metadata_primary(&node) && create_root_now(&node, &username, &password).await {
            return;
        }
        compio::time::sleep(ROOT_POLL).await;
    }
}

pub fn root_exists(node: &Node) -> bool {
    node.shared
        .metadata
        .borrow()
        .users
        .contains_key(&iggy_metadata::ROOT_USER_ID)
}

fn is_metadata_primary(node: &Node) -> bool {
    let role = node.metadata.figures().role();
    crate::service::routing::refusal_for(role, node.shared.replica_id).is_none()
}

/// Creates the root user; whether it did (a failure is logged).
async fn create_root_now(node: &Node, username: &str, password: &str) -> bool {
    let hash = hash_password(&node.shared, password).await;
    match create_root(node, username, &hash).await {
        Ok(()) => {
            node.root_created.set(true);
            tracing::info!("created root user {username:?}");
            true
        }
        Err(code) => {
            tracing::error!("cannot create the root user: {code:?}");
            false
        }
    }
}

/// Creates the root user through the metadata group, as the node's own client.
pub async fn create_root(
    node: &Node,
    username: &str,
    password_hash: &str,
) -> Result<(), ErrorCode> {
    let group = &node.metadata;
    // A first attempt registers the node's client (request 0) and creates the user (1); the
    // same numbers again (a replica that created it while a view changed) are answered by the
    // client table. After an attempt whose creation was committed and refused (credentials of
    // an earlier build's start), the next one is numbered after it: requests 0 and 1 again
    // were refused as old, for good.
    let earlier = node.shared.metadata.borrow().system_requests;
    if earlier == 0 {
        match group
            .submit(
                SYSTEM_CLIENT,
                0,
                iggy_vsr::OPERATION_REGISTER,
                iggy_metadata::machine::session_record(ROOT_USER_ID, 0, [0; 32]),
            )
            .await
        {
            Outcome::Committed { .. } => {}
            _ => return Err(ErrorCode::CannotCreateStateDirectory),
        }
    }
    let request = iggy_metadata::machine::create_user_request(
        username,
        password_hash,
        UserStatus::Active,
        None,
    );
    let body = envelope(node.shared.stamp_now(), ROOT_USER_ID, &request);
    match group
        .submit(
            SYSTEM_CLIENT,
            earlier + 1,
            Operation::CreateUser.to_repr(),
            body,
        )
        .await
    {
        Outcome::Committed { reply, .. } => match iggy_metadata::replies::rejection_of(&reply) {
            Some(code) => Err(code),
            None => Ok(()),
        },
        _ => Err(ErrorCode::CannotCreateStateDirectory),
    }
}

/// A metadata request as it goes into the journal, and how to finish its reply.
pub struct Prepared {
    /// Replacement body (secrets hashed), or `None` to journal the client's bytes.
    pub body: Option<Vec<u8>>,
    /// A new token to show its creator in the reply.
    pub token: Option<String>,
}

impl Prepared {
    /// The reply the client gets: the committed reply with the new token, if any.
    pub fn reveal(&self, reply: Bytes) -> Vec<u8> {
        match (&self.token, iggy_metadata::replies::rejection_of(&reply)) {
            (Some(token), None) => iggy_metadata::replies::token_reply(token),
            _ => reply.to_vec(),
        }
    }
}

/// What the session table keeps of a session's bind secret: a BLAKE3 derived key of it (one
/// way), as passwords and tokens are kept hashed. BindSession presents the secret, which must
/// hash to it; an HTTP token's bind proof is derived from this hash.
pub fn bind_secret_hash(bind_secret: &[u8; 32]) -> [u8; 32] {
    blake3::derive_key("iggy-server 2026 session bind secret", bind_secret)
}

pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
