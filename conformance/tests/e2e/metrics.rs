//! The Prometheus endpoint after real traffic: messages sent and polled with the official SDK
//! over TCP are counted per topic, fsyncs and checkpoints are counted, and every consensus
//! group's view and commit are reported. The text is parsed line by line.

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` on a fresh HTTP/1.1 connection: the status and the body.
async fn get(api_url: &str, path: &str) -> (u16, String) {
    let address = api_url.trim_start_matches("http://");
    let mut stream = within("connect", tokio::net::TcpStream::connect(address)).await.expect("connect");
    let head = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("write request");
    let mut reply = Vec::new();
    within("read reply", stream.read_to_end(&mut reply)).await.expect("read reply");
    let text = String::from_utf8(reply).expect("utf-8 reply");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    (status, body.to_string())
}

/// One sample: the family name, its labels, its value.
#[derive(Debug)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// Parses the text exposition format: every line is `# HELP`/`# TYPE` or
/// `name{label="value",...} number` (labels optional); anything else fails the test.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut typed = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(typed.insert(name.to_string(), kind.to_string()).is_none(), "typed twice: {line}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value not a number: {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line:?}"))),
            None => (series, ""),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name: {line:?}"
        );
        let mut parsed = BTreeMap::new();
        for label in labels.split(',').filter(|l| !l.is_empty()) {
            let (key, quoted) = label.split_once('=').unwrap_or_else(|| panic!("bad label: {line:?}"));
            let value = quoted
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_else(|| panic!("unquoted label: {line:?}"));
            parsed.insert(key.to_string(), value.to_string());
        }
        // Every sample belongs to a family typed before it.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.get(*f).is_some_and(|k| k == "histogram")))
            .unwrap_or(name);
        assert!(typed.contains_key(family), "sample before its # TYPE: {line:?}");
        samples.push(Sample { name: name.to_string(), labels: parsed, value });
    }
    samples
}

/// The value of the one sample of `name` whose labels are exactly `labels`.
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let found: Vec<&Sample> = samples.iter().filter(|s| s.name == name && s.labels == want).collect();
    assert_eq!(found.len(), 1, "{name}{want:?}: {found:?}");
    found[0].value
}

pub(crate) async fn scrape(api: &str) -> Vec<Sample> {
    let (status, body) = get(api, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    parse(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_topic_traffic_fsyncs_checkpoints_and_group_figures_are_exported() {
    // Persisted: sends fsync their segment records; small journals: groups checkpoint.
    let (server, api) = TestServer::start_with_http(&[
        ("IGGY_SYSTEM_DURABILITY", "persisted"),
        ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "4"),
    ]);
    let before = scrape(&api).await;
    let journal_fsyncs = value(&before, "iggy_fsyncs_total", &[("file", "journal")]);
    let segment_fsyncs = value(&before, "iggy_fsyncs_total", &[("file", "segment")]);

    let client = server.root_client().await;
    let (stream, topic) = create_stream_and_topic(&client, "s", "t", 2).await;
    let (s, t) = (stream.id.to_string(), topic.id.to_string());
    // A second topic that sees no traffic.
    let quiet = ok("create u", within("create", client.create_topic(&name("s"), "u", &topic_options(1))).await);
    let quiet_id = quiet.id.to_string();

    // Batches of different sizes to both partitions; payload bytes counted as sent.
    let mut sent_messages = 0u64;
    let mut payload_bytes = 0u64;
    for (i, size) in [3usize, 1, 7, 2, 5, 4].into_iter().enumerate() {
        let batch = msgs(&format!("b{i}"), size);
        payload_bytes += batch.iter().map(|m| m.payload.len() as u64).sum::<u64>();
        sent_messages += size as u64;
        send_to_partition(&client, &name("s"), &name("t"), (i % 2) as u32, batch).await;
    }
    // Polls: all of partition 0, two of partition 1, then one that finds nothing.
    let c = consumer("c");
    let p0 = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(0), 100, false).await;
    let p1 = poll(&client, &name("s"), &name("t"), 1, &c, PollingStrategy::offset(0), 2, false).await;
    let none = poll(&client, &name("s"), &name("t"), 1, &c, PollingStrategy::offset(1000), 10, false).await;
    assert_eq!((p0.messages.len(), p1.messages.len(), none.messages.len()), (3 + 7 + 5, 2, 0));
    let polled_messages = (p0.messages.len() + p1.messages.len()) as u64;
    let polled_payload: u64 = p0.messages.iter().chain(&p1.messages).map(|m| m.payload.len() as u64).sum();

    let after = scrape(&api).await;
    let topic_labels = [("stream", s.as_str()), ("topic", t.as_str())];
    assert_eq!(value(&after, "iggy_messages_in_total", &topic_labels), sent_messages as f64);
    assert_eq!(value(&after, "iggy_messages_out_total", &topic_labels), polled_messages as f64);
    let bytes_in = value(&after, "iggy_bytes_in_total", &topic_labels);
    let bytes_out = value(&after, "iggy_bytes_out_total", &topic_labels);
    assert!(bytes_in >= payload_bytes as f64, "bytes in {bytes_in} < payload {payload_bytes}");
    assert!(bytes_out >= polled_payload as f64, "bytes out {bytes_out} < payload {polled_payload}");
    assert!(bytes_out < bytes_in, "only part of the topic was polled: {bytes_out} vs {bytes_in}");
    let quiet = [("stream", s.as_str()), ("topic", quiet_id.as_str())];
    assert_eq!(value(&after, "iggy_messages_in_total", &quiet), 0.0);
    assert_eq!(value(&after, "iggy_bytes_out_total", &quiet), 0.0);

    // Every send was journaled and, persisted, its segment record fsynced.
    assert!(value(&after, "iggy_fsyncs_total", &[("file", "journal")]) >= journal_fsyncs + 6.0);
    assert!(value(&after, "iggy_fsyncs_total", &[("file", "segment")]) >= segment_fsyncs + 6.0);
    // Each partition group saw at least 3 sends plus its opening ops: 4 ops reach a checkpoint,
    // which the group takes after it answered the op (under load, after this scrape).
    let mut after = after;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while value(&after, "iggy_checkpoint_duration_seconds_count", &[("group_kind", "partition")]) < 1.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        after = scrape(&api).await;
    }
    let checkpoints = value(&after, "iggy_checkpoint_duration_seconds_count", &[("group_kind", "partition")]);
    assert!(checkpoints >= 1.0, "partition checkpoints: {checkpoints}");
    assert!(value(&after, "iggy_fsyncs_total", &[("file", "checkpoint")]) >= checkpoints);
    let inf = value(
        &after,
        "iggy_checkpoint_duration_seconds_bucket",
        &[("group_kind", "partition"), ("le", "+Inf")],
    );
    assert_eq!(inf, checkpoints);

    // Every group's view and commit: the metadata group committed the creations, each
    // partition group at least its sends.
    assert_eq!(value(&after, "iggy_vsr_view", &[("group", "metadata")]), 0.0);
    assert!(value(&after, "iggy_vsr_commit", &[("group", "metadata")]) >= 3.0);
    for (partition, sends) in [("0", 3.0), ("1", 3.0)] {
        let labels = [("group", "partition"), ("stream", s.as_str()), ("topic", t.as_str()), ("partition", partition)];
        assert_eq!(value(&after, "iggy_vsr_view", &labels), 0.0);
        assert!(value(&after, "iggy_vsr_commit", &labels) >= sends, "partition {partition}");
    }
    // The request families keep their names.
    assert!(value(&after, "iggy_requests_total", &[("command", "message.send"), ("status", "0")]) >= 6.0);
}

/// `iggy_sessions` counts client sessions: before any client signs in there are none (the
/// session the node itself registers to create the root user is not a client's), and one
/// client signed in is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_count_client_sessions_only() {
    let (server, api) = TestServer::start_with_http(&[]);
    assert_eq!(value(&scrape(&api).await, "iggy_sessions", &[]), 0.0);
    let _client = server.root_client().await;
    assert_eq!(value(&scrape(&api).await, "iggy_sessions", &[]), 1.0);
}
