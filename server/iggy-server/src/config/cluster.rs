//! `[cluster]` and its roster `[[cluster.nodes]]`: upstream's keys and defaults, so an operator
//! can reuse a cluster file. The scalar keys live in the flat catalogue (`defaults.toml`); the
//! roster is an array of tables, which the catalogue cannot describe, so it is read here from
//! the file and from `IGGY_CLUSTER_NODES_<i>_<FIELD>` variables.

use super::ConfigError;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;
use toml::{Table, Value};

/// The fewest bytes a `[cluster.auth]` secret may have: a guessable secret keeps no one out.
pub const SHARED_SECRET_MIN_BYTES: usize = 32;

/// Most replicas a cluster may have (upstream's `REPLICAS_MAX`).
pub const REPLICAS_MAX: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub enabled: bool,
    /// The cluster id derives from it; renaming a cluster means starting from empty data.
    pub name: String,
    pub heartbeat_timeout: Duration,
    pub commit_broadcast_interval: Duration,
    pub prepare_retransmit_interval: Duration,
    pub view_change_retransmit_interval: Duration,
    pub view_change_status_timeout: Duration,
    /// Identical on every node; `--replica-id` picks this node's entry.
    pub nodes: Vec<ClusterNode>,
    /// `[cluster.auth]`: the replica plane's shared secret.
    pub auth: ClusterAuth,
    /// `[cluster.tls]`: mutual TLS on the replica plane.
    pub tls: ClusterTls,
}

/// `[cluster.tls]` (upstream's section and key names, but mutual): with `enabled`, every
/// replica link runs TLS 1.3 before its handshake, each end presenting `cert_file` and
/// verifying the other's certificate against `ca_file`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterTls {
    pub enabled: bool,
    /// Upstream's mode that accepts any peer certificate; accepted as a key so an upstream file
    /// loads, refused when true (it would authenticate no peer).
    pub self_signed: bool,
    /// This node's certificate chain (PEM), naming its roster `ip` as an IP SAN, or as a DNS
    /// SAN when the roster gives a host name.
    pub cert_file: String,
    /// Its private key (PEM).
    pub key_file: String,
    /// The CA (PEM) that signed every node's certificate.
    pub ca_file: String,
}

impl ClusterTls {
    /// With TLS enabled, every file is named; whether each reads as PEM is checked when the
    /// replica plane starts (`consensus::replica_tls`), naming the key too.
    fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.self_signed {
            return Err(refuse(
                "cluster.tls.self_signed",
                "is not supported: a node that accepts any peer certificate authenticates no \
                 peer; give every node a certificate from one cluster CA (cert_file, key_file, \
                 ca_file)",
            ));
        }
        for (key, path) in [
            ("cert_file", &self.cert_file),
            ("key_file", &self.key_file),
            ("ca_file", &self.ca_file),
        ] {
            if path.trim().is_empty() {
                return Err(refuse(
                    format!("cluster.tls.{key}"),
                    "is empty; with cluster.tls.enabled every node needs its certificate, its \
                     key and the cluster CA (PEM files)",
                ));
            }
        }
        Ok(())
    }
}

/// `[cluster.auth]` (upstream's keys): with `enabled`, peers prove they hold `shared_secret`
/// (or, during a rotation, `previous_shared_secret`) before their link is admitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterAuth {
    pub enabled: bool,
    pub shared_secret: Secret,
    /// Empty outside a rotation.
    pub previous_shared_secret: Secret,
}

/// A configured secret: its Debug form shows only its length, so no log line or error
/// message can carry it, and its buffer (every clone's too) is zeroed when dropped. The
/// configuration's other copies (the file's text, the parsed TOML tree, the environment) are
/// not this type's and are not zeroed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(zeroize::Zeroizing<String>);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Secret(zeroize::Zeroizing::new(text.into()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl ClusterAuth {
    /// With auth enabled, each secret given is long enough to resist guessing; the refusal
    /// names the key and the length, never the value.
    fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        let secrets = [
            ("shared_secret", &self.shared_secret, true),
            (
                "previous_shared_secret",
                &self.previous_shared_secret,
                false,
            ),
        ];
        for (key, secret, required) in secrets {
            let length = secret.as_bytes().len();
            if (required || length > 0) && length < SHARED_SECRET_MIN_BYTES {
                return Err(refuse(
                    format!("cluster.auth.{key}"),
                    format!(
                        "is {length} bytes; with cluster.auth.enabled it needs at least \
                         {SHARED_SECRET_MIN_BYTES}, the same on every node (for example the \
                         output of `openssl rand -base64 32`)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Self {
            enabled: false,
            name: "iggy-cluster".into(),
            heartbeat_timeout: Duration::from_secs(5),
            commit_broadcast_interval: Duration::from_millis(500),
            prepare_retransmit_interval: Duration::from_millis(250),
            view_change_retransmit_interval: Duration::from_millis(500),
            view_change_status_timeout: Duration::from_secs(5),
            nodes: Vec::new(),
            auth: ClusterAuth::default(),
            tls: ClusterTls::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterNode {
    pub name: String,
    /// The roster's `ip` key (upstream's name, so its files load): an IP literal, or a DNS
    /// host name (a StatefulSet pod's stable name, whose address changes at each restart).
    pub host: NodeHost,
    pub replica_id: u8,
    /// What clients are told instead of `ip` (an IP or a host name, no port).
    pub advertised_address: Option<String>,
    pub ports: NodePorts,
}

/// Where a roster node is: an IP literal, which the replica listener binds and peers dial as
/// upstream's roster does, or a DNS host name. A name is resolved by each dial (a peer that
/// restarted at another address is found on the next attempt; one that does not resolve yet
/// is a failed dial, retried), never at configuration time; a node whose own entry is a name
/// binds its replica listener on the wildcard address (`consensus::replica_bus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeHost {
    Ip(IpAddr),
    /// An RFC 1123 host name as written (DNS compares names without case).
    Name(String),
}

impl NodeHost {
    /// An IP literal or an RFC 1123 host name; a name whose last label is all digits is
    /// refused, because a resolver reads it as a (malformed) IPv4 address.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Some(NodeHost::Ip(ip));
        }
        let numeric_top = text
            .rsplit('.')
            .next()
            .is_some_and(|top| top.chars().all(|c| c.is_ascii_digit()));
        (is_host(text) && !numeric_top).then(|| NodeHost::Name(text.to_string()))
    }

    /// The form two entries are compared in: a name in lower case, an IP as parsed.
    fn comparable(&self) -> String {
        match self {
            NodeHost::Ip(ip) => ip.to_string(),
            NodeHost::Name(name) => name.to_ascii_lowercase(),
        }
    }
}

impl std::fmt::Display for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeHost::Ip(ip) => write!(f, "{ip}"),
            NodeHost::Name(name) => f.write_str(name),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePorts {
    pub tcp: Option<u16>,
    pub quic: Option<u16>,
    pub http: Option<u16>,
    pub websocket: Option<u16>,
    pub tcp_replica: Option<u16>,
}

impl NodePorts {
    /// Every port slot by its key under `ports`.
    pub fn slots(&self) -> [(&'static str, Option<u16>); 5] {
        [
            ("tcp", self.tcp),
            ("quic", self.quic),
            ("http", self.http),
            ("websocket", self.websocket),
            ("tcp_replica", self.tcp_replica),
        ]
    }
}

/// A roster field: its key inside a node table and its value type.
struct NodeField {
    key: &'static str,
    integer: bool,
    required: bool,
}

const NODE_FIELDS: &[NodeField] = &[
    NodeField {
        key: "name",
        integer: false,
        required: true,
    },
    NodeField {
        key: "ip",
        integer: false,
        required: true,
    },
    NodeField {
        key: "replica_id",
        integer: true,
        required: true,
    },
    NodeField {
        key: "advertised_address",
        integer: false,
        required: false,
    },
    NodeField {
        key: "ports.tcp",
        integer: true,
        required: false,
    },
    NodeField {
        key: "ports.quic",
        integer: true,
        required: false,
    },
    NodeField {
        key: "ports.http",
        integer: true,
        required: false,
    },
    NodeField {
        key: "ports.websocket",
        integer: true,
        required: false,
    },
    NodeField {
        key: "ports.tcp_replica",
        integer: true,
        required: false,
    },
];

fn node_key(index: usize, field: &str) -> String {
    format!("cluster.nodes[{index}].{field}")
}

/// `IGGY_CLUSTER_NODES_<i>_<FIELD>` for a roster field (`ports.tcp` -> `PORTS_TCP`).
pub fn node_env_name(index: &str, field: &str) -> String {
    format!(
        "IGGY_CLUSTER_NODES_{index}_{}",
        field.replace('.', "_").to_ascii_uppercase()
    )
}

/// The roster's variables as `--list-config-env-vars` prints them: variable pattern, TOML
/// path pattern, type.
pub fn roster_env_vars() -> Vec<(String, String, &'static str)> {
    NODE_FIELDS
        .iter()
        .map(|f| {
            (
                node_env_name("<i>", f.key),
                format!("cluster.nodes[<i>].{}", f.key),
                if f.integer { "integer" } else { "string" },
            )
        })
        .collect()
}

/// Takes `cluster.nodes` out of a parsed config file: the flat merge knows no arrays.
pub(super) fn take_file_roster(file: &mut Table) -> Result<Vec<Table>, ConfigError> {
    let Some(Value::Table(cluster)) = file.get_mut("cluster") else {
        return Ok(Vec::new());
    };
    let Some(nodes) = cluster.remove("nodes") else {
        return Ok(Vec::new());
    };
    let Value::Array(nodes) = nodes else {
        return Err(ConfigError::BadValue {
            key: "cluster.nodes".into(),
            value: nodes.to_string(),
            expected: "array of tables ([[cluster.nodes]])",
        });
    };
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, node)| match node {
            Value::Table(t) => Ok(t),
            other => Err(ConfigError::BadValue {
                key: format!("cluster.nodes[{i}]"),
                value: other.to_string(),
                expected: "table",
            }),
        })
        .collect()
}

/// Applies `IGGY_CLUSTER_NODES_<i>_<FIELD>` over the file's roster. Indices are probed from 0
/// to `REPLICAS_MAX` (one past the limit, so a 33rd node is seen and refused); a variable for
/// index i overrides node i of the file or, at the roster's end, adds a node, so a roster may
/// come from the environment alone. An index past the end leaves a hole and is refused.
pub(super) fn apply_env_roster(
    nodes: &mut Vec<Table>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    for index in 0..=REPLICAS_MAX {
        for field in NODE_FIELDS {
            let var = node_env_name(&index.to_string(), field.key);
            let Some(raw) = env(&var) else { continue };
            if index > nodes.len() {
                return Err(ConfigError::Cluster {
                    key: var,
                    problem: format!(
                        "names node {index} but the roster has {} node(s); nodes are numbered \
                         from 0 without gaps",
                        nodes.len()
                    ),
                });
            }
            if index == nodes.len() {
                nodes.push(Table::new());
            }
            let value = if field.integer {
                Value::Integer(raw.trim().parse().map_err(|_| ConfigError::BadValue {
                    key: node_key(index, field.key),
                    value: raw.clone(),
                    expected: "integer",
                })?)
            } else {
                Value::String(raw)
            };
            let node = &mut nodes[index];
            match field.key.split_once('.') {
                Some((table, key)) => {
                    let inner = node
                        .entry(table)
                        .or_insert_with(|| Value::Table(Table::new()));
                    // A file's non-table `ports` is refused when the node is parsed.
                    if let Value::Table(inner) = inner {
                        inner.insert(key.into(), value);
                    }
                }
                None => {
                    node.insert(field.key.into(), value);
                }
            }
        }
    }
    Ok(())
}

fn lookup<'a>(node: &'a Table, key: &str) -> Option<&'a Value> {
    match key.split_once('.') {
        Some((table, inner)) => node.get(table)?.as_table()?.get(inner),
        None => node.get(key),
    }
}

/// An integer roster field that fits `T` (`u8` for a replica id, `u16` for a port).
fn integer_field<T: TryFrom<i64>>(
    node: &Table,
    index: usize,
    key: &str,
) -> Result<Option<T>, ConfigError> {
    let Some(value) = lookup(node, key) else {
        return Ok(None);
    };
    value
        .as_integer()
        .and_then(|n| T::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| ConfigError::BadValue {
            key: node_key(index, key),
            value: value.to_string(),
            expected: if key == "replica_id" {
                "replica id (0 to 255)"
            } else {
                "port (0 to 65535; 0 is refused when the cluster is enabled)"
            },
        })
}

/// One roster entry, each unknown key or bad value refused with its `cluster.nodes[i]` path.
fn parse_node(index: usize, node: &Table) -> Result<ClusterNode, ConfigError> {
    for (key, value) in node {
        match (key.as_str(), value) {
            ("ports", Value::Table(ports)) => {
                for inner in ports.keys() {
                    let path = format!("ports.{inner}");
                    if !NODE_FIELDS.iter().any(|f| f.key == path) {
                        return Err(ConfigError::UnknownKey(node_key(index, &path)));
                    }
                }
            }
            ("ports", other) => {
                return Err(ConfigError::BadValue {
                    key: node_key(index, "ports"),
                    value: other.to_string(),
                    expected: "table ([cluster.nodes.ports])",
                });
            }
            (key, _) if NODE_FIELDS.iter().any(|f| f.key == key) => {}
            (key, _) => return Err(ConfigError::UnknownKey(node_key(index, key))),
        }
    }
    let string = |key: &str| -> Result<Option<String>, ConfigError> {
        match lookup(node, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ConfigError::BadValue {
                key: node_key(index, key),
                value: other.to_string(),
                expected: "string",
            }),
        }
    };
    let integer = |key: &str| integer_field(node, index, key);
    for field in NODE_FIELDS.iter().filter(|f| f.required) {
        if lookup(node, field.key).is_none() {
            return Err(ConfigError::Cluster {
                key: node_key(index, field.key),
                problem: "is required".into(),
            });
        }
    }
    let ip_text = string("ip")?.unwrap_or_default();
    let host = NodeHost::parse(&ip_text).ok_or_else(|| ConfigError::BadValue {
        key: node_key(index, "ip"),
        value: ip_text.clone(),
        expected: "IP address or DNS host name (RFC 1123: letters, digits and '-' in \
                   dot-separated labels, no port, no trailing dot)",
    })?;
    let port = |key: &str| integer_field::<u16>(node, index, key);
    Ok(ClusterNode {
        name: string("name")?.unwrap_or_default(),
        host,
        replica_id: integer("replica_id")?.unwrap_or_default(),
        // Empty means unset, as in upstream's files.
        advertised_address: string("advertised_address")?.filter(|a| !a.trim().is_empty()),
        ports: NodePorts {
            tcp: port("ports.tcp")?,
            quic: port("ports.quic")?,
            http: port("ports.http")?,
            websocket: port("ports.websocket")?,
            tcp_replica: port("ports.tcp_replica")?,
        },
    })
}

/// A duration as upstream writes them: a whole number and one unit, `ms`, `s`, `m` or `h`
/// ("500ms", "5s", "2m"). Anything else (no unit, fractions, spaces, compound forms) is
/// refused, so a typo never becomes a surprising timeout.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let digits_end = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(digits_end);
    if number.is_empty() {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => number,
        "s" => number.checked_mul(1_000)?,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

/// Builds `[cluster]` from the merged table's section and the roster.
pub(super) fn build(section: Table, nodes: &[Table]) -> Result<Cluster, ConfigError> {
    let text = |key: &str| -> String {
        section
            .get(key)
            .and_then(Value::as_str)
            .expect("defaults give every [cluster] key its type")
            .to_string()
    };
    let duration = |key: &str| -> Result<Duration, ConfigError> {
        let raw = text(key);
        parse_duration(raw.trim()).ok_or_else(|| ConfigError::BadValue {
            key: format!("cluster.{key}"),
            value: raw,
            expected: "duration (a whole number with ms, s, m or h: \"500ms\", \"5s\")",
        })
    };
    Ok(Cluster {
        enabled: section
            .get("enabled")
            .and_then(Value::as_bool)
            .expect("defaults give cluster.enabled its type"),
        name: text("name"),
        heartbeat_timeout: duration("heartbeat_timeout")?,
        commit_broadcast_interval: duration("commit_broadcast_interval")?,
        prepare_retransmit_interval: duration("prepare_retransmit_interval")?,
        view_change_retransmit_interval: duration("view_change_retransmit_interval")?,
        view_change_status_timeout: duration("view_change_status_timeout")?,
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| parse_node(i, n))
            .collect::<Result<_, _>>()?,
        auth: build_auth(&section),
        tls: build_tls(&section),
    })
}

fn build_tls(section: &Table) -> ClusterTls {
    let tls = section
        .get("tls")
        .and_then(Value::as_table)
        .expect("defaults give [cluster.tls]");
    let text = |key: &str| {
        tls.get(key)
            .and_then(Value::as_str)
            .expect("defaults give every [cluster.tls] key its type")
            .to_string()
    };
    ClusterTls {
        enabled: tls
            .get("enabled")
            .and_then(Value::as_bool)
            .expect("defaults give cluster.tls.enabled its type"),
        self_signed: tls
            .get("self_signed")
            .and_then(Value::as_bool)
            .expect("defaults give cluster.tls.self_signed its type"),
        cert_file: text("cert_file"),
        key_file: text("key_file"),
        ca_file: text("ca_file"),
    }
}

fn build_auth(section: &Table) -> ClusterAuth {
    let auth = section
        .get("auth")
        .and_then(Value::as_table)
        .expect("defaults give [cluster.auth]");
    let secret = |key: &str| {
        Secret::new(
            auth.get(key)
                .and_then(Value::as_str)
                .expect("defaults give every [cluster.auth] key its type"),
        )
    };
    ClusterAuth {
        enabled: auth
            .get("enabled")
            .and_then(Value::as_bool)
            .expect("defaults give cluster.auth.enabled its type"),
        shared_secret: secret("shared_secret"),
        previous_shared_secret: secret("previous_shared_secret"),
    }
}

fn refuse(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Cluster {
        key: key.into(),
        problem: problem.into(),
    }
}

impl Cluster {
    /// A digest of what the roster tells clients (every node's replica id, name, the address
    /// it publishes, `advertised_address` or else `ip`, and its client ports, in replica id
    /// order) that a node's replica hello declares: peers whose digests differ would answer
    /// clients with different addresses for one node, so they refuse each other
    /// (spec/frames.spec, `ReplicaHelloHeader.roster`). The replica plane's own addressing
    /// (`tcp_replica`, and `ip` where `advertised_address` is set) is left out: a peer may be
    /// dialed through a proxy or a NAT at an address of its own on each node. Never 0.
    pub fn roster_digest(&self) -> u64 {
        let mut nodes: Vec<&ClusterNode> = self.nodes.iter().collect();
        nodes.sort_by_key(|node| node.replica_id);
        let mut text = String::new();
        for node in nodes {
            let published = match &node.advertised_address {
                Some(address) => address.to_ascii_lowercase(),
                None => node.host.comparable(),
            };
            let ports: Vec<String> = node
                .ports
                .slots()
                .iter()
                .filter(|(key, _)| *key != "tcp_replica")
                .map(|(key, port)| format!("{key}={}", port.map_or(-1, i32::from)))
                .collect();
            text.push_str(&format!(
                "{}\t{}\t{published}\t{}\n",
                node.replica_id,
                node.name,
                ports.join(",")
            ));
        }
        let hash = blake3::hash(text.as_bytes());
        let first: [u8; 8] = hash.as_bytes()[..8].try_into().expect("8 bytes");
        u64::from_le_bytes(first).max(1)
    }

    /// The start-time rules for an enabled cluster. `transports` are the client transports
    /// by section name with their `enabled`; each enabled one needs its port in every roster
    /// entry.
    pub fn validate(&self, transports: &[(&'static str, bool)]) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.name.trim().is_empty() {
            return Err(refuse(
                "cluster.name",
                "must not be empty (the cluster id derives from it)",
            ));
        }
        self.validate_timing()?;
        self.auth.validate()?;
        self.tls.validate()?;
        if self.nodes.is_empty() {
            return Err(refuse(
                "cluster.nodes",
                "an enabled cluster needs at least one [[cluster.nodes]] entry",
            ));
        }
        if self.nodes.len() > REPLICAS_MAX {
            return Err(refuse(
                "cluster.nodes",
                format!("has {} nodes; at most {REPLICAS_MAX}", self.nodes.len()),
            ));
        }
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut endpoints = std::collections::BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.name.trim().is_empty() {
                return Err(refuse(node_key(i, "name"), "must not be empty"));
            }
            if !names.insert(node.name.as_str()) {
                return Err(refuse(
                    node_key(i, "name"),
                    format!("{:?} names another node too; names are unique", node.name),
                ));
            }
            if usize::from(node.replica_id) >= self.nodes.len() {
                return Err(refuse(
                    node_key(i, "replica_id"),
                    format!(
                        "is {}; replica ids are exactly 0 to {} for {} nodes",
                        node.replica_id,
                        self.nodes.len() - 1,
                        self.nodes.len()
                    ),
                ));
            }
            if !ids.insert(node.replica_id) {
                return Err(refuse(
                    node_key(i, "replica_id"),
                    format!("{} is another node's replica id too", node.replica_id),
                ));
            }
            if let Some(advertised) = &node.advertised_address
                && !is_host(advertised)
            {
                return Err(ConfigError::BadValue {
                    key: node_key(i, "advertised_address"),
                    value: advertised.clone(),
                    expected: "IP address or host name without a port",
                });
            }
            for (slot, port) in node.ports.slots() {
                let key = node_key(i, &format!("ports.{slot}"));
                let Some(port) = port else { continue };
                if port == 0 {
                    return Err(refuse(key, "must not be 0"));
                }
                // Names are compared as text, unresolved: two names of one address (or a
                // name and its IP) are not caught here; the second listener fails to bind.
                let endpoint = (node.host.comparable(), port);
                if let Some(other) = endpoints.insert(endpoint, key.clone()) {
                    return Err(refuse(key, format!("{}:{port} is also {other}", node.host)));
                }
            }
            for &(transport, enabled) in transports {
                let port = node
                    .ports
                    .slots()
                    .into_iter()
                    .find(|(s, _)| *s == transport);
                if enabled && port.is_none_or(|(_, p)| p.is_none()) {
                    return Err(refuse(
                        node_key(i, &format!("ports.{transport}")),
                        format!("is required: {transport}.enabled is true"),
                    ));
                }
            }
            if node.ports.tcp_replica.is_none() {
                return Err(refuse(
                    node_key(i, "ports.tcp_replica"),
                    "is required (the replica listener)",
                ));
            }
        }
        Ok(())
    }

    fn validate_timing(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("commit_broadcast_interval", self.commit_broadcast_interval),
            (
                "prepare_retransmit_interval",
                self.prepare_retransmit_interval,
            ),
            (
                "view_change_retransmit_interval",
                self.view_change_retransmit_interval,
            ),
        ] {
            if value.is_zero() {
                return Err(refuse(format!("cluster.{key}"), "must not be zero"));
            }
        }
        // A backup must miss several commit broadcasts before it suspects the primary.
        let heartbeat_floor = Duration::from_secs(2).max(4 * self.commit_broadcast_interval);
        if self.heartbeat_timeout < heartbeat_floor {
            return Err(refuse(
                "cluster.heartbeat_timeout",
                format!(
                    "is {:?}; it must be at least 2s and 4 x cluster.commit_broadcast_interval \
                     ({:?})",
                    self.heartbeat_timeout,
                    4 * self.commit_broadcast_interval
                ),
            ));
        }
        if self.view_change_status_timeout < 4 * self.view_change_retransmit_interval {
            return Err(refuse(
                "cluster.view_change_status_timeout",
                format!(
                    "is {:?}; it must be at least 4 x cluster.view_change_retransmit_interval \
                     ({:?})",
                    self.view_change_status_timeout,
                    4 * self.view_change_retransmit_interval
                ),
            ));
        }
        Ok(())
    }

    /// This start's replica id from `--replica-id`: a standalone node is replica 0 of a
    /// cluster of one; with a cluster the flag is required and must name a roster entry.
    pub fn replica_id(&self, flag: Option<u8>) -> Result<u8, ConfigError> {
        match (self.enabled, flag) {
            (false, None | Some(0)) => Ok(0),
            (false, Some(id)) => Err(ConfigError::ReplicaId(format!(
                "--replica-id {id}: a standalone node is replica 0; another id needs \
                 cluster.enabled = true with that replica in [[cluster.nodes]]"
            ))),
            (true, None) => Err(ConfigError::ReplicaId(
                "--replica-id is required when cluster.enabled is true: it picks this node's \
                 [[cluster.nodes]] entry"
                    .into(),
            )),
            (true, Some(id)) if self.node(id).is_some() => Ok(id),
            (true, Some(id)) => Err(ConfigError::ReplicaId(format!(
                "--replica-id {id}: no cluster.nodes entry has replica_id = {id}"
            ))),
        }
    }

    /// The roster entry with this replica id.
    pub fn node(&self, replica_id: u8) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.replica_id == replica_id)
    }
}

/// `address` (a `*.address` setting, `ip:port`) with its port replaced by `port`: in a cluster
/// each client listener binds the IP of its setting and the roster's port for this node.
pub fn with_port(address: &str, port: u16) -> String {
    let host = match address.parse::<std::net::SocketAddr>() {
        Ok(socket) => socket.ip().to_string(),
        Err(_) => address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .to_string(),
    };
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// Whether a client listener bound at `address` (`ip:port`, after `with_port`) answers at the
/// roster's `ip` for this node: a wildcard answers at every IP, an IP literal only at itself.
/// A host name, in the setting or in the roster, cannot be judged without resolving it and
/// counts as answering. One that does not is worth a warning only, as upstream gives: clients
/// are sent to the advertised address, which may reach the listener another way.
pub fn bind_serves(address: &str, host: &NodeHost) -> bool {
    match (address.parse::<std::net::SocketAddr>(), host) {
        (Ok(bound), NodeHost::Ip(ip)) => bound.ip().is_unspecified() || bound.ip() == *ip,
        _ => true,
    }
}

/// An IP literal or an RFC 1123 host name (no port).
pub(crate) fn is_host(text: &str) -> bool {
    if text.parse::<IpAddr>().is_ok() {
        return true;
    }
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listener_keeps_its_ip_and_takes_the_roster_port() {
        assert_eq!(super::with_port("0.0.0.0:8090", 18091), "0.0.0.0:18091");
        assert_eq!(super::with_port("[::1]:8090", 18091), "[::1]:18091");
        assert_eq!(super::with_port("localhost:8090", 7), "localhost:7");
    }

    #[test]
    fn a_listener_serves_the_roster_ip_when_it_binds_that_ip_or_a_wildcard() {
        let ip = |text: &str| NodeHost::Ip(text.parse().unwrap());
        assert!(super::bind_serves("127.0.0.2:8090", &ip("127.0.0.2")));
        assert!(super::bind_serves("0.0.0.0:8090", &ip("10.0.0.7")));
        assert!(super::bind_serves("[::]:8090", &ip("10.0.0.7")));
        assert!(super::bind_serves("[fd00::2]:8090", &ip("fd00::2")));
        // The embedded default on a node whose roster ip is another machine's.
        assert!(!super::bind_serves("127.0.0.1:8090", &ip("127.0.0.2")));
        assert!(!super::bind_serves("127.0.0.1:8090", &ip("10.0.0.7")));
        assert!(super::bind_serves("localhost:8090", &ip("10.0.0.7")));
        // A roster name: whether a bound IP serves it is not known without resolving it.
        let name = NodeHost::Name("iggy-0.iggy-headless".into());
        assert!(super::bind_serves("127.0.0.1:8090", &name));
    }

    use super::super::{Config, load};
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    /// Every transport but TCP off, so a roster needs only tcp and tcp_replica ports.
    const OTHER_TRANSPORTS_OFF: &str =
        "[quic]\nenabled = false\n[http]\nenabled = false\n[websocket]\nenabled = false\n";

    /// Three nodes on one machine, tcp and tcp_replica ports each (the other transports off).
    fn three_nodes() -> String {
        let mut text = String::from(OTHER_TRANSPORTS_OFF);
        text.push_str("[cluster]\nenabled = true\nname = \"c1\"\n");
        for id in 0..3 {
            text.push_str(&format!(
                "[[cluster.nodes]]\nname = \"node-{id}\"\nip = \"127.0.0.1\"\nreplica_id = {id}\n\
                 [cluster.nodes.ports]\ntcp = {}\ntcp_replica = {}\n",
                8090 + id,
                8100 + id
            ));
        }
        text
    }

    fn refused_key(file: &str, env: impl Fn(&str) -> Option<String>) -> String {
        match load(Some(file), env) {
            Ok(_) => panic!("accepted:\n{file}"),
            Err(ConfigError::Cluster { key, .. })
            | Err(ConfigError::BadValue { key, .. })
            | Err(ConfigError::UnknownKey(key)) => key,
            Err(other) => panic!("{other}"),
        }
    }

    /// A container image binds every listener to the wildcard address: a cluster node's clients
    /// are told its roster entry, so it needs no `node.advertised_address` (a single node does).
    #[test]
    fn a_cluster_node_binds_a_wildcard_without_node_advertised_address() {
        let wildcard = |key: &str| (key == "IGGY_TCP_ADDRESS").then(|| "0.0.0.0:8090".to_string());
        let config = load(Some(&three_nodes()), wildcard).unwrap();
        assert_eq!(config.tcp.address, "0.0.0.0:8090");
        assert_eq!(config.cluster.nodes[0].host.to_string(), "127.0.0.1");
        let single = load(Some(OTHER_TRANSPORTS_OFF), wildcard).unwrap_err();
        assert!(
            matches!(single, ConfigError::WildcardWithoutAdvertised { .. }),
            "{single}"
        );
    }

    /// The roster digest changes with what clients are told (a client port, an advertised
    /// address), not with the replica plane's addressing (a peer's tcp_replica through a proxy)
    /// or the order the entries are written in.
    #[test]
    fn the_roster_digest_follows_what_clients_are_told() {
        let digest = |env: &dyn Fn(&str) -> Option<String>| {
            load(Some(&three_nodes()), env)
                .unwrap()
                .cluster
                .roster_digest()
        };
        let shared = digest(&none);
        assert_ne!(shared, 0);
        let set = |key: &'static str, value: &'static str| {
            move |k: &str| (k == key).then(|| value.to_string())
        };
        assert_eq!(
            shared,
            digest(&set("IGGY_CLUSTER_NODES_1_PORTS_TCP_REPLICA", "9999"))
        );
        assert_ne!(
            shared,
            digest(&set("IGGY_CLUSTER_NODES_1_PORTS_TCP", "9999"))
        );
        assert_ne!(
            shared,
            digest(&set(
                "IGGY_CLUSTER_NODES_2_ADVERTISED_ADDRESS",
                "iggy-2.example"
            ))
        );
        let mut reordered = load(Some(&three_nodes()), none).unwrap().cluster;
        reordered.nodes.reverse();
        assert_eq!(shared, reordered.roster_digest());
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = load(None, none).unwrap().cluster;
        assert_eq!(c, Cluster::default());
        assert!(!c.enabled);
        assert_eq!(c.name, "iggy-cluster");
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(5));
        assert_eq!(c.commit_broadcast_interval, Duration::from_millis(500));
        assert_eq!(c.prepare_retransmit_interval, Duration::from_millis(250));
        assert_eq!(
            c.view_change_retransmit_interval,
            Duration::from_millis(500)
        );
        assert_eq!(c.view_change_status_timeout, Duration::from_secs(5));
        assert!(c.nodes.is_empty());
    }

    #[test]
    fn auth_secrets_load_from_file_or_environment_and_are_never_shown() {
        const SECRET: &str = "0123456789abcdef0123456789abcdef";
        const PREVIOUS: &str = "previous secret, also 32 bytes or more";
        let off = load(Some(&three_nodes()), none).unwrap().cluster.auth;
        assert_eq!(off, ClusterAuth::default());
        assert!(!off.enabled && off.shared_secret.is_empty());
        // From the file.
        let file = format!(
            "{}[cluster.auth]\nenabled = true\nshared_secret = \"{SECRET}\"\n",
            three_nodes()
        );
        let auth = load(Some(&file), none).unwrap().cluster.auth;
        assert!(auth.enabled);
        assert_eq!(auth.shared_secret.as_bytes(), SECRET.as_bytes());
        assert!(auth.previous_shared_secret.is_empty());
        // From the environment, upstream's variable names.
        let env = |k: &str| match k {
            "IGGY_CLUSTER_AUTH_ENABLED" => Some("true".into()),
            "IGGY_CLUSTER_AUTH_SHARED_SECRET" => Some(SECRET.into()),
            "IGGY_CLUSTER_AUTH_PREVIOUS_SHARED_SECRET" => Some(PREVIOUS.into()),
            _ => None,
        };
        let config = load(Some(&three_nodes()), env).unwrap();
        let auth = &config.cluster.auth;
        assert_eq!(auth.shared_secret, Secret::new(SECRET));
        assert_eq!(auth.previous_shared_secret.as_bytes(), PREVIOUS.as_bytes());
        let shown = format!("{config:?}");
        assert!(shown.contains("Secret(32 bytes)"), "{shown}");
        assert!(
            !shown.contains(SECRET) && !shown.contains(PREVIOUS),
            "{shown}"
        );
    }

    /// A secret's buffer, and every clone's, is overwritten when dropped (the `zeroize` crate).
    #[test]
    fn a_secret_is_zeroed_when_dropped() {
        fn zeroed_on_drop<T: zeroize::ZeroizeOnDrop>(_: &T) {}
        let secret = Secret::new("0123456789abcdef0123456789abcdef");
        zeroed_on_drop(&secret.0);
        zeroed_on_drop(&secret.clone().0);
    }

    #[test]
    fn a_short_secret_is_refused_naming_its_key_not_its_value() {
        let with = |shared: &str, previous: &str| {
            format!(
                "{}[cluster.auth]\nenabled = true\nshared_secret = \"{shared}\"\n\
                 previous_shared_secret = \"{previous}\"\n",
                three_nodes()
            )
        };
        let long = "x".repeat(SHARED_SECRET_MIN_BYTES);
        let short = "y".repeat(SHARED_SECRET_MIN_BYTES - 1);
        load(Some(&with(&long, "")), none).unwrap();
        load(Some(&with(&long, &long)), none).unwrap();
        for (file, key) in [
            (with("", ""), "cluster.auth.shared_secret"),
            (with(&short, ""), "cluster.auth.shared_secret"),
            (with(&long, &short), "cluster.auth.previous_shared_secret"),
        ] {
            let error = load(Some(&file), none).unwrap_err();
            assert_eq!(refused_key(&file, none), key, "{error}");
            let text = error.to_string();
            assert!(text.contains("at least 32"), "{text}");
            assert!(!text.contains(&short), "{text}");
        }
        // Disabled, the secrets are not used and not judged.
        let disabled =
            with(&short, "").replace("enabled = true\nshared", "enabled = false\nshared");
        load(Some(&disabled), none).unwrap();
        // A mistyped secret is refused without echoing it.
        let typed = format!(
            "{}[cluster.auth]\nshared_secret = 123456789\n",
            three_nodes()
        );
        let text = load(Some(&typed), none).unwrap_err().to_string();
        assert!(text.contains("cluster.auth.shared_secret"), "{text}");
        assert!(!text.contains("123456789"), "{text}");
    }

    #[test]
    fn a_secret_on_a_line_toml_cannot_parse_is_not_echoed() {
        // A backslash in a basic string starts an escape: a random password may hold one,
        // and the parser's message quotes the line it stopped on.
        const SECRET: &str = r"Zq8\pW3rT5yU7iO9pA1sD3fG5hJ7kL9zX";
        // That escape, and a closing quote forgotten.
        for value in [format!("\"{SECRET}\""), format!("\"{SECRET}")] {
            let file = format!(
                "{}[cluster.auth]\nenabled = true\nshared_secret = {value}\n",
                three_nodes()
            );
            let text = load(Some(&file), none).unwrap_err().to_string();
            let line = file.lines().count();
            assert!(text.contains(&format!("line {line}")), "{text}");
            assert!(!text.contains("Zq8") && !text.contains("kL9zX"), "{text}");
        }
        // A line without a secret is still quoted, as the parser shows it.
        let typo = format!("{}[system]\npath = \"data\n", three_nodes());
        let text = load(Some(&typo), none).unwrap_err().to_string();
        assert!(text.contains("path = \"data"), "{text}");
    }

    #[test]
    fn tls_files_load_from_file_or_environment_and_an_empty_one_is_refused_by_its_key() {
        let off = load(Some(&three_nodes()), none).unwrap().cluster.tls;
        assert_eq!(off, ClusterTls::default());
        let file = |cert: &str, key: &str, ca: &str| {
            format!(
                "{}[cluster.tls]\nenabled = true\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\n\
                 ca_file = \"{ca}\"\n",
                three_nodes()
            )
        };
        let tls = load(Some(&file("n.pem", "n.key", "ca.pem")), none)
            .unwrap()
            .cluster
            .tls;
        assert!(tls.enabled);
        assert_eq!(
            (&*tls.cert_file, &*tls.key_file, &*tls.ca_file),
            ("n.pem", "n.key", "ca.pem")
        );
        let env = |k: &str| match k {
            "IGGY_CLUSTER_TLS_ENABLED" => Some("true".into()),
            "IGGY_CLUSTER_TLS_CERT_FILE" => Some("/etc/iggy/node.pem".into()),
            "IGGY_CLUSTER_TLS_KEY_FILE" => Some("/etc/iggy/node.key".into()),
            "IGGY_CLUSTER_TLS_CA_FILE" => Some("/etc/iggy/ca.pem".into()),
            _ => None,
        };
        let tls = load(Some(&three_nodes()), env).unwrap().cluster.tls;
        assert!(tls.enabled);
        assert_eq!(tls.cert_file, "/etc/iggy/node.pem");
        assert_eq!(tls.key_file, "/etc/iggy/node.key");
        assert_eq!(tls.ca_file, "/etc/iggy/ca.pem");
        for (file, key) in [
            (file("", "n.key", "ca.pem"), "cluster.tls.cert_file"),
            (file("n.pem", " ", "ca.pem"), "cluster.tls.key_file"),
            (file("n.pem", "n.key", ""), "cluster.tls.ca_file"),
        ] {
            assert_eq!(refused_key(&file, none), key);
        }
        let any_peer = file("n.pem", "n.key", "ca.pem") + "self_signed = true\n";
        assert_eq!(refused_key(&any_peer, none), "cluster.tls.self_signed");
        // Disabled, the paths are not judged.
        let disabled = file("", "", "").replace("enabled = true\ncert", "enabled = false\ncert");
        load(Some(&disabled), none).unwrap();
    }

    #[test]
    fn durations_take_one_whole_number_and_unit() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        for bad in [
            "5",
            "s",
            "1.5s",
            "5 s",
            "5sec",
            "1m30s",
            "-1s",
            "",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        let e = load(Some("[cluster]\nheartbeat_timeout = \"5 seconds\"\n"), none).unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, .. } if key == "cluster.heartbeat_timeout"),
            "{e}"
        );
        let env = |k: &str| (k == "IGGY_CLUSTER_COMMIT_BROADCAST_INTERVAL").then(|| "250ms".into());
        let c = load(None, env).unwrap().cluster;
        assert_eq!(c.commit_broadcast_interval, Duration::from_millis(250));
    }

    #[test]
    fn roster_from_file() {
        let c = load(Some(&three_nodes()), none).unwrap().cluster;
        assert!(c.enabled);
        assert_eq!(c.nodes.len(), 3);
        let node = c.node(2).unwrap();
        assert_eq!(node.name, "node-2");
        assert_eq!(node.host, NodeHost::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(node.ports.tcp, Some(8092));
        assert_eq!(node.ports.tcp_replica, Some(8102));
        assert_eq!(node.ports.quic, None);
        assert_eq!(node.advertised_address, None);
        assert_eq!(c.replica_id(Some(1)), Ok(1));
    }

    /// A StatefulSet's roster: each node by its stable DNS name, all on the same ports.
    fn named_nodes() -> String {
        let mut text = String::from(OTHER_TRANSPORTS_OFF);
        text.push_str("[cluster]\nenabled = true\nname = \"c1\"\n");
        for id in 0..3 {
            text.push_str(&format!(
                "[[cluster.nodes]]\nname = \"iggy-{id}\"\n\
                 ip = \"iggy-{id}.iggy-headless.default.svc.cluster.local\"\nreplica_id = {id}\n\
                 [cluster.nodes.ports]\ntcp = 8090\ntcp_replica = 8100\n"
            ));
        }
        text
    }

    #[test]
    fn a_roster_ip_may_be_a_host_name_kept_unresolved() {
        let c = load(Some(&named_nodes()), none).unwrap().cluster;
        let name = |id: u8| c.node(id).unwrap().host.clone();
        assert_eq!(
            name(1),
            NodeHost::Name("iggy-1.iggy-headless.default.svc.cluster.local".into())
        );
        assert_eq!(
            name(2).to_string(),
            "iggy-2.iggy-headless.default.svc.cluster.local"
        );
        // A name that resolves nowhere still loads: it is resolved only when it is dialed.
        let unresolvable = named_nodes().replace("cluster.local", "invalid");
        load(Some(&unresolvable), none).unwrap();
        // Names and IP literals mix; `localhost` is a name like any other.
        let mixed = three_nodes().replacen("ip = \"127.0.0.1\"", "ip = \"localhost\"", 1);
        let c = load(Some(&mixed), none).unwrap().cluster;
        assert_eq!(c.nodes[0].host, NodeHost::Name("localhost".into()));
        assert_eq!(c.nodes[1].host, NodeHost::Ip("127.0.0.1".parse().unwrap()));
        // From the environment too (upstream's variable name).
        let env = |k: &str| (k == "IGGY_CLUSTER_NODES_2_IP").then(|| "node-2.example".into());
        let c = load(Some(&three_nodes()), env).unwrap().cluster;
        assert_eq!(c.nodes[2].host, NodeHost::Name("node-2.example".into()));
    }

    #[test]
    fn a_roster_ip_that_is_neither_an_ip_nor_a_host_name_is_refused_by_its_key() {
        for bad in [
            "iggy_0.headless",
            "iggy-0.headless:8100",
            "iggy-0.headless.",
            "-iggy.headless",
            "iggy-.headless",
            "iggy..headless",
            "10.0.0.256",
            "10.0.0",
            "",
            " ",
            "http://iggy-0",
            &"a".repeat(64),
        ] {
            let text =
                named_nodes().replacen("iggy-1.iggy-headless.default.svc.cluster.local", bad, 1);
            let error = load(Some(&text), none).unwrap_err();
            assert_eq!(refused_key(&text, none), "cluster.nodes[1].ip", "{bad:?}");
            assert!(error.to_string().contains("host name"), "{error}");
        }
        // Disabled, a bad value is still refused: it does not parse.
        let disabled = named_nodes()
            .replace("enabled = true", "enabled = false")
            .replacen("iggy-0.iggy-headless", "iggy_0", 1);
        assert_eq!(refused_key(&disabled, none), "cluster.nodes[0].ip");
    }

    #[test]
    fn two_entries_of_one_name_and_port_are_refused_without_resolving() {
        // Three names on one port each: distinct names, so no duplicate.
        load(Some(&named_nodes()), none).unwrap();
        // The same name twice on one port, in another case: DNS names have no case.
        let twice = named_nodes().replacen(
            "iggy-1.iggy-headless.default.svc.cluster.local",
            "IGGY-0.iggy-headless.default.svc.cluster.local",
            1,
        );
        assert_eq!(refused_key(&twice, none), "cluster.nodes[1].ports.tcp");
        let error = load(Some(&twice), none).unwrap_err().to_string();
        assert!(
            error.contains("IGGY-0.iggy-headless.default.svc.cluster.local:8090 is also cluster.nodes[0].ports.tcp"),
            "{error}"
        );
        // One name on distinct ports: three nodes on one machine by `localhost`.
        let local = three_nodes().replace("ip = \"127.0.0.1\"", "ip = \"localhost\"");
        load(Some(&local), none).unwrap();
        // A name and an IP are never compared (that would need resolving): node 1 at
        // localhost:8090 and node 0 at 127.0.0.1:8090 load, and node 1's listener would fail
        // to bind.
        let mixed = three_nodes()
            .replacen(
                "ip = \"127.0.0.1\"\nreplica_id = 1",
                "ip = \"localhost\"\nreplica_id = 1",
                1,
            )
            .replacen("tcp = 8091", "tcp = 8090", 1);
        assert!(mixed.contains("localhost") && !mixed.contains("8091"));
        load(Some(&mixed), none).unwrap();
    }

    #[test]
    fn roster_from_env_alone_and_over_a_file() {
        let vars: Vec<(String, String)> = (0..2)
            .flat_map(|i| {
                [
                    (format!("IGGY_CLUSTER_NODES_{i}_NAME"), format!("env-{i}")),
                    (format!("IGGY_CLUSTER_NODES_{i}_IP"), "10.0.0.1".to_string()),
                    (format!("IGGY_CLUSTER_NODES_{i}_REPLICA_ID"), i.to_string()),
                    (
                        format!("IGGY_CLUSTER_NODES_{i}_PORTS_TCP"),
                        (9000 + i).to_string(),
                    ),
                    (
                        format!("IGGY_CLUSTER_NODES_{i}_PORTS_TCP_REPLICA"),
                        (9100 + i).to_string(),
                    ),
                ]
            })
            .chain([
                ("IGGY_CLUSTER_ENABLED".to_string(), "true".to_string()),
                ("IGGY_QUIC_ENABLED".to_string(), "false".to_string()),
                ("IGGY_HTTP_ENABLED".to_string(), "false".to_string()),
                (
                    "IGGY_CLUSTER_NODES_1_ADVERTISED_ADDRESS".into(),
                    "node1.example".into(),
                ),
            ])
            .collect();
        let env = |k: &str| {
            vars.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        };
        let c = load(None, env).unwrap().cluster;
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.nodes[1].name, "env-1");
        assert_eq!(c.nodes[1].ports.tcp_replica, Some(9101));
        assert_eq!(
            c.nodes[1].advertised_address.as_deref(),
            Some("node1.example")
        );

        // Over a file: node 1's tcp port changes, a fourth node is added at the end.
        let over = |k: &str| {
            let v = match k {
                "IGGY_CLUSTER_NODES_1_PORTS_TCP" => "7001",
                "IGGY_CLUSTER_NODES_3_NAME" => "node-3",
                "IGGY_CLUSTER_NODES_3_IP" => "127.0.0.2",
                "IGGY_CLUSTER_NODES_3_REPLICA_ID" => "3",
                "IGGY_CLUSTER_NODES_3_PORTS_TCP" => "8090",
                "IGGY_CLUSTER_NODES_3_PORTS_TCP_REPLICA" => "8100",
                _ => return None,
            };
            Some(v.to_string())
        };
        let c = load(Some(&three_nodes()), over).unwrap().cluster;
        assert_eq!(c.nodes.len(), 4);
        assert_eq!(c.nodes[1].ports.tcp, Some(7001));
        assert_eq!(c.nodes[1].ports.tcp_replica, Some(8101));
        assert_eq!(c.nodes[3].host, NodeHost::Ip("127.0.0.2".parse().unwrap()));

        // A gap in the indices is refused naming the variable.
        let gap = |k: &str| (k == "IGGY_CLUSTER_NODES_4_NAME").then(|| "x".to_string());
        assert_eq!(
            refused_key(&three_nodes(), gap),
            "IGGY_CLUSTER_NODES_4_NAME"
        );
        let bad = |k: &str| (k == "IGGY_CLUSTER_NODES_0_PORTS_TCP").then(|| "ten".to_string());
        assert_eq!(
            refused_key(&three_nodes(), bad),
            "cluster.nodes[0].ports.tcp"
        );
    }

    /// Each rule refuses with its key named; the same file with the rule satisfied loads.
    #[test]
    fn each_refusal_names_its_key() {
        let base = three_nodes();
        assert!(load(Some(&base), none).is_ok());
        let cases: &[(&str, &str, &str)] = &[
            (
                "name = \"node-1\"",
                "name = \"node-0\"",
                "cluster.nodes[1].name",
            ),
            ("name = \"node-1\"", "name = \" \"", "cluster.nodes[1].name"),
            (
                "ip = \"127.0.0.1\"\nreplica_id = 2",
                "ip = \"local_host\"\nreplica_id = 2",
                "cluster.nodes[2].ip",
            ),
            (
                "replica_id = 2",
                "replica_id = 1",
                "cluster.nodes[2].replica_id",
            ),
            (
                "replica_id = 2",
                "replica_id = 3",
                "cluster.nodes[2].replica_id",
            ),
            (
                "replica_id = 2",
                "replica_id = 256",
                "cluster.nodes[2].replica_id",
            ),
            ("tcp = 8091", "tcp = 0", "cluster.nodes[1].ports.tcp"),
            ("tcp = 8091", "tcp = 70000", "cluster.nodes[1].ports.tcp"),
            (
                "tcp_replica = 8102",
                "tcp_replica = 8090",
                "cluster.nodes[2].ports.tcp_replica",
            ),
            (
                "tcp = 8091\ntcp_replica = 8101",
                "tcp = 8091",
                "cluster.nodes[1].ports.tcp_replica",
            ),
            ("tcp = 8091\n", "", "cluster.nodes[1].ports.tcp"),
            (
                "tcp = 8091",
                "tcp = 8091\nudp = 1",
                "cluster.nodes[1].ports.udp",
            ),
            (
                "ip = \"127.0.0.1\"\nreplica_id = 1",
                "ip = \"127.0.0.1\"\nreplica_id = 1\nzone = 1",
                "cluster.nodes[1].zone",
            ),
            ("name = \"c1\"", "name = \"\"", "cluster.name"),
            (
                "name = \"c1\"",
                "name = \"c1\"\nheartbeat_timeout = \"1s\"",
                "cluster.heartbeat_timeout",
            ),
            (
                "name = \"c1\"",
                "name = \"c1\"\ncommit_broadcast_interval = \"2s\"",
                "cluster.heartbeat_timeout",
            ),
            (
                "name = \"c1\"",
                "name = \"c1\"\ncommit_broadcast_interval = \"0ms\"",
                "cluster.commit_broadcast_interval",
            ),
            (
                "name = \"c1\"",
                "name = \"c1\"\nprepare_retransmit_interval = \"0s\"",
                "cluster.prepare_retransmit_interval",
            ),
            (
                "name = \"c1\"",
                "name = \"c1\"\nview_change_retransmit_interval = \"2s\"",
                "cluster.view_change_status_timeout",
            ),
        ];
        for (from, to, key) in cases {
            let text = base.replacen(from, to, 1);
            assert_ne!(text, base, "{from:?} not in the base file");
            assert_eq!(&refused_key(&text, none), key, "{from:?} -> {to:?}");
        }
        // One node's name at index 1 is replaced above; the text after replacen keeps node-0.
        let enabled_transport = |k: &str| (k == "IGGY_HTTP_ENABLED").then(|| "true".into());
        assert_eq!(
            refused_key(&base, enabled_transport),
            "cluster.nodes[0].ports.http"
        );
        let no_nodes = "[cluster]\nenabled = true\n";
        assert_eq!(refused_key(no_nodes, none), "cluster.nodes");
        let mut many = String::from("[cluster]\nenabled = true\n");
        for id in 0..=REPLICAS_MAX {
            many.push_str(&format!(
                "[[cluster.nodes]]\nname = \"n{id}\"\nip = \"127.0.0.1\"\nreplica_id = {id}\n\
                 [cluster.nodes.ports]\ntcp = {}\ntcp_replica = {}\n",
                10_000 + id,
                20_000 + id
            ));
        }
        assert_eq!(refused_key(&many, none), "cluster.nodes");
    }

    #[test]
    fn timing_rules_admit_their_bounds() {
        let with = |timing: &str| {
            three_nodes().replacen("name = \"c1\"", &format!("name = \"c1\"\n{timing}"), 1)
        };
        for timing in [
            "heartbeat_timeout = \"2s\"",
            "heartbeat_timeout = \"4s\"\ncommit_broadcast_interval = \"1s\"",
            "view_change_status_timeout = \"2s\"",
            "prepare_retransmit_interval = \"1ms\"",
        ] {
            assert!(load(Some(&with(timing)), none).is_ok(), "{timing}");
        }
        for (timing, key) in [
            (
                "heartbeat_timeout = \"1999ms\"",
                "cluster.heartbeat_timeout",
            ),
            (
                "heartbeat_timeout = \"4s\"\ncommit_broadcast_interval = \"1001ms\"",
                "cluster.heartbeat_timeout",
            ),
            (
                "view_change_status_timeout = \"1999ms\"",
                "cluster.view_change_status_timeout",
            ),
        ] {
            assert_eq!(refused_key(&with(timing), none), key, "{timing}");
        }
    }

    #[test]
    fn a_disabled_cluster_checks_only_the_values() {
        // The roster rules wait for enabled = true, so a half-written roster does not stop a
        // standalone node; a value that does not parse still does.
        let text = three_nodes().replace("enabled = true", "enabled = false");
        let dup = text.replacen("replica_id = 2", "replica_id = 1", 1);
        assert!(load(Some(&dup), none).is_ok());
        let bad = text.replacen("ip = \"127.0.0.1\"", "ip = \"host:8090\"", 1);
        assert_eq!(refused_key(&bad, none), "cluster.nodes[0].ip");
    }

    #[test]
    fn replica_id_flag_against_the_roster() {
        let c: Config = load(Some(&three_nodes()), none).unwrap();
        assert_eq!(c.cluster.replica_id(Some(2)), Ok(2));
        let missing = c.cluster.replica_id(None).unwrap_err().to_string();
        assert!(missing.contains("--replica-id is required"), "{missing}");
        let unknown = c.cluster.replica_id(Some(3)).unwrap_err().to_string();
        assert!(unknown.starts_with("--replica-id 3:"), "{unknown}");
        assert!(unknown.contains("cluster.nodes"), "{unknown}");
    }

    #[test]
    fn roster_variables_are_listed() {
        let listed: Vec<String> = roster_env_vars().into_iter().map(|(v, _, _)| v).collect();
        for field in [
            "NAME",
            "IP",
            "REPLICA_ID",
            "ADVERTISED_ADDRESS",
            "PORTS_TCP",
            "PORTS_QUIC",
            "PORTS_HTTP",
            "PORTS_WEBSOCKET",
            "PORTS_TCP_REPLICA",
        ] {
            assert!(
                listed.contains(&format!("IGGY_CLUSTER_NODES_<i>_{field}")),
                "{field}"
            );
        }
    }
}
