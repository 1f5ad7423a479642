//! Streams: create, get, list, delete; 0-based ids; duplicate names.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stream_returns_details_with_zero_based_ids() {
    let server = TestServer::start();
    let client = server.root_client().await;

    let first = ok("create s0", within("create", client.create_stream("alpha", &StreamCreateOptions::default())).await);
    assert_eq!(first.id, 0, "first stream id");
    assert_eq!(first.name, "alpha");
    assert_eq!(first.topics_count, 0);
    assert_eq!(first.messages_count, 0);
    assert_eq!(first.size.as_bytes_u64(), 0);
    assert!(first.topics.is_empty());

    let second = ok("create s1", within("create", client.create_stream("beta", &StreamCreateOptions::default())).await);
    assert_eq!(second.id, 1, "second stream id");
    assert_eq!(second.name, "beta");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream_by_id_and_by_name_returns_the_same_stream() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create", within("create", client.create_stream("alpha", &StreamCreateOptions::default())).await);
    ok("create", within("create", client.create_stream("beta", &StreamCreateOptions::default())).await);

    let by_id = ok("get by id", within("get", client.get_stream(&id(1))).await).expect("stream 1 exists");
    assert_eq!((by_id.id, by_id.name.as_str()), (1, "beta"));
    let by_name = ok("get by name", within("get", client.get_stream(&name("alpha"))).await).expect("alpha exists");
    assert_eq!((by_name.id, by_name.name.as_str()), (0, "alpha"));
    assert!(by_name.created_at.as_micros() > 0, "created_at is set");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_missing_stream_returns_none() {
    let server = TestServer::start();
    let client = server.root_client().await;
    assert!(ok("get by id", within("get", client.get_stream(&id(7))).await).is_none());
    assert!(ok("get by name", within("get", client.get_stream(&name("ghost"))).await).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_streams_returns_every_stream_in_id_order() {
    let server = TestServer::start();
    let client = server.root_client().await;
    assert!(ok("list empty", within("list", client.get_streams()).await).is_empty());
    for n in ["a", "b", "c"] {
        ok("create", within("create", client.create_stream(n, &StreamCreateOptions::default())).await);
    }
    let mut streams = ok("list", within("list", client.get_streams()).await);
    streams.sort_by_key(|s| s.id);
    let got: Vec<(u32, &str)> = streams.iter().map(|s| (s.id, s.name.as_str())).collect();
    assert_eq!(got, vec![(0, "a"), (1, "b"), (2, "c")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stream_with_duplicate_name_fails_with_1012() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create", within("create", client.create_stream("dup", &StreamCreateOptions::default())).await);
    expect_code(
        "create duplicate stream",
        within("create", client.create_stream("dup", &StreamCreateOptions::default())).await,
        1012,
    );
    let streams = ok("list", within("list", client.get_streams()).await);
    assert_eq!(streams.len(), 1, "the duplicate was not created: {streams:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_stream_removes_it_and_frees_the_name() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("create a", within("create", client.create_stream("a", &StreamCreateOptions::default())).await);
    ok("create b", within("create", client.create_stream("b", &StreamCreateOptions::default())).await);
    create_stream_and_topic(&client, "c", "t", 1).await;

    ok("delete a", within("delete", client.delete_stream(&id(0))).await);
    ok("delete c by name (with a topic)", within("delete", client.delete_stream(&name("c"))).await);
    assert!(ok("get a", within("get", client.get_stream(&id(0))).await).is_none(), "deleted stream is gone");
    assert!(ok("get c", within("get", client.get_stream(&name("c"))).await).is_none());
    let streams = ok("list", within("list", client.get_streams()).await);
    let got: Vec<(u32, &str)> = streams.iter().map(|s| (s.id, s.name.as_str())).collect();
    assert_eq!(got, vec![(1, "b")]);

    // The name is free again; the lowest free id is reused.
    let again = ok("recreate a", within("create", client.create_stream("a", &StreamCreateOptions::default())).await);
    assert_eq!(again.id, 0, "lowest free slab key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_missing_stream_fails_with_stream_id_not_found() {
    let server = TestServer::start();
    let client = server.root_client().await;
    expect_code("delete missing stream", within("delete", client.delete_stream(&id(3))).await, 1009);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicode_names_round_trip_and_resolve() {
    let server = TestServer::start();
    let client = server.root_client().await;
    let stream = "łódź-ストリーム-🚀";
    let topic = "тема.événements";
    create_stream_and_topic(&client, stream, topic, 1).await;
    let s = ok("get by unicode name", within("get", client.get_stream(&name(stream))).await).expect("stream");
    assert_eq!(s.name, stream);
    let t = ok("get topic by unicode name", within("get", client.get_topic(&name(stream), &name(topic))).await)
        .expect("topic");
    assert_eq!(t.name, topic);
    send_to_partition(&client, &name(stream), &name(topic), 0, msgs("m", 1)).await;
    assert!(ok("other case", within("get", client.get_stream(&name("ŁÓDŹ-ストリーム-🚀"))).await).is_none(), "names are case-sensitive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_streams_get_ids_zero_to_ninety_nine() {
    let server = TestServer::start();
    let client = server.root_client().await;
    for i in 0..100 {
        let s = ok("create", within("create", client.create_stream(&format!("stream-{i:03}"), &StreamCreateOptions::default())).await);
        assert_eq!(s.id, i);
    }
    let mut streams = ok("list", within("list", client.get_streams()).await);
    streams.sort_by_key(|s| s.id);
    assert_eq!(streams.len(), 100);
    for (i, s) in streams.iter().enumerate() {
        assert_eq!((s.id as usize, s.name.clone()), (i, format!("stream-{i:03}")));
    }
}
