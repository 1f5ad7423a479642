//! iggy-generated (placeholder until its owner lands it).
