//! `deploy/helm/iggy-server` in cluster mode, without Kubernetes or helm (neither is on this
//! machine). The chart's templates are read as text, as `compose.rs` reads the compose file:
//! the cluster-mode environment of the StatefulSet's container is taken from the template and
//! its `{{ … }}` expressions rendered for release `iggy` in namespace `default` (each by the
//! value helm gives it; an expression this file does not know fails the test, so a template
//! change is seen here). Each pod is then run as its container would be: the image's
//! environment (the Dockerfile's `ENV` lines), the chart's entrypoint script
//! (`files/cluster-entrypoint.sh`, the same bytes the ConfigMap carries) with the pod's host
//! name, in a network namespace of its own (`lan.rs`) and a mount namespace whose `/etc/hosts`
//! names every pod's DNS name under the headless Service, as the cluster's DNS would. The
//! official CLI, run inside pod 0's namespaces as `kubectl exec` would, creates, sends and
//! polls, and reads cluster metadata; then pod 2 restarts at another address (its name moves,
//! as a rescheduled pod's does) and the other pods find it by its name.

use crate::cli::cli_binary;
use crate::docker_image::{Running, image_configuration};
use crate::harness::*;
use crate::lan::Lan;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHART: &str = "deploy/helm/iggy-server";
const RELEASE: &str = "iggy";
const NAMESPACE: &str = "default";
const PODS: usize = 3;
/// What the tests set `cluster.advertisedAddresses` to, when they set it: names a client
/// outside the Kubernetes cluster resolves to each pod.
const ADVERTISED: [&str; PODS] = ["iggy-0.outside.example", "iggy-1.outside.example", "iggy-2.outside.example"];

fn chart_file(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(CHART).join(path)).unwrap_or_else(|e| panic!("read {CHART}/{path}: {e}"))
}

/// A value of `values.yaml` by its dotted path (two levels at most, as the chart's are).
fn value(values: &str, path: &str) -> String {
    let (section, key) = match path.split_once('.') {
        Some((section, key)) => (Some(section), key),
        None => (None, path),
    };
    let mut inside = section.is_none();
    for line in values.lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        if let Some(section) = section {
            if indent == 0 {
                inside = line.trim_end() == format!("{section}:");
                continue;
            }
        } else if indent > 0 {
            continue;
        }
        if inside && let Some(rest) = line.trim().strip_prefix(&format!("{key}:")) {
            return rest.trim().trim_matches('"').to_string();
        }
    }
    panic!("values.yaml has no {path}")
}

/// `{{ … }}` expressions of the cluster-mode environment, rendered as helm renders them for
/// release `iggy` of chart `iggy-server` with `--set cluster.enabled=true,replicas=3`.
fn render(line: &str, values: &str) -> String {
    let fullname = format!("{RELEASE}-iggy-server");
    let rendered = [
        ("{{ include \"iggy-server.fullname\" . }}".to_string(), fullname.clone()),
        ("{{ include \"iggy-server.headless\" . }}".to_string(), format!("{fullname}-headless")),
        ("{{ .Values.cluster.name | quote }}".to_string(), format!("\"{}\"", value(values, "cluster.name"))),
        ("{{ .Values.replicas | quote }}".to_string(), format!("\"{PODS}\"")),
        ("{{ .Values.clusterDomain | quote }}".to_string(), format!("\"{}\"", value(values, "clusterDomain"))),
        ("{{ .Values.cluster.replicaPort | quote }}".to_string(), format!("\"{}\"", value(values, "cluster.replicaPort"))),
        ("{{ .Values.cluster.replicaPort }}".to_string(), value(values, "cluster.replicaPort")),
        ("{{ join \" \" .Values.cluster.advertisedAddresses | quote }}".to_string(), format!("\"{}\"", ADVERTISED.join(" "))),
    ];
    let mut line = line.to_string();
    for (expression, value) in rendered {
        line = line.replace(&expression, &value);
    }
    assert!(!line.contains("{{"), "an expression this test does not render: {line}");
    line
}

/// The `- name:`/`value:` pairs the StatefulSet's container gets in cluster mode: the entries
/// under `env:` inside its `{{- if .Values.cluster.enabled }}` block, rendered, with
/// Kubernetes' `$(POD_NAMESPACE)` expanded. A nested block is taken when its condition is in
/// `set` (values given, as `--set cluster.tlsSecret=…` gives one) and skipped otherwise, as
/// helm does with a value left empty.
fn cluster_env(statefulset: &str, values: &str, set: &[&str]) -> Vec<(String, String)> {
    let env_at = statefulset.find("\n          env:\n").expect("the container's env");
    let block = &statefulset[env_at..];
    let start = block.find("{{- if .Values.cluster.enabled }}").expect("a cluster-mode env block");
    let mut env = Vec::new();
    // Per nested block open here: whether it is taken.
    let mut nested: Vec<bool> = Vec::new();
    let mut name: Option<String> = None;
    for line in block[start..].lines().skip(1) {
        let trimmed = line.trim();
        if let Some(condition) = trimmed.strip_prefix("{{- if ").and_then(|rest| rest.strip_suffix(" }}")) {
            nested.push(set.contains(&condition));
            continue;
        }
        if nested.is_empty() && (trimmed == "{{- else }}" || trimmed == "{{- end }}") {
            break;
        }
        if trimmed == "{{- end }}" {
            nested.pop();
            continue;
        }
        if nested.contains(&false) || trimmed.starts_with('#') {
            continue;
        }
        if let Some(key) = trimmed.strip_prefix("- name: ") {
            name = Some(key.to_string());
        } else if let Some(value) = trimmed.strip_prefix("value: ") {
            let value = render(value, values);
            let value = value.trim_matches('"').replace("$(POD_NAMESPACE)", NAMESPACE);
            env.push((name.take().expect("a value after its name"), value));
        }
    }
    env
}

fn pod_name(i: usize) -> String {
    format!("{RELEASE}-iggy-server-{i}")
}

/// Pod i's DNS name under the headless Service.
fn pod_dns_name(i: usize) -> String {
    format!("{}.{RELEASE}-iggy-server-headless.{NAMESPACE}.svc.cluster.local", pod_name(i))
}

#[test]
fn the_chart_in_cluster_mode_runs_each_pod_through_the_entrypoint_with_a_roster_by_dns_names() {
    let (values, statefulset, service, configmap) = (chart_file("values.yaml"), chart_file("templates/statefulset.yaml"), chart_file("templates/service.yaml"), chart_file("templates/configmap.yaml"));
    assert_eq!(value(&values, "cluster.enabled"), "false", "a single node unless asked");
    let env = cluster_env(&statefulset, &values, &[]);
    let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("{key} in {env:?}"));
    assert_eq!(get("IGGY_CLUSTER_ENABLED"), "true");
    assert_eq!(get("ROSTER_STATEFULSET"), "iggy-iggy-server");
    assert_eq!(get("ROSTER_HEADLESS_SERVICE"), "iggy-iggy-server-headless");
    assert_eq!(get("ROSTER_NAMESPACE"), NAMESPACE);
    assert_eq!(get("ROSTER_REPLICAS"), "3");
    // Every variable the script requires is given.
    let script = chart_file("files/cluster-entrypoint.sh");
    for required in script.split("${").skip(1).filter_map(|rest| rest.split_once(":?")).map(|(name, _)| name).filter(|name| name.starts_with("ROSTER_")) {
        get(required);
    }
    // The script comes from the ConfigMap, mounted where the command runs it.
    assert!(configmap.contains("cluster-entrypoint.sh: |\n{{ .Files.Get \"files/cluster-entrypoint.sh\" | indent 4 }}"), "{configmap}");
    assert!(configmap.contains("name: {{ include \"iggy-server.fullname\" . }}-entrypoint"), "{configmap}");
    assert!(statefulset.contains("command: [\"/bin/sh\", \"/etc/iggy/cluster-entrypoint.sh\"]"), "{statefulset}");
    assert!(statefulset.contains("mountPath: /etc/iggy") && statefulset.contains("name: {{ include \"iggy-server.fullname\" . }}-entrypoint"), "{statefulset}");
    // Pods start together (a node waits for its peers), each with a volume of its own, and
    // their names resolve before they are ready.
    assert!(statefulset.contains("podManagementPolicy: Parallel"), "{statefulset}");
    assert!(statefulset.contains("volumeClaimTemplates:"), "{statefulset}");
    assert!(service.contains("clusterIP: None\n  publishNotReadyAddresses: true"), "{service}");
    // Without root credentials, cluster mode does not render.
    assert!(configmap.contains("{{- if not .Values.rootCredentialsSecret }}\n{{- fail"), "{configmap}");
    // Outside addresses only when given, one per pod; external Services only when asked, each
    // selecting its one pod by name.
    assert_eq!(value(&values, "cluster.advertisedAddresses"), "[]");
    assert!(!env.iter().any(|(key, _)| key == "ROSTER_ADVERTISED_ADDRESSES"), "{env:?}");
    assert!(configmap.contains("{{- if and .Values.cluster.advertisedAddresses (ne (len .Values.cluster.advertisedAddresses) (int .Values.replicas)) }}\n{{- fail"), "{configmap}");
    assert_eq!(value(&values, "cluster.externalLoadBalancers"), "false");
    let external = chart_file("templates/external-services.yaml");
    assert!(external.starts_with("{{- if and .Values.cluster.enabled .Values.cluster.externalLoadBalancers }}"), "{external}");
    assert!(external.contains("{{- range $ordinal := until (int .Values.replicas) }}") && external.contains("  type: LoadBalancer\n") && external.contains("    statefulset.kubernetes.io/pod-name: {{ $fullname }}-{{ $ordinal }}\n"), "{external}");
    for (port, target) in [("8090", "tcp"), ("8080", "quic"), ("3000", "http"), ("8092", "websocket")] {
        assert!(external.contains(&format!("      port: {port}\n      targetPort: {target}\n")), "{external}");
        assert!(statefulset.contains(&format!("- name: {target}\n              containerPort: {port}\n")), "{statefulset}");
    }
}

/// Runs `command` in pod namespace `namespace` with `hosts` bind-mounted over `/etc/hosts` in a
/// mount namespace of its own (the pod's view of the cluster's DNS).
fn in_pod(command: &mut Command, namespace: &Path, hosts: &Path) {
    use std::os::unix::process::CommandExt;
    join_network_namespace(command, namespace);
    let source = CString::new(hosts.as_os_str().as_encoded_bytes()).expect("a path");
    let (target, root) = (c"/etc/hosts", c"/");
    // SAFETY: between fork and exec the closure calls only unshare(2) and mount(2), which are
    // async-signal-safe, on strings made before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 || libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 || libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `/etc/hosts` as the cluster's DNS answers: each pod's name at its address.
fn write_hosts(path: &Path, addresses: &[std::net::IpAddr]) {
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    for (i, ip) in addresses.iter().enumerate() {
        text.push_str(&format!("\n{ip} {}\n", pod_dns_name(i)));
    }
    // In place: the pods' bind mounts hold this file, not its name.
    std::fs::write(path, text).expect("write the hosts file");
}

struct Pod {
    volume: PathBuf,
    log: PathBuf,
}

/// Each pod's volume and log file under `dir`.
fn pod_volumes(dir: &Path) -> Vec<Pod> {
    (0..PODS)
        .map(|i| {
            let volume = dir.join(pod_name(i));
            std::fs::create_dir_all(&volume).unwrap();
            Pod { volume, log: dir.join(format!("{}.log", pod_name(i))) }
        })
        .collect()
}

/// A directory under `dir` holding `iggy-server` (the binary under test), for the pods' PATH.
fn server_on_path(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(server_binary(), bin.join("iggy-server")).unwrap();
    bin
}

/// Pod i as its container runs: the image's environment, the chart's cluster environment and
/// entrypoint, its host name, its volume; in LAN namespace `slot`.
fn start_pod(i: usize, pod: &Pod, env: &[(String, String)], lan: &Lan, slot: usize, hosts: &Path, bin: &Path) -> Running {
    let (image_env, _) = image_configuration();
    let mut command = Command::new("/bin/sh");
    command.arg(workspace_root().join(CHART).join("files/cluster-entrypoint.sh")).current_dir(&pod.volume).stdin(Stdio::null());
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&pod.log).expect("open the log");
    command.stdout(log.try_clone().expect("clone the log")).stderr(log);
    without_shell_settings(&mut command);
    for (key, value) in image_env {
        // The image keeps its data under the volume's mount point, /var/lib/iggy.
        let value = match value.strip_prefix("/var/lib/iggy/") {
            Some(under_volume) => pod.volume.join(under_volume).display().to_string(),
            None => value,
        };
        command.env(key, value);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command.env("HOSTNAME", pod_name(i)).env("POD_NAME", pod_name(i)).env("POD_NAMESPACE", NAMESPACE);
    // The script's default, /var/lib/iggy/cluster.toml, in the volume.
    command.env("IGGY_CONFIG_PATH", pod.volume.join("cluster.toml"));
    command.env("IGGY_ROOT_PASSWORD", "helm-secret").env("RUST_LOG", "info");
    command.env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    in_pod(&mut command, &lan.namespace_file(slot), hosts);
    Running(command.spawn().expect("spawn the entrypoint"))
}

/// The official CLI in LAN namespace `slot` with `hosts` as its DNS, against `host`; its
/// stdout, or why it failed.
fn cli_at(lan: &Lan, hosts: &Path, slot: usize, host: &str, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new(cli_binary());
    command.args(["--tcp-server-address", &format!("{host}:8090"), "-u", "iggy", "-p", "helm-secret"]).args(args).env_remove("RUST_LOG").stdin(Stdio::null());
    in_pod(&mut command, &lan.namespace_file(slot), hosts);
    let out = command.output().expect("run the iggy CLI");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.success() {
        true => Ok(stdout),
        false => Err(format!("iggy {args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr))),
    }
}

/// Runs the CLI inside pod 0's namespaces against `pod`'s name until it succeeds with output
/// `accepted` takes, for at most `START_TIMEOUT`.
fn cli_until(lan: &Lan, hosts: &Path, pod: usize, args: &[&str], accepted: impl Fn(&str) -> bool, logs: impl Fn() -> String) -> String {
    cli_at_until(lan, hosts, 0, &pod_dns_name(pod), args, accepted, logs)
}

/// Runs the CLI (as `cli_at`) until it succeeds with output `accepted` takes, for at most
/// `START_TIMEOUT`.
fn cli_at_until(lan: &Lan, hosts: &Path, slot: usize, host: &str, args: &[&str], accepted: impl Fn(&str) -> bool, logs: impl Fn() -> String) -> String {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let last = match cli_at(lan, hosts, slot, host, args) {
            Ok(out) if accepted(&out) => return out,
            Ok(out) => out,
            Err(why) => why,
        };
        assert!(Instant::now() < deadline, "iggy {args:?} against {host}: {last}\n{}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_chart_s_cluster_pods_link_by_their_dns_names_and_find_a_pod_restarted_at_another_address() {
    let lan = Lan::create(PODS + 1).unwrap_or_else(|why| panic!("a LAN of network namespaces: {why}"));
    let dir = tempfile::tempdir().unwrap();
    let bin = server_on_path(dir.path());
    let hosts = dir.path().join("hosts");
    let mut addresses: Vec<_> = (0..PODS).map(|i| lan.ip(i)).collect();
    write_hosts(&hosts, &addresses);
    let env = cluster_env(&chart_file("templates/statefulset.yaml"), &chart_file("values.yaml"), &[]);
    assert!(!env.iter().any(|(key, _)| key.starts_with("IGGY_CLUSTER_TLS_")), "TLS only with cluster.tlsSecret: {env:?}");
    let pods = pod_volumes(dir.path());
    let mut running: Vec<Running> = (0..PODS).map(|i| start_pod(i, &pods[i], &env, &lan, i, &hosts, &bin)).collect();
    let logs = || pods.iter().map(|pod| std::fs::read_to_string(&pod.log).unwrap_or_default()).collect::<Vec<_>>().join("\n-----\n");

    // Every pod wrote the same roster, naming each pod by its DNS name.
    let deadline = Instant::now() + START_TIMEOUT;
    while !pods.iter().all(|pod| std::fs::read_to_string(&pod.log).unwrap_or_default().contains("listening on tcp 0.0.0.0:8090")) {
        assert!(Instant::now() < deadline, "not listening within {START_TIMEOUT:?}:\n{}", logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let roster = std::fs::read_to_string(pods[0].volume.join("cluster.toml")).expect("the roster");
    for (i, pod) in pods.iter().enumerate() {
        assert_eq!(std::fs::read_to_string(pod.volume.join("cluster.toml")).unwrap(), roster.replace(&format!("for pod {}", pod_name(0)), &format!("for pod {}", pod_name(i))));
        assert!(roster.contains(&format!("ip = \"{}\"\nreplica_id = {i}\n", pod_dns_name(i))), "{roster}");
    }

    // The CLI, inside the cluster, finds three Healthy nodes by their names and one Leader.
    let healthy = |out: &str| out.matches("| healthy ").count() == PODS && out.matches("| leader ").count() == 1;
    let metadata = cli_until(&lan, &hosts, 0, &["cluster", "metadata"], healthy, logs);
    for i in 0..PODS {
        assert!(metadata.contains(&pod_dns_name(i)), "{metadata}");
    }
    cli_until(&lan, &hosts, 0, &["stream", "create", "helm"], |_| true, logs);
    cli_until(&lan, &hosts, 0, &["topic", "create", "helm", "t", "3", "none"], |_| true, logs);
    cli_until(&lan, &hosts, 1, &["message", "send", "--partition-id", "2", "helm", "t", "before the move"], |_| true, logs);

    // Pod 2 is rescheduled. While it is gone its name resolves nowhere: pods 0 and 1 keep
    // dialing, warning about the name once per interval (30 s), and keep serving.
    drop(running.pop());
    let gone = Instant::now();
    write_hosts(&hosts, &addresses[..2]);
    let unresolved = format!("replica 0: replica 2's address {}:8100 does not resolve", pod_dns_name(2));
    let deadline = Instant::now() + START_TIMEOUT;
    while !std::fs::read_to_string(&pods[0].log).unwrap_or_default().contains(&unresolved) {
        assert!(Instant::now() < deadline, "no warning naming pod 2's name:\n{}", logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    cli_until(&lan, &hosts, 0, &["message", "send", "--partition-id", "0", "helm", "t", "while pod 2 is away"], |_| true, logs);
    let warned = std::fs::read_to_string(&pods[0].log).unwrap().matches(&unresolved).count() as u64;
    assert!(warned <= 1 + gone.elapsed().as_secs() / 30, "{warned} warnings in {:?}:\n{}", gone.elapsed(), logs());
    // It comes back with its volume at another address, and its name follows it. Pods 0 and 1
    // dial it by name and find it there.
    addresses[2] = lan.ip(PODS);
    write_hosts(&hosts, &addresses);
    running.push(start_pod(2, &pods[2], &env, &lan, PODS, &hosts, &bin));
    let metadata = cli_until(&lan, &hosts, 2, &["cluster", "metadata"], healthy, logs);
    assert!(metadata.contains(&pod_dns_name(2)), "{metadata}");
    cli_until(&lan, &hosts, 2, &["message", "send", "--partition-id", "2", "helm", "t", "after the move"], |_| true, logs);
    let polled = cli_until(&lan, &hosts, 2, &["message", "poll", "--first", "--message-count", "10", "helm", "t", "2"], |out| out.contains("after the move"), logs);
    assert!(polled.contains("before the move"), "{polled}");
    drop(running);
}

/// Where the chart mounts `cluster.tlsSecret`'s files.
const TLS_MOUNT: &str = "/etc/iggy-cluster-tls";

/// What the README tells an operator to put in `cluster.tlsSecret`: one certificate for every
/// pod, naming them all by a wildcard DNS SAN under the headless Service, for server and client
/// auth, with the CA that signed it; written under `dir` by the Secret's keys.
fn write_tls_secret(dir: &Path) {
    let authority_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "iggy helm test CA");
    let authority = params.self_signed(&authority_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let wildcard = format!("*.{RELEASE}-iggy-server-headless.{NAMESPACE}.svc.cluster.local");
    let mut params = rcgen::CertificateParams::new(vec![wildcard]).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let certificate = params.signed_by(&key, &authority, &authority_key).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tls.crt"), certificate.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), authority.pem()).unwrap();
}

/// With `cluster.tlsSecret` set, the chart's environment and mount turn the replica plane's
/// mutual TLS on: three pods presenting the one wildcard certificate the README describes link
/// over TLS (each says so at start), elect a leader and replicate what the CLI sends.
#[test]
fn with_cluster_tls_secret_the_chart_s_pods_link_over_mutual_tls_with_one_wildcard_certificate() {
    let (values, statefulset) = (chart_file("values.yaml"), chart_file("templates/statefulset.yaml"));
    assert_eq!(value(&values, "cluster.tlsSecret"), "", "off unless asked");
    // The Secret is mounted read-only where the environment names its files.
    assert!(statefulset.contains(&format!("- name: cluster-tls\n              mountPath: {TLS_MOUNT}\n              readOnly: true")), "{statefulset}");
    assert!(statefulset.contains("- name: cluster-tls\n          secret:\n            secretName: {{ .Values.cluster.tlsSecret }}"), "{statefulset}");
    let lan = Lan::create(PODS).unwrap_or_else(|why| panic!("a LAN of network namespaces: {why}"));
    let dir = tempfile::tempdir().unwrap();
    let bin = server_on_path(dir.path());
    let hosts = dir.path().join("hosts");
    write_hosts(&hosts, &(0..PODS).map(|i| lan.ip(i)).collect::<Vec<_>>());
    let mount = dir.path().join("cluster-tls");
    write_tls_secret(&mount);
    let env: Vec<(String, String)> = cluster_env(&statefulset, &values, &[".Values.cluster.tlsSecret"])
        .into_iter()
        .map(|(key, value)| (key, value.replace(TLS_MOUNT, &mount.display().to_string())))
        .collect();
    let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("{key} in {env:?}"));
    assert_eq!(get("IGGY_CLUSTER_TLS_ENABLED"), "true");
    for (key, file) in [("IGGY_CLUSTER_TLS_CERT_FILE", "tls.crt"), ("IGGY_CLUSTER_TLS_KEY_FILE", "tls.key"), ("IGGY_CLUSTER_TLS_CA_FILE", "ca.crt")] {
        assert_eq!(get(key), mount.join(file).display().to_string());
    }
    let pods = pod_volumes(dir.path());
    let running: Vec<Running> = (0..PODS).map(|i| start_pod(i, &pods[i], &env, &lan, i, &hosts, &bin)).collect();
    let logs = || pods.iter().map(|pod| std::fs::read_to_string(&pod.log).unwrap_or_default()).collect::<Vec<_>>().join("\n-----\n");
    let healthy = |out: &str| out.matches("| healthy ").count() == PODS && out.matches("| leader ").count() == 1;
    cli_until(&lan, &hosts, 0, &["cluster", "metadata"], healthy, logs);
    for pod in &pods {
        let log = std::fs::read_to_string(&pod.log).unwrap();
        assert!(log.contains("(links over mutual TLS)"), "{log}");
        assert!(log.contains("link with replica") && !log.contains("refused"), "{log}");
    }
    cli_until(&lan, &hosts, 0, &["stream", "create", "tls"], |_| true, logs);
    cli_until(&lan, &hosts, 0, &["topic", "create", "tls", "t", "3", "none"], |_| true, logs);
    for partition in 0..PODS {
        cli_until(&lan, &hosts, 1, &["message", "send", "--partition-id", &partition.to_string(), "tls", "t", "over tls"], |_| true, logs);
        cli_until(&lan, &hosts, 2, &["message", "poll", "--first", "--message-count", "10", "tls", "t", &partition.to_string()], |out| out.contains("over tls"), logs);
    }
    drop(running);
}

/// With `cluster.advertisedAddresses`, a client outside the Kubernetes cluster, which cannot
/// resolve the pods' DNS names, is told the addresses it reaches each pod at: the official CLI
/// in a namespace of its own whose DNS knows only those names finds three nodes by them, and
/// sends to and polls each of three partitions (whose primaries spread over the pods) through
/// the pods' outside names. The pods still link by their DNS names.
#[test]
fn with_advertised_addresses_a_client_outside_the_cluster_reaches_every_pod_by_its_outside_name() {
    let lan = Lan::create(PODS + 1).unwrap_or_else(|why| panic!("a LAN of network namespaces: {why}"));
    let outside = PODS;
    let dir = tempfile::tempdir().unwrap();
    let bin = server_on_path(dir.path());
    let addresses: Vec<_> = (0..PODS).map(|i| lan.ip(i)).collect();
    let hosts = dir.path().join("hosts");
    write_hosts(&hosts, &addresses);
    // The outside client's DNS: each pod's outside name (a per-pod load balancer's address,
    // here the pod's own), and none of the pods' cluster names.
    let outside_hosts = dir.path().join("outside-hosts");
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    for (ip, name) in addresses.iter().zip(ADVERTISED) {
        text.push_str(&format!("\n{ip} {name}\n"));
    }
    std::fs::write(&outside_hosts, text).unwrap();
    let env = cluster_env(&chart_file("templates/statefulset.yaml"), &chart_file("values.yaml"), &[".Values.cluster.advertisedAddresses"]);
    assert!(env.iter().any(|(key, value)| key == "ROSTER_ADVERTISED_ADDRESSES" && *value == ADVERTISED.join(" ")), "{env:?}");
    let pods = pod_volumes(dir.path());
    let running: Vec<Running> = (0..PODS).map(|i| start_pod(i, &pods[i], &env, &lan, i, &hosts, &bin)).collect();
    let logs = || pods.iter().map(|pod| std::fs::read_to_string(&pod.log).unwrap_or_default()).collect::<Vec<_>>().join("\n-----\n");

    let healthy = |out: &str| out.matches("| healthy ").count() == PODS && out.matches("| leader ").count() == 1;
    let metadata = cli_at_until(&lan, &outside_hosts, outside, ADVERTISED[0], &["cluster", "metadata"], healthy, logs);
    for i in 0..PODS {
        assert!(metadata.contains(ADVERTISED[i]) && !metadata.contains(&pod_dns_name(i)), "{metadata}");
        let roster = std::fs::read_to_string(pods[i].volume.join("cluster.toml")).unwrap();
        assert!(roster.contains(&format!("ip = \"{}\"\nreplica_id = {i}\nadvertised_address = \"{}\"\n", pod_dns_name(i), ADVERTISED[i])), "{roster}");
    }
    cli_at_until(&lan, &outside_hosts, outside, ADVERTISED[1], &["stream", "create", "outside"], |_| true, logs);
    cli_at_until(&lan, &outside_hosts, outside, ADVERTISED[1], &["topic", "create", "outside", "t", "3", "none"], |_| true, logs);
    for partition in 0..PODS {
        let partition = partition.to_string();
        cli_at_until(&lan, &outside_hosts, outside, ADVERTISED[2], &["message", "send", "--partition-id", &partition, "outside", "t", "from outside"], |_| true, logs);
        cli_at_until(&lan, &outside_hosts, outside, ADVERTISED[0], &["message", "poll", "--first", "--message-count", "10", "outside", "t", &partition], |out| out.contains("from outside"), logs);
    }
    drop(running);
}
