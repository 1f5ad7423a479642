//! The server's JSON shapes (`json.rs`) against the schemas spec/http.spec declares
//! (`iggy_generated::http::OPENAPI_JSON`): each reply type, serialized as the server sends it,
//! must fit the schema the document gives its route. conformance/tests/openapi.rs checks the
//! official types against the same document.

use super::json::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn document() -> Value {
    serde_json::from_str(iggy_generated::http::OPENAPI_JSON).expect("openapi.json is JSON")
}

/// The subset of JSON Schema the generator writes: `$ref`, `oneOf`, `type`, `enum`, integer
/// bounds, `required`, `properties`, `additionalProperties`, `items`.
fn check(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(target) = schema["$ref"].as_str() {
        let name = target.trim_start_matches("#/components/schemas/");
        let resolved = &doc["components"]["schemas"][name];
        if resolved.is_null() {
            return Err(format!("{at}: $ref to undeclared {name}"));
        }
        check(doc, resolved, value, at)?;
    }
    if let Some(branches) = schema["oneOf"].as_array() {
        let fits = branches
            .iter()
            .filter(|b| check(doc, b, value, at).is_ok())
            .count();
        if fits != 1 {
            return Err(format!("{at}: {value} fits {fits} oneOf branches"));
        }
    }
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let allowed: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let declared = allowed.contains(&kind) || (kind == "integer" && allowed.contains(&"number"));
    if !allowed.is_empty() && !declared {
        return Err(format!("{at}: {kind} {value}, declared {allowed:?}"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        return Err(format!("{at}: {value} not one of {values:?}"));
    }
    if let (Some(v), Some(max)) = (value.as_u64(), schema["maximum"].as_u64())
        && v > max
    {
        return Err(format!("{at}: {v} above {max}"));
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check(doc, item, v, &format!("{at}[{i}]"))?;
        }
    }
    if let Value::Object(map) = value {
        for name in schema["required"].as_array().into_iter().flatten() {
            if !map.contains_key(name.as_str().unwrap_or_default()) {
                return Err(format!("{at}: required {name} missing"));
            }
        }
        for (key, v) in map {
            let at = format!("{at}.{key}");
            match (
                schema["properties"].get(key),
                schema.get("additionalProperties"),
            ) {
                (Some(p), _) => check(doc, p, v, &at)?,
                (None, Some(Value::Bool(false))) => return Err(format!("{at}: not declared")),
                (None, Some(extra @ Value::Object(_))) => check(doc, extra, v, &at)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// Checks `value` against the success body `method path` declares.
fn fits(doc: &Value, method: &str, path: &str, value: &impl serde::Serialize) {
    let route = iggy_generated::http::ROUTES
        .iter()
        .find(|r| r.method == method && r.path == path)
        .unwrap_or_else(|| panic!("no route {method} {path}"));
    let schema = &doc["paths"][path][method.to_lowercase()]["responses"][route.status.to_string()]
        ["content"]["application/json"]["schema"];
    assert!(!schema.is_null(), "{method} {path} declares no JSON reply");
    let value = serde_json::to_value(value).expect("serializes");
    if let Err(why) = check(doc, schema, &value, &format!("{method} {path}")) {
        panic!("{why}\n{value}");
    }
}

fn options() -> Options {
    let mut o = Options::new();
    o.insert(
        "segment_size".into(),
        OptionValue {
            value: "1073741824".into(),
            kind: "uint64",
            explicit: false,
        },
    );
    o
}

fn context() -> PartitionContext {
    PartitionContext {
        incarnation: 2,
        owner_generation: 1,
        metadata_op: 9,
    }
}

fn topic(partitions: Option<Vec<Partition>>) -> Topic {
    Topic {
        id: 1,
        created_at: 1,
        name: "orders".into(),
        size: 4096,
        messages_count: 3,
        partitions_count: 1,
        message_expiry: 0,
        compression_algorithm: "none".into(),
        max_topic_size: 0,
        partitions,
        options: options(),
    }
}

fn stream(topics: Option<Vec<Topic>>) -> Stream {
    Stream {
        id: 1,
        created_at: 1,
        name: "shop".into(),
        size: 4096,
        messages_count: 3,
        topics_count: 1,
        topics,
        options: options(),
    }
}

#[test]
fn stream_topic_and_partition_replies_fit_the_declared_schemas() {
    let doc = document();
    let partition = Partition {
        id: 0,
        created_at: 1,
        segments_count: 1,
        current_offset: 2,
        size: 100,
        messages_count: 3,
        context: context(),
    };
    fits(&doc, "GET", "/streams", &vec![stream(None)]);
    fits(
        &doc,
        "GET",
        "/streams/{stream_id}",
        &stream(Some(vec![topic(None)])),
    );
    fits(&doc, "POST", "/streams", &stream(Some(Vec::new())));
    fits(
        &doc,
        "GET",
        "/streams/{stream_id}/topics",
        &vec![topic(None)],
    );
    fits(
        &doc,
        "GET",
        "/streams/{stream_id}/topics/{topic_id}",
        &topic(Some(vec![partition])),
    );
}

#[test]
fn group_message_user_and_system_replies_fit_the_declared_schemas() {
    let doc = document();
    let groups = "/streams/{stream_id}/topics/{topic_id}/consumer-groups";
    let group = |members| ConsumerGroup {
        id: 1,
        name: "workers".into(),
        partitions_count: 2,
        members_count: 1,
        members,
    };
    fits(&doc, "GET", groups, &vec![group(None)]);
    let member = ConsumerGroupMember {
        id: 5,
        partitions_count: 2,
        partitions: vec![0, 1],
    };
    fits(&doc, "POST", groups, &group(Some(vec![member])));

    let message = |user_headers| Message {
        header: MessageHeader {
            checksum: 1,
            id: 2,
            offset: 3,
            timestamp: 4,
            origin_timestamp: 5,
            user_headers_length: 0,
            payload_length: 5,
            reserved: 0,
        },
        payload: "aGVsbG8=".into(),
        user_headers,
    };
    let polled = PolledMessages {
        context: context(),
        partition_id: 1,
        current_offset: 3,
        count: 3,
        messages: vec![
            message(UserHeaders::None([])),
            message(UserHeaders::Raw("AQID".into())),
            message(UserHeaders::of(&[2, 1, 0, 0, 0, b'k', 3, 1, 0, 0, 0, 1])),
        ],
    };
    fits(
        &doc,
        "GET",
        "/streams/{stream_id}/topics/{topic_id}/messages",
        &polled,
    );

    let mut topics = BTreeMap::new();
    topics.insert(
        2,
        TopicPermissions {
            read_topic: true,
            ..Default::default()
        },
    );
    let mut streams = BTreeMap::new();
    streams.insert(
        1,
        StreamPermissions {
            topics: Some(topics),
            ..Default::default()
        },
    );
    streams.insert(3, StreamPermissions::default());
    let user = |permissions| User {
        id: 1,
        created_at: 1,
        status: "active",
        username: "iggy".into(),
        permissions,
        options: Options::new(),
    };
    fits(&doc, "GET", "/users", &vec![user(None)]);
    let permissions = Permissions {
        global: GlobalPermissions::default(),
        streams: Some(streams),
    };
    fits(
        &doc,
        "GET",
        "/users/{user_id}",
        &user(Some(Some(permissions))),
    );
    fits(&doc, "POST", "/users", &user(Some(None)));

    let client = |consumer_groups| Client {
        client_id: 3,
        user_id: None,
        address: "127.0.0.1:1".into(),
        transport: "tcp",
        consumer_groups_count: 1,
        consumer_groups,
    };
    fits(&doc, "GET", "/clients", &vec![client(None)]);
    let info = ConsumerGroupInfo {
        stream_id: 1,
        topic_id: 1,
        group_id: 1,
    };
    fits(
        &doc,
        "GET",
        "/clients/{client_id}",
        &client(Some(vec![info])),
    );

    let spec = OptionSpec {
        key: "segment_size".into(),
        kind: "uint64",
        updatable: true,
        resettable: true,
        secret: false,
        read_only: false,
        critical: false,
        default_value: vec![0, 0, 0, 64, 0, 0, 0, 0],
        description: "bytes".into(),
    };
    fits(&doc, "GET", "/options/{scope}", &vec![spec]);

    let mut cache_metrics = BTreeMap::new();
    cache_metrics.insert(
        "1-1-1".to_string(),
        CacheMetrics {
            hits: 1,
            misses: 2,
            hit_ratio: 0.5,
        },
    );
    let stats = Stats {
        process_id: 1,
        cpu_usage: 0.5,
        total_cpu_usage: 1.5,
        memory_usage: 1,
        total_memory: 2,
        available_memory: 3,
        run_time: 4,
        start_time: 5,
        read_bytes: 6,
        written_bytes: 7,
        messages_size_bytes: 8,
        streams_count: 1,
        topics_count: 1,
        partitions_count: 1,
        segments_count: 1,
        messages_count: 1,
        clients_count: 1,
        consumer_groups_count: 1,
        hostname: "h".into(),
        os_name: "Linux".into(),
        os_version: "6".into(),
        kernel_version: "6.1".into(),
        iggy_server_version: "0.1.0".into(),
        iggy_server_semver: None,
        cache_metrics,
        threads_count: 4,
        free_disk_space: 1,
        total_disk_space: 2,
        open_files_count: 3,
        open_files_limit: 4,
    };
    fits(&doc, "GET", "/stats", &stats);
}

#[test]
fn a_shape_the_schema_does_not_declare_is_refused() {
    // The checker refuses: an undeclared key, and a missing one.
    let doc = document();
    let schema = json!({"$ref": "#/components/schemas/Stream"});
    let mut value = serde_json::to_value(stream(None)).unwrap();
    assert!(check(&doc, &schema, &value, "ok").is_ok());
    value["extra"] = json!(1);
    assert!(check(&doc, &schema, &value, "extra").is_err());
    let details = serde_json::to_value(stream(Some(Vec::new()))).unwrap();
    assert!(check(&doc, &schema, &details, "topics").is_err());
    let mut missing = serde_json::to_value(stream(None)).unwrap();
    missing.as_object_mut().unwrap().remove("options");
    assert!(check(&doc, &schema, &missing, "missing").is_err());
}
