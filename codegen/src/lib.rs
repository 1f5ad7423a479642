//! iggy-codegen: spec parser, model and emitters.
