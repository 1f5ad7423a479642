//! systemd service notification (`sd_notify` protocol): `READY=1` once every enabled listener
//! accepts, `WATCHDOG=1` at half of `WATCHDOG_USEC`, `STOPPING=1` on shutdown. Always built
//! (a datagram to a socket, no library): without `NOTIFY_SOCKET` nothing is sent.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Where notifications go: the socket systemd passed in `NOTIFY_SOCKET`.
pub struct Notifier {
    socket: UnixDatagram,
    path: String,
}

impl Notifier {
    /// From the environment; `None` when not started by systemd with `Type=notify`.
    pub fn from_env() -> Option<Notifier> {
        Notifier::new(&std::env::var("NOTIFY_SOCKET").ok()?)
    }

    pub fn new(path: &str) -> Option<Notifier> {
        let socket = UnixDatagram::unbound().ok()?;
        Some(Notifier {
            socket,
            path: path.to_string(),
        })
    }

    /// Sends one state line, e.g. `READY=1`.
    pub fn notify(&self, state: &str) -> std::io::Result<()> {
        if let Some(name) = self.path.strip_prefix('@') {
            // An abstract socket name.
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            self.socket
                .send_to_addr(state.as_bytes(), &address)
                .map(|_| ())
        } else {
            self.socket
                .send_to(state.as_bytes(), &self.path)
                .map(|_| ())
        }
    }
}

/// Half the watchdog interval systemd asked for in `WATCHDOG_USEC`, if any.
pub fn watchdog_interval(watchdog_usec: Option<&str>) -> Option<Duration> {
    let usec: u64 = watchdog_usec?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_a_fake_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier::new(path.to_str().unwrap()).unwrap();
        for state in ["READY=1", "WATCHDOG=1", "STOPPING=1"] {
            notifier.notify(state).unwrap();
            let mut buffer = [0u8; 64];
            let n = listener.recv(&mut buffer).unwrap();
            assert_eq!(&buffer[..n], state.as_bytes());
        }
    }

    #[test]
    fn watchdog_pings_at_half_the_interval() {
        assert_eq!(
            watchdog_interval(Some("10000000")),
            Some(Duration::from_secs(5))
        );
        assert_eq!(watchdog_interval(Some("0")), None);
        assert_eq!(watchdog_interval(None), None);
    }
}
