//! `UploadsMiddleware` (`before_agent`, lead agent only): when the run's human message lists
//! files in `additional_kwargs.files` (written by the frontend after an upload), a
//! `<current_uploads>` block describing the files that really exist is prepended to it, and
//! `uploaded_files` is set. The user's own text is kept in
//! `additional_kwargs.original_user_content`. Historical uploads are not injected. Files are
//! checked and read through the run's sandbox, never directly.

use crate::input_sanitization::neutralize_untrusted_tags;
use crate::{Hook, HookOutcome, Middleware, MiddlewareError, RunContext};
use async_trait::async_trait;
use fawn_sandbox::{Sandbox, VIRTUAL_UPLOADS};
use fawn_state::{Content, Message, MessageKind, StateUpdate, ThreadState};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// At most this many files are described; the rest are summarised by extension.
pub const MAX_FILES_IN_CONTEXT: usize = 10;
/// Headings listed per document outline.
const MAX_OUTLINE_ENTRIES: usize = 40;
/// Lines shown when a text document has no headings.
const MAX_PREVIEW_LINES: usize = 5;
/// Largest document read to build its outline or preview.
const MAX_SCAN_BYTES: u64 = 4 * 1024 * 1024;

pub const ORIGINAL_USER_CONTENT_KEY: &str = "original_user_content";

#[derive(Debug, Default)]
pub struct UploadsMiddleware;

impl UploadsMiddleware {
    pub fn new() -> Self {
        UploadsMiddleware
    }
}

/// One listed upload.
#[derive(Clone, Debug, PartialEq)]
struct UploadEntry {
    filename: String,
    size: u64,
    extension: String,
    markdown_virtual_path: Option<String>,
    outline: Vec<(usize, String)>,
    outline_truncated: bool,
    preview: Vec<String>,
}

impl UploadEntry {
    fn state_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("filename".into(), json!(self.filename));
        o.insert("size".into(), json!(self.size));
        o.insert(
            "path".into(),
            json!(format!("{VIRTUAL_UPLOADS}/{}", self.filename)),
        );
        o.insert("extension".into(), json!(self.extension));
        if let Some(md) = &self.markdown_virtual_path {
            o.insert("markdown_virtual_path".into(), json!(md));
        }
        Value::Object(o)
    }
}

fn is_staging_file(name: &str) -> bool {
    name.starts_with(".upload-") && name.ends_with(".part")
}

/// A bare file name: no directory parts, not `.`/`..`.
fn is_bare_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0')
}

fn extension_of(name: &str) -> String {
    Path::new(name)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default()
}

fn is_text_like(ext: &str) -> bool {
    matches!(
        ext.to_ascii_lowercase().as_str(),
        ".md"
            | ".markdown"
            | ".txt"
            | ".csv"
            | ".tsv"
            | ".json"
            | ".yaml"
            | ".yml"
            | ".log"
            | ".rst"
            | ".html"
            | ".htm"
            | ".xml"
    )
}

/// Markdown headings as `(line number, title)`, and whether the list was cut.
fn outline_of(text: &str) -> (Vec<(usize, String)>, bool) {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            let title = t[hashes..].trim();
            if !title.is_empty() {
                if out.len() == MAX_OUTLINE_ENTRIES {
                    return (out, true);
                }
                out.push((i + 1, crate::util::truncate_chars(title, 200).to_string()));
            }
        }
    }
    (out, false)
}

fn preview_of(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(MAX_PREVIEW_LINES)
        .map(|l| crate::util::truncate_chars(l, 200).to_string())
        .collect()
}

/// Reads a text document through the sandbox (`None` when missing, too large or binary).
async fn read_text(sandbox: &dyn Sandbox, path: &str) -> Option<String> {
    let bytes = sandbox.read_bytes(path, MAX_SCAN_BYTES).await.ok()?;
    if bytes.contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Which of the listed files exist in the uploads directory, with their outlines. Every
/// access goes through the sandbox (confined, symlinks resolved beneath the thread root).
async fn scan(sandbox: &dyn Sandbox, listed: Vec<(String, u64)>) -> Vec<UploadEntry> {
    let present: HashSet<String> = match sandbox.list_dir(VIRTUAL_UPLOADS, 1).await {
        Ok(entries) => entries
            .iter()
            .filter(|p| !p.ends_with('/'))
            .filter_map(|p| p.strip_prefix(VIRTUAL_UPLOADS))
            .map(|p| p.trim_start_matches('/').to_string())
            .collect(),
        Err(e) => {
            tracing::info!(error = %e, "uploads directory not readable");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (filename, size) in listed {
        if !present.contains(&filename) {
            continue;
        }
        let extension = extension_of(&filename);
        let mut entry = UploadEntry {
            filename: filename.clone(),
            size,
            extension: extension.clone(),
            markdown_virtual_path: None,
            outline: Vec::new(),
            outline_truncated: false,
            preview: Vec::new(),
        };
        // A converted sibling (`report.pdf` → `report.md`) is what the agent should read.
        let stem = Path::new(&filename)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let md_name = format!("{stem}.md");
        if !extension.eq_ignore_ascii_case(".md") && !stem.is_empty() && present.contains(&md_name)
        {
            entry.markdown_virtual_path = Some(format!("{VIRTUAL_UPLOADS}/{md_name}"));
        }
        let text_source = match &entry.markdown_virtual_path {
            Some(md) => Some(md.clone()),
            None => is_text_like(&extension).then(|| format!("{VIRTUAL_UPLOADS}/{filename}")),
        };
        let text = match &text_source {
            Some(p) => read_text(sandbox, p).await,
            None => None,
        };
        if let Some(text) = text {
            let (outline, truncated) = outline_of(&text);
            entry.outline_truncated = truncated;
            if outline.is_empty() {
                entry.preview = preview_of(&text);
            }
            entry.outline = outline;
        }
        out.push(entry);
    }
    out
}

fn size_label(bytes: u64) -> String {
    let kb = bytes as f64 / 1024.0;
    if kb < 1024.0 {
        format!("{kb:.1} KB")
    } else {
        format!("{:.1} MB", kb / 1024.0)
    }
}

fn format_entry(e: &UploadEntry, lines: &mut Vec<String>) {
    let n = neutralize_untrusted_tags;
    lines.push(format!("- {} ({})", n(&e.filename), size_label(e.size)));
    lines.push(format!("  Path: {VIRTUAL_UPLOADS}/{}", n(&e.filename)));
    if let Some(md) = &e.markdown_virtual_path {
        lines.push(format!("  Generated Markdown: {}", n(md)));
    }
    let read_path = e
        .markdown_virtual_path
        .clone()
        .unwrap_or_else(|| format!("{VIRTUAL_UPLOADS}/{}", e.filename));
    if !e.outline.is_empty() {
        lines.push(format!(
            "  Document outline (read sections of {} with `read_file` and these line numbers):",
            n(&read_path)
        ));
        for (line, title) in &e.outline {
            lines.push(format!("    L{line}: {}", n(title)));
        }
        if e.outline_truncated {
            lines.push(format!(
                "    ... (first {} headings only; `read_file` shows the rest)",
                e.outline.len()
            ));
        }
    } else {
        if !e.preview.is_empty() {
            lines.push("  No headings found. The document starts with:".to_string());
            for p in &e.preview {
                lines.push(format!("    > {}", n(p)));
            }
        }
        lines.push(format!(
            "  Search it with `grep` (e.g. `grep(pattern='keyword', path='{}')`).",
            n(&read_path)
        ));
    }
    lines.push(String::new());
}

/// The `<current_uploads>` block for `files` (the first [`MAX_FILES_IN_CONTEXT`] described,
/// the rest summarised by extension).
fn uploads_block(files: &[UploadEntry]) -> String {
    let mut lines = vec![
        "<current_uploads>".to_string(),
        "The user uploaded these files with this message:".to_string(),
        String::new(),
    ];
    let (shown, omitted) = files.split_at(files.len().min(MAX_FILES_IN_CONTEXT));
    for e in shown {
        format_entry(e, &mut lines);
    }
    if !omitted.is_empty() {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for e in omitted {
            let ext = if e.extension.is_empty() {
                "(no extension)".to_string()
            } else {
                e.extension.to_ascii_lowercase()
            };
            *counts.entry(ext).or_default() += 1;
        }
        let kinds = counts
            .iter()
            .map(|(ext, c)| format!("{c} {ext}"))
            .collect::<Vec<_>>()
            .join(", ");
        lines.push(format!(
            "... and {} more file(s) not listed here ({}).",
            omitted.len(),
            neutralize_untrusted_tags(&kinds)
        ));
        lines.push(format!(
            "  List them all with `glob(pattern='**/*', path='{VIRTUAL_UPLOADS}/')`."
        ));
        lines.push(String::new());
    }
    lines.extend(
        [
            "How to use them:",
            "- Read the files themselves first: `read_file` with the outline line numbers.",
            "- Use `grep` to find keywords when unsure where to look",
            "  (e.g. `grep(pattern='revenue', path='/mnt/user-data/uploads/')`).",
            "- Use `glob` to find files by name (e.g. `glob(pattern='**/*.md', path='/mnt/user-data/uploads/')`).",
            "- Search the web only if the files do not answer the question.",
            "</current_uploads>",
        ]
        .map(String::from),
    );
    lines.join("\n")
}

/// The `(filename, size)` entries of `additional_kwargs.files` that name a bare file.
fn listed_files(m: &Message) -> Option<Vec<(String, u64)>> {
    let Some(Value::Array(files)) = m.additional_kwargs.get("files") else {
        return None;
    };
    let mut out = Vec::new();
    for f in files {
        let Some(o) = f.as_object() else { continue };
        let Some(name) = o.get("filename").and_then(Value::as_str) else {
            continue;
        };
        if !is_bare_name(name) || is_staging_file(name) {
            continue;
        }
        let size = match o.get("size") {
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                .unwrap_or(0),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
            _ => 0,
        };
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), size));
        }
    }
    Some(out)
}

fn empty_uploads() -> HookOutcome {
    HookOutcome::update(StateUpdate {
        uploaded_files: Some(Some(Vec::new())),
        ..Default::default()
    })
}

#[async_trait]
impl Middleware for UploadsMiddleware {
    fn name(&self) -> &str {
        "UploadsMiddleware"
    }

    fn hooks(&self) -> &'static [Hook] {
        &[Hook::BeforeAgent]
    }

    async fn before_agent(
        &self,
        state: &ThreadState,
        ctx: &RunContext,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(last) = state
            .messages
            .last()
            .filter(|m| m.kind == MessageKind::Human)
        else {
            return Ok(empty_uploads());
        };
        let Some(listed) = listed_files(last).filter(|l| !l.is_empty()) else {
            return Ok(empty_uploads());
        };
        // Only upload turns touch the sandbox (and acquire it if this run had not yet).
        let sandbox = match ctx.sandbox.get().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(thread_id = %ctx.thread_id, error = %e, "sandbox unavailable; uploads not described");
                return Ok(empty_uploads());
            }
        };
        let files = scan(sandbox.as_ref(), listed).await;
        if files.is_empty() {
            tracing::info!(thread_id = %ctx.thread_id, "files were listed but none exist in the uploads directory");
            return Ok(empty_uploads());
        }
        let block = uploads_block(&files);
        let mut m = last.clone();
        if !matches!(
            m.additional_kwargs.get(ORIGINAL_USER_CONTENT_KEY),
            Some(Value::String(_))
        ) {
            m.additional_kwargs.insert(
                ORIGINAL_USER_CONTENT_KEY.into(),
                Value::String(last.content.text()),
            );
        }
        m.content = match &last.content {
            Content::Text(t) => Content::Text(format!("{block}\n\n{t}")),
            Content::Blocks(b) => {
                let mut blocks = vec![json!({"type": "text", "text": format!("{block}\n\n")})];
                blocks.extend(b.iter().cloned());
                Content::Blocks(blocks)
            }
        };
        Ok(HookOutcome::update(StateUpdate {
            messages: Some(vec![m]),
            uploaded_files: Some(Some(files.iter().map(UploadEntry::state_value).collect())),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_label(2048), "2.0 KB");
        assert_eq!(size_label(0), "0.0 KB");
        assert_eq!(size_label(3 * 1024 * 1024), "3.0 MB");
    }

    #[test]
    fn outlines_skip_code_fences() {
        let (o, cut) = outline_of("# A\ntext\n```\n# not\n```\n## B\n#nospace");
        assert_eq!(o, vec![(1, "A".to_string()), (6, "B".to_string())]);
        assert!(!cut);
    }

    #[test]
    fn names() {
        assert!(is_bare_name("r.pdf"));
        assert!(!is_bare_name("../r.pdf"));
        assert!(!is_bare_name("a\\b.txt"));
        assert!(is_staging_file(".upload-123.part"));
    }
}
