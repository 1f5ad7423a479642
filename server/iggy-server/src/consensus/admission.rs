//! Peer admission on the replica plane, sans-IO: the frames of the handshake spec/frames.spec
//! declares ("Peer handshake (ours)") and the decisions on them. The dialer sends
//! `ReplicaHello`; the acceptor always answers `ReplicaChallenge` with a status and its own
//! identity, so both ends compare both identities and log the field that differs. Identity is
//! what the release declares (protocol.spec), never a hash of the executable: a rebuilt or
//! stripped binary of the same release is admitted.
//!
//! The shell owns the sockets: it writes `hello`, reads 256 bytes and passes them to
//! `admit_hello` (acceptor) or `admit_challenge` (dialer), and closes on a refusal.
//!
//! With `[cluster.auth]` enabled ([`PeerAuth`]) both ends also prove they hold the cluster's
//! shared secret: each frame carries a fresh nonce from the shell, the acceptor's Ok challenge
//! a MAC, and the dialer ends with a `ReplicaFinish` (`DialerOutcome::finish`) that the
//! acceptor judges with `admit_finish`. Each MAC is a BLAKE3 keyed hash of the spec's
//! `ReplicaAuthTranscript`: both ids, both nonces, both identities and histories and the
//! direction, so it verifies for one handshake in one direction only. Possession of the
//! secret proves membership, not which node holds it; nothing is encrypted here. Under
//! `[cluster.tls]` the shell keys each connection's MACs with the TLS session's exporter value
//! ([`PeerAuth::bound_to_channel`]), so a MAC made on one session verifies on no other.
//!
//! Both frames also carry the sender's [`MetadataHistory`]: whether its metadata group holds a
//! history. It never decides admission; a node that starts with no metadata gathers its peers'
//! declarations in a [`StartGate`] and refuses to format a new history into a cluster whose
//! peers hold one (a node erased while its peers kept theirs).

use super::runs::{self, Declared, RunLedger, Stale};
use iggy_generated::frames::{
    Command, MetadataHistory, REPLICA_AUTH_DOMAIN, REPLICA_AUTH_KEY_CONTEXT, ReplicaAuthMode,
    ReplicaAuthTranscript, ReplicaChallengeHeader, ReplicaFinishHeader, ReplicaHandshakeStatus,
    ReplicaHelloHeader, ReplicaIdentity, ReplicaMacDirection,
};
use iggy_generated::protocol;
use std::collections::BTreeMap;
use zeroize::Zeroizing;

/// Every handshake frame is one header with no body.
pub const FRAME_SIZE: usize = ReplicaHelloHeader::SIZE;

/// One handshake frame.
pub type Frame = [u8; FRAME_SIZE];

/// A handshake nonce: fresh random bytes from the shell's CSPRNG for every handshake.
pub type Nonce = [u8; ReplicaHelloHeader::NONCE_SIZE];

/// A handshake MAC.
type Mac = [u8; ReplicaFinishHeader::MAC_SIZE];

/// A MAC key, overwritten with zeros when dropped: a key does not stay behind in memory this
/// process freed or reused. Copies the compiler makes when it moves one, and the keyed
/// hasher's own state inside `blake3`, are not covered.
type MacKey = Zeroizing<[u8; 32]>;

/// The MAC keys `[cluster.auth]` gives this node, derived from its secrets: MACs are verified
/// under `current` or `previous` (a rolling rotation) and computed under `current`, except a
/// dialer's, computed under whichever key verified the acceptor's (`judge_challenge`). Its Debug
/// form never shows a key; its keys are zeroed when it is dropped (not `Copy`, so every copy is
/// one that is dropped).
#[derive(Clone, PartialEq, Eq)]
pub struct PeerAuth {
    current: MacKey,
    previous: Option<MacKey>,
}

impl PeerAuth {
    /// Keys for `shared_secret` and, during a rotation, `previous_shared_secret`. The raw
    /// secrets never enter a transcript: each key is derived from one under the spec's
    /// `REPLICA_AUTH_KEY_CONTEXT`.
    pub fn new(shared_secret: &[u8], previous_shared_secret: Option<&[u8]>) -> Self {
        let key =
            |secret: &[u8]| Zeroizing::new(blake3::derive_key(REPLICA_AUTH_KEY_CONTEXT, secret));
        PeerAuth {
            current: key(shared_secret),
            previous: previous_shared_secret.map(key),
        }
    }

    /// The keys for one connection whose TLS session exports `channel_binding`: each key is
    /// the keyed hash of the binding under the configured one, so a MAC made on one TLS session
    /// verifies on no other. Both ends of a session derive the same keys.
    pub fn bound_to_channel(&self, channel_binding: &[u8; 32]) -> Self {
        let bind =
            |key: &MacKey| Zeroizing::new(*blake3::keyed_hash(key, channel_binding).as_bytes());
        PeerAuth {
            current: bind(&self.current),
            previous: self.previous.as_ref().map(bind),
        }
    }

    /// The key among ours under which `mac` is `transcript`'s, if any. Each comparison is
    /// constant-time (`blake3::Hash` equality).
    fn verifying_key(&self, transcript: &[u8], mac: &Mac) -> Option<&MacKey> {
        let received = blake3::Hash::from_bytes(*mac);
        [Some(&self.current), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .find(|key| blake3::keyed_hash(key, transcript) == received)
    }
}

impl std::fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PeerAuth {{ previous_shared_secret: {} }}",
            if self.previous.is_some() {
                "set"
            } else {
                "unset"
            }
        )
    }
}

fn mac_of(key: &[u8; 32], transcript: &[u8]) -> Mac {
    *blake3::keyed_hash(key, transcript).as_bytes()
}

/// What a MAC in `direction` covers: the hello and the challenge of one handshake.
fn transcript(
    hello: &ReplicaHelloHeader,
    challenge: &ReplicaChallengeHeader,
    direction: ReplicaMacDirection,
) -> [u8; ReplicaAuthTranscript::SIZE] {
    ReplicaAuthTranscript {
        domain: REPLICA_AUTH_DOMAIN,
        cluster: hello.cluster,
        dialer: hello.replica,
        acceptor: challenge.replica,
        direction,
        dialer_history: hello.metadata_history,
        acceptor_history: challenge.metadata_history,
        dialer_nonce: hello.nonce,
        acceptor_nonce: challenge.nonce,
        dialer_identity: hello.identity,
        acceptor_identity: challenge.identity,
    }
    .to_bytes()
}

fn auth_mode(local: &Local) -> ReplicaAuthMode {
    match local.auth {
        Some(_) => ReplicaAuthMode::SharedSecret,
        None => ReplicaAuthMode::Off,
    }
}

/// The seal covers everything after the checksum itself (bytes 16..256).
const SEALED_FROM: usize = ReplicaHelloHeader::CHECKSUM_BODY_OFFSET;

/// What this node is on the replica plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// The cluster id (derived from `cluster.name`).
    pub cluster: u128,
    pub replica: u8,
    /// Roster size: peers' ids are below it.
    pub replica_count: u8,
    pub identity: ReplicaIdentity,
    /// `[cluster.auth]`: `None` when it is disabled.
    pub auth: Option<PeerAuth>,
    /// The roster's digest (`config::Cluster::roster_digest`), declared in the hello.
    pub roster: u64,
    /// This node's run and its sightings of its peers' runs, as when the frame is built: a
    /// node restored from an older copy is refused ([`runs::judge`]).
    pub runs: RunLedger,
}

/// An admitted peer: who it is, what it runs, and whether it holds a metadata history (as its
/// handshake frame declared it when it was built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub replica: u8,
    pub identity: ReplicaIdentity,
    pub history: MetadataHistory,
    /// What the peer declared about its runs (the shell records it: `RunLedger::learn`).
    pub runs: Declared,
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

/// The `field` of a refusal that finds this node's own data directory older than the node
/// was: the shell stops the node (`runs_file::stop_as_stale_copy`).
pub const STALE_THIS_NODE: &str = "own_run";

impl Refusal {
    /// Whether this refusal found this node, not the peer, to be an older copy.
    pub fn stops_this_node(&self) -> bool {
        self.field == STALE_THIS_NODE
    }
}

fn stale_refusal(peer: u8, stale: Stale) -> Refusal {
    match stale {
        Stale::Peer { declared, seen } => Refusal {
            status: Some(ReplicaHandshakeStatus::StaleCopy),
            field: "run",
            detail: format!(
                "replica {peer} declares {declared}, and this node linked with its {seen} \
                 before: its data directory is older than that node was (restored from a copy, \
                 or replaced), and counted in a view change it could discard writes it \
                 acknowledged; it stops, and restarts restored"
            ),
        },
        Stale::ThisNode {
            running,
            seen_by_peer,
        } => Refusal {
            status: Some(ReplicaHandshakeStatus::StaleCopy),
            field: STALE_THIS_NODE,
            detail: format!(
                "replica {peer} linked with {seen_by_peer} of this node, and this node is \
                 {running}: this data directory is older than this node was (restored from a \
                 copy, or replaced), and counted in a view change it could discard writes this \
                 node acknowledged"
            ),
        },
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(status) => write!(
                f,
                "peer refused ({status:?}): `{}` {}",
                self.field, self.detail
            ),
            None => write!(f, "peer refused: `{}` {}", self.field, self.detail),
        }
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

/// The dialer's first frame, to the replica its roster names `target`, declaring `history`.
/// `nonce` is written only with auth on (the frame of a node without auth carries zeros).
pub fn hello(local: &Local, target: u8, history: MetadataHistory, nonce: Nonce) -> Frame {
    let mode = auth_mode(local);
    let mut frame = ReplicaHelloHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: local.cluster,
        size: FRAME_SIZE as u32,
        view: 0,
        release: 0,
        command: Command::ReplicaHello,
        replica: local.replica,
        runs: local.runs.declared_to(target).to_wire(),
        nonce: with_auth(mode, nonce),
        target,
        metadata_history: history,
        auth_mode: mode,
        roster: local.roster,
        identity: local.identity,
    }
    .to_bytes();
    seal(&mut frame);
    frame
}

fn with_auth(mode: ReplicaAuthMode, nonce: Nonce) -> Nonce {
    match mode {
        ReplicaAuthMode::SharedSecret => nonce,
        ReplicaAuthMode::Off => [0; 32],
    }
}

/// The acceptor's answer to `hello`: `Ok`, or the status of the refusal it is about to close
/// with, and the acceptor's own `history`. An Ok answer with auth on carries `nonce` and the
/// acceptor's MAC; `hello` must then be one `admit_hello` admitted.
pub fn challenge(
    local: &Local,
    status: ReplicaHandshakeStatus,
    history: MetadataHistory,
    nonce: Nonce,
    hello: &[u8],
) -> Frame {
    let mode = auth_mode(local);
    let mut header = ReplicaChallengeHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: local.cluster,
        size: FRAME_SIZE as u32,
        view: 0,
        release: 0,
        command: Command::ReplicaChallenge,
        replica: local.replica,
        // To the replica the hello names (any, were it refused: its sighting is then none).
        runs: local
            .runs
            .declared_to(
                hello
                    .get(ReplicaHelloHeader::REPLICA_OFFSET)
                    .copied()
                    .unwrap_or(u8::MAX),
            )
            .to_wire(),
        nonce: [0; 32],
        mac: [0; 32],
        status,
        metadata_history: history,
        auth_mode: mode,
        identity: local.identity,
    };
    if let (ReplicaHandshakeStatus::Ok, Some(auth)) = (status, &local.auth) {
        let hello = ReplicaHelloHeader::decode_fixed(hello).expect("an admitted hello decodes");
        header.nonce = nonce;
        let covered = transcript(&hello, &header, ReplicaMacDirection::Acceptor);
        header.mac = mac_of(&auth.current, &covered);
    }
    let mut frame = header.to_bytes();
    seal(&mut frame);
    frame
}

/// The dialer's last frame with auth on: its MAC under `key`, or (`status` not Ok) why it
/// refuses the challenge, with no MAC: a dialer never proves itself to an acceptor that did
/// not prove itself first.
fn finish(local: &Local, status: ReplicaHandshakeStatus, mac: Mac) -> Frame {
    let mut frame = ReplicaFinishHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: local.cluster,
        size: FRAME_SIZE as u32,
        view: 0,
        release: 0,
        command: Command::ReplicaFinish,
        replica: local.replica,
        reserved_frame: [0; 66],
        mac,
        status,
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
/// `challenge(local, Ok, ..)` (and with auth on reads a Finish for `admit_finish`); on a
/// refusal with a status it answers that status, then closes.
pub fn admit_hello(local: &Local, frame: &[u8]) -> Result<Admitted, Refusal> {
    unsealed(frame, Command::ReplicaHello)?;
    let hello = ReplicaHelloHeader::decode_fixed(frame).map_err(undecodable)?;
    compare_cluster(local, hello.cluster)?;
    compare_auth_mode(
        local,
        Claimant::Dialer {
            peer: hello.replica,
        },
        hello.auth_mode,
    )?;
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
    if hello.roster != 0 && hello.roster != local.roster {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::RosterMismatch),
            field: "roster",
            detail: format!(
                "replica {}'s [[cluster.nodes]] differ from this node's (digest {:016x}, ours \
                 {:016x}): give every node the same roster, or clients are told different \
                 addresses for the same node",
                hello.replica, hello.roster, local.roster
            ),
        });
    }
    let runs = Declared::from_wire(&hello.runs);
    runs::judge(local.runs.declared_to(hello.replica), runs)
        .map_err(|stale| stale_refusal(hello.replica, stale))?;
    Ok(Admitted {
        replica: hello.replica,
        identity: hello.identity,
        history: hello.metadata_history,
        runs,
    })
}

/// The dialer's verdict on a challenge, and the Finish to write before acting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialerOutcome {
    pub verdict: Result<Admitted, Refusal>,
    /// With auth on, after a sealed Ok challenge: this node's MAC, or the status of its
    /// refusal so the acceptor's log says why too. `None` otherwise.
    pub finish: Option<Frame>,
}

/// The dialer's decision on the acceptor's `ReplicaChallenge`, `peer` being the replica it
/// dialed and `hello` the frame it sent. A non-Ok status is the acceptor's refusal; the dialer
/// still compares the identities so its own log names the field that differs.
pub fn admit_challenge(local: &Local, peer: u8, hello: &Frame, frame: &[u8]) -> DialerOutcome {
    let mut finish_key = None;
    let verdict = judge_challenge(local, peer, hello, frame, &mut finish_key);
    // The acceptor waits for a Finish only after a sealed Ok challenge of its own.
    let answered_ok = frame.len() == FRAME_SIZE
        && seal_holds(frame)
        && frame[ReplicaChallengeHeader::COMMAND_OFFSET] == Command::ReplicaChallenge as u8
        && frame[ReplicaChallengeHeader::STATUS_OFFSET] == ReplicaHandshakeStatus::Ok as u8;
    let finish = match (&verdict, local.auth.is_some() && answered_ok) {
        (_, false) => None,
        (Ok(_), true) => finish_key.map(|mac| finish(local, ReplicaHandshakeStatus::Ok, mac)),
        (Err(refusal), true) => {
            let status = refusal
                .status
                .unwrap_or(ReplicaHandshakeStatus::UnknownCommand);
            Some(finish(local, status, [0; 32]))
        }
    };
    DialerOutcome { verdict, finish }
}

/// `admit_challenge`'s checks; on admission with auth on, `finish_mac` gets this node's MAC,
/// computed under the key that verified the acceptor's (during a rotation the acceptor may
/// hold only our previous secret, and it has just proven which one it holds).
fn judge_challenge(
    local: &Local,
    peer: u8,
    hello: &Frame,
    frame: &[u8],
    finish_mac: &mut Option<Mac>,
) -> Result<Admitted, Refusal> {
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
    if answer.status == ReplicaHandshakeStatus::AuthRequired {
        // The acceptor's auth mode is not ours; say which side has it.
        compare_auth_mode(local, Claimant::Acceptor { peer }, answer.auth_mode)?;
    }
    let runs = Declared::from_wire(&answer.runs);
    let judged = runs::judge(local.runs.declared_to(peer), runs);
    if answer.status == ReplicaHandshakeStatus::StaleCopy
        && let Err(stale) = judged
    {
        return Err(stale_refusal(peer, stale));
    }
    if answer.status != ReplicaHandshakeStatus::Ok {
        // Cluster, identity and auth mode were compared above; what is left to name is the
        // acceptor's view of the replica ids, or a status without a field of its own.
        let field = match answer.status {
            ReplicaHandshakeStatus::DirectionalRule => "replica",
            ReplicaHandshakeStatus::AuthRequired => "auth_mode",
            ReplicaHandshakeStatus::RosterMismatch => "roster",
            _ => "status",
        };
        let detail = match answer.status {
            ReplicaHandshakeStatus::RosterMismatch => format!(
                "replica {peer}'s [[cluster.nodes]] differ from this node's (digest {:016x}): \
                 give every node the same roster",
                local.roster
            ),
            status => format!("replica {peer} refused this replica: {status:?}"),
        };
        return Err(Refusal {
            status: Some(answer.status),
            field,
            detail,
        });
    }
    compare_auth_mode(local, Claimant::Acceptor { peer }, answer.auth_mode)?;
    if let Some(auth) = &local.auth {
        let hello = ReplicaHelloHeader::decode_fixed(hello).expect("our own hello decodes");
        let covered = transcript(&hello, &answer, ReplicaMacDirection::Acceptor);
        let Some(key) = auth.verifying_key(&covered, &answer.mac) else {
            return Err(mac_mismatch(peer));
        };
        let ours = transcript(&hello, &answer, ReplicaMacDirection::Dialer);
        *finish_mac = Some(mac_of(key, &ours));
    }
    judged.map_err(|stale| stale_refusal(peer, stale))?;
    Ok(Admitted {
        replica: answer.replica,
        identity: answer.identity,
        history: answer.metadata_history,
        runs,
    })
}

/// The acceptor's decision, with auth on, on the dialer's `ReplicaFinish` that follows the
/// `hello` it admitted and the Ok `challenge` it answered with.
pub fn admit_finish(
    local: &Local,
    hello: &[u8],
    challenge: &Frame,
    frame: &[u8],
) -> Result<(), Refusal> {
    let auth = local
        .auth
        .as_ref()
        .expect("a Finish is read only with auth on");
    let hello = ReplicaHelloHeader::decode_fixed(hello).expect("an admitted hello decodes");
    let challenge = ReplicaChallengeHeader::decode_fixed(challenge).expect("our challenge");
    unsealed(frame, Command::ReplicaFinish)?;
    let finish = ReplicaFinishHeader::decode_fixed(frame).map_err(undecodable)?;
    compare_cluster(local, finish.cluster)?;
    if finish.replica != hello.replica {
        return Err(Refusal {
            status: Some(ReplicaHandshakeStatus::DirectionalRule),
            field: "replica",
            detail: format!(
                "replica {} finished the handshake replica {} began",
                finish.replica, hello.replica
            ),
        });
    }
    match finish.status {
        ReplicaHandshakeStatus::Ok => {}
        ReplicaHandshakeStatus::MacMismatch => {
            return Err(Refusal {
                status: Some(ReplicaHandshakeStatus::MacMismatch),
                field: "mac",
                detail: format!(
                    "replica {} could not verify this replica's MAC: its \
                     cluster.auth.shared_secret (and previous_shared_secret) differ from this \
                     replica's",
                    hello.replica
                ),
            });
        }
        status => {
            return Err(Refusal {
                status: Some(status),
                field: "status",
                detail: format!("replica {} refused this replica: {status:?}", hello.replica),
            });
        }
    }
    let covered = transcript(&hello, &challenge, ReplicaMacDirection::Dialer);
    match auth.verifying_key(&covered, &finish.mac) {
        Some(_) => Ok(()),
        None => Err(mac_mismatch(hello.replica)),
    }
}

fn mac_mismatch(peer: u8) -> Refusal {
    Refusal {
        status: Some(ReplicaHandshakeStatus::MacMismatch),
        field: "mac",
        detail: format!(
            "replica {peer}'s MAC does not verify under this replica's \
             cluster.auth.shared_secret or previous_shared_secret: the secrets differ, or the \
             frame was replayed or forged"
        ),
    }
}

/// Who declared an auth mode. Nothing in a hello or a challenge is authenticated (the MACs
/// come after), so a refusal names the source of the claim, never the peer, as its author.
#[derive(Debug, Clone, Copy)]
enum Claimant {
    /// The answer to this replica's dial of `peer`'s roster address.
    Acceptor { peer: u8 },
    /// An inbound hello naming itself replica `peer`.
    Dialer { peer: u8 },
}

impl std::fmt::Display for Claimant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Claimant::Acceptor { peer } => {
                write!(f, "whoever answered at replica {peer}'s address")
            }
            Claimant::Dialer { peer } => write!(f, "a dialer naming itself replica {peer}"),
        }
    }
}

impl Claimant {
    fn peer(self) -> u8 {
        match self {
            Claimant::Acceptor { peer } | Claimant::Dialer { peer } => peer,
        }
    }
}

/// Both ends must agree on whether the cluster authenticates; which one has it is named. The
/// other side's mode is its unauthenticated claim: a "does not authenticate" is refused like a
/// wrong MAC, and the line says whose claim it is, since a node without `[cluster.auth]` and
/// anyone else answering on that path look the same.
fn compare_auth_mode(
    local: &Local,
    claimant: Claimant,
    theirs: ReplicaAuthMode,
) -> Result<(), Refusal> {
    let ours = auth_mode(local);
    if ours == theirs {
        return Ok(());
    }
    let peer = claimant.peer();
    let detail = match ours {
        ReplicaAuthMode::SharedSecret => format!(
            "{claimant} claims it does not authenticate; the claim is unauthenticated (a node \
             without [cluster.auth], or anyone else answering on that path), and \
             cluster.auth.enabled is true here, so the link is refused: check that replica \
             {peer} runs with [cluster.auth] enabled and this node's shared_secret, and that \
             nothing else answers at its roster address"
        ),
        ReplicaAuthMode::Off => format!(
            "{claimant} claims it requires a shared secret, and cluster.auth.enabled is false \
             here: enable [cluster.auth] with the same shared_secret on every node"
        ),
    };
    Err(Refusal {
        status: Some(ReplicaHandshakeStatus::AuthRequired),
        field: "auth_mode",
        detail,
    })
}

/// What this replica declares to one peer in a handshake. A history found on disk at start is
/// declared to every peer. A history this process formatted (its metadata group started empty
/// and has committed an op since) is declared only to a peer linked with this process before:
/// only such a peer can have acknowledged any of it, so one erased since must not start empty,
/// while a peer never linked (a node of a new cluster that starts late) holds nothing anyone
/// counted on and joins as a replica that lags. Before the first commit no op was ever
/// acknowledged, and there is nothing to lose.
pub fn declared_history(
    at_start: MetadataHistory,
    metadata_commit: u64,
    peer_linked_before: bool,
) -> MetadataHistory {
    if at_start == MetadataHistory::Held || (metadata_commit > 0 && peer_linked_before) {
        MetadataHistory::Held
    } else {
        MetadataHistory::Absent
    }
}

/// How a node that starts without metadata decides, from its peers' handshakes, whether it may
/// format a new history. The shell feeds it every admission until it has a verdict or the
/// deadline passes; time and sockets stay outside.
#[derive(Debug, Clone)]
pub struct StartGate {
    replica: u8,
    replica_count: u8,
    /// Each admitted peer's declaration. A `Held` stays: a later link of the same peer cannot
    /// take back a history it declared.
    declared: BTreeMap<u8, MetadataHistory>,
}

/// The gate's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartVerdict {
    /// These admitted peers hold a metadata history: this node's own was erased or lost, and
    /// starting empty would format a second history into their cluster.
    Refuse { holders: Vec<u8> },
    /// No admitted peer holds a history, and a majority of the cluster (this node counted)
    /// declared none: a new cluster starts. `silent` lists the peers not admitted before the
    /// deadline, whose history is unknown.
    NewHistory { silent: Vec<u8> },
    /// The deadline passed with fewer than a majority declaring none: the silent peers may
    /// hold the history (this node's erased, its peers unreachable for a while), so nothing is
    /// formatted yet and the node keeps listening.
    Undecided { silent: Vec<u8> },
}

impl StartGate {
    pub fn new(replica: u8, replica_count: u8) -> Self {
        assert!(
            replica < replica_count,
            "replica {replica} of {replica_count}"
        );
        StartGate {
            replica,
            replica_count,
            declared: BTreeMap::new(),
        }
    }

    /// `peer` admitted (either direction), with the `history` its handshake frame declared.
    pub fn handle_admitted(&mut self, peer: u8, history: MetadataHistory) {
        // Admission checked the id against the roster; this node never admits itself.
        assert!(peer < self.replica_count && peer != self.replica);
        let declared = self.declared.entry(peer).or_insert(history);
        if history == MetadataHistory::Held {
            *declared = MetadataHistory::Held;
        }
    }

    /// The verdict once it needs no more waiting: a refusal as soon as one peer holds a
    /// history, a new history once every peer declared none. `None`: keep listening.
    pub fn poll_verdict(&self) -> Option<StartVerdict> {
        let holders = self.holders();
        if !holders.is_empty() {
            return Some(StartVerdict::Refuse { holders });
        }
        let peers = usize::from(self.replica_count) - 1;
        (self.declared.len() == peers).then_some(StartVerdict::NewHistory { silent: Vec::new() })
    }

    /// The verdict when the deadline passed: a new history only once a majority of the cluster,
    /// this node counted, declared none. Any majority that committed an op of a history that
    /// exists meets that majority in a replica holding it, so a new history is never formatted
    /// beside one a quorum acknowledged while a single node's metadata was lost (two nodes of
    /// three erased is the loss the seed leaves outside automatic recovery). A new cluster
    /// starts once a majority of its nodes run; a node whose peers are all down waits for them.
    pub fn verdict_at_deadline(&self) -> StartVerdict {
        if let Some(verdict) = self.poll_verdict() {
            return verdict;
        }
        let silent = (0..self.replica_count)
            .filter(|peer| *peer != self.replica && !self.declared.contains_key(peer))
            .collect();
        let majority = usize::from(self.replica_count) / 2 + 1;
        // Here no admitted peer holds a history (`poll_verdict` would have refused).
        if self.declared.len() + 1 >= majority {
            StartVerdict::NewHistory { silent }
        } else {
            StartVerdict::Undecided { silent }
        }
    }

    fn holders(&self) -> Vec<u8> {
        self.declared
            .iter()
            .filter(|(_, history)| **history == MetadataHistory::Held)
            .map(|(peer, _)| *peer)
            .collect()
    }
}

/// The operator's message for a refused start: what was found, why it is refused, and what to
/// do. `data_dir` is the configured `system.path`.
pub fn erased_refusal(replica: u8, holders: &[u8], data_dir: &str) -> String {
    let (named, verb) = holders_named(holders);
    format!(
        "replica {replica} has no metadata history in {data_dir} (no metadata/journal.wal \
         records, no checkpoint), but {} of its cluster {verb} one: this node's metadata was \
         erased or lost while its peers kept theirs. Starting it empty would format a new \
         history into the running cluster and could lose committed operations, so the start is \
         refused and nothing was written to {data_dir}. To recover: restore this node's \
         data directory (system.path) from a backup of this node (check the copy with \
         `iggy-server verify --path <copy>` and this node's configuration), then start it \
         with --restored; it catches up from its peers, by a state transfer when their \
         checkpoints have passed the copy, and votes in no view change until it did. Without a \
         copy, start it with --restored on the empty directory: it copies everything from its \
         peers. Either way its peers must keep a quorum until it caught up. To discard the \
         whole cluster's data instead, stop every node and erase every node's data directory; \
         a new cluster then starts.",
        named
    )
}

/// The refusal of `--fresh` on replica `replica` while `holders` hold the cluster's metadata
/// history: erased, the replica would be refused as `erased_refusal` says, so nothing is removed.
pub fn fresh_refusal(replica: u8, holders: &[u8], data_dir: &str) -> String {
    let (named, verb) = holders_named(holders);
    format!(
        "--fresh refused: {named} of replica {replica}'s cluster {verb} its metadata history, \
         and a replica whose data directory was erased while its peers kept theirs cannot \
         rejoin (its start is refused). Nothing was removed from {data_dir}. Start it without \
         --fresh to rejoin with its data; to reset the whole cluster, stop every node and \
         start each with --fresh."
    )
}

/// The refusal of `--fresh` on replica `replica` while `silent` peers did not say whether they
/// hold the cluster's metadata history: a reset without them would form a new history, and a
/// silent one holding the old history would bring it back when it starts (its higher ops and
/// views outrank the new cluster's, whose acknowledged writes are then lost), so nothing is
/// removed.
pub fn fresh_silent_refusal(replica: u8, silent: &[u8], data_dir: &str) -> String {
    let (named, _) = holders_named(silent);
    let verb = if silent.len() == 1 { "did" } else { "do" };
    format!(
        "--fresh refused: {named} of replica {replica}'s cluster {verb} not answer, and a reset \
         needs every node: one down now would still hold the history being reset and bring it \
         back into the new cluster when it starts, losing what the new cluster acknowledged. \
         Nothing was removed from {data_dir}. Start every node with --fresh at once (each waits \
         for the others up to cluster.heartbeat_timeout); for a node that cannot start, erase \
         its data directory before it ever starts again."
    )
}

/// "replica 0 and replica 1" and the verb that agrees with it.
fn holders_named(holders: &[u8]) -> (String, &'static str) {
    let named: Vec<String> = holders
        .iter()
        .map(|peer| format!("replica {peer}"))
        .collect();
    let verb = if holders.len() == 1 { "holds" } else { "hold" };
    (named.join(" and "), verb)
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
    const IDENTITY_EXAMPLE: &str = "003000000b000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
    /// Replica 0 dialing replica 2.
    const HELLO_FROM_0: &str = "b33abfd45b00946e000000000000000000000000000000000000000000000000137c0b2df4a6e891350c7d4b9e2a1f6c0001000000000000000000000e000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000020000000000000000000000000000000000000000000000000000000000000000000000003000000b000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
    const CHALLENGE_OK_FROM_2: &str = "46b12617dd25ebd2000000000000000000000000000000000000000000000000137c0b2df4a6e891350c7d4b9e2a1f6c0001000000000000000000000f020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000003000000b000000696767792d72732f302e312e3000000000000000494747592d4f574e4552534849502d484953544f52592d350000000000000000";
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
            auth: None,
            // Undeclared, as the spec's example frames carry it.
            roster: 0,
            runs: RunLedger::default(),
        }
    }

    /// A hello without auth: its nonce is never written.
    fn plain_hello(local: &Local, target: u8, history: MetadataHistory) -> Frame {
        assert!(local.auth.is_none());
        hello(local, target, history, DIALER_NONCE)
    }

    /// A challenge without auth: no MAC, so no hello to cover.
    fn plain_challenge(
        local: &Local,
        status: ReplicaHandshakeStatus,
        history: MetadataHistory,
    ) -> Frame {
        assert!(local.auth.is_none());
        challenge(local, status, history, ACCEPTOR_NONCE, &[])
    }

    /// The dialer's verdict without auth, where no Finish follows.
    fn plain_verdict(local: &Local, peer: u8, frame: &[u8]) -> Result<Admitted, Refusal> {
        assert!(local.auth.is_none());
        let outcome = admit_challenge(local, peer, &[0; FRAME_SIZE], frame);
        assert_eq!(outcome.finish, None);
        outcome.verdict
    }

    const DIALER_NONCE: Nonce = [0xd1; 32];
    const ACCEPTOR_NONCE: Nonce = [0xa2; 32];

    /// Both directions of one link: the acceptor's verdict on the dialer's hello, then the
    /// dialer's verdict on the acceptor's answer.
    fn handshake(
        dialer: &Local,
        acceptor: &Local,
    ) -> (Result<Admitted, Refusal>, Result<Admitted, Refusal>) {
        let hello = plain_hello(dialer, acceptor.replica, MetadataHistory::Absent);
        let at_acceptor = admit_hello(acceptor, &hello);
        let status = match &at_acceptor {
            Ok(_) => ReplicaHandshakeStatus::Ok,
            Err(refusal) => refusal.status.unwrap(),
        };
        // Answering this hello: the challenge declares the acceptor's sighting of its sender.
        let answer = challenge(
            acceptor,
            status,
            MetadataHistory::Absent,
            ACCEPTOR_NONCE,
            &hello,
        );
        let at_dialer = plain_verdict(dialer, acceptor.replica, &answer);
        (at_acceptor, at_dialer)
    }

    const SECRET: &str = "a shared secret of at least 32 bytes, same everywhere";
    const OTHER_SECRET: &str = "another secret of at least 32 bytes, on one node only";

    /// Replica `id` with `[cluster.auth]` on: `secret`, and `previous` during a rotation.
    fn keyed(id: u8, secret: &str, previous: Option<&str>) -> Local {
        Local {
            auth: Some(PeerAuth::new(
                secret.as_bytes(),
                previous.map(str::as_bytes),
            )),
            ..replica(id)
        }
    }

    /// One whole handshake as the shell runs it: each side's verdict and the frames it saw.
    struct Exchange {
        at_acceptor: Result<Admitted, Refusal>,
        at_dialer: Result<Admitted, Refusal>,
        hello: Frame,
        challenge: Frame,
        finish: Option<Frame>,
    }

    fn exchange(dialer: &Local, acceptor: &Local, acceptor_nonce: Nonce) -> Exchange {
        let hello = hello(
            dialer,
            acceptor.replica,
            MetadataHistory::Absent,
            DIALER_NONCE,
        );
        let admitted = admit_hello(acceptor, &hello);
        let status = match &admitted {
            Ok(_) => ReplicaHandshakeStatus::Ok,
            Err(refusal) => refusal.status.unwrap(),
        };
        let challenge = challenge(
            acceptor,
            status,
            MetadataHistory::Held,
            acceptor_nonce,
            &hello,
        );
        let outcome = admit_challenge(dialer, acceptor.replica, &hello, &challenge);
        let at_acceptor = match (admitted, &outcome.finish, &acceptor.auth) {
            (Ok(admitted), Some(finish), Some(_)) => {
                admit_finish(acceptor, &hello, &challenge, finish).map(|()| admitted)
            }
            (Ok(_), None, Some(_)) => panic!("an authenticating acceptor admitted a bare hello"),
            (verdict, _, _) => verdict,
        };
        Exchange {
            at_acceptor,
            at_dialer: outcome.verdict,
            hello,
            challenge,
            finish: outcome.finish,
        }
    }

    fn reason(verdict: &Result<Admitted, Refusal>) -> (Option<ReplicaHandshakeStatus>, &str) {
        let refusal = verdict.as_ref().expect_err("a refusal");
        (refusal.status, refusal.field)
    }

    fn resealed(mut frame: Frame, change: impl FnOnce(&mut Frame)) -> Frame {
        change(&mut frame);
        seal(&mut frame);
        frame
    }

    #[test]
    fn matching_secrets_are_admitted_both_ways_with_nonces_and_macs_on_the_wire() {
        let run = exchange(
            &keyed(0, SECRET, None),
            &keyed(2, SECRET, None),
            ACCEPTOR_NONCE,
        );
        assert_eq!(run.at_acceptor.unwrap().replica, 0);
        let at_dialer = run.at_dialer.unwrap();
        assert_eq!(
            (at_dialer.replica, at_dialer.history),
            (2, MetadataHistory::Held)
        );
        let hello = ReplicaHelloHeader::decode_fixed(&run.hello).unwrap();
        assert_eq!(
            (hello.auth_mode, hello.nonce),
            (ReplicaAuthMode::SharedSecret, DIALER_NONCE)
        );
        let challenge = ReplicaChallengeHeader::decode_fixed(&run.challenge).unwrap();
        assert_eq!(
            (challenge.auth_mode, challenge.nonce),
            (ReplicaAuthMode::SharedSecret, ACCEPTOR_NONCE)
        );
        let finish = ReplicaFinishHeader::decode_fixed(&run.finish.unwrap()).unwrap();
        assert_eq!(finish.status, ReplicaHandshakeStatus::Ok);
        // The two MACs cover one transcript in two directions: never the same bytes.
        assert_ne!(challenge.mac, [0; 32]);
        assert_ne!(finish.mac, challenge.mac);
        // Without auth no nonce is written and no Finish follows.
        let plain = exchange(&replica(0), &replica(2), ACCEPTOR_NONCE);
        assert!(plain.at_acceptor.is_ok() && plain.at_dialer.is_ok());
        assert_eq!(plain.finish, None);
        let hello = ReplicaHelloHeader::decode_fixed(&plain.hello).unwrap();
        assert_eq!(
            (hello.auth_mode, hello.nonce),
            (ReplicaAuthMode::Off, [0; 32])
        );
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides_as_mac_mismatch_and_never_shown() {
        for (dialer, acceptor) in [
            (keyed(0, SECRET, None), keyed(2, OTHER_SECRET, None)),
            (keyed(0, OTHER_SECRET, None), keyed(2, SECRET, None)),
        ] {
            let run = exchange(&dialer, &acceptor, ACCEPTOR_NONCE);
            let mac_mismatch = (Some(ReplicaHandshakeStatus::MacMismatch), "mac");
            assert_eq!(reason(&run.at_dialer), mac_mismatch);
            // The acceptor learns it from the Finish, which carries no MAC of the dialer's.
            assert_eq!(reason(&run.at_acceptor), mac_mismatch);
            let finish = ReplicaFinishHeader::decode_fixed(&run.finish.unwrap()).unwrap();
            assert_eq!(
                (finish.status, finish.mac),
                (ReplicaHandshakeStatus::MacMismatch, [0; 32])
            );
            for refusal in [run.at_dialer.unwrap_err(), run.at_acceptor.unwrap_err()] {
                let line = refusal.to_string();
                assert!(line.contains("(MacMismatch)"), "{line}");
                assert!(line.contains("shared_secret"), "{line}");
                for secret in [SECRET, OTHER_SECRET] {
                    assert!(!line.contains(secret), "{line}");
                }
            }
        }
        let shown = format!("{:?}", keyed(0, SECRET, Some(OTHER_SECRET)));
        assert!(shown.contains("PeerAuth"), "{shown}");
        let key = blake3::derive_key(REPLICA_AUTH_KEY_CONTEXT, SECRET.as_bytes());
        for hidden in [SECRET.to_string(), format!("{:?}", key[0..4].to_vec())] {
            assert!(!shown.contains(&hidden), "{shown}");
        }
    }

    /// Every key a `PeerAuth` holds, configured or bound to a TLS session, is of a type the
    /// `zeroize` crate overwrites when it is dropped.
    #[test]
    fn derived_keys_are_zeroed_when_dropped() {
        fn zeroed_on_drop<T: zeroize::ZeroizeOnDrop>(_: &T) {}
        let auth = PeerAuth::new(SECRET.as_bytes(), Some(OTHER_SECRET.as_bytes()));
        for auth in [auth.bound_to_channel(&[0x11; 32]), auth] {
            zeroed_on_drop(&auth.current);
            zeroed_on_drop(auth.previous.as_ref().expect("a previous key"));
        }
    }

    #[test]
    fn macs_bound_to_one_tls_session_verify_only_on_it() {
        let bound = |local: &Local, binding: [u8; 32]| Local {
            auth: local
                .auth
                .as_ref()
                .map(|auth| auth.bound_to_channel(&binding)),
            ..local.clone()
        };
        let (dialer, acceptor) = (keyed(0, SECRET, None), keyed(2, SECRET, None));
        let session = [0x11; 32];
        let same = exchange(
            &bound(&dialer, session),
            &bound(&acceptor, session),
            ACCEPTOR_NONCE,
        );
        assert!(same.at_dialer.is_ok() && same.at_acceptor.is_ok());
        // A MAC relayed from another session (a man in the middle terminating TLS on each
        // side sees two sessions) does not verify, nor does one made without the binding.
        let relayed = exchange(
            &bound(&dialer, session),
            &bound(&acceptor, [0x22; 32]),
            ACCEPTOR_NONCE,
        );
        assert_eq!(reason(&relayed.at_dialer).1, "mac");
        let unbound = exchange(&dialer, &bound(&acceptor, session), ACCEPTOR_NONCE);
        assert_eq!(reason(&unbound.at_dialer).1, "mac");
        // The previous secret is bound the same way, so a rotation still works under TLS.
        let (old_first, new_first) = (
            keyed(0, SECRET, Some(OTHER_SECRET)),
            keyed(2, OTHER_SECRET, Some(SECRET)),
        );
        let run = exchange(
            &bound(&old_first, session),
            &bound(&new_first, session),
            ACCEPTOR_NONCE,
        );
        assert!(run.at_dialer.is_ok() && run.at_acceptor.is_ok());
    }

    #[test]
    fn auth_on_one_side_only_is_refused_on_both_sides_as_auth_required() {
        for (dialer, acceptor) in [
            (keyed(0, SECRET, None), replica(2)),
            (replica(0), keyed(2, SECRET, None)),
        ] {
            let run = exchange(&dialer, &acceptor, ACCEPTOR_NONCE);
            let auth_required = (Some(ReplicaHandshakeStatus::AuthRequired), "auth_mode");
            assert_eq!(reason(&run.at_acceptor), auth_required);
            assert_eq!(reason(&run.at_dialer), auth_required);
            assert_eq!(run.finish, None, "the acceptor has closed already");
            // Each side says which of the two has auth.
            let keyed_side = if dialer.auth.is_some() {
                run.at_dialer.unwrap_err()
            } else {
                run.at_acceptor.unwrap_err()
            };
            // The bare side's mode is a claim nobody authenticated: the line says whose it is
            // and what to check, never that the peer is misconfigured.
            let (claimant, peer) = if dialer.auth.is_some() {
                ("whoever answered at replica 2's address", "replica 2 runs")
            } else {
                ("a dialer naming itself replica 0", "replica 0 runs")
            };
            for expected in [
                claimant,
                "claims it does not authenticate",
                "the claim is unauthenticated",
                peer,
                "shared_secret",
            ] {
                assert!(
                    keyed_side.detail.contains(expected),
                    "{expected}: {keyed_side}"
                );
            }
        }
    }

    #[test]
    fn a_finish_replayed_from_another_handshake_or_reflected_is_refused() {
        let (dialer, acceptor) = (keyed(0, SECRET, None), keyed(2, SECRET, None));
        let recorded = exchange(&dialer, &acceptor, ACCEPTOR_NONCE);
        let replayed = recorded.finish.unwrap();
        // A new handshake: the acceptor draws a new nonce, and the old Finish no longer fits.
        let fresh = exchange(&dialer, &acceptor, [0x5e; 32]);
        assert!(fresh.at_acceptor.is_ok());
        let refusal =
            admit_finish(&acceptor, &fresh.hello, &fresh.challenge, &replayed).unwrap_err();
        assert_eq!(
            (refusal.status, refusal.field),
            (Some(ReplicaHandshakeStatus::MacMismatch), "mac"),
            "{refusal}"
        );
        // The acceptor's own MAC sent back as the dialer's: the direction differs.
        let challenge = ReplicaChallengeHeader::decode_fixed(&fresh.challenge).unwrap();
        let reflected = finish(&dialer, ReplicaHandshakeStatus::Ok, challenge.mac);
        let refusal =
            admit_finish(&acceptor, &fresh.hello, &fresh.challenge, &reflected).unwrap_err();
        assert_eq!(refusal.field, "mac", "{refusal}");
        // The right Finish of that handshake still passes.
        admit_finish(
            &acceptor,
            &fresh.hello,
            &fresh.challenge,
            &fresh.finish.unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn the_previous_secret_is_accepted_so_a_rotation_rolls_through_three_restarts() {
        const OLD: &str = SECRET;
        const NEW: &str = OTHER_SECRET;
        // The states of a node through the rotation, and the pairs each roll mixes.
        let start = |id| keyed(id, OLD, None);
        let roll_1 = |id| keyed(id, OLD, Some(NEW));
        let roll_2 = |id| keyed(id, NEW, Some(OLD));
        let roll_3 = |id| keyed(id, NEW, None);
        type KeysOf = fn(u8) -> Local;
        let mixed: [(KeysOf, KeysOf); 3] = [(start, roll_1), (roll_1, roll_2), (roll_2, roll_3)];
        for (before, after) in mixed {
            for (dialer, acceptor) in [(before(0), after(2)), (after(0), before(2))] {
                let run = exchange(&dialer, &acceptor, ACCEPTOR_NONCE);
                assert!(run.at_dialer.is_ok(), "{:?}", run.at_dialer);
                assert!(run.at_acceptor.is_ok(), "{:?}", run.at_acceptor);
            }
        }
        // A node on the new secret meets one that never heard of it: refused (the reason
        // for the first roll).
        let run = exchange(&start(0), &roll_2(2), ACCEPTOR_NONCE);
        assert_eq!(
            reason(&run.at_dialer),
            (Some(ReplicaHandshakeStatus::MacMismatch), "mac")
        );
    }

    #[test]
    fn a_forged_mac_or_a_changed_covered_field_is_refused() {
        let (dialer, acceptor) = (keyed(0, SECRET, None), keyed(2, SECRET, None));
        let run = exchange(&dialer, &acceptor, ACCEPTOR_NONCE);
        let mac_mismatch = (Some(ReplicaHandshakeStatus::MacMismatch), "mac");
        // One bit of the acceptor's MAC, resealed (the seal is a checksum, not a secret).
        let forged = resealed(run.challenge, |f| {
            f[ReplicaChallengeHeader::MAC_OFFSET + 7] ^= 0x10
        });
        let outcome = admit_challenge(&dialer, 2, &run.hello, &forged);
        assert_eq!(reason(&outcome.verdict), mac_mismatch);
        // A field the MAC covers, changed on the way: the acceptor's declared history.
        let changed = resealed(run.challenge, |f| {
            f[ReplicaChallengeHeader::METADATA_HISTORY_OFFSET] = MetadataHistory::Absent as u8
        });
        let outcome = admit_challenge(&dialer, 2, &run.hello, &changed);
        assert_eq!(reason(&outcome.verdict), mac_mismatch);
        // One bit of the dialer's MAC.
        let forged = resealed(run.finish.unwrap(), |f| {
            f[ReplicaFinishHeader::MAC_OFFSET] ^= 1
        });
        let refusal = admit_finish(&acceptor, &run.hello, &run.challenge, &forged).unwrap_err();
        assert_eq!((refusal.status, refusal.field), mac_mismatch);
        // A short answer is refused by its size, and no Finish follows it.
        let outcome = admit_challenge(&dialer, 2, &run.hello, &run.challenge[..200]);
        assert_eq!(reason(&outcome.verdict), (None, "size"));
        assert_eq!(outcome.finish, None);
        // A Finish whose seal does not hold is not read at all.
        let mut torn = run.finish.unwrap();
        torn[ReplicaFinishHeader::MAC_OFFSET] ^= 1;
        let refusal = admit_finish(&acceptor, &run.hello, &run.challenge, &torn).unwrap_err();
        assert_eq!((refusal.status, refusal.field), (None, "checksum"));
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
        assert_eq!(
            plain_hello(&replica(0), 2, MetadataHistory::Absent).to_vec(),
            bytes(HELLO_FROM_0)
        );
        assert_eq!(
            plain_challenge(
                &replica(2),
                ReplicaHandshakeStatus::Ok,
                MetadataHistory::Absent
            )
            .to_vec(),
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
                identity: local_identity(),
                history: MetadataHistory::Absent,
                runs: Declared::default(),
            })
        );
        assert_eq!(
            at_dialer,
            Ok(Admitted {
                replica: 2,
                identity: local_identity(),
                history: MetadataHistory::Absent,
                runs: Declared::default(),
            })
        );
        assert_eq!(
            admit_hello(&replica(2), &bytes(HELLO_FROM_0))
                .unwrap()
                .replica,
            0
        );
        assert_eq!(
            plain_verdict(&replica(0), 2, &bytes(CHALLENGE_OK_FROM_2))
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
            plain_verdict(&replica(0), 2, &bytes(CHALLENGE_OLD_STORAGE_FROM_2)).unwrap_err();
        assert_eq!(refusal.field, "storage_marker", "{refusal}");
        assert!(
            refusal.detail.contains("IGGY-OWNERSHIP-HISTORY-4"),
            "{refusal}"
        );
    }

    #[test]
    fn rosters_that_tell_clients_different_addresses_refuse_each_other_on_both_sides() {
        let ours = Local {
            roster: 1,
            ..replica(0)
        };
        let other = Local {
            roster: 2,
            ..replica(1)
        };
        let (at_acceptor, at_dialer) = handshake(&ours, &other);
        for refusal in [at_acceptor.unwrap_err(), at_dialer.unwrap_err()] {
            assert_eq!(
                (refusal.status, refusal.field),
                (Some(ReplicaHandshakeStatus::RosterMismatch), "roster"),
                "{refusal}"
            );
            assert!(refusal.detail.contains("[[cluster.nodes]]"), "{refusal}");
        }
        // The same roster is admitted; a hello that declares none (0) is not judged.
        let same = Local {
            roster: 2,
            ..replica(0)
        };
        for dialer in [same, replica(0)] {
            let (at_acceptor, at_dialer) = handshake(&dialer, &other);
            assert!(at_acceptor.is_ok() && at_dialer.is_ok());
        }
    }

    fn with_runs(id: u8, runs: &RunLedger) -> Local {
        Local {
            runs: runs.clone(),
            ..replica(id)
        }
    }

    /// Three runs of `copied` linked with `other` (each learning from the other), the copy of
    /// `copied`'s ledger taken after its second, and the two ledgers after the third.
    fn runs_and_a_copy(copied: u8, other: u8) -> (RunLedger, RunLedger, RunLedger) {
        let mut fixed = RunLedger::start(None, true, false, 1);
        let mut ran = RunLedger::default();
        let mut copy = RunLedger::default();
        for start in 1..=3u64 {
            ran = RunLedger::start(Some(ran), true, false, 100 + start);
            let (dialer, acceptor) = match copied < other {
                true => (with_runs(copied, &ran), with_runs(other, &fixed)),
                false => (with_runs(other, &fixed), with_runs(copied, &ran)),
            };
            let (at_acceptor, at_dialer) = handshake(&dialer, &acceptor);
            let (at_acceptor, at_dialer) = (at_acceptor.unwrap(), at_dialer.unwrap());
            for admitted in [at_acceptor, at_dialer] {
                match admitted.replica == copied {
                    true => fixed.learn(copied, admitted.runs),
                    false => ran.learn(other, admitted.runs),
                };
            }
            if start == 2 {
                copy = ran.clone();
            }
        }
        (copy, ran, fixed)
    }

    #[test]
    fn a_node_restored_from_an_older_copy_is_refused_and_told_that_it_is_the_copy() {
        for (copied, other) in [(2, 0), (0, 2)] {
            let (copy, _, fixed) = runs_and_a_copy(copied, other);
            // The copy starts again: run 3 under another nonce; the peer linked with run 3.
            let restored = RunLedger::start(Some(copy.clone()), true, false, 999);
            let (stale, peer) = (with_runs(copied, &restored), with_runs(other, &fixed));
            let (at_acceptor, at_dialer) = match copied < other {
                true => handshake(&stale, &peer),
                false => handshake(&peer, &stale),
            };
            let (at_copy, at_peer) = match copied < other {
                true => (at_dialer, at_acceptor),
                false => (at_acceptor, at_dialer),
            };
            let (at_copy, at_peer) = (at_copy.unwrap_err(), at_peer.unwrap_err());
            assert_eq!(at_copy.status, Some(ReplicaHandshakeStatus::StaleCopy));
            assert!(at_copy.stops_this_node(), "{copied} as the copy: {at_copy}");
            assert!(at_copy.detail.contains("run 3"), "{at_copy}");
            assert_eq!(
                (at_peer.status, at_peer.field),
                (Some(ReplicaHandshakeStatus::StaleCopy), "run"),
                "{at_peer}"
            );
            assert!(!at_peer.stops_this_node());
            // Started restored, it is admitted both ways.
            let marked = RunLedger::start(Some(copy), true, true, 1000);
            let (marked, peer) = (with_runs(copied, &marked), with_runs(other, &fixed));
            let (at_acceptor, at_dialer) = match copied < other {
                true => handshake(&marked, &peer),
                false => handshake(&peer, &marked),
            };
            assert!(
                at_acceptor.is_ok() && at_dialer.is_ok(),
                "{copied} restored"
            );
        }
    }

    #[test]
    fn replica_ids_follow_the_roster_and_the_dial_direction() {
        let refused = |dialer: u8, acceptor: &Local| {
            admit_hello(
                acceptor,
                &plain_hello(&replica(dialer), acceptor.replica, MetadataHistory::Absent),
            )
            .unwrap_err()
        };
        for (dialer, acceptor) in [(2, replica(0)), (2, replica(1)), (1, replica(1))] {
            let refusal = refused(dialer, &acceptor);
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
            &plain_hello(
                &Local {
                    replica_count: 9,
                    ..replica(7)
                },
                2,
                MetadataHistory::Absent,
            ),
        )
        .unwrap_err();
        assert_eq!(refusal.field, "replica");
        // Rosters that disagree about who listens at an address: replica 0 dialed what its
        // roster calls replica 1 and reached replica 2. Both sides name `replica`.
        let (at_acceptor, at_dialer) = {
            let at_acceptor = admit_hello(
                &replica(2),
                &plain_hello(&replica(0), 1, MetadataHistory::Absent),
            );
            let status = at_acceptor.as_ref().unwrap_err().status.unwrap();
            let at_dialer = plain_verdict(
                &replica(0),
                1,
                &plain_challenge(&replica(2), status, MetadataHistory::Absent),
            );
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
        let refusal = plain_verdict(
            &replica(0),
            1,
            &plain_challenge(
                &replica(2),
                ReplicaHandshakeStatus::Ok,
                MetadataHistory::Absent,
            ),
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
        let good = plain_hello(&replica(0), 2, MetadataHistory::Absent);
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
        let mut answer = plain_challenge(
            &replica(2),
            ReplicaHandshakeStatus::Ok,
            MetadataHistory::Absent,
        );
        answer[ReplicaChallengeHeader::STATUS_OFFSET] = 99;
        assert_eq!(
            plain_verdict(&replica(0), 2, &answer).unwrap_err().field,
            "checksum"
        );
        assert_eq!(
            admit_hello(&replica(2), &good[..200]).unwrap_err().field,
            "size"
        );
        // Sealed, but the wrong frame for this side.
        let refusal = admit_hello(
            &replica(2),
            &plain_challenge(
                &replica(0),
                ReplicaHandshakeStatus::Ok,
                MetadataHistory::Absent,
            ),
        )
        .unwrap_err();
        assert_eq!(refusal.status, Some(ReplicaHandshakeStatus::UnknownCommand));
    }

    #[test]
    fn an_acceptors_refusal_reaches_the_dialer() {
        let refusal = plain_verdict(
            &replica(0),
            2,
            &plain_challenge(
                &replica(2),
                ReplicaHandshakeStatus::UnknownCommand,
                MetadataHistory::Absent,
            ),
        )
        .unwrap_err();
        assert_eq!(
            (refusal.status, refusal.field),
            (Some(ReplicaHandshakeStatus::UnknownCommand), "status")
        );
        // An auth refusal names the auth mode, even from an acceptor whose mode is ours.
        let refusal = plain_verdict(
            &replica(0),
            2,
            &plain_challenge(
                &replica(2),
                ReplicaHandshakeStatus::AuthRequired,
                MetadataHistory::Absent,
            ),
        )
        .unwrap_err();
        assert_eq!(
            (refusal.status, refusal.field),
            (Some(ReplicaHandshakeStatus::AuthRequired), "auth_mode")
        );
    }

    #[test]
    fn each_side_declares_its_history_and_the_declaration_never_decides_admission() {
        use MetadataHistory::{Absent, Held};
        for (dialer_history, acceptor_history) in [(Held, Absent), (Absent, Held), (Held, Held)] {
            let frame = plain_hello(&replica(0), 2, dialer_history);
            assert_eq!(
                frame[ReplicaHelloHeader::METADATA_HISTORY_OFFSET],
                dialer_history as u8
            );
            let at_acceptor = admit_hello(&replica(2), &frame).unwrap();
            assert_eq!(at_acceptor.history, dialer_history);
            let answer = plain_challenge(&replica(2), ReplicaHandshakeStatus::Ok, acceptor_history);
            assert_eq!(
                answer[ReplicaChallengeHeader::METADATA_HISTORY_OFFSET],
                acceptor_history as u8
            );
            let at_dialer = plain_verdict(&replica(0), 2, &answer).unwrap();
            assert_eq!(at_dialer.history, acceptor_history);
        }
        // A declaration this build does not know, sealed: the frame does not decode.
        let mut unknown = plain_hello(&replica(0), 2, Held);
        unknown[ReplicaHelloHeader::METADATA_HISTORY_OFFSET] = 2;
        seal(&mut unknown);
        let refusal = admit_hello(&replica(2), &unknown).unwrap_err();
        assert_eq!(refusal.field, "header", "{refusal}");
        // The spec examples (frames of a new node) declare none.
        assert_eq!(
            admit_hello(&replica(2), &bytes(HELLO_FROM_0))
                .unwrap()
                .history,
            Absent
        );
    }

    #[test]
    fn a_node_declares_a_history_it_had_on_disk_or_formatted_with_that_peer_linked() {
        use MetadataHistory::{Absent, Held};
        // Found on disk: declared to every peer, linked before or not.
        for linked in [false, true] {
            assert_eq!(declared_history(Held, 0, linked), Held);
            assert_eq!(declared_history(Held, 7, linked), Held);
            // Nothing committed yet: nothing anyone counted on.
            assert_eq!(declared_history(Absent, 0, linked), Absent);
        }
        // Formatted by this process: only a peer linked before can have acknowledged it.
        assert_eq!(declared_history(Absent, 1, true), Held);
        assert_eq!(declared_history(Absent, 1, false), Absent);
    }

    #[test]
    fn one_peer_holding_a_history_refuses_the_start_at_once() {
        use MetadataHistory::{Absent, Held};
        let mut gate = StartGate::new(2, 3);
        assert_eq!(gate.poll_verdict(), None);
        gate.handle_admitted(1, Absent);
        assert_eq!(gate.poll_verdict(), None, "replica 0 has not declared yet");
        gate.handle_admitted(0, Held);
        let refused = StartVerdict::Refuse { holders: vec![0] };
        assert_eq!(gate.poll_verdict(), Some(refused.clone()));
        assert_eq!(gate.verdict_at_deadline(), refused);
        // A later link of the same peer declaring none does not take the history back.
        gate.handle_admitted(0, Absent);
        assert_eq!(gate.poll_verdict(), Some(refused));
        // Before every peer answered: one holder is enough.
        let mut early = StartGate::new(0, 3);
        early.handle_admitted(2, Held);
        assert_eq!(
            early.poll_verdict(),
            Some(StartVerdict::Refuse { holders: vec![2] })
        );
    }

    #[test]
    fn peers_without_a_history_or_silent_ones_let_a_new_cluster_start() {
        use MetadataHistory::Absent;
        // Every peer declared none: no need to wait for the deadline.
        let mut gate = StartGate::new(1, 3);
        gate.handle_admitted(0, Absent);
        assert_eq!(gate.poll_verdict(), None);
        gate.handle_admitted(2, Absent);
        let new = StartVerdict::NewHistory { silent: vec![] };
        assert_eq!(gate.poll_verdict(), Some(new.clone()));
        assert_eq!(gate.verdict_at_deadline(), new);
        // At the deadline, a majority declaring none (this node counted) starts, naming the
        // silent peers.
        let mut gate = StartGate::new(1, 5);
        gate.handle_admitted(3, Absent);
        assert_eq!(gate.poll_verdict(), None);
        assert_eq!(
            gate.verdict_at_deadline(),
            StartVerdict::Undecided {
                silent: vec![0, 2, 4]
            },
            "two of five is no majority"
        );
        gate.handle_admitted(4, Absent);
        assert_eq!(
            gate.verdict_at_deadline(),
            StartVerdict::NewHistory { silent: vec![0, 2] }
        );
        let mut gate = StartGate::new(2, 3);
        gate.handle_admitted(0, Absent);
        assert_eq!(
            gate.verdict_at_deadline(),
            StartVerdict::NewHistory { silent: vec![1] }
        );
        // A cluster of one has no peer to wait for.
        assert_eq!(
            StartGate::new(0, 1).poll_verdict(),
            Some(StartVerdict::NewHistory { silent: vec![] })
        );
    }

    #[test]
    fn a_node_whose_peers_are_all_silent_formats_nothing() {
        // Its metadata erased while both peers, which hold the history, are unreachable for a
        // while (a restart, a DNS name not yet published): started empty, it could form a
        // view-change quorum with a peer lacking an op the other two acknowledged.
        let gate = StartGate::new(0, 3);
        for _ in 0..3 {
            assert_eq!(
                gate.verdict_at_deadline(),
                StartVerdict::Undecided { silent: vec![1, 2] }
            );
        }
        let gate = StartGate::new(4, 5);
        assert!(matches!(
            gate.verdict_at_deadline(),
            StartVerdict::Undecided { .. }
        ));
    }

    #[test]
    fn the_refusal_names_the_holders_the_directory_and_the_recovery() {
        let text = erased_refusal(2, &[0, 1], "/var/lib/iggy");
        for expected in [
            "replica 2 has no metadata history in /var/lib/iggy",
            "replica 0 and replica 1 of its cluster hold one",
            "nothing was written to /var/lib/iggy",
            "restore this node's data directory",
            "iggy-server verify --path",
            "state transfer",
        ] {
            assert!(text.contains(expected), "{expected:?} missing from: {text}");
        }
        assert!(!text.contains("  "), "{text}");
        let one = erased_refusal(1, &[2], "data");
        assert!(
            one.contains("but replica 2 of its cluster holds one"),
            "{one}"
        );
    }
}
