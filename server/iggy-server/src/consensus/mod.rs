//! Consensus groups: the I/O shell around an `iggy_vsr::Replica` and its journal file.

pub mod cluster;
// The replica network that calls it does not exist yet; until then only its tests do.
#[cfg_attr(not(test), allow(dead_code))]
pub mod admission;
pub mod figures;
pub mod group;
pub mod view_file;
pub mod wal;
