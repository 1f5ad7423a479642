//! Users: create, get, list, permissions, password change, delete, and authorization.

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeMap;

fn read_only() -> Permissions {
    Permissions {
        global: GlobalPermissions {
            read_streams: true,
            read_topics: true,
            poll_messages: true,
            ..Default::default()
        },
        streams: None,
    }
}

async fn create_user(client: &IggyClient, user: &str, password: &str, perms: Option<Permissions>) -> UserInfoDetails {
    ok(
        "create_user",
        within(
            "create_user",
            client.create_user(user, password, UserStatus::Active, perms, &UserCreateOptions::default()),
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_returns_details_with_the_next_id() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let alice = create_user(&root, "alice", "alice-secret", Some(read_only())).await;
    assert_eq!(alice.id, 1, "root is 0, the first created user is 1");
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.status, UserStatus::Active);
    assert_eq!(alice.permissions, Some(read_only()));
    let bob = create_user(&root, "bob", "bob-secret", None).await;
    assert_eq!((bob.id, bob.username.as_str(), bob.permissions.clone()), (2, "bob", None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_user_by_id_and_name_and_list_users() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "alice-secret", Some(read_only())).await;

    let by_id = ok("get root", within("get", root.get_user(&id(DEFAULT_ROOT_USER_ID))).await).expect("root");
    assert_eq!((by_id.id, by_id.username.as_str(), by_id.status), (0, ROOT_USER, UserStatus::Active));
    assert_eq!(by_id.permissions, Some(Permissions::root()), "root holds every global permission");
    let by_name = ok("get alice", within("get", root.get_user(&name("alice"))).await).expect("alice");
    assert_eq!((by_name.id, by_name.username.as_str()), (1, "alice"));
    assert_eq!(by_name.permissions, Some(read_only()));
    assert!(ok("get missing", within("get", root.get_user(&name("nobody"))).await).is_none());
    assert!(ok("get missing id", within("get", root.get_user(&id(77))).await).is_none());

    let mut users = ok("list", within("list", root.get_users()).await);
    users.sort_by_key(|u| u.id);
    let got: Vec<(u32, &str, UserStatus)> = users.iter().map(|u| (u.id, u.username.as_str(), u.status)).collect();
    assert_eq!(got, vec![(0, ROOT_USER, UserStatus::Active), (1, "alice", UserStatus::Active)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_with_duplicate_name_fails_with_46() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "alice-secret", None).await;
    expect_code(
        "duplicate user",
        within(
            "create_user",
            root.create_user("alice", "other-secret", UserStatus::Active, None, &UserCreateOptions::default()),
        )
        .await,
        46,
    );
}

/// A user name that shows as another in a user list (an invisible character, white space at an
/// edge) is refused with InvalidUsername (43), on creation and on a rename: a user manager made
/// users that read "iggy" beside root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_names_that_show_as_another_are_refused_with_43() {
    let server = TestServer::start();
    let root = server.root_client().await;
    let options = UserCreateOptions::default();
    for lookalike in ["iggy\u{200B}", "iggy ", "\u{202E}yggi"] {
        expect_code(
            &format!("create {lookalike:?}"),
            within("create_user", root.create_user(lookalike, "a-secret", UserStatus::Active, None, &options)).await,
            43,
        );
    }
    create_user(&root, "alice", "alice-secret", None).await;
    let rename = UserUpdateOptions { username: Some(" iggy".into()), ..Default::default() };
    expect_code("rename", within("update_user", root.update_user(&name("alice"), &rename)).await, 43);
    let users = ok("users", within("get_users", root.get_users()).await);
    let names: Vec<&str> = users.iter().map(|u| u.username.as_str()).collect();
    assert_eq!(names, [ROOT_USER, "alice"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_permissions_replaces_the_users_permissions() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "alice-secret", Some(read_only())).await;
    create_stream_and_topic(&root, "s", "t", 1).await;

    let mut topics = BTreeMap::new();
    topics.insert(
        0usize,
        TopicPermissions { manage_topic: false, read_topic: true, poll_messages: true, send_messages: true },
    );
    let mut streams = BTreeMap::new();
    streams.insert(
        0usize,
        StreamPermissions { read_stream: true, send_messages: true, topics: Some(topics), ..Default::default() },
    );
    let new_perms = Permissions { global: GlobalPermissions { read_servers: true, ..Default::default() }, streams: Some(streams) };
    ok(
        "update_permissions",
        within("update_permissions", root.update_permissions(&name("alice"), Some(new_perms.clone()))).await,
    );
    let alice = ok("get", within("get", root.get_user(&name("alice"))).await).expect("alice");
    assert_eq!(alice.permissions, Some(new_perms));

    ok("clear permissions", within("update_permissions", root.update_permissions(&id(1), None)).await);
    let alice = ok("get", within("get", root.get_user(&id(1))).await).expect("alice");
    assert_eq!(alice.permissions, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_password_makes_only_the_new_password_valid() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "old-password", Some(read_only())).await;

    let alice = server.client_as("alice", "old-password").await;
    ok(
        "change_password",
        within("change_password", alice.change_password(&name("alice"), "old-password", "new-password")).await,
    );

    let fresh = server.anonymous_client().await;
    expect_code("login with the old password", within("login", fresh.login_user("alice", "old-password")).await, 42);
    let identity = ok("login with the new password", within("login", fresh.login_user("alice", "new-password")).await);
    assert_eq!(identity.user_id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_password_with_wrong_current_password_is_refused() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "old-password", None).await;
    expect_code(
        "change with a wrong current password",
        within("change_password", root.change_password(&name("alice"), "wrong-password", "new-password")).await,
        42,
    );
    let fresh = server.anonymous_client().await;
    ok("old password still valid", within("login", fresh.login_user("alice", "old-password")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_user_is_gone_and_cannot_log_in() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_user(&root, "alice", "alice-secret", None).await;
    create_user(&root, "bob", "bob-secret", None).await;
    ok("delete alice", within("delete", root.delete_user(&name("alice"))).await);
    assert!(ok("get alice", within("get", root.get_user(&name("alice"))).await).is_none());
    let users = ok("list", within("list", root.get_users()).await);
    let mut got: Vec<(u32, &str)> = users.iter().map(|u| (u.id, u.username.as_str())).collect();
    got.sort();
    assert_eq!(got, vec![(0, ROOT_USER), (2, "bob")]);
    let fresh = server.anonymous_client().await;
    expect_code("login as a deleted user", within("login", fresh.login_user("alice", "alice-secret")).await, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_user_cannot_be_deleted_deactivated_or_restricted() {
    let server = TestServer::start();
    let root = server.root_client().await;
    expect_code("delete root", within("delete root", root.delete_user(&id(DEFAULT_ROOT_USER_ID))).await, 48);
    assert!(ok("get root", within("get", root.get_user(&id(0))).await).is_some());
    expect_code(
        "change root's permissions",
        within("perms", root.update_permissions(&id(0), Some(Permissions::default()))).await,
        49,
    );
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    expect_code("deactivate root", within("update", root.update_user(&id(0), &deactivate)).await, 4108);
    let r = ok("get root", within("get", root.get_user(&id(0))).await).expect("root");
    assert_eq!((r.status, r.permissions), (UserStatus::Active, Some(Permissions::root())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_user_can_poll_but_is_refused_send_with_unauthorized() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    send_to_partition(&root, &name("s"), &name("t"), 0, msgs("m", 3)).await;
    create_user(&root, "reader", "reader-secret", Some(read_only())).await;

    let reader = server.client_as("reader", "reader-secret").await;
    let polled = poll(&reader, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::first(), 10, false).await;
    assert_eq!(offsets(&polled), vec![0, 1, 2], "read-only user can poll");
    let streams = ok("get_streams", within("list", reader.get_streams()).await);
    assert_eq!(streams.len(), 1, "read-only user can list streams");

    let mut m = msgs("forbidden", 1);
    expect_code(
        "send as read-only user",
        within("send", reader.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut m)).await,
        41,
    );
    expect_code(
        "create stream as read-only user",
        within("create", reader.create_stream("nope", &StreamCreateOptions::default())).await,
        41,
    );
    expect_code(
        "create user as read-only user",
        within(
            "create_user",
            reader.create_user("eve", "eve-secret", UserStatus::Active, None, &UserCreateOptions::default()),
        )
        .await,
        41,
    );
    let after = poll(&root, &name("s"), &name("t"), 0, &consumer("r"), PollingStrategy::first(), 10, false).await;
    assert_eq!(offsets(&after), vec![0, 1, 2], "the refused send appended nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_scoped_send_permission_covers_only_that_stream() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "allowed", "t", 1).await;
    create_stream_and_topic(&root, "other", "t", 1).await;
    let mut streams = BTreeMap::new();
    streams.insert(0usize, StreamPermissions { read_stream: true, read_topics: true, send_messages: true, ..Default::default() });
    let perms = Permissions { global: GlobalPermissions::default(), streams: Some(streams) };
    create_user(&root, "writer", "writer-secret", Some(perms)).await;

    let writer = server.client_as("writer", "writer-secret").await;
    let sent = send_to_partition(&writer, &id(0), &id(0), 0, msgs("ok", 2)).await;
    assert_eq!(sent.confirmations.first().map(|c| (c.stream_id, c.base_offset)), Some((0, 0)));
    let mut m = msgs("no", 1);
    expect_code(
        "send to a stream without permission",
        within("send", writer.send_messages(&id(1), &id(0), &Partitioning::partition_id(0), &mut m)).await,
        41,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_permissions_gate_each_admin_call() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let perms = Permissions {
        global: GlobalPermissions { manage_streams: true, read_streams: true, read_users: true, ..Default::default() },
        streams: None,
    };
    create_user(&root, "ops", "ops-secret", Some(perms)).await;
    let ops = server.client_as("ops", "ops-secret").await;

    ok("manage_streams: create stream", within("create", ops.create_stream("by-ops", &StreamCreateOptions::default())).await);
    let users = ok("read_users: list users", within("list", ops.get_users()).await);
    assert_eq!(users.len(), 2);
    expect_code(
        "no manage_users: create user",
        within("create_user", ops.create_user("xavier", "xavier-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
        41,
    );
    // manage_streams includes read_streams, which includes read_topics, which includes
    // poll_messages (C/types/permissions/permissions_global.rs). Whether managing a topic
    // also grants sending is not documented, so it is not asserted here.
    ok(
        "manage_streams implies poll",
        within("poll", ops.poll_messages(&name("s"), &name("t"), Some(0), &consumer("c"), &PollingStrategy::first(), 1, false)).await,
    );
    expect_code("no read_servers: stats", within("stats", ops.get_stats()).await, 41);
    ok("manage_streams covers topics: delete topic", within("delete", ops.delete_topic(&name("s"), &name("t"))).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_user_update_changes_nothing() {
    // One update naming a valid new username and a refused status: the whole update is
    // refused, the username included.
    let server = TestServer::start();
    let root = server.root_client().await;
    let update = UserUpdateOptions {
        username: Some("boss".into()),
        status: Some(UserStatus::Inactive),
        ..Default::default()
    };
    expect_code("rename and deactivate root", within("update", root.update_user(&id(0), &update)).await, 4108);
    let r = ok("get root", within("get", root.get_user(&id(0))).await).expect("root");
    assert_eq!(r.username, ROOT_USER, "the refused update must not rename root");
    assert!(ok("get boss", within("get", root.get_user(&name("boss"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_scoped_permissions_cover_only_that_topic() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t0", 1).await;
    ok("create t1", within("create", root.create_topic(&name("s"), "t1", &topic_options(1))).await);
    send_to_partition(&root, &name("s"), &name("t0"), 0, msgs("m", 2)).await;
    send_to_partition(&root, &name("s"), &name("t1"), 0, msgs("m", 2)).await;
    let mut topics = BTreeMap::new();
    topics.insert(1usize, TopicPermissions { read_topic: true, poll_messages: true, send_messages: true, manage_topic: false });
    let mut streams = BTreeMap::new();
    streams.insert(0usize, StreamPermissions { topics: Some(topics), ..Default::default() });
    create_user(&root, "narrow", "narrow-secret", Some(Permissions { global: GlobalPermissions::default(), streams: Some(streams) })).await;
    let narrow = server.client_as("narrow", "narrow-secret").await;

    let polled = poll(&narrow, &id(0), &id(1), 0, &consumer("n"), PollingStrategy::first(), 10, false).await;
    assert_eq!(offsets(&polled), vec![0, 1], "topic 1 is readable");
    send_to_partition(&narrow, &id(0), &id(1), 0, msgs("n", 1)).await;
    expect_code(
        "poll topic 0",
        within("poll", narrow.poll_messages(&id(0), &id(0), Some(0), &consumer("n"), &PollingStrategy::first(), 10, false)).await,
        41,
    );
    let mut m = msgs("x", 1);
    expect_code(
        "send to topic 0",
        within("send", narrow.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut m)).await,
        41,
    );
    expect_code("delete topic 1 without manage_topic", within("delete", narrow.delete_topic(&id(0), &id(1))).await, 41);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_messages_alone_lets_the_sdk_poll_and_keep_offsets() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    send_to_partition(&root, &name("s"), &name("t"), 0, msgs("m", 3)).await;
    let global = Permissions { global: GlobalPermissions { poll_messages: true, ..Default::default() }, streams: None };
    create_user(&root, "global-poller", "poller-secret", Some(global)).await;
    let mut topics = BTreeMap::new();
    topics.insert(0usize, TopicPermissions { poll_messages: true, ..Default::default() });
    let mut streams = BTreeMap::new();
    streams.insert(0usize, StreamPermissions { topics: Some(topics), ..Default::default() });
    create_user(&root, "topic-poller", "poller-secret", Some(Permissions { global: GlobalPermissions::default(), streams: Some(streams) })).await;

    for user in ["global-poller", "topic-poller"] {
        let poller = server.client_as(user, "poller-secret").await;
        let c = consumer(user);
        let polled = poll(&poller, &id(0), &id(0), 0, &c, PollingStrategy::next(), 2, true).await;
        assert_eq!(offsets(&polled), vec![0, 1], "{user} polls with poll_messages alone");
        ok("store_consumer_offset", within("store", poller.store_consumer_offset(&c, &id(0), &id(0), Some(0), 2)).await);
        let stored = ok("get_consumer_offset", within("get", poller.get_consumer_offset(&c, &id(0), &id(0), Some(0))).await);
        assert_eq!(stored.map(|o| o.stored_offset), Some(2), "{user} reads its stored offset");
        let mut m = msgs("forbidden", 1);
        expect_code(
            "send with poll_messages alone",
            within("send", poller.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut m)).await,
            41,
        );
    }
}

/// Stream and topic ids are reused (the lowest free one), and grants name ids: a grant on a
/// deleted stream or topic goes with it, so it never reaches the stream or topic created next
/// under the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_on_a_deleted_stream_or_topic_do_not_reach_the_next_under_its_id() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "shared", "open", 1).await;
    create_stream_and_topic(&root, "old", "t", 1).await;
    let mut topics = BTreeMap::new();
    topics.insert(0usize, TopicPermissions { read_topic: true, poll_messages: true, ..Default::default() });
    let mut streams = BTreeMap::new();
    streams.insert(0usize, StreamPermissions { topics: Some(topics), ..Default::default() });
    streams.insert(1usize, StreamPermissions { read_stream: true, read_topics: true, poll_messages: true, ..Default::default() });
    create_user(&root, "guest", "guest-secret", Some(Permissions { global: GlobalPermissions::default(), streams: Some(streams) })).await;
    let guest = server.client_as("guest", "guest-secret").await;
    poll(&guest, &id(1), &id(0), 0, &consumer("g"), PollingStrategy::first(), 1, false).await;
    poll(&guest, &id(0), &id(0), 0, &consumer("g"), PollingStrategy::first(), 1, false).await;

    ok("delete stream old", within("delete", root.delete_stream(&name("old"))).await);
    let (secret, _) = create_stream_and_topic(&root, "secret", "t", 1).await;
    assert_eq!(secret.id, 1, "the new stream reuses the deleted one's id");
    send_to_partition(&root, &name("secret"), &name("t"), 0, msgs("classified", 1)).await;
    ok("delete topic open", within("delete", root.delete_topic(&name("shared"), &name("open"))).await);
    let hidden = ok("create topic", within("create", root.create_topic(&name("shared"), "hidden", &topic_options(1))).await);
    assert_eq!(hidden.id, 0, "the new topic reuses the deleted one's id");
    send_to_partition(&root, &name("shared"), &name("hidden"), 0, msgs("classified", 1)).await;

    // A new connection: the first one's cached routes name the deleted partitions (87).
    let guest = server.client_as("guest", "guest-secret").await;
    let refused = |r: Result<PolledMessages, IggyError>| r.map(|p| offsets(&p));
    expect_code(
        "poll the stream created under a deleted stream's id",
        refused(within("poll", guest.poll_messages(&id(1), &id(0), Some(0), &consumer("g"), &PollingStrategy::first(), 1, false)).await),
        41,
    );
    expect_code(
        "poll the topic created under a deleted topic's id",
        refused(within("poll", guest.poll_messages(&id(0), &id(0), Some(0), &consumer("g"), &PollingStrategy::first(), 1, false)).await),
        41,
    );
    let details = ok("get user", within("get", root.get_user(&name("guest"))).await).expect("guest");
    let streams = details.permissions.and_then(|p| p.streams).unwrap_or_default();
    assert!(!streams.contains_key(&1), "the deleted stream's grant is gone: {streams:?}");
    assert!(streams.get(&0).is_some_and(|s| s.topics.as_ref().is_none_or(|t| t.is_empty())), "the deleted topic's grant is gone: {streams:?}");
}

/// A grant names a stream or topic that must exist (the SDK's `create_user` and
/// `update_permissions` contract): StreamIdNotFound or TopicIdNotFound over the binary protocol,
/// 404 over HTTP, and nothing changes. The server once stored such a grant, which then reached
/// whatever stream or topic was created next under that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_on_a_missing_stream_or_topic_is_refused() {
    let (server, api) = TestServer::start_with_http(&[]);
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let on_stream = |stream: usize, topics: Option<BTreeMap<usize, TopicPermissions>>| {
        let grant = StreamPermissions { read_stream: true, poll_messages: true, topics, ..Default::default() };
        Some(Permissions { global: GlobalPermissions::default(), streams: Some(BTreeMap::from([(stream, grant)])) })
    };
    let on_topic = |topic: usize| on_stream(0, Some(BTreeMap::from([(topic, TopicPermissions { read_topic: true, ..Default::default() })])));
    let http = crate::http::http_client(&api).await;
    for (client, missing_stream, missing_topic) in [(&root, 1009, 2010), (&http, 20, 20)] {
        for (perms, code) in [(on_stream(1, None), missing_stream), (on_topic(1), missing_topic)] {
            let created = client.create_user("guest", "guest-secret", UserStatus::Active, perms, &UserCreateOptions::default()).await;
            expect_code("create with a grant on a missing stream or topic", created, code);
        }
        assert!(ok("get guest", within("get", root.get_user(&name("guest"))).await).is_none(), "no user was created");
    }
    create_user(&root, "guest", "guest-secret", on_topic(0)).await;
    for (client, missing_stream, missing_topic) in [(&root, 1009, 2010), (&http, 20, 20)] {
        for (perms, code) in [(on_stream(1, None), missing_stream), (on_topic(1), missing_topic)] {
            let updated = within("update", client.update_permissions(&name("guest"), perms)).await;
            expect_code("update to a grant on a missing stream or topic", updated, code);
        }
    }
    let guest = ok("get guest", within("get", root.get_user(&name("guest"))).await).expect("guest");
    assert_eq!(guest.permissions, on_topic(0), "the refused updates changed nothing");
}

/// read_topics (globally, on a stream, or read_topic on a topic) lets a user manage the topic's
/// consumer groups (the SDK's permission docs; upstream judges create and delete as it judges
/// get_topic), so a consumer that may read can create the group it joins. The server once
/// asked manage_topic, refusing them 41.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_topics_lets_a_user_create_and_delete_consumer_groups() {
    let server = TestServer::start();
    let root = server.root_client().await;
    create_stream_and_topic(&root, "s", "t", 1).await;
    let global = GlobalPermissions { read_topics: true, ..Default::default() };
    let on_stream = StreamPermissions { read_topics: true, ..Default::default() };
    let on_topic = StreamPermissions {
        topics: Some(BTreeMap::from([(0usize, TopicPermissions { read_topic: true, ..Default::default() })])),
        ..Default::default()
    };
    let readers = [
        ("global-reader", Permissions { global, streams: None }),
        ("stream-reader", Permissions { global: GlobalPermissions::default(), streams: Some(BTreeMap::from([(0usize, on_stream)])) }),
        ("topic-reader", Permissions { global: GlobalPermissions::default(), streams: Some(BTreeMap::from([(0usize, on_topic)])) }),
    ];
    for (user, permissions) in readers {
        create_user(&root, user, "reader-secret", Some(permissions)).await;
        let reader = server.client_as(user, "reader-secret").await;
        ok(user, within("create group", reader.create_consumer_group(&name("s"), &name("t"), user)).await);
        ok(user, within("delete group", reader.delete_consumer_group(&name("s"), &name("t"), &name(user))).await);
    }
    let poller = Permissions { global: GlobalPermissions { poll_messages: true, ..Default::default() }, streams: None };
    create_user(&root, "poller", "poller-secret", Some(poller)).await;
    let poller = server.client_as("poller", "poller-secret").await;
    expect_code("poll_messages alone: create group", within("create group", poller.create_consumer_group(&name("s"), &name("t"), "p")).await, 41);
}

/// A node started in `dir` with no root credentials, on `address` (TCP only), logging in
/// `format` to `dir/log`: the process, and a thread collecting every stdout line until it ends.
fn started_without_root_credentials(
    dir: &std::path::Path,
    address: &str,
    format: &str,
    log: &str,
) -> (std::process::Child, std::thread::JoinHandle<Vec<String>>) {
    use std::io::BufRead;
    let mut command = std::process::Command::new(server_binary());
    without_shell_settings(&mut command);
    let mut child = command
        .current_dir(dir)
        .env("IGGY_TCP_ADDRESS", address)
        .env("IGGY_QUIC_ENABLED", "false")
        .env("IGGY_HTTP_ENABLED", "false")
        .env("IGGY_WEBSOCKET_ENABLED", "false")
        .env("IGGY_SYSTEM_PATH", dir.join("data"))
        .env("IGGY_SYSTEM_LOGGING_FORMAT", format)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::OpenOptions::new().create(true).append(true).open(dir.join(log)).expect("a log file"))
        .spawn()
        .expect("spawn iggy-server");
    let stdout = child.stdout.take().expect("piped stdout");
    let lines = std::thread::spawn(move || std::io::BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<_>>());
    (child, lines)
}

/// A first start given no root credentials (no flag, no variables) prints the root user's
/// generated password once on stdout, as README says: a line of text, or one JSON object with
/// a JSON log. The password signs in; the next start on the directory prints nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_root_password_is_printed_once_and_signs_in() {
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let address = format!("127.0.0.1:{}", free_port());
        let start = || started_without_root_credentials(dir.path(), &address, format, "server.log");
        // Serving, not only bound (the listeners are bound before the root user is created):
        // this start's "serving" line, each start's log appended to the last.
        let serving = |child: &mut std::process::Child, starts: usize| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let log = || std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
            while log().matches("replica 0 serving").count() < starts {
                assert!(child.try_wait().expect("poll the child").is_none(), "{format}: the server exited at start");
                assert!(std::time::Instant::now() < deadline, "{format}: the server did not serve within 30 s");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        };
        let stop = |mut child: std::process::Child, lines: std::thread::JoinHandle<Vec<String>>| {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait().expect("wait for the server");
            lines.join().expect("stdout reader")
        };

        let (mut child, lines) = start();
        serving(&mut child, 1);
        let printed = stop(child, lines);
        let password = match format {
            "text" => {
                let [line] = &printed[..] else { panic!("one line on stdout: {printed:?}") };
                let password = line.strip_prefix("root user \"iggy\" generated password: ");
                password.unwrap_or_else(|| panic!("the password line: {line:?}")).to_string()
            }
            _ => {
                let [line] = &printed[..] else { panic!("one line on stdout: {printed:?}") };
                let object: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("a JSON object ({e}): {line:?}"));
                assert_eq!(object["root_user"], "iggy", "{line}");
                object["generated_password"].as_str().unwrap_or_else(|| panic!("a password: {line}")).to_string()
            }
        };
        assert!(password.len() >= 16, "{format}: a long password: {password:?}");

        let (mut child, lines) = start();
        serving(&mut child, 2);
        let client = IggyClient::from_connection_string(&format!("iggy://iggy:{password}@{address}")).expect("connection string");
        within("connect and sign in with the printed password", client.connect())
            .await
            .unwrap_or_else(|e| panic!("{format}: sign in with the printed password: {e}"));
        ok("a signed-in request", within("get_me", client.get_me()).await);
        drop(client);
        let printed = stop(child, lines);
        assert!(printed.is_empty(), "{format}: nothing printed at the next start: {printed:?}");
    }
}

/// A first start whose address is taken exits 1 before the root user is created: the next
/// start, on a free address, prints the generated password. The refused start once created
/// the root user and printed its password, and the corrected start printed none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_refused_for_a_taken_address_leaves_the_root_password_to_the_next() {
    let dir = tempfile::tempdir().expect("temp dir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("take a port");
    let address = taken.local_addr().expect("its address").to_string();
    let start = |log: &str| started_without_root_credentials(dir.path(), &address, "text", log);
    let (mut refused, lines) = start("refused.log");
    let status = refused.wait().expect("wait for the refused start");
    assert_eq!(status.code(), Some(1), "a taken address refuses the start");
    let printed = lines.join().expect("stdout reader");
    assert!(printed.is_empty(), "the refused start printed no password: {printed:?}");
    drop(taken);
    let (mut child, lines) = start("next.log");
    // Serving, not only bound: the listeners are bound before the root user is created.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let log = || std::fs::read_to_string(dir.path().join("next.log")).unwrap_or_default();
    while !log().contains("replica 0 serving") {
        assert!(child.try_wait().expect("poll the child").is_none(), "the server exited at start");
        assert!(std::time::Instant::now() < deadline, "the server did not serve within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().expect("wait for the server");
    let printed = lines.join().expect("stdout reader");
    let [line] = &printed[..] else { panic!("one line on stdout: {printed:?}; the log:\n{}", log()) };
    assert!(line.starts_with("root user \"iggy\" generated password: "), "{line}");
}
