//! User, token, client and system commands on the wire: generated request and response types
//! to and from the metadata model.

use crate::runtime::connection::Connection;
use crate::runtime::node::Node;
use crate::runtime::shared::Shared;
use crate::service::auth::{Prepared, hash_password, new_token, password_matches};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::{
    ChangePasswordRequest, ClientDetailsResponse, ClientResponse, ConsumerGroupInfoResponse,
    CreatePartitionsRequest, CreatePersonalAccessTokenRequest, CreateTopicRequest,
    CreateUserRequest, DescribeOptionsResponse, GetClientRequest, GetUserRequest,
    PersonalAccessTokenResponse, StatsResponse, TopicResourcePatch, UpdateResourceRequest,
    UpdateTopicRequest, UpdateUserRequest, UserResourcePatch,
};
use iggy_metadata::machine::{decode, ident};
use iggy_metadata::machine::{status_from_wire, token_record};
use iggy_metadata::replies::{Codec, user_details, user_header, user_header_v0111};
use iggy_metadata::{Metadata, Need};
use iggy_wire::WireEncode;

const PASSWORD_MIN: usize = 3;
const PASSWORD_MAX: usize = 100;

pub fn check_password(password: &str) -> Result<(), ErrorCode> {
    if (PASSWORD_MIN..=PASSWORD_MAX).contains(&password.len()) {
        Ok(())
    } else {
        Err(ErrorCode::InvalidPassword)
    }
}

/// Checks what only the primary can check (current passwords, a topic's size floor)
/// and replaces secrets by their hashes before the request is journaled.
/// A new user name must read as what it is in a user list: no leading or trailing white space
/// and no invisible formatting character (zero-width space and joiners, direction overrides,
/// word joiners, a byte-order mark, soft hyphen), with which a user manager made users that
/// show as "iggy" (InvalidUsername). Asked before the op is submitted, not as it applies: the
/// names of ops journaled already replay as they did.
pub fn check_username_shown(name: &str) -> Result<(), ErrorCode> {
    let invisible = |c: char| {
        matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
    };
    let edges = name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace);
    match edges || name.chars().any(invisible) {
        true => Err(ErrorCode::InvalidUsername),
        false => Ok(()),
    }
}

pub async fn prepare(
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
            check_username_shown(request.username)?;
            check_password(request.password)?;
            status_from_wire(request.status)?;
            let hash = hash_password(shared, request.password).await;
            request.password = &hash;
            Ok(Prepared {
                body: Some(request.to_wire_bytes()),
                token: None,
            })
        }
        Operation::ChangePassword => {
            let mut request: ChangePasswordRequest = decode(body)?;
            // Whether the user may change this password was judged before
            // (`permissions::need_of`: its own, or manage_users).
            let hash = {
                let metadata = shared.metadata.borrow();
                metadata
                    .user(&ident(&request.user_id)?)
                    .map(|u| u.password_hash.clone())?
            };
            let current_ok = password_matches(shared, hash, request.current_password).await;
            if !current_ok {
                return Err(ErrorCode::InvalidCredentials);
            }
            check_password(request.new_password)?;
            let hash = hash_password(shared, request.new_password).await;
            request.current_password = "";
            request.new_password = &hash;
            Ok(Prepared {
                body: Some(request.to_wire_bytes()),
                token: None,
            })
        }
        Operation::CreatePersonalAccessToken => {
            let request: CreatePersonalAccessTokenRequest = decode(body)?;
            let token = new_token();
            // The journal keeps the token's hash after the request, never the token.
            let journaled = iggy_generated::storage::PatCreateOp {
                request,
                token_hash: token_record(user_id, "", &token, None).token_hash,
            };
            Ok(Prepared {
                body: Some(journaled.to_wire_bytes()),
                token: Some(token),
            })
        }
        Operation::UpdateResource => {
            let request: UpdateResourceRequest = decode(body)?;
            if request.scope == iggy_generated::payloads::OptionsScope::User {
                let patch: UserResourcePatch = decode(request.patch)?;
                if let Ok(entries) = iggy_metadata::options::entries(patch.options) {
                    for (key, value) in entries {
                        if let ("username" | "name", Ok(name)) =
                            (key, iggy_metadata::options::as_str(value))
                        {
                            check_username_shown(name)?;
                        }
                    }
                }
                return Ok(unchanged);
            }
            // The grant was judged before (`permissions::need_of`); a topic's new options are
            // checked against its segment size, and those given as text prepared typed.
            if request.scope != iggy_generated::payloads::OptionsScope::Topic {
                return Ok(unchanged);
            }
            let mut patch: TopicResourcePatch = decode(request.patch)?;
            let segment_size = {
                let metadata = shared.metadata.borrow();
                let (_, topic) =
                    metadata.topic(&ident(&patch.stream_id)?, &ident(&patch.topic_id)?)?;
                topic.segment_size
            };
            check_topic_size_floor(shared, patch.options, segment_size)?;
            let catalog = iggy_metadata::options::TOPIC_OPTIONS;
            let Some(typed) = iggy_metadata::options::canonical(catalog, patch.options) else {
                return Ok(unchanged);
            };
            patch.options = &typed;
            let patch = patch.to_wire_bytes();
            let request = UpdateResourceRequest {
                patch: &patch,
                ..request
            };
            Ok(Prepared {
                body: Some(request.to_wire_bytes()),
                token: None,
            })
        }
        // Only the size floor and the node's room for partitions are checked here; the state
        // machine refuses the rest of what is wrong with a request in its committed reply.
        Operation::CreateTopic => {
            let Ok(mut request) = decode::<CreateTopicRequest>(body) else {
                return Ok(unchanged);
            };
            // Options given as text are prepared in their typed form (`options::canonical`).
            let catalog = iggy_metadata::options::TOPIC_OPTIONS;
            let typed = iggy_metadata::options::canonical(catalog, request.options);
            if let Some(typed) = &typed {
                request.options = typed;
            }
            check_descriptors_for(shared, request.partitions_count)?;
            let Ok(settings) = iggy_metadata::replies::topic_settings(request.options) else {
                return Ok(unchanged);
            };
            check_topic_size_floor(shared, request.options, settings.segment_size)?;
            // In a cluster the server's segment size is the proposer's, pinned in the op:
            // replicas whose configurations differ (a rolling change of system.segment_size)
            // would otherwise cut segments at different offsets, and retention, which deletes
            // whole segments below an offset, would leave them serving different messages.
            let pinned = match (&shared.plane, settings.segment_size) {
                (Some(_), 0) => iggy_metadata::options::with_segment_size(
                    request.options,
                    shared.config.system.segment_size,
                ),
                _ => None,
            };
            if let Some(options) = &pinned {
                request.options = options;
            }
            if typed.is_none() && pinned.is_none() {
                return Ok(unchanged);
            }
            Ok(Prepared {
                body: Some(request.to_wire_bytes()),
                token: None,
            })
        }
        Operation::CreatePartitions => {
            if let Ok(request) = decode::<CreatePartitionsRequest>(body) {
                check_descriptors_for(shared, request.partitions_count)?;
            }
            Ok(unchanged)
        }
        Operation::UpdateTopic => {
            if let Ok(request) = decode::<UpdateTopicRequest>(body)
                && let (Ok(stream), Ok(topic)) =
                    (ident(&request.stream_id), ident(&request.topic_id))
                && let Ok((_, t)) = shared.metadata.borrow().topic(&stream, &topic)
            {
                check_topic_size_floor(shared, request.options, t.segment_size)?;
            }
            Ok(unchanged)
        }
        Operation::UpdateUser => {
            let request: UpdateUserRequest = decode(body)?;
            if let Some(name) = request.username {
                check_username_shown(name)?;
            }
            Ok(unchanged)
        }
        _ => Ok(unchanged),
    }
}

/// A `max_topic_size` in `options` below the topic's segment size (`segment_size`, 0 for the
/// server's) could never be kept: retention keeps no closed segment under it. Upstream refuses
/// it too. Checked here because the server's segment size is configuration, not metadata.
fn check_topic_size_floor(
    shared: &Shared,
    options: &[u8],
    segment_size: u64,
) -> Result<(), ErrorCode> {
    let segment_size = match segment_size {
        0 => shared.config.system.segment_size,
        own => own,
    };
    let entries = iggy_metadata::options::typed_entries(options).unwrap_or_default();
    for (key, kind, value) in entries {
        let cap = iggy_metadata::options::number(key, kind, value).ok();
        if key == "max_topic_size"
            && cap
                .and_then(iggy_metadata::options::limit)
                .is_some_and(|cap| cap < segment_size)
        {
            return Err(ErrorCode::InvalidTopicSize);
        }
    }
    Ok(())
}

/// Refuses `added` partitions when this node could not keep them open within its open-files
/// limit (see `host::partitions_fit`). Checked here, on the node that proposes the op, because
/// the limit is the host's, not metadata; a node with a lower limit than the proposer's keeps
/// to the same budget when it opens them, leaving the partitions past it unopened until there
/// is room (`Shared::descriptors_for_open`).
fn check_descriptors_for(shared: &Shared, added: u32) -> Result<(), ErrorCode> {
    use crate::runtime::host;
    let running = shared.metadata.borrow().live_partitions().len() as u64;
    let limit = host::open_files_limit();
    if host::partitions_fit(running + u64::from(added), limit) {
        return Ok(());
    }
    tracing::warn!(
        "refused {added} more partitions: with the {running} this node runs they would need \
         {} of its {} open files (ulimit -n; LimitNOFILE= under systemd), {} each, and \
         partitions may take half of them; raise the limit to add them",
        (running + u64::from(added)) * host::DESCRIPTORS_PER_PARTITION,
        limit.unwrap_or(0),
        host::DESCRIPTORS_PER_PARTITION
    );
    Err(ErrorCode::TooManyPartitions)
}

// ----- reads -----

fn client_response<'a>(
    metadata: &Metadata,
    info: &'a crate::runtime::connection::ClientInfo,
    groups: u32,
) -> ClientResponse<'a> {
    ClientResponse {
        client_id: info.id,
        user_id: live_user(metadata, info).unwrap_or(u32::MAX),
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

/// The user a connection runs as while its session is live: a logout, a deactivation or a
/// deletion ends the session, after which naming its user would be wrong (a deleted user's id
/// is the next user's). A connection binds only once this replica applied its session.
fn live_user(metadata: &Metadata, info: &crate::runtime::connection::ClientInfo) -> Option<u32> {
    let session = metadata.sessions.get(info.client?)?;
    info.user_id.filter(|user| *user == session.user_id)
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

fn client_details(node: &Node, connection_id: u32) -> Option<Vec<u8>> {
    let clients = node.clients.borrow();
    let info = clients.get(&connection_id)?;
    let metadata = node.shared.metadata.borrow();
    let consumer_groups = groups_of(&metadata, info.client);
    Some(
        (ClientDetailsResponse {
            client: client_response(&metadata, info, consumer_groups.len() as u32),
            consumer_groups,
        })
        .to_wire_bytes(),
    )
}

/// Serves the user, client and system reads.
pub async fn read(
    node: &Node,
    connection: &Connection,
    code: u32,
    body: &[u8],
) -> Result<Vec<u8>, ErrorCode> {
    let bound = connection.bound.ok_or(ErrorCode::Unauthenticated)?;
    let shared = &node.shared;
    let judge = |need: Need| shared.judge(bound.user_id, need);
    match code {
        20 => Ok(client_details(node, connection.id).unwrap_or_default()),
        21 => {
            judge(Need::ReadServers)?;
            let request =
                GetClientRequest::decode_fixed(body).map_err(|_| ErrorCode::InvalidFormat)?;
            Ok(client_details(node, request.client_id).unwrap_or_default())
        }
        22 => {
            judge(Need::ReadServers)?;
            let clients = node.clients.borrow();
            let metadata = shared.metadata.borrow();
            let mut ids: Vec<_> = clients.keys().copied().collect();
            ids.sort_unstable();
            let mut out = Vec::new();
            for id in ids {
                let info = &clients[&id];
                let groups = groups_of(&metadata, info.client).len() as u32;
                client_response(&metadata, info, groups).encode_to(&mut out);
            }
            Ok(out)
        }
        31 => {
            let request: GetUserRequest = decode(body)?;
            let metadata = shared.metadata.borrow();
            let Ok(user) = metadata.user(&ident(&request.user_id)?) else {
                return judge(Need::ReadUsers).map(|()| Vec::new());
            };
            if user.id != bound.user_id {
                judge(Need::ReadUsers)?;
            }
            Ok(user_details(&metadata, user.id, Codec::of(bound.protocol)))
        }
        32 => {
            judge(Need::ReadUsers)?;
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
            judge(Need::ReadServers)?;
            Ok(stats(node))
        }
        11 => {
            judge(Need::ReadServers)?;
            let request: iggy_generated::payloads::GetSnapshotRequest = decode(body)?;
            crate::service::snapshot::check_request(request.compression, request.snapshot_types)?;
            crate::service::snapshot::archive(node, request.compression, request.snapshot_types)
        }
        13 => {
            use iggy_generated::payloads::{
                DescribeOptionsRequest, OptionDescriptor, OptionsScope,
            };
            let request =
                DescribeOptionsRequest::decode_fixed(body).map_err(|_| ErrorCode::InvalidFormat)?;
            let catalog = match request.scope {
                OptionsScope::Topic => iggy_metadata::options::TOPIC_OPTIONS,
                OptionsScope::Stream => iggy_metadata::options::STREAM_OPTIONS,
                OptionsScope::User => iggy_metadata::options::USER_OPTIONS,
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
                return Ok(
                    (iggy_generated::payloads::DescribeOptionsResponseV0111 { entries })
                        .to_wire_bytes(),
                );
            }
            Ok((DescribeOptionsResponse { entries }).to_wire_bytes())
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
    let version = iggy_generated::protocol::RELEASE_VERSION;
    let host = crate::runtime::host::figures(shared.data.root());
    (StatsResponse {
        process_id: std::process::id(),
        cpu_usage: host.cpu_usage.to_bits(),
        total_cpu_usage: host.total_cpu_usage.to_bits(),
        memory_usage: host.memory_usage,
        total_memory: host.total_memory,
        available_memory: host.available_memory,
        run_time,
        start_time: shared.started_at_micros,
        read_bytes: host.read_bytes,
        written_bytes: host.written_bytes,
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
        iggy_server_semver: numeric_version(version),
        cache_metrics: Vec::new(),
        threads_count: host.threads,
        free_disk_space: host.free_disk_space,
        total_disk_space: host.total_disk_space,
        open_files_count: host.open_files,
        open_files_limit: host.open_files_limit,
    })
    .to_wire_bytes()
}

/// A release `major.minor.patch` as the official client compares versions numerically
/// (`SemanticVersion::get_numeric_version`: the major, then minor and patch in three digits
/// each); 0, read as none, for one that is not of that form.
fn numeric_version(release: &str) -> u32 {
    let mut parts = release.split(['.', '-', '+']).map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch))) if minor < 1000 && patch < 1000 => {
            major
                .saturating_mul(1_000_000)
                .saturating_add(minor * 1000 + patch)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_that_show_as_another_are_refused() {
        for name in [
            "iggy\u{200B}",
            " lead",
            "trail ",
            "iggy\u{00A0}",
            "\u{202E}yggi",
            "ig\u{2060}gy",
            "\u{FEFF}iggy",
        ] {
            assert_eq!(
                check_username_shown(name),
                Err(ErrorCode::InvalidUsername),
                "{name:?}"
            );
        }
        for name in ["iggy", "Iggy", "john smith", "zoë", "用户名", "a-b_c.d"] {
            assert_eq!(check_username_shown(name), Ok(()), "{name:?}");
        }
    }
}
