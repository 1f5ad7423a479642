//! Checks the 0.11.1 layouts of the spec against iggy_binary_protocol =0.11.1-edge.1.
