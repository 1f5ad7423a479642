//! The running node on compio: shards (one runtime per core), the node's shared state and its
//! connections, the state-machine shells of the metadata and partition groups, start-up
//! reconciliation and background upkeep.

pub mod body_budget;
pub mod clock;
pub mod connection;
pub mod host;
pub mod maintenance;
pub mod metadata_machine;
pub mod metrics;
pub mod node;
pub mod offload;
pub mod partition;
pub mod reconcile;
pub mod shard;
pub mod shared;
pub mod systemd;
