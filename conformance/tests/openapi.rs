//! The JSON shapes spec/http.spec declares (generated/openapi.json) against real JSON: one value
//! of each official type (`iggy_common =0.11.1-edge.2`) per route body and query, serialized by
//! the official serde code, validated by a small JSON Schema checker. If the official JSON does
//! not fit, the declared schema is wrong. Every declared schema and every route's bodies and query
//! must be exercised, so a schema cannot drift unchecked.

use iggy_generated::http::{OPENAPI_JSON, ROUTES};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeSet;

mod openapi_check;
use openapi_check::Checker;

/// Which part of a route a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Request,
    Response,
    Query,
    /// Path parameters by name.
    Path,
}

/// The official type's JSON: `value` read into `T`, written back by `T`'s own Serialize.
fn official<T: DeserializeOwned + Serialize>(value: Value) -> Value {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{} does not read {value}: {e}", std::any::type_name::<T>()));
    serde_json::to_value(&typed).expect("official type serializes")
}

fn operation<'d>(doc: &'d Value, method: &str, path: &str) -> &'d Value {
    let op = &doc["paths"][path][method.to_lowercase()];
    assert!(!op.is_null(), "{method} {path} is not in openapi.json");
    op
}

/// Checks one value against the route part's declared schema.
fn check_part(
    checker: &mut Checker<'_>,
    method: &str,
    path: &str,
    part: Part,
    value: &Value,
) -> Result<(), String> {
    let doc = checker.doc;
    let op = operation(doc, method, path);
    let at = format!("{method} {path} {part:?}");
    match part {
        Part::Request => {
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            if schema.is_null() {
                return Err(format!("{at}: no JSON request body declared"));
            }
            checker.check(schema, value, &at)
        }
        Part::Response => {
            let status = ROUTES
                .iter()
                .find(|r| r.method == method && r.path == path)
                .map(|r| r.status.to_string())
                .ok_or_else(|| format!("{at}: no such route"))?;
            let schema = &op["responses"][&status]["content"]["application/json"]["schema"];
            if schema.is_null() {
                return Err(format!("{at}: no JSON response declared"));
            }
            checker.check(schema, value, &at)
        }
        Part::Query | Part::Path => {
            // Parameters travel as text: the serialized struct's fields, nulls left out.
            let place = if part == Part::Query { "query" } else { "path" };
            let params: Vec<&Value> = op["parameters"]
                .as_array()
                .map(|ps| ps.iter().filter(|p| p["in"] == place).collect())
                .unwrap_or_default();
            let object = value
                .as_object()
                .ok_or_else(|| format!("{at}: not an object"))?;
            for (key, v) in object.iter().filter(|(_, v)| !v.is_null()) {
                let param = params
                    .iter()
                    .find(|p| p["name"] == key.as_str())
                    .ok_or_else(|| format!("{at}: `{key}` is not a declared {place} parameter"))?;
                let schema = &param["schema"];
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                // The declared type read back from the text, as a server parses it.
                let typed = match schema["type"].as_str() {
                    Some("integer") => serde_json::from_str::<Value>(&text)
                        .ok()
                        .filter(Value::is_number)
                        .ok_or_else(|| format!("{at}: `{key}`={text} is not an integer"))?,
                    Some("boolean") => match text.as_str() {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => return Err(format!("{at}: `{key}`={text} is not a boolean")),
                    },
                    _ => Value::String(text),
                };
                checker.check(schema, &typed, &format!("{at}.{key}"))?;
            }
            for p in &params {
                let name = p["name"].as_str().unwrap_or_default();
                if p["required"] == true && object.get(name).is_none_or(Value::is_null) {
                    return Err(format!("{at}: required {place} `{name}` missing"));
                }
            }
            Ok(())
        }
    }
}

fn options() -> Value {
    json!({
        "segment_size": {"value": "1073741824", "kind": "uint64", "explicit": false},
        "compression_algorithm": {"value": "none", "kind": "string", "explicit": true},
    })
}

fn context() -> Value {
    json!({"incarnation": 3, "owner_generation": 1, "metadata_op": 42})
}

fn topic() -> Value {
    json!({"id": 1, "created_at": 1_700_000_000_000_000u64, "name": "orders", "size": 4096,
        "messages_count": 10, "partitions_count": 2, "options": options()})
}

fn stream() -> Value {
    json!({"id": 1, "created_at": 1_700_000_000_000_000u64, "name": "shop", "size": 4096,
        "messages_count": 10, "topics_count": 1, "options": options()})
}

fn permissions() -> Value {
    json!({
        "global": {"manage_servers": false, "read_servers": true, "manage_users": false,
            "read_users": true, "manage_streams": false, "read_streams": true,
            "manage_topics": false, "read_topics": true, "poll_messages": true, "send_messages": false},
        "streams": {"1": {"manage_stream": false, "read_stream": true, "manage_topics": false,
            "read_topics": true, "poll_messages": true, "send_messages": true,
            "topics": {"2": {"manage_topic": true, "read_topic": true, "poll_messages": true, "send_messages": false}}},
            "3": {"manage_stream": true, "read_stream": true, "manage_topics": true,
            "read_topics": true, "poll_messages": true, "send_messages": true, "topics": null}}
    })
}

fn identity() -> Value {
    official::<iggy_common::IdentityInfo>(
        json!({"user_id": 1, "access_token": {"token": "eyJ.a.b", "expiry": 1_700_000_000u64}}),
    )
}

fn message(id: u64, headers: bool) -> Value {
    let user_headers = if headers {
        json!([{"key": {"kind": "string", "value": "a2V5"}, "value": {"kind": "uint64", "value": "KgAAAAAAAAA="}}])
    } else {
        json!([])
    };
    json!({
        "header": {"checksum": 12345, "id": id, "offset": 7, "timestamp": 1_700_000_000_000_000u64,
            "origin_timestamp": 1_700_000_000_000_000u64, "user_headers_length": 0,
            "payload_length": 5, "reserved": 0},
        "payload": "aGVsbG8=",
        "user_headers": user_headers,
    })
}

/// One official value per route part: (method, path, part, JSON).
fn cases() -> Vec<(&'static str, &'static str, Part, Value)> {
    use iggy_common as c;
    vec![
        ("GET", "/ping", Part::Response, json!("pong")),
        (
            "GET",
            "/openapi.json",
            Part::Response,
            serde_json::from_str(OPENAPI_JSON).unwrap(),
        ),
        (
            "GET",
            "/stats",
            Part::Response,
            official::<c::Stats>(json!({
            "process_id": 7, "cpu_usage": 1.5, "total_cpu_usage": 12.25, "memory_usage": 1000,
            "total_memory": 64000, "available_memory": 32000, "run_time": 5_000_000,
            "start_time": 1_700_000_000_000_000u64, "read_bytes": 1, "written_bytes": 2,
            "messages_size_bytes": 3, "streams_count": 1, "topics_count": 2, "partitions_count": 3,
            "segments_count": 4, "messages_count": 5, "clients_count": 6, "consumer_groups_count": 7,
            "hostname": "h", "os_name": "Linux", "os_version": "6", "kernel_version": "6.1",
            "iggy_server_version": "0.1.0", "iggy_server_semver": 4096,
            "cache_metrics": {"1-1-1": {"hits": 10, "misses": 2, "hit_ratio": 0.8}},
            "threads_count": 8, "free_disk_space": 100, "total_disk_space": 200,
            "open_files_count": 12, "open_files_limit": 1024})),
        ),
        (
            "POST",
            "/snapshot",
            Part::Request,
            official::<c::get_snapshot::GetSnapshot>(json!({
            "compression": "Deflated", "snapshot_types": ["FilesystemOverview", "ServerConfig"]})),
        ),
        (
            "GET",
            "/cluster/metadata",
            Part::Response,
            official::<c::ClusterMetadata>(json!({
            "name": "iggy-cluster", "nodes": [{"replica_id": 0, "name": "node-0", "ip": "127.0.0.1",
            "endpoints": {"tcp": 8090, "quic": 8080, "http": 3000, "websocket": 8092},
            "role": "leader", "status": "healthy"}]})),
        ),
        (
            "GET",
            "/options/{scope}",
            Part::Response,
            Value::Array(vec![official::<c::OptionSpec>(json!({
            "key": "segment_size", "kind": "uint64", "updatable": true, "resettable": true,
            "secret": false, "read_only": false, "critical": false,
            "default_value": [0, 0, 0, 64, 0, 0, 0, 0], "description": "segment size in bytes"}))]),
        ),
        (
            "GET",
            "/options/{scope}",
            Part::Path,
            json!({"scope": serde_json::to_value(c::OptionsScope::Topic).unwrap()}),
        ),
        (
            "GET",
            "/clients",
            Part::Response,
            Value::Array(vec![
                official::<c::ClientInfo>(
                    json!({"client_id": 5, "user_id": 1, "address": "127.0.0.1:5000",
                "transport": "tcp", "consumer_groups_count": 0}),
                ),
                official::<c::ClientInfo>(
                    json!({"client_id": 6, "user_id": null, "address": "127.0.0.1:5001",
                "transport": "http", "consumer_groups_count": 1}),
                ),
            ]),
        ),
        (
            "GET",
            "/clients/{client_id}",
            Part::Path,
            json!({"client_id": "5"}),
        ),
        (
            "GET",
            "/clients/{client_id}",
            Part::Response,
            official::<c::ClientInfoDetails>(json!({
            "client_id": 5, "user_id": 1, "address": "127.0.0.1:5000", "transport": "quic",
            "consumer_groups_count": 1, "consumer_groups": [{"stream_id": 1, "topic_id": 2, "group_id": 3}]})),
        ),
        (
            "POST",
            "/users/login",
            Part::Request,
            official::<c::login_user::LoginUser>(json!({
            "username": "iggy", "password": "secret", "version": "0.11.1", "context": null})),
        ),
        ("POST", "/users/login", Part::Response, identity()),
        (
            "POST",
            "/users/refresh-token",
            Part::Request,
            json!({"token": "eyJ.a.b"}),
        ),
        (
            "POST",
            "/users/refresh-token",
            Part::Response,
            official::<c::IdentityInfo>(json!({"user_id": 1, "access_token": null})),
        ),
        (
            "GET",
            "/users",
            Part::Response,
            Value::Array(vec![official::<c::UserInfo>(json!({
            "id": 1, "created_at": 1_700_000_000_000_000u64, "status": "active", "username": "iggy",
            "options": {}}))]),
        ),
        (
            "POST",
            "/users",
            Part::Request,
            official::<c::create_user::CreateUser>(json!({
            "username": "reader", "password": "secret123", "status": "inactive",
            "permissions": permissions(), "options": {"max_sessions": 4}})),
        ),
        (
            "POST",
            "/users",
            Part::Response,
            official::<c::UserInfoDetails>(json!({
            "id": 2, "created_at": 1_700_000_000_000_000u64, "status": "inactive", "username": "reader",
            "permissions": permissions(), "options": {}})),
        ),
        (
            "GET",
            "/users/{user_id}",
            Part::Response,
            official::<c::UserInfoDetails>(json!({
            "id": 1, "created_at": 1, "status": "active", "username": "iggy", "permissions": null, "options": {}})),
        ),
        (
            "PUT",
            "/users/{user_id}",
            Part::Request,
            official::<c::OptionsUpdate>(json!({
            "max_sessions": 8, "reset": ["session_ttl"]})),
        ),
        (
            "PUT",
            "/users/{user_id}/permissions",
            Part::Request,
            official::<c::update_permissions::UpdatePermissions>(json!({
            "permissions": permissions()})),
        ),
        (
            "PUT",
            "/users/{user_id}/password",
            Part::Request,
            official::<c::change_password::ChangePassword>(json!({
            "current_password": "secret123", "new_password": "secret456"})),
        ),
        (
            "POST",
            "/personal-access-tokens/login",
            Part::Request,
            official::<c::login_with_personal_access_token::LoginWithPersonalAccessToken>(json!({
            "token": "pat-token"})),
        ),
        (
            "POST",
            "/personal-access-tokens/login",
            Part::Response,
            identity(),
        ),
        (
            "GET",
            "/personal-access-tokens",
            Part::Response,
            Value::Array(vec![
                official::<c::PersonalAccessTokenInfo>(
                    json!({"name": "ci", "expiry_at": 1_800_000_000_000_000u64}),
                ),
                official::<c::PersonalAccessTokenInfo>(
                    json!({"name": "forever", "expiry_at": null}),
                ),
            ]),
        ),
        (
            "POST",
            "/personal-access-tokens",
            Part::Request,
            official::<c::create_personal_access_token::CreatePersonalAccessToken>(json!({
            "name": "ci", "expiry": 3_600_000_000u64})),
        ),
        (
            "POST",
            "/personal-access-tokens",
            Part::Response,
            official::<c::RawPersonalAccessToken>(json!({"token": "pat-token"})),
        ),
        (
            "GET",
            "/streams",
            Part::Response,
            Value::Array(vec![official::<c::Stream>(stream())]),
        ),
        (
            "POST",
            "/streams",
            Part::Request,
            official::<c::create_stream::CreateStream>(json!({
            "name": "shop", "options": {"message_expiry": "1h", "max_size": 1024, "encrypted": false}})),
        ),
        (
            "POST",
            "/streams",
            Part::Response,
            official::<c::StreamDetails>({
                let mut s = stream();
                s["topics"] = json!([topic()]);
                s
            }),
        ),
        (
            "GET",
            "/streams/{stream_id}",
            Part::Response,
            official::<c::StreamDetails>({
                let mut s = stream();
                s["topics"] = json!([]);
                s
            }),
        ),
        (
            "PUT",
            "/streams/{stream_id}",
            Part::Request,
            official::<c::OptionsUpdate>(json!({"max_size": "unlimited"})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics",
            Part::Response,
            Value::Array(vec![official::<c::Topic>(topic())]),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics",
            Part::Request,
            official::<c::create_topic::CreateTopic>(json!({
            "partitions_count": 2, "name": "orders", "options": {"replication_factor": 1}})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics",
            Part::Response,
            official::<c::TopicDetails>({
                let mut t = topic();
                t["partitions"] = json!([{"id": 0, "created_at": 1, "segments_count": 1, "current_offset": 9,
                "size": 100, "messages_count": 10, "context": context()}]);
                t
            }),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}",
            Part::Response,
            official::<c::TopicDetails>({
                let mut t = topic();
                t["partitions"] = json!([]);
                t
            }),
        ),
        (
            "PUT",
            "/streams/{stream_id}/topics/{topic_id}",
            Part::Request,
            official::<c::OptionsUpdate>(json!({
            "reset": ["message_expiry"]})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/partitions",
            Part::Request,
            official::<c::create_partitions::CreatePartitions>(json!({
            "partitions_count": 3})),
        ),
        (
            "DELETE",
            "/streams/{stream_id}/topics/{topic_id}/partitions",
            Part::Query,
            official::<c::delete_partitions::DeletePartitions>(json!({
            "partitions_count": 1})),
        ),
        (
            "DELETE",
            "/streams/{stream_id}/topics/{topic_id}/partitions/{partition_id}",
            Part::Path,
            json!({
            "stream_id": "shop", "topic_id": "1", "partition_id": "0"}),
        ),
        (
            "DELETE",
            "/streams/{stream_id}/topics/{topic_id}/partitions/{partition_id}",
            Part::Query,
            official::<c::delete_segments::DeleteSegments>(json!({
            "segments_count": 2})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups",
            Part::Response,
            Value::Array(vec![official::<c::ConsumerGroup>(json!({
            "id": 1, "name": "workers", "partitions_count": 2, "members_count": 1}))]),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups",
            Part::Request,
            official::<c::create_consumer_group::CreateConsumerGroup>(json!({
            "name": "workers"})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups",
            Part::Response,
            official::<c::ConsumerGroupDetails>(json!({
            "id": 1, "name": "workers", "partitions_count": 2, "members_count": 0, "members": []})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups/{group_id}",
            Part::Response,
            official::<c::ConsumerGroupDetails>(json!({
            "id": 1, "name": "workers", "partitions_count": 2, "members_count": 1,
            "members": [{"id": 5, "partitions_count": 2, "partitions": [0, 1]}]})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Query,
            official::<c::PollMessages>(json!({
            "consumer_kind": "consumer_group", "consumer_id": "workers", "partition_id": 1,
            "kind": "timestamp", "value": "1700000000000000",
            "context": serde_json::to_string(&context()).unwrap(), "count": 100, "auto_commit": true})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Query,
            official::<c::PollMessages>(json!({
            "consumer_kind": "consumer", "consumer_id": "1", "partition_id": null})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Response,
            official::<c::PolledMessages>(json!({
            "context": context(), "partition_id": 1, "current_offset": 8, "count": 2,
            "messages": [message(1, false), message(u64::MAX, true)]})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Request,
            official::<c::SendMessages>(json!({
            "partitioning": {"kind": "partition_id", "value": "AQAAAA=="},
            "messages": [{"id": 0, "payload": "aGVsbG8="},
                {"id": 42, "payload": "d29ybGQ=", "user_headers": [{"key": {"kind": "string", "value": "a2V5"}, "value": {"kind": "bool", "value": "AQ=="}}]}],
            "context": context()})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Request,
            official::<c::SendMessages>(json!({
            "partitioning": {"kind": "balanced", "value": ""},
            "messages": [{"id": 7, "payload": "aGVsbG8="}]})),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Query,
            json!({"ack": "none"}),
        ),
        (
            "POST",
            "/streams/{stream_id}/topics/{topic_id}/messages",
            Part::Response,
            official::<c::SendMessagesConfirmations>(json!({
            "confirmations": [{"stream_id": 1, "topic_id": 1, "partition_id": 1, "base_offset": 10}]})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            Part::Query,
            official::<c::get_consumer_offset::GetConsumerOffset>(json!({
            "consumer_kind": "consumer", "consumer_id": "7", "partition_id": 1})),
        ),
        (
            "GET",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            Part::Response,
            official::<c::ConsumerOffsetInfo>(json!({
            "partition_id": 1, "current_offset": 9, "stored_offset": 4})),
        ),
        (
            "PUT",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            Part::Request,
            official::<c::store_consumer_offset::StoreConsumerOffset>(json!({
            "consumer_kind": "external_group", "consumer_id": "billing", "partition_id": 1, "offset": 4, "context": context()})),
        ),
        (
            "PUT",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            Part::Request,
            official::<c::store_consumer_offset::StoreConsumerOffset>(json!({
            "consumer_kind": "consumer", "consumer_id": "1", "partition_id": null, "offset": 0})),
        ),
        (
            "DELETE",
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets/{consumer_id}",
            Part::Query,
            official::<c::delete_consumer_offset::DeleteConsumerOffset>(json!({
            "consumer_kind": "consumer", "partition_id": 1})),
        ),
    ]
}

fn document() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("generated/openapi.json is JSON")
}

#[test]
fn official_json_fits_the_declared_schemas() {
    let doc = document();
    let mut checker = Checker::new(&doc);
    let failures: Vec<String> = cases()
        .iter()
        .filter_map(|(method, path, part, value)| {
            check_part(&mut checker, method, path, *part, value).err()
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} values do not fit:\n{}",
        failures.len(),
        cases().len(),
        failures.join("\n")
    );
}

#[test]
fn every_declared_schema_and_route_body_is_exercised() {
    let doc = document();
    let mut checker = Checker::new(&doc);
    let cases = cases();
    for (method, path, part, value) in &cases {
        let _ = check_part(&mut checker, method, path, *part, value);
    }
    let declared: BTreeSet<String> = doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "Error")
        .cloned()
        .collect();
    let unexercised: Vec<&String> = declared.difference(&checker.seen).collect();
    assert!(
        unexercised.is_empty(),
        "schemas no official value went through: {unexercised:?}"
    );
    // Every route part the document declares has a value.
    let mut missing = Vec::new();
    for route in ROUTES {
        let op = operation(&doc, route.method, route.path);
        let has = |part: Part| {
            cases
                .iter()
                .any(|(m, p, k, _)| *m == route.method && *p == route.path && *k == part)
        };
        let declares_query = op["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
        let declares_response =
            op["responses"][route.status.to_string()]["content"]["application/json"].is_object();
        // A path parameter typed beyond a plain string (a `param` row) needs a value too.
        let typed_path = op["parameters"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["in"] == "path" && p["schema"] != json!({"type": "string"}))
        });
        for (declared, part) in [
            (typed_path, Part::Path),
            (
                op["requestBody"]["content"]["application/json"].is_object(),
                Part::Request,
            ),
            (declares_response, Part::Response),
            (declares_query, Part::Query),
        ] {
            if declared && !has(part) {
                missing.push(format!("{} {} {part:?}", route.method, route.path));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "route parts without an official value: {missing:?}"
    );
}

#[test]
fn every_json_route_declares_its_bodies() {
    // Every route with a JSON success body declares it (a 204 has none); ping answers "pong".
    let doc = document();
    let undeclared: Vec<String> = ROUTES
        .iter()
        .filter(|r| r.status != 204)
        .filter(|r| {
            operation(&doc, r.method, r.path)["responses"][r.status.to_string()]["content"]
                .is_null()
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        undeclared.is_empty(),
        "routes without a response schema: {undeclared:?}"
    );
    // Client generators name methods by operationId: one per operation.
    let mut ids = BTreeSet::new();
    for r in ROUTES {
        let id = operation(&doc, r.method, r.path)["operationId"]
            .as_str()
            .expect("operationId")
            .to_string();
        assert!(ids.insert(id.clone()), "operationId {id} repeats");
    }
}

#[test]
fn the_checker_rejects_what_does_not_fit() {
    // The validator is only as good as its refusals.
    let doc = document();
    let mut c = Checker::new(&doc);
    let stream = official::<iggy_common::Stream>(stream());
    let schema = json!({"$ref": "#/components/schemas/Stream"});
    assert!(c.check(&schema, &stream, "ok").is_ok());
    let mut extra = stream.clone();
    extra["surprise"] = json!(1);
    assert!(
        c.check(&schema, &extra, "extra")
            .unwrap_err()
            .contains("not a declared property")
    );
    let mut missing = stream.clone();
    missing.as_object_mut().unwrap().remove("name");
    assert!(
        c.check(&schema, &missing, "missing")
            .unwrap_err()
            .contains("required `name`")
    );
    let mut wide = stream.clone();
    wide["topics_count"] = json!(u64::from(u32::MAX) + 1);
    assert!(
        c.check(&schema, &wide, "wide")
            .unwrap_err()
            .contains("above the maximum")
    );
    let mut null = stream;
    null["name"] = Value::Null;
    assert!(c.check(&schema, &null, "null").is_err());
    let kind = json!({"$ref": "#/components/schemas/ConsumerKind"});
    assert!(c.check(&kind, &json!("consumer_group"), "kind").is_ok());
    assert!(c.check(&kind, &json!("group"), "kind").is_err());
    let b64 = json!({"type": "string", "contentEncoding": "base64"});
    assert!(c.check(&b64, &json!("aGVsbG8="), "b64").is_ok());
    assert!(c.check(&b64, &json!("not base64!"), "b64").is_err());
    let q = check_part(
        &mut c,
        "DELETE",
        "/streams/{stream_id}/topics/{topic_id}/partitions",
        Part::Query,
        &json!({}),
    );
    assert!(q.unwrap_err().contains("required query `partitions_count`"));
    let p = check_part(
        &mut c,
        "GET",
        "/options/{scope}",
        Part::Path,
        &json!({"scope": "everything"}),
    );
    assert!(p.unwrap_err().contains("is not one of"));
}
