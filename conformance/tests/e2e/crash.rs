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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_with_default_durability_survive_kill9() {
    // Kill -9 loses nothing the kernel already has; an acknowledged (committed) send must
    // not live only in the server's memory.
    let mut server = TestServer::start();
    {
        let c = server.root_client().await;
        create_stream_and_topic(&c, "s", "t", 1).await;
        for b in 0..10 {
            send_to_partition(&c, &name("s"), &name("t"), 0, msgs(&format!("b{b}"), 4)).await;
        }
        ok("store", within("store", c.store_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0), 17)).await);
    }
    tokio::task::block_in_place(|| server.kill9_and_restart());
    let c = server.root_client().await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100, false).await;
    assert_eq!(offsets(&polled), (0..40).collect::<Vec<u64>>());
    let want: Vec<String> = (0..10).flat_map(|b| (0..4).map(move |i| format!("b{b}-{i}"))).collect();
    assert_eq!(payloads(&polled), want);
    let off = ok("get offset", within("get", c.get_consumer_offset(&consumer("c"), &name("s"), &name("t"), Some(0))).await)
        .expect("offset survives kill -9");
    assert_eq!(off.stored_offset, 17);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_a_stream_of_sends_keeps_every_acknowledged_batch() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let mut server = TestServer::start();
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    {
        let c = Arc::new(server.root_client().await);
        let opts = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
        ok("create stream", within("create", c.create_stream("s", &StreamCreateOptions::default())).await);
        ok("create topic", within("create", c.create_topic(&name("s"), "t", &opts)).await);
        let writer = {
            let (c, acked) = (c.clone(), acked.clone());
            tokio::spawn(async move {
                for b in 0u32.. {
                    let mut batch = msgs(&format!("b{b}"), 5);
                    let sent = tokio::time::timeout(
                        Duration::from_secs(2),
                        c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut batch),
                    )
                    .await;
                    match sent {
                        Ok(Ok(r)) => {
                            let base = r.confirmations.first().expect("a confirmation").base_offset;
                            acked.lock().unwrap().push((base, format!("b{b}")));
                        }
                        _ => break, // the server is gone
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        tokio::task::block_in_place(|| server.kill9());
        let _ = tokio::time::timeout(Duration::from_secs(10), writer).await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 3, "some batches were acknowledged before the kill: {}", acked.len());
    tokio::task::block_in_place(|| server.start_again());

    let c = server.root_client().await;
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100_000, false).await;
    let got = offsets(&polled);
    assert_eq!(got, (0..got.len() as u64).collect::<Vec<u64>>(), "offsets stay contiguous after the crash");
    let texts = payloads(&polled);
    for (base, prefix) in &acked {
        let base = *base as usize;
        assert!(base + 5 <= texts.len(), "acknowledged batch {prefix} at {base} is missing ({} messages recovered)", texts.len());
        let want: Vec<String> = (0..5).map(|i| format!("{prefix}-{i}")).collect();
        assert_eq!(texts[base..base + 5].to_vec(), want, "acknowledged batch {prefix} at offset {base}");
    }
    assert_eq!(texts.len() % 5, 0, "no torn batch: {} messages", texts.len());
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, msgs("after", 1)).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(texts.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_riding_through_a_crash_restart_are_never_duplicated() {
    // The SDK resends an in-flight send with the same identity after it reconnects; the server
    // must deduplicate it. Whatever the outcome of each call, no batch may be stored twice,
    // and every acknowledged batch must be stored once. The crash lands while sends are in
    // flight: a separate thread kills and restarts the server after 300 ms.
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let server = Arc::new(Mutex::new(TestServer::start()));
    // Through a wire tap, so a hang shows the frames around it.
    let port = server.lock().unwrap().port();
    let tap = crate::wiretap::WireTap::start(port).await;
    let c = IggyClient::from_connection_string(&format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", tap.address()))
        .expect("connection string");
    ok("connect", within("connect", c.connect()).await);
    create_stream_and_topic(&c, "s", "t", 1).await;
    let killer = {
        let server = server.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            server.lock().unwrap().kill9_and_restart();
        })
    };
    let mut acked = Vec::new();
    let mut failed = Vec::new();
    let started = std::time::Instant::now();
    let mut b = 0u32;
    while started.elapsed() < Duration::from_secs(3) || !killer.is_finished() {
        let mut batch = msgs(&format!("b{b}"), 3);
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut batch),
        )
        .await;
        match r {
            Ok(Ok(_)) => acked.push(b),
            Ok(Err(IggyError::OperationUncertain(op))) => {
                // Prove the outcome so the lane opens again.
                let deadline = std::time::Instant::now() + Duration::from_secs(15);
                match within_for(Duration::from_secs(20), "resolve_operation", c.resolve_operation(op, deadline)).await {
                    Ok(()) => acked.push(b),
                    Err(e) => failed.push(format!("b{b}: uncertain {op} resolved to {e} ({})", e.as_code())),
                }
            }
            Ok(Err(e)) => failed.push(format!("b{b}: {e} ({})", e.as_code())),
            Err(_) => panic!("batch b{b}: send hung for 20 s; frames around the crash:\n{}\n...\nlast frames:\n{}", tap.around_first_close(12, 30), tap.tail(6)),
        }
        b += 1;
    }
    killer.join().expect("killer thread");
    assert!(acked.len() + 2 >= b as usize, "at most two sends fail around the crash: failed {failed:?}");
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("x"), PollingStrategy::first(), 100_000, false).await;
    let texts = payloads(&polled);
    let batches: Vec<String> = texts.chunks(3).map(|ch| ch[0].trim_end_matches("-0").to_string()).collect();
    let unique: std::collections::BTreeSet<&String> = batches.iter().collect();
    assert_eq!(unique.len(), batches.len(), "a batch is stored twice (failed sends: {failed:?})");
    for b in &acked {
        assert!(batches.contains(&format!("b{b}")), "acknowledged batch b{b} is missing (failed sends: {failed:?})");
    }
    assert_eq!(offsets(&polled), (0..texts.len() as u64).collect::<Vec<_>>());
    assert!(b > 20, "the loop kept sending before and after the crash: {b} sends");
}
