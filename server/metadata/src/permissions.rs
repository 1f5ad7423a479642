//! Permissions between the model and the generated wire layout (requests, replies and the
//! snapshot use the same `WirePermissions`), and what each metadata op needs.

use crate::Ident;
use crate::machine::{decode, ident};
use crate::model::{
    GlobalPermissions, Metadata, Need, Permissions, StreamPermissions, TopicPermissions,
};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{
    ChangePasswordRequest, ConsumerGroupIdRequest, CreateConsumerGroupRequest,
    CreatePartitionsRequest, CreateTopicRequest, DeletePartitionsRequest, DeleteSegmentsRequest,
    Identifier, OptionsScope, StreamIdRequest, StreamResourcePatch, TopicIdRequest,
    TopicResourcePatch, UpdateResourceRequest, UpdateStreamRequest, UpdateTopicRequest,
    WireGlobalPermissions, WirePermissions, WireStreamPermissions, WireTopicPermissions,
};
use iggy_wire::WireDecode;

pub fn permissions_from_wire(wire: &WirePermissions) -> Permissions {
    let g = &wire.global;
    let global = GlobalPermissions {
        manage_servers: g.manage_servers,
        read_servers: g.read_servers,
        manage_users: g.manage_users,
        read_users: g.read_users,
        manage_streams: g.manage_streams,
        read_streams: g.read_streams,
        manage_topics: g.manage_topics,
        read_topics: g.read_topics,
        poll_messages: g.poll_messages,
        send_messages: g.send_messages,
    };
    let streams = wire
        .streams
        .iter()
        .map(|s| {
            let topics = s
                .topics
                .iter()
                .map(|t| {
                    let topic = TopicPermissions {
                        manage_topic: t.manage_topic,
                        read_topic: t.read_topic,
                        poll_messages: t.poll_messages,
                        send_messages: t.send_messages,
                    };
                    (t.topic_id, topic)
                })
                .collect();
            let stream = StreamPermissions {
                manage_stream: s.manage_stream,
                read_stream: s.read_stream,
                manage_topics: s.manage_topics,
                read_topics: s.read_topics,
                poll_messages: s.poll_messages,
                send_messages: s.send_messages,
                topics,
            };
            (s.stream_id, stream)
        })
        .collect();
    Permissions { global, streams }
}

pub fn permissions_to_wire(permissions: &Permissions) -> WirePermissions {
    let g = &permissions.global;
    let global = WireGlobalPermissions {
        manage_servers: g.manage_servers,
        read_servers: g.read_servers,
        manage_users: g.manage_users,
        read_users: g.read_users,
        manage_streams: g.manage_streams,
        read_streams: g.read_streams,
        manage_topics: g.manage_topics,
        read_topics: g.read_topics,
        poll_messages: g.poll_messages,
        send_messages: g.send_messages,
    };
    let streams = permissions
        .streams
        .iter()
        .map(|(id, s)| WireStreamPermissions {
            stream_id: *id,
            manage_stream: s.manage_stream,
            read_stream: s.read_stream,
            manage_topics: s.manage_topics,
            read_topics: s.read_topics,
            poll_messages: s.poll_messages,
            send_messages: s.send_messages,
            topics: s
                .topics
                .iter()
                .map(|(topic_id, t)| WireTopicPermissions {
                    topic_id: *topic_id,
                    manage_topic: t.manage_topic,
                    read_topic: t.read_topic,
                    poll_messages: t.poll_messages,
                    send_messages: t.send_messages,
                })
                .collect(),
        })
        .collect();
    WirePermissions { global, streams }
}

/// Whether `operation` may take grants away once applied: a user's permissions replaced, the
/// user deleted or made inactive (an update may set the status: 0.11.1's UpdateUser, or
/// 0.12.0's UpdateResource, whose user scope the SDK's `update_user` sends; its stream and
/// topic scopes are counted too, as the operation alone is known where this is asked), a
/// personal access token deleted. In a cluster such a change is answered only once no node
/// judges by a metadata copy without it (the server's `consensus/grant_lease.rs`).
pub fn takes_grants_away(operation: Operation) -> bool {
    matches!(
        operation,
        Operation::UpdatePermissions
            | Operation::DeleteUser
            | Operation::UpdateUser
            | Operation::UpdateResource
            | Operation::DeletePersonalAccessToken
    )
}

/// Whether the metadata primary may prepare a client's op (`envelope`: its journaled body) by
/// `metadata` as every op before it left: its acting user still exists, is active and holds
/// the grant the op needs (41 otherwise). The node judged the op on arrival, but an op ordered
/// ahead of it may have revoked the grant or removed the user since; the primary prepares
/// nothing behind such an op until it applied it (`takes_grants_away`), then asks this. An op
/// whose target is gone, or that no grant governs, is left to the machine's apply.
pub fn admits(metadata: &Metadata, operation: u8, envelope: &[u8]) -> Result<(), ErrorCode> {
    let (Ok(envelope), Some(operation)) = (
        crate::machine::Envelope::decode_exact(envelope),
        Operation::from_repr(operation),
    ) else {
        return Ok(());
    };
    let Ok(Some(need)) = need_of(metadata, operation, envelope.user_id, envelope.request) else {
        return Ok(());
    };
    let allowed = metadata
        .users
        .get(&envelope.user_id)
        .is_some_and(|user| user.status == crate::model::UserStatus::Active && user.allows(need));
    match allowed {
        true => Ok(()),
        false => Err(ErrorCode::Unauthorized),
    }
}

/// What metadata op `operation` of user `actor` needs, resolved against `metadata` as it stands
/// (a stream or topic named by name or id; a missing one is its not-found error): the
/// dispatcher asks it before it submits the op. (The machine does not ask again as the op
/// applies: see ARCHITECTURE.md, "request path".) `None`: no grant governs the op (session and
/// system ops).
pub fn need_of(
    metadata: &Metadata,
    operation: Operation,
    actor: u32,
    request: &[u8],
) -> Result<Option<Need>, ErrorCode> {
    need_resolved(metadata, operation, actor, request, false)
}

/// An id no stream, topic or user has, nor any grant names (grants on a missing stream or
/// topic are refused, and a deleted one's grants go with it).
pub const NO_SUCH_ID: u32 = u32::MAX;

/// What `operation` would need were the stream, topic or user it names missing to exist (under
/// an id no grant names): `need_of`'s answer whatever the target. A request for a missing
/// target is judged by it first, so a user without the grant learns nothing of what exists
/// (41 either way, as the reads answer), and one with it is told what is missing.
pub fn need_whatever_the_target(
    metadata: &Metadata,
    operation: Operation,
    actor: u32,
    request: &[u8],
) -> Result<Option<Need>, ErrorCode> {
    need_resolved(metadata, operation, actor, request, true)
}

/// The ids of the stream and topic `stream` and `topic` name, a missing one's as an id no
/// grant names: what a request for them is judged by before it is told what is missing (see
/// [`need_whatever_the_target`]).
pub fn topic_whatever_exists(
    metadata: &Metadata,
    stream: &Identifier<'_>,
    topic: &Identifier<'_>,
) -> Result<(u32, u32), ErrorCode> {
    let stream = or_no_such_id(metadata.stream(&ident(stream)?).map(|s| s.id))?;
    if stream == NO_SUCH_ID {
        return Ok((NO_SUCH_ID, NO_SUCH_ID));
    }
    let topic = metadata.topic(&Ident::Id(stream), &ident(topic)?);
    Ok((stream, or_no_such_id(topic.map(|(_, t)| t.id))?))
}

/// `found`, with a not-found error as [`NO_SUCH_ID`].
fn or_no_such_id(found: Result<u32, ErrorCode>) -> Result<u32, ErrorCode> {
    match found {
        Err(error) if is_not_found(error) => Ok(NO_SUCH_ID),
        found => found,
    }
}

/// Whether `error` says a named resource does not exist (`ResourceNotFound`, `StreamIdNotFound`,
/// …): the codes whose names end so.
pub fn is_not_found(error: ErrorCode) -> bool {
    error.name().ends_with("NotFound")
}

fn need_resolved(
    metadata: &Metadata,
    operation: Operation,
    actor: u32,
    request: &[u8],
    assume_targets: bool,
) -> Result<Option<Need>, ErrorCode> {
    let assumed = |found: Result<u32, ErrorCode>| match assume_targets {
        true => or_no_such_id(found),
        false => found,
    };
    let stream_of = |id: &Identifier<'_>| assumed(metadata.stream(&ident(id)?).map(|s| s.id));
    let topic_of = |s: &Identifier<'_>, t: &Identifier<'_>| match assume_targets {
        true => topic_whatever_exists(metadata, s, t),
        false => metadata
            .topic(&ident(s)?, &ident(t)?)
            .map(|(s, t)| (s.id, t.id)),
    };
    let manage_topic = |s: &Identifier<'_>, t: &Identifier<'_>| {
        topic_of(s, t).map(|(s, t)| Need::ManageTopic(s, t))
    };
    Ok(Some(match operation {
        Operation::CreateStream => Need::ManageStreams,
        Operation::DeleteStream => {
            Need::ManageStream(stream_of(&decode::<StreamIdRequest>(request)?.stream_id)?)
        }
        Operation::UpdateStream => Need::ManageStream(stream_of(
            &decode::<UpdateStreamRequest>(request)?.stream_id,
        )?),
        Operation::CreateTopic => Need::ManageTopics(stream_of(
            &decode::<CreateTopicRequest>(request)?.stream_id,
        )?),
        Operation::DeleteTopic => {
            let r: TopicIdRequest = decode(request)?;
            manage_topic(&r.stream_id, &r.topic_id)?
        }
        Operation::UpdateTopic => {
            let r: UpdateTopicRequest = decode(request)?;
            manage_topic(&r.stream_id, &r.topic_id)?
        }
        Operation::CreatePartitions => {
            let r: CreatePartitionsRequest = decode(request)?;
            manage_topic(&r.stream_id, &r.topic_id)?
        }
        Operation::DeletePartitions => {
            let r: DeletePartitionsRequest = decode(request)?;
            manage_topic(&r.stream_id, &r.topic_id)?
        }
        Operation::DeleteSegments => {
            let r: DeleteSegmentsRequest = decode(request)?;
            manage_topic(&r.stream_id, &r.topic_id)?
        }
        // Readers of a topic manage its consumer groups (the SDK's permission docs), so a
        // consumer that may read can create the group it joins.
        Operation::CreateConsumerGroup => {
            let r: CreateConsumerGroupRequest = decode(request)?;
            let (s, t) = topic_of(&r.stream_id, &r.topic_id)?;
            Need::ReadTopic(s, t)
        }
        Operation::DeleteConsumerGroup => {
            let r: ConsumerGroupIdRequest = decode(request)?;
            let (s, t) = topic_of(&r.stream_id, &r.topic_id)?;
            Need::ReadTopic(s, t)
        }
        Operation::JoinConsumerGroup => {
            let r: ConsumerGroupIdRequest = decode(request)?;
            let (s, t) = topic_of(&r.stream_id, &r.topic_id)?;
            Need::PollMessages(s, t)
        }
        // Leaving only gives the member's own partitions back to the others: a member whose
        // poll grant was revoked must be able to (else they stay assigned to it, unpolled,
        // until its session ends).
        Operation::LeaveConsumerGroup => Need::None,
        Operation::CreateUser
        | Operation::DeleteUser
        | Operation::UpdatePermissions
        | Operation::UpdateUser => Need::ManageUsers,
        // One's own password needs no grant; another's needs manage_users.
        Operation::ChangePassword => {
            let r: ChangePasswordRequest = decode(request)?;
            let user = assumed(metadata.user(&ident(&r.user_id)?).map(|user| user.id))?;
            match user == actor {
                true => Need::None,
                false => Need::ManageUsers,
            }
        }
        // A user's tokens are its own.
        Operation::CreatePersonalAccessToken | Operation::DeletePersonalAccessToken => Need::None,
        Operation::UpdateResource => {
            let r: UpdateResourceRequest = decode(request)?;
            match r.scope {
                OptionsScope::User => Need::ManageUsers,
                OptionsScope::Stream => {
                    let patch: StreamResourcePatch = decode(r.patch)?;
                    Need::ManageStream(stream_of(&patch.stream_id)?)
                }
                OptionsScope::Topic => {
                    let patch: TopicResourcePatch = decode(r.patch)?;
                    manage_topic(&patch.stream_id, &patch.topic_id)?
                }
            }
        }
        _ => return Ok(None),
    }))
}
