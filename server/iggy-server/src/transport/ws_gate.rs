//! The WebSocket library reads a whole message into memory before the server sees the request
//! frame in it, so the node's budget of request bodies (`runtime::body_budget`) is reserved
//! here, below the library: [`Gate`] passes the connection's bytes up to it while reading each
//! WebSocket frame's header on the way (2 to 14 bytes: opcode, mask bit, 7-, 16- or 64-bit
//! length), and holds a data frame's payload back until the bytes of its message are reserved
//! when that message is over a small request's size. What it read past that point, or past the
//! end of a message, it keeps (at most one read, the library's read buffer) for the library's
//! next read: nothing of a frame's payload reaches the library before its header was judged,
//! and the library holds no byte past the message it returns. The reservation is handed to the
//! request once its message is complete ([`Lease::take_ended`]) and given back when it is
//! answered, as over the other transports.
//!
//! Only lengths are read: the library still parses, unmasks and checks every frame.

use crate::runtime::body_budget::{BodyBudget, BodyPermit, Reserve, UNCOUNTED_BODY_MAX};
use crate::service::frame::HEADER_SIZE;
use futures_util::{AsyncRead, AsyncWrite};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

/// Messages of at most this many bytes are read without a reservation: a request frame whose
/// body is not counted on a link that serves one request at a time.
const UNCOUNTED_MESSAGE_MAX: u64 = (HEADER_SIZE + UNCOUNTED_BODY_MAX) as u64;

/// Where the byte stream is, frame by frame.
#[derive(Debug, Default)]
pub struct FrameCursor {
    /// The header of the frame being read, while it is read.
    header: [u8; 14],
    /// Header bytes read of the frame, 0 once its payload is being read.
    have: usize,
    /// Payload bytes left of the frame: `Some` once its header was read.
    payload_left: Option<u64>,
    /// The frame is a data frame (not a ping, pong or close).
    data: bool,
    /// The frame ends its message.
    fin: bool,
    /// Data bytes of the message so far, this frame's included.
    message: u64,
    /// Bytes of the message reserved so far.
    reserved: u64,
}

/// What the cursor lets through next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// At most this many bytes (the rest of the header part, or of the payload, being read).
    Pass(usize),
    /// Nothing until these bytes of the message are reserved.
    Reserve(u64),
}

impl FrameCursor {
    /// What may pass now; `counted`: a large message waits for its reservation (a connection
    /// with a session; before one, the library refuses a frame over 64 KiB at its header).
    pub fn next(&self, counted: bool) -> Next {
        match self.payload_left {
            None => Next::Pass(self.header_len().unwrap_or(2) - self.have),
            Some(left) => {
                if counted && self.data && self.message > UNCOUNTED_MESSAGE_MAX {
                    let owed = self.message - self.reserved;
                    if owed > 0 {
                        return Next::Reserve(owed);
                    }
                }
                Next::Pass(usize::try_from(left).unwrap_or(usize::MAX))
            }
        }
    }

    /// `bytes` of the message were reserved.
    pub fn reserved(&mut self, bytes: u64) {
        self.reserved += bytes;
    }

    /// Lets through the longest prefix of `bytes` that may pass now: up to the end of a message,
    /// or of the header of a frame whose payload waits for a reservation. Returns its length and
    /// whether it ended a message.
    pub fn scan(&mut self, bytes: &[u8], counted: bool) -> (usize, bool) {
        let mut at = 0;
        while at < bytes.len() {
            let Next::Pass(most) = self.next(counted) else {
                break;
            };
            let end = at + most.min(bytes.len() - at);
            let ended = self.passed(&bytes[at..end]);
            at = end;
            if ended {
                return (at, true);
            }
        }
        (at, false)
    }

    /// `bytes` passed (no more than [`FrameCursor::next`] allowed); true when they ended a
    /// message.
    pub fn passed(&mut self, bytes: &[u8]) -> bool {
        let Some(left) = self.payload_left else {
            let end = self.have + bytes.len();
            self.header[self.have..end].copy_from_slice(bytes);
            self.have = end;
            return match self.header_len() {
                Some(len) if len == self.have => self.header_read(),
                _ => false,
            };
        };
        let left = left - bytes.len() as u64;
        self.payload_left = Some(left);
        left == 0 && self.frame_done()
    }

    /// The header's length, once its first two bytes are in.
    fn header_len(&self) -> Option<usize> {
        if self.have < 2 {
            return None;
        }
        let extended = match self.header[1] & 0x7F {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
        Some(2 + extended + mask)
    }

    fn header_read(&mut self) -> bool {
        let header = &self.header;
        let len = match header[1] & 0x7F {
            126 => u64::from(u16::from_be_bytes([header[2], header[3]])),
            127 => u64::from_be_bytes(header[2..10].try_into().expect("8 bytes")),
            short => u64::from(short),
        };
        let opcode = header[0] & 0x0F;
        self.fin = header[0] & 0x80 != 0;
        // Opcodes 8 and above are control frames, of at most 125 bytes (the library refuses a
        // longer one at its header) and never part of a message.
        self.data = opcode < 8;
        if self.data {
            if opcode != 0 {
                // A new message (the library refuses one begun inside another).
                self.message = 0;
                self.reserved = 0;
            }
            self.message = self.message.saturating_add(len);
        }
        self.have = 0;
        self.payload_left = Some(len);
        len == 0 && self.frame_done()
    }

    fn frame_done(&mut self) -> bool {
        self.payload_left = None;
        let ended = self.data && self.fin;
        if ended {
            self.message = 0;
            self.reserved = 0;
        }
        ended
    }
}

/// A connection's reservations, shared by its [`Gate`] and the transport reading its messages.
#[derive(Default)]
pub struct Lease {
    /// A session is bound: large messages are counted.
    counted: bool,
    /// The reservation of the message being read, and when its first part was granted.
    current: Option<(BodyPermit, Instant)>,
    /// The message being read waits for a reservation.
    waiting: bool,
    /// The reservations of the messages read whole (none for a small one), oldest first, until
    /// their requests take them.
    ended: VecDeque<Option<BodyPermit>>,
}

impl Lease {
    /// Whether a session is bound (see [`Lease::counted`]).
    pub fn set_counted(&mut self, counted: bool) {
        self.counted = counted;
    }

    /// The reservation of the data message the library returned, if it needed one: called once
    /// per data message, in order.
    pub fn take_ended(&mut self) -> Option<BodyPermit> {
        self.ended.pop_front().flatten()
    }

    /// When the read of the next message times out, for a read that began waiting at `idle`'s
    /// start: a message whose bytes are reserved must arrive within `request_timeout` of its
    /// reservation (its waits for further parts included, so two fragmented messages that each
    /// hold part of the budget cannot wait for each other for good); while one waits for its
    /// first reservation there is no deadline (as over TCP, the wait is not part of the read's);
    /// else the idle deadline.
    pub fn deadline(&self, idle: Instant, request_timeout: Duration) -> Option<Instant> {
        match (&self.current, self.waiting) {
            (Some((_, granted)), _) => Some(*granted + request_timeout),
            (None, true) => None,
            (None, false) => Some(idle),
        }
    }

    fn granted(&mut self, permit: BodyPermit) {
        self.waiting = false;
        match &mut self.current {
            Some((held, _)) => held.absorb(permit),
            None => self.current = Some((permit, Instant::now())),
        }
    }

    fn message_ended(&mut self) {
        let permit = self.current.take().map(|(permit, _)| permit);
        self.ended.push_back(permit);
    }
}

/// The connection's byte stream as the WebSocket library reads it (see the module doc).
pub struct Gate<S> {
    inner: S,
    cursor: FrameCursor,
    budget: Rc<BodyBudget>,
    lease: Rc<RefCell<Lease>>,
    reserve: Option<Pin<Box<Reserve>>>,
    /// Bytes read from `inner` that may not pass yet, for the next reads.
    kept: Vec<u8>,
}

impl<S> Gate<S> {
    /// Gates `inner`, whose next byte begins a WebSocket frame (its handshake is done).
    pub fn new(inner: S, budget: Rc<BodyBudget>, lease: Rc<RefCell<Lease>>) -> Self {
        Self {
            inner,
            cursor: FrameCursor::default(),
            budget,
            lease,
            reserve: None,
            kept: Vec::new(),
        }
    }

    /// The stream below, read past the gate (what a closing connection drains; the bytes the
    /// gate kept are dropped with it).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gate<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            let counted = this.lease.borrow().counted;
            if let Next::Reserve(bytes) = this.cursor.next(counted) {
                let reserve = this.reserve.get_or_insert_with(|| {
                    this.lease.borrow_mut().waiting = true;
                    Box::pin(this.budget.reserve(bytes))
                });
                let permit = ready!(reserve.as_mut().poll(context));
                this.reserve = None;
                this.cursor.reserved(bytes);
                this.lease.borrow_mut().granted(permit);
                continue;
            }
            let (passed, ended) = if this.kept.is_empty() {
                let read = ready!(Pin::new(&mut this.inner).poll_read(context, buf))?;
                let (passed, ended) = this.cursor.scan(&buf[..read], counted);
                this.kept.extend_from_slice(&buf[passed..read]);
                (passed, ended)
            } else {
                let most = this.kept.len().min(buf.len());
                let (passed, ended) = this.cursor.scan(&this.kept[..most], counted);
                buf[..passed].copy_from_slice(&this.kept[..passed]);
                this.kept.drain(..passed);
                (passed, ended)
            };
            if ended {
                this.lease.borrow_mut().message_ended();
            }
            // Nothing passes only at the end of the stream: the cursor lets a byte through
            // unless a reservation is owed, which the loop takes first.
            return Poll::Ready(Ok(passed));
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gate<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(context, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(context, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(context)
    }

    fn poll_close(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked frame header: `first` (FIN and opcode) and a payload of `len` bytes.
    fn header(first: u8, len: u64) -> Vec<u8> {
        let mut header = match len {
            0..=125 => vec![first, 0x80 | len as u8],
            126..=0xFFFF => [vec![first, 0x80 | 126], (len as u16).to_be_bytes().to_vec()].concat(),
            _ => [vec![first, 0x80 | 127], len.to_be_bytes().to_vec()].concat(),
        };
        header.extend_from_slice(&[1, 2, 3, 4]);
        header
    }

    /// Feeds `bytes` as the cursor allows, reserving what it asks for: the pieces passed, the
    /// reservations made, and how many messages ended.
    fn feed(cursor: &mut FrameCursor, mut bytes: &[u8]) -> (Vec<usize>, Vec<u64>, usize) {
        let (mut pieces, mut reservations, mut ended) = (Vec::new(), Vec::new(), 0);
        while !bytes.is_empty() {
            match cursor.next(true) {
                Next::Reserve(owed) => {
                    reservations.push(owed);
                    cursor.reserved(owed);
                }
                Next::Pass(most) => {
                    let n = most.min(bytes.len());
                    assert!(n > 0, "a frame part of no bytes");
                    ended += usize::from(cursor.passed(&bytes[..n]));
                    pieces.push(n);
                    bytes = &bytes[n..];
                }
            }
        }
        (pieces, reservations, ended)
    }

    #[test]
    fn small_messages_and_control_frames_pass_frame_part_by_frame_part_unreserved() {
        let mut cursor = FrameCursor::default();
        let mut stream = header(0x82, 300);
        stream.extend(vec![0; 300]);
        stream.extend(header(0x89, 4)); // a ping
        stream.extend([9; 4]);
        stream.extend(header(0x82, 0));
        let (pieces, reservations, ended) = feed(&mut cursor, &stream);
        // Two bytes, the rest of the header, the payload.
        assert_eq!(pieces, [2, 6, 300, 2, 4, 4, 2, 4]);
        assert!(reservations.is_empty());
        assert_eq!(ended, 2, "the ping ends no message");
    }

    #[test]
    fn a_large_message_is_reserved_whole_at_its_header_before_any_payload_passes() {
        let mut cursor = FrameCursor::default();
        let len = 16 << 20;
        let mut stream = header(0x82, len);
        stream.extend(vec![0; 1000]);
        assert_eq!(feed(&mut cursor, &stream[..14]).0, [2, 12]);
        assert_eq!(cursor.next(true), Next::Reserve(len));
        assert_eq!(
            cursor.next(false),
            Next::Pass(len as usize),
            "a connection without a session"
        );
        cursor.reserved(len);
        assert_eq!(cursor.next(true), Next::Pass(len as usize));
    }

    #[test]
    fn a_scan_stops_at_the_end_of_a_message_and_before_a_payload_owed_a_reservation() {
        let mut cursor = FrameCursor::default();
        let mut stream = header(0x89, 4); // a ping passes on
        stream.extend([9; 4]);
        stream.extend(header(0x82, 300));
        stream.extend(vec![0; 300]);
        let large = header(0x82, 1 << 20);
        let at_large = stream.len();
        stream.extend(&large);
        stream.extend(vec![0; 1000]);
        assert_eq!(cursor.scan(&stream, true), (at_large, true));
        let rest = &stream[at_large..];
        assert_eq!(cursor.scan(rest, true), (large.len(), false));
        assert_eq!(cursor.scan(&rest[large.len()..], true), (0, false));
        assert_eq!(cursor.next(true), Next::Reserve(1 << 20));
        cursor.reserved(1 << 20);
        assert_eq!(cursor.scan(&rest[large.len()..], true), (1000, false));
    }

    #[test]
    fn a_fragmented_message_is_reserved_once_over_the_small_size_and_then_by_fragment() {
        let mut cursor = FrameCursor::default();
        let mut stream = Vec::new();
        for (first, len) in [(0x02, 40_000u64), (0x00, 40_000), (0x8A, 2), (0x80, 10_000)] {
            stream.extend(header(first, len));
            stream.extend(vec![0; len as usize]);
        }
        let (_, reservations, ended) = feed(&mut cursor, &stream);
        // The second fragment takes the message over 64 KiB: all of it so far is reserved, then
        // the last fragment's bytes; the pong between is not part of it.
        assert_eq!(reservations, [80_000, 10_000]);
        assert_eq!(ended, 1);
        assert_eq!((cursor.message, cursor.reserved), (0, 0));
    }
}
