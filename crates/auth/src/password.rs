//! Passwords: argon2id (the `argon2` crate's defaults: 19 MiB, 2 passes, 1 lane, as OWASP
//! recommends) in PHC string form, with a random 16-byte salt.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

/// The shortest password accepted (DeerFlow's rule).
pub const MIN_LENGTH: usize = 8;
/// The longest password accepted: hashing cost must not be the caller's to choose.
pub const MAX_LENGTH: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("could not read random bytes: {0}")]
    Random(#[from] getrandom::Error),
    #[error("hashing failed: {0}")]
    Hash(String),
}

/// Why a new password is refused, as the message the client sees.
pub fn check_strength(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_LENGTH {
        return Err(format!("Password must be at least {MIN_LENGTH} characters"));
    }
    if n > MAX_LENGTH {
        return Err(format!("Password must be at most {MAX_LENGTH} characters"));
    }
    Ok(())
}

/// Hashes a password with a fresh salt.
pub fn hash(password: &str) -> Result<String, PasswordError> {
    let salt = SaltString::encode_b64(&crate::random_bytes::<16>()?)
        .map_err(|e| PasswordError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Whether `password` matches the stored hash. A malformed hash matches nothing.
pub fn verify(password: &str, phc: &str) -> bool {
    if password.len() > MAX_LENGTH * 4 {
        return false;
    }
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// Spends the time of one verification, for a login naming an unknown user (so that the
/// answer's timing does not tell which emails have accounts).
pub fn verify_dummy(password: &str) {
    static DUMMY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(h) = DUMMY.get_or_init(|| hash("not-a-real-password").ok()) {
        let _ = verify(password, h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_verify() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify("correct horse", &h));
        assert!(!verify("correct horsE", &h));
        assert!(!verify("correct horse", "not a hash"));
        assert_ne!(hash("correct horse").unwrap(), h, "salted");
    }

    #[test]
    fn strength() {
        assert!(check_strength("1234567").is_err());
        assert!(check_strength("12345678").is_ok());
        assert!(check_strength(&"x".repeat(257)).is_err());
    }
}
