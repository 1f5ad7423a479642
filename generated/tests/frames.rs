use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::*;
use iggy_generated::protocol;
use iggy_wire::WireError;

#[test]
fn request_header_fields_land_at_their_offsets() {
    let h = RequestHeader {
        size: 256,
        command: Command::Request,
        client: 7,
        operation: Operation::NonReplicated as u8,
        reserved: 1u32.to_le_bytes(),
        minimum_metadata_op: 9,
        ..Default::default()
    };
    let b = h.to_bytes();
    assert_eq!(b[48..52], [0, 1, 0, 0]);
    assert_eq!(b[60], 5);
    assert_eq!(b[128], 7);
    assert_eq!(b[176], 2);
    assert_eq!(b[196], 1);
    assert_eq!(b[216], 9);
    assert_eq!(RequestHeader::decode_fixed(&b).unwrap(), h);
    assert_eq!(RequestHeader::MINIMUM_METADATA_OP_OFFSET, 216);
}

#[test]
fn reply_and_eviction_offsets_match_the_protocol() {
    assert_eq!(ReplyHeader::STATUS_OFFSET, 216);
    assert_eq!(ReplyHeader::RESERVED_OFFSET, 220);
    assert_eq!(ReplyHeader::PARTITION_INCARNATION_OFFSET, 224);
    assert_eq!(EvictionHeader::SERVER_PROTOCOL_VERSION_MIN_OFFSET, 148);
    assert_eq!(EvictionHeader::REASON_OFFSET, 255);
    assert_eq!(PrepareHeader::SESSION_OFFSET, 248);
    let mut b = [0u8; 256];
    b[208] = 99; // not an Operation
    assert_eq!(ReplyHeader::decode_fixed(&b), Err(WireError::InvalidValue { field: "operation" }));
}

#[test]
fn batch_header_rejects_nonzero_reserved() {
    let h = BatchHeader { batch_length: 300, message_count: 1, ..Default::default() };
    let mut b = h.to_bytes();
    assert_eq!(BatchHeader::decode_fixed(&b).unwrap(), h);
    b[100] = 1;
    assert_eq!(BatchHeader::decode_fixed(&b), Err(WireError::NonZeroReserved { field: "reserved" }));
    assert_eq!(MessageFrameHeader::SIZE, 48);
    assert_eq!(BatchHeader::MESSAGE_COUNT_OFFSET, 48);
}

#[test]
fn protocol_gate_is_inclusive_and_counts_patch() {
    assert_eq!(protocol::V0_12_0.packed(), 0x3000);
    assert_eq!(protocol::admit(0x3000), Some(protocol::V0_12_0));
    assert_eq!(protocol::admit(0x3001), None);
    assert_eq!(protocol::admit(protocol::V0_11_1.packed()), Some(protocol::V0_11_1));
    assert_eq!(protocol::admit(protocol::V0_11_1.packed() - 1), None);
}

#[test]
fn error_codes_cover_the_official_table() {
    assert_eq!(ErrorCode::ALL.len(), 259);
    assert_eq!(ErrorCode::from_code(58), Some(ErrorCode::TransientNotAccepted));
    assert_eq!(ErrorCode::from_code(3).unwrap().name(), "InvalidCommand");
    assert_eq!(ErrorCode::from_code(14003).map(|c| c.code()), Some(14003));
    assert_eq!(ErrorCode::from_code(999_999), None);
}

/// Seeded fuzz: random bytes never panic, and decode(encode(x)) == x for whatever decodes.
#[test]
fn fuzz_fixed_headers_roundtrip() {
    let mut s: u64 = 0x1234_5678_9abc_def0;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut decoded = 0;
    for case in 0..100_000u32 {
        let mut b = [0u8; 256];
        for chunk in b.chunks_mut(8) {
            chunk.copy_from_slice(&next().to_le_bytes()[..chunk.len()]);
        }
        // Keep enum bytes valid half the time so the roundtrip path is exercised.
        if case % 2 == 0 {
            b[60] %= 35;
            b[208] = Operation::ALL[b[208] as usize % Operation::ALL.len()] as u8;
            b[255] %= 16;
            b[52..256].iter_mut().take(0).for_each(|_| {});
        }
        let len = (next() % 257) as usize;
        macro_rules! rt {
            ($t:ty) => {
                if let Ok(h) = <$t>::decode_fixed(&b[..len]) {
                    decoded += 1;
                    assert_eq!(<$t>::decode_fixed(&h.to_bytes()).unwrap(), h);
                }
            };
        }
        rt!(RequestHeader);
        rt!(ReplyHeader);
        rt!(EvictionHeader);
        rt!(PrepareHeader);
        rt!(GenericHeader);
        rt!(MessageFrameHeader);
        let mut z = b;
        z[52..].fill(0);
        if let Ok(h) = BatchHeader::decode_fixed(&z) {
            decoded += 1;
            assert_eq!(BatchHeader::decode_fixed(&h.to_bytes()).unwrap(), h);
        }
    }
    assert!(decoded > 100_000);
}

/// What this release puts in the handshake must fit the fixed identity fields, and the
/// identity block must sit past the PSK nonce, MAC and status in both frames that carry it.
#[test]
fn replica_identity_of_this_release_fits_the_handshake() {
    let release = format!("{}/{}", protocol::RELEASE_NAME, protocol::RELEASE_VERSION);
    assert!(release.len() <= ReplicaIdentity::RELEASE_SIZE, "{release}");
    assert!(protocol::STORAGE_MARKER.len() <= ReplicaIdentity::STORAGE_MARKER_SIZE);
    assert_eq!(
        ReplicaHelloHeader::IDENTITY_OFFSET + ReplicaIdentity::SIZE,
        256
    );
    assert_eq!(
        ReplicaChallengeHeader::IDENTITY_OFFSET,
        ReplicaHelloHeader::IDENTITY_OFFSET
    );
    // Offsets only: checked when the test compiles.
    const {
        assert!(ReplicaHelloHeader::NONCE_OFFSET + 32 <= ReplicaHelloHeader::IDENTITY_OFFSET);
        assert!(ReplicaChallengeHeader::STATUS_OFFSET < ReplicaChallengeHeader::IDENTITY_OFFSET);
    }
}

/// Every replica command has exactly one checksum meaning; the client frames have neither.
#[test]
fn every_replica_command_is_sealed_or_identity_checksummed() {
    let sealed = |c: Command| FRAME_SEALED_COMMANDS >> c as u8 & 1 == 1;
    let identity = |c: Command| IDENTITY_CHECKSUM_COMMANDS >> c as u8 & 1 == 1;
    let client = [Command::Request, Command::Reply, Command::Eviction];
    // Declared upstream, carried by no frame here.
    let client_liveness = [Command::PingClient, Command::PongClient];
    for &c in Command::ALL.iter().filter(|&&c| c != Command::Reserved) {
        if client.contains(&c) || client_liveness.contains(&c) {
            assert!(!sealed(c) && !identity(c), "{c:?}");
        } else {
            assert!(
                sealed(c) != identity(c),
                "{c:?} must be exactly one of sealed, identity"
            );
        }
    }
    assert!(identity(Command::Prepare) && identity(Command::RepairPrepare));
    // The replica link's own keepalive is sealed like every control frame.
    assert!(sealed(Command::Ping) && sealed(Command::Pong));
    assert_eq!(FRAME_SEALED_COMMANDS >> (Command::ALL.len() as u32), 0);
}
