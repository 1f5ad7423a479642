//! Version gates: the command table answers per protocol version.
use iggy_generated::commands::{decode_request, lookup};
use iggy_generated::protocol::{V0_11_1, V0_12_0, admit};

#[test]
fn lookup_differs_per_version() {
    let (old, new) = (V0_11_1.packed(), V0_12_0.packed());
    // BindSession is in both; 14 is retired in both.
    assert!(lookup(15, old).is_some() && lookup(15, new).is_some());
    assert!(lookup(14, old).is_none() && lookup(14, new).is_none());
    // 103/104/123 and the per-resource updates only in 0.11.1; UpdateResource only in 0.12.0.
    for code in [103, 104, 123, 35, 204, 304] {
        assert!(lookup(code, old).is_some(), "{code} in 0.11.1");
        assert!(lookup(code, new).is_none(), "{code} retired in 0.12.0");
    }
    assert!(lookup(16, old).is_none() && lookup(16, new).is_some());
    // Same code, another layout: the 50-byte topic header and single-block streams/users.
    assert_eq!(lookup(300, old).unwrap().response, "GetTopicResponseV0111");
    assert_eq!(lookup(300, new).unwrap().response, "GetTopicResponse");
    assert_eq!(lookup(200, old).unwrap().response, "GetStreamResponseV0111");
    assert_eq!(lookup(31, old).unwrap().response, "UserDetailsResponseV0111");
    assert_eq!(lookup(13, old).unwrap().response, "DescribeOptionsResponseV0111");
    // Same operation names as the server dispatches on.
    assert_eq!(lookup(204, old).unwrap().operation, "UpdateStream");
    // Both versions are admitted, each served with its own codec.
    assert_eq!(admit(old), Some(V0_11_1));
    assert_eq!(admit(new), Some(V0_12_0));
    // decode_request follows the same gate.
    let update_stream = [1u8, 4, 1, 0, 0, 0, 1, b's'];
    assert!(decode_request(204, old, &update_stream).is_ok());
    assert!(decode_request(204, new, &update_stream).is_err());
}
