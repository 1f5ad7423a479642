//! Protocol 0.11.1, the seed's development protocol: a client that logs in with it is admitted
//! by the version gate and served with 0.11.1's layouts (50-byte topic head, one options block,
//! roster without replica id) and commands (per-resource updates), not 0.12.0's. Raw frames built
//! with the generated codec, since no official SDK speaks 0.11.1 here.

use crate::harness::*;
use iggy_generated::frames::{Command, Operation, ReplyHeader, RequestHeader};
use iggy_generated::payloads::*;
use iggy_generated::protocol::{ProtocolVersion, V0_11_1, V0_12_0};
use iggy_wire::{WireDecode, WireEncode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A raw client of one session (also framing.rs's, for headers the SDK never sends).
pub(crate) struct Legacy {
    stream: TcpStream,
    client: u128,
    pub(crate) session: u64,
    request: u64,
}

impl Legacy {
    pub(crate) async fn frame(
        &mut self,
        operation: Operation,
        code: u32,
        body: &[u8],
    ) -> (ReplyHeader, Vec<u8>) {
        let mut header = RequestHeader {
            command: Command::Request,
            size: (RequestHeader::SIZE + body.len()) as u32,
            client: self.client,
            operation: operation.to_repr(),
            session: self.session,
            ..RequestHeader::default()
        };
        if operation != Operation::Register {
            self.request += 1;
            header.request = self.request;
        }
        if operation == Operation::NonReplicated {
            header.reserved = code.to_le_bytes();
        } else {
            header.request_checksum = u128::from(self.request) + 1;
        }
        self.send(header, body).await
    }

    /// Sends a replicated `operation` with `body` as `(session, request, request_checksum)`,
    /// whatever the session's numbering says.
    pub(crate) async fn frame_numbered(
        &mut self,
        operation: Operation,
        body: &[u8],
        (session, request, checksum): (u64, u64, u128),
    ) -> (ReplyHeader, Vec<u8>) {
        let header = RequestHeader {
            command: Command::Request,
            size: (RequestHeader::SIZE + body.len()) as u32,
            client: self.client,
            operation: operation.to_repr(),
            session,
            request,
            request_checksum: checksum,
            ..RequestHeader::default()
        };
        self.request = self.request.max(request);
        self.send(header, body).await
    }

    async fn send(&mut self, header: RequestHeader, body: &[u8]) -> (ReplyHeader, Vec<u8>) {
        let mut frame = header.to_bytes().to_vec();
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).await.unwrap();
        let mut head = [0u8; ReplyHeader::SIZE];
        self.stream.read_exact(&mut head).await.unwrap();
        let reply = ReplyHeader::decode_fixed(&head).unwrap();
        let mut body = vec![0u8; reply.size as usize - ReplyHeader::SIZE];
        self.stream.read_exact(&mut body).await.unwrap();
        (reply, body)
    }

    /// A result-framed reply's payload, after checking its result section says success.
    pub(crate) fn payload(reply: &(ReplyHeader, Vec<u8>)) -> &[u8] {
        assert_eq!(reply.0.status, 0, "status");
        assert_eq!(&reply.1[..4], &[0, 0, 0, 0], "result section: success");
        &reply.1[4..]
    }

    /// The error code a result-framed reply's result section carries (0 for success).
    fn result_code(reply: &(ReplyHeader, Vec<u8>)) -> u32 {
        assert_eq!(reply.0.status, 0, "status");
        let section = ReplyResultSection::decode_from(&mut &reply.1[..]).expect("result section");
        section.results.first().map_or(0, |entry| entry.result)
    }
}

/// One entry of an options block: the user-headers TLV (`[kind u8][len u32][bytes]` for the key,
/// then for the value). The spec declares no payload for it, so there is no generated encoder.
fn option_entry(key: &str, value_kind: u8, value: &[u8]) -> Vec<u8> {
    const STRING_KIND: u8 = 2;
    let mut out = vec![STRING_KIND];
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.push(value_kind);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
    out
}

pub(crate) fn encoded<T: WireEncode>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    value.encode_to(&mut out);
    out
}

async fn login(server: &TestServer) -> Legacy {
    login_at(&server.address(), 0x0111).await
}

/// A 0.11.1 session registered as `client` over a connection to `address`.
async fn login_at(address: &str, client: u128) -> Legacy {
    login_with(address, client, V0_11_1).await
}

/// A session of protocol `version` registered as `client` over a connection to `address`.
pub(crate) async fn login_with(address: &str, client: u128, version: ProtocolVersion) -> Legacy {
    let stream = TcpStream::connect(address).await.unwrap();
    let mut legacy = Legacy {
        stream,
        client,
        session: 0,
        request: 0,
    };
    let body = encoded(&LoginRegisterRequest {
        version_info: ClientVersionInfo {
            protocol_version: version.packed(),
            sdk_name: "legacy-test",
            sdk_version: "0.0.0",
        },
        bind_secret: [7; 32],
        username: ROOT_USER,
        password: ROOT_PASSWORD,
        client_context: "",
    });
    let (reply, body) = legacy.frame(Operation::Register, 40, &body).await;
    assert_eq!(reply.status, 0, "a {version} client is admitted");
    legacy.session = LoginRegisterResponse::decode_exact(&body).unwrap().session;
    legacy
}

/// The login gate checks the inclusive window 0.11.1 to 0.12.0 with patch versions counted
/// (the seed), as the eviction's window says: a 0.11.2 client was evicted as incompatible
/// (14) though the eviction named 0.11.1 to 0.12.0. It is admitted and served with 0.11.1's
/// layouts, the newest codec at or below its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_of_0_11_inside_the_window_is_admitted_with_0_11_1_layouts() {
    let server = TestServer::start();
    let patch = ProtocolVersion {
        patch: 2,
        ..V0_11_1
    };
    let mut c = login_with(&server.address(), 0x0112, patch).await;
    let created = c
        .frame(
            Operation::CreateStream,
            202,
            &encoded(&CreateStreamRequest {
                name: "patched",
                options: &[],
            }),
        )
        .await;
    let stream = GetStreamResponseV0111::decode_exact(Legacy::payload(&created))
        .expect("0.11.1 stream layout");
    assert_eq!(stream.stream.name, "patched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_11_1_session_is_served_with_0_11_1_layouts_and_commands() {
    let server = TestServer::start();
    let mut c = login(&server).await;

    let created = c
        .frame(
            Operation::CreateStream,
            202,
            &encoded(&CreateStreamRequest {
                name: "old",
                options: &[],
            }),
        )
        .await;
    let stream = GetStreamResponseV0111::decode_exact(Legacy::payload(&created))
        .expect("0.11.1 stream layout");
    assert_eq!((stream.stream.id, stream.stream.name), (0, "old"));

    let zero = 0u32.to_le_bytes();
    let stream_0 = Identifier {
        kind: 1,
        value: &zero,
    };
    let topic_request = encoded(&CreateTopicRequest {
        stream_id: stream_0.clone(),
        partitions_count: 2,
        name: "t",
        options: &[],
    });
    let created = c.frame(Operation::CreateTopic, 302, &topic_request).await;
    let topic = GetTopicResponseV0111::decode_exact(Legacy::payload(&created))
        .expect("0.11.1 topic layout");
    assert_eq!((topic.topic.name, topic.partitions.len()), ("t", 2));

    let (reply, roster) = c.frame(Operation::NonReplicated, 12, &[]).await;
    assert_eq!(reply.status, 0);
    let roster = ClusterMetadataResponseV0111::decode_exact(&roster).expect("0.11.1 roster layout");
    assert_eq!(roster.nodes[0].tcp_port, server.port());

    // 204: 0.11.1's stream update, gone in 0.12.0.
    let update = encoded(&UpdateStreamRequest {
        stream_id: stream_0.clone(),
        name: "new",
        options: &[],
    });
    let updated = c.frame(Operation::UpdateStream, 204, &update).await;
    Legacy::payload(&updated);
    let (reply, body) = c
        .frame(
            Operation::NonReplicated,
            200,
            &encoded(&StreamIdRequest {
                stream_id: Identifier {
                    kind: 1,
                    value: &zero,
                },
            }),
        )
        .await;
    assert_eq!(reply.status, 0);
    assert_eq!(
        GetStreamResponseV0111::decode_exact(&body)
            .unwrap()
            .stream
            .name,
        "new"
    );

    // 16 (resource.update) exists only in 0.12.0: unknown to this session.
    let (reply, _) = c.frame(Operation::NonReplicated, 16, &[]).await;
    assert_eq!(
        reply.status, 3,
        "InvalidCommand for a command outside the session's protocol"
    );
    // Nor as its replicated operation, whatever the body.
    let (reply, _) = c.frame(Operation::UpdateResource, 16, &update).await;
    assert_eq!(reply.status, 3, "UpdateResource from a 0.11.1 session");

    // And 0.11.1's updates (operations UpdateStream and UpdateTopic) are unknown to a 0.12.0
    // session: nothing is renamed.
    let mut current = login_with(&server.address(), 0x0120, V0_12_0).await;
    let (reply, _) = current.frame(Operation::UpdateStream, 204, &update).await;
    assert_eq!(reply.status, 3, "UpdateStream from a 0.12.0 session");
    let update_topic = encoded(&UpdateTopicRequest {
        stream_id: stream_0.clone(),
        topic_id: stream_0.clone(),
        name: "renamed",
        options: &[],
    });
    let (reply, _) = current
        .frame(Operation::UpdateTopic, 304, &update_topic)
        .await;
    assert_eq!(reply.status, 3, "UpdateTopic from a 0.12.0 session");
    let (_, body) = c
        .frame(
            Operation::NonReplicated,
            200,
            &encoded(&StreamIdRequest {
                stream_id: stream_0.clone(),
            }),
        )
        .await;
    let stream = GetStreamResponseV0111::decode_exact(&body).unwrap();
    assert_eq!(stream.stream.name, "new", "nothing refused took effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_11_1_topic_update_is_checked_against_the_option_catalog_like_0_12_0() {
    use iggy::prelude::{IggyError, TopicClient, TopicUpdateOptions};
    const STRING: u8 = 2;
    const UINT64: u8 = 12;
    let server = TestServer::start();
    let current = server.root_client().await;
    create_stream_and_topic(&current, "s", "t", 1).await;
    let mut c = login(&server).await;
    let zero = 0u32.to_le_bytes();
    let id_0 = || Identifier {
        kind: 1,
        value: &zero,
    };

    // Create-only keys: 0.12.0's resource.update refuses them with OptionNotUpdatable (4103).
    // 0.11.1's topic.update once stored "gzip" read as an integer and refused "durability"
    // as an unknown key.
    for (key, value) in [
        ("compression_algorithm", "gzip"),
        ("durability", "persisted"),
    ] {
        let update = TopicUpdateOptions {
            name: Some("renamed".into()),
            raw: [(key.to_string(), value.to_string())].into_iter().collect(),
            ..Default::default()
        };
        let r = within(
            "update",
            current.update_topic(&name("s"), &name("t"), &update),
        )
        .await;
        let current_code = r.as_ref().err().map(IggyError::as_code);
        assert_eq!(current_code, Some(4103), "0.12.0 {key}={value}: {r:?}");

        let options = option_entry(key, STRING, value.as_bytes());
        let request = encoded(&UpdateTopicRequest {
            stream_id: id_0(),
            topic_id: id_0(),
            name: "renamed",
            options: &options,
        });
        let reply = c.frame(Operation::UpdateTopic, 304, &request).await;
        assert_eq!(
            Some(Legacy::result_code(&reply)),
            current_code,
            "0.11.1 {key}={value} is refused as 0.12.0 refuses it"
        );
    }

    // A value of the wrong size for an updatable key: InvalidOptionValue (4042).
    let options = option_entry("message_expiry", UINT64, &[1, 2, 3]);
    let request = encoded(&UpdateTopicRequest {
        stream_id: id_0(),
        topic_id: id_0(),
        name: "renamed",
        options: &options,
    });
    let reply = c.frame(Operation::UpdateTopic, 304, &request).await;
    assert_eq!(Legacy::result_code(&reply), 4042, "a 3-byte message_expiry");

    let t = ok(
        "get",
        within("get", current.get_topic(&name("s"), &name("t"))).await,
    )
    .expect("a refused update changes nothing, not even the name");
    assert_eq!(
        t.resolved_options().compression_algorithm,
        iggy::prelude::CompressionAlgorithm::None
    );

    // An update the catalog allows still applies.
    let options = option_entry("message_expiry", UINT64, &3_600_000_000u64.to_le_bytes());
    let request = encoded(&UpdateTopicRequest {
        stream_id: id_0(),
        topic_id: id_0(),
        name: "renamed",
        options: &options,
    });
    let reply = c.frame(Operation::UpdateTopic, 304, &request).await;
    assert_eq!(Legacy::result_code(&reply), 0, "a valid 0.11.1 update");
    assert!(
        ok(
            "get",
            within("get", current.get_topic(&name("s"), &name("renamed"))).await
        )
        .is_some(),
        "renamed by the valid update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_11_1_topic_created_with_gzip_reports_compression_2_and_keeps_it_over_a_restart() {
    use iggy::prelude::{CompressionAlgorithm, StreamClient, StreamCreateOptions, TopicClient};
    const STRING: u8 = 2;
    let mut server = TestServer::start();
    // A metadata checkpoint every 4 ops, so the restart reads the topic from the snapshot.
    std::fs::write(
        server.dir().join("config.toml"),
        "[system]\ncheckpoint_journal_ops = 4\n",
    )
    .unwrap();
    tokio::task::block_in_place(|| server.restart());
    let zero = 0u32.to_le_bytes();
    let id_0 = || Identifier {
        kind: 1,
        value: &zero,
    };
    let get_topic = encoded(&TopicIdRequest {
        stream_id: id_0(),
        topic_id: id_0(),
    });
    {
        let mut c = login(&server).await;
        let created = c
            .frame(
                Operation::CreateStream,
                202,
                &encoded(&CreateStreamRequest {
                    name: "s",
                    options: &[],
                }),
            )
            .await;
        Legacy::payload(&created);

        // A value outside the catalog's none/gzip: InvalidOptionValue (4042), nothing created.
        let zstd = option_entry("compression_algorithm", STRING, b"zstd");
        let request = encoded(&CreateTopicRequest {
            stream_id: id_0(),
            partitions_count: 1,
            name: "t",
            options: &zstd,
        });
        let reply = c.frame(Operation::CreateTopic, 302, &request).await;
        assert_eq!(
            Legacy::result_code(&reply),
            4042,
            "compression_algorithm=zstd"
        );

        let gzip = option_entry("compression_algorithm", STRING, b"gzip");
        let request = encoded(&CreateTopicRequest {
            stream_id: id_0(),
            partitions_count: 1,
            name: "t",
            options: &gzip,
        });
        let created = c.frame(Operation::CreateTopic, 302, &request).await;
        let topic = GetTopicResponseV0111::decode_exact(Legacy::payload(&created))
            .expect("0.11.1 topic layout");
        assert_eq!(
            (topic.topic.name, topic.topic.compression_algorithm),
            ("t", 2),
            "the created topic's head reports gzip"
        );
        let (reply, body) = c.frame(Operation::NonReplicated, 300, &get_topic).await;
        assert_eq!(reply.status, 0);
        let topic = GetTopicResponseV0111::decode_exact(&body).expect("0.11.1 topic layout");
        assert_eq!(
            topic.topic.compression_algorithm, 2,
            "topic.get reports gzip"
        );

        let current = server.root_client().await;
        for i in 0..5 {
            let extra = format!("extra-{i}");
            let r = within(
                "stream",
                current.create_stream(&extra, &StreamCreateOptions::default()),
            )
            .await;
            ok("stream", r);
        }
        assert!(
            server.data_dir().join("metadata/checkpoint.0").exists(),
            "the metadata group took a checkpoint after the topic was created"
        );
    }

    tokio::task::block_in_place(|| server.restart());
    let mut c = login(&server).await;
    let log = server.log();
    let last_start = log.rsplit("e2e harness: start").next().unwrap_or_default();
    assert!(
        last_start.contains("metadata: checkpoint at op")
            && !last_start.contains("metadata: checkpoint at op 0,"),
        "the restart starts from a metadata snapshot"
    );
    let (reply, body) = c.frame(Operation::NonReplicated, 300, &get_topic).await;
    assert_eq!(reply.status, 0);
    let topic = GetTopicResponseV0111::decode_exact(&body).expect("0.11.1 topic layout");
    assert_eq!(
        (topic.topic.name, topic.topic.compression_algorithm),
        ("t", 2),
        "gzip survives the restart"
    );
    let current = server.root_client().await;
    let t = ok(
        "get",
        within("get", current.get_topic(&name("s"), &name("t"))).await,
    )
    .expect("topic t");
    assert_eq!(
        t.resolved_options().compression_algorithm,
        CompressionAlgorithm::Gzip,
        "0.12.0 reports the same topic as gzip"
    );
}

/// 0.11.1 polls a partition where 103 (or 123 for offsets) says its primary is, with 104: in a
/// cluster that is the partition group's primary, not the node asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_11_1_client_in_a_cluster_is_routed_to_each_partitions_primary() {
    use crate::cluster::{TestCluster, wait_until_async};
    use std::time::Duration;
    let cluster = TestCluster::start(3);
    let current = cluster.root_client(0).await;
    let (stream, topic) = create_stream_and_topic(&current, "s", "t", 3).await;
    for partition in 0..3 {
        let texts = vec![msg(format!("p{partition}"))];
        send_to_partition(&current, &id(stream.id), &id(topic.id), partition, texts).await;
    }
    let (stream_id, topic_id) = (stream.id.to_le_bytes(), topic.id.to_le_bytes());
    let reader = 1u32.to_le_bytes();
    let consumer = || Consumer {
        kind: 1,
        id: Identifier {
            kind: 1,
            value: &reader,
        },
    };
    let ids = |partition: u32| {
        (
            Identifier {
                kind: 1,
                value: &stream_id,
            },
            Identifier {
                kind: 1,
                value: &topic_id,
            },
            OptionalPartitionId {
                has: 1,
                partition_id: partition,
            },
        )
    };
    let poll_request = |partition: u32| {
        let (stream_id, topic_id, partition_id) = ids(partition);
        encoded(&PollMessagesRequest {
            consumer: consumer(),
            stream_id,
            topic_id,
            partition_id,
            strategy: PollingStrategy { kind: 3, value: 0 },
            count: 10,
            auto_commit: false,
        })
    };
    let offset_request = |partition: u32| {
        let (stream_id, topic_id, partition_id) = ids(partition);
        encoded(&GetConsumerOffsetRequest {
            consumer: consumer(),
            stream_id,
            topic_id,
            partition_id,
        })
    };

    let mut named = std::collections::BTreeSet::new();
    for asked in 0..3usize {
        let mut asker = login_at(&cluster.address(asked), 0x0111_0000 + asked as u128).await;
        for partition in 0..3u32 {
            let request = poll_request(partition);
            // The node asked may not have applied the topic yet: it answers when it has.
            let routed = wait_until_async(
                &format!("node {asked} routes partition {partition}"),
                Duration::from_secs(10),
                async || {
                    let (reply, body) = asker.frame(Operation::NonReplicated, 103, &request).await;
                    (reply.status == 0).then_some(body)
                },
                String::new,
            )
            .await;
            let routing = PollRoutingResponse::decode_exact(&routed).expect("0.11.1 routing");
            let address = format!("{}:{}", routing.primary.ip, routing.primary.tcp_port);
            let primary = (0..3)
                .find(|&i| cluster.address(i) == address)
                .unwrap_or_else(|| panic!("103 names a roster node, not {address}"));
            let (reply, body) = asker
                .frame(Operation::NonReplicated, 123, &offset_request(partition))
                .await;
            assert_eq!(reply.status, 0, "123 from node {asked}");
            let offsets_at = PollRoutingResponse::decode_exact(&body).expect("0.11.1 routing");
            assert_eq!(
                offsets_at.primary.tcp_port, routing.primary.tcp_port,
                "a partition's offsets live where its polls are served"
            );
            named.insert(primary);

            // 104 is served where 103 pointed, and refused as NotPrimary (89) elsewhere.
            for node in 0..3 {
                let client = 0x0222_0000 + (asked * 9 + partition as usize * 3 + node) as u128;
                let mut there = login_at(&cluster.address(node), client).await;
                let (reply, body) = there.frame(Operation::NonReplicated, 104, &request).await;
                match node == primary {
                    true => {
                        assert_eq!(reply.status, 0, "104 on the named node {node}");
                        let text = format!("p{partition}");
                        assert!(
                            body.windows(text.len()).any(|w| w == text.as_bytes()),
                            "partition {partition}'s message polled on node {node}"
                        );
                    }
                    false => assert_eq!(reply.status, 89, "104 on node {node}, not the primary"),
                }
            }
        }
    }
    assert_eq!(
        named,
        std::collections::BTreeSet::from([0, 1, 2]),
        "the three partitions' primaries are spread over the nodes"
    );
}

/// A login with protocol 0.11.0 in its version prefix, the body apache-iggy 0.9.0 (the Python
/// SDK) sends: `[version info][u8 len][username][u8 len][password][u32 len][context]`, with no
/// bind secret. The version is not admitted, and the eviction says so (14, with the window)
/// even though the rest does not parse as 0.11.1's login: with 15 (MalformedLogin) the SDK
/// showed only "Invalid format".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_11_0_login_is_evicted_as_an_incompatible_protocol_with_the_admitted_window() {
    use iggy_generated::frames::{Command, EvictionHeader, EvictionReason};
    let server = TestServer::start();
    let v0_11_0 = 11 << 10;
    let mut body = encoded(&ClientVersionInfo {
        protocol_version: v0_11_0,
        sdk_name: "rust-sdk",
        sdk_version: "0.11.0",
    });
    for text in [ROOT_USER, ROOT_PASSWORD] {
        body.push(text.len() as u8);
        body.extend_from_slice(text.as_bytes());
    }
    body.extend_from_slice(&0u32.to_le_bytes());
    for (code, body) in [(40u32, body.clone()), (15, body)] {
        let mut stream = TcpStream::connect(server.address()).await.unwrap();
        let operation = if code == 40 {
            Operation::Register
        } else {
            Operation::NonReplicated
        };
        let header = RequestHeader {
            command: Command::Request,
            size: (RequestHeader::SIZE + body.len()) as u32,
            client: 0x0110,
            operation: operation.to_repr(),
            reserved: if code == 40 {
                [0; 4]
            } else {
                code.to_le_bytes()
            },
            request_checksum: 1,
            ..RequestHeader::default()
        };
        let mut frame = header.to_bytes().to_vec();
        frame.extend_from_slice(&body);
        stream.write_all(&frame).await.unwrap();
        let mut head = [0u8; EvictionHeader::SIZE];
        within("the eviction", stream.read_exact(&mut head))
            .await
            .unwrap();
        let eviction = EvictionHeader::decode_fixed(&head).expect("an eviction");
        assert_eq!(eviction.command, Command::Eviction, "code {code}");
        assert_eq!(
            eviction.reason,
            EvictionReason::IncompatibleProtocol,
            "code {code}"
        );
        assert_eq!(
            eviction.server_protocol_version_min,
            V0_11_1.packed(),
            "code {code}"
        );
        assert_eq!(
            eviction.server_protocol_version,
            iggy_generated::protocol::CURRENT.packed(),
            "code {code}"
        );
    }
    // The operator sees the first eviction from this address, naming the admitted window; the
    // second, for the same reason within the interval, is held back.
    let lines = server.log_lines_with("evicted:");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("INFO")
            && lines[0].contains("from 127.0.0.1:")
            && lines[0].contains("over tcp")
            && lines[0].contains("outside the ones this server admits (0.11.1 to 0.12.0)"),
        "{}",
        lines[0]
    );
}

/// A client of the framing before protocol 0.11 (the Python and Node.js SDKs 0.8.0 and older)
/// sends a request of 4-byte length, command and payload, and waits for its answer. The server
/// reads the start of a 256-byte header and waited for the rest until the idle timeout (2
/// minutes, the SDK hanging meanwhile): the rest of a header must now come within the request
/// timeout, and the log says what the bytes were. A header of this framing cut short is
/// closed the same way, without the older framing's name.
#[tokio::test]
async fn a_request_of_the_older_framing_is_closed_at_the_request_timeout_and_named_in_the_log() {
    let server = TestServer::start_with_env(&[("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "1000")]);
    let older_ping = [4u8, 0, 0, 0, 1, 0, 0, 0];
    let header_start = [7u8; 100];
    for bytes in [&older_ping[..], &header_start[..]] {
        let mut stream = TcpStream::connect(server.address()).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        let started = std::time::Instant::now();
        let mut answer = Vec::new();
        let closed = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut answer),
        )
        .await;
        assert!(
            closed.is_ok(),
            "{} bytes: still open after 10 s",
            bytes.len()
        );
        assert!(
            answer.is_empty(),
            "{} bytes: answered {answer:?}",
            bytes.len()
        );
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(900),
            "{} bytes: closed after {:?}, before the request timeout",
            bytes.len(),
            started.elapsed()
        );
    }
    let lines = server.log_lines_with("request header and nothing more");
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains("INFO")
            && lines[0].contains("closed: 8 bytes of a 256-byte request header")
            && lines[0].contains("framing before protocol 0.11 (command 1)"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("closed: 100 bytes of a 256-byte request header")
            && !lines[1].contains("framing before"),
        "{}",
        lines[1]
    );
}
