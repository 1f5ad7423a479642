//! iggy-vsr (placeholder until its owner lands it).
