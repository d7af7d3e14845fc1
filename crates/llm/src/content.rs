//! Content-block helpers shared by the providers: recognising LangChain image blocks and
//! turning them into URLs or base64 sources.

use serde_json::{Value, json};

/// Replaces an image block for models without vision.
pub const IMAGE_OMITTED_NOTE: &str = "[image omitted: this model does not accept images]";

/// An image reference extracted from a content block.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageRef {
    /// An `http(s)` or `data:` URL.
    Url(String),
    /// Raw base64 data with its media type.
    Base64 { media_type: String, data: String },
}

impl ImageRef {
    /// As a URL (base64 becomes a `data:` URL).
    pub fn to_url(&self) -> String {
        match self {
            ImageRef::Url(u) => u.clone(),
            ImageRef::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        }
    }

    /// As base64 (a `data:` URL is split); `None` for a plain http(s) URL.
    pub fn to_base64(&self) -> Option<(String, String)> {
        match self {
            ImageRef::Base64 { media_type, data } => Some((media_type.clone(), data.clone())),
            ImageRef::Url(u) => {
                let rest = u.strip_prefix("data:")?;
                let (meta, data) = rest.split_once(',')?;
                let media_type = meta.strip_suffix(";base64")?;
                Some((media_type.to_string(), data.to_string()))
            }
        }
    }
}

/// Whether `block` is an image block in any shape LangChain uses: OpenAI `image_url`,
/// LangChain `image` (`url`, `source_type`+`data`, v1 `base64`), Anthropic `image`+`source`.
pub fn is_image_block(block: &Value) -> bool {
    matches!(
        block.get("type").and_then(Value::as_str),
        Some("image_url") | Some("image")
    )
}

/// The image an image block points at.
pub fn image_ref(block: &Value) -> Option<ImageRef> {
    let ty = block.get("type").and_then(Value::as_str)?;
    if ty == "image_url" {
        return match block.get("image_url")? {
            Value::String(u) => Some(ImageRef::Url(u.clone())),
            Value::Object(o) => o
                .get("url")
                .and_then(Value::as_str)
                .map(|u| ImageRef::Url(u.to_string())),
            _ => None,
        };
    }
    if ty != "image" {
        return None;
    }
    let mime = || {
        block
            .get("mime_type")
            .or_else(|| block.get("media_type"))
            .and_then(Value::as_str)
            .unwrap_or("image/png")
            .to_string()
    };
    if let Some(source) = block.get("source").and_then(Value::as_object) {
        return match source.get("type").and_then(Value::as_str) {
            Some("base64") => Some(ImageRef::Base64 {
                media_type: source
                    .get("media_type")
                    .and_then(Value::as_str)
                    .unwrap_or("image/png")
                    .to_string(),
                data: source.get("data")?.as_str()?.to_string(),
            }),
            Some("url") => Some(ImageRef::Url(source.get("url")?.as_str()?.to_string())),
            _ => None,
        };
    }
    if let Some(data) = block.get("base64").and_then(Value::as_str) {
        return Some(ImageRef::Base64 {
            media_type: mime(),
            data: data.to_string(),
        });
    }
    match block.get("source_type").and_then(Value::as_str) {
        Some("base64") => Some(ImageRef::Base64 {
            media_type: mime(),
            data: block.get("data")?.as_str()?.to_string(),
        }),
        _ => block
            .get("url")
            .and_then(Value::as_str)
            .map(|u| ImageRef::Url(u.to_string())),
    }
}

/// The note block that replaces an image for a model without vision.
pub fn image_note() -> Value {
    json!({"type": "text", "text": IMAGE_OMITTED_NOTE})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_langchain_image_shapes() {
        let cases = [
            (
                json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}}),
                "https://x/a.png",
            ),
            (
                json!({"type": "image_url", "image_url": "https://x/b.png"}),
                "https://x/b.png",
            ),
            (
                json!({"type": "image", "url": "https://x/c.png"}),
                "https://x/c.png",
            ),
            (
                json!({"type": "image", "source_type": "base64", "data": "QUJD", "mime_type": "image/jpeg"}),
                "data:image/jpeg;base64,QUJD",
            ),
            (
                json!({"type": "image", "base64": "QUJD", "mime_type": "image/png"}),
                "data:image/png;base64,QUJD",
            ),
            (
                json!({"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "QUJD"}}),
                "data:image/gif;base64,QUJD",
            ),
        ];
        for (block, url) in cases {
            assert!(is_image_block(&block));
            assert_eq!(image_ref(&block).unwrap().to_url(), url, "{block}");
        }
        let r = ImageRef::Url("data:image/png;base64,QUJD".into());
        assert_eq!(r.to_base64(), Some(("image/png".into(), "QUJD".into())));
        assert_eq!(ImageRef::Url("https://x".into()).to_base64(), None);
    }
}
