//! Replica frame headers of spec/frames.spec against the official consensus headers: each
//! vector is read by the official type and every field is compared by name with our decoded
//! value, so a field at the wrong offset, of the wrong width or under another name fails even
//! when both codecs round-trip the bytes. Examples must also pass the official `validate()` and
//! carry a correct seal or prepare identity, and our sealing masks must agree with the crate.

use super::Vector;
use iggy_binary_protocol::consensus::{self as official, Command, ConsensusHeader};
use iggy_generated::frames::{FRAME_SEALED_COMMANDS, IDENTITY_CHECKSUM_COMMANDS};
use std::collections::{BTreeMap, BTreeSet};

macro_rules! frame_map {
    ($($name:literal => $ty:ty),* $(,)?) => {
        /// Frame headers of the spec with an official counterpart type.
        pub const FRAME_COUNTERPARTS: &[&str] = &[$($name),*];
        fn official_frame(v: &Vector) -> Option<Result<(), String>> {
            match v.name.as_str() {
                $($name => Some(frame_case::<$ty>(v)),)*
                _ => None,
            }
        }
    };
}

frame_map! {
    "PrepareHeader" => official::PrepareHeader,
    "RepairPrepareHeader" => official::RepairPrepareHeader,
    "PrepareOkHeader" => official::PrepareOkHeader,
    "CommitHeader" => official::CommitHeader,
    "StartViewChangeHeader" => official::StartViewChangeHeader,
    "DoViewChangeHeader" => official::DoViewChangeHeader,
    "StartViewHeader" => official::StartViewHeader,
    "RequestStartViewHeader" => official::RequestStartViewHeader,
    "RequestPreparesHeader" => official::RequestPreparesHeader,
    "RepairRangeReplyHeader" => official::RepairRangeReplyHeader,
    "RequestStateTransferHeader" => official::RequestStateTransferHeader,
    "StateTransferTargetHeader" => official::StateTransferTargetHeader,
    "RequestStateChunkHeader" => official::RequestStateChunkHeader,
    "StateChunkHeader" => official::StateChunkHeader,
    "ForwardRegisterHeader" => official::ForwardRegisterHeader,
    "ForwardRegisterResultHeader" => official::ForwardRegisterResultHeader,
    "ForwardLogoutHeader" => official::ForwardLogoutHeader,
    "ForwardLogoutResultHeader" => official::ForwardLogoutResultHeader,
    "ConsumerSessionHeartbeatHeader" => official::ConsumerSessionHeartbeatHeader,
    "ForwardCompletionHeader" => official::ForwardCompletionHeader,
    "PrimaryRebalanceHeader" => official::PrimaryRebalanceHeader,
    "SegmentDeleteHeader" => official::SegmentDeleteHeader,
}

/// The handshake frames are ours; the official crate reads them only as a GenericHeader.
pub const HANDSHAKE_FRAMES: &[(&str, Command)] = &[
    ("ReplicaHelloHeader", Command::ReplicaHello),
    ("ReplicaChallengeHeader", Command::ReplicaChallenge),
    ("ReplicaFinishHeader", Command::ReplicaFinish),
];

/// Checks one vector of a replica frame, or `None` when `v` is not one.
pub fn check(v: &Vector) -> Option<Result<(), String>> {
    official_frame(v).or_else(|| {
        let (_, command) = HANDSHAKE_FRAMES.iter().find(|(name, _)| *name == v.name)?;
        Some(handshake_case(v, *command))
    })
}

/// The official typed view of `bytes`, which must re-encode to the same bytes.
fn official_read<O: ConsensusHeader>(bytes: &[u8]) -> Result<O, String> {
    let header: O = bytemuck::checked::try_pod_read_unaligned(bytes)
        .map_err(|e| format!("official decode {e:?}"))?;
    if bytemuck::bytes_of(&header) == bytes {
        Ok(header)
    } else {
        Err("official re-encode differs".into())
    }
}

fn frame_case<O: ConsensusHeader + std::fmt::Debug>(v: &Vector) -> Result<(), String> {
    let header: O = official_read(&v.bytes)?;
    if !O::accepts(header.command()) {
        return Err(format!(
            "official type refuses command {:?}",
            header.command()
        ));
    }
    let theirs = official_fields(&format!("{header:?}"));
    let ours = our_fields(&v.json);
    for (field, value) in &theirs {
        match ours.get(field) {
            Some(mine) if mine == value => {}
            Some(mine) => return Err(format!("{field}: ours {mine}, official {value}")),
            // Our zero[N] regions are not stored, so they are absent from our form.
            None if is_zero(value) => {}
            None => return Err(format!("{field}: missing from ours, official {value}")),
        }
    }
    if let Some(extra) = ours.keys().find(|k| !theirs.contains_key(*k)) {
        return Err(format!("{extra}: not an official field"));
    }
    let command = header.command() as u8;
    let sealed = FRAME_SEALED_COMMANDS >> command & 1 == 1;
    let identity = IDENTITY_CHECKSUM_COMMANDS >> command & 1 == 1;
    if (sealed, identity) != (O::FRAME_SEALED, O::IDENTITY_CHECKSUMMED) {
        return Err(format!(
            "spec masks say sealed={sealed} identity={identity} for command {command}, official {} {}",
            O::FRAME_SEALED,
            O::IDENTITY_CHECKSUMMED
        ));
    }
    if v.source == "example" {
        header
            .validate()
            .map_err(|e| format!("official validate: {e:?}"))?;
        header
            .verify_frame()
            .map_err(|e| format!("official seal: {e:?}"))?;
        if identity {
            // A RepairPrepare carries the identity of the Prepare it was stored as.
            let mut prepare: [u8; 256] = v.bytes[..].try_into().map_err(|_| "not 256 bytes")?;
            prepare[60] = Command::Prepare as u8;
            if official::prepare_identity_checksum_bytes(&prepare) != header.checksum() {
                return Err("checksum is not the prepare identity".into());
            }
        }
    }
    Ok(())
}

/// Our handshake frames: the generic prefix must be the official GenericHeader's, field by
/// field, and examples must be sealed as the spec's mask says.
fn handshake_case(v: &Vector, command: Command) -> Result<(), String> {
    let header: official::GenericHeader = official_read(&v.bytes)?;
    if header.command != command {
        return Err(format!(
            "command {:?}, expected {command:?}",
            header.command
        ));
    }
    let ours = our_fields(&v.json);
    for (field, value) in official_fields(&format!("{header:?}")) {
        // The command half is ours, and so are bytes 62..128 of a handshake frame (its
        // ReplicaRunDeclaration): the official type reads both as reserved bytes.
        if field == "reserved_command" || field == "reserved_frame" {
            continue;
        }
        match ours.get(&field) {
            Some(mine) if *mine == value => {}
            other => return Err(format!("{field}: ours {other:?}, official {value}")),
        }
    }
    if FRAME_SEALED_COMMANDS >> command as u8 & 1 != 1 {
        return Err("handshake frame not in FRAME_SEALED_COMMANDS".into());
    }
    let bytes: &[u8; 256] = v.bytes[..].try_into().map_err(|_| "not 256 bytes")?;
    if v.source == "example" && official::frame_checksum_bytes(bytes) != header.checksum {
        return Err("example is not sealed".into());
    }
    Ok(())
}

/// `name: value` pairs of a derived `Debug` form (`T { a: 1, b: [0, 1], c: Variant }`, also
/// inside a newtype), byte arrays as hex.
fn official_fields(debug: &str) -> BTreeMap<String, String> {
    let inner = match (debug.find('{'), debug.rfind('}')) {
        (Some(open), Some(close)) => &debug[open + 1..close],
        _ => return BTreeMap::new(),
    };
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter_map(|item| item.split_once(':'))
        .map(|(name, value)| {
            let value = value.trim();
            let value = match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                Some(list) => list
                    .split(',')
                    .map(|b| {
                        b.trim()
                            .parse::<u8>()
                            .map_or(format!("?{b}"), |b| format!("{b:02x}"))
                    })
                    .collect(),
                None => value.to_string(),
            };
            (name.trim().to_string(), value)
        })
        .collect()
}

/// `name: value` pairs of our canonical JSON form, nested fields as `outer.inner`; a struct
/// that only wraps another (RepairPrepareHeader, like the official newtype) reads as the inner
/// one. Header values never hold braces or commas: numbers, hex, variant names, booleans (0/1).
fn our_fields(json: &str) -> BTreeMap<String, String> {
    fn object(rest: &mut &str, path: &str, out: &mut BTreeMap<String, String>) {
        *rest = rest.strip_prefix('{').unwrap_or(rest);
        while let Some(after_quote) = rest.strip_prefix('"') {
            let Some((key, after_key)) = after_quote.split_once("\":") else {
                return;
            };
            let name = format!("{path}{key}");
            *rest = after_key;
            if rest.starts_with('{') {
                object(rest, &format!("{name}."), out);
            } else {
                let end = rest.find([',', '}']).unwrap_or(rest.len());
                let value = match rest[..end].trim_matches('"') {
                    "true" => "1",
                    "false" => "0",
                    other => other,
                };
                out.insert(name, value.to_string());
                *rest = &rest[end..];
            }
            *rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        *rest = rest.strip_prefix('}').unwrap_or(rest);
    }
    let mut fields = BTreeMap::new();
    object(&mut { json }, "", &mut fields);
    let outer: BTreeSet<String> = fields
        .keys()
        .map(|k| k.split('.').next().unwrap_or(k).to_string())
        .collect();
    let wraps_one = outer.len() == 1 && fields.keys().all(|k| k.contains('.'));
    match outer.into_iter().next() {
        Some(wrapper) if wraps_one => {
            let skip = wrapper.len() + 1;
            fields
                .into_iter()
                .map(|(k, v)| (k[skip..].to_string(), v))
                .collect()
        }
        _ => fields,
    }
}

fn is_zero(value: &str) -> bool {
    !value.is_empty() && value.chars().all(|c| c == '0')
}
