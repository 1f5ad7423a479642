//! Option blocks of create and update requests: the spec's `OptionEntry` records back to back
//! to the end of the block, string keys only.

use iggy_generated::errors::ErrorCode;
use iggy_generated::payloads::OptionEntry;
use iggy_wire::{WireDecode, WireEncode};

const STRING_KIND: u8 = 2;
const ENTRIES_MAX: usize = 1024;

/// The `(key, value)` entries of an options block, in order; duplicates are refused.
pub fn entries(block: &[u8]) -> Result<Vec<(&str, &[u8])>, ErrorCode> {
    Ok(typed_entries(block)?
        .into_iter()
        .map(|(key, _, value)| (key, value))
        .collect())
}

/// One entry of an options block: key, value kind, value.
pub type TypedEntry<'a> = (&'a str, u8, &'a [u8]);

/// The `(key, value kind, value)` entries of an options block, in order.
pub fn typed_entries(mut block: &[u8]) -> Result<Vec<TypedEntry<'_>>, ErrorCode> {
    let mut out: Vec<TypedEntry<'_>> = Vec::new();
    while !block.is_empty() {
        let OptionEntry {
            key_kind,
            key,
            value_kind,
            value,
        } = OptionEntry::decode_from(&mut block).map_err(|_| ErrorCode::InvalidFormat)?;
        if key_kind != STRING_KIND {
            return Err(ErrorCode::UnsupportedOptionKey);
        }
        let key = std::str::from_utf8(key).map_err(|_| ErrorCode::UnsupportedOptionKey)?;
        if out.iter().any(|(k, _, _)| *k == key) || out.len() == ENTRIES_MAX {
            return Err(ErrorCode::InvalidOptionValue);
        }
        out.push((key, value_kind, value));
    }
    Ok(out)
}

/// Merges `update` into the block `current`: entries of `update` replace those with the same
/// key, keys in `reset` are removed. Returns the new block.
pub fn merge(current: &[u8], update: &[u8], reset: &[&str]) -> Result<Vec<u8>, ErrorCode> {
    let updates = typed_entries(update)?;
    let mut merged: Vec<(&str, u8, &[u8])> = typed_entries(current)?
        .into_iter()
        .filter(|(key, _, _)| !reset.contains(key) && !updates.iter().any(|(k, _, _)| k == key))
        .collect();
    merged.extend(updates);
    Ok(encode(&merged))
}

/// Encodes entries as an options block.
pub fn encode(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, kind, value) in entries {
        let entry = OptionEntry {
            key_kind: STRING_KIND,
            key: key.as_bytes(),
            value_kind: *kind,
            value,
        };
        entry.encode_to(&mut out);
    }
    out
}

/// An unsigned integer value of 1, 2, 4 or 8 little-endian bytes.
pub fn as_u64(value: &[u8]) -> Result<u64, ErrorCode> {
    match value.len() {
        1 | 2 | 4 | 8 => {
            let mut bytes = [0u8; 8];
            bytes[..value.len()].copy_from_slice(value);
            Ok(u64::from_le_bytes(bytes))
        }
        _ => Err(ErrorCode::InvalidOptionValue),
    }
}

pub fn as_str(value: &[u8]) -> Result<&str, ErrorCode> {
    std::str::from_utf8(value).map_err(|_| ErrorCode::InvalidOptionValue)
}

/// A `compression_algorithm` value (`none` or `gzip`) as the code topics carry on the wire:
/// 1 none, 2 gzip, as in the official SDK's `CompressionAlgorithm`.
pub fn compression_algorithm(value: &[u8]) -> Result<u8, ErrorCode> {
    match as_str(value)? {
        "none" => Ok(1),
        "gzip" => Ok(2),
        _ => Err(ErrorCode::InvalidOptionValue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, kind: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![STRING_KIND];
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.push(kind);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn reads_entries_and_refuses_duplicates_and_truncation() {
        let mut block = entry("partition_resize_policy", 2, b"fixed");
        block.extend(entry("message_expiry", 12, &7u64.to_le_bytes()));
        let parsed = entries(&block).unwrap();
        assert_eq!(parsed[0], ("partition_resize_policy", &b"fixed"[..]));
        assert_eq!(as_u64(parsed[1].1), Ok(7));
        let mut twice = entry("a", 2, b"x");
        twice.extend(entry("a", 2, b"y"));
        assert!(entries(&twice).is_err());
        assert!(entries(&block[..block.len() - 1]).is_err());
    }

    #[test]
    fn compression_algorithm_is_read_from_its_name_not_from_integer_bytes() {
        assert_eq!(compression_algorithm(b"none"), Ok(1));
        assert_eq!(compression_algorithm(b"gzip"), Ok(2));
        // Four bytes once read as a u32 (and then truncated) instead of refused.
        for bad in [&b"zstd"[..], b"GZIP", b"", &2u32.to_le_bytes(), &[0xff]] {
            assert_eq!(
                compression_algorithm(bad),
                Err(ErrorCode::InvalidOptionValue),
                "{bad:?}"
            );
        }
    }
}

/// Value kinds of option entries (the user-header kinds), spec/options.spec.
pub mod kind {
    pub use iggy_generated::options::{
        OPTION_KIND_BOOL as BOOL, OPTION_KIND_STRING as STRING, OPTION_KIND_UINT32 as UINT32,
        OPTION_KIND_UINT64 as UINT64,
    };
}

/// Descriptor flags reported by options.describe (13), spec/options.spec.
pub mod flag {
    pub use iggy_generated::options::{
        OPTION_FLAG_READ_ONLY as READ_ONLY, OPTION_FLAG_RESETTABLE as RESETTABLE,
        OPTION_FLAG_UPDATABLE as UPDATABLE,
    };
}

/// The option catalog is data: declared in spec/options.spec, generated.
pub use iggy_generated::options::{OptionSpec, STREAM_OPTIONS, TOPIC_OPTIONS, USER_OPTIONS};

/// Segment sizes a topic may ask for: 1 MiB..=1 GiB, in 512-byte steps.
const SEGMENT_SIZE_MIN: u64 = 1 << 20;
const SEGMENT_SIZE_MAX: u64 = 1 << 30;

/// Checks an options block against a scope's catalog: every key known and writable now
/// (`create`, or updatable), every value valid, every reset key resettable. Nothing is applied
/// when any entry fails.
pub fn validate(
    catalog: &[OptionSpec],
    block: &[u8],
    reset: &[&str],
    create: bool,
) -> Result<(), ErrorCode> {
    let spec_of = |key: &str| {
        catalog
            .iter()
            .find(|spec| spec.key == key)
            .ok_or(ErrorCode::UnsupportedOptionKey)
    };
    for (key, _kind, value) in typed_entries(block)? {
        let spec = spec_of(key)?;
        if spec.flags & flag::READ_ONLY != 0 {
            return Err(ErrorCode::ReadOnlyOption);
        }
        if !create && spec.flags & flag::UPDATABLE == 0 {
            return Err(ErrorCode::OptionNotUpdatable);
        }
        check_value(key, value)?;
    }
    for key in reset {
        let spec = spec_of(key)?;
        if spec.flags & flag::UPDATABLE == 0 {
            return Err(ErrorCode::OptionNotUpdatable);
        }
        if spec.flags & flag::RESETTABLE == 0 {
            return Err(ErrorCode::OptionNotResettable);
        }
    }
    Ok(())
}

fn check_value(key: &str, value: &[u8]) -> Result<(), ErrorCode> {
    let one_of = |allowed: &[&str]| {
        let value = as_str(value)?;
        if allowed.contains(&value) {
            Ok(())
        } else {
            Err(ErrorCode::InvalidOptionValue)
        }
    };
    match key {
        "name" | "username" => {
            let name = as_str(value)?;
            if name.is_empty() || name.len() > 255 {
                Err(ErrorCode::InvalidOptionValue)
            } else {
                Ok(())
            }
        }
        "segment_size" => {
            let size = as_u64(value)?;
            let valid = (SEGMENT_SIZE_MIN..=SEGMENT_SIZE_MAX).contains(&size) && size % 512 == 0;
            if valid {
                Ok(())
            } else {
                Err(ErrorCode::InvalidOptionValue)
            }
        }
        "message_expiry" | "max_topic_size" | "messages_required_to_save" => {
            as_u64(value).map(|_| ())
        }
        "durability" | "consumer_offset_durability" => one_of(&["replicated", "persisted"]),
        "partition_resize_policy" => one_of(&["mutable", "fixed"]),
        "compression_algorithm" => compression_algorithm(value).map(|_| ()),
        "status" => one_of(&["active", "inactive"]),
        "preallocate_segments" => match value {
            [0] | [1] => Ok(()),
            _ => Err(ErrorCode::InvalidOptionValue),
        },
        _ => Ok(()),
    }
}

/// A size or expiry option: `u64::MAX` (and 0) mean unlimited.
pub fn limit(value: u64) -> Option<u64> {
    (value != 0 && value != u64::MAX).then_some(value)
}

/// The catalog as it was written by hand before spec/options.spec declared it: the generated
/// one must describe exactly the same options, in the same order.
#[cfg(test)]
mod catalog_before_spec {
    use super::OptionSpec;

    /// Value kinds of option entries (the user-header kinds).
    mod kind {
        pub const STRING: u8 = 2;
        pub const BOOL: u8 = 3;
        pub const UINT32: u8 = 11;
        pub const UINT64: u8 = 12;
    }

    /// Descriptor flags reported by options.describe (13).
    mod flag {
        pub const UPDATABLE: u8 = 1;
        pub const RESETTABLE: u8 = 1 << 1;
        pub const READ_ONLY: u8 = 1 << 3;
    }

    const NEVER: &[u8] = &u64::MAX.to_le_bytes();
    const ONE_GIB: &[u8] = &(1u64 << 30).to_le_bytes();
    const SAVE_EVERY: &[u8] = &1024u32.to_le_bytes();

    pub(super) const TOPIC_OPTIONS: &[OptionSpec] = &[
        OptionSpec {
            key: "name",
            kind: kind::STRING,
            flags: flag::UPDATABLE,
            default: b"",
            description: "Topic name, unique in its stream",
        },
        OptionSpec {
            key: "compression_algorithm",
            kind: kind::STRING,
            flags: 0,
            default: b"none",
            description: "Compression of stored messages: none or gzip",
        },
        OptionSpec {
            key: "message_expiry",
            kind: kind::UINT64,
            flags: flag::UPDATABLE | flag::RESETTABLE,
            default: NEVER,
            description: "Messages older than this many microseconds are deleted with their segment; u64::MAX never expires",
        },
        OptionSpec {
            key: "max_topic_size",
            kind: kind::UINT64,
            flags: flag::UPDATABLE | flag::RESETTABLE,
            default: NEVER,
            description: "Oldest closed segments are deleted while the topic is larger, in bytes; u64::MAX is unlimited",
        },
        OptionSpec {
            key: "segment_size",
            kind: kind::UINT64,
            flags: 0,
            default: ONE_GIB,
            description: "Segment size in bytes",
        },
        OptionSpec {
            key: "durability",
            kind: kind::STRING,
            flags: 0,
            default: b"replicated",
            description: "Message acknowledgement: replicated (journaled) or persisted (fsynced)",
        },
        OptionSpec {
            key: "consumer_offset_durability",
            kind: kind::STRING,
            flags: 0,
            default: b"replicated",
            description: "Offset acknowledgement: replicated (journaled) or persisted (fsynced)",
        },
        OptionSpec {
            key: "partition_resize_policy",
            kind: kind::STRING,
            flags: 0,
            default: b"mutable",
            description: "mutable allows adding and deleting partitions; fixed refuses both",
        },
        OptionSpec {
            key: "messages_required_to_save",
            kind: kind::UINT32,
            flags: 0,
            default: SAVE_EVERY,
            description: "Accepted for compatibility; every message is journaled on arrival",
        },
        OptionSpec {
            key: "preallocate_segments",
            kind: kind::BOOL,
            flags: 0,
            default: &[0],
            description: "Accepted for compatibility; segments grow as written",
        },
    ];

    pub(super) const STREAM_OPTIONS: &[OptionSpec] = &[
        OptionSpec {
            key: "name",
            kind: kind::STRING,
            flags: flag::UPDATABLE,
            default: b"",
            description: "Stream name, unique on the server",
        },
        OptionSpec {
            key: "encryption_key_source",
            kind: kind::STRING,
            flags: flag::READ_ONLY,
            default: b"",
            description: "Maintained by the server",
        },
        OptionSpec {
            key: "encryption_key_fingerprint",
            kind: kind::STRING,
            flags: flag::READ_ONLY,
            default: b"",
            description: "Maintained by the server",
        },
        OptionSpec {
            key: "encryption_kek_fingerprint",
            kind: kind::STRING,
            flags: flag::READ_ONLY,
            default: b"",
            description: "Maintained by the server",
        },
    ];

    pub(super) const USER_OPTIONS: &[OptionSpec] = &[
        OptionSpec {
            key: "username",
            kind: kind::STRING,
            flags: flag::UPDATABLE,
            default: b"",
            description: "Login name, unique on the server",
        },
        OptionSpec {
            key: "status",
            kind: kind::STRING,
            flags: flag::UPDATABLE,
            default: b"active",
            description: "active or inactive; inactive users cannot log in",
        },
    ];

    #[test]
    fn the_generated_catalog_is_the_hand_written_one() {
        assert_eq!(super::TOPIC_OPTIONS, TOPIC_OPTIONS);
        assert_eq!(super::STREAM_OPTIONS, STREAM_OPTIONS);
        assert_eq!(super::USER_OPTIONS, USER_OPTIONS);
    }
}
