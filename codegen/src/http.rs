//! The HTTP route table (`route` rows of spec/http.spec): validation against the command rows,
//! the Rust table the server routes by, and the OpenAPI 3.1 document.
use crate::rust::{file, from_spec, num};
use crate::{Command, Diagnostic, Model, diag};
use quote::quote;
use std::fmt::Write as _;

/// One `route` row.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: String,
    pub path: String,
    /// A command row's name, or `http.<name>` for what the HTTP layer answers itself.
    pub command: String,
    pub status: u16,
    /// Served without a bearer token.
    pub public: bool,
    /// The JSON request body (`req=`).
    pub req: Option<JsonType>,
    /// The JSON success body (`resp=`); none for an empty reply.
    pub resp: Option<JsonType>,
    /// `param` rows: types of `{name}` segments (the others are strings).
    pub params: Vec<Param>,
    /// `query` rows, in spec order.
    pub query: Vec<Param>,
    pub file: String,
    pub line: usize,
}

/// A `param` or `query` row under a route.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub ty: JsonType,
    /// Query rows only: the request must carry it.
    pub required: bool,
    pub doc: String,
    pub line: usize,
}

/// A JSON type of spec/http.spec (legend in spec/FORMAT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonType {
    String,
    Bool,
    /// A float.
    Number,
    /// An integer of `bits` width.
    Int {
        signed: bool,
        bits: u8,
    },
    /// Standard padded base64 text.
    Base64,
    Any,
    /// An `application/zip` body (a route's `resp=` only).
    Zip,
    Array(Box<JsonType>),
    /// An object with string keys.
    Map(Box<JsonType>),
    /// The type or null.
    Nullable(Box<JsonType>),
    /// Exactly one of the types.
    OneOf(Vec<JsonType>),
    /// A `schema` or `strings` name.
    Named(String),
}

/// A `schema` block or a `strings` row.
#[derive(Debug, Clone)]
pub struct Schema {
    pub name: String,
    pub body: SchemaBody,
    pub doc: String,
    pub file: String,
    pub line: usize,
}

#[derive(Debug, Clone)]
pub enum SchemaBody {
    /// An object: its fields, and the type of keys beyond them (none: no other key).
    Object {
        fields: Vec<SchemaField>,
        extra: Option<JsonType>,
    },
    /// A string, one of the values.
    Strings(Vec<String>),
    /// A name for a type (`alias` row).
    Alias(JsonType),
}

/// A field row of a `schema` block.
#[derive(Debug, Clone)]
pub struct SchemaField {
    pub name: String,
    pub ty: JsonType,
    /// The key may be absent.
    pub optional: bool,
    pub doc: String,
    pub line: usize,
}

/// Parses a JSON type expression (`array<Topic>`, `u32?`, `bool|u64|string`).
pub fn parse_type(text: &str) -> Option<JsonType> {
    use nom::Parser;
    use nom::branch::alt;
    use nom::bytes::complete::{tag, take_while1};
    use nom::combinator::{all_consuming, map, opt};
    use nom::multi::separated_list1;
    use nom::sequence::delimited;
    type Res<'a> = nom::IResult<&'a str, JsonType>;
    fn union(i: &str) -> Res<'_> {
        map(separated_list1(tag("|"), term), |mut v| {
            if v.len() == 1 {
                v.remove(0)
            } else {
                JsonType::OneOf(v)
            }
        })
        .parse(i)
    }
    fn term(i: &str) -> Res<'_> {
        map((base, opt(tag("?"))), |(t, q)| {
            if q.is_some() {
                JsonType::Nullable(Box::new(t))
            } else {
                t
            }
        })
        .parse(i)
    }
    fn base(i: &str) -> Res<'_> {
        alt((
            map(delimited(tag("array<"), union, tag(">")), |t| {
                JsonType::Array(Box::new(t))
            }),
            map(delimited(tag("map<"), union, tag(">")), |t| {
                JsonType::Map(Box::new(t))
            }),
            map(
                take_while1(|c: char| c.is_ascii_alphanumeric() || c == '_'),
                scalar,
            ),
        ))
        .parse(i)
    }
    fn scalar(name: &str) -> JsonType {
        let int = |signed: bool, bits: &str| match bits.parse::<u8>() {
            Ok(bits @ (8 | 16 | 32 | 64 | 128)) => Some(JsonType::Int { signed, bits }),
            _ => None,
        };
        match name {
            "string" => JsonType::String,
            "bool" => JsonType::Bool,
            "number" => JsonType::Number,
            "base64" => JsonType::Base64,
            "any" => JsonType::Any,
            "zip" => JsonType::Zip,
            _ => None
                .or_else(|| name.strip_prefix('u').and_then(|b| int(false, b)))
                .or_else(|| name.strip_prefix('i').and_then(|b| int(true, b)))
                .unwrap_or_else(|| JsonType::Named(name.to_string())),
        }
    }
    all_consuming(union).parse(text).ok().map(|(_, t)| t)
}

impl JsonType {
    /// Every type this one contains, itself first.
    fn walk<'t>(&'t self, out: &mut Vec<&'t JsonType>) {
        out.push(self);
        match self {
            JsonType::Array(t) | JsonType::Map(t) | JsonType::Nullable(t) => t.walk(out),
            JsonType::OneOf(ts) => ts.iter().for_each(|t| t.walk(out)),
            _ => {}
        }
    }

    fn names(&self) -> Vec<&str> {
        let mut all = Vec::new();
        self.walk(&mut all);
        all.into_iter()
            .filter_map(|t| match t {
                JsonType::Named(n) => Some(n.as_str()),
                _ => None,
            })
            .collect()
    }

    fn has_zip(&self) -> bool {
        let mut all = Vec::new();
        self.walk(&mut all);
        all.iter().any(|t| **t == JsonType::Zip)
    }
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE"];
const HTTP_ONLY: &str = "http.";

/// The command row a route runs: the current protocol's (no `until`).
fn command_of<'c>(route: &Route, commands: &[&'c Command]) -> Option<&'c Command> {
    commands
        .iter()
        .copied()
        .find(|c| c.name == route.command && c.until.is_none())
}

/// Path parameters of a template, in order: `{stream_id}` → `stream_id`.
pub fn parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

/// Checks the schemas: unique names and fields, every named type declared, no `zip` inside one,
/// and every schema reached from some route.
pub fn validate_schemas(schemas: &[&Schema], routes: &[&Route]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let known = |name: &str| schemas.iter().any(|s| s.name == name);
    let check_type = |ty: &JsonType, file: &str, line: usize, out: &mut Vec<Diagnostic>| {
        for name in ty.names() {
            if !known(name) {
                out.push(diag(
                    file,
                    line,
                    format!("unknown JSON type `{name}` (no `schema` or `strings` of that name)"),
                ));
            }
        }
    };
    for (k, s) in schemas.iter().enumerate() {
        if s.name == "Error" {
            out.push(diag(
                &s.file,
                s.line,
                "`Error` is the refusal body's schema, written by codegen",
            ));
        }
        if let Some(first) = schemas[..k].iter().find(|o| o.name == s.name) {
            out.push(diag(
                &s.file,
                s.line,
                format!(
                    "schema `{}` duplicates {}:{}",
                    s.name, first.file, first.line
                ),
            ));
        }
        match &s.body {
            SchemaBody::Object { fields, extra } => {
                for (j, f) in fields.iter().enumerate() {
                    if fields[..j].iter().any(|o| o.name == f.name) {
                        out.push(diag(
                            &s.file,
                            f.line,
                            format!("field `{}` given twice in schema `{}`", f.name, s.name),
                        ));
                    }
                    if f.ty.has_zip() {
                        out.push(diag(&s.file, f.line, "`zip` is a route's resp= only"));
                    }
                    check_type(&f.ty, &s.file, f.line, &mut out);
                }
                if let Some(extra) = extra {
                    check_type(extra, &s.file, s.line, &mut out);
                }
            }
            SchemaBody::Alias(ty) => {
                if ty.has_zip() {
                    out.push(diag(&s.file, s.line, "`zip` is a route's resp= only"));
                }
                check_type(ty, &s.file, s.line, &mut out);
            }
            SchemaBody::Strings(values) => {
                for (j, v) in values.iter().enumerate() {
                    if values[..j].contains(v) {
                        out.push(diag(
                            &s.file,
                            s.line,
                            format!("value `{v}` given twice in strings `{}`", s.name),
                        ));
                    }
                }
            }
        }
    }
    // Reachability: a schema no route reaches is dead text that could drift unnoticed.
    let mut reached: Vec<&str> = Vec::new();
    let mut todo: Vec<&str> = routes
        .iter()
        .flat_map(|r| {
            r.req
                .iter()
                .chain(r.resp.iter())
                .chain(r.params.iter().chain(r.query.iter()).map(|p| &p.ty))
                .flat_map(JsonType::names)
        })
        .collect();
    while let Some(name) = todo.pop() {
        if reached.contains(&name) {
            continue;
        }
        reached.push(name);
        match schemas.iter().find(|s| s.name == name).map(|s| &s.body) {
            Some(SchemaBody::Object { fields, extra }) => {
                todo.extend(fields.iter().flat_map(|f| f.ty.names()));
                todo.extend(extra.iter().flat_map(JsonType::names));
            }
            Some(SchemaBody::Alias(ty)) => todo.extend(ty.names()),
            _ => {}
        }
    }
    for s in schemas {
        if !reached.contains(&s.name.as_str()) {
            out.push(diag(
                &s.file,
                s.line,
                format!("schema `{}` is used by no route", s.name),
            ));
        }
    }
    for r in routes {
        for ty in r.req.iter().chain(r.resp.iter()) {
            check_type(ty, &r.file, r.line, &mut out);
        }
        for p in r.params.iter().chain(r.query.iter()) {
            check_type(&p.ty, &r.file, p.line, &mut out);
            // A parameter is text in a URL: a scalar or a `strings` name.
            let scalar = match &p.ty {
                JsonType::String | JsonType::Bool | JsonType::Int { .. } => true,
                JsonType::Named(n) => schemas
                    .iter()
                    .any(|s| &s.name == n && matches!(s.body, SchemaBody::Strings(_))),
                _ => false,
            };
            if !scalar {
                out.push(diag(
                    &r.file,
                    p.line,
                    format!(
                        "parameter `{}`: a string, bool, integer or `strings` type",
                        p.name
                    ),
                ));
            }
        }
    }
    out
}

/// Checks methods, paths, statuses, command names, bodies, parameters and that no two routes
/// collide.
pub fn validate(routes: &[Route], commands: &[&Command]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (k, r) in routes.iter().enumerate() {
        let mut fail = |m: String| out.push(diag(&r.file, r.line, m));
        if r.status == 204 && r.resp.is_some() {
            fail("a 204 route has no resp=".to_string());
        }
        if matches!(r.method.as_str(), "GET" | "DELETE") && r.req.is_some() {
            fail(format!(
                "a {} route has no req= (no request body)",
                r.method
            ));
        }
        if r.req.as_ref().is_some_and(JsonType::has_zip)
            || r.resp
                .as_ref()
                .is_some_and(|t| t.has_zip() && *t != JsonType::Zip)
        {
            fail("`zip` is a whole resp= only".to_string());
        }
        let segments = parameters(&r.path);
        for (j, name) in segments.iter().enumerate() {
            if segments[..j].contains(name) {
                fail(format!("path parameter `{{{name}}}` appears twice"));
            }
        }
        for (j, p) in r.params.iter().enumerate() {
            if !segments.contains(&p.name.as_str()) {
                out.push(diag(
                    &r.file,
                    p.line,
                    format!("param `{}` is not a `{{}}` segment of {}", p.name, r.path),
                ));
            }
            if r.params[..j].iter().any(|o| o.name == p.name) {
                out.push(diag(
                    &r.file,
                    p.line,
                    format!("param `{}` given twice", p.name),
                ));
            }
        }
        for (j, q) in r.query.iter().enumerate() {
            if segments.contains(&q.name.as_str()) || r.query[..j].iter().any(|o| o.name == q.name)
            {
                out.push(diag(
                    &r.file,
                    q.line,
                    format!("query `{}` repeats a parameter of the route", q.name),
                ));
            }
        }
        let mut fail = |m: String| out.push(diag(&r.file, r.line, m));
        if !METHODS.contains(&r.method.as_str()) {
            fail(format!(
                "method `{}`: expected one of {}",
                r.method,
                METHODS.join(", ")
            ));
        }
        if !r.path.starts_with('/')
            || r.path.contains("//")
            || (r.path.len() > 1 && r.path.ends_with('/'))
        {
            fail(format!(
                "path `{}` must start with `/` and have no empty segment",
                r.path
            ));
        }
        for segment in r.path.split('/').skip(1) {
            let inner = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
            let ok = match inner {
                Some(name) => {
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                }
                None => !segment.contains(['{', '}']),
            };
            if !ok {
                fail(format!(
                    "path segment `{segment}`: a parameter is `{{lowercase_name}}`, alone in its segment"
                ));
            }
        }
        if !(200..300).contains(&r.status) {
            fail(format!(
                "status={}: a route's success status is 2xx",
                r.status
            ));
        }
        if !r.command.starts_with(HTTP_ONLY) && command_of(r, commands).is_none() {
            fail(format!(
                "route names unknown command `{}` (a command row's name or `http.<name>`)",
                r.command
            ));
        }
        // Two templates collide when every segment pair is equal or one of them a parameter.
        let shape = |p: &str| {
            p.split('/')
                .map(|s| {
                    if s.starts_with('{') {
                        "{}".to_string()
                    } else {
                        s.to_string()
                    }
                })
                .collect::<Vec<_>>()
        };
        if let Some(first) = routes[..k]
            .iter()
            .find(|o| o.method == r.method && shape(&o.path) == shape(&r.path))
        {
            fail(format!(
                "route {} {} duplicates line {}",
                r.method, r.path, first.line
            ));
        }
    }
    out
}

/// `generated/src/http.rs`: the route table, in spec order.
pub fn emit_routes(m: &Model, source: &str) -> String {
    let rows = m.routes.iter().map(|r| {
        let (method, path, command, status, public) = (&r.method, &r.path, &r.command, num(r.status), r.public);
        let at = format!("{}:{}", r.file, r.line);
        quote! {
            Route { method: #method, path: #path, command: #command, status: #status, public: #public, declared_at: #at },
        }
    });
    file(
        &from_spec(source),
        quote! {
            //! The HTTP REST route table. A route's command is a `commands::COMMANDS` name, or
            //! `http.<name>` for what the HTTP layer answers itself.
            /// One route: method, path template (`{name}` is one segment), the command it runs,
            /// its success status, and whether it needs a bearer token.
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub struct Route {
                pub method: &'static str,
                pub path: &'static str,
                pub command: &'static str,
                pub status: u16,
                pub public: bool,
                pub declared_at: &'static str,
            }
            /// Every route, in spec order.
            pub const ROUTES: &[Route] = &[#(#rows)*];
            /// The OpenAPI 3.1 document of [`ROUTES`] (`generated/openapi.json`).
            pub const OPENAPI_JSON: &str = include_str!("../openapi.json");
        },
    )
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
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
    out
}

/// The JSON Schema of a type (JSON Schema 2020-12, as OpenAPI 3.1 takes it), on one line.
pub fn type_schema(ty: &JsonType) -> String {
    match ty {
        JsonType::String => r#"{"type": "string"}"#.into(),
        JsonType::Bool => r#"{"type": "boolean"}"#.into(),
        JsonType::Number => r#"{"type": "number"}"#.into(),
        JsonType::Int { signed, bits } => {
            let (min, max) = if *signed {
                (
                    format!("-{}", 1u128 << (bits - 1)),
                    ((1u128 << (bits - 1)) - 1).to_string(),
                )
            } else {
                (
                    "0".to_string(),
                    (u128::MAX >> (128 - u32::from(*bits))).to_string(),
                )
            };
            let format = format!("{}int{bits}", if *signed { "" } else { "u" });
            format!(
                r#"{{"type": "integer", "format": "{format}", "minimum": {min}, "maximum": {max}}}"#
            )
        }
        JsonType::Base64 => r#"{"type": "string", "contentEncoding": "base64"}"#.into(),
        JsonType::Any => "{}".into(),
        JsonType::Zip => r#"{"type": "string", "contentMediaType": "application/zip"}"#.into(),
        JsonType::Array(t) => format!(r#"{{"type": "array", "items": {}}}"#, type_schema(t)),
        JsonType::Map(t) => format!(
            r#"{{"type": "object", "additionalProperties": {}}}"#,
            type_schema(t)
        ),
        // A scalar's null joins its type list; anything else is one of it or null.
        JsonType::Nullable(t) => match type_schema(t).strip_prefix(r#"{"type": ""#) {
            Some(rest) if !matches!(**t, JsonType::Array(_) | JsonType::Map(_)) => {
                let (name, rest) = rest.split_once('"').unwrap_or((rest, ""));
                format!(r#"{{"type": ["{name}", "null"]{rest}"#)
            }
            _ => format!(r#"{{"oneOf": [{}, {{"type": "null"}}]}}"#, type_schema(t)),
        },
        JsonType::OneOf(ts) => {
            format!(
                r#"{{"oneOf": [{}]}}"#,
                ts.iter().map(type_schema).collect::<Vec<_>>().join(", ")
            )
        }
        JsonType::Named(n) => format!(r##"{{"$ref": "#/components/schemas/{n}"}}"##),
    }
}

/// A schema with a `description` added (a sibling of `$ref` is allowed in OpenAPI 3.1).
fn described(schema: String, doc: &str) -> String {
    if doc.is_empty() {
        return schema;
    }
    let inner = schema
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or("");
    let sep = if inner.is_empty() { "" } else { ", " };
    format!("{{{inner}{sep}\"description\": {}}}", json_string(doc))
}

/// A `components/schemas` entry, on one line.
fn component(s: &Schema) -> String {
    let body = match &s.body {
        SchemaBody::Alias(ty) => type_schema(ty),
        SchemaBody::Strings(values) => {
            let values: Vec<String> = values.iter().map(|v| json_string(v)).collect();
            format!(r#"{{"type": "string", "enum": [{}]}}"#, values.join(", "))
        }
        SchemaBody::Object { fields, extra } => {
            let required: Vec<String> = fields
                .iter()
                .filter(|f| !f.optional)
                .map(|f| json_string(&f.name))
                .collect();
            let properties: Vec<String> = fields
                .iter()
                .map(|f| {
                    format!(
                        "{}: {}",
                        json_string(&f.name),
                        described(type_schema(&f.ty), &f.doc)
                    )
                })
                .collect();
            let extra = extra.as_ref().map_or("false".to_string(), type_schema);
            // An empty `required` is left out (OpenAPI 3.0 tools reject it).
            let required = if required.is_empty() {
                String::new()
            } else {
                format!(r#", "required": [{}]"#, required.join(", "))
            };
            format!(
                r#"{{"type": "object"{required}, "properties": {{{}}}, "additionalProperties": {extra}}}"#,
                properties.join(", ")
            )
        }
    };
    described(body, &s.doc)
}

/// The content map of a body: JSON, or a zip file.
fn content(ty: &JsonType) -> String {
    let media = if *ty == JsonType::Zip {
        "application/zip"
    } else {
        "application/json"
    };
    format!(r#"{{"{media}": {{"schema": {}}}}}"#, type_schema(ty))
}

/// `<command>_<method>`, unique in the document: a command several routes run (resource.update)
/// takes the path's literal segments after it.
fn operation_id(r: &Route, routes: &[&Route]) -> String {
    let base = format!(
        "{}_{}",
        r.command.replace('.', "_"),
        r.method.to_lowercase()
    );
    if routes
        .iter()
        .filter(|o| o.command == r.command && o.method == r.method)
        .count()
        == 1
    {
        return base;
    }
    let literal: Vec<String> = r
        .path
        .split('/')
        .filter(|s| !s.is_empty() && !s.starts_with('{'))
        .map(|s| s.replace(['-', '.'], "_"))
        .collect();
    format!("{base}_{}", literal.join("_"))
}

/// What a `{name}` segment without a `param` row is.
const IDENTIFIER_DOC: &str = "an Identifier: digits are a numeric id, anything else a name";

/// `generated/openapi.json`: OpenAPI 3.1, one operation per route, grouped by path in spec order,
/// with each route's parameters, request and reply bodies, and the schemas in spec order.
pub fn openapi(routes: &[&Route], schemas: &[&Schema], global: &Model) -> String {
    // The API is the current protocol's.
    let version = global.versions.first().map_or("0.0.0", |(v, _)| v.as_str());
    let mut paths: Vec<(&str, Vec<&Route>)> = Vec::new();
    for r in routes {
        match paths.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, list)) => list.push(r),
            None => paths.push((&r.path, vec![r])),
        }
    }
    let mut o = String::new();
    o.push_str("{\n  \"openapi\": \"3.1.0\",\n");
    let _ = writeln!(
        o,
        "  \"info\": {{\"title\": \"Iggy HTTP API\", \"version\": {}}},",
        json_string(version)
    );
    o.push_str("  \"security\": [{\"bearer\": []}],\n  \"paths\": {\n");
    for (i, (path, list)) in paths.iter().enumerate() {
        let _ = writeln!(o, "    {}: {{", json_string(path));
        for (j, r) in list.iter().enumerate() {
            let what = if r.command.starts_with(HTTP_ONLY) {
                "answered by the HTTP layer".to_string()
            } else {
                format!("runs command `{}`", r.command)
            };
            let _ = writeln!(o, "      {}: {{", json_string(&r.method.to_lowercase()));
            let _ = writeln!(
                o,
                "        \"operationId\": {},",
                json_string(&operation_id(r, routes))
            );
            let _ = writeln!(
                o,
                "        \"summary\": {},",
                json_string(&format!("{} {}: {what}", r.method, r.path))
            );
            if r.public {
                o.push_str("        \"security\": [],\n");
            }
            let mut rendered: Vec<String> = parameters(&r.path)
                .iter()
                .map(|p| {
                    let (ty, doc) = match r.params.iter().find(|d| d.name == *p) {
                        Some(d) => (type_schema(&d.ty), d.doc.as_str()),
                        None => (type_schema(&JsonType::String), IDENTIFIER_DOC),
                    };
                    let doc = if doc.is_empty() { String::new() } else { format!(", \"description\": {}", json_string(doc)) };
                    format!("{{\"name\": {}, \"in\": \"path\", \"required\": true{doc}, \"schema\": {ty}}}", json_string(p))
                })
                .collect();
            rendered.extend(r.query.iter().map(|q| {
                let doc = if q.doc.is_empty() {
                    String::new()
                } else {
                    format!(", \"description\": {}", json_string(&q.doc))
                };
                format!(
                    "{{\"name\": {}, \"in\": \"query\", \"required\": {}{doc}, \"schema\": {}}}",
                    json_string(&q.name),
                    q.required,
                    type_schema(&q.ty)
                )
            }));
            if !rendered.is_empty() {
                let _ = writeln!(
                    o,
                    "        \"parameters\": [\n          {}\n        ],",
                    rendered.join(",\n          ")
                );
            }
            if let Some(req) = &r.req {
                let _ = writeln!(
                    o,
                    "        \"requestBody\": {{\"required\": true, \"content\": {}}},",
                    content(req)
                );
            }
            o.push_str("        \"responses\": {\n");
            match &r.resp {
                Some(resp) => {
                    let _ = writeln!(
                        o,
                        "          \"{}\": {{\"description\": \"success\", \"content\": {}}},",
                        r.status,
                        content(resp)
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "          \"{}\": {{\"description\": \"success\"}},",
                        r.status
                    );
                }
            }
            o.push_str(
                "          \"4XX\": {\"$ref\": \"#/components/responses/Error\"}\n        }\n",
            );
            o.push_str(if j + 1 == list.len() {
                "      }\n"
            } else {
                "      },\n"
            });
        }
        o.push_str(if i + 1 == paths.len() {
            "    }\n"
        } else {
            "    },\n"
        });
    }
    o.push_str("  },\n  \"components\": {\n");
    o.push_str("    \"securitySchemes\": {\"bearer\": {\"type\": \"http\", \"scheme\": \"bearer\", \"bearerFormat\": \"JWT\"}},\n");
    o.push_str("    \"responses\": {\"Error\": {\"description\": \"refused\", \"content\": {\"application/json\": {\"schema\": {\"$ref\": \"#/components/schemas/Error\"}}}}},\n");
    o.push_str("    \"schemas\": {\n");
    o.push_str("      \"Error\": {\"type\": \"object\", \"required\": [\"id\", \"code\", \"reason\"], \"properties\": {\"id\": {\"type\": \"integer\"}, \"code\": {\"type\": \"string\"}, \"reason\": {\"type\": \"string\"}, \"field\": {\"type\": [\"string\", \"null\"]}}}");
    for s in schemas {
        let _ = write!(o, ",\n      {}: {}", json_string(&s.name), component(s));
    }
    o.push_str("\n    }\n  }\n}\n");
    o
}

#[cfg(test)]
mod tests {
    fn load(routes: &str) -> Result<crate::Spec, Vec<crate::Diagnostic>> {
        let commands = "command 1 ping op=NonReplicated class=none rf=no perm=none\n";
        crate::load(&[
            ("commands.spec".into(), commands.into()),
            ("http.spec".into(), routes.into()),
        ])
    }

    fn messages(routes: &str) -> Vec<String> {
        load(routes)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.to_string())
            .collect()
    }

    #[test]
    fn routes_must_name_a_command_and_not_collide() {
        assert!(load("route GET /ping ping status=200 auth=public\nroute GET /openapi.json http.openapi status=200\n").is_ok());
        let unknown = messages("route GET /x pong status=200\n");
        assert!(
            unknown
                .iter()
                .any(|m| m.contains("spec/http.spec:1") && m.contains("unknown command `pong`")),
            "{unknown:?}"
        );
        let collide =
            messages("route GET /a/{id} ping status=200\nroute GET /a/{name} ping status=200\n");
        assert!(
            collide.iter().any(|m| m.contains("duplicates line 1")),
            "{collide:?}"
        );
        let bad = messages(
            "route FETCH /a ping status=200\nroute GET /b ping status=404\nroute GET /c/x{y} ping status=200\n",
        );
        assert_eq!(bad.len(), 3, "{bad:?}");
    }

    #[test]
    fn json_types_parse() {
        use super::{JsonType as T, parse_type};
        assert_eq!(
            parse_type("u32"),
            Some(T::Int {
                signed: false,
                bits: 32
            })
        );
        assert_eq!(
            parse_type("i128?"),
            Some(T::Nullable(Box::new(T::Int {
                signed: true,
                bits: 128
            })))
        );
        assert_eq!(
            parse_type("array<Topic>|base64"),
            Some(T::OneOf(vec![
                T::Array(Box::new(T::Named("Topic".into()))),
                T::Base64
            ]))
        );
        assert_eq!(
            parse_type("map<bool|string>?"),
            Some(T::Nullable(Box::new(T::Map(Box::new(T::OneOf(vec![
                T::Bool,
                T::String
            ]))))))
        );
        assert_eq!(parse_type("array<u32"), None);
        assert_eq!(parse_type("u"), Some(T::Named("u".into())));
    }

    #[test]
    fn schemas_and_parameters_are_checked() {
        let ok = "schema A\n  n u32\n  b B? optional\nend\nstrings B x y\nroute GET /a/{id} ping status=200 resp=array<A>\n  param id u32\n  query kind B required\n";
        assert!(load(ok).is_ok(), "{:?}", messages(ok));
        let cases = [
            (
                "route GET /a ping status=200 resp=Missing\n",
                "unknown JSON type `Missing`",
            ),
            (
                "schema A\n  n u32\nend\nroute GET /a ping status=200\n",
                "schema `A` is used by no route",
            ),
            (
                "route GET /a/{id} ping status=200\n  param other u32\n",
                "param `other` is not a `{}` segment",
            ),
            (
                "route GET /a/{id} ping status=200\n  query id u32\n",
                "query `id` repeats a parameter",
            ),
            (
                "route DELETE /a ping status=204 resp=string\n",
                "a 204 route has no resp=",
            ),
            (
                "route GET /a ping status=200 req=string\n",
                "a GET route has no req=",
            ),
            (
                "schema A\n  n u32\nend\nroute GET /a ping status=200\n  query q A\n",
                "parameter `q`: a string",
            ),
            (
                "schema A\n  n u32\n  n u8\nend\nroute GET /a ping status=200 resp=A\n",
                "field `n` given twice",
            ),
            (
                "route GET /a ping status=200 resp=array<zip>\n",
                "`zip` is a whole resp= only",
            ),
            ("query q u32\n", "belongs under a `route` row"),
            (
                "route GET /a ping status=200 resp=array<\n",
                "is not a JSON type",
            ),
            ("schema A\n  n u32\n", "schema `A` has no `end`"),
        ];
        for (spec, want) in cases {
            let got = messages(spec);
            assert!(
                got.iter().any(|m| m.contains(want)),
                "{spec:?}: want {want:?}, got {got:?}"
            );
        }
    }

    /// The OpenAPI document of the routes and schemas in `text`.
    fn document(text: &str) -> String {
        let spec = load(text).unwrap();
        let routes: Vec<&super::Route> = spec
            .files
            .iter()
            .flat_map(|(_, m)| m.routes.iter())
            .collect();
        let schemas: Vec<&super::Schema> = spec
            .files
            .iter()
            .flat_map(|(_, m)| m.schemas.iter())
            .collect();
        super::openapi(&routes, &schemas, &spec.global)
    }

    #[test]
    fn openapi_carries_schemas_bodies_and_query() {
        let doc = document("alias Size u64|string\nschema A doc=\"an a\"\n  n Size\n  s string? optional doc\nend\nroute POST /a ping status=201 req=A resp=array<A>\n  query q bool required\n");
        assert!(doc.contains(r##""requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}"##), "{doc}");
        assert!(doc.contains(r##""201": {"description": "success", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/A"}}}}}"##), "{doc}");
        assert!(
            doc.contains(
                r#"{"name": "q", "in": "query", "required": true, "schema": {"type": "boolean"}}"#
            ),
            "{doc}"
        );
        assert!(doc.contains(r##""A": {"type": "object", "required": ["n"], "properties": {"n": {"$ref": "#/components/schemas/Size"}, "s": {"type": ["string", "null"], "description": "doc"}}, "additionalProperties": false, "description": "an a"}"##), "{doc}");
        assert!(doc.contains(r#""Size": {"oneOf": [{"type": "integer", "format": "uint64", "minimum": 0, "maximum": 18446744073709551615}, {"type": "string"}]}"#), "{doc}");
    }

    #[test]
    fn openapi_lists_every_route_with_its_parameters() {
        let doc = document("route GET /ping ping status=200 auth=public\nroute DELETE /s/{stream_id} ping status=204\n");
        assert!(doc.contains("\"openapi\": \"3.1.0\""));
        assert!(
            doc.contains("\"/s/{stream_id}\": {\n      \"delete\""),
            "{doc}"
        );
        assert!(doc.contains("{\"name\": \"stream_id\", \"in\": \"path\""));
        assert!(doc.contains("\"204\": {\"description\": \"success\"}"));
    }
}
