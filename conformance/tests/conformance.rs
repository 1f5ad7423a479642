//! Conformance: our generated codec against the official crates (the judge of bytes).
//! Prints one summary line and fails on any mismatch not listed in expected-failures.txt.

use iggy_binary_protocol as official;
use iggy_generated::{errors::ErrorCode, frames};
use std::collections::BTreeSet;

#[path = "conformance/replica_frames.rs"]
mod replica_frames;

#[derive(Default)]
struct Tally {
    failed: Vec<(String, String)>,
    passed: BTreeSet<String>,
}

impl Tally {
    fn check(&mut self, case: &str, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.passed.insert(case.to_string());
            }
            Err(why) => self.failed.push((case.to_string(), why)),
        }
    }
}

/// Deterministic byte source (splitmix64) so every run checks the same instances.
fn fill(seed: u64, out: &mut [u8]) {
    let mut s = seed;
    for chunk in out.chunks_mut(8) {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let b = z.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Header bytes, random where the layout allows it, with enum-typed bytes made valid.
fn header_bytes(seed: u64, command: u8, enum_bytes: &[(usize, u8)]) -> [u8; 256] {
    let mut b = [0u8; 256];
    if seed != 0 {
        fill(seed, &mut b);
    }
    b[48..52].copy_from_slice(&256u32.to_le_bytes());
    b[60] = command;
    for &(off, v) in enum_bytes {
        b[off] = v;
    }
    b
}

/// One line per header mapping: official bytemuck type vs our decode_fixed/encode_fixed.
fn header_case<O, E>(
    tally: &mut Tally,
    name: &str,
    bytes: &[u8; 256],
    ours_roundtrip: impl Fn(&[u8]) -> Result<[u8; 256], E>,
) where
    O: bytemuck::CheckedBitPattern + bytemuck::NoUninit,
    E: std::fmt::Debug,
{
    let ours = ours_roundtrip(bytes).map_err(|e| format!("our decode failed: {e:?}"));
    let official: Result<O, String> = bytemuck::checked::try_pod_read_unaligned::<O>(bytes)
        .map_err(|e| format!("official decode failed: {e:?}"));
    let result = match (ours, official) {
        (Ok(ours), Ok(off)) => {
            let off_bytes = bytemuck::bytes_of(&off);
            if ours[..] != bytes[..] {
                Err("our re-encode differs from input".into())
            } else if off_bytes != &bytes[..] {
                Err("official re-encode differs from input".into())
            } else {
                Ok(())
            }
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
    };
    tally.check(name, result);
}

macro_rules! header_mapping {
    ($tally:expr, $name:literal, $official:ty, $ours:ty, $bytes:expr) => {
        header_case::<$official, _>($tally, $name, $bytes, |b| {
            <$ours>::decode_fixed(b).map(|h| {
                let mut out = [0u8; 256];
                h.encode_fixed(&mut out);
                out
            })
        })
    };
}

#[allow(dead_code)]
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// Decodes with the official crate, pinning the type to that of `_like`.
fn official_decode<O: official::WireDecode>(_like: &O, b: &[u8]) -> Result<O, String> {
    O::decode_from(b).map_err(|e| format!("official decode: {e:?}"))
}

/// Official value -> official bytes -> our decode -> our encode (bytes equal) -> official
/// decode (value equal). Covers both directions: our encoding is what the crate reads.
macro_rules! payload_case {
    ($tally:expr, $structs:expr, $name:literal, $ours:ty, $value:expr) => {{
        let value = $value;
        let ob = official::WireEncode::to_bytes(&value).to_vec();
        let result = (|| -> Result<(), String> {
            let ours = <$ours as iggy_wire::WireDecode>::decode_exact(&ob)
                .map_err(|e| format!("ours decode {e:?} of {}", hex(&ob)))?;
            let ourb = iggy_wire::WireEncode::to_wire_bytes(&ours);
            if ourb != ob {
                return Err(format!("ours {} != official {}", hex(&ourb), hex(&ob)));
            }
            if official_decode(&value, &ourb)? != value {
                return Err("official value differs after our encode".into());
            }
            Ok(())
        })();
        $tally.check(&format!("payload:{}", $name), result);
        $structs.insert($name);
    }};
}

/// A value built with our generated types -> our bytes -> official decode == `$want`.
macro_rules! ours_case {
    ($tally:expr, $name:literal, $ours:expr, $want:expr) => {{
        let ours = $ours;
        let want = $want;
        let b = iggy_wire::WireEncode::to_wire_bytes(&ours);
        let result = official_decode(&want, &b).and_then(|got| {
            if got == want {
                Ok(())
            } else {
                Err(format!("official decoded {got:?} from {}", hex(&b)))
            }
        });
        $tally.check(&format!("ours-to-official:{}", $name), result);
    }};
}

#[test]
fn conformance() {
    let mut tally = Tally::default();

    // 1a. Error codes: every official IggyError code exists in ours with the same name.
    let mut errors = 0usize;
    for code in 1..=14008u32 {
        if let Some(d) = iggy_common::IggyErrorDiscriminants::from_repr(code) {
            errors += 1;
            let official_name = format!("{d:?}");
            let result = match ErrorCode::from_code(code) {
                Some(ours) if ours.name() == official_name && ours.code() == code => Ok(()),
                Some(ours) => Err(format!("name {} != {official_name}", ours.name())),
                None => Err(format!("missing {official_name}")),
            };
            tally.check(&format!("error:{code}"), result);
        }
    }

    // 1b. Commands: every official command code; replicated ones must map to an Operation
    // with the same discriminant and name in ours.
    let commands = official::COMMAND_TABLE.len();
    for meta in official::COMMAND_TABLE {
        let result = match meta.operation {
            None => Ok(()),
            Some(op) => {
                let want = format!("{op:?}");
                match frames::Operation::from_repr(op as u8) {
                    Some(ours) if format!("{ours:?}") == want => Ok(()),
                    Some(ours) => Err(format!("operation {ours:?} != {want}")),
                    None => Err(format!("operation {want} missing")),
                }
            }
        };
        tally.check(&format!("command:{}:{}", meta.code, meta.name), result);
        let want_op = meta
            .operation
            .map_or("NonReplicated".to_string(), |op| format!("{op:?}"));
        let ours = iggy_generated::commands::COMMANDS
            .iter()
            .find(|c| c.code == meta.code);
        let result = match ours {
            Some(c) if c.name == meta.name && c.operation == want_op => Ok(()),
            Some(c) => Err(format!(
                "ours {}/{} != {}/{want_op}",
                c.name, c.operation, meta.name
            )),
            None => Err("missing from generated::commands".into()),
        };
        tally.check(&format!("command-table:{}", meta.code), result);
    }
    // 1c. And the other way: every command our spec knows at 0.12.0 is an official code with
    // the same name.
    let current = iggy_generated::protocol::CURRENT.packed();
    for c in iggy_generated::commands::COMMANDS
        .iter()
        .filter(|c| c.since <= current && current <= c.until)
    {
        let result = match official::COMMAND_TABLE.iter().find(|m| m.code == c.code) {
            Some(m) if m.name == c.name => Ok(()),
            Some(m) => Err(format!("official name {}", m.name)),
            None => Err("not an official 0.12.0 command".into()),
        };
        tally.check(&format!("spec-command:{}", c.code), result);
    }
    // 2. Headers: the bytemuck consensus headers, a handful of instances each.
    let mut structs = BTreeSet::new();
    for seed in [0u64, 1, 2, 3, 42] {
        let req = header_bytes(seed, 5, &[(61, 0), (176, 2)]);
        header_mapping!(
            &mut tally,
            "RequestHeader",
            official::RequestHeader,
            frames::RequestHeader,
            &req
        );
        let rep = header_bytes(seed, 8, &[(208, 2)]);
        header_mapping!(
            &mut tally,
            "ReplyHeader",
            official::ReplyHeader,
            frames::ReplyHeader,
            &rep
        );
        let ev = header_bytes(seed, 13, &[(255, (seed % 16) as u8)]);
        header_mapping!(
            &mut tally,
            "EvictionHeader",
            official::EvictionHeader,
            frames::EvictionHeader,
            &ev
        );
        let generic = header_bytes(seed, 8, &[]);
        header_mapping!(
            &mut tally,
            "GenericHeader",
            official::GenericHeader,
            frames::GenericHeader,
            &generic
        );
        structs.extend([
            "RequestHeader",
            "ReplyHeader",
            "EvictionHeader",
            "GenericHeader",
        ]);
    }

    // 3. Payloads: every struct of spec/payloads.spec with an official counterpart, built
    // from official values (both directions).
    payloads(&mut tally, &mut structs);

    // 4. Vectors: every generated/vectors/*.jsonl line through our codec, the official crate
    // (0.12.0 vectors of structs with a counterpart) and the SDK stub, per struct and per command.
    let (vectors, vector_structs) = vectors(&mut tally);
    let _ = structs;
    let structs = vector_structs;

    // 5. Expected failures.
    let listed: BTreeSet<String> = include_str!("../expected-failures.txt")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let mut mismatches = 0usize;
    for (case, why) in &tally.failed {
        if !listed.contains(case) {
            eprintln!("MISMATCH {case}: {why}");
            mismatches += 1;
        }
    }
    for case in &listed {
        if tally.passed.contains(case) {
            eprintln!("UNEXPECTED PASS {case}: remove it from expected-failures.txt");
            mismatches += 1;
        }
    }
    println!(
        "conformance: {vectors} vectors, {} structs, {commands} commands, {errors} errors, {mismatches} mismatches",
        structs.len()
    );
    assert_eq!(mismatches, 0, "conformance mismatches");
}

/// One options TLV entry (`name` = "abc"), accepted by the crate's options validation.
fn options_block() -> official::WireOptions {
    let mut b = vec![2u8];
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(b"name");
    b.push(2);
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(b"abc");
    official::WireOptions::from_slice(&b).expect("valid options block")
}

fn name(s: &str) -> official::WireName {
    official::WireName::new(s).expect("valid name")
}

#[allow(clippy::too_many_lines)]
fn payloads(tally: &mut Tally, structs: &mut BTreeSet<&'static str>) {
    use iggy_generated::payloads as ours;
    use official::requests as rq;
    use official::responses as rs;
    use official::{WireConsumer, WireIdentifier as Id};

    let ctx = official::PartitionContext {
        incarnation: 7,
        owner_generation: 3,
        metadata_op: 11,
    };
    let stream = |id: u32, topics: u32, opts: official::WireOptions| rs::streams::StreamResponse {
        id,
        created_at: 1_710_000_000_000 + u64::from(id),
        topics_count: topics,
        size_bytes: 4096,
        messages_count: 12,
        name: name(&format!("stream-{id}")),
        options: opts,
        derived_options: official::WireOptions::empty(),
    };
    let topic = |id: u32, parts: u32| rs::streams::TopicHeader {
        id,
        created_at: 1_710_000_000_500,
        partitions_count: parts,
        size_bytes: 1,
        messages_count: 2,
        name: name(&format!("topic-{id}")),
        options: official::WireOptions::empty(),
        derived_options: options_block(),
    };
    let partition = |id: u32| rs::topics::PartitionResponse {
        id,
        created_at: 5,
        segments_count: 1,
        current_offset: 99,
        size_bytes: 1000,
        messages_count: 100,
        context: ctx,
    };
    let perms = official::WirePermissions {
        global: official::WireGlobalPermissions {
            manage_servers: true,
            read_servers: false,
            manage_users: true,
            read_users: true,
            manage_streams: false,
            read_streams: true,
            manage_topics: false,
            read_topics: true,
            poll_messages: true,
            send_messages: false,
        },
        streams: vec![
            official::WireStreamPermissions {
                stream_id: 1,
                manage_stream: true,
                read_stream: false,
                manage_topics: true,
                read_topics: false,
                poll_messages: true,
                send_messages: true,
                topics: vec![
                    official::WireTopicPermissions {
                        topic_id: 2,
                        manage_topic: true,
                        read_topic: true,
                        poll_messages: false,
                        send_messages: true,
                    },
                    official::WireTopicPermissions {
                        topic_id: 3,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: false,
                    },
                ],
            },
            official::WireStreamPermissions {
                stream_id: 9,
                manage_stream: false,
                read_stream: true,
                manage_topics: false,
                read_topics: true,
                poll_messages: false,
                send_messages: false,
                topics: vec![],
            },
        ],
    };
    let user = |id: u32| rs::users::UserResponse {
        id,
        created_at: 77,
        status: 1,
        username: name("admin"),
        options: options_block(),
        derived_options: official::WireOptions::empty(),
    };
    let client = |groups: u32| rs::clients::ClientResponse {
        client_id: 5,
        user_id: u32::MAX,
        transport: 1,
        address: "127.0.0.1:5555".into(),
        consumer_groups_count: groups,
    };

    // Streams and topics.
    payload_case!(
        tally,
        structs,
        "StreamResponse",
        ours::StreamResponse,
        stream(0, 0, options_block())
    );
    payload_case!(
        tally,
        structs,
        "TopicHeader",
        ours::TopicHeader,
        topic(1, 2)
    );
    payload_case!(
        tally,
        structs,
        "GetStreamResponse",
        ours::GetStreamResponse,
        rs::streams::GetStreamResponse {
            stream: stream(3, 2, official::WireOptions::empty()),
            topics: vec![topic(0, 1), topic(1, 3)]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetStreamsResponse",
        ours::GetStreamsResponse,
        rs::streams::GetStreamsResponse {
            streams: vec![
                stream(0, 0, official::WireOptions::empty()),
                stream(1, 4, options_block())
            ]
        }
    );
    payload_case!(
        tally,
        structs,
        "PartitionResponse",
        ours::PartitionResponse,
        partition(4)
    );
    payload_case!(
        tally,
        structs,
        "GetTopicResponse",
        ours::GetTopicResponse,
        rs::topics::GetTopicResponse {
            topic: topic(0, 2),
            partitions: vec![partition(0), partition(1)]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetTopicsResponse",
        ours::GetTopicsResponse,
        rs::topics::GetTopicsResponse {
            topics: vec![topic(0, 1), topic(5, 0)]
        }
    );
    payload_case!(
        tally,
        structs,
        "PartitionContext",
        ours::PartitionContext,
        ctx
    );
    payload_case!(
        tally,
        structs,
        "CreateStreamRequest",
        ours::CreateStreamRequest,
        rq::streams::CreateStreamRequest {
            name: name("orders"),
            options: options_block()
        }
    );
    payload_case!(
        tally,
        structs,
        "CreateTopicRequest",
        ours::CreateTopicRequest,
        rq::topics::CreateTopicRequest {
            stream_id: Id::named("orders").unwrap(),
            partitions_count: 3,
            name: name("t"),
            options: official::WireOptions::empty()
        }
    );
    payload_case!(
        tally,
        structs,
        "StreamIdRequest(GetStreamRequest)",
        ours::StreamIdRequest,
        rq::streams::GetStreamRequest {
            stream_id: Id::numeric(4)
        }
    );
    payload_case!(
        tally,
        structs,
        "StreamIdRequest(DeleteStreamRequest)",
        ours::StreamIdRequest,
        rq::streams::DeleteStreamRequest {
            stream_id: Id::named("s").unwrap()
        }
    );
    payload_case!(
        tally,
        structs,
        "TopicIdRequest(GetTopicRequest)",
        ours::TopicIdRequest,
        rq::topics::GetTopicRequest {
            stream_id: Id::numeric(0),
            topic_id: Id::named("t").unwrap()
        }
    );
    payload_case!(
        tally,
        structs,
        "TopicIdRequest(GetConsumerGroupsRequest)",
        ours::TopicIdRequest,
        rq::consumer_groups::GetConsumerGroupsRequest {
            stream_id: Id::numeric(0),
            topic_id: Id::numeric(1)
        }
    );

    // Roster and route.
    let node = |id: u8, role: u8, status: u8| rs::system::ClusterNodeResponse {
        replica_id: id,
        name: format!("node-{id}"),
        ip: "10.0.0.1".into(),
        tcp_port: 8090,
        quic_port: 8080,
        http_port: 0,
        websocket_port: 8092,
        role,
        status,
    };
    payload_case!(
        tally,
        structs,
        "ClusterNodeResponse",
        ours::ClusterNodeResponse,
        node(2, 1, 4)
    );
    payload_case!(
        tally,
        structs,
        "ClusterMetadataResponse",
        ours::ClusterMetadataResponse,
        rs::system::ClusterMetadataResponse {
            name: "iggy".into(),
            nodes: vec![node(0, 0, 0), node(1, 1, 3)]
        }
    );
    let route = rs::messages::PartitionRouteResponse {
        incarnation: 7,
        metadata_op: 42,
        view: 1,
        partitions_count: 3,
        primary_replica: 0,
    };
    payload_case!(
        tally,
        structs,
        "PartitionRouteResponse",
        ours::PartitionRouteResponse,
        route
    );
    payload_case!(
        tally,
        structs,
        "GetPartitionRouteRequest",
        ours::GetPartitionRouteRequest,
        rq::messages::GetPartitionRouteRequest {
            stream_id: Id::numeric(1),
            topic_id: Id::numeric(2),
            partition_id: 3
        }
    );

    // Messages.
    let conf = |p: u32| rs::messages::SendMessagesConfirmationResponse {
        stream_id: 1,
        topic_id: 2,
        partition_id: p,
        base_offset: 1000 + u64::from(p),
    };
    payload_case!(
        tally,
        structs,
        "SendMessagesConfirmationResponse",
        ours::SendMessagesConfirmationResponse,
        conf(0)
    );
    payload_case!(
        tally,
        structs,
        "SendMessagesResponse",
        ours::SendMessagesResponse,
        rs::messages::SendMessagesResponse {
            confirmations: vec![conf(0), conf(1)]
        }
    );
    for (label, partition_id, consumer) in [
        ("some", Some(2), WireConsumer::consumer(Id::numeric(1))),
        (
            "none",
            None,
            WireConsumer::consumer_group(Id::named("g").unwrap()),
        ),
    ] {
        let req = rq::messages::PollMessagesRequest {
            consumer: consumer.clone(),
            stream_id: Id::numeric(0),
            topic_id: Id::named("t").unwrap(),
            partition_id,
            strategy: official::WirePollingStrategy::offset(17),
            count: 10,
            auto_commit: partition_id.is_some(),
        };
        let _ = label;
        payload_case!(
            tally,
            structs,
            "PollMessagesRequest",
            ours::PollMessagesRequest,
            req
        );
        payload_case!(
            tally,
            structs,
            "GetConsumerOffsetRequest",
            ours::GetConsumerOffsetRequest,
            rq::consumer_offsets::GetConsumerOffsetRequest {
                consumer: consumer.clone(),
                stream_id: Id::numeric(0),
                topic_id: Id::numeric(1),
                partition_id
            }
        );
        payload_case!(
            tally,
            structs,
            "StoreConsumerOffsetRequest",
            ours::StoreConsumerOffsetRequest,
            rq::consumer_offsets::StoreConsumerOffsetRequest {
                consumer: consumer.clone(),
                stream_id: Id::numeric(0),
                topic_id: Id::numeric(1),
                partition_id,
                offset: 55,
                ack: official::AckLevel::Quorum
            }
        );
        payload_case!(
            tally,
            structs,
            "DeleteConsumerOffsetRequest",
            ours::DeleteConsumerOffsetRequest,
            rq::consumer_offsets::DeleteConsumerOffsetRequest {
                consumer,
                stream_id: Id::numeric(0),
                topic_id: Id::numeric(1),
                partition_id,
                ack: official::AckLevel::NoAck
            }
        );
    }
    payload_case!(
        tally,
        structs,
        "ConsumerOffsetResponse",
        ours::ConsumerOffsetResponse,
        rs::consumer_offsets::ConsumerOffsetResponse {
            partition_id: 1,
            current_offset: 10,
            stored_offset: 5
        }
    );
    let mut poll_prefix = vec![0u8; 40];
    fill(9, &mut poll_prefix);
    let official_prefix = official_decode(
        &rs::messages::PollMessagesResponseHeader {
            partition_id: 0,
            current_offset: 0,
            messages_count: 0,
            context: ctx,
        },
        &poll_prefix,
    );
    if let Ok(p) = official_prefix {
        payload_case!(tally, structs, "PollPrefix", ours::PollPrefix, p);
    } else {
        tally.check("payload:PollPrefix", official_prefix.map(|_| ()));
    }

    // Partitions and segments.
    payload_case!(
        tally,
        structs,
        "CreatePartitionsRequest",
        ours::CreatePartitionsRequest,
        rq::partitions::CreatePartitionsRequest {
            stream_id: Id::numeric(1),
            topic_id: Id::named("t").unwrap(),
            partitions_count: 4
        }
    );
    payload_case!(
        tally,
        structs,
        "DeletePartitionsRequest",
        ours::DeletePartitionsRequest,
        rq::partitions::DeletePartitionsRequest {
            stream_id: Id::numeric(1),
            topic_id: Id::numeric(2),
            partitions_count: 1
        }
    );
    payload_case!(
        tally,
        structs,
        "DeleteSegmentsRequest",
        ours::DeleteSegmentsRequest,
        rq::segments::DeleteSegmentsRequest {
            stream_id: Id::numeric(1),
            topic_id: Id::numeric(2),
            partition_id: 3,
            segments_count: 9
        }
    );

    // Consumer groups.
    let group = |members: u32| rs::consumer_groups::ConsumerGroupResponse {
        id: 2,
        partitions_count: 3,
        members_count: members,
        name: name("group"),
    };
    let member = |id: u32, parts: Vec<u32>| rs::consumer_groups::ConsumerGroupMemberResponse {
        id,
        partitions_count: parts.len() as u32,
        partitions: parts,
    };
    payload_case!(
        tally,
        structs,
        "CreateConsumerGroupRequest",
        ours::CreateConsumerGroupRequest,
        rq::consumer_groups::CreateConsumerGroupRequest {
            stream_id: Id::numeric(0),
            topic_id: Id::numeric(0),
            name: name("g1")
        }
    );
    payload_case!(
        tally,
        structs,
        "ConsumerGroupIdRequest(JoinConsumerGroupRequest)",
        ours::ConsumerGroupIdRequest,
        rq::consumer_groups::JoinConsumerGroupRequest {
            stream_id: Id::numeric(0),
            topic_id: Id::numeric(0),
            group_id: Id::named("g1").unwrap()
        }
    );
    payload_case!(
        tally,
        structs,
        "ConsumerGroupResponse",
        ours::ConsumerGroupResponse,
        group(0)
    );
    payload_case!(
        tally,
        structs,
        "ConsumerGroupMemberResponse",
        ours::ConsumerGroupMemberResponse,
        member(1, vec![0, 2])
    );
    payload_case!(
        tally,
        structs,
        "ConsumerGroupDetailsResponse",
        ours::ConsumerGroupDetailsResponse,
        rs::consumer_groups::ConsumerGroupDetailsResponse {
            group: group(2),
            members: vec![member(1, vec![0, 2]), member(2, vec![1])]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetConsumerGroupsResponse",
        ours::GetConsumerGroupsResponse,
        rs::consumer_groups::GetConsumerGroupsResponse {
            groups: vec![group(0), group(1)]
        }
    );
    payload_case!(
        tally,
        structs,
        "SyncConsumerGroupResponse",
        ours::SyncConsumerGroupResponse,
        rs::consumer_groups::SyncConsumerGroupResponse {
            generation: 4,
            partitions: vec![0, 1, 2]
        }
    );

    // Users and permissions.
    payload_case!(
        tally,
        structs,
        "WirePermissions",
        ours::WirePermissions,
        perms.clone()
    );
    payload_case!(
        tally,
        structs,
        "WireGlobalPermissions(empty streams)",
        ours::WirePermissions,
        official::WirePermissions {
            global: perms.global.clone(),
            streams: vec![]
        }
    );
    payload_case!(tally, structs, "UserResponse", ours::UserResponse, user(1));
    payload_case!(
        tally,
        structs,
        "UserDetailsResponse",
        ours::UserDetailsResponse,
        rs::users::UserDetailsResponse {
            user: user(0),
            permissions: Some(perms.clone())
        }
    );
    payload_case!(
        tally,
        structs,
        "UserDetailsResponse(no permissions)",
        ours::UserDetailsResponse,
        rs::users::UserDetailsResponse {
            user: user(3),
            permissions: None
        }
    );
    payload_case!(
        tally,
        structs,
        "GetUsersResponse",
        ours::GetUsersResponse,
        rs::users::GetUsersResponse {
            users: vec![user(0), user(1)]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetUserRequest",
        ours::GetUserRequest,
        rq::users::GetUserRequest {
            user_id: Id::named("admin").unwrap()
        }
    );
    payload_case!(
        tally,
        structs,
        "DeleteUserRequest",
        ours::DeleteUserRequest,
        rq::users::DeleteUserRequest {
            user_id: Id::numeric(3)
        }
    );
    payload_case!(
        tally,
        structs,
        "CreateUserRequest",
        ours::CreateUserRequest,
        rq::users::CreateUserRequest {
            username: name("bob"),
            password: "secret".into(),
            status: 1,
            permissions: Some(perms.clone()),
            options: options_block()
        }
    );
    payload_case!(
        tally,
        structs,
        "CreateUserRequest(no permissions)",
        ours::CreateUserRequest,
        rq::users::CreateUserRequest {
            username: name("eve"),
            password: "pw".into(),
            status: 2,
            permissions: None,
            options: official::WireOptions::empty()
        }
    );
    payload_case!(
        tally,
        structs,
        "UpdatePermissionsRequest",
        ours::UpdatePermissionsRequest,
        rq::users::UpdatePermissionsRequest {
            user_id: Id::numeric(1),
            permissions: Some(perms.clone())
        }
    );
    payload_case!(
        tally,
        structs,
        "UpdatePermissionsRequest(none)",
        ours::UpdatePermissionsRequest,
        rq::users::UpdatePermissionsRequest {
            user_id: Id::numeric(1),
            permissions: None
        }
    );
    payload_case!(
        tally,
        structs,
        "ChangePasswordRequest",
        ours::ChangePasswordRequest,
        rq::users::ChangePasswordRequest {
            user_id: Id::numeric(1),
            current_password: "old".into(),
            new_password: "new-one".into()
        }
    );
    payload_case!(
        tally,
        structs,
        "LoginUserRequest",
        ours::LoginUserRequest,
        rq::users::LoginUserRequest {
            username: name("u"),
            password: "p".into(),
            version: Some("0.12.0".into()),
            context: Some("ctx".into())
        }
    );
    payload_case!(
        tally,
        structs,
        "IdentityResponse",
        ours::IdentityResponse,
        rs::users::IdentityResponse { user_id: 8 }
    );

    // Personal access tokens.
    payload_case!(
        tally,
        structs,
        "CreatePersonalAccessTokenRequest",
        ours::CreatePersonalAccessTokenRequest,
        rq::personal_access_tokens::CreatePersonalAccessTokenRequest {
            name: name("ci"),
            expiry: 3600
        }
    );
    payload_case!(
        tally,
        structs,
        "DeletePersonalAccessTokenRequest",
        ours::DeletePersonalAccessTokenRequest,
        rq::personal_access_tokens::DeletePersonalAccessTokenRequest { name: name("ci") }
    );
    payload_case!(
        tally,
        structs,
        "LoginWithPersonalAccessTokenRequest",
        ours::LoginWithPersonalAccessTokenRequest,
        rq::personal_access_tokens::LoginWithPersonalAccessTokenRequest { token: name("tok") }
    );
    payload_case!(
        tally,
        structs,
        "RawPersonalAccessTokenResponse",
        ours::RawPersonalAccessTokenResponse,
        rs::personal_access_tokens::RawPersonalAccessTokenResponse { token: name("tok") }
    );
    let pat = |n: &str| rs::personal_access_tokens::PersonalAccessTokenResponse {
        name: name(n),
        expiry_at: 99,
    };
    payload_case!(
        tally,
        structs,
        "PersonalAccessTokenResponse",
        ours::PersonalAccessTokenResponse,
        pat("a")
    );
    payload_case!(
        tally,
        structs,
        "GetPersonalAccessTokensResponse",
        ours::GetPersonalAccessTokensResponse,
        rs::personal_access_tokens::GetPersonalAccessTokensResponse {
            tokens: vec![pat("a"), pat("b")]
        }
    );

    // Clients.
    let cg = |g: u32| rs::clients::ConsumerGroupInfoResponse {
        stream_id: 1,
        topic_id: 2,
        group_id: g,
    };
    payload_case!(
        tally,
        structs,
        "GetClientRequest",
        ours::GetClientRequest,
        rq::system::GetClientRequest { client_id: 12 }
    );
    payload_case!(
        tally,
        structs,
        "ConsumerGroupInfoResponse",
        ours::ConsumerGroupInfoResponse,
        cg(1)
    );
    payload_case!(
        tally,
        structs,
        "ClientResponse",
        ours::ClientResponse,
        client(0)
    );
    payload_case!(
        tally,
        structs,
        "ClientDetailsResponse",
        ours::ClientDetailsResponse,
        rs::clients::ClientDetailsResponse {
            client: client(2),
            consumer_groups: vec![cg(0), cg(1)]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetClientsResponse",
        ours::GetClientsResponse,
        rs::clients::GetClientsResponse {
            clients: vec![client(0), client(0)]
        }
    );

    // System.
    payload_case!(
        tally,
        structs,
        "StatsResponse",
        ours::StatsResponse,
        rs::system::StatsResponse {
            process_id: 1,
            cpu_usage: 0.5,
            total_cpu_usage: 12.25,
            memory_usage: 2,
            total_memory: 3,
            available_memory: 4,
            run_time: 5,
            start_time: 6,
            read_bytes: 7,
            written_bytes: 8,
            messages_size_bytes: 9,
            streams_count: 10,
            topics_count: 11,
            partitions_count: 12,
            segments_count: 13,
            messages_count: 14,
            clients_count: 15,
            consumer_groups_count: 16,
            hostname: "host".into(),
            os_name: "linux".into(),
            os_version: "6".into(),
            kernel_version: "6.1".into(),
            iggy_server_version: "0.12.0".into(),
            iggy_server_semver: Some(12288),
            cache_metrics: vec![rs::system::get_stats::CacheMetricEntry {
                stream_id: 1,
                topic_id: 2,
                partition_id: 3,
                hits: 4,
                misses: 5,
                hit_ratio: 0.75
            }],
            threads_count: 17,
            free_disk_space: 18,
            total_disk_space: 19,
            open_files_count: 20,
            open_files_limit: 21,
        }
    );
    payload_case!(
        tally,
        structs,
        "GetSnapshotRequest",
        ours::GetSnapshotRequest,
        rq::system::GetSnapshotRequest {
            compression: 2,
            snapshot_types: vec![1, 3, 5]
        }
    );
    payload_case!(
        tally,
        structs,
        "GetSnapshotResponse",
        ours::GetSnapshotResponse,
        rs::system::GetSnapshotResponse {
            data: vec![0x50, 0x4b, 3, 4]
        }
    );
    payload_case!(
        tally,
        structs,
        "DescribeOptionsRequest",
        ours::DescribeOptionsRequest,
        rq::system::DescribeOptionsRequest { scope: 2 }
    );
    let mut desc = 2u32.to_le_bytes().to_vec();
    for (key, kind, default, text) in [
        (
            "segment_size",
            12u8,
            &[0u8, 0, 0, 64, 0, 0, 0, 0][..],
            "segment size",
        ),
        ("name", 2, &[][..], ""),
    ] {
        desc.push(key.len() as u8);
        desc.extend_from_slice(key.as_bytes());
        desc.extend_from_slice(&[kind, 1]);
        desc.extend_from_slice(&(default.len() as u32).to_le_bytes());
        desc.extend_from_slice(default);
        desc.extend_from_slice(&(text.len() as u32).to_le_bytes());
        desc.extend_from_slice(text.as_bytes());
    }
    match <rs::system::DescribeOptionsResponse as official::WireDecode>::decode_from(&desc) {
        Ok(d) => payload_case!(
            tally,
            structs,
            "DescribeOptionsResponse",
            ours::DescribeOptionsResponse,
            d
        ),
        Err(e) => tally.check("payload:DescribeOptionsResponse", Err(format!("{e:?}"))),
    }
    for (scope, target) in [
        (
            "topic",
            rq::system::ResourceTarget::Topic {
                stream_id: Id::numeric(1),
                topic_id: Id::named("t").unwrap(),
            },
        ),
        (
            "stream",
            rq::system::ResourceTarget::Stream {
                stream_id: Id::numeric(1),
            },
        ),
        (
            "user",
            rq::system::ResourceTarget::User {
                user_id: Id::named("bob").unwrap(),
            },
        ),
    ] {
        let req = rq::system::UpdateResourceRequest {
            target,
            reset: rq::system::WireResetKeys::try_from(vec![
                name("segment_size"),
                name("message_expiry"),
            ])
            .unwrap(),
            options: options_block(),
        };
        payload_case!(
            tally,
            structs,
            "UpdateResourceRequest",
            ours::UpdateResourceRequest,
            req.clone()
        );
        let b = official::WireEncode::to_bytes(&req).to_vec();
        let result = (|| -> Result<(), String> {
            let outer = <ours::UpdateResourceRequest as iggy_wire::WireDecode>::decode_exact(&b)
                .map_err(|e| format!("{e:?}"))?;
            let p = outer.patch;
            let re = match outer.scope {
                ours::OptionsScope::Topic => iggy_wire::WireEncode::to_wire_bytes(
                    &<ours::TopicResourcePatch as iggy_wire::WireDecode>::decode_exact(p)
                        .map_err(|e| format!("{e:?}"))?,
                ),
                ours::OptionsScope::Stream => iggy_wire::WireEncode::to_wire_bytes(
                    &<ours::StreamResourcePatch as iggy_wire::WireDecode>::decode_exact(p)
                        .map_err(|e| format!("{e:?}"))?,
                ),
                ours::OptionsScope::User => iggy_wire::WireEncode::to_wire_bytes(
                    &<ours::UserResourcePatch as iggy_wire::WireDecode>::decode_exact(p)
                        .map_err(|e| format!("{e:?}"))?,
                ),
            };
            if re == p {
                Ok(())
            } else {
                Err(format!("patch {} != {}", hex(&re), hex(p)))
            }
        })();
        tally.check(&format!("payload:ResourcePatch:{scope}"), result);
    }
    structs.extend([
        "TopicResourcePatch",
        "StreamResourcePatch",
        "UserResourcePatch",
    ]);
    payload_case!(
        tally,
        structs,
        "LoginRegisterResponse",
        ours::LoginRegisterResponse,
        rs::users::LoginRegisterResponse {
            user_id: 0,
            session: 9,
            server_protocol_version: 12288,
            server_version: name("0.12.0")
        }
    );

    // Values built with our types, read by the crate.
    let opts_bytes = official::WireEncode::to_bytes(&options_block()).to_vec();
    let id0 = [0u8, 0, 0, 0];
    ours_case!(
        tally,
        "GetStreamResponse",
        ours::GetStreamResponse {
            stream: ours::StreamResponse {
                id: 0,
                created_at: 1,
                topics_count: 1,
                size_bytes: 2,
                messages_count: 3,
                name: "s",
                options: &opts_bytes,
                derived_options: &[]
            },
            topics: vec![ours::TopicHeader {
                id: 0,
                created_at: 4,
                partitions_count: 1,
                size_bytes: 5,
                messages_count: 6,
                name: "t",
                options: &[],
                derived_options: &[]
            }],
        },
        rs::streams::GetStreamResponse {
            stream: rs::streams::StreamResponse {
                id: 0,
                created_at: 1,
                topics_count: 1,
                size_bytes: 2,
                messages_count: 3,
                name: name("s"),
                options: options_block(),
                derived_options: official::WireOptions::empty()
            },
            topics: vec![rs::streams::TopicHeader {
                id: 0,
                created_at: 4,
                partitions_count: 1,
                size_bytes: 5,
                messages_count: 6,
                name: name("t"),
                options: official::WireOptions::empty(),
                derived_options: official::WireOptions::empty()
            }],
        }
    );
    ours_case!(
        tally,
        "ClusterMetadataResponse",
        ours::ClusterMetadataResponse {
            name: "c",
            nodes: vec![ours::ClusterNodeResponse {
                replica_id: 0,
                name: "n",
                ip: "127.0.0.1",
                tcp_port: 8090,
                quic_port: 8080,
                http_port: 3000,
                websocket_port: 8092,
                role: ours::ClusterNodeRole::Leader,
                status: ours::ClusterNodeStatus::Healthy
            }]
        },
        rs::system::ClusterMetadataResponse {
            name: "c".into(),
            nodes: vec![rs::system::ClusterNodeResponse {
                replica_id: 0,
                name: "n".into(),
                ip: "127.0.0.1".into(),
                tcp_port: 8090,
                quic_port: 8080,
                http_port: 3000,
                websocket_port: 8092,
                role: 0,
                status: 0
            }]
        }
    );
    ours_case!(
        tally,
        "PartitionRouteResponse",
        ours::PartitionRouteResponse {
            incarnation: 7,
            metadata_op: 42,
            view: 1,
            partitions_count: 3,
            primary_replica: 0
        },
        route
    );
    ours_case!(
        tally,
        "StoreConsumerOffsetRequest",
        ours::StoreConsumerOffsetRequest {
            consumer: ours::Consumer {
                kind: 1,
                id: ours::Identifier {
                    kind: 1,
                    value: &[1, 0, 0, 0]
                }
            },
            stream_id: ours::Identifier {
                kind: 1,
                value: &id0
            },
            topic_id: ours::Identifier {
                kind: 2,
                value: b"t"
            },
            partition_id: ours::OptionalPartitionId {
                has: 0,
                partition_id: 0
            },
            offset: 5,
            ack: ours::AckLevel::Quorum,
        },
        rq::consumer_offsets::StoreConsumerOffsetRequest {
            consumer: WireConsumer::consumer(Id::numeric(1)),
            stream_id: Id::numeric(0),
            topic_id: Id::named("t").unwrap(),
            partition_id: None,
            offset: 5,
            ack: official::AckLevel::Quorum
        }
    );
    ours_case!(
        tally,
        "UserDetailsResponse",
        ours::UserDetailsResponse {
            user: ours::UserResponse {
                id: 0,
                created_at: 1,
                status: 1,
                username: "root",
                options: &[],
                derived_options: &[]
            },
            permissions: Some(ours::WirePermissions {
                global: ours::WireGlobalPermissions {
                    manage_servers: true,
                    read_servers: true,
                    manage_users: true,
                    read_users: true,
                    manage_streams: true,
                    read_streams: true,
                    manage_topics: true,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: true
                },
                streams: vec![ours::WireStreamPermissions {
                    stream_id: 1,
                    manage_stream: false,
                    read_stream: true,
                    manage_topics: false,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: false,
                    topics: vec![ours::WireTopicPermissions {
                        topic_id: 2,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: true
                    }]
                }],
            }),
        },
        rs::users::UserDetailsResponse {
            user: rs::users::UserResponse {
                id: 0,
                created_at: 1,
                status: 1,
                username: name("root"),
                options: official::WireOptions::empty(),
                derived_options: official::WireOptions::empty()
            },
            permissions: Some(official::WirePermissions {
                global: official::WireGlobalPermissions {
                    manage_servers: true,
                    read_servers: true,
                    manage_users: true,
                    read_users: true,
                    manage_streams: true,
                    read_streams: true,
                    manage_topics: true,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: true
                },
                streams: vec![official::WireStreamPermissions {
                    stream_id: 1,
                    manage_stream: false,
                    read_stream: true,
                    manage_topics: false,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: false,
                    topics: vec![official::WireTopicPermissions {
                        topic_id: 2,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: true
                    }]
                }],
            }),
        }
    );
    ours_case!(
        tally,
        "SyncConsumerGroupResponse",
        ours::SyncConsumerGroupResponse {
            generation: 3,
            partitions: vec![0, 1]
        },
        rs::consumer_groups::SyncConsumerGroupResponse {
            generation: 3,
            partitions: vec![0, 1]
        }
    );
}

/// One line of generated/vectors/*.jsonl.
struct Vector {
    name: String,
    version: String,
    source: String,
    bytes: Vec<u8>,
    json: String,
}

/// Reads the fixed-shape lines codegen writes:
/// `{"struct":"..","version":"..","source":"..","hex":"..","value":<json>}`.
fn parse_vector(line: &str) -> Option<Vector> {
    let field = |key: &str| -> Option<String> {
        let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
        let end = start + line[start..].find('"')?;
        Some(line[start..end].to_string())
    };
    let value_at = line.find("\"value\":")? + 8;
    Some(Vector {
        name: field("struct")?,
        version: field("version")?,
        source: field("source")?,
        bytes: unhex(&field("hex")?),
        json: line[value_at..line.len() - 1].to_string(),
    })
}

fn packed(v: &str) -> u32 {
    let p: Vec<u32> = v.split('.').map(|x| x.parse().expect("version")).collect();
    p[0] << 20 | p[1] << 10 | p[2]
}

/// A registry decode: the re-encoded bytes, the JSON form, and whether the type is stable.
type RegistryDecoded = (Vec<u8>, String, bool);

/// Our decode -> re-encode (bytes equal), JSON form equal, decode(encode(x)) == x.
fn check_registry(
    which: &str,
    got: Option<Result<RegistryDecoded, String>>,
    v: &Vector,
) -> Result<(), String> {
    let (bytes, json, stable) = got
        .ok_or_else(|| format!("{which}: no struct {}", v.name))?
        .map_err(|e| format!("{which} decode: {e}"))?;
    if bytes != v.bytes {
        return Err(format!(
            "{which} re-encode {} != {}",
            hex(&bytes),
            hex(&v.bytes)
        ));
    }
    if json != v.json {
        return Err(format!("{which} decoded {json} != vector {}", v.json));
    }
    if !stable {
        return Err(format!("{which}: decode(encode(x)) != x"));
    }
    Ok(())
}

fn vectors(tally: &mut Tally) -> (usize, BTreeSet<String>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("generated/vectors")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read vectors");
        for (n, line) in text.lines().enumerate() {
            match parse_vector(line) {
                Some(v) => all.push(v),
                None => tally.check(
                    &format!("vector-line:{}:{}", f.display(), n + 1),
                    Err("unparsable".into()),
                ),
            }
        }
    }
    let mut structs = BTreeSet::new();
    let mut official_checked: BTreeSet<String> = BTreeSet::new();
    let mut stub_checked: BTreeSet<String> = BTreeSet::new();
    for v in &all {
        let case = format!("vector:{}:{}", v.name, v.source);
        // (a) our generated codec.
        let ours = iggy_generated::registry::roundtrip(&v.name, &v.bytes).map(|r| {
            r.map(|r| (r.bytes, r.json, r.stable))
                .map_err(|e| format!("{e:?}"))
        });
        tally.check(&format!("{case}:ours"), check_registry("ours", ours, v));
        // (c) the SDK stub, which holds the client structs only (its own codec, owned types).
        if iggy_sdk_stub::registry::STRUCTS.contains(&v.name.as_str()) {
            let stub = iggy_sdk_stub::registry::roundtrip(&v.name, &v.bytes).map(|r| {
                r.map(|r| (r.bytes, r.json, r.stable))
                    .map_err(|e| format!("{e:?}"))
            });
            tally.check(&format!("{case}:stub"), check_registry("stub", stub, v));
            stub_checked.insert(v.name.clone());
        }
        // (b) the official crate, for the protocol it speaks.
        if v.version == "0.12.0" {
            let official =
                replica_frames::check(v).or_else(|| official_roundtrip(&v.name, &v.bytes));
            if let Some(result) = official {
                official_checked.insert(v.name.clone());
                tally.check(&format!("{case}:official"), result);
            }
        }
        structs.insert(v.name.clone());
    }
    // Every struct of the spec has vectors, and every official counterpart was exercised.
    for s in iggy_generated::registry::STRUCTS {
        let result = if structs.contains(s.name) {
            Ok(())
        } else {
            Err("no vectors".into())
        };
        tally.check(&format!("vectors-cover:{}", s.name), result);
    }
    for name in iggy_sdk_stub::registry::STRUCTS {
        let result = if stub_checked.contains(*name) {
            Ok(())
        } else {
            Err("no vectors".into())
        };
        tally.check(&format!("stub-cover:{name}"), result);
    }
    let handshake = replica_frames::HANDSHAKE_FRAMES
        .iter()
        .map(|(name, _)| name);
    for name in OFFICIAL_COUNTERPARTS
        .iter()
        .chain(replica_frames::FRAME_COUNTERPARTS)
        .chain(handshake)
    {
        let result = if official_checked.contains(*name) {
            Ok(())
        } else {
            Err("official counterpart never exercised".into())
        };
        tally.check(&format!("official-cover:{name}"), result);
    }
    // Per command, the stub against the official crate: a request vector decoded by the stub
    // (its JSON must be the vector's value) and written by the command's `encode_*` gives the
    // bytes the official crate encodes for the same value; a reply vector read by the command's
    // `decode_*_reply` (behind an empty result section when result-framed) gives the vector's
    // value, and writing that value again gives the official crate's bytes. Vectors of structs
    // the official crate does not know (0.11.1 layouts, spec-only shapes) are held against the
    // vector bytes, which generated/ and the spec's interpreter agree on above.
    use iggy_generated::commands::COMMANDS;
    let judge = |v: &Vector| -> (&'static str, Result<Vec<u8>, String>) {
        let official = (v.version == "0.12.0")
            .then(|| official_reencode(&v.name, &v.bytes))
            .flatten();
        match official {
            Some(bytes) => ("official", bytes),
            None => ("vector", Ok(v.bytes.clone())),
        }
    };
    let same = |got: iggy_sdk_stub::registry::Encoded, v: &Vector| -> Result<(), String> {
        if got.json != v.json {
            return Err(format!("stub value {} != vector {}", got.json, v.json));
        }
        let (by, want) = judge(v);
        let want = want?;
        if got.bytes != want {
            return Err(format!(
                "stub bytes {} != {by} bytes {}",
                hex(&got.bytes),
                hex(&want)
            ));
        }
        Ok(())
    };
    for c in COMMANDS {
        for v in all.iter().filter(|v| {
            let p = packed(&v.version);
            c.since <= p && p <= c.until
        }) {
            let p = packed(&v.version);
            if v.name == c.request {
                let result = match iggy_sdk_stub::registry::encode_request(c.code, p, &v.bytes) {
                    Some(Ok(got)) => same(got, v),
                    Some(Err(e)) => Err(format!("stub request {e:?}")),
                    None => Err("stub has no request encoder".into()),
                };
                tally.check(
                    &format!("stub-request:{}:{}:{}", c.code, v.version, v.source),
                    result,
                );
            }
            if v.name == c.response {
                let mut body = if c.result_framed {
                    vec![0u8; 4]
                } else {
                    Vec::new()
                };
                body.extend_from_slice(&v.bytes);
                let result = match iggy_sdk_stub::registry::decode_reply(c.code, p, &body) {
                    Some(Ok(got)) => same(got, v),
                    Some(Err(e)) => Err(format!("stub reply decode {e:?}")),
                    None => Err("stub has no reply decoder".into()),
                };
                tally.check(
                    &format!("stub-reply:{}:{}:{}", c.code, v.version, v.source),
                    result,
                );
            }
        }
    }
    (all.len(), structs)
}

/// Official bytemuck header: the bytes as the official type, written again.
fn bytemuck_reencode<O: bytemuck::CheckedBitPattern + bytemuck::NoUninit>(
    b: &[u8],
) -> Result<Vec<u8>, String> {
    let v: O = bytemuck::checked::try_pod_read_unaligned(b)
        .map_err(|e| format!("official decode {e:?}"))?;
    Ok(bytemuck::bytes_of(&v).to_vec())
}

/// Official decode then official encode.
fn wire_reencode<O: official::WireDecode + official::WireEncode>(
    b: &[u8],
) -> Result<Vec<u8>, String> {
    let v = O::decode_from(b).map_err(|e| format!("official decode {e:?} of {}", hex(b)))?;
    Ok(official::WireEncode::to_bytes(&v).to_vec())
}

/// Runs 0.12.0 vector bytes of `name` through its official type: decoding them and encoding
/// the official value again gives back the same bytes.
fn official_roundtrip(name: &str, b: &[u8]) -> Option<Result<(), String>> {
    Some(official_reencode(name, b)?.and_then(|again| {
        if again == b {
            Ok(())
        } else {
            Err(format!("official re-encode {} != {}", hex(&again), hex(b)))
        }
    }))
}

macro_rules! official_map {
    ($($name:literal => $how:ident($ty:ty)),* $(,)?) => {
        /// Spec structs with an official counterpart type.
        const OFFICIAL_COUNTERPARTS: &[&str] = &[$($name),*];
        /// The bytes of `name` decoded by its official type and encoded again (None: no
        /// official counterpart).
        fn official_reencode(name: &str, b: &[u8]) -> Option<Result<Vec<u8>, String>> {
            #[allow(unused_imports)]
            use official::requests as rq;
            #[allow(unused_imports)]
            use official::responses as rs;
            match name {
                $($name => Some($how::<$ty>(b)),)*
                "BatchHeader" => Some(batch_header(b)),
                "MessageFrameHeader" => Some(message_frame_header(b)),
                _ => None,
            }
        }
    };
}

fn batch_header(b: &[u8]) -> Result<Vec<u8>, String> {
    let h =
        official::batch::BatchHeader::decode(b).map_err(|e| format!("official decode {e:?}"))?;
    let mut again = [0u8; 256];
    h.encode_into(&mut again);
    Ok(again.to_vec())
}

/// The crate has no encoder for a message header: its decoded fields laid out again.
fn message_frame_header(b: &[u8]) -> Result<Vec<u8>, String> {
    let h = official::batch::BatchMessageHeader::decode(b)
        .map_err(|e| format!("official decode {e:?}"))?;
    let mut again = Vec::with_capacity(48);
    again.extend_from_slice(&h.checksum.to_le_bytes());
    again.extend_from_slice(&h.id.to_le_bytes());
    again.extend_from_slice(&h.offset_delta.to_le_bytes());
    again.extend_from_slice(&h.timestamp_delta.to_le_bytes());
    again.extend_from_slice(&h.user_headers_length.to_le_bytes());
    again.extend_from_slice(&h.payload_length.to_le_bytes());
    again.extend_from_slice(&[0u8; 8]);
    Ok(again)
}

official_map! {
    "GenericHeader" => bytemuck_reencode(official::GenericHeader),
    "RequestHeader" => bytemuck_reencode(official::RequestHeader),
    "ReplyHeader" => bytemuck_reencode(official::ReplyHeader),
    "EvictionHeader" => bytemuck_reencode(official::EvictionHeader),
    "PartitionContext" => wire_reencode(official::PartitionContext),
    "Identifier" => wire_reencode(official::WireIdentifier),
    "Partitioning" => wire_reencode(official::WirePartitioning),
    "PollingStrategy" => wire_reencode(official::WirePollingStrategy),
    "Consumer" => wire_reencode(official::WireConsumer),
    "ClientVersionInfo" => wire_reencode(official::ClientVersionInfo),
    "SessionIdentity" => wire_reencode(rq::system::SessionIdentity),
    "LoginRegisterRequest" => wire_reencode(rq::users::LoginRegisterRequest),
    "LoginRegisterWithPatRequest" => wire_reencode(rq::users::LoginRegisterWithPatRequest),
    "LoginRegisterResponse" => wire_reencode(rs::users::LoginRegisterResponse),
    "BindSessionRequest" => wire_reencode(rq::system::BindSessionRequest),
    "StreamIdRequest" => wire_reencode(rq::streams::GetStreamRequest),
    "CreateStreamRequest" => wire_reencode(rq::streams::CreateStreamRequest),
    "TopicIdRequest" => wire_reencode(rq::topics::GetTopicRequest),
    "CreateTopicRequest" => wire_reencode(rq::topics::CreateTopicRequest),
    "GetPartitionRouteRequest" => wire_reencode(rq::messages::GetPartitionRouteRequest),
    "ConsumerGroupIdRequest" => wire_reencode(rq::consumer_groups::JoinConsumerGroupRequest),
    "PollMessagesRequest" => wire_reencode(rq::messages::PollMessagesRequest),
    "PollPrefix" => wire_reencode(rs::messages::PollMessagesResponseHeader),
    "StreamResponse" => wire_reencode(rs::streams::StreamResponse),
    "TopicHeader" => wire_reencode(rs::streams::TopicHeader),
    "GetStreamResponse" => wire_reencode(rs::streams::GetStreamResponse),
    "GetStreamsResponse" => wire_reencode(rs::streams::GetStreamsResponse),
    "PartitionResponse" => wire_reencode(rs::topics::PartitionResponse),
    "GetTopicResponse" => wire_reencode(rs::topics::GetTopicResponse),
    "GetTopicsResponse" => wire_reencode(rs::topics::GetTopicsResponse),
    "ClusterNodeResponse" => wire_reencode(rs::system::ClusterNodeResponse),
    "ClusterMetadataResponse" => wire_reencode(rs::system::ClusterMetadataResponse),
    "PartitionRouteResponse" => wire_reencode(rs::messages::PartitionRouteResponse),
    "SendMessagesConfirmationResponse" => wire_reencode(rs::messages::SendMessagesConfirmationResponse),
    "SendMessagesResponse" => wire_reencode(rs::messages::SendMessagesResponse),
    "GetConsumerOffsetRequest" => wire_reencode(rq::consumer_offsets::GetConsumerOffsetRequest),
    "StoreConsumerOffsetRequest" => wire_reencode(rq::consumer_offsets::StoreConsumerOffsetRequest),
    "DeleteConsumerOffsetRequest" => wire_reencode(rq::consumer_offsets::DeleteConsumerOffsetRequest),
    "ConsumerOffsetResponse" => wire_reencode(rs::consumer_offsets::ConsumerOffsetResponse),
    "CreatePartitionsRequest" => wire_reencode(rq::partitions::CreatePartitionsRequest),
    "DeletePartitionsRequest" => wire_reencode(rq::partitions::DeletePartitionsRequest),
    "DeleteSegmentsRequest" => wire_reencode(rq::segments::DeleteSegmentsRequest),
    "CreateConsumerGroupRequest" => wire_reencode(rq::consumer_groups::CreateConsumerGroupRequest),
    "ConsumerGroupResponse" => wire_reencode(rs::consumer_groups::ConsumerGroupResponse),
    "ConsumerGroupMemberResponse" => wire_reencode(rs::consumer_groups::ConsumerGroupMemberResponse),
    "ConsumerGroupDetailsResponse" => wire_reencode(rs::consumer_groups::ConsumerGroupDetailsResponse),
    "GetConsumerGroupsResponse" => wire_reencode(rs::consumer_groups::GetConsumerGroupsResponse),
    "SyncConsumerGroupResponse" => wire_reencode(rs::consumer_groups::SyncConsumerGroupResponse),
    "WirePermissions" => wire_reencode(official::WirePermissions),
    "UserResponse" => wire_reencode(rs::users::UserResponse),
    "UserDetailsResponse" => wire_reencode(rs::users::UserDetailsResponse),
    "GetUsersResponse" => wire_reencode(rs::users::GetUsersResponse),
    "GetUserRequest" => wire_reencode(rq::users::GetUserRequest),
    "DeleteUserRequest" => wire_reencode(rq::users::DeleteUserRequest),
    "CreateUserRequest" => wire_reencode(rq::users::CreateUserRequest),
    "UpdatePermissionsRequest" => wire_reencode(rq::users::UpdatePermissionsRequest),
    "ChangePasswordRequest" => wire_reencode(rq::users::ChangePasswordRequest),
    "LoginUserRequest" => wire_reencode(rq::users::LoginUserRequest),
    "IdentityResponse" => wire_reencode(rs::users::IdentityResponse),
    "CreatePersonalAccessTokenRequest" => wire_reencode(rq::personal_access_tokens::CreatePersonalAccessTokenRequest),
    "DeletePersonalAccessTokenRequest" => wire_reencode(rq::personal_access_tokens::DeletePersonalAccessTokenRequest),
    "LoginWithPersonalAccessTokenRequest" => wire_reencode(rq::personal_access_tokens::LoginWithPersonalAccessTokenRequest),
    "RawPersonalAccessTokenResponse" => wire_reencode(rs::personal_access_tokens::RawPersonalAccessTokenResponse),
    "PersonalAccessTokenResponse" => wire_reencode(rs::personal_access_tokens::PersonalAccessTokenResponse),
    "GetPersonalAccessTokensResponse" => wire_reencode(rs::personal_access_tokens::GetPersonalAccessTokensResponse),
    "GetClientRequest" => wire_reencode(rq::system::GetClientRequest),
    "ConsumerGroupInfoResponse" => wire_reencode(rs::clients::ConsumerGroupInfoResponse),
    "ClientResponse" => wire_reencode(rs::clients::ClientResponse),
    "ClientDetailsResponse" => wire_reencode(rs::clients::ClientDetailsResponse),
    "GetClientsResponse" => wire_reencode(rs::clients::GetClientsResponse),
    "StatsResponse" => wire_reencode(rs::system::StatsResponse),
    "GetSnapshotRequest" => wire_reencode(rq::system::GetSnapshotRequest),
    "GetSnapshotResponse" => wire_reencode(rs::system::GetSnapshotResponse),
    "DescribeOptionsRequest" => wire_reencode(rq::system::DescribeOptionsRequest),
    "OptionDescriptor" => wire_reencode(rs::system::OptionDescriptor),
    "DescribeOptionsResponse" => wire_reencode(rs::system::DescribeOptionsResponse),
    "UpdateResourceRequest" => wire_reencode(rq::system::UpdateResourceRequest),
}
