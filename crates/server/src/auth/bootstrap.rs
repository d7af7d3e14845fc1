//! First start: `fawn serve` on an empty database, with authentication on, makes the server
//! usable at once, the way Jupyter prints its token. It creates the first admin with an API
//! key and no password (so there is never a default password), and hands the key back to be
//! printed once; the key is also written to `{data dir}/admin_api_key`, readable only by its
//! owner (mode 0600), so that `export LANGGRAPH_API_KEY=$(cat .fawn/admin_api_key)` works.
//!
//! Only on a loopback address unless asked for explicitly: a key printed to the logs of a
//! server that listens on the network is not something to do behind the operator's back.
//!
//! That admin waits for its setup ([`fawn_checkpoint::User::needs_setup`]): setup-status keeps
//! saying `needs_setup`, so DeerFlow's web UI still shows its setup page, and
//! `/api/v1/auth/initialize` gives this same account its email and password. The person who
//! started the server and then opens the UI is one user: the threads they made with the key
//! are there, and the key keeps working. Until then, nobody can sign in with a password.

use super::routes::mint_key;
use crate::app::{AppHandle, is_loopback_host};
use fawn_checkpoint::{NewUser, StoreError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The email of the admin created on first start, until the setup gives it a real one
/// (`.localhost` is reserved: it is nobody's address).
pub const FIRST_ADMIN_EMAIL: &str = "admin@fawn.localhost";
/// The file under the data directory that holds the first admin's API key.
pub const KEY_FILE: &str = "admin_api_key";
/// The name the key is listed under (`fawn api-key list`).
pub const KEY_NAME: &str = "first start";

/// What the first start created.
#[derive(Debug)]
pub struct FirstAdmin {
    pub email: String,
    /// The API key itself: shown once, never stored in clear except in `key_file`.
    pub key: String,
    /// Where the key was written (mode 0600), or why it could not be.
    pub key_file: Result<PathBuf, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("reading or creating accounts: {0}")]
    Store(#[from] StoreError),
    #[error("creating the first admin's API key: {0}")]
    Key(String),
}

/// Whether a server listening on `host` creates the first admin's key: as `asked`
/// (`--first-admin-key[=BOOL]`), else only on a loopback address.
pub fn wanted(host: &str, asked: Option<bool>) -> bool {
    asked.unwrap_or_else(|| is_loopback_host(host))
}

/// On first start (authentication on, [`wanted`], no account at all), creates the admin
/// waiting for its setup and its API key, and writes the key file. `None` when there was
/// nothing to do (or another process sharing the database did it first).
pub async fn first_admin(
    app: &AppHandle,
    host: &str,
    asked: Option<bool>,
) -> Result<Option<FirstAdmin>, BootstrapError> {
    let state = &app.state;
    if !state.auth.enabled() || !wanted(host, asked) || state.store().count_users().await? > 0 {
        return Ok(None);
    }
    let user = match state
        .store()
        .create_user(
            NewUser {
                email: FIRST_ADMIN_EMAIL.into(),
                password_hash: None,
                system_role: "admin".into(),
                needs_setup: true,
            },
            false,
        )
        .await
    {
        Ok(u) => u,
        // Another node on the same database made it a moment ago: its key is its own.
        Err(StoreError::Conflict(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let (_, key) = mint_key(state.store().as_ref(), &user, KEY_NAME)
        .await
        .map_err(BootstrapError::Key)?;
    let key_file = write_key_file(&state.rt.settings.home, &key).map_err(|e| e.to_string());
    tracing::info!(
        email = %user.email,
        "first start: created an admin with an API key and no password"
    );
    Ok(Some(FirstAdmin {
        email: user.email,
        key,
        key_file,
    }))
}

/// Writes `key` to `{home}/admin_api_key`, readable and writable by the owner only: created
/// beside it with mode 0600 and renamed over it, so no other user ever reads it.
fn write_key_file(home: &Path, key: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(home)?;
    let path = home.join(KEY_FILE);
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let tmp = home.join(format!(".{KEY_FILE}.{suffix}"));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written = opts.open(&tmp).and_then(|mut f| {
        f.write_all(format!("{key}\n").as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(std::path::absolute(&path).unwrap_or(path))
}

impl FirstAdmin {
    /// What `fawn serve` prints once, on standard error (never into the logs, which may be
    /// shipped elsewhere): the key, where it is kept, and where the web UI's setup is.
    pub fn banner(&self) -> String {
        let file = match &self.key_file {
            Ok(p) => format!(
                "It is also in {path} (only you can read it).\n\
                 SDK clients take it from LANGGRAPH_API_KEY:\n\n    \
                 export LANGGRAPH_API_KEY=$(cat {path})\n",
                path = p.display()
            ),
            Err(e) => format!(
                "It could not be written to the data directory ({e}): copy it now.\n\
                 SDK clients take it from LANGGRAPH_API_KEY.\n"
            ),
        };
        format!(
            "\nFirst start: Fawn created an admin and its API key, shown only this once:\n\n    \
             {key}\n\n{file}\n\
             DeerFlow web UI: its setup page (http://localhost:3000/setup for a UI on this \
             machine)\ngives this admin an email and a password; the key keeps working.\n\
             Lost the key? `fawn api-key create {email}` mints another.\n",
            email = self.email,
            key = self.key,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_on_loopback_unless_asked() {
        for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"] {
            assert!(wanted(host, None), "{host}");
            assert!(!wanted(host, Some(false)), "{host}");
        }
        for host in ["0.0.0.0", "::", "192.168.1.10", "fawn.example.com"] {
            assert!(!wanted(host, None), "{host}");
            assert!(wanted(host, Some(true)), "{host}");
        }
    }

    #[test]
    fn the_key_file_is_the_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("data");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(KEY_FILE), "stale key of an older database\n").unwrap();
        let path = write_key_file(&home, "fawn_abc").unwrap();
        assert!(path.is_absolute());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "fawn_abc\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let left: Vec<_> = std::fs::read_dir(&home).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}
