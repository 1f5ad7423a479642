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

/// An unsigned option value as clients send it: a numeric kind's integer (`as_u64`), or a
/// string kind's text (the CLI's `--set segment_size=128MiB`, the SDK's `raw` options): a
/// decimal number or the key's own form, a byte size (`2MiB`, `15GB`) for `segment_size` and
/// `max_topic_size`, a duration (`15s`, `1h 30m`) in microseconds for `message_expiry`, and
/// `unlimited` or `server_default` for those two limits. Text is never read as integer bytes
/// ("4096" is not 0x36393034).
pub fn number(key: &str, kind: u8, value: &[u8]) -> Result<u64, ErrorCode> {
    if kind != STRING_KIND {
        return as_u64(value);
    }
    let text = as_str(value)?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| ErrorCode::InvalidOptionValue);
    }
    let parsed = match (key, text) {
        ("message_expiry" | "max_topic_size", "unlimited") => Some(u64::MAX),
        ("message_expiry" | "max_topic_size", "server_default") => Some(0),
        ("message_expiry", "never_expire" | "none") => Some(u64::MAX),
        ("message_expiry", _) => duration_micros(text),
        ("max_topic_size" | "segment_size" | "size_of_messages_required_to_save", _) => {
            byte_size(text)
        }
        _ => None,
    };
    parsed.ok_or(ErrorCode::InvalidOptionValue)
}

/// `<whole number> <unit>`, the unit `B`, decimal `KB`..`TB` or binary `KiB`..`TiB`, in any case
/// (upstream's sizes; the server's configuration takes them too).
pub fn byte_size(text: &str) -> Option<u64> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = (text[..digits].parse::<u64>().ok()?, text[digits..].trim());
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// A humantime-style duration (`15s`, `1h 30m`, `2days`) in microseconds: whole numbers, each
/// followed by its unit, summed.
fn duration_micros(text: &str) -> Option<u64> {
    const SECOND: u64 = 1_000_000;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let number: u64 = rest[..digits].parse().ok()?;
        let after = rest[digits..].trim_start();
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c.is_whitespace())
            .unwrap_or(after.len());
        let micros_per = match &after[..unit_end] {
            "us" | "usec" => 1,
            "ms" | "msec" => 1_000,
            "s" | "sec" | "secs" | "second" | "seconds" => SECOND,
            "m" | "min" | "mins" | "minute" | "minutes" => 60 * SECOND,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * SECOND,
            "d" | "day" | "days" => 86_400 * SECOND,
            "w" | "week" | "weeks" => 604_800 * SECOND,
            _ => return None,
        };
        total = total.checked_add(number.checked_mul(micros_per)?)?;
        rest = after[unit_end..].trim_start();
    }
    Some(total)
}

pub fn as_str(value: &[u8]) -> Result<&str, ErrorCode> {
    std::str::from_utf8(value).map_err(|_| ErrorCode::InvalidOptionValue)
}

/// Which of `words` a text value is, compared without ASCII case, as the official types'
/// `FromStr` read them (`Durability`, `PartitionResizePolicy`, `CompressionAlgorithm`).
pub fn keyword(value: &[u8], words: &[&'static str]) -> Result<&'static str, ErrorCode> {
    let text = as_str(value)?;
    words
        .iter()
        .find(|word| word.eq_ignore_ascii_case(text))
        .copied()
        .ok_or(ErrorCode::InvalidOptionValue)
}

/// A `compression_algorithm` value (`none` or `gzip`) as the code topics carry on the wire:
/// 1 none, 2 gzip, as in the official SDK's `CompressionAlgorithm`.
pub fn compression_algorithm(value: &[u8]) -> Result<u8, ErrorCode> {
    match keyword(value, &["none", "gzip"])? {
        "none" => Ok(1),
        _ => Ok(2),
    }
}

/// The official client's bound on `messages_required_to_save` (its codec refuses 0 and more).
pub const MESSAGES_REQUIRED_TO_SAVE_MAX: u64 = 16 * 1024 * 1024;

/// The official client's bound on `size_of_messages_required_to_save` (its codec refuses more):
/// 1 GiB, the largest segment.
pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX: u64 = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    /// Text for a typed option becomes its kind's value; text that does not read as one, and
    /// options the catalog types as text, are left as they came.
    #[test]
    fn text_for_a_typed_option_is_written_in_its_kind() {
        let block = encode(&[
            ("preallocate_segments", kind::STRING, b"true"),
            ("message_expiry", kind::STRING, b"90s"),
            ("max_topic_size", kind::STRING, b"2GiB"),
            ("messages_required_to_save", kind::STRING, b"10"),
            ("durability", kind::STRING, b"persisted"),
        ]);
        let typed = canonical(TOPIC_OPTIONS, &block).expect("changed");
        let expected = encode(&[
            ("preallocate_segments", kind::BOOL, &[1]),
            ("message_expiry", kind::UINT64, &90_000_000u64.to_le_bytes()),
            ("max_topic_size", kind::UINT64, &(2u64 << 30).to_le_bytes()),
            (
                "messages_required_to_save",
                kind::UINT32,
                &10u32.to_le_bytes(),
            ),
            ("durability", kind::STRING, b"persisted"),
        ]);
        assert_eq!(typed, expected);
        assert_eq!(validate(TOPIC_OPTIONS, &typed, &[], true), Ok(()));
        let left = encode(&[
            ("preallocate_segments", kind::STRING, b"yes"),
            ("message_expiry", kind::UINT64, &7u64.to_le_bytes()),
        ]);
        assert_eq!(canonical(TOPIC_OPTIONS, &left), None);
    }

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
    fn text_values_are_parsed_as_numbers_sizes_and_durations_never_as_integer_bytes() {
        let text = |key: &str, value: &str| number(key, STRING_KIND, value.as_bytes());
        assert_eq!(text("max_topic_size", "4096"), Ok(4096), "not 0x36393034");
        assert_eq!(text("segment_size", "2MiB"), Ok(2 << 20));
        assert_eq!(text("max_topic_size", "15 GB"), Ok(15_000_000_000));
        assert_eq!(text("max_topic_size", "unlimited"), Ok(u64::MAX));
        assert_eq!(text("message_expiry", "server_default"), Ok(0));
        assert_eq!(text("message_expiry", "15s"), Ok(15_000_000));
        assert_eq!(text("message_expiry", "1h 30m"), Ok(5_400_000_000));
        assert_eq!(text("message_expiry", "2days"), Ok(172_800_000_000));
        assert_eq!(text("messages_required_to_save", "12"), Ok(12));
        for (key, bad) in [
            ("max_topic_size", "lots"),
            ("max_topic_size", "15s"),
            ("message_expiry", "2MiB"),
            ("message_expiry", "s15"),
            ("segment_size", "unlimited"),
            ("messages_required_to_save", "1KB"),
            ("max_topic_size", "99999999999999999999"),
            ("message_expiry", ""),
        ] {
            assert_eq!(
                text(key, bad),
                Err(ErrorCode::InvalidOptionValue),
                "{key}={bad}"
            );
        }
        // A numeric kind keeps its integer bytes.
        assert_eq!(
            number("max_topic_size", kind::UINT64, &4096u64.to_le_bytes()),
            Ok(4096)
        );
    }

    /// As the official option codec reads them: keywords in any ASCII case (a `Fixed` resize
    /// policy was once refused 4042), `messages_required_to_save` from 1 to 16 MiB (0 and more
    /// were once accepted), `size_of_messages_required_to_save` up to 1 GiB (once refused as an
    /// unknown key, which failed the official client's topic create).
    #[test]
    fn keywords_in_any_case_and_messages_required_to_save_within_the_official_bounds() {
        let check = |key: &str, value: &[u8]| check_value(key, kind::STRING, value);
        for (key, value) in [
            ("partition_resize_policy", &b"Fixed"[..]),
            ("partition_resize_policy", b"MUTABLE"),
            ("durability", b"Persisted"),
            ("consumer_offset_durability", b"REPLICATED"),
            ("messages_required_to_save", b"1"),
            ("messages_required_to_save", b"16777216"),
            ("size_of_messages_required_to_save", b"4096"),
            ("size_of_messages_required_to_save", b"1 GiB"),
            ("size_of_messages_required_to_save", b"1073741824"),
        ] {
            assert_eq!(check(key, value), Ok(()), "{key}={value:?}");
        }
        for (key, value) in [
            ("partition_resize_policy", &b"fixedd"[..]),
            ("durability", b"Persist"),
            ("messages_required_to_save", b"0"),
            ("messages_required_to_save", b"16777217"),
            ("size_of_messages_required_to_save", b"1073741825"),
            ("size_of_messages_required_to_save", b"2 GiB"),
            ("status", b"Active"),
        ] {
            assert_eq!(
                check(key, value),
                Err(ErrorCode::InvalidOptionValue),
                "{key}={value:?}"
            );
        }
        assert_eq!(
            crate::model::ResizePolicy::parse(b"FIXED"),
            Ok(crate::model::ResizePolicy::Fixed)
        );
        assert_eq!(
            crate::model::TopicDurability::parse("PERSISTED"),
            Some(crate::model::TopicDurability::Persisted)
        );
    }

    #[test]
    fn compression_algorithm_is_read_from_its_name_not_from_integer_bytes() {
        assert_eq!(compression_algorithm(b"none"), Ok(1));
        assert_eq!(compression_algorithm(b"gzip"), Ok(2));
        // In any case, as the official `CompressionAlgorithm::from_str` reads it.
        assert_eq!(compression_algorithm(b"GZip"), Ok(2));
        // Four bytes once read as a u32 (and then truncated) instead of refused.
        for bad in [&b"zstd"[..], b"gzip ", b"", &2u32.to_le_bytes(), &[0xff]] {
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

/// A topic create's options block with `segment_size` set to `size`, when the block names
/// none and `size` is one a topic may ask for; `None` otherwise (the block is left as it is).
/// A cluster's metadata primary pins its configured segment size this way, so every replica
/// of the topic rolls its segments at the same offsets whatever its own configuration says.
/// Whether a topic may record `size` as its `segment_size` (what a client may ask for: 1 MiB to
/// 1 GiB, a multiple of 512), so [`with_segment_size`] pins it.
pub fn segment_size_recordable(size: u64) -> bool {
    check_value("segment_size", kind::UINT64, &size.to_le_bytes()).is_ok()
}

pub fn with_segment_size(block: &[u8], size: u64) -> Option<Vec<u8>> {
    let entries = typed_entries(block).ok()?;
    let value = size.to_le_bytes();
    if entries.iter().any(|(key, _, _)| *key == "segment_size")
        || check_value("segment_size", kind::UINT64, &value).is_err()
    {
        return None;
    }
    let mut pinned = block.to_vec();
    pinned.extend(encode(&[("segment_size", kind::UINT64, &value)]));
    Some(pinned)
}

/// The option a stream create carries the stream's own data key in (the SDK's
/// `StreamCreateOptions::encryption_key`, the CLI's `--stream-key-file`).
pub const STREAM_KEY: &str = "encryption_key";

/// Checks a stream create's options block: a stream's own key asks for encryption at rest,
/// which this server does not do, refused with the code the SDK names for a server with no key
/// to wrap it with (StreamEncryptionUnavailable); the rest as [`validate`] checks it.
pub fn validate_stream_create(block: &[u8]) -> Result<(), ErrorCode> {
    if entries(block)?.iter().any(|(key, _)| *key == STREAM_KEY) {
        return Err(ErrorCode::StreamEncryptionUnavailable);
    }
    validate(STREAM_OPTIONS, block, &[], true)
}

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
    for (key, kind, value) in typed_entries(block)? {
        let spec = spec_of(key)?;
        if spec.flags & flag::READ_ONLY != 0 {
            return Err(ErrorCode::ReadOnlyOption);
        }
        if !create && spec.flags & flag::UPDATABLE == 0 {
            return Err(ErrorCode::OptionNotUpdatable);
        }
        check_value(key, kind, value)?;
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

fn check_value(key: &str, kind: u8, value: &[u8]) -> Result<(), ErrorCode> {
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
            let size = number(key, kind, value)?;
            let valid = (SEGMENT_SIZE_MIN..=SEGMENT_SIZE_MAX).contains(&size) && size % 512 == 0;
            if valid {
                Ok(())
            } else {
                Err(ErrorCode::InvalidOptionValue)
            }
        }
        "message_expiry" | "max_topic_size" => number(key, kind, value).map(|_| ()),
        "messages_required_to_save" => match number(key, kind, value)? {
            1..=MESSAGES_REQUIRED_TO_SAVE_MAX => Ok(()),
            _ => Err(ErrorCode::InvalidOptionValue),
        },
        "size_of_messages_required_to_save" => match number(key, kind, value)? {
            0..=SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX => Ok(()),
            _ => Err(ErrorCode::InvalidOptionValue),
        },
        "durability" | "consumer_offset_durability" => {
            keyword(value, &["replicated", "persisted"]).map(|_| ())
        }
        "partition_resize_policy" => keyword(value, &["mutable", "fixed"]).map(|_| ()),
        "compression_algorithm" => compression_algorithm(value).map(|_| ()),
        "status" => one_of(&["active", "inactive"]),
        "preallocate_segments" => match value {
            [0] | [1] => Ok(()),
            _ => Err(ErrorCode::InvalidOptionValue),
        },
        _ => Ok(()),
    }
}

/// `block` with each value given as text for an option the catalog types otherwise (the CLI's
/// `--set`, HTTP's strings, the SDK's raw options) written in the catalog's kind, where the text
/// reads as one ([`number`]; `true` or `false` for a bool, as the official client's codec reads
/// them); `None` when nothing changes. Applied where an op is prepared, so every replica, of
/// this build or an earlier one, applies the typed value (an earlier build refuses a bool's
/// text), and reads report it as the SDK's typed fields would have sent it.
pub fn canonical(catalog: &[OptionSpec], block: &[u8]) -> Option<Vec<u8>> {
    let entries = typed_entries(block).ok()?;
    let mut changed = false;
    let mut typed: Vec<(&str, u8, Vec<u8>)> = Vec::with_capacity(entries.len());
    for (key, value_kind, value) in entries {
        let declared = catalog
            .iter()
            .find(|spec| spec.key == key)
            .map(|spec| spec.kind);
        let canonical = match (value_kind, declared) {
            (kind::STRING, Some(kind::BOOL)) => match as_str(value) {
                Ok("true") => Some((kind::BOOL, vec![1])),
                Ok("false") => Some((kind::BOOL, vec![0])),
                _ => None,
            },
            (kind::STRING, Some(kind::UINT64)) => number(key, value_kind, value)
                .ok()
                .map(|number| (kind::UINT64, number.to_le_bytes().to_vec())),
            (kind::STRING, Some(kind::UINT32)) => number(key, value_kind, value)
                .ok()
                .and_then(|number| u32::try_from(number).ok())
                .map(|number| (kind::UINT32, number.to_le_bytes().to_vec())),
            _ => None,
        };
        changed |= canonical.is_some();
        let (value_kind, value) = canonical.unwrap_or((value_kind, value.to_vec()));
        typed.push((key, value_kind, value));
    }
    let entries: Vec<(&str, u8, &[u8])> = typed
        .iter()
        .map(|(key, value_kind, value)| (*key, *value_kind, value.as_slice()))
        .collect();
    changed.then(|| encode(&entries))
}

/// A size or expiry option: `u64::MAX` (and 0) mean unlimited.
pub fn limit(value: u64) -> Option<u64> {
    (value != 0 && value != u64::MAX).then_some(value)
}

/// The catalog as it was written by hand before spec/options.spec declared it: the generated
/// one must describe exactly the same options, in the same order.
#[cfg(test)]
mod pinned_segment_size {
    use super::*;

    #[test]
    fn a_valid_size_is_added_once_and_never_over_a_given_one() {
        let empty = with_segment_size(&[], 8 << 20).expect("pinned");
        assert_eq!(typed_entries(&empty).unwrap().len(), 1);
        assert_eq!(
            number("segment_size", kind::UINT64, &(8u64 << 20).to_le_bytes()),
            Ok(8 << 20)
        );
        let expiry = encode(&[("message_expiry", kind::STRING, b"1h")]);
        let pinned = with_segment_size(&expiry, 1 << 30).expect("pinned");
        let keys: Vec<&str> = typed_entries(&pinned)
            .unwrap()
            .iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(keys, ["message_expiry", "segment_size"]);
        let given = encode(&[("segment_size", kind::STRING, b"2MiB")]);
        assert_eq!(with_segment_size(&given, 1 << 30), None);
        // Sizes a topic may not ask for (a test's tiny segments) are left to the configuration.
        assert_eq!(with_segment_size(&[], 4096), None);
        assert_eq!(with_segment_size(&[], (1 << 20) + 1), None);
        assert_eq!(with_segment_size(&[1, 2, 3], 1 << 30), None);
    }
}

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
            description: "Recorded and reported, none or gzip; messages are stored and served as sent, not compressed",
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
            description: "Oldest closed segments are deleted while a partition's closed segments exceed its share of this (the active segment stays), in bytes; u64::MAX is unlimited",
        },
        OptionSpec {
            key: "segment_size",
            kind: kind::UINT64,
            flags: 0,
            default: ONE_GIB,
            description: "Segment size in bytes: 1 MiB to 1 GiB, a multiple of 512; a topic created without it takes the server's system.segment_size (1 GiB unless configured)",
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
            key: "size_of_messages_required_to_save",
            kind: kind::UINT64,
            flags: 0,
            default: &(1u64 << 20).to_le_bytes(),
            description: "Accepted for compatibility (1 GiB at most); every message is journaled on arrival",
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
