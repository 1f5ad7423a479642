//! Permissions as an operator and an SDK author use them: what each grant opens and what it
//! leaves shut, grants changed or users removed under a live session, tokens, and a cluster
//! where the change is made through one node and enforced on another. Refusals are 41
//! (Unauthorized); an ended session is 40 (Unauthenticated).

use crate::harness::*;
use crate::test_cluster::*;
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

async fn create_user(client: &IggyClient, user: &str, perms: Option<Permissions>) {
    let options = UserCreateOptions::default();
    let created = client.create_user(user, "user-secret", UserStatus::Active, perms, &options);
    ok("create_user", within("create_user", created).await);
}

fn on_stream(stream: usize, grant: StreamPermissions) -> Option<Permissions> {
    Some(Permissions { global: GlobalPermissions::default(), streams: Some(BTreeMap::from([(stream, grant)])) })
}

fn on_topic(stream: usize, topic: usize, grant: TopicPermissions) -> Option<Permissions> {
    on_stream(stream, StreamPermissions { topics: Some(BTreeMap::from([(topic, grant)])), ..Default::default() })
}

/// A write naming a stream, topic or user that does not exist is refused (41) to a user who
/// may not make it whatever the target, as for one that exists, so a user without grants cannot
/// tell which names exist by trying (it got 404-style not-found for a missing target and 41
/// for an existing one, while the reads hide both); a user who holds the grant is told what is
/// missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_missing_targets_tell_a_user_without_the_grant_nothing() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    create_user(&root, "victim", None).await;
    create_user(&root, "nobody", None).await;
    let nobody = server.client_as("nobody", "user-secret").await;
    for target in ["s", "missing"] {
        expect_code(&format!("delete stream {target}"), within("delete", nobody.delete_stream(&name(target))).await, 41);
        expect_code(
            &format!("delete topic {target}/t"),
            within("delete", nobody.delete_topic(&name(target), &name("t"))).await,
            41,
        );
        expect_code(
            &format!("send to {target}/t"),
            within("send", nobody.send_messages(&name(target), &name("t"), &Partitioning::partition_id(0), &mut msgs("x", 1))).await,
            41,
        );
    }
    expect_code("delete topic s/missing", within("delete", nobody.delete_topic(&name("s"), &name("missing"))).await, 41);
    for user in ["victim", "no_such_user"] {
        expect_code(
            &format!("change {user}'s password"),
            within("password", nobody.change_password(&name(user), "user-secret", "another-secret")).await,
            41,
        );
    }
    // With the grant, what is missing is said.
    let missing = within("delete", root.delete_stream(&name("missing"))).await;
    assert!(matches!(&missing, Err(e) if e.as_code() != 41), "root: {missing:?}");
    let missing = within("send", root.send_messages(&name("s"), &name("missing"), &Partitioning::partition_id(0), &mut msgs("x", 1))).await;
    assert!(matches!(&missing, Err(e) if e.as_code() != 41), "root: {missing:?}");
}

/// Over HTTP too (sends, polls, offset stores, consumer group and topic lists), and for the
/// binary topic and consumer group lists, a user without the grant is refused 41 whether the
/// stream or topic exists or not: HTTP resolved the topic before judging the request (404 for a
/// missing one, 403 for an existing one), and the lists the stream or topic, so any signed-in
/// user could tell which names exist. Root, who holds every grant, is told what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_and_lists_for_missing_targets_tell_a_user_without_the_grant_nothing() {
    let (server, api) = TestServer::start_with_http(&[]);
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    ok("group", within("group", root.create_consumer_group(&name("s"), &name("t"), "g")).await);
    create_user(&root, "nobody", None).await;
    let token = crate::http::raw_token_of(&api, "nobody", "user-secret").await;
    let root_token = crate::http::raw_token(&api).await;
    let send = br#"{"partitioning":{"kind":"partition_id","value":"AAAAAA=="},"messages":[{"id":0,"payload":"eA=="}]}"#;
    let store = br#"{"consumer_kind":"consumer","consumer_id":"1","partition_id":0,"offset":0}"#;
    let poll = "messages?consumer_id=1&partition_id=0&kind=offset&value=0&count=1";
    for (stream, topic) in [("s", "t"), ("missing", "t"), ("s", "missing"), ("999", "0")] {
        let cases: [(&str, String, &[u8]); 6] = [
            ("POST", format!("/streams/{stream}/topics/{topic}/messages"), send),
            ("GET", format!("/streams/{stream}/topics/{topic}/consumer-groups/g"), b""),
            ("GET", format!("/streams/{stream}/topics/{topic}/{poll}"), b""),
            ("PUT", format!("/streams/{stream}/topics/{topic}/consumer-offsets"), store),
            ("GET", format!("/streams/{stream}/topics/{topic}/consumer-groups"), b""),
            ("GET", format!("/streams/{stream}/topics"), b""),
        ];
        for (method, path, body) in cases {
            let (status, reply) = crate::http::raw(&api, method, &path, Some(&token), body).await;
            assert_eq!(status, 403, "{method} {path}: {}", String::from_utf8_lossy(&reply));
            let names_topic = !path.ends_with("/topics");
            if stream == "missing" || (topic == "missing" && names_topic) {
                let (status, reply) = crate::http::raw(&api, method, &path, Some(&root_token), body).await;
                assert_eq!(status, 404, "root: {method} {path}: {}", String::from_utf8_lossy(&reply));
            }
        }
    }
    let nobody = server.client_as("nobody", "user-secret").await;
    for (stream, topic) in [("s", "t"), ("missing", "t"), ("s", "missing")] {
        expect_code(&format!("topics of {stream}"), within("topics", nobody.get_topics(&name(stream))).await, 41);
        let (s, t, g) = (name(stream), name(topic), name("g"));
        expect_code(&format!("groups of {stream}/{topic}"), within("groups", nobody.get_consumer_groups(&s, &t)).await, 41);
        expect_code(&format!("group g of {stream}/{topic}"), within("group", nobody.get_consumer_group(&s, &t, &g)).await, 41);
        // Leaving needs no grant: a non-member is told so, whatever exists.
        let left = nobody.leave_consumer_group(&s, &t, &g);
        expect_code(&format!("leave g of {stream}/{topic}"), within("leave", left).await, 5006);
    }
    let missing = within("topics", root.get_topics(&name("missing"))).await;
    assert!(matches!(&missing, Err(e) if e.as_code() != 41), "root: {missing:?}");
    expect_code("nobody gets s/missing", within("topic", nobody.get_topic(&name("s"), &name("missing"))).await, 41);
    // One who may read the stream's topics is told a topic is missing (it was refused 41).
    create_user(&root, "reader", on_stream(0, StreamPermissions { read_topics: true, ..Default::default() })).await;
    let reader = server.client_as("reader", "user-secret").await;
    let topic = ok("reader gets s/missing", within("topic", reader.get_topic(&name("s"), &name("missing"))).await);
    assert!(topic.is_none(), "{topic:?}");
    expect_code("reader gets missing/t", within("topic", reader.get_topic(&name("missing"), &name("t"))).await, 41);
}

/// A stream's read_topics lets a user read its topics and messages (by id or by name) but
/// neither manage them nor send; a grant on one topic opens that topic only; the server's own
/// figures need read_servers, while get_me and the cluster roster (the SDK routes by it) need
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_grants_do_not_manage_and_a_topic_grant_stays_on_its_topic() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t0", 1).await;
    ok("create t1", within("create", root.create_topic(&name("s"), "t1", &topic_options(1))).await);
    send_to_partition(&root, &name("s"), &name("t1"), 0, msgs("m", 2)).await;

    create_user(&root, "reader", on_stream(0, StreamPermissions { read_topics: true, ..Default::default() })).await;
    let reader = server.client_as("reader", "user-secret").await;
    let topics = ok("get_topics by name", within("topics", reader.get_topics(&name("s"))).await);
    assert_eq!(topics.len(), 2);
    ok("get_topic by name", within("topic", reader.get_topic(&name("s"), &name("t1"))).await).expect("t1");
    let polled = poll(&reader, &name("s"), &name("t1"), 0, &consumer("r"), PollingStrategy::first(), 10, false).await;
    assert_eq!(offsets(&polled), vec![0, 1], "read_topics implies polling, named by name");
    expect_code("read_topics: create topic", within("create", reader.create_topic(&name("s"), "t2", &topic_options(1))).await, 41);
    expect_code("read_topics: delete topic", within("delete", reader.delete_topic(&name("s"), &name("t1"))).await, 41);
    expect_code("read_topics: delete segments", within("segments", reader.delete_segments(&name("s"), &name("t1"), 0, 1)).await, 41);
    let mut m = msgs("x", 1);
    expect_code("read_topics: send", within("send", reader.send_messages(&name("s"), &name("t1"), &Partitioning::partition_id(0), &mut m)).await, 41);
    expect_code("read_topics: stats", within("stats", reader.get_stats()).await, 41);
    expect_code("read_topics: clients", within("clients", reader.get_clients()).await, 41);
    expect_code("read_topics: users", within("users", reader.get_users()).await, 41);
    ok("get_me needs no grant", within("me", reader.get_me()).await);
    ok("the cluster roster needs no grant", within("cluster", reader.get_cluster_metadata()).await);

    create_user(&root, "narrow", on_topic(0, 0, TopicPermissions { read_topic: true, ..Default::default() })).await;
    let narrow = server.client_as("narrow", "user-secret").await;
    ok("get its topic", within("topic", narrow.get_topic(&name("s"), &name("t0"))).await).expect("t0");
    expect_code("get the other topic", within("topic", narrow.get_topic(&name("s"), &name("t1"))).await, 41);
    expect_code("list the stream's topics", within("topics", narrow.get_topics(&name("s"))).await, 41);
    // Its stream's details (which the SDK asks at start) name its topic only, not t1.
    let stream = ok("get its stream", within("stream", narrow.get_stream(&name("s"))).await).expect("s");
    let named: Vec<&str> = stream.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(named, vec!["t0"], "a topic grant learns of its topic only");
    let stream = ok("get the stream", within("stream", reader.get_stream(&name("s"))).await).expect("s");
    assert_eq!(stream.topics.len(), 2, "read_topics on the stream names every topic");
    ok("create a group on its topic", within("group", narrow.create_consumer_group(&name("s"), &name("t0"), "g")).await);
    ok("join it", within("join", narrow.join_consumer_group(&name("s"), &name("t0"), &name("g"))).await);
    ok("root creates a group on t1", within("group", root.create_consumer_group(&name("s"), &name("t1"), "g1")).await);
    expect_code("join a group of the other topic", within("join", narrow.join_consumer_group(&name("s"), &name("t1"), &name("g1"))).await, 41);
    expect_code("delete a group of the other topic", within("delete", narrow.delete_consumer_group(&name("s"), &name("t1"), &name("g1"))).await, 41);
    expect_code(
        "store an offset on the other topic",
        within("store", narrow.store_consumer_offset(&consumer("n"), &name("s"), &name("t1"), Some(0), 0)).await,
        41,
    );
    expect_code("poll the other topic", within("poll", narrow.poll_messages(&name("s"), &name("t1"), Some(0), &consumer("n"), &PollingStrategy::first(), 1, false)).await, 41);

    create_user(&root, "topic-admin", on_topic(0, 1, TopicPermissions { manage_topic: true, ..Default::default() })).await;
    let admin = server.client_as("topic-admin", "user-secret").await;
    ok("manage_topic: delete segments", within("segments", admin.delete_segments(&name("s"), &name("t1"), 0, 1)).await);
    expect_code("manage_topic on t1: delete t0", within("delete", admin.delete_topic(&name("s"), &name("t0"))).await, 41);
    expect_code("manage_topic: create a topic", within("create", admin.create_topic(&name("s"), "t2", &topic_options(1))).await, 41);
}

/// A logged-in user's requests are judged by its current grants: a grant added, then taken
/// away, is seen by its very next request; its deletion ends the session (40), as deactivation
/// does; a token carries its owner's current grants and goes with the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_follows_grant_changes_and_ends_with_its_user() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let reads = Permissions { global: GlobalPermissions { read_streams: true, ..Default::default() }, streams: None };
    create_user(&root, "bob", Some(reads)).await;
    let bob = server.client_as("bob", "user-secret").await;
    let token = ok("bob's token", within("token", bob.create_personal_access_token("bobs", PersonalAccessTokenExpiry::NeverExpire)).await).token;
    let by_token = server.anonymous_client().await;
    ok("token login", within("login", by_token.login_with_personal_access_token(&token)).await);
    ok("the token reads streams", within("streams", by_token.get_streams()).await);
    expect_code("the token has no manage_streams", within("create", by_token.create_stream("tok", &StreamCreateOptions::default())).await, 41);
    expect_code("bob may not create a topic", within("create", bob.create_topic(&name("s"), "bob", &topic_options(1))).await, 41);

    let grant = on_stream(0, StreamPermissions { manage_topics: true, ..Default::default() });
    ok("grant manage_topics on stream 0", within("grant", root.update_permissions(&name("bob"), grant)).await);
    ok("the grant on id 0 covers stream \"s\"", within("create", bob.create_topic(&name("s"), "bob", &topic_options(1))).await);
    ok("the token carries the new grant", within("create", by_token.create_topic(&name("s"), "tok", &topic_options(1))).await);
    ok("revoke everything", within("revoke", root.update_permissions(&name("bob"), None)).await);
    expect_code("bob after revocation", within("streams", bob.get_streams()).await, 41);
    expect_code("the token after revocation", within("streams", by_token.get_streams()).await, 41);

    // A user's tokens are its own: alice neither sees nor deletes bob's.
    create_user(&root, "alice", None).await;
    let alice = server.client_as("alice", "user-secret").await;
    assert!(ok("alice's tokens", within("tokens", alice.get_personal_access_tokens()).await).is_empty());
    expect_code("alice deletes bob's token by name (not hers: not found)", within("delete", alice.delete_personal_access_token("bobs")).await, 20);
    let again = server.anonymous_client().await;
    ok("bob's token still logs in", within("login", again.login_with_personal_access_token(&token)).await);

    ok("delete bob", within("delete", root.delete_user(&name("bob"))).await);
    let r = within_for(Duration::from_secs(15), "bob after deletion", bob.get_me()).await;
    expect_code("bob's session ended with his deletion", r, 40);
    let r = within_for(Duration::from_secs(15), "token session after deletion", by_token.get_me()).await;
    expect_code("the token's session ended with its owner", r, 40);
    let fresh = server.anonymous_client().await;
    expect_code("the deleted user's token", within("login", fresh.login_with_personal_access_token(&token)).await, 53);
}

/// Names are checked on create and rename (3..=50 characters; passwords 3..=100), and a name is
/// taken exactly as spelled: "Carol" and "carol" are two users, as "S" and "s" are two streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_names_and_passwords_are_checked() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let create = |user: String, password: &'static str| {
        let root = &root;
        async move { within("create", root.create_user(&user, password, UserStatus::Active, None, &UserCreateOptions::default())).await }
    };
    expect_code("empty name", create(String::new(), "secret").await, 43);
    expect_code("51-character name", create("u".repeat(51), "secret").await, 43);
    expect_code("empty password", create("carol".into(), "").await, 44);
    let long: &'static str = Box::leak("p".repeat(101).into_boxed_str());
    expect_code("101-character password", create("carol".into(), long).await, 44);
    ok("50-character name", create("u".repeat(50), "secret").await);
    ok("carol", create("carol".into(), "secret").await);
    expect_code("carol again", create("carol".into(), "secret").await, 46);
    ok("Carol is another user", create("Carol".into(), "secret").await);
    let rename = UserUpdateOptions { username: Some("carol".into()), ..Default::default() };
    expect_code("rename Carol to carol", within("update", root.update_user(&name("Carol"), &rename)).await, 46);
    let empty = UserUpdateOptions { username: Some(String::new()), ..Default::default() };
    expect_code("rename Carol to nothing", within("update", root.update_user(&name("Carol"), &empty)).await, 43);
    let c = server.client_as("Carol", "secret").await;
    let me = ok("Carol signs in as herself", within("me", c.get_me()).await);
    let carol = ok("get Carol", within("get", root.get_user(&name("Carol"))).await).expect("Carol");
    assert_eq!(me.user_id, Some(carol.id));
}

/// In a cluster a grant changed through one node is enforced at once on a session bound to
/// another: the revoked user's next request there is refused (41), its metadata writes too
/// (they are judged where they arrive and committed through the primary), and a user deleted
/// through node 0 has its session on node 1 ended (40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_a_grant_change_through_one_node_holds_on_another_at_once() {
    let cluster = TestCluster::start(3);
    let (primary, backup) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let root = cluster.root_client(primary).await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let admin = Permissions { global: GlobalPermissions { manage_streams: true, read_streams: true, ..Default::default() }, streams: None };
    let options = UserCreateOptions::default();
    let created = root.create_user("dave", "dave-secret", UserStatus::Active, Some(admin), &options);
    ok("create dave", within("create", created).await);
    let dave = signed_in(&cluster.node(backup).connection_string("dave", "dave-secret"), "dave on the backup").await;
    ok("dave lists streams on the backup", within("streams", dave.get_streams()).await);
    for round in 0..5 {
        ok("revoke", within("revoke", root.update_permissions(&name("dave"), None)).await);
        expect_code("dave lists streams right after revocation", within("streams", dave.get_streams()).await, 41);
        let (stream, options) = (format!("revoked-{round}"), StreamCreateOptions::default());
        let create = dave.create_stream(&stream, &options);
        expect_code("dave creates a stream right after revocation", within("create", create).await, 41);
        let admin = Permissions { global: GlobalPermissions { manage_streams: true, read_streams: true, ..Default::default() }, streams: None };
        ok("grant again", within("grant", root.update_permissions(&name("dave"), Some(admin))).await);
        ok("dave lists streams right after the grant", within("streams", dave.get_streams()).await);
    }
    let streams = ok("streams", within("streams", root.get_streams()).await);
    assert_eq!(streams.len(), 1, "no stream was created by a revoked user: {:?}", streams.iter().map(|s| &s.name).collect::<Vec<_>>());
    let token = ok("dave's token", within("token", dave.create_personal_access_token("daves", PersonalAccessTokenExpiry::NeverExpire)).await).token;
    ok("delete dave", within("delete", root.delete_user(&name("dave"))).await);
    let r = after_session_end("dave after deletion", || dave.get_me()).await;
    expect_code("dave's session on the backup ended with his deletion", r, 40);
    let fresh = cluster.node(backup).anonymous_client().await;
    expect_code("dave's token on the backup", within("login", fresh.login_with_personal_access_token(&token)).await, 53);

    let created = root.create_user("ella", "ella-secret", UserStatus::Active, None, &options);
    ok("create ella", within("create", created).await);
    let ella = signed_in(&cluster.node(backup).connection_string("ella", "ella-secret"), "ella on the backup").await;
    ok("ella on the backup", within("me", ella.get_me()).await);
    let inactive = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    ok("deactivate ella", within("update", root.update_user(&name("ella"), &inactive)).await);
    let r = after_session_end("ella after deactivation", || ella.get_me()).await;
    expect_code("ella's session on the backup ended with her deactivation", r, 40);
    let fresh = cluster.node(backup).anonymous_client().await;
    expect_code("inactive ella on the backup", within("login", fresh.login_user("ella", "ella-secret")).await, 47);
}

/// A revocation acknowledged through the metadata primary binds a partition primary whose
/// metadata lags it. The proxy holds back what the metadata primary's node sends the backup
/// (the other backup makes both quorums) while the revocation commits; the revoked user then
/// sends to a partition the lagging node leads, at once and again after 5 s, well past the
/// heartbeat timeout (2 s), then lists the streams. The revocation is answered once the lagging
/// node's grant lease ran out (`consensus/grant_lease.rs`); holding none, it judges nothing by
/// its copy (58), and the SDK's retry elsewhere meets the revocation (41).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_primary_that_lags_a_revocation_refuses_the_revoked_user() {
    let cluster = TestCluster::start(3);
    let (primary, backup) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let root = cluster.root_client(primary).await;
    create_stream_and_topic(&root, "s", "t", 3).await;
    let led = wait_until(
        "a partition led by the backup",
        Duration::from_secs(30),
        || (0..3).find(|p| cluster.primary(partition_group(0, 0, *p)).is_some_and(|(node, _)| usize::from(node) == backup)),
        || (0..3).map(|p| format!("{:?}", cluster.primary(partition_group(0, 0, p)))).collect::<Vec<_>>().join(", "),
    )
    .await;
    let all = Permissions { global: GlobalPermissions { read_streams: true, send_messages: true, ..Default::default() }, streams: None };
    let options = UserCreateOptions::default();
    ok("create erin", within("create", root.create_user("erin", "erin-secret", UserStatus::Active, Some(all), &options)).await);
    let erin = signed_in(&cluster.node(backup).connection_string("erin", "erin-secret"), "erin on the backup").await;
    ok("erin lists streams", within("streams", erin.get_streams()).await);
    send_to_partition(&erin, &id(0), &id(0), led, msgs("before", 1)).await;

    cluster.hold(primary, backup);
    let revoked = within("revoke", root.update_permissions(&name("erin"), None)).await;
    let send = async |payload: &str| {
        let mut m = msgs(payload, 1);
        within("send", erin.send_messages(&id(0), &id(0), &Partitioning::partition_id(led), &mut m)).await
    };
    // Sent before erin reads anything: a reply naming the revocation's commit would make the
    // lagging node refuse her for being behind her own watermark, whatever its grants say.
    let at_once = send("at-once").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = send("later").await;
    let listed = within("streams", erin.get_streams()).await.map(|s| s.len());
    cluster.release(primary, backup);
    ok("revoke", revoked);
    expect_code("erin sends at once to the partition the lagging node leads", at_once, 41);
    expect_code("erin sends 5 s later to the partition the lagging node leads", later, 41);
    expect_code("erin lists streams", listed, 41);
    // Nothing of hers was stored after the revocation, once the lagging node caught up.
    let stored = poll(&root, &id(0), &id(0), led, &consumer("check"), PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&stored), vec!["before-0".to_string()], "what partition {led} holds");
}

/// A user deactivated through the SDK's `update_user` (0.12.0's UpdateResource, user scope) is
/// answered only once no node may still judge by a copy without it, as a revocation is: with
/// the backup that leads one of the user's partitions held back from the metadata primary, the
/// deactivation waits out that node's grant lease (2 s heartbeat timeout). It used to be
/// answered at once (only 0.11.1's UpdateUser was counted as taking grants away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_deactivated_through_update_user_is_answered_once_no_node_judges_without_it() {
    let cluster = TestCluster::start(3);
    let (primary, backup) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let root = cluster.root_client(primary).await;
    let all = Permissions { global: GlobalPermissions { read_streams: true, send_messages: true, ..Default::default() }, streams: None };
    let options = UserCreateOptions::default();
    ok("create frank", within("create", root.create_user("frank", "frank-secret", UserStatus::Active, Some(all), &options)).await);
    let frank = signed_in(&cluster.node(backup).connection_string("frank", "frank-secret"), "frank on the backup").await;
    ok("frank lists streams", within("streams", frank.get_streams()).await);

    cluster.hold(primary, backup);
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    let started = Instant::now();
    let deactivated = within("deactivate", root.update_user(&name("frank"), &deactivate)).await;
    let answered_after = started.elapsed();
    cluster.release(primary, backup);
    ok("deactivate", deactivated);
    // The lease ran from the held node's last grant, up to a ping before the hold: more than a
    // second of its 2 s is left (the answer came after 0.7 ms when it was not waited for).
    assert!(
        answered_after >= Duration::from_secs(1),
        "answered after {answered_after:?}, while node {backup} could still judge by its copy \
         without it"
    );
    let refused = within("streams", frank.get_streams()).await;
    assert!(refused.is_err(), "frank's session ended: {refused:?}");
}

/// A request the revoked user sent while the revocation was prepared on the metadata primary
/// but not yet applied (its backups' acknowledgements held back) is judged again as the
/// primary prepares it, behind the revocation: refused (41), and the stream it asked for never
/// exists. Before, the primary judged it only on arrival, by a model without the revocation,
/// and prepared it right behind: the stream was created by a user who could no longer. Over
/// the binary protocol on the primary, and over HTTP on a backup, which relays the request
/// (ForwardWrite) and the primary's refusal.
async fn a_request_in_flight_behind_its_users_revocation(http_on_backup: bool) {
    const PREPARE_OK: u8 = 7;
    let cluster = TestCluster::start_with(3, ClusterOptions { replica_frames: true, http: http_on_backup, ..Default::default() });
    let (primary, backup) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let backups: Vec<usize> = (0..3).filter(|&i| i != primary).collect();
    let root = cluster.root_client(primary).await;
    let grant = Permissions { global: GlobalPermissions { manage_streams: true, ..Default::default() }, streams: None };
    let options = UserCreateOptions::default();
    ok("create ops", within("create", root.create_user("ops", "ops-secret", UserStatus::Active, Some(grant), &options)).await);
    let ops = match http_on_backup {
        true => {
            let client = IggyClient::builder().with_http().with_api_url(cluster.http_url(backup)).build().expect("http client");
            ok("ops signs in over HTTP on the backup", within("login", client.login_user("ops", "ops-secret")).await);
            client
        }
        false => signed_in(&cluster.node(primary).connection_string("ops", "ops-secret"), "ops on the primary").await,
    };
    ok("ops creates a stream", within("create", ops.create_stream("a", &StreamCreateOptions::default())).await);

    for &backup in &backups {
        cluster.drop_frames(backup, primary, PREPARE_OK);
    }
    let revoke = async { within("revoke", root.update_permissions(&name("ops"), None)).await };
    // Sent once the revocation is prepared (it cannot commit while the acknowledgements are held).
    let create = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        within("create b", ops.create_stream("b", &StreamCreateOptions::default())).await
    };
    let release = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        for &backup in &backups {
            cluster.pass_frames(backup, primary, PREPARE_OK);
        }
    };
    let (revoked, created, ()) = tokio::join!(revoke, create, release);
    ok("revoke", revoked);
    expect_code("ops creates a stream behind its revocation", created, 41);
    let streams: Vec<String> = ok("streams", within("streams", root.get_streams()).await).into_iter().map(|s| s.name).collect();
    assert_eq!(streams, vec!["a".to_string()], "the streams after the revocation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_its_users_revocation_is_in_flight_is_judged_behind_it() {
    a_request_in_flight_behind_its_users_revocation(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_relayed_over_http_while_its_users_revocation_is_in_flight_is_judged_behind_it() {
    a_request_in_flight_behind_its_users_revocation(true).await;
}

/// A revocation made while a node is down is answered once the dead node's lease ran out (a
/// heartbeat timeout, 2 s): no node has to confirm what cannot answer, and the primary logs
/// no "answered anyway". The two nodes left refuse the user at once, on every partition (those
/// the dead node led once their new primary serves). A user deleted through a backup, with the
/// dead node back, is refused too, and no node answered anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_with_a_node_down_is_answered_and_the_others_refuse_the_user_at_once() {
    let mut cluster = TestCluster::start(3);
    let (primary, backup) = crate::cluster::metadata_primary_and_backup(&cluster).await;
    let down = 3 - primary - backup;
    let root = cluster.root_client(primary).await;
    create_stream_and_topic(&root, "s", "t", 3).await;
    let all = Permissions { global: GlobalPermissions { read_streams: true, send_messages: true, ..Default::default() }, streams: None };
    let options = UserCreateOptions::default();
    ok("create erin", within("create", root.create_user("erin", "erin-secret", UserStatus::Active, Some(all.clone()), &options)).await);
    ok("create fred", within("create", root.create_user("fred", "fred-secret", UserStatus::Active, Some(all), &options)).await);
    let erin = signed_in(&cluster.node(backup).connection_string("erin", "erin-secret"), "erin on a backup").await;
    for partition in 0..3 {
        send_to_partition(&erin, &id(0), &id(0), partition, msgs("before", 1)).await;
    }
    cluster.kill9(down);
    let started = std::time::Instant::now();
    ok("revoke with a node down", within("revoke", root.update_permissions(&name("erin"), None)).await);
    let took = started.elapsed();
    expect_code("erin lists streams", within("streams", erin.get_streams()).await, 41);
    for partition in 0..3 {
        let mut m = msgs("after", 1);
        let sent = within("send", erin.send_messages(&id(0), &id(0), &Partitioning::partition_id(partition), &mut m)).await;
        expect_code(&format!("erin sends to partition {partition}"), sent, 41);
    }
    assert!(!cluster.node(primary).log().contains("answered anyway"), "the revocation waited out its bound, not the dead node's lease ({took:?})");

    cluster.restart(down);
    cluster.wait_normal(down, &[METADATA_GROUP]).await;
    let fred = signed_in(&cluster.node(down).connection_string("fred", "fred-secret"), "fred on the restarted node").await;
    ok("fred lists streams", within("streams", fred.get_streams()).await);
    let root_on_backup = cluster.root_client(backup).await;
    ok("delete fred", within("delete", root_on_backup.delete_user(&name("fred"))).await);
    let gone = within("streams", fred.get_streams()).await;
    assert!(gone.is_err(), "a deleted user's session lists streams: {gone:?}");
    for i in 0..3 {
        assert!(!cluster.node(i).log().contains("answered anyway"), "node {i} answered a deletion anyway");
    }
}

/// What a user may do about users without manage_users: change its own password and read its
/// own record, not another's password nor the list; an inactive user signs in neither by
/// password nor by token (47). Grants updated and a status changed survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_records_inactive_users_and_grant_updates_across_a_restart() {
    let mut server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    create_user(&root, "frank", None).await;
    create_user(&root, "gina", None).await;
    let frank = server.client_as("frank", "user-secret").await;
    let me = ok("frank reads his own record", within("get", frank.get_user(&name("frank"))).await).expect("frank");
    expect_code("frank reads gina's record", within("get", frank.get_user(&name("gina"))).await, 41);
    expect_code("frank lists users", within("list", frank.get_users()).await, 41);
    expect_code("frank changes gina's password", within("pw", frank.change_password(&name("gina"), "user-secret", "frank-chose")).await, 41);
    expect_code("frank renames himself", within("rename", frank.update_user(&name("frank"), &UserUpdateOptions { username: Some("franky".into()), ..Default::default() })).await, 41);
    ok("frank changes his own password", within("pw", frank.change_password(&id(me.id), "user-secret", "frank-new")).await);
    let token = ok("gina's token", within("token", server.client_as("gina", "user-secret").await.create_personal_access_token("ginas", PersonalAccessTokenExpiry::NeverExpire)).await).token;

    let grant = on_stream(0, StreamPermissions { read_stream: true, read_topics: true, ..Default::default() });
    ok("grant frank", within("grant", root.update_permissions(&name("frank"), grant.clone())).await);
    let inactive = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    ok("deactivate gina", within("update", root.update_user(&name("gina"), &inactive)).await);
    let check = async |server: &TestServer| {
        let fresh = server.anonymous_client().await;
        expect_code("inactive gina by password", within("login", fresh.login_user("gina", "user-secret")).await, 47);
        let fresh = server.anonymous_client().await;
        expect_code("inactive gina by token", within("login", fresh.login_with_personal_access_token(&token)).await, 47);
        let frank = server.client_as("frank", "frank-new").await;
        ok("frank reads stream 0 by name", within("get", frank.get_stream(&name("s"))).await).expect("s");
        let user = ok("get frank", within("get", root_of(server).await.get_user(&name("frank"))).await).expect("frank");
        assert_eq!(user.permissions, grant, "frank's grant as updated");
    };
    check(&server).await;
    tokio::task::block_in_place(|| server.restart());
    check(&server).await;
}

async fn root_of(server: &TestServer) -> IggyClient {
    server.root_client().await
}

/// A producer granted send_messages alone (on the topic, or globally) sends with the SDK's
/// balanced and keyed partitioning, which first ask the topic (300) for its partition count;
/// the CLI's `message send` does the same. A poller granted poll_messages alone may ask it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_messages_alone_lets_the_sdk_send_balanced_and_keyed() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 2).await;
    let send_only = TopicPermissions { send_messages: true, ..Default::default() };
    create_user(&root, "topic-sender", on_topic(0, 0, send_only)).await;
    let global = Permissions { global: GlobalPermissions { send_messages: true, ..Default::default() }, streams: None };
    create_user(&root, "global-sender", Some(global)).await;
    create_user(&root, "topic-poller", on_topic(0, 0, TopicPermissions { poll_messages: true, ..Default::default() })).await;
    for user in ["topic-sender", "global-sender"] {
        let sender = server.client_as(user, "user-secret").await;
        for partitioning in [Partitioning::balanced(), Partitioning::messages_key_str("key").unwrap()] {
            let mut m = msgs(user, 1);
            ok(user, within("send", sender.send_messages(&name("s"), &name("t"), &partitioning, &mut m)).await);
        }
        expect_code("the sender reads no stream list", within("streams", sender.get_streams()).await, 41);
    }
    let poller = server.client_as("topic-poller", "user-secret").await;
    let topic = ok("the poller asks its topic", within("topic", poller.get_topic(&name("s"), &name("t"))).await).expect("t");
    assert_eq!(topic.partitions_count, 2);
    let mut sent = 0;
    for p in 0..2 {
        sent += poll(&root, &id(0), &id(0), p, &consumer("root"), PollingStrategy::first(), 10, false).await.messages.len();
    }
    assert_eq!(sent, 4, "both senders' balanced and keyed messages arrived");
}

/// The SDK's `IggyProducer` and `IggyConsumer` first ask the stream (200) and the topic (300)
/// whether they exist: a producer granted send_messages on its topic alone, and a consumer
/// granted poll_messages on it alone, get started and do their work. Neither learns about a
/// stream it holds no grant in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_high_level_producer_and_consumer_run_on_a_topic_grant_alone() {
    use futures_util::StreamExt;
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    create_stream_and_topic(&root, "other", "t", 1).await;
    create_user(&root, "producer", on_topic(0, 0, TopicPermissions { send_messages: true, ..Default::default() })).await;
    create_user(&root, "consumer", on_topic(0, 0, TopicPermissions { poll_messages: true, ..Default::default() })).await;

    let client = server.client_as("producer", "user-secret").await;
    let producer = client.producer("s", "t").unwrap().direct(DirectConfig::builder().build()).build();
    ok("producer.init", within("producer init", producer.init()).await);
    ok("producer.send", within("send", producer.send(msgs("p", 3))).await);
    expect_code("the producer asks another stream", within("stream", client.get_stream(&name("other"))).await, 41);

    let client = server.client_as("consumer", "user-secret").await;
    let mut consumer = client
        .consumer("c", "s", "t", 0)
        .unwrap()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .poll_interval(IggyDuration::from_str("10ms").unwrap())
        .build();
    ok("consumer.init", within("consumer init", consumer.init()).await);
    let mut got = Vec::new();
    while got.len() < 3 {
        let next = within("consumer.next", consumer.next()).await.expect("stream ended");
        got.push(ok("consumer message", next).message.header.offset);
    }
    assert_eq!(got, vec![0, 1, 2]);
}

/// Over HTTP the same rules hold: a producer granted send_messages on its topic alone sends
/// balanced and by partition, is refused elsewhere (403, the SDK's 41), sees a revocation at
/// once, and its token stops working when its user is deleted (401, the SDK's 40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_grants_revocation_and_deletion_hold_too() {
    let (server, api) = TestServer::start_with_http(&[]);
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 2).await;
    create_stream_and_topic(&root, "other", "t", 1).await;
    create_user(&root, "hank", on_topic(0, 0, TopicPermissions { send_messages: true, ..Default::default() })).await;
    let hank = IggyClient::builder().with_http().with_api_url(api.clone()).build().expect("http client");
    ok("hank logs in over HTTP", within("login", hank.login_user("hank", "user-secret")).await);
    for partitioning in [Partitioning::balanced(), Partitioning::partition_id(1)] {
        let mut m = msgs("h", 1);
        ok("hank sends", within("send", hank.send_messages(&name("s"), &name("t"), &partitioning, &mut m)).await);
    }
    let mut m = msgs("h", 1);
    expect_code("hank sends to another stream", within("send", hank.send_messages(&name("other"), &name("t"), &Partitioning::partition_id(0), &mut m)).await, 41);
    expect_code("hank creates a topic", within("create", hank.create_topic(&name("s"), "h", &topic_options(1))).await, 41);
    ok("revoke", within("revoke", root.update_permissions(&name("hank"), None)).await);
    let mut m = msgs("h", 1);
    expect_code("hank sends after revocation", within("send", hank.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut m)).await, 41);
    ok("delete hank", within("delete", root.delete_user(&name("hank"))).await);
    expect_code("hank's token after his deletion", within("stream", hank.get_stream(&name("s"))).await, 40);
}

/// A member whose poll grant is taken away can still leave its consumer group: leaving only
/// gives its partitions back to the other members (refused, they stayed assigned to a member
/// that may no longer poll them until its session ended). Joining again needs the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_poll_grant_is_revoked_can_still_leave_its_group() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 2).await;
    ok("create group", within("group", root.create_consumer_group(&name("s"), &name("t"), "g")).await);
    create_user(&root, "member", on_topic(0, 0, TopicPermissions { poll_messages: true, ..Default::default() })).await;
    let member = server.client_as("member", "user-secret").await;
    ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    ok("revoke", within("revoke", root.update_permissions(&name("member"), None)).await);
    ok("leave after the revocation", within("leave", member.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let group = ok("get group", within("group", root.get_consumer_group(&name("s"), &name("t"), &name("g"))).await).expect("g");
    assert_eq!(group.members_count, 0, "the member left");
    expect_code("join again without the grant", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await, 41);
}
