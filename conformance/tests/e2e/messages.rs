//! Sending and polling: confirmations, every polling strategy, auto-commit, partitioning,
//! user headers, message ids, and a multi-megabyte payload.

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

/// Stream "s" (id 0), topic "t" (id 0) with `partitions` partitions, and ten messages
/// "m-0".."m-9" on partition 0 sent in one batch.
async fn ten_messages(server: &TestServer, partitions: u32) -> IggyClient {
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", partitions).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 10)).await;
    client
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_confirms_stream_topic_partition_and_base_offset() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s0", "t0", 1).await;
    create_stream_and_topic(&client, "s", "t", 3).await;
    ok("create t1", within("create", client.create_topic(&name("s"), "u", &topic_options(2))).await);

    let first = send_to_partition(&client, &name("s"), &name("u"), 1, msgs("a", 3)).await;
    let c: Vec<(u32, u32, u32, u64)> = first
        .confirmations
        .iter()
        .map(|c| (c.stream_id, c.topic_id, c.partition_id, c.base_offset))
        .collect();
    assert_eq!(c, vec![(1, 1, 1, 0)], "first batch: stream 1, topic 1, partition 1, offset 0");

    let second = send_to_partition(&client, &name("s"), &name("u"), 1, msgs("b", 2)).await;
    let c: Vec<(u32, u32, u32, u64)> = second
        .confirmations
        .iter()
        .map(|c| (c.stream_id, c.topic_id, c.partition_id, c.base_offset))
        .collect();
    assert_eq!(c, vec![(1, 1, 1, 3)], "second batch starts after the first three");

    let t = ok("get topic", within("get", client.get_topic(&name("s"), &name("u"))).await).expect("topic");
    assert_eq!(t.messages_count, 5, "topic messages_count");
    let p1 = t.partitions.iter().find(|p| p.id == 1).expect("partition 1");
    assert_eq!((p1.messages_count, p1.current_offset), (5, 4), "partition 1 count and current offset");
    let s = ok("get stream", within("get", client.get_stream(&name("s"))).await).expect("stream");
    assert_eq!(s.messages_count, 5, "stream messages_count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_by_offset_returns_count_messages_from_that_offset() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let c = consumer("c");

    let polled = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(4), 3, false).await;
    assert_eq!(offsets(&polled), vec![4, 5, 6]);
    assert_eq!(payloads(&polled), strs(&["m-4", "m-5", "m-6"]));
    assert_eq!(polled.count, 3, "prefix messages_count");
    assert_eq!(polled.partition_id, 0);
    assert_eq!(polled.current_offset, 9, "current_offset is the partition's last offset");

    let tail = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(8), 5, false).await;
    assert_eq!(offsets(&tail), vec![8, 9], "a poll past the end is cut short");

    let none = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(10), 5, false).await;
    assert!(none.messages.is_empty(), "nothing at offset 10: {:?}", offsets(&none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_first_returns_the_oldest_messages() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 3, false).await;
    assert_eq!(offsets(&polled), vec![0, 1, 2]);
    assert_eq!(payloads(&polled), strs(&["m-0", "m-1", "m-2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_last_returns_the_newest_messages() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::last(), 3, false).await;
    assert_eq!(offsets(&polled), vec![7, 8, 9]);
    assert_eq!(payloads(&polled), strs(&["m-7", "m-8", "m-9"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_next_starts_at_zero_then_after_the_stored_offset() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;

    let fresh = poll(&client, &name("s"), &name("t"), 0, &consumer("new"), PollingStrategy::next(), 3, false).await;
    assert_eq!(offsets(&fresh), vec![0, 1, 2], "no stored offset: next starts at 0");

    let c = consumer("c");
    ok(
        "store offset 4",
        within("store", client.store_consumer_offset(&c, &name("s"), &name("t"), Some(0), 4)).await,
    );
    let next = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 3, false).await;
    assert_eq!(offsets(&next), vec![5, 6, 7], "next = stored + 1");
    // Without auto-commit the stored offset does not move.
    let again = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 3, false).await;
    assert_eq!(offsets(&again), vec![5, 6, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_next_with_auto_commit_stores_the_last_polled_offset() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let c = consumer("reader");

    let a = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 4, true).await;
    assert_eq!(offsets(&a), vec![0, 1, 2, 3]);
    let stored = ok("get offset", within("get", client.get_consumer_offset(&c, &name("s"), &name("t"), Some(0))).await)
        .expect("auto-commit stored an offset");
    assert_eq!((stored.partition_id, stored.stored_offset, stored.current_offset), (0, 3, 9));

    let b = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 4, true).await;
    assert_eq!(offsets(&b), vec![4, 5, 6, 7]);
    let c3 = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 4, true).await;
    assert_eq!(offsets(&c3), vec![8, 9]);
    let d = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 4, true).await;
    assert!(d.messages.is_empty(), "everything consumed: {:?}", offsets(&d));
    let stored = ok("get offset", within("get", client.get_consumer_offset(&c, &name("s"), &name("t"), Some(0))).await)
        .expect("stored offset");
    assert_eq!(stored.stored_offset, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_by_offset_with_auto_commit_stores_the_last_polled_offset() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let c = consumer("c");
    let polled = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(2), 3, true).await;
    assert_eq!(offsets(&polled), vec![2, 3, 4]);
    let stored = ok("get offset", within("get", client.get_consumer_offset(&c, &name("s"), &name("t"), Some(0))).await)
        .expect("stored offset");
    assert_eq!(stored.stored_offset, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_by_timestamp_skips_batches_stored_before_it() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("old", 3)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cut = IggyTimestamp::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("new", 2)).await;

    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::timestamp(cut), 10, false).await;
    assert_eq!(payloads(&polled), strs(&["new-0", "new-1"]));
    assert_eq!(offsets(&polled), vec![3, 4]);
    for m in &polled.messages {
        assert!(
            m.header.timestamp >= cut.as_micros(),
            "message {} timestamp {} is before the cut {}",
            m.header.offset,
            m.header.timestamp,
            cut.as_micros()
        );
    }

    let all = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::timestamp(IggyTimestamp::from(0)), 10, false).await;
    assert_eq!(offsets(&all), vec![0, 1, 2, 3, 4], "timestamp 0 returns everything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_from_empty_partition_returns_no_messages() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 2)).await;
    let polled = poll(&client, &name("s"), &name("t"), 1, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert!(polled.messages.is_empty());
    assert_eq!(polled.count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_partitioning_spreads_sends_round_robin() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 3).await;

    let mut chosen = Vec::new();
    for i in 0..6 {
        let mut m = vec![msg(format!("b-{i}"))];
        let r = ok(
            "send balanced",
            within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::balanced(), &mut m)).await,
        );
        assert_eq!(r.confirmations.len(), 1, "one confirmation per send: {r:?}");
        chosen.push(r.confirmations[0].partition_id);
    }
    assert_eq!(chosen, vec![0, 1, 2, 0, 1, 2], "the SDK's balanced cursor, confirmed by the server");
    for (p, expected) in [(0, ["b-0", "b-3"]), (1, ["b-1", "b-4"]), (2, ["b-2", "b-5"])] {
        let polled = poll(&client, &name("s"), &name("t"), p, &consumer("c"), PollingStrategy::first(), 10, false).await;
        assert_eq!(payloads(&polled), strs(&expected), "partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_key_partitioning_sends_equal_keys_to_the_same_partition() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let partitions = 4u32;
    create_stream_and_topic(&client, "s", "t", partitions).await;

    let keys = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let mut expected: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for round in 0..2 {
        for key in keys {
            let payload = format!("{key}-{round}");
            let want = iggy_common::calculate_32(key.as_bytes()) % partitions;
            let mut m = vec![msg(payload.clone())];
            let r = ok(
                "send keyed",
                within(
                    "send",
                    client.send_messages(&name("s"), &name("t"), &Partitioning::messages_key_str(key).unwrap(), &mut m),
                )
                .await,
            );
            assert_eq!(r.confirmations.len(), 1);
            assert_eq!(r.confirmations[0].partition_id, want, "key {key:?} -> xxh32 % {partitions}");
            expected.entry(want).or_default().push(payload);
        }
    }
    for p in 0..partitions {
        let polled = poll(&client, &name("s"), &name("t"), p, &consumer("c"), PollingStrategy::first(), 100, false).await;
        assert_eq!(payloads(&polled), expected.get(&p).cloned().unwrap_or_default(), "partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_headers_and_message_ids_round_trip() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;

    let mut headers: BTreeMap<HeaderKey, HeaderValue> = BTreeMap::new();
    headers.insert(HeaderKey::from_str("content-type").unwrap(), HeaderValue::from_str("application/json").unwrap());
    headers.insert(HeaderKey::from_str("flag").unwrap(), HeaderValue::from(true));
    headers.insert(HeaderKey::from_str("count").unwrap(), HeaderValue::from(123_456_789_012u64));
    headers.insert(HeaderKey::from_str("delta").unwrap(), HeaderValue::from(-42i32));
    headers.insert(HeaderKey::from_str("ratio").unwrap(), HeaderValue::from(0.25f64));
    headers.insert(HeaderKey::from_str("big").unwrap(), HeaderValue::from(u128::MAX - 7));
    headers.insert(
        HeaderKey::from_str("blob").unwrap(),
        HeaderValue::try_from(&[0u8, 1, 2, 254, 255][..]).unwrap(),
    );
    let with_headers = IggyMessage::builder()
        .id(42)
        .payload(bytes::Bytes::from_static(b"with headers"))
        .user_headers(headers.clone())
        .build()
        .unwrap();
    let plain = IggyMessage::builder()
        .id(0xDEAD_BEEF_0000_0000_0000_0000_0000_0001)
        .payload(bytes::Bytes::from_static(b"plain"))
        .build()
        .unwrap();
    let origin = with_headers.header.origin_timestamp;
    send_to_partition(&client, &name("s"), &name("t"), 0, vec![with_headers, plain]).await;

    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(polled.messages.len(), 2);
    let (a, b) = (&polled.messages[0], &polled.messages[1]);
    assert_eq!(a.header.id, 42, "explicit id kept");
    assert_eq!(&a.payload[..], b"with headers");
    assert_eq!(a.header.origin_timestamp, origin, "origin timestamp kept");
    let got = a.user_headers_map().expect("decodable headers").expect("headers present");
    assert_eq!(got, headers, "user headers round trip");
    assert_eq!(b.header.id, 0xDEAD_BEEF_0000_0000_0000_0000_0000_0001);
    assert_eq!(&b.payload[..], b"plain");
    assert!(b.user_headers_map().expect("decodable").is_none(), "no headers on the plain message");
    assert_eq!(b.header.user_headers_length, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_megabyte_payload_round_trips_intact() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;

    let size = 5 * 1024 * 1024;
    let big: Vec<u8> = (0..size).map(|i: usize| (i.wrapping_mul(31) ^ (i >> 8)) as u8).collect();
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg(big.clone())]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(0));
    send_to_partition(&client, &name("s"), &name("t"), 0, vec![msg("after")]).await;

    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(0), 1, false).await;
    assert_eq!(polled.messages.len(), 1);
    let m = &polled.messages[0];
    assert_eq!(m.header.payload_length as usize, size);
    assert_eq!(m.payload.len(), size);
    assert!(m.payload[..] == big[..], "5 MiB payload differs after the round trip");

    let next = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(1), 1, false).await;
    assert_eq!(payloads(&next), strs(&["after"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_batches_poll_back_in_order() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    for b in 0..20 {
        send_to_partition(&client, &name("s"), &name("t"), 0, msgs(&format!("b{b}"), 5)).await;
    }
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(0), 1000, false).await;
    assert_eq!(offsets(&polled), (0..100).collect::<Vec<u64>>());
    let expected: Vec<String> = (0..20).flat_map(|b| (0..5).map(move |i| format!("b{b}-{i}"))).collect();
    assert_eq!(payloads(&polled), expected);
    // A poll that starts inside a batch.
    let mid = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::offset(47), 6, false).await;
    assert_eq!(offsets(&mid), vec![47, 48, 49, 50, 51, 52]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_missing_partition_fails_with_partition_not_found() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    let mut m = msgs("x", 1);
    expect_code(
        "send to partition 2 of a 2-partition topic",
        within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(2), &mut m)).await,
        3007,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_consumer_without_partition_reads_partition_zero() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("zero", 2)).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("one", 2)).await;
    let c = consumer("c");
    let polled = ok(
        "poll without partition",
        within("poll", client.poll_messages(&name("s"), &name("t"), None, &c, &PollingStrategy::first(), 10, false)).await,
    );
    assert_eq!(payloads(&polled), strs(&["zero-0", "zero-1"]));
    assert_eq!(polled.partition_id, 0);
    // Offset writes without a partition are refused by the SDK itself (InvalidIdentifier,
    // S/driver.rs:226), so only the poll is exercised here.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_timestamps_fall_within_the_send_call() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let before = IggyTimestamp::now().as_micros();
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 3)).await;
    let after = IggyTimestamp::now().as_micros();
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    for m in &polled.messages {
        assert!(
            (before..=after).contains(&m.header.timestamp),
            "offset {}: timestamp {} outside the send call [{before}, {after}]",
            m.header.offset,
            m.header.timestamp
        );
        assert!(m.header.origin_timestamp <= m.header.timestamp + 1_000_000, "origin before append");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_add_up_from_partitions_to_topic_to_stream() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    ok("create u", within("create", client.create_topic(&name("s"), "u", &topic_options(1))).await);
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("aaaa", 5)).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, vec![msg(vec![7u8; 10_000])]).await;
    send_to_partition(&client, &name("s"), &name("u"), 0, msgs("b", 2)).await;

    let t = ok("get t", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("t");
    let u = ok("get u", within("get", client.get_topic(&name("s"), &name("u"))).await).expect("u");
    let s = ok("get s", within("get", client.get_stream(&name("s"))).await).expect("s");
    let p_sum: u64 = t.partitions.iter().map(|p| p.size.as_bytes_u64()).sum();
    assert_eq!(t.size.as_bytes_u64(), p_sum, "topic size = sum of its partitions");
    assert!(t.partitions.iter().all(|p| p.size.as_bytes_u64() > 0), "non-empty partitions have a size");
    let big = t.partitions.iter().find(|p| p.id == 1).unwrap().size.as_bytes_u64();
    assert!(big >= 10_000, "partition 1 holds at least its 10 kB payload: {big}");
    assert_eq!(s.size.as_bytes_u64(), t.size.as_bytes_u64() + u.size.as_bytes_u64(), "stream size = sum of topics");
    assert_eq!((s.messages_count, t.messages_count, u.messages_count), (8, 6, 2));
    let stats = ok("stats", within("stats", client.get_stats()).await);
    assert_eq!(stats.messages_size_bytes.as_bytes_u64(), s.size.as_bytes_u64(), "stats messages_size_bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_edges_last_beyond_size_future_timestamp_and_empty_auto_commit() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let c = consumer("edge");
    let last = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::last(), 50, false).await;
    assert_eq!(offsets(&last), (0..10).collect::<Vec<u64>>(), "last with a count above the size returns everything");

    let future = IggyTimestamp::from(IggyTimestamp::now().as_micros() + 3_600_000_000);
    let none = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::timestamp(future), 10, false).await;
    assert!(none.messages.is_empty(), "nothing is newer than an hour from now");

    let past_end = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::offset(10), 10, true).await;
    assert!(past_end.messages.is_empty());
    let stored = ok("get offset", within("get", client.get_consumer_offset(&c, &name("s"), &name("t"), Some(0))).await);
    assert!(stored.is_none(), "an empty auto-commit poll stores nothing: {stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_count_one_walks_a_batch_message_by_message() {
    let server = TestServer::start();
    let client = ten_messages(&server, 1).await;
    let c = consumer("walker");
    let mut got = Vec::new();
    for _ in 0..12 {
        let p = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 1, true).await;
        assert!(p.messages.len() <= 1, "count 1 returns at most one message: {:?}", offsets(&p));
        got.extend(offsets(&p));
    }
    assert_eq!(got, (0..10).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_allowed_payload_round_trips() {
    // MAX_PAYLOAD_SIZE (64,000,000 bytes) in one message: the send frame and the poll reply
    // both stay under the 64 MiB frame limit.
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let size = MAX_PAYLOAD_SIZE as usize;
    let big: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let sent = ok(
        "send max payload",
        within_for(
            std::time::Duration::from_secs(30),
            "send",
            client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut [msg(big.clone())]),
        )
        .await,
    );
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(0));
    let polled = ok(
        "poll max payload",
        within_for(
            std::time::Duration::from_secs(30),
            "poll",
            client.poll_messages(&name("s"), &name("t"), Some(0), &consumer("c"), &PollingStrategy::offset(0), 1, false),
        )
        .await,
    );
    assert_eq!(polled.messages.len(), 1);
    assert_eq!(polled.messages[0].payload.len(), size);
    assert!(polled.messages[0].payload[..] == big[..], "payload differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_messages_are_consumed_in_order_with_auto_commit() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    for b in 0..20 {
        let batch: Vec<IggyMessage> = (0..1000).map(|i| msg(format!("{}", b * 1000 + i))).collect();
        send_to_partition(&client, &name("s"), &name("t"), 0, batch).await;
    }
    let c = consumer("bulk");
    let mut next_expected = 0u64;
    for _ in 0..25 {
        let p = poll(&client, &name("s"), &name("t"), 0, &c, PollingStrategy::next(), 1000, true).await;
        for m in &p.messages {
            assert_eq!(m.header.offset, next_expected);
            assert_eq!(String::from_utf8_lossy(&m.payload), next_expected.to_string());
            next_expected += 1;
        }
    }
    assert_eq!(next_expected, 20_000);
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("t");
    assert_eq!(t.messages_count, 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_with_a_thousand_partitions_is_listed_and_addressable() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    // A thousand partition directories, each created and fsynced: ~5 s on a quiet machine,
    // so the guard is wider than the usual call timeout (this checks behaviour, not speed).
    let t = ok(
        "create_topic",
        within_for(
            std::time::Duration::from_secs(60),
            "create_topic",
            client.create_topic(&name("s"), "t", &topic_options(1000)),
        )
        .await,
    );
    assert_eq!(t.partitions_count, 1000);
    let mut ids: Vec<u32> = t.partitions.iter().map(|p| p.id).collect();
    ids.sort();
    assert_eq!(ids, (0..1000).collect::<Vec<u32>>());
    let sent = send_to_partition(&client, &name("s"), &name("t"), 999, msgs("last", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| (c.partition_id, c.base_offset)), Some((999, 0)));
    let p = poll(&client, &name("s"), &name("t"), 999, &consumer("c"), PollingStrategy::first(), 1, false).await;
    assert_eq!(payloads(&p), strs(&["last-0"]));
}
