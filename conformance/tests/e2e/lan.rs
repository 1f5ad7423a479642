//! A LAN of network namespaces: each node of a test cluster in a Linux network stack of its
//! own (its own interfaces, routes, ports and TCP state), wired to one bridge in the test's
//! namespace through a veth pair, as machines on a switch are. The test process reaches every
//! node through the bridge's address, as a client on the same LAN would.
//!
//! Unlike the loopback cluster's proxy, which closes connections, `unplug` takes the node's
//! cable out: its packets are dropped silently, its TCP connections see no FIN or RST and
//! only time out, and `plug` puts the cable back with those connections possibly still alive.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and `ip` from iproute2; `Lan::create` fails
//! with the reason otherwise. Namespaces and bridges are named after the test process's pid;
//! `Drop` deletes them, and `create` deletes those a killed test process left.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces of this harness start with it; the rest of the name is `<pid>-<lan>-<node>`.
const NAMESPACE_PREFIX: &str = "iggy-e2e-";
/// Bridges (and the test's side of each veth) start with these, then the pid in hex (six
/// digits, see `tag`).
const BRIDGE_PREFIX: &str = "igb";
const HOST_LINK_PREFIX: &str = "igv";

static LANS: AtomicU32 = AtomicU32::new(0);

pub struct Lan {
    namespaces: Vec<String>,
    host_links: Vec<String>,
    bridge: String,
    /// The /24 every node and the bridge are on: `10.a.b.0`.
    subnet: [u8; 2],
    _subnet_claim: SubnetClaim,
}

impl Lan {
    /// `n` namespaces, node i at `10.a.b.(i+1)`, the bridge at `10.a.b.254`.
    pub fn create(n: usize) -> Result<Self, String> {
        assert!((1..=8).contains(&n), "a LAN of {n} nodes");
        remove_stale();
        let pid = std::process::id();
        let lan = LANS.fetch_add(1, Ordering::SeqCst);
        let tag = tag(pid, lan);
        let (subnet, claim) = SubnetClaim::take()?;
        let mut this = Lan {
            namespaces: (0..n)
                .map(|i| format!("{NAMESPACE_PREFIX}{pid}-{lan}-{i}"))
                .collect(),
            host_links: (0..n)
                .map(|i| format!("{HOST_LINK_PREFIX}{tag}{i}"))
                .collect(),
            bridge: bridge_name(pid, lan),
            subnet,
            _subnet_claim: claim,
        };
        // On failure, Drop removes what was made so far.
        this.wire()?;
        Ok(this)
    }

    fn wire(&mut self) -> Result<(), String> {
        let [a, b] = self.subnet;
        ip(&["link", "add", &self.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("10.{a}.{b}.254/24"),
            "dev",
            &self.bridge,
        ])?;
        ip(&["link", "set", &self.bridge, "up"])?;
        for i in 0..self.namespaces.len() {
            let (namespace, link) = (&self.namespaces[i], &self.host_links[i]);
            ip(&["netns", "add", namespace])?;
            ip(&[
                "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace,
            ])?;
            ip(&["link", "set", link, "master", &self.bridge])?;
            ip(&["link", "set", link, "up"])?;
            let address = format!("{}/24", self.ip(i));
            ip(&["-n", namespace, "addr", "add", &address, "dev", "eth0"])?;
            ip(&["-n", namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Node i's address on the LAN.
    pub fn ip(&self, i: usize) -> IpAddr {
        let [a, b] = self.subnet;
        IpAddr::V4(Ipv4Addr::new(10, a, b, i as u8 + 1))
    }

    /// The file a process joins node i's namespace through (setns(2)).
    pub fn namespace_file(&self, i: usize) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.namespaces[i])
    }

    /// Takes node i's cable out: nothing reaches it or leaves it, and nobody is told.
    pub fn unplug(&self, i: usize) {
        ip(&["link", "set", &self.host_links[i], "down"]).expect("unplug");
    }

    /// Puts node i's cable back.
    pub fn plug(&self, i: usize) {
        ip(&["link", "set", &self.host_links[i], "up"]).expect("plug");
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // A namespace's veth end goes with it, and the test's end with its peer.
        for namespace in &self.namespaces {
            let _ = ip(&["netns", "delete", namespace]);
        }
        let _ = ip(&["link", "delete", &self.bridge]);
    }
}

/// Hex digits of a pid in a tag: Linux pids stay below 2^22.
const PID_DIGITS: usize = 6;

/// What names a LAN's bridge and links after test process `pid`'s LAN number `lan`: the pid
/// in hex on a fixed width, so a stale bridge's pid is read back whole (the width of a
/// variable one is ambiguous, and a short prefix of it is some live process's pid).
fn tag(pid: u32, lan: u32) -> String {
    format!("{pid:0PID_DIGITS$x}{lan}")
}

/// The bridge of test process `pid`'s LAN number `lan`.
fn bridge_name(pid: u32, lan: u32) -> String {
    format!("{BRIDGE_PREFIX}{}", tag(pid, lan))
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e} (iproute2 is needed)", args.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "ip {}: {} (network namespaces need root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

fn ip_output(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes the namespaces and bridges of test processes that are gone (killed before their
/// `Drop` ran).
fn remove_stale() {
    for line in ip_output(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(NAMESPACE_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse().ok());
        if pid.is_some_and(|pid| !alive(pid)) {
            let _ = ip(&["netns", "delete", name]);
        }
    }
    for line in ip_output(&["-o", "link", "show", "type", "bridge"]).lines() {
        // "7: igb1a2b30: <BROADCAST,...>"
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        if bridge_is_stale(name) {
            let _ = ip(&["link", "delete", name]);
        }
    }
}

/// Whether bridge `name` is one of this harness's whose test process is gone.
fn bridge_is_stale(name: &str) -> bool {
    let Some(tag) = name.strip_prefix(BRIDGE_PREFIX) else {
        return false;
    };
    tag.get(..PID_DIGITS)
        .and_then(|pid| u32::from_str_radix(pid, 16).ok())
        .is_some_and(|pid| !alive(pid))
}

/// A /24 no other test process uses at the same time: an exclusive lock (flock(2)) on a file
/// per subnet in a directory every test process shares. The kernel releases the lock when its
/// holder exits however it ends, so a killed test process frees its subnet, and nothing is
/// taken over by reading who held it (two processes finding the same dead holder could both
/// take its subnet). The files stay: one removed while another process is opening it would
/// let two processes lock two different files of one subnet. The holder's pid is written in
/// its file for harnesses of before the locks, and an unlocked file naming a live pid is
/// theirs.
struct SubnetClaim {
    /// Holds the lock while open.
    locked: std::fs::File,
}

impl Drop for SubnetClaim {
    /// Emptied under the lock: a live pid left in it would keep the subnet from later LANs.
    fn drop(&mut self) {
        let _ = self.locked.set_len(0);
    }
}

/// Whether the claim at `path` names a live process: a harness of before the locks holds it.
fn named_pid_alive(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|pid| pid.trim().parse().ok())
        .is_some_and(alive)
}

impl SubnetClaim {
    fn take() -> Result<([u8; 2], Self), String> {
        let dir = std::env::temp_dir().join("iggy-e2e-subnets");
        Self::take_in(&dir, std::process::id() as usize)
    }

    /// The first free subnet from slot `start` on, claimed by a file in `dir`.
    fn take_in(dir: &std::path::Path, start: usize) -> Result<([u8; 2], Self), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for k in 0..(100 * 256) {
            let slot = (start + k) % (100 * 256);
            let subnet = [100 + (slot / 256) as u8, (slot % 256) as u8];
            // A subnet on some interface already is never used.
            let prefix = format!("10.{}.{}.0/24", subnet[0], subnet[1]);
            if !ip_output(&["-o", "addr", "show", "to", &prefix])
                .trim()
                .is_empty()
            {
                continue;
            }
            let path = dir.join(format!("{}.{}", subnet[0], subnet[1]));
            let Ok(file) = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
            else {
                continue;
            };
            if file.try_lock().is_err() || named_pid_alive(&path) {
                continue;
            }
            // Read by harnesses of before the locks, which take no lock but skip a claim
            // naming a live pid (and honoured here the same way, above).
            let _ = file.set_len(0);
            let _ =
                std::io::Write::write_all(&mut &file, std::process::id().to_string().as_bytes());
            return Ok((subnet, SubnetClaim { locked: file }));
        }
        Err("no free 10.x.y.0/24 for a test LAN".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim is held while its holder lives and free once it is gone, whatever the holder
    /// left in its file: a test process killed between creating its claim and writing its
    /// pid leaves an empty one, which must not keep the subnet from every later LAN.
    #[test]
    fn a_subnet_claim_excludes_others_while_held_and_is_free_once_its_holder_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let (first, held) = SubnetClaim::take_in(dir.path(), 7).unwrap();
        assert_eq!(first, [100, 7]);
        let (second, _other) = SubnetClaim::take_in(dir.path(), 7).unwrap();
        assert_ne!(second, first, "a held subnet is not claimed twice");
        drop(held);
        assert_eq!(SubnetClaim::take_in(dir.path(), 7).unwrap().0, first);
        // Left by a holder killed before it wrote anything.
        std::fs::write(dir.path().join("100.9"), b"").unwrap();
        assert_eq!(SubnetClaim::take_in(dir.path(), 9).unwrap().0, [100, 9]);
        // Held by a harness of before the locks: its file names a live pid, pid 1's here.
        std::fs::write(dir.path().join("100.11"), b"1").unwrap();
        assert_eq!(SubnetClaim::take_in(dir.path(), 11).unwrap().0, [100, 12]);
    }

    /// A pid no process has, whose hex form starts with 1 (pid 1 always runs).
    fn dead_pid() -> u32 {
        (0x10_0000..0x20_0000)
            .rev()
            .find(|pid| !alive(*pid))
            .expect("a free pid")
    }

    /// A killed test process's bridge is found stale by its name, whatever the digits its
    /// pid starts with (a short prefix of them is some live process's pid, pid 1's at least).
    #[test]
    fn a_dead_test_process_bridge_is_stale_and_a_live_one_is_not() {
        let dead = bridge_name(dead_pid(), 3);
        assert!(bridge_is_stale(&dead), "{dead}");
        let ours = bridge_name(std::process::id(), 12);
        assert!(!bridge_is_stale(&ours), "{ours}");
        assert!(!bridge_is_stale("docker0") && !bridge_is_stale("br-1"));
        assert!(
            ours.len() <= 15,
            "{ours}: longer than an interface name may be"
        );
    }
}
