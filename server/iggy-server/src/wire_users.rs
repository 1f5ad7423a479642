//! User, token, client and system commands on the wire: generated request and response types
//! to and from the metadata model.

use crate::dispatch::Connection;
use crate::metadata::{
    GlobalPermissions, Metadata, Need, Permissions, StreamPermissions, TopicPermissions, UserStatus,
};
use crate::metadata_machine::ident;
use crate::node::{Node, Shared};
use crate::replies::Codec;
use crate::users::{Prepared, hash_password, new_token, token_record};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{Operation, RequestHeader};
use iggy_generated::payloads::{
    ChangePasswordRequest, ClientDetailsResponse, ClientResponse, ConsumerGroupInfoResponse,
    CreatePersonalAccessTokenRequest, CreateUserRequest, DeletePersonalAccessTokenRequest,
    DeleteUserRequest, DescribeOptionsResponse, GetClientRequest, GetUserRequest,
    PersonalAccessTokenResponse, RawPersonalAccessTokenResponse, StatsResponse,
    StreamResourcePatch, TopicResourcePatch, UpdatePermissionsRequest, UpdateResourceRequest,
    UserDetailsResponse, UserDetailsResponseV0111, UserResourcePatch, UserResponse,
    UserResponseV0111, WireGlobalPermissions, WirePermissions, WireStreamPermissions,
    WireTopicPermissions,
};
use iggy_wire::{WireDecode, WireEncode};

fn encode<T: WireEncode>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.encoded_size());
    value.encode_to(&mut out);
    out
}

fn decode<'a, T: WireDecode<'a>>(bytes: &'a [u8]) -> Result<T, ErrorCode> {
    T::decode_exact(bytes).map_err(|_| ErrorCode::InvalidFormat)
}

// ----- permissions -----

pub(crate) fn permissions_from_wire(wire: &WirePermissions) -> Permissions {
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

pub(crate) fn permissions_to_wire(permissions: &Permissions) -> WirePermissions {
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

fn status_from_wire(status: u8) -> Result<UserStatus, ErrorCode> {
    match status {
        1 => Ok(UserStatus::Active),
        2 => Ok(UserStatus::Inactive),
        _ => Err(ErrorCode::InvalidUserStatus),
    }
}

fn user_details(metadata: &Metadata, id: u32, codec: Codec) -> Vec<u8> {
    let user = &metadata.users[&id];
    let permissions = if id == crate::metadata::ROOT_USER_ID {
        Some(permissions_to_wire(&Permissions::all()))
    } else {
        user.permissions.as_ref().map(permissions_to_wire)
    };
    match codec {
        Codec::Current => encode(&UserDetailsResponse {
            user: user_header(user),
            permissions,
        }),
        Codec::V0_11_1 => encode(&UserDetailsResponseV0111 {
            user: user_header_v0111(user),
            permissions,
        }),
    }
}

fn user_header_v0111(user: &crate::metadata::User) -> UserResponseV0111<'_> {
    UserResponseV0111 {
        id: user.id,
        created_at: user.created_at,
        status: user.status as u8,
        username: &user.username,
        options: &[],
    }
}

fn user_header(user: &crate::metadata::User) -> UserResponse<'_> {
    UserResponse {
        id: user.id,
        created_at: user.created_at,
        status: user.status as u8,
        username: &user.username,
        options: &[],
        derived_options: &[],
    }
}

const PASSWORD_MIN: usize = 3;
const PASSWORD_MAX: usize = 100;

fn check_password(password: &str) -> Result<(), ErrorCode> {
    if (PASSWORD_MIN..=PASSWORD_MAX).contains(&password.len()) {
        Ok(())
    } else {
        Err(ErrorCode::InvalidPassword)
    }
}

/// The root user's create request, with its password already hashed.
pub fn create_user_request(
    username: &str,
    password_hash: &str,
    status: UserStatus,
    permissions: Option<&Permissions>,
) -> Vec<u8> {
    encode(&CreateUserRequest {
        username,
        password: password_hash,
        status: status as u8,
        permissions: permissions.map(permissions_to_wire),
        options: &[],
    })
}

pub fn token_reply(token: &str) -> Vec<u8> {
    let mut out = crate::replies::RESULT_OK.to_vec();
    RawPersonalAccessTokenResponse { token }.encode_to(&mut out);
    out
}

/// Checks what only the primary can check (current passwords, the target of a password change)
/// and replaces secrets by their hashes before the request is journaled.
pub fn prepare(
    shared: &Shared,
    operation: Operation,
    user_id: u32,
    body: &[u8],
) -> Result<Prepared, ErrorCode> {
    let unchanged = Prepared {
        body: None,
        token: None,
    };
    match operation {
        Operation::CreateUser => {
            let mut request: CreateUserRequest = decode(body)?;
            check_password(request.password)?;
            status_from_wire(request.status)?;
            let hash = hash_password(request.password);
            request.password = &hash;
            Ok(Prepared {
                body: Some(encode(&request)),
                token: None,
            })
        }
        Operation::ChangePassword => {
            let mut request: ChangePasswordRequest = decode(body)?;
            let target = {
                let metadata = shared.metadata.borrow();
                metadata
                    .user(&ident(&request.user_id)?)
                    .map(|u| (u.id, u.password_hash.clone()))?
            };
            if target.0 != user_id && !shared.user_allows(user_id, Need::ManageUsers) {
                return Err(ErrorCode::Unauthorized);
            }
            let current_ok = argon2_check(&target.1, request.current_password);
            if !current_ok {
                return Err(ErrorCode::InvalidCredentials);
            }
            check_password(request.new_password)?;
            let hash = hash_password(request.new_password);
            request.current_password = "";
            request.new_password = &hash;
            Ok(Prepared {
                body: Some(encode(&request)),
                token: None,
            })
        }
        Operation::CreatePersonalAccessToken => {
            let _: CreatePersonalAccessTokenRequest = decode(body)?;
            let token = new_token();
            // The journal keeps the token's hash after the request, never the token.
            let mut journaled = body.to_vec();
            journaled.extend_from_slice(&token_record(user_id, "", &token, None).token_hash);
            Ok(Prepared {
                body: Some(journaled),
                token: Some(token),
            })
        }
        Operation::UpdateResource => {
            let request: UpdateResourceRequest = decode(body)?;
            let need = match request.scope {
                iggy_generated::payloads::OptionsScope::User => Need::ManageUsers,
                iggy_generated::payloads::OptionsScope::Stream => {
                    let patch: StreamResourcePatch = decode(request.patch)?;
                    let id = shared
                        .metadata
                        .borrow()
                        .stream(&ident(&patch.stream_id)?)?
                        .id;
                    Need::ManageStream(id)
                }
                iggy_generated::payloads::OptionsScope::Topic => {
                    let patch: TopicResourcePatch = decode(request.patch)?;
                    let metadata = shared.metadata.borrow();
                    let (s, t) =
                        metadata.topic(&ident(&patch.stream_id)?, &ident(&patch.topic_id)?)?;
                    Need::ManageTopic(s.id, t.id)
                }
            };
            if !shared.user_allows(user_id, need) {
                return Err(ErrorCode::Unauthorized);
            }
            Ok(unchanged)
        }
        _ => Ok(unchanged),
    }
}

fn argon2_check(hash: &str, password: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// Applies a committed user, token or resource op.
pub fn apply(
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
            metadata.update_user(&ident(&request.user_id)?, request.username, status)?;
            Ok(Vec::new())
        }
        Operation::CreateUser => {
            let request: CreateUserRequest = decode(request)?;
            crate::options::validate(crate::options::USER_OPTIONS, request.options, &[], true)?;
            let status = status_from_wire(request.status)?;
            let permissions = request.permissions.as_ref().map(permissions_from_wire);
            let id = metadata.create_user(
                request.username,
                request.password.to_string(),
                status,
                permissions,
                now,
            )?;
            Ok(user_details(metadata, id, codec))
        }
        Operation::DeleteUser => {
            let request: DeleteUserRequest = decode(request)?;
            metadata.delete_user(&ident(&request.user_id)?)?;
            Ok(Vec::new())
        }
        Operation::UpdatePermissions => {
            let request: UpdatePermissionsRequest = decode(request)?;
            let permissions = request.permissions.as_ref().map(permissions_from_wire);
            metadata.update_permissions(&ident(&request.user_id)?, permissions)?;
            Ok(Vec::new())
        }
        Operation::ChangePassword => {
            let request: ChangePasswordRequest = decode(request)?;
            metadata.set_password(&ident(&request.user_id)?, request.new_password.to_string())?;
            Ok(Vec::new())
        }
        Operation::CreatePersonalAccessToken => {
            let split = request
                .len()
                .checked_sub(32)
                .ok_or(ErrorCode::InvalidFormat)?;
            let (body, hash) = request.split_at(split);
            let token: CreatePersonalAccessTokenRequest = decode(body)?;
            // 0 and u64::MAX both mean that the token never expires.
            let expiry_at = (token.expiry != 0 && token.expiry != u64::MAX)
                .then(|| now.saturating_add(token.expiry));
            let mut record = token_record(user_id, token.name, "", expiry_at);
            record.token_hash.copy_from_slice(hash);
            metadata.create_token(record)?;
            // The token itself is added to the reply by the primary that made it.
            Ok(Vec::new())
        }
        Operation::DeletePersonalAccessToken => {
            let request: DeletePersonalAccessTokenRequest = decode(request)?;
            metadata.delete_token(user_id, request.name)?;
            Ok(Vec::new())
        }
        Operation::UpdateResource => update_resource(metadata, request),
        _ => Err(ErrorCode::FeatureUnavailable),
    }
}

fn update_resource(metadata: &mut Metadata, request: &[u8]) -> Result<Vec<u8>, ErrorCode> {
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
            for (key, value) in crate::options::entries(patch.options)? {
                match key {
                    "username" | "name" => {
                        metadata.update_user(&user, Some(crate::options::as_str(value)?), None)?
                    }
                    "status" => {
                        let status = match crate::options::as_str(value) {
                            Ok("active") => UserStatus::Active,
                            Ok("inactive") => UserStatus::Inactive,
                            _ => status_from_wire(crate::options::as_u64(value)? as u8)?,
                        };
                        metadata.update_user(&user, None, Some(status))?
                    }
                    _ => return Err(ErrorCode::UnsupportedOptionKey),
                }
            }
        }
    }
    Ok(Vec::new())
}

// ----- reads -----

fn client_response<'a>(info: &'a crate::dispatch::ClientInfo, groups: u32) -> ClientResponse<'a> {
    ClientResponse {
        client_id: info.id,
        user_id: info.user_id.unwrap_or(u32::MAX),
        transport: match info.transport {
            "quic" => 2,
            "http" => 3,
            "websocket" => 4,
            _ => 1,
        },
        address: &info.address,
        consumer_groups_count: groups,
    }
}

fn groups_of(metadata: &Metadata, client: Option<u128>) -> Vec<ConsumerGroupInfoResponse> {
    let Some(client) = client else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stream in metadata.streams.values() {
        for topic in stream.topics.values() {
            for group in topic.consumer_groups.values() {
                if group.members.contains(&client) {
                    out.push(ConsumerGroupInfoResponse {
                        stream_id: stream.id,
                        topic_id: topic.id,
                        group_id: group.id,
                    });
                }
            }
        }
    }
    out
}

fn client_details(node: &Node, connection_id: u32, client: Option<u128>) -> Option<Vec<u8>> {
    let clients = node.clients.borrow();
    let info = clients.get(&connection_id)?;
    let metadata = node.shared.metadata.borrow();
    let consumer_groups = groups_of(&metadata, client);
    Some(encode(&ClientDetailsResponse {
        client: client_response(info, consumer_groups.len() as u32),
        consumer_groups,
    }))
}

/// Serves the user, client and system reads.
pub async fn read(
    node: &Node,
    connection: &Connection,
    header: &RequestHeader,
    code: u32,
    body: &[u8],
) -> Result<Vec<u8>, ErrorCode> {
    let bound = connection.bound.ok_or(ErrorCode::Unauthenticated)?;
    let shared = &node.shared;
    let allows = |need: Need| shared.user_allows(bound.user_id, need);
    match code {
        20 => Ok(client_details(node, connection.id, Some(header.client)).unwrap_or_default()),
        21 => {
            if !allows(Need::ReadServers) {
                return Err(ErrorCode::Unauthorized);
            }
            let request =
                GetClientRequest::decode_fixed(body).map_err(|_| ErrorCode::InvalidFormat)?;
            Ok(client_details(node, request.client_id, None).unwrap_or_default())
        }
        22 => {
            if !allows(Need::ReadServers) {
                return Err(ErrorCode::Unauthorized);
            }
            let clients = node.clients.borrow();
            let mut ids: Vec<_> = clients.keys().copied().collect();
            ids.sort_unstable();
            let mut out = Vec::new();
            for id in ids {
                client_response(&clients[&id], 0).encode_to(&mut out);
            }
            Ok(out)
        }
        31 => {
            let request: GetUserRequest = decode(body)?;
            let metadata = shared.metadata.borrow();
            let Ok(user) = metadata.user(&ident(&request.user_id)?) else {
                return if allows(Need::ReadUsers) {
                    Ok(Vec::new())
                } else {
                    Err(ErrorCode::Unauthorized)
                };
            };
            if user.id != bound.user_id && !allows(Need::ReadUsers) {
                return Err(ErrorCode::Unauthorized);
            }
            Ok(user_details(&metadata, user.id, Codec::of(bound.protocol)))
        }
        32 => {
            if !allows(Need::ReadUsers) {
                return Err(ErrorCode::Unauthorized);
            }
            let metadata = shared.metadata.borrow();
            let mut out = Vec::new();
            for user in metadata.users.values() {
                match Codec::of(bound.protocol) {
                    Codec::Current => user_header(user).encode_to(&mut out),
                    Codec::V0_11_1 => user_header_v0111(user).encode_to(&mut out),
                }
            }
            Ok(out)
        }
        41 => {
            let metadata = shared.metadata.borrow();
            let mut out = Vec::new();
            for token in metadata
                .tokens
                .iter()
                .filter(|t| t.user_id == bound.user_id)
            {
                PersonalAccessTokenResponse {
                    name: &token.name,
                    expiry_at: token.expiry_at.unwrap_or(0),
                }
                .encode_to(&mut out);
            }
            Ok(out)
        }
        10 => {
            if !allows(Need::ReadServers) {
                return Err(ErrorCode::Unauthorized);
            }
            Ok(stats(node))
        }
        11 => {
            if !allows(Need::ReadServers) {
                return Err(ErrorCode::Unauthorized);
            }
            let request: iggy_generated::payloads::GetSnapshotRequest = decode(body)?;
            crate::snapshot::archive(node, request.snapshot_types)
        }
        13 => {
            use iggy_generated::payloads::{
                DescribeOptionsRequest, OptionDescriptor, OptionsScope,
            };
            let request =
                DescribeOptionsRequest::decode_fixed(body).map_err(|_| ErrorCode::InvalidFormat)?;
            let catalog = match request.scope {
                OptionsScope::Topic => crate::options::TOPIC_OPTIONS,
                OptionsScope::Stream => crate::options::STREAM_OPTIONS,
                OptionsScope::User => crate::options::USER_OPTIONS,
            };
            let entries: Vec<OptionDescriptor> = catalog
                .iter()
                .map(|spec| OptionDescriptor {
                    key: spec.key,
                    kind: spec.kind,
                    flags: spec.flags,
                    default_value: spec.default,
                    description: spec.description,
                })
                .collect();
            if Codec::of(bound.protocol) == Codec::V0_11_1 {
                let entries = entries
                    .into_iter()
                    .map(
                        |e: OptionDescriptor| iggy_generated::payloads::OptionDescriptorV0111 {
                            key: e.key,
                            kind: e.kind,
                            default_value: e.default_value,
                            description: e.description,
                        },
                    )
                    .collect();
                return Ok(encode(
                    &iggy_generated::payloads::DescribeOptionsResponseV0111 { entries },
                ));
            }
            Ok(encode(&DescribeOptionsResponse { entries }))
        }
        _ => Err(ErrorCode::FeatureUnavailable),
    }
}

fn stats(node: &Node) -> Vec<u8> {
    let shared = &node.shared;
    let metadata = shared.metadata.borrow();
    let (mut topics, mut partitions, mut groups) = (0u32, 0u32, 0u32);
    for stream in metadata.streams.values() {
        topics += stream.topics.len() as u32;
        for topic in stream.topics.values() {
            partitions += topic.partitions.len() as u32;
            groups += topic.consumer_groups.len() as u32;
        }
    }
    let (size, messages, segments) =
        shared
            .partitions
            .borrow()
            .values()
            .fold((0u64, 0u64, 0u32), |(s, m, g), entry| {
                let info = entry.handle.stats.get();
                (s + info.size_bytes, m + info.messages, g + info.segments)
            });
    let run_time = shared.started_at.elapsed().as_micros() as u64;
    let now = crate::dispatch::now_micros();
    let version = iggy_generated::protocol::RELEASE_VERSION;
    let host = crate::host::figures(shared.data.root());
    encode(&StatsResponse {
        process_id: std::process::id(),
        cpu_usage: host.cpu_usage.to_bits(),
        total_cpu_usage: host.total_cpu_usage.to_bits(),
        memory_usage: host.memory_usage,
        total_memory: host.total_memory,
        available_memory: host.available_memory,
        run_time,
        start_time: now.saturating_sub(run_time),
        read_bytes: host.read_bytes,
        written_bytes: size,
        messages_size_bytes: size,
        streams_count: metadata.streams.len() as u32,
        topics_count: topics,
        partitions_count: partitions,
        segments_count: segments,
        messages_count: messages,
        clients_count: node.clients.borrow().len() as u32,
        consumer_groups_count: groups,
        hostname: &host.hostname,
        os_name: std::env::consts::OS,
        os_version: &host.os_version,
        kernel_version: &host.kernel_version,
        iggy_server_version: version,
        iggy_server_semver: 0,
        cache_metrics: Vec::new(),
        threads_count: host.threads,
        free_disk_space: host.free_disk_space,
        total_disk_space: host.total_disk_space,
        open_files_count: host.open_files,
        open_files_limit: host.open_files_limit,
    })
}
