//! A shell may sleep through the ticks before `Replica::next_tick_due` (ticking to the present
//! before it hands a replica a message): the group then sends exactly what it would have sent
//! ticked at every tick, through heartbeats, a dead primary, view changes, a one-way loss and
//! a heal, while an idle group wakes a fraction of the ticks.

use iggy_vsr::{Action, Config, Message, Replica, Status};

mod support;
use support::*;

/// What the network does to a message from `from` to `to` at tick `now`: replica 1 (the first
/// primary) is down from tick 300 to 1100 (it hears, ticks and says nothing); from 1500 to
/// 2200 replica 2 hears nobody (a one-way loss), from 2300 to 2900 replica 0.
fn faulty_network(now: u64, from: u8, to: u8) -> bool {
    let down = |r: u8| r == 1 && (300..1100).contains(&now);
    let deaf = (to == 2 && (1500..2200).contains(&now)) || (to == 0 && (2300..2900).contains(&now));
    !down(from) && !down(to) && !deaf
}

fn faulty_node(now: u64, replica: u8) -> bool {
    !(replica == 1 && (300..1100).contains(&now))
}

/// Every message sent, as (tick, from, to, message), and how many ticks each replica took.
struct Run {
    sent: Vec<(u64, u8, u8, Message)>,
    ticks_taken: Vec<u64>,
    views: Vec<(u32, Status)>,
    /// Per tick, what each replica's shell would publish of it after the tick's work: whether
    /// it is in touch with its primary, and whether it leads.
    in_touch: Vec<[(bool, bool); 3]>,
}

/// A group formatted in view 1 (replica 1 leads), run for `until` ticks; `passes` and `ticks_at`
/// say which messages arrive and which replicas run. `sleeping`: each replica ticks only at
/// its due tick, or to the present before it takes a message.
fn run(
    until: u64,
    sleeping: bool,
    passes: fn(u64, u8, u8) -> bool,
    ticks_at: fn(u64, u8) -> bool,
) -> Run {
    let mut replicas: Vec<Replica> = (0..3)
        .map(|r| Replica::format_in_view(Config::new(3, r), 1))
        .collect();
    let mut ticked = [0u64; 3];
    let mut out = Run {
        sent: Vec::new(),
        ticks_taken: vec![0; 3],
        views: Vec::new(),
        in_touch: Vec::new(),
    };
    for now in 1..=until {
        for r in 0..3u8 {
            let index = usize::from(r);
            let due = replicas[index].next_tick_due();
            if ticks_at(now, r) && (!sleeping || now >= due) {
                replicas[index].on_tick(now);
                ticked[index] = now;
                out.ticks_taken[index] += 1;
            }
        }
        // Every replica's actions carried out until quiet, messages delivered at once.
        let mut moved = true;
        while moved {
            moved = false;
            for from in 0..3u8 {
                for action in drain(&mut replicas[usize::from(from)]) {
                    match action {
                        Action::Send { to, message } => {
                            out.sent.push((now, from, to, message.clone()));
                            if !passes(now, from, to) {
                                continue;
                            }
                            let index = usize::from(to);
                            if sleeping && ticked[index] < now {
                                replicas[index].on_tick(now);
                                ticked[index] = now;
                                out.ticks_taken[index] += 1;
                            }
                            replicas[index].on_message(from, message);
                            moved = true;
                        }
                        Action::PersistView { state } => {
                            replicas[usize::from(from)].on_view_persisted(state);
                            moved = true;
                        }
                        Action::WritePrepare { op, .. } => {
                            replicas[usize::from(from)].on_write_done(op);
                            moved = true;
                        }
                        _ => {}
                    }
                }
            }
        }
        out.in_touch.push(std::array::from_fn(|r| {
            (replicas[r].in_touch(), replicas[r].leads_quorum())
        }));
    }
    out.views = replicas.iter().map(|r| (r.view(), r.status())).collect();
    out
}

#[test]
fn a_group_sleeping_until_its_due_ticks_sends_what_a_group_ticked_every_tick_sends() {
    let until = 3_000;
    let dense = run(until, false, faulty_network, faulty_node);
    let sleeping = run(until, true, faulty_network, faulty_node);
    assert!(
        dense.views.iter().any(|(view, _)| *view > 2),
        "the scenario changes views: {:?}",
        dense.views
    );
    let first_difference = dense
        .sent
        .iter()
        .zip(&sleeping.sent)
        .position(|(a, b)| a != b);
    assert!(
        first_difference.is_none() && dense.sent.len() == sleeping.sent.len(),
        "the sleeping group sent something else: at {first_difference:?}: dense {:?}, sleeping {:?}",
        first_difference.map(|i| &dense.sent[i]),
        first_difference.and_then(|i| sleeping.sent.get(i))
    );
    assert_eq!(dense.views, sleeping.views);
    let first_difference =
        (0..dense.in_touch.len()).find(|&i| dense.in_touch[i] != sleeping.in_touch[i]);
    assert!(
        first_difference.is_none(),
        "the sleeping group's figures differ at tick {:?}: dense {:?}, sleeping {:?}",
        first_difference.map(|i| i + 1),
        first_difference.map(|i| dense.in_touch[i]),
        first_difference.map(|i| sleeping.in_touch[i])
    );
}

#[test]
fn an_idle_group_wakes_for_its_heartbeats_not_every_tick() {
    let config = Config::new(3, 0);
    let until = 2_000;
    let idle = run(until, true, |_, _, _| true, |_, _| true);
    assert_eq!(
        idle.views,
        vec![(1, Status::Normal); 3],
        "the primary kept its view"
    );
    // One wake per heartbeat (a backup's as the heartbeat arrives), where a dense clock takes
    // every tick.
    let per_heartbeat = until / config.heartbeat_ticks;
    for (replica, taken) in idle.ticks_taken.iter().enumerate() {
        assert!(
            *taken <= per_heartbeat + 5,
            "replica {replica} took {taken} of {until} ticks, heartbeats every {} ticks",
            config.heartbeat_ticks
        );
    }
}
