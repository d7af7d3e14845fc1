//! The JWT signing secret: `AUTH_JWT_SECRET` when set (every node of a deployment must share
//! it), else a random secret generated once and kept in `{data dir}/.jwt_secret` (mode
//! 0600), so sessions survive a restart. Never an ephemeral secret.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable holding the secret.
pub const ENV: &str = "AUTH_JWT_SECRET";
/// Shorter secrets are refused.
pub const MIN_LENGTH: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{ENV} is set but shorter than {MIN_LENGTH} characters; use a long random value")]
    TooShort,
    #[error("cannot read or create the JWT secret file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the JWT secret file {0} is empty or corrupt; delete it to generate a new one (this ends every session)"
    )]
    Corrupt(PathBuf),
    #[error("could not read random bytes: {0}")]
    Random(#[from] getrandom::Error),
}

/// Where the generated secret lives under the data directory.
pub fn secret_path(data_dir: &Path) -> PathBuf {
    data_dir.join(".jwt_secret")
}

/// The secret: from `env_value` (the `AUTH_JWT_SECRET` value, if any), else from the file
/// under `data_dir`, created on first use.
pub fn load_or_create(env_value: Option<&str>, data_dir: &Path) -> Result<Vec<u8>, SecretError> {
    if let Some(v) = env_value.map(str::trim).filter(|v| !v.is_empty()) {
        if v.len() < MIN_LENGTH {
            return Err(SecretError::TooShort);
        }
        return Ok(v.as_bytes().to_vec());
    }
    let path = secret_path(data_dir);
    let io = |source| SecretError::Io {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let s = s.trim();
            return if s.len() >= MIN_LENGTH {
                Ok(s.as_bytes().to_vec())
            } else {
                Err(SecretError::Corrupt(path))
            };
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let secret = hex::encode(crate::random_bytes::<32>()?);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    match opts.open(&path) {
        Ok(mut f) => {
            f.write_all(secret.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            Ok(secret.into_bytes())
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(None, data_dir),
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(None, dir.path()).unwrap();
        let b = load_or_create(None, dir.path()).unwrap();
        assert_eq!(a, b);
        assert!(a.len() >= MIN_LENGTH);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(secret_path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn env_wins_and_must_be_long() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(40);
        assert_eq!(
            load_or_create(Some(&long), dir.path()).unwrap(),
            long.as_bytes()
        );
        assert!(matches!(
            load_or_create(Some("short"), dir.path()),
            Err(SecretError::TooShort)
        ));
        assert!(!secret_path(dir.path()).exists());
    }
}
