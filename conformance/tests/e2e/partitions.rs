//! Partitions: add and delete.

use crate::harness::*;
use iggy::prelude::*;

async fn topic(client: &IggyClient) -> TopicDetails {
    ok("get topic", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic t")
}

fn ids(t: &TopicDetails) -> Vec<u32> {
    let mut ids: Vec<u32> = t.partitions.iter().map(|p| p.id).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_appends_partitions_with_next_ids() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;

    ok("create 3 partitions", within("create", client.create_partitions(&name("s"), &name("t"), 3)).await);
    let t = topic(&client).await;
    assert_eq!(t.partitions_count, 5);
    assert_eq!(ids(&t), vec![0, 1, 2, 3, 4]);

    // The new partitions take messages.
    let sent = send_to_partition(&client, &name("s"), &name("t"), 4, msgs("p4", 2)).await;
    assert_eq!(sent.confirmations.len(), 1, "one confirmation: {sent:?}");
    assert_eq!(sent.confirmations[0].partition_id, 4);
    assert_eq!(sent.confirmations[0].base_offset, 0);
    let polled = poll(&client, &name("s"), &name("t"), 4, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&polled), vec!["p4-0", "p4-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_partitions_removes_the_highest_partitions() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 5).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("keep", 2)).await;

    ok("delete 2 partitions", within("delete", client.delete_partitions(&name("s"), &name("t"), 2)).await);
    let t = topic(&client).await;
    assert_eq!(t.partitions_count, 3);
    assert_eq!(ids(&t), vec![0, 1, 2]);

    let polled = poll(&client, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&polled), vec!["keep-0", "keep-1"], "partition 0 keeps its messages");

    let mut m = msgs("gone", 1);
    expect_code(
        "send to a deleted partition",
        within(
            "send",
            client.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(4), &mut m),
        )
        .await,
        3007,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_on_missing_topic_fails_with_topic_not_found() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create s", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    expect_code(
        "create partitions on a missing topic",
        within("create", client.create_partitions(&name("s"), &id(3), 1)).await,
        2010,
    );
}

/// A partition the model already shows but this node is still opening (a create's disk effects
/// run a moment after its apply; a debug-build hook slows every open to 3 s) is waited for by
/// another client's send and poll, which the SDK makes as soon as the topic shows: neither is
/// told PartitionNotFound for a partition that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_send_and_poll_wait_for_a_partition_the_node_is_still_opening() {
    let server = TestServer::start_with_env(&[("IGGY_DEBUG_PARTITION_OPEN_DELAY_MS", "3000")]);
    let creator = server.root_client().await;
    let other = server.root_client().await;
    ok("create_stream", within("create_stream", creator.create_stream("s", &StreamCreateOptions::default())).await);
    let create = tokio::spawn(async move {
        creator.create_topic(&name("s"), "t", &topic_options(2)).await.map(|topic| topic.partitions_count)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ok("get topic", within("get", other.get_topic(&name("s"), &name("t"))).await).is_none() {
        assert!(std::time::Instant::now() < deadline, "the topic never showed");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!create.is_finished(), "the create answered before the other client saw the topic: the window this test needs did not occur");
    let (s, t, c) = (name("s"), name("t"), consumer("c"));
    let (to_partition_1, from_offset_0, mut messages) = (Partitioning::partition_id(1), PollingStrategy::offset(0), vec![msg("early")]);
    let (sent, polled) = tokio::join!(
        within("send_messages", other.send_messages(&s, &t, &to_partition_1, &mut messages)),
        within("poll_messages", other.poll_messages(&s, &t, Some(0), &c, &from_offset_0, 1, false)),
    );
    ok("send to a partition still opening", sent);
    assert!(ok("poll a partition still opening", polled).messages.is_empty());
    assert_eq!(create.await.expect("create task").expect("create_topic"), 2);
    let polled = poll(&other, &name("s"), &name("t"), 1, &consumer("c"), PollingStrategy::offset(0), 1, false).await;
    assert_eq!(payloads(&polled), ["early"]);
}
