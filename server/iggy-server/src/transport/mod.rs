//! Transports: each reads whole request frames from its connections and writes the replies the
//! service layer returns. Nothing here knows a command.

pub mod http;
pub mod tcp;
