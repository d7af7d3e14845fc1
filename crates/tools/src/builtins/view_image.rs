//! `view_image`: let a vision model look at an image from the thread's files.
//!
//! The tool itself only checks and records the image; a middleware attaches the pixels to the
//! next model request. What goes into state (`viewed_images`), keyed by the normalised virtual
//! path the model asked for:
//!
//! ```json
//! {"/mnt/user-data/uploads/cat.png":
//!   {"mime_type": "image/png", "size": 1234,
//!    "actual_path": "/mnt/user-data/uploads/cat.png", "sha256": "…"}}
//! ```
//!
//! `actual_path` is the **virtual** path to read the bytes from again through
//! [`Sandbox::read_bytes`](fawn_sandbox::Sandbox::read_bytes): state is visible through the
//! API, so host paths never go there. `sha256` lets the reader notice that the file changed
//! since it was viewed. No image bytes are stored in state (checkpoints stay small).

use super::{is_strictly_under, normalize_abs_path};
use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::{SandboxError, VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_WORKSPACE};
use fawn_state::StateUpdate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Largest image accepted (20 MiB, as DeerFlow).
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
/// Where images may be read from.
pub const ALLOWED_IMAGE_ROOTS: [&str; 3] = [VIRTUAL_WORKSPACE, VIRTUAL_UPLOADS, VIRTUAL_OUTPUTS];
/// The ToolMessage text of a successful call.
pub const VIEW_IMAGE_SUCCESS: &str = "Successfully read image";

const EXTENSIONS: [(&str, &str); 5] = [
    (".jpg", "image/jpeg"),
    (".jpeg", "image/jpeg"),
    (".png", "image/png"),
    (".webp", "image/webp"),
    (".gif", "image/gif"),
];

const DESCRIPTION: &str = "\
Look at an image file (jpg, jpeg, png, webp or gif, up to 20 MiB) from the thread's files; \
the image is shown to you with your next step.

Use it when you need to see what an image contains, e.g. an uploaded screenshot or a chart \
you generated. Give one absolute path under /mnt/user-data/workspace, /mnt/user-data/uploads \
or /mnt/user-data/outputs. To show files to the user, use present_files instead.";

/// Arguments of `view_image`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ViewImageArgs {
    /// Absolute virtual path of the image, under /mnt/user-data/workspace, /uploads or
    /// /outputs. Supported formats: jpg, jpeg, png, webp, gif.
    pub image_path: String,
}

/// The image type of `bytes` from its magic number.
pub fn detect_image_mime(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else {
        None
    }
}

/// `view_image(image_path)`. Offered only to models with `supports_vision`.
#[derive(Debug, Default)]
pub struct ViewImageTool;

impl ViewImageTool {
    pub fn new() -> Self {
        ViewImageTool
    }
}

fn roots_text() -> String {
    ALLOWED_IMAGE_ROOTS.join(", ")
}

fn extension_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    match file.rfind('.') {
        Some(i) if i > 0 => file[i..].to_ascii_lowercase(),
        _ => String::new(),
    }
}

#[async_trait]
impl Tool for ViewImageTool {
    fn name(&self) -> &str {
        "view_image"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<ViewImageArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ViewImageArgs = parse_args(self.name(), args)?;
        let raw = args.image_path.trim();
        let not_allowed = || {
            ToolOutput::error(format!(
                "Error: Only image paths under {} are allowed",
                roots_text()
            ))
        };
        let Some(path) = normalize_abs_path(raw) else {
            return Ok(not_allowed());
        };
        if !ALLOWED_IMAGE_ROOTS
            .iter()
            .any(|root| is_strictly_under(&path, root))
        {
            return Ok(not_allowed());
        }
        let ext = extension_of(&path);
        let Some(expected) = EXTENSIONS
            .iter()
            .find(|(e, _)| *e == ext)
            .map(|(_, mime)| *mime)
        else {
            let shown = if ext.is_empty() { "(none)" } else { &ext };
            let supported: Vec<&str> = EXTENSIONS.iter().map(|(e, _)| *e).collect();
            return Ok(ToolOutput::error(format!(
                "Error: Unsupported image format: {shown}. Supported formats: {}",
                supported.join(", ")
            )));
        };
        let sandbox = match ctx.sandbox.get().await {
            Ok(s) => s,
            Err(e) => {
                return Ok(ToolOutput::error(format!(
                    "Error: the sandbox is not available: {e}"
                )));
            }
        };
        let bytes = match sandbox.read_bytes(&path, MAX_IMAGE_BYTES).await {
            Ok(b) => b,
            Err(SandboxError::NotFound(_)) => {
                return Ok(ToolOutput::error(format!(
                    "Error: Image file not found: {path}"
                )));
            }
            Err(SandboxError::IsADirectory(_)) => {
                return Ok(ToolOutput::error(format!(
                    "Error: Path is not a file: {path}"
                )));
            }
            Err(SandboxError::TooLarge(detail)) => {
                return Ok(ToolOutput::error(format!(
                    "Error: Image file is too large: {}. Maximum supported size is {MAX_IMAGE_BYTES} bytes",
                    sandbox.mask(&detail)
                )));
            }
            Err(e) => {
                return Ok(ToolOutput::error(format!(
                    "Error reading image file {path}: {}",
                    sandbox.mask(&e.to_string())
                )));
            }
        };
        let size = bytes.len() as u64;
        if size > MAX_IMAGE_BYTES {
            return Ok(ToolOutput::error(format!(
                "Error: Image file is too large: {size} bytes. Maximum supported size is {MAX_IMAGE_BYTES} bytes"
            )));
        }
        let Some(detected) = detect_image_mime(&bytes) else {
            return Ok(ToolOutput::error(
                "Error: File contents do not match a supported image format",
            ));
        };
        if detected != expected {
            return Ok(ToolOutput::error(format!(
                "Error: Image contents are {detected}, but file extension indicates {expected}"
            )));
        }
        let sha = hex_digest(&bytes);
        let mut viewed = Map::new();
        viewed.insert(
            path.clone(),
            json!({
                "mime_type": detected,
                "size": size,
                "actual_path": path,
                "sha256": sha,
            }),
        );
        let mut out = ToolOutput::text(VIEW_IMAGE_SUCCESS);
        out.update = Some(StateUpdate {
            viewed_images: Some(viewed),
            ..Default::default()
        });
        Ok(out)
    }
}

pub(crate) fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes() {
        assert_eq!(
            detect_image_mime(&[0xff, 0xd8, 0xff, 0xe0]),
            Some("image/jpeg")
        );
        assert_eq!(
            detect_image_mime(b"\x89PNG\r\n\x1a\n...."),
            Some("image/png")
        );
        assert_eq!(
            detect_image_mime(b"RIFF\0\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(detect_image_mime(b"GIF89a..."), Some("image/gif"));
        assert_eq!(detect_image_mime(b"BM......"), None);
        assert_eq!(detect_image_mime(b""), None);
    }

    #[test]
    fn extensions() {
        assert_eq!(extension_of("/a/b/C.PNG"), ".png");
        assert_eq!(extension_of("/a/b/noext"), "");
        assert_eq!(extension_of("/a/b.d/.hidden"), "");
        assert_eq!(extension_of("/a/x.tar.gz"), ".gz");
    }

    #[test]
    fn digest_is_hex_sha256() {
        assert_eq!(
            hex_digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
