//! `GET /openapi.json` and `GET /docs`, generated from the route table ([`crate::authz`]):
//! every served path under every mount, its methods, its path parameters, who may call it
//! (the `x-fawn-access` extension, and the security requirement), and a JSON body for the
//! methods that take one. Request bodies are described loosely (`object`, or `array` for the
//! batch route): the handlers read them leniently and answer 4xx for anything they cannot
//! use, which is what the CI fuzz run (schemathesis) checks.

use crate::app::AppState;
use crate::authz::{Allowed, Spec, Verb};
use crate::wire::ok;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

fn method_name(m: Verb) -> &'static str {
    match m {
        Verb::Get => "get",
        Verb::Post => "post",
        Verb::Put => "put",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
    }
}

fn who_name(w: Allowed) -> &'static str {
    match w {
        Allowed::Public => "public",
        Allowed::User => "user",
        Allowed::Admin => "admin",
        Allowed::Metrics => "admin or metrics token",
    }
}

/// `{name}` and `{*name}` segments of an axum path, in order, and the OpenAPI form of the
/// path (`{*name}` becomes `{name}`).
fn path_params(path: &str) -> (String, Vec<String>) {
    let mut names = Vec::new();
    let openapi = path
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => {
                    let name = name.trim_start_matches('*').to_string();
                    let out = format!("{{{name}}}");
                    names.push(name);
                    out
                }
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/");
    (openapi, names)
}

fn operation(path: &str, spec: &Spec, params: &[String]) -> Value {
    let mut op = Map::new();
    let method = method_name(spec.method);
    op.insert("operationId".into(), json!(format!("{method} {path}")));
    op.insert("x-fawn-access".into(), json!(who_name(spec.who)));
    if spec.who != Allowed::Public {
        op.insert(
            "security".into(),
            json!([{"apiKey": []}, {"bearer": []}, {"session": []}]),
        );
    }
    if !params.is_empty() {
        op.insert(
            "parameters".into(),
            Value::Array(
                params
                    .iter()
                    .map(|p| {
                        json!({"name": p, "in": "path", "required": true,
                               "schema": {"type": "string"}})
                    })
                    .collect(),
            ),
        );
    }
    if matches!(spec.method, Verb::Post | Verb::Put | Verb::Patch) {
        let schema = if spec.path == "/runs/batch" {
            json!({"type": "array", "items": {"type": "object"}})
        } else {
            json!({"type": "object"})
        };
        op.insert(
            "requestBody".into(),
            json!({"required": false, "content": {"application/json": {"schema": schema}}}),
        );
    }
    let mut responses = Map::new();
    responses.insert("2XX".into(), json!({"description": "Success"}));
    responses.insert(
        "4XX".into(),
        json!({"description": "A request the client can fix: `{\"detail\": …}`"}),
    );
    op.insert("responses".into(), Value::Object(responses));
    Value::Object(op)
}

/// The OpenAPI 3.1 document of `table`.
pub fn document(table: &[(String, Spec)]) -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for (full, spec) in table {
        let (path, params) = path_params(full);
        let entry = paths
            .entry(path.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(
                method_name(spec.method).into(),
                operation(&path, spec, &params),
            );
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Fawn",
            "version": crate::VERSION,
            "description": "The LangGraph Platform API (at /, /api/langgraph and /api) and \
                DeerFlow's gateway API (under /api). x-fawn-access says who may call an \
                operation: public, any signed-in user, or an admin.",
        },
        "components": {"securitySchemes": {
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            "bearer": {"type": "http", "scheme": "bearer"},
            "session": {"type": "apiKey", "in": "cookie", "name": "access_token"},
        }},
        "paths": paths,
    })
}

/// `GET /openapi.json`.
pub async fn openapi(State(app): State<AppState>) -> Response {
    ok(&document(&crate::routes::table(&app)))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `GET /docs`: the route table as a page (no scripts, nothing fetched from elsewhere).
pub async fn docs(State(app): State<AppState>) -> Response {
    let mut rows = String::new();
    for (path, spec) in crate::routes::table(&app) {
        rows.push_str(&format!(
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>\n",
            method_name(spec.method).to_ascii_uppercase(),
            escape(&path),
            who_name(spec.who)
        ));
    }
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Fawn API</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td{{padding:2px 12px}}</style></head>\
         <body><h1>Fawn API {}</h1><p>Machine-readable: <a href=\"openapi.json\">openapi.json</a>. \
         Authenticate with an API key (<code>x-api-key</code>), a bearer token, or the \
         session cookie.</p><table><tr><th>method</th><th>path</th><th>who</th></tr>\n{rows}\
         </table></body></html>",
        crate::VERSION
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        html,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_parameters_become_openapi_ones() {
        let (p, names) = path_params("/api/threads/{thread_id}/artifacts/{*path}");
        assert_eq!(p, "/api/threads/{thread_id}/artifacts/{path}");
        assert_eq!(names, vec!["thread_id", "path"]);
    }
}
