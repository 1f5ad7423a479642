//! Conformance: our generated codec against the official crates (the judge of bytes).
//! Prints one summary line and fails on any mismatch not listed in expected-failures.txt.

use iggy_binary_protocol as official;
use iggy_generated::{errors::ErrorCode, frames};
use std::collections::BTreeSet;

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

    // 3. Expected failures.
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
    let vectors = 0usize;
    println!(
        "conformance: {vectors} vectors, {} structs, {commands} commands, {errors} errors, {mismatches} mismatches",
        structs.len()
    );
    assert_eq!(mismatches, 0, "conformance mismatches");
}
