//! iggy-server: a persistent message-streaming log speaking the Iggy binary protocol.
//! Start-up: flags, layered configuration, the storage-format gate, then the node on a compio
//! runtime with its transports. See ARCHITECTURE.md for the request path.

mod config;
mod consensus;
mod runtime;
mod service;
mod transport;
mod verify;

use iggy_generated::frames::MetadataHistory;
use iggy_storage::data_dir::DirLock;
use runtime::systemd;
use runtime::{maintenance, node};

use std::process::ExitCode;

/// The command line. Configuration proper comes from `config.toml` and `IGGY_*` variables
/// (`--list-config-env-vars` lists them); flags only choose what this start does.
#[derive(Debug, Default, PartialEq, clap::Parser)]
#[command(
    name = "iggy-server",
    version = version_text(),
    about = "A persistent message-streaming log speaking the Apache Iggy binary protocol.",
    after_help = "Configuration: embedded defaults, then config.toml in the working directory \
                  (or the file IGGY_CONFIG_PATH names), then IGGY_<SECTION>_<KEY> variables. \
                  RUST_LOG overrides system.logging.level."
)]
struct Args {
    /// This node's replica id in its cluster: required with cluster.enabled, else absent or 0.
    #[arg(long, value_name = "N")]
    replica_id: Option<u8>,
    /// Delete the configured data directory (system.path) before starting; nothing is
    /// deleted without this flag.
    #[arg(short = 'f', long)]
    fresh: bool,
    /// A cluster node whose data directory was restored from a copy or lost (empty): it votes
    /// in no view change until each of its groups caught up from its peers (kept in the data
    /// directory until then).
    #[arg(long, conflicts_with = "fresh")]
    restored: bool,
    /// A standalone node changes nothing in a journal damaged where intact ops follow, or in a
    /// partition log whose last segment holds a corrupt whole record (its metadata's: the start
    /// is refused; a partition's: it is not served); with this flag it cuts each at the damage,
    /// what follows lost (accepted, for instance after a power loss under the replicated
    /// policy). Standalone only: a cluster node's peers repair such damage.
    #[arg(long, conflicts_with = "fresh")]
    cut_damaged_journals: bool,
    /// On first start, create the root user as iggy/iggy instead of a generated password
    /// (IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD set them otherwise).
    #[arg(long = "with-default-root-credentials")]
    default_root_credentials: bool,
    /// Print every configuration key as its IGGY_ variable, TOML path, type and default, then
    /// exit.
    #[arg(long)]
    list_config_env_vars: bool,
    #[command(subcommand)]
    command: Option<Subcommand>,
}

/// What the binary does instead of serving.
#[derive(Debug, PartialEq, clap::Subcommand)]
enum Subcommand {
    /// Check a stopped node's data directory (or a backup copy) without changing a byte: one
    /// line per problem, then a summary; exit 0 when it verifies (warnings allowed), 1 when
    /// there is an error.
    Verify {
        /// The data directory to check (default: the configured system.path).
        #[arg(long, value_name = "DIR")]
        path: Option<std::path::PathBuf>,
    },
}

fn parse_args<T: Into<std::ffi::OsString> + Clone>(
    args: impl IntoIterator<Item = T>,
) -> Result<Args, clap::Error> {
    <Args as clap::Parser>::try_parse_from(args)
}

/// A flag error as printed: clap's message, with the usage line where clap leaves it out (a
/// missing value).
fn flag_error(error: &clap::Error) -> String {
    let mut shown = error.render().to_string();
    if !shown.contains("Usage:") {
        let usage = <Args as clap::CommandFactory>::command().render_usage();
        shown = format!("{}\n\n{usage}\n", shown.trim_end());
    }
    shown
}

/// `--version`: the release, the protocol versions a client may log in with, and the storage
/// format this build reads and writes.
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        use iggy_generated::protocol;
        let (min, max) = protocol::admission_window();
        let codecs: Vec<String> = protocol::CODECS.iter().map(|v| v.to_string()).collect();
        format!(
            "{}\nprotocol {min} to {max}, patch versions included (codecs: {}; native {})\n\
             storage format {}",
            env!("CARGO_PKG_VERSION"),
            codecs.join(", "),
            protocol::CURRENT,
            iggy_storage::layout::marker::VALUE,
        )
    })
}

/// The layered configuration: embedded defaults, then `config.toml` (or the file
/// `IGGY_CONFIG_PATH` names), then `IGGY_*` variables.
/// `config.toml` may be absent (the defaults apply); a file `IGGY_CONFIG_PATH` names must
/// exist: a node started on the defaults instead would format a standalone history.
fn configuration(offline: bool) -> Result<(config::Config, String), String> {
    let variables = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    if let Some(unknown) = config::unknown_env_vars(variables).first() {
        return Err(format!(
            "config: {unknown} names no configuration key (`iggy-server \
             --list-config-env-vars` lists every variable)"
        ));
    }
    let named = std::env::var("IGGY_CONFIG_PATH").ok();
    let path = named.clone().unwrap_or_else(|| "config.toml".into());
    let file = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && named.is_none() => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "IGGY_CONFIG_PATH names {path}, which does not exist (unset it to run on \
                 config.toml in the working directory, or on the embedded defaults without one)"
            ));
        }
        Err(e) => return Err(format!("cannot read {path}: {e}")),
    };
    let env = |k: &str| std::env::var(k).ok();
    let loaded = match offline {
        true => config::load_offline(file.as_deref(), env),
        false => config::load(file.as_deref(), env),
    }
    .map_err(|e| e.to_string())?;
    // Where it came from, for the start's first line.
    let source = match &file {
        Some(_) => std::fs::canonicalize(&path).map_or(path, |full| full.display().to_string()),
        None => "the embedded defaults (no config.toml here)".into(),
    };
    Ok((loaded, source))
}

/// Every configuration key as its `IGGY_` variable, TOML path, type and default, one a line.
fn list_config_env_vars(out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "# variable\tTOML path\ttype\tdefault")?;
    for (path, default) in config::leaves() {
        let kind = match &default {
            toml::Value::String(_) => "string",
            toml::Value::Integer(_) => "integer",
            toml::Value::Boolean(_) => "boolean",
            toml::Value::Float(_) => "float",
            _ => "value",
        };
        writeln!(
            out,
            "{}\t{path}\t{kind}\t{default}",
            config::env_name(&path)
        )?;
    }
    // The roster has no defaults: one row per field, <i> being the node's index from 0.
    for (variable, path, kind) in config::roster_env_vars() {
        writeln!(out, "{variable}\t{path}\t{kind}\t(none)")?;
    }
    out.flush()
}

/// Root credentials: defaults, else IGGY_ROOT_USERNAME/IGGY_ROOT_PASSWORD, else generated.
fn root_credentials(default: bool, env: impl Fn(&str) -> Option<String>) -> (String, String, bool) {
    if default {
        return ("iggy".into(), "iggy".into(), false);
    }
    let user = env("IGGY_ROOT_USERNAME").unwrap_or_else(|| "iggy".into());
    match env("IGGY_ROOT_PASSWORD") {
        Some(p) => (user, p, false),
        None => {
            use rand::Rng;
            let pw: String = rand::rng()
                .sample_iter(rand::distr::Alphanumeric)
                .take(24)
                .map(char::from)
                .collect();
            (user, pw, true)
        }
    }
}

/// The root user's credentials as creating any user takes them (the environment's
/// `IGGY_ROOT_USERNAME` and `IGGY_ROOT_PASSWORD` are the operator's to fix).
fn check_root_credentials(user: &str, password: &str) -> Result<(), String> {
    let shown = service::user_commands::check_username_shown(user);
    if iggy_metadata::model::check_username(user).is_err() || shown.is_err() {
        return Err(format!(
            "IGGY_ROOT_USERNAME {user:?} is not a valid user name (3 to 50 bytes, no control \
             character, no white space at an edge, no invisible formatting character)"
        ));
    }
    if service::user_commands::check_password(password).is_err() {
        return Err(format!(
            "IGGY_ROOT_PASSWORD is not a valid password ({} bytes: 3 to 100, as for any user)",
            password.len()
        ));
    }
    Ok(())
}

/// The log goes to stderr: `system.logging.format` `text` (coloured only when stderr is a
/// terminal) or `json` (one object per line).
fn init_logging(logging: &config::Logging, rust_log: Option<&str>) {
    use std::io::IsTerminal;
    // A line that cannot be written (stderr on a full disk) is lost; reporting it with
    // `eprintln!`, as the writer otherwise does, would panic the task that logged.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(log_filter(&logging.level, rust_log))
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    if logging.format == "json" {
        fmt.json().with_ansi(false).init();
    } else {
        fmt.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

/// The generated root password goes to stdout once, never into the log: as a line of text, or
/// with a JSON log one JSON object, so a collector that parses the node's output as JSON (the
/// journal holds stdout and stderr alike) reads it too.
fn print_generated_password(logging: &config::Logging, user: &str, password: &str) {
    if logging.format == "json" {
        let line = serde_json::json!({ "root_user": user, "generated_password": password });
        println!("{line}");
    } else {
        println!("root user {user:?} generated password: {password}");
    }
}

/// The process exit code after a panic (sysexits' `EX_SOFTWARE`).
const PANIC_EXIT_CODE: i32 = 70;

/// Any panic stops the process, after the standard report (and its backtrace) and a log line:
/// the runtime would otherwise end only the panicking task and leave a node that answers pings
/// without it (a group that no longer journals, clients waiting out their timeouts), which no
/// supervisor restarts. Stopped, the node is restarted and recovers what it made durable.
fn stop_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!("a task panicked ({info}); stopping");
        std::process::exit(PANIC_EXIT_CODE);
    }));
}

/// Debug builds only: `IGGY_DEBUG_PANIC_AFTER_MS` makes a detached task panic that long after
/// the node serves, for the test that a panic stops the process.
#[cfg(debug_assertions)]
fn panic_on_purpose() {
    let Some(after) = std::env::var("IGGY_DEBUG_PANIC_AFTER_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    else {
        return;
    };
    compio::runtime::spawn(async move {
        compio::time::sleep(std::time::Duration::from_millis(after)).await;
        panic!("IGGY_DEBUG_PANIC_AFTER_MS: a panic on purpose");
    })
    .detach();
}

/// `RUST_LOG`, when set and not empty, replaces `system.logging.level` (full directives, such
/// as `info,iggy_server::tcp=debug`); unparsable directives fall back to the level.
fn log_filter(level: &str, rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::LevelFilter;
    if let Some(directives) = rust_log.filter(|d| !d.trim().is_empty()) {
        // What no directive names logs at the configured level (a RUST_LOG of targets alone,
        // or a word mistaken for a level, `RUST_LOG=blah`, silenced everything else).
        let default = level.parse::<LevelFilter>().unwrap_or(LevelFilter::INFO);
        for word in directives.split(',').map(str::trim) {
            if !word.is_empty() && !word.contains('=') && word.parse::<LevelFilter>().is_err() {
                eprintln!(
                    "iggy-server: RUST_LOG names `{word}`, which is not a level (trace, debug, \
                     info, warn, error, off): it is read as a target logged at every level; \
                     the rest logs at {default}"
                );
            }
        }
        let names_a_level = directives
            .split(',')
            .any(|word| !word.contains('=') && word.trim().parse::<LevelFilter>().is_ok());
        let with_default = match names_a_level {
            true => directives.to_string(),
            false => format!("{default},{directives}"),
        };
        match EnvFilter::try_new(&with_default) {
            Ok(filter) => return filter,
            Err(error) => eprintln!(
                "iggy-server: RUST_LOG={directives:?} ignored ({error}); \
                 using system.logging.level {level:?}"
            ),
        }
    }
    EnvFilter::new(level)
}

/// Keeps freed request and record buffers in the process. By default glibc serves each
/// megabyte-sized request body with a fresh mmap (or trims its heap after the free), so every
/// large request faults its pages in and the kernel zeroes them; reused heap pages cost neither.
/// Bodies above 4 MiB still get their own mapping, and at most 32 MiB of free heap top is kept
/// per arena, so a burst of large frames does not leave the process holding its peak.
fn keep_freed_buffers() {
    // SAFETY: mallopt only tunes the allocator; it is called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
    }
}

/// A file-size limit (`ulimit -f`, systemd's `LimitFSIZE=`) fails the write that would pass
/// it with EFBIG, which stops the node as any storage failure does (logged, naming the file,
/// exit 74), instead of the default SIGXFSZ killing it without a word.
fn file_size_limit_fails_writes() {
    // SAFETY: signal(2) with SIG_IGN installs no handler; called before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn main() -> ExitCode {
    keep_freed_buffers();
    file_size_limit_fails_writes();
    let args = match parse_args(std::env::args_os()) {
        Ok(args) => args,
        // --help and --version: printed to stdout, exit 0.
        Err(shown) if !shown.use_stderr() => {
            let _ = shown.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprint!("{}", flag_error(&error));
            return ExitCode::from(2);
        }
    };
    if args.list_config_env_vars {
        return match list_config_env_vars(&mut std::io::stdout().lock()) {
            // A reader that stopped early (`| head`) wanted no more.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                eprintln!("iggy-server: cannot print the configuration keys: {e}");
                ExitCode::FAILURE
            }
            _ => ExitCode::SUCCESS,
        };
    }
    // `verify` judges journals by the configured cluster name, so it needs the configuration
    // read as a start does (a name guessed from a file it could not read would report every
    // journal as another cluster's).
    let (cfg, config_source) =
        match configuration(matches!(args.command, Some(Subcommand::Verify { .. }))) {
            Ok(loaded) => loaded,
            Err(e) => {
                eprintln!("iggy-server: {e}");
                return ExitCode::FAILURE;
            }
        };
    consensus::cluster::name_node_cluster(&cfg.cluster.name);
    if let Some(Subcommand::Verify { path }) = &args.command {
        let path = path
            .as_deref()
            .unwrap_or(std::path::Path::new(&cfg.system.path));
        return verify::main(path);
    }
    // Refused before the data directory is touched (not even by --fresh): a node started as
    // another replica must not format or serve a standalone history.
    let replica_id = match cfg.cluster.replica_id(args.replica_id) {
        Ok(id) => id,
        Err(refusal) => {
            eprintln!("iggy-server: {refusal}");
            return ExitCode::FAILURE;
        }
    };
    // A standalone node's directory started as a cluster node, or the reverse, is refused for
    // that first: its journal also names another cluster when the names differ (a standalone
    // node runs under the default name), which would hide the reason and its fix.
    if let Err(refusal) = consensus::replica_count::judge_standalone_change(
        std::path::Path::new(&cfg.system.path),
        roster_size(&cfg),
    ) {
        eprintln!("iggy-server: replica {replica_id}: {refusal}");
        return ExitCode::FAILURE;
    }
    // Another node's directory (a mistyped system.path, a backup restored on the wrong
    // machine) is refused before anything opens it, --fresh included: a configuration error,
    // not the storage failure (74) the group's open would report.
    if let Err(refusal) = consensus::view_file::ViewFile::refuse_foreign(
        &std::path::Path::new(&cfg.system.path).join("metadata"),
        consensus::cluster::node_cluster(),
        replica_id,
    ) {
        eprintln!("iggy-server: {refusal}; nothing was started");
        return ExitCode::FAILURE;
    }
    // So is another cluster's (or a standalone node's) metadata journal, before a cluster
    // node writes its run and replica count beside it. A journal that cannot be read at all
    // (system.path a file, no permission) is left to the data directory's open, which names it.
    if let Err(refusal) = consensus::wal::FileJournal::refuse_foreign(
        &std::path::Path::new(&cfg.system.path)
            .join("metadata")
            .join(consensus::plane::METADATA_JOURNAL),
        consensus::cluster::node_cluster(),
    ) && refusal.kind() == std::io::ErrorKind::InvalidData
    {
        eprintln!("iggy-server: {refusal}; nothing was started");
        return ExitCode::FAILURE;
    }
    // The root user is one replicated op, created by whichever node first leads: a password
    // generated per node would be printed by one node only, or differ between them.
    if cfg.cluster.enabled
        && !args.default_root_credentials
        && std::env::var_os("IGGY_ROOT_PASSWORD").is_none()
    {
        eprintln!(
            "iggy-server: cluster.enabled = true needs the root credentials given, the same on \
             every node: set IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD, or pass \
             --with-default-root-credentials (iggy/iggy). Nothing was started."
        );
        return ExitCode::FAILURE;
    }
    // The replica plane's certificates are read again when it starts; reading them here
    // refuses a missing or malformed file before the data directory is touched.
    if cfg.cluster.enabled
        && let Err(refusal) = consensus::replica_tls::ReplicaTls::from_config(&cfg.cluster.tls)
    {
        eprintln!("iggy-server: {refusal}");
        return ExitCode::FAILURE;
    }
    let mut cfg = cfg;
    let mut unserved = Vec::new();
    if let Some(node) = cfg
        .cluster
        .enabled
        .then(|| cfg.cluster.node(replica_id))
        .flatten()
    {
        // Validation made sure an enabled transport has its roster port.
        let (ports, host) = (node.ports.clone(), node.host.clone());
        let mut bind = |key: &'static str, enabled: bool, address: &mut String, port| {
            if let Some(port) = port {
                *address = config::with_port(address, port);
                if enabled && !config::bind_serves(address, &host) {
                    unserved.push((key, address.clone(), host.clone()));
                }
            }
        };
        bind(
            "tcp.address",
            cfg.tcp.enabled,
            &mut cfg.tcp.address,
            ports.tcp,
        );
        bind(
            "quic.address",
            cfg.quic.enabled,
            &mut cfg.quic.address,
            ports.quic,
        );
        bind(
            "http.address",
            cfg.http.enabled,
            &mut cfg.http.address,
            ports.http,
        );
        let websocket = cfg.websocket.enabled;
        bind(
            "websocket.address",
            websocket,
            &mut cfg.websocket.address,
            ports.websocket,
        );
    }
    init_logging(
        &cfg.system.logging,
        std::env::var("RUST_LOG").ok().as_deref(),
    );
    stop_on_panic();
    // What an operator reads first: which build, which configuration, where the data goes.
    let data_dir =
        std::path::absolute(&cfg.system.path).unwrap_or_else(|_| cfg.system.path.clone().into());
    tracing::info!(
        "iggy-server {} (protocol {}, storage format {}); configuration: {config_source}, \
         then IGGY_ variables; data directory {}",
        env!("CARGO_PKG_VERSION"),
        iggy_generated::protocol::CURRENT,
        iggy_storage::layout::marker::VALUE,
        data_dir.display()
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cfg.runtime.shards > cores {
        tracing::warn!(
            "runtime.shards is {} on {cores} cores: shards beyond one a core share them and add \
             threads and memory, not throughput (0 starts one a core)",
            cfg.runtime.shards
        );
    }
    let variables = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    let unread = config::unread_env_vars(variables);
    if !unread.is_empty() {
        tracing::warn!(
            "{} {} no configuration section and {} not read (`iggy-server \
             --list-config-env-vars` lists every variable; sections and keys are upper case)",
            unread.join(", "),
            if unread.len() == 1 { "names" } else { "name" },
            if unread.len() == 1 { "is" } else { "are" },
        );
    }
    // Before the data directory is touched: a start on a hung disk stops too.
    iggy_storage::stall::start(cfg.system.max_disk_stall(), "system.max_disk_stall");
    if cfg.cluster.enabled && !cfg.node.advertised_address.trim().is_empty() {
        tracing::warn!(
            "node.advertised_address ({}) is not used by a cluster node: clients are told each \
             node's roster entry, so set cluster.nodes[i].advertised_address (identical on every \
             node) to publish another address than its ip",
            cfg.node.advertised_address.trim()
        );
    }
    // A topic records the creating primary's segment size only where a client could ask for
    // it; otherwise each replica cuts by its own setting, which must then be the same on all.
    let segment_size = cfg.system.segment_size;
    if cfg.cluster.enabled && !iggy_metadata::options::segment_size_recordable(segment_size) {
        tracing::warn!(
            "system.segment_size is {segment_size} bytes, which a topic cannot record as its \
             segment_size (1 MiB to 1 GiB, a multiple of 512): topics created with the \
             server's size are cut by each replica's own system.segment_size, so it must be \
             the same on every node (a size a topic records, e.g. {}, may differ during a \
             rolling change)",
            (segment_size / 512 * 512).clamp(1 << 20, 1 << 30)
        );
    }
    match runtime::host::raise_open_files_limit() {
        Some(limit) => tracing::info!(
            "open files limit {limit}: room for {} partitions (partitions may take half, {} \
             descriptors each)",
            limit / 2 / runtime::host::DESCRIPTORS_PER_PARTITION,
            runtime::host::DESCRIPTORS_PER_PARTITION
        ),
        None => tracing::info!("open files limit: unlimited"),
    }
    for (key, address, ip) in unserved {
        tracing::warn!(
            "{key} binds {address}, which does not serve this node's roster ip {ip}: set {key} \
             to {ip} (any port; the roster's is used) or a wildcard"
        );
    }
    // Refused before anything is written: a root user the metadata refuses to create left a
    // node serving with no user anyone could sign in as. Only where the root user is still to
    // be created (a directory with no metadata yet, or one --fresh erases): a node whose
    // history holds it never uses them (an earlier build took any).
    let (user, pw, generated) =
        root_credentials(args.default_root_credentials, |k| std::env::var(k).ok());
    let creates_root = args.fresh
        || !std::path::Path::new(&cfg.system.path)
            .join("metadata")
            .exists();
    if creates_root && let Err(refusal) = check_root_credentials(&user, &pw) {
        eprintln!("iggy-server: {refusal}; nothing was started");
        return ExitCode::FAILURE;
    }
    // One process per data directory, before anything (--fresh included) changes it.
    let dir_lock = match hold_data_dir(&cfg.system.path, None) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    if let Err(refusal) = writable_data_dir(std::path::Path::new(&cfg.system.path)) {
        eprintln!("iggy-server: {refusal}; nothing was started");
        return ExitCode::FAILURE;
    }
    if args.fresh
        && let Err(refusal) = erasable(std::path::Path::new(&cfg.system.path))
    {
        eprintln!("iggy-server: --fresh: {refusal}");
        return ExitCode::FAILURE;
    }
    // In a cluster, --fresh erases only once no peer holds the cluster's history (asked in
    // `run`, as a node without one asks): a replica erased while its peers keep theirs is
    // refused, so it could never rejoin. It starts as a node without a history would.
    if args.restored && !cfg.cluster.enabled {
        eprintln!(
            "iggy-server: --restored is for a node of a cluster (cluster.enabled): a standalone \
             node restored from a copy starts from it as it is"
        );
        return ExitCode::FAILURE;
    }
    if args.cut_damaged_journals && cfg.cluster.enabled {
        eprintln!(
            "iggy-server: --cut-damaged-journals is for a standalone node: a cluster node cuts a \
             journal damaged in the middle without it, and its peers bring the ops after the \
             damage back"
        );
        return ExitCode::FAILURE;
    }
    let fresh = if args.fresh && cfg.cluster.enabled {
        Fresh::AfterGate
    } else {
        if args.fresh
            && let Err(code) = remove_data_dir(&cfg.system.path)
        {
            return code;
        }
        Fresh::No
    };
    // A cluster node without a metadata history must hear its peers before anything is
    // written (not even the storage-format marker): its data directory opens after the gate.
    let history = cfg.cluster.enabled.then(|| match fresh {
        Fresh::AfterGate => MetadataHistory::Absent,
        Fresh::No => consensus::plane::metadata_on_disk(std::path::Path::new(&cfg.system.path)),
    });
    let data = if history == Some(MetadataHistory::Absent) {
        None
    } else {
        match open_data_dir(&cfg.system.path) {
            Ok(data) => Some(data),
            Err(code) => return code,
        }
    };
    if let Some(data) = data.as_ref().filter(|_| !cfg.cluster.enabled)
        && let Err(refusal) = partitions_have_a_history(data)
    {
        eprintln!("iggy-server: {refusal}");
        return ExitCode::FAILURE;
    }
    let runtime = match compio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("iggy-server: cannot start the io_uring runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let start = Start {
        fresh,
        restored: args.restored,
        cut_damaged_journals: args.cut_damaged_journals,
    };
    let root = (user, pw, generated);
    runtime.block_on(run(cfg, (data, dir_lock), replica_id, root, start))
}

/// The node count of this node's roster: a standalone node is a roster of one (its
/// configuration's nodes, if any, are not its).
fn roster_size(cfg: &config::Config) -> u8 {
    match cfg.cluster.enabled {
        true => u8::try_from(cfg.cluster.nodes.len()).expect("the roster is checked at load"),
        false => 1,
    }
}

/// Compares the replica count the metadata history in `dir` was formed with against the
/// roster's, or records the roster's when the directory has none yet (see
/// `consensus::replica_count`).
fn record_replica_count(
    dir: &std::path::Path,
    cluster: u128,
    cfg: &config::Config,
    replica_id: u8,
) -> Result<(), ExitCode> {
    use consensus::replica_count::{Recorded, check_or_record};
    let roster = roster_size(cfg);
    match check_or_record(dir, cluster, roster) {
        Ok(Recorded::Agrees) => Ok(()),
        Ok(Recorded::Written) => {
            let formed_by = match cfg.cluster.enabled {
                true => format!("a cluster of {roster} replicas"),
                false => "a standalone node (one replica)".to_string(),
            };
            tracing::info!(
                "replica {replica_id}: recorded that this node's metadata history is of \
                 {formed_by} ({})",
                dir.join(iggy_generated::storage::CLUSTER_REPLICAS_FILE)
                    .display()
            );
            Ok(())
        }
        Err(refusal) => {
            tracing::error!("replica {replica_id}: {refusal}");
            eprintln!("iggy-server: replica {replica_id}: {refusal}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Returns to the system the heap memory the start-up's replay freed: glibc keeps freed chunks
/// amid live ones in its heap, so the journal ops a partition replays at start (their batches
/// read back and applied) stayed resident for the life of the process, about 30 bytes per
/// message replayed (a partition of 300 batches of 1000 messages: 1.5 MB before a restart,
/// 10.4 MB after it, 0.9 MB once trimmed). Once, so the hot path pays nothing.
fn give_back_start_up_memory() {
    runtime::host::give_back_free_memory();
}

/// What the flags ask of this start.
#[derive(Clone, Copy)]
struct Start {
    fresh: Fresh,
    /// `--restored`: write the restored-node marker (see [`mark_restored`]).
    restored: bool,
    /// `--cut-damaged-journals` (see [`node::Node::start`]).
    cut_damaged_journals: bool,
}

/// `--restored` writes the marker `RESTORED_MARKER_FILE` into the data directory (durably);
/// while it is there, every consensus group of the node opens restored. Returns whether the
/// marker is there.
fn mark_restored(path: &str, write: bool) -> std::io::Result<bool> {
    let root = std::path::Path::new(path);
    let marker = iggy_storage::data_dir::restored_marker(root);
    if write && !marker.exists() {
        iggy_storage::data_dir::write_restored_marker(root)?;
    }
    Ok(marker.exists())
}

/// When `--fresh` removes the data directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// Not given, or done already (a standalone node).
    No,
    /// A cluster node: once the peers' declarations allow a new history.
    AfterGate,
}

/// Whether `--fresh` may remove `path`: absent, an empty directory, or one holding a
/// storage-format marker (ours, of this format or an older one). Anything else is not a data
/// directory (a mistyped path, a parent directory) and is refused with nothing removed.
fn erasable(path: &std::path::Path) -> Result<(), String> {
    use iggy_storage::layout::marker;
    if !path.exists() || path.join(marker::FILE_NAME).is_file() {
        return Ok(());
    }
    let empty = std::fs::read_dir(path)
        .map_err(|e| format!("cannot read {}: {e}; nothing was removed", path.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(());
    }
    Err(format!(
        "{} is not an iggy-server data directory (not empty, no {} marker): nothing was \
         removed; point system.path at the data directory, or remove this one yourself",
        path.display(),
        marker::FILE_NAME
    ))
}

/// `--fresh`: empties the data directory, if there is one, keeping the directory itself: a
/// symlink to a volume keeps naming it (removing the path removed the symlink, left the data
/// on the volume, and the new history was made on the working directory's filesystem), a
/// mount point stays one, and the directory keeps its owner and mode.
fn remove_data_dir(path: &str) -> Result<(), ExitCode> {
    let failed = |what: &std::path::Path, error: std::io::Error| {
        eprintln!(
            "iggy-server: --fresh: cannot remove {}: {error}",
            what.display()
        );
        ExitCode::FAILURE
    };
    let root = std::path::Path::new(path);
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(failed(root, error)),
    };
    for entry in entries {
        let entry = entry.map_err(|error| failed(root, error))?;
        let path = entry.path();
        // Not followed: a symlink inside is removed, not what it names.
        let removed = match entry.file_type() {
            Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(error) => Err(error),
        };
        removed.map_err(|error| failed(&path, error))?;
    }
    Ok(())
}

/// The hold on the data directory at `path`: `held` when it is on the directory there now,
/// else taken afresh (the directory was made after the start's first look, or `--fresh`
/// replaced it).
fn hold_data_dir(path: &str, held: Option<DirLock>) -> Result<Option<DirLock>, ExitCode> {
    use iggy_storage::data_dir::DirHold;
    let path = std::path::Path::new(path);
    if let Some(lock) = held.filter(|lock| lock.holds(path)) {
        return Ok(Some(lock));
    }
    match iggy_storage::data_dir::lock_data_dir(path) {
        Ok(DirHold::Held(lock)) => Ok(Some(lock)),
        Ok(DirHold::NoDirectory) => Ok(None),
        Ok(DirHold::Unlockable(error)) => {
            tracing::warn!(
                "cannot lock the data directory {} ({error}): a second process started on it \
                 would not be refused",
                path.display()
            );
            Ok(None)
        }
        Err(refusal) => {
            eprintln!("iggy-server: {refusal}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// A data directory this process may not write (another user's, a read-only mount), or may
/// not create, is refused at start (exit 1, the operator's to fix): its first write would
/// fail as a storage failure (74), which tells a supervisor to start it again, in vain. So is
/// one holding files or directories it may not read and write (a `chown` of the top directory
/// only, or a unit run as another user), before anything in it changes.
fn writable_data_dir(path: &std::path::Path) -> Result<(), String> {
    if let Ok(link) = std::fs::symlink_metadata(path)
        && link.file_type().is_symlink()
        && !path.exists()
    {
        let target = std::fs::read_link(path).unwrap_or_default();
        return Err(format!(
            "the data directory {} is a symlink to {}, which does not exist (a volume not \
             mounted?)",
            path.display(),
            target.display()
        ));
    }
    if path.exists() && !path.is_dir() {
        return Err(format!(
            "the data directory {} is not a directory",
            path.display()
        ));
    }
    // The directory, or the nearest ancestor that exists (where it would be made).
    let existing = path
        .ancestors()
        .find(|dir| !dir.as_os_str().is_empty() && dir.exists())
        .unwrap_or(std::path::Path::new("."));
    let error = match may_access(existing, libc::W_OK | libc::X_OK) {
        Ok(()) if existing == path => return entries_read_and_writable(path),
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    let what = match existing == path {
        true => format!("the data directory {}", path.display()),
        false => format!(
            "the data directory {} cannot be made in {}",
            path.display(),
            existing.display()
        ),
    };
    Err(format!(
        "{what}: not writable by this process (uid {}): {error}",
        process_uid()
    ))
}

/// The user this process runs as, named in refusals of files it may not use.
fn process_uid() -> u32 {
    // SAFETY: getuid(2) cannot fail.
    unsafe { libc::getuid() }
}

/// Whether this process may access `path` as `mode` asks (access(2)); a path that is no C
/// string is taken as accessible (what opens it says why not).
fn may_access(path: &std::path::Path, mode: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // SAFETY: access(2) reads a NUL-terminated path and changes nothing.
    match unsafe { libc::access(name.as_ptr(), mode) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Every file and directory under the data directory `root` that this process may not read
/// and write (directories: and enter), named (the first few) in one refusal.
fn entries_read_and_writable(root: &std::path::Path) -> Result<(), String> {
    const NAMED: usize = 3;
    let mut refused = Vec::new();
    let mut count = 0usize;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue; // the directory itself was judged (unreadable: refused below)
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            let mode = match is_dir {
                true => libc::R_OK | libc::W_OK | libc::X_OK,
                false => libc::R_OK | libc::W_OK,
            };
            match may_access(&path, mode) {
                Ok(()) if is_dir => pending.push(path),
                Ok(()) => {}
                Err(error) => {
                    count += 1;
                    if refused.len() < NAMED {
                        refused.push(format!("{} ({error})", path.display()));
                    }
                }
            }
        }
    }
    if let Err(error) = may_access(root, libc::R_OK) {
        count += 1;
        refused.insert(0, format!("{} ({error})", root.display()));
    }
    if count == 0 {
        return Ok(());
    }
    let more = match count > refused.len() {
        true => format!(" and {} more", count - refused.len()),
        false => String::new(),
    };
    Err(format!(
        "the data directory {} holds {count} entries this process (uid {}) may not read and \
         write: {}{more}; give them to the user the server runs as (chown -R)",
        root.display(),
        process_uid(),
        refused.join(", ")
    ))
}

fn open_data_dir(path: &str) -> Result<iggy_storage::DataDir, ExitCode> {
    iggy_storage::open_data_dir(path).map_err(|error| {
        eprintln!("iggy-server: {error}");
        ExitCode::FAILURE
    })
}

/// A standalone data directory holding partition directories but no metadata history lost its
/// metadata (removed, or not restored with the rest): a start would begin a new history whose
/// first streams take those directories over and discard their messages, and it has no peer to
/// bring the history back. Refused, nothing changed. (A cluster node without a history asks
/// its peers instead.)
fn partitions_have_a_history(data: &iggy_storage::DataDir) -> Result<(), String> {
    if consensus::plane::metadata_on_disk(data.root()) == MetadataHistory::Held {
        return Ok(());
    }
    let partitions = data.partition_dirs_on_disk();
    let Some((_, first)) = partitions.first() else {
        return initialization_records_have_a_history(data);
    };
    Err(format!(
        "{} holds {} partition directories ({} among them) but no metadata history (no \
         metadata journal record, no metadata checkpoint): its metadata was lost or removed, and \
         a start would begin a new history whose streams take those directories over, \
         discarding their messages. Nothing was changed. Restore {} from a verified backup \
         (README \"Backup and restore\"); or, to give those messages up, start with --fresh, \
         which erases the data directory",
        data.root().display(),
        partitions.len(),
        first.display(),
        data.root().join("metadata").display(),
    ))
}

/// Initialization records (`partition-initialization/`) but no metadata history and no
/// partition directory: the metadata and the partitions were removed and the records kept. A
/// new history numbers its partitions' incarnations as the lost one did, so each new partition
/// met a record saying it had been initialized and served before, and was refused (3003) once
/// created. Refused at start, nothing changed.
fn initialization_records_have_a_history(data: &iggy_storage::DataDir) -> Result<(), String> {
    let records = data.partition_initialization_root();
    let held = std::fs::read_dir(&records).map_or(0, |entries| entries.count());
    if held == 0 {
        return Ok(());
    }
    Err(format!(
        "{} holds {held} partition initialization records but there is no metadata history \
         (no metadata journal record, no metadata checkpoint) and no partition directory: the \
         metadata and partitions were removed and the records kept, and a new history's \
         partitions would be refused as ones initialized before. Nothing was changed. Restore \
         the whole data directory from a verified backup (README \"Backup and restore\"), or \
         start with --fresh, which erases it",
        records.display(),
    ))
}

/// `data` is `None` for a cluster node that found no metadata history: it is opened once the
/// peers' declarations allowed a new history.
async fn run(
    cfg: config::Config,
    (data, dir_lock): (Option<iggy_storage::DataDir>, Option<DirLock>),
    replica_id: u8,
    root: (String, String, bool),
    start: Start,
) -> ExitCode {
    let Start {
        fresh,
        restored,
        cut_damaged_journals,
    } = start;
    let (user, pw, generated) = root;
    // Heard from the start: a stop asked for before the node serves (a long replay, a cluster
    // node waiting for its peers) ends the process with exit 0 and a line saying so, as
    // cleanly as a crash would (every file is crash-safe), not killed by the signal (143).
    let serving = std::rc::Rc::new(std::cell::Cell::new(false));
    let (stop, stopped) = futures_channel::oneshot::channel::<()>();
    compio::runtime::spawn({
        let serving = serving.clone();
        async move {
            wait_for_shutdown().await;
            if !serving.get() {
                tracing::info!(
                    "stopped before serving: the start was not finished (the next start \
                     recovers as after a crash; nothing acknowledged is lost)"
                );
                std::process::exit(0);
            }
            let _ = stop.send(());
        }
    })
    .detach();
    let plane = if cfg.cluster.enabled {
        let at_start = match data {
            Some(_) => MetadataHistory::Held,
            None => MetadataHistory::Absent,
        };
        // The restored marker of a start with `--restored` is written once the directory is
        // open (below); its runs are declared restored from the first handshake on.
        let marked =
            iggy_storage::data_dir::restored_marker(std::path::Path::new(&cfg.system.path))
                .exists();
        let history_dir = data
            .as_ref()
            .map(|_| std::path::Path::new(&cfg.system.path));
        let cluster = consensus::cluster::cluster_id(&cfg.cluster.name);
        // Before anything is written: a history runs only with a roster of its own size.
        if let Some(dir) = history_dir
            && let Err(code) = record_replica_count(dir, cluster, &cfg, replica_id)
        {
            return code;
        }
        let runs = match consensus::runs_file::RunsState::start(
            cluster,
            replica_id,
            history_dir,
            restored || marked,
        ) {
            Ok(runs) => std::rc::Rc::new(runs),
            Err(error) => {
                eprintln!("iggy-server: {error}");
                return ExitCode::FAILURE;
            }
        };
        let mut plane =
            match consensus::plane::ReplicaPlane::start(&cfg, replica_id, at_start, runs).await {
                Ok(plane) => plane,
                Err(error) => {
                    eprintln!("iggy-server: replica plane: {error}");
                    return ExitCode::FAILURE;
                }
            };
        if at_start == MetadataHistory::Absent
            && let Err(code) = gate_start(&cfg, replica_id, &mut plane, start).await
        {
            return code;
        }
        if fresh == Fresh::AfterGate
            && let Err(code) = remove_data_dir(&cfg.system.path)
        {
            return code;
        }
        Some(plane)
    } else {
        None
    };
    let data = match data {
        Some(data) => data,
        None => match open_data_dir(&cfg.system.path) {
            Ok(data) => {
                if let Some(plane) = &plane {
                    let dir = std::path::Path::new(&cfg.system.path);
                    let cluster = consensus::cluster::cluster_id(&cfg.cluster.name);
                    if let Err(code) = record_replica_count(dir, cluster, &cfg, replica_id) {
                        return code;
                    }
                    plane.attach_runs(dir);
                }
                data
            }
            Err(code) => return code,
        },
    };
    // Held until the process ends; taken now if the directory was made (or remade) above.
    let _dir_lock = match hold_data_dir(&cfg.system.path, dir_lock) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    // A standalone node's directory says so (a cluster start on it is refused), and a cluster
    // node's is refused here: served alone, it would fork the cluster's history.
    if plane.is_none() {
        let dir = std::path::Path::new(&cfg.system.path);
        let cluster = consensus::cluster::cluster_id(&cfg.cluster.name);
        if let Err(code) = record_replica_count(dir, cluster, &cfg, replica_id) {
            return code;
        }
    }
    if let Some(plane) = &plane {
        match mark_restored(&cfg.system.path, restored) {
            Ok(true) => {
                tracing::warn!(
                    "replica {replica_id}: {} holds {}: this node's data directory was \
                     restored, so its groups vote in no view change until each holds its \
                     view's log from the primary (the marker goes once every group did and \
                     the metadata caught up); its peers must keep a quorum meanwhile",
                    cfg.system.path,
                    iggy_generated::storage::RESTORED_MARKER_FILE
                );
                plane.set_restored(true);
            }
            Ok(false) => {}
            Err(error) => {
                eprintln!(
                    "iggy-server: --restored: cannot write {} in {}: {error}",
                    iggy_generated::storage::RESTORED_MARKER_FILE,
                    cfg.system.path
                );
                return ExitCode::from(74);
            }
        }
    }
    let quic_reset_key = match cfg.quic.enabled {
        true => data.quic_reset_key().await,
        false => Vec::new(),
    };
    let node =
        match node::Node::start(cfg.clone(), data, replica_id, plane, cut_damaged_journals).await {
            Ok(node) => node,
            Err(error) => {
                eprintln!("iggy-server: cannot open the data directory: {error}");
                return ExitCode::FAILURE;
            }
        };
    if let Some(plane) = &node.shared.plane {
        // The handle keeps the metadata group's job queue open; the node does for as long.
        let metadata = node.metadata.clone();
        plane.follow_metadata_commit(move || metadata.figures().commit());
        plane
            .leases()
            .follow_metadata(node.metadata.shared_figures());
    }
    // Every listener is bound before the root user is created and before any serves, so an
    // address the node cannot have stops the start first: a refused first start once created
    // the root user and printed its generated password, and the corrected start printed none.
    let http = match cfg.http.enabled {
        true => match bind_http(&cfg.http, &node).await {
            Ok(http) => Some(http),
            Err(error) => {
                eprintln!("iggy-server: {error}");
                return ExitCode::FAILURE;
            }
        },
        false => None,
    };
    let bound = match transport::bind(&cfg, &quic_reset_key).await {
        Ok(bound) => bound,
        Err(error) => {
            eprintln!("iggy-server: {error}");
            return ExitCode::FAILURE;
        }
    };
    // In a cluster only the metadata primary creates it; the others learn it by replication
    // (so every node must be given the same credentials).
    service::auth::ensure_root(&node, (user.clone(), pw.clone())).await;
    if generated && node.root_created.get() {
        print_generated_password(&cfg.system.logging, &user, &pw);
    }
    // From here on clients are served: a stop drains them (below).
    serving.set(true);
    let listeners = bound.serve(&node);
    if let Some(http) = http {
        http.serve(&node);
    }
    tracing::info!("iggy-server replica {replica_id} serving");
    give_back_start_up_memory();
    compio::runtime::spawn(maintenance::run(node.clone())).detach();
    #[cfg(debug_assertions)]
    panic_on_purpose();
    let notifier = systemd_ready();
    let _ = stopped.await;
    tracing::info!("shutting down: draining in-flight requests");
    if let Some(notifier) = &notifier {
        let _ = notifier.notify("STOPPING=1");
    }
    node.drain(std::time::Duration::from_secs(10)).await;
    listeners.close().await;
    node.say_stopping(std::time::Duration::from_millis(500))
        .await;
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// A cluster node that found no metadata history asks its peers (their handshakes declare
/// theirs) before formatting one: a peer holding a history means this node's was erased, and
/// the start is refused with the recovery procedure, the data directory untouched.
async fn gate_start(
    cfg: &config::Config,
    replica_id: u8,
    plane: &mut consensus::plane::ReplicaPlane,
    start: Start,
) -> Result<(), ExitCode> {
    let fresh = start.fresh;
    use consensus::admission::{StartVerdict, erased_refusal, fresh_refusal, fresh_silent_refusal};
    let within = cfg.cluster.heartbeat_timeout;
    let path = &cfg.system.path;
    match fresh {
        Fresh::AfterGate => tracing::info!(
            "replica {replica_id}: --fresh: asking the peers whether they hold a metadata \
             history (up to {within:?}) before removing {path} and formatting a new one"
        ),
        Fresh::No => tracing::info!(
            "replica {replica_id}: no metadata history in {path}; asking the peers whether \
             they hold one (up to {within:?}) before formatting a new one"
        ),
    }
    match plane.gate_start(within).await {
        StartVerdict::Refuse { holders } if start.restored => {
            tracing::warn!(
                "replica {replica_id}: --restored: replicas {holders:?} hold the cluster's \
                 metadata history and this node none; it starts empty and catches up from them, \
                 voting in no view change until it did"
            );
            Ok(())
        }
        StartVerdict::Refuse { holders } => {
            let refusal = match fresh {
                Fresh::AfterGate => fresh_refusal(replica_id, &holders, path),
                Fresh::No => erased_refusal(replica_id, &holders, path),
            };
            eprintln!("iggy-server: {refusal}");
            Err(ExitCode::FAILURE)
        }
        // A reset goes ahead only with every node's word: a silent one may hold the history.
        StartVerdict::NewHistory { silent } if fresh == Fresh::AfterGate && !silent.is_empty() => {
            eprintln!(
                "iggy-server: {}",
                fresh_silent_refusal(replica_id, &silent, path)
            );
            Err(ExitCode::FAILURE)
        }
        StartVerdict::NewHistory { silent } if silent.is_empty() => {
            tracing::info!(
                "replica {replica_id}: no peer holds a metadata history; a new cluster starts"
            );
            Ok(())
        }
        StartVerdict::NewHistory { silent } => {
            tracing::warn!(
                "replica {replica_id}: no admitted peer holds a metadata history and a majority \
                 declared none, replicas {silent:?} did not answer within {within:?}; a new \
                 cluster starts"
            );
            Ok(())
        }
        // The replica plane stopped before a majority answered.
        StartVerdict::Undecided { silent } => {
            eprintln!(
                "iggy-server: replica {replica_id}: the replica plane stopped while replicas \
                 {silent:?} had not said whether they hold a metadata history; nothing was \
                 formatted"
            );
            Err(ExitCode::FAILURE)
        }
    }
}

/// Every listener accepts: tell systemd, and keep its watchdog fed.
fn systemd_ready() -> Option<std::rc::Rc<systemd::Notifier>> {
    let notifier = std::rc::Rc::new(systemd::Notifier::from_env()?);
    if let Err(error) = notifier.notify("READY=1") {
        tracing::warn!("systemd notification failed: {error}");
    }
    if let Some(interval) =
        systemd::watchdog_interval(std::env::var("WATCHDOG_USEC").ok().as_deref())
    {
        let pinger = notifier.clone();
        compio::runtime::spawn(async move {
            loop {
                let _ = pinger.notify("WATCHDOG=1");
                compio::time::sleep(interval).await;
            }
        })
        .detach();
    }
    Some(notifier)
}

/// The HTTP REST listener, bound and not yet serving.
struct BoundHttp {
    state: transport::http::session::HttpState,
    bound: transport::Bound,
}

/// Binds the HTTP REST listener; cluster metadata advertises the port it bound.
async fn bind_http(
    config: &config::Http,
    node: &std::rc::Rc<node::Node>,
) -> Result<BoundHttp, String> {
    let state = transport::http::session::HttpState::new(config, node.shared.replica_id)?
        .with_clock(node.shared.stamp_clock.clone());
    let tls = Some(("http.tls", &config.tls));
    let bound = transport::bind_stream("http", &config.address, tls).await?;
    node.shared.listening.set("http", bound.1.port());
    Ok(BoundHttp { state, bound })
}

impl BoundHttp {
    /// Serves the listener on this (the first) shard.
    fn serve(self, node: &std::rc::Rc<node::Node>) {
        let (listener, local, acceptor) = self.bound;
        let name = if acceptor.is_some() { "https" } else { "http" };
        tracing::info!("listening on {name} {local}");
        let api = std::rc::Rc::new(self.state);
        let serve = transport::http::serve(listener, node.clone(), api, acceptor);
        compio::runtime::spawn(serve).detach();
    }
}

/// Resolves on SIGINT, SIGTERM or SIGHUP: each stops the node gracefully (SIGHUP, a closed
/// terminal or SSH session, killed it at once by default, without the drain or the step-down;
/// upstream stops on it too).
async fn wait_for_shutdown() {
    let on = |signal: i32, name: &'static str| async move {
        match compio::signal::unix::signal(signal).await {
            Ok(()) => tracing::info!("{name} received"),
            Err(error) => {
                tracing::warn!("cannot wait for {name}: {error}");
                std::future::pending::<()>().await
            }
        }
    };
    let interrupt = async {
        let _ = compio::signal::ctrl_c().await;
    };
    let terminate = futures_util::future::select(
        Box::pin(on(libc::SIGTERM, "SIGTERM")),
        Box::pin(on(libc::SIGHUP, "SIGHUP")),
    );
    futures_util::future::select(Box::pin(terminate), Box::pin(interrupt)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Args, clap::Error> {
        parse_args(std::iter::once("iggy-server").chain(v.iter().copied()))
    }

    #[test]
    fn args() {
        let a = p(&["--replica-id", "3", "-f", "--with-default-root-credentials"]).unwrap();
        assert_eq!(
            (a.replica_id, a.fresh, a.default_root_credentials),
            (Some(3), true, true)
        );
        assert_eq!(p(&["--replica-id=7"]).unwrap().replica_id, Some(7));
        assert_eq!(p(&[]).unwrap().replica_id, None);
        assert!(
            p(&["--fresh", "--list-config-env-vars"])
                .unwrap()
                .list_config_env_vars
        );
        assert_eq!(p(&[]).unwrap(), Args::default());
        assert_eq!(
            p(&["verify", "--path", "/backup/data"]).unwrap().command,
            Some(Subcommand::Verify {
                path: Some("/backup/data".into())
            })
        );
        assert_eq!(
            p(&["verify"]).unwrap().command,
            Some(Subcommand::Verify { path: None })
        );
        assert!(p(&["verify", "--path"]).is_err());
        assert!(p(&["--restored"]).unwrap().restored);
        assert!(
            p(&["--restored", "--fresh"]).is_err(),
            "--restored keeps the directory"
        );
        assert!(p(&["--replica-id"]).is_err());
        assert!(p(&["--replica-id", "256"]).is_err());
    }

    #[test]
    fn only_replica_0_starts_a_standalone_node() {
        let standalone = config::load(None, |_| None).unwrap().cluster;
        assert_eq!(standalone.replica_id(None), Ok(0));
        assert_eq!(standalone.replica_id(Some(0)), Ok(0));
        let refusal = standalone.replica_id(Some(1)).unwrap_err().to_string();
        assert!(refusal.starts_with("--replica-id 1:"), "{refusal}");
    }

    #[test]
    fn a_bad_flag_is_a_usage_error_with_exit_code_2() {
        for bad in [
            &["--bogus"][..],
            &["--replica-id"],
            &["--replica-id=x"],
            &["extra"],
        ] {
            let error = p(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
            let shown = flag_error(&error);
            assert!(shown.contains("Usage: iggy-server"), "{bad:?}: {shown}");
            assert!(shown.starts_with("error: "), "{bad:?}: {shown}");
        }
        assert_eq!(
            p(&["--bogus"]).unwrap_err().kind(),
            clap::error::ErrorKind::UnknownArgument
        );
    }

    #[test]
    fn help_lists_every_flag_with_its_meaning() {
        <Args as clap::CommandFactory>::command().debug_assert();
        let error = p(&["--help"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::DisplayHelp);
        assert_eq!(error.exit_code(), 0);
        let help = error.render().to_string();
        for flag in [
            "--replica-id <N>",
            "-f, --fresh",
            "--restored",
            "--with-default-root-credentials",
            "--list-config-env-vars",
            "-h, --help",
            "-V, --version",
        ] {
            assert!(help.contains(flag), "{flag} missing from:\n{help}");
        }
        let command = <Args as clap::CommandFactory>::command();
        for arg in command.get_arguments() {
            assert!(arg.get_help().is_some(), "{} has no help", arg.get_id());
        }
        assert!(help.contains("data directory"), "{help}");
    }

    #[test]
    fn version_names_release_protocol_range_and_storage_format() {
        let error = p(&["--version"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::DisplayVersion);
        assert_eq!(error.exit_code(), 0);
        let version = error.render().to_string();
        assert!(
            version.starts_with(&format!("iggy-server {}\n", env!("CARGO_PKG_VERSION"))),
            "{version}"
        );
        assert!(version.contains("protocol 0.11.1 to 0.12.0"), "{version}");
        assert!(
            version.contains("storage format IGGY-OWNERSHIP-HISTORY-5"),
            "{version}"
        );
        assert!(version.contains(iggy_storage::layout::marker::VALUE));
    }

    #[test]
    fn rust_log_replaces_the_configured_level() {
        use tracing_subscriber::filter::LevelFilter;
        let hint = |level, rust_log| log_filter(level, rust_log).max_level_hint();
        assert_eq!(hint("info", None), Some(LevelFilter::INFO));
        assert_eq!(hint("warn", Some("debug")), Some(LevelFilter::DEBUG));
        assert_eq!(hint("debug", Some("  ")), Some(LevelFilter::DEBUG));
        assert_eq!(hint("info", Some("x=notalevel")), Some(LevelFilter::INFO));
        // Targets alone, or a word that is no level, leave the rest at the configured level.
        for rust_log in ["blah", "iggy_server::consensus=debug"] {
            use tracing_subscriber::layer::SubscriberExt;
            let subscriber =
                tracing_subscriber::registry().with(log_filter("warn", Some(rust_log)));
            let (warn, info) = tracing::subscriber::with_default(subscriber, || {
                (
                    tracing::enabled!(tracing::Level::WARN),
                    tracing::enabled!(tracing::Level::INFO),
                )
            });
            assert_eq!((warn, info), (true, false), "{rust_log}");
        }
    }

    #[test]
    fn credentials() {
        assert_eq!(
            root_credentials(true, |_| None),
            ("iggy".into(), "iggy".into(), false)
        );
        let env = |k: &str| match k {
            "IGGY_ROOT_USERNAME" => Some("admin".into()),
            "IGGY_ROOT_PASSWORD" => Some("secret".into()),
            _ => None,
        };
        assert_eq!(
            root_credentials(false, env),
            ("admin".into(), "secret".into(), false)
        );
        let (u, pw, generated) = root_credentials(false, |_| None);
        assert_eq!(u, "iggy");
        assert!(generated && pw.len() == 24);
        assert!(check_root_credentials(&u, &pw).is_ok());
        let refused =
            |user: &str, password: &str| check_root_credentials(user, password).unwrap_err();
        assert!(refused("a", "secret").contains("IGGY_ROOT_USERNAME \"a\""));
        assert!(refused(&"u".repeat(51), "secret").contains("IGGY_ROOT_USERNAME"));
        // As for any new user: names that show as another in a user list (they once passed).
        for look_alike in [" admin", "admin\t", "ad\u{200b}min"] {
            assert!(refused(look_alike, "secret").contains("IGGY_ROOT_USERNAME"), "{look_alike:?}");
        }
        let said = refused("admin", "x");
        assert!(
            said.contains("IGGY_ROOT_PASSWORD") && !said.contains("\"x\""),
            "{said}"
        );
    }
}
