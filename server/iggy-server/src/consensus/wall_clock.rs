//! This node's wall clock, read where a timestamp decides something (a Ping or Pong stamped,
//! a primary stamping an op, a lease check; `runtime::clock` is the same); committed state
//! never reads it.

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
