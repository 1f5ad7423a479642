//! Hand-rolled command line: no argument-parsing dependency for a dozen flags.

use std::path::PathBuf;

pub const USAGE: &str = "\
bench: throughput and latency of iggy-server through the official SDK, with the machine's
disk and loopback limits measured in the same run.

USAGE:
    bench [SCENARIO] [OPTIONS]
    bench --suite [--scale F] [OPTIONS]

SCENARIOS:
    pinned-producer       N producers, each sends to its own stream (partition 0)  [default]
    pinned-consumer       seeds every stream, then N consumers poll their own stream by offset
    balanced              producers send balanced over one topic's partitions while a
                          consumer group (--consumers members) polls it with auto-commit
    end-to-end            producing consumers: each actor sends a batch to its own stream and
                          polls it back before the next (latency = send + poll)
    idle                  creates --partitions partitions (topics of at most 600) and sends
                          nothing: each node's CPU over --idle-seconds, once --settle-seconds
                          passed (what the consensus groups' heartbeats and timers cost)

OPTIONS:
    --message-size N | MIN..MAX   payload bytes per message (default 1000)
    --messages-per-batch N        messages per send / poll count (default 1000)
    --batches N                   batches per actor (default 200)
    --producers N                 producing actors (default 2)
    --consumers N                 consuming actors (default 2)
    --partitions N                partitions per topic (default: 1 pinned, consumers balanced)
    --durability replicated|persisted   server and topic durability policy (default replicated)
    --nodelay                     set TCP_NODELAY on the client sockets (tcp only)
    --transport tcp|quic|ws|http  the SDK's transport (default tcp); a started server serves
                                  all four. http logs in after connecting, cannot join a
                                  consumer group (no balanced), and a started server's
                                  http.max_request_size is raised to fit the batch in JSON
    --server-address HOST:PORT    use a running server (root iggy/iggy) instead of starting one
                                  (with http, the HTTP API's address)
    --server-env KEY=VALUE        set an environment variable of the started server, after
                                  the bench's own (repeatable), e.g. IGGY_HTTP_METRICS_ENABLED=false
    --cluster N                   start a local cluster of N nodes (odd, >= 3; TCP only) from
                                  one roster instead of one server; clients dial node 0 and
                                  the SDK routes to each partition's primary; the server CPU
                                  figure is the nodes' sum
    --server-bin PATH             server binary to start (default target/release/iggy-server,
                                  built with cargo if missing; or $IGGY_SERVER_BIN)
    --data-dir PATH               where to measure disk bandwidth (default: the server's temp
                                  data dir, or the system temp dir with --server-address)
    --no-limits                   skip the disk and loopback measurements
    --drop-caches                 sync and drop the kernel's clean page cache right before the
                                  scenario runs (needs root), so runs start alike: on this VM a
                                  page written into memory that sat idle long costs about 3x
                                  (see bench/README.md)
    --limits-only                 measure only the disk and loopback limits (no server)
    --output FILE                 also write the report as JSON
    --suite                       run the reference rows of issue 4 and print a markdown table
    --scale F                     multiply the suite's batches per actor by F (default 1)
    --idle-seconds N              idle: the window each node's CPU is measured over (default 30)
    --settle-seconds N            idle: the wait between the topics' creation and the window
                                  (default 10)
    --quiet                       no progress lines
    -h, --help                    this text
";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    PinnedProducer,
    PinnedConsumer,
    Balanced,
    EndToEnd,
    Idle,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::PinnedProducer => "pinned-producer",
            Scenario::PinnedConsumer => "pinned-consumer",
            Scenario::Balanced => "balanced",
            Scenario::EndToEnd => "end-to-end",
            Scenario::Idle => "idle",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pinned-producer" | "pp" => Scenario::PinnedProducer,
            "pinned-consumer" | "pc" => Scenario::PinnedConsumer,
            "balanced" | "balanced-producer-and-consumer-group" | "bpcg" => Scenario::Balanced,
            "end-to-end" | "producing-consumer" | "e2e" => Scenario::EndToEnd,
            "idle" => Scenario::Idle,
            _ => return None,
        })
    }
}

/// The transport the SDK clients use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    Tcp,
    Quic,
    Ws,
    Http,
}

impl Transport {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "tcp" => Transport::Tcp,
            "quic" => Transport::Quic,
            "ws" | "websocket" => Transport::Ws,
            "http" => Transport::Http,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
            Transport::Ws => "ws",
            Transport::Http => "http",
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Params {
    pub scenario: Scenario,
    pub message_size_min: u32,
    pub message_size_max: u32,
    pub messages_per_batch: u32,
    pub batches: u64,
    pub producers: u32,
    pub consumers: u32,
    pub partitions: u32,
    pub durability: String,
    pub nodelay: bool,
    pub transport: Transport,
}

impl Params {
    pub fn persisted(&self) -> bool {
        self.durability == "persisted"
    }

    pub fn avg_message_size(&self) -> f64 {
        (self.message_size_min as f64 + self.message_size_max as f64) / 2.0
    }

    /// Actors that produce in this scenario (the seeding producers of pinned-consumer count).
    pub fn producing_actors(&self) -> u32 {
        match self.scenario {
            Scenario::PinnedConsumer => self.consumers,
            _ => self.producers,
        }
    }

    /// Streams the scenario uses (one per pinned actor, one for balanced).
    pub fn streams(&self) -> u32 {
        match self.scenario {
            Scenario::PinnedProducer | Scenario::EndToEnd => self.producers,
            Scenario::PinnedConsumer => self.consumers,
            Scenario::Balanced | Scenario::Idle => 1,
        }
    }

    pub fn effective_partitions(&self) -> u32 {
        if self.partitions > 0 {
            self.partitions
        } else if self.scenario == Scenario::Balanced {
            self.consumers.max(1)
        } else {
            1
        }
    }

    /// Payload bytes the scenario writes into the server.
    pub fn volume_bytes(&self) -> u64 {
        (self.producing_actors() as f64
            * self.batches as f64
            * self.messages_per_batch as f64
            * self.avg_message_size()) as u64
    }

    /// An HTTP request carrying the largest batch: each payload in padded base64 plus its JSON
    /// object (id, keys), and the partitioning and context around them. At least the server's
    /// default `http.max_request_size` (2 MB), which the reference shapes fit.
    pub fn http_max_request_size(&self) -> u64 {
        let per_message = (self.message_size_max as u64).div_ceil(3) * 4 + 128;
        (self.messages_per_batch as u64 * per_message + 4096).max(2_000_000)
    }

    pub fn batch_bytes(&self) -> u64 {
        (self.messages_per_batch as f64 * self.avg_message_size()) as u64
    }

    pub fn describe(&self) -> String {
        if self.scenario == Scenario::Idle {
            let partitions = self.effective_partitions();
            return format!("idle: {partitions} partitions, {}", self.durability);
        }
        let size = if self.message_size_min == self.message_size_max {
            format!("{} B", self.message_size_min)
        } else {
            format!("{}..{} B", self.message_size_min, self.message_size_max)
        };
        let actors = match self.scenario {
            Scenario::PinnedProducer => format!("{} producers", self.producers),
            Scenario::PinnedConsumer => format!("{} consumers", self.consumers),
            Scenario::Balanced => format!(
                "{} producers + {} group consumers, {} partitions",
                self.producers,
                self.consumers,
                self.effective_partitions()
            ),
            Scenario::EndToEnd => format!("{} producing consumers", self.producers),
            Scenario::Idle => unreachable!("described above"),
        };
        format!(
            "{}: {actors}, {} msgs x {size} per batch, {} batches per actor, {}{}{}",
            self.scenario.name(),
            self.messages_per_batch,
            self.batches,
            self.durability,
            if self.nodelay { ", nodelay" } else { "" },
            match self.transport {
                Transport::Tcp => String::new(),
                other => format!(", over {}", other.name()),
            }
        )
    }
}

#[derive(Clone, Debug)]
pub struct Args {
    pub params: Params,
    pub server_address: Option<String>,
    pub server_bin: Option<PathBuf>,
    /// Extra environment of a started server, applied over the bench's own settings.
    pub server_env: Vec<(String, String)>,
    pub data_dir: Option<PathBuf>,
    pub limits: bool,
    pub limits_only: bool,
    pub output: Option<PathBuf>,
    pub suite: bool,
    pub scale: f64,
    pub quiet: bool,
    /// Start a local cluster of this many nodes instead of one server (0: a single node).
    pub cluster: u8,
    /// Drop the page cache right before the scenario runs.
    pub drop_caches: bool,
    /// The idle scenario's window and the wait before it.
    pub idle_seconds: u64,
    pub settle_seconds: u64,
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: not a number: {v:?}"))
}

pub fn parse(argv: &[String]) -> Result<Args, String> {
    let mut p = Params {
        scenario: Scenario::PinnedProducer,
        message_size_min: 1000,
        message_size_max: 1000,
        messages_per_batch: 1000,
        batches: 200,
        producers: 2,
        consumers: 2,
        partitions: 0,
        durability: "replicated".into(),
        nodelay: false,
        transport: Transport::Tcp,
    };
    let mut a = Args {
        params: p.clone(),
        server_address: None,
        server_bin: None,
        server_env: Vec::new(),
        data_dir: None,
        limits: true,
        limits_only: false,
        output: None,
        suite: false,
        scale: 1.0,
        cluster: 0,
        quiet: false,
        drop_caches: false,
        idle_seconds: 30,
        settle_seconds: 10,
    };
    let mut i = 0;
    let mut scenario_seen = false;
    while i < argv.len() {
        let arg = argv[i].as_str();
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            i += 1;
            argv.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "-h" | "--help" => return Err(String::new()),
            "--message-size" | "--message-size-bytes" => {
                let v = value()?;
                let (lo, hi) = match v.split_once("..") {
                    Some((lo, hi)) => (num(flag, lo)?, num(flag, hi)?),
                    None => {
                        let n = num(flag, &v)?;
                        (n, n)
                    }
                };
                if lo == 0 || hi < lo {
                    return Err(format!("{flag}: want N>0 or MIN..MAX with MIN<=MAX: {v:?}"));
                }
                p.message_size_min = lo;
                p.message_size_max = hi;
            }
            "--messages-per-batch" => p.messages_per_batch = num(flag, &value()?)?,
            "--batches" | "--message-batches" => p.batches = num(flag, &value()?)?,
            "--producers" => p.producers = num(flag, &value()?)?,
            "--consumers" => p.consumers = num(flag, &value()?)?,
            "--partitions" => p.partitions = num(flag, &value()?)?,
            "--durability" => {
                let v = value()?;
                if v != "replicated" && v != "persisted" {
                    return Err(format!("--durability: replicated or persisted, not {v:?}"));
                }
                p.durability = v;
            }
            "--nodelay" => p.nodelay = true,
            "--transport" => {
                let v = value()?;
                p.transport = Transport::parse(&v)
                    .ok_or_else(|| format!("--transport: tcp, quic, ws or http, not {v:?}"))?;
            }
            "--server-address" => a.server_address = Some(value()?),
            "--server-bin" => a.server_bin = Some(value()?.into()),
            "--server-env" => {
                let v = value()?;
                match v.split_once('=') {
                    Some((k, val)) if !k.is_empty() => {
                        a.server_env.push((k.to_string(), val.to_string()))
                    }
                    _ => return Err(format!("--server-env: want KEY=VALUE, not {v:?}")),
                }
            }
            "--data-dir" => a.data_dir = Some(value()?.into()),
            "--cluster" => {
                a.cluster = num(flag, &value()?)?;
                if a.cluster == 1 || a.cluster.is_multiple_of(2) {
                    return Err(format!(
                        "--cluster: an odd number of nodes above 1, not {}",
                        a.cluster
                    ));
                }
            }
            "--no-limits" => a.limits = false,
            "--drop-caches" => a.drop_caches = true,
            "--limits-only" => a.limits_only = true,
            "--output" => a.output = Some(value()?.into()),
            "--suite" => a.suite = true,
            "--scale" => a.scale = num(flag, &value()?)?,
            "--quiet" => a.quiet = true,
            "--idle-seconds" => a.idle_seconds = num(flag, &value()?)?,
            "--settle-seconds" => a.settle_seconds = num(flag, &value()?)?,
            other if !other.starts_with('-') && !scenario_seen => {
                p.scenario =
                    Scenario::parse(other).ok_or_else(|| format!("unknown scenario {other:?}"))?;
                scenario_seen = true;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        i += 1;
    }
    if p.messages_per_batch == 0 || p.batches == 0 {
        return Err("--messages-per-batch and --batches must be > 0".into());
    }
    if p.producing_actors() == 0 || (p.scenario == Scenario::Balanced && p.consumers == 0) {
        return Err("the scenario needs at least one actor of each kind it uses".into());
    }
    // The SDK's HTTP client refuses join_consumer_group (FeatureUnavailable) on its side.
    if p.transport == Transport::Http && p.scenario == Scenario::Balanced && !a.suite {
        return Err("balanced needs a consumer group, which the SDK cannot join over http".into());
    }
    if p.scenario == Scenario::Idle && (a.server_address.is_some() || a.suite) {
        return Err(
            "idle measures the CPU of the servers it starts: no --server-address or --suite".into(),
        );
    }
    if a.scale <= 0.0 {
        return Err("--scale must be > 0".into());
    }
    a.params = p;
    Ok(a)
}
