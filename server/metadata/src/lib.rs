//! iggy-metadata: the replicated metadata state and its state machine, sans-IO.
//!
//! - [`model`]: streams, topics, partitions, consumer groups, users, tokens, sessions;
//! - [`machine`]: `apply(op) -> (reply, effects)` over `&mut Metadata`, the journaled
//!   [`machine::Envelope`], registers and evictions;
//! - [`replies`]: reply bodies encoded from the model (with partition figures supplied by the
//!   caller), [`options`]: option blocks and their catalog, [`snapshot`]: the checkpointed model,
//!   [`permissions`]: permissions to and from the wire;
//! - [`reconcile`]: what a replica does with its partitions after a metadata state transfer;
//! - [`retirement`]: the metadata primary's evidence that a replica quorum retired ended sessions.
//!
//! **Architecture Invariant:** no compio, no clock, no filesystem or network, no randomness: the
//! same committed ops give every replica the same model, replies and effects. Secrets arrive
//! hashed (the service layer hashes before proposing).

pub mod machine;
pub mod model;
pub mod named;
pub mod options;
pub mod permissions;
pub mod reconcile;
pub mod replies;
pub mod retirement;
pub mod session;
pub mod snapshot;

pub use model::*;
