//! Request metrics of the node in the Prometheus text format: requests by command and status and
//! their latency per command (every transport, recorded where a request is answered), open
//! connections per transport, sessions, and the metadata group's commit. Counters only change
//! on this shard, so a request costs a map lookup and a few additions.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Upper bounds (seconds) of the latency histogram buckets.
const BOUNDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct Histogram {
    /// Per bound, the count of observations at most it (not cumulative here).
    buckets: [u64; BOUNDS.len()],
    count: u64,
    sum: f64,
}

/// The outcome label of a request: its status code, or that the connection was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Status(u32),
    Evicted,
}

#[derive(Default)]
pub struct Metrics {
    requests: RefCell<BTreeMap<(&'static str, Outcome), u64>>,
    latency: RefCell<BTreeMap<&'static str, Histogram>>,
}

/// The gauges read from the node when the metrics are rendered.
pub struct Gauges {
    pub connections: BTreeMap<&'static str, u64>,
    pub sessions: u64,
    pub metadata_commit: u64,
}

impl Metrics {
    pub fn record(&self, command: &'static str, outcome: Outcome, elapsed: std::time::Duration) {
        *self
            .requests
            .borrow_mut()
            .entry((command, outcome))
            .or_default() += 1;
        let seconds = elapsed.as_secs_f64();
        let mut latency = self.latency.borrow_mut();
        let histogram = latency.entry(command).or_default();
        if let Some(bucket) = BOUNDS.iter().position(|bound| seconds <= *bound) {
            histogram.buckets[bucket] += 1;
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP iggy_requests_total Requests answered, by command and status (0 = success).\n",
        );
        out.push_str("# TYPE iggy_requests_total counter\n");
        for ((command, outcome), count) in self.requests.borrow().iter() {
            let status = match outcome {
                Outcome::Status(code) => code.to_string(),
                Outcome::Evicted => "evicted".into(),
            };
            let _ = writeln!(
                out,
                "iggy_requests_total{{command=\"{command}\",status=\"{status}\"}} {count}"
            );
        }
        out.push_str("# HELP iggy_request_duration_seconds Time from a request's dispatch to its reply, by command.\n");
        out.push_str("# TYPE iggy_request_duration_seconds histogram\n");
        for (command, histogram) in self.latency.borrow().iter() {
            let mut cumulative = 0;
            for (bound, count) in BOUNDS.iter().zip(histogram.buckets) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "iggy_request_duration_seconds_bucket{{command=\"{command}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "iggy_request_duration_seconds_bucket{{command=\"{command}\",le=\"+Inf\"}} {}",
                histogram.count
            );
            let _ = writeln!(
                out,
                "iggy_request_duration_seconds_sum{{command=\"{command}\"}} {}",
                histogram.sum
            );
            let _ = writeln!(
                out,
                "iggy_request_duration_seconds_count{{command=\"{command}\"}} {}",
                histogram.count
            );
        }
        out.push_str("# HELP iggy_connections Open client connections, by transport.\n");
        out.push_str("# TYPE iggy_connections gauge\n");
        for (transport, count) in &gauges.connections {
            let _ = writeln!(out, "iggy_connections{{transport=\"{transport}\"}} {count}");
        }
        out.push_str("# HELP iggy_sessions Client sessions the metadata group holds.\n");
        out.push_str("# TYPE iggy_sessions gauge\n");
        let _ = writeln!(out, "iggy_sessions {}", gauges.sessions);
        out.push_str("# HELP iggy_vsr_commit The metadata group's commit op.\n");
        out.push_str("# TYPE iggy_vsr_commit gauge\n");
        let _ = writeln!(
            out,
            "iggy_vsr_commit{{group=\"metadata\"}} {}",
            gauges.metadata_commit
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_latencies_render_as_prometheus_text() {
        let metrics = Metrics::default();
        metrics.record(
            "stream.create",
            Outcome::Status(0),
            std::time::Duration::from_micros(300),
        );
        metrics.record(
            "stream.create",
            Outcome::Status(0),
            std::time::Duration::from_millis(20),
        );
        metrics.record(
            "stream.create",
            Outcome::Status(1012),
            std::time::Duration::from_secs(9),
        );
        metrics.record("ping", Outcome::Evicted, std::time::Duration::ZERO);
        let gauges = Gauges {
            connections: [("http", 2), ("tcp", 1)].into_iter().collect(),
            sessions: 3,
            metadata_commit: 41,
        };
        let text = metrics.render(&gauges);
        for line in [
            "iggy_requests_total{command=\"stream.create\",status=\"0\"} 2",
            "iggy_requests_total{command=\"stream.create\",status=\"1012\"} 1",
            "iggy_requests_total{command=\"ping\",status=\"evicted\"} 1",
            "iggy_request_duration_seconds_bucket{command=\"stream.create\",le=\"0.0005\"} 1",
            "iggy_request_duration_seconds_bucket{command=\"stream.create\",le=\"0.025\"} 2",
            "iggy_request_duration_seconds_bucket{command=\"stream.create\",le=\"2.5\"} 2",
            "iggy_request_duration_seconds_bucket{command=\"stream.create\",le=\"+Inf\"} 3",
            "iggy_request_duration_seconds_count{command=\"stream.create\"} 3",
            "iggy_connections{transport=\"http\"} 2",
            "iggy_sessions 3",
            "iggy_vsr_commit{group=\"metadata\"} 41",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
    }
}
