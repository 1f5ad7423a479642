//! iggy-metadata (placeholder until its owner lands it).
