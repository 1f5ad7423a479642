//! Resource lifecycles seen by a client whose cached routes go stale: a topic, stream or
//! partition deleted and recreated under the same name is a new history (new incarnation),
//! and the SDK must land on it, never on the old data.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_and_poll_after_topic_recreated_reach_the_new_topic() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("old", 3)).await;
    let old = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(offsets(&old), vec![0, 1, 2]);

    ok("delete topic", within("delete", client.delete_topic(&name("s"), &name("t"))).await);
    ok("recreate topic", within("create", client.create_topic(&name("s"), "t", &topic_options(1))).await);

    // The same client: its cached route names the old incarnation.
    let sent = send_to_partition(&client, &name("s"), &name("t"), 0, msgs("new", 2)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(0), "a fresh partition starts at 0");
    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&polled), vec!["new-0", "new-1"], "no old message in the recreated topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_do_not_carry_over_to_a_recreated_topic() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("old", 5)).await;
    ok("store", within("store", client.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 3)).await);

    ok("delete topic", within("delete", client.delete_topic(&name("s"), &name("t"))).await);
    ok("recreate topic", within("create", client.create_topic(&name("s"), "t", &topic_options(1))).await);
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("new", 5)).await;

    let off = ok("get offset", within("get", client.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await);
    assert!(off.is_none(), "the old topic's offset is gone: {off:?}");
    let next = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::next(), 2, false).await;
    assert_eq!(payloads(&next), vec!["new-0", "new-1"], "next starts at 0 on the new topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_recreated_under_the_same_name_is_empty() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("old", 4)).await;
    ok("create group", within("cg", client.create_consumer_group(&name("s"), &name("t"), "g")).await);

    ok("delete stream", within("delete", client.delete_stream(&name("s"))).await);
    let (s, t) = create_stream_and_topic(&client, "s", "t", 2).await;
    assert_eq!((s.id, t.id, t.messages_count), (0, 0, 0));
    let polled = poll(&client, &name("s"), &name("t"), 1, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert!(polled.messages.is_empty(), "old messages leaked into the new stream: {:?}", payloads(&polled));
    let groups = ok("list groups", within("list", client.get_consumer_groups(&name("s"), &name("t"))).await);
    assert!(groups.is_empty(), "old groups leaked into the new topic");
    let sent = send_to_partition(&client, &name("s"), &name("t"), 1, msgs("new", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_deleted_and_added_again_starts_empty() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("old", 3)).await;

    ok("delete 1 partition", within("delete", client.delete_partitions(&name("s"), &name("t"), 1)).await);
    ok("add 1 partition", within("create", client.create_partitions(&name("s"), &name("t"), 1)).await);
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic");
    assert_eq!((t.partitions_count, t.messages_count), (2, 0));

    let polled = poll(&client, &name("s"), &name("t"), 1, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert!(polled.messages.is_empty(), "old messages in the re-added partition: {:?}", payloads(&polled));
    let sent = send_to_partition(&client, &name("s"), &name("t"), 1, msgs("new", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| (c.partition_id, c.base_offset)), Some((1, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_send_after_partitions_added_uses_the_new_count() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let mut m = msgs("a", 1);
    ok("balanced send", within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::balanced(), &mut m)).await);
    ok("add partitions", within("create", client.create_partitions(&name("s"), &name("t"), 2)).await);

    let mut seen = std::collections::BTreeSet::new();
    for i in 0..6 {
        let mut m = vec![msg(format!("b-{i}"))];
        let r = ok("balanced send", within("send", client.send_messages(&name("s"), &name("t"), &Partitioning::balanced(), &mut m)).await);
        seen.insert(r.confirmations[0].partition_id);
    }
    assert_eq!(seen, std::collections::BTreeSet::from([0, 1, 2]), "the new partitions receive balanced sends");
}
