//! The wall clock, read only where the node decides something with a timestamp (a primary
//! stamping an op, a lease check); committed state never reads it.

/// Microseconds since the Unix epoch (declared inward, where the replica links read it too).
pub use crate::consensus::wall_clock::now_micros;
