//! The cluster a node belongs to: its id is stamped on every journal record (`cluster` of the
//! `PrepareHeader`), so a journal of another cluster is refused instead of replayed.

use iggy_generated::storage::CLUSTER_NAME_DEFAULT;

/// The id of the cluster named `name` (spec/storage.spec, `CLUSTER_NAME_DEFAULT`): 128 bits of
/// the name's hash, so two names practically never share an id. Never 0, which marks a record
/// of a build that did not stamp one.
pub fn cluster_id(name: &str) -> u128 {
    let low = twox_hash::XxHash3_64::oneshot_with_seed(0, name.as_bytes());
    let high = twox_hash::XxHash3_64::oneshot_with_seed(1, name.as_bytes());
    ((u128::from(high) << 64) | u128::from(low)).max(1)
}

/// This node's cluster id. The configuration has no `[cluster] name` yet, so every node is in
/// the default-named cluster; the key, once it exists, is read here and nowhere else.
pub fn node_cluster() -> u128 {
    cluster_id(CLUSTER_NAME_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cluster_id_is_fixed_and_names_tell_clusters_apart() {
        // Pinned: the id is on disk in every record, so changing its derivation is a format
        // change.
        assert_eq!(node_cluster(), cluster_id("iggy"));
        assert_eq!(
            cluster_id("iggy") as u64,
            twox_hash::XxHash3_64::oneshot_with_seed(0, b"iggy")
        );
        assert_ne!(cluster_id("iggy"), cluster_id("iggy2"));
        assert_ne!(cluster_id(""), 0);
    }
}
