//! Consumer groups: create, get, list, join, leave, delete, and group polling.

use crate::harness::*;
use iggy::prelude::*;
use std::collections::BTreeSet;

async fn group(client: &IggyClient, g: &Identifier) -> Option<ConsumerGroupDetails> {
    ok("get_consumer_group", within("get group", client.get_consumer_group(&name("s"), &name("t"), g)).await)
}

fn member_partitions(details: &ConsumerGroupDetails) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = details
        .members
        .iter()
        .map(|m| {
            let mut p = m.partitions.clone();
            p.sort();
            p
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_group_returns_details_with_zero_based_ids() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 3).await;

    let g = ok("create g1", within("create", client.create_consumer_group(&name("s"), &name("t"), "g1")).await);
    assert_eq!((g.id, g.name.as_str(), g.partitions_count, g.members_count), (0, "g1", 3, 0));
    assert!(g.members.is_empty());
    let g2 = ok("create g2", within("create", client.create_consumer_group(&id(0), &id(0), "g2")).await);
    assert_eq!((g2.id, g2.name.as_str()), (1, "g2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_group_by_id_and_name_and_list_groups() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    for n in ["a", "b", "c"] {
        ok("create", within("create", client.create_consumer_group(&name("s"), &name("t"), n)).await);
    }
    let b = group(&client, &id(1)).await.expect("group 1");
    assert_eq!((b.id, b.name.as_str(), b.partitions_count), (1, "b", 2));
    let c = group(&client, &name("c")).await.expect("group c");
    assert_eq!(c.id, 2);
    assert!(group(&client, &id(9)).await.is_none(), "missing group id");
    assert!(group(&client, &name("zz")).await.is_none(), "missing group name");

    let mut list = ok("list", within("list", client.get_consumer_groups(&name("s"), &name("t"))).await);
    list.sort_by_key(|g| g.id);
    let got: Vec<(u32, &str, u32, u32)> =
        list.iter().map(|g| (g.id, g.name.as_str(), g.partitions_count, g.members_count)).collect();
    assert_eq!(got, vec![(0, "a", 2, 0), (1, "b", 2, 0), (2, "c", 2, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_group_with_duplicate_name_fails_with_5004() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    ok("create", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await);
    expect_code(
        "duplicate group",
        within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await,
        5004,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_assigns_partitions_and_leave_releases_them() {
    let server = TestServer::start();
    let first = server.root_client().await;
    create_stream_and_topic(&first, "s", "t", 3).await;
    ok("create", within("create", first.create_consumer_group(&name("s"), &name("t"), "g")).await);

    ok("join (first)", within("join", first.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let g = group(&first, &name("g")).await.expect("group");
    assert_eq!(g.members_count, 1);
    assert_eq!(member_partitions(&g), vec![vec![0, 1, 2]], "a single member owns every partition");
    let me = ok("get_me", within("me", first.get_me()).await);
    assert_eq!(g.members[0].id, me.client_id, "member id is the client id");
    assert_eq!(g.members[0].partitions_count, 3);
    assert_eq!(me.consumer_groups_count, 1, "me lists the joined group");
    let joined: Vec<(u32, u32, u32)> =
        me.consumer_groups.iter().map(|c| (c.stream_id, c.topic_id, c.group_id)).collect();
    assert_eq!(joined, vec![(0, 0, 0)]);

    let second = server.root_client().await;
    ok("join (second)", within("join", second.join_consumer_group(&name("s"), &name("t"), &id(0))).await);
    let g = group(&first, &name("g")).await.expect("group");
    assert_eq!(g.members_count, 2);
    let parts = member_partitions(&g);
    let all: BTreeSet<u32> = parts.iter().flatten().copied().collect();
    assert_eq!(all, BTreeSet::from([0, 1, 2]), "every partition assigned: {parts:?}");
    assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 3, "no partition assigned twice: {parts:?}");
    let mut sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 2], "balanced assignment: {parts:?}");

    ok("leave (first)", within("leave", first.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let g = group(&first, &name("g")).await.expect("group");
    assert_eq!(g.members_count, 1);
    assert_eq!(member_partitions(&g), vec![vec![0, 1, 2]], "the remaining member takes over");
    let me2 = ok("get_me", within("me", second.get_me()).await);
    assert_eq!(g.members[0].id, me2.client_id);
    let me1 = ok("get_me", within("me", first.get_me()).await);
    assert_eq!(me1.consumer_groups_count, 0, "left the group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_missing_group_fails_with_group_not_found() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    expect_code(
        "join missing group by id",
        within("join", client.join_consumer_group(&name("s"), &name("t"), &id(3))).await,
        5000,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_group_removes_it() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    ok("create a", within("create", client.create_consumer_group(&name("s"), &name("t"), "a")).await);
    ok("create b", within("create", client.create_consumer_group(&name("s"), &name("t"), "b")).await);
    ok("join a", within("join", client.join_consumer_group(&name("s"), &name("t"), &name("a"))).await);

    ok("delete a", within("delete", client.delete_consumer_group(&name("s"), &name("t"), &name("a"))).await);
    assert!(group(&client, &name("a")).await.is_none());
    let list = ok("list", within("list", client.get_consumer_groups(&name("s"), &name("t"))).await);
    let got: Vec<(u32, &str)> = list.iter().map(|g| (g.id, g.name.as_str())).collect();
    assert_eq!(got, vec![(1, "b")]);
    let me = ok("get_me", within("me", client.get_me()).await);
    assert_eq!(me.consumer_groups_count, 0, "membership ends with the group");
    expect_code(
        "delete a again",
        within("delete", client.delete_consumer_group(&name("s"), &name("t"), &id(0))).await,
        5000,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_member_polls_its_partitions_and_commits_group_offsets() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("p0", 3)).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("p1", 2)).await;
    ok("create", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await);
    ok("join", within("join", client.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);

    let cg = Consumer::group(name("g"));
    let mut got: BTreeSet<String> = BTreeSet::new();
    for _ in 0..6 {
        let polled = ok(
            "group poll",
            within(
                "group poll",
                client.poll_messages(&name("s"), &name("t"), None, &cg, &PollingStrategy::next(), 10, true),
            )
            .await,
        );
        got.extend(payloads(&polled));
    }
    let want: BTreeSet<String> = ["p0-0", "p0-1", "p0-2", "p1-0", "p1-1"].iter().map(|s| s.to_string()).collect();
    assert_eq!(got, want, "the only member reads both partitions");

    for (p, last) in [(0u32, 2u64), (1, 1)] {
        let info = ok(
            "group offset",
            within("get offset", client.get_consumer_offset(&cg, &name("s"), &name("t"), Some(p))).await,
        )
        .expect("auto-commit stored the group offset");
        assert_eq!((info.partition_id, info.stored_offset), (p, last), "group offset of partition {p}");
    }
}

/// A group deleted and created again under the same id starts over: no stored offset, and its
/// polls begin at the first message, never where the deleted group had got to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_created_again_under_a_deleted_groups_id_starts_from_the_first_message() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 5)).await;
    let cg = Consumer::group(name("g"));
    let next = PollingStrategy::next();
    for round in 0..2 {
        let created = ok("create", within("create", client.create_consumer_group(&name("s"), &name("t"), "g")).await);
        assert_eq!(created.id, 0, "the id is reused (round {round})");
        ok("join", within("join", client.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
        let stored = ok(
            "group offset",
            within("get offset", client.get_consumer_offset(&cg, &name("s"), &name("t"), Some(0))).await,
        );
        assert!(stored.is_none(), "round {round}: the group starts with no offset, not {stored:?}");
        let polled = poll(&client, &name("s"), &name("t"), 0, &cg, next, 3, true).await;
        assert_eq!(offsets(&polled), vec![0, 1, 2], "round {round}: from the first message");
        ok("delete", within("delete", client.delete_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_beyond_the_partition_count_holds_no_partition() {
    let server = TestServer::start();
    let a = server.root_client().await;
    create_stream_and_topic(&a, "s", "t", 1).await;
    send_to_partition(&a, &name("s"), &name("t"), 0, msgs("m", 2)).await;
    ok("create", within("create", a.create_consumer_group(&name("s"), &name("t"), "g")).await);
    ok("join a", within("join", a.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let b = server.root_client().await;
    ok("join b", within("join", b.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);

    let g = group(&a, &name("g")).await.expect("group");
    assert_eq!(g.members_count, 2);
    assert_eq!(member_partitions(&g), vec![vec![], vec![0]], "one partition, two members");

    let cg = Consumer::group(name("g"));
    let owner_is_a = g.members.iter().find(|m| m.partitions == vec![0]).unwrap().id
        == ok("me", within("me", a.get_me()).await).client_id;
    let (owner, idle) = if owner_is_a { (&a, &b) } else { (&b, &a) };
    let polled = ok(
        "owner polls",
        within("poll", owner.poll_messages(&name("s"), &name("t"), None, &cg, &PollingStrategy::next(), 10, false)).await,
    );
    assert_eq!(payloads(&polled), vec!["m-0", "m-1"]);
    let empty = ok(
        "idle member polls",
        within("poll", idle.poll_messages(&name("s"), &name("t"), None, &cg, &PollingStrategy::next(), 10, false)).await,
    );
    assert!(empty.messages.is_empty());
    assert_eq!(empty.partition_id, NO_ASSIGNED_PARTITION, "the idle member is told it holds nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_ends_the_sessions_group_memberships() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    ok("create", within("create", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let member = server.root_client().await;
    ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    assert_eq!(group(&admin, &name("g")).await.expect("group").members_count, 1);

    ok("logout", within("logout", member.logout_user()).await);
    let g = group(&admin, &name("g")).await.expect("group");
    assert_eq!(g.members_count, 0, "logout ends the membership: {:?}", member_partitions(&g));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_are_separate_from_consumer_offsets_of_the_same_name() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 10)).await;
    ok("create", within("create", client.create_consumer_group(&name("s"), &name("t"), "same")).await);
    ok("join", within("join", client.join_consumer_group(&name("s"), &name("t"), &name("same"))).await);
    let as_group = Consumer::group(name("same"));
    let as_consumer = consumer("same");
    ok("store group", within("store", client.store_consumer_offset(&as_group, &name("s"), &name("t"), Some(0), 6)).await);
    ok("store consumer", within("store", client.store_consumer_offset(&as_consumer, &name("s"), &name("t"), Some(0), 2)).await);
    let g = ok("get group", within("get", client.get_consumer_offset(&as_group, &name("s"), &name("t"), Some(0))).await)
        .expect("group offset");
    let c = ok("get consumer", within("get", client.get_consumer_offset(&as_consumer, &name("s"), &name("t"), Some(0))).await)
        .expect("consumer offset");
    assert_eq!((g.stored_offset, c.stored_offset), (6, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_and_deleted_partitions_are_reassigned_to_members() {
    let server = TestServer::start();
    let a = server.root_client().await;
    create_stream_and_topic(&a, "s", "t", 2).await;
    ok("create", within("create", a.create_consumer_group(&name("s"), &name("t"), "g")).await);
    ok("join a", within("join", a.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let b = server.root_client().await;
    ok("join b", within("join", b.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    assert_eq!(member_partitions(&group(&a, &name("g")).await.unwrap()), vec![vec![0], vec![1]]);

    ok("add 2 partitions", within("create", a.create_partitions(&name("s"), &name("t"), 2)).await);
    let g = group(&a, &name("g")).await.expect("group");
    assert_eq!(g.partitions_count, 4, "the group sees the new partitions");
    let parts = member_partitions(&g);
    let all: BTreeSet<u32> = parts.iter().flatten().copied().collect();
    assert_eq!(all, BTreeSet::from([0, 1, 2, 3]), "new partitions assigned: {parts:?}");
    assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2], "balanced: {parts:?}");

    ok("delete 3 partitions", within("delete", a.delete_partitions(&name("s"), &name("t"), 3)).await);
    let g = group(&a, &name("g")).await.expect("group");
    assert_eq!(g.partitions_count, 1);
    let parts = member_partitions(&g);
    assert_eq!(parts, vec![vec![], vec![0]], "only partition 0 is left to assign: {parts:?}");
}

/// The SDK polls a group from the assignment it cached at its last sync; a partition deleted
/// since is not the member's any more, so the poll is fenced (5009) and the SDK re-syncs and
/// polls a partition it owns, as after any rebalance, instead of failing with 3007 on every
/// other poll until its next heartbeat refreshes the assignment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_polling_a_deleted_partition_resyncs_instead_of_failing() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 3).await;
    for p in 0..3 {
        send_to_partition(&admin, &name("s"), &name("t"), p, msgs("m", 2)).await;
    }
    ok("create", within("create", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let member = server.root_client().await;
    ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let (s, t, g, next) = (name("s"), name("t"), Consumer::group(name("g")), PollingStrategy::next());
    let poll_group = || member.poll_messages(&s, &t, None, &g, &next, 10, true);
    let mut first: Vec<u32> = Vec::new();
    for _ in 0..3 {
        first.push(ok("poll", within("poll", poll_group()).await).partition_id);
    }
    first.sort();
    assert_eq!(first, vec![0, 1, 2], "the member polls its three partitions in turn");

    ok("delete 2 partitions", within("delete", admin.delete_partitions(&name("s"), &name("t"), 2)).await);
    send_to_partition(&admin, &name("s"), &name("t"), 0, msgs("n", 1)).await;
    let mut after = Vec::new();
    for _ in 0..4 {
        let polled = ok("poll after the deletion", within("poll", poll_group()).await);
        after.push((polled.partition_id, offsets(&polled)));
    }
    assert!(after.iter().all(|(p, _)| *p == 0), "only partition 0 is left: {after:?}");
    assert!(after.contains(&(0, vec![2])), "the new message is polled once: {after:?}");
}

/// The official consumer reads a group's partition, the group is deleted and created again
/// under its name and id, and the consumer (joining it again) reads it from the first message:
/// the new group stored no offset. The SDK drops polled messages at or below the last offset it
/// consumed while a poll's `owner_generation` (with the incarnation) equals the one it consumed
/// under, so a new group must never report a generation an earlier group of the topic did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_reads_a_group_created_again_under_its_name_from_the_first_message() {
    use futures_util::StreamExt;
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 1).await;
    send_to_partition(&admin, &name("s"), &name("t"), 0, msgs("old", 5)).await;
    let client = server.root_client().await;
    let mut consumer = group_member(&client, "g");
    ok("init", within("init", consumer.init()).await);
    let mut read = Vec::new();
    let mut next = async |read: &mut Vec<String>| {
        let message = within("next", consumer.next())
            .await
            .expect("the stream ended");
        let message = ok("next message", message);
        read.push(String::from_utf8_lossy(&message.message.payload).into_owned());
    };
    for _ in 0..5 {
        next(&mut read).await;
    }
    assert_eq!(read, ["old-0", "old-1", "old-2", "old-3", "old-4"]);

    ok(
        "delete",
        within(
            "delete",
            admin.delete_consumer_group(&name("s"), &name("t"), &name("g")),
        )
        .await,
    );
    let created = ok(
        "create",
        within(
            "create",
            admin.create_consumer_group(&name("s"), &name("t"), "g"),
        )
        .await,
    );
    assert_eq!(created.id, 0, "the id is reused");
    send_to_partition(&admin, &name("s"), &name("t"), 0, msgs("new", 2)).await;
    // The consumer's next poll fails (no longer a member), it joins again and polls on.
    let mut again = Vec::new();
    let read_again = async {
        while again.len() < 7 {
            if let Ok(message) = consumer.next().await.expect("the stream ended") {
                again.push(String::from_utf8_lossy(&message.message.payload).into_owned());
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), read_again).await;
    assert_eq!(
        again,
        [
            "old-0", "old-1", "old-2", "old-3", "old-4", "new-0", "new-1"
        ],
        "the group created again reads from the first message"
    );
}

/// A position a member read before its partition moved to another member is refused with
/// ConsumerGroupPartitionNotOwned (5009) and the new owner's offset stays, as the SDK documents
/// for `store_consumer_position` ("5009 for a lost owner") and `IggyConsumer::store_position` (a
/// position from a previous owner "is refused without updating replacement progress"); so is a
/// plain consumer's store carrying a group's owner generation. The owner's own positions commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_read_before_the_partition_moved_is_refused_and_the_new_owners_offset_stays() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 1).await;
    send_to_partition(&admin, &name("s"), &name("t"), 0, msgs("m", 10)).await;
    ok("create", within("create", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let cg = Consumer::group(name("g"));
    let (a, b) = (server.root_client().await, server.root_client().await);
    ok("a joins", within("join", a.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let read = ok(
        "a polls",
        within("poll", a.poll_messages(&name("s"), &name("t"), Some(0), &cg, &PollingStrategy::next(), 5, false)).await,
    );
    assert_eq!(offsets(&read), vec![0, 1, 2, 3, 4]);
    assert_ne!(read.context.owner_generation, 0, "a group poll names its owner generation");
    let store = async |client: &IggyClient, consumer: &Consumer, offset| {
        let position = ConsumerPosition { partition_id: 0, offset, context: read.context };
        within("store", client.store_consumer_position(consumer, &name("s"), &name("t"), position)).await
    };
    ok("the owner commits its position", store(&a, &cg, 2).await);

    // The partition moves to b, which reads on and commits offset 7.
    ok("b joins", within("join", b.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    ok("a leaves", within("leave", a.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    poll(&b, &name("s"), &name("t"), 0, &cg, PollingStrategy::offset(5), 3, true).await;

    expect_code("a's late commit of a position it read as the owner", store(&a, &cg, 4).await, 5009);
    let stored = ok("get", within("get", admin.get_consumer_offset(&cg, &name("s"), &name("t"), Some(0))).await);
    assert_eq!(stored.map(|o| o.stored_offset), Some(7), "the new owner's offset stays");
    expect_code("a plain consumer's store carrying an owner generation", store(&a, &consumer("c"), 4).await, 5009);

    // b leaves and a joins again: a owns the partition once more, but its position from before
    // is still not the owner's (accepted, it moved b's offset back and b's messages came again).
    ok("a joins again", within("join", a.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    ok("b leaves", within("leave", b.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    expect_code("a's commit of a position read before it lost the partition", store(&a, &cg, 4).await, 5009);
    let stored = ok("get", within("get", admin.get_consumer_offset(&cg, &name("s"), &name("t"), Some(0))).await);
    assert_eq!(stored.map(|o| o.stored_offset), Some(7), "b's offset stays");
    let again = ok(
        "a polls again",
        within("poll", a.poll_messages(&name("s"), &name("t"), Some(0), &cg, &PollingStrategy::next(), 1, false)).await,
    );
    assert_eq!(offsets(&again), vec![8], "a reads on from b's offset");
    let position = ConsumerPosition { partition_id: 0, offset: 8, context: again.context };
    let committed = within("store", a.store_consumer_position(&cg, &name("s"), &name("t"), position)).await;
    ok("a commits what it read since", committed);
}

/// A poll of a group naming a partition, by a client that is not (or no longer) a member, fails
/// with ConsumerGroupMemberNotFound (5006), as the SDK's `poll_messages` documents ("rather than
/// returning an empty batch, so the caller can rejoin"); a member polling a partition another
/// member owns is fenced with ConsumerGroupPartitionNotOwned (5009).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_poll_by_a_client_not_in_the_group_fails_with_member_not_found() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    ok("create", within("create", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let cg = Consumer::group(name("g"));
    let (a, b) = (server.root_client().await, server.root_client().await);
    let poll_of = async |client: &IggyClient, partition| {
        within("poll", client.poll_messages(&name("s"), &name("t"), Some(partition), &cg, &PollingStrategy::next(), 1, false)).await
    };
    expect_code("a client that never joined", poll_of(&a, 0).await, 5006);
    ok("a joins", within("join", a.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    ok("b joins", within("join", b.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    ok("a polls its partition", poll_of(&a, 0).await);
    expect_code("a member polling the other member's partition", poll_of(&a, 1).await, 5009);
    ok("a leaves", within("leave", a.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    expect_code("a client that left", poll_of(&a, 0).await, 5006);
}

/// Stores `offset` for group `g` of `s`/`t` at `partition` through `client`, owner uncaptured.
async fn store(client: &IggyClient, partition: u32, offset: u64) -> Result<(), IggyError> {
    let g = Consumer::group(name("g"));
    within("store", client.store_consumer_offset(&g, &name("s"), &name("t"), Some(partition), offset)).await
}

/// A group offset write that captured no owner (the SDK's `store_consumer_offset` and
/// `delete_consumer_offset` with `Consumer::group`, owner generation 0) is bound to the caller's
/// installed owner or refused: from a client outside the group 5006, as its poll is, from a
/// member that does not own the partition 5009, so neither moves the members' offset (members
/// would skip or reread messages). The partition's owner writes it; once the group has no
/// members anyone allowed may set it (an operator resetting an idle group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_moves_a_group_offset_while_the_group_has_members() {
    let server = TestServer::start();
    let admin = server.root_client().await;
    create_stream_and_topic(&admin, "s", "t", 2).await;
    for p in 0..2 {
        send_to_partition(&admin, &name("s"), &name("t"), p, msgs("m", 10)).await;
    }
    ok("create", within("create", admin.create_consumer_group(&name("s"), &name("t"), "g")).await);
    let member = server.root_client().await;
    ok("join", within("join", member.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let g = Consumer::group(name("g"));
    // One member owns both partitions.
    ok("the owner stores", store(&member, 0, 4).await);
    expect_code("an outsider stores", store(&admin, 0, 9).await, 5006);
    let deleted = within("delete", admin.delete_consumer_offset(&g, &name("s"), &name("t"), Some(0))).await;
    expect_code("an outsider deletes", deleted, 5006);
    let stored = within("get", member.get_consumer_offset(&g, &name("s"), &name("t"), Some(0))).await;
    assert_eq!(ok("get", stored).map(|o| o.stored_offset), Some(4), "the owner's offset stays");

    // A second member takes one partition: the first no longer writes its offset.
    let second = server.root_client().await;
    ok("join", within("join", second.join_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    let details = group(&admin, &name("g")).await.expect("the group");
    let owned_by = |client_id: u32| {
        details
            .members
            .iter()
            .find(|m| m.id == client_id)
            .map(|m| m.partitions.clone())
            .unwrap_or_default()
    };
    let first_id = ok("me", within("me", member.get_me()).await).client_id;
    let second_id = ok("me", within("me", second.get_me()).await).client_id;
    let (first_owns, second_owns) = (owned_by(first_id), owned_by(second_id));
    assert_eq!((first_owns.len(), second_owns.len()), (1, 1), "{details:?}");
    expect_code("a member, for the other's partition", store(&member, second_owns[0], 1).await, 5009);
    ok("the new owner stores", store(&second, second_owns[0], 1).await);

    // Idle: anyone allowed sets it.
    for client in [&member, &second] {
        ok("leave", within("leave", client.leave_consumer_group(&name("s"), &name("t"), &name("g"))).await);
    }
    ok("an operator on the idle group", store(&admin, 0, 7).await);
    let stored = within("get", admin.get_consumer_offset(&g, &name("s"), &name("t"), Some(0))).await;
    assert_eq!(ok("get", stored).map(|o| o.stored_offset), Some(7));
}
