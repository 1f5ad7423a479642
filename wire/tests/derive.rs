use iggy_wire::{WireDecode, WireEncode, WireError};
use iggy_wire_derive::Wire;

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
struct Inner<'a> {
    id: u32,
    #[wire(name)]
    label: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
struct Outer<'a> {
    flag: bool,
    #[wire(string(u32))]
    text: &'a str,
    #[wire(opt(name))]
    maybe: Option<&'a str>,
    #[wire(vec(u32, plain))]
    items: Vec<Inner<'a>>,
    #[wire(bytes(u8))]
    blob: &'a [u8],
    #[wire(rest)]
    tail: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, Wire)]
struct Owned {
    a: u16,
    b: Option<u64>,
}

#[test]
fn derive_roundtrips_and_lays_out_bytes() {
    let v = Outer {
        flag: true,
        text: "hi",
        maybe: Some("x"),
        items: vec![Inner { id: 1, label: "a" }],
        blob: &[9, 9],
        tail: &[7, 7, 7],
    };
    let b = v.to_wire_bytes();
    assert_eq!(
        b,
        vec![1, 2, 0, 0, 0, b'h', b'i', 1, 1, b'x', 1, 0, 0, 0, 1, 0, 0, 0, 1, b'a', 2, 9, 9, 7, 7, 7]
    );
    assert_eq!(b.len(), v.encoded_size());
    assert_eq!(Outer::decode_exact(&b).unwrap(), v);
    assert!(matches!(Outer::decode_exact(&b[..5]), Err(WireError::UnexpectedEnd { .. })));
    let o = Owned { a: 5, b: None };
    assert_eq!(Owned::decode_exact(&o.to_wire_bytes()).unwrap(), o);
    let long = "y".repeat(300);
    let bad = Inner { id: 0, label: &long };
    assert!(bad.check_encodable().is_err());
    // Nested: an element of a vector of derived structs is checked too.
    let nested = Outer { items: vec![bad.clone()], ..v.clone() };
    assert!(matches!(nested.try_to_wire_bytes(), Err(WireError::TooLong { field: "label", len: 300, max: 255 })));
    assert_eq!(v.try_to_wire_bytes(), Ok(b));
}
