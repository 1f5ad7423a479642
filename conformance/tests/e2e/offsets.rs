//! Consumer offsets: store, get, delete, per consumer and per partition.

use crate::harness::*;
use iggy::prelude::*;

async fn setup(server: &TestServer) -> IggyClient {
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("m", 10)).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("z", 3)).await;
    client
}

async fn get(client: &IggyClient, c: &Consumer, partition: u32) -> Option<iggy_common::ConsumerOffsetInfo> {
    ok(
        "get_consumer_offset",
        within("get offset", client.get_consumer_offset(c, &name("s"), &name("t"), Some(partition))).await,
    )
}

async fn store(client: &IggyClient, c: &Consumer, partition: u32, offset: u64) {
    ok(
        "store_consumer_offset",
        within("store offset", client.store_consumer_offset(c, &name("s"), &name("t"), Some(partition), offset)).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_offset_is_returned_with_the_partition_current_offset() {
    let server = TestServer::start();
    let client = setup(&server).await;
    let c = consumer("c1");

    assert!(get(&client, &c, 1).await.is_none(), "no offset stored yet");
    store(&client, &c, 1, 6).await;
    let info = get(&client, &c, 1).await.expect("stored offset");
    assert_eq!((info.partition_id, info.stored_offset, info.current_offset), (1, 6, 9));
    assert!(get(&client, &c, 0).await.is_none(), "offsets are per partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_again_overwrites_the_offset() {
    let server = TestServer::start();
    let client = setup(&server).await;
    let c = consumer("c1");
    store(&client, &c, 1, 2).await;
    store(&client, &c, 1, 8).await;
    assert_eq!(get(&client, &c, 1).await.expect("offset").stored_offset, 8);
    store(&client, &c, 1, 5).await;
    assert_eq!(get(&client, &c, 1).await.expect("offset").stored_offset, 5, "moving back is allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_independent_per_consumer() {
    let server = TestServer::start();
    let client = setup(&server).await;
    let (a, b) = (consumer("a"), consumer("b"));
    store(&client, &a, 1, 3).await;
    store(&client, &b, 1, 7).await;
    store(&client, &b, 0, 1).await;
    assert_eq!(get(&client, &a, 1).await.expect("a/1").stored_offset, 3);
    assert_eq!(get(&client, &b, 1).await.expect("b/1").stored_offset, 7);
    let b0 = get(&client, &b, 0).await.expect("b/0");
    assert_eq!((b0.partition_id, b0.stored_offset, b0.current_offset), (0, 1, 2));
    assert!(get(&client, &a, 0).await.is_none());
    // Numeric consumer ids are distinct from named ones.
    let numeric = Consumer::new(id(1));
    assert!(get(&client, &numeric, 1).await.is_none());
    store(&client, &numeric, 1, 9).await;
    assert_eq!(get(&client, &numeric, 1).await.expect("numeric").stored_offset, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_offset_is_gone_and_next_restarts_from_zero() {
    let server = TestServer::start();
    let client = setup(&server).await;
    let c = consumer("c1");
    store(&client, &c, 1, 4).await;
    ok(
        "delete_consumer_offset",
        within("delete offset", client.delete_consumer_offset(&c, &name("s"), &name("t"), Some(1))).await,
    );
    assert!(get(&client, &c, 1).await.is_none(), "offset deleted");
    let polled = poll(&client, &name("s"), &name("t"), 1, &c, PollingStrategy::next(), 2, false).await;
    assert_eq!(offsets(&polled), vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_on_missing_partition_fails_with_partition_not_found() {
    let server = TestServer::start();
    let client = setup(&server).await;
    expect_code(
        "store offset on partition 5",
        within(
            "store",
            client.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(5), 0),
        )
        .await,
        3007,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_missing_offset_fails_with_3021() {
    let server = TestServer::start();
    let client = setup(&server).await;
    expect_code(
        "delete an offset never stored",
        within("delete", client.delete_consumer_offset(&consumer("nobody"), &name("s"), &name("t"), Some(1))).await,
        3021,
    );
}

/// A consumer's or a group's offset names a message the partition holds: one past its current
/// offset is refused with InvalidOffset (4100), as upstream does, and the stored offset stays.
/// (Only an external group's offset, kind 3, may exceed the range: external_offsets.rs.) A
/// next-poll after such a store would skip every message sent up to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_beyond_the_current_offset_is_refused_with_4100() {
    let server = TestServer::start();
    let client = setup(&server).await;
    ok("create group", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await);
    for c in [consumer("c1"), Consumer::group(name("g"))] {
        store(&client, &c, 1, 9).await;
        let beyond = within("store", client.store_consumer_offset(&c, &name("s"), &name("t"), Some(1), 10)).await;
        expect_code(&format!("{:?} one past the current offset", c.kind), beyond, 4100);
        let far = within("store", client.store_consumer_offset(&c, &name("s"), &name("t"), Some(1), u64::MAX)).await;
        expect_code(&format!("{:?} far past the current offset", c.kind), far, 4100);
        let info = get(&client, &c, 1).await.expect("stored offset");
        assert_eq!((info.stored_offset, info.current_offset), (9, 9), "{:?}: the refused stores changed nothing", c.kind);
    }
    // A partition that never held a message takes no offset, 0 included (upstream refuses it
    // too): stored, 0 would make the consumer's next poll skip the first message sent.
    create_stream_and_topic(&client, "e", "t", 1).await;
    for offset in [0, 1] {
        let on_empty = within("store", client.store_consumer_offset(&consumer("c1"), &name("e"), &name("t"), Some(0), offset)).await;
        expect_code(&format!("{offset} on an empty partition"), on_empty, 4100);
    }
    send_to_partition(&client, &name("e"), &name("t"), 0, msgs("m", 2)).await;
    let next = poll(&client, &name("e"), &name("t"), 0, &consumer("c1"), PollingStrategy::next(), 10, false).await;
    assert_eq!(offsets(&next), [0, 1], "the consumer reads from the first message");
    ok("store 0 once it is there", within("store", client.store_consumer_offset(&consumer("c1"), &name("e"), &name("t"), Some(0), 0)).await);
}

/// Offsets of a consumer group that does not exist: a store, a get and a delete fail with
/// ConsumerGroupIdNotFound (5000) for a numeric id and ConsumerGroupNameNotFound (5003) for a
/// name, as the SDK documents ("an absent offset key returns Ok(None) when its stream, topic,
/// and consumer group resolve"; "missing numeric and named groups return codes 5000 and 5003")
/// and upstream answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_of_a_missing_group_fail_with_group_not_found_by_id_or_name() {
    let server = TestServer::start();
    let client = setup(&server).await;
    for (missing, code) in [(Consumer::group(id(7)), 5000), (Consumer::group(name("nobody")), 5003)] {
        let stored = within("store", client.store_consumer_offset(&missing, &name("s"), &name("t"), Some(1), 1)).await;
        expect_code(&format!("store {:?}", missing.id), stored, code);
        let got = within("get", client.get_consumer_offset(&missing, &name("s"), &name("t"), Some(1))).await;
        expect_code(&format!("get {:?}", missing.id), got, code);
        let deleted = within("delete", client.delete_consumer_offset(&missing, &name("s"), &name("t"), Some(1))).await;
        expect_code(&format!("delete {:?}", missing.id), deleted, code);
    }
}

/// `[partition] consumer_offsets_max` bounds the offset keys one partition keeps, as the SDK
/// documents: a store of a new key at the limit fails with TooManyConsumerOffsets (3024),
/// existing keys (of every consumer kind) stay writable, a deleted key frees its place, a poll
/// with auto-commit that would store a new key fails with 3024 and returns no messages, and a
/// poll without auto-commit stores no key. The keys and the limit hold across a crash restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_keeps_at_most_consumer_offsets_max_keys_and_refuses_a_new_one_with_3024() {
    let mut server = TestServer::start_with_env(&[("IGGY_PARTITION_CONSUMER_OFFSETS_MAX", "3")]);
    let client = setup(&server).await;
    ok("create group", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let kept = [consumer("a"), Consumer::new(id(1)), Consumer::group(name("g"))];
    for (c, offset) in kept.iter().zip(1..) {
        store(&client, c, 1, offset).await;
    }
    let (s, t) = (name("s"), name("t"));
    let fourth = consumer("d");
    let refused = within("store", client.store_consumer_offset(&fourth, &s, &t, Some(1), 1)).await;
    assert!(matches!(refused, Err(IggyError::TooManyConsumerOffsets)), "a fourth key: {refused:?}");
    assert!(get(&client, &fourth, 1).await.is_none(), "the refused key is not kept");
    store(&client, &fourth, 0, 1).await; // another partition keeps its own keys
    for c in &kept {
        store(&client, c, 1, 8).await;
        assert_eq!(get(&client, c, 1).await.expect("kept").stored_offset, 8, "{:?} still updates", c.id);
    }

    // A poll with auto-commit that needs a new key: 3024 and no messages; one of a kept key
    // commits as ever; one without auto-commit is served and stores nothing.
    let polled = within("poll", client.poll_messages(&s, &t, Some(1), &fourth, &PollingStrategy::offset(0), 5, true)).await;
    expect_code("a poll with auto-commit of a new key at the limit", polled, 3024);
    assert!(get(&client, &fourth, 1).await.is_none(), "the refused poll stored no key");
    let polled = poll(&client, &s, &t, 1, &kept[0], PollingStrategy::offset(0), 5, true).await;
    assert_eq!(offsets(&polled), vec![0, 1, 2, 3, 4]);
    assert_eq!(get(&client, &kept[0], 1).await.expect("kept").stored_offset, 4, "auto-committed");
    let polled = poll(&client, &s, &t, 1, &fourth, PollingStrategy::next(), 5, false).await;
    assert_eq!(offsets(&polled), vec![0, 1, 2, 3, 4]);
    assert!(get(&client, &fourth, 1).await.is_none(), "a poll without auto-commit stores no key");

    server.kill9_and_restart();
    let client = server.root_client().await;
    for c in &kept {
        assert!(get(&client, c, 1).await.is_some(), "{:?} kept across the restart", c.id);
    }
    let refused = within("store", client.store_consumer_offset(&fourth, &s, &t, Some(1), 1)).await;
    expect_code("a fourth key after the restart", refused, 3024);

    ok("delete", within("delete", client.delete_consumer_offset(&kept[1], &s, &t, Some(1))).await);
    store(&client, &fourth, 1, 2).await;
    assert_eq!(get(&client, &fourth, 1).await.expect("stored").stored_offset, 2, "a deleted key freed its place");
    let refused = within("store", client.store_consumer_offset(&kept[1], &s, &t, Some(1), 1)).await;
    expect_code("the deleted key is new again", refused, 3024);
}
