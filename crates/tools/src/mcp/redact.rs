//! Keeping configured secrets out of error texts and log lines.
//!
//! Every text that leaves this module tree (a status error, a ToolMessage, a log line) goes
//! through a [`Redactor`] built from the server's config: header values, env values, OAuth
//! client secret / refresh token, URL passwords and query values, and every access token
//! fetched at run time.

use fawn_config::McpServerConfig;
use std::sync::{Arc, RwLock};

/// What a secret is replaced with.
const MASK: &str = "***";

/// Shorter values are not treated as secrets: masking `1` or `on` would garble every text.
const MIN_SECRET_LEN: usize = 4;

/// The secrets of one server; cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Arc<RwLock<Vec<String>>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor")
    }
}

impl Redactor {
    /// The secrets found in `cfg`.
    pub(crate) fn for_server(cfg: &McpServerConfig) -> Redactor {
        let r = Redactor::default();
        for v in cfg.headers.values() {
            r.add(v);
        }
        for v in cfg.env.values() {
            r.add(v);
        }
        if let Some(o) = &cfg.oauth {
            for v in [&o.client_secret, &o.refresh_token].into_iter().flatten() {
                r.add(v);
            }
            for v in o.extra_token_params.values() {
                r.add(v);
            }
            r.add_url(&o.token_url);
        }
        if let Some(u) = &cfg.url {
            r.add_url(u);
        }
        r
    }

    /// Adds a secret value. A value such as `Bearer abc` also masks its last word.
    pub(crate) fn add(&self, value: &str) {
        let mut candidates = vec![value.trim().to_string()];
        if let Some((_, last)) = value.trim().rsplit_once(' ') {
            candidates.push(last.to_string());
        }
        let Ok(mut secrets) = self.secrets.write() else {
            return;
        };
        for c in candidates {
            if c.chars().count() >= MIN_SECRET_LEN && !secrets.contains(&c) {
                secrets.push(c);
            }
        }
        // Longest first, so that a secret containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Adds the password and query values of a URL.
    fn add_url(&self, url: &str) {
        let Ok(u) = url::Url::parse(url) else {
            return;
        };
        if let Some(p) = u.password() {
            self.add(p);
        }
        for (_, v) in u.query_pairs() {
            self.add(&v);
        }
    }

    /// `text` with every known secret masked.
    pub(crate) fn apply(&self, text: &str) -> String {
        let Ok(secrets) = self.secrets.read() else {
            return text.to_string();
        };
        let mut out = text.to_string();
        for s in secrets.iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        out
    }
}

/// A URL fit for messages: no user info, no query, no fragment.
pub(crate) fn display_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "<invalid URL>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fawn_config::McpOAuthConfig;

    #[test]
    fn masks_configured_secrets_and_tokens() {
        let mut cfg = McpServerConfig::default();
        cfg.headers.insert("X-Api-Key".into(), "key-123456".into());
        cfg.headers
            .insert("Authorization".into(), "Bearer tok-abcdef".into());
        cfg.env.insert("GITHUB_TOKEN".into(), "ghp_secret".into());
        cfg.env.insert("DEBUG".into(), "1".into());
        cfg.url = Some("https://u:pw-9999@example.com/mcp?api_key=qsecret".into());
        cfg.oauth = Some(McpOAuthConfig {
            client_secret: Some("client-s3cret".into()),
            ..Default::default()
        });
        let r = Redactor::for_server(&cfg);
        r.add("Bearer fetched-token");
        let text = "key-123456 tok-abcdef ghp_secret pw-9999 qsecret client-s3cret \
                    fetched-token debug=1";
        let out = r.apply(text);
        for s in [
            "key-123456",
            "tok-abcdef",
            "ghp_secret",
            "pw-9999",
            "qsecret",
            "client-s3cret",
            "fetched-token",
        ] {
            assert!(!out.contains(s), "{s} leaked in {out}");
        }
        assert!(out.ends_with("debug=1"), "short values stay: {out}");
    }

    #[test]
    fn display_url_drops_credentials_and_query() {
        assert_eq!(
            display_url("https://u:p@example.com:8443/mcp?key=s#x"),
            "https://example.com:8443/mcp"
        );
        assert_eq!(display_url("not a url"), "<invalid URL>");
    }
}
