//! Seeded fuzz loop (the normal-test twin of the cargo-fuzz targets under `fuzz/`): every
//! decoder family gets random and mutated inputs; none may panic, and whatever decodes must
//! re-encode to the same bytes and decode to the same value (`decode(encode(x)) == x`).
use iggy_generated::commands::{COMMANDS, decode_request};
use iggy_generated::protocol::ADMISSION;
use iggy_generated::registry::{STRUCTS, roundtrip};

const SEED: u64 = 0x1997_2026;
const CASES: usize = 120_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Vector bytes per struct, the seeds the mutator starts from.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("generated/vectors") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let get = |key: &str| {
                let start = line.find(&format!("\"{key}\":\"")).unwrap() + key.len() + 4;
                line[start..start + line[start..].find('"').unwrap()].to_string()
            };
            let hex = get("hex");
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            out.push((get("struct"), bytes));
        }
    }
    out.sort();
    out
}

/// One of: fresh random bytes, or a vector with bytes flipped, cut, inserted or duplicated.
fn input(rng: &mut Rng, seeds: &[&Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() || rng.below(4) == 0 {
        let n = rng.below(96);
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut b = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(3) {
        match rng.below(5) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            2 => b.truncate(rng.below(b.len() + 1)),
            3 => {
                let i = rng.below(b.len() + 1);
                b.insert(i, rng.next() as u8);
            }
            _ => {
                let i = rng.below(b.len() + 1);
                let tail = b[i..].to_vec();
                b.extend_from_slice(&tail[..tail.len().min(16)]);
            }
        }
    }
    b
}

#[test]
fn every_decoder_survives_random_and_mutated_input() {
    let corpus = corpus();
    let mut rng = Rng(SEED);
    let started = std::time::Instant::now();
    let (mut decoded, mut requests) = (0usize, 0usize);
    for case in 0..CASES {
        // Family 1: every struct of the spec (frames, payloads), by name, with both codecs.
        let s = &STRUCTS[case % STRUCTS.len()];
        let seeds: Vec<&Vec<u8>> = corpus.iter().filter(|(n, _)| n == s.name).map(|(_, b)| b).collect();
        let bytes = input(&mut rng, &seeds);
        for (which, got) in [
            (
                "generated",
                roundtrip(s.name, &bytes).map(|r| r.map(|r| (r.bytes, r.stable)).map_err(drop)),
            ),
            (
                "stub",
                iggy_sdk_stub::registry::roundtrip(s.name, &bytes)
                    .map(|r| r.map(|r| (r.bytes, r.stable)).map_err(drop)),
            ),
        ] {
            if let Some(Ok((again, stable))) = got {
                decoded += 1;
                assert_eq!(again, bytes, "{which} {}: decode then encode changed the bytes", s.name);
                assert!(stable, "{which} {}: decode(encode(x)) != x for {bytes:02x?}", s.name);
            }
        }
        // Family 2: request bodies by command code and protocol version, as the server decodes
        // them; family 3: the stub's reply decoders.
        let c = &COMMANDS[rng.below(COMMANDS.len())];
        let version = ADMISSION[rng.below(ADMISSION.len())].1.packed();
        let req_seeds: Vec<&Vec<u8>> = corpus.iter().filter(|(n, _)| n == c.request).map(|(_, b)| b).collect();
        let body = input(&mut rng, &req_seeds);
        if decode_request(c.code, version, &body).is_ok() {
            requests += 1;
        }
        let _ = iggy_sdk_stub::registry::decode_reply(c.code, version, &body);
        let _ = iggy_sdk_stub::registry::encode_request(c.code, version, &body);
    }
    let took = started.elapsed();
    println!("fuzz: {CASES} cases, {decoded} decoded, {requests} requests decoded, {took:?}");
    assert!(decoded > CASES / 10, "the mutator should keep many inputs decodable");
    assert!(took.as_secs() < 60, "the loop must stay under a minute, took {took:?}");
}
