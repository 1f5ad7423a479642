//! Reply bodies that read the running node (its roster entry, routes, partition reads), encoded
//! with the generated codec; the model's reply bodies are `iggy_metadata::replies`, fed the live
//! partition figures through [`Figures`].

use crate::consensus::figures::GroupRole;
use crate::consensus::link_liveness::PeerStatus;
use crate::runtime::partition::Polled;
use crate::runtime::shared::{PartitionKey, Shared};
use crate::service::routing;
use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::{
    ClusterMetadataResponse, ClusterMetadataResponseV0111, ClusterNodeResponse,
    ClusterNodeResponseV0111, ClusterNodeRole, ClusterNodeStatus, ConsumerOffsetResponse,
    PartitionContext, PartitionRouteResponse, PollPrefix, SendMessagesConfirmationResponse,
    SendMessagesResponse,
};
use iggy_metadata::replies::{Codec, Figures, PartitionFigures};
use iggy_storage::StorageError;
use iggy_storage::batch::MessageFault;
use iggy_wire::WireEncode;

impl Figures for Shared {
    fn partition(&self, key: (u32, u32, u32)) -> PartitionFigures {
        let info = self.stats(key);
        PartitionFigures {
            messages: info.messages,
            size_bytes: info.size_bytes,
            segments: info.segments,
            next_offset: info.next_offset,
        }
    }

    fn member_id(&self, client: u128) -> u32 {
        self.sessions_here.borrow().member_id(client)
    }
}

fn port_of(address: &str) -> u16 {
    address
        .parse::<std::net::SocketAddr>()
        .map_or(0, |a| a.port())
}

/// Encodes a reply that holds this node's roster entry.
fn with_roster_entry(
    shared: &Shared,
    reply: impl FnOnce(ClusterNodeResponse<'_>) -> Vec<u8>,
) -> Vec<u8> {
    let config = &shared.config;
    // The bound port (a configured 0 binds an ephemeral one); 0 for a disabled transport.
    let served = |name: &str| {
        let (_, enabled, address) = config
            .transports()
            .into_iter()
            .find(|(transport, _, _)| *transport == name)
            .expect("a known transport");
        match enabled {
            true => shared
                .listening
                .get(name)
                .unwrap_or_else(|| port_of(address)),
            false => 0,
        }
    };
    let (name, ip) = (
        format!("iggy-node-{}", shared.replica_id),
        config.advertised_ip(),
    );
    reply(ClusterNodeResponse {
        replica_id: shared.replica_id,
        name: &name,
        ip: &ip,
        tcp_port: served("tcp"),
        quic_port: served("quic"),
        http_port: served("http"),
        websocket_port: served("websocket"),
        role: ClusterNodeRole::Leader,
        status: ClusterNodeStatus::Healthy,
    })
}

/// A roster entry in the 0.11.1 layout, which has no replica id.
fn roster_entry_v0111(node: ClusterNodeResponse<'_>) -> ClusterNodeResponseV0111<'_> {
    ClusterNodeResponseV0111 {
        name: node.name,
        ip: node.ip,
        tcp_port: node.tcp_port,
        quic_port: node.quic_port,
        http_port: node.http_port,
        websocket_port: node.websocket_port,
        role: node.role,
        status: node.status,
    }
}

/// 103 and 123 (0.11.1): the caller's session and the roster entry of replica `primary`, the
/// partition's primary (this node's own entry on a standalone node, as 12 reports it).
pub fn poll_routing(
    shared: &Shared,
    consumer_session: iggy_generated::payloads::SessionIdentity,
    primary: u8,
    metadata: GroupRole,
) -> Vec<u8> {
    let reply = |node: ClusterNodeResponse<'_>| {
        (iggy_generated::payloads::PollRoutingResponse {
            consumer_session,
            primary: roster_entry_v0111(node),
        })
        .to_wire_bytes()
    };
    if !shared.config.cluster.enabled {
        return with_roster_entry(shared, reply);
    }
    let entries = roster_entries(shared, metadata);
    let entry = entries
        .iter()
        .find(|entry| entry.replica_id == primary)
        .expect("a group's primary is a roster node");
    reply(node_response(entry))
}

/// 12: a standalone node (cluster disabled) reports itself, Leader, with the ports it bound; a cluster reports
/// every roster node, with the metadata primary as this replica's metadata group knows it
/// (`metadata`, see [`routing::roster`]).
pub fn cluster_metadata(shared: &Shared, codec: Codec, metadata: GroupRole) -> Vec<u8> {
    if shared.config.cluster.enabled {
        return cluster_roster(shared, codec, metadata);
    }
    with_roster_entry(shared, |node| match codec {
        Codec::Current => (ClusterMetadataResponse {
            name: "iggy-cluster",
            nodes: vec![node],
        })
        .to_wire_bytes(),
        Codec::V0_11_1 => (ClusterMetadataResponseV0111 {
            name: "iggy-cluster",
            nodes: vec![roster_entry_v0111(node)],
        })
        .to_wire_bytes(),
    })
}

fn cluster_roster(shared: &Shared, codec: Codec, metadata: GroupRole) -> Vec<u8> {
    let entries = roster_entries(shared, metadata);
    encode_roster(&shared.config.cluster.name, &entries, codec)
}

/// Every roster node as this replica sees it (see [`routing::roster`]).
fn roster_entries(shared: &Shared, metadata: GroupRole) -> Vec<routing::RosterEntry> {
    let config = &shared.config;
    let transports = routing::Transports {
        tcp: config.tcp.enabled,
        quic: config.quic.enabled,
        http: config.http.enabled,
        websocket: config.websocket.enabled,
    };
    let reachable = |node: u8| {
        shared
            .plane
            .as_ref()
            .is_some_and(|plane| plane.status(node) == PeerStatus::Healthy)
    };
    routing::roster(&config.cluster.nodes, transports, metadata, reachable)
}

fn node_response(entry: &routing::RosterEntry) -> ClusterNodeResponse<'_> {
    ClusterNodeResponse {
        replica_id: entry.replica_id,
        name: &entry.name,
        ip: &entry.ip,
        tcp_port: entry.ports.tcp,
        quic_port: entry.ports.quic,
        http_port: entry.ports.http,
        websocket_port: entry.ports.websocket,
        role: entry.role,
        status: entry.status,
    }
}

/// The roster (12) of a cluster named `name`, in the layout of the session's protocol.
fn encode_roster(name: &str, entries: &[routing::RosterEntry], codec: Codec) -> Vec<u8> {
    let nodes: Vec<ClusterNodeResponse<'_>> = entries.iter().map(node_response).collect();
    match codec {
        Codec::Current => (ClusterMetadataResponse { name, nodes }).to_wire_bytes(),
        Codec::V0_11_1 => (ClusterMetadataResponseV0111 {
            name,
            nodes: nodes.into_iter().map(roster_entry_v0111).collect(),
        })
        .to_wire_bytes(),
    }
}

/// 105: the partition's incarnation and the metadata op this replica answers at, with the view
/// and primary of its copy of the partition's group (`position`, see
/// [`routing::route_position`]).
pub fn partition_route(shared: &Shared, key: PartitionKey, (view, primary): (u32, u8)) -> Vec<u8> {
    let metadata = shared.metadata.borrow();
    let topic = &metadata.streams[&key.0].topics[&key.1];
    PartitionRouteResponse {
        incarnation: topic.partitions[&key.2].incarnation,
        metadata_op: metadata.commit,
        view,
        partitions_count: topic.partitions.len() as u32,
        primary_replica: primary,
    }
    .to_bytes()
    .to_vec()
}

pub fn send_confirmation(key: PartitionKey, base_offset: u64) -> Vec<u8> {
    let confirmation = SendMessagesConfirmationResponse {
        stream_id: key.0,
        topic_id: key.1,
        partition_id: key.2,
        base_offset,
    };
    (SendMessagesResponse {
        confirmations: vec![confirmation],
    })
    .to_wire_bytes()
}

pub fn consumer_offset(partition_id: u32, current_offset: u64, stored_offset: u64) -> Vec<u8> {
    ConsumerOffsetResponse {
        partition_id,
        current_offset,
        stored_offset,
    }
    .to_bytes()
    .to_vec()
}

/// 100: the prefix, then the stored batch records as read.
/// Fills the poll prefix in the headroom of `polled` and returns the buffer, whose first
/// `ReplyHeader::SIZE` bytes are left for the reply header.
pub fn polled(partition_id: u32, polled: Polled, context: PartitionContext) -> Vec<u8> {
    let prefix = PollPrefix {
        partition_id,
        current_offset: polled.current_offset,
        messages_count: polled.batches.messages,
        context,
    };
    let mut frame = polled.batches.bytes;
    let at = iggy_generated::frames::ReplyHeader::SIZE;
    prefix.encode_fixed(&mut frame[at..at + PollPrefix::SIZE]);
    frame
}

/// The error a client gets for a batch that fails admission.
pub fn batch_error(error: StorageError) -> ErrorCode {
    match error {
        StorageError::ChecksumMismatch("message checksum") => ErrorCode::InvalidMessageChecksum,
        StorageError::ChecksumMismatch(_) => ErrorCode::InvalidBatchChecksum,
        // The codes iggy_common's message builder fails with, EmptyMessagePayload for the
        // empty payload it calls an invalid length (4025 also names malformed frames).
        StorageError::ArrivingMessage(fault) => match fault {
            MessageFault::EmptyPayload => ErrorCode::EmptyMessagePayload,
            MessageFault::PayloadOver(_) => ErrorCode::TooBigMessagePayload,
            MessageFault::HeadersOver(_) => ErrorCode::TooBigUserHeaders,
            // The code the official decoder fails such a frame with on its side.
            MessageFault::ReservedNotZero { .. } | MessageFault::OffsetDelta { .. } => {
                ErrorCode::InvalidMessagePayloadLength
            }
        },
        _ => ErrorCode::InvalidMessagesSize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_wire::WireDecode;

    fn entry(replica_id: u8, role: ClusterNodeRole) -> routing::RosterEntry {
        routing::RosterEntry {
            replica_id,
            name: format!("n{replica_id}"),
            ip: "::1".into(),
            ports: routing::ClientPorts {
                tcp: 8090,
                quic: 0,
                http: 3000,
                websocket: 0,
            },
            role,
            // Node 2 plays one this replica has no link with.
            status: match replica_id {
                2 => ClusterNodeStatus::Unreachable,
                _ => ClusterNodeStatus::Healthy,
            },
        }
    }

    #[test]
    fn a_cluster_roster_decodes_with_one_leader_and_every_node() {
        let entries = [
            entry(0, ClusterNodeRole::Follower),
            entry(1, ClusterNodeRole::Leader),
            entry(2, ClusterNodeRole::Follower),
        ];
        let bytes = encode_roster("prod", &entries, Codec::Current);
        let roster = ClusterMetadataResponse::decode_exact(&bytes).unwrap();
        assert_eq!(roster.name, "prod");
        let ids: Vec<(u8, ClusterNodeRole)> = roster
            .nodes
            .iter()
            .map(|n| (n.replica_id, n.role))
            .collect();
        assert_eq!(
            ids,
            [
                (0, ClusterNodeRole::Follower),
                (1, ClusterNodeRole::Leader),
                (2, ClusterNodeRole::Follower)
            ]
        );
        let statuses: Vec<ClusterNodeStatus> = roster.nodes.iter().map(|n| n.status).collect();
        use ClusterNodeStatus::{Healthy, Unreachable};
        assert_eq!(statuses, [Healthy, Healthy, Unreachable]);
        // The layout the SDK reads (get_cluster_metadata.rs): id, name, ip, four ports, role,
        // status, after the cluster name and the node count.
        let node = [
            &[1u8][..],
            &2u32.to_le_bytes(),
            b"n1",
            &3u32.to_le_bytes(),
            b"::1",
            &8090u16.to_le_bytes(),
            &0u16.to_le_bytes(),
            &3000u16.to_le_bytes(),
            &0u16.to_le_bytes(),
            &[0, 0],
        ]
        .concat();
        let first = 4 + "prod".len() + 4;
        let size = node.len();
        assert_eq!(&bytes[first + size..first + 2 * size], &node[..]);
        // 0.11.1 sessions get the same nodes without replica ids.
        let old = encode_roster("prod", &entries, Codec::V0_11_1);
        let old = ClusterMetadataResponseV0111::decode_exact(&old).unwrap();
        assert_eq!(old.nodes.len(), 3);
        assert_eq!(old.nodes[1].role, ClusterNodeRole::Leader);
    }
}
