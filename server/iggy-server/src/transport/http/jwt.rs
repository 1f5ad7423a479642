//! HS256 JSON Web Tokens for the HTTP API: compact `header.claims.signature`, base64url without
//! padding, HMAC-SHA256 over `header.claims`. Only what this server issues is accepted: the
//! header must say HS256, and issuer, audience, expiry and not-before are checked.

use base64ct::{Base64UrlUnpadded, Encoding};
use serde::{Deserialize, Serialize};

/// What a token says: the user, the logical session it rides on, and its validity window
/// (seconds). The session's client id, number and bind proof hash are what any node holding the
/// secret needs to bind that session on first sight of the token (after a restart too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub jti: String,
    pub iss: String,
    pub aud: String,
    /// The user id, as text (JWT `sub` is a string).
    pub sub: String,
    /// The session's client id, 32 hex digits.
    pub cid: String,
    /// The session number (the op its register committed at, so also the metadata a node must
    /// have applied before it can judge the token).
    pub sid: u64,
    /// [`bind_proof_hash`] of the session's bind secret, 64 hex digits: ties the token to that
    /// registration without carrying the secret itself (which would also bind the session over
    /// the binary protocol, and outlive the token).
    pub bph: String,
    pub iat: u64,
    pub nbf: u64,
    pub exp: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    Malformed,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
}

/// What a token carries of a session's bind secret: a BLAKE3 derived key (one way, and unlike
/// any other use) of the hash the session table keeps of it (`auth::bind_secret_hash`).
pub fn bind_proof_hash(bind_secret: &[u8; 32]) -> String {
    blake3::Hasher::new_derive_key("iggy-server 2026 http access token bind proof")
        .update(bind_secret)
        .finalize()
        .to_hex()
        .to_string()
}

const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// Signs and checks tokens with one pair of secrets.
pub struct Signer {
    encoding: ring::hmac::Key,
    decoding: ring::hmac::Key,
    issuer: String,
    audience: String,
    skew: u64,
}

impl Signer {
    pub fn new(encoding: &[u8], decoding: &[u8], issuer: &str, audience: &str, skew: u64) -> Self {
        Self {
            encoding: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, encoding),
            decoding: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, decoding),
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            skew,
        }
    }

    pub fn sign(&self, claims: &Claims) -> String {
        let claims = serde_json::to_vec(claims).expect("claims serialize");
        let signed = format!(
            "{}.{}",
            Base64UrlUnpadded::encode_string(HEADER.as_bytes()),
            Base64UrlUnpadded::encode_string(&claims)
        );
        let tag = ring::hmac::sign(&self.encoding, signed.as_bytes());
        format!(
            "{signed}.{}",
            Base64UrlUnpadded::encode_string(tag.as_ref())
        )
    }

    /// The claims of `token` if it is ours, untampered and valid at `now` (seconds).
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        let (signed, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (header, claims) = signed.split_once('.').ok_or(TokenError::Malformed)?;
        let signature =
            Base64UrlUnpadded::decode_vec(signature).map_err(|_| TokenError::Malformed)?;
        ring::hmac::verify(&self.decoding, signed.as_bytes(), &signature)
            .map_err(|_| TokenError::BadSignature)?;
        let header = Base64UrlUnpadded::decode_vec(header).map_err(|_| TokenError::Malformed)?;
        let header: serde_json::Value =
            serde_json::from_slice(&header).map_err(|_| TokenError::Malformed)?;
        if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
            return Err(TokenError::Malformed);
        }
        let claims = Base64UrlUnpadded::decode_vec(claims).map_err(|_| TokenError::Malformed)?;
        let claims: Claims = serde_json::from_slice(&claims).map_err(|_| TokenError::Malformed)?;
        if claims.iss != self.issuer {
            return Err(TokenError::WrongIssuer);
        }
        if claims.aud != self.audience {
            return Err(TokenError::WrongAudience);
        }
        if now >= claims.exp.saturating_add(self.skew) {
            return Err(TokenError::Expired);
        }
        if now.saturating_add(self.skew) < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: u64) -> Claims {
        Claims {
            jti: "j".into(),
            iss: "iss".into(),
            aud: "aud".into(),
            sub: "1".into(),
            cid: format!("{:032x}", 7u128),
            sid: 3,
            bph: bind_proof_hash(&[5; 32]),
            iat: 100,
            nbf: 100,
            exp,
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires() {
        let signer = Signer::new(b"secret", b"secret", "iss", "aud", 5);
        let token = signer.sign(&claims(200));
        assert_eq!(signer.verify(&token, 150), Ok(claims(200)));
        assert_eq!(
            signer.verify(&token, 204),
            Ok(claims(200)),
            "within the skew"
        );
        assert_eq!(signer.verify(&token, 205), Err(TokenError::Expired));
        assert_eq!(signer.verify(&token, 90), Err(TokenError::NotYetValid));
    }

    #[test]
    fn forged_or_foreign_tokens_are_refused() {
        let signer = Signer::new(b"secret", b"secret", "iss", "aud", 0);
        let token = signer.sign(&claims(200));
        let other = Signer::new(b"other", b"other", "iss", "aud", 0);
        assert_eq!(other.verify(&token, 150), Err(TokenError::BadSignature));
        // Claims swapped for a more generous user under the same signature.
        let mut forged = claims(200);
        forged.sub = "0".into();
        let forged_claims = Base64UrlUnpadded::encode_string(&serde_json::to_vec(&forged).unwrap());
        let parts: Vec<&str> = token.split('.').collect();
        let tampered = format!("{}.{}.{}", parts[0], forged_claims, parts[2]);
        assert_eq!(signer.verify(&tampered, 150), Err(TokenError::BadSignature));
        assert_eq!(
            signer.verify("not a token", 150),
            Err(TokenError::Malformed)
        );
        let elsewhere = Signer::new(b"secret", b"secret", "iss", "someone-else", 0);
        assert_eq!(
            elsewhere.verify(&token, 150),
            Err(TokenError::WrongAudience)
        );
    }
}
