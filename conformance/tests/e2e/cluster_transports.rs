//! The official SDK against a three-node cluster over QUIC, over WebSocket and over HTTP, not
//! only TCP: the binary transports discover the roster from the one node they are given and
//! follow a partition primary through kill -9 and back; the HTTP client, which cannot route,
//! keeps writing through the one node it is given while the metadata primary dies.

use crate::cluster::*;
use crate::harness::*;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
enum BinaryTransport {
    Quic,
    WebSocket,
}

impl BinaryTransport {
    fn options(self) -> ClusterOptions {
        ClusterOptions {
            quic: matches!(self, Self::Quic),
            websocket: matches!(self, Self::WebSocket),
            ..ClusterOptions::default()
        }
    }

    /// Node i's address for this transport, as the roster names it.
    fn address(self, cluster: &TestCluster, i: usize) -> String {
        match self {
            Self::Quic => cluster.quic_address(i),
            Self::WebSocket => cluster.websocket_address(i),
        }
    }

    fn connection_string(self, address: &str) -> String {
        let scheme = match self {
            Self::Quic => "iggy+quic",
            Self::WebSocket => "iggy+ws",
        };
        format!("{scheme}://{ROOT_USER}:{ROOT_PASSWORD}@{address}")
    }

    /// The port the roster advertises for this transport.
    fn advertised(self, endpoints: &TransportEndpoints) -> u16 {
        match self {
            Self::Quic => endpoints.quic,
            Self::WebSocket => endpoints.websocket,
        }
    }
}

/// A root client over `transport`, given node i only, once the root user exists there.
async fn root_client_over(
    cluster: &TestCluster,
    transport: BinaryTransport,
    i: usize,
) -> IggyClient {
    let connection = transport.connection_string(&transport.address(cluster, i));
    signed_in(
        &connection,
        &format!("root signs in over {transport:?} on node {i}"),
    )
    .await
}

/// Each partition's primary as the nodes' logs tell.
fn primaries(cluster: &TestCluster, groups: &[u64]) -> Vec<(u8, u32)> {
    groups
        .iter()
        .map(|&g| {
            cluster
                .primary(g)
                .unwrap_or_else(|| panic!("{}", cluster.describe(g)))
        })
        .collect()
}

/// Which partition primary a test kills; never the node the client was given.
#[derive(Debug, Clone, Copy)]
enum Victim {
    /// The node that is neither the one the client was given nor the metadata primary: only a
    /// partition changes views.
    ThirdNode,
    /// The metadata primary, which leads a partition too: the metadata group changes views
    /// as well, and the SDK must find its new Leader.
    MetadataPrimary,
}

/// Three nodes with `transport` on; the SDK over it is given a backup of the metadata group
/// and learns the other nodes from the roster (whose ports for the transport are the nodes'
/// own), creates a topic whose three partitions are led by the three nodes, sends to each and
/// reads each back once, in order. Then the `victim`, a partition's primary, is killed -9
/// under a producer: that partition's sends succeed again on its new primary, the node
/// restarts and takes the partition back (so the client must dial it again over the
/// transport), and every acknowledged message is read back exactly once.
async fn sdk_over_a_binary_transport_follows_a_killed_partition_primary(
    transport: BinaryTransport,
    victim: Victim,
) {
    let mut cluster = TestCluster::start_with(3, transport.options());
    let (metadata_primary, backup) = metadata_primary_and_backup(&cluster).await;
    let client = Arc::new(root_client_over(&cluster, transport, backup).await);

    let metadata = ok(
        "get_cluster_metadata",
        within("roster", client.get_cluster_metadata()).await,
    );
    let ids: BTreeSet<u8> = metadata.nodes.iter().map(|n| n.replica_id).collect();
    assert_eq!(ids, BTreeSet::from([0, 1, 2]), "{metadata:?}");
    for node in &metadata.nodes {
        let i = usize::from(node.replica_id);
        let advertised = format!("{}:{}", node.ip, transport.advertised(&node.endpoints));
        assert_eq!(
            advertised,
            transport.address(&cluster, i),
            "node {i}'s {transport:?} endpoint: {metadata:?}"
        );
    }

    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let led_by: BTreeSet<u8> = primaries(&cluster, &partition_groups)
        .iter()
        .map(|&(primary, _)| primary)
        .collect();
    assert_eq!(led_by, BTreeSet::from([0, 1, 2]), "partition primaries");
    // Two of the three partitions are led by nodes the client was not given: only links to
    // the roster's other nodes reach them.
    send_numbered(&client, (stream, topic), 3, 12, 3).await;
    read_numbered(&client, (stream, topic), 3, 12).await;

    let (partition, group, killed, view) = primaries(&cluster, &partition_groups)
        .into_iter()
        .zip(partition_groups.iter())
        .enumerate()
        .find_map(|(partition, ((primary, view), &group))| {
            let node = usize::from(primary);
            let wanted = match victim {
                Victim::ThirdNode => node != backup && node != metadata_primary,
                Victim::MetadataPrimary => node == metadata_primary,
            };
            wanted.then_some((partition, group, node, view))
        })
        .unwrap_or_else(|| panic!("a partition led by the {victim:?} node"));
    eprintln!(
        "{transport:?} client on node {backup}; metadata primary {metadata_primary}; killing \
         node {killed}, primary of partition {partition} in view {view}"
    );
    let producer = Producer::start(client.clone(), stream, topic, 3);
    producer
        .wait_progress("before the kill", 3, Duration::from_secs(30))
        .await;
    cluster.kill9(killed);
    let stand_in = cluster.wait_new_primary(group, killed, view).await;
    // Every partition, the killed one included, acknowledges more sends: that one's go to the
    // stand-in now.
    producer
        .wait_progress("its primary killed", 4, Duration::from_secs(60))
        .await;

    cluster.restart(killed);
    let groups = all_groups(&partition_groups);
    cluster.wait_normal(killed, &groups).await;
    wait_until(
        &format!("node {killed} leads group {group:#x} again"),
        Duration::from_secs(60),
        || {
            let back = |i: usize| {
                cluster
                    .role(i, group)
                    .is_some_and(|r| r.normal && usize::from(r.primary) == killed && r.view > view)
            };
            (back(killed) && back(usize::from(stand_in))).then_some(())
        },
        || cluster.describe(group),
    )
    .await;
    producer
        .wait_progress("back on the restarted node", 4, Duration::from_secs(60))
        .await;
    let failures = producer.failures();
    let acked = producer.finish().await;

    let acked: Vec<Vec<String>> = acked
        .into_iter()
        .enumerate()
        .map(|(partition, sent)| {
            (0..12)
                .map(|i| format!("p{partition}-{i}"))
                .chain(sent)
                .collect()
        })
        .collect();
    let stored = assert_acknowledged_exactly_once(&client, stream, topic, &acked).await;
    eprintln!(
        "{transport:?}: acknowledged {:?}, stored {:?}, failed sends {failures:?}",
        acked.iter().map(Vec::len).collect::<Vec<_>>(),
        stored.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_over_quic_given_a_backup_follows_a_killed_partition_primary() {
    let transport = BinaryTransport::Quic;
    sdk_over_a_binary_transport_follows_a_killed_partition_primary(transport, Victim::ThirdNode)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_over_websocket_given_a_backup_follows_a_killed_metadata_and_partition_primary() {
    let transport = BinaryTransport::WebSocket;
    let victim = Victim::MetadataPrimary;
    sdk_over_a_binary_transport_follows_a_killed_partition_primary(transport, victim).await;
}

/// What became of the HTTP sends of one partition.
#[derive(Default)]
struct HttpSends {
    /// Acknowledged (2xx), in order.
    acked: Vec<String>,
    /// Answered 57 (a relayed write whose forward went unanswered: it may have committed).
    uncertain: Vec<String>,
    /// Still 503 after the client's own resends: not executed (the node could not reach the
    /// group's primary in time, as during a view change on a loaded machine).
    unavailable: Vec<String>,
    /// Failed with any other error, with the error.
    refused: Vec<(String, String)>,
}

/// One HTTP sending task per partition: one message per call, numbered, each sorted by its
/// outcome.
struct HttpProducer {
    sends: Arc<Vec<std::sync::Mutex<HttpSends>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl HttpProducer {
    fn start(client: Arc<IggyClient>, stream: u32, topic: u32, partitions: u32) -> Self {
        use std::sync::atomic::Ordering;
        let sends: Arc<Vec<std::sync::Mutex<HttpSends>>> =
            Arc::new((0..partitions).map(|_| Default::default()).collect());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..partitions)
            .map(|partition| {
                let (client, sends, stop) = (client.clone(), sends.clone(), stop.clone());
                tokio::spawn(async move {
                    let (stream, topic) = (id(stream), id(topic));
                    let mut number = 0_u64;
                    while !stop.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let text = format!("p{partition}-{number}");
                        let message_id = u64::from(partition) * 1_000_000 + number + 1;
                        number += 1;
                        let mut batch = vec![http_message(message_id, text.clone())];
                        let sent = tokio::time::timeout(
                            Duration::from_secs(60),
                            client.send_messages(
                                &stream,
                                &topic,
                                &Partitioning::partition_id(partition),
                                &mut batch,
                            ),
                        )
                        .await;
                        let mut sends = sends[partition as usize].lock().unwrap();
                        match sent {
                            Ok(Ok(_)) => sends.acked.push(text),
                            Ok(Err(e)) if e.as_code() == 57 => sends.uncertain.push(text),
                            Ok(Err(IggyError::HttpResponseError(503, _))) => {
                                sends.unavailable.push(text)
                            }
                            Ok(Err(e)) => {
                                let error = format!("{e} ({})", e.as_code());
                                sends.refused.push((text, error));
                            }
                            // The client has no request timeout; a server that never answers
                            // leaves it waiting, which is a failure of its own.
                            Err(_) => sends.refused.push((text, "no answer in 60 s".into())),
                        }
                    }
                })
            })
            .collect();
        HttpProducer { sends, stop, tasks }
    }

    fn acked_counts(&self) -> Vec<usize> {
        self.sends
            .iter()
            .map(|s| s.lock().unwrap().acked.len())
            .collect()
    }

    fn summary(&self) -> String {
        let per_partition: Vec<String> = self
            .sends
            .iter()
            .map(|s| {
                let s = s.lock().unwrap();
                format!(
                    "{} acked, {} uncertain, {} unavailable, refused {:?}",
                    s.acked.len(),
                    s.uncertain.len(),
                    s.unavailable.len(),
                    s.refused
                )
            })
            .collect();
        per_partition.join("; ")
    }

    /// Waits until every partition has `more` more acknowledged sends than now.
    async fn wait_progress(&self, what: &str, more: usize, limit: Duration) {
        let goal: Vec<usize> = self.acked_counts().iter().map(|c| c + more).collect();
        wait_until(
            &format!("every partition acknowledges {more} more HTTP sends ({what})"),
            limit,
            || {
                self.acked_counts()
                    .iter()
                    .zip(&goal)
                    .all(|(c, g)| c >= g)
                    .then_some(())
            },
            || format!("goal {goal:?}: {}", self.summary()),
        )
        .await
    }

    async fn finish(self) -> Vec<HttpSends> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for task in self.tasks {
            within_for(Duration::from_secs(80), "the HTTP producer stops", task)
                .await
                .expect("producer task");
        }
        Arc::try_unwrap(self.sends)
            .ok()
            .expect("the tasks are done")
            .into_iter()
            .map(|s| s.into_inner().unwrap())
            .collect()
    }
}

/// Every message of one partition, read from offset 0 through `client`.
async fn read_all(client: &IggyClient, stream: u32, topic: u32, partition: u32) -> Vec<String> {
    let mut texts = Vec::new();
    loop {
        let polled = poll(
            client,
            &id(stream),
            &id(topic),
            partition,
            &consumer("verifier"),
            PollingStrategy::offset(texts.len() as u64),
            1000,
            false,
        )
        .await;
        if polled.messages.is_empty() {
            return texts;
        }
        let expected: Vec<u64> = (texts.len() as u64..).take(polled.messages.len()).collect();
        assert_eq!(offsets(&polled), expected, "partition {partition}");
        texts.extend(payloads(&polled));
    }
}

/// The official HttpClient given a backup of the metadata group keeps sending through it while
/// the metadata primary, which also leads a partition, is killed -9: sends answered 503 are
/// resent by the client, a relayed send whose forward goes unanswered is sent again to the next
/// primary (57, uncertain, only if that takes past the request timeout), and once the groups changed views every partition's sends succeed
/// again through the same node, as does a metadata write. The killed node restarts and takes
/// its partition back, and the sends go on. Read back through the node the client was given:
/// every acknowledged message once, in order; no send failed but with 57 or a 503 the client
/// stopped resending; nothing but uncertain sends besides (a 503 was not executed); nothing
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_client_given_a_backup_keeps_writing_through_a_kill9_of_the_metadata_primary() {
    let options = ClusterOptions {
        http: true,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start_with(3, options);
    let (metadata_primary, backup) = metadata_primary_and_backup(&cluster).await;
    let client = Arc::new(cluster.http_root_client(backup).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let led_by = primaries(&cluster, &partition_groups);
    assert!(
        led_by
            .iter()
            .any(|&(primary, _)| usize::from(primary) == metadata_primary),
        "the metadata primary leads a partition too: {led_by:?}"
    );

    let producer = HttpProducer::start(client.clone(), stream, topic, 3);
    producer
        .wait_progress("before the kill", 5, Duration::from_secs(30))
        .await;
    let (_, view) = cluster.primary(METADATA_GROUP).expect("a metadata primary");
    eprintln!(
        "HTTP client on node {backup}; killing node {metadata_primary}; partitions {led_by:?}"
    );
    cluster.kill9(metadata_primary);
    cluster
        .wait_new_primary(METADATA_GROUP, metadata_primary, view)
        .await;
    producer
        .wait_progress("the metadata primary killed", 5, Duration::from_secs(60))
        .await;
    // A metadata write relayed to the new metadata primary, read back from this node.
    let (stream_id, options) = (id(stream), topic_options(1));
    let extra_topic = client.create_topic(&stream_id, "after-the-kill", &options);
    let extra_topic = ok("create topic", within("create topic", extra_topic).await);
    let extra_topic_id = id(extra_topic.id);
    let extra = client.get_topic(&stream_id, &extra_topic_id);
    assert!(ok("get topic", within("get topic", extra).await).is_some());

    // The killed node restarts and takes its partition back: the node the client was given
    // relays that partition's sends to it again.
    let (victim_group, victim_view) = partition_groups
        .iter()
        .zip(&led_by)
        .find_map(|(&group, &(primary, view))| {
            (usize::from(primary) == metadata_primary).then_some((group, view))
        })
        .expect("the killed node's partition");
    cluster.restart(metadata_primary);
    wait_until(
        &format!("node {metadata_primary} leads group {victim_group:#x} again"),
        Duration::from_secs(60),
        || {
            let role = cluster.role(metadata_primary, victim_group)?;
            (role.normal
                && usize::from(role.primary) == metadata_primary
                && role.view > victim_view)
                .then_some(())
        },
        || cluster.describe(victim_group),
    )
    .await;
    producer
        .wait_progress("the killed node back", 5, Duration::from_secs(60))
        .await;
    let sends = producer.finish().await;

    for (partition, sends) in sends.iter().enumerate() {
        assert_http_sends_stored(
            &client,
            (stream, topic),
            partition,
            sends,
            led_by[partition],
        )
        .await;
    }
}

/// What HTTP sends to `partition` left: none failed but with 57 or a 503 the client stopped
/// resending; read back through `client`, every acknowledged message once, in order; nothing
/// twice; nothing but uncertain sends besides (a 503 was not executed).
async fn assert_http_sends_stored(
    client: &IggyClient,
    (stream, topic): (u32, u32),
    partition: usize,
    sends: &HttpSends,
    led_by: (u8, u32),
) {
    assert!(
        sends.refused.is_empty(),
        "partition {partition}: sends failed with other than 57 or 503: {:?}",
        sends.refused
    );
    let stored = read_all(client, stream, topic, partition as u32).await;
    let mut positions: BTreeMap<&str, usize> = BTreeMap::new();
    for (at, text) in stored.iter().enumerate() {
        if let Some(first) = positions.insert(text, at) {
            panic!("partition {partition}: {text:?} stored twice, at {first} and {at}");
        }
    }
    let mut previous = None;
    for text in &sends.acked {
        let at = *positions.get(text.as_str()).unwrap_or_else(|| {
            panic!("partition {partition}: acknowledged {text:?} is missing: {stored:?}")
        });
        assert!(
            previous.is_none_or(|p| p < at),
            "partition {partition}: acknowledged {text:?} at {at} is out of order"
        );
        previous = Some(at);
    }
    let uncertain: BTreeSet<&str> = sends.uncertain.iter().map(String::as_str).collect();
    let acked: BTreeSet<&str> = sends.acked.iter().map(String::as_str).collect();
    let strangers: Vec<&String> = stored
        .iter()
        .filter(|t| !acked.contains(t.as_str()) && !uncertain.contains(t.as_str()))
        .collect();
    assert!(
        strangers.is_empty(),
        "partition {partition}: stored but neither acknowledged nor uncertain: {strangers:?}"
    );
    eprintln!(
        "partition {partition} (primary {:?}): {} acknowledged, {} unavailable, {} uncertain \
         ({} of them stored), {} stored",
        led_by,
        sends.acked.len(),
        sends.unavailable.len(),
        sends.uncertain.len(),
        stored.len() - sends.acked.len(),
        stored.len()
    );
}

/// An HTTP client given one node sends through it to every partition while the primary of
/// another partition is stopped (SIGSTOP) past the heartbeat timeout: the sends the node
/// relayed to it get no verdict, and once the node serves the partition's next view it sends
/// them again, under their numbers, to the new primary (which prepares each once, or answers
/// one that committed from its client table). So none comes back uncertain (57; before, every
/// relayed send in flight got it when the relay's own 5 s timeout ran out). After SIGCONT the
/// old primary rejoins; every acknowledged send is stored once, in order, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_http_sends_to_a_stopped_partition_primary_are_sent_again_to_the_next_one() {
    let options = ClusterOptions {
        http: true,
        // Longer than the relay's own timeout (5 s), so a 57 can only be that timeout's.
        env: vec![(
            "IGGY_LIMITS_REQUEST_TIMEOUT_MS".to_string(),
            "15000".to_string(),
        )],
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let (metadata_primary, _) = metadata_primary_and_backup(&cluster).await;
    let client = Arc::new(cluster.http_root_client(metadata_primary).await);
    let (stream, topic, partition_groups) = create_topic(&client, 3).await;
    let led_by = primaries(&cluster, &partition_groups);
    let (group, stopped, view) = partition_groups
        .iter()
        .zip(&led_by)
        .find(|(_, (primary, _))| usize::from(*primary) != metadata_primary)
        .map(|(&group, &(primary, view))| (group, usize::from(primary), view))
        .expect("a partition led by another node than the client's");

    let producer = HttpProducer::start(client.clone(), stream, topic, 3);
    producer
        .wait_progress("before the stop", 5, Duration::from_secs(30))
        .await;
    eprintln!(
        "HTTP client on node {metadata_primary}; stopping node {stopped}; partitions {led_by:?}"
    );
    cluster.pause(stopped);
    cluster.wait_new_primary(group, stopped, view).await;
    producer
        .wait_progress("a new primary", 5, Duration::from_secs(60))
        .await;
    cluster.resume(stopped);
    producer
        .wait_progress("the old primary back", 3, Duration::from_secs(60))
        .await;
    let sends = producer.finish().await;
    for (partition, sends) in sends.iter().enumerate() {
        assert!(
            sends.uncertain.is_empty(),
            "partition {partition}: relayed sends answered 57: {:?} ({})",
            sends.uncertain,
            cluster.describe(partition_groups[partition])
        );
        assert_http_sends_stored(
            &client,
            (stream, topic),
            partition,
            sends,
            led_by[partition],
        )
        .await;
    }
}

/// Three nodes on three IPs with the same QUIC and WebSocket ports, as three machines run them:
/// each node's QUIC and WebSocket listeners bind its own IP on the roster's port, and the SDK
/// over either, given node 1, reaches the primaries on the other IPs through the roster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_three_ips_serve_the_sdk_over_quic_and_websocket_on_the_same_ports() {
    let options = ClusterOptions {
        quic: true,
        websocket: true,
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_on_distinct_ips_with(3, options);
    for i in 0..3 {
        let log = cluster.node(i).log();
        assert!(
            !log.contains("does not serve this node's roster ip"),
            "node {i}:\n{log}"
        );
        let ip = format!("127.0.0.{}", i + 1);
        for transport in [BinaryTransport::Quic, BinaryTransport::WebSocket] {
            let address = transport.address(&cluster, i);
            assert!(address.starts_with(&format!("{ip}:")), "{address}");
        }
    }
    let writer = root_client_over(&cluster, BinaryTransport::Quic, 1).await;
    let (stream, topic, groups) = create_topic(&writer, 3).await;
    let led_by: BTreeSet<u8> = primaries(&cluster, &groups)
        .iter()
        .map(|&(primary, _)| primary)
        .collect();
    assert_eq!(led_by, BTreeSet::from([0, 1, 2]), "partition primaries");
    send_numbered(&writer, (stream, topic), 3, 12, 2).await;
    read_numbered(&writer, (stream, topic), 3, 12).await;
    let reader = root_client_over(&cluster, BinaryTransport::WebSocket, 1).await;
    read_numbered(&reader, (stream, topic), 3, 12).await;
    let metadata = ok(
        "get_cluster_metadata",
        within("roster", reader.get_cluster_metadata()).await,
    );
    for node in &metadata.nodes {
        let i = usize::from(node.replica_id);
        for transport in [BinaryTransport::Quic, BinaryTransport::WebSocket] {
            let advertised = format!("{}:{}", node.ip, transport.advertised(&node.endpoints));
            assert_eq!(advertised, transport.address(&cluster, i), "{metadata:?}");
        }
    }
}

/// README: "give every node the same `encoding_secret` and `decoding_secret` for tokens any node
/// accepts". An HTTP client signed in on node 0 presents its token to nodes 1 and 2 (as behind a
/// load balancer): each must serve it as the same user, and a logout through one node must end
/// the token on all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_shared_jwt_secrets_a_token_issued_by_one_node_is_accepted_by_every_node() {
    let secret = "an http.jwt secret all three nodes share".to_string();
    let options = ClusterOptions {
        http: true,
        env: vec![
            ("IGGY_HTTP_JWT_ENCODING_SECRET".into(), secret.clone()),
            ("IGGY_HTTP_JWT_DECODING_SECRET".into(), secret),
        ],
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let issuer = cluster.http_root_client(0).await;
    let identity = ok(
        "login",
        within("login", issuer.login_user(ROOT_USER, ROOT_PASSWORD)).await,
    );
    let token = identity.access_token.expect("an access token").token;
    let on = |i: usize| {
        IggyClient::builder()
            .with_http()
            .with_api_url(cluster.http_url(i))
            .with_jwt(token.clone())
            .build()
            .expect("http client")
    };
    for i in 1..3 {
        let streams = within("get_streams", on(i).get_streams()).await;
        assert!(streams.is_ok(), "node {i}: {streams:?}");
    }
    // Writes of the one session through each node in turn: every node numbers them above the
    // ones another node had committed for it.
    for (i, name) in [
        (0, "from-0"),
        (2, "from-2"),
        (0, "from-0-again"),
        (1, "from-1"),
    ] {
        let created = within(
            "create_stream",
            on(i).create_stream(name, &StreamCreateOptions::default()),
        )
        .await;
        assert!(created.is_ok(), "node {i}: {created:?}");
    }
    ok("logout", within("logout", on(1).logout_user()).await);
    for i in 0..3 {
        let refused = within("get_streams", on(i).get_streams()).await;
        assert!(refused.is_err(), "node {i} after logout: {refused:?}");
    }
}

/// An HTTP client behind a load balancer reads, through one node, what it wrote through another
/// a moment before: a stream created and a message sent through node C are found by a read
/// through node B although B has heard nothing of them yet (the proxy holds back everything the
/// other nodes send B while the writes commit without it and the reads are sent). B asks each
/// group's primary what it has committed and serves once it applied that; before, B served
/// its stale copy at once (no stream, no message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_read_through_a_lagging_node_sees_what_another_node_acknowledged_before() {
    let options = ClusterOptions {
        http: true,
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_with(3, options);
    let (metadata_primary, _) = metadata_primary_and_backup(&cluster).await;
    let root = cluster.root_client(metadata_primary).await;
    let (stream, topic, groups) = create_topic(&root, 1).await;
    let (partition_primary, _) = primaries(&cluster, &groups)[0];
    let partition_primary = usize::from(partition_primary);
    // B leads nothing the reads need; C is any other node.
    let lagging = (0..3)
        .find(|&i| i != metadata_primary && i != partition_primary)
        .expect("a node leading neither group");
    let writing = (lagging + 1) % 3;
    cluster
        .wait_normal(lagging, &[METADATA_GROUP, groups[0]])
        .await;
    let writer = cluster.http_root_client(writing).await;
    let reader = Arc::new(cluster.http_root_client(lagging).await);
    let others: Vec<usize> = (0..3).filter(|&i| i != lagging).collect();

    for &other in &others {
        cluster.hold(other, lagging);
    }
    let stream_options = StreamCreateOptions::default();
    let created = writer.create_stream("written-elsewhere", &stream_options);
    ok("create stream", within("create stream", created).await);
    let (stream_id, topic_id) = (id(stream), id(topic));
    let mut batch = vec![msg("sent-elsewhere")];
    let partitioning = Partitioning::partition_id(0);
    let sent = writer.send_messages(&stream_id, &topic_id, &partitioning, &mut batch);
    ok("send", within("send", sent).await);
    let reads = tokio::spawn({
        let reader = reader.clone();
        async move {
            let found = reader.get_stream(&name("written-elsewhere")).await;
            let polled = poll(
                &reader,
                &id(stream),
                &id(topic),
                0,
                &consumer("reader"),
                PollingStrategy::offset(0),
                10,
                false,
            )
            .await;
            (found, payloads(&polled))
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    for &other in &others {
        cluster.release(other, lagging);
    }
    let (found, polled) = within("the reads", reads).await.unwrap();
    let found = ok("get stream", found);
    assert!(
        found.is_some(),
        "node {lagging} served a stream list without the stream created through node {writing}"
    );
    assert_eq!(polled, ["sent-elsewhere"], "node {lagging}'s poll");
}

/// `GET /ping`, a load balancer's probe, is answered at once by the live nodes while the
/// metadata group replaces its killed primary: it waited, as requests that read the metadata
/// model do, for the next primary (a heartbeat timeout) and then answered 503 on every live
/// node, so a load balancer marked them all down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_ping_is_answered_at_once_while_the_metadata_primary_is_replaced() {
    let options = ClusterOptions {
        http: true,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start_with(3, options);
    let (metadata_primary, backup) = metadata_primary_and_backup(&cluster).await;
    let url = cluster.http_url(backup);
    cluster.kill9(metadata_primary);
    // Probes for a second after the kill, well inside the heartbeat timeout.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        let asked = std::time::Instant::now();
        let (status, _) = crate::http::raw(&url, "GET", "/ping", None, b"").await;
        let took = asked.elapsed();
        assert_eq!(status, 200, "GET /ping on live node {backup} {:?} after the kill", started.elapsed());
        assert!(took < Duration::from_millis(500), "GET /ping on live node {backup} took {took:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
