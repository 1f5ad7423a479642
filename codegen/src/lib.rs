//! iggy-codegen: reads `spec/*.spec`, validates, and emits `generated/src/*.rs`.
//!
//! Stages: [`parse`] (nom, one combinator per line kind) fills a [`Model`] per file;
//! [`Model::validate_with`] checks it against every file merged; the emitters write Rust, the
//! conformance vectors and the SDK stubs. Diagnostics name `file:line`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod emit;
pub mod http;
pub mod parse;
pub mod rust;
pub mod rust_stub;
pub mod vectors;

pub use parse::parse_file;
pub use rust::{emit_errors, emit_frames, emit_protocol};
use rust::var_ty;

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
    /// `option` rows: the option catalog, per scope.
    pub options: Vec<OptionRow>,
    /// `route` rows (spec/http.spec).
    pub routes: Vec<http::Route>,
    /// `schema`, `strings` and `alias` rows (spec/http.spec): the JSON shapes of the routes.
    pub schemas: Vec<http::Schema>,
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
/// One `option` row: an option of a scope's catalog (options.describe and validation).
#[derive(Debug, Clone)]
pub struct OptionRow {
    /// A variant of the `OptionsScope` enum.
    pub scope: String,
    pub key: String,
    /// Names the file's `OPTION_KIND_<KIND>` const.
    pub kind: String,
    /// Each names the file's `OPTION_FLAG_<FLAG>` const.
    pub flags: Vec<String>,
    /// The default as written: text for a string kind, `true`/`false`, or a number.
    pub default: String,
    pub description: String,
    pub file: String,
    pub line: usize,
}

impl OptionRow {
    /// The default's value bytes as options carry them (integers little-endian), if it is
    /// one of the kind's.
    pub fn default_bytes(&self) -> Option<Vec<u8>> {
        let number = |text: &str| match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => text.parse::<u64>().ok(),
        };
        match self.kind.as_str() {
            "string" => Some(self.default.as_bytes().to_vec()),
            "bool" => match self.default.as_str() {
                "false" => Some(vec![0]),
                "true" => Some(vec![1]),
                _ => None,
            },
            "uint32" => number(&self.default)
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| n.to_le_bytes().to_vec()),
            "uint64" => number(&self.default).map(|n| n.to_le_bytes().to_vec()),
            _ => None,
        }
    }
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
    /// `scope=journal` of each variant row (parallel to `variants`): a value only this server's
    /// journal holds, never on a client's wire, so vectors checked against the official crates
    /// never draw it.
    pub variant_journal_only: Vec<bool>,
    /// `size=<N>` of each variant row (parallel to `variants`): the exact byte length a value
    /// tagged with this variant has, when the variant fixes one; emitted as `fixed_size`.
    pub variant_sizes: Vec<Option<usize>>,
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

pub(crate) fn prim_size(ty: &str) -> Option<usize> {
    Some(match ty {
        "u8" | "i8" | "bool" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" => 4,
        "u64" | "i64" => 8,
        "u128" | "i128" => 16,
        _ => return None,
    })
}
pub(crate) fn array_len(ty: &str, kind: &str) -> Option<usize> {
    ty.strip_prefix(kind)?.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

impl Model {
    pub(crate) fn fixed_size(&self, ty: &str) -> Option<usize> {
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
            if let (Some(s), Some(cur)) = (since.as_deref().and_then(pack), current)
                && s > cur
            {
                let v = since.as_deref().unwrap_or_default();
                out.push(diag(file, line, format!("since={v} is above the current version {}", unpack(cur))));
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
        let mut consts: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &self.consts {
            if let Some(first) = consts.insert(c.name.as_str(), c.line) {
                out.push(diag(&c.file, c.line, format!("duplicate const `{}` (first at line {first})", c.name)));
            }
            if let Some(problem) = const_problem(c) {
                out.push(diag(&c.file, c.line, format!("const `{}`: {problem}", c.name)));
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
        out.extend(self.validate_options(global));
        out
    }

    /// `option` rows: a known scope, kind and flags (consts of the same file), a default of
    /// the kind, and each key once per scope.
    fn validate_options(&self, global: &Model) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let scopes = global.enums.iter().find(|e| e.name == "OptionsScope");
        let has_const = |name: &str| self.consts.iter().any(|c| c.name == name);
        let mut keys: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for o in &self.options {
            let mut bad = |message: String| out.push(diag(&o.file, o.line, message));
            if !scopes.is_some_and(|e| e.variants.iter().any(|(_, v)| *v == o.scope)) {
                bad(format!("option scope `{}` is not an OptionsScope variant", o.scope));
            }
            let kind = format!("OPTION_KIND_{}", o.kind.to_uppercase());
            if !has_const(&kind) {
                bad(format!("option kind `{}`: no const {kind} in this file", o.kind));
            } else if o.default_bytes().is_none() {
                bad(format!("default `{}` is not a {} value", o.default, o.kind));
            }
            for flag in &o.flags {
                let flag = format!("OPTION_FLAG_{}", flag.to_uppercase());
                if !has_const(&flag) {
                    bad(format!("option flag: no const {flag} in this file"));
                }
            }
            if let Some(first) = keys.insert((o.scope.as_str(), o.key.as_str()), o.line) {
                bad(format!("duplicate option `{}` in scope {} (first at line {first})", o.key, o.scope));
            }
        }
        out
    }
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
        if let Some(prev) = m.commands[..k].iter().position(|p| p.name == c.name)
            && m.commands[prev].req != c.req
        {
            let tag = c.until.as_deref().or(c.since.as_deref()).unwrap_or("x").replace('.', "_");
            v = format!("{v}V{tag}");
        }
        out.push(v);
    }
    out
}

/// Names of variable structs that need a lifetime (borrow directly or through a nested struct).
pub(crate) fn borrowing(m: &Model) -> std::collections::BTreeSet<String> {
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

/// What is wrong with a `const` row, if anything: its type is an integer type (the value a
/// decimal or `0x` hex number that fits), `string` (a quoted value) or `bytes[N]` (a quoted
/// value of exactly N ASCII bytes).
fn const_problem(c: &Const) -> Option<String> {
    if c.ty == "string" {
        return (!c.text).then(|| "a string value is quoted".into());
    }
    if let Some(n) = array_len(&c.ty, "bytes") {
        return match (c.text, c.value.len() == n && c.value.is_ascii()) {
            (true, true) => None,
            _ => Some(format!("a bytes[{n}] value is {n} quoted ASCII characters")),
        };
    }
    let Some(size) = prim_size(&c.ty).filter(|_| c.ty != "bool") else {
        return Some(format!("unknown type `{}` (an integer type, string or bytes[N])", c.ty));
    };
    let parsed = match c.value.strip_prefix("0x") {
        Some(h) => u128::from_str_radix(h, 16).ok(),
        None => c.value.parse::<u128>().ok(),
    };
    let bits = if c.ty.starts_with('i') { size * 8 - 1 } else { size * 8 };
    match parsed {
        Some(v) if c.text => Some(format!("an integer value is not quoted ({v})")),
        Some(v) if bits >= 128 || v >> bits == 0 => None,
        _ => Some(format!("`{}` is not a {} value", c.value, c.ty)),
    }
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
        if let Some((f0, l0)) = seen.insert(name, (file, line))
            && f0 != file
        {
            errs.push(diag(file, line, format!("duplicate name `{name}` (also at {f0}:{l0})")));
        }
    }
    for (_, m) in &per_file {
        errs.extend(m.validate_with(&global));
    }
    let commands: Vec<&Command> = per_file.iter().flat_map(|(_, m)| m.commands.iter()).collect();
    for (_, m) in &per_file {
        errs.extend(http::validate(&m.routes, &commands));
    }
    let schemas: Vec<&http::Schema> = per_file.iter().flat_map(|(_, m)| m.schemas.iter()).collect();
    let routes: Vec<&http::Route> = per_file.iter().flat_map(|(_, m)| m.routes.iter()).collect();
    errs.extend(http::validate_schemas(&schemas, &routes));
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
            "http" => http::emit_routes(m, name),
            _ => emit_frames(m, &spec.global, name),
        };
        mods.push(stem.to_string());
        out.push((format!("generated/src/{stem}.rs"), text));
    }
    out.push(("generated/src/registry.rs".into(), rust::registry(&spec.global, "cargo codegen from spec/*.spec")));
    mods.push("registry".into());
    let lib = rust::emit_lib(&mods, spec.hash);
    out.push(("generated/src/lib.rs".into(), lib));
    let routes: Vec<&http::Route> = spec.files.iter().flat_map(|(_, m)| m.routes.iter()).collect();
    if !routes.is_empty() {
        let schemas: Vec<&http::Schema> = spec.files.iter().flat_map(|(_, m)| m.schemas.iter()).collect();
        out.push(("generated/openapi.json".into(), http::openapi(&routes, &schemas, &spec.global)));
    }
    out.extend(emit::vectors(&spec));
    for emitter in emit::stub_emitters() {
        out.extend(emitter.emit(&spec));
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
