//! iggy-wire: the codec runtime shared by generated code, the derive and hand-written callers.
//!
//! All integers are little-endian. Decoders take `&mut &'a [u8]` and advance it past what they
//! consumed, so borrowed fields (`&'a str`, `&'a [u8]`) point into the caller's buffer.
#![forbid(unsafe_code)]

use std::fmt;

/// Why bytes could not be decoded (or a value could not be encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The input ended before a field was complete.
    UnexpectedEnd { needed: usize, remaining: usize },
    /// A field held a value outside its domain (bad enum discriminant, flag, UTF-8, ...).
    InvalidValue { field: &'static str },
    /// A reserved region that must be zero was not.
    NonZeroReserved { field: &'static str },
    /// `decode_exact` left bytes unread.
    TrailingBytes { count: usize },
    /// A length does not fit its prefix (e.g. a 300-byte name behind a u8 length).
    TooLong { field: &'static str, len: usize, max: usize },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::UnexpectedEnd { needed, remaining } => {
                write!(f, "unexpected end of input: needed {needed} bytes, {remaining} remaining")
            }
            WireError::InvalidValue { field } => write!(f, "invalid value in field `{field}`"),
            WireError::NonZeroReserved { field } => {
                write!(f, "reserved field `{field}` is not zero")
            }
            WireError::TrailingBytes { count } => write!(f, "{count} trailing bytes after value"),
            WireError::TooLong { field, len, max } => {
                write!(f, "field `{field}` is {len} long, at most {max} allowed")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// A value that can be written in wire format.
pub trait WireEncode {
    /// Exact number of bytes `encode_to` appends.
    fn encoded_size(&self) -> usize;
    /// Appends the wire bytes to `out`.
    fn encode_to(&self, out: &mut Vec<u8>);
    /// The wire bytes in a fresh vector.
    fn to_wire_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_size());
        self.encode_to(&mut out);
        debug_assert_eq!(out.len(), self.encoded_size());
        out
    }
    /// Refuses a value `encode_to` cannot write faithfully: a length over its prefix (a
    /// 300-byte name behind a u8 length) would be written wrapped. Derived layouts check every
    /// field; a hand-written one has nothing to refuse unless it says so.
    fn check_encodable(&self) -> Result<(), WireError> {
        Ok(())
    }
    /// The wire bytes of a value built from untrusted input, after `check_encodable`.
    fn try_to_wire_bytes(&self) -> Result<Vec<u8>, WireError> {
        self.check_encodable()?;
        Ok(self.to_wire_bytes())
    }
}

/// A value that can be read from wire format, possibly borrowing from the input.
pub trait WireDecode<'a>: Sized {
    /// Reads one value from the front of `input` and advances it.
    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError>;
    /// Reads one value that must span all of `bytes`.
    fn decode_exact(bytes: &'a [u8]) -> Result<Self, WireError> {
        let mut input = bytes;
        let value = Self::decode_from(&mut input)?;
        if !input.is_empty() {
            return Err(WireError::TrailingBytes { count: input.len() });
        }
        Ok(value)
    }
}

/// Takes `n` bytes from the front of `input`.
#[inline]
pub fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
    if input.len() < n {
        return Err(WireError::UnexpectedEnd { needed: n, remaining: input.len() });
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

/// Takes everything left in `input`.
#[inline]
pub fn take_rest<'a>(input: &mut &'a [u8]) -> &'a [u8] {
    std::mem::take(input)
}

macro_rules! impl_int {
    ($($t:ty),*) => {$(
        impl WireEncode for $t {
            #[inline]
            fn encoded_size(&self) -> usize { std::mem::size_of::<$t>() }
            #[inline]
            fn encode_to(&self, out: &mut Vec<u8>) { out.extend_from_slice(&self.to_le_bytes()); }
        }
        impl<'a> WireDecode<'a> for $t {
            #[inline]
            fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {
                let bytes = take(input, std::mem::size_of::<$t>())?;
                Ok(<$t>::from_le_bytes(bytes.try_into().expect("length checked")))
            }
        }
    )*};
}
impl_int!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

impl WireEncode for bool {
    fn encoded_size(&self) -> usize {
        1
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}
impl<'a> WireDecode<'a> for bool {
    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {
        match take(input, 1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::InvalidValue { field: "bool" }),
        }
    }
}

impl<const N: usize> WireEncode for [u8; N] {
    fn encoded_size(&self) -> usize {
        N
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}
impl<'a, const N: usize> WireDecode<'a> for [u8; N] {
    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {
        Ok(take(input, N)?.try_into().expect("length checked"))
    }
}

/// `Option<T>` is a u8 has-flag (0 or 1) followed by the value when present.
impl<T: WireEncode> WireEncode for Option<T> {
    fn encoded_size(&self) -> usize {
        1 + self.as_ref().map_or(0, WireEncode::encoded_size)
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => {
                out.push(1);
                v.encode_to(out);
            }
            None => out.push(0),
        }
    }
}
impl<'a, T: WireDecode<'a>> WireDecode<'a> for Option<T> {
    fn decode_from(input: &mut &'a [u8]) -> Result<Self, WireError> {
        match take(input, 1)?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode_from(input)?)),
            _ => Err(WireError::InvalidValue { field: "option flag" }),
        }
    }
}

/// Length-prefixed and borrowed field codecs used by `#[derive(Wire)]`.
///
/// Each codec is a zero-sized type with `size`, `encode` and `decode`; the derive composes them
/// (`opt(name)`, `vec(u32, string(u32))`) so byte logic lives here exactly once.
pub mod field {
    use super::{WireDecode, WireEncode, WireError, take, take_rest};

    /// A length prefix: u8 or u32.
    pub trait LenPrefix {
        /// Largest length the prefix can carry.
        const MAX: usize;
        /// Size of the prefix in bytes.
        const SIZE: usize;
        /// Writes `len`, which the caller has checked against `MAX`.
        fn put(len: usize, out: &mut Vec<u8>);
        /// Reads a length.
        fn get(input: &mut &[u8]) -> Result<usize, WireError>;
    }
    /// One-byte length prefix.
    pub struct U8;
    /// Four-byte little-endian length prefix.
    pub struct U32;
    impl LenPrefix for U8 {
        const MAX: usize = u8::MAX as usize;
        const SIZE: usize = 1;
        fn put(len: usize, out: &mut Vec<u8>) {
            out.push(len as u8);
        }
        fn get(input: &mut &[u8]) -> Result<usize, WireError> {
            Ok(take(input, 1)?[0] as usize)
        }
    }
    impl LenPrefix for U32 {
        const MAX: usize = u32::MAX as usize;
        const SIZE: usize = 4;
        fn put(len: usize, out: &mut Vec<u8>) {
            out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        fn get(input: &mut &[u8]) -> Result<usize, WireError> {
            let b = take(input, 4)?;
            Ok(u32::from_le_bytes(b.try_into().expect("length checked")) as usize)
        }
    }

    /// A codec for a field of type `T` (the Rust type) borrowing from `'a`.
    pub trait Codec<'a, T> {
        /// Encoded size of `v`.
        fn size(v: &T) -> usize;
        /// Appends `v`. Lengths that overflow their prefix are truncated-checked in debug
        /// builds; call [`Codec::check`] first to refuse them.
        fn encode(v: &T, out: &mut Vec<u8>);
        /// Reads one value.
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<T, WireError>;
        /// Refuses values that cannot be encoded (lengths over their prefix).
        fn check(_v: &T, _field: &'static str) -> Result<(), WireError> {
            Ok(())
        }
    }

    /// The type's own `WireEncode`/`WireDecode`.
    pub struct Plain;
    impl<'a, T: WireEncode + WireDecode<'a>> Codec<'a, T> for Plain {
        fn size(v: &T) -> usize {
            v.encoded_size()
        }
        fn encode(v: &T, out: &mut Vec<u8>) {
            v.encode_to(out)
        }
        fn decode(input: &mut &'a [u8], _field: &'static str) -> Result<T, WireError> {
            T::decode_from(input)
        }
        fn check(v: &T, _field: &'static str) -> Result<(), WireError> {
            v.check_encodable()
        }
    }

    /// A UTF-8 string behind a length prefix `L`, borrowed.
    pub struct Str<L>(std::marker::PhantomData<L>);
    impl<'a, L: LenPrefix> Codec<'a, &'a str> for Str<L> {
        fn size(v: &&'a str) -> usize {
            L::SIZE + v.len()
        }
        fn encode(v: &&'a str, out: &mut Vec<u8>) {
            debug_assert!(v.len() <= L::MAX);
            L::put(v.len(), out);
            out.extend_from_slice(v.as_bytes());
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<&'a str, WireError> {
            let len = L::get(input)?;
            let bytes = take(input, len)?;
            std::str::from_utf8(bytes).map_err(|_| WireError::InvalidValue { field })
        }
        fn check(v: &&'a str, field: &'static str) -> Result<(), WireError> {
            if v.len() > L::MAX {
                return Err(WireError::TooLong { field, len: v.len(), max: L::MAX });
            }
            Ok(())
        }
    }

    /// Raw bytes behind a length prefix `L`, borrowed.
    pub struct Bytes<L>(std::marker::PhantomData<L>);
    impl<'a, L: LenPrefix> Codec<'a, &'a [u8]> for Bytes<L> {
        fn size(v: &&'a [u8]) -> usize {
            L::SIZE + v.len()
        }
        fn encode(v: &&'a [u8], out: &mut Vec<u8>) {
            debug_assert!(v.len() <= L::MAX);
            L::put(v.len(), out);
            out.extend_from_slice(v);
        }
        fn decode(input: &mut &'a [u8], _field: &'static str) -> Result<&'a [u8], WireError> {
            let len = L::get(input)?;
            take(input, len)
        }
        fn check(v: &&'a [u8], field: &'static str) -> Result<(), WireError> {
            if v.len() > L::MAX {
                return Err(WireError::TooLong { field, len: v.len(), max: L::MAX });
            }
            Ok(())
        }
    }

    /// Every remaining byte, borrowed (zero-copy). Must be the last field.
    pub struct Rest;
    impl<'a> Codec<'a, &'a [u8]> for Rest {
        fn size(v: &&'a [u8]) -> usize {
            v.len()
        }
        fn encode(v: &&'a [u8], out: &mut Vec<u8>) {
            out.extend_from_slice(v)
        }
        fn decode(input: &mut &'a [u8], _field: &'static str) -> Result<&'a [u8], WireError> {
            Ok(take_rest(input))
        }
    }

    /// A u8 has-flag then the inner codec.
    pub struct Opt<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, Option<T>> for Opt<C> {
        fn size(v: &Option<T>) -> usize {
            1 + v.as_ref().map_or(0, C::size)
        }
        fn encode(v: &Option<T>, out: &mut Vec<u8>) {
            match v {
                Some(x) => {
                    out.push(1);
                    C::encode(x, out);
                }
                None => out.push(0),
            }
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Option<T>, WireError> {
            match take(input, 1)?[0] {
                0 => Ok(None),
                1 => Ok(Some(C::decode(input, field)?)),
                _ => Err(WireError::InvalidValue { field }),
            }
        }
        fn check(v: &Option<T>, field: &'static str) -> Result<(), WireError> {
            v.as_ref().map_or(Ok(()), |x| C::check(x, field))
        }
    }

    /// A u32 element count then the elements.
    pub struct VecCount<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, Vec<T>> for VecCount<C> {
        fn size(v: &Vec<T>) -> usize {
            4 + v.iter().map(C::size).sum::<usize>()
        }
        fn encode(v: &Vec<T>, out: &mut Vec<u8>) {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            for x in v {
                C::encode(x, out);
            }
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Vec<T>, WireError> {
            let count = U32::get(input)?;
            // Every element takes at least one byte, except zero-sized ones; bound the
            // preallocation by the input so a hostile count cannot exhaust memory.
            let mut v = Vec::with_capacity(count.min(input.len()));
            for _ in 0..count {
                v.push(C::decode(input, field)?);
            }
            Ok(v)
        }
        fn check(v: &Vec<T>, field: &'static str) -> Result<(), WireError> {
            if v.len() > u32::MAX as usize {
                return Err(WireError::TooLong { field, len: v.len(), max: u32::MAX as usize });
            }
            v.iter().try_for_each(|x| C::check(x, field))
        }
    }

    /// Elements until the input is exhausted. Must be the last field.
    pub struct VecRest<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, Vec<T>> for VecRest<C> {
        fn size(v: &Vec<T>) -> usize {
            v.iter().map(C::size).sum::<usize>()
        }
        fn encode(v: &Vec<T>, out: &mut Vec<u8>) {
            for x in v {
                C::encode(x, out);
            }
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Vec<T>, WireError> {
            let mut v = Vec::new();
            while !input.is_empty() {
                let before = input.len();
                v.push(C::decode(input, field)?);
                if input.len() == before {
                    // A zero-sized element would loop forever.
                    return Err(WireError::InvalidValue { field });
                }
            }
            Ok(v)
        }
        fn check(v: &Vec<T>, field: &'static str) -> Result<(), WireError> {
            v.iter().try_for_each(|x| C::check(x, field))
        }
    }

    /// Elements each preceded by a u8 1, the list closed by a u8 0 (so `[]` is `0` and
    /// `[a, b]` is `1 a 1 b 0`). Any other flag byte is refused.
    pub struct VecFlag<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, Vec<T>> for VecFlag<C> {
        fn size(v: &Vec<T>) -> usize {
            1 + v.iter().map(|x| 1 + C::size(x)).sum::<usize>()
        }
        fn encode(v: &Vec<T>, out: &mut Vec<u8>) {
            for x in v {
                out.push(1);
                C::encode(x, out);
            }
            out.push(0);
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Vec<T>, WireError> {
            let mut v = Vec::new();
            loop {
                match take(input, 1)?[0] {
                    0 => return Ok(v),
                    1 => v.push(C::decode(input, field)?),
                    _ => return Err(WireError::InvalidValue { field }),
                }
            }
        }
        fn check(v: &Vec<T>, field: &'static str) -> Result<(), WireError> {
            v.iter().try_for_each(|x| C::check(x, field))
        }
    }

    /// A u8 element count then the elements.
    pub struct VecCount8<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, Vec<T>> for VecCount8<C> {
        fn size(v: &Vec<T>) -> usize {
            1 + v.iter().map(C::size).sum::<usize>()
        }
        fn encode(v: &Vec<T>, out: &mut Vec<u8>) {
            out.push(v.len() as u8);
            for x in v {
                C::encode(x, out);
            }
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Vec<T>, WireError> {
            let count = U8::get(input)?;
            let mut v = Vec::with_capacity(count.min(input.len()));
            for _ in 0..count {
                v.push(C::decode(input, field)?);
            }
            Ok(v)
        }
        fn check(v: &Vec<T>, field: &'static str) -> Result<(), WireError> {
            if v.len() > u8::MAX as usize {
                return Err(WireError::TooLong {
                    field,
                    len: v.len(),
                    max: u8::MAX as usize,
                });
            }
            v.iter().try_for_each(|x| C::check(x, field))
        }
    }

    /// A u32 byte length then one value that must fill exactly that many bytes.
    pub struct Sized<C>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>> Codec<'a, T> for Sized<C> {
        fn size(v: &T) -> usize {
            4 + C::size(v)
        }
        fn encode(v: &T, out: &mut Vec<u8>) {
            U32::put(C::size(v), out);
            C::encode(v, out);
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<T, WireError> {
            let len = U32::get(input)?;
            let mut inner = take(input, len)?;
            let v = C::decode(&mut inner, field)?;
            if !inner.is_empty() {
                return Err(WireError::TrailingBytes { count: inner.len() });
            }
            Ok(v)
        }
        fn check(v: &T, field: &'static str) -> Result<(), WireError> {
            let len = C::size(v);
            if len > u32::MAX as usize {
                return Err(WireError::TooLong {
                    field,
                    len,
                    max: u32::MAX as usize,
                });
            }
            C::check(v, field)
        }
    }

    /// A u8 has-flag: 1 then the inner codec, or 0 then `N` zero bytes (a padded absence).
    pub struct OptPad<C, const N: usize>(std::marker::PhantomData<C>);
    impl<'a, T, C: Codec<'a, T>, const N: usize> Codec<'a, Option<T>> for OptPad<C, N> {
        fn size(v: &Option<T>) -> usize {
            1 + v.as_ref().map_or(N, C::size)
        }
        fn encode(v: &Option<T>, out: &mut Vec<u8>) {
            match v {
                Some(x) => {
                    out.push(1);
                    C::encode(x, out);
                }
                None => out.resize(out.len() + 1 + N, 0),
            }
        }
        fn decode(input: &mut &'a [u8], field: &'static str) -> Result<Option<T>, WireError> {
            match take(input, 1)?[0] {
                0 => {
                    if take(input, N)?.iter().any(|b| *b != 0) {
                        return Err(WireError::NonZeroReserved { field });
                    }
                    Ok(None)
                }
                1 => Ok(Some(C::decode(input, field)?)),
                _ => Err(WireError::InvalidValue { field }),
            }
        }
        fn check(v: &Option<T>, field: &'static str) -> Result<(), WireError> {
            v.as_ref().map_or(Ok(()), |x| C::check(x, field))
        }
    }
}

/// The decoded form of a wire value as canonical JSON (the `value` of a conformance vector):
/// objects list fields in spec order with no spaces, integers are decimal numbers (u128 too),
/// byte strings are lowercase hex strings, enums are their variant name, `None` is `null`.
/// `iggy-codegen` renders the same form from the spec, so equal text means equal values.
pub trait WireJson {
    /// Appends the JSON form to `out`.
    fn write_json(&self, out: &mut String);
    /// The JSON form as a fresh string.
    fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_json(&mut s);
        s
    }
}

/// Appends `s` as a JSON string literal (escaping `"`, `\\` and control characters).
pub fn json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `b` as a JSON string of lowercase hex.
pub fn json_hex(b: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for x in b {
        out.push(HEX[(x >> 4) as usize] as char);
        out.push(HEX[(x & 15) as usize] as char);
    }
    out.push('"');
}

macro_rules! impl_json_int {
    ($($t:ty),*) => {$(
        impl WireJson for $t {
            fn write_json(&self, out: &mut String) { out.push_str(&self.to_string()); }
        }
    )*};
}
impl_json_int!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);
impl WireJson for bool {
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}
impl WireJson for &str {
    fn write_json(&self, out: &mut String) {
        json_str(self, out)
    }
}
impl WireJson for &[u8] {
    fn write_json(&self, out: &mut String) {
        json_hex(self, out)
    }
}
impl<const N: usize> WireJson for [u8; N] {
    fn write_json(&self, out: &mut String) {
        json_hex(self, out)
    }
}
impl<T: WireJson> WireJson for Option<T> {
    fn write_json(&self, out: &mut String) {
        match self {
            Some(v) => v.write_json(out),
            None => out.push_str("null"),
        }
    }
}
impl<T: WireJson> WireJson for Vec<T> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            v.write_json(out);
        }
        out.push(']');
    }
}

/// Reads a little-endian integer at a fixed offset of a fixed-size buffer (used by generated
/// fixed-layout headers). The caller has checked the buffer length.
#[inline]
pub fn get_at<const N: usize>(buf: &[u8], offset: usize) -> [u8; N] {
    buf[offset..offset + N].try_into().expect("offset within checked size")
}

/// Writes bytes at a fixed offset.
#[inline]
pub fn put_at(buf: &mut [u8], offset: usize, bytes: &[u8]) {
    buf[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// True when every byte of `buf[offset..offset+len]` is zero.
#[inline]
pub fn is_zero_at(buf: &[u8], offset: usize, len: usize) -> bool {
    buf[offset..offset + len].iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::field::*;
    use super::*;

    #[test]
    fn ints_roundtrip_le() {
        let v: u32 = 0x0102_0304;
        assert_eq!(v.to_wire_bytes(), vec![4, 3, 2, 1]);
        assert_eq!(u32::decode_exact(&[4, 3, 2, 1]).unwrap(), v);
        assert_eq!(
            u32::decode_exact(&[1, 2]),
            Err(WireError::UnexpectedEnd { needed: 4, remaining: 2 })
        );
        assert_eq!(u8::decode_exact(&[1, 2]), Err(WireError::TrailingBytes { count: 1 }));
    }

    #[test]
    fn str_codec_checks_utf8_and_length() {
        let mut input: &[u8] = &[2, b'h', b'i', 9];
        assert_eq!(<Str<U8> as Codec<&str>>::decode(&mut input, "n").unwrap(), "hi");
        assert_eq!(input, &[9]);
        let mut bad: &[u8] = &[1, 0xff];
        assert_eq!(
            <Str<U8> as Codec<&str>>::decode(&mut bad, "n"),
            Err(WireError::InvalidValue { field: "n" })
        );
        let long = "x".repeat(256);
        assert!(<Str<U8> as Codec<&str>>::check(&long.as_str(), "n").is_err());
    }

    #[test]
    fn option_and_bool_reject_bad_flags() {
        assert!(bool::decode_exact(&[2]).is_err());
        assert!(Option::<u8>::decode_exact(&[2, 0]).is_err());
        assert_eq!(Option::<u8>::decode_exact(&[1, 7]).unwrap(), Some(7));
    }

    #[test]
    fn flag_list_count8_sized_and_padded_option() {
        let v: Vec<u8> = vec![7, 8];
        let mut out = Vec::new();
        <VecFlag<Plain> as Codec<Vec<u8>>>::encode(&v, &mut out);
        assert_eq!(out, [1, 7, 1, 8, 0]);
        let mut input: &[u8] = &out;
        assert_eq!(
            <VecFlag<Plain> as Codec<Vec<u8>>>::decode(&mut input, "l").unwrap(),
            v
        );
        let mut bad: &[u8] = &[2, 7, 0];
        assert!(<VecFlag<Plain> as Codec<Vec<u8>>>::decode(&mut bad, "l").is_err());
        let mut out = Vec::new();
        <VecCount8<Plain> as Codec<Vec<u8>>>::encode(&v, &mut out);
        assert_eq!(out, [2, 7, 8]);
        let mut out = Vec::new();
        <Sized<Plain> as Codec<u16>>::encode(&0x0102, &mut out);
        assert_eq!(out, [2, 0, 0, 0, 2, 1]);
        let mut short: &[u8] = &[3, 0, 0, 0, 2, 1, 9];
        assert!(<Sized<Plain> as Codec<u16>>::decode(&mut short, "s").is_err());
        let mut out = Vec::new();
        <OptPad<Plain, 3> as Codec<Option<u8>>>::encode(&None, &mut out);
        assert_eq!(out, [0, 0, 0, 0]);
        let mut input: &[u8] = &[0, 0, 1, 0];
        assert!(<OptPad<Plain, 3> as Codec<Option<u8>>>::decode(&mut input, "o").is_err());
        let mut input: &[u8] = &[1, 5];
        assert_eq!(
            <OptPad<Plain, 3> as Codec<Option<u8>>>::decode(&mut input, "o").unwrap(),
            Some(5)
        );
    }
}
