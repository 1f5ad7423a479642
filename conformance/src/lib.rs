//! iggy-conformance (placeholder until its owner lands it).
