//! `bench`: throughput and latency of iggy-server through the official SDK, with the machine's
//! disk and loopback limits measured in the same run. See bench/README.md.

mod args;
mod idle;
mod limits;
mod scenario;
mod server;
mod stats;

use args::{Args, Params, Scenario};
use limits::Limits;
use serde::Serialize;
use server::ServerProc;
use stats::{KindReport, fmt_int};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Serialize)]
struct Ratio {
    kind: String,
    vs_disk_buffered: f64,
    vs_disk_fsync_per_batch: f64,
    vs_tcp_stream: f64,
    vs_tcp_request_reply: f64,
}

#[derive(Debug, Clone, Serialize)]
struct RunReport {
    description: String,
    params: Params,
    server: String,
    /// `--server-env` settings of a started server (e.g. metrics off).
    server_env: Vec<String>,
    kinds: Vec<KindReport>,
    limits: Option<Limits>,
    ratios: Vec<Ratio>,
    /// Server user+system CPU seconds during the scenario (only when bench started it).
    server_cpu_seconds: Option<f64>,
    /// The bench's own CPU seconds during the scenario: the SDK clients run in it.
    client_cpu_seconds: Option<f64>,
    /// /proc/loadavg (1 min) before and after: other work on the machine skews every number.
    load_before: Option<f64>,
    load_after: Option<f64>,
    /// The kernel's page cache right before the scenario ran.
    memory_before: Option<Memory>,
    /// The idle scenario's figures.
    idle: Option<idle::IdleReport>,
    error: Option<String>,
}

/// What `/proc/meminfo` said, in MB, and whether the bench had just dropped the clean cache.
#[derive(Debug, Clone, Serialize)]
struct Memory {
    free_mb: u64,
    cached_mb: u64,
    dropped: bool,
}

impl Memory {
    /// Reads `/proc/meminfo`, after a `sync` and a drop of the clean page cache when asked
    /// (`None` when that fails, e.g. not root: the run is then not what was asked for).
    fn before_run(drop_caches: bool) -> Result<Option<Memory>, String> {
        if drop_caches {
            let synced = std::process::Command::new("sync")
                .status()
                .map_err(|e| format!("sync: {e}"))?;
            if !synced.success() {
                return Err(format!("sync: {synced}"));
            }
            std::fs::write("/proc/sys/vm/drop_caches", "1")
                .map_err(|e| format!("--drop-caches: /proc/sys/vm/drop_caches: {e}"))?;
        }
        let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
            return Ok(None);
        };
        let field = |name: &str| -> Option<u64> {
            let line = meminfo.lines().find(|l| l.starts_with(name))?;
            let kb: u64 = line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kb / 1024)
        };
        Ok(Some(Memory {
            free_mb: field("MemFree:").unwrap_or(0),
            cached_mb: field("Cached:").unwrap_or(0),
            dropped: drop_caches,
        }))
    }
}

fn load_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl RunReport {
    fn kind(&self, kind: &str) -> Option<&KindReport> {
        self.kinds.iter().find(|k| k.kind == kind)
    }
}

fn ratios(kinds: &[KindReport], l: &Limits) -> Vec<Ratio> {
    kinds
        .iter()
        .map(|k| Ratio {
            kind: k.kind.clone(),
            vs_disk_buffered: k.mb_per_s / l.disk_buffered.mb_per_s,
            vs_disk_fsync_per_batch: k.mb_per_s / l.disk_fsync_per_batch.mb_per_s,
            vs_tcp_stream: k.mb_per_s / l.tcp_stream.mb_per_s,
            vs_tcp_request_reply: k.mb_per_s / l.tcp_request_reply.mb_per_s,
        })
        .collect()
}

/// One scenario: its own server (unless an address was given), limits, the run, the report.
async fn run_one(a: &Args, p: &Params) -> RunReport {
    println!("== {}", p.describe());
    let mut report = RunReport {
        description: p.describe(),
        params: p.clone(),
        server: String::new(),
        server_env: Vec::new(),
        kinds: Vec::new(),
        limits: None,
        ratios: Vec::new(),
        server_cpu_seconds: None,
        client_cpu_seconds: None,
        load_before: load_1min(),
        load_after: None,
        memory_before: None,
        idle: None,
        error: None,
    };
    let mut procs: Vec<ServerProc> = Vec::new();
    if a.limits_only {
        let dir = a.data_dir.clone().unwrap_or_else(std::env::temp_dir);
        match limits::measure(
            &dir,
            p.volume_bytes(),
            p.batch_bytes(),
            p.producing_actors(),
            p.nodelay,
        )
        .await
        {
            Ok(l) => report.limits = Some(l),
            Err(e) => report.error = Some(e),
        }
        print_report(&report);
        return report;
    }
    let address = match &a.server_address {
        Some(addr) => addr.clone(),
        None => {
            let started = server::server_binary(a.server_bin.as_deref()).and_then(|bin| {
                let servers = if a.cluster > 1 {
                    ServerProc::start_cluster(&bin, a.cluster, &p.durability, &a.server_env)?
                } else {
                    vec![ServerProc::start(
                        &bin,
                        &p.durability,
                        p.http_max_request_size(),
                        &a.server_env,
                    )?]
                };
                Ok((bin, servers))
            });
            match started {
                Ok((bin, servers)) => {
                    let addr = servers[0].address_for(p.transport);
                    let shape = match servers.len() {
                        1 => String::new(),
                        n => format!(", node 0 of a {n}-node cluster"),
                    };
                    report.server = format!(
                        "{} on {addr} ({}{shape}) in {}",
                        bin.display(),
                        p.transport.name(),
                        servers[0].dir.path().display()
                    );
                    report.server_env = a
                        .server_env
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    procs = servers;
                    addr
                }
                Err(e) => {
                    report.error = Some(e);
                    print_report(&report);
                    return report;
                }
            }
        }
    };
    if procs.len() > 1
        && let Err(e) =
            scenario::wait_for_login(&address, p, std::time::Duration::from_secs(30)).await
    {
        report.error = Some(format!("the cluster did not accept a login: {e}"));
        print_report(&report);
        return report;
    }
    if report.server.is_empty() {
        report.server = address.clone();
    }
    if p.scenario == Scenario::Idle {
        let (settle, window) = (
            Duration::from_secs(a.settle_seconds),
            Duration::from_secs(a.idle_seconds),
        );
        match idle::measure(&address, p, &procs, settle, window).await {
            Ok(idle) => report.idle = Some(idle),
            Err(e) => report.error = Some(e),
        }
        report.load_after = load_1min();
        print_report(&report);
        return report;
    }
    if a.limits {
        let dir: PathBuf = a
            .data_dir
            .clone()
            .or_else(|| procs.first().map(ServerProc::data_dir))
            .unwrap_or_else(std::env::temp_dir);
        match limits::measure(
            &dir,
            p.volume_bytes(),
            p.batch_bytes(),
            p.producing_actors(),
            p.nodelay,
        )
        .await
        {
            Ok(l) => report.limits = Some(l),
            Err(e) => eprintln!("bench: limits not measured: {e}"),
        }
    }
    // A cluster's CPU is every node's.
    let cpu = |procs: &[ServerProc]| -> Option<f64> {
        procs
            .iter()
            .map(ServerProc::cpu_seconds)
            .sum::<Option<f64>>()
    };
    match Memory::before_run(a.drop_caches) {
        Ok(memory) => report.memory_before = memory,
        Err(e) => {
            report.error = Some(e);
            print_report(&report);
            return report;
        }
    }
    let cpu_before = cpu(&procs);
    let client_cpu_before = server::cpu_seconds("self");
    match scenario::run(&address, p, a.quiet).await {
        Ok(kinds) => report.kinds = kinds,
        Err(e) => {
            let mut msg = e;
            if let Some(s) = procs.first_mut() {
                if !s.alive() {
                    msg.push_str("\n(the server process is gone)");
                }
                msg.push_str(&format!("\n--- server log tail ---\n{}", s.log_tail(30)));
            }
            report.error = Some(msg);
        }
    }
    if let (Some(before), Some(after)) = (cpu_before, cpu(&procs)) {
        report.server_cpu_seconds = Some(after - before);
    }
    if let (Some(before), Some(after)) = (client_cpu_before, server::cpu_seconds("self")) {
        report.client_cpu_seconds = Some(after - before);
    }
    if let Some(l) = &report.limits {
        report.ratios = ratios(&report.kinds, l);
    }
    report.load_after = load_1min();
    print_report(&report);
    report
}

fn print_report(r: &RunReport) {
    println!("  server: {}", r.server);
    if !r.server_env.is_empty() {
        println!("  server env: {}", r.server_env.join(" "));
    }
    if let Some(e) = &r.error {
        println!("  ERROR: {e}");
    }
    for k in &r.kinds {
        k.print();
    }
    if let Some(idle) = &r.idle {
        idle.print();
    }
    let main_kind = r.kind("producer").or_else(|| r.kinds.first());
    let gb = main_kind.map_or(0.0, |k| k.payload_bytes as f64 / 1e9);
    if let Some(cpu) = r.server_cpu_seconds {
        println!(
            "  server CPU: {cpu:.2} s for the run{}",
            if gb > 0.0 {
                format!(" ({:.2} s per GB produced)", cpu / gb)
            } else {
                String::new()
            }
        );
    }
    // What the cores could carry if the run were bound by CPU alone: the server's and the
    // clients' CPU per GB against every core of the machine.
    if let (Some(server), Some(client), Some(kind)) =
        (r.server_cpu_seconds, r.client_cpu_seconds, main_kind)
        && gb > 0.0
        && server + client > 0.0
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let ceiling_mb_per_s = cores / ((server + client) / gb) * 1000.0;
        println!(
            "  CPU ceiling: {cores} cores / ({:.2} server + {:.2} client s per GB) = {ceiling_mb_per_s:.0} MB/s; this run {:.0} MB/s = {:.2} of it",
            server / gb,
            client / gb,
            kind.mb_per_s,
            kind.mb_per_s / ceiling_mb_per_s
        );
    }
    if let (Some(b), Some(a)) = (r.load_before, r.load_after) {
        println!(
            "  machine load (1 min avg) before {b:.2}, after {a:.2} on {} cores{}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            if b > 1.0 {
                "  (other work was running: numbers are skewed)"
            } else {
                ""
            }
        );
    }
    if let Some(m) = &r.memory_before {
        println!(
            "  page cache before the run: {} MB cached, {} MB free{}",
            m.cached_mb,
            m.free_mb,
            if m.dropped { " (just dropped)" } else { "" }
        );
    }
    if let Some(l) = &r.limits {
        l.print();
        for x in &r.ratios {
            println!(
                "  {:<18} ratio to limits: disk buffered {:.3}  disk fsync/batch {:.3}  tcp stream {:.3}  tcp batch+reply {:.3}",
                x.kind,
                x.vs_disk_buffered,
                x.vs_disk_fsync_per_batch,
                x.vs_tcp_stream,
                x.vs_tcp_request_reply
            );
        }
    }
    println!();
}

/// A reference row of issue 4 (upstream iggy-server on this machine kind).
#[derive(Debug, Clone, Serialize)]
struct Reference {
    row: &'static str,
    kind: &'static str,
    msgs_per_s: Option<f64>,
    mb_per_s: Option<f64>,
    p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
struct SuiteRow {
    reference: Reference,
    report: RunReport,
    /// measured msgs/s / reference msgs/s (the goal is >= 1.30).
    ratio_to_reference: Option<f64>,
}

fn suite_rows(scale: f64) -> Vec<(Reference, Params)> {
    let base = |scenario, actors: u32, mpb: u32, size: u32, batches: f64, nodelay: bool| Params {
        scenario,
        message_size_min: size,
        message_size_max: size,
        messages_per_batch: mpb,
        batches: ((batches * scale).round() as u64).max(1),
        producers: actors,
        consumers: actors,
        partitions: 0,
        durability: "replicated".into(),
        nodelay,
        transport: args::Transport::Tcp,
    };
    let r = |row, kind, m: f64, mb: f64, p99: f64| Reference {
        row,
        kind,
        msgs_per_s: Some(m),
        mb_per_s: Some(mb),
        p99_ms: Some(p99),
    };
    let mut persisted = base(Scenario::PinnedProducer, 2, 1000, 1000, 50.0, false);
    persisted.durability = "persisted".into();
    vec![
        (
            r(
                "2 producers, 1000 msgs x 1000 B per batch",
                "producer",
                1_636_704.0,
                1637.0,
                2.51,
            ),
            base(Scenario::PinnedProducer, 2, 1000, 1000, 250.0, false),
        ),
        (
            r(
                "2 consumers polling the same, 1000 per poll",
                "consumer",
                1_555_935.0,
                1556.0,
                2.33,
            ),
            base(Scenario::PinnedConsumer, 2, 1000, 1000, 250.0, false),
        ),
        (
            r(
                "2 producers, 1000 msgs x 100 B per batch",
                "producer",
                5_879_763.0,
                588.0,
                0.59,
            ),
            base(Scenario::PinnedProducer, 2, 1000, 100, 1000.0, false),
        ),
        (
            r(
                "2 producers, 10 msgs x 1000 B per batch, nodelay",
                "producer",
                208_298.0,
                208.0,
                0.38,
            ),
            base(Scenario::PinnedProducer, 2, 10, 1000, 5000.0, true),
        ),
        (
            r(
                "1 producer, 1 msg x 1000 B per request, nodelay",
                "producer",
                8_326.0,
                8.3,
                0.17,
            ),
            base(Scenario::PinnedProducer, 1, 1, 1000, 10000.0, true),
        ),
        (
            Reference {
                row: "persisted: 2 producers, 1000 msgs x 1000 B (goal: 60% of fsync'd disk)",
                kind: "producer",
                msgs_per_s: None,
                mb_per_s: None,
                p99_ms: None,
            },
            persisted,
        ),
    ]
}

fn print_suite(rows: &[SuiteRow]) {
    println!(
        "| reference row | ref msgs/s | ref p99 | measured msgs/s | MB/s | p99 | vs ref | vs disk buffered | vs disk fsync/batch | vs tcp stream | vs tcp batch+reply |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("—".to_string(), f);
    for row in rows {
        let k = row.report.kind(row.reference.kind);
        let ratio = row
            .report
            .ratios
            .iter()
            .find(|x| x.kind == row.reference.kind);
        let (m, mb, p99) = match k {
            Some(k) => (
                fmt_int(k.messages_per_s),
                format!("{:.1}", k.mb_per_s),
                format!("{:.2} ms", k.latency.p99_ms),
            ),
            None => ("error".into(), "—".into(), "—".into()),
        };
        let pct = |x: f64| format!("{:.1}%", x * 100.0);
        println!(
            "| {} | {} | {} | {m} | {mb} | {p99} | {} | {} | {} | {} | {} |",
            row.reference.row,
            opt(row.reference.msgs_per_s, &fmt_int),
            opt(row.reference.p99_ms, &|v| format!("{v:.2} ms")),
            opt(row.ratio_to_reference, &|v| format!("{v:.3}x")),
            opt(ratio.map(|r| r.vs_disk_buffered), &pct),
            opt(ratio.map(|r| r.vs_disk_fsync_per_batch), &pct),
            opt(ratio.map(|r| r.vs_tcp_stream), &pct),
            opt(ratio.map(|r| r.vs_tcp_request_reply), &pct),
        );
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let a = match args::parse(&argv) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            print!("{}", args::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("bench: {e}\n\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    let mut failed = false;
    let json = if a.suite {
        let mut rows = Vec::new();
        for (reference, mut p) in suite_rows(a.scale) {
            p.nodelay |= a.params.nodelay;
            p.transport = a.params.transport;
            let report = run_one(&a, &p).await;
            failed |= report.error.is_some();
            let ratio_to_reference = match (report.kind(reference.kind), reference.msgs_per_s) {
                (Some(k), Some(r)) => Some(k.messages_per_s / r),
                _ => None,
            };
            rows.push(SuiteRow {
                reference,
                report,
                ratio_to_reference,
            });
        }
        print_suite(&rows);
        serde_json::to_string_pretty(&rows)
    } else {
        let report = run_one(&a, &a.params).await;
        failed |= report.error.is_some();
        serde_json::to_string_pretty(&report)
    };
    if let Some(path) = &a.output {
        match json.map_err(|e| e.to_string()).and_then(|j| {
            std::fs::write(path, j + "\n").map_err(|e| format!("{}: {e}", path.display()))
        }) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => {
                eprintln!("bench: --output: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
