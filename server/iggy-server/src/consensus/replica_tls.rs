//! TLS on the replica plane (`[cluster.tls]`): mutual TLS 1.3 under one cluster CA, run on a
//! replica link before the admission handshake. The dialer is the TLS client and the acceptor
//! the TLS server; each presents its node certificate and verifies the other's against
//! `ca_file`.
//!
//! Peers are named by their roster `ip`: a node's certificate carries that ip as an IP SAN, or,
//! when the roster gives a host name (`config::NodeHost::Name`), that name as a DNS SAN. The
//! dialer's TLS client checks it for the roster entry it dials (the name, not the address it
//! resolved to: a pod's address changes, its name does not). The acceptor cannot know before
//! the hello which replica dials it (and a dialer's source address need not be its roster
//! ip), so once the hello is admitted it checks the client certificate against the roster entry
//! of the replica the hello claims ([`PeerCertificate::check_named`]). On one machine every
//! node shares an ip, so there the CA alone separates members from strangers.
//!
//! Each end checks the other's certificate for the role it plays on that link: the acceptor's
//! for serverAuth, the dialer's for clientAuth. Which role a node plays depends on the ids of
//! its peers (the lower id dials), so a node certificate needs both extended key usages, and
//! one lacking either is refused when it is loaded, naming the missing usage.
//!
//! With `[cluster.auth]` on as well, the admission MACs are keyed per connection with a TLS
//! exporter value ([`TlsLink::channel_binding`], `admission::PeerAuth::bound_to_channel`), so
//! a MAC computed on one TLS session does not verify on another.

use crate::config::{ClusterTls, NodeHost};
use compio::io::compat::AsyncStream;
use compio::net::TcpStream;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{CertificateError, ClientConfig, ExtendedKeyPurpose, RootCertStore, ServerConfig};
use std::pin::Pin;
use std::sync::Arc;

/// The ALPN both ends offer: a client of another protocol (an SDK's TLS connection sent to the
/// replica port) is refused by the TLS handshake itself.
pub const ALPN: &[u8] = b"iggy-replica";

/// The exporter label of the channel binding (RFC 8446 7.5; RFC 5705 wants the prefix).
const CHANNEL_BINDING_LABEL: &[u8] = b"EXPORTER-iggy-replica-admission";

/// A TLS stream on a replica link, client or server side.
pub type Stream = futures_rustls::TlsStream<Pin<Box<AsyncStream<TcpStream>>>>;

/// The TLS contexts of one node: its certificate and key, and the cluster CA.
#[derive(Clone)]
pub struct ReplicaTls {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    /// The CA check of a client certificate, applied by the acceptor once more with the IP SAN
    /// check when the hello says which replica presents it.
    clients: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for ReplicaTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplicaTls")
    }
}

/// PEM material of one node, already read.
pub struct NodeCredentials {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub authorities: Vec<CertificateDer<'static>>,
}

impl NodeCredentials {
    /// Reads `cert_file`, `key_file` and `ca_file`; an error names the key, the path and why.
    pub fn read(tls: &ClusterTls) -> Result<Self, String> {
        let certificates = |key: &str, path: &str| {
            let certificates = CertificateDer::pem_file_iter(path)
                .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                .map_err(|error| format!("cluster.tls.{key} {path:?}: {error}"))?;
            if certificates.is_empty() {
                return Err(format!(
                    "cluster.tls.{key} {path:?}: no PEM certificate in it"
                ));
            }
            Ok(certificates)
        };
        let chain = certificates("cert_file", &tls.cert_file)?;
        let authorities = certificates("ca_file", &tls.ca_file)?;
        let key = PrivateKeyDer::from_pem_file(&tls.key_file)
            .map_err(|error| format!("cluster.tls.key_file {:?}: {error}", tls.key_file))?;
        Ok(Self {
            chain,
            key,
            authorities,
        })
    }
}

impl ReplicaTls {
    /// The contexts `[cluster.tls]` describes; `None` when it is disabled.
    pub fn from_config(tls: &ClusterTls) -> Result<Option<Self>, String> {
        if !tls.enabled {
            return Ok(None);
        }
        Self::new(NodeCredentials::read(tls)?).map(Some)
    }

    pub fn new(credentials: NodeCredentials) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for authority in credentials.authorities {
            roots
                .add(authority)
                .map_err(|error| format!("cluster.tls.ca_file: not a CA certificate: {error}"))?;
        }
        let roots = Arc::new(roots);
        let versions = &[&rustls::version::TLS13];
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|error| format!("cluster.tls.ca_file: {error}"))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|error| format!("tls versions: {error}"))?
            .with_client_cert_verifier(clients.clone())
            .with_single_cert(credentials.chain.clone(), credentials.key.clone_key())
            .map_err(|error| format!("cluster.tls.cert_file and key_file do not fit: {error}"))?;
        server.alpn_protocols = vec![ALPN.to_vec()];
        server.max_early_data_size = 0;
        // The dialer resumes no session: every link runs a full handshake with certificates.
        server.send_tls13_tickets = 0;
        let names = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|error| format!("cluster.tls.ca_file: {error}"))?;
        check_usages(&credentials.chain, &*clients, &names)?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(|error| format!("tls versions: {error}"))?
            .with_webpki_verifier(names.clone())
            .with_client_auth_cert(credentials.chain, credentials.key)
            .map_err(|error| format!("cluster.tls.cert_file and key_file do not fit: {error}"))?;
        client.alpn_protocols = vec![ALPN.to_vec()];
        client.resumption = rustls::client::Resumption::disabled();
        Ok(Self {
            client: Arc::new(client),
            server: Arc::new(server),
            clients,
        })
    }

    /// The dialer's TLS handshake with the peer whose roster entry is `peer`.
    pub async fn connect(&self, stream: TcpStream, peer: &NodeHost) -> std::io::Result<TlsLink> {
        let connector = futures_rustls::TlsConnector::from(self.client.clone());
        let connecting = connector.connect(
            server_name(peer).map_err(std::io::Error::other)?,
            Box::pin(AsyncStream::new(stream)),
        );
        let stream = match connecting.into_fallible().await {
            Ok(stream) => stream,
            Err((error, io)) => {
                send_alert(io).await;
                return Err(error);
            }
        };
        let connection = stream.get_ref().1;
        let channel_binding = channel_binding(&**connection)?;
        let peer = PeerCertificate::of(connection.peer_certificates());
        Ok(TlsLink {
            stream: futures_rustls::TlsStream::Client(stream),
            channel_binding,
            peer,
        })
    }

    /// The acceptor's TLS handshake: the client must present a certificate the CA signed.
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsLink> {
        let acceptor = futures_rustls::TlsAcceptor::from(self.server.clone());
        let accepting = acceptor.accept(Box::pin(AsyncStream::new(stream)));
        let stream = match accepting.into_fallible().await {
            Ok(stream) => stream,
            Err((error, io)) => {
                send_alert(io).await;
                return Err(error);
            }
        };
        let connection = stream.get_ref().1;
        let channel_binding = channel_binding(&**connection)?;
        let peer = PeerCertificate::of(connection.peer_certificates());
        Ok(TlsLink {
            stream: futures_rustls::TlsStream::Server(stream),
            channel_binding,
            peer,
        })
    }
}

/// Refuses a node certificate without both extended key usages, naming the one missing: a
/// certificate without serverAuth could not accept links, one without clientAuth could not
/// dial, and a peer would refuse it only once that role came up. Other problems (an issuer
/// outside `ca_file`, expiry) are left to the peers, which say why when they meet it.
fn check_usages(
    chain: &[CertificateDer<'static>],
    clients: &dyn ClientCertVerifier,
    servers: &WebPkiServerVerifier,
) -> Result<(), String> {
    let (end_entity, intermediates) = chain
        .split_first()
        .ok_or("cluster.tls.cert_file is empty")?;
    let now = UnixTime::now();
    // The name is not checked here (this node's ip is the roster's business), and webpki checks
    // the usage before the name.
    let any_ip = ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into());
    let as_client = clients
        .verify_client_cert(end_entity, intermediates, now)
        .err();
    let as_server = servers
        .verify_server_cert(end_entity, intermediates, &any_ip, &[], now)
        .err();
    for (role, error) in [("dial", as_client), ("accept links", as_server)] {
        if let Some(rustls::Error::InvalidCertificate(
            problem @ (CertificateError::InvalidPurpose
            | CertificateError::InvalidPurposeContext { .. }),
        )) = error
        {
            let usage = missing_usage(&problem).unwrap_or(match role {
                "dial" => "clientAuth",
                _ => "serverAuth",
            });
            return Err(format!(
                "cluster.tls.cert_file: the certificate lacks the {usage} extended key usage, \
                 without which this node cannot {role}: a node certificate needs both serverAuth \
                 and clientAuth ({problem})"
            ));
        }
    }
    Ok(())
}

/// The extended key usage a purpose error says was required, by its X.509 name.
fn missing_usage(problem: &CertificateError) -> Option<&'static str> {
    match problem {
        CertificateError::InvalidPurposeContext { required, .. } => match required {
            ExtendedKeyPurpose::ClientAuth => Some("clientAuth"),
            ExtendedKeyPurpose::ServerAuth => Some("serverAuth"),
            _ => None,
        },
        _ => None,
    }
}

/// Flushes what a failed handshake left to send (rustls writes its alert, saying why, into
/// the stream's buffer), so the peer can log the cause; a peer that is not reading gets a
/// second, then the connection closes anyway.
async fn send_alert(mut io: Pin<Box<AsyncStream<TcpStream>>>) {
    let flushing = futures_util::AsyncWriteExt::flush(&mut io);
    let _ = compio::time::timeout(std::time::Duration::from_secs(1), flushing).await;
}

/// A link after its TLS handshake.
pub struct TlsLink {
    pub stream: Stream,
    /// An exporter value both ends of this TLS session share and nobody else knows.
    pub channel_binding: [u8; 32],
    pub peer: PeerCertificate,
}

/// The certificate chain the peer presented, leaf first.
pub struct PeerCertificate(Vec<CertificateDer<'static>>);

impl PeerCertificate {
    fn of(chain: Option<&[CertificateDer<'_>]>) -> Self {
        let chain = chain.unwrap_or_default();
        PeerCertificate(chain.iter().map(|c| c.clone().into_owned()).collect())
    }

    /// Whether it is a dialer's certificate (chain to the CA, validity, clientAuth: the role
    /// its holder plays on this link) that names `host`: an IP as an IP SAN, a host name as a
    /// DNS SAN. A certificate that is not is refused for that, with what to fix; one that is
    /// names its roster entry or is refused for that.
    pub fn check_named(&self, tls: &ReplicaTls, host: &NodeHost) -> Result<(), String> {
        let (end_entity, intermediates) = self
            .0
            .split_first()
            .ok_or("the peer presented no certificate")?;
        tls.clients
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .map_err(|error| format!("its certificate: {}", tls_cause(&error)))?;
        let parsed = ParsedCertificate::try_from(end_entity)
            .map_err(|error| format!("its certificate: {}", tls_cause(&error)))?;
        let (what, san) = match host {
            NodeHost::Ip(_) => ("ip", "an IP SAN"),
            NodeHost::Name(_) => ("host name", "a DNS SAN"),
        };
        rustls::client::verify_server_name(&parsed, &server_name(host)?).map_err(|error| {
            format!("its certificate does not name its roster {what} {host} as {san}: {error}")
        })
    }
}

/// The name a roster entry's certificate must carry: its IP, or its host name (which the
/// configuration checked is an RFC 1123 name, so rustls takes it).
fn server_name(host: &NodeHost) -> Result<ServerName<'static>, String> {
    match host {
        NodeHost::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        NodeHost::Name(name) => ServerName::try_from(name.clone())
            .map_err(|error| format!("roster host name {name:?}: {error}")),
    }
}

fn channel_binding<Side>(connection: &rustls::ConnectionCommon<Side>) -> std::io::Result<[u8; 32]> {
    connection
        .export_keying_material([0u8; 32], CHANNEL_BINDING_LABEL, None)
        .map_err(std::io::Error::other)
}

/// A TLS record header: content type, version, length (RFC 8446 5.1).
pub const RECORD_HEADER_SIZE: usize = 5;
/// A handshake message header: type and a 24-bit length (RFC 8446 4).
pub const MESSAGE_HEADER_SIZE: usize = 4;

/// Whether a record header opens a TLS alert (two bytes): what a TLS acceptor sends a peer
/// whose plaintext it cannot parse. A handshake frame opens with a checksum, which matches this
/// by chance once in about 2^38.
pub fn is_alert(record_header: &[u8]) -> bool {
    matches!(record_header, [21, 3, 1..=4, 0, 2])
}

/// Whether a record header opens a TLS handshake record.
pub fn is_handshake_record(record_header: &[u8]) -> bool {
    matches!(record_header, [22, 3, 1..=4, _, _])
}

/// Whether a handshake record holds a ClientHello filling it, as every TLS client's first
/// record does: the two lengths agree, which a checksum matches by chance once in about 2^50.
pub fn is_client_hello(record_header: &[u8], message_header: &[u8]) -> bool {
    let ([_, _, _, record_high, record_low], [kind, message_high, message_middle, message_low]) =
        (record_header, message_header)
    else {
        return false;
    };
    let record_len = u32::from(u16::from_be_bytes([*record_high, *record_low]));
    let message_len = u32::from_be_bytes([0, *message_high, *message_middle, *message_low]);
    const CLIENT_HELLO: u8 = 1;
    *kind == CLIENT_HELLO && message_len + MESSAGE_HEADER_SIZE as u32 == record_len
}

/// Why a TLS handshake failed: [`cause`], or for a connection the peer closed or reset
/// during it, the likely reasons.
pub fn handshake_cause(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
            if !is_tls_failure(error) =>
        {
            format!(
                "the peer closed the connection during the TLS handshake ({error}): it has no \
                 cluster.tls, or it refused this node's certificate"
            )
        }
        _ => cause(error),
    }
}

/// Whether `error` comes from TLS itself (a verification failure, an alert), not the socket.
pub fn is_tls_failure(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

/// Why a TLS handshake or a TLS link failed, with what to check.
pub fn cause(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls_cause(tls),
        None => error.to_string(),
    }
}

/// A TLS error with what to check.
fn tls_cause(tls: &rustls::Error) -> String {
    use rustls::{AlertDescription, Error};
    if let Error::InvalidCertificate(problem) = tls
        && let Some(usage) = missing_usage(problem)
    {
        return format!(
            "TLS: {tls}: the peer's certificate lacks the {usage} extended key usage; a node \
             certificate needs both serverAuth and clientAuth"
        );
    }
    let hint = match tls {
        Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => "the peer's certificate is not signed by this node's cluster.tls.ca_file",
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => {
            "the peer's certificate does not name its roster ip (as an IP SAN, or a host name as \
             a DNS SAN)"
        }
        Error::InvalidCertificate(CertificateError::InvalidPurpose) => {
            "the peer's certificate lacks an extended key usage: a node certificate needs both \
             serverAuth and clientAuth"
        }
        Error::InvalidCertificate(_) => "the peer's certificate is not acceptable",
        Error::NoCertificatesPresented => "the peer presented no certificate",
        Error::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateRequired
            | AlertDescription::DecryptError,
        ) => "the peer refused this node's certificate (not signed by its cluster.tls.ca_file?)",
        Error::AlertReceived(AlertDescription::UnsupportedCertificate) => {
            "the peer refused this node's certificate for its extended key usages: a node \
             certificate needs both serverAuth and clientAuth"
        }
        Error::AlertReceived(AlertDescription::NoApplicationProtocol)
        | Error::NoApplicationProtocol => "the peer is not an iggy replica (no common ALPN)",
        Error::AlertReceived(AlertDescription::DecodeError) => {
            "the peer does not speak TLS here: is cluster.tls enabled on it?"
        }
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => {
            "the peer does not speak TLS: is cluster.tls enabled on it?"
        }
        _ => "",
    };
    if hint.is_empty() {
        format!("TLS: {tls}")
    } else {
        format!("TLS: {tls}: {hint}")
    }
}

/// Certificates for tests: a CA and node certificates it signs, made with rcgen.
#[cfg(test)]
pub mod test_certificates {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };

    pub struct Authority {
        certificate: rcgen::Certificate,
        key: KeyPair,
    }

    impl Authority {
        pub fn new() -> Self {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            // A name of its own: CAs of one name would meet as one issuer with a bad signature.
            let name = format!("iggy test CA {:016x}", rand::random::<u64>());
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let certificate = params.self_signed(&key).unwrap();
            Authority { certificate, key }
        }

        pub fn pem(&self) -> String {
            self.certificate.pem()
        }

        /// A node certificate (PEM) and key (PEM) naming `ip`, for TLS server and client auth.
        pub fn node(&self, ip: &str) -> (String, String) {
            self.node_for(
                ip,
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ],
            )
        }

        /// A certificate (PEM) and key (PEM) naming `ip`, with these extended key usages only.
        pub fn node_for(&self, ip: &str, usages: Vec<ExtendedKeyUsagePurpose>) -> (String, String) {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![ip.to_string()]).unwrap();
            params.extended_key_usages = usages;
            let certificate = params
                .signed_by(&key, &self.certificate, &self.key)
                .unwrap();
            (certificate.pem(), key.serialize_pem())
        }

        /// The TLS contexts of a node whose certificate names `ip`.
        pub fn tls(&self, ip: &str) -> ReplicaTls {
            self.tls_trusting(ip, self)
        }

        /// A node certificate from this CA, trusting `trusted`'s.
        pub fn tls_trusting(&self, ip: &str, trusted: &Authority) -> ReplicaTls {
            let (certificate, key) = self.node(ip);
            ReplicaTls::new(credentials(&certificate, &key, trusted)).unwrap()
        }

        pub fn der(&self) -> CertificateDer<'static> {
            self.certificate.der().clone()
        }
    }

    /// A node's credentials from PEM text, trusting `trusted`.
    pub fn credentials(certificate: &str, key: &str, trusted: &Authority) -> NodeCredentials {
        NodeCredentials {
            chain: CertificateDer::pem_slice_iter(certificate.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
            key: PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            authorities: vec![trusted.der()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_certificates::Authority;
    use super::*;

    fn files(dir: &std::path::Path, texts: [(&str, &str); 3]) -> ClusterTls {
        let path = |(name, text): (&str, &str)| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        };
        let [cert, key, ca] = texts;
        ClusterTls {
            enabled: true,
            self_signed: false,
            cert_file: path(cert),
            key_file: path(key),
            ca_file: path(ca),
        }
    }

    #[test]
    fn pem_files_load_and_a_bad_one_is_refused_naming_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let authority = Authority::new();
        let (certificate, key) = authority.node("127.0.0.1");
        let ca = authority.pem();
        let good = files(
            dir.path(),
            [("n.pem", &certificate), ("n.key", &key), ("ca.pem", &ca)],
        );
        assert!(ReplicaTls::from_config(&good).unwrap().is_some());
        let disabled = ClusterTls {
            enabled: false,
            ..good.clone()
        };
        assert!(ReplicaTls::from_config(&disabled).unwrap().is_none());
        let refusal = |tls: ClusterTls| ReplicaTls::from_config(&tls).err().unwrap();
        let missing = refusal(ClusterTls {
            cert_file: "/nonexistent/node.pem".into(),
            ..good.clone()
        });
        assert!(
            missing.starts_with("cluster.tls.cert_file \"/nonexistent/node.pem\""),
            "{missing}"
        );
        let not_pem = files(
            dir.path(),
            [
                ("n.pem", &certificate),
                ("n.key", &key),
                ("junk", "not a certificate"),
            ],
        );
        let not_pem = refusal(not_pem);
        assert!(not_pem.starts_with("cluster.tls.ca_file"), "{not_pem}");
        assert!(not_pem.contains("no PEM certificate"), "{not_pem}");
        // A certificate given as the key holds no key.
        let no_key = files(
            dir.path(),
            [
                ("n.pem", &certificate),
                ("n2.pem", &certificate),
                ("ca.pem", &ca),
            ],
        );
        assert!(refusal(no_key).starts_with("cluster.tls.key_file"));
        // Another node's key does not fit this certificate.
        let (_, other_key) = authority.node("127.0.0.1");
        let mismatched = files(
            dir.path(),
            [
                ("n.pem", &certificate),
                ("other.key", &other_key),
                ("ca.pem", &ca),
            ],
        );
        let mismatched = refusal(mismatched);
        assert!(
            mismatched.contains("cert_file and key_file do not fit"),
            "{mismatched}"
        );
    }

    /// The first record a rustls client sends, and the alert a rustls server answers a
    /// plaintext handshake frame with: what a node without TLS must recognise.
    #[test]
    fn a_client_hello_and_an_alert_are_recognised_and_a_handshake_frame_is_not() {
        let authority = Authority::new();
        let tls = authority.tls("127.0.0.1");
        let mut client = rustls::ClientConnection::new(
            tls.client.clone(),
            ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        )
        .unwrap();
        let mut client_hello = Vec::new();
        client.write_tls(&mut client_hello).unwrap();
        let (record, message) = client_hello.split_at(RECORD_HEADER_SIZE);
        assert!(is_handshake_record(record) && !is_alert(record));
        assert!(is_client_hello(record, &message[..MESSAGE_HEADER_SIZE]));

        let plaintext = crate::consensus::admission::hello(
            &crate::consensus::admission::Local {
                cluster: 7,
                replica: 0,
                replica_count: 3,
                identity: crate::consensus::admission::local_identity(),
                auth: None,
                roster: 1,
                runs: Default::default(),
            },
            1,
            iggy_generated::frames::MetadataHistory::Absent,
            [0; 32],
        );
        let mut server = rustls::ServerConnection::new(tls.server.clone()).unwrap();
        server.read_tls(&mut &plaintext[..]).unwrap();
        assert!(server.process_new_packets().is_err());
        let mut alert = Vec::new();
        server.write_tls(&mut alert).unwrap();
        assert!(is_alert(&alert[..RECORD_HEADER_SIZE]), "{alert:?}");
        assert!(!is_handshake_record(&alert[..RECORD_HEADER_SIZE]));

        let (record, message) = plaintext.split_at(RECORD_HEADER_SIZE);
        assert!(!is_alert(record));
        assert!(!is_client_hello(record, &message[..MESSAGE_HEADER_SIZE]));
        // A record header with lengths that disagree is not a ClientHello.
        let mut wrong_length = client_hello[..RECORD_HEADER_SIZE + MESSAGE_HEADER_SIZE].to_vec();
        wrong_length[8] ^= 1;
        let (record, message) = wrong_length.split_at(RECORD_HEADER_SIZE);
        assert!(!is_client_hello(record, message));
    }

    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};

    #[test]
    fn a_node_certificate_lacking_an_extended_key_usage_is_refused_on_loading_naming_it() {
        let authority = Authority::new();
        let load = |usages| {
            let (certificate, key) = authority.node_for("10.0.0.1", usages);
            ReplicaTls::new(test_certificates::credentials(
                &certificate,
                &key,
                &authority,
            ))
        };
        let no_client = load(vec![ServerAuth]).err().unwrap();
        assert!(
            no_client.contains("lacks the clientAuth extended key usage")
                && no_client.contains("cannot dial"),
            "{no_client}"
        );
        let no_server = load(vec![ClientAuth]).err().unwrap();
        assert!(
            no_server.contains("lacks the serverAuth extended key usage")
                && no_server.contains("cannot accept links"),
            "{no_server}"
        );
        assert!(load(vec![ServerAuth, ClientAuth]).is_ok());
    }

    /// Runs a TLS handshake in memory between a client presenting `certificate` (PEM, with
    /// `key`) and `acceptor`'s server side, and returns the acceptor's error and then the
    /// client's, once the acceptor's alert reached it.
    fn refused_handshake(
        acceptor: &ReplicaTls,
        authority: &Authority,
        certificate: &str,
        key: &str,
    ) -> (rustls::Error, rustls::Error) {
        let credentials = test_certificates::credentials(certificate, key, authority);
        let mut roots = RootCertStore::empty();
        roots.add(authority.der()).unwrap();
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(roots)
                .with_client_auth_cert(credentials.chain, credentials.key)
                .unwrap();
        config.alpn_protocols = vec![ALPN.to_vec()];
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut server = rustls::ServerConnection::new(acceptor.server.clone()).unwrap();
        for _ in 0..8 {
            let mut bytes = Vec::new();
            client.write_tls(&mut bytes).unwrap();
            server.read_tls(&mut &bytes[..]).unwrap();
            let refused = server.process_new_packets().err();
            let mut bytes = Vec::new();
            server.write_tls(&mut bytes).unwrap();
            client.read_tls(&mut &bytes[..]).unwrap();
            let answered = client.process_new_packets().err();
            if let Some(refused) = refused {
                return (refused, answered.expect("the client hears the alert"));
            }
        }
        panic!("the acceptor admitted the certificate");
    }

    #[test]
    fn a_dialer_certificate_without_client_auth_is_refused_naming_the_usage_on_both_sides() {
        let authority = Authority::new();
        let acceptor = authority.tls("127.0.0.1");
        let (certificate, key) = authority.node_for("127.0.0.1", vec![ServerAuth]);
        let (at_acceptor, at_dialer) = refused_handshake(&acceptor, &authority, &certificate, &key);
        // As the bus reports them: through `cause` of the I/O error the TLS stream returns.
        let at_acceptor = cause(&std::io::Error::other(at_acceptor));
        assert!(
            at_acceptor.contains("the peer's certificate lacks the clientAuth extended key usage"),
            "{at_acceptor}"
        );
        assert!(!at_acceptor.contains("roster ip"), "{at_acceptor}");
        let at_dialer = cause(&std::io::Error::other(at_dialer));
        assert!(
            at_dialer.contains("refused this node's certificate for its extended key usages"),
            "{at_dialer}"
        );
    }

    #[test]
    fn the_acceptor_checks_a_dialer_certificate_for_client_auth_and_its_name() {
        let authority = Authority::new();
        let tls = authority.tls("10.0.0.1");
        let peer = |usages| {
            let (certificate, _) = authority.node_for("10.0.0.2", usages);
            PeerCertificate(
                CertificateDer::pem_slice_iter(certificate.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
            )
        };
        let ip = &NodeHost::parse("10.0.0.2").unwrap();
        // The dialer plays the client: serverAuth is not asked of it.
        peer(vec![ClientAuth]).check_named(&tls, ip).unwrap();
        // Without clientAuth the refusal says so, not that the ip is wrong.
        let refused = peer(vec![ServerAuth]).check_named(&tls, ip).unwrap_err();
        assert!(
            refused.contains("lacks the clientAuth extended key usage"),
            "{refused}"
        );
        assert!(!refused.contains("does not name"), "{refused}");
    }

    #[test]
    fn a_certificate_is_checked_against_the_roster_ip_it_must_name() {
        let authority = Authority::new();
        let (certificate, _) = authority.node("10.0.0.2");
        let tls = authority.tls("10.0.0.1");
        let peer = PeerCertificate(
            CertificateDer::pem_slice_iter(certificate.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
        );
        peer.check_named(&tls, &NodeHost::parse("10.0.0.2").unwrap())
            .unwrap();
        let wrong = peer
            .check_named(&tls, &NodeHost::parse("10.0.0.3").unwrap())
            .unwrap_err();
        assert!(
            wrong.contains("does not name its roster ip 10.0.0.3"),
            "{wrong}"
        );
        // The same certificate under another CA's trust is refused for its issuer.
        let stranger = Authority::new().tls("10.0.0.1");
        let unknown = peer
            .check_named(&stranger, &NodeHost::parse("10.0.0.2").unwrap())
            .unwrap_err();
        assert!(unknown.contains("UnknownIssuer"), "{unknown}");
        let cause = cause(&std::io::Error::other(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        )));
        assert!(
            cause.contains("not signed by this node's cluster.tls.ca_file"),
            "{cause}"
        );
        // A roster host name is looked for among the DNS SANs, not the IP SANs.
        let (named, _) = authority.node("iggy-2.iggy-headless.default.svc");
        let named = PeerCertificate(
            CertificateDer::pem_slice_iter(named.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
        );
        let host = |text: &str| NodeHost::parse(text).unwrap();
        named
            .check_named(&tls, &host("iggy-2.iggy-headless.default.svc"))
            .unwrap();
        // DNS names have no case.
        named
            .check_named(&tls, &host("IGGY-2.iggy-headless.default.svc"))
            .unwrap();
        let wrong = named
            .check_named(&tls, &host("iggy-1.iggy-headless.default.svc"))
            .unwrap_err();
        assert!(
            wrong.contains(
                "does not name its roster host name iggy-1.iggy-headless.default.svc as a DNS SAN"
            ),
            "{wrong}"
        );
        // An IP SAN does not stand for a name the IP may resolve from, nor a DNS SAN for an IP.
        assert!(peer.check_named(&tls, &host("localhost")).is_err());
        assert!(named.check_named(&tls, &host("10.0.0.2")).is_err());
        assert!(
            PeerCertificate(Vec::new())
                .check_named(&tls, &NodeHost::parse("10.0.0.2").unwrap())
                .is_err()
        );
    }
}
