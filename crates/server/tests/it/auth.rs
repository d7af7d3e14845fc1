//! Authentication and per-user isolation with authentication on: DeerFlow's auth API
//! (setup, login, CSRF, lockout, change-password), API keys and bearer tokens for SDK
//! clients, and the access matrix generated from the route table: every route × anonymous,
//! owner, another user and an admin.

use crate::helpers::*;
use fawn_server::authz::{Allowed, Resource, Verb};
use serde_json::{Value, json};

backends!(
    setup_login_csrf_and_sessions,
    api_keys_and_bearer_tokens,
    every_route_declares_who_may_call_it,
    users_see_only_their_own_data,
    a_refusal_before_the_body_is_read_closes_the_connection,
    threads_from_before_auth_go_to_the_first_admin,
    the_first_start_admin_is_the_one_the_setup_completes,
);

/// A server with authentication on (and the custom-agent API, so that its routes are
/// exercised like every other).
pub(crate) async fn spawn_auth(db: Db) -> Option<TestApp> {
    spawn_with(Spawn {
        tweak: Some(Box::new(|o| {
            o.auth = fawn_server::auth::AuthOptions::enabled();
        })),
        settings: Some(Box::new(|s| s.app.agents_api.enabled = true)),
        ..Spawn::new(db)
    })
    .await
}

/// How a request authenticates.
#[derive(Clone, Debug)]
pub(crate) enum Cred {
    Anon,
    Key(String),
    Bearer(String),
    Cookie { session: String, csrf: String },
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Value,
    cookies: Vec<String>,
}

impl Reply {
    fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.iter().find_map(|c| {
            let (k, rest) = c.split_once('=')?;
            (k == name).then(|| rest.split(';').next().unwrap_or("").to_string())
        })
    }

    fn session(&self) -> Cred {
        Cred::Cookie {
            session: self.cookie("access_token").expect("session cookie"),
            csrf: self.cookie("csrf_token").expect("csrf cookie"),
        }
    }
}

pub(crate) async fn call(
    app: &TestApp,
    cred: &Cred,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Reply {
    call_with(app, cred, method, path, body, true).await
}

async fn call_with(
    app: &TestApp,
    cred: &Cred,
    method: &str,
    path: &str,
    body: Option<Value>,
    send_csrf: bool,
) -> Reply {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = app.client.request(m, app.u(path));
    match cred {
        Cred::Anon => {}
        Cred::Key(k) => req = req.header("x-api-key", k),
        Cred::Bearer(t) => req = req.header("authorization", format!("Bearer {t}")),
        Cred::Cookie { session, csrf } => {
            req = req.header(
                "cookie",
                format!("access_token={session}; csrf_token={csrf}"),
            );
            if send_csrf {
                req = req.header("x-csrf-token", csrf);
            }
        }
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let cookies = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let streaming = path.ends_with("/stream") || path.ends_with("/join");
    let body = if streaming && status == 200 {
        Value::Null
    } else {
        let text = r.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Reply {
        status,
        body,
        cookies,
    }
}

async fn login(app: &TestApp, email: &str, password: &str) -> Reply {
    let r = app
        .client
        .post(app.u("/api/v1/auth/login/local"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            form_urlencoded::Serializer::new(String::new())
                .append_pair("username", email)
                .append_pair("password", password)
                .append_pair("remember_me", "true")
                .finish(),
        )
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let cookies = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let body = r.json().await.unwrap_or(Value::Null);
    Reply {
        status,
        body,
        cookies,
    }
}

/// The first admin and one plain user, each with an API key.
pub(crate) async fn admin_and_users(app: &TestApp) -> (Cred, Cred, Cred) {
    let r = call(
        app,
        &Cred::Anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "admin@example.com", "password": "admin-password"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let admin_cookie = r.session();
    let mut keys = Vec::new();
    for email in ["alice@example.com", "bob@example.com"] {
        let r = call(
            app,
            &Cred::Anon,
            "POST",
            "/api/v1/auth/register",
            Some(json!({"email": email, "password": "user-password"})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let r = call(
            app,
            &admin_cookie,
            "POST",
            "/api/v1/auth/api-keys",
            Some(json!({"user": email, "name": "sdk"})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        keys.push(Cred::Key(r.body["key"].as_str().unwrap().to_string()));
    }
    let r = call(
        app,
        &admin_cookie,
        "POST",
        "/api/v1/auth/api-keys",
        Some(json!({"name": "admin sdk"})),
    )
    .await;
    let admin = Cred::Key(r.body["key"].as_str().unwrap().to_string());
    let bob = keys.pop().unwrap();
    let alice = keys.pop().unwrap();
    (admin, alice, bob)
}

async fn setup_login_csrf_and_sessions(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let anon = Cred::Anon;
    let r = call(&app, &anon, "GET", "/api/v1/auth/setup-status", None).await;
    assert_eq!(
        r.body,
        json!({"needs_setup": true, "registration_enabled": true})
    );
    // Nothing else is open, under any mount.
    for path in [
        "/threads/search",
        "/api/threads/search",
        "/api/langgraph/threads/search",
    ] {
        let r = call(&app, &anon, "POST", path, Some(json!({}))).await;
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert_eq!(r.body["detail"]["code"], "not_authenticated");
    }
    let r = call(&app, &anon, "GET", "/api/v1/auth/me", None).await;
    assert_eq!(r.status, 401);
    // No accounts before the first admin.
    let r = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/register",
        Some(json!({"email": "early@example.com", "password": "long-enough"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);

    let bad = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "admin@example.com", "password": "short"})),
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    let r = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "Admin@Example.com", "password": "admin-password"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["system_role"], "admin");
    assert_eq!(r.body["email"], "admin@example.com");
    let session_cookie = r
        .cookies
        .iter()
        .find(|c| c.starts_with("access_token="))
        .unwrap();
    assert!(session_cookie.contains("HttpOnly"), "{session_cookie}");
    assert!(session_cookie.contains("SameSite=Lax"), "{session_cookie}");
    let again = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "other@example.com", "password": "admin-password"})),
    )
    .await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body["detail"]["code"], "system_already_initialized");

    // Login: wrong password, then right.
    let wrong = login(&app, "admin@example.com", "nope-nope").await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body["detail"]["code"], "invalid_credentials");
    let ok = login(&app, "ADMIN@example.com", "admin-password").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["expires_in"], 604800);
    let admin = ok.session();
    let me = call(&app, &admin, "GET", "/api/v1/auth/me", None).await;
    assert_eq!((me.status, &me.body["system_role"]), (200, &json!("admin")));

    // CSRF: a cookie session changes nothing without the header.
    let count = |cred: Cred| {
        let app = &app;
        async move {
            call(app, &cred, "POST", "/threads/count", Some(json!({})))
                .await
                .body
        }
    };
    let before = count(admin.clone()).await;
    let r = call_with(&app, &admin, "POST", "/threads", Some(json!({})), false).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body["detail"].as_str().unwrap().contains("CSRF"),
        "{}",
        r.body
    );
    let Cred::Cookie { session, .. } = &admin else {
        unreachable!()
    };
    let forged = Cred::Cookie {
        session: session.clone(),
        csrf: "guessed".into(),
    };
    let r = app
        .client
        .post(app.u("/threads"))
        .header("cookie", format!("access_token={session}; csrf_token=real"))
        .header("x-csrf-token", "guessed")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        count(admin.clone()).await,
        before,
        "refused requests wrote nothing"
    );
    let r = call(&app, &admin, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A made-up cookie is no session at all.
    let r = call(&app, &forged, "GET", "/api/v1/auth/me", None).await;
    assert_eq!(r.status, 200, "the session itself is fine: {}", r.body);
    let tampered = Cred::Cookie {
        session: format!("{session}x"),
        csrf: "c".into(),
    };
    assert_eq!(
        call(&app, &tampered, "GET", "/api/v1/auth/me", None)
            .await
            .status,
        401
    );

    // change-password ends every earlier session.
    let r = call(
        &app,
        &admin,
        "POST",
        "/api/v1/auth/change-password",
        Some(json!({"current_password": "wrong-one", "new_password": "new-admin-password"})),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = call(
        &app,
        &admin,
        "POST",
        "/api/v1/auth/change-password",
        Some(json!({"current_password": "admin-password", "new_password": "new-admin-password"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let renewed = r.session();
    assert_eq!(
        call(&app, &admin, "GET", "/api/v1/auth/me", None)
            .await
            .status,
        401
    );
    assert_eq!(
        call(&app, &renewed, "GET", "/api/v1/auth/me", None)
            .await
            .status,
        200
    );
    assert_eq!(
        login(&app, "admin@example.com", "admin-password")
            .await
            .status,
        401
    );

    // Logout clears the cookies.
    let r = call(&app, &renewed, "POST", "/api/v1/auth/logout", None).await;
    assert_eq!(r.status, 200);
    assert!(
        r.cookies
            .iter()
            .any(|c| c.starts_with("access_token=;") && c.contains("Max-Age=0"))
    );

    // Lockout: after 5 failures from one address (one above, four here), even the right
    // password is refused.
    for _ in 0..4 {
        assert_eq!(
            login(&app, "admin@example.com", "bad-password")
                .await
                .status,
            401
        );
    }
    let locked = login(&app, "admin@example.com", "new-admin-password").await;
    assert_eq!(locked.status, 429, "{}", locked.body);
}

async fn api_keys_and_bearer_tokens(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (admin, alice, _bob) = admin_and_users(&app).await;
    // A key needs no CSRF token and works as x-api-key or as a bearer token.
    let r = call(&app, &alice, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let Cred::Key(key) = &alice else {
        unreachable!()
    };
    let r = call(
        &app,
        &Cred::Bearer(key.clone()),
        "GET",
        "/api/v1/auth/me",
        None,
    )
    .await;
    assert_eq!(
        (r.status, &r.body["email"]),
        (200, &json!("alice@example.com"))
    );
    // A session token works as a bearer token too (no cookie, no CSRF).
    let s = login(&app, "alice@example.com", "user-password").await;
    let token = s.cookie("access_token").unwrap();
    let r = call(
        &app,
        &Cred::Bearer(token),
        "POST",
        "/threads",
        Some(json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Wrong credentials are refused outright.
    for bad in [
        Cred::Key("fawn_not-a-key".into()),
        Cred::Key("something".into()),
        Cred::Bearer("a.b.c".into()),
    ] {
        let r = call(&app, &bad, "GET", "/ok", None).await;
        assert_eq!(r.status, 401, "{bad:?}: {}", r.body);
    }
    // Plain users cannot mint or list keys; the admin lists them without the secret.
    let r = call(
        &app,
        &alice,
        "POST",
        "/api/v1/auth/api-keys",
        Some(json!({})),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = call(&app, &admin, "GET", "/api/v1/auth/api-keys", None).await;
    assert_eq!(r.status, 200);
    let listed = r.body.to_string();
    assert!(!listed.contains(key.as_str()), "keys are never listed");
    let alice_key = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|k| key.starts_with(k["prefix"].as_str().unwrap()) && k["name"] == "sdk")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Revoked: refused at once.
    let r = call(
        &app,
        &admin,
        "DELETE",
        &format!("/api/v1/auth/api-keys/{alice_key}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        call(&app, &alice, "GET", "/api/v1/auth/me", None)
            .await
            .status,
        401
    );
    let r = call(
        &app,
        &admin,
        "DELETE",
        &format!("/api/v1/auth/api-keys/{alice_key}"),
        None,
    )
    .await;
    assert_eq!(r.status, 404);
}

/// Fills a route's path parameters with `alice`'s resources.
fn fill(path: &str, ids: &Ids) -> String {
    path.replace("{thread_id}", &ids.thread)
        .replace("{run_id}", &ids.run)
        .replace("{cron_id}", &ids.cron)
        .replace("{task_id}", &ids.task)
        .replace("{assistant_id}", &ids.assistant)
        .replace("{checkpoint_id}", "1ef00000-0000-6000-8000-000000000000")
        .replace("{namespace}", "ns")
        .replace("{filename}", "a.txt")
        .replace("{*path}", "outputs/a.txt")
        .replace("{name}", "x")
        .replace("{fact_id}", "f")
        .replace("{provider}", "slack")
        .replace("{id}", "c")
        .replace("{key_id}", "00000000-0000-0000-0000-000000000000")
}

struct Ids {
    thread: String,
    run: String,
    cron: String,
    assistant: String,
    task: String,
}

/// A thread with a finished run, a cron and a scheduled task, all alice's.
async fn alice_resources(app: &TestApp, alice: &Cred) -> Ids {
    let t = call(app, alice, "POST", "/threads", Some(json!({}))).await;
    let thread = t.body["thread_id"].as_str().unwrap().to_string();
    app.mock.push(fawn_testkit::Turn::text("hi"));
    let r = call(
        app,
        alice,
        "POST",
        &format!("/threads/{thread}/runs"),
        Some(json!({"assistant_id": "lead_agent", "input": user_input("hi")})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let run = r.body["run_id"].as_str().unwrap().to_string();
    let path = format!("/threads/{thread}/runs/{run}");
    app.eventually("the run finished", || async {
        let r = call(app, alice, "GET", &path, None).await;
        !matches!(r.body["status"].as_str(), Some("pending" | "running"))
    })
    .await;
    let c = call(
        app,
        alice,
        "POST",
        &format!("/threads/{thread}/runs/crons"),
        Some(json!({"assistant_id": "lead_agent", "schedule": "0 0 1 1 *"})),
    )
    .await;
    assert_eq!(c.status, 200, "{}", c.body);
    let a = call(
        app,
        alice,
        "POST",
        "/assistants",
        Some(json!({"graph_id": "lead_agent", "name": "alice's"})),
    )
    .await;
    let t = call(
        app,
        alice,
        "POST",
        "/api/scheduled-tasks",
        Some(json!({"title": "t", "prompt": "p", "schedule_type": "cron",
                    "schedule_spec": {"cron": "0 0 1 1 *"}, "timezone": "UTC"})),
    )
    .await;
    assert_eq!(t.status, 200, "{}", t.body);
    Ids {
        thread,
        run,
        cron: c.body["cron_id"].as_str().unwrap().to_string(),
        assistant: a.body["assistant_id"].as_str().unwrap().to_string(),
        task: t.body["id"].as_str().unwrap().to_string(),
    }
}

async fn every_route_declares_who_may_call_it(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (admin, alice, bob) = admin_and_users(&app).await;
    let table = fawn_server::routes::table(&app.handle.state);
    assert!(table.len() > 150, "{} routes", table.len());
    let mut ids = alice_resources(&app, &alice).await;
    // Destructive methods last, each on fresh resources.
    let mut ordered: Vec<_> = table
        .iter()
        .filter(|(_, s)| s.method != Verb::Delete)
        .collect();
    let deletes: Vec<_> = table
        .iter()
        .filter(|(_, s)| s.method == Verb::Delete)
        .collect();
    ordered.extend(deletes.iter().copied());
    let mut checked = 0;
    for (path, spec) in ordered {
        if spec.path == "/internal/truncate" {
            continue; // wipes the database; its rule (admin) is checked below
        }
        if spec.method == Verb::Delete {
            ids = alice_resources(&app, &alice).await;
        }
        let url = fill(path, &ids);
        let method = spec.method.method();
        let m = method.as_str();
        let body = match spec.method {
            Verb::Get => None,
            _ if spec.path.ends_with("/latest") => Some(json!({"version": 1})),
            _ => Some(json!({})),
        };
        let resource = Resource::of(spec.path);
        let owned = resource != Resource::None;

        let anon = call(&app, &Cred::Anon, m, &url, body.clone()).await;
        if spec.who == Allowed::Public {
            assert_ne!(anon.status, 401, "{m} {url} is public: {}", anon.body);
            continue;
        }
        assert_eq!(anon.status, 401, "{m} {url} anonymous: {}", anon.body);

        let other = call(&app, &bob, m, &url, body.clone()).await;
        // Assistants are shared (everyone reads them); only their creator or an admin
        // changes one.
        let changes_assistant = spec.path.starts_with("/assistants/{assistant_id}")
            && (matches!(spec.method, Verb::Patch | Verb::Delete)
                || spec.path.ends_with("/latest"));
        match (spec.who, owned) {
            (Allowed::Admin | Allowed::Metrics, _) => {
                assert_eq!(other.status, 403, "{m} {url} as a user: {}", other.body)
            }
            _ if changes_assistant => {
                assert_eq!(
                    other.status, 403,
                    "{m} {url} as another user: {}",
                    other.body
                )
            }
            (_, true) => assert_eq!(
                other.status, 404,
                "{m} {url} as another user: {}",
                other.body
            ),
            _ => assert!(
                ![401, 403].contains(&other.status),
                "{m} {url} as a user: {} {}",
                other.status,
                other.body
            ),
        }
        let adm = call(&app, &admin, m, &url, body.clone()).await;
        if owned {
            assert_eq!(
                adm.status, 404,
                "{m} {url}: an admin is another user too: {}",
                adm.body
            );
        } else {
            assert!(
                ![401, 403].contains(&adm.status),
                "{m} {url} as admin: {} {}",
                adm.status,
                adm.body
            );
        }
        if !matches!(spec.who, Allowed::Admin | Allowed::Metrics) {
            let own = call(&app, &alice, m, &url, body.clone()).await;
            assert!(
                ![401, 403].contains(&own.status),
                "{m} {url} as the owner: {} {}",
                own.status,
                own.body
            );
            if owned {
                // Not refused as someone else's: whatever 404 the route gives is its own.
                assert_ne!(
                    own.body, other.body,
                    "{m} {url}: the owner is not a stranger"
                );
            }
        }
        checked += 1;
    }
    assert!(checked > 150, "{checked}");
    // The test hook is an admin's.
    let r = call(&app, &bob, "POST", "/internal/truncate", Some(json!({}))).await;
    assert_eq!(r.status, 403);
}

/// Another user's thread refused with a request body still unread: the answer says
/// `Connection: close`, so a client does not send its next request on a connection the
/// server is about to drop (the SDK suites saw "server disconnected without sending a
/// response" on the request after such a 404). Without a body the connection is kept.
async fn a_refusal_before_the_body_is_read_closes_the_connection(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (_admin, alice, bob) = admin_and_users(&app).await;
    let ids = alice_resources(&app, &alice).await;
    let Cred::Key(key) = &bob else {
        panic!("bob signs in with an API key");
    };
    let tid = &ids.thread;
    let refused = |method: reqwest::Method, path: String, body: Option<Value>| {
        let mut req = app
            .client
            .request(method, app.u(&path))
            .header("x-api-key", key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send()
    };
    let with_body = refused(
        reqwest::Method::POST,
        format!("/threads/{tid}/runs"),
        Some(json!({"assistant_id": "lead_agent", "input": {"messages": []}})),
    )
    .await
    .unwrap();
    assert_eq!(with_body.status(), 404);
    assert_eq!(
        with_body
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close")
    );
    let without = refused(reqwest::Method::GET, format!("/threads/{tid}"), None)
        .await
        .unwrap();
    assert_eq!(without.status(), 404);
    assert_eq!(without.headers().get("connection"), None);
    // Unauthenticated, with a body: the same.
    let anon = app
        .client
        .post(app.u("/threads/search"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
    assert_eq!(
        anon.headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close")
    );
}

async fn users_see_only_their_own_data(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    let (admin, alice, bob) = admin_and_users(&app).await;
    let ids = alice_resources(&app, &alice).await;
    // Listings and counts never include another user's threads, runs or crons.
    for (who, n) in [(&alice, 1), (&bob, 0), (&admin, 0)] {
        let s = call(&app, who, "POST", "/threads/search", Some(json!({}))).await;
        assert_eq!(s.body.as_array().unwrap().len(), n, "{}", s.body);
        let c = call(&app, who, "POST", "/threads/count", Some(json!({}))).await;
        assert_eq!(c.body, json!(n));
        // Alice's cron and her scheduled task's.
        let c = call(&app, who, "POST", "/runs/crons/search", Some(json!({}))).await;
        assert_eq!(c.body.as_array().unwrap().len(), 2 * n, "{}", c.body);
        let t = call(&app, who, "GET", "/api/scheduled-tasks", None).await;
        assert_eq!(t.body.as_array().unwrap().len(), n, "{}", t.body);
    }
    // A filter naming another owner matches nothing.
    let alice_id = user_id_of(&app, &alice).await;
    let owner_filter = json!({"metadata": {"owner": alice_id}});
    let r = call(
        &app,
        &bob,
        "POST",
        "/threads/search",
        Some(owner_filter.clone()),
    )
    .await;
    assert_eq!(r.body, json!([]));
    let r = call(
        &app,
        &bob,
        "POST",
        "/threads/count",
        Some(owner_filter.clone()),
    )
    .await;
    assert_eq!(r.body, json!(0));
    let r = call(&app, &alice, "POST", "/threads/count", Some(owner_filter)).await;
    assert_eq!(r.body, json!(1));
    // Bob cannot take over alice's thread id, nor cancel her runs.
    let r = call(
        &app,
        &bob,
        "POST",
        "/threads",
        Some(json!({"thread_id": ids.thread, "if_exists": "do_nothing"})),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = call(
        &app,
        &bob,
        "POST",
        "/runs/cancel",
        Some(json!({"run_ids": [ids.run]})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = call(
        &app,
        &bob,
        "POST",
        "/runs/cancel",
        Some(json!({"status": "all"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // Metadata cannot reassign a thread.
    let r = call(
        &app,
        &alice,
        "PATCH",
        &format!("/threads/{}", ids.thread),
        Some(json!({"metadata": {"owner": "someone-else", "k": 1}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_ne!(r.body["metadata"]["owner"], "someone-else");
    assert_eq!(r.body["metadata"]["k"], 1);
    // The store is per user, and clients see their namespaces as they wrote them.
    for (who, v) in [(&alice, 1), (&bob, 2)] {
        let r = call(
            &app,
            who,
            "PUT",
            "/store/items",
            Some(json!({"namespace": ["prefs"], "key": "k", "value": {"v": v}})),
        )
        .await;
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let r = call(
        &app,
        &alice,
        "GET",
        "/store/items?namespace=prefs&key=k",
        None,
    )
    .await;
    assert_eq!(r.body["value"], json!({"v": 1}));
    assert_eq!(r.body["namespace"], json!(["prefs"]));
    let r = call(&app, &bob, "POST", "/store/items/search", Some(json!({}))).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1, "{}", r.body);
    assert_eq!(r.body["items"][0]["value"], json!({"v": 2}));
    let r = call(&app, &bob, "POST", "/store/namespaces", Some(json!({}))).await;
    assert_eq!(r.body["namespaces"], json!([["prefs"]]));
    // Memory is per user.
    let r = call(
        &app,
        &alice,
        "POST",
        "/api/memory/facts",
        Some(json!({"content": "alice likes tea", "category": "preference"})),
    )
    .await;
    assert!(r.status < 300, "{} {}", r.status, r.body);
    let mine = call(&app, &alice, "GET", "/api/memory", None).await;
    assert!(mine.body.to_string().contains("alice likes tea"));
    let theirs = call(&app, &bob, "GET", "/api/memory", None).await;
    assert!(
        !theirs.body.to_string().contains("alice likes tea"),
        "{}",
        theirs.body
    );
    // Runs act for their user: configurable.user_id is the server's, not the client's.
    let r = call(&app, &bob, "POST", "/threads", Some(json!({}))).await;
    let bt = r.body["thread_id"].as_str().unwrap().to_string();
    app.mock.push(fawn_testkit::Turn::text("ok"));
    let r = call(
        &app,
        &bob,
        "POST",
        &format!("/threads/{bt}/runs"),
        Some(
            json!({"assistant_id": "lead_agent", "input": user_input("x"),
                    "config": {"configurable": {"user_id": "alice"}}}),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let me = call(&app, &bob, "GET", "/api/v1/auth/me", None).await;
    assert_eq!(
        r.body["kwargs"]["config"]["configurable"]["user_id"],
        me.body["id"]
    );
    // MCP stdio configuration is an admin's: a user's attempt changes nothing.
    let exploit = json!({"mcp_servers": {"x": {"enabled": true, "type": "stdio", "command": "npx",
        "args": ["-y", "pkg"], "env": {"npm_config_call": "touch /tmp/pwned"}}}});
    let before = call(&app, &admin, "GET", "/api/mcp/config", None).await;
    let r = call(&app, &bob, "PUT", "/api/mcp/config", Some(exploit.clone())).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call(&app, &admin, "PUT", "/api/mcp/config", Some(exploit)).await;
    assert_eq!(
        r.status, 400,
        "even an admin cannot hand npm code to run: {}",
        r.body
    );
    assert_eq!(
        call(&app, &admin, "GET", "/api/mcp/config", None)
            .await
            .body,
        before.body
    );
    // System assistants are an admin's to change.
    let sys = fawn_server::system_assistant_id("lead_agent");
    let r = call(&app, &bob, "DELETE", &format!("/assistants/{sys}"), None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call(
        &app,
        &bob,
        "PATCH",
        &format!("/assistants/{sys}"),
        Some(json!({"name": "mine"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        call(&app, &bob, "GET", &format!("/assistants/{sys}"), None)
            .await
            .status,
        200
    );
}

async fn threads_from_before_auth_go_to_the_first_admin(db: Db) {
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    // Written while authentication was off: no owner.
    let t = app
        .handle
        .state
        .store()
        .create_thread(fawn_checkpoint::NewThread::default())
        .await
        .unwrap();
    let r = call(
        &app,
        &Cred::Anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "admin@example.com", "password": "admin-password"})),
    )
    .await;
    let admin = r.session();
    let r = call(
        &app,
        &admin,
        "GET",
        &format!("/threads/{}", t.thread_id),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["metadata"]["owner"],
        json!(user_id_of(&app, &admin).await)
    );
}

async fn user_id_of(app: &TestApp, cred: &Cred) -> String {
    call(app, cred, "GET", "/api/v1/auth/me", None).await.body["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `fawn serve`'s first start: an admin with an API key and no password, which the web UI's
/// setup then completes (same account: its key and threads stay).
async fn the_first_start_admin_is_the_one_the_setup_completes(db: Db) {
    use fawn_server::auth::bootstrap::{FIRST_ADMIN_EMAIL, KEY_FILE, first_admin};
    let Some(app) = spawn_auth(db).await else {
        return;
    };
    // Never on an address beyond loopback unless asked for.
    assert!(
        first_admin(&app.handle, "0.0.0.0", None)
            .await
            .unwrap()
            .is_none()
    );
    let first = first_admin(&app.handle, "127.0.0.1", None)
        .await
        .unwrap()
        .expect("an empty database gets its first admin");
    assert_eq!(first.email, FIRST_ADMIN_EMAIL);
    let path = first.key_file.as_ref().unwrap();
    assert_eq!(path, &std::path::absolute(app.home.join(KEY_FILE)).unwrap());
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        format!("{}\n", first.key)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    }
    assert!(first.banner().contains(&first.key));
    // Only once: there is an account now.
    assert!(
        first_admin(&app.handle, "127.0.0.1", Some(true))
            .await
            .unwrap()
            .is_none()
    );

    // The key works at once, as an admin.
    let key = Cred::Key(first.key.clone());
    let me = call(&app, &key, "GET", "/api/v1/auth/me", None).await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(
        (&me.body["email"], &me.body["system_role"]),
        (&json!(FIRST_ADMIN_EMAIL), &json!("admin"))
    );
    let id = me.body["id"].as_str().unwrap().to_string();
    let r = call(&app, &key, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let tid = r.body["thread_id"].as_str().unwrap().to_string();
    // No password: nobody signs in as it, whatever they try.
    for password in ["", "admin-password", first.key.as_str()] {
        let r = login(&app, FIRST_ADMIN_EMAIL, password).await;
        assert_ne!(r.status, 200, "{password:?}: {}", r.body);
    }

    // The web UI still offers its setup, and nobody registers before it is done.
    let anon = Cred::Anon;
    let r = call(&app, &anon, "GET", "/api/v1/auth/setup-status", None).await;
    assert_eq!(
        r.body,
        json!({"needs_setup": true, "registration_enabled": true})
    );
    let r = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/register",
        Some(json!({"email": "early@example.com", "password": "long-enough"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // The setup gives that admin its email and password: the same account.
    let r = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "Owner@Example.com", "password": "owner-password"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        (&r.body["id"], &r.body["email"], &r.body["system_role"]),
        (&json!(id), &json!("owner@example.com"), &json!("admin"))
    );
    assert_eq!(r.body["needs_setup"], false);
    let owner = r.session();
    let r = call(&app, &owner, "GET", &format!("/threads/{tid}"), None).await;
    assert_eq!(
        r.status, 200,
        "the key's threads are the owner's: {}",
        r.body
    );
    let me = call(&app, &key, "GET", "/api/v1/auth/me", None).await;
    assert_eq!(
        (me.status, &me.body["email"]),
        (200, &json!("owner@example.com")),
        "the key still works, for the same account"
    );
    assert_eq!(
        login(&app, "owner@example.com", "owner-password")
            .await
            .status,
        200
    );
    let r = call(&app, &anon, "GET", "/api/v1/auth/setup-status", None).await;
    assert_eq!(r.body["needs_setup"], false);
    let again = call(
        &app,
        &anon,
        "POST",
        "/api/v1/auth/initialize",
        Some(json!({"email": "late@example.com", "password": "late-password"})),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    let keys = call(&app, &owner, "GET", "/api/v1/auth/api-keys", None).await;
    let names: Vec<&str> = keys
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first start"]);
}
