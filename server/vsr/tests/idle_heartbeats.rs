//! An idle group's primary heartbeats at the idle period (`Config::idle_heartbeat_ticks`) once
//! every backup holds its whole log and was told its commit; an op brings the active period
//! back at once. Its backups never suspect it meanwhile.

use bytes::Bytes;
use iggy_vsr::{Action, Config, Message, OPERATION_REGISTER, Replica, Status};

mod support;
use support::*;

/// Three replicas (0 leads view 0) on a network that delivers everything at once, ticked
/// every tick for `until` ticks, with a register submitted to the primary at each tick of
/// `requests`. Returns the ticks at which the primary sent replica 1 a Commit heartbeat, and
/// whether every replica stayed in touch with its primary at every tick.
fn run(until: u64, requests: &[u64]) -> (Vec<u64>, bool) {
    let mut replicas: Vec<Replica> = (0..3).map(|r| Replica::new(Config::new(3, r))).collect();
    let mut heartbeats = Vec::new();
    let mut always_in_touch = true;
    for now in 1..=until {
        for replica in &mut replicas {
            replica.on_tick(now);
        }
        if let Some(client) = requests.iter().position(|at| *at == now) {
            replicas[0].on_request(client as u128 + 1, 0, OPERATION_REGISTER, Bytes::new());
        }
        let mut moved = true;
        while moved {
            moved = false;
            for from in 0..3u8 {
                for action in settle(&mut replicas[usize::from(from)]) {
                    if let Action::Send { to, message } = action {
                        if from == 0 && to == 1 && matches!(message, Message::Commit { .. }) {
                            heartbeats.push(now);
                        }
                        replicas[usize::from(to)].on_message(from, message);
                        moved = true;
                    }
                }
            }
        }
        always_in_touch &= replicas.iter().all(Replica::in_touch);
    }
    let views: Vec<_> = replicas.iter().map(|r| (r.view(), r.status())).collect();
    assert_eq!(views, vec![(0, Status::Normal); 3], "nobody left view 0");
    (heartbeats, always_in_touch)
}

fn gaps(ticks: &[u64]) -> Vec<u64> {
    ticks.windows(2).map(|pair| pair[1] - pair[0]).collect()
}

#[test]
fn an_idle_primary_heartbeats_at_the_idle_period_and_an_op_brings_the_active_period_back() {
    let config = Config::new(3, 0);
    let (active, idle) = (config.heartbeat_ticks, config.idle_heartbeat_ticks());
    assert!(
        idle > active,
        "the default timing has an idle period to test"
    );
    let request = 300;
    let (heartbeats, in_touch) = run(600, &[request]);
    assert!(in_touch, "a backup lost touch with its idle primary");

    let (before, after): (Vec<u64>, Vec<u64>) = heartbeats.iter().partition(|at| **at < request);
    // A group formatted empty has nothing to tell: it idles from the start.
    let before_gaps = gaps(&before);
    assert!(
        before_gaps.iter().all(|gap| *gap == idle),
        "{before_gaps:?}"
    );
    assert!(before_gaps.len() > 5, "{before:?}");

    // The op: the next heartbeat within the active period, then active ones until the commit
    // is announced to backups holding it, then idle again.
    assert!(
        after[0] - request <= active,
        "first heartbeat after the op at {}",
        after[0]
    );
    let after_gaps = gaps(&after);
    assert_eq!(after_gaps.first(), Some(&active), "{after_gaps:?}");
    assert!(
        after_gaps.iter().skip(2).all(|gap| *gap == idle),
        "{after_gaps:?}"
    );
}
