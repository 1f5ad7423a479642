//! Transports: each reads whole request frames from its connections and writes the replies the
//! service layer returns. Nothing here knows a command.

pub mod connection_loop;
pub mod http;
pub mod quic;
pub mod tcp;
pub mod tls;
pub mod ws;

use crate::config::Config;
use crate::runtime::node::Node;
use std::rc::Rc;

/// Binds every enabled binary transport (TCP or TCP+TLS, QUIC, WebSocket or WSS), then starts
/// serving them: each "listening on" line is logged once every listener is bound. The first
/// that cannot bind (or whose certificate cannot be had) stops the start: the error names the
/// transport and its address.
pub async fn listen(config: &Config, node: &Rc<Node>) -> Result<(), String> {
    let failed = |name: &str, address: &str, error: &dyn std::fmt::Display| {
        format!("cannot bind {name} {address}: {error}")
    };
    let tcp = match config.tcp.enabled {
        true => {
            let (address, tls) = (&config.tcp.address, &config.tcp.tls);
            let acceptor = match tls.enabled {
                true => {
                    Some(tls::acceptor("tcp.tls", tls).map_err(|e| failed("tcp", address, &e))?)
                }
                false => None,
            };
            let listener = bind_tcp(address)
                .await
                .map_err(|e| failed("tcp", address, &e))?;
            let local = listener
                .local_addr()
                .map_err(|e| failed("tcp", address, &e))?;
            Some((listener, local, acceptor))
        }
        false => None,
    };
    let quic = match config.quic.enabled {
        true => {
            let address = &config.quic.address;
            let endpoint = quic::bind(&config.quic)
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
            let (address, tls) = (&config.websocket.address, &config.websocket.tls);
            let acceptor = match tls.enabled {
                true => Some(
                    tls::acceptor("websocket.tls", tls)
                        .map_err(|e| failed("websocket", address, &e))?,
                ),
                false => None,
            };
            let listener = bind_tcp(address)
                .await
                .map_err(|e| failed("websocket", address, &e))?;
            let local = listener
                .local_addr()
                .map_err(|e| failed("websocket", address, &e))?;
            Some((listener, local, acceptor))
        }
        false => None,
    };
    let ports = &node.shared.listening;
    if let Some((listener, local, acceptor)) = tcp {
        ports.set("tcp", local.port());
        let name = if acceptor.is_some() { "tcp+tls" } else { "tcp" };
        tracing::info!("listening on {name} {local}");
        compio::runtime::spawn(tcp::serve(listener, node.clone(), acceptor)).detach();
    }
    if let Some((endpoint, local)) = quic {
        ports.set("quic", local.port());
        tracing::info!("listening on quic {local}");
        compio::runtime::spawn(quic::serve(endpoint, node.clone())).detach();
    }
    if let Some((listener, local, acceptor)) = websocket {
        ports.set("websocket", local.port());
        let name = if acceptor.is_some() { "wss" } else { "ws" };
        tracing::info!("listening on {name} {local}");
        compio::runtime::spawn(ws::serve(listener, node.clone(), acceptor)).detach();
    }
    Ok(())
}

/// Binds a TCP listener. A previous process's io_uring may hold the port for a moment after
/// it died (its ring is torn down asynchronously), so `AddrInUse` is retried for a few seconds.
pub async fn bind_tcp(address: &str) -> std::io::Result<compio::net::TcpListener> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match compio::net::TcpListener::bind(address).await {
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
