//! Per-actor samples and the per-kind summary (throughput, latency percentiles).

use serde::Serialize;
use std::time::Duration;

/// What one actor measured: a latency sample per batch and the volume it moved.
#[derive(Debug, Default)]
pub struct ActorResult {
    pub actor: u32,
    pub messages: u64,
    pub payload_bytes: u64,
    /// One sample per batch, nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// From the shared start to this actor's last batch.
    pub elapsed: Duration,
    /// Polls that returned no message (not counted in the latency samples).
    pub empty_polls: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn from_samples(samples: &mut [u64]) -> Latency {
        samples.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        let q = |q: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            let rank = (q * samples.len() as f64).ceil() as usize;
            ms(samples[rank.clamp(1, samples.len()) - 1])
        };
        let avg = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64 / 1e6
        };
        Latency {
            avg_ms: avg,
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            p9999_ms: q(0.9999),
            max_ms: samples.last().map_or(0.0, |&s| ms(s)),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ActorSummary {
    pub actor: u32,
    pub messages: u64,
    pub messages_per_s: f64,
    pub mb_per_s: f64,
    pub p99_ms: f64,
}

/// One actor kind (producer, consumer, producing consumer) over a whole phase.
#[derive(Debug, Clone, Serialize)]
pub struct KindReport {
    pub kind: String,
    pub actors: u32,
    pub messages: u64,
    pub payload_bytes: u64,
    pub batches: u64,
    /// Wall time from the common start until the last actor of this kind finished.
    pub duration_s: f64,
    /// Total messages / duration (payload MB = 10^6 bytes, as upstream's tool reports).
    pub messages_per_s: f64,
    pub mb_per_s: f64,
    /// Latency of one batch: one send, one poll that returned messages, or send + poll back.
    pub latency: Latency,
    /// Polls that returned nothing (consumers catching up with producers, or a poll racing
    /// the send it follows in the end-to-end scenario).
    pub empty_polls: u64,
    /// The slowest actor's untimed first poll of its partitions before the common start
    /// (`scenario::reach_partitions`), in ms: what a first batch would otherwise have waited.
    pub warm_up_ms: f64,
    pub per_actor: Vec<ActorSummary>,
}

impl KindReport {
    pub fn new(kind: &str, mut actors: Vec<ActorResult>) -> KindReport {
        actors.sort_by_key(|a| a.actor);
        let messages: u64 = actors.iter().map(|a| a.messages).sum();
        let payload_bytes: u64 = actors.iter().map(|a| a.payload_bytes).sum();
        let duration = actors
            .iter()
            .map(|a| a.elapsed)
            .max()
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-9);
        let per_actor = actors
            .iter_mut()
            .map(|a| {
                let secs = a.elapsed.as_secs_f64().max(1e-9);
                let mut l = a.latencies_ns.clone();
                ActorSummary {
                    actor: a.actor,
                    messages: a.messages,
                    messages_per_s: a.messages as f64 / secs,
                    mb_per_s: a.payload_bytes as f64 / secs / 1e6,
                    p99_ms: Latency::from_samples(&mut l).p99_ms,
                }
            })
            .collect();
        let mut all: Vec<u64> = actors
            .iter()
            .flat_map(|a| a.latencies_ns.iter().copied())
            .collect();
        KindReport {
            kind: kind.to_string(),
            actors: actors.len() as u32,
            messages,
            payload_bytes,
            batches: all.len() as u64,
            duration_s: duration,
            messages_per_s: messages as f64 / duration,
            mb_per_s: payload_bytes as f64 / duration / 1e6,
            latency: Latency::from_samples(&mut all),
            empty_polls: actors.iter().map(|a| a.empty_polls).sum(),
            warm_up_ms: 0.0,
            per_actor,
        }
    }

    pub fn print(&self) {
        let l = &self.latency;
        println!(
            "  {:<18} {:>2} actors  {:>12} msgs/s  {:>9.1} MB/s  ({} msgs, {:.1} MB in {:.2} s)",
            self.kind,
            self.actors,
            fmt_int(self.messages_per_s),
            self.mb_per_s,
            self.messages,
            self.payload_bytes as f64 / 1e6,
            self.duration_s
        );
        println!(
            "  {:<18} latency per batch (ms): avg {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p999 {:.3}  p9999 {:.3}  max {:.3}",
            "", l.avg_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.p9999_ms, l.max_ms
        );
        if self.empty_polls > 0 {
            println!("  {:<18} empty polls: {}", "", self.empty_polls);
        }
        if self.warm_up_ms > 0.0 {
            println!(
                "  {:<18} untimed warm-up (a poll of each actor's partitions): slowest actor {:.1} ms",
                "", self.warm_up_ms
            );
        }
    }
}

/// 1234567.8 -> "1,234,568".
pub fn fmt_int(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_rank() {
        let mut s: Vec<u64> = (1..=1000).map(|i| i * 1_000_000).collect();
        let l = Latency::from_samples(&mut s);
        assert_eq!(l.p50_ms, 500.0);
        assert_eq!(l.p99_ms, 990.0);
        assert_eq!(l.p999_ms, 999.0);
        assert_eq!(l.p9999_ms, 1000.0);
        assert_eq!(l.max_ms, 1000.0);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(fmt_int(1234567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
    }
}
