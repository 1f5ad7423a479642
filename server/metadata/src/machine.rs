//! The metadata group's state machine, pure: a committed op's journaled body (its
//! [`Envelope`]) is decoded with the generated codec and applied to [`Metadata`]; the result is
//! the reply the client gets (result section, then the payload) and the [`Effect`]s the shell
//! runs on disk. No clock, no I/O, no runtime: the same op gives every replica the same model,
//! reply and effects.

use crate::model::{Effect, Ident, Metadata, PersonalAccessToken, UserStatus};
use crate::replies::{Codec, Fresh};
use crate::session::Session;
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{
    ChangePasswordRequest, ConsumerGroupIdRequest, CreateConsumerGroupRequest,
    CreatePartitionsRequest, CreateStreamRequest, CreateTopicRequest, CreateUserRequest,
    DeletePartitionsRequest, DeletePersonalAccessTokenRequest, DeleteUserRequest, SessionRecord,
    StreamIdRequest, StreamResourcePatch, TopicIdRequest, TopicResourcePatch,
    UpdatePermissionsRequest, UpdateResourceRequest, UserResourcePatch,
};
use iggy_generated::storage::{SessionFinalizeOp, SessionRetirementOp};
use iggy_wire::{WireDecode, WireEncode};
use std::hash::Hasher;

/// The node's own client id for ops it submits itself (the root user at first start, the end
/// of an expired session).
pub const SYSTEM_CLIENT: u128 = u128::MAX;

/// A body decoded whole by the generated codec; anything else is InvalidFormat (the node's
/// request handlers decode with it too).
pub fn decode<'a, T: WireDecode<'a>>(bytes: &'a [u8]) -> Result<T, ErrorCode> {
    T::decode_exact(bytes).map_err(|_| ErrorCode::InvalidFormat)
}

/// A metadata op's body as journaled: what the primary decided (time, acting user) and the
/// client's request bytes (the spec's `MetadataOpEnvelope`, spec/storage.spec).
pub use iggy_generated::storage::MetadataOpEnvelope as Envelope;
use iggy_generated::storage::PatCreateOp;

/// Encodes a metadata op's journaled body.
pub fn envelope(timestamp: u64, user_id: u32, request: &[u8]) -> Bytes {
    Envelope {
        timestamp,
        user_id,
        request,
    }
    .to_wire_bytes()
    .into()
}

/// Decodes a wire identifier into a metadata [`Ident`].
pub fn ident(identifier: &iggy_generated::payloads::Identifier<'_>) -> Result<Ident, ErrorCode> {
    match (identifier.kind, identifier.value.len()) {
        (1, 4) => Ok(Ident::Id(u32::from_le_bytes(
            identifier.value.try_into().expect("4 bytes"),
        ))),
        (2, 1..=255) => std::str::from_utf8(identifier.value)
            .map(|name| Ident::Name(name.to_string()))
            .map_err(|_| ErrorCode::InvalidIdentifier),
        _ => Err(ErrorCode::InvalidIdentifier),
    }
}

/// Result-framed reply: success with `payload`, or the rejection.
fn framed(result: Result<Vec<u8>, ErrorCode>) -> Bytes {
    match result {
        Ok(payload) => {
            let mut out = crate::replies::RESULT_OK.to_vec();
            out.extend_from_slice(&payload);
            out.into()
        }
        Err(code) => Bytes::copy_from_slice(&crate::replies::result_rejection(code)),
    }
}

/// The sessions a FinalizeSession body releases, judged against the model at apply. A
/// `SessionFinalizeOp` names the partition-set revision its quorum of retirement reports
/// covered: when the model's differs (a partition created, or the highest one deleted, since),
/// the reports did not check the set as it is now, and nothing is released (the next reports
/// do). A `SessionRetirementOp` (no revision, journaled by earlier builds, which released on
/// the primary's own copies) is applied as then, so every replica replaying such an op, with
/// either build, leaves the same client table. The two layouts' lengths never coincide
/// (8 + 32n against 32n bytes), so at most one decodes.
fn finalized_sessions(
    metadata: &Metadata,
    request: &[u8],
) -> Result<Vec<iggy_generated::payloads::SessionIdentity>, ErrorCode> {
    if let Ok(finalize) = SessionFinalizeOp::decode_exact(request) {
        let current = finalize.partition_set_revision == metadata.partition_set_revision();
        return Ok(if current {
            finalize.sessions
        } else {
            Vec::new()
        });
    }
    let legacy: SessionRetirementOp = decode(request)?;
    Ok(legacy.sessions)
}

/// Applies one committed op to the model; returns the reply and the effects the shell runs.
/// Pure: the reply depends only on the model and the op, so every replica encodes the same one.
pub fn apply(
    metadata: &mut Metadata,
    op: u64,
    client: u128,
    operation: u8,
    body: &[u8],
) -> (Bytes, Vec<Effect>) {
    let Ok(envelope) = Envelope::decode_exact(body) else {
        return (framed(Err(ErrorCode::InvalidCommand)), Vec::new());
    };
    let Some(operation) = Operation::from_repr(operation) else {
        return (framed(Err(ErrorCode::InvalidCommand)), Vec::new());
    };
    let now = envelope.timestamp;
    metadata.commit = op;
    let mut effects = Vec::new();
    let request = envelope.request;
    if client == SYSTEM_CLIENT {
        metadata.system_requests += 1;
    }
    // Replies use the layouts of the protocol the client logged in with.
    let codec = crate::replies::Codec::of(metadata.sessions.get(client).map_or(0, |s| s.protocol));
    let result: Result<Vec<u8>, ErrorCode> = (|| match operation {
        Operation::Logout => {
            // The node ends an expired session by naming its client in the body.
            let target = match <[u8; 16]>::try_from(request) {
                Ok(bytes) if client == SYSTEM_CLIENT => u128::from_le_bytes(bytes),
                _ => client,
            };
            if metadata.sessions.end(target).is_some() {
                metadata.leave_all_groups(target);
            }
            // Logout's reply is not result-framed.
            Ok(Vec::new())
        }
        Operation::FinalizeSession if client == SYSTEM_CLIENT => {
            let named = finalized_sessions(metadata, request)?;
            // A session still live keeps its slot whatever the op names.
            let clients: Vec<u128> = named
                .iter()
                .map(|identity| identity.client_id)
                .filter(|client| metadata.sessions.get(*client).is_none())
                .collect();
            effects.push(Effect::ReleaseSessionSlots { clients });
            Ok(Vec::new())
        }
        Operation::CreateStream => {
            let request: CreateStreamRequest = decode(request)?;
            crate::options::validate_stream_create(request.options)?;
            let id = metadata.create_stream(request.name, now)?;
            Ok(crate::replies::stream_details(
                &Fresh,
                &metadata.streams[&id],
                codec,
            ))
        }
        Operation::DeleteStream => {
            let request: StreamIdRequest = decode(request)?;
            effects = metadata.delete_stream(&ident(&request.stream_id)?)?;
            Ok(Vec::new())
        }
        Operation::CreateTopic => {
            let request: CreateTopicRequest = decode(request)?;
            let settings = crate::replies::topic_settings(request.options)?;
            let stream = ident(&request.stream_id)?;
            let (s, t, opened) = metadata.create_topic(
                &stream,
                request.name,
                request.partitions_count,
                settings,
                op,
                now,
            )?;
            effects = opened;
            let topic = &metadata.streams[&s].topics[&t];
            Ok(crate::replies::topic_details(&Fresh, s, topic, codec))
        }
        Operation::DeleteTopic => {
            let request: TopicIdRequest = decode(request)?;
            effects =
                metadata.delete_topic(&ident(&request.stream_id)?, &ident(&request.topic_id)?)?;
            Ok(Vec::new())
        }
        Operation::CreatePartitions => {
            let request: CreatePartitionsRequest = decode(request)?;
            let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
            effects = metadata.create_partitions(&s, &t, request.partitions_count, op, now)?;
            Ok(Vec::new())
        }
        Operation::DeletePartitions => {
            let request: DeletePartitionsRequest = decode(request)?;
            let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
            effects = metadata.delete_partitions(&s, &t, request.partitions_count)?;
            Ok(Vec::new())
        }
        Operation::CreateConsumerGroup => {
            let request: CreateConsumerGroupRequest = decode(request)?;
            let (s, t) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
            let id = metadata.create_group(&s, &t, request.name, op)?;
            let (_, topic, group) = metadata.group(&s, &t, &Ident::Id(id))?;
            Ok(crate::replies::group_details(&Fresh, topic, group))
        }
        Operation::DeleteConsumerGroup => {
            let request: ConsumerGroupIdRequest = decode(request)?;
            let ids = (
                ident(&request.stream_id)?,
                ident(&request.topic_id)?,
                ident(&request.group_id)?,
            );
            effects = vec![metadata.delete_group(&ids.0, &ids.1, &ids.2, op)?];
            Ok(Vec::new())
        }
        Operation::JoinConsumerGroup => {
            let request: ConsumerGroupIdRequest = decode(request)?;
            let ids = (
                ident(&request.stream_id)?,
                ident(&request.topic_id)?,
                ident(&request.group_id)?,
            );
            metadata.join_group(&ids.0, &ids.1, &ids.2, client)?;
            Ok(Vec::new())
        }
        Operation::LeaveConsumerGroup => {
            let request: ConsumerGroupIdRequest = decode(request)?;
            let ids = (
                ident(&request.stream_id)?,
                ident(&request.topic_id)?,
                ident(&request.group_id)?,
            );
            metadata.leave_group(&ids.0, &ids.1, &ids.2, client)?;
            Ok(Vec::new())
        }
        Operation::DeleteSegments => Ok(Vec::new()),
        // 0.11.1's per-resource updates (204, 304): a name and an options block.
        Operation::UpdateStream => {
            let request: iggy_generated::payloads::UpdateStreamRequest = decode(request)?;
            let stream = ident(&request.stream_id)?;
            metadata.rename_stream(&stream, request.name)?;
            Ok(Vec::new())
        }
        Operation::UpdateTopic => {
            let request: iggy_generated::payloads::UpdateTopicRequest = decode(request)?;
            let (stream, topic) = (ident(&request.stream_id)?, ident(&request.topic_id)?);
            let name = crate::options::encode(&[(
                "name",
                crate::options::kind::STRING,
                request.name.as_bytes(),
            )]);
            let block = crate::options::merge(&name, request.options, &[])?;
            metadata.update_topic(&stream, &topic, &block, &[])?;
            Ok(Vec::new())
        }
        _ => apply_user_op(metadata, operation, envelope.user_id, request, now, codec),
    })();
    let reply = match operation {
        Operation::Logout | Operation::DeleteSegments => match result {
            Ok(payload) => payload.into(),
            Err(code) => Bytes::copy_from_slice(&crate::replies::result_rejection(code)),
        },
        _ => framed(result),
    };
    (reply, effects)
}

/// Applies a committed register: the session it creates. Refused when the journaled session
/// record does not decode (the caller logs it). A register of a user deleted or deactivated
/// since its login was judged (on a lagging replica, or before an op in the pipeline) creates
/// no live session: its connection is unauthenticated, and the user id, which a later user may
/// take, lends nobody its permissions. The root user (never deleted or deactivated) is exempt:
/// the node's own session registers as root before root exists.
pub fn register(
    metadata: &mut Metadata,
    op: u64,
    client: u128,
    body: &[u8],
) -> Result<(), ErrorCode> {
    metadata.commit = op;
    let record = SessionRecord::decode_fixed(body).map_err(|_| ErrorCode::InvalidFormat)?;
    let active = metadata
        .users
        .get(&record.user_id)
        .is_some_and(|user| user.status == UserStatus::Active);
    if !active && record.user_id != crate::ROOT_USER_ID {
        return Ok(());
    }
    metadata.sessions.register(
        client,
        Session {
            session: op,
            user_id: record.user_id,
            protocol: record.protocol_version,
            bind_secret: record.bind_secret,
        },
    );
    Ok(())
}

/// The root user's create request, with its password already hashed.
pub fn create_user_request(
    username: &str,
    password_hash: &str,
    status: UserStatus,
    permissions: Option<&crate::model::Permissions>,
) -> Vec<u8> {
    (CreateUserRequest {
        username,
        password: password_hash,
        status: status as u8,
        permissions: permissions.map(crate::permissions::permissions_to_wire),
        options: &[],
    })
    .to_wire_bytes()
}

/// Encodes a session record for a register.
pub fn session_record(user_id: u32, protocol: u32, bind_secret: [u8; 32]) -> Bytes {
    let record = SessionRecord {
        user_id,
        protocol_version: protocol,
        bind_secret,
    };
    let mut out = Vec::with_capacity(SessionRecord::SIZE);
    record.encode_to(&mut out);
    out.into()
}

pub fn status_from_wire(status: u8) -> Result<UserStatus, ErrorCode> {
    match status {
        1 => Ok(UserStatus::Active),
        2 => Ok(UserStatus::Inactive),
        _ => Err(ErrorCode::InvalidUserStatus),
    }
}

/// Applies a committed user, token or resource op.
fn apply_user_op(
    metadata: &mut Metadata,
    operation: Operation,
    user_id: u32,
    request: &[u8],
    now: u64,
    codec: Codec,
) -> Result<Vec<u8>, ErrorCode> {
    match operation {
        // 0.11.1's user update (35): name and status as fields.
        Operation::UpdateUser => {
            let request: iggy_generated::payloads::UpdateUserRequest = decode(request)?;
            let status = request.status.map(status_from_wire).transpose()?;
            metadata.update_user(user_id, &ident(&request.user_id)?, request.username, status)?;
            Ok(Vec::new())
        }
        Operation::CreateUser => {
            let request: CreateUserRequest = decode(request)?;
            crate::options::validate(crate::options::USER_OPTIONS, request.options, &[], true)?;
            let status = status_from_wire(request.status)?;
            let permissions = request
                .permissions
                .as_ref()
                .map(crate::permissions::permissions_from_wire);
            let id = metadata.create_user(
                request.username,
                request.password.to_string(),
                status,
                permissions,
                now,
            )?;
            Ok(crate::replies::user_details(metadata, id, codec))
        }
        Operation::DeleteUser => {
            let request: DeleteUserRequest = decode(request)?;
            metadata.delete_user(&ident(&request.user_id)?)?;
            Ok(Vec::new())
        }
        Operation::UpdatePermissions => {
            let request: UpdatePermissionsRequest = decode(request)?;
            let permissions = request
                .permissions
                .as_ref()
                .map(crate::permissions::permissions_from_wire);
            metadata.update_permissions(&ident(&request.user_id)?, permissions)?;
            Ok(Vec::new())
        }
        Operation::ChangePassword => {
            let request: ChangePasswordRequest = decode(request)?;
            metadata.set_password(&ident(&request.user_id)?, request.new_password.to_string())?;
            Ok(Vec::new())
        }
        Operation::CreatePersonalAccessToken => {
            let PatCreateOp {
                request: token,
                token_hash,
            } = decode(request)?;
            // 0 and u64::MAX both mean that the token never expires.
            let expiry_at = (token.expiry != 0 && token.expiry != u64::MAX)
                .then(|| now.saturating_add(token.expiry));
            let mut record = token_record(user_id, token.name, "", expiry_at);
            record.token_hash = token_hash;
            metadata.create_token(record)?;
            // The token itself is added to the reply by the primary that made it.
            Ok(Vec::new())
        }
        Operation::DeletePersonalAccessToken => {
            let request: DeletePersonalAccessTokenRequest = decode(request)?;
            metadata.delete_token(user_id, request.name)?;
            Ok(Vec::new())
        }
        Operation::UpdateResource => update_resource(metadata, user_id, request),
        _ => Err(ErrorCode::FeatureUnavailable),
    }
}

fn update_resource(
    metadata: &mut Metadata,
    user_id: u32,
    request: &[u8],
) -> Result<Vec<u8>, ErrorCode> {
    use iggy_generated::payloads::OptionsScope;
    let request: UpdateResourceRequest = decode(request)?;
    match request.scope {
        OptionsScope::Stream => {
            let patch: StreamResourcePatch = decode(request.patch)?;
            crate::options::validate(
                crate::options::STREAM_OPTIONS,
                patch.options,
                &patch.reset,
                false,
            )?;
            let stream = ident(&patch.stream_id)?;
            for (key, value) in crate::options::entries(patch.options)? {
                match key {
                    "name" => metadata.rename_stream(&stream, crate::options::as_str(value)?)?,
                    _ => return Err(ErrorCode::UnsupportedOptionKey),
                }
            }
        }
        OptionsScope::Topic => {
            let patch: TopicResourcePatch = decode(request.patch)?;
            // update_topic checks the options against the catalog: 0.11.1's 304 reaches it too.
            let (stream, topic) = (ident(&patch.stream_id)?, ident(&patch.topic_id)?);
            metadata.update_topic(&stream, &topic, patch.options, &patch.reset)?;
        }
        OptionsScope::User => {
            let patch: UserResourcePatch = decode(request.patch)?;
            crate::options::validate(
                crate::options::USER_OPTIONS,
                patch.options,
                &patch.reset,
                false,
            )?;
            let user = ident(&patch.user_id)?;
            // Every key read first, then one update: a refused one leaves no other applied.
            let (mut username, mut status) = (None, None);
            for (key, value) in crate::options::entries(patch.options)? {
                match key {
                    "username" | "name" => username = Some(crate::options::as_str(value)?),
                    "status" => {
                        status = Some(match crate::options::as_str(value) {
                            Ok("active") => UserStatus::Active,
                            Ok("inactive") => UserStatus::Inactive,
                            _ => status_from_wire(crate::options::as_u64(value)? as u8)?,
                        })
                    }
                    _ => return Err(ErrorCode::UnsupportedOptionKey),
                }
            }
            metadata.update_user(user_id, &user, username, status)?;
        }
    }
    Ok(Vec::new())
}

/// A personal access token as the model keeps it: its hash, never the token.
pub fn token_record(
    user_id: u32,
    name: &str,
    token: &str,
    expiry_at: Option<u64>,
) -> PersonalAccessToken {
    PersonalAccessToken {
        user_id,
        name: name.to_string(),
        token_hash: token_hash(token),
        expiry_at,
    }
}

pub fn token_hash(token: &str) -> [u8; 32] {
    // Tokens are 32 random bytes: a fast hash suffices (no dictionary to attack).
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut hasher = twox_hash::XxHash3_64::with_seed(i as u64);
        hasher.write(token.as_bytes());
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_generated::payloads::Identifier;
    use iggy_wire::WireEncode;

    /// Journals written before the spec declared `PatCreateOp` hold the client's request bytes
    /// with the 32-byte hash appended: the generated layout is those bytes.
    #[test]
    fn a_pat_create_body_is_the_request_then_the_hash_as_journaled_before() {
        let request = iggy_generated::payloads::CreatePersonalAccessTokenRequest {
            name: "ci",
            expiry: 5,
        };
        let mut written_before = request.to_wire_bytes();
        written_before.extend_from_slice(&[7; 32]);
        let op = PatCreateOp {
            request,
            token_hash: [7; 32],
        };
        assert_eq!(op.to_wire_bytes(), written_before);
        assert_eq!(decode::<PatCreateOp>(&written_before), Ok(op));
    }

    fn request<T: WireEncode>(value: &T) -> Vec<u8> {
        let mut out = Vec::new();
        value.encode_to(&mut out);
        out
    }

    fn id(value: &[u8; 4]) -> Identifier<'_> {
        Identifier {
            kind: 1,
            value: &value[..],
        }
    }

    /// The ops of a short history: a stream, a topic of two partitions, its deletion, the
    /// stream re-created under the reused id.
    fn history() -> Vec<(u8, Vec<u8>)> {
        let zero = 0u32.to_le_bytes();
        vec![
            (
                Operation::CreateStream.to_repr(),
                request(&CreateStreamRequest {
                    name: "orders",
                    options: &[],
                }),
            ),
            (
                Operation::CreateTopic.to_repr(),
                request(&CreateTopicRequest {
                    stream_id: id(&zero),
                    partitions_count: 2,
                    name: "eu",
                    options: &[],
                }),
            ),
            (
                Operation::DeleteStream.to_repr(),
                request(&StreamIdRequest {
                    stream_id: id(&zero),
                }),
            ),
            (
                Operation::CreateStream.to_repr(),
                request(&CreateStreamRequest {
                    name: "orders",
                    options: &[],
                }),
            ),
        ]
    }

    fn run(history: &[(u8, Vec<u8>)]) -> (Metadata, Vec<(Bytes, Vec<Effect>)>) {
        let mut metadata = Metadata::default();
        let outcomes = history
            .iter()
            .enumerate()
            .map(|(at, (operation, body))| {
                let op = at as u64 + 1;
                let envelope = envelope(1_000 + op, crate::ROOT_USER_ID, body);
                apply(&mut metadata, op, 7, *operation, &envelope)
            })
            .collect();
        (metadata, outcomes)
    }

    /// The dispatcher judges a request on the model as it arrives; an op ordered before it may
    /// still revoke the grant, make the user inactive or delete it. The primary prepares
    /// nothing behind such an op until it applied it, then judges the request again by the
    /// model it left (`permissions::admits`): refused (41), and what it would have made never
    /// exists. (The machine itself applies what was prepared, on every replica alike, as
    /// replicas of earlier builds do.)
    #[test]
    fn a_request_whose_user_lost_the_grant_ahead_of_it_is_not_admitted() {
        use crate::permissions::{admits, takes_grants_away};
        let mut metadata = Metadata::default();
        let root = metadata.create_user("root", String::new(), UserStatus::Active, None, 0);
        assert_eq!(root, Ok(crate::ROOT_USER_ID));
        let root = crate::ROOT_USER_ID;
        let mut grant = crate::model::Permissions::default();
        grant.global.manage_streams = true;
        let ops = metadata.create_user(
            "ops",
            String::new(),
            UserStatus::Active,
            Some(grant.clone()),
            0,
        );
        let ops = ops.unwrap();
        let create = |name| request(&CreateStreamRequest { name, options: &[] });
        let stream = Operation::CreateStream.to_repr();
        assert_eq!(
            admits(&metadata, stream, &envelope(1, ops, &create("a"))),
            Ok(())
        );

        // Each way of losing the grant is an op the primary waits behind.
        for operation in [
            Operation::UpdatePermissions,
            Operation::UpdateUser,
            Operation::UpdateResource,
            Operation::DeleteUser,
            Operation::DeletePersonalAccessToken,
        ] {
            assert!(takes_grants_away(operation), "{operation:?}");
        }
        let revoked = metadata.update_permissions(&Ident::Name("ops".into()), None);
        assert_eq!(revoked, Ok(()));
        let refused = admits(&metadata, stream, &envelope(2, ops, &create("b")));
        assert_eq!(refused, Err(ErrorCode::Unauthorized));
        // Root's requests, and one whose target is gone (the apply answers it), are admitted.
        assert_eq!(
            admits(&metadata, stream, &envelope(3, root, &create("c"))),
            Ok(())
        );
        let zero = 7u32.to_le_bytes();
        let delete = request(&StreamIdRequest {
            stream_id: id(&zero),
        });
        let delete_stream = Operation::DeleteStream.to_repr();
        assert_eq!(
            admits(&metadata, delete_stream, &envelope(4, ops, &delete)),
            Ok(())
        );

        // Granted again, then made inactive: refused.
        let granted = metadata.update_permissions(&Ident::Name("ops".into()), Some(grant));
        assert_eq!(granted, Ok(()));
        assert_eq!(
            admits(&metadata, stream, &envelope(5, ops, &create("d"))),
            Ok(())
        );
        let inactive = metadata.update_user(
            crate::ROOT_USER_ID,
            &Ident::Name("ops".into()),
            None,
            Some(UserStatus::Inactive),
        );
        assert_eq!(inactive, Ok(()));
        let refused = admits(&metadata, stream, &envelope(6, ops, &create("d")));
        assert_eq!(refused, Err(ErrorCode::Unauthorized));

        // A deleted user's request is refused even where no grant is needed (its own token).
        let token = request(
            &iggy_generated::payloads::CreatePersonalAccessTokenRequest {
                name: "mine",
                expiry: 0,
            },
        );
        let mut body = token.clone();
        body.extend_from_slice(&[1; 32]);
        let pat = Operation::CreatePersonalAccessToken.to_repr();
        assert_eq!(metadata.delete_user(&Ident::Name("ops".into())), Ok(ops));
        let refused = admits(&metadata, pat, &envelope(7, ops, &body));
        assert_eq!(refused, Err(ErrorCode::Unauthorized));
    }

    #[test]
    fn committed_ops_give_every_replica_the_same_model_replies_and_effects() {
        let history = history();
        let (first, first_outcomes) = run(&history);
        let (second, second_outcomes) = run(&history);
        assert_eq!(first_outcomes, second_outcomes);
        assert_eq!(
            crate::snapshot::encode(&first),
            crate::snapshot::encode(&second)
        );

        // The topic's creation opens its two partitions, named by the creating op.
        let (_, topic_effects) = &first_outcomes[1];
        assert_eq!(topic_effects.len(), 2);
        assert!(topic_effects.iter().all(|effect| matches!(
            effect,
            Effect::OpenPartition { stream: 0, topic: 0, incarnation, .. } if incarnation >> 20 == 2
        )));
        // Deleting the stream deletes exactly those incarnations.
        let (reply, delete_effects) = &first_outcomes[2];
        assert_eq!(crate::replies::rejection_of(reply), None);
        assert_eq!(delete_effects.len(), 2);
        assert!(delete_effects.iter().all(|effect| matches!(
            effect,
            Effect::DeletePartition { incarnation, .. } if incarnation >> 20 == 2
        )));
        // The id is reused; the created stream is the new, empty one.
        assert_eq!(first.streams[&0].topics.len(), 0);
        assert_eq!(first.streams[&0].created_at, 1_004);
    }

    /// A group created again under a deleted group's id is told apart by its creation op, and
    /// the topic names the op of its latest group change (so the sweep of orphaned offsets
    /// knows when to look again).
    #[test]
    fn a_group_keeps_the_op_that_created_it_and_its_topic_the_latest_group_change() {
        let zero = 0u32.to_le_bytes();
        let create = request(&CreateConsumerGroupRequest {
            stream_id: id(&zero),
            topic_id: id(&zero),
            name: "g",
        });
        let delete = request(&ConsumerGroupIdRequest {
            stream_id: id(&zero),
            topic_id: id(&zero),
            group_id: id(&zero),
        });
        let mut history = history();
        history.truncate(2);
        history.push((Operation::CreateConsumerGroup.to_repr(), create.clone()));
        history.push((Operation::DeleteConsumerGroup.to_repr(), delete));
        history.push((Operation::CreateConsumerGroup.to_repr(), create));
        let (metadata, outcomes) = run(&history);
        assert!(
            outcomes
                .iter()
                .all(|(reply, _)| crate::replies::rejection_of(reply).is_none())
        );
        let topic = &metadata.streams[&0].topics[&0];
        // Ops are numbered from 1: the topic is op 2, the group op 3, its deletion op 4.
        assert_eq!(topic.consumer_groups[&0].created_at_op, 5);
        assert_eq!(topic.groups_changed_at_op, 5);

        let (metadata, _) = run(&history[..4]);
        let topic = &metadata.streams[&0].topics[&0];
        assert!(topic.consumer_groups.is_empty());
        assert_eq!(topic.groups_changed_at_op, 4);
        let (metadata, _) = run(&history[..3]);
        let topic = &metadata.streams[&0].topics[&0];
        assert_eq!(topic.consumer_groups[&0].created_at_op, 3);
        let (metadata, _) = run(&history[..2]);
        assert_eq!(metadata.streams[&0].topics[&0].groups_changed_at_op, 2);
    }

    #[test]
    fn a_refused_op_leaves_the_model_unchanged_and_replies_its_error() {
        let mut metadata = Metadata::default();
        let before = crate::snapshot::encode(&metadata);
        let missing = 9u32.to_le_bytes();
        let body = request(&StreamIdRequest {
            stream_id: id(&missing),
        });
        let envelope = envelope(5, crate::ROOT_USER_ID, &body);
        let (reply, effects) = apply(
            &mut metadata,
            1,
            7,
            Operation::DeleteStream.to_repr(),
            &envelope,
        );
        assert_eq!(
            crate::replies::rejection_of(&reply),
            Some(ErrorCode::StreamIdNotFound)
        );
        assert!(effects.is_empty());
        metadata.commit = 0;
        assert_eq!(crate::snapshot::encode(&metadata), before);

        let (reply, _) = apply(
            &mut metadata,
            2,
            7,
            Operation::CreateStream.to_repr(),
            b"short",
        );
        assert_eq!(
            crate::replies::rejection_of(&reply),
            Some(ErrorCode::InvalidCommand)
        );
    }

    /// A login judged just before its user was deleted or deactivated commits a register
    /// afterwards: no live session comes of it, so a user created later under the reused id
    /// lends that connection nothing. Root's session (the node's own, before root exists) is.
    #[test]
    fn a_register_of_a_user_gone_or_inactive_by_its_commit_creates_no_live_session() {
        let mut metadata = Metadata::default();
        let id = metadata
            .create_user("alice", "hash".into(), UserStatus::Active, None, 0)
            .unwrap();
        let idle = metadata
            .create_user("bob", "hash".into(), UserStatus::Inactive, None, 0)
            .unwrap();
        let gone = id + 100;
        for (op, client, user) in [
            (1, 31, crate::ROOT_USER_ID),
            (2, 32, id),
            (3, 33, idle),
            (4, 34, gone),
        ] {
            register(&mut metadata, op, client, &session_record(user, 0, [0; 32])).unwrap();
        }
        let live = |client| metadata.sessions.get(client).is_some();
        assert!(live(31), "root's session, no root user yet");
        assert!(live(32), "an active user's");
        assert!(!live(33), "a deactivated user's");
        assert!(!live(34), "a deleted user's");
    }

    /// A FinalizeSession body as journaled by builds before retirement reports had revisions
    /// (a bare `SessionRetirementOp`) still decodes and releases as it did then.
    #[test]
    fn a_finalize_releases_only_ended_sessions_and_only_from_the_system_client() {
        let mut metadata = Metadata::default();
        for (op, client) in [(1, 21), (2, 22)] {
            let record = session_record(crate::ROOT_USER_ID, 0, [0; 32]);
            register(&mut metadata, op, client, &record).unwrap();
        }
        let logout = envelope(3, crate::ROOT_USER_ID, &[]);
        apply(&mut metadata, 3, 21, Operation::Logout.to_repr(), &logout);
        let identity = |client_id| iggy_generated::payloads::SessionIdentity {
            client_id,
            session: 1,
            metadata_watermark: 3,
        };
        let named = SessionRetirementOp {
            sessions: vec![identity(21), identity(22)],
        };
        let body = envelope(4, crate::ROOT_USER_ID, &named.to_wire_bytes());
        let finalize = Operation::FinalizeSession.to_repr();

        // From a client's session: not an op a client may send.
        let (reply, effects) = apply(&mut metadata, 4, 22, finalize, &body);
        assert!(crate::replies::rejection_of(&reply).is_some());
        assert!(effects.is_empty());

        // From the system client: the ended session 21 is released, the live 22 is kept.
        let (reply, effects) = apply(&mut metadata, 5, SYSTEM_CLIENT, finalize, &body);
        assert_eq!(crate::replies::rejection_of(&reply), None);
        assert_eq!(
            effects,
            vec![Effect::ReleaseSessionSlots { clients: vec![21] }]
        );
        assert!(metadata.sessions.get(22).is_some());
    }

    /// Sessions 21 (ended) and 22 (live), a topic of one partition; the body of a
    /// FinalizeSession naming both at `revision`.
    fn finalizing_at(revision_offset: i64) -> (Metadata, Vec<u8>) {
        let mut metadata = Metadata::default();
        for (op, client) in [(1, 21), (2, 22)] {
            let record = session_record(crate::ROOT_USER_ID, 0, [0; 32]);
            register(&mut metadata, op, client, &record).unwrap();
        }
        metadata.create_stream("s", 3).unwrap();
        let settings = crate::TopicSettings::default();
        metadata
            .create_topic(&Ident::Id(0), "t", 1, settings, 4, 4)
            .unwrap();
        let logout = envelope(5, crate::ROOT_USER_ID, &[]);
        apply(&mut metadata, 5, 21, Operation::Logout.to_repr(), &logout);
        let identity = |client_id| iggy_generated::payloads::SessionIdentity {
            client_id,
            session: 1,
            metadata_watermark: 5,
        };
        let revision = metadata
            .partition_set_revision()
            .checked_add_signed(revision_offset)
            .unwrap();
        let named = SessionFinalizeOp {
            partition_set_revision: revision,
            sessions: vec![identity(21), identity(22)],
        };
        let body = envelope(6, crate::ROOT_USER_ID, &named.to_wire_bytes()).to_vec();
        (metadata, body)
    }

    #[test]
    fn a_finalize_at_the_current_partition_set_revision_releases_the_ended_sessions() {
        let (mut metadata, body) = finalizing_at(0);
        assert_ne!(metadata.partition_set_revision(), 0);
        let finalize = Operation::FinalizeSession.to_repr();
        let (reply, effects) = apply(&mut metadata, 6, SYSTEM_CLIENT, finalize, &body);
        assert_eq!(crate::replies::rejection_of(&reply), None);
        assert_eq!(
            effects,
            vec![Effect::ReleaseSessionSlots { clients: vec![21] }],
            "the ended session goes, the live one stays"
        );
    }

    #[test]
    fn a_finalize_at_another_partition_set_revision_releases_nothing() {
        let finalize = Operation::FinalizeSession.to_repr();
        // Evidence from before the topic's partition existed, and a revision ahead.
        for offset in [-1, 1] {
            let (mut metadata, body) = finalizing_at(offset);
            let (reply, effects) = apply(&mut metadata, 6, SYSTEM_CLIENT, finalize, &body);
            assert_eq!(crate::replies::rejection_of(&reply), None);
            assert_eq!(
                effects,
                vec![Effect::ReleaseSessionSlots { clients: vec![] }],
                "offset {offset}"
            );
        }
        // A partition created after the evidence was gathered makes it stale.
        let (mut metadata, body) = finalizing_at(0);
        metadata
            .create_partitions(&Ident::Id(0), &Ident::Id(0), 1, 6, 6)
            .unwrap();
        let (_, effects) = apply(&mut metadata, 7, SYSTEM_CLIENT, finalize, &body);
        assert_eq!(
            effects,
            vec![Effect::ReleaseSessionSlots { clients: vec![] }]
        );
    }

    #[test]
    fn the_partition_set_revision_follows_incarnations_not_segments() {
        let mut metadata = Metadata::default();
        assert_eq!(metadata.partition_set_revision(), 0);
        metadata.create_stream("s", 1).unwrap();
        assert_eq!(
            metadata.partition_set_revision(),
            0,
            "a stream has no partitions"
        );
        let settings = crate::TopicSettings::default();
        let (stream, topic) = (Ident::Id(0), Ident::Id(0));
        metadata
            .create_topic(&stream, "t", 2, settings, 2, 2)
            .unwrap();
        let two = metadata.partition_set_revision();
        assert_ne!(two, 0);
        metadata
            .create_partitions(&stream, &topic, 1, 3, 3)
            .unwrap();
        let three = metadata.partition_set_revision();
        assert!(three > two, "a created partition raises it");
        metadata.delete_partitions(&stream, &topic, 1).unwrap();
        assert_eq!(
            metadata.partition_set_revision(),
            two,
            "its delete lowers it"
        );
        metadata
            .create_partitions(&stream, &topic, 1, 4, 4)
            .unwrap();
        assert!(
            metadata.partition_set_revision() > three,
            "the same ids created again are a new incarnation"
        );
        metadata.delete_topic(&stream, &topic).unwrap();
        assert_eq!(metadata.partition_set_revision(), 0);
    }

    /// A journal replayed by this build holds FinalizeSession bodies of both layouts; their
    /// lengths never coincide, so each decodes as what it was written as.
    #[test]
    fn the_two_finalize_layouts_never_decode_as_each_other() {
        for count in 0..4u128 {
            let sessions: Vec<_> = (0..count)
                .map(|client| iggy_generated::payloads::SessionIdentity {
                    client_id: client + 1,
                    session: 2,
                    metadata_watermark: 3,
                })
                .collect();
            let legacy = SessionRetirementOp {
                sessions: sessions.clone(),
            }
            .to_wire_bytes();
            let current = SessionFinalizeOp {
                partition_set_revision: 9,
                sessions,
            }
            .to_wire_bytes();
            assert!(SessionFinalizeOp::decode_exact(&legacy).is_err(), "{count}");
            assert!(
                SessionRetirementOp::decode_exact(&current).is_err(),
                "{count}"
            );
        }
    }
}
