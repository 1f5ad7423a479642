//! Decoder family: the SDK stub's reply decoders (`registry::decode_reply`), result
//! sections included. The first byte picks the command row. No panic.
#![no_main]
use iggy_sdk_stub::client::COMMANDS;
use iggy_sdk_stub::registry::decode_reply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let c = &COMMANDS[pick as usize % COMMANDS.len()];
    let v = if c.until == u32::MAX { c.since.max(1) } else { c.until };
    let _ = decode_reply(c.code, v, body);
});
