//! Durability suite: what a single node acknowledged survives SIGKILL, damaged or foreign
//! storage is never served or silently changed, and hostile clients cannot take the server
//! down. Every test starts the real `iggy-server` binary (found or built by the e2e harness).
//!
//! Short forms run in the normal test command:
//!
//!     cargo nextest run -p iggy-conformance --test durability
//!
//! Long forms (run once, figures recorded in the issue note):
//!
//!     DURABILITY_KILLS=100 DURABILITY_DAMAGE_TRIALS=200 DURABILITY_FUZZ_SECS=120 \
//!         cargo nextest run -p iggy-conformance --test durability --no-capture
//!
//! Every random choice comes from a seed printed at the start of each test and again on
//! failure; `DURABILITY_SEED=<n>` replays it (timing-dependent interleavings aside).

#[path = "../e2e/harness.rs"]
mod harness;
mod support;

mod crash_loop;
mod damage;
mod dedup;
mod foreign;
mod hostile;
