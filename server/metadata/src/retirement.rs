//! The metadata primary's evidence that ended sessions are retired, sans-IO.
//!
//! An ended session's slot in the metadata client table may go only once no partition keeps a
//! writer slot of it. Each replica of the metadata group (each node, which hosts a copy of
//! every partition) reports, for the partition set of its model (its
//! [`crate::Metadata::partition_set_revision`]), the ended sessions none of its copies holds;
//! the primary releases a session once a quorum of replicas reported it so at the revision and
//! in the view it is in now. [`RetirementEvidence`] keeps those reports between its passes.
//!
//! A replica's report is whole: a session it leaves out (a copy that lags, a late writer slot)
//! no longer counts for it. A report longer than one frame arrives in parts, every part but the
//! last marked incomplete; the parts are gathered and replace the replica's previous report
//! when the last one arrives.

use std::collections::{BTreeMap, BTreeSet};

/// An ended session: its client and the register op that began it.
pub type SessionKey = (u128, u64);

/// One frame of a replica's retirement report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetirementReport {
    /// The reporting replica of the metadata group.
    pub replica: u8,
    /// The metadata view it reported in.
    pub view: u64,
    /// Its model's partition-set revision, the set its copies were checked against.
    pub revision: u64,
    /// Ended sessions no partition copy of the replica holds a writer slot of.
    pub sessions: Vec<SessionKey>,
    /// More parts of this report follow.
    pub incomplete: bool,
}

/// Per ended session, the replicas that reported it retired at one view and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetirementEvidence {
    replica_count: u8,
    view: u64,
    revision: u64,
    /// Per replica, the sessions its latest whole report named.
    reported: BTreeMap<u8, BTreeSet<SessionKey>>,
    /// Per replica, the parts of a report whose last part has not arrived yet.
    gathering: BTreeMap<u8, BTreeSet<SessionKey>>,
}

impl RetirementEvidence {
    /// No evidence yet, in a metadata group of `replica_count` replicas.
    pub fn new(replica_count: u8) -> Self {
        assert!(replica_count > 0, "a group has at least one replica");
        RetirementEvidence {
            replica_count,
            view: 0,
            revision: 0,
            reported: BTreeMap::new(),
            gathering: BTreeMap::new(),
        }
    }

    /// The replicas whose reports release a session: a majority of the group (VSR's quorum),
    /// one in a group of one.
    pub fn quorum(&self) -> usize {
        usize::from(self.replica_count) / 2 + 1
    }

    /// The primary's view and its model's revision now: evidence gathered at another one is
    /// dropped (a new primary starts afresh; a changed partition set was not checked).
    pub fn observe(&mut self, view: u64, revision: u64) {
        if (view, revision) != (self.view, self.revision) {
            self.view = view;
            self.revision = revision;
            self.reported.clear();
            self.gathering.clear();
        }
    }

    /// Takes one part of a replica's report; false (dropped) when it is of another view or
    /// revision than the one observed, or from a replica outside the group.
    pub fn report(&mut self, report: RetirementReport) -> bool {
        if report.replica >= self.replica_count
            || report.view != self.view
            || report.revision != self.revision
        {
            return false;
        }
        let gathered = self.gathering.entry(report.replica).or_default();
        gathered.extend(report.sessions);
        if !report.incomplete {
            let whole = self.gathering.remove(&report.replica).unwrap_or_default();
            self.reported.insert(report.replica, whole);
        }
        true
    }

    /// The sessions a quorum of replicas reported retired, in order.
    pub fn releasable(&self) -> Vec<SessionKey> {
        let mut votes: BTreeMap<SessionKey, usize> = BTreeMap::new();
        for sessions in self.reported.values() {
            for session in sessions {
                *votes.entry(*session).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .filter(|(_, count)| *count >= self.quorum())
            .map(|(session, _)| session)
            .collect()
    }

    /// `sessions` were released: no report names them any more.
    pub fn released(&mut self, sessions: &[SessionKey]) {
        for reported in self
            .reported
            .values_mut()
            .chain(self.gathering.values_mut())
        {
            for session in sessions {
                reported.remove(session);
            }
        }
    }

    /// The view and revision the evidence is of.
    pub fn of(&self) -> (u64, u64) {
        (self.view, self.revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: u64 = 4;
    const REVISION: u64 = (9 << 20) | 1;

    fn whole(replica: u8, sessions: &[SessionKey]) -> RetirementReport {
        RetirementReport {
            replica,
            view: VIEW,
            revision: REVISION,
            sessions: sessions.to_vec(),
            incomplete: false,
        }
    }

    fn evidence(replica_count: u8) -> RetirementEvidence {
        let mut evidence = RetirementEvidence::new(replica_count);
        evidence.observe(VIEW, REVISION);
        evidence
    }

    const A: SessionKey = (0xa, 3);
    const B: SessionKey = (0xb, 5);

    #[test]
    fn three_replicas_release_on_two_reports() {
        let mut evidence = evidence(3);
        assert_eq!(evidence.quorum(), 2);
        assert!(evidence.report(whole(0, &[A, B])));
        assert!(evidence.releasable().is_empty(), "the primary alone");
        assert!(evidence.report(whole(2, &[A])));
        assert_eq!(evidence.releasable(), vec![A]);
    }

    #[test]
    fn five_replicas_release_on_three_reports() {
        let mut evidence = evidence(5);
        assert_eq!(evidence.quorum(), 3);
        for replica in [0, 3] {
            evidence.report(whole(replica, &[A]));
        }
        assert!(evidence.releasable().is_empty(), "two of five");
        evidence.report(whole(4, &[A]));
        assert_eq!(evidence.releasable(), vec![A]);
    }

    #[test]
    fn a_group_of_one_is_its_own_quorum() {
        let mut evidence = evidence(1);
        evidence.report(whole(0, &[A]));
        assert_eq!(evidence.releasable(), vec![A]);
    }

    #[test]
    fn a_replica_reporting_again_counts_once() {
        let mut evidence = evidence(3);
        for _ in 0..3 {
            evidence.report(whole(1, &[A]));
        }
        assert!(evidence.releasable().is_empty());
    }

    #[test]
    fn a_report_of_another_revision_or_view_or_replica_is_dropped() {
        let mut evidence = evidence(3);
        evidence.report(whole(0, &[A]));
        let stale = RetirementReport {
            revision: REVISION - 1,
            ..whole(1, &[A])
        };
        let other_view = RetirementReport {
            view: VIEW + 1,
            ..whole(1, &[A])
        };
        let stranger = whole(3, &[A]);
        for report in [stale, other_view, stranger] {
            assert!(!evidence.report(report.clone()), "{report:?}");
        }
        assert!(evidence.releasable().is_empty());
    }

    #[test]
    fn a_new_view_or_revision_clears_the_evidence() {
        let mut evidence = evidence(3);
        evidence.report(whole(0, &[A]));
        evidence.report(whole(1, &[A]));
        evidence.observe(VIEW, REVISION);
        assert_eq!(
            evidence.releasable(),
            vec![A],
            "the same view and revision keep it"
        );
        evidence.observe(VIEW + 1, REVISION);
        assert!(evidence.releasable().is_empty(), "a view change clears it");
        assert_eq!(evidence.of(), (VIEW + 1, REVISION));
        evidence.report(RetirementReport {
            view: VIEW + 1,
            ..whole(0, &[A])
        });
        evidence.report(RetirementReport {
            view: VIEW + 1,
            ..whole(1, &[A])
        });
        assert_eq!(evidence.releasable(), vec![A]);
        evidence.observe(VIEW + 1, REVISION + 1);
        assert!(
            evidence.releasable().is_empty(),
            "a new partition set clears it"
        );
    }

    #[test]
    fn a_report_leaving_a_session_out_holds_it() {
        let mut evidence = evidence(3);
        evidence.report(whole(0, &[A, B]));
        evidence.report(whole(1, &[A, B]));
        assert_eq!(evidence.releasable(), vec![A, B]);
        // Replica 1's copies now hold B (a late writer slot): its next report leaves B out.
        evidence.report(whole(1, &[A]));
        assert_eq!(evidence.releasable(), vec![A]);
    }

    #[test]
    fn a_report_in_parts_counts_once_its_last_part_arrives() {
        let mut evidence = evidence(3);
        evidence.report(whole(0, &[A, B]));
        evidence.report(RetirementReport {
            incomplete: true,
            ..whole(1, &[A])
        });
        assert!(evidence.releasable().is_empty(), "half a report");
        evidence.report(whole(1, &[B]));
        assert_eq!(evidence.releasable(), vec![A, B]);
    }

    #[test]
    fn released_sessions_are_forgotten() {
        let mut evidence = evidence(3);
        evidence.report(whole(0, &[A, B]));
        evidence.report(whole(1, &[A, B]));
        evidence.released(&[A]);
        assert_eq!(evidence.releasable(), vec![B]);
    }
}
