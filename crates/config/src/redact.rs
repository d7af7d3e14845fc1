//! `Debug` for config types that hold secrets: the value is printed as JSON with secret
//! fields (and every value of secret maps) replaced by `"[redacted]"`.

use serde::Serialize;
use serde_json::Value;

/// The redacted JSON text of `v`. Field paths may be dotted (`oauth.client_secret`).
pub(crate) fn redacted_json<T: Serialize>(v: &T, fields: &[&str], maps: &[&str]) -> String {
    let mut json = serde_json::to_value(v).unwrap_or(Value::Null);
    for f in fields {
        if let Some(x) = at(&mut json, f)
            && !x.is_null()
        {
            *x = Value::String("[redacted]".into());
        }
    }
    for m in maps {
        if let Some(Value::Object(inner)) = at(&mut json, m) {
            for x in inner.values_mut() {
                *x = Value::String("[redacted]".into());
            }
        }
    }
    json.to_string()
}

fn at<'v>(v: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    path.split('.').try_fold(v, |cur, key| cur.get_mut(key))
}

macro_rules! redacted_debug {
    ($ty:ident, fields: [$($f:literal),* $(,)?], maps: [$($m:literal),* $(,)?]) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(
                    f,
                    "{} {}",
                    stringify!($ty),
                    crate::redact::redacted_json(self, &[$($f),*], &[$($m),*])
                )
            }
        }
    };
}
pub(crate) use redacted_debug;

#[cfg(test)]
mod tests {
    use crate::{McpOAuthConfig, McpServerConfig, ModelConfig};

    #[test]
    fn secrets_are_redacted_in_debug() {
        let mut m = ModelConfig {
            name: "m".into(),
            api_key: Some("sk-very-secret".into()),
            ..Default::default()
        };
        m.headers.insert("X-Key".into(), "hdr-secret".into());
        let text = format!("{m:?}");
        assert!(text.contains("\"name\":\"m\""), "{text}");
        assert!(
            !text.contains("sk-very-secret") && !text.contains("hdr-secret"),
            "{text}"
        );

        let mut s = McpServerConfig::default();
        s.env.insert("TOKEN".into(), "env-secret".into());
        s.oauth = Some(McpOAuthConfig {
            client_secret: Some("oauth-secret".into()),
            ..Default::default()
        });
        let text = format!("{s:?}");
        assert!(
            !text.contains("env-secret") && !text.contains("oauth-secret"),
            "{text}"
        );
        // Nested OAuth config is serialized inside the server: check it separately too.
        let text = format!("{:?}", s.oauth.as_ref().unwrap());
        assert!(!text.contains("oauth-secret"), "{text}");
    }
}
