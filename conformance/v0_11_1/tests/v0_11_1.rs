//! The 0.11.1 layouts of the spec against iggy_binary_protocol =0.11.1-edge.1 (the crate that
//! speaks protocol 0.11.1): every 0.11.1 vector of generated/vectors/*.jsonl whose struct has an
//! edge.1 counterpart decodes with the crate and re-encodes to the same bytes, and every
//! 0.11.1-only command row of spec/commands.spec is in edge.1's command table with that name.
//! Run: `cargo test` in this directory (it is not a workspace member).
use iggy_binary_protocol as v0111;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

fn field(line: &str, key: &str) -> String {
    let start = line.find(&format!("\"{key}\":\"")).unwrap() + key.len() + 4;
    line[start..start + line[start..].find('"').unwrap()].to_string()
}

fn roundtrip<O: v0111::WireDecode + v0111::WireEncode>(b: &[u8]) -> Result<(), String> {
    let v = O::decode_from(b).map_err(|e| format!("edge.1 decode {e:?}"))?;
    let again = v0111::WireEncode::to_bytes(&v).to_vec();
    if again == b { Ok(()) } else { Err("edge.1 re-encode differs".into()) }
}

fn check(name: &str, b: &[u8]) -> Option<Result<(), String>> {
    use v0111::requests as rq;
    use v0111::responses as rs;
    Some(match name {
        "StreamResponseV0111" => roundtrip::<rs::streams::StreamResponse>(b),
        "TopicHeaderV0111" => roundtrip::<rs::streams::TopicHeader>(b),
        "GetStreamResponseV0111" => roundtrip::<rs::streams::GetStreamResponse>(b),
        "GetStreamsResponseV0111" => roundtrip::<rs::streams::GetStreamsResponse>(b),
        "PartitionResponseV0111" => roundtrip::<rs::topics::PartitionResponse>(b),
        "GetTopicResponseV0111" => roundtrip::<rs::topics::GetTopicResponse>(b),
        "GetTopicsResponseV0111" => roundtrip::<rs::topics::GetTopicsResponse>(b),
        "UserResponseV0111" => roundtrip::<rs::users::UserResponse>(b),
        "UserDetailsResponseV0111" => roundtrip::<rs::users::UserDetailsResponse>(b),
        "GetUsersResponseV0111" => roundtrip::<rs::users::GetUsersResponse>(b),
        "OptionDescriptorV0111" => roundtrip::<rs::system::OptionDescriptor>(b),
        "DescribeOptionsResponseV0111" => roundtrip::<rs::system::DescribeOptionsResponse>(b),
        "UpdateStreamRequest" => roundtrip::<rq::streams::UpdateStreamRequest>(b),
        "UpdateTopicRequest" => roundtrip::<rq::topics::UpdateTopicRequest>(b),
        "UpdateUserRequest" => roundtrip::<rq::users::UpdateUserRequest>(b),
        "ClusterNodeResponseV0111" => roundtrip::<rs::system::ClusterNodeResponse>(b),
        "ClusterMetadataResponseV0111" => roundtrip::<rs::system::ClusterMetadataResponse>(b),
        "PollRoutingResponse" => roundtrip::<rs::messages::PollRoutingResponse>(b),
        _ => return None,
    })
}

#[test]
fn layouts_of_0_11_1_match_edge_1() {
    let dir = root().join("generated/vectors");
    let (mut checked, mut failed) = (0, Vec::new());
    let mut covered = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines().filter(|l| field(l, "version") == "0.11.1") {
            let name = field(line, "struct");
            if let Some(result) = check(&name, &unhex(&field(line, "hex"))) {
                checked += 1;
                covered.insert(name.clone());
                if let Err(e) = result {
                    failed.push(format!("{name} {}: {e}", field(line, "source")));
                }
            }
        }
    }
    println!("v0_11_1: {checked} vectors of {} structs against edge.1, {} mismatches", covered.len(), failed.len());
    assert_eq!(covered.len(), 18, "every mapped 0.11.1 struct has vectors: {covered:?}");
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn commands_of_0_11_1_are_in_edge_1() {
    assert_eq!(v0111::IGGY_PROTOCOL_VERSION, 11 << 10 | 1, "edge.1 speaks 0.11.1");
    let spec = std::fs::read_to_string(root().join("spec/commands.spec")).unwrap();
    let mut rows = 0;
    for line in spec.lines().filter(|l| l.starts_with("command ") && l.contains("until=0.11.1")) {
        let t: Vec<&str> = line.split_whitespace().collect();
        let code: u32 = t[1].parse().unwrap();
        let meta = v0111::COMMAND_TABLE.iter().find(|m| m.code == code);
        assert_eq!(meta.map(|m| m.name), Some(t[2]), "0.11.1 command {code}");
        rows += 1;
    }
    assert!(rows >= 6, "0.11.1-only rows found: {rows}");
}
