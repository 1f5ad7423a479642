//! Consensus groups: the I/O shell around an `iggy_vsr::Replica` and its journal file, and the
//! replica plane that carries their frames between the nodes of a cluster.

pub mod admission;
pub mod cluster;
pub mod cluster_clock;
pub mod figures;
pub mod forward;
pub mod grant_lease;
pub mod group;
pub mod group_plane;
pub mod link_liveness;
pub mod link_stream;
pub mod log_limit;
pub mod plane;
pub mod replica_bus;
pub mod replica_clock;
pub mod replica_count;
pub mod replica_link;
pub mod replica_tls;
pub mod runs;
pub mod runs_file;
pub mod transfer;
pub mod view_file;
pub mod wal;
pub mod wall_clock;
