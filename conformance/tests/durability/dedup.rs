//! Retried sends: a SendMessages frame re-sent with the same request identity (client, session,
//! request number) is answered from the client table, never applied twice — on the same
//! connection, on a fresh connection bound to the same session, after a SIGKILL and restart,
//! and when the first copy was in flight at the kill. Frames are built byte by byte from the
//! official `iggy_binary_protocol` header and encoders; the SDK only reads the partition back.

use crate::harness::within;
use crate::support::*;
use iggy::prelude::*;
use iggy_binary_protocol::Operation;
use rand::Rng;
use std::time::Duration;

async fn partition_messages(client: &IggyClient) -> Vec<IggyMessage> {
    let polled = within(
        "poll",
        client.poll_messages(
            &Identifier::named("d").unwrap(),
            &Identifier::named("t").unwrap(),
            Some(0),
            &Consumer::new(Identifier::named("reader").unwrap()),
            &PollingStrategy::offset(0),
            10_000,
            false,
        ),
    )
    .await
    .expect("poll");
    polled.messages
}

fn batch(rng: &mut rand::rngs::StdRng, round: u64, n: usize) -> Vec<(u128, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let id = (u128::from(round) << 32) | (i as u128 + 1);
            (id, format!("round{round}-msg{i}-{}", rng.random::<u32>()).into_bytes())
        })
        .collect()
}

fn assert_each_once(messages: &[IggyMessage], sent: &[(u128, Vec<u8>)], what: &str) {
    let offsets: Vec<u64> = messages.iter().map(|m| m.header.offset).collect();
    assert_eq!(offsets, (0..messages.len() as u64).collect::<Vec<_>>(), "{what}: offsets");
    let got: Vec<(u128, Vec<u8>)> = messages.iter().map(|m| (m.header.id, m.payload.to_vec())).collect();
    assert_eq!(got, sent, "{what}: the partition must hold every acknowledged batch exactly once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_send_with_the_same_request_identity_is_applied_once_across_reconnects_and_kills() {
    let (seed, _guard) = seed("a_retried_send_with_the_same_request_identity_is_applied_once_across_reconnects_and_kills");
    let mut rng = rng(seed, 7);
    let rounds = knob("DURABILITY_DEDUP_ROUNDS", 3);
    let mut server = Server::new(&[("IGGY_SYSTEM_DURABILITY", "persisted")]);
    tokio::task::block_in_place(|| server.spawn(&[]));
    let (stream_id, topic_id) = {
        let c = server.client().await;
        let s = within("create stream", c.create_stream("d", &StreamCreateOptions::default())).await.unwrap();
        let options = TopicCreateOptions {
            partitions_count: Some(1),
            durability: Durability::Persisted,
            ..Default::default()
        };
        let t = within("create topic", c.create_topic(&Identifier::named("d").unwrap(), "t", &options))
            .await
            .unwrap();
        (s.id, t.id)
    };
    let key = (stream_id, topic_id, 0);
    let address = server.address();
    let client_id: u128 = rng.random::<u128>() | 1;
    let mut raw = tokio::task::block_in_place(|| Raw::login(&address, "iggy", "iggy", client_id)).expect("raw login");
    let (session, secret) = (raw.session, raw.secret);
    let mut expected: Vec<(u128, Vec<u8>)> = Vec::new();
    let mut retries = 0u64;

    for round in 0..rounds {
        let n = rng.random_range(1..5);
        let messages = batch(&mut rng, round, n);
        let request = raw.next_request();
        let route = tokio::task::block_in_place(|| raw.route(key.0, key.1, key.2));
        let frame = raw.send_frame(request, &route, key, &messages);
        let first = tokio::task::block_in_place(|| raw.call(&frame)).unwrap();
        let (header, body) = first.ok("first send");
        assert_eq!(header.operation, Operation::SendMessages);
        let base = confirmed_base_offset(&body);
        assert_eq!(base, expected.len() as u64, "round {round}: the batch lands at the partition's end");
        expected.extend(messages.iter().cloned());

        // 1. The same frame again on the same connection.
        let (_, again) = tokio::task::block_in_place(|| raw.call(&frame)).unwrap().ok("retry, same connection");
        assert_eq!(confirmed_base_offset(&again), base, "round {round}: a retry is answered with the first reply");
        retries += 1;
        // 2. On a fresh connection bound to the same session.
        let next = raw.peek_next_request();
        let mut fresh = tokio::task::block_in_place(|| Raw::bind(&address, client_id, session, secret, next)).expect("bind");
        let (_, again) = tokio::task::block_in_place(|| fresh.call(&frame)).unwrap().ok("retry, fresh connection");
        assert_eq!(confirmed_base_offset(&again), base, "round {round}: retry on a new connection");
        retries += 1;
        assert_each_once(&partition_messages(&server.client().await).await, &expected, "before the kill");

        // 3. After SIGKILL and restart, on a fresh connection.
        tokio::task::block_in_place(|| server.kill9());
        tokio::task::block_in_place(|| server.spawn(&[]));
        let mut raw_after = tokio::task::block_in_place(|| Raw::bind(&address, client_id, session, secret, next))
            .expect("the session survives the kill");
        let (_, again) = tokio::task::block_in_place(|| raw_after.call(&frame)).unwrap().ok("retry after the kill");
        assert_eq!(confirmed_base_offset(&again), base, "round {round}: a retry after a restart is answered from the client table");
        retries += 1;
        assert_each_once(&partition_messages(&server.client().await).await, &expected, "after the kill");

        // 4. A send in flight at the kill, retried after the restart: present exactly once.
        let n = rng.random_range(1..5);
        let messages = batch(&mut rng, 1000 + round, n);
        let request = raw_after.next_request();
        let route = tokio::task::block_in_place(|| raw_after.route(key.0, key.1, key.2));
        let frame = raw_after.send_frame(request, &route, key, &messages);
        use std::io::Write;
        tokio::task::block_in_place(|| raw_after.stream.write_all(&frame)).unwrap();
        // Let it reach the journal (or not: both outcomes are legal; a double apply is not).
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
        tokio::task::block_in_place(|| server.kill9());
        tokio::task::block_in_place(|| server.spawn(&[]));
        let next = raw_after.peek_next_request();
        raw = tokio::task::block_in_place(|| Raw::bind(&address, client_id, session, secret, next)).expect("bind after kill");
        let (_, reply) = tokio::task::block_in_place(|| raw.call(&frame)).unwrap().ok("in-flight retry");
        assert_eq!(confirmed_base_offset(&reply), expected.len() as u64, "round {round}: the in-flight batch lands once, at the end");
        expected.extend(messages.iter().cloned());
        retries += 1;
        let (_, reply) = tokio::task::block_in_place(|| raw.call(&frame)).unwrap().ok("in-flight retry, twice");
        assert_eq!(confirmed_base_offset(&reply), (expected.len() - messages.len()) as u64);
        retries += 1;
        assert_each_once(&partition_messages(&server.client().await).await, &expected, "after the in-flight retry");
    }
    eprintln!(
        "dedup figures: seed {seed}, rounds {rounds}, kills {}, retried frames {retries}, messages {}",
        2 * rounds,
        expected.len()
    );
}
