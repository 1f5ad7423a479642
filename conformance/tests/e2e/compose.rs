//! `deploy/compose/docker-compose.yml` run outside containers (this machine has no Docker
//! daemon): a LAN of network namespaces (`lan.rs`) stands for the compose network, and each
//! service's process is started as its container would be, with the image's environment (the
//! Dockerfile's `ENV` lines: every listener on 0.0.0.0 and the same ports on every node), the
//! service's `environment` and `command`, and `deploy/compose/cluster.toml` with the compose
//! network's addresses replaced by the LAN's. The official SDK, given node 0, finds the three
//! nodes and one Leader, and a message sent through it is read back.

use crate::docker_image::{Running, image_configuration};
use crate::harness::*;
use crate::lan::Lan;
use iggy::prelude::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One service of the compose file: what its container is started with.
struct Service {
    name: String,
    command: Vec<String>,
    environment: Vec<(String, String)>,
    /// Its fixed address on the compose network.
    address: String,
    volumes: Vec<String>,
}

/// The services of `deploy/compose/docker-compose.yml`, read as the file is written: a service
/// is a two-space-indented key under `services:`, its keys four spaces in, list items and
/// mapping entries six (the network's `ipv4_address` eight).
fn compose_services() -> Vec<Service> {
    let text = std::fs::read_to_string(workspace_root().join("deploy/compose/docker-compose.yml"))
        .expect("read docker-compose.yml");
    let mut services: Vec<Service> = Vec::new();
    let mut in_services = false;
    let mut section = "";
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if indent == 0 {
            in_services = trimmed == "services:";
            continue;
        }
        if !in_services {
            continue;
        }
        if indent == 2 {
            let name = trimmed.strip_suffix(':').expect("a service name");
            services.push(Service { name: name.to_string(), command: Vec::new(), environment: Vec::new(), address: String::new(), volumes: Vec::new() });
            continue;
        }
        let service = services.last_mut().expect("inside a service");
        if indent == 4 {
            let (key, value) = trimmed.split_once(':').expect("key: value");
            section = match key {
                "environment" => "environment",
                "volumes" => "volumes",
                "networks" => "networks",
                _ => "",
            };
            if key == "command" {
                service.command = serde_json::from_str(value.trim()).expect("command in exec form");
            }
        } else if section == "environment" {
            let (key, value) = trimmed.split_once(": ").expect("KEY: value");
            service.environment.push((key.to_string(), value.to_string()));
        } else if section == "volumes" {
            service.volumes.push(trimmed.trim_start_matches("- ").to_string());
        } else if let Some(address) = trimmed.strip_prefix("ipv4_address: ") {
            service.address = address.to_string();
        }
    }
    services
}

/// The value a service's environment gives `key`, with `${VAR:?message}` replaced by `secret`.
fn setting(service: &Service, key: &str, secret: &str) -> Option<String> {
    let (_, value) = service.environment.iter().find(|(k, _)| k == key)?;
    Some(if value.starts_with("${") { secret.to_string() } else { value.clone() })
}

/// Service `service` as its container runs it, in LAN namespace `namespace`, its volume
/// `volume` and the cluster file at `config`, its output in `log`.
fn service_command(service: &Service, volume: &Path, config: &Path, namespace: &Path, log: &Path, password: &str) -> Command {
    let (image_env, entrypoint) = image_configuration();
    let mut command = Command::new(server_binary());
    command.args(&entrypoint[1..]).args(&service.command).current_dir(volume).stdin(Stdio::null()).env("RUST_LOG", "info");
    let log = std::fs::File::create(log).expect("create the log");
    command.stdout(log.try_clone().expect("clone the log")).stderr(log);
    without_shell_settings(&mut command);
    for (key, value) in image_env {
        // The image keeps its data under the volume's mount point, /var/lib/iggy.
        let value = match value.strip_prefix("/var/lib/iggy/") {
            Some(under_volume) => volume.join(under_volume).display().to_string(),
            None => value,
        };
        command.env(key, value);
    }
    for (key, _) in &service.environment {
        let value = setting(service, key, password).expect("set");
        let value = if key == "IGGY_CONFIG_PATH" { config.display().to_string() } else { value };
        command.env(key, value);
    }
    join_network_namespace(&mut command, namespace);
    command
}

#[test]
fn every_compose_service_mounts_the_cluster_file_its_environment_names_and_a_volume_of_its_own() {
    let services = compose_services();
    let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["node-0", "node-1", "node-2"]);
    for (i, service) in services.iter().enumerate() {
        assert_eq!(service.command, ["--replica-id", &i.to_string()], "{}", service.name);
        let config = setting(service, "IGGY_CONFIG_PATH", "").expect("IGGY_CONFIG_PATH");
        assert!(service.volumes.contains(&format!("./cluster.toml:{config}:ro")), "{}: {:?}", service.name, service.volumes);
        assert!(service.volumes.contains(&format!("node-{i}:/var/lib/iggy")), "{}: {:?}", service.name, service.volumes);
        assert!(setting(service, "IGGY_ROOT_PASSWORD", "x").is_some(), "{}", service.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_cluster_serves_the_sdk_through_node_zero() {
    let services = compose_services();
    let lan = Lan::create(services.len()).unwrap_or_else(|why| panic!("a LAN of network namespaces: {why}"));
    let dir = tempfile::tempdir().unwrap();
    let mut cluster_file = std::fs::read_to_string(workspace_root().join("deploy/compose/cluster.toml")).expect("read cluster.toml");
    for (i, service) in services.iter().enumerate() {
        let quoted = format!("\"{}\"", service.address);
        assert!(cluster_file.contains(&quoted), "cluster.toml names {} at {}", service.name, service.address);
        cluster_file = cluster_file.replace(&quoted, &format!("\"{}\"", lan.ip(i)));
    }
    let config = dir.path().join("cluster.toml");
    std::fs::write(&config, cluster_file).unwrap();
    let password = "compose-secret";
    let mut running = Vec::new();
    for (i, service) in services.iter().enumerate() {
        let volume = dir.path().join(&service.name);
        std::fs::create_dir_all(&volume).unwrap();
        let log = dir.path().join(format!("{}.log", service.name));
        let command = service_command(service, &volume, &config, &lan.namespace_file(i), &log, password);
        running.push((Running(tokio::task::block_in_place(|| { let mut command = command; command.spawn() }).expect("spawn iggy-server")), log));
    }
    let logs = || running.iter().map(|(_, log)| std::fs::read_to_string(log).unwrap_or_default()).collect::<Vec<_>>().join("\n-----\n");
    let deadline = Instant::now() + START_TIMEOUT;
    while !running.iter().all(|(_, log)| std::fs::read_to_string(log).unwrap_or_default().contains("listening on tcp 0.0.0.0:8090")) {
        assert!(Instant::now() < deadline, "not listening within {START_TIMEOUT:?}:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let client = IggyClient::from_connection_string(&format!("iggy://iggy:{password}@{}:8090", lan.ip(0))).expect("connection string");
    within("connect", client.connect()).await.unwrap_or_else(|e| panic!("connect: {e}\n{}", logs()));
    let deadline = Instant::now() + START_TIMEOUT;
    let metadata = loop {
        let metadata = ok("get_cluster_metadata", within("metadata", client.get_cluster_metadata()).await);
        if metadata.nodes.iter().filter(|node| node.role == ClusterNodeRole::Leader).count() == 1 {
            break metadata;
        }
        assert!(Instant::now() < deadline, "no single Leader: {metadata:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ips: Vec<String> = metadata.nodes.iter().map(|node| node.ip.clone()).collect();
    assert_eq!(ips, (0..3).map(|i| lan.ip(i).to_string()).collect::<Vec<_>>(), "{metadata:?}");
    assert!(metadata.nodes.iter().all(|node| node.endpoints.tcp == 8090), "{metadata:?}");

    ok("create stream", within("create stream", client.create_stream("compose", &StreamCreateOptions::default())).await);
    ok("create topic", within("create topic", client.create_topic(&name("compose"), "t", &topic_options(3))).await);
    for partition in 0..3 {
        let mut messages = vec![IggyMessage::builder().payload(format!("p{partition}").into()).build().unwrap()];
        ok("send", within("send", client.send_messages(&name("compose"), &name("t"), &Partitioning::partition_id(partition), &mut messages)).await);
        let polled = ok("poll", within("poll", client.poll_messages(&name("compose"), &name("t"), Some(partition), &Consumer::new(name("reader")), &PollingStrategy::offset(0), 1, false)).await);
        assert_eq!(polled.messages.len(), 1, "partition {partition}");
        assert_eq!(&polled.messages[0].payload[..], format!("p{partition}").as_bytes());
    }
}
