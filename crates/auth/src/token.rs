//! The session token: a compact JWT signed with HMAC-SHA256 (`alg: HS256`), carrying the
//! user id (`sub`), the user's `token_version` at login (`ver`; a password change bumps it
//! and so ends every earlier session), and `iat`/`exp` in seconds. Only HS256 is accepted:
//! the header is checked, never trusted to pick an algorithm.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// What a session token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub ver: i64,
    pub iat: i64,
    pub exp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("malformed token")]
    Malformed,
    #[error("bad signature")]
    Signature,
    #[error("token expired")]
    Expired,
}

/// HMAC-SHA256 keyed with `secret`, with the key processed as HMAC defines it (hashed when
/// longer than the 64-byte block, zero-padded otherwise), so no length can fail.
fn mac(secret: &[u8]) -> HmacSha256 {
    use hmac::digest::KeyInit;
    use sha2::Digest;
    let mut key = [0u8; 64];
    if secret.len() > key.len() {
        key[..32].copy_from_slice(&Sha256::digest(secret));
    } else {
        key[..secret.len()].copy_from_slice(secret);
    }
    <HmacSha256 as KeyInit>::new(&key.into())
}

/// Signs `claims`.
pub fn sign(secret: &[u8], claims: &Claims) -> String {
    let header = B64.encode(HEADER);
    let payload = B64.encode(serde_json::to_vec(claims).unwrap_or_default());
    let signing_input = format!("{header}.{payload}");
    let mut m = mac(secret);
    m.update(signing_input.as_bytes());
    let sig = B64.encode(m.finalize().into_bytes());
    format!("{signing_input}.{sig}")
}

/// Checks the signature and expiry (`now` in seconds) and returns the claims.
pub fn verify(secret: &[u8], token: &str, now: i64) -> Result<Claims, TokenError> {
    if token.len() > 4096 {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let sig = B64.decode(s).map_err(|_| TokenError::Malformed)?;
    let mut m = mac(secret);
    m.update(h.as_bytes());
    m.update(b".");
    m.update(p.as_bytes());
    m.verify_slice(&sig).map_err(|_| TokenError::Signature)?;
    let header: serde_json::Value =
        serde_json::from_slice(&B64.decode(h).map_err(|_| TokenError::Malformed)?)
            .map_err(|_| TokenError::Malformed)?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
        return Err(TokenError::Malformed);
    }
    let claims: Claims = serde_json::from_slice(&B64.decode(p).map_err(|_| TokenError::Malformed)?)
        .map_err(|_| TokenError::Malformed)?;
    if claims.exp <= now {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims {
            sub: "u1".into(),
            ver: 3,
            iat: 100,
            exp,
        }
    }

    #[test]
    fn round_trip() {
        let t = sign(b"secret", &claims(200));
        assert_eq!(verify(b"secret", &t, 150).unwrap(), claims(200));
    }

    #[test]
    fn refuses_wrong_secret_expired_tampered_and_other_algorithms() {
        let t = sign(b"secret", &claims(200));
        assert_eq!(verify(b"other", &t, 150), Err(TokenError::Signature));
        assert_eq!(verify(b"secret", &t, 200), Err(TokenError::Expired));
        let mut parts: Vec<&str> = t.split('.').collect();
        let forged = B64.encode(r#"{"sub":"admin","ver":3,"iat":100,"exp":200}"#);
        parts[1] = &forged;
        assert_eq!(
            verify(b"secret", &parts.join("."), 150),
            Err(TokenError::Signature)
        );
        // alg:none with an empty signature.
        let none = format!(
            "{}.{}.",
            B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
            B64.encode(serde_json::to_vec(&claims(200)).unwrap())
        );
        assert!(verify(b"secret", &none, 150).is_err());
        for junk in ["", "a.b", "a.b.c.d", "!!.??.**"] {
            assert!(verify(b"secret", junk, 150).is_err(), "{junk}");
        }
    }
}
