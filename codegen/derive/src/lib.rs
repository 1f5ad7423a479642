//! iggy-wire-derive (placeholder until its owner lands it).
