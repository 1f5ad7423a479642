//! Peer admission on the replica plane, sans-IO: the frames of the handshake spec/frames.spec
//! declares ("Peer handshake (ours)") and the decisions on them. The dialer sends
//! `ReplicaHello`; the acceptor always answers `ReplicaChallenge` with a status and its own
//! identity, so both ends compare both identities and log the field that differs. Identity is
//! what the release declares (protocol.spec), never a hash of the executable: a rebuilt or
//! stripped binary of the same release is admitted.
//!
//! The shell owns the sockets: it writes `hello`, reads 256 bytes and passes them to
//! `admit_hello` (acceptor) or `admit_challenge` (dialer), and closes on a refusal.

use iggy_generated::frames::{
    Command, ReplicaChallengeHeader, ReplicaHandshakeStatus, ReplicaHelloHeader, ReplicaIdentity,
};
use iggy_generated::protocol;

/// Every handshake frame is one header with no body.
pub const FRAME_SIZE: usize = ReplicaHelloHeader::SIZE;

/// The seal covers everything after the checksum itself (bytes 16..256).
const SEALED_FROM: usize = ReplicaHelloHeader::CHECKSUM_BODY_OFFSET;

/// What this node is on the replica plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// The cluster id (derived from `cluster.name`).
    pub cluster: u128,
    pub replica: u8,
    /// Roster size: peers' ids are below it.
    pub replica_count: u8,
    pub identity: ReplicaIdentity,
}

/// An admitted peer: who it is and what it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub replica: u8,
    pub identity: ReplicaIdentity,
}

/// A refused handshake frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status an acceptor answers with. `None` for a frame whose seal does not hold: none
    /// of its bytes can be trusted, so it gets no answer, only a closed connection.
    pub status: Option<ReplicaHandshakeStatus>,
    /// The header field that differs (`cluster`, `replica`, `protocol_version`, `release`,
    /// `storage_marker`, `snapshot_format`, ...).
    pub field: &'static str,
    /// Ours against theirs, for the log line on this side.
    pub detail: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer refused: `{}` {}", self.field, self.detail)
    }
}

/// The identity this build declares, from protocol.spec's generated constants.
pub fn local_identity() -> ReplicaIdentity {
    ReplicaIdentity {
        protocol_version: protocol::CURRENT.packed(),
        snapshot_format: protocol::SNAPSHOT_FORMAT,
        release: padded(&format!(
            "{}/{}",
            protocol::RELEASE_NAME,
            protocol::RELEASE_VERSION
        )),
        storage_marker: padded(protocol::STORAGE_MARKER),
    }
}

/// ASCII, NUL-padded; the spec sizes the fields for the declared texts, so a longer one is a
/// build mistake.
fn padded<const N: usize>(text: &str) -> [u8; N] {
    assert!(text.len() <= N, "{text:?} does not fit {N} bytes");
    let mut out = [0u8; N];
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

/// Who dials whom: the lower replica id dials, the higher one accepts, so each pair has
/// exactly one connection and no tie to break.
pub fn dials(local: u8, peer: u8) -> bool {
    local < peer
}

fn seal(frame: &mut [u8; FRAME_SIZE]) {
    let checksum = u128::from(twox_hash::XxHash3_64::oneshot(&frame[SEALED_FROM..]));
    frame[..SEALED_FROM].copy_from_slice(&checksum.to_le_bytes());
}

fn seal_holds(frame: &[u8]) -> bool {
    let expected = u128::from(twox_hash::XxHash3_64::oneshot(&frame[SEALED_FROM..]));
    frame[..SEALED_FROM] == expected.to_le_bytes()
}

/// The dialer's first frame, to the replica its roster names `target`.
pub fn hello(local: &Local, target: u8) -> [u8; FRAME_SIZE] {
    let mut frame = ReplicaHelloHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: local.cluster,
        size: FRAME_SIZE as u32,
        view: 0,
        release: 0,
        command: Command::ReplicaHello,
        replica: local.replica,
        reserved_frame: [0; 66],
        nonce: [0; 32],
        target,
        identity: local.identity,
    }
    .to_bytes();
    seal(&mut frame);
    frame
}

/// The acceptor's answer: `Ok`, or the status of the refusal it is about to close with.
pub fn challenge(local: &Local, status: ReplicaHandshakeStatus) -> [u8; FRAME_SIZE] {
    let mut frame = ReplicaChallengeHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: local.cluster,
        size: FRAME_SIZE as u32,
        view: 0,
        release: 0,
        command: Command::ReplicaChallenge,
        replica: local.replica,
        reserved_frame: [0; 66],
        nonce: [0; 32],
        mac: [0; 32],
        status,
        identity: local.identity,
    }
    .to_bytes();
    seal(&mut frame);
    frame
}

/// Checks the seal before any field is read, then the frame's fixed shape.
fn unsealed(frame: &[u8], command: Command) -> Result<(), Refusal> {
    if frame.len() != FRAME_SIZE {
        return Err(Refusal {
            status: None,
            field: "size",
            detail: format!(
                "frame is {} bytes, a handshake frame is {FRAME_SIZE}",
                frame.len()
            ),
        });
    }
    if !seal_holds(frame) {
        return Err(Refusal {
            status: None,
            field: "checksum",
            detail: "the seal does not hold (torn or forged frame); nothing in it is read".into(),
        });
    }
    let found = frame[ReplicaHelloHeader::COMMAND_OFFSET];
    if found != command as u8 {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::UnknownCommand),
            field: "command",
            detail: format!("expected {command:?} ({}), got {found}", command as u8),
        });
    }
    Ok(())
}

fn undecodable(error: iggy_wire::WireError) -> Refusal {
    Refusal {
        status: Some(ReplicaHandshakeStatus::UnknownCommand),
        field: "header",
        detail: format!("does not decode: {error:?}"),
    }
}

/// The acceptor's decision on a dialer's `ReplicaHello`. On `Ok` it answers
/// `challenge(local, Ok)`; on a refusal with a status it answers that status, then closes.
pub fn admit_hello(local: &Local, frame: &[u8]) -> Result<Admitted, Refusal> {
    unsealed(frame, Command::ReplicaHello)?;
    let hello = ReplicaHelloHeader::decode_fixed(frame).map_err(undecodable)?;
    compare_cluster(local, hello.cluster)?;
    // The dialer's roster and ours disagree about who listens here.
    if hello.target != local.replica {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::DirectionalRule),
            field: "replica",
            detail: format!(
                "replica {} dialed replica {} at this address; this is replica {}",
                hello.replica, hello.target, local.replica
            ),
        });
    }
    if hello.replica >= local.replica_count || !dials(hello.replica, local.replica) {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::DirectionalRule),
            field: "replica",
            detail: format!(
                "replica {} may not dial replica {} (only a lower id of the {} dials a higher)",
                hello.replica, local.replica, local.replica_count
            ),
        });
    }
    compare_identity(&local.identity, &hello.identity)?;
    Ok(Admitted {
        replica: hello.replica,
        identity: hello.identity,
    })
}

/// The dialer's decision on the acceptor's `ReplicaChallenge`, `peer` being the replica it
/// dialed. A non-Ok status is the acceptor's refusal; the dialer still compares the identities
/// so its own log names the field that differs.
pub fn admit_challenge(local: &Local, peer: u8, frame: &[u8]) -> Result<Admitted, Refusal> {
    unsealed(frame, Command::ReplicaChallenge)?;
    let answer = ReplicaChallengeHeader::decode_fixed(frame).map_err(undecodable)?;
    compare_cluster(local, answer.cluster)?;
    if answer.replica != peer || !dials(local.replica, peer) {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::DirectionalRule),
            field: "replica",
            detail: format!(
                "replica {} answered a dial from replica {} to replica {peer}",
                answer.replica, local.replica
            ),
        });
    }
    compare_identity(&local.identity, &answer.identity)?;
    if answer.status != ReplicaHandshakeStatus::Ok {
        // Cluster and identity were compared above; what is left to name is the acceptor's
        // view of the replica ids, or a status without a field of its own.
        let field = match answer.status {
            ReplicaHandshakeStatus::DirectionalRule => "replica",
            _ => "status",
        };
        return Err(Refusal {
            status: Some(answer.status),
            field,
            detail: format!("replica {peer} refused this replica: {:?}", answer.status),
        });
    }
    Ok(Admitted {
        replica: answer.replica,
        identity: answer.identity,
    })
}

fn compare_cluster(local: &Local, theirs: u128) -> Result<(), Refusal> {
    if theirs == local.cluster {
        return Ok(());
    }
    Err(Refusal {
        status: Some(ReplicaHandshakeStatus::ClusterMismatch),
        field: "cluster",
        detail: format!("ours {:032x}, theirs {theirs:032x}", local.cluster),
    })
}

/// The declared identity, byte for byte, each field with the status the spec gives it.
fn compare_identity(ours: &ReplicaIdentity, theirs: &ReplicaIdentity) -> Result<(), Refusal> {
    let refusal = |status, field, ours: String, theirs: String| Refusal {
        status: Some(status),
        field,
        detail: format!("ours {ours}, theirs {theirs}"),
    };
    let version = |packed| protocol::ProtocolVersion::from_packed(packed).to_string();
    if ours.protocol_version != theirs.protocol_version {
        return Err(refusal(
            ReplicaHandshakeStatus::ProtocolMismatch,
            "protocol_version",
            version(ours.protocol_version),
            version(theirs.protocol_version),
        ));
    }
    if ours.release != theirs.release {
        return Err(refusal(
            ReplicaHandshakeStatus::ReleaseMismatch,
            "release",
            text(&ours.release),
            text(&theirs.release),
        ));
    }
    if ours.storage_marker != theirs.storage_marker {
        return Err(refusal(
            ReplicaHandshakeStatus::StorageFormatMismatch,
            "storage_marker",
            text(&ours.storage_marker),
            text(&theirs.storage_marker),
        ));
    }
    // The metadata snapshot is part of the storage format: the spec has no status of its own
    // for it.
    if ours.snapshot_format != theirs.snapshot_format {
        return Err(refusal(
            ReplicaHandshakeStatus::StorageFormatMismatch,
            "snapshot_format",
            ours.snapshot_format.to_string(),
            theirs.snapshot_format.to_string(),
        ));
    }
    Ok(())
}

/// A NUL-padded ASCII field for a log line (a peer's bytes are shown, never trusted).
fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    format!("{:?}", String::from_utf8_lossy(&bytes[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's examples (spec/frames.spec "Peer handshake (ours)"), so these frames match
    /// the layouts the conformance vectors pin.
    const IDENTITY_EXAMPLE: &str = "003000000a000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
    /// Replica 0 dialing replica 2.
    const HELLO_FROM_0: &str = "7d515d336f788a72000000000000000000000000000000000000000000000000137c0b2df4a6e891350c7d4b9e2a1f6c0001000000000000000000000e000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000020000000000000000000000000000000000000000000000000000000000000000000000003000000a000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
    const CHALLENGE_OK_FROM_2: &str = "3bb68b48519e5cd2000000000000000000000000000000000000000000000000137c0b2df4a6e891350c7d4b9e2a1f6c0001000000000000000000000f020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000003000000a000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
    /// Replica 2 refusing a peer whose storage marker is IGGY-OWNERSHIP-HISTORY-4.
    const CHALLENGE_OLD_STORAGE_FROM_2: &str = "fd836ae4e62e984d000000000000000000000000000000000000000000000000137c0b2df4a6e891350c7d4b9e2a1f6c0001000000000000000000000f020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000008000000003000000a000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d340000000000000000";
    const EXAMPLE_CLUSTER: u128 = 143718449150001073674660529502281235475;

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    fn replica(id: u8) -> Local {
        Local {
            cluster: EXAMPLE_CLUSTER,
            replica: id,
            replica_count: 3,
            identity: local_identity(),
        }
    }

    /// Both directions of one link: the acceptor's verdict on the dialer's hello, then the
    /// dialer's verdict on the acceptor's answer.
    fn handshake(
        dialer: &Local,
        acceptor: &Local,
    ) -> (Result<Admitted, Refusal>, Result<Admitted, Refusal>) {
        let at_acceptor = admit_hello(acceptor, &hello(dialer, acceptor.replica));
        let status = match &at_acceptor {
            Ok(_) => ReplicaHandshakeStatus::Ok,
            Err(refusal) => refusal.status.unwrap(),
        };
        let at_dialer = admit_challenge(dialer, acceptor.replica, &challenge(acceptor, status));
        (at_acceptor, at_dialer)
    }

    #[test]
    fn identity_is_the_declared_release_not_the_binary() {
        assert_eq!(
            local_identity().to_bytes().to_vec(),
            bytes(IDENTITY_EXAMPLE)
        );
        assert_eq!(
            text(&local_identity().storage_marker),
            "\"IGGY-OWNERSHIP-HISTORY-5\""
        );
    }

    #[test]
    fn frames_match_the_spec_examples_seal_included() {
        assert_eq!(hello(&replica(0), 2).to_vec(), bytes(HELLO_FROM_0));
        assert_eq!(
            challenge(&replica(2), ReplicaHandshakeStatus::Ok).to_vec(),
            bytes(CHALLENGE_OK_FROM_2)
        );
    }

    #[test]
    fn an_identical_identity_is_admitted_both_ways() {
        let (at_acceptor, at_dialer) = handshake(&replica(0), &replica(2));
        assert_eq!(
            at_acceptor,
            Ok(Admitted {
                replica: 0,
                identity: local_identity()
            })
        );
        assert_eq!(
            at_dialer,
            Ok(Admitted {
                replica: 2,
                identity: local_identity()
            })
        );
        assert_eq!(
            admit_hello(&replica(2), &bytes(HELLO_FROM_0))
                .unwrap()
                .replica,
            0
        );
        assert_eq!(
            admit_challenge(&replica(0), 2, &bytes(CHALLENGE_OK_FROM_2))
                .unwrap()
                .replica,
            2
        );
    }

    #[test]
    fn each_mismatch_is_refused_on_both_sides_naming_its_field() {
        type Change = fn(&mut Local);
        let cases: [(Change, ReplicaHandshakeStatus, &str); 5] = [
            (
                |l| l.cluster ^= 1,
                ReplicaHandshakeStatus::ClusterMismatch,
                "cluster",
            ),
            (
                |l| l.identity.protocol_version = protocol::V0_11_1.packed(),
                ReplicaHandshakeStatus::ProtocolMismatch,
                "protocol_version",
            ),
            (
                |l| l.identity.release = padded("iggy-rs/0.1.1"),
                ReplicaHandshakeStatus::ReleaseMismatch,
                "release",
            ),
            (
                |l| l.identity.storage_marker = padded("IGGY-OWNERSHIP-HISTORY-4"),
                ReplicaHandshakeStatus::StorageFormatMismatch,
                "storage_marker",
            ),
            (
                |l| l.identity.snapshot_format = 9,
                ReplicaHandshakeStatus::StorageFormatMismatch,
                "snapshot_format",
            ),
        ];
        for (change, status, field) in cases {
            let mut other = replica(0);
            change(&mut other);
            let (at_acceptor, at_dialer) = handshake(&other, &replica(2));
            let refusal = at_acceptor.unwrap_err();
            assert_eq!(
                (refusal.status, refusal.field),
                (Some(status), field),
                "{refusal}"
            );
            let refusal = at_dialer.unwrap_err();
            assert_eq!(
                (refusal.status, refusal.field),
                (Some(status), field),
                "{refusal}"
            );
            // The other way round: the odd one accepts.
            let mut other = replica(2);
            change(&mut other);
            let (at_acceptor, at_dialer) = handshake(&replica(0), &other);
            assert_eq!(at_acceptor.unwrap_err().field, field);
            assert_eq!(at_dialer.unwrap_err().field, field);
        }
        let refusal =
            admit_challenge(&replica(0), 2, &bytes(CHALLENGE_OLD_STORAGE_FROM_2)).unwrap_err();
        assert_eq!(refusal.field, "storage_marker", "{refusal}");
        assert!(
            refusal.detail.contains("IGGY-OWNERSHIP-HISTORY-4"),
            "{refusal}"
        );
    }

    #[test]
    fn replica_ids_follow_the_roster_and_the_dial_direction() {
        let refused = |dialer: u8, acceptor: Local| {
            admit_hello(&acceptor, &hello(&replica(dialer), acceptor.replica)).unwrap_err()
        };
        for (dialer, acceptor) in [(2, replica(0)), (2, replica(1)), (1, replica(1))] {
            let refusal = refused(dialer, acceptor);
            assert_eq!(
                (refusal.status, refusal.field),
                (Some(ReplicaHandshakeStatus::DirectionalRule), "replica"),
                "{dialer} -> {}: {refusal}",
                acceptor.replica
            );
        }
        // A replica id outside the acceptor's roster.
        let refusal = admit_hello(
            &replica(2),
            &hello(
                &Local {
                    replica_count: 9,
                    ..replica(7)
                },
                2,
            ),
        )
        .unwrap_err();
        assert_eq!(refusal.field, "replica");
        // Rosters that disagree about who listens at an address: replica 0 dialed what its
        // roster calls replica 1 and reached replica 2. Both sides name `replica`.
        let (at_acceptor, at_dialer) = {
            let at_acceptor = admit_hello(&replica(2), &hello(&replica(0), 1));
            let status = at_acceptor.as_ref().unwrap_err().status.unwrap();
            let at_dialer = admit_challenge(&replica(0), 1, &challenge(&replica(2), status));
            (at_acceptor.unwrap_err(), at_dialer.unwrap_err())
        };
        assert_eq!(
            (at_acceptor.status, at_acceptor.field),
            (Some(ReplicaHandshakeStatus::DirectionalRule), "replica"),
            "{at_acceptor}"
        );
        assert!(
            at_acceptor.detail.contains("dialed replica 1"),
            "{at_acceptor}"
        );
        assert_eq!(at_dialer.field, "replica", "{at_dialer}");
        // The dialer expects the replica it dialed to answer.
        let refusal = admit_challenge(
            &replica(0),
            1,
            &challenge(&replica(2), ReplicaHandshakeStatus::Ok),
        )
        .unwrap_err();
        assert_eq!(refusal.field, "replica");
    }

    #[test]
    fn the_lower_id_dials_exactly_once_per_pair() {
        for a in 0..REPLICAS {
            assert!(!dials(a, a));
            for b in (a + 1)..REPLICAS {
                assert!(dials(a, b), "{a} -> {b}");
                assert!(!dials(b, a), "{b} -> {a}");
            }
        }
    }
    const REPLICAS: u8 = 32;

    #[test]
    fn a_bad_seal_is_refused_before_any_field_is_read() {
        let good = hello(&replica(0), 2);
        // A torn frame: the identity's tail never arrived (zeroed), so the seal fails.
        let mut torn = good;
        torn[240..].fill(0);
        // A forged frame: another cluster and a foreign replica id written over a valid hello
        // without resealing; a field check would name `cluster`; the seal check comes first.
        let mut forged = good;
        forged[ReplicaHelloHeader::CLUSTER_OFFSET] ^= 0xff;
        forged[ReplicaHelloHeader::REPLICA_OFFSET] = 200;
        for frame in [torn, forged] {
            let refusal = admit_hello(&replica(2), &frame).unwrap_err();
            assert_eq!(
                (refusal.status, refusal.field),
                (None, "checksum"),
                "{refusal}"
            );
        }
        let mut answer = challenge(&replica(2), ReplicaHandshakeStatus::Ok);
        answer[ReplicaChallengeHeader::STATUS_OFFSET] = 99;
        assert_eq!(
            admit_challenge(&replica(0), 2, &answer).unwrap_err().field,
            "checksum"
        );
        assert_eq!(
            admit_hello(&replica(2), &good[..200]).unwrap_err().field,
            "size"
        );
        // Sealed, but the wrong frame for this side.
        let refusal = admit_hello(
            &replica(2),
            &challenge(&replica(0), ReplicaHandshakeStatus::Ok),
        )
        .unwrap_err();
        assert_eq!(refusal.status, Some(ReplicaHandshakeStatus::UnknownCommand));
    }

    #[test]
    fn an_acceptors_refusal_reaches_the_dialer() {
        let refusal = admit_challenge(
            &replica(0),
            2,
            &challenge(&replica(2), ReplicaHandshakeStatus::AuthRequired),
        )
        .unwrap_err();
        assert_eq!(
            (refusal.status, refusal.field),
            (Some(ReplicaHandshakeStatus::AuthRequired), "status")
        );
    }
}
