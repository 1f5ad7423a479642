//! Option blocks of create and update requests: `[u8 key_kind][u32 len][key][u8 value_kind]
//! [u32 len][value]` entries to the end of the block, string keys only.
// TODO(spec): declare the option entry in spec/payloads.spec and decode it with the generated codec.

use iggy_generated::errors::ErrorCode;
use iggy_wire::{WireDecode, take};

const STRING_KIND: u8 = 2;
const ENTRIES_MAX: usize = 1024;

/// The `(key, value)` entries of an options block, in order; duplicates are refused.
pub fn entries(mut block: &[u8]) -> Result<Vec<(&str, &[u8])>, ErrorCode> {
    let mut out: Vec<(&str, &[u8])> = Vec::new();
    while !block.is_empty() {
        let key_kind = u8::decode_from(&mut block).map_err(|_| ErrorCode::InvalidFormat)?;
        let key_len = u32::decode_from(&mut block).map_err(|_| ErrorCode::InvalidFormat)?;
        let key = take(&mut block, key_len as usize).map_err(|_| ErrorCode::InvalidFormat)?;
        let _value_kind = u8::decode_from(&mut block).map_err(|_| ErrorCode::InvalidFormat)?;
        let value_len = u32::decode_from(&mut block).map_err(|_| ErrorCode::InvalidFormat)?;
        let value = take(&mut block, value_len as usize).map_err(|_| ErrorCode::InvalidFormat)?;
        if key_kind != STRING_KIND {
            return Err(ErrorCode::UnsupportedOptionKey);
        }
        let key = std::str::from_utf8(key).map_err(|_| ErrorCode::UnsupportedOptionKey)?;
        if out.iter().any(|(k, _)| *k == key) || out.len() == ENTRIES_MAX {
            return Err(ErrorCode::InvalidOptionValue);
        }
        out.push((key, value));
    }
    Ok(out)
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
}
