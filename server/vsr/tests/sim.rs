//! Deterministic simulation over many seeds. `VSR_SIM_SEEDS=N` runs N seeds per cluster size.

use iggy_vsr::sim::cluster::Cluster;

fn seeds() -> u64 {
    std::env::var("VSR_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(70)
}

fn run(replica_count: u8) {
    let (mut committed, mut checkpoints, mut retirements, mut refused_full) = (0, 0, 0, 0);
    let (mut restarts_all, mut views_persisted, mut view_max) = (0, 0, 0);
    let (mut view_max_sum, mut cut_off_view_rise_max, mut read_backs) = (0u64, 0, 0);
    let mut handed_back = 0;
    for seed in 0..seeds() {
        let seed = seed * 1_000 + u64::from(replica_count);
        let result = std::panic::catch_unwind(|| {
            Cluster::new(seed, replica_count, 3, 20).run(1_500, 30_000)
        });
        match result {
            Ok(summary) => {
                committed += summary.committed;
                checkpoints += summary.checkpoints;
                retirements += summary.retirements;
                refused_full += summary.refused_full;
                restarts_all += summary.restarts_all;
                views_persisted += summary.views_persisted;
                read_backs += summary.read_backs;
                handed_back += u64::from(summary.handed_back);
                view_max = view_max.max(summary.view_max);
                view_max_sum += u64::from(summary.view_max);
                cut_off_view_rise_max = cut_off_view_rise_max.max(summary.cut_off_view_rise_max);
            }
            Err(panic) => {
                eprintln!("VSR simulation failed: replicas={replica_count} seed={seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }
    assert!(
        committed >= seeds() * 3 * 21,
        "every seed commits registers and requests"
    );
    eprintln!(
        "replicas={replica_count}: {committed} ops committed, {checkpoints} checkpoints, \
         {retirements} retirements, {refused_full} registers refused at capacity, \
         {restarts_all} restarts of every replica, {views_persisted} view states persisted, \
         {read_backs} released entries read back for a peer, {handed_back} groups handed back \
         to their preferred primary \
         (highest view {view_max}, per seed {:.1} on average; a replica cut off from the others \
         climbed at most {cut_off_view_rise_max} views)",
        view_max_sum as f64 / seeds() as f64
    );
    assert!(
        seeds() < 10 || restarts_all > 0,
        "restarts of every replica at once are exercised"
    );
    assert!(
        replica_count == 1 || views_persisted > 0,
        "view changes persist view states"
    );
    assert!(
        replica_count == 1 || seeds() < 10 || handed_back > 0,
        "groups led by another replica are handed back to their preferred primary"
    );
    assert!(
        replica_count == 1 || seeds() < 10 || read_backs > 0,
        "released bodies are read back for lagging peers"
    );
    assert!(
        replica_count > 1 || views_persisted == 0,
        "a group of one never persists a view"
    );
    assert!(checkpoints > 0, "checkpoints are exercised");
    assert!(
        seeds() < 10 || (retirements > 0 && refused_full > 0),
        "retirement and refusal at capacity are exercised (seeds with a small client table)"
    );
}

#[test]
fn cluster_of_one() {
    run(1);
}

#[test]
fn cluster_of_three() {
    run(3);
}

#[test]
fn cluster_of_five() {
    run(5);
}

#[test]
fn faults_are_exercised() {
    let summary = Cluster::new(42, 3, 3, 20).run(1_500, 30_000);
    eprintln!("{summary:?}");
    assert!(summary.crashes > 0);
    assert!(summary.view_max > 0, "the primary crashed at least once");
}

#[test]
fn a_seed_replays_exactly() {
    let first = Cluster::new(7, 5, 3, 20).run(1_500, 30_000);
    let second = Cluster::new(7, 5, 3, 20).run(1_500, 30_000);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}

/// Every replica crashes at once (pending journal and view-state writes lost or torn on each),
/// several times over: nobody can learn the view from a replica that did not restart, yet the
/// group elects a primary again from the persisted view states and loses no committed op.
#[test]
fn every_replica_restarting_at_once_loses_nothing() {
    for replica_count in [3, 5] {
        for seed in 0..12u64 {
            let seed = 90_000 + seed * 10 + u64::from(replica_count);
            let at = 60 + (seed * 37) % 200;
            let result = std::panic::catch_unwind(|| {
                Cluster::new(seed, replica_count, 3, 20)
                    .restart_all_at(at)
                    .run(1_500, 30_000)
            });
            match result {
                Ok(summary) => {
                    assert_eq!(summary.restarts_all, 1, "seed {seed}: {summary:?}");
                    assert!(summary.committed >= 3 * 21, "seed {seed}: {summary:?}");
                }
                Err(panic) => {
                    eprintln!(
                        "restart of every replica failed: replicas={replica_count} seed={seed}"
                    );
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}

/// PrepareOks of another log under the group's id (on the server, a deleted partition
/// incarnation's backups: the PrepareOk layout carries no incarnation) reach the primaries, for
/// every op they have not committed, in their view: no op commits without a quorum holding it,
/// which the checkers would see as a committed op lost or replaced once the primary crashes.
#[test]
fn acks_of_another_log_never_complete_a_commit_quorum() {
    let mut stale_acks = 0;
    for replica_count in [3, 5] {
        for seed in 0..seeds().min(40) {
            let seed = 90_000 + seed * 1_000 + u64::from(replica_count);
            let result = std::panic::catch_unwind(|| {
                Cluster::new(seed, replica_count, 3, 20)
                    .with_stale_acks()
                    .run(1_500, 30_000)
            });
            match result {
                Ok(summary) => stale_acks += summary.stale_acks,
                Err(panic) => {
                    eprintln!("VSR simulation failed: replicas={replica_count} seed={seed}");
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
    assert!(stale_acks > 0, "acks of another log reach the primaries");
}

/// Applied ops whose effects run for up to three view-change timeouts after the apply (the
/// server's metadata partition opens and deletes), under the faults: the answers wait for them,
/// no checkpoint is taken while any run, a crash loses them, and still every client finishes
/// and the checkers find nothing lost or replaced.
#[test]
fn ops_whose_effects_run_for_long_lose_nothing_and_every_client_finishes() {
    let mut slow_effects = 0;
    for replica_count in [1, 3, 5] {
        for seed in 0..seeds().min(40) {
            let seed = 70_000 + seed * 1_000 + u64::from(replica_count);
            let result = std::panic::catch_unwind(|| {
                Cluster::new(seed, replica_count, 3, 20)
                    .with_slow_effects(25, 90)
                    .run(1_500, 30_000)
            });
            match result {
                Ok(summary) => slow_effects += summary.slow_effects,
                Err(panic) => {
                    eprintln!("VSR simulation failed: replicas={replica_count} seed={seed}");
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
    assert!(slow_effects > 0, "ops with running effects are applied");
}

/// Without faults, a group whose every op's effects outlast the view-change timeout changes
/// views exactly as one whose effects are done within the apply: the replicas go on with their
/// peers while the effects run.
#[test]
fn effects_that_outlast_the_view_change_timeout_change_no_view() {
    for replica_count in [3, 5] {
        for seed in 0..seeds().min(20) {
            let seed = 80_000 + seed * 1_000 + u64::from(replica_count);
            let quick = Cluster::new(seed, replica_count, 3, 20).run(0, 30_000);
            let slow = Cluster::new(seed, replica_count, 3, 20)
                .with_slow_effects(100, 90)
                .run(0, 30_000);
            assert!(slow.slow_effects > 0);
            assert_eq!(
                (slow.view_max, slow.committed),
                (quick.view_max, quick.committed),
                "seed {seed}, {replica_count} replicas"
            );
        }
    }
}
