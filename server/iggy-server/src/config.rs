//! Server configuration: embedded defaults, an optional `config.toml`, then `IGGY_<PATH>`
//! environment overrides. Unknown keys and unparsable values are errors that name the key.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use toml::{Table, Value};

mod cluster;
pub use cluster::{
    Cluster, ClusterAuth, ClusterNode, ClusterTls, NodeHost, bind_serves, roster_env_vars,
    with_port,
};

/// The embedded defaults, also the catalogue of every known key.
pub const DEFAULTS: &str = include_str!("defaults.toml");

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub system: System,
    pub runtime: Runtime,
    pub node: Node,
    pub limits: Limits,
    pub partition: Partition,
    pub tcp: Tcp,
    pub quic: Quic,
    pub http: Http,
    pub websocket: WebSocket,
    /// Built by `load` from `[cluster]` and the roster, which serde does not see.
    #[serde(skip)]
    pub cluster: Cluster,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct System {
    pub path: String,
    pub durability: String,
    pub segment_size: u64,
    pub segment_writeback_bytes: u64,
    pub checkpoint_journal_bytes: u64,
    pub checkpoint_journal_ops: usize,
    pub session_lease_secs: u64,
    pub maintenance_interval_ms: u64,
    /// A duration ("20s"; "0s" turns the detector off): see [`System::max_disk_stall`].
    #[serde(rename = "max_disk_stall")]
    pub max_disk_stall_text: String,
    pub logging: Logging,
}

impl System {
    /// How long a disk write, fsync, truncation, creation, rename or removal may be in flight
    /// before the node fail-stops (`iggy_storage::stall`); zero turns the detector off.
    /// Validated at load.
    pub fn max_disk_stall(&self) -> std::time::Duration {
        self.checked_max_disk_stall().unwrap_or_default()
    }

    /// `max_disk_stall` parsed, or why it is refused: under a second a healthy fsync under
    /// load would stop the node.
    fn checked_max_disk_stall(&self) -> Result<std::time::Duration, ConfigError> {
        match cluster::parse_duration(self.max_disk_stall_text.trim()) {
            Some(limit)
                if limit.is_zero()
                    || (limit >= std::time::Duration::from_secs(1) && limit <= DURATION_MAX) =>
            {
                Ok(limit)
            }
            _ => Err(ConfigError::BadValue {
                key: "system.max_disk_stall".into(),
                value: self.max_disk_stall_text.clone(),
                expected: "duration of 1s to ten years (a whole number with ms, s, m or h: \
                           \"20s\"), or \"0s\" for no stall detection",
            }),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Logging {
    /// trace, debug, info, warn, error or off; `RUST_LOG` replaces it when set.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

/// The longest duration a setting takes (ten years).
const DURATION_MAX: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The values `system.logging.level` admits.
pub const LOG_LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// The smallest `limits.max_frame_size` taken: a login, a metadata reply or a small batch fits
/// (a cluster's metadata checkpoint is cut into pieces of it; an e2e test runs one at 8 KiB).
const MIN_FRAME_SIZE: u32 = 8 * 1024;
/// The least `quic.max_reply_size`: room for a poll reply of a few ordinary messages.
const QUIC_REPLY_MIN: u64 = 64 * 1024;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    pub shards: usize,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub advertised_address: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_frame_size: u32,
    pub max_connections: usize,
    pub clients_table_max: usize,
    pub dedup_clients_max: usize,
    pub idle_timeout_secs: u64,
    pub request_timeout_ms: u64,
    /// Bytes of request bodies held at once on the node (0: from the machine's memory, see
    /// [`Limits::request_bodies_budget`]).
    pub max_request_bodies_size: u64,
}

impl Limits {
    /// How long a connection may wait for its next request (at least a second; a start refuses
    /// 0).
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.idle_timeout_secs.max(1))
    }

    /// How long a request may take once begun: its body, a handshake, its dispatch (at least a
    /// millisecond).
    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.request_timeout_ms.max(1))
    }

    /// The bytes of request bodies the node holds at once: `max_request_bodies_size`, or when
    /// 0 a quarter of `memory` (the machine's, or the process's cgroup limit when lower;
    /// unknown: 1 GiB). A body larger than it is still read when it is the only one held.
    pub fn request_bodies_budget(&self, memory: Option<u64>) -> u64 {
        match self.max_request_bodies_size {
            0 => memory.map_or(1 << 30, |memory| memory / 4),
            configured => configured,
        }
    }
}

/// `[partition]`: what each partition keeps.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// Consumer offset keys (consumers, consumer groups, external groups) one partition keeps;
    /// an offset store naming a new key beyond them is refused (TooManyConsumerOffsets, 3024).
    pub consumer_offsets_max: u32,
}

/// `[http]`: the REST API's listener, request limit, CORS and access tokens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Http {
    pub enabled: bool,
    pub address: String,
    pub max_request_size: u64,
    pub max_in_flight_per_session: usize,
    pub max_in_flight: usize,
    /// Sessions one user may hold on this node for unexpired access tokens; a further login over
    /// HTTP is answered 429 (0: no limit). An HTTP session lasts as long as its tokens, so a
    /// client that logs in per request and never logs out would otherwise fill the replicated
    /// session table (`limits.clients_table_max`) and lock every user out until they expire.
    pub max_sessions_per_user: usize,
    pub cors: Cors,
    pub jwt: Jwt,
    pub metrics: Metrics,
    /// `[http.tls]`: HTTPS on the same address in place of plain HTTP.
    pub tls: Tls,
}

/// `[http.metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub enabled: bool,
    pub endpoint: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cors {
    pub enabled: bool,
    pub allowed_methods: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub exposed_headers: Vec<String>,
    pub allow_credentials: bool,
    pub allow_private_network: bool,
}

#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Jwt {
    pub algorithm: String,
    pub issuer: String,
    pub audience: String,
    pub access_token_expiry_secs: u64,
    pub clock_skew_secs: u64,
    pub not_before_secs: u64,
    pub encoding_secret: String,
    pub decoding_secret: String,
    pub use_base64_secret: bool,
}

/// The secrets show only their length, as the cluster's do: the configuration's Debug form
/// goes into logs and into snapshots, which read_servers alone may take, and whoever holds the
/// signing secret can sign access tokens.
impl std::fmt::Debug for Jwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |secret: &str| format!("Secret({} bytes)", secret.len());
        f.debug_struct("Jwt")
            .field("algorithm", &self.algorithm)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("access_token_expiry_secs", &self.access_token_expiry_secs)
            .field("clock_skew_secs", &self.clock_skew_secs)
            .field("not_before_secs", &self.not_before_secs)
            .field(
                "encoding_secret",
                &format_args!("{}", redacted(&self.encoding_secret)),
            )
            .field(
                "decoding_secret",
                &format_args!("{}", redacted(&self.decoding_secret)),
            )
            .field("use_base64_secret", &self.use_base64_secret)
            .finish()
    }
}

/// Whether a GET of `path` is a route of the REST API (`iggy_generated::http::ROUTES`; a
/// `{parameter}` segment matches any non-empty one), which a metrics endpoint there would hide.
fn rest_get_route(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    iggy_generated::http::ROUTES
        .iter()
        .filter(|route| route.method == "GET")
        .any(|route| {
            let template: Vec<&str> = route.path.split('/').collect();
            template.len() == segments.len()
                && template.iter().zip(&segments).all(|(part, segment)| {
                    part == segment || (part.starts_with('{') && !segment.is_empty())
                })
        })
}

impl Http {
    fn validate(&self, problems: &mut Vec<ConfigError>) {
        let bad = |key: &str, value: String, expected: &'static str| ConfigError::BadValue {
            key: key.into(),
            value,
            expected,
        };
        if self.jwt.algorithm != "HS256" {
            problems.push(bad(
                "http.jwt.algorithm",
                self.jwt.algorithm.clone(),
                "token algorithm (HS256)",
            ));
        }
        if self.jwt.access_token_expiry_secs == 0 {
            problems.push(bad(
                "http.jwt.access_token_expiry_secs",
                "0".into(),
                "token lifetime (at least 1 second)",
            ));
        }
        // HS256 checks a token with the secret that signed it: any other decoding secret
        // refuses every token a login issues.
        if self.jwt.encoding_secret != self.jwt.decoding_secret {
            problems.push(bad(
                "http.jwt.decoding_secret",
                "(not shown)".into(),
                "secret equal to http.jwt.encoding_secret (HS256 signs and checks with one \
                 secret; both empty for a random one)",
            ));
        }
        let endpoint = &self.metrics.endpoint;
        if self.metrics.enabled
            && (!endpoint.starts_with('/')
                || endpoint.contains(|c: char| c == '?' || c == '#' || c.is_whitespace()))
        {
            problems.push(bad(
                "http.metrics.endpoint",
                self.metrics.endpoint.clone(),
                "path (starting with /, no query, fragment or space: a request path that \
                 could equal it)",
            ));
        }
        if self.metrics.enabled && rest_get_route(&self.metrics.endpoint) {
            problems.push(bad(
                "http.metrics.endpoint",
                self.metrics.endpoint.clone(),
                "path no GET route of the REST API serves (metrics would hide it)",
            ));
        }
        if self.max_request_size == 0 {
            problems.push(bad(
                "http.max_request_size",
                "0".into(),
                "size (at least 1 byte)",
            ));
        }
        // Each item as a browser sends and reads it: one that is not (a literal `["GET"]`, a
        // method `FETCH` no request carries) left CORS broken without a word.
        let cors = &self.cors;
        for method in cors.allowed_methods.iter().filter(|m| !http_method(m)) {
            problems.push(bad(
                "http.cors.allowed_methods",
                method.clone(),
                "HTTP method (GET, POST, PUT, DELETE, PATCH, HEAD, OPTIONS, …)",
            ));
        }
        for origin in cors.allowed_origins.iter().filter(|o| !cors_origin(o)) {
            problems.push(bad(
                "http.cors.allowed_origins",
                origin.clone(),
                "origin (`*`, or scheme://host[:port] with no path)",
            ));
        }
        let headers = cors.allowed_headers.iter().chain(&cors.exposed_headers);
        for header in headers.filter(|h| !http_token(h) && h.as_str() != "*") {
            problems.push(bad(
                "http.cors.allowed_headers",
                header.clone(),
                "header name (or `*`)",
            ));
        }
    }
}

/// An HTTP token (RFC 9110 `tchar`s): a method or a header name.
fn http_token(text: &str) -> bool {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    !text.is_empty() && text.chars().all(tchar)
}

/// A method a CORS preflight can name: a token of upper-case letters the HTTP registry holds.
fn http_method(text: &str) -> bool {
    const METHODS: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    METHODS.contains(&text) || text == "*"
}

/// `*`, or an origin as a browser sends it: `scheme://host[:port]`, no path, query or user.
fn cors_origin(text: &str) -> bool {
    if text == "*" {
        return true;
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return false;
    };
    let scheme_ok = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || rest.starts_with('[') => {
            (host, Some(port))
        }
        _ => (rest, None),
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._[]:".contains(c));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    scheme_ok && host_ok && port_ok
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tcp {
    pub enabled: bool,
    pub address: String,
    pub tls: Tls,
}

/// A TLS listener's certificate: the PEM files, or one generated at start.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub enabled: bool,
    pub self_signed: bool,
    pub cert_file: String,
    pub key_file: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Quic {
    pub enabled: bool,
    pub address: String,
    pub max_concurrent_bidi_streams: u64,
    pub datagram_send_buffer_size: u64,
    pub initial_mtu: u16,
    pub send_window: u64,
    pub receive_window: u64,
    pub keep_alive_interval_ms: u64,
    pub max_idle_timeout_ms: u64,
    pub max_reply_size: u64,
    pub certificate: QuicCertificate,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuicCertificate {
    pub self_signed: bool,
    pub cert_file: String,
    pub key_file: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebSocket {
    pub enabled: bool,
    pub address: String,
    pub read_buffer_size: usize,
    pub write_buffer_size: usize,
    pub max_write_buffer_size: usize,
    pub max_message_size: usize,
    pub max_frame_size: usize,
    pub accept_unmasked_frames: bool,
    pub tls: Tls,
}

#[derive(Debug, PartialEq)]
pub enum ConfigError {
    Toml(String),
    UnknownKey(String),
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    BadAddress {
        key: String,
        value: String,
    },
    WildcardWithoutAdvertised {
        key: String,
    },
    /// A `[cluster]` rule broken: the key and what is wrong with it.
    Cluster {
        key: String,
        problem: String,
    },
    /// `--replica-id` does not fit the configuration.
    ReplicaId(String),
    /// Every unknown key and mistyped value of the file and the environment, so an operator
    /// fixes them in one go (an upstream file had dozens).
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// One error for `problems`: the only one, or all of them.
    fn of(mut problems: Vec<ConfigError>) -> Result<(), ConfigError> {
        match problems.len() {
            0 => Ok(()),
            1 => Err(problems.remove(0)),
            _ => Err(Self::Several(problems)),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Toml(m) => write!(f, "config: {m}"),
            Self::UnknownKey(k) => match upstream_equivalent(k) {
                Some(ours) => write!(f, "config: unknown key `{k}` (upstream's; here: {ours})"),
                None => write!(f, "config: unknown key `{k}`"),
            },
            Self::BadValue {
                key,
                value,
                expected,
            } => {
                write!(f, "config: `{key}` = {value:?} is not a valid {expected}")
            }
            Self::BadAddress { key, value } => {
                write!(f, "config: `{key}` = {value:?} is not a socket address")
            }
            Self::WildcardWithoutAdvertised { key } => write!(
                f,
                "config: `{key}` binds a wildcard address; set node.advertised_address \
                 (IGGY_NODE_ADVERTISED_ADDRESS)"
            ),
            Self::Cluster { key, problem } => write!(f, "config: `{key}` {problem}"),
            Self::ReplicaId(m) => write!(f, "{m}"),
            Self::Several(problems) => {
                write!(f, "config: {} problems:", problems.len())?;
                for problem in problems {
                    let text = problem.to_string();
                    write!(f, "\n  {}", text.strip_prefix("config: ").unwrap_or(&text))?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

fn defaults_table() -> Table {
    DEFAULTS
        .parse::<Table>()
        .expect("embedded defaults are valid TOML")
}

/// Every leaf key as `section.key`, with its default value.
pub fn leaves() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    flatten("", &defaults_table(), &mut out);
    out
}

fn flatten(prefix: &str, t: &Table, out: &mut BTreeMap<String, Value>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(inner) => flatten(&path, inner, out),
            other => {
                out.insert(path, other.clone());
            }
        }
    }
}

/// `system.path` -> `IGGY_SYSTEM_PATH`.
pub fn env_name(path: &str) -> String {
    format!("IGGY_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// Each configuration section's variable prefix (`IGGY_TCP_`).
fn section_prefixes() -> Vec<String> {
    defaults_table()
        .keys()
        .map(|section| env_name(section) + "_")
        .collect()
}

/// The variables among `names` that start as a configuration section's (`IGGY_TCP_…`) but
/// name none of its keys, nor a roster field (`IGGY_CLUSTER_NODES_<i>_…`): mistyped keys,
/// refused as a file's unknown keys are. Other `IGGY_` variables (`IGGY_CONFIG_PATH`,
/// `IGGY_ROOT_PASSWORD`, a client's `IGGY_USERNAME`) are not configuration keys and pass.
pub fn unknown_env_vars(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let sections = section_prefixes();
    let keys: std::collections::BTreeSet<String> =
        leaves().keys().map(|path| env_name(path)).collect();
    let roster = cluster::roster_env_vars();
    let a_roster_field = |name: &str| {
        roster.iter().any(|(template, _, _)| {
            let (prefix, suffix) = template.split_once("<i>").expect("a roster template");
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
                .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| {
            sections
                .iter()
                .any(|section| name.starts_with(section.as_str()))
        })
        .filter(|name| !keys.contains(name) && !a_roster_field(name))
        .collect();
    unknown.sort();
    unknown
}

/// `IGGY_` variables the server or the official CLI reads that are not configuration keys.
const OTHER_VARIABLES: &[&str] = &[
    "IGGY_CONFIG_PATH",
    "IGGY_ROOT_USERNAME",
    "IGGY_ROOT_PASSWORD",
    "IGGY_HOME",
    "IGGY_USERNAME",
    "IGGY_PASSWORD",
    "IGGY_TOKEN",
];

/// The `IGGY_` variables among `names` that [`unknown_env_vars`] lets pass but that nothing
/// reads: no section starts them (`IGGY_TCPP_ADDRESS`, `IGGY_tcp_address`) and they are none
/// of [`OTHER_VARIABLES`] nor a test hook (`IGGY_DEBUG_`). Warned of, not refused: another
/// tool's variable may share the prefix.
pub fn unread_env_vars(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let sections = section_prefixes();
    let mut unread: Vec<String> = names
        .into_iter()
        .filter(|name| name.starts_with("IGGY_") && !name.starts_with("IGGY_DEBUG_"))
        .filter(|name| !OTHER_VARIABLES.contains(&name.as_str()))
        .filter(|name| !sections.iter().any(|s| name.starts_with(s.as_str())))
        .collect();
    unread.sort();
    unread
}

/// Where the configuration reference lives, relative to this crate.
#[cfg(test)]
pub const REFERENCE_PATH: &str = "config.reference.toml";

/// The configuration reference (`config.reference.toml`): every key of [`leaves`] with its
/// default, its `IGGY_` variable and type (the table `--list-config-env-vars` prints), and the
/// comments `defaults.toml` gives it, in `defaults.toml`'s order. Valid TOML equal to the
/// defaults.
#[cfg(test)]
pub fn reference() -> String {
    let mut values = leaves();
    let mut out = String::from(
        "# iggy-server configuration reference: every key, its default and its environment\n\
         # variable. Generated from the embedded defaults (server/iggy-server/src/defaults.toml)\n\
         # by a unit test; do not edit (regenerate: IGGY_WRITE_CONFIG_REFERENCE=1\n\
         # cargo nextest run -p iggy-server config_reference).\n\
         #\n\
         # The server reads config.toml from its working directory (or the file IGGY_CONFIG_PATH\n\
         # names) over the defaults, then IGGY_<SECTION>_<KEY> variables over both. Copy the keys\n\
         # you change; unknown keys and bad values are refused with the key's name.\n",
    );
    let mut section = String::new();
    let mut comments: Vec<&str> = Vec::new();
    for line in DEFAULTS.lines().map(str::trim) {
        if let Some(comment) = line.strip_prefix('#') {
            comments.push(comment);
        } else if let Some(name) = line.strip_prefix('[') {
            section = name.trim_end_matches(']').trim().to_string();
            out.push_str(&format!("\n[{section}]\n"));
            for comment in comments.drain(..) {
                out.push_str(&format!("#{comment}\n"));
            }
        } else if let Some((key, _)) = line.split_once('=') {
            let path = format!("{section}.{}", key.trim());
            let value = values
                .remove(&path)
                .unwrap_or_else(|| panic!("{path} in defaults.toml is not a leaf"));
            for comment in comments.drain(..) {
                out.push_str(&format!("#{comment}\n"));
            }
            out.push_str(&format!(
                "# {} ({}, default {value})\n{} = {value}\n",
                env_name(&path),
                type_name(&value),
                key.trim(),
            ));
        } else {
            // A blank line: comments before it belong to the file, not to a key.
            comments.clear();
        }
    }
    assert!(values.is_empty(), "leaves not rendered: {values:?}");
    out
}

/// Lays `over` (a file's keys) over `base`, pushing each unknown key and mistyped value on
/// `problems` and going on with the others.
fn merge(base: &mut Table, over: &Table, prefix: &str, problems: &mut Vec<ConfigError>) {
    for (k, v) in over {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (base.get_mut(k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o, &path, problems),
            (Some(Value::Table(_)) | None, _) | (Some(_), Value::Table(_)) => {
                problems.push(ConfigError::UnknownKey(path))
            }
            (Some(slot @ Value::Integer(_)), Value::String(text)) if is_byte_size(&path) => {
                match parse_byte_size(text) {
                    Some(bytes) => *slot = Value::Integer(bytes),
                    None => problems.push(ConfigError::BadValue {
                        key: path,
                        value: text.clone(),
                        expected: "size (bytes, or a number and a unit: \"2 MB\", \"64 MiB\")",
                    }),
                }
            }
            (Some(slot), val) if std::mem::discriminant(slot) != std::mem::discriminant(val) => {
                // A mistyped secret is still a secret: the error names only its key.
                let value = match val {
                    _ if path.ends_with("secret") => "<hidden>".to_string(),
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                problems.push(ConfigError::BadValue {
                    key: path,
                    value,
                    expected: type_name(slot),
                });
            }
            (Some(slot), val) => *slot = val.clone(),
        }
    }
}

/// Whether the integer key `path` counts bytes, so that it also takes upstream's sizes as text
/// (`"2 MB"`, `"64 MiB"`, `"1200 B"`).
fn is_byte_size(path: &str) -> bool {
    let key = path.rsplit('.').next().unwrap_or(path);
    key.ends_with("_size")
        || key.ends_with("_bytes")
        || key.ends_with("_window")
        || key == "initial_mtu"
}

/// A size as upstream writes it (`"2 MB"`, `"64 MiB"`, `"1200 B"`: `options::byte_size`), or a
/// bare number of bytes.
fn parse_byte_size(text: &str) -> Option<i64> {
    let text = text.trim();
    let bytes = text
        .parse::<u64>()
        .ok()
        .or_else(|| iggy_metadata::options::byte_size(text))?;
    i64::try_from(bytes).ok()
}

/// For a key of upstream's configuration this server names otherwise: what to write here.
fn upstream_equivalent(key: &str) -> Option<&'static str> {
    Some(match key {
        "system.segment" => "`system.segment_size` for its `size` (bytes, or \"1 GiB\")",
        "http.jwt.access_token_expiry" => "`http.jwt.access_token_expiry_secs` (seconds)",
        "http.jwt.clock_skew" => "`http.jwt.clock_skew_secs` (seconds)",
        "http.jwt.not_before" => "`http.jwt.not_before_secs` (seconds)",
        "http.jwt.valid_issuers" => "`http.jwt.issuer` (one issuer)",
        "http.jwt.valid_audiences" => "`http.jwt.audience` (one audience)",
        "quic.keep_alive_interval" => "`quic.keep_alive_interval_ms` (milliseconds)",
        "quic.max_idle_timeout" => "`quic.max_idle_timeout_ms` (milliseconds)",
        "system.logging.path" | "system.logging.file_enabled" => {
            "none: the log goes to standard error (the service manager keeps it)"
        }
        "system.encryption" => {
            "none: encryption at rest is not offered (StreamEncryptionUnavailable)"
        }
        "heartbeat" => "none: a client's connection is watched by `limits.idle_timeout_secs`",
        "system.sharding" | "system.runtime" => "`runtime.shards` (0: one per core)",
        "system.partition" => {
            "`system.durability` (replicated or persisted) decides when a write is fsynced"
        }
        _ => return None,
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Boolean(_) => "boolean",
        Value::Integer(_) => "integer",
        Value::Float(_) => "float",
        Value::Array(_) => "list (comma-separated, or a TOML array, in the environment)",
        _ => "string",
    }
}

fn set_path(t: &mut Table, path: &str, v: Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().expect("non-empty path");
    let mut cur = t;
    for p in parts {
        cur = cur
            .get_mut(p)
            .and_then(Value::as_table_mut)
            .expect("known section");
    }
    cur.insert(last.to_string(), v);
}

/// A value the key's type cannot hold (a negative count, a port past 65535): serde's message
/// names the key on a line of its own; said as the other bad values are.
fn out_of_range(error: &toml::de::Error) -> ConfigError {
    let text = error.to_string();
    let text = text.trim_end();
    match text.split_once("\nin `") {
        Some((what, key)) => {
            ConfigError::Toml(format!("`{}`: {what}", key.trim_end_matches(['`', '\n'])))
        }
        None => ConfigError::Toml(text.to_string()),
    }
}

/// The parser's refusal of a config file. Its message quotes the line it stopped on; for a
/// line that holds a secret only the position and the reason are kept.
fn file_not_toml(text: &str, error: &toml::de::Error) -> ConfigError {
    let Some(span) = error.span() else {
        return ConfigError::Toml(error.to_string());
    };
    let bytes = text.as_bytes();
    let start = span.start.min(bytes.len());
    let end = span.end.clamp(start, bytes.len());
    let from = bytes[..start]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let to = bytes[end..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(bytes.len(), |i| end + i);
    let quoted = String::from_utf8_lossy(&bytes[from..to]);
    if !quoted.to_ascii_lowercase().contains("secret") {
        return ConfigError::Toml(error.to_string());
    }
    let line = bytes[..start].iter().filter(|&&c| c == b'\n').count() + 1;
    ConfigError::Toml(format!(
        "TOML parse error at line {line}: {} (the line is not shown: it holds a secret)",
        error.message().trim_end()
    ))
}

/// Builds the configuration from an optional file text and an environment lookup.
pub fn load(
    file: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    load_for(file, env, false)
}

/// [`load`] for offline work (`iggy-server verify`): a wildcard bind needs no advertised
/// address, since no client is told one.
pub fn load_offline(
    file: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    load_for(file, env, true)
}

fn load_for(
    file: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    offline: bool,
) -> Result<Config, ConfigError> {
    let mut table = defaults_table();
    let mut roster = Vec::new();
    let mut problems = Vec::new();
    if let Some(text) = file {
        let mut over = text.parse::<Table>().map_err(|e| file_not_toml(text, &e))?;
        roster = cluster::take_file_roster(&mut over)?;
        merge(&mut table, &over, "", &mut problems);
    }
    cluster::apply_env_roster(&mut roster, &env)?;
    for (path, default) in leaves() {
        let Some(raw) = env(&env_name(&path)) else {
            continue;
        };
        let bad = || ConfigError::BadValue {
            key: path.clone(),
            value: raw.clone(),
            expected: type_name(&default),
        };
        let v = match default {
            Value::Boolean(_) => match raw.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Value::Boolean(true),
                "false" | "0" => Value::Boolean(false),
                _ => {
                    problems.push(bad());
                    continue;
                }
            },
            Value::Integer(_) => match raw
                .trim()
                .parse()
                .ok()
                .or_else(|| is_byte_size(&path).then(|| parse_byte_size(&raw)).flatten())
            {
                Some(n) => Value::Integer(n),
                None => {
                    problems.push(bad());
                    continue;
                }
            },
            Value::Float(_) => match raw.trim().parse() {
                Ok(x) => Value::Float(x),
                Err(_) => {
                    problems.push(bad());
                    continue;
                }
            },
            // A list from the environment is comma-separated, or a TOML array as
            // `--list-config-env-vars` shows it (`["GET", "POST"]`).
            Value::Array(_) if raw.trim_start().starts_with('[') => {
                match toml::from_str::<Table>(&format!("list = {raw}")) {
                    Ok(mut parsed) => parsed.remove("list").expect("the key just parsed"),
                    Err(_) => {
                        problems.push(bad());
                        continue;
                    }
                }
            }
            Value::Array(_) => Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .map(|item| Value::String(item.to_string()))
                    .collect(),
            ),
            _ => Value::String(raw.clone()),
        };
        set_path(&mut table, &path, v);
    }
    ConfigError::of(problems)?;
    let Some(Value::Table(cluster_section)) = table.remove("cluster") else {
        unreachable!("defaults.toml has a [cluster] section");
    };
    let mut cfg: Config = Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| out_of_range(&e))?;
    cfg.cluster = cluster::build(cluster_section, &roster)?;
    cfg.validate_for(offline)?;
    Ok(cfg)
}

impl Config {
    /// Each transport's name, whether it is enabled, and its address.
    pub fn transports(&self) -> [(&'static str, bool, &str); 4] {
        [
            ("tcp", self.tcp.enabled, &self.tcp.address),
            ("quic", self.quic.enabled, &self.quic.address),
            ("http", self.http.enabled, &self.http.address),
            ("websocket", self.websocket.enabled, &self.websocket.address),
        ]
    }

    /// `offline` (`verify`, which serves no client) skips what only serving needs: an
    /// advertised address for a wildcard bind (which a cluster node does not need either: its
    /// clients are told its roster entry).
    fn validate_for(&self, offline: bool) -> Result<(), ConfigError> {
        // Every bad value is said in one message, so an operator fixes them in one go.
        let mut problems = Vec::new();
        if !matches!(self.system.durability.as_str(), "replicated" | "persisted") {
            problems.push(ConfigError::BadValue {
                key: "system.durability".into(),
                value: self.system.durability.clone(),
                expected: "durability (replicated or persisted)",
            });
        }
        for (key, value) in [
            ("limits.clients_table_max", self.limits.clients_table_max),
            ("limits.dedup_clients_max", self.limits.dedup_clients_max),
        ] {
            if value == 0 || value > u32::MAX as usize {
                problems.push(ConfigError::BadValue {
                    key: key.into(),
                    value: value.to_string(),
                    expected: "client table capacity (1 to 4294967295)",
                });
            }
        }
        // Values that start a node which refuses every client (or writes a file per message):
        // the least each takes, and what it is.
        let floors: [(&str, u64, u64, &'static str); 9] = [
            (
                "limits.idle_timeout_secs",
                self.limits.idle_timeout_secs,
                1,
                "idle timeout (at least 1 second: 0 would close every connection between requests)",
            ),
            (
                "limits.max_connections",
                self.limits.max_connections as u64,
                1,
                "connection limit (at least 1: 0 would refuse every client)",
            ),
            (
                "limits.request_timeout_ms",
                self.limits.request_timeout_ms,
                1,
                "request timeout (at least 1 ms: 0 answers no request)",
            ),
            (
                "system.segment_size",
                self.system.segment_size,
                512,
                "segment size (at least 512 bytes)",
            ),
            (
                "system.session_lease_secs",
                self.system.session_lease_secs,
                1,
                "session lease (at least 1 second)",
            ),
            (
                "system.checkpoint_journal_ops",
                self.system.checkpoint_journal_ops as u64,
                1,
                "ops between checkpoints (at least 1)",
            ),
            (
                "system.checkpoint_journal_bytes",
                self.system.checkpoint_journal_bytes,
                4096,
                "journal bytes between checkpoints (at least 4096)",
            ),
            (
                "http.max_in_flight",
                self.http.max_in_flight as u64,
                1,
                "HTTP requests in flight (at least 1: 0 answers every request 503)",
            ),
            (
                "http.max_in_flight_per_session",
                self.http.max_in_flight_per_session as u64,
                1,
                "HTTP requests in flight per session (at least 1)",
            ),
        ];
        for (key, value, least, expected) in floors {
            if value < least {
                problems.push(ConfigError::BadValue {
                    key: key.into(),
                    value: value.to_string(),
                    expected,
                });
            }
        }
        if self.system.path.trim().is_empty() {
            problems.push(ConfigError::BadValue {
                key: "system.path".into(),
                value: self.system.path.clone(),
                expected: "data directory path (not empty)",
            });
        }
        if !offline && self.transports().iter().all(|(_, enabled, _)| !enabled) {
            problems.push(ConfigError::BadValue {
                key: "tcp.enabled".into(),
                value: "false".into(),
                expected: "setting: every transport is disabled (tcp, quic, http, websocket), so \
                           no client could reach the node",
            });
        }
        if self.limits.max_frame_size < MIN_FRAME_SIZE {
            problems.push(ConfigError::BadValue {
                key: "limits.max_frame_size".into(),
                value: self.limits.max_frame_size.to_string(),
                expected: "frame size (at least 8192 bytes: smaller frames refuse ordinary \
                           requests and replies)",
            });
        }
        problems.extend(self.system.checked_max_disk_stall().err());
        if self.partition.consumer_offsets_max == 0 {
            problems.push(ConfigError::BadValue {
                key: "partition.consumer_offsets_max".into(),
                value: "0".into(),
                expected: "consumer offset keys per partition (1 to 4294967295)",
            });
        }
        let logging = &self.system.logging;
        if !LOG_LEVELS.contains(&logging.level.to_ascii_lowercase().as_str()) {
            problems.push(ConfigError::BadValue {
                key: "system.logging.level".into(),
                value: logging.level.clone(),
                expected: "log level (trace, debug, info, warn, error or off)",
            });
        }
        if !matches!(logging.format.as_str(), "text" | "json") {
            problems.push(ConfigError::BadValue {
                key: "system.logging.format".into(),
                value: logging.format.clone(),
                expected: "log format (text or json)",
            });
        }
        // A longer duration is no setting anyone means, and past the clock's range a deadline
        // built from it panics (an idle timeout of 2^63 - 1 s stopped the node at the first
        // connection).
        let secs = |key: &'static str, value: u64| (key, Duration::from_secs(value));
        let millis = |key: &'static str, value: u64| (key, Duration::from_millis(value));
        let durations = [
            secs("system.session_lease_secs", self.system.session_lease_secs),
            millis(
                "system.maintenance_interval_ms",
                self.system.maintenance_interval_ms,
            ),
            secs("limits.idle_timeout_secs", self.limits.idle_timeout_secs),
            millis("limits.request_timeout_ms", self.limits.request_timeout_ms),
            secs(
                "http.jwt.access_token_expiry_secs",
                self.http.jwt.access_token_expiry_secs,
            ),
            secs("http.jwt.clock_skew_secs", self.http.jwt.clock_skew_secs),
            secs("http.jwt.not_before_secs", self.http.jwt.not_before_secs),
            millis(
                "quic.keep_alive_interval_ms",
                self.quic.keep_alive_interval_ms,
            ),
            millis("quic.max_idle_timeout_ms", self.quic.max_idle_timeout_ms),
            ("cluster.heartbeat_timeout", self.cluster.heartbeat_timeout),
            (
                "cluster.commit_broadcast_interval",
                self.cluster.commit_broadcast_interval,
            ),
            (
                "cluster.prepare_retransmit_interval",
                self.cluster.prepare_retransmit_interval,
            ),
            (
                "cluster.view_change_retransmit_interval",
                self.cluster.view_change_retransmit_interval,
            ),
            (
                "cluster.view_change_status_timeout",
                self.cluster.view_change_status_timeout,
            ),
        ];
        for (key, value) in durations {
            if value > DURATION_MAX {
                problems.push(ConfigError::BadValue {
                    key: key.into(),
                    value: format!("{value:?}"),
                    expected: "duration of at most ten years",
                });
            }
        }
        let advertised = self.node.advertised_address.trim();
        if !advertised.is_empty() && !cluster::is_host(advertised) {
            problems.push(ConfigError::BadValue {
                key: "node.advertised_address".into(),
                value: self.node.advertised_address.clone(),
                expected: "IP address or host name without a port (clients are told the \
                           transports' ports)",
            });
        }
        for (name, enabled, address) in self.transports() {
            if !enabled {
                continue;
            }
            let key = format!("{name}.address");
            let Ok(addr) = address.parse::<SocketAddr>() else {
                problems.push(ConfigError::BadAddress {
                    key,
                    value: address.to_string(),
                });
                continue;
            };
            // A cluster node is advertised by its roster entry (`ip`, or `advertised_address`).
            if addr.ip().is_unspecified()
                && self.node.advertised_address.trim().is_empty()
                && !self.cluster.enabled
                && !offline
            {
                problems.push(ConfigError::WildcardWithoutAdvertised { key });
            }
        }
        let enabled = self.transports().map(|(name, enabled, _)| (name, enabled));
        problems.extend(self.cluster.validate(&enabled).err());
        self.http.validate(&mut problems);
        self.validate_transports(&mut problems);
        ConfigError::of(problems)
    }

    /// The address other nodes and clients are told about (cluster metadata).
    pub fn advertised_ip(&self) -> String {
        if !self.node.advertised_address.trim().is_empty() {
            return self.node.advertised_address.trim().to_string();
        }
        self.tcp
            .address
            .parse::<SocketAddr>()
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|_| "127.0.0.1".to_string())
    }

    pub fn shard_count(&self) -> usize {
        if self.runtime.shards > 0 {
            self.runtime.shards
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }
}

/// The binary transports' own rules (QUIC, WebSocket, TLS).
impl Config {
    fn validate_transports(&self, problems: &mut Vec<ConfigError>) {
        let bad = |key: &str, value: String, expected| ConfigError::BadValue {
            key: key.into(),
            value,
            expected,
        };
        let certificates = [
            (
                "tcp.tls",
                self.tcp.enabled && self.tcp.tls.enabled,
                &self.tcp.tls,
            ),
            (
                "websocket.tls",
                self.websocket.enabled && self.websocket.tls.enabled,
                &self.websocket.tls,
            ),
            (
                "http.tls",
                self.http.enabled && self.http.tls.enabled,
                &self.http.tls,
            ),
        ];
        for (section, used, tls) in certificates {
            if used {
                problems.extend(
                    certificate_source(section, tls.self_signed, &tls.cert_file, &tls.key_file)
                        .err(),
                );
            }
        }
        let quic = &self.quic;
        if quic.enabled {
            let certificate = &quic.certificate;
            problems.extend(
                certificate_source(
                    "quic.certificate",
                    certificate.self_signed,
                    &certificate.cert_file,
                    &certificate.key_file,
                )
                .err(),
            );
            if quic.initial_mtu < 1200 {
                problems.push(bad(
                    "quic.initial_mtu",
                    quic.initial_mtu.to_string(),
                    "MTU (at least 1200, QUIC's minimum)",
                ));
            }
            // QUIC variable-length integers stop at 2^62.
            let varint_max = (1u64 << 62) - 1;
            for (key, value) in [
                (
                    "quic.max_concurrent_bidi_streams",
                    quic.max_concurrent_bidi_streams,
                ),
                ("quic.receive_window", quic.receive_window),
                ("quic.max_idle_timeout_ms", quic.max_idle_timeout_ms),
            ] {
                if value > varint_max {
                    problems.push(bad(key, value.to_string(), "QUIC integer (below 2^62)"));
                }
            }
            if quic.max_concurrent_bidi_streams == 0 {
                problems.push(bad(
                    "quic.max_concurrent_bidi_streams",
                    "0".into(),
                    "stream count (at least 1: every request is a stream)",
                ));
            }
            if quic.max_reply_size < QUIC_REPLY_MIN {
                problems.push(bad(
                    "quic.max_reply_size",
                    quic.max_reply_size.to_string(),
                    "reply size (at least 65536 bytes)",
                ));
            }
            // A zero flow-control window lets no byte through: every request would hang.
            for (key, value) in [
                ("quic.send_window", quic.send_window),
                ("quic.receive_window", quic.receive_window),
            ] {
                if value == 0 {
                    problems.push(bad(key, "0".into(), "window in bytes (at least 1)"));
                }
            }
        }
        let ws = &self.websocket;
        if ws.enabled && (ws.max_frame_size == 0 || ws.max_frame_size > ws.max_message_size) {
            problems.push(bad(
                "websocket.max_frame_size",
                ws.max_frame_size.to_string(),
                "frame size (1 to websocket.max_message_size)",
            ));
        }
        // tungstenite panics on a connection whose limit is not above the buffer (0 is none).
        if ws.enabled
            && ws.max_write_buffer_size != 0
            && ws.max_write_buffer_size <= ws.write_buffer_size
        {
            problems.push(bad(
                "websocket.max_write_buffer_size",
                ws.max_write_buffer_size.to_string(),
                "size in bytes above websocket.write_buffer_size, or 0 for no limit",
            ));
        }
    }
}

/// A certificate comes from `cert_file` and `key_file` when `cert_file` is set, else is
/// generated when `self_signed`; a section with neither cannot serve.
fn certificate_source(
    section: &str,
    self_signed: bool,
    cert_file: &str,
    key_file: &str,
) -> Result<(), ConfigError> {
    if cert_file.is_empty() && self_signed {
        return Ok(());
    }
    let (key, value) = if cert_file.is_empty() {
        ("cert_file", cert_file)
    } else if key_file.is_empty() {
        ("key_file", key_file)
    } else {
        return Ok(());
    };
    Err(ConfigError::BadValue {
        key: format!("{section}.{key}"),
        value: value.to_string(),
        expected: "PEM file path (required unless self_signed and no cert_file)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn http_lists_and_secrets_load_from_the_environment() {
        let env = |name: &str| match name {
            "IGGY_HTTP_CORS_ALLOWED_ORIGINS" => Some("https://a.example, https://b.example".into()),
            "IGGY_HTTP_JWT_ENCODING_SECRET" => Some("only-one".into()),
            _ => None,
        };
        // One secret without the other is refused: tokens could not be checked.
        let e = load(None, env).unwrap_err();
        assert!(e.to_string().contains("http.jwt.decoding_secret"), "{e}");
        let env = |name: &str| match name {
            "IGGY_HTTP_JWT_ENCODING_SECRET" => Some("one-secret".into()),
            "IGGY_HTTP_JWT_DECODING_SECRET" => Some("another-secret".into()),
            _ => None,
        };
        let e = load(None, env).unwrap_err().to_string();
        assert!(e.contains("http.jwt.decoding_secret"), "{e}");
        assert!(
            !e.contains("one-secret") && !e.contains("another-secret"),
            "{e}"
        );
        let env = |name: &str| match name {
            "IGGY_HTTP_CORS_ALLOWED_ORIGINS" => Some("https://a.example, https://b.example".into()),
            _ => None,
        };
        let c = load(None, env).unwrap();
        assert_eq!(
            c.http.cors.allowed_origins,
            ["https://a.example", "https://b.example"]
        );
        assert!(c.http.enabled, "served by default, as upstream");
        assert_eq!(c.http.max_request_size, 2_000_000);
    }

    #[test]
    fn defaults() {
        let c = load(None, none).unwrap();
        assert_eq!(c.tcp.address, "127.0.0.1:8090");
        assert!(c.tcp.enabled);
        assert_eq!(c.system.path, "./local_data");
        assert_eq!(c.quic.address, "127.0.0.1:8080");
        assert_eq!(c.http.address, "127.0.0.1:3000");
        assert_eq!(c.websocket.address, "127.0.0.1:8092");
    }

    #[test]
    fn file_then_env_override() {
        let file = "[tcp]\naddress = \"127.0.0.1:9000\"\n[http]\nenabled = true\n";
        let env = |k: &str| match k {
            "IGGY_TCP_ADDRESS" => Some("127.0.0.1:9100".to_string()),
            "IGGY_HTTP_ENABLED" => Some("false".to_string()),
            _ => None,
        };
        let c = load(Some(file), env).unwrap();
        assert_eq!(c.tcp.address, "127.0.0.1:9100");
        assert!(!c.http.enabled);
    }

    /// An upstream file (46 keys this server does not know) took 46 starts to clear, one key
    /// each: every unknown key and mistyped value is listed at once, with this server's key
    /// where one does the same, and strings are quoted once.
    #[test]
    fn every_problem_of_a_file_is_listed_at_once_naming_this_servers_key() {
        let file = "[http.jwt]\naccess_token_expiry = \"1 h\"\n\
                    [system]\nsegment = { size = \"1 GiB\" }\n\
                    [tcp]\nenabled = \"yes\"\n\
                    [telemetry]\nenabled = false\n";
        let e = load(Some(file), none).unwrap_err();
        let ConfigError::Several(problems) = &e else {
            panic!("every problem: {e}");
        };
        assert_eq!(problems.len(), 4, "{e}");
        let text = e.to_string();
        for said in [
            "config: 4 problems:",
            "\n  unknown key `http.jwt.access_token_expiry` (upstream's; here: \
             `http.jwt.access_token_expiry_secs` (seconds))",
            "\n  unknown key `system.segment` (upstream's; here: `system.segment_size` for its",
            "\n  `tcp.enabled` = \"yes\" is not a valid boolean",
            "\n  unknown key `telemetry`",
        ] {
            assert!(text.contains(said), "{said:?} in {text}");
        }
        // One problem is said as before.
        let e = load(Some("[tcp]\nadress = \"x\"\n"), none).unwrap_err();
        assert_eq!(e, ConfigError::UnknownKey("tcp.adress".into()));
        // Environment values too.
        let env = |k: &str| match k {
            "IGGY_TCP_ENABLED" => Some("maybe".into()),
            "IGGY_LIMITS_MAX_CONNECTIONS" => Some("many".into()),
            _ => None,
        };
        assert!(matches!(load(None, env).unwrap_err(), ConfigError::Several(p) if p.len() == 2));
    }

    /// Values of the right type that the node cannot serve with are listed at once too, across
    /// sections (each used to be said only once the one before it was fixed).
    #[test]
    fn every_bad_value_is_listed_at_once() {
        let file = "[system]\ndurability = \"x\"\nsegment_size = 1\n\
                    [http]\nmax_request_size = 0\n\
                    [quic]\ninitial_mtu = 100\n";
        let env = |k: &str| match k {
            "IGGY_LIMITS_MAX_CONNECTIONS" => Some("0".into()),
            "IGGY_TCP_ADDRESS" => Some("nowhere".into()),
            _ => None,
        };
        let e = load(Some(file), env).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("config: 6 problems:"), "{text}");
        // The address a node is advertised by, as the roster's: a host, no port.
        for bad in ["myhost:8090", "not a host!"] {
            let env = |k: &str| (k == "IGGY_NODE_ADVERTISED_ADDRESS").then(|| bad.to_string());
            let e = load(None, env).unwrap_err().to_string();
            assert!(e.contains("`node.advertised_address`"), "{bad}: {e}");
        }
        let env = |k: &str| (k == "IGGY_NODE_ADVERTISED_ADDRESS").then(|| "iggy.example".into());
        assert!(load(None, env).is_ok());
        // Durations past the clock's range (a deadline built from one panicked): at most ten
        // years, in whatever unit a key takes.
        for (variable, value) in [
            ("IGGY_LIMITS_IDLE_TIMEOUT_SECS", "9223372036854775807"),
            ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "9223372036854775807"),
            ("IGGY_SYSTEM_SESSION_LEASE_SECS", "315360001"),
            ("IGGY_SYSTEM_MAX_DISK_STALL", "100000h"),
        ] {
            let env = |k: &str| (k == variable).then(|| value.to_string());
            let e = load(None, env).unwrap_err().to_string();
            assert!(e.contains("ten years"), "{variable}: {e}");
        }
        let env = |k: &str| (k == "IGGY_LIMITS_IDLE_TIMEOUT_SECS").then(|| "315360000".into());
        assert!(load(None, env).is_ok(), "ten years is taken");
        for key in [
            "system.durability",
            "system.segment_size",
            "http.max_request_size",
            "quic.initial_mtu",
            "limits.max_connections",
            "tcp.address",
        ] {
            assert!(text.contains(&format!("`{key}`")), "{key} in {text}");
        }
    }

    #[test]
    fn variables_of_no_section_and_read_by_nothing_are_named_for_a_warning() {
        let names = [
            "IGGY_TCPP_ADDRESS",
            "IGGY_tcp_address",
            "IGGY_TCP_ADDRESS",
            "IGGY_CONFIG_PATH",
            "IGGY_ROOT_PASSWORD",
            "IGGY_USERNAME",
            "IGGY_DEBUG_PANIC_AFTER_MS",
            "IGGY_CLUSTER_NODES_0_IP",
            "PATH",
        ];
        assert_eq!(
            unread_env_vars(names.map(String::from)),
            ["IGGY_TCPP_ADDRESS", "IGGY_tcp_address"]
        );
    }

    /// CORS lists from the environment: comma-separated or as `--list-config-env-vars` shows
    /// them (`["GET", "POST"]`, once taken as the one literal item `["GET"` …), and each item
    /// checked: a method no request carries or an origin a browser never sends is refused
    /// naming the key (they started a node whose CORS silently matched nothing).
    #[test]
    fn cors_lists_read_either_form_and_refuse_items_a_browser_never_sends() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| v.to_string())
        };
        let cfg = load(None, env(&[("IGGY_HTTP_CORS_ALLOWED_METHODS", r#"["GET", "POST"]"#)])).unwrap();
        assert_eq!(cfg.http.cors.allowed_methods, ["GET", "POST"]);
        let origins = "http://a.example, https://b.example:8443,*";
        let cfg = load(None, |k: &str| (k == "IGGY_HTTP_CORS_ALLOWED_ORIGINS").then(|| origins.to_string())).unwrap();
        assert_eq!(cfg.http.cors.allowed_origins, ["http://a.example", "https://b.example:8443", "*"]);
        let cfg = load(None, env(&[("IGGY_HTTP_CORS_ALLOWED_ORIGINS", r#"["http://[::1]:8080"]"#)])).unwrap();
        assert_eq!(cfg.http.cors.allowed_origins, ["http://[::1]:8080"]);
        for (variable, value, key) in [
            ("IGGY_HTTP_CORS_ALLOWED_METHODS", "FETCH", "http.cors.allowed_methods"),
            ("IGGY_HTTP_CORS_ALLOWED_METHODS", "get", "http.cors.allowed_methods"),
            ("IGGY_HTTP_CORS_ALLOWED_ORIGINS", "not an origin", "http.cors.allowed_origins"),
            ("IGGY_HTTP_CORS_ALLOWED_ORIGINS", "http://a.example/path", "http.cors.allowed_origins"),
            ("IGGY_HTTP_CORS_ALLOWED_ORIGINS", "http://a.example:99999", "http.cors.allowed_origins"),
            ("IGGY_HTTP_CORS_ALLOWED_HEADERS", "x header", "http.cors.allowed_headers"),
            ("IGGY_HTTP_CORS_ALLOWED_METHODS", r#"["GET""#, "http.cors.allowed_methods"),
        ] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(variable, value)]));
            let e = load(None, env(pairs)).unwrap_err();
            assert!(e.to_string().contains(key), "{variable}={value}: {e}");
        }
    }

    /// Values that started a node refusing every client (or writing a file pair per message)
    /// are refused naming their key; the least of each is taken.
    #[test]
    fn values_that_would_serve_nobody_are_refused_naming_their_key() {
        for (variable, bad, least) in [
            ("IGGY_LIMITS_REQUEST_TIMEOUT_MS", "0", "1"),
            ("IGGY_LIMITS_IDLE_TIMEOUT_SECS", "0", "1"),
            ("IGGY_SYSTEM_SEGMENT_SIZE", "100", "512"),
            ("IGGY_SYSTEM_SESSION_LEASE_SECS", "0", "1"),
            ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS", "0", "1"),
            ("IGGY_SYSTEM_CHECKPOINT_JOURNAL_BYTES", "0", "4096"),
            ("IGGY_HTTP_MAX_IN_FLIGHT", "0", "1"),
            ("IGGY_HTTP_MAX_IN_FLIGHT_PER_SESSION", "0", "1"),
            ("IGGY_SYSTEM_PATH", "", "./data"),
        ] {
            let with =
                |value: &'static str| move |k: &str| (k == variable).then(|| value.to_string());
            let key = variable
                .trim_start_matches("IGGY_")
                .to_ascii_lowercase()
                .replacen('_', ".", 1);
            let e = load(None, with(bad)).unwrap_err();
            assert!(
                matches!(&e, ConfigError::BadValue { key: named, .. } if *named == key),
                "{variable}={bad}: {e}"
            );
            assert!(load(None, with(least)).is_ok(), "{variable}={least}");
        }
        let none_enabled = |k: &str| {
            ["IGGY_TCP_ENABLED", "IGGY_QUIC_ENABLED", "IGGY_HTTP_ENABLED"]
                .contains(&k)
                .then(|| "false".to_string())
        };
        let e = load(None, none_enabled).unwrap_err();
        assert!(e.to_string().contains("every transport is disabled"), "{e}");
        assert!(
            load_offline(None, none_enabled).is_ok(),
            "verify serves no client"
        );
    }

    #[test]
    fn byte_sizes_take_upstreams_text_in_a_file_and_the_environment() {
        let file = "[http]\nmax_request_size = \"2 MB\"\n\
                    [quic]\ninitial_mtu = \"1200 B\"\nsend_window = \"64 MiB\"\n\
                    [system]\nsegment_size = \"1 GiB\"\n";
        let c = load(Some(file), none).unwrap();
        assert_eq!(c.http.max_request_size, 2_000_000);
        assert_eq!(c.quic.initial_mtu, 1200);
        assert_eq!(c.quic.send_window, 64 << 20);
        assert_eq!(c.system.segment_size, 1 << 30);
        let env = |k: &str| (k == "IGGY_SYSTEM_SEGMENT_SIZE").then(|| "512 KiB".to_string());
        assert_eq!(load(None, env).unwrap().system.segment_size, 512 << 10);
        // Only where the key counts bytes, and only a known unit.
        let e = load(Some("[limits]\nmax_connections = \"2 MB\"\n"), none).unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, .. } if key == "limits.max_connections"),
            "{e}"
        );
        let e = load(Some("[http]\nmax_request_size = \"2 parsecs\"\n"), none).unwrap_err();
        assert!(e.to_string().contains("\"2 MB\", \"64 MiB\""), "{e}");
    }

    #[test]
    fn a_connection_limit_of_0_a_tiny_frame_or_a_negative_count_is_refused_naming_its_key() {
        let with = |name: &'static str, value: &'static str| {
            move |k: &str| (k == name).then(|| value.to_string())
        };
        let e = load(None, with("IGGY_LIMITS_MAX_CONNECTIONS", "0")).unwrap_err();
        assert!(
            e.to_string().contains("`limits.max_connections` = \"0\""),
            "{e}"
        );
        let e = load(None, with("IGGY_LIMITS_MAX_FRAME_SIZE", "0")).unwrap_err();
        assert!(
            e.to_string().contains("`limits.max_frame_size` = \"0\""),
            "{e}"
        );
        assert!(load(None, with("IGGY_LIMITS_MAX_FRAME_SIZE", "8192")).is_ok());
        let e = load(None, with("IGGY_LIMITS_MAX_CONNECTIONS", "-5")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config: `limits.max_connections`: invalid value: integer `-5`, expected usize"
        );
    }

    #[test]
    fn the_quic_reply_limit_takes_a_size_and_refuses_one_under_64_kib() {
        let with = |value: &'static str| {
            move |k: &str| (k == "IGGY_QUIC_MAX_REPLY_SIZE").then(|| value.to_string())
        };
        assert_eq!(
            load(None, |_| None).unwrap().quic.max_reply_size,
            10_000_000,
            "the SDK's default response buffer"
        );
        assert_eq!(
            load(None, with("1 MiB")).unwrap().quic.max_reply_size,
            1 << 20
        );
        let e = load(None, with("65535")).unwrap_err();
        assert!(
            e.to_string().contains("`quic.max_reply_size` = \"65535\""),
            "{e}"
        );
    }

    #[test]
    fn the_request_bodies_budget_is_configured_or_a_quarter_of_memory() {
        let env = |k: &str| (k == "IGGY_LIMITS_MAX_REQUEST_BODIES_SIZE").then(|| "5000".into());
        let limits = load(None, env).unwrap().limits;
        assert_eq!(limits.request_bodies_budget(Some(1 << 40)), 5000);
        let limits = load(None, none).unwrap().limits;
        assert_eq!(limits.max_request_bodies_size, 0);
        assert_eq!(limits.request_bodies_budget(Some(8 << 30)), 2 << 30);
        assert_eq!(limits.request_bodies_budget(None), 1 << 30);
    }

    #[test]
    fn the_disk_stall_limit_is_a_duration_of_a_second_or_more_or_zero() {
        let stall = |value: &'static str| {
            move |k: &str| (k == "IGGY_SYSTEM_MAX_DISK_STALL").then(|| value.to_string())
        };
        let limit = |c: Config| c.system.max_disk_stall();
        assert_eq!(limit(load(None, none).unwrap()), Duration::from_secs(20));
        assert_eq!(
            limit(load(None, stall("3s")).unwrap()),
            Duration::from_secs(3)
        );
        assert_eq!(limit(load(None, stall("0s")).unwrap()), Duration::ZERO);
        let file = "[system]\nmax_disk_stall = \"1m\"\n";
        assert_eq!(
            limit(load(Some(file), none).unwrap()),
            Duration::from_secs(60)
        );
        for bad in ["20", "500ms", "-1s", "twenty", "1.5s"] {
            let e = load(None, stall(bad)).unwrap_err();
            assert!(
                matches!(&e, ConfigError::BadValue { key, .. } if key == "system.max_disk_stall"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let e = load(Some("[tcp]\nadress = \"x\"\n"), none).unwrap_err();
        assert_eq!(e, ConfigError::UnknownKey("tcp.adress".into()));
        let e = load(Some("[nope]\n"), none).unwrap_err();
        assert_eq!(e, ConfigError::UnknownKey("nope".into()));
    }

    #[test]
    fn a_metrics_endpoint_on_a_rest_route_is_refused() {
        let endpoint = |path: &'static str| {
            move |k: &str| (k == "IGGY_HTTP_METRICS_ENDPOINT").then(|| path.to_string())
        };
        // GET /streams and GET /streams/{stream_id} would answer metrics instead.
        // And a path no request's path could equal: nothing would answer it.
        for path in [
            "/streams",
            "/streams/",
            "/streams/orders",
            "/metrics?x=1",
            "/metrics#a",
            "/my metrics",
        ] {
            let e = load(None, endpoint(path)).unwrap_err();
            assert!(
                e.to_string().contains("http.metrics.endpoint"),
                "{path}: {e}"
            );
        }
        for path in ["/metrics", "/internal/metrics", "/users/login/metrics"] {
            let c = load(None, endpoint(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(c.http.metrics.endpoint, path);
        }
        // With metrics off the endpoint is never served, so it hides nothing.
        let off = |k: &str| match k {
            "IGGY_HTTP_METRICS_ENABLED" => Some("false".into()),
            "IGGY_HTTP_METRICS_ENDPOINT" => Some("/streams".into()),
            _ => None,
        };
        assert!(load(None, off).is_ok());
    }

    #[test]
    fn unparsable_values_are_named() {
        let e = load(None, |k: &str| {
            (k == "IGGY_HTTP_ENABLED").then(|| "maybe".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("http.enabled"), "{e}");
        let e = load(Some("[runtime]\nshards = \"two\"\n"), none).unwrap_err();
        assert!(e.to_string().contains("runtime.shards"), "{e}");
        let e = load(None, |k: &str| {
            (k == "IGGY_TCP_ADDRESS").then(|| "nowhere".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("tcp.address"), "{e}");
    }

    #[test]
    fn a_variable_of_a_section_naming_no_key_is_unknown_and_others_pass() {
        let names = [
            "IGGY_TCP_ADDRESS",
            "IGGY_TCP_ADRESS",
            "IGGY_HTTP_JWT_ENCODING_SECRET",
            "IGGY_CLUSTER_NODES_2_PORTS_TCP_REPLICA",
            "IGGY_CLUSTER_NODES_2_PORTS_UDP",
            "IGGY_CLUSTER_NODES_X_IP",
            "IGGY_SYSTEM_PATHS",
            "IGGY_CONFIG_PATH",
            "IGGY_ROOT_PASSWORD",
            "IGGY_USERNAME",
            "HOME",
        ];
        assert_eq!(
            unknown_env_vars(names.map(String::from)),
            [
                "IGGY_CLUSTER_NODES_2_PORTS_UDP",
                "IGGY_CLUSTER_NODES_X_IP",
                "IGGY_SYSTEM_PATHS",
                "IGGY_TCP_ADRESS",
            ]
        );
    }

    #[test]
    fn wildcard_requires_advertised_address() {
        let wild = |k: &str| (k == "IGGY_TCP_ADDRESS").then(|| "0.0.0.0:8090".into());
        assert_eq!(
            load(None, wild).unwrap_err(),
            ConfigError::WildcardWithoutAdvertised {
                key: "tcp.address".into()
            }
        );
        let ok = |k: &str| match k {
            "IGGY_TCP_ADDRESS" => Some("0.0.0.0:8090".into()),
            "IGGY_NODE_ADVERTISED_ADDRESS" => Some("10.1.2.3".into()),
            _ => None,
        };
        assert_eq!(load(None, ok).unwrap().advertised_ip(), "10.1.2.3");
    }

    #[test]
    fn logging_defaults_overrides_and_refusals() {
        let c = load(None, none).unwrap();
        assert_eq!(
            (
                c.system.logging.level.as_str(),
                c.system.logging.format.as_str()
            ),
            ("info", "text")
        );
        let c = load(Some("[system.logging]\nformat = \"json\"\n"), |k: &str| {
            (k == "IGGY_SYSTEM_LOGGING_LEVEL").then(|| "debug".into())
        })
        .unwrap();
        assert_eq!(
            (
                c.system.logging.level.as_str(),
                c.system.logging.format.as_str()
            ),
            ("debug", "json")
        );
        let e = load(None, |k: &str| {
            (k == "IGGY_SYSTEM_LOGGING_FORMAT").then(|| "xml".into())
        })
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, value, .. }
                if key == "system.logging.format" && value == "xml"),
            "{e}"
        );
        let e = load(Some("[system.logging]\nlevel = \"loud\"\n"), none).unwrap_err();
        assert!(e.to_string().contains("system.logging.level"), "{e}");
        let e = load(Some("[system.logging]\ncolour = true\n"), none).unwrap_err();
        assert_eq!(e, ConfigError::UnknownKey("system.logging.colour".into()));
    }

    /// The committed reference is the rendered one; `IGGY_WRITE_CONFIG_REFERENCE=1` rewrites it.
    #[test]
    fn config_reference_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(REFERENCE_PATH);
        let rendered = reference();
        if std::env::var("IGGY_WRITE_CONFIG_REFERENCE").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &rendered).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == rendered,
            "{} is stale or missing; regenerate it with\n  \
             IGGY_WRITE_CONFIG_REFERENCE=1 cargo nextest run -p iggy-server config_reference",
            path.display()
        );
    }

    /// Every leaf appears as its key with its default, preceded by its `IGGY_` variable and
    /// type, and the server accepts the file unchanged as the defaults.
    #[test]
    fn config_reference_names_every_key_and_loads_as_the_defaults() {
        let text = reference();
        let lines: Vec<&str> = text.lines().collect();
        let mut section = String::new();
        let mut seen = BTreeMap::new();
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with('#') {
                continue;
            } else if let Some(name) = line.strip_prefix('[') {
                section = name.trim_end_matches(']').to_string();
            } else if let Some((key, value)) = line.split_once(" = ") {
                let path = format!("{section}.{key}");
                seen.insert(path.clone(), (value.to_string(), lines[i - 1].to_string()));
            }
        }
        let leaves = leaves();
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            leaves.keys().collect::<Vec<_>>()
        );
        for (path, default) in &leaves {
            let (value, above) = &seen[path];
            assert_eq!(value, &default.to_string(), "{path}");
            assert_eq!(
                above,
                &format!(
                    "# {} ({}, default {default})",
                    env_name(path),
                    type_name(default)
                ),
                "{path}"
            );
        }
        assert_eq!(load(Some(&text), none), load(None, none));
        let flat = text.parse::<Table>().unwrap();
        let mut parsed = BTreeMap::new();
        flatten("", &flat, &mut parsed);
        assert_eq!(parsed, leaves);
    }

    #[test]
    fn transport_sections_refuse_what_cannot_serve() {
        let c = load(None, none).unwrap();
        assert!(c.quic.enabled && c.quic.certificate.self_signed);
        assert!(!c.tcp.tls.enabled && !c.websocket.enabled);
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        // No certificate files and no self-signed one.
        let e = load(None, env(&[("IGGY_QUIC_CERTIFICATE_SELF_SIGNED", "false")])).unwrap_err();
        assert!(e.to_string().contains("quic.certificate.cert_file"), "{e}");
        let e = load(
            None,
            env(&[
                ("IGGY_TCP_TLS_ENABLED", "true"),
                ("IGGY_TCP_TLS_CERT_FILE", "/etc/cert.pem"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("tcp.tls.key_file"), "{e}");
        let e = load(
            None,
            env(&[
                ("IGGY_HTTP_TLS_ENABLED", "true"),
                ("IGGY_HTTP_TLS_SELF_SIGNED", "false"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("http.tls.cert_file"), "{e}");
        // A disabled section is not checked.
        load(None, env(&[("IGGY_TCP_TLS_SELF_SIGNED", "false")])).unwrap();
        let e = load(
            None,
            env(&[
                ("IGGY_WEBSOCKET_ENABLED", "true"),
                ("IGGY_WEBSOCKET_MAX_FRAME_SIZE", "100000000"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("websocket.max_frame_size"), "{e}");
        let e = load(None, env(&[("IGGY_QUIC_INITIAL_MTU", "1000")])).unwrap_err();
        assert!(e.to_string().contains("quic.initial_mtu"), "{e}");
    }

    /// tungstenite panics on a connection whose write-buffer limit is not above its write
    /// buffer: accepted at start, the first WebSocket client brought the whole server down.
    #[test]
    fn a_websocket_write_buffer_limit_not_above_the_write_buffer_is_refused() {
        let env = |limit: &'static str| {
            move |k: &str| match k {
                "IGGY_WEBSOCKET_ENABLED" => Some("true".to_string()),
                "IGGY_WEBSOCKET_MAX_WRITE_BUFFER_SIZE" => Some(limit.to_string()),
                _ => None,
            }
        };
        for limit in ["65536", "131072"] {
            let e = load(None, env(limit)).unwrap_err();
            assert!(
                e.to_string().contains("websocket.max_write_buffer_size"),
                "{e}"
            );
        }
        // 0 is no limit; anything above the 128 KiB write buffer is a limit.
        load(None, env("0")).unwrap();
        load(None, env("131073")).unwrap();
    }

    /// A zero flow-control window lets no byte through: every QUIC request hung.
    #[test]
    fn zero_quic_windows_are_refused() {
        for key in ["send_window", "receive_window"] {
            let var = format!("IGGY_QUIC_{}", key.to_uppercase());
            let e = load(None, |k: &str| (k == var).then(|| "0".to_string())).unwrap_err();
            assert!(e.to_string().contains(&format!("quic.{key}")), "{e}");
        }
    }

    #[test]
    fn env_names() {
        assert_eq!(env_name("tcp.address"), "IGGY_TCP_ADDRESS");
        assert!(leaves().contains_key("node.advertised_address"));
        assert_eq!(
            env_name("system.logging.level"),
            "IGGY_SYSTEM_LOGGING_LEVEL"
        );
        assert!(leaves().contains_key("system.logging.format"));
    }
}
