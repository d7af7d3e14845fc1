//! DeerFlow's built-in tools (reference §3.4, §3.6): `present_files`, `view_image`,
//! `ask_clarification`, `write_todos`, `task`, and the custom-agent tools `setup_agent` /
//! `update_agent`.
//!
//! Every failure a model can cause (bad paths, wrong file types, unknown subagents) comes back
//! as an error [`ToolOutput`](crate::ToolOutput) whose text says what to do differently;
//! argument type errors come back as [`ToolError::InvalidArguments`](crate::ToolError).

mod agents;
mod clarification;
mod present_files;
pub mod subagent_steps;
mod task;
mod todos;
mod view_image;

pub use agents::{
    AGENT_CONFIG_FILE, AGENT_SOUL_FILE, SetupAgentArgs, SetupAgentTool, UpdateAgentArgs,
    UpdateAgentTool, agent_dir, normalize_agent_name, replace_files,
};
pub use clarification::{
    AskClarificationArgs, AskClarificationTool, CLARIFICATION_PLACEHOLDER, ClarificationField,
    ClarificationType, FieldType,
};
pub use present_files::{PRESENT_FILES_SUCCESS, PresentFilesTool, normalize_presented_path};
pub use task::{
    RESULT_BRIEF_MAX_CHARS, TaskTool, bound_metadata_text, subagent_additional_kwargs,
    subagent_result_text,
};
pub use todos::{TodoItem, TodoStatus, WriteTodosTool, todos_message};
pub use view_image::{
    ALLOWED_IMAGE_ROOTS, MAX_IMAGE_BYTES, VIEW_IMAGE_SUCCESS, ViewImageTool, detect_image_mime,
};

/// Lexically normalises an absolute POSIX path: collapses `//` and `.`, applies `..`.
/// Returns `None` for relative paths and for `..` that climbs above `/`.
pub fn normalize_abs_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// True when `path` is `root` itself or below it (segment boundary respected).
pub fn is_under(path: &str, root: &str) -> bool {
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// True when `path` is strictly below `root`.
pub fn is_strictly_under(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.len() > 1 && rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_lexically() {
        assert_eq!(normalize_abs_path("/a//b/./c").as_deref(), Some("/a/b/c"));
        assert_eq!(normalize_abs_path("/a/b/../c").as_deref(), Some("/a/c"));
        assert_eq!(normalize_abs_path("/a/../../c"), None);
        assert_eq!(normalize_abs_path("a/b"), None);
        assert_eq!(normalize_abs_path("/").as_deref(), Some("/"));
    }

    #[test]
    fn under_respects_segments() {
        assert!(is_under(
            "/mnt/user-data/outputs/x",
            "/mnt/user-data/outputs"
        ));
        assert!(is_under("/mnt/user-data/outputs", "/mnt/user-data/outputs"));
        assert!(!is_under(
            "/mnt/user-data/outputs2/x",
            "/mnt/user-data/outputs"
        ));
        assert!(!is_strictly_under(
            "/mnt/user-data/outputs",
            "/mnt/user-data/outputs"
        ));
        assert!(!is_strictly_under(
            "/mnt/user-data/outputs/",
            "/mnt/user-data/outputs"
        ));
        assert!(is_strictly_under(
            "/mnt/user-data/outputs/a",
            "/mnt/user-data/outputs"
        ));
    }
}
