//! The wall clock, read only where the node decides something with a timestamp (a primary
//! stamping an op, a lease check); committed state never reads it.

/// Microseconds since the Unix epoch (declared inward, where the replica links read it too).
pub use crate::consensus::wall_clock::now_micros;

/// The time this node stamps messages with and dates tokens by: its wall clock moved by an
/// offset the maintenance pass keeps (`cluster_clock::stamp_offset`: 0 unless the clock is off
/// the replicas' quorum by more than a second). Clones share the offset, across threads: the
/// partitions' groups on every shard stamp by it.
#[derive(Clone, Default, Debug)]
pub struct StampClock(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl StampClock {
    /// Microseconds since the Unix epoch by the moved clock.
    pub fn now_micros(&self) -> u64 {
        now_micros().saturating_add_signed(self.offset())
    }

    pub fn offset(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the offset; returns the one before.
    pub fn set_offset(&self, offset: i64) -> i64 {
        self.0.swap(offset, std::sync::atomic::Ordering::Relaxed)
    }
}
