//! What the node keeps per connection, whatever its transport.

/// What a connection knows about its peer, for `me` and the client list.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub id: u32,
    pub address: String,
    pub transport: &'static str,
    pub user_id: Option<u32>,
    /// The VSR client of the session the connection's requests run as: its group memberships.
    pub client: Option<u128>,
}

/// The session a connection is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub client: u128,
    pub session: u64,
    pub user_id: u32,
    pub protocol: u32,
}

/// Who finds the replica that serves a request in a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Routing {
    /// The client (the binary SDK, which keeps a link to every replica): a replica that does
    /// not lead the request's group refuses it with NotPrimary (89), and the client learns its
    /// routes from that.
    #[default]
    ByClient,
    /// This node (the HTTP client talks to the one node it is given): writes are relayed to
    /// their group's primary, and reads are served from this replica once it is current.
    ByServer,
}

/// Per-connection state.
#[derive(Debug, Default)]
pub struct Connection {
    pub id: u32,
    pub bound: Option<Bound>,
    pub routing: Routing,
    /// The largest reply its client reads, when below the frame limit: a QUIC client reads a
    /// reply into a buffer of fixed size (`quic.max_reply_size`).
    pub reply_max: Option<usize>,
}
