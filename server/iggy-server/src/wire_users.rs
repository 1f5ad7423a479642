//! User, token, client and system commands on the wire.
// Interim: waits on the spec's user/permission/token structs; until they land these commands
// answer FeatureUnavailable, and the root user's create request is built here.

use crate::dispatch::Connection;
use crate::metadata::{Metadata, Permissions, UserStatus};
use crate::node::{Node, Shared};
use crate::users::Prepared;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{Operation, RequestHeader};

pub fn create_user_request(
    username: &str,
    password_hash: &str,
    status: UserStatus,
    _permissions: Option<&Permissions>,
) -> Vec<u8> {
    let mut out = vec![username.len() as u8];
    out.extend_from_slice(username.as_bytes());
    out.push(password_hash.len() as u8);
    out.extend_from_slice(password_hash.as_bytes());
    out.push(status as u8);
    out.push(0);
    out
}

pub fn token_reply(token: &str) -> Vec<u8> {
    let mut out = crate::replies::RESULT_OK.to_vec();
    out.push(token.len() as u8);
    out.extend_from_slice(token.as_bytes());
    out
}

pub fn prepare(
    _shared: &Shared,
    _operation: Operation,
    _user_id: u32,
    _body: &[u8],
) -> Result<Prepared, ErrorCode> {
    Ok(Prepared {
        body: None,
        token: None,
    })
}

pub fn apply(
    metadata: &mut Metadata,
    operation: Operation,
    _user_id: u32,
    request: &[u8],
    now: u64,
) -> Result<Vec<u8>, ErrorCode> {
    match operation {
        Operation::CreateUser => {
            let name_len = *request.first().ok_or(ErrorCode::InvalidFormat)? as usize;
            let username = std::str::from_utf8(
                request
                    .get(1..1 + name_len)
                    .ok_or(ErrorCode::InvalidFormat)?,
            )
            .map_err(|_| ErrorCode::InvalidFormat)?;
            let rest = &request[1 + name_len..];
            let hash_len = *rest.first().ok_or(ErrorCode::InvalidFormat)? as usize;
            let hash =
                std::str::from_utf8(rest.get(1..1 + hash_len).ok_or(ErrorCode::InvalidFormat)?)
                    .map_err(|_| ErrorCode::InvalidFormat)?;
            metadata.create_user(username, hash.to_string(), UserStatus::Active, None, now)?;
            Ok(Vec::new())
        }
        _ => Err(ErrorCode::FeatureUnavailable),
    }
}

pub async fn read(
    _node: &Node,
    _connection: &Connection,
    _header: &RequestHeader,
    _code: u32,
    _body: &[u8],
) -> Result<Vec<u8>, ErrorCode> {
    Err(ErrorCode::FeatureUnavailable)
}
