//! The metadata group's shell: applies committed ops with the pure
//! [`iggy_metadata::machine`] and runs their effects on disk (partition logs opened or deleted),
//! or, while the journal replays at start, collects them for one reconciliation.
//!
//! The model changes within the apply, so every replica's model and reply are the op's; the
//! disk effects are handed to a task of their own, which runs them in op order. Awaited in the
//! group's task they kept it from its peers for as long (a primary sent no heartbeat, a backup
//! answered no prepare), and an apply longer than the heartbeat timeout changed the group's
//! view. The group answers an op once its effects and those before it are done
//! (`GroupCore::applied_with_effects`), and checkpoints only when none run, so a crash never
//! loses them: the journal still holds their ops, whose replay reconciles the partitions.
//!
//! A replica its peers checkpointed past takes the primary's metadata checkpoint whole (state
//! transfer): the snapshot replaces the model, and the partitions are reconciled with it once
//! (`Shared::reconcile_after_transfer`), since the ops it skipped ran no effect here.

use crate::consensus::group::StateMachine;
use crate::runtime::shared::{PartitionKey, PlannedEffect, Shared};
use bytes::Bytes;
use futures_channel::mpsc;
use futures_util::StreamExt;
use iggy_generated::frames::Operation;
use iggy_metadata::Effect;
use iggy_metadata::{machine, permissions};
use std::collections::HashSet;
use std::rc::Rc;

/// Partitions one op's effects open at once (each its own files and group).
const PARTITION_OPENS_AT_ONCE: usize = 32;

pub struct MetadataMachine {
    pub shared: Rc<Shared>,
    /// While the journal replays at start: the partition incarnations its committed deletes
    /// removed. No op's disk effect runs during the replay; the directories are reconciled
    /// with the final model once, in [`StateMachine::replayed`].
    replay_deletes: Option<HashSet<(PartitionKey, u64)>>,
    /// While the journal replays at start: the group deletions it holds, in op order. Their
    /// offsets go from the reopened partitions in [`StateMachine::replayed`] (a crash may have
    /// interrupted the deletion; a partition that already applied it ignores it).
    replay_group_deletes: Vec<Effect>,
    /// The clients whose session slots the op being applied released.
    released: Vec<u128>,
    /// The task running the applied ops' effects, once one had any.
    effects: Option<EffectsTask>,
    /// Whether the op just applied handed effects to it.
    effects_handed: bool,
}

/// The effects task's two ends: the effects of each applied op go in, in op order, and the op
/// comes back once they are done.
struct EffectsTask {
    queue: mpsc::UnboundedSender<(u64, Vec<PlannedEffect>)>,
    done: mpsc::UnboundedReceiver<u64>,
}

impl EffectsTask {
    fn spawn(shared: Rc<Shared>) -> Self {
        let (queue, mut ops) = mpsc::unbounded::<(u64, Vec<PlannedEffect>)>();
        let (done_sender, done) = mpsc::unbounded();
        compio::runtime::spawn(async move {
            while let Some((op, effects)) = ops.next().await {
                run_effects(&shared, effects).await;
                if done_sender.unbounded_send(op).is_err() {
                    break;
                }
            }
        })
        .detach();
        EffectsTask { queue, done }
    }
}

/// Runs one op's effects in order, a topic's partitions opening side by side.
async fn run_effects(shared: &Shared, effects: Vec<PlannedEffect>) {
    let mut effects = effects.into_iter().peekable();
    while let Some(effect) = effects.next() {
        if !effect.opens() {
            shared.run_planned(effect).await;
            continue;
        }
        // One after the other, a large topic's opens took seconds (each waits for its fsyncs).
        let mut opens = vec![effect];
        opens.extend(std::iter::from_fn(|| effects.next_if(PlannedEffect::opens)));
        futures_util::stream::iter(opens)
            .for_each_concurrent(PARTITION_OPENS_AT_ONCE, |open| shared.run_planned(open))
            .await;
    }
}

impl MetadataMachine {
    /// A machine about to replay its journal (see `replay_deletes`).
    pub fn replaying(shared: Rc<Shared>) -> Self {
        MetadataMachine {
            shared,
            replay_deletes: Some(HashSet::new()),
            replay_group_deletes: Vec::new(),
            released: Vec::new(),
            effects: None,
            effects_handed: false,
        }
    }
}

impl StateMachine for MetadataMachine {
    type Read = ();

    const JUDGES_ADMISSION: bool = true;

    fn changes_admission(&self, operation: u8) -> bool {
        Operation::from_repr(operation).is_some_and(permissions::takes_grants_away)
    }

    fn admits(&self, client: u128, operation: u8, body: &[u8], _: u64) -> Result<(), Bytes> {
        if client == machine::SYSTEM_CLIENT {
            return Ok(());
        }
        permissions::admits(&self.shared.metadata.borrow(), operation, body)
            .map_err(|code| iggy_metadata::replies::result_rejection(code).into())
    }

    async fn apply(&mut self, op: u64, client: u128, operation: u8, body: Bytes) -> Bytes {
        let logout = operation == Operation::Logout as u8;
        let session_before = match logout {
            true => self
                .shared
                .metadata
                .borrow()
                .sessions
                .get(client)
                .map(|s| s.session),
            false => None,
        };
        let (reply, effects) = machine::apply(
            &mut self.shared.metadata.borrow_mut(),
            op,
            client,
            operation,
            &body,
        );
        // A fence waits for every node to report applying a change that takes grants or a
        // session away (`service::dispatch::fenced`): reported now, not at the next keepalive.
        let took_away = Operation::from_repr(operation).is_some_and(|operation| {
            operation == Operation::Logout || permissions::takes_grants_away(operation)
        });
        if took_away && let Some(plane) = &self.shared.plane {
            plane.leases().report_applied(op);
            // Its client may bind the session on this node (the official client links every
            // node) while the primary's fence holds the logout's answer back: told 40, it
            // would sign in again and fail the logout it waits on (`bind_session`).
            let ended = session_before
                .filter(|_| self.shared.metadata.borrow().sessions.get(client).is_none());
            if let Some(session) = ended
                && self.replay_deletes.is_none()
            {
                let kept = plane.leases().fence_longest();
                self.shared.sessions_here.borrow_mut().logged_out(
                    client,
                    session,
                    std::time::Instant::now(),
                    kept,
                );
            }
        }
        let mut effects = effects;
        effects.retain_mut(|effect| match effect {
            Effect::ReleaseSessionSlots { clients } => {
                self.released.append(clients);
                false
            }
            _ => true,
        });
        match &mut self.replay_deletes {
            Some(deletes) => {
                for effect in effects {
                    match effect {
                        Effect::DeletePartition {
                            stream,
                            topic,
                            partition,
                            incarnation,
                        } => {
                            deletes.insert(((stream, topic, partition), incarnation));
                        }
                        Effect::DeleteGroupOffsets { .. } => {
                            self.replay_group_deletes.push(effect);
                        }
                        Effect::OpenPartition { .. } | Effect::ReleaseSessionSlots { .. } => {}
                    }
                }
            }
            None if effects.is_empty() => {}
            None => {
                // What the effects read from the model is read now, as of this op.
                let planned = effects
                    .into_iter()
                    .map(|effect| self.shared.plan_effect(effect))
                    .collect();
                let shared = &self.shared;
                let task = self
                    .effects
                    .get_or_insert_with(|| EffectsTask::spawn(shared.clone()));
                // The task lives as long as this machine: it takes every op.
                let _ = task.queue.unbounded_send((op, planned));
                self.effects_handed = true;
            }
        }
        reply
    }

    async fn replayed(&mut self) -> Result<(), String> {
        let deletes = self.replay_deletes.take().unwrap_or_default();
        self.shared.reconcile_partitions(&deletes).await;
        for effect in std::mem::take(&mut self.replay_group_deletes) {
            self.shared.run_effect(effect).await;
        }
        Ok(())
    }

    fn effects_running(&mut self) -> bool {
        std::mem::take(&mut self.effects_handed)
    }

    async fn effects_done(&mut self) -> u64 {
        match &mut self.effects {
            Some(task) => match task.done.next().await {
                Some(op) => op,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// An op that makes partition directories is fsynced before it is applied, whatever the
    /// node's durability: their files are made durable later (a sealed segment, a checkpoint),
    /// and a machine crash that kept those but lost the op (a filesystem turned read-only, the
    /// journal's pages never written) left directories no history names, which a start refuses
    /// until `--fresh` erases them.
    fn persisted(&self, operation: u8) -> bool {
        makes_partitions(operation)
    }

    fn registered(&mut self, op: u64, client: u128, body: &Bytes) {
        let mut metadata = self.shared.metadata.borrow_mut();
        if machine::register(&mut metadata, op, client, body).is_err() {
            tracing::error!("register at op {op} has an undecodable session record");
        }
    }

    fn take_retired(&mut self) -> Vec<u128> {
        std::mem::take(&mut self.released)
    }

    async fn checkpoint(&mut self) -> std::io::Result<Vec<u8>> {
        // Partition logs keep their own checkpoints; the model is the whole metadata state.
        Ok(iggy_metadata::snapshot::encode(
            &self.shared.metadata.borrow(),
        ))
    }

    async fn read(&mut self, _read: ()) {}

    fn forwarded_logout(&self, client: u128, session: u64) -> Option<Bytes> {
        let metadata = self.shared.metadata.borrow();
        let live = metadata
            .sessions
            .get(client)
            .filter(|live| live.session == session)?;
        Some(machine::envelope(
            self.shared.stamp_now(),
            live.user_id,
            &[],
        ))
    }

    fn transfers_state(&self) -> bool {
        true
    }

    /// The checkpoint is the whole state: there is no log to copy (the range is empty).
    async fn transfer_begin(&mut self, state: &[u8]) -> Result<(u64, u64), String> {
        let offered = iggy_metadata::snapshot::decode(state)?.commit;
        let committed = self.shared.metadata.borrow().commit;
        if offered < committed {
            return Err(format!(
                "this replica applied metadata op {committed}, past the checkpoint's op {offered}"
            ));
        }
        Ok((0, 0))
    }

    async fn transfer_install(&mut self, op: u64, state: &[u8]) -> Result<(), String> {
        let model = iggy_metadata::snapshot::decode(state)?;
        if model.commit != op {
            return Err(format!(
                "a metadata snapshot of op {} in a checkpoint at op {op}",
                model.commit
            ));
        }
        *self.shared.metadata.borrow_mut() = model;
        self.released.clear();
        self.shared.reconcile_after_transfer(op).await;
        Ok(())
    }

    fn retirement_reported(&mut self, report: iggy_metadata::retirement::RetirementReport) {
        let from = report.replica;
        if !self.shared.retirement.borrow_mut().report(report) {
            tracing::debug!(
                "a retirement report of replica {from} of another view or revision dropped"
            );
        }
    }

    fn sessions_held_by_peer(&mut self, from: u8, sessions: &[(u128, u64)]) {
        tracing::trace!("replica {from} holds {} sessions", sessions.len());
        self.shared.sessions_held_elsewhere(sessions);
    }
}

/// Whether a metadata op of `operation` creates partitions (a topic with its partitions, or more
/// partitions), and so their directories.
fn makes_partitions(operation: u8) -> bool {
    matches!(
        Operation::from_repr(operation),
        Some(
            Operation::CreateTopic
                | Operation::CreateTopicWithAssignments
                | Operation::CreatePartitions
                | Operation::CreatePartitionsWithAssignments
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ops_that_make_partitions_are_fsynced_whatever_the_durability() {
        let makes: Vec<Operation> = Operation::ALL
            .iter()
            .copied()
            .filter(|operation| makes_partitions(operation.to_repr()))
            .collect();
        assert_eq!(
            makes,
            [
                Operation::CreateTopicWithAssignments,
                Operation::CreatePartitionsWithAssignments,
                Operation::CreateTopic,
                Operation::CreatePartitions,
            ]
        );
    }
}
