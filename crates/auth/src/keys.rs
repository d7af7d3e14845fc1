//! API keys: `fawn_` followed by 32 random bytes in URL-safe base64. They carry 256 bits of
//! entropy, so a fast hash (SHA-256) is the right way to store them: a stolen table cannot be
//! brute-forced, and checking a key costs a hash and one indexed lookup.

use base64::Engine;
use sha2::{Digest, Sha256};

/// Every key starts with this, so that a key is recognisable (and secret scanners can find
/// leaked ones).
pub const PREFIX: &str = "fawn_";

/// A newly minted key: the key itself (shown once), its hash and its display prefix.
#[derive(Debug)]
pub struct NewKey {
    pub key: String,
    pub hash: String,
    pub prefix: String,
}

/// Mints a key.
pub fn mint() -> Result<NewKey, getrandom::Error> {
    let key = format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(crate::random_bytes::<32>()?)
    );
    Ok(NewKey {
        hash: hash(&key),
        prefix: key.chars().take(PREFIX.len() + 6).collect(),
        key,
    })
}

/// The stored form of a key: lower-case hex SHA-256.
pub fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Whether a credential looks like one of our keys (as opposed to a session token).
pub fn looks_like_key(credential: &str) -> bool {
    credential.starts_with(PREFIX) && credential.len() < 128
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_hashed() {
        let a = mint().unwrap();
        let b = mint().unwrap();
        assert_ne!(a.key, b.key);
        assert!(looks_like_key(&a.key));
        assert_eq!(a.hash, hash(&a.key));
        assert_eq!(a.hash.len(), 64);
        assert!(a.key.starts_with(&a.prefix));
        assert!(!a.hash.contains(&a.key));
    }
}
