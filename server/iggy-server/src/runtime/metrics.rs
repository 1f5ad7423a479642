//! The node's metrics in the Prometheus text format. Requests by command and status and their
//! latency per command (every transport, recorded where a request is answered) only change on
//! this shard, so a request costs a map lookup and a few additions. Everything else is read
//! when the metrics render ([`Gauges`]): open connections per transport, sessions, messages
//! and bytes in and out per topic (relaxed atomics each partition's shard adds to once per
//! batch), fsyncs by file kind (counted where `iggy_storage::fail_stop` and the journal sync),
//! checkpoint durations by group kind, and every group's VSR view and commit.

use crate::consensus::figures::{CHECKPOINT_BOUNDS, HistogramCounts};
use crate::runtime::partition::Traffic;
use crate::runtime::shared::PartitionKey;
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

/// A consensus group, as its metrics label it: `group="metadata"`, or `group="partition"` with
/// the partition's `stream`, `topic` and `partition` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupLabel {
    Metadata,
    Partition(PartitionKey),
}

impl std::fmt::Display for GroupLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupLabel::Metadata => write!(f, "group=\"metadata\""),
            GroupLabel::Partition((stream, topic, partition)) => write!(
                f,
                "group=\"partition\",stream=\"{stream}\",topic=\"{topic}\",partition=\"{partition}\""
            ),
        }
    }
}

/// A group's replica figures.
#[derive(Debug, Clone, Copy)]
pub struct GroupGauge {
    pub group: GroupLabel,
    pub view: u64,
    pub commit: u64,
    /// The highest op applied to the state machine (at most `commit`).
    pub applied: u64,
    /// The primary of the replica's view.
    pub primary: u8,
    /// 0 normal, 1 view change, 2 recovering.
    pub status: u8,
}

/// The figures read from the node when the metrics are rendered.
pub struct Gauges {
    pub connections: BTreeMap<&'static str, u64>,
    pub sessions: u64,
    /// Bytes of request bodies and poll replies held under `limits.max_request_bodies_size`, and the bodies
    /// waiting for it.
    pub request_bodies_held: u64,
    pub request_bodies_waiting: u64,
    /// Every topic by (stream, topic) id, with its partitions' traffic.
    pub topics: BTreeMap<(u32, u32), Traffic>,
    /// Every running group (the metadata group first).
    pub groups: Vec<GroupGauge>,
    /// Fsyncs by file kind.
    pub fsyncs: Vec<(&'static str, u64)>,
    /// Checkpoint durations by group kind.
    pub checkpoints: Vec<(&'static str, HistogramCounts)>,
    /// In a cluster: frames each peer's send queue dropped (full, or waiting too long for a
    /// link), and inbound frames no group took (none listening, or its channel full). `None`
    /// standalone.
    pub replica_frames: Option<ReplicaFrames>,
    /// In a cluster: this node's replica id, whether it runs restored (`--restored`), and per
    /// peer whether its replica link is up (admitted and heard within the heartbeat timeout).
    pub replica: Option<ReplicaGauges>,
}

/// What a cluster node reports about itself and its links.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplicaGauges {
    pub id: u8,
    pub restored: bool,
    pub peers_up: Vec<(u8, bool)>,
    /// Per peer with a clock sample: its wall clock minus this node's, in microseconds
    /// (`cluster_clock`).
    pub clock_offsets: Vec<(u8, i64)>,
}

/// The replica plane's losses (VSR resends what matters; a steady rise means a slow peer).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplicaFrames {
    pub dropped: Vec<(u8, u64)>,
    /// Per peer: frames and bytes written to its links.
    pub sent: Vec<(u8, u64, u64)>,
    pub undeliverable: u64,
}

/// Reads one figure of a topic's traffic.
type TrafficFigure = fn(&Traffic) -> u64;

/// Reads one figure of a group's replica.
type GroupFigure = fn(&GroupGauge) -> u64;

/// One gauge without labels: its family's lines and its sample.
fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

/// One histogram's series; `buckets` are per bound, not cumulative.
fn histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    bounds: &[f64],
    buckets: &[u64],
    (count, sum): (u64, f64),
) {
    let mut cumulative = 0;
    for (bound, bucket) in bounds.iter().zip(buckets) {
        cumulative += bucket;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
}

/// The `# HELP` and `# TYPE` lines of a family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
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
        for (command, latency) in self.latency.borrow().iter() {
            histogram(
                &mut out,
                "iggy_request_duration_seconds",
                &format!("command=\"{command}\""),
                &BOUNDS,
                &latency.buckets,
                (latency.count, latency.sum),
            );
        }
        out.push_str("# HELP iggy_connections Open client connections, by transport.\n");
        out.push_str("# TYPE iggy_connections gauge\n");
        for (transport, count) in &gauges.connections {
            let _ = writeln!(out, "iggy_connections{{transport=\"{transport}\"}} {count}");
        }
        gauge(
            &mut out,
            "iggy_sessions",
            "Client sessions the metadata group holds.",
            gauges.sessions,
        );
        gauge(
            &mut out,
            "iggy_request_bodies_held_bytes",
            "Bytes of request bodies and poll replies held under limits.max_request_bodies_size.",
            gauges.request_bodies_held,
        );
        gauge(
            &mut out,
            "iggy_request_bodies_waiting",
            "Request bodies waiting unread for limits.max_request_bodies_size.",
            gauges.request_bodies_waiting,
        );
        let traffic: [(&str, &str, TrafficFigure); 4] = [
            (
                "iggy_messages_in_total",
                "Messages of the sends committed, by stream and topic id.",
                |t| t.messages_in,
            ),
            (
                "iggy_bytes_in_total",
                "Bytes of the batches committed (headers included), by stream and topic id.",
                |t| t.bytes_in,
            ),
            (
                "iggy_messages_out_total",
                "Messages served to polls, by stream and topic id.",
                |t| t.messages_out,
            ),
            (
                "iggy_bytes_out_total",
                "Bytes of the records served to polls, by stream and topic id.",
                |t| t.bytes_out,
            ),
        ];
        for (name, help, figure) in traffic {
            family(&mut out, name, "counter", help);
            for ((stream, topic), traffic) in &gauges.topics {
                let _ = writeln!(
                    out,
                    "{name}{{stream=\"{stream}\",topic=\"{topic}\"}} {}",
                    figure(traffic)
                );
            }
        }
        family(
            &mut out,
            "iggy_fsyncs_total",
            "counter",
            "Fsyncs the node issued, by the kind of file made durable.",
        );
        for (file, count) in &gauges.fsyncs {
            let _ = writeln!(out, "iggy_fsyncs_total{{file=\"{file}\"}} {count}");
        }
        if let Some(frames) = &gauges.replica_frames {
            let dropped = frames.dropped.clone();
            let sent_frames = frames.sent.iter().map(|&(peer, n, _)| (peer, n)).collect();
            let sent_bytes = frames.sent.iter().map(|&(peer, _, n)| (peer, n)).collect();
            let per_peer = [
                (
                    "iggy_replica_frames_dropped_total",
                    "Frames to a peer replica dropped because its send queue was full or they waited too long for a link.",
                    dropped,
                ),
                (
                    "iggy_replica_frames_sent_total",
                    "Frames written to a peer replica's links, keepalives included.",
                    sent_frames,
                ),
                (
                    "iggy_replica_bytes_sent_total",
                    "Bytes of the frames written to a peer replica's links (a retransmitted prepare counts again).",
                    sent_bytes,
                ),
            ];
            for (name, help, counts) in per_peer {
                family(&mut out, name, "counter", help);
                for (peer, count) in counts {
                    let _ = writeln!(out, "{name}{{peer=\"{peer}\"}} {count}");
                }
            }
            family(
                &mut out,
                "iggy_replica_frames_undeliverable_total",
                "counter",
                "Frames from peer replicas no consensus group took (unknown group or full channel).",
            );
            let _ = writeln!(
                out,
                "iggy_replica_frames_undeliverable_total {}",
                frames.undeliverable
            );
        }
        family(
            &mut out,
            "iggy_checkpoint_duration_seconds",
            "histogram",
            "Time a group's checkpoint took (state made durable, slot written and fsynced), by group kind.",
        );
        for (kind, counts) in &gauges.checkpoints {
            histogram(
                &mut out,
                "iggy_checkpoint_duration_seconds",
                &format!("group_kind=\"{kind}\""),
                &CHECKPOINT_BOUNDS,
                &counts.buckets,
                (counts.count, counts.sum_seconds),
            );
        }
        family(
            &mut out,
            "iggy_vsr_view",
            "gauge",
            "Each consensus group's VSR view.",
        );
        for group in &gauges.groups {
            let _ = writeln!(out, "iggy_vsr_view{{{}}} {}", group.group, group.view);
        }
        family(
            &mut out,
            "iggy_vsr_commit",
            "gauge",
            "Each consensus group's VSR commit number (the highest op known committed).",
        );
        for group in &gauges.groups {
            let _ = writeln!(out, "iggy_vsr_commit{{{}}} {}", group.group, group.commit);
        }
        let per_group: [(&str, &str, GroupFigure); 3] = [
            (
                "iggy_vsr_applied",
                "Each consensus group's highest op this replica applied (commit less applied: how far it lags).",
                |g| g.applied,
            ),
            (
                "iggy_vsr_primary",
                "The replica id of the primary of each consensus group's view, as this replica knows it.",
                |g| u64::from(g.primary),
            ),
            (
                "iggy_vsr_status",
                "Each consensus group's replica status: 0 normal, 1 view change, 2 recovering.",
                |g| u64::from(g.status),
            ),
        ];
        for (name, help, figure) in per_group {
            family(&mut out, name, "gauge", help);
            for group in &gauges.groups {
                let _ = writeln!(out, "{name}{{{}}} {}", group.group, figure(group));
            }
        }
        if let Some(replica) = &gauges.replica {
            family(
                &mut out,
                "iggy_replica_id",
                "gauge",
                "This node's replica id in the cluster roster.",
            );
            let _ = writeln!(out, "iggy_replica_id {}", replica.id);
            family(
                &mut out,
                "iggy_replica_restored",
                "gauge",
                "1 while this node runs restored (--restored, restored.pending): its groups vote in no view change until caught up.",
            );
            let _ = writeln!(out, "iggy_replica_restored {}", u8::from(replica.restored));
            family(
                &mut out,
                "iggy_replica_peer_up",
                "gauge",
                "1 when the replica link to a peer is admitted and heard from within the heartbeat timeout, else 0.",
            );
            for (peer, up) in &replica.peers_up {
                let _ = writeln!(
                    out,
                    "iggy_replica_peer_up{{peer=\"{peer}\"}} {}",
                    u8::from(*up)
                );
            }
            family(
                &mut out,
                "iggy_replica_peer_clock_offset_seconds",
                "gauge",
                "A peer's wall clock minus this node's, from its latest Pong (within half a round trip). Message expiry and stamps follow the time a quorum of the clocks reached.",
            );
            for (peer, micros) in &replica.clock_offsets {
                let _ = writeln!(
                    out,
                    "iggy_replica_peer_clock_offset_seconds{{peer=\"{peer}\"}} {}",
                    *micros as f64 / 1e6
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges() -> Gauges {
        Gauges {
            connections: [("http", 2), ("tcp", 1)].into_iter().collect(),
            sessions: 0,
            request_bodies_held: 0,
            request_bodies_waiting: 0,
            topics: BTreeMap::new(),
            groups: Vec::new(),
            fsyncs: Vec::new(),
            checkpoints: Vec::new(),
            replica_frames: None,
            replica: None,
        }
    }

    /// Every line is a comment or `name{labels} value` with a number for the value; the
    /// samples by `name{labels}`.
    fn parse(text: &str) -> BTreeMap<String, f64> {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect(line);
            let name_end = series.find('{').unwrap_or(series.len());
            let name = &series[..name_end];
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "{line}"
            );
            if name_end < series.len() {
                let labels = series[name_end + 1..].strip_suffix('}').expect(line);
                for label in labels.split(',') {
                    let (key, quoted) = label.split_once('=').expect(line);
                    assert!(
                        key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(
                        quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'),
                        "{line}"
                    );
                }
            }
            let value = match value {
                "+Inf" => f64::INFINITY,
                value => value.parse().expect(line),
            };
            assert!(
                samples.insert(series.to_string(), value).is_none(),
                "twice: {line}"
            );
        }
        samples
    }

    #[test]
    fn topics_fsyncs_checkpoints_and_groups_render_as_prometheus_text() {
        let traffic = Traffic {
            messages_in: 10,
            bytes_in: 2560,
            messages_out: 4,
            bytes_out: 1024,
        };
        let mut checkpoint = HistogramCounts::default();
        checkpoint.buckets[1] = 2;
        checkpoint.buckets[4] = 1;
        checkpoint.count = 4;
        checkpoint.sum_seconds = 7.5;
        let gauges = Gauges {
            topics: [((1, 2), traffic), ((3, 0), Traffic::default())]
                .into_iter()
                .collect(),
            groups: vec![
                GroupGauge {
                    group: GroupLabel::Metadata,
                    view: 2,
                    commit: 9,
                    applied: 8,
                    primary: 2,
                    status: 0,
                },
                GroupGauge {
                    group: GroupLabel::Partition((1, 2, 3)),
                    view: 0,
                    commit: 5,
                    applied: 5,
                    primary: 0,
                    status: 2,
                },
            ],
            fsyncs: vec![("journal", 7), ("segment", 0)],
            replica_frames: Some(ReplicaFrames {
                dropped: vec![(1, 0), (2, 3)],
                sent: vec![(1, 10, 2560), (2, 0, 0)],
                undeliverable: 4,
            }),
            replica: Some(ReplicaGauges {
                id: 1,
                restored: false,
                peers_up: vec![(0, true), (2, false)],
                clock_offsets: vec![(0, -1_500_000)],
            }),
            checkpoints: vec![
                ("metadata", HistogramCounts::default()),
                ("partition", checkpoint),
            ],
            ..gauges()
        };
        let text = Metrics::default().render(&gauges);
        let samples = parse(&text);
        for (series, value) in [
            ("iggy_messages_in_total{stream=\"1\",topic=\"2\"}", 10.0),
            ("iggy_bytes_in_total{stream=\"1\",topic=\"2\"}", 2560.0),
            ("iggy_messages_out_total{stream=\"1\",topic=\"2\"}", 4.0),
            ("iggy_bytes_out_total{stream=\"1\",topic=\"2\"}", 1024.0),
            ("iggy_messages_in_total{stream=\"3\",topic=\"0\"}", 0.0),
            ("iggy_fsyncs_total{file=\"journal\"}", 7.0),
            ("iggy_fsyncs_total{file=\"segment\"}", 0.0),
            ("iggy_replica_frames_dropped_total{peer=\"2\"}", 3.0),
            ("iggy_replica_frames_sent_total{peer=\"1\"}", 10.0),
            ("iggy_replica_bytes_sent_total{peer=\"1\"}", 2560.0),
            ("iggy_replica_bytes_sent_total{peer=\"2\"}", 0.0),
            ("iggy_replica_frames_undeliverable_total", 4.0),
            ("iggy_vsr_applied{group=\"metadata\"}", 8.0),
            ("iggy_vsr_primary{group=\"metadata\"}", 2.0),
            (
                "iggy_vsr_status{group=\"partition\",stream=\"1\",topic=\"2\",partition=\"3\"}",
                2.0,
            ),
            ("iggy_replica_id", 1.0),
            ("iggy_replica_restored", 0.0),
            ("iggy_replica_peer_up{peer=\"0\"}", 1.0),
            ("iggy_replica_peer_up{peer=\"2\"}", 0.0),
            ("iggy_replica_peer_clock_offset_seconds{peer=\"0\"}", -1.5),
            (
                "iggy_checkpoint_duration_seconds_bucket{group_kind=\"partition\",le=\"0.001\"}",
                0.0,
            ),
            (
                "iggy_checkpoint_duration_seconds_bucket{group_kind=\"partition\",le=\"0.0025\"}",
                2.0,
            ),
            (
                "iggy_checkpoint_duration_seconds_bucket{group_kind=\"partition\",le=\"0.025\"}",
                3.0,
            ),
            (
                "iggy_checkpoint_duration_seconds_bucket{group_kind=\"partition\",le=\"5\"}",
                3.0,
            ),
            (
                "iggy_checkpoint_duration_seconds_bucket{group_kind=\"partition\",le=\"+Inf\"}",
                4.0,
            ),
            (
                "iggy_checkpoint_duration_seconds_sum{group_kind=\"partition\"}",
                7.5,
            ),
            (
                "iggy_checkpoint_duration_seconds_count{group_kind=\"metadata\"}",
                0.0,
            ),
            ("iggy_vsr_view{group=\"metadata\"}", 2.0),
            ("iggy_vsr_commit{group=\"metadata\"}", 9.0),
            (
                "iggy_vsr_view{group=\"partition\",stream=\"1\",topic=\"2\",partition=\"3\"}",
                0.0,
            ),
            (
                "iggy_vsr_commit{group=\"partition\",stream=\"1\",topic=\"2\",partition=\"3\"}",
                5.0,
            ),
        ] {
            assert_eq!(samples.get(series), Some(&value), "{series} in\n{text}");
        }
        // One HELP and one TYPE per family, before its samples.
        for name in [
            "iggy_messages_in_total counter",
            "iggy_fsyncs_total counter",
            "iggy_checkpoint_duration_seconds histogram",
            "iggy_vsr_view gauge",
            "iggy_vsr_commit gauge",
        ] {
            let line = format!("# TYPE {name}");
            assert_eq!(text.lines().filter(|l| *l == line).count(), 1, "{line}");
        }
    }

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
            sessions: 3,
            request_bodies_held: 1 << 20,
            request_bodies_waiting: 2,
            groups: vec![GroupGauge {
                group: GroupLabel::Metadata,
                view: 0,
                commit: 41,
                applied: 41,
                primary: 0,
                status: 0,
            }],
            ..gauges()
        };
        let text = metrics.render(&gauges);
        parse(&text);
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
            "iggy_request_bodies_held_bytes 1048576",
            "iggy_request_bodies_waiting 2",
            "iggy_vsr_commit{group=\"metadata\"} 41",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
    }
}
