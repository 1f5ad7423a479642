//! Committed limits: a group's client table capacity is fixed by its first committed op; a
//! configuration changed later is logged and does not resize the group.

use crate::harness::*;
use iggy::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_smaller_clients_table_max_keeps_the_committed_capacity_and_logs_it() {
    let mut server = TestServer::start();
    // The metadata group committed the default (4096) with its first op at the first start.
    std::fs::write(
        server.dir().join("config.toml"),
        "[limits]\nclients_table_max = 2\n",
    )
    .unwrap();
    tokio::task::block_in_place(|| server.restart());

    let log = server.log();
    let restart = log
        .rsplit("===== e2e harness: start")
        .next()
        .unwrap_or_default();
    assert!(
        restart.contains("limits.clients_table_max is 2 in the configuration")
            && restart.contains("committed 4096"),
        "the mismatch is logged at the restart:\n{restart}"
    );

    // Four sessions at once: a table of 2 would push the first two out.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.root_client().await);
    }
    for (index, client) in clients.iter().enumerate() {
        ok(
            &format!("session {index} still works"),
            within("streams", client.get_streams()).await,
        );
    }
    assert!(
        !server.log().contains("evicted from the full client table"),
        "no session was evicted:\n{}",
        server.log()
    );
}
