//! Deterministic simulator (see cluster).
