//! Transports: each reads whole request frames from its connections and writes the replies the
//! service layer returns. Nothing here knows a command.

pub mod connection_loop;
pub mod http;
pub mod quic;
pub mod tcp;
pub mod tls;
pub mod ws;
pub mod ws_gate;

use crate::config::Config;
use crate::runtime::node::Node;
use crate::service::frame::{self, HEADER_SIZE};
use compio::net::TcpListener;
use compio::tls::TlsAcceptor;
use std::net::SocketAddr;
use std::rc::Rc;

/// A bound stream listener: the listener, the address it bound, and its TLS acceptor if any.
pub type Bound = (TcpListener, SocketAddr, Option<TlsAcceptor>);

/// The next connection `listener` accepts (a failed accept is logged and skipped), with
/// TCP_NODELAY set, and its slot under `limits.max_connections`: `None` at the limit, logged.
pub async fn accept(
    listener: &TcpListener,
    node: &Rc<Node>,
    transport: &str,
) -> (
    compio::net::TcpStream,
    SocketAddr,
    Option<crate::runtime::node::ConnectionGuard>,
) {
    let (stream, peer) = loop {
        match listener.accept().await {
            Ok(accepted) => break accepted,
            Err(error) => {
                accept_failed(node, transport, &error);
                // Out of descriptors (or memory) the next accept fails the same way at once:
                // the pending connections wait in the backlog while the loop pauses.
                compio::time::sleep(ACCEPT_RETRY_PAUSE).await;
            }
        }
    };
    if let Err(error) = stream.set_nodelay(true) {
        tracing::warn!("{transport} {peer}: cannot set TCP_NODELAY: {error}");
    }
    let guard = node.admit();
    if guard.is_none() {
        connection_refused(node, transport, peer);
    }
    (stream, peer, guard)
}

/// Logs a connection refused at `limits.max_connections`, at most once per interval for all
/// transports (with the count held back): a client that reconnects at once would otherwise
/// write a line per attempt.
pub fn connection_refused(node: &Node, transport: &str, peer: SocketAddr) {
    let due = node.connection_refused.due(std::time::Instant::now());
    if let Some(held_back) = due {
        tracing::warn!(
            "{transport} {peer}: refused, connection limit reached ({}; {held_back} more \
             refused since the last warning)",
            node.connections.limited_by
        );
    }
}

/// The answer to the first request of a connection above `limits.max_connections`, on every
/// transport: the status CannotEstablishConnection, which the SDK reports from `connect`
/// instead of redialing a silent close or a refused handshake (it did, for as long as it ran);
/// an eviction for a header that is not a request.
pub fn capacity_reply(header: &[u8; HEADER_SIZE]) -> Vec<u8> {
    match frame::admit_header(header, u32::MAX) {
        Ok(admitted) => frame::error_reply(
            &admitted.header,
            admitted.operation,
            iggy_generated::errors::ErrorCode::CannotEstablishConnection,
        ),
        Err(error) => frame::eviction(frame::client_of(header), error.eviction_reason()),
    }
}

/// Takes a slot for answering a connection over the limit, or `None` when
/// [`REFUSALS_MAX`](crate::runtime::host::REFUSALS_MAX) answers already run (the connection is
/// then closed at once); the slot is given back when the guard drops.
pub fn refusal_slot(node: &Rc<Node>) -> Option<RefusalSlot> {
    if node.refusals.get() >= crate::runtime::host::REFUSALS_MAX {
        return None;
    }
    node.refusals.set(node.refusals.get() + 1);
    Some(RefusalSlot(node.clone()))
}

pub struct RefusalSlot(Rc<Node>);

impl Drop for RefusalSlot {
    fn drop(&mut self) {
        self.0.refusals.set(self.0.refusals.get() - 1);
    }
}

/// How long a stream listener waits after a failed accept before it accepts again.
const ACCEPT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Logs a failed accept, at most once per interval for all listeners (with the count held
/// back), naming the limit to raise when the process ran out of descriptors.
fn accept_failed(node: &Node, transport: &str, error: &std::io::Error) {
    let Some(held_back) = node.accept_failed.due(std::time::Instant::now()) else {
        return;
    };
    let hint = match error.raw_os_error() {
        Some(libc::EMFILE) => {
            ": the process's open-files limit is reached (raise ulimit -n, or LimitNOFILE= \
             under systemd); connections wait in the listen backlog until descriptors free up"
        }
        Some(libc::ENFILE) => ": the system's open-files limit (fs.file-max) is reached",
        _ => "",
    };
    tracing::warn!(
        "{transport} accept failed: {error}{hint} ({held_back} more failed accepts since the \
         last warning)"
    );
}

/// Binds the stream listener of transport `name` at `address`, with the TLS acceptor of `tls`
/// (its config section and settings) when TLS is enabled. An error names the transport and the
/// address.
pub async fn bind_stream(
    name: &str,
    address: &str,
    tls: Option<(&str, &crate::config::Tls)>,
) -> Result<Bound, String> {
    let failed = |error: &dyn std::fmt::Display| format!("cannot bind {name} {address}: {error}");
    let acceptor = match tls {
        Some((section, tls)) if tls.enabled => {
            Some(tls::acceptor(section, tls).map_err(|e| failed(&e))?)
        }
        _ => None,
    };
    let listener = bind_tcp(address).await.map_err(|e| failed(&e))?;
    let local = listener.local_addr().map_err(|e| failed(&e))?;
    Ok((listener, local, acceptor))
}

/// What a graceful stop must close itself. A stream transport's connections end with the
/// process (the kernel sends their FIN); a QUIC connection ends only by a CONNECTION_CLOSE the
/// endpoint sends, or else by each client's idle timeout.
pub struct Listeners {
    quic: Option<compio::quic::Endpoint>,
}

impl Listeners {
    /// Closes every QUIC connection (its clients reconnect at once) and stops accepting new
    /// ones, then waits a moment for the closes to go out.
    pub async fn close(&self) {
        let Some(endpoint) = &self.quic else {
            return;
        };
        endpoint.close(compio::quic::VarInt::from_u32(0), b"server shutdown");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while endpoint.open_connections() > 0 && std::time::Instant::now() < deadline {
            compio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// Every enabled binary transport's listener, bound and not yet serving ([`bind`]).
pub struct BoundListeners {
    tcp: Option<Bound>,
    quic: Option<(compio::quic::Endpoint, SocketAddr)>,
    websocket: Option<Bound>,
}

/// Binds every enabled binary transport (TCP or TCP+TLS, QUIC, WebSocket or WSS), serving none
/// yet: the first that cannot bind (or whose certificate cannot be had) stops the start before
/// the root user is created or any client served; the error names the transport and its
/// address.
pub async fn bind(config: &Config, quic_reset_key: &[u8]) -> Result<BoundListeners, String> {
    let failed = |name: &str, address: &str, error: &dyn std::fmt::Display| {
        format!("cannot bind {name} {address}: {error}")
    };
    let tcp = match config.tcp.enabled {
        true => {
            let tls = Some(("tcp.tls", &config.tcp.tls));
            Some(bind_stream("tcp", &config.tcp.address, tls).await?)
        }
        false => None,
    };
    let quic = match config.quic.enabled {
        true => {
            let address = &config.quic.address;
            let endpoint = quic::bind(&config.quic, config.limits.max_frame_size, quic_reset_key)
                .await
                .map_err(|e| failed("quic", address, &e))?;
            let local = endpoint
                .local_addr()
                .map_err(|e| failed("quic", address, &e))?;
            Some((endpoint, local))
        }
        false => None,
    };
    let websocket = match config.websocket.enabled {
        true => {
            let tls = Some(("websocket.tls", &config.websocket.tls));
            Some(bind_stream("websocket", &config.websocket.address, tls).await?)
        }
        false => None,
    };
    Ok(BoundListeners {
        tcp,
        quic,
        websocket,
    })
}

impl BoundListeners {
    /// Starts serving every bound listener; each "listening on" line is logged now.
    pub fn serve(self, node: &Rc<Node>) -> Listeners {
        let ports = &node.shared.listening;
        if let Some((listener, local, acceptor)) = self.tcp {
            ports.set("tcp", local.port());
            let name = if acceptor.is_some() { "tcp+tls" } else { "tcp" };
            tracing::info!("listening on {name} {local}");
            compio::runtime::spawn(tcp::serve(listener, node.clone(), acceptor)).detach();
        }
        let mut listeners = Listeners { quic: None };
        if let Some((endpoint, local)) = self.quic {
            ports.set("quic", local.port());
            tracing::info!("listening on quic {local}");
            listeners.quic = Some(endpoint.clone());
            compio::runtime::spawn(quic::serve(endpoint, node.clone())).detach();
        }
        if let Some((listener, local, acceptor)) = self.websocket {
            ports.set("websocket", local.port());
            let name = if acceptor.is_some() { "wss" } else { "ws" };
            tracing::info!("listening on {name} {local}");
            compio::runtime::spawn(ws::serve(listener, node.clone(), acceptor)).detach();
        }
        listeners
    }
}

/// Connections a stream listener's backlog holds before the kernel drops SYNs (each dropped
/// one costs its client a second's retransmit): a burst of reconnecting clients, every SDK
/// client of a restarted node at once, overflowed compio's 128 (the kernel caps it at
/// `net.core.somaxconn`).
const LISTEN_BACKLOG: i32 = 1024;

/// Binds a TCP listener (with `SO_REUSEADDR`, as `TcpListener::bind` does) on the first of
/// `address`'s socket addresses that binds. A previous process's io_uring may hold the port for
/// a moment after it died (its ring is torn down asynchronously), so `AddrInUse` is retried for
/// a few seconds.
pub async fn bind_tcp(address: &str) -> std::io::Result<compio::net::TcpListener> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match bind_tcp_once(address).await {
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                compio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            result => return result,
        }
    }
}

async fn bind_tcp_once(address: &str) -> std::io::Result<compio::net::TcpListener> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the address resolves to no socket address",
    );
    for addr in address.to_socket_addrs()? {
        let socket = match addr {
            SocketAddr::V4(_) => compio::net::TcpSocket::new_v4().await?,
            SocketAddr::V6(_) => compio::net::TcpSocket::new_v6().await?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).await {
            Ok(()) => return socket.listen(LISTEN_BACKLOG).await,
            Err(error) => last = error,
        }
    }
    Err(last)
}
