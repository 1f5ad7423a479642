//! Crash (SIGKILL) recovery: acknowledged writes survive a kill -9 and a restart.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_metadata_and_persisted_messages_survive_kill9() {
    let mut server = TestServer::start();
    {
        let c = server.root_client().await;
        ok("create stream", within("create", c.create_stream("s", &StreamCreateOptions::default())).await);
        let opts = TopicCreateOptions {
            partitions_count: Some(2),
            durability: Durability::Persisted,
            consumer_offset_durability: Durability::Persisted,
            ..Default::default()
        };
        ok("create topic", within("create", c.create_topic(&name("s"), "t", &opts)).await);
        for b in 0..5 {
            send_to_partition(&c, &name("s"), &name("t"), b % 2, msgs(&format!("b{b}"), 3)).await;
        }
        ok(
            "store offset",
            within("store", c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 5)).await,
        );
        ok("create user", within("user", c.create_user("alice", "alice-secret", UserStatus::Active, None, &UserCreateOptions::default())).await);
    }
    tokio::task::block_in_place(|| server.kill9_and_restart());

    let c = server.root_client().await;
    let t = ok("get topic", within("get", c.get_topic(&name("s"), &name("t"))).await).expect("topic survives kill -9");
    assert_eq!((t.partitions_count, t.messages_count), (2, 15));
    let p0 = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(
        payloads(&p0),
        ["b0-0", "b0-1", "b0-2", "b2-0", "b2-1", "b2-2", "b4-0", "b4-1", "b4-2"].map(String::from).to_vec()
    );
    let p1 = poll(&c, &name("s"), &name("t"), 1, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(offsets(&p1), vec![0, 1, 2, 3, 4, 5]);
    let off = ok("get offset", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await)
        .expect("offset survives kill -9");
    assert_eq!(off.stored_offset, 5);
    assert!(ok("get alice", within("get", c.get_user(&name("alice"))).await).is_some());

    // The partition takes new writes at the next offset.
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, msgs("late", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(9));
}
