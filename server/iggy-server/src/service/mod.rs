//! The service layer: from an admitted request frame to its reply, whatever the transport —
//! sessions and authentication, the version gate, decoding, permissions, routing to the
//! metadata or a partition group, reply encoding.

pub mod auth;
pub mod dispatch;
pub mod frame;
pub mod replies;
pub mod routing;
pub mod snapshot;
pub mod user_commands;
