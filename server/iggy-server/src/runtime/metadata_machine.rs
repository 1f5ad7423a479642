//! The metadata group's shell: applies committed ops with the pure
//! [`iggy_metadata::machine`] and runs their effects on disk (partition logs opened or deleted),
//! or, while the journal replays at start, collects them for one reconciliation.
//!
//! A replica its peers checkpointed past takes the primary's metadata checkpoint whole (state
//! transfer): the snapshot replaces the model, and the partitions are reconciled with it once
//! (`Shared::reconcile_after_transfer`), since the ops it skipped ran no effect here.

use crate::consensus::group::StateMachine;
use crate::runtime::shared::{PartitionKey, Shared};
use bytes::Bytes;
use iggy_metadata::Effect;
use iggy_metadata::machine;
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
}

impl MetadataMachine {
    /// A machine about to replay its journal (see `replay_deletes`).
    pub fn replaying(shared: Rc<Shared>) -> Self {
        MetadataMachine {
            shared,
            replay_deletes: Some(HashSet::new()),
            replay_group_deletes: Vec::new(),
            released: Vec::new(),
        }
    }
}

impl StateMachine for MetadataMachine {
    type Read = ();

    async fn apply(&mut self, op: u64, client: u128, operation: u8, body: Bytes) -> Bytes {
        let (reply, effects) = machine::apply(
            &mut self.shared.metadata.borrow_mut(),
            op,
            client,
            operation,
            &body,
        );
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
            None => {
                let mut effects = effects.into_iter().peekable();
                while let Some(effect) = effects.next() {
                    if !matches!(effect, Effect::OpenPartition { .. }) {
                        self.shared.run_effect(effect).await;
                        continue;
                    }
                    // A topic's partitions open side by side: one after the other, a large
                    // topic kept this group from its peers for seconds (each open waits for
                    // its fsyncs), long enough for a view change on every node.
                    let mut opens = vec![effect];
                    opens.extend(std::iter::from_fn(|| {
                        effects.next_if(|next| matches!(next, Effect::OpenPartition { .. }))
                    }));
                    use futures_util::StreamExt;
                    futures_util::stream::iter(opens)
                        .for_each_concurrent(PARTITION_OPENS_AT_ONCE, |open| {
                            self.shared.run_effect(open)
                        })
                        .await;
                }
            }
        }
        reply
    }

    async fn replayed(&mut self) {
        let deletes = self.replay_deletes.take().unwrap_or_default();
        self.shared.reconcile_partitions(&deletes).await;
        for effect in std::mem::take(&mut self.replay_group_deletes) {
            self.shared.run_effect(effect).await;
        }
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
        let now = crate::runtime::clock::now_micros();
        Some(machine::envelope(now, live.user_id, &[]))
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
