//! Consensus groups: the I/O shell around an `iggy_vsr::Replica` and its journal file.

pub mod cluster;
pub mod group;
pub mod wal;
