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
    pub file: String,
    pub line: usize,
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE"];
const HTTP_ONLY: &str = "http.";

/// The command row a route runs: the current protocol's (no `until`).
fn command_of<'c>(route: &Route, commands: &[&'c Command]) -> Option<&'c Command> {
    commands.iter().copied().find(|c| c.name == route.command && c.until.is_none())
}

/// Path parameters of a template, in order: `{stream_id}` → `stream_id`.
pub fn parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

/// Checks methods, paths, statuses, command names and that no two routes collide.
pub fn validate(routes: &[Route], commands: &[&Command]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (k, r) in routes.iter().enumerate() {
        let mut fail = |m: String| out.push(diag(&r.file, r.line, m));
        if !METHODS.contains(&r.method.as_str()) {
            fail(format!("method `{}`: expected one of {}", r.method, METHODS.join(", ")));
        }
        if !r.path.starts_with('/') || r.path.contains("//") || (r.path.len() > 1 && r.path.ends_with('/')) {
            fail(format!("path `{}` must start with `/` and have no empty segment", r.path));
        }
        for segment in r.path.split('/').skip(1) {
            let inner = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
            let ok = match inner {
                Some(name) => !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                None => !segment.contains(['{', '}']),
            };
            if !ok {
                fail(format!(
                    "path segment `{segment}`: a parameter is `{{lowercase_name}}`, alone in its segment"
                ));
            }
        }
        if !(200..300).contains(&r.status) {
            fail(format!("status={}: a route's success status is 2xx", r.status));
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
                .map(|s| if s.starts_with('{') { "{}".to_string() } else { s.to_string() })
                .collect::<Vec<_>>()
        };
        if let Some(first) = routes[..k]
            .iter()
            .find(|o| o.method == r.method && shape(&o.path) == shape(&r.path))
        {
            fail(format!("route {} {} duplicates line {}", r.method, r.path, first.line));
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

/// `generated/openapi.json`: OpenAPI 3.1, one operation per route, grouped by path in spec order.
pub fn openapi(routes: &[&Route], global: &Model) -> String {
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
                json_string(&format!("{}_{}", r.command.replace('.', "_"), r.method.to_lowercase()))
            );
            let _ = writeln!(
                o,
                "        \"summary\": {},",
                json_string(&format!("{} {}: {what}", r.method, r.path))
            );
            if r.public {
                o.push_str("        \"security\": [],\n");
            }
            let params = parameters(&r.path);
            if !params.is_empty() {
                let rendered: Vec<String> = params
                    .iter()
                    .map(|p| {
                        format!(
                            "{{\"name\": {}, \"in\": \"path\", \"required\": true, \"schema\": {{\"type\": \"string\"}}}}",
                            json_string(p)
                        )
                    })
                    .collect();
                let _ = writeln!(o, "        \"parameters\": [{}],", rendered.join(", "));
            }
            o.push_str("        \"responses\": {\n");
            let _ = writeln!(o, "          \"{}\": {{\"description\": \"success\"}},", r.status);
            o.push_str("          \"4XX\": {\"$ref\": \"#/components/responses/Error\"}\n        }\n");
            o.push_str(if j + 1 == list.len() { "      }\n" } else { "      },\n" });
        }
        o.push_str(if i + 1 == paths.len() { "    }\n" } else { "    },\n" });
    }
    o.push_str("  },\n  \"components\": {\n");
    o.push_str("    \"securitySchemes\": {\"bearer\": {\"type\": \"http\", \"scheme\": \"bearer\", \"bearerFormat\": \"JWT\"}},\n");
    o.push_str("    \"responses\": {\"Error\": {\"description\": \"refused\", \"content\": {\"application/json\": {\"schema\": {\"$ref\": \"#/components/schemas/Error\"}}}}},\n");
    o.push_str("    \"schemas\": {\"Error\": {\"type\": \"object\", \"required\": [\"id\", \"code\", \"reason\"], \"properties\": {\"id\": {\"type\": \"integer\"}, \"code\": {\"type\": \"string\"}, \"reason\": {\"type\": \"string\"}, \"field\": {\"type\": [\"string\", \"null\"]}}}}\n");
    o.push_str("  }\n}\n");
    o
}

#[cfg(test)]
mod tests {
    fn load(routes: &str) -> Result<crate::Spec, Vec<crate::Diagnostic>> {
        let commands = "command 1 ping op=NonReplicated class=none rf=no perm=none\n";
        crate::load(&[("commands.spec".into(), commands.into()), ("http.spec".into(), routes.into())])
    }

    fn messages(routes: &str) -> Vec<String> {
        load(routes).err().unwrap_or_default().into_iter().map(|d| d.to_string()).collect()
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
        let collide = messages("route GET /a/{id} ping status=200\nroute GET /a/{name} ping status=200\n");
        assert!(collide.iter().any(|m| m.contains("duplicates line 1")), "{collide:?}");
        let bad = messages("route FETCH /a ping status=200\nroute GET /b ping status=404\nroute GET /c/x{y} ping status=200\n");
        assert_eq!(bad.len(), 3, "{bad:?}");
    }

    #[test]
    fn openapi_lists_every_route_with_its_parameters() {
        let spec = load("route GET /ping ping status=200 auth=public\nroute DELETE /s/{stream_id} ping status=204\n").unwrap();
        let routes: Vec<&super::Route> = spec.files.iter().flat_map(|(_, m)| m.routes.iter()).collect();
        let doc = super::openapi(&routes, &spec.global);
        assert!(doc.contains("\"openapi\": \"3.1.0\""));
        assert!(doc.contains("\"/s/{stream_id}\": {\n      \"delete\""), "{doc}");
        assert!(doc.contains("{\"name\": \"stream_id\", \"in\": \"path\""));
        assert!(doc.contains("\"204\": {\"description\": \"success\"}"));
    }
}
