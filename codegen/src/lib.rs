//! iggy-codegen: reads `spec/*.spec`, validates, and emits `generated/src/*.rs`.
//!
//! Stages: [`parse`] (nom, one combinator per line kind) fills a [`Model`] per file;
//! [`Model::validate_with`] checks it against every file merged; the emitters write Rust, the
//! conformance vectors and the SDK stubs. Diagnostics name `file:line`.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub mod emit;
pub mod parse;
pub mod vectors;

pub use parse::parse_file;

/// A diagnostic tied to a spec line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub message: String,
}
impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

#[derive(Debug, Default)]
pub struct Model {
    pub versions: Vec<(String, u32)>,
    pub ranges: Vec<(String, String)>,
    pub storage_marker: Option<String>,
    pub snapshot_format: Option<u32>,
    pub release: Vec<(String, String)>,
    pub enums: Vec<Enum>,
    pub structs: Vec<Struct>,
    pub errors: Vec<(u32, String, String, usize)>,
    pub commands: Vec<Command>,
    pub retired: Vec<Retired>,
    /// `const` rows.
    pub consts: Vec<Const>,
    /// `example` rows.
    pub examples: Vec<Example>,
    /// Files each item came from, for the generated header.
    pub sources: BTreeMap<String, String>,
}
/// One `command` row.
#[derive(Debug, Clone)]
pub struct Command {
    pub code: u32,
    pub name: String,
    pub op: String,
    pub class: String,
    pub rf: bool,
    pub perm: String,
    pub req: String,
    pub resp: String,
    pub since: Option<String>,
    pub until: Option<String>,
    pub file: String,
    pub line: usize,
}
/// One `retired` row: the code is unknown from `since` on (always, without `since`).
#[derive(Debug, Clone)]
pub struct Retired {
    pub code: u32,
    pub name: String,
    pub since: Option<String>,
    pub file: String,
    pub line: usize,
}
/// One `const` row: a named constant of the file's generated module.
#[derive(Debug, Clone)]
pub struct Const {
    pub name: String,
    /// Spec type: an integer type, `string` or `bytes[N]`.
    pub ty: String,
    /// The value as written (a number, or the text between the quotes).
    pub value: String,
    /// Whether the value was quoted.
    pub text: bool,
    pub file: String,
    pub line: usize,
}
/// One `example` row.
#[derive(Debug, Clone)]
pub struct Example {
    pub name: String,
    pub version: String,
    pub hex: String,
    pub file: String,
    pub line: usize,
}
#[derive(Debug, Clone)]
pub struct Enum {
    pub name: String,
    pub repr: String,
    pub variants: Vec<(u64, String)>,
    /// `since`/`until` of each variant row (parallel to `variants`).
    pub variant_versions: Vec<(Option<String>, Option<String>)>,
    pub file: String,
    pub line: usize,
}
#[derive(Debug, Clone)]
pub struct Field {
    pub offset: Option<usize>,
    pub name: String,
    pub ty: String,
    pub doc: String,
    /// `gen=` token of the row: how vectors draw this field (see spec/FORMAT.md).
    pub draw: Option<String>,
    pub line: usize,
}
#[derive(Debug, Clone)]
pub struct Struct {
    pub name: String,
    pub fixed: Option<usize>,
    pub fields: Vec<Field>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// `gen=examples`: random instances are drawn from the struct's example rows.
    pub draw: Option<String>,
    pub doc: String,
    pub file: String,
    pub line: usize,
}

fn diag(file: &str, line: usize, message: impl Into<String>) -> Diagnostic {
    Diagnostic { file: file.to_string(), line, message: message.into() }
}

/// `x.y.z` of a packed version.
pub fn unpack(p: u32) -> String {
    format!("{}.{}.{}", p >> 20, (p >> 10) & 0x3ff, p & 0x3ff)
}

/// Packs `x.y.z` as `major<<20 | minor<<10 | patch`.
pub fn pack(v: &str) -> Option<u32> {
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let (a, b, c) = (it.next()??, it.next()??, it.next()??);
    Some(a << 20 | b << 10 | c)
}

/// The generated module a spec file becomes (`spec/frames.spec` -> `frames`).
pub fn module_of(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    base.trim_end_matches(".spec").to_string()
}

fn prim_size(ty: &str) -> Option<usize> {
    Some(match ty {
        "u8" | "i8" | "bool" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" => 4,
        "u64" | "i64" => 8,
        "u128" | "i128" => 16,
        _ => return None,
    })
}
fn array_len(ty: &str, kind: &str) -> Option<usize> {
    ty.strip_prefix(kind)?.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

impl Model {
    fn fixed_size(&self, ty: &str) -> Option<usize> {
        prim_size(ty)
            .or_else(|| array_len(ty, "bytes"))
            .or_else(|| array_len(ty, "zero"))
            .or_else(|| {
                self.enums.iter().find(|e| e.name == ty).and_then(|e| prim_size(&e.repr))
            })
            .or_else(|| self.structs.iter().find(|s| s.name == ty).and_then(|s| s.fixed))
    }

    /// Checks the whole model, resolving types in itself.
    pub fn validate(&self) -> Vec<Diagnostic> {
        self.validate_with(self)
    }

    /// Checks this file's items, resolving type names in `global` (every spec file merged).
    pub fn validate_with(&self, global: &Model) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let mut items: Vec<(usize, &str, &str)> = self.enums.iter().map(|e| (e.line, e.name.as_str(), e.file.as_str())).collect();
        items.extend(self.structs.iter().map(|s| (s.line, s.name.as_str(), s.file.as_str())));
        items.sort();
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (line, name, file) in items {
            if let Some(first) = names.insert(name, line) {
                out.push(diag(file, line, format!("duplicate name `{name}` (first at line {first})")));
                names.insert(name, first);
            }
        }
        for s in &self.structs {
            let Some(size) = s.fixed else {
                let set = borrowing(global);
                let n = s.fields.len();
                for (k, f) in s.fields.iter().enumerate() {
                    if var_ty(global, &f.ty, &|x| set.contains(x)).is_none() {
                        out.push(diag(&s.file, f.line, format!("unknown type `{}`", f.ty)));
                    }
                    if (f.ty == "rest" || f.ty.ends_with("(rest)")) && k + 1 != n {
                        out.push(diag(&s.file, f.line, format!("`{}` consumes the rest and must be last", f.name)));
                    }
                }
                continue;
            };
            let mut at = 0;
            for f in &s.fields {
                let Some(off) = f.offset else {
                    out.push(diag(&s.file, f.line, "fixed struct field needs an offset"));
                    continue;
                };
                let Some(len) = global.fixed_size(&f.ty) else {
                    out.push(diag(&s.file, f.line, format!("unknown type `{}`", f.ty)));
                    continue;
                };
                if off < at {
                    out.push(diag(&s.file, f.line, format!("field `{}` at {off} overlaps the previous field ending at {at}", f.name)));
                } else if off > at {
                    out.push(diag(&s.file, f.line, format!("gap before `{}`: {at}..{off}", f.name)));
                }
                at = off + len;
            }
            if at != size {
                out.push(diag(&s.file, s.line, format!("fields cover {at} bytes, fixed={size}")));
            }
        }
        let current = global.versions.first().or(self.versions.first()).map(|v| v.1);
        let window = |since: &Option<String>, until: &Option<String>| {
            (since.as_deref().and_then(pack).unwrap_or(0), until.as_deref().and_then(pack).unwrap_or(u32::MAX))
        };
        let above = |file: &str, line: usize, since: &Option<String>, until: &Option<String>, out: &mut Vec<Diagnostic>| {
            for v in since.iter().chain(until.iter()) {
                if pack(v).is_none() {
                    out.push(diag(file, line, format!("bad version `{v}`")));
                }
            }
            if let (Some(s), Some(cur)) = (since.as_deref().and_then(pack), current) {
                if s > cur {
                    let v = since.as_deref().unwrap_or_default();
                    out.push(diag(file, line, format!("since={v} is above the current version {}", unpack(cur))));
                }
            }
        };
        for s in &self.structs {
            above(&s.file, s.line, &s.since, &s.until, &mut out);
        }
        for e in &self.enums {
            for (k, (since, until)) in e.variant_versions.iter().enumerate() {
                above(&e.file, e.line + 1 + k, since, until, &mut out);
            }
        }
        let mut seen: Vec<&Command> = Vec::new();
        for c in &self.commands {
            above(&c.file, c.line, &c.since, &c.until, &mut out);
            let (lo, hi) = window(&c.since, &c.until);
            for r in self.retired.iter().filter(|r| r.code == c.code) {
                let from = r.since.as_deref().and_then(pack).unwrap_or(0);
                if hi >= from {
                    out.push(diag(&c.file, c.line, format!("command `{}` reuses retired code {} (retired at {}:{})", c.name, c.code, r.file, r.line)));
                }
            }
            let overlaps = |o: &&&Command| {
                let (a, b) = window(&o.since, &o.until);
                a <= hi && lo <= b
            };
            if let Some(o) = seen.iter().filter(|o| o.code == c.code).find(overlaps) {
                out.push(diag(&c.file, c.line, format!("duplicate command code {} (first at line {})", c.code, o.line)));
            }
            if let Some(o) = seen.iter().filter(|o| o.name == c.name).find(overlaps) {
                out.push(diag(&c.file, c.line, format!("duplicate command name `{}` (first at line {})", c.name, o.line)));
            }
            for (what, st) in [("request", &c.req), ("response", &c.resp)] {
                if !st.is_empty() && !global.structs.iter().any(|s| &s.name == st) && !global.structs.is_empty() {
                    out.push(diag(&c.file, c.line, format!("command `{}` names unknown {what} struct `{st}`", c.name)));
                }
            }
            seen.push(c);
        }
        for r in &self.retired {
            above(&r.file, r.line, &r.since, &None, &mut out);
        }
        for ex in &self.examples {
            match vectors::parse_ty(global, &ex.name) {
                Some(ty) => match vectors::unhex(&ex.hex) {
                    Some(bytes) => {
                        let mut input = &bytes[..];
                        match vectors::decode(global, &ty, &mut input) {
                            Ok(v) if input.is_empty() => {
                                let mut again = Vec::new();
                                vectors::encode(global, &ty, &v, &mut again);
                                if again != bytes {
                                    out.push(diag(&ex.file, ex.line, format!("example of `{}` does not re-encode to the same bytes", ex.name)));
                                }
                            }
                            Ok(_) => out.push(diag(&ex.file, ex.line, format!("example of `{}` has {} trailing bytes", ex.name, input.len()))),
                            Err(e) => out.push(diag(&ex.file, ex.line, format!("example of `{}` does not decode: {e}", ex.name))),
                        }
                    }
                    None => out.push(diag(&ex.file, ex.line, "example hex is not even-length hex")),
                },
                None => out.push(diag(&ex.file, ex.line, format!("example names unknown struct `{}`", ex.name))),
            }
            if pack(&ex.version).is_none() {
                out.push(diag(&ex.file, ex.line, format!("bad version `{}`", ex.version)));
            }
        }
        let mut codes = BTreeMap::new();
        let mut enames = BTreeMap::new();
        for (c, n, _, line) in &self.errors {
            let f = self.sources.get("errors").cloned().unwrap_or_default();
            if codes.insert(*c, ()).is_some() {
                out.push(diag(&f, *line, format!("duplicate error code {c}")));
            }
            if enames.insert(n.clone(), ()).is_some() {
                out.push(diag(&f, *line, format!("duplicate error name {n}")));
            }
        }
        out
    }
}

fn rust_ty(ty: &str) -> String {
    if let Some(n) = array_len(ty, "bytes") {
        return format!("[u8; {n}]");
    }
    ty.to_string()
}

/// Emits `generated/src/frames.rs` (enums plus fixed structs).
pub fn emit_frames(m: &Model, g: &Model, source: &str) -> String {
    let mut o = header(source);
    o.push_str("#[allow(unused_imports)]\nuse iggy_wire::{WireDecode, WireEncode, WireError};\n\n");
    for e in &m.enums {
        emit_enum(&mut o, e);
    }
    for s in m.structs.iter().filter(|s| s.fixed.is_some()) {
        emit_fixed(&mut o, m, s);
    }
    emit_variable(&mut o, m, g);
    emit_commands(&mut o, m);
    emit_dispatch(&mut o, m, g);
    o
}

fn variant_name(cmd: &str) -> String {
    cmd.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// The `Request` variant of each command row: the command name in CamelCase, suffixed with
/// the `until` version when an earlier row of the same name already took the name with
/// another request struct (`TopicGet` and `TopicGetV0_11_1`).
pub fn request_variants(m: &Model) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, c) in m.commands.iter().enumerate() {
        let mut v = variant_name(&c.name);
        if let Some(prev) = m.commands[..k].iter().position(|p| p.name == c.name) {
            if m.commands[prev].req != c.req {
                let tag = c.until.as_deref().or(c.since.as_deref()).unwrap_or("x").replace('.', "_");
                v = format!("{v}V{tag}");
            }
        }
        out.push(v);
    }
    out
}

/// Emits `Request<'a>` and `decode_request(code, version, body)` for a file with commands.
fn emit_dispatch(o: &mut String, m: &Model, g: &Model) {
    if m.commands.is_empty() {
        return;
    }
    let set = borrowing(g);
    o.push_str("/// A decoded request body, one variant per command.\n#[derive(Debug, Clone, PartialEq, Eq)]\npub enum Request<'a> {\n");
    let names = request_variants(m);
    let mut declared = std::collections::BTreeSet::new();
    let mut arms = Vec::new();
    for (c, v) in m.commands.iter().zip(&names) {
        let since = c.since.as_deref().and_then(pack).unwrap_or(0);
        let until = c.until.as_deref().and_then(pack).unwrap_or(u32::MAX);
        let guard = format!("{} if ({since}..={until}).contains(&version)", c.code);
        match g.structs.iter().find(|s| s.name == c.req) {
            Some(st) => {
                let path = format!("crate::{}::{}", module_of(&st.file), st.name);
                let ty = if set.contains(&st.name) { format!("{path}<'a>") } else { path.clone() };
                if declared.insert(v.clone()) {
                    let _ = writeln!(o, "    /// `{}` ({}).\n    {v}({ty}),", c.name, c.code);
                }
                arms.push(format!("        {guard} => Ok(Request::{v}(<{path}>::decode_exact(body)?)),"));
            }
            None => {
                if declared.insert(v.clone()) {
                    let _ = writeln!(o, "    /// `{}` ({}).\n    {v},", c.name, c.code);
                }
                arms.push(format!("        {guard} => {{ if !body.is_empty() {{ return Err(WireError::TrailingBytes {{ count: body.len() }}); }} Ok(Request::{v}) }}"));
            }
        }
    }
    o.push_str("    #[doc(hidden)]\n    _Borrow(std::marker::PhantomData<&'a ()>),\n}\n");
    o.push_str("/// Decodes the body of command `code` as known to the packed `version`.\n/// Unknown, retired and out-of-version codes are `InvalidValue { field: \"code\" }`.\npub fn decode_request(code: u32, version: u32, body: &[u8]) -> Result<Request<'_>, WireError> {\n    if lookup(code, version).is_none() {\n        return Err(WireError::InvalidValue { field: \"code\" });\n    }\n    match code {\n");
    for a in arms {
        o.push_str(&a);
        o.push('\n');
    }
    o.push_str("        _ => Err(WireError::InvalidValue { field: \"code\" }),\n    }\n}\n");
}

/// Maps a spec type to (Rust type, wire attribute, borrows). `lt` tells which structs borrow.
fn var_ty(m: &Model, ty: &str, lt: &dyn Fn(&str) -> bool) -> Option<(String, String, bool)> {
    if prim_size(ty).is_some() {
        return Some((ty.into(), "plain".into(), false));
    }
    if let Some(n) = array_len(ty, "bytes") {
        return Some((format!("[u8; {n}]"), "plain".into(), false));
    }
    match ty {
        "name" => return Some(("&'a str".into(), "name".into(), true)),
        "rest" => return Some(("&'a [u8]".into(), "rest".into(), true)),
        "string(u8)" | "string(u32)" => return Some(("&'a str".into(), ty.into(), true)),
        "bytes(u8)" | "bytes(u32)" => return Some(("&'a [u8]".into(), ty.into(), true)),
        _ => {}
    }
    if let Some((inner, pad)) = ty.strip_prefix("opt<").and_then(|r| r.strip_suffix(')')?.rsplit_once(">(pad=")) {
        let n: usize = pad.parse().ok()?;
        let (t, a, b) = var_ty(m, inner, lt)?;
        return Some((format!("Option<{t}>"), format!("opt_pad({n}, {a})"), b));
    }
    if let Some(inner) = ty.strip_prefix("opt<").and_then(|r| r.strip_suffix('>')) {
        let (t, a, b) = var_ty(m, inner, lt)?;
        return Some((format!("Option<{t}>"), format!("opt({a})"), b));
    }
    if let Some(inner) = ty.strip_prefix("sized<").and_then(|r| r.strip_suffix(">(u32)")) {
        let (t, a, b) = var_ty(m, inner, lt)?;
        return Some((t, format!("sized({a})"), b));
    }
    if let Some(r) = ty.strip_prefix("vec<") {
        let (inner, kind) = r.rsplit_once(">(")?;
        let kind = kind.strip_suffix(')')?;
        if !matches!(kind, "u32" | "u8" | "rest" | "flag") {
            return None;
        }
        let (t, a, b) = var_ty(m, inner, lt)?;
        return Some((format!("Vec<{t}>"), format!("vec({kind}, {a})"), b));
    }
    if let Some(e) = m.enums.iter().find(|e| e.name == ty) {
        return Some((format!("crate::{}::{ty}", module_of(&e.file)), "plain".into(), false));
    }
    if let Some(s) = m.structs.iter().find(|s| s.name == ty) {
        let b = lt(ty);
        let path = format!("crate::{}::{ty}", module_of(&s.file));
        return Some((if b { format!("{path}<'a>") } else { path }, "plain".into(), b));
    }
    None
}

/// Names of variable structs that need a lifetime (borrow directly or through a nested struct).
fn borrowing(m: &Model) -> std::collections::BTreeSet<String> {
    let mut set = std::collections::BTreeSet::new();
    loop {
        let before = set.len();
        for s in m.structs.iter().filter(|s| s.fixed.is_none()) {
            let borrows = s.fields.iter().any(|f| {
                var_ty(m, &f.ty, &|n| set.contains(n)).is_some_and(|(_, _, b)| b)
            });
            if borrows {
                set.insert(s.name.clone());
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

fn emit_variable(o: &mut String, m: &Model, g: &Model) {
    let set = borrowing(g);
    for s in m.structs.iter().filter(|s| s.fixed.is_none()) {
        let lt = set.contains(&s.name);
        let _ = writeln!(o, "/// Variable-length `{}`.\n#[derive(Debug, Clone, PartialEq, Eq, iggy_wire_derive::Wire)]\npub struct {}{} {{", s.name, s.name, if lt { "<'a>" } else { "" });
        for f in &s.fields {
            let Some((t, a, _)) = var_ty(g, &f.ty, &|n| set.contains(n)) else { continue };
            if !f.doc.is_empty() {
                let _ = writeln!(o, "    /// {}", f.doc);
            }
            let _ = writeln!(o, "    #[wire({a})]\n    pub {}: {t},", f.name);
        }
        o.push_str("}\n");
    }
}

fn header(source: &str) -> String {
    format!("// @generated by cargo codegen from spec/{source}; do not edit.\n#![allow(clippy::all)]\n")
}

fn emit_enum(o: &mut String, e: &Enum) {
    let r = &e.repr;
    let _ = writeln!(o, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]\n#[repr({r})]\npub enum {} {{", e.name);
    for (i, (v, n)) in e.variants.iter().enumerate() {
        if i == 0 {
            o.push_str("    #[default]\n");
        }
        let _ = writeln!(o, "    {n} = {v},");
    }
    o.push_str("}\n");
    let _ = writeln!(o, "impl {} {{\n    /// Every variant, in spec order.\n    pub const ALL: &'static [{0}] = &[{1}];", e.name,
        e.variants.iter().map(|(_, n)| format!("{}::{n}", e.name)).collect::<Vec<_>>().join(", "));
    let _ = writeln!(o, "    /// The variant with this discriminant.\n    pub fn from_repr(v: {r}) -> Option<Self> {{\n        match v {{");
    for (v, n) in &e.variants {
        let _ = writeln!(o, "            {v} => Some(Self::{n}),");
    }
    let _ = writeln!(o, "            _ => None,\n        }}\n    }}\n    /// The discriminant.\n    pub fn to_repr(self) -> {r} {{ self as {r} }}\n}}");
    let _ = writeln!(o, "impl WireEncode for {0} {{\n    fn encoded_size(&self) -> usize {{ std::mem::size_of::<{r}>() }}\n    fn encode_to(&self, out: &mut Vec<u8>) {{ out.extend_from_slice(&(*self as {r}).to_le_bytes()); }}\n}}", e.name);
    let _ = writeln!(o, "impl<'a> WireDecode<'a> for {0} {{\n    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {{\n        let v = <{r}>::decode_from(input)?;\n        Self::from_repr(v).ok_or(WireError::InvalidValue {{ field: \"{0}\" }})\n    }}\n}}", e.name);
    let _ = writeln!(o, "impl iggy_wire::WireJson for {0} {{\n    fn write_json(&self, out: &mut String) {{\n        out.push('\"');\n        out.push_str(match self {{", e.name);
    for (_, n) in &e.variants {
        let _ = writeln!(o, "            Self::{n} => {n:?},");
    }
    o.push_str("        });\n        out.push('\"');\n    }\n}\n\n");
}

fn emit_fixed(o: &mut String, m: &Model, s: &Struct) {
    let size = s.fixed.unwrap();
    let _ = writeln!(o, "/// Fixed-layout `{}`, {size} bytes.\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub struct {} {{", s.name, s.name);
    for f in &s.fields {
        if array_len(&f.ty, "zero").is_some() {
            continue;
        }
        if !f.doc.is_empty() {
            let _ = writeln!(o, "    /// {}", f.doc);
        }
        let _ = writeln!(o, "    pub {}: {},", f.name, rust_ty(&f.ty));
    }
    o.push_str("}\n");
    let _ = writeln!(o, "impl {} {{\n    /// Encoded size in bytes.\n    pub const SIZE: usize = {size};", s.name);
    for f in &s.fields {
        let _ = writeln!(o, "    /// Byte offset of `{}`.\n    pub const {}_OFFSET: usize = {};", f.name, f.name.to_uppercase(), f.offset.unwrap_or(0));
    }
    let _ = writeln!(o, "    /// Decodes from the first `SIZE` bytes of `buf`.\n    pub fn decode_fixed(buf: &[u8]) -> Result<Self, WireError> {{\n        if buf.len() < Self::SIZE {{\n            return Err(WireError::UnexpectedEnd {{ needed: Self::SIZE, remaining: buf.len() }});\n        }}");
    for f in &s.fields {
        let off = f.offset.unwrap_or(0);
        let len = m.fixed_size(&f.ty).unwrap_or(0);
        if array_len(&f.ty, "zero").is_some() {
            let _ = writeln!(o, "        if !iggy_wire::is_zero_at(buf, {off}, {len}) {{ return Err(WireError::NonZeroReserved {{ field: \"{}\" }}); }}", f.name);
        } else if array_len(&f.ty, "bytes").is_some() {
            let _ = writeln!(o, "        let {} = iggy_wire::get_at::<{len}>(buf, {off});", f.name);
        } else {
            let _ = writeln!(o, "        let {0} = <{1}>::decode_exact(&buf[{off}..{off} + {len}]).map_err(|_| WireError::InvalidValue {{ field: \"{0}\" }})?;", f.name, rust_ty(&f.ty));
        }
    }
    let names: Vec<&str> = s.fields.iter().filter(|f| array_len(&f.ty, "zero").is_none()).map(|f| f.name.as_str()).collect();
    let _ = writeln!(o, "        Ok(Self {{ {} }})\n    }}", names.join(", "));
    let _ = writeln!(o, "    /// Encodes into the first `SIZE` bytes of `out` (reserved zero regions are zeroed).\n    pub fn encode_fixed(&self, out: &mut [u8]) {{\n        assert!(out.len() >= Self::SIZE);");
    for f in &s.fields {
        let off = f.offset.unwrap_or(0);
        if let Some(len) = array_len(&f.ty, "zero") {
            let _ = writeln!(o, "        out[{off}..{off} + {len}].fill(0);");
        } else if array_len(&f.ty, "bytes").is_some() {
            let _ = writeln!(o, "        iggy_wire::put_at(out, {off}, &self.{});", f.name);
        } else {
            let _ = writeln!(o, "        iggy_wire::put_at(out, {off}, &self.{}.to_wire_bytes());", f.name);
        }
    }
    let _ = writeln!(o, "    }}\n    /// The `SIZE` encoded bytes.\n    pub fn to_bytes(&self) -> [u8; {size}] {{\n        let mut b = [0u8; {size}];\n        self.encode_fixed(&mut b);\n        b\n    }}\n}}");
    let _ = writeln!(o, "impl Default for {0} {{\n    /// All-zero bytes.\n    fn default() -> Self {{ Self::decode_fixed(&[0u8; {size}]).expect(\"zero bytes decode\") }}\n}}", s.name);
    let _ = writeln!(o, "const _: () = assert!({}::SIZE == {size});", s.name);
    for f in &s.fields {
        let len = m.fixed_size(&f.ty).unwrap_or(0);
        let _ = writeln!(o, "const _: () = assert!({}::{}_OFFSET + {len} <= {size});", s.name, f.name.to_uppercase());
    }
    let _ = writeln!(o, "impl iggy_wire::WireJson for {} {{\n    fn write_json(&self, out: &mut String) {{\n        out.push('{{');", s.name);
    let mut first = true;
    for f in s.fields.iter().filter(|f| array_len(&f.ty, "zero").is_none()) {
        let key = format!("{}\"{}\":", if first { "" } else { "," }, f.name);
        first = false;
        let _ = writeln!(o, "        out.push_str({key:?});\n        iggy_wire::WireJson::write_json(&self.{}, out);", f.name);
    }
    o.push_str("        out.push('}');\n    }\n}\n");
    let _ = writeln!(o, "impl WireEncode for {0} {{\n    fn encoded_size(&self) -> usize {{ {size} }}\n    fn encode_to(&self, out: &mut Vec<u8>) {{ out.extend_from_slice(&self.to_bytes()); }}\n}}\nimpl<'a> WireDecode<'a> for {0} {{\n    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {{\n        let b = iggy_wire::take(input, {size})?;\n        Self::decode_fixed(b)\n    }}\n}}\n", s.name);
}

/// Emits the `commands` table (when the file has command rows) for a module.
pub fn emit_commands(o: &mut String, m: &Model) {
    if m.commands.is_empty() && m.retired.is_empty() {
        return;
    }
    o.push_str("/// One row of the command table.\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub struct CommandInfo {\n    pub code: u32,\n    pub name: &'static str,\n    /// `Operation` variant name sent in the request header.\n    pub operation: &'static str,\n    /// metadata, partition, session or none.\n    pub class: &'static str,\n    /// Whether the reply body starts with a result section.\n    pub result_framed: bool,\n    pub permission: &'static str,\n    pub request: &'static str,\n    pub response: &'static str,\n    /// Packed inclusive version bounds; 0 and u32::MAX when open.\n    pub since: u32,\n    pub until: u32,\n}\n/// Every live command.\npub const COMMANDS: &[CommandInfo] = &[\n");
    for c in &m.commands {
        let since = c.since.as_deref().and_then(pack).unwrap_or(0);
        let until = c.until.as_deref().and_then(pack).unwrap_or(u32::MAX);
        let _ = writeln!(o, "    CommandInfo {{ code: {}, name: {:?}, operation: {:?}, class: {:?}, result_framed: {}, permission: {:?}, request: {:?}, response: {:?}, since: {since}, until: {until} }},", c.code, c.name, c.op, c.class, c.rf, c.perm, c.req, c.resp);
    }
    o.push_str("];\n/// Retired codes (in any version): a spec that gives one to a command from its retirement on is rejected.\npub const RETIRED: &[u32] = &[");
    for r in &m.retired {
        let _ = write!(o, "{}, ", r.code);
    }
    o.push_str("];\n/// `(code, packed version from which it is retired)`; 0 = retired in every version.\npub const RETIRED_SINCE: &[(u32, u32)] = &[");
    for r in &m.retired {
        let _ = write!(o, "({}, {}), ", r.code, r.since.as_deref().and_then(pack).unwrap_or(0));
    }
    o.push_str("];\n/// The command with this code known to the packed `version`, or None (retired, unknown, or outside since/until).\npub fn lookup(code: u32, version: u32) -> Option<&'static CommandInfo> {\n    if RETIRED_SINCE.iter().any(|&(c, since)| c == code && version >= since) {\n        return None;\n    }\n    COMMANDS.iter().find(|c| c.code == code && c.since <= version && version <= c.until)\n}\n");
}

/// Emits `generated/src/protocol.rs`.
pub fn emit_protocol(m: &Model) -> String {
    let mut o = header("protocol.spec");
    o.push_str("/// A protocol version as `major.minor.patch`.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]\npub struct ProtocolVersion { pub major: u32, pub minor: u32, pub patch: u32 }\nimpl ProtocolVersion {\n    /// Packs as `major<<20 | minor<<10 | patch`.\n    pub const fn packed(self) -> u32 { self.major << 20 | self.minor << 10 | self.patch }\n    /// Unpacks a packed u32.\n    pub const fn from_packed(p: u32) -> Self { Self { major: p >> 20, minor: (p >> 10) & 0x3ff, patch: p & 0x3ff } }\n}\nimpl std::fmt::Display for ProtocolVersion {\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, \"{}.{}.{}\", self.major, self.minor, self.patch) }\n}\n");
    let vname = |v: &str| format!("V{}", v.replace('.', "_"));
    let pv = |v: &str| {
        let p: Vec<&str> = v.split('.').collect();
        format!("ProtocolVersion {{ major: {}, minor: {}, patch: {} }}", p[0], p[1], p[2])
    };
    for (v, p) in &m.versions {
        let _ = writeln!(o, "/// Protocol {v}, packed {p:#x}.\npub const {}: ProtocolVersion = {};\nconst _: () = assert!({0}.packed() == {p:#x});", vname(v), pv(v));
    }
    if let Some((v, _)) = m.versions.first() {
        let _ = writeln!(o, "/// The version this server speaks natively.\npub const CURRENT: ProtocolVersion = {};", vname(v));
    }
    o.push_str("/// Inclusive admission windows; each admitted client is served with the codec of the window's max.\npub const ADMISSION: &[(ProtocolVersion, ProtocolVersion)] = &[");
    for (a, b) in &m.ranges {
        let _ = write!(o, "({}, {}), ", pv(a), pv(b));
    }
    o.push_str("];\n/// Admits a packed client version: returns the codec version to speak, or None.\npub fn admit(packed: u32) -> Option<ProtocolVersion> {\n    let v = ProtocolVersion::from_packed(packed);\n    ADMISSION.iter().find(|(lo, hi)| *lo <= v && v <= *hi).map(|(_, hi)| *hi)\n}\n/// Lowest and highest admitted versions (for the eviction window).\npub fn admission_window() -> (ProtocolVersion, ProtocolVersion) {\n    let lo = ADMISSION.iter().map(|r| r.0).min().unwrap();\n    let hi = ADMISSION.iter().map(|r| r.1).max().unwrap();\n    (lo, hi)\n}\n");
    if let Some(s) = &m.storage_marker {
        let _ = writeln!(o, "/// On-disk format marker.\npub const STORAGE_MARKER: &str = {s:?};");
    }
    if let Some(n) = m.snapshot_format {
        let _ = writeln!(o, "/// Snapshot format number.\npub const SNAPSHOT_FORMAT: u32 = {n};");
    }
    for (k, v) in &m.release {
        let _ = writeln!(o, "/// Release identity `{k}`.\npub const RELEASE_{}: &str = {v:?};", k.to_uppercase());
    }
    o
}

/// Emits `generated/src/errors.rs`.
pub fn emit_errors(m: &Model) -> String {
    let mut o = header("errors.spec");
    o.push_str("/// Every wire error code (the u32 in `ReplyHeader.status` and result sections).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\n#[repr(u32)]\npub enum ErrorCode {\n");
    for (c, n, msg, _) in &m.errors {
        let _ = writeln!(o, "    /// {}\n    {n} = {c},", msg.replace('{', "(").replace('}', ")"));
    }
    o.push_str("}\nimpl ErrorCode {\n    /// Every code, in spec order.\n    pub const ALL: &'static [ErrorCode] = &[");
    for (_, n, _, _) in &m.errors {
        let _ = write!(o, "ErrorCode::{n}, ");
    }
    o.push_str("];\n    /// The numeric wire code.\n    pub fn code(self) -> u32 { self as u32 }\n    /// The code with this number.\n    pub fn from_code(code: u32) -> Option<Self> {\n        match code {\n");
    for (c, n, _, _) in &m.errors {
        let _ = writeln!(o, "            {c} => Some(Self::{n}),");
    }
    o.push_str("            _ => None,\n        }\n    }\n    /// The variant name.\n    pub fn name(self) -> &'static str {\n        match self {\n");
    for (_, n, _, _) in &m.errors {
        let _ = writeln!(o, "            Self::{n} => {n:?},");
    }
    o.push_str("        }\n    }\n    /// The message template.\n    pub fn message(self) -> &'static str {\n        match self {\n");
    for (_, n, msg, _) in &m.errors {
        let _ = writeln!(o, "            Self::{n} => {msg:?},");
    }
    o.push_str("        }\n    }\n}\nimpl std::fmt::Display for ErrorCode {\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, \"{} ({})\", self.message(), self.code()) }\n}\n");
    o
}

/// Every spec file parsed: per file, and merged for name resolution.
pub struct Spec {
    pub files: Vec<(String, Model)>,
    pub global: Model,
    pub hash: u64,
}

/// Parses and validates spec files given as `(file name, text)` (names like `payloads.spec`);
/// diagnostics name `spec/<file>:<line>`.
pub fn load(files: &[(String, String)]) -> Result<Spec, Vec<Diagnostic>> {
    let mut files: Vec<&(String, String)> = files.iter().collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut per_file = Vec::new();
    let mut errs = Vec::new();
    let mut hash_input = String::new();
    for (name, text) in &files {
        hash_input.push_str(name);
        hash_input.push_str(text);
        let mut m = Model::default();
        let shown = format!("spec/{name}");
        m.sources.insert("errors".into(), shown.clone());
        if let Err(e) = parse_file(&shown, text, &mut m) {
            errs.extend(e);
        }
        per_file.push((name.to_string(), m));
    }
    let mut global = Model::default();
    for (_, m) in &per_file {
        global.enums.extend(m.enums.iter().cloned());
        global.structs.extend(m.structs.iter().cloned());
        global.versions.extend(m.versions.iter().cloned());
        global.examples.extend(m.examples.iter().cloned());
    }
    // Names must be unique across files too (one namespace in the generated crate's registry).
    let mut seen: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    for (name, file, line) in global
        .structs
        .iter()
        .map(|s| (s.name.as_str(), s.file.as_str(), s.line))
        .chain(global.enums.iter().map(|e| (e.name.as_str(), e.file.as_str(), e.line)))
    {
        if let Some((f0, l0)) = seen.insert(name, (file, line)) {
            if f0 != file {
                errs.push(diag(file, line, format!("duplicate name `{name}` (also at {f0}:{l0})")));
            }
        }
    }
    for (_, m) in &per_file {
        errs.extend(m.validate_with(&global));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(Spec { files: per_file, global, hash: spec_hash(&hash_input) })
}

/// Everything `cargo codegen` writes, keyed by path relative to the workspace root.
pub fn build(files: &[(String, String)]) -> Result<Vec<(String, String)>, Vec<Diagnostic>> {
    let spec = load(files)?;
    let mut out = Vec::new();
    let mut mods = Vec::new();
    for (name, m) in &spec.files {
        let stem = name.trim_end_matches(".spec");
        let text = match stem {
            "protocol" => emit_protocol(m),
            "errors" => emit_errors(m),
            _ => emit_frames(m, &spec.global, name),
        };
        mods.push(stem.to_string());
        out.push((format!("generated/src/{stem}.rs"), text));
    }
    let struct_mods: Vec<String> = spec
        .files
        .iter()
        .filter(|(_, m)| !m.structs.is_empty() || !m.enums.is_empty())
        .map(|(n, _)| n.trim_end_matches(".spec").to_string())
        .collect();
    out.push(("generated/src/registry.rs".into(), emit::registry(&spec.global, "cargo codegen from spec/*.spec")));
    mods.push("registry".into());
    let mut lib = String::from("// @generated by cargo codegen from spec/*.spec; do not edit.\n//! iggy-generated: Rust generated from `spec/` by `cargo codegen`. See README.md.\n");
    for m in &mods {
        let _ = writeln!(lib, "pub mod {m};");
    }
    let _ = writeln!(lib, "/// Hash of every spec file, checked by build.rs.\npub const SPEC_HASH: u64 = {:#x};", spec.hash);
    out.push(("generated/src/lib.rs".into(), lib));
    out.extend(emit::vectors(&spec));
    for emitter in emit::stub_emitters() {
        out.extend(emitter.emit(&spec, &struct_mods));
    }
    Ok(out)
}

/// Reads every `spec/*.spec` file under `root` and returns the outputs keyed by path.
pub fn generate(root: &Path) -> Result<Vec<(PathBuf, String)>, Vec<Diagnostic>> {
    let spec = root.join("spec");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&spec)
        .map_err(|e| vec![diag("spec", 0, e.to_string())])?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "spec"))
        .collect();
    paths.sort();
    let mut files = Vec::new();
    for p in &paths {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(p).map_err(|e| vec![diag(&name, 0, e.to_string())])?;
        files.push((name, text));
    }
    let mut out: Vec<(PathBuf, String)> = build(&files)?.into_iter().map(|(p, t)| (root.join(p), t)).collect();
    if let Some(table) = emit::architecture(root, &files) {
        out.push(table);
    }
    Ok(out)
}

/// FNV-1a over the concatenated spec files (name then text, sorted by name).
pub fn spec_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Compares what `generate` would write with the files on disk; returns the stale paths.
pub fn stale(outputs: &[(PathBuf, String)]) -> Vec<PathBuf> {
    outputs
        .iter()
        .filter(|(p, t)| std::fs::read_to_string(p).ok().as_deref() != Some(t.as_str()))
        .map(|(p, _)| p.clone())
        .collect()
}
