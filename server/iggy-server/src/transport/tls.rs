//! Certificates and rustls server configurations for TCP+TLS, WSS and QUIC. Every config names
//! the ring provider itself: the process-wide default provider is ambiguous when several are
//! linked, and rustls then panics.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// A certificate chain and its private key.
pub struct Certificate {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Certificate {
    /// From `cert_file` and `key_file` (PEM) when `cert_file` is set, else generated when
    /// `self_signed` (the rule config validation checks). `section` names the keys in errors.
    pub fn load_or_generate(
        section: &str,
        self_signed: bool,
        cert_file: &str,
        key_file: &str,
    ) -> Result<Self, String> {
        if cert_file.is_empty() && self_signed {
            return Self::self_signed();
        }
        let chain = CertificateDer::pem_file_iter(cert_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|error| format!("{section}.cert_file {cert_file:?}: {error}"))?;
        if chain.is_empty() {
            return Err(format!(
                "{section}.cert_file {cert_file:?}: no certificate in it"
            ));
        }
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|error| format!("{section}.key_file {key_file:?}: {error}"))?;
        Ok(Self { chain, key })
    }

    /// ECDSA P-256 (the official client's no-verify QUIC mode offers only that scheme), valid
    /// for localhost and 127.0.0.1.
    pub fn self_signed() -> Result<Self, String> {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let generated = rcgen::generate_simple_self_signed(names)
            .map_err(|error| format!("cannot generate a certificate: {error}"))?;
        let key = PrivateKeyDer::try_from(generated.key_pair.serialize_der())
            .map_err(|error| format!("generated key: {error}"))?;
        Ok(Self {
            chain: vec![generated.cert.der().clone()],
            key,
        })
    }
}

/// A server config with no client authentication, no ALPN (the official clients offer none,
/// and rustls refuses a QUIC client without a common protocol) and no early data.
pub fn server_config(
    certificate: Certificate,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|error| format!("tls versions: {error}"))?
        .with_no_client_auth()
        .with_single_cert(certificate.chain, certificate.key)
        .map_err(|error| format!("certificate and key do not fit: {error}"))?;
    config.max_early_data_size = 0;
    config.alpn_protocols.clear();
    Ok(config)
}

/// The acceptor of a TLS section (`[tcp.tls]`, `[websocket.tls]`); TLS 1.2 and 1.3.
pub fn acceptor(
    section: &str,
    tls: &crate::config::Tls,
) -> Result<compio::tls::TlsAcceptor, String> {
    let certificate =
        Certificate::load_or_generate(section, tls.self_signed, &tls.cert_file, &tls.key_file)?;
    let config = server_config(certificate, rustls::ALL_VERSIONS)?;
    Ok(compio::tls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_and_a_missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.key_pair.serialize_pem()).unwrap();
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        let loaded = Certificate::load_or_generate("tcp.tls", true, cert, key).unwrap();
        assert_eq!(loaded.chain, vec![generated.cert.der().clone()]);
        server_config(loaded, rustls::ALL_VERSIONS).unwrap();
        let missing = Certificate::load_or_generate("tcp.tls", false, "/nonexistent.pem", key)
            .err()
            .unwrap();
        assert!(missing.contains("tcp.tls.cert_file"), "{missing}");
        // A certificate file given as the key holds no key.
        let no_key = Certificate::load_or_generate("quic.certificate", false, cert, cert)
            .err()
            .unwrap();
        assert!(no_key.contains("quic.certificate.key_file"), "{no_key}");
    }

    #[test]
    fn self_signed_configs_have_no_alpn_and_no_early_data() {
        let config = server_config(
            Certificate::self_signed().unwrap(),
            &[&rustls::version::TLS13],
        )
        .unwrap();
        assert!(config.alpn_protocols.is_empty());
        assert_eq!(config.max_early_data_size, 0);
    }
}
