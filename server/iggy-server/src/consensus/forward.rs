//! Forwarding on the replica plane, sans-IO: a backup that authenticated a client's Register
//! proposes it to the metadata primary (ForwardRegister, body = the session record) and the
//! primary answers with the committed session (ForwardRegisterResult); the SDK signs in on
//! whichever node it reached first. A client write for a group this replica does not lead (a
//! DeleteSegments the SDK sends to the metadata primary, for a partition another node leads)
//! goes to that group's primary as a ForwardWrite, answered with the committed reply.
//!
//! Sessions are cluster-wide: a Logout a backup's client sends goes to the metadata primary as
//! a ForwardLogout (the client's id, session and request number, so a retry is answered from
//! the client table), answered with the op that ended it (ForwardLogoutResult); a backup asks
//! the primary what it knows committed before it judges a login (CommitQuestion, answered by a
//! CommitAnswer); and a backup names the sessions bound on it in ConsumerSessionHeartbeat frames (no reply), so the
//! metadata primary, which alone expires sessions, counts them as active. Each replica also
//! names the ended sessions none of its partition copies holds a writer slot of, for its
//! model's partition-set revision, in SessionRetirementProgress frames (no reply): the
//! metadata primary releases a session's slot once a quorum did (`runtime/maintenance.rs`).

use super::replica_bus::Inbound;
use bytes::{BufMut, Bytes, BytesMut};
use iggy_generated::frames::{
    Command, CommitAnswerHeader, CommitQuestionHeader, ConsumerSessionHeartbeatHeader,
    ForwardLogoutHeader, ForwardLogoutOutcome, ForwardLogoutResultHeader, ForwardRegisterHeader,
    ForwardRegisterOutcome, ForwardRegisterResultHeader, ForwardWriteHeader, ForwardWriteOutcome,
    ForwardWriteResultHeader, METADATA_GROUP, Operation, SessionReportEntry,
};
use iggy_vsr::codec::{CodecError, FrameContext, malformed, same_group, sealed_frame};

/// Entries one session heartbeat frame carries at most (a 48 KiB body, far below any frame
/// limit); more sessions go in more frames.
pub const SESSIONS_PER_HEARTBEAT: usize = 2048;

/// Entries one retirement progress frame carries at most: as many as one FinalizeSession
/// names (spec/frames.spec, `SessionReportEntry`).
pub const SESSIONS_PER_PROGRESS: usize = 128;

/// A forwarding frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Backup to metadata primary: commit this Register (`record` is the session record the
    /// backup built after checking the credentials of `user_id`).
    Register {
        client: u128,
        nonce: u128,
        user_id: u32,
        record: Bytes,
    },
    /// Metadata primary to backup: the verdict; `session` is the register's op when Ok.
    RegisterResult {
        nonce: u128,
        client: u128,
        session: u64,
        outcome: ForwardRegisterOutcome,
    },
    /// A client's write for the sender's group (its group and incarnation are the frame's).
    Write {
        client: u128,
        nonce: u128,
        request: u64,
        operation: u8,
        body: Bytes,
    },
    /// The group's primary to the relaying replica: the verdict and, committed, the reply.
    WriteResult {
        nonce: u128,
        op: u64,
        outcome: ForwardWriteOutcome,
        reply: Bytes,
    },
    /// Backup to metadata primary: commit the Logout of `client`'s `session`, as its request
    /// `request`.
    Logout {
        client: u128,
        nonce: u128,
        session: u64,
        request: u64,
    },
    /// Metadata primary to backup: the verdict; `commit` is the op after which the session is
    /// gone (the Logout's own, or the commit then when it had already ended).
    LogoutResult {
        nonce: u128,
        client: u128,
        commit: u64,
        outcome: ForwardLogoutOutcome,
    },
    /// Backup to metadata primary: what have you committed?
    CommitQuestion { nonce: u128 },
    /// Metadata primary to backup: its commit when asked; `None` from a replica that does not
    /// lead the metadata group in normal status.
    CommitAnswer { nonce: u128, commit: Option<u64> },
    /// Backup to metadata primary: sessions bound on the sender, as (client, session);
    /// `incomplete` when more frames of the same report follow.
    SessionHeartbeat {
        incomplete: bool,
        sessions: Vec<(u128, u64)>,
    },
    /// Any replica to metadata primary: ended sessions, as (client, session), that no
    /// partition copy of the sender holds a writer slot of, every copy current, for the
    /// partition set of its model's `revision`; `incomplete` when more frames of the same
    /// report follow.
    RetirementProgress {
        revision: u64,
        incomplete: bool,
        sessions: Vec<(u128, u64)>,
    },
}

/// Whether `command` is a forwarding frame (they travel in the metadata group's channel).
pub fn is_forward(command: Command) -> bool {
    matches!(
        command,
        Command::ForwardRegister
            | Command::ForwardRegisterResult
            | Command::ForwardWrite
            | Command::ForwardWriteResult
            | Command::ForwardLogout
            | Command::ForwardLogoutResult
            | Command::CommitQuestion
            | Command::CommitAnswer
            | Command::ConsumerSessionHeartbeat
            | Command::SessionRetirementProgress
    )
}

/// The frames of one retirement report: `sessions` in frames of at most
/// [`SESSIONS_PER_PROGRESS`], every one but the last marked incomplete; one frame with no
/// entry when there are none (the report still replaces the sender's previous one).
pub fn retirement_progress(
    context: &FrameContext,
    view: u32,
    revision: u64,
    sessions: &[(u128, u64)],
) -> Vec<Bytes> {
    report_parts(sessions, SESSIONS_PER_PROGRESS, true)
        .map(|(incomplete, part)| {
            let progress = Forward::RetirementProgress {
                revision,
                incomplete,
                sessions: part.to_vec(),
            };
            encode(context, view, &progress)
        })
        .collect()
}

/// The frames of one session report: `sessions` in frames of at most
/// [`SESSIONS_PER_HEARTBEAT`], every one but the last marked incomplete.
pub fn session_heartbeats(
    context: &FrameContext,
    view: u32,
    sessions: &[(u128, u64)],
) -> Vec<Bytes> {
    report_parts(sessions, SESSIONS_PER_HEARTBEAT, false)
        .map(|(incomplete, part)| {
            let heartbeat = Forward::SessionHeartbeat {
                incomplete,
                sessions: part.to_vec(),
            };
            encode(context, view, &heartbeat)
        })
        .collect()
}

/// A report of `sessions` split into frames of at most `per_frame` entries, each with whether
/// more of the report follow it; with no session, one empty part when `empty_is_sent`, none
/// otherwise.
fn report_parts(
    sessions: &[(u128, u64)],
    per_frame: usize,
    empty_is_sent: bool,
) -> impl Iterator<Item = (bool, &[(u128, u64)])> {
    let empty: &[(u128, u64)] = &[];
    let parts: Vec<&[(u128, u64)]> = match sessions.is_empty() {
        true if empty_is_sent => vec![empty],
        _ => sessions.chunks(per_frame).collect(),
    };
    let count = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(move |(index, part)| (index + 1 < count, part))
}

/// The whole frame of `forward`, sent in `view` by `context.sender`.
pub fn encode(context: &FrameContext, view: u32, forward: &Forward) -> Bytes {
    let (command, header, body) = match forward {
        Forward::Register {
            client,
            nonce,
            user_id,
            record,
        } => {
            let header = ForwardRegisterHeader {
                client: *client,
                nonce: *nonce,
                user_id: *user_id,
                ..ForwardRegisterHeader::default()
            };
            (Command::ForwardRegister, header.to_bytes(), record.clone())
        }
        Forward::RegisterResult {
            nonce,
            client,
            session,
            outcome,
        } => {
            let header = ForwardRegisterResultHeader {
                nonce: *nonce,
                client: *client,
                epoch: *session,
                outcome: *outcome,
                ..ForwardRegisterResultHeader::default()
            };
            (
                Command::ForwardRegisterResult,
                header.to_bytes(),
                Bytes::new(),
            )
        }
        Forward::Write {
            client,
            nonce,
            request,
            operation,
            body,
        } => {
            let header = ForwardWriteHeader {
                client: *client,
                nonce: *nonce,
                request: *request,
                group: context.group,
                partition_incarnation: context.incarnation,
                operation: Operation::from_repr(*operation).unwrap_or_else(|| {
                    panic!("a forwarded write of undeclared operation {operation}")
                }),
                ..ForwardWriteHeader::default()
            };
            (Command::ForwardWrite, header.to_bytes(), body.clone())
        }
        Forward::WriteResult {
            nonce,
            op,
            outcome,
            reply,
        } => {
            let header = ForwardWriteResultHeader {
                nonce: *nonce,
                op: *op,
                group: context.group,
                partition_incarnation: context.incarnation,
                outcome: *outcome,
                ..ForwardWriteResultHeader::default()
            };
            (
                Command::ForwardWriteResult,
                header.to_bytes(),
                reply.clone(),
            )
        }
        Forward::Logout {
            client,
            nonce,
            session,
            request,
        } => {
            let header = ForwardLogoutHeader {
                client: *client,
                nonce: *nonce,
                session: *session,
                request: *request,
                ..ForwardLogoutHeader::default()
            };
            (Command::ForwardLogout, header.to_bytes(), Bytes::new())
        }
        Forward::LogoutResult {
            nonce,
            client,
            commit,
            outcome,
        } => {
            let header = ForwardLogoutResultHeader {
                nonce: *nonce,
                client: *client,
                commit: *commit,
                outcome: *outcome,
                ..ForwardLogoutResultHeader::default()
            };
            (
                Command::ForwardLogoutResult,
                header.to_bytes(),
                Bytes::new(),
            )
        }
        Forward::CommitQuestion { nonce } => {
            let header = CommitQuestionHeader {
                nonce: *nonce,
                group: context.group,
                partition_incarnation: context.incarnation,
                ..CommitQuestionHeader::default()
            };
            (Command::CommitQuestion, header.to_bytes(), Bytes::new())
        }
        Forward::CommitAnswer { nonce, commit } => {
            let header = CommitAnswerHeader {
                nonce: *nonce,
                commit: commit.unwrap_or(0),
                group: context.group,
                partition_incarnation: context.incarnation,
                primary: commit.is_some(),
                ..CommitAnswerHeader::default()
            };
            (Command::CommitAnswer, header.to_bytes(), Bytes::new())
        }
        Forward::SessionHeartbeat {
            incomplete,
            sessions,
        } => {
            let header = ConsumerSessionHeartbeatHeader {
                incomplete: *incomplete,
                ..ConsumerSessionHeartbeatHeader::default()
            };
            (
                Command::ConsumerSessionHeartbeat,
                header.to_bytes(),
                session_entries(sessions),
            )
        }
        Forward::RetirementProgress {
            revision,
            incomplete,
            sessions,
        } => {
            let header = ConsumerSessionHeartbeatHeader {
                incomplete: *incomplete,
                namespace_revision: *revision,
                ..ConsumerSessionHeartbeatHeader::default()
            };
            (
                Command::SessionRetirementProgress,
                header.to_bytes(),
                session_entries(sessions),
            )
        }
    };
    sealed_frame(context, command, view, header, &body)
}

/// A forwarding frame the bus verified, for the group of `context` (the receiver's).
pub fn decode(context: &FrameContext, inbound: &Inbound) -> Result<Forward, CodecError> {
    let command = inbound.command;
    same_group(context, inbound.group, None)?;
    let sessions = matches!(
        command,
        Command::ForwardRegister
            | Command::ForwardRegisterResult
            | Command::ForwardLogout
            | Command::ForwardLogoutResult
            | Command::ConsumerSessionHeartbeat
            | Command::SessionRetirementProgress
    );
    if sessions && context.group != METADATA_GROUP {
        return Err(malformed(
            command,
            "a session frame outside the metadata group",
        ));
    }
    let header_only = matches!(
        command,
        Command::ForwardRegisterResult
            | Command::ForwardLogout
            | Command::ForwardLogoutResult
            | Command::CommitQuestion
            | Command::CommitAnswer
    );
    if header_only && !inbound.body.is_empty() {
        return Err(malformed(command, "a body on a header-only frame"));
    }
    let undecodable = |error: iggy_wire::WireError| malformed(command, error.to_string());
    match command {
        Command::ForwardRegister => {
            let header =
                ForwardRegisterHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            if header.client == 0 || header.nonce == 0 {
                return Err(malformed(command, "client or nonce 0"));
            }
            Ok(Forward::Register {
                client: header.client,
                nonce: header.nonce,
                user_id: header.user_id,
                record: inbound.body.clone(),
            })
        }
        Command::ForwardRegisterResult => {
            let header = ForwardRegisterResultHeader::decode_fixed(&inbound.header[..])
                .map_err(undecodable)?;
            Ok(Forward::RegisterResult {
                nonce: header.nonce,
                client: header.client,
                session: header.epoch,
                outcome: header.outcome,
            })
        }
        Command::ForwardWrite => {
            let header =
                ForwardWriteHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            if header.client == 0 || header.nonce == 0 {
                return Err(malformed(command, "client or nonce 0"));
            }
            Ok(Forward::Write {
                client: header.client,
                nonce: header.nonce,
                request: header.request,
                operation: header.operation.to_repr(),
                body: inbound.body.clone(),
            })
        }
        Command::ForwardWriteResult => {
            let header =
                ForwardWriteResultHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            Ok(Forward::WriteResult {
                nonce: header.nonce,
                op: header.op,
                outcome: header.outcome,
                reply: inbound.body.clone(),
            })
        }
        Command::ForwardLogout => {
            let header =
                ForwardLogoutHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            if header.client == 0 || header.nonce == 0 || header.session == 0 || header.request == 0
            {
                return Err(malformed(command, "client, nonce, session or request 0"));
            }
            Ok(Forward::Logout {
                client: header.client,
                nonce: header.nonce,
                session: header.session,
                request: header.request,
            })
        }
        Command::ForwardLogoutResult => {
            let header = ForwardLogoutResultHeader::decode_fixed(&inbound.header[..])
                .map_err(undecodable)?;
            if header.outcome != ForwardLogoutOutcome::Ok && header.commit != 0 {
                return Err(malformed(command, "a commit on a refusal"));
            }
            Ok(Forward::LogoutResult {
                nonce: header.nonce,
                client: header.client,
                commit: header.commit,
                outcome: header.outcome,
            })
        }
        Command::CommitQuestion => {
            let header =
                CommitQuestionHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            if header.nonce == 0 {
                return Err(malformed(command, "nonce 0"));
            }
            Ok(Forward::CommitQuestion {
                nonce: header.nonce,
            })
        }
        Command::CommitAnswer => {
            let header =
                CommitAnswerHeader::decode_fixed(&inbound.header[..]).map_err(undecodable)?;
            same_group(context, inbound.group, Some(header.partition_incarnation))?;
            if !header.primary && header.commit != 0 {
                return Err(malformed(
                    command,
                    "a commit from a replica that does not lead",
                ));
            }
            Ok(Forward::CommitAnswer {
                nonce: header.nonce,
                commit: header.primary.then_some(header.commit),
            })
        }
        Command::ConsumerSessionHeartbeat => {
            let header = ConsumerSessionHeartbeatHeader::decode_fixed(&inbound.header[..])
                .map_err(undecodable)?;
            if header.namespace_revision != 0 {
                return Err(malformed(command, "a namespace revision on a heartbeat"));
            }
            Ok(Forward::SessionHeartbeat {
                incomplete: header.incomplete,
                sessions: heartbeat_entries(command, &inbound.body)?,
            })
        }
        Command::SessionRetirementProgress => {
            let header = ConsumerSessionHeartbeatHeader::decode_fixed(&inbound.header[..])
                .map_err(undecodable)?;
            let sessions = heartbeat_entries(command, &inbound.body)?;
            if sessions.len() > SESSIONS_PER_PROGRESS {
                return Err(malformed(command, "more entries than one frame carries"));
            }
            Ok(Forward::RetirementProgress {
                revision: header.namespace_revision,
                incomplete: header.incomplete,
                sessions,
            })
        }
        other => Err(CodecError::Unsupported(other)),
    }
}

/// The body of a session report: one `SessionReportEntry` per (client, session).
fn session_entries(sessions: &[(u128, u64)]) -> Bytes {
    let mut body = BytesMut::with_capacity(sessions.len() * SessionReportEntry::SIZE);
    for (client, session) in sessions {
        let entry = SessionReportEntry {
            client: *client,
            session: *session,
        };
        body.put_slice(&entry.to_bytes());
    }
    body.freeze()
}

/// The (client, session) entries of a session report's body; a partial entry or a zero
/// client or session is refused.
fn heartbeat_entries(command: Command, body: &[u8]) -> Result<Vec<(u128, u64)>, CodecError> {
    if !body.len().is_multiple_of(SessionReportEntry::SIZE) {
        return Err(malformed(
            command,
            format!(
                "a body of {} bytes is no whole number of entries",
                body.len()
            ),
        ));
    }
    let entries: Vec<(u128, u64)> = body
        .chunks_exact(SessionReportEntry::SIZE)
        .map(|entry| {
            let entry = SessionReportEntry::decode_fixed(entry).expect("one whole entry");
            (entry.client, entry.session)
        })
        .collect();
    if entries
        .iter()
        .any(|(client, session)| *client == 0 || *session == 0)
    {
        return Err(malformed(command, "a client or session 0"));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::replica_link::tests::deliver_in;
    use crate::consensus::replica_link::{FrameCheck, HEADER_SIZE};

    fn context(sender: u8) -> FrameContext {
        FrameContext {
            cluster: 0xc1,
            sender,
            group: METADATA_GROUP,
            incarnation: 0,
        }
    }

    /// Through the bus's own checks, as a peer receives it.
    fn receive(frame: &Bytes, from: u8) -> Inbound {
        deliver_in(0xc1, frame, from).expect("a frame the bus admits")
    }

    /// `inbound` with another body, past the bus's checks (what the codec alone must refuse).
    fn with_body(inbound: &Inbound, body: Bytes) -> Inbound {
        Inbound {
            from: inbound.from,
            command: inbound.command,
            group: inbound.group,
            header: inbound.header.clone(),
            body,
        }
    }

    #[test]
    fn a_register_and_its_verdict_cross_the_plane_intact() {
        for forward in [
            Forward::Register {
                client: 0xabc,
                nonce: 7,
                user_id: 3,
                record: Bytes::from_static(b"session record"),
            },
            Forward::RegisterResult {
                nonce: 7,
                client: 0xabc,
                session: 42,
                outcome: ForwardRegisterOutcome::Ok,
            },
            Forward::RegisterResult {
                nonce: 8,
                client: 0xabc,
                session: 0,
                outcome: ForwardRegisterOutcome::NotPrimary,
            },
        ] {
            let frame = encode(&context(2), 5, &forward);
            let inbound = receive(&frame, 2);
            assert!(is_forward(inbound.command));
            assert_eq!(decode(&context(1), &inbound).unwrap(), forward);
        }
    }

    #[test]
    fn a_relayed_write_and_its_reply_cross_the_plane_for_their_partition_only() {
        let partition = |sender, incarnation| FrameContext {
            cluster: 0xc1,
            sender,
            group: 0x3_0020_0001,
            incarnation,
        };
        let write = Forward::Write {
            client: 0xabc,
            nonce: 9,
            request: 4,
            operation: iggy_generated::frames::Operation::DeleteSegments.to_repr(),
            body: Bytes::from_static(b"retire below offset 6"),
        };
        let result = Forward::WriteResult {
            nonce: 9,
            op: 41,
            outcome: ForwardWriteOutcome::Committed,
            reply: Bytes::from_static(b"reply"),
        };
        for forward in [write.clone(), result] {
            let inbound = receive(&encode(&partition(2, 7), 3, &forward), 2);
            assert!(is_forward(inbound.command));
            assert_eq!(
                inbound.group, 0x3_0020_0001,
                "routed to the partition's group"
            );
            assert_eq!(decode(&partition(0, 7), &inbound).unwrap(), forward);
            // Another incarnation of the same ids (deleted and created again) refuses it.
            assert!(matches!(
                decode(&partition(0, 8), &inbound),
                Err(CodecError::Incarnation { .. })
            ));
        }
        // A register forward outside the metadata group is refused.
        let register = Forward::Register {
            client: 1,
            nonce: 1,
            user_id: 0,
            record: Bytes::new(),
        };
        let inbound = receive(&encode(&partition(2, 7), 3, &register), 2);
        assert!(decode(&partition(0, 7), &inbound).is_err());
    }

    #[test]
    fn a_tampered_record_or_a_zero_nonce_is_refused() {
        let forward = Forward::Register {
            client: 1,
            nonce: 9,
            user_id: 0,
            record: Bytes::from_static(b"record"),
        };
        let mut frame = encode(&context(1), 0, &forward).to_vec();
        let last = frame.len() - 1;
        frame[last] ^= 1;
        let check = FrameCheck {
            cluster: 0xc1,
            peer: 1,
            max_frame_size: 1 << 20,
        };
        let header: [u8; HEADER_SIZE] = frame[..HEADER_SIZE].try_into().unwrap();
        let verified = check.header(&header).unwrap();
        assert!(check.body(&verified, &frame[HEADER_SIZE..]).is_err());
        let zero = Forward::Register {
            client: 1,
            nonce: 0,
            user_id: 0,
            record: Bytes::from_static(b"record"),
        };
        let inbound = receive(&encode(&context(1), 0, &zero), 1);
        assert!(decode(&context(2), &inbound).is_err());
    }

    /// `forward` crosses the plane intact in the metadata group and is refused in a
    /// partition's; the frame as received.
    fn crosses_the_metadata_plane_only(forward: &Forward) -> Inbound {
        let inbound = receive(&encode(&context(2), 5, forward), 2);
        assert!(is_forward(inbound.command));
        assert_eq!(inbound.group, METADATA_GROUP);
        assert_eq!(&decode(&context(1), &inbound).unwrap(), forward);
        let partition = FrameContext {
            group: 0x3_0020_0001,
            incarnation: 7,
            ..context(1)
        };
        assert!(decode(&partition, &inbound).is_err(), "{forward:?}");
        inbound
    }

    #[test]
    fn a_logout_and_its_verdict_cross_the_plane_intact_in_the_metadata_group_only() {
        let logout = Forward::Logout {
            client: 0xabc,
            nonce: 11,
            session: 42,
            request: 7,
        };
        for forward in [
            logout.clone(),
            Forward::LogoutResult {
                nonce: 11,
                client: 0xabc,
                commit: 58,
                outcome: ForwardLogoutOutcome::Ok,
            },
            Forward::LogoutResult {
                nonce: 12,
                client: 0xabc,
                commit: 0,
                outcome: ForwardLogoutOutcome::NotPrimary,
            },
        ] {
            crosses_the_metadata_plane_only(&forward);
        }
        // Every identifying field is non-zero: a zero one names no session to end.
        let logout_of = |client, nonce, session, request| Forward::Logout {
            client,
            nonce,
            session,
            request,
        };
        for zero in [
            logout_of(0, 11, 42, 7),
            logout_of(0xabc, 0, 42, 7),
            logout_of(0xabc, 11, 0, 7),
            logout_of(0xabc, 11, 42, 0),
        ] {
            let inbound = receive(&encode(&context(2), 5, &zero), 2);
            assert!(decode(&context(1), &inbound).is_err(), "{zero:?}");
        }
        // A refusal that names a commit is a contradiction.
        let contradiction = Forward::LogoutResult {
            nonce: 11,
            client: 0xabc,
            commit: 3,
            outcome: ForwardLogoutOutcome::PipelineFull,
        };
        let inbound = receive(&encode(&context(2), 5, &contradiction), 2);
        assert!(decode(&context(1), &inbound).is_err());
    }

    #[test]
    fn a_commit_question_and_its_answer_cross_the_plane_for_their_group_only() {
        let partition = |sender, incarnation| FrameContext {
            cluster: 0xc1,
            sender,
            group: 0x3_0020_0001,
            incarnation,
        };
        for forward in [
            Forward::CommitQuestion { nonce: 5 },
            Forward::CommitAnswer {
                nonce: 5,
                commit: Some(77),
            },
            Forward::CommitAnswer {
                nonce: 6,
                commit: Some(0),
            },
            Forward::CommitAnswer {
                nonce: 7,
                commit: None,
            },
        ] {
            let inbound = receive(&encode(&context(2), 5, &forward), 2);
            assert_eq!(inbound.group, METADATA_GROUP);
            assert!(is_forward(inbound.command));
            assert_eq!(decode(&context(1), &inbound).unwrap(), forward);
            assert!(decode(&partition(1, 7), &inbound).is_err(), "{forward:?}");
            let bodied = with_body(&inbound, Bytes::from_static(b"unexpected"));
            assert!(decode(&context(1), &bodied).is_err(), "{forward:?}");
            // A partition's: routed to it, refused by another incarnation of its ids and by
            // the metadata group.
            let inbound = receive(&encode(&partition(2, 7), 5, &forward), 2);
            assert_eq!(
                inbound.group, 0x3_0020_0001,
                "routed to the partition's group"
            );
            assert_eq!(decode(&partition(1, 7), &inbound).unwrap(), forward);
            assert!(matches!(
                decode(&partition(1, 8), &inbound),
                Err(CodecError::Incarnation { .. })
            ));
            assert!(decode(&context(1), &inbound).is_err(), "{forward:?}");
        }
        let unnamed = receive(
            &encode(&context(2), 5, &Forward::CommitQuestion { nonce: 0 }),
            2,
        );
        assert!(decode(&context(1), &unnamed).is_err());
        // A commit from a replica that says it does not lead is a contradiction.
        let header = CommitAnswerHeader {
            nonce: 8,
            commit: 3,
            group: METADATA_GROUP,
            primary: false,
            ..CommitAnswerHeader::default()
        };
        let frame = sealed_frame(
            &context(2),
            Command::CommitAnswer,
            5,
            header.to_bytes(),
            &[],
        );
        assert!(decode(&context(1), &receive(&frame, 2)).is_err());
    }

    #[test]
    fn a_header_only_logout_frame_with_a_body_is_refused() {
        let frame = encode(
            &context(2),
            5,
            &Forward::Logout {
                client: 1,
                nonce: 2,
                session: 3,
                request: 4,
            },
        );
        let inbound = with_body(&receive(&frame, 2), Bytes::from_static(b"unexpected"));
        assert!(decode(&context(1), &inbound).is_err());
    }

    #[test]
    fn a_session_report_splits_into_heartbeats_that_decode_to_every_session() {
        let sessions: Vec<(u128, u64)> = (1..=SESSIONS_PER_HEARTBEAT as u128 + 3)
            .map(|client| (client << 64 | 0xfeed, client as u64 * 10))
            .collect();
        let frames = session_heartbeats(&context(2), 4, &sessions);
        assert_eq!(frames.len(), 2);
        let mut decoded = Vec::new();
        let mut flags = Vec::new();
        for frame in &frames {
            let inbound = receive(frame, 2);
            assert_eq!(inbound.command, Command::ConsumerSessionHeartbeat);
            assert!(is_forward(inbound.command));
            match decode(&context(0), &inbound).unwrap() {
                Forward::SessionHeartbeat {
                    incomplete,
                    sessions,
                } => {
                    flags.push(incomplete);
                    decoded.extend(sessions);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            flags,
            [true, false],
            "only the last frame completes the report"
        );
        assert_eq!(decoded, sessions);
        // One small report is one complete frame; none is no frame.
        let one = session_heartbeats(&context(2), 4, &sessions[..1]);
        assert_eq!(one.len(), 1);
        assert_eq!(
            decode(&context(0), &receive(&one[0], 2)).unwrap(),
            Forward::SessionHeartbeat {
                incomplete: false,
                sessions: sessions[..1].to_vec(),
            }
        );
        assert!(session_heartbeats(&context(2), 4, &[]).is_empty());
    }

    #[test]
    fn a_heartbeat_with_a_partial_or_zero_entry_is_refused() {
        let frame = &session_heartbeats(&context(2), 4, &[(5, 6), (7, 8)])[0];
        let whole = receive(frame, 2);
        assert!(decode(&context(0), &whole).is_ok());
        let partial = with_body(&whole, whole.body.slice(..SessionReportEntry::SIZE + 1));
        assert!(decode(&context(0), &partial).is_err());
        let mut zero_session = whole.body.to_vec();
        zero_session[16..24].fill(0);
        let zeroed = with_body(&whole, Bytes::from(zero_session));
        assert!(decode(&context(0), &zeroed).is_err());
        // Outside the metadata group it is no session report.
        let partition = FrameContext {
            group: 0x3_0020_0001,
            incarnation: 7,
            ..context(0)
        };
        assert!(decode(&partition, &whole).is_err());
    }

    #[test]
    fn a_retirement_report_splits_into_progress_frames_naming_its_revision() {
        let sessions: Vec<(u128, u64)> = (1..=SESSIONS_PER_PROGRESS as u128 + 1)
            .map(|client| (client << 64 | 0xfeed, client as u64 * 10))
            .collect();
        let frames = retirement_progress(&context(2), 4, 0x7_0000_0001, &sessions);
        assert_eq!(frames.len(), 2);
        let mut decoded = Vec::new();
        let mut flags = Vec::new();
        for frame in &frames {
            let inbound = receive(frame, 2);
            assert_eq!(inbound.command, Command::SessionRetirementProgress);
            let forward = decode(&context(0), &inbound).unwrap();
            crosses_the_metadata_plane_only(&forward);
            let Forward::RetirementProgress {
                revision,
                incomplete,
                sessions,
            } = forward
            else {
                panic!("{forward:?}")
            };
            assert_eq!(revision, 0x7_0000_0001);
            flags.push(incomplete);
            decoded.extend(sessions);
        }
        assert_eq!(flags, [true, false]);
        assert_eq!(decoded, sessions);
        // An empty report is still one frame: it replaces what the sender reported before.
        let empty = retirement_progress(&context(2), 4, 9, &[]);
        assert_eq!(empty.len(), 1);
        assert_eq!(
            decode(&context(0), &receive(&empty[0], 2)).unwrap(),
            Forward::RetirementProgress {
                revision: 9,
                incomplete: false,
                sessions: Vec::new(),
            }
        );
        // More entries than one frame may carry are refused.
        let oversized = Forward::RetirementProgress {
            revision: 9,
            incomplete: false,
            sessions: sessions.clone(),
        };
        let inbound = receive(&encode(&context(2), 4, &oversized), 2);
        assert!(decode(&context(0), &inbound).is_err());
    }

    #[test]
    fn a_heartbeat_naming_a_revision_is_refused() {
        let header = ConsumerSessionHeartbeatHeader {
            namespace_revision: 3,
            ..ConsumerSessionHeartbeatHeader::default()
        };
        let frame = sealed_frame(
            &context(2),
            Command::ConsumerSessionHeartbeat,
            5,
            header.to_bytes(),
            &session_entries(&[(5, 6)]),
        );
        assert!(decode(&context(0), &receive(&frame, 2)).is_err());
    }
}
