//! Decoder family: `commands::decode_request(code, version, body)`, as the server calls it.
//! The first byte picks the command row, the second the protocol version. No panic.
#![no_main]
use iggy_generated::commands::{COMMANDS, decode_request};
use iggy_generated::protocol::ADMISSION;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let c = &COMMANDS[data[0] as usize % COMMANDS.len()];
    let v = ADMISSION[data[1] as usize % ADMISSION.len()].1.packed();
    let _ = decode_request(c.code, v, &data[2..]);
});
