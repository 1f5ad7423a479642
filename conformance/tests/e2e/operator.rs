//! What an operator sees: `--help`, `--version` and flag errors of the real binary, and the
//! server's log (plain text in a file, one debug line per request, session start and end,
//! `system.logging` level and format with `RUST_LOG` overriding the level).

use crate::harness::*;
use iggy::prelude::*;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(server_binary())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run iggy-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_flag_with_its_meaning_and_exits_0() {
    let out = run(&["--help"]);
    let help = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--help exits 0: {help}{}",
        text(&out.stderr)
    );
    assert!(help.contains("Usage: iggy-server [OPTIONS]"), "{help}");
    for (flag, meaning) in [
        ("--replica-id <N>", "replica id"),
        ("-f, --fresh", "Delete the configured data directory"),
        ("--with-default-root-credentials", "iggy/iggy"),
        ("--list-config-env-vars", "IGGY_ variable"),
        ("-V, --version", "version"),
        ("-h, --help", "help"),
    ] {
        let line = help
            .lines()
            .find(|l| l.contains(flag))
            .unwrap_or_else(|| panic!("{flag} missing from --help:\n{help}"));
        assert!(
            line.contains(meaning),
            "{flag} is explained ({meaning:?}): {line}"
        );
    }
}

#[test]
fn version_names_the_release_the_protocol_range_and_the_storage_format() {
    let out = run(&["--version"]);
    let version = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--version exits 0: {version}{}",
        text(&out.stderr)
    );
    let lines: Vec<&str> = version.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("iggy-server {}", env!("CARGO_PKG_VERSION")).as_str(),
            "protocol 0.11.1 to 0.12.0, patch versions included (codecs: 0.12.0, 0.11.1; native 0.12.0)",
            "storage format IGGY-OWNERSHIP-HISTORY-5",
        ],
        "{version}"
    );
}

#[test]
fn a_bad_flag_exits_2_with_the_usage_line_on_stderr() {
    for bad in [
        &["--bogus"][..],
        &["--replica-id"],
        &["--replica-id=many"],
        &["--fresh", "now"],
    ] {
        let out = run(bad);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?} exits 2: {stderr}");
        assert!(stderr.starts_with("error: "), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("Usage: iggy-server [OPTIONS]"),
            "{bad:?}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{bad:?} prints nothing on stdout: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn a_replica_id_other_than_0_without_a_cluster_is_refused_before_the_data_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(server_binary())
        .args(["--replica-id", "1", "--fresh"])
        .env_remove("RUST_LOG")
        .env("IGGY_SYSTEM_PATH", &data)
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run iggy-server");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--replica-id 1"),
        "names the flag: {stderr}"
    );
    assert!(!data.exists(), "no data directory was formatted");
}

/// The lines this start of `server` wrote (after the harness's start marker).
fn this_start(server: &TestServer) -> String {
    let log = server.log();
    log.rsplit("===== e2e harness: start #")
        .next()
        .unwrap_or("")
        .to_string()
}

async fn ping(server: &TestServer) {
    let client = server.root_client().await;
    ok("ping", within("ping", client.ping()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_in_a_file_has_no_colour() {
    let server = TestServer::start_with_env(&[("RUST_LOG", "debug")]);
    ping(&server).await;
    let log = server.log();
    assert!(log.contains("listening on tcp"), "{log}");
    assert!(log.contains(" DEBUG "), "debug lines were written: {log}");
    assert!(
        !log.contains("\x1b["),
        "no ANSI escape in a log that is not a terminal:\n{log:?}"
    );
}

/// The request lines of `log` for `command`.
fn request_lines<'a>(log: &'a str, command: &str) -> Vec<&'a str> {
    let field = format!(" command={command} ");
    log.lines()
        .filter(|l| l.contains(" request ") && l.contains(&field))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_log_debug_logs_every_request_with_command_partition_status_and_duration() {
    // RUST_LOG replaces the configured level.
    let server =
        TestServer::start_with_env(&[("RUST_LOG", "debug"), ("IGGY_SYSTEM_LOGGING_LEVEL", "info")]);
    let client = server.root_client().await;
    ok("ping", within("ping", client.ping()).await);
    create_stream_and_topic(&client, "s", "t", 2).await;
    send_to_partition(&client, &name("s"), &name("t"), 1, msgs("m", 1)).await;
    let refused = within("delete", client.delete_stream(&name("nope")))
        .await
        .expect_err("no such stream");
    let log = this_start(&server);

    let pings = request_lines(&log, "ping");
    assert!(!pings.is_empty(), "a ping is logged by name:\n{log}");
    let line = pings.last().unwrap();
    assert!(line.contains(" DEBUG "), "{line}");
    assert!(line.contains(" session="), "the session: {line}");
    assert!(line.contains(" status=0 "), "the status: {line}");
    assert!(line.contains(" duration="), "the duration: {line}");

    let sends = request_lines(&log, "message.send");
    assert_eq!(sends.len(), 1, "one line per request:\n{log}");
    assert!(
        sends[0].contains(" partition=1 "),
        "the partition of a send: {}",
        sends[0]
    );
    assert!(sends[0].contains(" status=0 "), "{}", sends[0]);
    let creates = request_lines(&log, "stream.create");
    assert!(
        creates.len() == 1 && !creates[0].contains(" partition="),
        "{creates:?}"
    );
    let deletes = request_lines(&log, "stream.delete");
    let status = format!(" status={} error=", refused.as_code());
    assert!(
        deletes.len() == 1 && deletes[0].contains(&status),
        "a refused request's status ({status}): {deletes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_level_applies_when_rust_log_is_unset() {
    let server =
        TestServer::start_with_env(&[("RUST_LOG", ""), ("IGGY_SYSTEM_LOGGING_LEVEL", "debug")]);
    ping(&server).await;
    let log = this_start(&server);
    assert!(
        !request_lines(&log, "ping").is_empty(),
        "system.logging.level = debug:\n{log}"
    );

    let quiet = TestServer::start_with_env(&[("RUST_LOG", "")]);
    ping(&quiet).await;
    let log = this_start(&quiet);
    assert!(log.contains(" INFO "), "{log}");
    assert!(
        request_lines(&log, "ping").is_empty(),
        "the default level info has no request lines:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_logged_when_they_start_and_end() {
    let server = TestServer::start();
    let client = server.root_client().await;
    ok("logout", within("logout", client.logout_user()).await);
    let log = this_start(&server);
    let bound = log
        .lines()
        .find(|l| l.contains(" INFO ") && l.contains("bound to connection"))
        .unwrap_or_else(|| panic!("a session start is logged:\n{log}"));
    let session = bound
        .split("session ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("the line names its session");
    assert!(
        log.lines().any(|l| l.contains(" INFO ")
            && l.contains(&format!("session {session} of client"))
            && l.contains("ended by logout")),
        "the logout of session {session} is logged:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_format_writes_one_object_per_line() {
    let server = TestServer::start_with_env(&[
        ("IGGY_SYSTEM_LOGGING_FORMAT", "json"),
        ("RUST_LOG", "debug"),
    ]);
    ping(&server).await;
    let log = this_start(&server);
    let lines: Vec<&str> = log.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert!(lines.len() > 2, "{log}");
    for line in &lines {
        assert!(
            line.starts_with('{') && line.ends_with('}') && line.contains("\"level\":\""),
            "a JSON object per line: {line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"message\":\"request\"") && l.contains("\"command\":\"ping\"")),
        "the request line as JSON:\n{log}"
    );
    assert!(!log.contains("\x1b["), "{log:?}");
}

/// `iggy-server --list-config-env-vars | head` closes the pipe before the listing ends: the
/// listing stops quietly (exit 0), as `ls | head` does, instead of panicking with "failed
/// printing to stdout: Broken pipe" and a backtrace. The pipe's reader is closed before the
/// server starts, so its first line already meets the closed pipe.
#[test]
fn list_config_env_vars_into_a_closed_pipe_exits_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(server_binary())
        .arg("--list-config-env-vars")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run iggy-server");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The server in `dir` on the data directory `data`, TCP only on an ephemeral port, no
/// `RUST_LOG` from the caller's environment.
fn server_in(dir: &std::path::Path, data: &std::path::Path) -> Command {
    let mut command = Command::new(server_binary());
    command
        .env_remove("RUST_LOG")
        .env("IGGY_SYSTEM_PATH", data)
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env("IGGY_QUIC_ENABLED", "false")
        .env("IGGY_HTTP_ENABLED", "false")
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

/// Runs `command` (stderr collected) to its exit, which must come within `START_TIMEOUT`: a
/// start that should be refused and is not would otherwise serve until killed.
fn output_of_a_refused_start(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iggy-server");
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    while child.try_wait().expect("poll the child").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still running after {START_TIMEOUT:?}: the start was not refused");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect the output")
}

/// `IGGY_CONFIG_PATH` naming a file that is not there (a typo in a unit file, a volume not
/// mounted) is refused naming the path, before the data directory is touched. Started on the
/// embedded defaults instead, a cluster node would format a standalone history.
#[test]
fn a_config_path_naming_a_missing_file_is_refused_before_the_data_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let missing = dir.path().join("etc/iggy/config.toml");
    let out =
        output_of_a_refused_start(server_in(dir.path(), &data).env("IGGY_CONFIG_PATH", &missing));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in ["IGGY_CONFIG_PATH", &missing.display().to_string()] {
        assert!(stderr.contains(expected), "names {expected:?}: {stderr}");
    }
    assert!(!data.exists(), "no data directory was formatted");
}

/// HS256 signs and checks a token with one secret: an encoding secret that differs from the
/// decoding one is refused at start, naming the key and neither secret. The server once started,
/// and then refused every token its logins issued (401) with no word in the log.
#[test]
fn differing_jwt_secrets_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (encoding, decoding) = ("signing-secret-of-this-node-1", "checking-secret-of-another-2");
    let out = output_of_a_refused_start(
        server_in(dir.path(), &data)
            .env("IGGY_HTTP_JWT_ENCODING_SECRET", encoding)
            .env("IGGY_HTTP_JWT_DECODING_SECRET", decoding),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("http.jwt.decoding_secret"), "names the key: {stderr}");
    assert!(!stderr.contains(encoding) && !stderr.contains(decoding), "shows no secret: {stderr}");
    assert!(!data.exists(), "no data directory was formatted");
}

/// A log that cannot be written (stderr on a full disk, here `/dev/full`) loses its lines but
/// stops nothing: the server starts, serves and stops cleanly. The log writer reported its
/// write error with `eprintln!`, which panics when stderr fails: the start died with exit 101
/// and no word, and a panic in a running group's task left a node alive but stalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_stops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let mut child = server_in(dir.path(), &dir.path().join("data"))
        .arg("--with-default-root-credentials")
        .env("RUST_LOG", "debug")
        .env("IGGY_TCP_ADDRESS", &address)
        .stdout(Stdio::null())
        .stderr(full)
        .spawn()
        .expect("spawn iggy-server");
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    while std::net::TcpStream::connect(&address).is_err() {
        if let Some(status) = child.try_wait().expect("poll the child") {
            panic!("iggy-server exited during startup ({status})");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no listener on {address}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let client = IggyClient::from_connection_string(&format!("iggy://iggy:iggy@{address}"))
        .expect("valid connection string");
    ok("connect", within("connect", client.connect()).await);
    create_stream_and_topic(&client, "s", "t", 1).await;
    send_to_partition(&client, &name("s"), &name("t"), 0, msgs("m", 3)).await;
    let polled = poll(
        &client,
        &name("s"),
        &name("t"),
        0,
        &consumer("c"),
        PollingStrategy::offset(0),
        10,
        false,
    )
    .await;
    assert_eq!(payloads(&polled), ["m-0", "m-1", "m-2"]);
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().expect("wait for iggy-server");
    assert_eq!(status.code(), Some(0), "a clean stop");
}

/// README, "Logs": `debug` logs one line per request. An HTTP request is one too: its method,
/// path (not the query), status and duration, so an operator tracing REST clients sees them
/// as a binary client's requests are seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_log_debug_logs_every_http_request_with_method_path_status_and_duration() {
    let (server, api) = TestServer::start_with_http(&[("RUST_LOG", "debug")]);
    let token = crate::http::raw_token(&api).await;
    let (status, _) = crate::http::raw(&api, "GET", "/streams?x=1", Some(&token), b"").await;
    assert_eq!(status, 200);
    let (status, _) = crate::http::raw(&api, "GET", "/streams/nope", Some(&token), b"").await;
    assert_eq!(status, 404);
    let log = this_start(&server);
    let http_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" DEBUG ") && l.contains(" http request "))
        .collect();
    for (method, path, status) in [
        ("POST", "/users/login", 200),
        ("GET", "/streams", 200),
        ("GET", "/streams/nope", 404),
    ] {
        let wanted = format!(" method={method} path={path} status={status} ");
        let line = http_lines
            .iter()
            .find(|l| l.contains(&wanted))
            .unwrap_or_else(|| panic!("{wanted:?} logged:\n{log}"));
        assert!(line.contains(" duration="), "{line}");
        assert!(!line.contains("x=1"), "no query: {line}");
    }
}

/// `--fresh` erases an iggy-server data directory, not whatever `system.path` names: a
/// directory that is not empty and has no `storage.format` marker (a mistyped path, a parent
/// directory) is not ours, and is refused with nothing in it removed.
#[test]
fn fresh_refuses_a_directory_that_is_not_a_data_directory_and_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("home");
    std::fs::create_dir_all(foreign.join("documents")).unwrap();
    std::fs::write(foreign.join("documents/thesis.txt"), "years of work").unwrap();
    let out = output_of_a_refused_start(
        server_in(dir.path(), &foreign).args(["--fresh", "--with-default-root-credentials"]),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in ["--fresh", &foreign.display().to_string(), "storage.format"] {
        assert!(stderr.contains(expected), "names {expected:?}: {stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(foreign.join("documents/thesis.txt")).unwrap(),
        "years of work"
    );
    let entries: Vec<_> = std::fs::read_dir(&foreign).unwrap().collect();
    assert_eq!(entries.len(), 1, "nothing was written either");
}

/// `verify --path` judges each journal record's cluster by the configured `[cluster] name`
/// (README, "Backup and restore", step 3). A configuration that cannot be read (here a
/// mistyped `IGGY_CONFIG_PATH`) is an error naming it, not a verification under the default
/// name that reports every journal as another cluster's "of the configuration read".
#[test]
fn verify_with_a_configuration_that_cannot_be_read_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    let missing = dir.path().join("cluster.tom");
    let out = server_in(dir.path(), &copy)
        .args(["verify", "--path"])
        .arg(&copy)
        .env("IGGY_CONFIG_PATH", &missing)
        .output()
        .expect("run iggy-server verify");
    let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{printed}");
    assert!(printed.contains("IGGY_CONFIG_PATH"), "{printed}");
    assert!(
        !printed.contains("verified:"),
        "no verification under another name: {printed}"
    );
}

/// README, "Configuration": unknown keys are refused with the key's name. A variable of a
/// configuration section whose key does not exist (`IGGY_TCP_ADRESS`, a typo) is one: it was
/// ignored, and the server started on the address the operator meant to change. Variables
/// that are not configuration keys (`IGGY_ROOT_PASSWORD`, a client's `IGGY_USERNAME`) pass.
#[test]
fn a_variable_naming_no_key_of_a_section_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = output_of_a_refused_start(
        server_in(dir.path(), &data)
            .arg("--with-default-root-credentials")
            .env("IGGY_TCP_ADRESS", "0.0.0.0:8090")
            .env("IGGY_USERNAME", "a client's"),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IGGY_TCP_ADRESS"), "{stderr}");
    assert!(!stderr.contains("IGGY_USERNAME"), "{stderr}");
    assert!(!data.exists(), "no data directory was formatted");
}

/// `--restored` is for a node of a cluster (README "Replace a cluster node's disk"): given to
/// a standalone node it is refused naming the flag, before the data directory is touched, and
/// with `--fresh` it is a bad flag (the two ask opposite things of the directory).
#[test]
fn restored_on_a_standalone_node_is_refused_before_the_data_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = output_of_a_refused_start(server_in(dir.path(), &data).arg("--restored"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--restored is for a node of a cluster"), "{stderr}");
    assert!(!data.exists(), "no data directory was formatted");
    let out = output_of_a_refused_start(server_in(dir.path(), &data).args(["--restored", "--fresh"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// One process per data directory: a second start on a running server's directory (a copied
/// unit file, a mistyped `system.path`), even with `--fresh`, is refused naming the directory
/// before anything is written, and the running server keeps serving what it holds. Before, the
/// second process opened the live journal (a cluster node rewrote its run file first) and
/// `--fresh` removed the live directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_on_a_running_servers_data_directory_is_refused() {
    let server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "kept", "t", 1).await;
    let files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        files
    };
    let before = files(&server.data_dir());
    let dir = tempfile::tempdir().unwrap();
    for args in [&[][..], &["--fresh"][..]] {
        let mut second = server_in(dir.path(), &server.data_dir());
        second.args(args).arg("--with-default-root-credentials");
        let out = tokio::task::block_in_place(|| output_of_a_refused_start(&mut second));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let named = server.data_dir().display().to_string();
        assert!(
            stderr.contains("in use") && stderr.contains(&named),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            files(&server.data_dir()),
            before,
            "{args:?}: nothing written"
        );
    }
    let stream = within("get_stream", client.get_stream(&name("kept"))).await;
    assert!(
        ok("get_stream", stream).is_some(),
        "the running server serves on"
    );
}

/// `binary` (copied where `nobody` may run it) on the data directory `data`, TCP on an
/// ephemeral port and no HTTP, from `data`'s parent: as `nobody` through `setpriv` when the
/// tests run as root (root writes anywhere), as the tests' own user otherwise.
fn unprivileged_start(
    binary: &std::path::Path,
    as_root: bool,
    data: &std::path::Path,
) -> Command {
    let mut start = match as_root {
        true => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(binary);
            c
        }
        false => Command::new(binary),
    };
    start
        .env_remove("RUST_LOG")
        .env("IGGY_SYSTEM_PATH", data)
        .env("IGGY_TCP_ADDRESS", "127.0.0.1:0")
        .env("IGGY_HTTP_ENABLED", "false")
        .current_dir(binary.parent().expect("the binary's directory"))
        .stdin(Stdio::null())
        .arg("--with-default-root-credentials");
    start
}

/// A data directory the server's user may not write (another user's), or may not make (its
/// parent is not writable), is refused at start with exit 1 naming it, before anything is
/// written: its first write failed as a storage failure (exit 74, which a supervisor restarts
/// in vain). Run as `nobody` through `setpriv` when the tests run as root (root writes
/// anywhere), as the tests' own user otherwise.
#[test]
fn a_data_directory_the_server_may_not_write_is_refused_at_start_with_exit_1() {
    let root = tempfile::tempdir().unwrap();
    let locked = root.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let existing = locked.join("data");
    std::fs::create_dir(&existing).unwrap();
    // SAFETY: getuid(2) cannot fail.
    let as_root = unsafe { libc::getuid() } == 0;
    let mode = if as_root { 0o755 } else { 0o555 };
    for dir in [&existing, &locked] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    // The temp dir itself is 0700, and the build's may be too (a checkout under /root): the
    // binary is copied where nobody may run it.
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let binary = root.path().join("iggy-server");
    std::fs::copy(server_binary(), &binary).unwrap();
    for (data, named) in [
        (existing.clone(), "the data directory"),
        (locked.join("new"), "cannot be made in"),
    ] {
        let mut start = unprivileged_start(&binary, as_root, &data);
        start.env("IGGY_QUIC_ENABLED", "false");
        let out = output_of_a_refused_start(&mut start);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", data.display());
        assert!(
            stderr.contains(named) && stderr.contains("not writable"),
            "{}: {stderr}",
            data.display()
        );
        assert_eq!(
            std::fs::read_dir(&existing).unwrap().count(),
            0,
            "nothing written"
        );
        assert!(!locked.join("new").exists());
    }
}

/// A data directory this process may write, holding files it may not (its top directory
/// given to the server's user, its files left another's: a `chown` without `-R`), is refused
/// at start with exit 1 naming a file, before anything in it changes: it failed as a storage
/// failure (74, restarted in vain) after replacing the QUIC reset key.
#[test]
fn a_data_directory_holding_files_the_server_may_not_write_is_refused_at_start_unchanged() {
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = root.path().join("data");
    let journal = data.join("metadata").join("journal.wal");
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    std::fs::write(&journal, b"someone else's").unwrap();
    // SAFETY: getuid(2) cannot fail.
    let as_root = unsafe { libc::getuid() } == 0;
    let binary = root.path().join("iggy-server");
    std::fs::copy(server_binary(), &binary).unwrap();
    match as_root {
        // The directories are nobody's, the journal stays root's (0644).
        true => {
            for dir in [&data, &data.join("metadata")] {
                std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
            }
        }
        false => std::fs::set_permissions(
            &journal,
            std::os::unix::fs::PermissionsExt::from_mode(0o444),
        )
        .unwrap(),
    }
    let mut start = unprivileged_start(&binary, as_root, &data);
    start.env("IGGY_QUIC_ADDRESS", "127.0.0.1:0");
    let out = output_of_a_refused_start(&mut start);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("may not read and write") && stderr.contains("journal.wal"),
        "{stderr}"
    );
    let mut left: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["metadata"], "nothing written beside it");
    assert_eq!(std::fs::read(&journal).unwrap(), b"someone else's");
}

/// A data directory that is a symlink to a volume: `--fresh` empties the volume's directory and
/// keeps the symlink (it removed the symlink, left the old history on the volume, and made the
/// new one on the working directory's filesystem). A symlink whose target is gone (a volume
/// not mounted) is refused at start with exit 1 naming both (it was a storage failure, 74).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_on_a_symlinked_data_directory_empties_the_volume_and_keeps_the_symlink() {
    let mut server = TestServer::start();
    let client = server.root_client().await;
    create_stream_and_topic(&client, "old", "t", 1).await;
    drop(client);
    server.stop();
    let data = server.data_dir();
    let volume = server.dir().join("volume");
    std::fs::create_dir(&volume).unwrap();
    let target = volume.join("iggy");
    std::fs::rename(&data, &target).unwrap();
    std::os::unix::fs::symlink(&target, &data).unwrap();

    server.start_again_with(&["--fresh"]);
    let client = server.root_client().await;
    let streams = ok("streams", within("streams", client.get_streams()).await);
    assert!(streams.is_empty(), "a fresh history: {streams:?}");
    create_stream_and_topic(&client, "new", "t", 1).await;
    drop(client);
    server.stop();
    let link = std::fs::symlink_metadata(&data).unwrap();
    assert!(link.file_type().is_symlink(), "the data directory is still the symlink");
    assert!(target.join("metadata").is_dir(), "the new history is on the volume");

    std::fs::remove_dir_all(&target).unwrap();
    server.start_again_unready();
    let status = server.wait_exit(START_TIMEOUT).expect("refused, not served");
    assert_eq!(status.code(), Some(1), "{}", server.log());
    let log = server.log();
    assert!(
        log.contains("is a symlink to") && log.contains("does not exist"),
        "{log}"
    );
}

/// Root credentials the server would refuse for any user (a 1-byte name or password) are
/// refused at start with exit 1 naming the variable, before anything is written: such a start
/// served with no root user, and its data directory could never get one.
#[test]
fn root_credentials_no_user_could_have_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (variable, name, password) in [
        ("IGGY_ROOT_USERNAME", "a", "secret"),
        ("IGGY_ROOT_PASSWORD", "admin", "x"),
    ] {
        let mut start = server_in(dir.path(), &data);
        start
            .env("IGGY_ROOT_USERNAME", name)
            .env("IGGY_ROOT_PASSWORD", password);
        let out = output_of_a_refused_start(&mut start);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{variable}: {stderr}");
        assert!(stderr.contains(variable), "{stderr}");
        assert!(!data.exists(), "{variable}: nothing written");
    }
}
