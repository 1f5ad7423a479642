//! The high-level SDK: `IggyProducer` and `IggyConsumer`, standalone and in a consumer group.

use crate::harness::*;
use futures_util::StreamExt;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::time::Duration;

fn direct() -> DirectConfig {
    DirectConfig::builder().build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_creates_stream_and_topic_and_a_consumer_reads_in_order() {
    let server = TestServer::start();
    let client = server.root_client().await;

    let producer = client
        .producer("auto-stream", "auto-topic")
        .unwrap()
        .direct(direct())
        .create_stream_if_not_exists()
        .create_topic_if_not_exists(2, IggyExpiry::ServerDefault, MaxTopicSize::ServerDefault)
        .partitioning(Partitioning::partition_id(1))
        .build();
    ok("producer.init", within("producer init", producer.init()).await);
    let topic = ok("get topic", within("get", client.get_topic(&name("auto-stream"), &name("auto-topic"))).await)
        .expect("the producer created the topic");
    assert_eq!(topic.partitions_count, 2);

    for chunk in 0..2 {
        let batch: Vec<IggyMessage> = (0..5).map(|i| msg(format!("p-{}", chunk * 5 + i))).collect();
        ok("producer.send", within("send", producer.send(batch)).await);
    }

    let mut consumer = client
        .consumer("reader", "auto-stream", "auto-topic", 1)
        .unwrap()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval(IggyDuration::from_str("10ms").unwrap())
        .batch_length(4)
        .build();
    ok("consumer.init", within("consumer init", consumer.init()).await);

    let mut got = Vec::new();
    while got.len() < 10 {
        let next = within("consumer.next", consumer.next()).await.expect("stream ended");
        let m = ok("consumer message", next);
        assert_eq!(m.partition_id, 1);
        got.push((m.message.header.offset, String::from_utf8_lossy(&m.message.payload).into_owned()));
    }
    let want: Vec<(u64, String)> = (0..10).map(|i| (i as u64, format!("p-{i}"))).collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_group_members_together_receive_every_message_exactly_once() {
    const PARTITIONS: u32 = 4;
    const SENDS: usize = 20;
    const PER_SEND: usize = 5;
    const TOTAL: usize = SENDS * PER_SEND;

    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", PARTITIONS).await;

    // Both members join before anything is produced, so no rebalance can hand a partition
    // over between a poll and its commit.
    let (client_a, client_b) = (server.root_client().await, server.root_client().await);
    let build = |c: &IggyClient| {
        c.consumer_group("workers", "s", "t")
            .unwrap()
            .create_consumer_group_if_not_exists()
            .auto_join_consumer_group()
            .polling_strategy(PollingStrategy::next())
            .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
            .poll_interval(IggyDuration::from_str("10ms").unwrap())
            .batch_length(7)
            .build()
    };
    let mut a = build(&client_a);
    ok("member a init", within("init a", a.init()).await);
    let mut b = build(&client_b);
    ok("member b init", within("init b", b.init()).await);

    let g = ok("get group", within("get group", admin.get_consumer_group(&name("s"), &name("t"), &name("workers"))).await)
        .expect("the consumers created the group");
    assert_eq!(g.members_count, 2, "two members joined");

    let producer = admin
        .producer("s", "t")
        .unwrap()
        .direct(direct())
        .do_not_create_stream_if_not_exists()
        .do_not_create_topic_if_not_exists()
        .partitioning(Partitioning::balanced())
        .build();
    ok("producer.init", within("producer init", producer.init()).await);
    for s in 0..SENDS {
        let batch: Vec<IggyMessage> = (0..PER_SEND).map(|i| msg(format!("w-{}", s * PER_SEND + i))).collect();
        ok("producer.send", within("send", producer.send(batch)).await);
    }

    // member -> (partition, payload) received
    let mut received: BTreeMap<&str, Vec<(u32, String)>> = BTreeMap::new();
    let collect = async {
        let mut total = 0;
        while total < TOTAL {
            tokio::select! {
                Some(m) = a.next() => {
                    let m = ok("member a message", m);
                    received.entry("a").or_default().push((m.partition_id, String::from_utf8_lossy(&m.message.payload).into_owned()));
                    total += 1;
                }
                Some(m) = b.next() => {
                    let m = ok("member b message", m);
                    received.entry("b").or_default().push((m.partition_id, String::from_utf8_lossy(&m.message.payload).into_owned()));
                    total += 1;
                }
                else => panic!("both consumer streams ended after {total} messages"),
            }
        }
        // Keep polling a little: nothing may arrive twice.
        let quiet = tokio::time::sleep(Duration::from_millis(1500));
        tokio::pin!(quiet);
        loop {
            tokio::select! {
                _ = &mut quiet => break,
                Some(m) = a.next() => {
                    let m = ok("member a message", m);
                    received.entry("a").or_default().push((m.partition_id, String::from_utf8_lossy(&m.message.payload).into_owned()));
                }
                Some(m) = b.next() => {
                    let m = ok("member b message", m);
                    received.entry("b").or_default().push((m.partition_id, String::from_utf8_lossy(&m.message.payload).into_owned()));
                }
            }
        }
    };
    within_for(Duration::from_secs(30), "consume every message", collect).await;

    let all: Vec<&String> = received.values().flatten().map(|(_, p)| p).collect();
    let unique: BTreeSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), TOTAL, "exactly {TOTAL} deliveries (duplicates: {})", all.len() - unique.len());
    let want: BTreeSet<String> = (0..TOTAL).map(|i| format!("w-{i}")).collect();
    assert_eq!(unique.into_iter().cloned().collect::<BTreeSet<String>>(), want, "every message delivered");

    let parts_a: BTreeSet<u32> = received.get("a").into_iter().flatten().map(|(p, _)| *p).collect();
    let parts_b: BTreeSet<u32> = received.get("b").into_iter().flatten().map(|(p, _)| *p).collect();
    assert!(!parts_a.is_empty() && !parts_b.is_empty(), "both members consumed: a {parts_a:?}, b {parts_b:?}");
    assert!(parts_a.is_disjoint(&parts_b), "members read disjoint partitions: a {parts_a:?}, b {parts_b:?}");
    assert_eq!(parts_a.len() + parts_b.len(), PARTITIONS as usize, "all partitions covered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacement_group_member_resumes_after_the_stored_offset() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 1).await;
    send_to_partition(&admin, &name("s"), &name("t"), 0, msgs("m", 20)).await;

    let build = |c: &IggyClient| {
        c.consumer_group("g", "s", "t")
            .unwrap()
            .create_consumer_group_if_not_exists()
            .auto_join_consumer_group()
            .polling_strategy(PollingStrategy::next())
            .auto_commit(AutoCommit::Disabled)
            .poll_interval(IggyDuration::from_str("10ms").unwrap())
            .batch_length(4)
            .build()
    };
    {
        let first_client = server.root_client().await;
        let mut first = build(&first_client);
        ok("first init", within("init", first.init()).await);
        let mut got = Vec::new();
        // AutoCommit::Disabled: the member commits each handled message itself; without
        // commits a `next` consumer stalls once it is a batch ahead of the stored offset.
        while got.len() < 10 {
            let m = ok("first message", within("next", first.next()).await.expect("stream ended"));
            assert_eq!(m.partition_id, 0);
            ok("store offset", within("store", first.store_offset(m.message.header.offset, Some(0))).await);
            got.push(m.message.header.offset);
        }
        assert_eq!(got, (0..10).collect::<Vec<u64>>());
        ok("shutdown", within("shutdown", first.shutdown()).await);
    }
    let stored = ok(
        "group offset",
        within("get", admin.get_consumer_offset(&Consumer::group(name("g")), &name("s"), &name("t"), Some(0))).await,
    )
    .expect("the group offset was stored");
    assert_eq!(stored.stored_offset, 9);

    let second_client = server.root_client().await;
    let mut second = build(&second_client);
    ok("second init", within("init", second.init()).await);
    let mut got = Vec::new();
    while got.len() < 10 {
        let m = ok("second message", within("next", second.next()).await.expect("stream ended"));
        ok("store offset", within("store", second.store_offset(m.message.header.offset, Some(0))).await);
        got.push(m.message.header.offset);
    }
    assert_eq!(got, (10..20).collect::<Vec<u64>>(), "the new member continues after offset 9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_producer_delivers_every_message_after_shutdown() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 3).await;
    let producer = client
        .producer("s", "t")
        .unwrap()
        .background(BackgroundConfig::builder().build())
        .partitioning(Partitioning::balanced())
        .build();
    ok("producer init", within("init", producer.init()).await);
    for b in 0..30 {
        let batch: Vec<IggyMessage> = (0..10).map(|i| msg(format!("bg-{}", b * 10 + i))).collect();
        ok("queue batch", within("send", producer.send(batch)).await);
    }
    within("producer shutdown", producer.shutdown()).await;

    let mut all = Vec::new();
    for p in 0..3 {
        let polled = poll(&client, &name("s"), &name("t"), p, &consumer("c"), PollingStrategy::first(), 10_000, false).await;
        all.extend(payloads(&polled));
    }
    all.sort();
    let mut want: Vec<String> = (0..300).map(|i| format!("bg-{i}")).collect();
    want.sort();
    assert_eq!(all, want, "every queued message is stored exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_joining_mid_stream_loses_and_duplicates_nothing() {
    const TOTAL: usize = 120;
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 4).await;
    for i in 0..TOTAL {
        send_to_partition(&admin, &name("s"), &name("t"), (i % 4) as u32, vec![msg(format!("w-{i}"))]).await;
    }
    let build = |c: &IggyClient| {
        c.consumer_group("g", "s", "t")
            .unwrap()
            .create_consumer_group_if_not_exists()
            .auto_join_consumer_group()
            .polling_strategy(PollingStrategy::next())
            .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
            .poll_interval(IggyDuration::from_str("10ms").unwrap())
            .batch_length(5)
            .build()
    };
    let (ca, cb) = (server.root_client().await, server.root_client().await);
    let mut a = build(&ca);
    ok("a init", within("init", a.init()).await);
    let mut seen: Vec<String> = Vec::new();
    while seen.len() < 30 {
        let m = ok("a message", within("next", a.next()).await.expect("stream ended"));
        seen.push(String::from_utf8_lossy(&m.message.payload).into_owned());
    }
    let mut b = build(&cb);
    ok("b init", within("init", b.init()).await);
    let g = ok("group", within("get", admin.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(g.members_count, 2);

    let collect = async {
        loop {
            let unique: BTreeSet<&String> = seen.iter().collect();
            if unique.len() >= TOTAL {
                break;
            }
            tokio::select! {
                Some(m) = a.next() => seen.push(String::from_utf8_lossy(&ok("a", m).message.payload).into_owned()),
                Some(m) = b.next() => seen.push(String::from_utf8_lossy(&ok("b", m).message.payload).into_owned()),
                else => panic!("both consumers ended"),
            }
        }
        let quiet = tokio::time::sleep(Duration::from_millis(1500));
        tokio::pin!(quiet);
        loop {
            tokio::select! {
                _ = &mut quiet => break,
                Some(m) = a.next() => seen.push(String::from_utf8_lossy(&ok("a", m).message.payload).into_owned()),
                Some(m) = b.next() => seen.push(String::from_utf8_lossy(&ok("b", m).message.payload).into_owned()),
            }
        }
    };
    within_for(Duration::from_secs(30), "consume the rest", collect).await;
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    let want: BTreeSet<String> = (0..TOTAL).map(|i| format!("w-{i}")).collect();
    assert_eq!(unique, want, "nothing lost");
    assert_eq!(seen.len(), TOTAL, "nothing delivered twice ({} deliveries)", seen.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_shutdown_leaves_the_group() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    let c = server.root_client().await;
    let mut consumer = c
        .consumer_group("g", "s", "t")
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .build();
    ok("init", within("init", consumer.init()).await);
    let g = ok("group", within("get", admin.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(g.members_count, 1);
    ok("shutdown", within("shutdown", consumer.shutdown()).await);
    let g = ok("group", within("get", admin.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(g.members_count, 0, "shutdown leaves the group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_consumer_continues_across_a_server_restart_without_loss() {
    const HALF: usize = 40;
    let mut server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    for i in 0..HALF {
        send_to_partition(&admin, &name("s"), &name("t"), (i % 2) as u32, vec![msg(format!("w-{i}"))]).await;
    }
    let cc = server.root_client().await;
    let mut consumer = cc
        .consumer_group("g", "s", "t")
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval(IggyDuration::from_str("10ms").unwrap())
        .batch_length(5)
        .build();
    ok("init", within("init", consumer.init()).await);
    let mut seen: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    while seen.len() < HALF {
        match within("next", consumer.next()).await.expect("stream ended") {
            Ok(m) => seen.push(String::from_utf8_lossy(&m.message.payload).into_owned()),
            Err(e) => errors.push(format!("{e} ({})", e.as_code())),
        }
    }
    tokio::task::block_in_place(|| server.restart());
    for i in HALF..2 * HALF {
        send_to_partition(&admin, &name("s"), &name("t"), (i % 2) as u32, vec![msg(format!("w-{i}"))]).await;
    }
    let rest = async {
        loop {
            let unique: BTreeSet<&String> = seen.iter().collect();
            if unique.len() >= 2 * HALF {
                break;
            }
            match consumer.next().await.expect("stream ended") {
                Ok(m) => seen.push(String::from_utf8_lossy(&m.message.payload).into_owned()),
                Err(e) => errors.push(format!("{e} ({})", e.as_code())),
            }
        }
    };
    within_for(Duration::from_secs(40), "consume after restart", rest).await;
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    let want: BTreeSet<String> = (0..2 * HALF).map(|i| format!("w-{i}")).collect();
    assert_eq!(unique, want, "nothing lost across the restart (errors: {errors:?})");
    assert_eq!(seen.len(), 2 * HALF, "nothing delivered twice (errors: {errors:?})");
}

/// A member's shutdown commits the reading position of every partition it read, one it lost
/// to another member since included: that commit is refused (the position's owner generation
/// is not the partition's current owner's), so the new owner's offset stays and a member
/// joining later reads on after it rather than again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_shutdown_leaves_the_offset_of_a_partition_it_lost_where_the_new_owner_got() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    for p in 0..2 {
        send_to_partition(&admin, &name("s"), &name("t"), p, msgs(&format!("p{p}"), 20)).await;
    }
    let (ca, cb) = (server.root_client().await, server.root_client().await);
    // a, alone, owns both partitions and reads until it has a message of partition 1.
    let mut a = group_member(&ca, "g");
    ok("a init", within("init", a.init()).await);
    loop {
        let m = ok("a message", within("next", a.next()).await.expect("stream ended"));
        if m.partition_id == 1 {
            break;
        }
    }
    // b joins, takes partition 1 and reads it to the end.
    let mut b = group_member(&cb, "g");
    ok("b init", within("init", b.init()).await);
    let mut read_by_b = Vec::new();
    while read_by_b.last() != Some(&19) {
        let m = ok("b message", within("next", b.next()).await.expect("stream ended"));
        assert_eq!(m.partition_id, 1, "b owns partition 1");
        read_by_b.push(m.message.header.offset);
    }
    let group_offset = async || {
        let info = within("get", admin.get_consumer_offset(&Consumer::group(name("g")), &name("s"), &name("t"), Some(1))).await;
        ok("group offset", info).map(|o| o.stored_offset)
    };
    assert_eq!(group_offset().await, Some(19));
    ok("a shutdown", within("shutdown", a.shutdown()).await);
    assert_eq!(group_offset().await, Some(19), "a's shutdown left b's offset of partition 1");
}
