//! DeerFlow's own real-backend end-to-end specs (`frontend/tests/e2e-real-backend`), replayed
//! as the API calls they make against a server started as DeerFlow starts its replay
//! gateway for them: `DEER_FLOW_AUTH_DISABLED=1` and `DEERFLOW_ENABLE_TEST_SEED=1`.
//!
//! * `auth-disabled-contract`: `/api/v1/auth/me` without a cookie is the synthetic admin.
//! * `real-backend-render`: register a throwaway account (201, session and CSRF cookies),
//!   then chat: create a thread, stream a run, read it back from `messages/page`.
//! * `multi-run-order`: register, seed two runs (DeerFlow's body, its plain run ids) with
//!   the CSRF header, and the thread's history lists the first run's turn first.
//!
//! With authentication off the account is real (it can sign in, and keeps its password when
//! authentication is turned on) but every request still acts as the admin `default`;
//! changing a password is refused with DeerFlow's message.

use crate::helpers::*;
use serde_json::{Value, json};

backends!(deerflow_real_backend_specs_with_auth_disabled);

/// What DeerFlow's frontend expects from `/api/v1/auth/me` in auth-disabled mode
/// (`AUTH_DISABLED_USER`).
fn synthetic_admin() -> Value {
    json!({
        "id": "default",
        "email": "default@test.local",
        "system_role": "admin",
        "needs_setup": false,
        "oauth_provider": null,
    })
}

/// The browser's cookies for the server's origin.
#[derive(Default)]
struct Jar(Vec<(String, String)>);

impl Jar {
    fn store(&mut self, r: &reqwest::Response) {
        for v in r.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let pair = v.split(';').next().unwrap();
            let (k, val) = pair.split_once('=').unwrap();
            self.0.retain(|(name, _)| name != k);
            if !val.is_empty() {
                self.0.push((k.to_string(), val.to_string()));
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn header(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A request as DeerFlow's frontend sends it: its cookies, and the CSRF header on writes.
fn browser(
    app: &TestApp,
    jar: &Jar,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let writes = method != reqwest::Method::GET;
    let mut req = app.client.request(method, app.u(path));
    if !jar.0.is_empty() {
        req = req.header("cookie", jar.header());
    }
    if writes && let Some(csrf) = jar.get("csrf_token") {
        req = req.header("x-csrf-token", csrf);
    }
    req
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `messages/page`'s rows as (type, text) pairs, oldest first.
async fn history(app: &TestApp, jar: &Jar, tid: &str) -> Vec<(String, String)> {
    let r = browser(
        app,
        jar,
        reqwest::Method::GET,
        &format!("/api/threads/{tid}/messages/page"),
    )
    .send()
    .await
    .unwrap();
    let (s, page) = json_of(r).await;
    assert_eq!(s, 200, "{page}");
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let m = &row["content"];
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<String>(),
                other => other.to_string(),
            };
            (m["type"].as_str().unwrap_or_default().to_string(), text)
        })
        .collect()
}

async fn deerflow_real_backend_specs_with_auth_disabled(db: Db) {
    let Some(app) = spawn_with(Spawn {
        lead_agent: true,
        tweak: Some(Box::new(|o| {
            // DEER_FLOW_AUTH_DISABLED=1 (the default of a spawned app) and
            // DEERFLOW_ENABLE_TEST_SEED=1.
            assert!(!o.auth.enabled);
            o.test_seed.requested = true;
        })),
        ..Spawn::new(db)
    })
    .await
    else {
        return;
    };
    let mut jar = Jar::default();

    // auth-disabled-contract.spec: no cookie, the frontend's synthetic user.
    let (s, me) = json_of(
        browser(&app, &jar, reqwest::Method::GET, "/api/v1/auth/me")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, me), (200, synthetic_admin()));

    // Both other specs start by registering a throwaway account: 201 and the cookies.
    let email = format!("e2e-{}@example.com", uuid::Uuid::new_v4().simple());
    let r = browser(&app, &jar, reqwest::Method::POST, "/api/v1/auth/register")
        .json(&json!({"email": email, "password": "very-strong-password-123"}))
        .send()
        .await
        .unwrap();
    jar.store(&r);
    let (s, user) = json_of(r).await;
    assert_eq!(s, 201, "{user}");
    assert_eq!(user["email"], email.as_str());
    assert_eq!(user["system_role"], "user");
    assert!(
        jar.get("csrf_token").is_some_and(|c| !c.is_empty()),
        "register must set the csrf_token cookie"
    );
    assert!(jar.get("access_token").is_some(), "and the session cookie");
    // The session exists, but while authentication is off everyone is the synthetic admin.
    let (s, me) = json_of(
        browser(&app, &jar, reqwest::Method::GET, "/api/v1/auth/me")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, me), (200, synthetic_admin()));
    // The account is real: a second registration of it is refused, and it signs in.
    let (s, e) = json_of(
        browser(&app, &jar, reqwest::Method::POST, "/api/v1/auth/register")
            .json(&json!({"email": email, "password": "very-strong-password-123"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["detail"]["code"], "email_already_exists");
    let login = |password: &'static str| {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("username", &email)
            .append_pair("password", password)
            .finish();
        app.client
            .post(app.u("/api/v1/auth/login/local"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
    };
    let r = login("very-strong-password-123").await.unwrap();
    assert!(
        r.headers()
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("access_token=")),
        "login sets the session cookie"
    );
    let (s, body) = json_of(r).await;
    assert_eq!(
        (s, body),
        (200, json!({"expires_in": 604800, "needs_setup": false}))
    );
    let (s, e) = json_of(login("not-the-password").await.unwrap()).await;
    assert_eq!(s, 401, "{e}");
    assert_eq!(e["detail"]["code"], "invalid_credentials");
    // Only changing a password is refused, with DeerFlow's message.
    let (s, e) = json_of(
        browser(
            &app,
            &jar,
            reqwest::Method::POST,
            "/api/v1/auth/change-password",
        )
        .json(&json!({"current_password": "very-strong-password-123",
                      "new_password": "another-strong-password-456"}))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(
        e["detail"],
        json!({"code": "invalid_credentials",
               "message": "Password changes are not available when DEER_FLOW_AUTH_DISABLED=1."})
    );

    // real-backend-render.spec: a new chat, as the UI makes it.
    let (s, thread) = json_of(
        browser(&app, &jar, reqwest::Method::POST, "/api/langgraph/threads")
            .json(&json!({"metadata": {}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{thread}");
    let tid = thread["thread_id"].as_str().unwrap().to_string();
    let prompt = "Write hello.txt, then read it back to me.";
    let r = browser(
        &app,
        &jar,
        reqwest::Method::POST,
        &format!("/api/langgraph/threads/{tid}/runs/stream"),
    )
    .json(&json!({
        "assistant_id": "lead_agent",
        "input": {"messages": [{"type": "human", "id": uuid::Uuid::new_v4().to_string(),
                                "content": [{"type": "text", "text": prompt}]}]},
        "stream_mode": ["values", "messages-tuple", "custom"],
        "stream_subgraphs": true,
        "stream_resumable": true,
        "on_disconnect": "continue",
        "config": {"recursion_limit": 1000},
        "context": {"mode": "ultra", "thinking_enabled": true, "is_plan_mode": true,
                    "subagent_enabled": true, "thread_id": tid},
    }))
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let events = parse_sse(&r.text().await.unwrap());
    let n = names(&events);
    assert_eq!(n[0], "metadata");
    assert!(!n.contains(&"error"), "{events:?}");
    assert!(n.contains(&"values") && n.contains(&"messages"), "{n:?}");
    let turn = history(&app, &jar, &tid).await;
    assert_eq!(turn.len(), 2, "{turn:?}");
    assert_eq!(turn[0], ("human".to_string(), prompt.to_string()));
    assert_eq!(turn[1].0, "ai", "{turn:?}");
    assert!(!turn[1].1.is_empty(), "{turn:?}");

    // multi-run-order.spec: two seeded runs, no checkpoint, DeerFlow's body as it is.
    let uniq = uuid::Uuid::new_v4().simple().to_string();
    let thread_id = format!("e2e-multi-run-{uniq}");
    let (alpha, omega) = (
        "ALPHA-FIRST-QUESTION-7f3a2c",
        "OMEGA-SECOND-QUESTION-9b21d4",
    );
    let (s, seeded) = json_of(
        browser(
            &app,
            &jar,
            reqwest::Method::POST,
            "/api/test-only/seed-runs",
        )
        .json(&json!({
            "thread_id": thread_id,
            "runs": [
                {"run_id": format!("{thread_id}-r1"), "created_at": "2026-01-01T00:00:00+00:00",
                 "messages": [
                     {"role": "human", "content": alpha, "id": format!("{thread_id}-a-h")},
                     {"role": "ai", "content": "ALPHA reply", "id": format!("{thread_id}-a-a")}]},
                {"run_id": format!("{thread_id}-r2"), "created_at": "2026-01-01T00:01:00+00:00",
                 "messages": [
                     {"role": "human", "content": omega, "id": format!("{thread_id}-o-h")},
                     {"role": "ai", "content": "OMEGA reply", "id": format!("{thread_id}-o-a")}]},
            ],
        }))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{seeded}");
    assert_eq!(
        seeded,
        json!({"ok": true, "thread_id": thread_id, "runs": 2})
    );
    // The thread as the UI rebuilds it: the first run's question renders above the second's,
    // each once.
    let rows = history(&app, &jar, &thread_id).await;
    let texts: Vec<&str> = rows.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, [alpha, "ALPHA reply", omega, "OMEGA reply"]);
    // The runs are listed newest first (DeerFlow's `list_by_thread`), and each run's own
    // messages are read by its (plain) id.
    let (s, runs) = json_of(
        browser(
            &app,
            &jar,
            reqwest::Method::GET,
            &format!("/api/threads/{thread_id}/runs"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{runs}");
    let listed: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [format!("{thread_id}-r2"), format!("{thread_id}-r1")]
    );
    let (s, first) = json_of(
        browser(
            &app,
            &jar,
            reqwest::Method::GET,
            &format!("/api/threads/{thread_id}/runs/{thread_id}-r1/messages"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{first}");
    let first: Vec<&str> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(first, [alpha, "ALPHA reply"]);
    app.stop().await;
}
