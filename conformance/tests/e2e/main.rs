//! End-to-end suite: every test starts its own `iggy-server` child (see `harness`) and drives
//! it with the official SDK `iggy =0.11.1-edge.2` over TCP. Run with
//! `cargo nextest run -p iggy-conformance --test e2e`.

mod harness;

mod auth;
mod backup;
mod bad_input;
mod checkpoint;
mod legacy;
mod maintenance;
mod operator;
mod cli;
mod clients;
mod cluster;
mod test_cluster;
mod cluster_config;
mod cluster_groups;
mod cluster_transports;
mod cluster_lan;
mod concurrency;
mod compose;
mod consumer_groups;
mod crash;
mod docker_image;
mod external_offsets;
mod fail_stop;
mod framing;
mod http;
mod id_reuse;
mod journal;
mod lan;
mod lifecycle;
mod limits;
mod messages;
mod metrics;
mod offsets;
mod sdk_failover;
mod partitions;
mod replay;
mod resources;
mod pat;
mod producer_consumer;
mod restart;
mod scale;
mod session;
mod soak;
mod shutdown;
mod storage;
mod streams;
mod system;
mod systemd;
mod topics;
mod transports;
mod users;
mod wiretap;
