//! Transport framing: the server must reassemble frames however TCP cuts them, and take
//! several frames from one read.

use crate::harness::*;
use crate::wiretap::WireTap;
use futures_util::future::join_all;
use iggy::prelude::*;

async fn tapped_client(tap: &WireTap) -> IggyClient {
    let client = IggyClient::from_connection_string(&format!("iggy://{ROOT_USER}:{ROOT_PASSWORD}@{}", tap.address()))
        .expect("connection string");
    ok("connect through the tap", within("connect", client.connect()).await);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_split_into_tiny_writes_are_reassembled() {
    let server = TestServer::start();
    let tap = WireTap::start(server.port()).await;
    tap.fragment_client_frames(7);
    let c = tapped_client(&tap).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let sent = send_to_partition(&c, &name("s"), &name("t"), 0, vec![msg(big.clone()), msg("small")]).await;
    assert_eq!(sent.confirmations.first().map(|c| c.base_offset), Some(0));
    let polled = poll(&c, &name("s"), &name("t"), 0, &consumer("c"), PollingStrategy::first(), 10, false).await;
    assert_eq!(polled.messages.len(), 2);
    assert!(polled.messages[0].payload[..] == big[..]);
    assert_eq!(&polled.messages[1].payload[..], b"small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_coalesced_into_one_write_are_all_answered() {
    let server = TestServer::start();
    let tap = WireTap::start(server.port()).await;
    let c = tapped_client(&tap).await;
    create_stream_and_topic(&c, "s", "t", 1).await;
    send_to_partition(&c, &name("s"), &name("t"), 0, msgs("m", 20)).await;
    tap.coalesce_client_frames(8);
    let polls = (0..20u64).map(|o| {
        let c = &c;
        async move {
            let p = c
                .poll_messages(&name("s"), &name("t"), Some(0), &consumer("c"), &PollingStrategy::offset(o), 1, false)
                .await;
            (o, ok("coalesced poll", p))
        }
    });
    for (o, p) in within("20 pipelined polls", join_all(polls)).await {
        assert_eq!(offsets(&p), vec![o]);
    }
    let sends = (0..8).map(|b| {
        let c = &c;
        async move {
            let mut batch = msgs(&format!("x{b}"), 2);
            ok("coalesced send", c.send_messages(&name("s"), &name("t"), &Partitioning::partition_id(0), &mut batch).await)
        }
    });
    let results = within("8 pipelined sends", join_all(sends)).await;
    let mut bases: Vec<u64> = results.iter().map(|r| r.confirmations[0].base_offset).collect();
    bases.sort();
    assert_eq!(bases, (0..8).map(|i| 20 + 2 * i).collect::<Vec<u64>>());
}

/// A request number names one request, and a replicated request names its session: a create
/// sent under the number of an earlier, different request (another `request_checksum`, or
/// another operation) was answered with the earlier create's cached reply, marked committed,
/// and never executed; request 0 (the register's number) and session 0 were taken too. Each is
/// now refused with InvalidCommand (3) on a connection that goes on, and a resend of the same
/// request is still answered from the client table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_number_names_one_request_and_a_replicated_request_names_its_session() {
    use crate::legacy::{Legacy, encoded, login_with};
    use iggy_generated::frames::Operation;
    use iggy_generated::payloads::{CreateStreamRequest, Identifier as WireIdentifier};
    let server = TestServer::start();
    let mut raw = login_with(&server.address(), 0x5eed, iggy_generated::protocol::V0_12_0).await;
    let session = raw.session;
    let create = |name: &str| encoded(&CreateStreamRequest { name, options: &[] });
    let (create_stream, delete_stream) = (Operation::CreateStream, Operation::DeleteStream);

    let first = raw
        .frame_numbered(create_stream, &create("first"), (session, 7, 0xaaaa))
        .await;
    Legacy::payload(&first);
    let resent = raw
        .frame_numbered(create_stream, &create("first"), (session, 7, 0xaaaa))
        .await;
    assert_eq!((resent.0.status, &resent.1), (0, &first.1), "a resend is answered as before");

    let delete_first = encoded(&WireIdentifier {
        kind: 2,
        value: b"first",
    });
    let refusals = [
        (create_stream, create("other checksum"), (session, 7, 0xbbbb)),
        (delete_stream, delete_first, (session, 7, 0xaaaa)),
        (create_stream, create("request 0"), (session, 0, 0xcccc)),
        (create_stream, create("session 0"), (0, 8, 0xdddd)),
    ];
    for (operation, body, numbering) in refusals {
        let reply = raw.frame_numbered(operation, &body, numbering).await;
        assert_eq!(reply.0.status, 3, "{operation:?} as {numbering:?}");
    }
    let next = raw
        .frame_numbered(create_stream, &create("next"), (session, 9, 0xeeee))
        .await;
    Legacy::payload(&next);

    let client = server.root_client().await;
    let streams = ok("get_streams", within("get streams", client.get_streams()).await);
    let mut names: Vec<&str> = streams.iter().map(|stream| stream.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["first", "next"], "only the requests taken ran");
}
