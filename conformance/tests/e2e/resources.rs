//! Resource options and updates (resource.update, code 16): renames, topic settings, the
//! partition resize policy, and user status.

use crate::harness::*;
use iggy::prelude::*;
use std::time::Duration;

fn hour() -> IggyExpiry {
    IggyExpiry::ExpireDuration(IggyDuration::from(Duration::from_secs(3600)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_stream_renames_it() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create", within("create", client.create_stream("old", &StreamCreateOptions::default())).await);
    ok("create other", within("create", client.create_stream("taken", &StreamCreateOptions::default())).await);
    let rename = StreamUpdateOptions { name: Some("new".into()), ..Default::default() };
    ok("update_stream", within("update", client.update_stream(&name("old"), &rename)).await);
    assert!(ok("get old", within("get", client.get_stream(&name("old"))).await).is_none(), "old name is gone");
    let s = ok("get new", within("get", client.get_stream(&name("new"))).await).expect("new name resolves");
    assert_eq!((s.id, s.name.as_str()), (0, "new"));

    let clash = StreamUpdateOptions { name: Some("taken".into()), ..Default::default() };
    expect_code("rename onto an existing name", within("update", client.update_stream(&id(0), &clash)).await, 1012);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_topic_renames_it() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "old", 1).await;
    ok("create other", within("create", client.create_topic(&name("s"), "taken", &topic_options(1))).await);
    let update = TopicUpdateOptions { name: Some("new".into()), ..Default::default() };
    ok("update_topic", within("update", client.update_topic(&name("s"), &name("old"), &update)).await);
    assert!(ok("get old", within("get", client.get_topic(&name("s"), &name("old"))).await).is_none());
    let t = ok("get new", within("get", client.get_topic(&name("s"), &name("new"))).await).expect("renamed topic");
    assert_eq!((t.id, t.name.as_str(), t.partitions_count), (0, "new", 1));

    let clash = TopicUpdateOptions { name: Some("taken".into()), ..Default::default() };
    expect_code(
        "rename onto an existing topic name",
        within("update", client.update_topic(&name("s"), &id(0), &clash)).await,
        2013,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_topic_changes_message_expiry_and_max_size() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    let update = TopicUpdateOptions {
        message_expiry: Some(hour()),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(2 * 1024 * 1024 * 1024u64))),
        ..Default::default()
    };
    ok("update_topic", within("update", client.update_topic(&name("s"), &name("t"), &update)).await);
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic");
    let resolved = t.resolved_options();
    assert_eq!(resolved.message_expiry, hour(), "message_expiry after update (options {:?})", t.options);
    assert_eq!(resolved.max_topic_size, MaxTopicSize::Custom(IggyByteSize::from(2 * 1024 * 1024 * 1024u64)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_create_options_are_reported_back_resolved() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create stream", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let opts = TopicCreateOptions {
        partitions_count: Some(2),
        compression_algorithm: Some(CompressionAlgorithm::Gzip),
        message_expiry: Some(hour()),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(2 * 1024 * 1024 * 1024u64))),
        segment_size: Some(IggyByteSize::from(8 * 1024 * 1024u64)),
        partition_resize_policy: Some(PartitionResizePolicy::Fixed),
        ..Default::default()
    };
    let created = ok("create topic", within("create", client.create_topic(&name("s"), "t", &opts)).await);
    for (what, t) in [
        ("create reply", created),
        ("get", ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic")),
    ] {
        let r = t.resolved_options();
        let options = format!("{:?}", t.options);
        assert_eq!(r.compression_algorithm, CompressionAlgorithm::Gzip, "{what}: compression (options {options})");
        assert_eq!(r.message_expiry, hour(), "{what}: message_expiry");
        assert_eq!(
            r.max_topic_size,
            MaxTopicSize::Custom(IggyByteSize::from(2 * 1024 * 1024 * 1024u64)),
            "{what}: max_topic_size"
        );
        assert_eq!(r.partition_resize_policy, PartitionResizePolicy::Fixed, "{what}: resize policy");
        assert_eq!(
            r.runtime.segment_size.map(|s| s.as_bytes_u64()),
            Some(8 * 1024 * 1024),
            "{what}: segment_size"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_resize_policy_refuses_partition_changes_with_2023() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create stream", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let opts = TopicCreateOptions {
        partitions_count: Some(2),
        partition_resize_policy: Some(PartitionResizePolicy::Fixed),
        ..Default::default()
    };
    ok("create topic", within("create", client.create_topic(&name("s"), "t", &opts)).await);
    expect_code("add partitions", within("create", client.create_partitions(&name("s"), &name("t"), 1)).await, 2023);
    expect_code("delete partitions", within("delete", client.delete_partitions(&name("s"), &name("t"), 1)).await, 2023);
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("topic");
    assert_eq!(t.partitions_count, 2, "unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_user_renames_and_the_new_name_logs_in() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create",
        within("create", root.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    let rename = UserUpdateOptions { username: Some("alicia".into()), ..Default::default() };
    ok("update_user", within("update", root.update_user(&name("alice"), &rename)).await);
    assert!(ok("get old", within("get", root.get_user(&name("alice"))).await).is_none());
    let u = ok("get new", within("get", root.get_user(&name("alicia"))).await).expect("renamed");
    assert_eq!((u.id, u.username.as_str()), (1, "alicia"));
    let fresh = server.anonymous_client().await;
    expect_code("old name", within("login", fresh.login_user("alice", "alice-secret")).await, 42);
    let identity = ok("new name", within("login", fresh.login_user("alicia", "alice-secret")).await);
    assert_eq!(identity.user_id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_user_is_reported_inactive_and_cannot_log_in() {
    let server = TestServer::start();
    let root = server.root_client().await;
    ok(
        "create",
        within("create", root.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await,
    );
    let deactivate = UserUpdateOptions { status: Some(UserStatus::Inactive), ..Default::default() };
    ok("deactivate", within("update", root.update_user(&name("alice"), &deactivate)).await);
    let u = ok("get", within("get", root.get_user(&name("alice"))).await).expect("alice");
    assert_eq!(u.status, UserStatus::Inactive);

    let fresh = server.anonymous_client().await;
    let r = within("login inactive", fresh.login_user("alice", "alice-secret")).await;
    let code = r.as_ref().err().map(IggyError::as_code);
    // UserInactive (47) as a status, or the eviction reason UserInactive, which the SDK maps
    // to Unauthenticated (40).
    assert!(matches!(code, Some(47) | Some(40)), "login of an inactive user: {r:?}");

    let activate = UserUpdateOptions { status: Some(UserStatus::Active), ..Default::default() };
    ok("reactivate", within("update", root.update_user(&id(1), &activate)).await);
    let again = server.anonymous_client().await;
    ok("login after reactivation", within("login", again.login_user("alice", "alice-secret")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_survive_a_restart() {
    let mut server = TestServer::start();
    {
        let client = server.root_client().await;
        create_stream_and_topic(&client, "s", "t", 1).await;
        let rename = StreamUpdateOptions { name: Some("s2".into()), ..Default::default() };
        ok("update_stream", within("update", client.update_stream(&name("s"), &rename)).await);
        let update = TopicUpdateOptions { name: Some("t2".into()), ..Default::default() };
        ok("update_topic", within("update", client.update_topic(&name("s2"), &name("t"), &update)).await);
    }
    tokio::task::block_in_place(|| server.restart());
    let client = server.root_client().await;
    let t = ok("get", within("get", client.get_topic(&name("s2"), &name("t2"))).await).expect("renamed topic");
    assert_eq!((t.id, t.name.as_str()), (0, "t2"));
    assert!(ok("get old", within("get", client.get_stream(&name("s"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_only_topic_options_cannot_be_updated() {
    // The catalog marks these keys create-only (describe_options: updatable = false); an
    // update naming one is refused with OptionNotUpdatable (4103) and changes nothing.
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    let mut wrong = Vec::new();
    for (key, value) in [
        ("partition_resize_policy", "fixed"),
        ("segment_size", "8MiB"),
        ("compression_algorithm", "gzip"),
        ("durability", "persisted"),
    ] {
        let update = TopicUpdateOptions {
            raw: [(key.to_string(), value.to_string())].into_iter().collect(),
            ..Default::default()
        };
        let r = within("update", client.update_topic(&name("s"), &name("t"), &update)).await;
        let code = r.as_ref().err().map(IggyError::as_code);
        if code != Some(4103) {
            wrong.push(format!("{key}={value}: {r:?}"));
        }
    }
    assert!(wrong.is_empty(), "create-only keys updated instead of refused with 4103: {wrong:?}");
    let t = ok("get", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("t");
    let r = t.resolved_options();
    assert_eq!(r.partition_resize_policy, PartitionResizePolicy::Mutable);
    assert_eq!(r.compression_algorithm, CompressionAlgorithm::None);
    ok("still resizable", within("create", client.create_partitions(&name("s"), &name("t"), 1)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_returns_an_updatable_option_to_its_default_and_refuses_create_only_keys() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    ok("create reference", within("create", client.create_topic(&name("s"), "defaults", &topic_options(1))).await);
    let set = TopicUpdateOptions { message_expiry: Some(hour()), ..Default::default() };
    ok("set expiry", within("update", client.update_topic(&name("s"), &name("t"), &set)).await);
    let reset = TopicUpdateOptions { reset: [OptionKey::MessageExpiry].into_iter().collect(), ..Default::default() };
    ok("reset expiry", within("update", client.update_topic(&name("s"), &name("t"), &reset)).await);
    let t = ok("get t", within("get", client.get_topic(&name("s"), &name("t"))).await).expect("t");
    let d = ok("get defaults", within("get", client.get_topic(&name("s"), &name("defaults"))).await).expect("defaults");
    assert_eq!(
        t.resolved_options().message_expiry,
        d.resolved_options().message_expiry,
        "reset brings back the default (options {:?})",
        t.options
    );

    let bad = TopicUpdateOptions { raw_reset: ["segment_size".to_string()].into_iter().collect(), ..Default::default() };
    expect_code("reset a create-only key", within("update", client.update_topic(&name("s"), &name("t"), &bad)).await, 4103);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn option_admission_refuses_bad_values_unknown_keys_and_read_only_keys() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create stream", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let mut wrong = Vec::new();
    let check = |wrong: &mut Vec<String>, what: &str, r: Result<TopicDetails, IggyError>, code: u32| {
        let got = r.as_ref().err().map(IggyError::as_code);
        if got != Some(code) {
            wrong.push(format!("{what}: expected {code}, got {:?}", r.map(|t| t.name)));
        }
    };
    // segment_size must lie in 1 MiB..=1 GiB and be a 512-byte multiple
    // (C/types/options/mod.rs:436-458).
    for (n, bytes) in [(1, 4096u64), (2, 1024 * 1024 + 100), (3, 2 * 1024 * 1024 * 1024)] {
        let opts = TopicCreateOptions {
            partitions_count: Some(1),
            segment_size: Some(IggyByteSize::from(bytes)),
            ..Default::default()
        };
        let r = within("create", client.create_topic(&name("s"), &format!("bad-seg-{n}"), &opts)).await;
        check(&mut wrong, &format!("segment_size {bytes}"), r, 4042);
    }
    let unknown = TopicCreateOptions {
        partitions_count: Some(1),
        raw: [("no_such_option".to_string(), "1".to_string())].into_iter().collect(),
        ..Default::default()
    };
    check(&mut wrong, "unknown key", within("create", client.create_topic(&name("s"), "unknown", &unknown)).await, 4041);
    let stream_only = TopicCreateOptions {
        partitions_count: Some(1),
        raw: [("encryption_key_source".to_string(), "server".to_string())].into_iter().collect(),
        ..Default::default()
    };
    check(
        &mut wrong,
        "stream-only read-only key on a topic",
        within("create", client.create_topic(&name("s"), "ro", &stream_only)).await,
        4041,
    );
    let read_only = StreamCreateOptions {
        raw: [("encryption_key_source".to_string(), "server".to_string())].into_iter().collect(),
        ..Default::default()
    };
    let r = within("create", client.create_stream("ro", &read_only)).await;
    if r.as_ref().err().map(IggyError::as_code) != Some(4105) {
        wrong.push(format!("read-only key on a stream create: expected 4105, got {:?}", r.map(|s| s.name)));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let topics = ok("list", within("list", client.get_topics(&name("s"))).await);
    assert!(topics.is_empty(), "no refused topic was created: {:?}", topics.iter().map(|t| &t.name).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_outside_their_scope_are_refused() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create", within("create", client.create_stream("s", &StreamCreateOptions::default())).await);
    let topic_key_on_stream = StreamUpdateOptions {
        raw: [("message_expiry".to_string(), "1h".to_string())].into_iter().collect(),
        ..Default::default()
    };
    expect_code(
        "a topic-only key on a stream update",
        within("update", client.update_stream(&name("s"), &topic_key_on_stream)).await,
        4041,
    );
    let unknown_user_key = UserCreateOptions { raw: [("colour".to_string(), "blue".to_string())].into_iter().collect() };
    expect_code(
        "an unknown key on a user create",
        within("create", client.create_user("alice", "alice-secret", UserStatus::Active, None, &unknown_user_key)).await,
        4041,
    );
    assert!(ok("get alice", within("get", client.get_user(&name("alice"))).await).is_none(), "not created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_down_after_deletes() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "a", "t", 2).await;
    create_stream_and_topic(&client, "b", "t", 3).await;
    send_to_partition(&client, &name("a"), &name("t"), 0, msgs("m", 5)).await;
    send_to_partition(&client, &name("b"), &name("t"), 2, msgs("m", 4)).await;
    ok("group", within("cg", client.create_consumer_group(&name("b"), &name("t"), "g")).await);
    ok("delete stream b", within("delete", client.delete_stream(&name("b"))).await);
    let stats = ok("stats", within("stats", client.get_stats()).await);
    assert_eq!(
        (stats.streams_count, stats.topics_count, stats.partitions_count, stats.messages_count, stats.consumer_groups_count),
        (1, 1, 2, 5, 0),
        "stats after deleting stream b"
    );
}
