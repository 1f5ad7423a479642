//! The spec parser, built with `nom`: one small combinator per line kind (the legend of
//! spec/FORMAT.md), and a driver that walks a file line by line, opens and closes the `enum` and
//! `struct` blocks and turns every line that does not parse into a diagnostic naming `file:line`.
//!
//! Each line combinator reads one trimmed line completely (`all_consuming`); what the line
//! means beyond its shape (versions, types, offsets, duplicates) is checked later by
//! [`crate::Model::validate_with`], so those diagnostics stay the same whatever the syntax.
use crate::{Command, Const, Diagnostic, Enum, Example, Field, Model, OptionRow, Retired, Struct, diag};
use nom::branch::alt;
use nom::bytes::complete::{tag, take_till, take_while1};
use nom::character::complete::{char, digit1, hex_digit1, space1};
use nom::combinator::{all_consuming, map, map_res, opt, rest, verify};
use nom::multi::{many0, many1};
use nom::sequence::{delimited, preceded, separated_pair, terminated};
use nom::{IResult, Parser};

type Res<'a, T> = IResult<&'a str, T>;
/// A line's `key=value` attributes, in order.
type AttrList<'a> = Vec<(&'a str, &'a str)>;

// ---- tokens ----

/// Any run of non-blank characters (types, versions, hex, free values).
fn word(i: &str) -> Res<'_, &str> {
    take_while1(|c: char| !c.is_whitespace()).parse(i)
}

/// A struct, enum, field, variant or error name.
fn ident(i: &str) -> Res<'_, &str> {
    take_while1(|c: char| c.is_ascii_alphanumeric() || c == '_').parse(i)
}

/// A command name: dotted (`stream.create`).
fn command_name(i: &str) -> Res<'_, &str> {
    take_while1(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.').parse(i)
}

/// An unsigned decimal number.
fn uint<T: std::str::FromStr>(i: &str) -> Res<'_, T> {
    map_res(digit1, str::parse::<T>).parse(i)
}

/// `0x` then hex digits, as a u32.
fn hex_u32(i: &str) -> Res<'_, u32> {
    preceded(tag("0x"), map_res(hex_digit1, |h| u32::from_str_radix(h, 16))).parse(i)
}

/// `"..."` (no escapes; the text may not hold a `"`).
fn quoted(i: &str) -> Res<'_, &str> {
    delimited(char('"'), take_till(|c| c == '"'), char('"')).parse(i)
}

/// `key=value` or `key="quoted value"`.
fn attr(i: &str) -> Res<'_, (&str, &str)> {
    separated_pair(ident, char('='), alt((quoted, word))).parse(i)
}

/// Zero or more ` key=value` after the positional tokens of a line.
fn attrs(i: &str) -> Res<'_, Vec<(&str, &str)>> {
    many0(preceded(space1, attr)).parse(i)
}

/// The keyword `k` followed by at least one blank.
fn keyword<'a>(k: &'static str) -> impl Parser<&'a str, Output = &'a str, Error = nom::error::Error<&'a str>> {
    terminated(tag(k), space1)
}

// ---- one combinator per line kind ----

/// `version <x.y.z> packed=<0xN>`.
fn version_line(i: &str) -> Res<'_, (&str, u32)> {
    preceded(keyword("version"), (word, preceded((space1, tag("packed=")), hex_u32))).parse(i)
}

/// `range min=<v> max=<v>`.
fn range_line(i: &str) -> Res<'_, (&str, &str)> {
    preceded(keyword("range"), separated_pair(preceded(tag("min="), word), space1, preceded(tag("max="), word))).parse(i)
}

/// `storage_marker <TEXT>`.
fn storage_marker_line(i: &str) -> Res<'_, &str> {
    preceded(keyword("storage_marker"), word).parse(i)
}

/// `snapshot_format <N>`.
fn snapshot_format_line(i: &str) -> Res<'_, u32> {
    preceded(keyword("snapshot_format"), uint).parse(i)
}

/// `release <key>=<value> ...`.
fn release_line(i: &str) -> Res<'_, Vec<(&str, &str)>> {
    preceded(tag("release"), many1(preceded(space1, attr))).parse(i)
}

/// `const <NAME> <type> <value>`: the value a number or a `"string"`.
fn const_line(i: &str) -> Res<'_, (&str, &str, ConstValue<'_>)> {
    preceded(
        keyword("const"),
        (
            terminated(ident, space1),
            terminated(word, space1),
            alt((map(quoted, ConstValue::Text), map(word, ConstValue::Number))),
        ),
    )
    .parse(i)
}

/// `enum <Name> <repr>`.
fn enum_line(i: &str) -> Res<'_, (&str, &str)> {
    preceded(keyword("enum"), separated_pair(ident, space1, alt((tag("u8"), tag("u16"), tag("u32"), tag("u64"))))).parse(i)
}

/// `  <value> <Variant> [since=<v>] [until=<v>]` inside an enum block.
fn variant_row(i: &str) -> Res<'_, (u64, &str, AttrList<'_>)> {
    (terminated(uint, space1), ident, attrs).parse(i)
}

/// `struct <Name> [fixed=<size>] [since=<v>] [until=<v>] [gen=examples] [doc="..."]`.
fn struct_line(i: &str) -> Res<'_, (&str, Vec<(&str, &str)>)> {
    preceded(keyword("struct"), (ident, attrs)).parse(i)
}

/// A parsed field row: `[offset] <field> <type> [gen=<how>] [doc...]`.
struct FieldRow<'a> {
    offset: Option<usize>,
    name: &'a str,
    ty: &'a str,
    draw: Option<&'a str>,
    doc: Option<&'a str>,
}

/// `  [offset] <field> <type> [gen=<how>] [doc...]` inside a struct block.
fn field_row(i: &str) -> Res<'_, FieldRow<'_>> {
    map(
        (
            opt(terminated(uint, space1)),
            ident,
            preceded(space1, word),
            opt(preceded((space1, tag("gen=")), word)),
            opt(preceded(space1, rest)),
        ),
        |(offset, name, ty, draw, doc)| FieldRow { offset, name, ty, draw, doc },
    )
    .parse(i)
}

/// `end`, closing an enum or struct block.
fn end_row(i: &str) -> Res<'_, &str> {
    tag("end").parse(i)
}

/// `command <code> <name> op= class= rf= perm= req= resp= [since=] [until=]`.
fn command_line(i: &str) -> Res<'_, (u32, &str, AttrList<'_>)> {
    preceded(keyword("command"), (terminated(uint, space1), command_name, attrs)).parse(i)
}

/// `retired <code> [<name>] [since=<v>]`.
fn retired_line(i: &str) -> Res<'_, (u32, Option<&str>, AttrList<'_>)> {
    preceded(
        keyword("retired"),
        (uint, opt(preceded(space1, verify(command_name, |n: &str| !n.contains('=') && !n.is_empty()))), attrs),
    )
    .parse(i)
}

/// `error <code> <Name> "<message>"`: the message runs to the closing quote at the end of the line.
fn error_line(i: &str) -> Res<'_, (u32, &str, &str)> {
    preceded(
        keyword("error"),
        (
            terminated(uint, space1),
            terminated(ident, space1),
            map(verify(preceded(char('"'), rest), |m: &str| m.ends_with('"')), |m: &str| &m[..m.len() - 1]),
        ),
    )
    .parse(i)
}

/// `example <Struct> <version> [hex]` (no hex: the empty encoding).
fn example_line(i: &str) -> Res<'_, (&str, &str, Option<&str>)> {
    preceded(keyword("example"), (ident, preceded(space1, word), opt(preceded(space1, word)))).parse(i)
}

/// The value of a `const` row.
#[derive(Debug, Clone, Copy)]
enum ConstValue<'a> {
    Number(&'a str),
    Text(&'a str),
}

/// Runs a line combinator over the whole line.
/// An `option` row: scope, key, kind, attributes.
type OptionLine<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, &'a str)>);

/// `option <Scope> <key> <kind> key=value...` (default=, flags=, doc=).
fn option_line(i: &str) -> Res<'_, OptionLine<'_>> {
    preceded(keyword("option"), (terminated(ident, space1), terminated(ident, space1), ident, attrs)).parse(i)
}

fn whole<'a, O>(line: &'a str, p: impl Parser<&'a str, Output = O, Error = nom::error::Error<&'a str>>) -> Option<O> {
    all_consuming(p).parse(line).ok().map(|(_, o)| o)
}

// ---- the driver ----

/// `key=value` attributes of one line, checked against the keys its kind allows.
struct Attrs<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}
impl<'a> Attrs<'a> {
    /// Diagnoses keys outside `allowed` and repeated keys.
    fn check(&self, allowed: &[&str], what: &str, file: &str, line: usize, errs: &mut Vec<Diagnostic>) {
        for (k, (key, _)) in self.pairs.iter().enumerate() {
            if !allowed.contains(key) {
                errs.push(diag(file, line, format!("unknown attribute `{key}=` on {what} (allowed: {})", allowed.join(", "))));
            } else if self.pairs[..k].iter().any(|(p, _)| p == key) {
                errs.push(diag(file, line, format!("attribute `{key}=` given twice")));
            }
        }
    }
    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
    fn string(&self, key: &str) -> Option<String> {
        self.get(key).map(String::from)
    }
}

/// The non-blank, non-comment lines of a file: `(1-based line number, trimmed text)`.
struct Lines<'a> {
    inner: std::iter::Enumerate<std::str::Lines<'a>>,
}
impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.by_ref().map(|(i, l)| (i + 1, l.trim())).find(|(_, t)| !t.is_empty() && !t.starts_with('#'))
    }
}

/// `route <METHOD> <path> <command> status=<N> [auth=public]`.
fn route_line(i: &str) -> Res<'_, (&str, &str, &str, AttrList<'_>)> {
    preceded(keyword("route"), (terminated(ident, space1), terminated(word, space1), command_name, attrs)).parse(i)
}

/// `schema <Name> [extra=<type>] [doc="..."]`.
fn schema_line(i: &str) -> Res<'_, (&str, Vec<(&str, &str)>)> {
    preceded(keyword("schema"), (ident, attrs)).parse(i)
}

/// `  <field> <type> [optional] [doc...]` inside a schema block.
fn schema_row(i: &str) -> Res<'_, (&str, &str, bool, Option<&str>)> {
    map(
        (
            ident,
            preceded(space1, word),
            opt(preceded(space1, tag("optional"))),
            opt(preceded(space1, rest)),
        ),
        |(name, ty, optional, doc)| (name, ty, optional.is_some(), doc),
    )
    .parse(i)
}

/// `strings <Name> <value>...`.
fn strings_line(i: &str) -> Res<'_, (&str, Vec<&str>)> {
    preceded(keyword("strings"), (ident, many1(preceded(space1, word)))).parse(i)
}

/// `alias <Name> <type> [doc="..."]`.
fn alias_line(i: &str) -> Res<'_, (&str, &str, AttrList<'_>)> {
    preceded(keyword("alias"), (ident, preceded(space1, word), attrs)).parse(i)
}

/// `param <name> <type> [doc...]` or `query <name> <type> [required] [doc...]` under a route.
fn param_line<'a>(
    k: &'static str,
) -> impl Parser<
    &'a str,
    Output = (&'a str, &'a str, bool, Option<&'a str>),
    Error = nom::error::Error<&'a str>,
> {
    preceded(
        keyword(k),
        map(
            (
                ident,
                preceded(space1, word),
                opt(preceded(space1, tag("required"))),
                opt(preceded(space1, rest)),
            ),
            |(name, ty, required, doc)| (name, ty, required.is_some(), doc),
        ),
    )
}

/// A JSON type of spec/http.spec, or a diagnostic naming the line.
fn json_type(
    text: &str,
    file: &str,
    line: usize,
    errs: &mut Vec<Diagnostic>,
) -> crate::http::JsonType {
    crate::http::parse_type(text).unwrap_or_else(|| {
        errs.push(diag(
            file,
            line,
            format!("`{text}` is not a JSON type (see spec/FORMAT.md)"),
        ));
        crate::http::JsonType::Any
    })
}

/// Free text after a row's positional tokens, blanks collapsed.
fn doc_text(doc: Option<&str>) -> String {
    doc.map_or(String::new(), |d| {
        d.split_whitespace().collect::<Vec<_>>().join(" ")
    })
}

/// Parses one spec file into `model`.
pub fn parse_file(file: &str, text: &str, model: &mut Model) -> Result<(), Vec<Diagnostic>> {
    let mut errs = Vec::new();
    let mut lines = Lines { inner: text.lines().enumerate() };
    while let Some((ln, t)) = lines.next() {
        let kind = t.split_whitespace().next().unwrap_or_default();
        let expected = |shape: &str| diag(file, ln, format!("expected `{shape}`"));
        match kind {
            "version" => match whole(t, version_line) {
                Some((v, p)) => {
                    if crate::pack(v) != Some(p) {
                        errs.push(diag(file, ln, format!("packed value of {v} is wrong")));
                    }
                    model.versions.push((v.to_string(), p));
                }
                None => errs.push(expected("version <x.y.z> packed=<0xN>")),
            },
            "range" => match whole(t, range_line) {
                Some((a, b)) => model.ranges.push((a.into(), b.into())),
                None => errs.push(expected("range min=<v> max=<v>")),
            },
            "storage_marker" => match whole(t, storage_marker_line) {
                Some(s) => model.storage_marker = Some(s.into()),
                None => errs.push(expected("storage_marker <TEXT>")),
            },
            "snapshot_format" => match whole(t, snapshot_format_line) {
                Some(n) => model.snapshot_format = Some(n),
                None => errs.push(expected("snapshot_format <N>")),
            },
            "release" => match whole(t, release_line) {
                Some(pairs) => model.release.extend(pairs.into_iter().map(|(k, v)| (k.into(), v.into()))),
                None => errs.push(expected("release <key>=<value> ...")),
            },
            "const" => match whole(t, const_line) {
                Some((name, ty, value)) => {
                    let (value, text) = match value {
                        ConstValue::Number(n) => (n.to_string(), false),
                        ConstValue::Text(s) => (s.to_string(), true),
                    };
                    model.consts.push(Const { name: name.into(), ty: ty.into(), value, text, file: file.into(), line: ln });
                }
                None => errs.push(expected("const <NAME> <type> <value>")),
            },
            "error" => match whole(t, error_line) {
                Some((code, name, message)) => model.errors.push((code, name.into(), message.into(), ln)),
                None => errs.push(expected("error <code> <Name> \"<message>\"")),
            },
            "command" => match whole(t, command_line) {
                Some((code, name, pairs)) => {
                    let a = Attrs { pairs };
                    a.check(&["op", "class", "rf", "perm", "req", "resp", "since", "until"], "a command", file, ln, &mut errs);
                    let rf = match a.get("rf") {
                        None | Some("no") => false,
                        Some("yes") => true,
                        Some(other) => {
                            errs.push(diag(file, ln, format!("rf={other}: expected yes or no")));
                            false
                        }
                    };
                    model.commands.push(Command {
                        code,
                        name: name.into(),
                        op: a.get("op").unwrap_or("NonReplicated").into(),
                        class: a.get("class").unwrap_or("none").into(),
                        rf,
                        perm: a.get("perm").unwrap_or("none").into(),
                        req: a.get("req").unwrap_or("").into(),
                        resp: a.get("resp").unwrap_or("").into(),
                        since: a.string("since"),
                        until: a.string("until"),
                        file: file.into(),
                        line: ln,
                    });
                }
                None => errs.push(expected("command <code> <name> key=value...")),
            },
            "retired" => match whole(t, retired_line) {
                Some((code, name, pairs)) => {
                    let a = Attrs { pairs };
                    a.check(&["since"], "a retired row", file, ln, &mut errs);
                    model.retired.push(Retired { code, name: name.unwrap_or("").into(), since: a.string("since"), file: file.into(), line: ln });
                }
                None => errs.push(expected("retired <code> <name> [since=<v>]")),
            },
            "option" => match whole(t, option_line) {
                Some((scope, key, kind, pairs)) => {
                    let a = Attrs { pairs };
                    a.check(&["default", "flags", "doc"], "an option", file, ln, &mut errs);
                    let flags = a.get("flags").map_or(Vec::new(), |f| f.split(',').map(String::from).collect());
                    model.options.push(OptionRow {
                        scope: scope.into(),
                        key: key.into(),
                        kind: kind.into(),
                        flags,
                        default: a.get("default").unwrap_or("").into(),
                        description: a.get("doc").unwrap_or("").into(),
                        file: file.into(),
                        line: ln,
                    });
                }
                None => errs.push(expected("option <Scope> <key> <kind> [default=<v>] [flags=<a,b>] [doc=\"...\"]")),
            },
            "route" => match whole(t, route_line) {
                Some((method, path, command, pairs)) => {
                    let a = Attrs { pairs };
                    a.check(&["status", "auth", "req", "resp"], "a route", file, ln, &mut errs);
                    let req = a.get("req").map(|t| json_type(t, file, ln, &mut errs));
                    let resp = a.get("resp").map(|t| json_type(t, file, ln, &mut errs));
                    let status = match a.get("status").map(str::parse::<u16>) {
                        Some(Ok(status)) => status,
                        _ => {
                            errs.push(diag(file, ln, "a route needs status=<N>"));
                            0
                        }
                    };
                    let public = match a.get("auth") {
                        None | Some("bearer") => false,
                        Some("public") => true,
                        Some(other) => {
                            errs.push(diag(file, ln, format!("auth={other}: expected public or bearer")));
                            false
                        }
                    };
                    model.routes.push(crate::http::Route {
                        method: method.into(),
                        path: path.into(),
                        command: command.into(),
                        status,
                        public,
                        req,
                        resp,
                        params: Vec::new(),
                        query: Vec::new(),
                        file: file.into(),
                        line: ln,
                    });
                }
                None => errs.push(expected("route <METHOD> <path> <command> status=<N> [auth=public] [req=<type>] [resp=<type>]")),
            },
            "param" | "query" => match whole(t, param_line(if kind == "param" { "param" } else { "query" })) {
                Some((name, ty, required, doc)) => {
                    let ty = json_type(ty, file, ln, &mut errs);
                    let row = crate::http::Param { name: name.into(), ty, required, doc: doc_text(doc), line: ln };
                    match model.routes.last_mut() {
                        None => errs.push(diag(file, ln, format!("a `{kind}` row belongs under a `route` row"))),
                        Some(_) if kind == "param" && required => errs.push(diag(file, ln, "a path parameter is always required")),
                        Some(route) if kind == "param" => route.params.push(row),
                        Some(route) => route.query.push(row),
                    }
                }
                None => errs.push(expected(&format!("{kind} <name> <type>{} [doc...]", if kind == "query" { " [required]" } else { "" }))),
            },
            "alias" => match whole(t, alias_line) {
                Some((name, ty, pairs)) => {
                    let a = Attrs { pairs };
                    a.check(&["doc"], "an alias", file, ln, &mut errs);
                    let ty = json_type(ty, file, ln, &mut errs);
                    model.schemas.push(crate::http::Schema {
                        name: name.into(),
                        body: crate::http::SchemaBody::Alias(ty),
                        doc: a.string("doc").unwrap_or_default(),
                        file: file.into(),
                        line: ln,
                    });
                }
                None => errs.push(expected("alias <Name> <type> [doc=\"...\"]")),
            },
            "strings" => match whole(t, strings_line) {
                Some((name, values)) => model.schemas.push(crate::http::Schema {
                    name: name.into(),
                    body: crate::http::SchemaBody::Strings(values.into_iter().map(String::from).collect()),
                    doc: String::new(),
                    file: file.into(),
                    line: ln,
                }),
                None => errs.push(expected("strings <Name> <value>...")),
            },
            "schema" => {
                let header = whole(t, schema_line);
                if header.is_none() {
                    errs.push(expected("schema <Name> [extra=<type>] [doc=\"...\"]"));
                }
                let mut fields = Vec::new();
                let closed = block(&mut lines, |rl, row| match whole(row, schema_row) {
                    Some((name, ty, optional, doc)) => {
                        let ty = json_type(ty, file, rl, &mut errs);
                        fields.push(crate::http::SchemaField { name: name.into(), ty, optional, doc: doc_text(doc), line: rl });
                    }
                    None => errs.push(diag(file, rl, "expected `<field> <type> [optional] [doc]`")),
                });
                let Some((name, pairs)) = header else { continue };
                if !closed {
                    errs.push(diag(file, ln, format!("schema `{name}` has no `end`")));
                }
                let a = Attrs { pairs };
                a.check(&["extra", "doc"], "a schema", file, ln, &mut errs);
                let extra = a.get("extra").map(|t| json_type(t, file, ln, &mut errs));
                model.schemas.push(crate::http::Schema {
                    name: name.into(),
                    body: crate::http::SchemaBody::Object { fields, extra },
                    doc: a.string("doc").unwrap_or_default(),
                    file: file.into(),
                    line: ln,
                });
            }
            "example" => match whole(t, example_line) {
                Some((name, version, hex)) => model.examples.push(Example {
                    name: name.into(),
                    version: version.into(),
                    hex: hex.unwrap_or("").into(),
                    file: file.into(),
                    line: ln,
                }),
                None => errs.push(expected("example <Struct> <version> <hex>")),
            },
            "enum" => {
                let header = whole(t, enum_line);
                if header.is_none() {
                    errs.push(expected("enum <Name> <repr>"));
                }
                let mut variants = Vec::new();
                let mut variant_versions = Vec::new();
                let mut variant_journal_only = Vec::new();
                let mut variant_sizes = Vec::new();
                let closed = block(&mut lines, |rl, row| match whole(row, variant_row) {
                    Some((value, name, pairs)) => {
                        let a = Attrs { pairs };
                        a.check(&["since", "until", "scope", "size"], "an enum variant", file, rl, &mut errs);
                        let size = a.get("size").map(|size| size.parse::<usize>());
                        if let Some(Err(_)) = size {
                            errs.push(diag(file, rl, "size= on an enum variant must be a byte count"));
                        }
                        variant_sizes.push(size.and_then(Result::ok));
                        let scope = a.string("scope");
                        if scope.as_deref().is_some_and(|scope| scope != "journal" && scope != "replica") {
                            errs.push(diag(file, rl, "scope= on an enum variant must be `journal` or `replica`"));
                        }
                        variants.push((value, name.to_string()));
                        variant_versions.push((a.string("since"), a.string("until")));
                        variant_journal_only.push(scope.is_some());
                    }
                    None => errs.push(diag(file, rl, "expected `<value> <Variant>`")),
                });
                let Some((name, repr)) = header else { continue };
                if !closed {
                    errs.push(diag(file, ln, format!("enum `{name}` has no `end`")));
                }
                model.enums.push(Enum { name: name.into(), repr: repr.into(), variants, variant_versions, variant_journal_only, variant_sizes, file: file.into(), line: ln });
            }
            "struct" => {
                let header = whole(t, struct_line);
                if header.is_none() {
                    errs.push(expected("struct <Name> [key=value...]"));
                }
                let mut fields = Vec::new();
                let closed = block(&mut lines, |rl, row| match whole(row, field_row) {
                    Some(r) => fields.push(Field {
                        offset: r.offset,
                        name: r.name.into(),
                        ty: r.ty.into(),
                        doc: r.doc.map_or(String::new(), |d| d.split_whitespace().collect::<Vec<_>>().join(" ")),
                        draw: r.draw.map(String::from),
                        line: rl,
                    }),
                    None => errs.push(diag(file, rl, "expected `[offset] <field> <type> [doc]`")),
                });
                let Some((name, pairs)) = header else { continue };
                if !closed {
                    errs.push(diag(file, ln, format!("struct `{name}` has no `end`")));
                }
                let a = Attrs { pairs };
                a.check(&["fixed", "since", "until", "gen", "doc"], "a struct", file, ln, &mut errs);
                let fixed = a.get("fixed").and_then(|f| match f.parse() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        errs.push(diag(file, ln, format!("fixed={f}: expected a size in bytes")));
                        None
                    }
                });
                model.structs.push(Struct {
                    name: name.into(),
                    fixed,
                    fields,
                    since: a.string("since"),
                    until: a.string("until"),
                    draw: a.string("gen"),
                    doc: a.string("doc").unwrap_or_default(),
                    file: file.into(),
                    line: ln,
                });
            }
            "end" if whole(t, end_row).is_some() => errs.push(diag(file, ln, "`end` outside an enum or struct block")),
            other => errs.push(diag(file, ln, format!("unknown declaration `{other}`"))),
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Feeds the rows of a block to `row` up to its `end`; false when the file ends first.
fn block<'a>(lines: &mut Lines<'a>, mut row: impl FnMut(usize, &'a str)) -> bool {
    for (ln, t) in lines.by_ref() {
        if whole(t, end_row).is_some() {
            return true;
        }
        row(ln, t);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_kind_parses() {
        assert_eq!(whole("version 0.12.0 packed=0x3000", version_line), Some(("0.12.0", 0x3000)));
        assert_eq!(whole("range min=0.11.1 max=0.12.0", range_line), Some(("0.11.1", "0.12.0")));
        assert_eq!(whole("storage_marker IGGY-OWNERSHIP-HISTORY-5", storage_marker_line), Some("IGGY-OWNERSHIP-HISTORY-5"));
        assert_eq!(whole("snapshot_format 10", snapshot_format_line), Some(10));
        assert_eq!(whole("release name=iggy-rs version=0.1.0", release_line), Some(vec![("name", "iggy-rs"), ("version", "0.1.0")]));
        assert!(matches!(whole("const MAGIC bytes[8] \"IGGYMETA\"", const_line), Some(("MAGIC", "bytes[8]", ConstValue::Text("IGGYMETA")))));
        assert!(matches!(whole("const MAX u64 256", const_line), Some(("MAX", "u64", ConstValue::Number("256")))));
        assert_eq!(whole("enum Kind u8", enum_line), Some(("Kind", "u8")));
        assert_eq!(whole("enum Kind u7", enum_line), None);
        assert_eq!(whole("3 Legacy until=0.11.1", variant_row), Some((3, "Legacy", vec![("until", "0.11.1")])));
        assert_eq!(whole("struct A fixed=8 doc=\"a b = c\"", struct_line), Some(("A", vec![("fixed", "8"), ("doc", "a b = c")])));
        let r = whole("176 operation u8 gen=Operation Operation discriminant", field_row).unwrap();
        assert_eq!((r.offset, r.name, r.ty, r.draw, r.doc), (Some(176), "operation", "u8", Some("Operation"), Some("Operation discriminant")));
        let r = whole("tail rest", field_row).unwrap();
        assert_eq!((r.offset, r.name, r.ty, r.draw, r.doc), (None, "tail", "rest", None, None));
        assert_eq!(whole("command 1 thing.get req=A", command_line), Some((1, "thing.get", vec![("req", "A")])));
        assert_eq!(whole("retired 14 old since=0.12.0", retired_line), Some((14, Some("old"), vec![("since", "0.12.0")])));
        assert_eq!(whole("retired 14", retired_line), Some((14, None, vec![])));
        assert_eq!(whole("error 7 InvalidVersion \"Invalid version: {0}\"", error_line), Some((7, "InvalidVersion", "Invalid version: {0}")));
        assert_eq!(whole("error 7 InvalidVersion \"unclosed", error_line), None);
        assert_eq!(whole("example Id 0.12.0 0104", example_line), Some(("Id", "0.12.0", Some("0104"))));
        assert_eq!(whole("example Empty 0.12.0", example_line), Some(("Empty", "0.12.0", None)));
        assert_eq!(
            whole("option Topic segment_size uint64 default=1073741824 flags=updatable,resettable doc=\"a b\"", option_line),
            Some(("Topic", "segment_size", "uint64", vec![("default", "1073741824"), ("flags", "updatable,resettable"), ("doc", "a b")]))
        );
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let mut m = Model::default();
        let text = "version 0.12 packed=zz\nstruct A fixed=x wat=1\n  0 a u8\n  ???\nend\nenum E u8\n  x Bad\nend\nbogus 1\nend\nstruct B\n  b u8\n";
        let errs: Vec<String> = parse_file("t.spec", text, &mut m).unwrap_err().iter().map(ToString::to_string).collect();
        assert_eq!(errs, vec![
            "t.spec:1: expected `version <x.y.z> packed=<0xN>`",
            "t.spec:4: expected `[offset] <field> <type> [doc]`",
            "t.spec:2: unknown attribute `wat=` on a struct (allowed: fixed, since, until, gen, doc)",
            "t.spec:2: fixed=x: expected a size in bytes",
            "t.spec:7: expected `<value> <Variant>`",
            "t.spec:9: unknown declaration `bogus`",
            "t.spec:10: `end` outside an enum or struct block",
            "t.spec:11: struct `B` has no `end`",
        ]);
    }
}
