//! Decoder family: request and response payload structs. The first two bytes pick the
//! struct; the rest is its input. No panic; a decoded value re-encodes to the same bytes and
//! decodes to itself.
#![no_main]
use iggy_generated::registry::{STRUCTS, roundtrip};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let family: Vec<_> = STRUCTS.iter().filter(|s| s.module == "payloads").collect();
    if data.len() < 2 {
        return;
    }
    let pick = u16::from_le_bytes([data[0], data[1]]) as usize;
    let s = family[pick % family.len()];
    let input = &data[2..];
    if let Some(Ok(r)) = roundtrip(s.name, input) {
        assert_eq!(r.bytes, input, "{} is not canonical", s.name);
        assert!(r.stable, "{}: decode(encode(x)) != x", s.name);
    }
});
