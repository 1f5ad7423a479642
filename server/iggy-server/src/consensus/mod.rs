//! Consensus groups: the I/O shell around an `iggy_vsr::Replica` and its journal file, and the
//! replica bus that will carry their frames between nodes.

pub mod cluster;
// The replica plane: admission, links and the bus. The consensus groups do not use the bus
// yet (a cluster start is still refused in main.rs); until then only its tests do.
#[cfg_attr(not(test), allow(dead_code))]
pub mod admission;
pub mod figures;
pub mod group;
#[cfg_attr(not(test), allow(dead_code))]
pub mod replica_bus;
#[cfg_attr(not(test), allow(dead_code))]
pub mod replica_codec;
#[cfg_attr(not(test), allow(dead_code))]
pub mod replica_link;
pub mod view_file;
pub mod wal;
