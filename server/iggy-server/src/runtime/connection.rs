//! What the node keeps per connection, whatever its transport.

/// What a connection knows about its peer, for `me` and the client list.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub id: u32,
    pub address: String,
    pub transport: &'static str,
    pub user_id: Option<u32>,
}

/// The session a connection is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub client: u128,
    pub session: u64,
    pub user_id: u32,
    pub protocol: u32,
}

/// Per-connection state.
#[derive(Debug, Default)]
pub struct Connection {
    pub id: u32,
    pub bound: Option<Bound>,
}
