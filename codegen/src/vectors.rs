//! The spec as an interpreter: decode, encode, random instances and the canonical JSON form of
//! any spec type, straight from the model. Used to check `example` rows and to write the
//! conformance vectors (`generated/vectors/*.jsonl`), which the generated codec, the official
//! crates and the SDK stub must then agree with byte for byte.
use crate::{Model, Struct, array_len, pack, prim_size};
use std::fmt::Write as _;

/// A decoded spec value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    U(u128),
    I(i128),
    Bool(bool),
    Bytes(Vec<u8>),
    Str(String),
    Enum(String, u64),
    Opt(Option<Box<Value>>),
    List(Vec<Value>),
    Struct(Vec<(String, Value)>),
}

/// A parsed field type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    Int { size: usize, signed: bool },
    Bool,
    Array(usize),
    Zero(usize),
    /// Length-prefixed UTF-8 (prefix 1 or 4 bytes).
    Str(usize),
    /// Length-prefixed bytes (prefix 1 or 4 bytes).
    Bytes(usize),
    Rest,
    Opt(Box<Ty>),
    OptPad(Box<Ty>, usize),
    Sized(Box<Ty>),
    /// Count kind: "u32", "u8", "flag", "rest".
    Vec(Box<Ty>, &'static str),
    Enum(String),
    Struct(String),
}

/// Parses a spec type string against the model's enums and structs.
pub fn parse_ty(m: &Model, ty: &str) -> Option<Ty> {
    if let Some(size) = prim_size(ty) {
        return Some(if ty == "bool" { Ty::Bool } else { Ty::Int { size, signed: ty.starts_with('i') } });
    }
    if let Some(n) = array_len(ty, "bytes") {
        return Some(Ty::Array(n));
    }
    if let Some(n) = array_len(ty, "zero") {
        return Some(Ty::Zero(n));
    }
    match ty {
        "name" | "string(u8)" => return Some(Ty::Str(1)),
        "string(u32)" => return Some(Ty::Str(4)),
        "bytes(u8)" => return Some(Ty::Bytes(1)),
        "bytes(u32)" => return Some(Ty::Bytes(4)),
        "rest" => return Some(Ty::Rest),
        _ => {}
    }
    if let Some((inner, pad)) = ty.strip_prefix("opt<").and_then(|r| r.strip_suffix(')')?.rsplit_once(">(pad=")) {
        return Some(Ty::OptPad(Box::new(parse_ty(m, inner)?), pad.parse().ok()?));
    }
    if let Some(inner) = ty.strip_prefix("opt<").and_then(|r| r.strip_suffix('>')) {
        return Some(Ty::Opt(Box::new(parse_ty(m, inner)?)));
    }
    if let Some(inner) = ty.strip_prefix("sized<").and_then(|r| r.strip_suffix(">(u32)")) {
        return Some(Ty::Sized(Box::new(parse_ty(m, inner)?)));
    }
    if let Some(r) = ty.strip_prefix("vec<") {
        let (inner, kind) = r.rsplit_once(">(")?;
        let kind = match kind.strip_suffix(')')? {
            "u32" => "u32",
            "u8" => "u8",
            "flag" => "flag",
            "rest" => "rest",
            _ => return None,
        };
        return Some(Ty::Vec(Box::new(parse_ty(m, inner)?), kind));
    }
    if m.enums.iter().any(|e| e.name == ty) {
        return Some(Ty::Enum(ty.into()));
    }
    if m.structs.iter().any(|s| s.name == ty) {
        return Some(Ty::Struct(ty.into()));
    }
    None
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if input.len() < n {
        return Err(format!("needed {n} bytes, {} remain", input.len()));
    }
    let (h, t) = input.split_at(n);
    *input = t;
    Ok(h)
}

fn le(b: &[u8]) -> u128 {
    b.iter().rev().fold(0u128, |a, x| a << 8 | u128::from(*x))
}

fn take_len(input: &mut &[u8], prefix: usize) -> Result<usize, String> {
    Ok(le(take(input, prefix)?) as usize)
}

/// Decodes one value of `ty` from the front of `input`.
pub fn decode(m: &Model, ty: &Ty, input: &mut &[u8]) -> Result<Value, String> {
    Ok(match ty {
        Ty::Int { size, signed } => {
            let raw = le(take(input, *size)?);
            if *signed {
                let shift = 128 - 8 * *size as u32;
                Value::I(((raw << shift) as i128) >> shift)
            } else {
                Value::U(raw)
            }
        }
        Ty::Bool => match take(input, 1)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => return Err(format!("bool byte {b}")),
        },
        Ty::Array(n) => Value::Bytes(take(input, *n)?.to_vec()),
        Ty::Zero(n) => {
            if take(input, *n)?.iter().any(|b| *b != 0) {
                return Err("reserved bytes not zero".into());
            }
            Value::Opt(None)
        }
        Ty::Str(p) => {
            let n = take_len(input, *p)?;
            let b = take(input, n)?;
            Value::Str(String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8".to_string())?)
        }
        Ty::Bytes(p) => {
            let n = take_len(input, *p)?;
            Value::Bytes(take(input, n)?.to_vec())
        }
        Ty::Rest => Value::Bytes(std::mem::take(input).to_vec()),
        Ty::Opt(t) => match take(input, 1)?[0] {
            0 => Value::Opt(None),
            1 => Value::Opt(Some(Box::new(decode(m, t, input)?))),
            b => return Err(format!("option flag {b}")),
        },
        Ty::OptPad(t, n) => match take(input, 1)?[0] {
            0 => {
                if take(input, *n)?.iter().any(|b| *b != 0) {
                    return Err("option padding not zero".into());
                }
                Value::Opt(None)
            }
            1 => Value::Opt(Some(Box::new(decode(m, t, input)?))),
            b => return Err(format!("option flag {b}")),
        },
        Ty::Sized(t) => {
            let n = take_len(input, 4)?;
            let mut inner = take(input, n)?;
            let v = decode(m, t, &mut inner)?;
            if !inner.is_empty() {
                return Err(format!("{} bytes left inside a sized value", inner.len()));
            }
            v
        }
        Ty::Vec(t, kind) => {
            let mut out = Vec::new();
            match *kind {
                "u32" | "u8" => {
                    let n = take_len(input, if *kind == "u8" { 1 } else { 4 })?;
                    for _ in 0..n {
                        out.push(decode(m, t, input)?);
                    }
                }
                "flag" => loop {
                    match take(input, 1)?[0] {
                        0 => break,
                        1 => out.push(decode(m, t, input)?),
                        b => return Err(format!("list flag {b}")),
                    }
                },
                _ => {
                    while !input.is_empty() {
                        let before = input.len();
                        out.push(decode(m, t, input)?);
                        if input.len() == before {
                            return Err("zero-sized list element".into());
                        }
                    }
                }
            }
            Value::List(out)
        }
        Ty::Enum(name) => {
            let e = m.enums.iter().find(|e| &e.name == name).ok_or("unknown enum")?;
            let size = prim_size(&e.repr).unwrap_or(1);
            let raw = le(take(input, size)?) as u64;
            let (_, v) = e.variants.iter().find(|(d, _)| *d == raw).ok_or_else(|| format!("{name} value {raw}"))?;
            Value::Enum(v.clone(), raw)
        }
        Ty::Struct(name) => {
            let s = find(m, name)?;
            let mut fields = Vec::new();
            for f in &s.fields {
                let t = parse_ty(m, &f.ty).ok_or_else(|| format!("unknown type {}", f.ty))?;
                let v = decode(m, &t, input).map_err(|e| format!("{}.{}: {e}", s.name, f.name))?;
                if !matches!(t, Ty::Zero(_)) {
                    fields.push((f.name.clone(), v));
                }
            }
            Value::Struct(fields)
        }
    })
}

fn find<'m>(m: &'m Model, name: &str) -> Result<&'m Struct, String> {
    m.structs.iter().find(|s| s.name == name).ok_or_else(|| format!("unknown struct {name}"))
}

fn put_len(out: &mut Vec<u8>, prefix: usize, n: usize) {
    out.extend_from_slice(&(n as u64).to_le_bytes()[..prefix]);
}

/// Appends the wire bytes of `v` as a `ty`.
pub fn encode(m: &Model, ty: &Ty, v: &Value, out: &mut Vec<u8>) {
    match (ty, v) {
        (Ty::Int { size, .. }, Value::U(x)) => out.extend_from_slice(&x.to_le_bytes()[..*size]),
        (Ty::Int { size, .. }, Value::I(x)) => out.extend_from_slice(&x.to_le_bytes()[..*size]),
        (Ty::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (Ty::Array(_), Value::Bytes(b)) | (Ty::Rest, Value::Bytes(b)) => out.extend_from_slice(b),
        (Ty::Zero(n), _) => out.resize(out.len() + n, 0),
        (Ty::Str(p), Value::Str(s)) => {
            put_len(out, *p, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        (Ty::Bytes(p), Value::Bytes(b)) => {
            put_len(out, *p, b.len());
            out.extend_from_slice(b);
        }
        (Ty::Opt(t), Value::Opt(o)) => match o {
            Some(x) => {
                out.push(1);
                encode(m, t, x, out);
            }
            None => out.push(0),
        },
        (Ty::OptPad(t, n), Value::Opt(o)) => match o {
            Some(x) => {
                out.push(1);
                encode(m, t, x, out);
            }
            None => out.resize(out.len() + 1 + n, 0),
        },
        (Ty::Sized(t), v) => {
            let mut inner = Vec::new();
            encode(m, t, v, &mut inner);
            put_len(out, 4, inner.len());
            out.extend_from_slice(&inner);
        }
        (Ty::Vec(t, kind), Value::List(xs)) => {
            match *kind {
                "u32" => put_len(out, 4, xs.len()),
                "u8" => put_len(out, 1, xs.len()),
                _ => {}
            }
            for x in xs {
                if *kind == "flag" {
                    out.push(1);
                }
                encode(m, t, x, out);
            }
            if *kind == "flag" {
                out.push(0);
            }
        }
        (Ty::Enum(name), Value::Enum(_, raw)) => {
            let size = m.enums.iter().find(|e| &e.name == name).and_then(|e| prim_size(&e.repr)).unwrap_or(1);
            out.extend_from_slice(&raw.to_le_bytes()[..size]);
        }
        (Ty::Struct(name), Value::Struct(fields)) => {
            let s = find(m, name).expect("validated struct");
            let mut it = fields.iter();
            for f in &s.fields {
                let t = parse_ty(m, &f.ty).expect("validated type");
                if let Ty::Zero(n) = t {
                    out.resize(out.len() + n, 0);
                } else {
                    let (_, fv) = it.next().expect("field value");
                    encode(m, &t, fv, out);
                }
            }
        }
        (t, v) => panic!("value {v:?} does not fit type {t:?}"),
    }
}

/// Appends the canonical JSON form (the same text `iggy_wire::WireJson` writes).
pub fn json(v: &Value, out: &mut String) {
    match v {
        Value::U(x) => {
            let _ = write!(out, "{x}");
        }
        Value::I(x) => {
            let _ = write!(out, "{x}");
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Bytes(b) => {
            out.push('"');
            for x in b {
                let _ = write!(out, "{x:02x}");
            }
            out.push('"');
        }
        Value::Str(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if (c as u32) < 0x20 => {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Enum(n, _) => {
            let _ = write!(out, "\"{n}\"");
        }
        Value::Opt(None) => out.push_str("null"),
        Value::Opt(Some(x)) => json(x, out),
        Value::List(xs) => {
            out.push('[');
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json(x, out);
            }
            out.push(']');
        }
        Value::Struct(fs) => {
            out.push('{');
            for (i, (k, x)) in fs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "\"{k}\":");
                json(x, out);
            }
            out.push('}');
        }
    }
}

/// splitmix64: deterministic, seedable, no dependency.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    fn text(&mut self, lo: usize, hi: usize) -> String {
        const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-_.";
        let n = lo + self.below((hi - lo + 1) as u64) as usize;
        (0..n).map(|_| ALPHA[self.below(ALPHA.len() as u64) as usize] as char).collect()
    }
}

/// Where random instances may come from: the protocol version they are for (enum variants and
/// sample structs outside it are not drawn) and the decoded `example` rows per struct.
pub struct Gen<'m> {
    pub model: &'m Model,
    pub version: u32,
    pub examples: &'m [(String, Value)],
}

impl Gen<'_> {
    /// A random value of `ty`; `hint` is the field's `gen=` token, if any.
    pub fn random(&self, ty: &Ty, hint: Option<&str>, rng: &mut Rng, depth: usize) -> Value {
        let m = self.model;
        if let Some(h) = hint
            && let Some(v) = self.hinted(ty, h, rng, depth)
        {
            return v;
        }
        match ty {
            Ty::Int { size, signed } => {
                let raw = u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64());
                let bits = 8 * *size as u32;
                let masked = if bits == 128 { raw } else { raw & ((1u128 << bits) - 1) };
                if *signed {
                    let shift = 128 - bits;
                    Value::I(((masked << shift) as i128) >> shift)
                } else {
                    Value::U(masked)
                }
            }
            Ty::Bool => Value::Bool(rng.below(2) == 1),
            Ty::Array(n) => Value::Bytes(rng.bytes(*n)),
            Ty::Zero(_) => Value::Opt(None),
            Ty::Str(_) => Value::Str(rng.text(1, 12)),
            Ty::Bytes(_) | Ty::Rest => {
                let n = rng.below(9) as usize;
                Value::Bytes(rng.bytes(n))
            }
            Ty::Opt(t) | Ty::OptPad(t, _) => {
                if depth > 4 || rng.below(2) == 0 {
                    Value::Opt(None)
                } else {
                    Value::Opt(Some(Box::new(self.random(t, None, rng, depth + 1))))
                }
            }
            Ty::Sized(t) => self.random(t, None, rng, depth + 1),
            Ty::Vec(t, kind) => {
                let n = if depth > 4 { 0 } else { rng.below(4) as usize };
                let mut xs: Vec<Value> = (0..n).map(|_| self.random(t, None, rng, depth + 1)).collect();
                if *kind == "rest" {
                    // Elements back to back until the input ends: a zero-sized one cannot be read.
                    xs.retain(|x| {
                        let mut b = Vec::new();
                        encode(m, t, x, &mut b);
                        !b.is_empty()
                    });
                }
                Value::List(xs)
            }
            Ty::Enum(name) => {
                let e = m.enums.iter().find(|e| &e.name == name).expect("enum");
                let live: Vec<&(u64, String)> = e
                    .variants
                    .iter()
                    .zip(e.variant_versions.iter())
                    .zip(e.variant_journal_only.iter())
                    .filter(|((_, (since, until)), journal_only)| {
                        !**journal_only && in_range(self.version, since.as_deref(), until.as_deref())
                    })
                    .map(|((v, _), _)| v)
                    .collect();
                let (raw, n) = live[rng.below(live.len() as u64) as usize];
                Value::Enum(n.clone(), *raw)
            }
            Ty::Struct(name) => {
                let s = find(m, name).expect("struct");
                if s.draw.as_deref() == Some("examples") {
                    let pool: Vec<&Value> = self.examples.iter().filter(|(n, _)| n == name).map(|(_, v)| v).collect();
                    if !pool.is_empty() {
                        return pool[rng.below(pool.len() as u64) as usize].clone();
                    }
                }
                let mut fields: Vec<(String, Value)> = Vec::new();
                let mut counts = Vec::new();
                for f in &s.fields {
                    let t = parse_ty(m, &f.ty).expect("type");
                    if matches!(t, Ty::Zero(_)) {
                        continue;
                    }
                    let v = self.random(&t, f.draw.as_deref(), rng, depth + 1);
                    if let (Some(path), Value::List(xs)) = (f.draw.as_deref().and_then(|g| g.strip_prefix("count:")), &v) {
                        counts.push((path.to_string(), xs.len()));
                    }
                    fields.push((f.name.clone(), v));
                }
                let mut v = Value::Struct(fields);
                for (path, n) in counts {
                    set_path(&mut v, &path, Value::U(n as u128));
                }
                v
            }
        }
    }

    fn hinted(&self, ty: &Ty, hint: &str, rng: &mut Rng, depth: usize) -> Option<Value> {
        if hint.starts_with("count:") {
            return None;
        }
        let v = self.hinted_raw(ty, hint, rng, depth)?;
        Some(match (ty, v) {
            // A number drawn for an enum field names the variant with that discriminant.
            (Ty::Enum(name), Value::U(n)) => {
                let e = self.model.enums.iter().find(|e| &e.name == name)?;
                let (raw, var) = e.variants.iter().find(|(d, _)| u128::from(*d) == n)?;
                Value::Enum(var.clone(), *raw)
            }
            // The bytes of a drawn type, for an integer field, are its little-endian value.
            (Ty::Int { .. }, Value::Bytes(b)) => Value::U(le(&b)),
            (_, v) => v,
        })
    }

    fn hinted_raw(&self, ty: &Ty, hint: &str, rng: &mut Rng, depth: usize) -> Option<Value> {
        if let Some((lo, hi)) = hint.split_once("..") {
            let (lo, hi): (u128, u128) = (lo.parse().ok()?, hi.parse().ok()?);
            return Some(Value::U(lo + u128::from(rng.next_u64()) % (hi - lo + 1)));
        }
        if hint.split('|').all(|p| p.parse::<u128>().is_ok()) {
            let opts: Vec<u128> = hint.split('|').map(|p| p.parse().unwrap()).collect();
            return Some(Value::U(opts[rng.below(opts.len() as u64) as usize]));
        }
        if hint == "empty" {
            return Some(match ty {
                Ty::Str(_) => Value::Str(String::new()),
                _ => Value::Bytes(Vec::new()),
            });
        }
        // gen=<Struct>: the bytes of a random instance of that struct.
        let inner = parse_ty(self.model, hint)?;
        let v = self.random(&inner, None, rng, depth + 1);
        let mut b = Vec::new();
        encode(self.model, &inner, &v, &mut b);
        Some(match ty {
            Ty::Str(_) => Value::Str(String::from_utf8(b).ok()?),
            _ => Value::Bytes(b),
        })
    }
}

fn set_path(v: &mut Value, path: &str, to: Value) {
    let (head, tail) = match path.split_once('.') {
        Some((h, t)) => (h, Some(t)),
        None => (path, None),
    };
    if let Value::Struct(fs) = v
        && let Some((_, x)) = fs.iter_mut().find(|(k, _)| k == head)
    {
        match tail {
            Some(t) => set_path(x, t, to),
            None => *x = to,
        }
    }
}

/// Whether packed `version` lies in the inclusive [since, until] window (open ends allowed).
pub fn in_range(version: u32, since: Option<&str>, until: Option<&str>) -> bool {
    since.and_then(pack).is_none_or(|s| s <= version) && until.and_then(pack).is_none_or(|u| version <= u)
}

/// Hex text of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes of hex text.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()).collect()
}
