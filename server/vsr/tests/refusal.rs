//! What a replica that is not the serving primary answers a client: `NotPrimary` only from a
//! replica in normal status (its view's primary is current as far as it knows), `NotReady`
//! while it changes views or recovers (a view it would name may be stale).

use bytes::Bytes;
use iggy_vsr::{Action, Config, Message, Refusal, Replica, Status, ViewState};

fn refusal(replica: &mut Replica) -> Refusal {
    replica.on_request(7, 1, 5, Bytes::from_static(b"x"));
    let refusals: Vec<Refusal> = std::iter::from_fn(|| replica.poll_action())
        .filter_map(|action| match action {
            Action::Refuse {
                client: 7,
                request: 1,
                refusal,
            } => Some(refusal),
            _ => None,
        })
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    refusals[0].clone()
}

#[test]
fn a_backup_in_normal_status_names_the_primary_of_its_view() {
    let mut backup = Replica::new(Config::new(3, 1));
    assert_eq!(
        refusal(&mut backup),
        Refusal::NotPrimary {
            view: 0,
            primary: 0
        }
    );
}

#[test]
fn a_replica_changing_views_names_no_primary() {
    let mut backup = Replica::new(Config::new(3, 1));
    backup.on_tick(1_000);
    let granted = Message::PreVoteGranted {
        view: 1,
        replica: 2,
    };
    backup.on_message(2, granted);
    assert_eq!(backup.status(), Status::ViewChange);
    assert_eq!(refusal(&mut backup), Refusal::NotReady);
}

#[test]
fn a_recovering_replica_names_no_primary() {
    let mut restarted = Replica::open(Config::new(3, 1), Vec::new(), ViewState::default());
    assert_eq!(restarted.status(), Status::Recovering);
    assert_eq!(refusal(&mut restarted), Refusal::NotReady);
}

/// Whether the replica asked its peers for a pre-vote since the last drain.
fn asks_pre_vote(replica: &mut Replica) -> bool {
    std::iter::from_fn(|| replica.poll_action()).any(|action| {
        matches!(
            action,
            Action::Send {
                message: Message::PreVote { .. },
                ..
            }
        )
    })
}

#[test]
fn the_silence_before_a_view_change_is_staggered_in_proportion_to_the_timeout() {
    // The server's timing: a 50 ms tick, a 5 s heartbeat timeout.
    let mut config = Config::new(3, 2);
    config.view_change_timeout_ticks = 100;
    let mut backup = Replica::new(config);
    backup.on_tick(119);
    assert!(!asks_pre_vote(&mut backup));
    backup.on_tick(120);
    assert!(
        asks_pre_vote(&mut backup),
        "100 ticks plus a tenth of them for each replica id below this one"
    );
    // The default configuration keeps its stagger of 3 ticks per replica id.
    let mut backup = Replica::new(Config::new(3, 2));
    backup.on_tick(35);
    assert!(!asks_pre_vote(&mut backup));
    backup.on_tick(36);
    assert!(asks_pre_vote(&mut backup));
    assert_eq!(
        backup.status(),
        Status::Normal,
        "a pre-vote changes nothing"
    );
}

/// A primary formatted in its group's creation view after the group moved on (its node applied
/// the partition's create late, `SIM_SEED=930003` of the node simulator) leads no quorum: it
/// must not tell a client that a session is unknown (the client would abandon a session the
/// group holds, and the session's slot would stay taken), so it answers NotReady and the client
/// asks another replica; from its first tick, not only once a view-change timeout has passed
/// (a backup it never heard from is not in touch). A primary a quorum is in touch with still
/// answers SessionUnknown.
#[test]
fn a_primary_out_of_touch_with_a_quorum_calls_no_session_unknown() {
    for now in [1, 1_000] {
        let mut late = Replica::format_in_view(Config::new(3, 1), 1);
        late.on_tick(now);
        assert!(late.is_primary() && !late.leads_quorum(), "tick {now}");
        assert!(!late.in_touch(), "tick {now}");
        assert_eq!(refusal(&mut late), Refusal::NotReady, "tick {now}");
    }

    let mut leading = Replica::new(Config::new(3, 0));
    assert!(
        leading.is_primary() && !leading.leads_quorum(),
        "no backup heard yet"
    );
    // Its first tick sends the heartbeat its backups answer.
    leading.on_tick(1);
    let heartbeats = std::iter::from_fn(|| leading.poll_action())
        .filter(|action| {
            matches!(
                action,
                Action::Send {
                    message: Message::Commit { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(heartbeats, 2);
    let answer = Message::PrepareOk {
        view: 0,
        op: 0,
        checksum: leading.checksum_at(0).expect("the root entry"),
        replica: 2,
    };
    leading.on_message(2, answer);
    assert!(leading.leads_quorum());
    assert_eq!(refusal(&mut leading), Refusal::SessionUnknown);
}
