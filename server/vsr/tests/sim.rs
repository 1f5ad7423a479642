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
        "replicas={replica_count}: {checkpoints} checkpoints, {retirements} retirements, \
         {refused_full} registers refused at capacity"
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
