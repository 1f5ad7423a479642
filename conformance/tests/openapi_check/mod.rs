//! A validator of the JSON Schema subset codegen writes into generated/openapi.json, shared by
//! conformance/tests/openapi.rs (official values) and the HTTP e2e tests (live replies).

use serde_json::Value;
use std::collections::BTreeSet;

/// A validator of the subset of JSON Schema the generator writes; it records which
/// `components/schemas` entries a value went through.
pub struct Checker<'d> {
    pub doc: &'d Value,
    /// The `components/schemas` names values went through.
    pub seen: BTreeSet<String>,
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Standard padded base64: the alphabet, `=` only at the end, a multiple of 4 characters.
fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

impl<'d> Checker<'d> {
    pub fn new(doc: &'d Value) -> Self {
        Self {
            doc,
            seen: BTreeSet::new(),
        }
    }

    pub fn check(&mut self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let schema = schema
            .as_object()
            .ok_or_else(|| format!("{at}: schema is not an object"))?;
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            let name = target
                .strip_prefix("#/components/schemas/")
                .ok_or_else(|| format!("{at}: unknown $ref {target}"))?;
            let resolved = &self.doc["components"]["schemas"][name];
            if resolved.is_null() {
                return Err(format!("{at}: $ref to undeclared schema {name}"));
            }
            self.seen.insert(name.to_string());
            self.check(resolved, value, at)?;
        }
        if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
            // Exactly one branch; only the matching branch's schemas count as exercised.
            let mut matched = Vec::new();
            let mut why = Vec::new();
            for branch in branches {
                let mut trial = Checker::new(self.doc);
                match trial.check(branch, value, at) {
                    Ok(()) => matched.push(trial.seen),
                    Err(e) => why.push(e),
                }
            }
            match matched.len() {
                1 => self.seen.extend(matched.remove(0)),
                0 => return Err(format!("{at}: matches no oneOf branch: {why:?}")),
                n => return Err(format!("{at}: matches {n} oneOf branches")),
            }
        }
        if let Some(ty) = schema.get("type") {
            let allowed: Vec<&str> = match ty {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => return Err(format!("{at}: bad type {ty}")),
            };
            let kind = kind_of(value);
            let fits =
                allowed.contains(&kind) || (kind == "integer" && allowed.contains(&"number"));
            if !fits {
                return Err(format!(
                    "{at}: {kind} {value} where {allowed:?} is declared"
                ));
            }
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array)
            && !values.contains(value)
        {
            return Err(format!("{at}: {value} is not one of {values:?}"));
        }
        if let Value::Number(n) = value {
            // Bounds as text: a u64 maximum does not fit an f64 exactly.
            let as_int: Option<i128> = n.to_string().parse().ok();
            if let (Some(v), Some(min)) = (as_int, schema.get("minimum")) {
                let min: i128 = min
                    .to_string()
                    .parse()
                    .map_err(|_| format!("{at}: minimum {min}"))?;
                if v < min {
                    return Err(format!("{at}: {v} below the minimum {min}"));
                }
            }
            if let (Some(v), Some(max)) = (as_int, schema.get("maximum")) {
                // u128::MAX reads back as an f64 (no arbitrary precision): compare as one then.
                let above = match max.to_string().parse::<u128>() {
                    Ok(max) => v > 0 && v as u128 > max,
                    Err(_) => max.as_f64().is_none_or(|max| v as f64 > max),
                };
                if above {
                    return Err(format!("{at}: {v} above the maximum {max}"));
                }
            }
        }
        if schema.get("contentEncoding").and_then(Value::as_str) == Some("base64")
            && let Value::String(s) = value
            && !is_base64(s)
        {
            return Err(format!("{at}: `{s}` is not base64"));
        }
        if let Value::Array(items) = value
            && let Some(item) = schema.get("items")
        {
            for (i, v) in items.iter().enumerate() {
                self.check(item, v, &format!("{at}[{i}]"))?;
            }
        }
        if let Value::Object(map) = value {
            let properties = schema.get("properties").and_then(Value::as_object);
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = name.as_str().unwrap_or_default();
                if !map.contains_key(name) {
                    return Err(format!("{at}: required `{name}` missing"));
                }
            }
            for (key, v) in map {
                match properties.and_then(|p| p.get(key)) {
                    Some(property) => self.check(property, v, &format!("{at}.{key}"))?,
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            return Err(format!("{at}: `{key}` is not a declared property"));
                        }
                        Some(extra @ Value::Object(_)) => {
                            self.check(extra, v, &format!("{at}.{key}"))?
                        }
                        _ => {}
                    },
                }
            }
        }
        Ok(())
    }
}

/// The declared JSON body of a route: its request (`request`) or its success reply.
// Shared by the `openapi` and `e2e` tests; only e2e calls it.
#[allow(dead_code)]
pub fn body_schema<'d>(
    doc: &'d Value,
    method: &str,
    path: &str,
    request: bool,
) -> Option<&'d Value> {
    let op = &doc["paths"][path][method.to_lowercase()];
    let body = if request {
        &op["requestBody"]
    } else {
        let route = iggy_generated::http::ROUTES
            .iter()
            .find(|r| r.method == method && r.path == path)?;
        &op["responses"][route.status.to_string()]
    };
    let schema = &body["content"]["application/json"]["schema"];
    (!schema.is_null()).then_some(schema)
}
