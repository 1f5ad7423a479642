//! The byte stream of one replica link, plain TCP or TLS (`replica_tls`), with the few reads and
//! writes the replica bus makes. A TLS stream is split into halves that take turns per poll
//! (`futures_util::io::split`), so a reader waiting for the peer never holds the writer up.

use super::replica_tls::{self, Stream as TlsStream};
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use futures_util::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadHalf, WriteHalf};
use std::io;

/// A replica connection before it is split: the handshake runs on it.
pub enum LinkStream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// Why a handshake frame could not be read.
pub enum HandshakeRead {
    Io(io::Error),
    /// A link without TLS read the start of a TLS record: the peer has `[cluster.tls]`.
    PeerSpeaksTls(&'static str),
}

impl LinkStream {
    pub fn is_tls(&self) -> bool {
        matches!(self, LinkStream::Tls(_))
    }

    async fn read_exact_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
        match self {
            LinkStream::Plain(stream) => read_plain(stream, len).await,
            LinkStream::Tls(stream) => {
                let mut bytes = vec![0; len];
                stream.read_exact(&mut bytes).await?;
                Ok(bytes)
            }
        }
    }

    /// Reads one handshake frame (`size` bytes). Without TLS it first reads a TLS record
    /// header's worth and stops there if a TLS peer's ClientHello or alert begins: such a peer
    /// would otherwise wait for a TLS answer while this side waits for the rest of a frame.
    pub async fn read_handshake_frame<const SIZE: usize>(
        &mut self,
    ) -> Result<[u8; SIZE], HandshakeRead> {
        let mut frame = Vec::with_capacity(SIZE);
        if !self.is_tls() {
            let record = self
                .read_exact_vec(replica_tls::RECORD_HEADER_SIZE)
                .await
                .map_err(HandshakeRead::Io)?;
            frame.extend_from_slice(&record);
            if replica_tls::is_alert(&record) {
                return Err(HandshakeRead::PeerSpeaksTls("a TLS alert"));
            }
            if replica_tls::is_handshake_record(&record) {
                let message = self
                    .read_exact_vec(replica_tls::MESSAGE_HEADER_SIZE)
                    .await
                    .map_err(HandshakeRead::Io)?;
                frame.extend_from_slice(&message);
                if replica_tls::is_client_hello(&record, &message) {
                    return Err(HandshakeRead::PeerSpeaksTls("a TLS ClientHello"));
                }
            }
        }
        let rest = self
            .read_exact_vec(SIZE - frame.len())
            .await
            .map_err(HandshakeRead::Io)?;
        frame.extend_from_slice(&rest);
        Ok(frame.try_into().expect("SIZE bytes were read"))
    }

    /// Writes `bytes` and, under TLS, flushes them to the socket.
    pub async fn write_all(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        match self {
            LinkStream::Plain(stream) => stream.write_all(bytes).await.0,
            LinkStream::Tls(stream) => {
                stream.write_all(&bytes).await?;
                stream.flush().await
            }
        }
    }

    pub fn split(self) -> (LinkReader, LinkWriter) {
        match self {
            LinkStream::Plain(stream) => {
                let (reader, writer) = stream.into_split();
                (LinkReader::Plain(reader), LinkWriter::Plain(writer))
            }
            LinkStream::Tls(stream) => {
                let (reader, writer) = (*stream).split();
                (LinkReader::Tls(reader), LinkWriter::Tls(writer))
            }
        }
    }
}

async fn read_plain(stream: &mut TcpStream, len: usize) -> io::Result<Vec<u8>> {
    let BufResult(read, bytes) = stream
        .read_exact(Vec::with_capacity(len).slice(..len))
        .await;
    read.map(|()| bytes.into_inner())
}

/// The read half of an admitted link.
pub enum LinkReader {
    Plain(TcpStream),
    Tls(ReadHalf<TlsStream>),
}

impl LinkReader {
    pub async fn read_header<const SIZE: usize>(&mut self) -> io::Result<[u8; SIZE]> {
        match self {
            LinkReader::Plain(stream) => {
                let BufResult(read, header) = stream.read_exact([0u8; SIZE]).await;
                read.map(|()| header)
            }
            LinkReader::Tls(stream) => {
                let mut header = [0u8; SIZE];
                stream.read_exact(&mut header).await?;
                Ok(header)
            }
        }
    }

    pub async fn read_body(&mut self, len: usize) -> io::Result<Vec<u8>> {
        match self {
            LinkReader::Plain(stream) => read_plain(stream, len).await,
            LinkReader::Tls(stream) => {
                let mut body = vec![0; len];
                stream.read_exact(&mut body).await?;
                Ok(body)
            }
        }
    }
}

/// The write half of an admitted link.
pub enum LinkWriter {
    Plain(TcpStream),
    Tls(WriteHalf<TlsStream>),
}

impl LinkWriter {
    /// Writes one frame; under TLS it may wait in the session's buffers until `flush`.
    pub async fn write_frame(&mut self, frame: bytes::Bytes) -> io::Result<()> {
        match self {
            LinkWriter::Plain(stream) => stream.write_all(frame).await.0,
            LinkWriter::Tls(stream) => stream.write_all(&frame).await,
        }
    }

    /// Writes the bytes of several frames and hands the buffer back for the next batch (a
    /// plain link's write takes it while the kernel reads it); under TLS they may wait in
    /// the session's buffers until `flush`.
    pub async fn write_batch(&mut self, batch: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        match self {
            LinkWriter::Plain(stream) => {
                let BufResult(written, batch) = stream.write_all(batch).await;
                (written, batch)
            }
            LinkWriter::Tls(stream) => (stream.write_all(&batch).await, batch),
        }
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        match self {
            LinkWriter::Plain(_) => Ok(()),
            LinkWriter::Tls(stream) => stream.flush().await,
        }
    }
}
