//! Background upkeep on the node's runtime: topic retention (message expiry, maximum topic
//! size) and the leases of sessions no connection is bound to.

use crate::consensus::group::Outcome;
use crate::runtime::node::Node;
use crate::runtime::shared::{PartitionKey, SessionActivity};
use iggy_generated::frames::Operation;
use iggy_metadata::Metadata;
use iggy_metadata::machine::SYSTEM_CLIENT;
use iggy_metadata::machine::envelope;
use iggy_metadata::options::limit;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Runs forever: one retention pass and one lease check per interval.
pub async fn run(node: Rc<Node>) {
    let config = &node.shared.config.system;
    let interval = Duration::from_millis(config.maintenance_interval_ms.max(10));
    let lease = Duration::from_secs(config.session_lease_secs);
    loop {
        compio::time::sleep(interval).await;
        retention(&node).await;
        expire_sessions(&node, lease).await;
    }
}

/// Per partition: the topic's expiry and its share of the topic's maximum size.
fn retention_limits(metadata: &Metadata) -> Vec<(PartitionKey, Option<u64>, Option<u64>)> {
    let mut out = Vec::new();
    for stream in metadata.streams.values() {
        for topic in stream.topics.values() {
            let expiry = limit(topic.message_expiry);
            let count = topic.partitions.len().max(1) as u64;
            let max_size = limit(topic.max_topic_size).map(|size| size / count);
            for partition in topic.partitions.keys() {
                out.push(((stream.id, topic.id, *partition), expiry, max_size));
            }
        }
    }
    out
}

/// One retention pass: each partition over a limit retires its oldest segments through a
/// committed op (planned here, with this node's clock, as the primary).
async fn retention(node: &Node) {
    let limits = retention_limits(&node.shared.metadata.borrow());
    let now = crate::runtime::clock::now_micros();
    for (key, expiry, max_size) in limits {
        if expiry.is_none() && max_size.is_none() {
            continue;
        }
        let Some(partition) = node.shared.partition(key) else {
            continue;
        };
        match partition.retention(now, expiry, max_size).await {
            Ok(Some(keep_from)) => {
                tracing::debug!("partition {key:?}: retention kept the log from offset {keep_from}")
            }
            Ok(None) => {}
            // The next pass plans again from the log as it is then.
            Err(error) => tracing::warn!("partition {key:?}: retention not committed: {error:?}"),
        }
    }
}

/// Sessions idle (no connection bound) for longer than `lease`.
fn expired(node: &Node, lease: Duration, now: Instant) -> Vec<u128> {
    let metadata = node.shared.metadata.borrow();
    let mut activity = node.shared.session_activity.borrow_mut();
    metadata
        .sessions
        .iter()
        .map(|(client, _)| *client)
        .filter(|client| *client != SYSTEM_CLIENT)
        .filter(|client| {
            // A session restored from the journal counts as idle from the node's start.
            let entry = activity.entry(*client).or_insert(SessionActivity {
                bound: 0,
                since: now,
            });
            entry.bound == 0 && now.duration_since(entry.since) >= lease
        })
        .collect()
}

/// Ends expired sessions through the metadata group, one committed logout each.
async fn expire_sessions(node: &Node, lease: Duration) {
    for client in expired(node, lease, Instant::now()) {
        let request = node.shared.metadata.borrow().system_requests + 1;
        let body = envelope(
            crate::runtime::clock::now_micros(),
            iggy_metadata::ROOT_USER_ID,
            &client.to_le_bytes(),
        );
        match node
            .metadata
            .submit(SYSTEM_CLIENT, request, Operation::Logout.to_repr(), body)
            .await
        {
            Outcome::Committed { .. } => {
                node.shared.session_activity.borrow_mut().remove(&client);
                tracing::info!(
                    "session of client {client:032x} expired after {lease:?} without a connection"
                );
            }
            outcome => {
                tracing::warn!("session expiry of client {client:032x} not committed: {outcome:?}")
            }
        }
    }
}
