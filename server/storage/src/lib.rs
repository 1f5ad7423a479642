//! iggy-storage (placeholder until its owner lands it).
