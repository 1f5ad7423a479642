//! External group offsets (consumer kind 3, `Consumer::external_group`): the offsets of an Iggy
//! consumer group whose membership is managed outside Iggy. They have their own slot (a
//! group's kind-2 and kind-3 offsets never overwrite each other), no membership check, no range
//! check, are never polled (FeatureUnavailable, code 5), hold no segment back, and go with the
//! group. A kind-3 call naming a missing group fails with 5000 (numeric id) or 5003 (name).

use crate::harness::*;
use iggy::prelude::*;

const FEATURE_UNAVAILABLE: u32 = 5;
const OFFSET_NOT_FOUND: u32 = 3021;
const GROUP_ID_NOT_FOUND: u32 = 5000;
const GROUP_NAME_NOT_FOUND: u32 = 5003;

fn external(group: Identifier) -> Consumer {
    Consumer::external_group(group)
}

/// Stream `s`, topic `t` with `partitions` partitions (10 messages in partition 0) and group `g`.
async fn setup(server: &TestServer, partitions: u32) -> IggyClient {
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", partitions).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 10)).await;
    let g = ok(
        "create group",
        within(
            "create group",
            client.create_consumer_group(&name("s"), &name("t"), "g"),
        )
        .await,
    );
    assert_eq!(g.id, 0);
    client
}

async fn store(
    client: &IggyClient,
    c: &Consumer,
    partition: u32,
    offset: u64,
) -> Result<(), IggyError> {
    within(
        "store offset",
        client.store_consumer_offset(c, &name("s"), &name("t"), Some(partition), offset),
    )
    .await
}

async fn get(
    client: &IggyClient,
    c: &Consumer,
    partition: u32,
) -> Result<Option<iggy_common::ConsumerOffsetInfo>, IggyError> {
    within(
        "get offset",
        client.get_consumer_offset(c, &name("s"), &name("t"), Some(partition)),
    )
    .await
}

async fn delete(client: &IggyClient, c: &Consumer, partition: u32) -> Result<(), IggyError> {
    within(
        "delete offset",
        client.delete_consumer_offset(c, &name("s"), &name("t"), Some(partition)),
    )
    .await
}

/// The stored offset of `c` in `partition`, `None` when there is none.
async fn stored(client: &IggyClient, c: &Consumer, partition: u32) -> Option<u64> {
    ok(&format!("get {c}"), get(client, c, partition).await).map(|info| info.stored_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_offsets_have_their_own_slot_apart_from_the_groups_offsets() {
    let server = TestServer::start();
    let client = setup(&server, 1).await;
    let (group, ext) = (Consumer::group(name("g")), external(name("g")));

    ok("store kind 2", store(&client, &group, 0, 4).await);
    assert_eq!(
        stored(&client, &ext, 0).await,
        None,
        "a kind-2 store leaves the kind-3 slot empty"
    );
    ok("store kind 3", store(&client, &ext, 0, 7).await);
    assert_eq!(
        stored(&client, &group, 0).await,
        Some(4),
        "a kind-3 store does not overwrite the group's offset"
    );
    assert_eq!(stored(&client, &ext, 0).await, Some(7));
    ok("store kind 2 again", store(&client, &group, 0, 2).await);
    assert_eq!(
        stored(&client, &ext, 0).await,
        Some(7),
        "a kind-2 store does not overwrite the kind-3 offset"
    );
    // The group's numeric id and its name name the same slot.
    assert_eq!(stored(&client, &external(id(0)), 0).await, Some(7));
    ok(
        "store kind 3 by id",
        store(&client, &external(id(0)), 0, 8).await,
    );
    assert_eq!(stored(&client, &ext, 0).await, Some(8));

    ok("delete kind 3", delete(&client, &ext, 0).await);
    assert_eq!(stored(&client, &ext, 0).await, None);
    assert_eq!(
        stored(&client, &group, 0).await,
        Some(2),
        "deleting the kind-3 offset keeps the group's"
    );
    expect_code(
        "delete kind 3 again",
        delete(&client, &ext, 0).await,
        OFFSET_NOT_FOUND,
    );
    ok("store kind 3", store(&client, &ext, 0, 5).await);
    ok("delete kind 2", delete(&client, &group, 0).await);
    assert_eq!(
        stored(&client, &ext, 0).await,
        Some(5),
        "deleting the group's offset keeps the kind-3 one"
    );
    assert_eq!(stored(&client, &group, 0).await, None);
    // Nor is it a plain consumer's offset of the same name.
    assert_eq!(stored(&client, &consumer("g"), 0).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_offsets_need_no_membership() {
    let server = TestServer::start();
    let admin = setup(&server, 2).await;
    // A member holds every partition of the group; another client, not a member, stores and
    // reads the kind-3 offsets of both partitions.
    ok(
        "join",
        within(
            "join",
            admin.join_consumer_group(&name("s"), &name("t"), &name("g")),
        )
        .await,
    );
    let outsider = server.root_client().await;
    let ext = external(name("g"));
    for partition in [0, 1] {
        ok(
            "outsider stores kind 3",
            store(&outsider, &ext, partition, 3 + u64::from(partition)).await,
        );
        assert_eq!(
            stored(&outsider, &ext, partition).await,
            Some(3 + u64::from(partition))
        );
    }
    ok("outsider deletes kind 3", delete(&outsider, &ext, 1).await);
    assert_eq!(stored(&outsider, &ext, 1).await, None);
    let details = ok(
        "get group",
        within(
            "get group",
            admin.get_consumer_group(&name("s"), &name("t"), &name("g")),
        )
        .await,
    )
    .expect("group");
    assert_eq!(
        details.members_count, 1,
        "kind-3 offset calls do not join the group"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_offsets_may_exceed_the_partitions_offset_range() {
    let server = TestServer::start();
    let client = setup(&server, 2).await;
    let ext = external(name("g"));
    // Partition 0 holds offsets 0..=9; partition 1 is empty.
    ok(
        "store beyond the end",
        store(&client, &ext, 0, 1_000_000).await,
    );
    let info = ok("get", get(&client, &ext, 0).await).expect("kind-3 offset");
    assert_eq!(
        (info.partition_id, info.stored_offset, info.current_offset),
        (0, 1_000_000, 9)
    );
    ok(
        "store on an empty partition",
        store(&client, &ext, 1, 42).await,
    );
    assert_eq!(stored(&client, &ext, 1).await, Some(42));
    ok("store u64::MAX", store(&client, &ext, 1, u64::MAX).await);
    assert_eq!(stored(&client, &ext, 1).await, Some(u64::MAX));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_with_kind_3_answers_feature_unavailable() {
    let server = TestServer::start();
    let client = setup(&server, 1).await;
    let ext = external(name("g"));
    ok("store kind 3", store(&client, &ext, 0, 3).await);
    let strategies = [
        PollingStrategy::next(),
        PollingStrategy::offset(0),
        PollingStrategy::first(),
        PollingStrategy::last(),
    ];
    for strategy in strategies {
        for auto_commit in [false, true] {
            expect_code(
                &format!("kind-3 poll {strategy:?} auto_commit={auto_commit}"),
                within(
                    "poll",
                    client.poll_messages(
                        &name("s"),
                        &name("t"),
                        Some(0),
                        &ext,
                        &strategy,
                        10,
                        auto_commit,
                    ),
                )
                .await,
                FEATURE_UNAVAILABLE,
            );
        }
    }
    assert_eq!(
        stored(&client, &ext, 0).await,
        Some(3),
        "no poll moved the kind-3 offset"
    );
    // Also when the group is missing.
    expect_code(
        "kind-3 poll of a missing group",
        within(
            "poll",
            client.poll_messages(
                &name("s"),
                &name("t"),
                Some(0),
                &external(name("nope")),
                &PollingStrategy::next(),
                1,
                false,
            ),
        )
        .await,
        FEATURE_UNAVAILABLE,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_calls_naming_a_missing_group_fail_with_group_not_found() {
    let server = TestServer::start();
    let client = setup(&server, 1).await;
    for (missing, code) in [
        (external(id(7)), GROUP_ID_NOT_FOUND),
        (external(name("nope")), GROUP_NAME_NOT_FOUND),
    ] {
        expect_code(
            &format!("store {missing}"),
            store(&client, &missing, 0, 1).await,
            code,
        );
        expect_code(
            &format!("get {missing}"),
            get(&client, &missing, 0).await,
            code,
        );
        expect_code(
            &format!("delete {missing}"),
            delete(&client, &missing, 0).await,
            code,
        );
    }
    // The group created afterwards with that name starts with no kind-3 offset.
    ok(
        "create",
        within(
            "create",
            client.create_consumer_group(&name("s"), &name("t"), "nope"),
        )
        .await,
    );
    assert_eq!(stored(&client, &external(name("nope")), 0).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_group_deletes_its_kind_2_and_kind_3_offsets() {
    let server = TestServer::start();
    let client = setup(&server, 2).await;
    // Group offsets (kind 2) name messages the partition holds: partition 1 gets some too.
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("p1", 5)).await;
    let (group, ext) = (Consumer::group(name("g")), external(name("g")));
    // A second group whose offsets stay.
    ok(
        "create other",
        within(
            "create",
            client.create_consumer_group(&name("s"), &name("t"), "other"),
        )
        .await,
    );
    let (other, other_ext) = (Consumer::group(name("other")), external(name("other")));
    for partition in [0, 1] {
        ok("store kind 2", store(&client, &group, partition, 3).await);
        ok("store kind 3", store(&client, &ext, partition, 500).await);
        ok(
            "store other kind 2",
            store(&client, &other, partition, 1).await,
        );
        ok(
            "store other kind 3",
            store(&client, &other_ext, partition, 600).await,
        );
    }
    ok(
        "delete group",
        within(
            "delete",
            client.delete_consumer_group(&name("s"), &name("t"), &name("g")),
        )
        .await,
    );

    expect_code(
        "get kind 3 of the deleted group",
        get(&client, &ext, 0).await,
        GROUP_NAME_NOT_FOUND,
    );
    expect_code(
        "get kind 3 of the deleted group by id",
        get(&client, &external(id(0)), 0).await,
        GROUP_ID_NOT_FOUND,
    );
    // A group created later takes the same id and name: it inherits nothing.
    recreate_group_inheriting_nothing(&client, &group, &ext, "").await;
    for partition in [0, 1] {
        assert_eq!(
            stored(&client, &other, partition).await,
            Some(1),
            "the other group's kind 2"
        );
        assert_eq!(
            stored(&client, &other_ext, partition).await,
            Some(600),
            "the other group's kind 3"
        );
    }
    // A member of the new group starts from the first message.
    ok(
        "join",
        within(
            "join",
            client.join_consumer_group(&name("s"), &name("t"), &name("g")),
        )
        .await,
    );
    let polled = ok(
        "group poll",
        within(
            "poll",
            client.poll_messages(
                &name("s"),
                &name("t"),
                Some(0),
                &group,
                &PollingStrategy::next(),
                2,
                false,
            ),
        )
        .await,
    );
    assert_eq!(offsets(&polled), vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_offsets_hold_no_segment_back() {
    const SEGMENT: u64 = 1024 * 1024;
    let server = TestServer::start();
    let client = server.root_client().await;
    ok(
        "create stream",
        within(
            "create",
            client.create_stream("s", &StreamCreateOptions::default()),
        )
        .await,
    );
    let opts = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(SEGMENT)),
        ..Default::default()
    };
    ok(
        "create topic",
        within("create", client.create_topic(&name("s"), "t", &opts)).await,
    );
    // Six 200 KiB messages per 1 MiB segment: segments start at 0, 6, 12, 18.
    for i in 0..24 {
        send_to_partition(
            &client,
            &name("s"),
            &name("t"),
            0,
            vec![msg(vec![i as u8; 200 * 1024])],
        )
        .await;
    }
    ok(
        "create group",
        within(
            "create",
            client.create_consumer_group(&name("s"), &name("t"), "g"),
        )
        .await,
    );
    ok(
        "store kind 3 at 2",
        store(&client, &external(name("g")), 0, 2).await,
    );
    ok(
        "delete 3 segments",
        within(
            "delete",
            client.delete_segments(&name("s"), &name("t"), 0, 3),
        )
        .await,
    );
    let first = poll(
        &client,
        &name("s"),
        &name("t"),
        0,
        &consumer("x"),
        PollingStrategy::first(),
        1,
        false,
    )
    .await;
    assert_eq!(
        offsets(&first),
        vec![18],
        "the kind-3 offset 2 kept no segment"
    );
    assert_eq!(
        stored(&client, &external(name("g")), 0).await,
        Some(2),
        "the offset itself stays"
    );
}

/// The kind-3 slot survives SIGTERM and SIGKILL restarts (journal replay and, with a small
/// checkpoint threshold, the partition checkpoint) and stays apart from the group's slot; a
/// group deletion stays done after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_3_offsets_survive_restarts_apart_from_the_groups_offsets() {
    for checkpoint_ops in ["4", "100000"] {
        let mut server =
            TestServer::start_with_env(&[("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", checkpoint_ops)]);
        let (group, ext) = (Consumer::group(name("g")), external(name("g")));
        let keep_ext = external(name("keep"));
        {
            let client = setup(&server, 2).await;
            // Group offsets (kind 2) name messages the partition holds: partition 1 gets some too.
            send_to_partition(&client, &name("s"), &name("t"), 1, msgs("p1", 5)).await;
            ok(
                "create keep",
                within(
                    "create",
                    client.create_consumer_group(&name("s"), &name("t"), "keep"),
                )
                .await,
            );
            ok("store kind 2", store(&client, &group, 0, 4).await);
            ok("store kind 3", store(&client, &ext, 0, 900).await);
            ok("store kind 3 p1", store(&client, &ext, 1, 6).await);
            ok("store keep kind 3", store(&client, &keep_ext, 0, 77).await);
        }
        tokio::task::block_in_place(|| server.restart());
        {
            let client = server.root_client().await;
            let what = format!("after SIGTERM (checkpoint every {checkpoint_ops} ops)");
            assert_eq!(stored(&client, &group, 0).await, Some(4), "kind 2 {what}");
            assert_eq!(stored(&client, &ext, 0).await, Some(900), "kind 3 {what}");
            assert_eq!(
                stored(&client, &ext, 1).await,
                Some(6),
                "kind 3 of partition 1 {what}"
            );
            ok("store kind 3", store(&client, &ext, 0, 901).await);
            ok("store kind 2", store(&client, &group, 1, 2).await);
        }
        tokio::task::block_in_place(|| server.kill9_and_restart());
        {
            let client = server.root_client().await;
            let what = format!("after SIGKILL (checkpoint every {checkpoint_ops} ops)");
            assert_eq!(stored(&client, &group, 0).await, Some(4), "kind 2 {what}");
            assert_eq!(stored(&client, &ext, 0).await, Some(901), "kind 3 {what}");
            assert_eq!(
                stored(&client, &group, 1).await,
                Some(2),
                "kind 2 of partition 1 {what}"
            );
            assert_eq!(
                stored(&client, &ext, 1).await,
                Some(6),
                "kind 3 of partition 1 {what}"
            );
            ok(
                "delete group",
                within(
                    "delete",
                    client.delete_consumer_group(&name("s"), &name("t"), &name("g")),
                )
                .await,
            );
        }
        for restart in ["SIGKILL", "SIGTERM"] {
            match restart {
                "SIGKILL" => tokio::task::block_in_place(|| server.kill9_and_restart()),
                _ => tokio::task::block_in_place(|| server.restart()),
            }
            let client = server.root_client().await;
            let what = format!(
                "after the group's deletion and a {restart} (checkpoint every {checkpoint_ops} ops)"
            );
            expect_code(
                &format!("kind 3 of the deleted group {what}"),
                get(&client, &ext, 0).await,
                GROUP_NAME_NOT_FOUND,
            );
            assert_eq!(
                stored(&client, &keep_ext, 0).await,
                Some(77),
                "the other group's kind 3 {what}"
            );
            recreate_group_inheriting_nothing(&client, &group, &ext, &what).await;
            // The new group's own offsets survive a restart that replays the old deletion.
            ok("store new kind 3", store(&client, &ext, 0, 12).await);
            ok("store new kind 2", store(&client, &group, 0, 1).await);
            drop(client);
            match restart {
                "SIGKILL" => tokio::task::block_in_place(|| server.kill9_and_restart()),
                _ => tokio::task::block_in_place(|| server.restart()),
            }
            let client = server.root_client().await;
            let what = format!(
                "of the group created again, after a {restart} (checkpoint every {checkpoint_ops} ops)"
            );
            assert_eq!(stored(&client, &ext, 0).await, Some(12), "kind 3 {what}");
            assert_eq!(stored(&client, &group, 0).await, Some(1), "kind 2 {what}");
            ok(
                "delete again",
                within(
                    "delete",
                    client.delete_consumer_group(&name("s"), &name("t"), &name("g")),
                )
                .await,
            );
        }
    }
}

/// Creates group "g" of s/t again after its deletion: it takes id 0 again and inherits neither
/// kind-2 nor kind-3 offsets in partitions 0 and 1.
async fn recreate_group_inheriting_nothing(
    client: &IggyClient,
    group: &Consumer,
    ext: &Consumer,
    what: &str,
) {
    let again = ok(
        "create again",
        within(
            "create",
            client.create_consumer_group(&name("s"), &name("t"), "g"),
        )
        .await,
    );
    assert_eq!(again.id, 0, "the id is reused {what}");
    for partition in [0, 1] {
        assert_eq!(
            stored(client, ext, partition).await,
            None,
            "kind 3 of partition {partition} {what}"
        );
        assert_eq!(
            stored(client, group, partition).await,
            None,
            "kind 2 of partition {partition} {what}"
        );
    }
}
