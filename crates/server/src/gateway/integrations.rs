//! DeerFlow's third-party integrations (`/api/integrations/*`: the Lark/Feishu CLI skill
//! pack), which Fawn does not implement. The web UI reads the Lark status when Settings
//! opens, so `GET /api/integrations/lark/status` answers DeerFlow's shape for a pack that is
//! not installed, an app not configured and no `lark-cli` (never "connected"); the setup
//! routes are not served.

use crate::wire::ok;
use axum::response::Response;
use serde_json::json;

/// `GET /api/integrations/lark/status`.
pub async fn lark_status() -> Response {
    ok(&json!({
        "installed": false,
        "version": "",
        "manifest_version": null,
        "latest_available_version": null,
        "runtime_version_mismatch": false,
        "app_configured": false,
        "app_id": null,
        "app_brand": null,
        "skills_expected": 0,
        "skills_installed": 0,
        "installed_skills": [],
        "enabled_skills": [],
        "install_path": "",
        "cli": {
            "available": false,
            "path": null,
            "version": null,
            "error": "Lark integration is not supported by Fawn",
        },
        "auth": {
            "status": "unavailable",
            "message": "Lark integration is not supported by Fawn",
            "user": null,
            "verified": false,
        },
        "sandbox_runtime_mode": "none",
        "sandbox_runtime_ready": false,
        "sandbox_runtime_detail": "Lark integration is not supported by Fawn",
    }))
}
