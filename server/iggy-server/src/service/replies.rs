//! Reply bodies that read the running node (its roster entry, routes, partition reads), encoded
//! with the generated codec; the model's reply bodies are `iggy_metadata::replies`, fed the live
//! partition figures through [`Figures`].

use crate::runtime::partition::Polled;
use crate::runtime::shared::{PartitionKey, Shared};
use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::{
    ClusterMetadataResponse, ClusterMetadataResponseV0111, ClusterNodeResponse,
    ClusterNodeResponseV0111, ClusterNodeRole, ClusterNodeStatus, ConsumerOffsetResponse,
    PartitionContext, PartitionRouteResponse, PollPrefix, SendMessagesConfirmationResponse,
    SendMessagesResponse,
};
use iggy_metadata::replies::{Codec, Figures, PartitionFigures};
use iggy_storage::StorageError;
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
        self.session_connections
            .borrow()
            .get(&client)
            .copied()
            .unwrap_or(0)
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

/// 103 and 123 (0.11.1): the caller's session and the primary, which is this node.
pub fn poll_routing(
    shared: &Shared,
    consumer_session: iggy_generated::payloads::SessionIdentity,
) -> Vec<u8> {
    with_roster_entry(shared, |node| {
        (iggy_generated::payloads::PollRoutingResponse {
            consumer_session,
            primary: roster_entry_v0111(node),
        })
        .to_wire_bytes()
    })
}

pub fn cluster_metadata(shared: &Shared, codec: Codec) -> Vec<u8> {
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

pub fn partition_route(shared: &Shared, key: PartitionKey) -> Vec<u8> {
    let metadata = shared.metadata.borrow();
    let topic = &metadata.streams[&key.0].topics[&key.1];
    PartitionRouteResponse {
        incarnation: topic.partitions[&key.2].incarnation,
        metadata_op: metadata.commit,
        view: 0,
        partitions_count: topic.partitions.len() as u32,
        primary_replica: shared.replica_id,
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
        _ => ErrorCode::InvalidMessagesSize,
    }
}
