//! iggy-sdk-stub (placeholder until its owner lands it).
