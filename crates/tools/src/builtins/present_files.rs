//! `present_files`: show finished files from `/mnt/user-data/outputs` to the user.

use super::{is_strictly_under, normalize_abs_path};
use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use fawn_sandbox::{VIRTUAL_OUTPUTS, VIRTUAL_USER_DATA};
use fawn_state::StateUpdate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The ToolMessage text of a successful call.
pub const PRESENT_FILES_SUCCESS: &str = "Successfully presented files";

const DESCRIPTION: &str = "\
Show files to the user so the interface can render them or offer them for download.

Use it for finished deliverables (reports, charts, documents, code, data) once they are saved \
under /mnt/user-data/outputs. Several related files can be presented in one call, and calling \
it alongside other tools is safe.

Do not use it for files you only read for your own work, nor for scratch or intermediate files.

Only files inside /mnt/user-data/outputs can be presented: save or move a file there first.";

/// Arguments of `present_files`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PresentFilesArgs {
    /// Absolute paths of the files to show, each inside /mnt/user-data/outputs
    /// (for example /mnt/user-data/outputs/report.md).
    pub filepaths: Vec<String>,
}

/// `present_files(filepaths)`: normalises each path to `/mnt/user-data/outputs/...` and adds
/// them to the thread's `artifacts`. All or nothing: one bad path fails the call and leaves
/// `artifacts` unchanged.
#[derive(Debug, Default)]
pub struct PresentFilesTool;

impl PresentFilesTool {
    pub fn new() -> Self {
        PresentFilesTool
    }
}

/// Normalises a presented path to its virtual `/mnt/user-data/outputs/...` form.
///
/// Accepts a virtual path (`/mnt/user-data/outputs/a.md`, with or without the leading `/`)
/// or the host path of the same file under `host_outputs`. `.`/`..` segments are applied
/// lexically first, so `/mnt/user-data/outputs/../workspace/x` is outside. Anything that is
/// not strictly inside the outputs directory is an error naming the path.
pub fn normalize_presented_path(path: &str, host_outputs: &Path) -> Result<String, String> {
    let refuse = || format!("Error: Only files in {VIRTUAL_OUTPUTS} can be presented: {path}");
    let trimmed = path.trim();
    let stripped = trimmed.trim_start_matches('/');
    let user_data = VIRTUAL_USER_DATA.trim_start_matches('/');
    let is_virtual = stripped == user_data
        || stripped
            .strip_prefix(user_data)
            .is_some_and(|r| r.starts_with('/'));
    if is_virtual {
        let normal = normalize_abs_path(&format!("/{stripped}")).ok_or_else(refuse)?;
        if is_strictly_under(&normal, VIRTUAL_OUTPUTS) {
            return Ok(normal);
        }
        return Err(refuse());
    }
    let host = Path::new(trimmed);
    if !host.is_absolute() {
        return Err(refuse());
    }
    let normal = normalize_host(host).ok_or_else(refuse)?;
    let rel = normal.strip_prefix(host_outputs).map_err(|_| refuse())?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() {
        return Err(refuse());
    }
    Ok(format!("{VIRTUAL_OUTPUTS}/{}", parts.join("/")))
}

fn normalize_host(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(s) => out.push(s),
        }
    }
    Some(out)
}

#[async_trait]
impl Tool for PresentFilesTool {
    fn name(&self) -> &str {
        "present_files"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<PresentFilesArgs>()
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: PresentFilesArgs = parse_args(self.name(), args)?;
        if args.filepaths.is_empty() {
            return Ok(ToolOutput::error(format!(
                "Error: filepaths is empty; give the paths of the files to present (inside {VIRTUAL_OUTPUTS})"
            )));
        }
        let host_outputs = ctx.sandbox.provider().thread_paths(&ctx.thread_id).outputs;
        let mut normalized: Vec<String> = Vec::with_capacity(args.filepaths.len());
        for p in &args.filepaths {
            match normalize_presented_path(p, &host_outputs) {
                Ok(v) => {
                    if !normalized.contains(&v) {
                        normalized.push(v);
                    }
                }
                Err(text) => return Ok(ToolOutput::error(text)),
            }
        }
        let mut out = ToolOutput::text(PRESENT_FILES_SUCCESS);
        out.update = Some(StateUpdate {
            artifacts: Some(normalized),
            ..Default::default()
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "/data/users/u/threads/t/user-data/outputs";

    fn norm(p: &str) -> Result<String, String> {
        normalize_presented_path(p, Path::new(HOST))
    }

    #[test]
    fn virtual_paths() {
        assert_eq!(
            norm("/mnt/user-data/outputs/report.md").unwrap(),
            "/mnt/user-data/outputs/report.md"
        );
        assert_eq!(
            norm("mnt/user-data/outputs/a/./b.md").unwrap(),
            "/mnt/user-data/outputs/a/b.md"
        );
        let e = norm("/mnt/user-data/workspace/x.md").unwrap_err();
        assert_eq!(
            e,
            "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/workspace/x.md"
        );
        assert!(norm("/mnt/user-data/outputs/../workspace/x").is_err());
        assert!(norm("/mnt/user-data/outputs").is_err());
        assert!(norm("/mnt/user-data/outputs2/x").is_err());
        assert!(norm("report.md").is_err());
        assert!(norm("/etc/passwd").is_err());
    }

    #[test]
    fn host_paths() {
        assert_eq!(
            norm(&format!("{HOST}/charts/a.png")).unwrap(),
            "/mnt/user-data/outputs/charts/a.png"
        );
        assert!(norm(&format!("{HOST}/../workspace/a.png")).is_err());
        assert!(norm(HOST).is_err());
        assert!(norm(&format!("{HOST}x/a.png")).is_err());
    }
}
