//! Cluster histories: the histories of `histories.rs` on a fresh 3-node cluster each
//! (`TestCluster`, shared with the e2e suite), restarts turned into failovers.
//!
//! The nodes share one drawn configuration (small checkpoint thresholds always, so the metadata
//! group and the partition groups checkpoint inside a history; `replicated` or `persisted`; one
//! or two shards; sometimes small segments), and the SDK is given one node's address, drawn per
//! history, and finds the others itself (the roster), as a user's client would. One client
//! serves the whole history: a failover must not need a new one.
//!
//! Each single-server restart of a generated history becomes, mostly, `NodeDown` (SIGKILL or
//! SIGTERM of the metadata primary, of the primary of one of the model's partitions, or of a
//! node drawn at random, found through the nodes' own role lines) and, 0 to 3 steps later,
//! `NodeUp`: the steps between run on the two others, possibly while they change view. Half
//! the `NodeDown` steps signal the node 0–40 ms into the next step instead, while that step's
//! request may be on its way to it or waiting for its acknowledgement. About
//! one restart in seven becomes `RestartAll` (all three nodes stopped, then started). After
//! `NodeUp`, after `RestartAll` and at the end, once every node is Normal in the metadata group
//! and in every partition group the model holds, the full check of `histories.rs` runs through
//! the SDK, and its disk check looks for every partition directory on every node (all three
//! replicate every partition); with a node down, that node's directories are not checked.
//!
//! Two things the check reads are eventually consistent in a cluster, so it waits for them (and
//! counts the waits in the figures): a topic's message counts come from the answering node's
//! own replica of each partition, which learns a commit from the partition primary's next
//! prepare or commit broadcast (`commit_broadcast_interval`, 500 ms), so a count read right
//! after a send can miss that send (up to 5 s); and a node back from being down creates the
//! partition directories it missed as it replays the metadata log, which can still run once its
//! groups report Normal (up to 10 s). The messages themselves are read through each partition's
//! primary and must match at once.
//!
//! A step's outcome can be unknown in a cluster: the SDK gives up on a request whose replica
//! died (`OperationUncertain`), or answers an error that says nothing about the write (not
//! connected, not accepted, not primary, outcome unknown: [`outcome_unknown`]). The model treats
//! such a step as a real client must, never guessing:
//! - `OperationUncertain(op)`: `resolve_operation(op)` replays the retained request (same id,
//!   so it applies at most once) until the cluster proves its committed result. A proved
//!   success means applied: the model keeps the step and the whole state is checked at once.
//!   A proved rejection must be the error the model predicted (a personal access token's
//!   replayed create answers "already exists": that proves it was created). Still unproved after
//!   30 s: the operation is abandoned and the state decides, as below.
//! - Any other unknown outcome: once the cluster is Normal again, the full check runs against
//!   the model with the step applied, then without it; the model adopts the one the cluster
//!   shows (a `DeleteSegments` learns where the partition now starts first). Neither: the
//!   history fails. So an acknowledged write is never dropped from the model, and an error
//!   never hides an applied write the model does not learn of.
//!
//! Knobs: `DURABILITY_CLUSTER_HISTORIES` (default 3), `DURABILITY_CLUSTER_HISTORY_STEPS`
//! (default 30, before the restarts' `NodeUp` steps are added), `DURABILITY_CLUSTER_HISTORY_FIRST`;
//! `DURABILITY_SEED`, `DURABILITY_SHRINK_SECS` and `DURABILITY_HISTORY_DELETES` as for one server;
//! `DURABILITY_CLUSTER_LOGS=<dir>` writes each node's whole log of every failing run (the first
//! and each shrinking rerun) there as `<unix ms>-node<i>.log`.
//! Who leads what depends on timing, so a replay reruns the same steps, not always on the same
//! leaders.

use super::*;
use crate::test_cluster::{ClusterOptions, METADATA_GROUP, partition_group};
use std::os::unix::process::ExitStatusExt;

/// A signal on its way to a node during a step.
pub(super) struct InFlight {
    victim: usize,
    kill: bool,
    thread: std::thread::JoinHandle<()>,
}

/// Whom a `NodeDown` step takes down.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Who {
    Node(u8),
    MetadataPrimary,
    /// The primary of the model's partition number `k` (modulo how many it holds), or of the
    /// next one led by a node that does not lead the metadata group; the metadata primary when
    /// the model holds no partition.
    PartitionPrimary(u8),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Node(n) => write!(f, "node {n}"),
            Who::MetadataPrimary => write!(f, "the metadata primary"),
            Who::PartitionPrimary(k) => write!(f, "the primary of partition #{k}"),
        }
    }
}

/// Errors that say nothing about whether the request applied: the SDK gave up on it across a
/// failover (`OperationUncertain`, `OperationNotRetained`), or the request met no ready link,
/// a lost link, a replica that was not (or no longer) primary, or the deadline.
pub(super) fn outcome_unknown(error: &IggyError) -> bool {
    matches!(
        error,
        IggyError::Disconnected
            | IggyError::CannotEstablishConnection
            | IggyError::TcpError
            | IggyError::NotConnected
            | IggyError::TransientNotCommitted
            | IggyError::TransientNotAccepted
            | IggyError::NotPrimary
            | IggyError::RequestTooOld
            | IggyError::OperationUncertain(_)
            | IggyError::OperationNotRetained(_)
    )
}

impl Config {
    fn draw_cluster(rng: &mut StdRng) -> Self {
        let mut config = Config::draw(rng);
        config.cluster = Some(rng.random_range(0..3));
        config.persisted = rng.random_bool(0.5);
        if config.checkpoint.is_none() {
            config.checkpoint = Some((rng.random_range(2..=40), 64 * 1024));
        }
        // Small segments more often than for one server: a node down holds segment deletion
        // back to what every replica holds, so a DeleteSegments needs more closed segments to
        // retire any (40 histories with one server's odds retired no message).
        if config.segment_size.is_none() && rng.random_bool(0.6) {
            config.segment_size = Some(rng.random_range(512..=4096));
        }
        config
    }
}

/// A cluster history: the steps of a single-server history, each restart turned into a node
/// down for 0–3 steps, or into a restart of the whole cluster.
fn generate_cluster(rng: &mut StdRng, len: usize, deletes: bool) -> History {
    let config = Config::draw_cluster(rng);
    let mut steps = Vec::new();
    // Steps left before the node that is down comes up.
    let mut up_in: Option<u32> = None;
    for step in generate_steps(rng, len, deletes) {
        match step {
            Step::Restart { kill } => {
                if up_in.take().is_some() {
                    steps.push(Step::NodeUp);
                }
                if rng.random_bool(0.15) {
                    steps.push(Step::RestartAll { kill });
                } else {
                    let who = match rng.random_range(0..3) {
                        0 => Who::MetadataPrimary,
                        1 => Who::PartitionPrimary(rng.random()),
                        _ => Who::Node(rng.random_range(0..3)),
                    };
                    let in_flight = rng.random_bool(0.5).then(|| rng.random_range(0..=40));
                    steps.push(Step::NodeDown { who, kill, in_flight });
                    up_in = Some(rng.random_range(0..=3));
                }
            }
            step => {
                steps.push(step);
                up_in = up_in.map(|n| n.saturating_sub(1));
            }
        }
        if up_in == Some(0) {
            steps.push(Step::NodeUp);
            up_in = None;
        }
    }
    if up_in.is_some() {
        steps.push(Step::NodeUp);
    }
    History { config, steps }
}

impl Runner<'_> {
    fn cluster(&mut self) -> (&mut TestCluster, &mut Option<usize>) {
        match &mut self.target {
            Target::Cluster { cluster, down } => (cluster, down),
            Target::Single(_) => unreachable!("a cluster step on one server"),
        }
    }

    /// Stops node `n`: SIGKILL, or SIGTERM (a node that ignores it fails the history).
    fn stop_node(&mut self, i: usize, n: usize, kill: bool) -> Result<(), Failure> {
        let (cluster, _) = self.cluster();
        if kill {
            cluster.kill9(n);
            self.figures.sigkill_restarts += 1;
            return Ok(());
        }
        let status = tokio::task::block_in_place(|| cluster.nodes[n].stop());
        if status.and_then(|s| s.signal()) == Some(libc::SIGKILL) {
            return fail(i, "SIGTERM did not stop a node", format!("step {}: node {n} still ran after SIGTERM", i + 1));
        }
        self.figures.sigterm_restarts += 1;
        Ok(())
    }

    /// Takes the node `who` names down and leaves it down. A node already down comes up first:
    /// two down would leave no quorum.
    pub(super) async fn node_down(&mut self, i: usize, who: Who, kill: bool, in_flight: Option<u8>) -> Result<(), Failure> {
        if let Target::Single(_) = self.target {
            return self.restart(i, kill, false).await;
        }
        if let (_, Some(_)) = self.cluster() {
            self.node_up(i).await?;
        }
        let partitions: Vec<u64> = self.model.partitions().iter().map(|(s, t, p, _)| partition_group(*s, *t, *p)).collect();
        let (cluster, _) = self.cluster();
        let metadata_primary = cluster.primary(METADATA_GROUP).map(|(p, _)| usize::from(p));
        let leads_a_partition =
            |n: usize| partitions.iter().any(|&g| cluster.primary(g).is_some_and(|(p, _)| usize::from(p) == n));
        let victim = match who {
            Who::Node(n) => usize::from(n) % cluster.len(),
            Who::MetadataPrimary => metadata_primary.unwrap_or(0),
            Who::PartitionPrimary(k) => {
                // From the model's partition k on, the first led by a node that does not lead
                // the metadata group too; else partition k's primary.
                let primaries: Vec<usize> = (0..partitions.len())
                    .map(|j| partitions[(usize::from(k) + j) % partitions.len()])
                    .filter_map(|group| cluster.primary(group).map(|(p, _)| usize::from(p)))
                    .collect();
                let elsewhere = primaries.iter().copied().find(|&p| Some(p) != metadata_primary);
                elsewhere.or(primaries.first().copied()).or(metadata_primary).unwrap_or(0)
            }
        };
        if metadata_primary == Some(victim) {
            self.figures.downs_of_metadata_primary += 1;
        } else if leads_a_partition(victim) {
            self.figures.downs_of_partition_primary += 1;
        } else {
            self.figures.downs_of_backup += 1;
        }
        match in_flight {
            Some(ms) => self.armed = Some((victim, kill, ms)),
            None => self.stop_node(i, victim, kill)?,
        }
        *self.cluster().1 = Some(victim);
        Ok(())
    }

    /// Fires the signal an in-flight `NodeDown` armed: during `step` (from a thread, after the
    /// armed delay) when it is a client's step, at once when it starts or stops nodes itself.
    pub(super) fn signal_in_flight(&mut self, i: usize, step: &Step) -> Result<Option<InFlight>, Failure> {
        let Some((victim, kill, ms)) = self.armed.take() else { return Ok(None) };
        if matches!(step, Step::NodeDown { .. } | Step::NodeUp | Step::RestartAll { .. } | Step::Restart { .. }) {
            self.stop_node(i, victim, kill)?;
            return Ok(None);
        }
        let (cluster, _) = self.cluster();
        let pid = cluster.node(victim).pid().expect("an armed node runs") as libc::pid_t;
        let signal = if kill { libc::SIGKILL } else { libc::SIGTERM };
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(u64::from(ms)));
            // SAFETY: kill(2) on a child of this process that is not reaped before the join.
            unsafe { libc::kill(pid, signal) };
        });
        self.figures.in_flight_signals += 1;
        Ok(Some(InFlight { victim, kill, thread }))
    }

    /// After the step: the signal was sent; waits for the node's exit and reaps it.
    pub(super) fn reap_in_flight(&mut self, i: usize, signal: Option<InFlight>) -> Result<(), Failure> {
        let Some(InFlight { victim, kill, thread }) = signal else { return Ok(()) };
        thread.join().expect("the signalling thread");
        self.stop_node(i, victim, kill)
    }

    /// Starts the node that is down (if any) and waits until the cluster is Normal.
    pub(super) async fn node_up(&mut self, _i: usize) -> Result<(), Failure> {
        if let Target::Single(_) = self.target {
            return Ok(());
        }
        let (cluster, down) = self.cluster();
        if let Some(n) = down.take() {
            cluster.restart(n);
        }
        self.settle().await;
        Ok(())
    }

    /// Stops every node (SIGKILL or SIGTERM), starts them all, waits until they are Normal.
    pub(super) async fn restart_all(&mut self, i: usize, kill: bool) -> Result<(), Failure> {
        let (cluster, down) = self.cluster();
        let (n, down) = (cluster.len(), down.take());
        for node in (0..n).filter(|&node| Some(node) != down) {
            self.stop_node(i, node, kill)?;
        }
        let (cluster, _) = self.cluster();
        for node in 0..n {
            cluster.restart(node);
        }
        self.figures.whole_cluster_restarts += 1;
        self.settle().await;
        Ok(())
    }

    /// Waits until every running node is Normal in the metadata group and in every partition
    /// group the model holds (a panic after 30 s: the cluster did not recover).
    async fn settle(&mut self) {
        let groups: Vec<u64> = std::iter::once(METADATA_GROUP)
            .chain(self.model.partitions().iter().map(|(s, t, p, _)| partition_group(*s, *t, *p)))
            .collect();
        let (cluster, down) = self.cluster();
        let down = *down;
        let cluster: &TestCluster = cluster;
        for node in (0..cluster.len()).filter(|&node| Some(node) != down) {
            cluster.wait_normal(node, &groups).await;
        }
    }

    /// Settles step `i`, answered with `error`, whose outcome is unknown: `before` is the
    /// model without it, `self.model` the model with it (see the module's documentation).
    pub(super) async fn settle_unknown_outcome(
        &mut self,
        i: usize,
        step: &Step,
        before: Model,
        error: IggyError,
    ) -> Result<(), Failure> {
        self.figures.unknown_outcomes += 1;
        let expect = before.clone().apply(step);
        let applied = self.model.clone();
        let what = format!("step {} ({step}), answered {error} (code {})", i + 1, error.as_code());
        eprintln!("histories: {what}: settling its outcome");
        if let IggyError::OperationUncertain(op) = error {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                match within("resolve an uncertain operation", self.client.resolve_operation(op, deadline)).await {
                    Ok(()) if matches!(expect, Expect::Err(_)) => {
                        return fail(
                            i,
                            "an uncertain step committed against the model",
                            format!("{what}: the SDK proved it committed, the model expects {expect}"),
                        );
                    }
                    Ok(()) => {
                        self.figures.unknown_proved_applied += 1;
                        self.settle().await;
                        return self.verify(i, &format!("after {what}, proved applied")).await;
                    }
                    Err(IggyError::OperationUncertain(_)) if std::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) if outcome_unknown(&e) => {
                        let _ = within("abandon an uncertain operation", self.client.abandon_operation(op)).await;
                        break;
                    }
                    // A replayed create of a token answers "already exists": its secret is gone,
                    // the create committed.
                    Err(e)
                        if matches!(step, Step::CreateToken { .. })
                            && e.as_code() == TOKEN_ALREADY_EXISTS
                            && expect == Expect::Ok =>
                    {
                        self.figures.unknown_proved_applied += 1;
                        self.settle().await;
                        return self.verify(i, &format!("after {what}, proved applied")).await;
                    }
                    Err(e) if expect == Expect::Err(e.as_code()) => {
                        self.model = before;
                        return Ok(());
                    }
                    Err(e) => {
                        return fail(
                            i,
                            "an uncertain step committed against the model",
                            format!(
                                "{what}: the SDK proved it committed with {e} (code {}), the model expects {expect}",
                                e.as_code()
                            ),
                        );
                    }
                }
            }
        }
        // The state decides, once the cluster is Normal again.
        self.settle().await;
        let when = format!("after {what}");
        self.model = applied;
        if let Step::DeleteSegments { at, p, .. } = step {
            self.learn_first(i, *at, *p).await?;
        }
        let as_applied = self.verify(i, &when).await;
        if as_applied.is_ok() {
            self.figures.unknown_found_applied += 1;
            return Ok(());
        }
        self.model = before;
        let as_not_applied = self.verify(i, &when).await;
        if as_not_applied.is_ok() {
            self.figures.unknown_found_not_applied += 1;
            return Ok(());
        }
        let detail = |r: Result<(), Failure>| r.err().map_or(String::new(), |f| format!("{}: {}", f.kind, f.detail));
        fail(
            i,
            "a step of unknown outcome is neither applied nor not applied",
            format!("{what}:\n    with the step applied: {}\n    without it: {}", detail(as_applied), detail(as_not_applied)),
        )
    }

    /// Where a partition now starts, after a segment deletion of unknown outcome.
    async fn learn_first(&mut self, i: usize, at: At, p: u32) -> Result<(), Failure> {
        let (stream, topic) = (self.model.stream_ident(at.s, at.by_id), self.model.topic_ident(at));
        let consumer = Consumer::new(named("checker"));
        let polled = within(
            "poll first",
            self.client.poll_messages(&stream, &topic, Some(p), &consumer, &PollingStrategy::first(), 1, false),
        )
        .await;
        let polled = match polled {
            Ok(polled) => polled,
            Err(e) => return fail(i, "a read failed", format!("step {}: poll first: {e}", i + 1)),
        };
        if let Ok((_, _, partition)) = self.model.partition_mut(at, p) {
            let end = partition.messages.len() as u64;
            partition.first = polled.messages.first().map_or(end, |m| m.header.offset).max(partition.first);
        }
        Ok(())
    }
}

/// Runs `history` on a fresh 3-node cluster; the failure (if any) and each node's log tail.
pub(super) async fn run_cluster_history(history: &History, figures: &mut Figures) -> Result<(), (Failure, String)> {
    let entry = usize::from(history.config.cluster.expect("a cluster history"));
    let options = ClusterOptions { env: history.config.env(), ..ClusterOptions::default() };
    let mut cluster: Option<TestCluster> = None;
    let progress: Cell<Option<usize>> = Cell::new(None);
    let result = run_quietly(history, &progress, async {
        let cluster = cluster.insert(tokio::task::block_in_place(|| TestCluster::start_with(3, options)));
        let client = cluster.root_client(entry).await;
        Runner::new(Target::Cluster { cluster, down: None }, client, figures).drive(history, &progress).await
    })
    .await;
    figures.histories += 1;
    let mut log = String::new();
    if let Some(cluster) = cluster.as_mut() {
        for n in 0..cluster.len() {
            let node_log = cluster.node(n).log();
            // The tail below is all a report shows; a cause can lie earlier in a node's log.
            if let (Err(_), Some(dir)) = (&result, std::env::var_os("DURABILITY_CLUSTER_LOGS")) {
                let _ = std::fs::create_dir_all(&dir);
                let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{stamp}-node{n}.log")), &node_log);
            }
            if result.is_err() {
                let lines: Vec<&str> = node_log.lines().collect();
                log += &format!("----- node {n} -----\n{}\n", lines[lines.len().saturating_sub(40)..].join("\n"));
            }
            figures.metadata_checkpoint_starts += metadata_checkpoint_starts(&node_log);
        }
    }
    drop(cluster);
    result.map_err(|failure| (failure, log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_cluster_histories_agree_with_the_model_across_failovers() {
    let knobs = Knobs {
        histories: "DURABILITY_CLUSTER_HISTORIES",
        steps: "DURABILITY_CLUSTER_HISTORY_STEPS",
        first: "DURABILITY_CLUSTER_HISTORY_FIRST",
    };
    let test = "seeded_cluster_histories_agree_with_the_model_across_failovers";
    let figures = seeded_histories(test, &knobs, 3, generate_cluster).await;
    let downs = figures.downs_of_metadata_primary + figures.downs_of_partition_primary + figures.downs_of_backup;
    assert!(
        downs + figures.whole_cluster_restarts > 0 || figures.histories < 3,
        "no node went down in {} histories",
        figures.histories
    );
}

/// The settling of a step of unknown outcome is not vacuous: on a live cluster, a step that
/// applied is adopted as applied, a step that never reached the cluster as not applied (a
/// create and a send each), and a model that matches the cluster neither way fails the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_unknown_outcome_is_adopted_as_the_cluster_shows_it() {
    let mut cluster = tokio::task::block_in_place(|| TestCluster::start_with(3, ClusterOptions::default()));
    let client = cluster.root_client(0).await;
    let mut figures = Figures::default();
    let mut runner = Runner::new(Target::Cluster { cluster: &mut cluster, down: None }, client, &mut figures);
    let at = At { s: 0, t: 0, by_id: false };
    let send = |id: u128| Step::Send { at, p: 0, messages: vec![(id, format!("message {id}").into_bytes())] };
    // Ran, its answer taken for an unknown one (a reply lost with its replica).
    async fn ran_unknown(runner: &mut Runner<'_>, i: usize, step: &Step) -> Result<(), Failure> {
        let before = runner.model.clone();
        runner.step(i, step).await.expect("the step runs");
        runner.settle_unknown_outcome(i, step, before, IggyError::NotConnected).await
    }
    // Never sent: the model applies it, the cluster never sees it.
    async fn lost_unknown(runner: &mut Runner<'_>, i: usize, step: &Step) -> Result<(), Failure> {
        let before = runner.model.clone();
        runner.model.apply(step);
        runner.settle_unknown_outcome(i, step, before, IggyError::NotConnected).await
    }
    ran_unknown(&mut runner, 0, &Step::CreateStream { s: 0 }).await.expect("adopted as applied");
    lost_unknown(&mut runner, 1, &Step::CreateStream { s: 1 }).await.expect("adopted as not applied");
    runner.step(2, &Step::CreateTopic { at, partitions: 1 }).await.expect("create topic");
    ran_unknown(&mut runner, 3, &send(1)).await.expect("adopted as applied");
    lost_unknown(&mut runner, 4, &send(2)).await.expect("adopted as not applied");
    assert_eq!((runner.figures.unknown_found_applied, runner.figures.unknown_found_not_applied), (2, 2));
    // A model the cluster matches neither with the step nor without it (it lost message 1).
    let step = send(3);
    let mut before = runner.model.clone();
    before.partition_mut(at, 0).expect("partition 0").2.messages.clear();
    runner.model = before.clone();
    runner.model.apply(&step);
    let failure = runner.settle_unknown_outcome(5, &step, before, IggyError::NotConnected).await.expect_err("neither");
    assert_eq!(failure.kind, "a step of unknown outcome is neither applied nor not applied", "{failure:?}");
    // The model the cluster does match still passes the full check.
    runner.model = Model::new();
    for step in [Step::CreateStream { s: 0 }, Step::CreateTopic { at, partitions: 1 }, send(1)] {
        runner.model.apply(&step);
    }
    runner.verify(6, "at the end").await.expect("the cluster holds stream s0, topic t0 and message 1");
}
