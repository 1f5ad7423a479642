//! iggy-wire (placeholder until its owner lands it).
