//! The cluster a node belongs to: its id is stamped on every journal record (`cluster` of the
//! `PrepareHeader`), so a journal of another cluster is refused instead of replayed.

use iggy_generated::storage::CLUSTER_NAME_DEFAULT;
use std::sync::OnceLock;

/// This process's cluster name and id, fixed once from `[cluster] name` at start.
static NODE_CLUSTER: OnceLock<(String, u128)> = OnceLock::new();

/// The id of the cluster named `name` (spec/storage.spec, `CLUSTER_NAME_DEFAULT`): 128 bits of
/// the name's hash, so two names practically never share an id. Never 0, which marks a record
/// of a build that did not stamp one.
pub fn cluster_id(name: &str) -> u128 {
    let low = twox_hash::XxHash3_64::oneshot_with_seed(0, name.as_bytes());
    let high = twox_hash::XxHash3_64::oneshot_with_seed(1, name.as_bytes());
    ((u128::from(high) << 64) | u128::from(low)).max(1)
}

/// Fixes this node's cluster from `[cluster] name` (the configuration's only reader of it). Called
/// once at start, before any journal is opened; a later call changes nothing.
pub fn name_node_cluster(name: &str) {
    let _ = NODE_CLUSTER.set((name.to_string(), cluster_id(name)));
}

/// This node's cluster id: the configured name's, or the default name's before the
/// configuration was read (tests, `verify` without a readable configuration).
pub fn node_cluster() -> u128 {
    NODE_CLUSTER
        .get()
        .map_or_else(|| cluster_id(CLUSTER_NAME_DEFAULT), |(_, id)| *id)
}

/// The name `node_cluster` derives from, for messages: an id alone does not say which
/// configuration a refusal judged by.
pub fn node_cluster_name() -> &'static str {
    NODE_CLUSTER
        .get()
        .map_or(CLUSTER_NAME_DEFAULT, |(name, _)| name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cluster_id_is_fixed_and_names_tell_clusters_apart() {
        // Pinned: the id is on disk in every record, so changing its derivation is a format
        // change.
        assert_eq!(node_cluster(), cluster_id("iggy-cluster"));
        assert_eq!(
            cluster_id("iggy-cluster") as u64,
            twox_hash::XxHash3_64::oneshot_with_seed(0, b"iggy-cluster")
        );
        assert_ne!(cluster_id("iggy-cluster"), cluster_id("iggy-cluster2"));
        assert_ne!(cluster_id(""), 0);
        // The configuration's default name is the spec's.
        let defaults = crate::config::load(None, |_| None).unwrap();
        assert_eq!(defaults.cluster.name, CLUSTER_NAME_DEFAULT);
    }
}
