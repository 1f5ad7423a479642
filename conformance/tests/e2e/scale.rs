//! Scale: many clients at once over every binary transport, leaving without a logout; a wide
//! topic in a cluster.
//! `SCALE_CLIENTS=N` (default 30) sets the clients per transport, `SCALE_PARTITIONS=N` (default
//! 100) the partitions of the topic a cluster creates; the long forms run hundreds and 1000.

use crate::harness::*;
use iggy::prelude::*;

fn clients_per_transport() -> usize {
    std::env::var("SCALE_CLIENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30)
}

/// Connects and signs in through `url`, sends one message to partition 0 and polls it back
/// from its own consumer; the client is dropped without a logout.
async fn one_client(url: String, index: usize) -> Result<(), String> {
    let client = IggyClient::from_connection_string(&url).map_err(|e| e.to_string())?;
    let limit = std::time::Duration::from_secs(60);
    let step = |what: &'static str, r: Result<(), IggyError>| {
        r.map_err(|e| format!("client {index} {url}: {what}: {e} (code {})", e.as_code()))
    };
    let timed = |what: &'static str| format!("client {index} {url}: {what} timed out");
    tokio::time::timeout(limit, client.connect())
        .await
        .map_err(|_| timed("connect"))
        .and_then(|r| step("connect", r))?;
    let mut messages = vec![msg(format!("from {index}"))];
    let partitioning = Partitioning::partition_id(0);
    tokio::time::timeout(
        limit,
        client.send_messages(&name("s"), &name("t"), &partitioning, &mut messages),
    )
    .await
    .map_err(|_| timed("send"))
    .and_then(|r| step("send", r.map(|_| ())))?;
    let consumer = Consumer::new(Identifier::numeric(index as u32 + 1).unwrap());
    tokio::time::timeout(
        limit,
        client.poll_messages(
            &name("s"),
            &name("t"),
            Some(0),
            &consumer,
            &PollingStrategy::offset(0),
            10,
            false,
        ),
    )
    .await
    .map_err(|_| timed("poll"))
    .and_then(|r| {
        r.map(|_| ())
            .map_err(|e| format!("client {index}: poll: {e}"))
    })?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_over_every_transport_at_once_are_served_and_may_leave_without_logout() {
    let ws_port = free_port();
    let ws_address = format!("127.0.0.1:{ws_port}");
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", ws_address.as_str()),
    ]);
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 1).await;
    let metadata = ok(
        "cluster metadata",
        within("metadata", admin.get_cluster_metadata()).await,
    );
    let quic_port = metadata.nodes[0].endpoints.quic;
    let per_transport = clients_per_transport();
    let urls = [
        format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", server.address()),
        format!("iggy+quic://{ROOT_USER}:{ROOT_PASSWORD}@127.0.0.1:{quic_port}"),
        format!("iggy+ws://{ROOT_USER}:{ROOT_PASSWORD}@{ws_address}"),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..per_transport * urls.len() {
        let url = urls[index % urls.len()].clone();
        tasks.spawn(one_client(url, index));
    }
    let mut failures = Vec::new();
    while let Some(result) = tasks.join_next().await {
        if let Err(failure) = result.expect("client task") {
            failures.push(failure);
        }
    }
    assert!(
        failures.is_empty(),
        "{} clients failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );

    let stats = ok("stats", within("stats", admin.get_stats()).await);
    assert_eq!(
        stats.messages_count,
        (per_transport * urls.len()) as u64,
        "every send is stored"
    );
    let late = server.root_client().await;
    ok("streams", within("streams", late.get_streams()).await);
}

/// Partitions of the wide topic a cluster creates (`SCALE_PARTITIONS`, default 100).
fn wide_topic_partitions() -> u32 {
    std::env::var("SCALE_PARTITIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_creates_a_wide_topic_and_keeps_its_metadata_primary() {
    use crate::test_cluster::{METADATA_GROUP, TestCluster};
    let cluster = TestCluster::start(3);
    let client = cluster.root_client(0).await;
    ok(
        "create_stream",
        within(
            "create_stream",
            client.create_stream("s", &StreamCreateOptions::default()),
        )
        .await,
    );
    let before = cluster.primary(METADATA_GROUP);
    let partitions = wide_topic_partitions();
    let topic = ok(
        "create_topic",
        within_for(
            std::time::Duration::from_secs(120),
            "create_topic",
            client.create_topic(&name("s"), "wide", &topic_options(partitions)),
        )
        .await,
    );
    assert_eq!(topic.partitions_count, partitions);
    // Every node applied the create without falling silent for a heartbeat timeout.
    assert_eq!(
        cluster.primary(METADATA_GROUP),
        before,
        "the metadata group changed views while the partitions opened"
    );
    let last = partitions - 1;
    send_to_partition(&client, &name("s"), &name("wide"), last, vec![msg("last")]).await;
    let polled = poll(
        &client,
        &name("s"),
        &name("wide"),
        last,
        &consumer("c"),
        PollingStrategy::offset(0),
        1,
        false,
    )
    .await;
    assert_eq!(payloads(&polled), ["last"]);
}

/// A metadata op whose disk effects outlast the heartbeat timeout (every node's partition opens
/// slowed past the harness's 2 s by a debug-build hook, as a slow disk or a 1000-partition topic
/// on a debug build would) keeps its group's primary and view: the replicas answer and send
/// heartbeats while the effects run, and the client gets its normal reply once the partitions
/// are open here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_its_metadata_primary_while_a_slow_create_opens_its_partitions() {
    use crate::test_cluster::{ClusterOptions, METADATA_GROUP, TestCluster};
    let options = ClusterOptions {
        env: vec![("IGGY_DEBUG_PARTITION_OPEN_DELAY_MS".to_string(), "4000".to_string())],
        ..Default::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let client = cluster.root_client(0).await;
    ok("create_stream", within("create_stream", client.create_stream("s", &StreamCreateOptions::default())).await);
    let before = cluster.primary(METADATA_GROUP);
    assert!(before.is_some(), "the metadata group has a primary");
    let started = std::time::Instant::now();
    let topic = ok(
        "create_topic",
        within_for(std::time::Duration::from_secs(60), "create_topic", client.create_topic(&name("s"), "slow", &topic_options(4))).await,
    );
    assert_eq!(topic.partitions_count, 4);
    assert!(started.elapsed() >= std::time::Duration::from_secs(4), "the reply waits for the partitions to open on the node that answered: {:?}", started.elapsed());
    // The client that got "created" sends to the new partitions at once.
    send_to_partition(&client, &name("s"), &name("slow"), 3, vec![msg("at once")]).await;
    let polled = poll(&client, &name("s"), &name("slow"), 3, &consumer("c"), PollingStrategy::offset(0), 1, false).await;
    assert_eq!(payloads(&polled), ["at once"]);
    // A metadata write after it commits in the same view.
    ok("create_stream", within("create_stream", client.create_stream("t", &StreamCreateOptions::default())).await);
    // Long enough for a timeout the stall started to have shown in the roles.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(cluster.primary(METADATA_GROUP), before, "the metadata group changed views while the partitions opened");
}
