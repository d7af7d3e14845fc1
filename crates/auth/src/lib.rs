//! Authentication primitives, with no I/O beyond the secret file: password hashing
//! (argon2id), the session token (an HS256 JWT carried in the `access_token` cookie), API
//! keys (random, stored as SHA-256), CSRF tokens, the login lockout, and where the JWT secret
//! comes from. The server decides who may call what; this crate must never know about HTTP,
//! routes, storage or users' data.

pub mod keys;
pub mod lockout;
pub mod password;
pub mod secret;
pub mod token;

pub use lockout::Lockout;
pub use token::{Claims, TokenError};

/// A user's system role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    /// `admin` is an admin; anything else is a plain user.
    pub fn parse(s: &str) -> Role {
        if s == "admin" {
            Role::Admin
        } else {
            Role::User
        }
    }
}

/// `n` bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf)?;
    Ok(buf)
}

/// A random URL-safe token of 32 bytes (CSRF tokens).
pub fn random_token() -> Result<String, getrandom::Error> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<32>()?))
}

/// Equality that takes the same time wherever the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
