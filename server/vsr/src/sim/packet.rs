//! Seeded packet simulator: drops, duplicates, delays and (through random delays) reorders.

use super::Rng;

/// Fault rates of the network, in percent, and the delay range in ticks.
#[derive(Clone, Debug)]
pub struct PacketOptions {
    /// Chance a packet is lost.
    pub drop_percent: u64,
    /// Chance a packet is delivered twice.
    pub duplicate_percent: u64,
    /// Minimum delivery delay.
    pub delay_min_ticks: u64,
    /// Maximum delivery delay.
    pub delay_max_ticks: u64,
}

/// In-flight packets ordered by delivery time.
#[derive(Debug)]
pub struct PacketSimulator<P> {
    /// Current fault options (may be changed, e.g. to heal the network).
    pub options: PacketOptions,
    in_flight: Vec<(u64, u64, P)>,
    sequence: u64,
}

impl<P: Clone> PacketSimulator<P> {
    /// Empty network.
    pub fn new(options: PacketOptions) -> Self {
        PacketSimulator {
            options,
            in_flight: Vec::new(),
            sequence: 0,
        }
    }

    /// Submits `packet` at time `now`.
    pub fn submit(&mut self, rng: &mut Rng, now: u64, packet: P) {
        if rng.chance(self.options.drop_percent) {
            return;
        }
        let copies = if rng.chance(self.options.duplicate_percent) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let span = self.options.delay_max_ticks - self.options.delay_min_ticks + 1;
            let at = now + self.options.delay_min_ticks + rng.below(span);
            self.sequence += 1;
            self.in_flight
                .push((at, rng.next_u64() ^ self.sequence, packet.clone()));
        }
    }

    /// Removes and returns every packet due at or before `now`, in a seeded order.
    pub fn deliver(&mut self, now: u64) -> Vec<P> {
        let (mut due, rest): (Vec<_>, Vec<_>) = self.in_flight.drain(..).partition(|p| p.0 <= now);
        self.in_flight = rest;
        due.sort_by_key(|p| (p.0, p.1));
        due.into_iter().map(|p| p.2).collect()
    }

    /// Number of packets in flight.
    pub fn len(&self) -> usize {
        self.in_flight.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}
