//! Decoder family: fixed-layout frames (consensus headers, batch and message frame headers).
//! The first byte picks the struct; the rest is its input. No panic; a decoded value
//! re-encodes to the same bytes and decodes to itself.
#![no_main]
use iggy_generated::registry::{STRUCTS, roundtrip};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let family: Vec<_> = STRUCTS.iter().filter(|s| s.module == "frames").collect();
    let Some((&pick, input)) = data.split_first() else { return };
    let s = family[pick as usize % family.len()];
    if let Some(Ok(r)) = roundtrip(s.name, input) {
        assert_eq!(r.bytes, input, "{} is not canonical", s.name);
        assert!(r.stable, "{}: decode(encode(x)) != x", s.name);
    }
});
