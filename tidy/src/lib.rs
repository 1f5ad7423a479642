//! Repository-wide architecture checks; see tests/tidy.rs.
