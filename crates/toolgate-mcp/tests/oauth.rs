//! OAuth 2.1 to an upstream MCP server over streamable HTTP: what the conformance suite's auth
//! scenarios do not reach — a token that expires and is refreshed (the refresh token rotated),
//! tokens kept in the store and used by a later "process" without a new sign-in, tokens bound to
//! the server they were given for, a logout, and no token in any error. The authorization
//! server is a small one in this test (PKCE checked, codes and refresh tokens single-use); the
//! MCP server behind it is rmcp's, refusing every request without a token it issued.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_mcp::oauth::Opener;
use toolgate_mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use toolgate_mcp::rmcp::service::{RequestContext, RoleServer};
use toolgate_mcp::rmcp::{ErrorData, ServerHandler};
use toolgate_mcp::{ServerConfig, Upstream};

/// What the authorization and resource servers saw.
#[derive(Default)]
struct Seen {
    base: String,
    challenge: Option<String>,
    codes: Vec<String>,
    refresh_tokens: Vec<String>,
    /// `grant_type` of each token request, with its `resource`.
    grants: Vec<(String, Option<String>)>,
    authorizations: usize,
    /// The `scope` of each authorization request.
    scopes: Vec<Option<String>>,
    /// Bearer tokens the MCP endpoint accepted, in order.
    used: Vec<String>,
    valid: Vec<String>,
    issued: usize,
    /// An attacker's redirect: before the browser's, a redirect with a code of its own and a
    /// state toolgate never sent reaches toolgate's loopback.
    forge_state: bool,
    /// What toolgate's loopback answered the attacker.
    forged_answer: Option<u16>,
    /// Every code sent to the token endpoint, valid or not.
    redeemed: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("protected", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({"name": "whoami", "inputSchema": {"type": "object"}})).unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("protected data")]).into())
    }
}

async fn prm(State(seen): State<Shared>) -> axum::Json<Value> {
    let base = seen.lock().unwrap().base.clone();
    axum::Json(
        json!({"resource": format!("{base}/mcp"), "authorization_servers": [base], "scopes_supported": ["tools"]}),
    )
}

async fn metadata(State(seen): State<Shared>) -> axum::Json<Value> {
    let base = seen.lock().unwrap().base.clone();
    axum::Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true
    }))
}

async fn register() -> (StatusCode, axum::Json<Value>) {
    (StatusCode::CREATED, axum::Json(json!({"client_id": "client-1"})))
}

async fn authorize(State(seen): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let (code, base, forge) = {
        let mut s = seen.lock().unwrap();
        s.authorizations += 1;
        s.scopes.push(q.get("scope").cloned());
        assert_eq!(q.get("code_challenge_method").map(String::as_str), Some("S256"));
        s.challenge = q.get("code_challenge").cloned();
        let code = format!("code-{}", s.authorizations);
        s.codes.push(code.clone());
        (code, s.base.clone(), s.forge_state)
    };
    if forge {
        // The attacker gets there first, with a code of its own.
        let mut forged = url::Url::parse(&q["redirect_uri"]).unwrap();
        forged
            .query_pairs_mut()
            .append_pair("code", "code-forged")
            .append_pair("state", "forged")
            .append_pair("iss", &base);
        let answer = reqwest::get(forged.as_str()).await.unwrap().status().as_u16();
        seen.lock().unwrap().forged_answer = Some(answer);
    }
    let mut to = url::Url::parse(&q["redirect_uri"]).unwrap();
    to.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &q["state"])
        .append_pair("iss", &base);
    Redirect::to(to.as_str()).into_response()
}

async fn token(State(seen): State<Shared>, body: String) -> Response {
    let form: HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let mut s = seen.lock().unwrap();
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    s.grants.push((grant.clone(), form.get("resource").cloned()));
    let refused = || (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "invalid_grant"}))).into_response();
    match grant.as_str() {
        "authorization_code" => {
            let code = form.get("code").cloned().unwrap_or_default();
            s.redeemed.push(code.clone());
            let Some(at) = s.codes.iter().position(|c| *c == code) else {
                return refused();
            };
            s.codes.remove(at);
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let hashed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
            if s.challenge.as_deref() != Some(hashed.as_str()) {
                return refused();
            }
        }
        "refresh_token" => {
            let given = form.get("refresh_token").cloned().unwrap_or_default();
            let Some(at) = s.refresh_tokens.iter().position(|r| *r == given) else {
                return refused();
            };
            // Rotated: each refresh token works once.
            s.refresh_tokens.remove(at);
        }
        _ => return refused(),
    }
    s.issued += 1;
    let access = format!("at-{}", s.issued);
    let refresh = format!("rt-{}", s.issued);
    s.valid.push(access.clone());
    s.refresh_tokens.push(refresh.clone());
    axum::Json(json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh}))
        .into_response()
}

/// Lets through requests whose bearer token the authorization server issued; 401 with the
/// challenge otherwise.
async fn guard(
    State(seen): State<Shared>,
    headers: HeaderMap,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    {
        let mut s = seen.lock().unwrap();
        match bearer {
            Some(t) if s.valid.contains(&t) => s.used.push(t),
            _ => {
                let challenge = format!(
                    "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                    s.base
                );
                return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)]).into_response();
            }
        }
    }
    next.run(request).await
}

async fn start() -> (String, Shared) {
    use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use toolgate_mcp::rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen: Shared = Arc::new(Mutex::new(Seen {
        base: base.clone(),
        ..Seen::default()
    }));
    let mcp = StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let protected = axum::Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(seen.clone(), guard));
    let app = axum::Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", axum::routing::get(prm))
        .route("/.well-known/oauth-authorization-server", axum::routing::get(metadata))
        .route("/register", axum::routing::post(register))
        .route("/authorize", axum::routing::get(authorize))
        .route("/token", axum::routing::post(token))
        .with_state(seen.clone())
        .merge(protected);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, seen)
}

fn upstream(name: &str, url: &str, store: &Arc<dyn Store>, signs_in: bool) -> Upstream {
    let config = ServerConfig {
        url: Some(url.to_owned()),
        enabled: true,
        ..ServerConfig::default()
    };
    let up = Upstream::new(name, config, std::env::temp_dir(), Duration::from_secs(30)).unwrap();
    let oauth = up.oauth().expect("an HTTP server has OAuth");
    oauth.set_store(store.clone());
    if signs_in {
        // The "browser": follows the authorization server's redirect to toolgate's loopback.
        oauth.set_interactive(Opener::Command(vec![
            "curl".into(),
            "-fsSL".into(),
            "-o".into(),
            "/dev/null".into(),
        ]));
    }
    up
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_kept_in_the_store_bound_to_their_server_and_never_shown() {
    let (base, seen) = start().await;
    let url = format!("{base}/mcp");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let within = Duration::from_secs(60);

    // Signed in once (PKCE checked by the server), the session lists the tool.
    let first = upstream("sec", &url, &store, true);
    assert_eq!(first.check(within).await.unwrap(), 1);
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.authorizations, 1);
        assert_eq!(s.grants[0], ("authorization_code".into(), Some(url.clone())));
        assert!(s.used.iter().all(|t| t == "at-1"), "{:?}", s.used);
    }
    let key = format!("oauth/sec/{url}");
    let kept = store.cache_get(&key).await.unwrap().unwrap();
    assert_eq!(kept["access_token"], "at-1");
    assert_eq!(kept["refresh_token"], "rt-1");

    // A later process on the same store, which cannot open a browser, finds the token expired
    // (its lifetime is moved into the past here): it refreshes it (the refresh token is
    // single-use and rotated) and uses the new one; nobody signs in again.
    let mut expired = kept.clone();
    expired["expires_at"] = json!(1);
    store
        .cache_put(&key, &expired, Duration::from_secs(3600))
        .await
        .unwrap();
    let later = upstream("sec", &url, &store, false);
    assert_eq!(later.check(within).await.unwrap(), 1);
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.authorizations, 1);
        assert_eq!(s.grants[1], ("refresh_token".into(), Some(url.clone())));
        assert_eq!(s.used.last().map(String::as_str), Some("at-2"));
    }
    let kept = store.cache_get(&key).await.unwrap().unwrap();
    assert_eq!(kept["access_token"], "at-2");
    assert_eq!(kept["refresh_token"], "rt-2");

    // Tokens are bound to the server entry they were given for: another entry for the same
    // URL has none, and is told to sign in — without any token in the message.
    let other = upstream("other", &url, &store, false);
    let refused = other.check(within).await.unwrap_err();
    assert!(refused.contains("toolgate login other"), "{refused}");
    for secret in ["at-1", "at-2", "rt-1", "rt-2", "code-1"] {
        assert!(!refused.contains(secret), "{refused}");
    }

    // After a logout the kept tokens are gone.
    later.oauth().unwrap().logout().await.unwrap();
    let after = upstream("sec", &url, &store, false);
    let refused = after.check(within).await.unwrap_err();
    assert!(refused.contains("toolgate login sec"), "{refused}");
    assert_eq!(seen.lock().unwrap().authorizations, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_asks_for_a_new_sign_in_instead_of_using_a_dead_token() {
    let (base, seen) = start().await;
    let url = format!("{base}/mcp");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let within = Duration::from_secs(60);
    let first = upstream("sec", &url, &store, true);
    assert_eq!(first.check(within).await.unwrap(), 1);
    // The authorization server forgets every refresh token and revokes the access token.
    {
        let mut s = seen.lock().unwrap();
        s.refresh_tokens.clear();
        s.valid.clear();
    }
    // (A kept token is refused with 401: the refresh is tried, refused, and then…)
    let later = upstream("sec", &url, &store, false);
    let refused = later.check(within).await.unwrap_err();
    assert!(
        refused.contains("needs authorization") && refused.contains("toolgate login sec"),
        "{refused}"
    );
    // With a person at hand, the same situation is a new sign-in.
    assert_eq!(first.check(within).await.unwrap(), 1);
    assert_eq!(seen.lock().unwrap().authorizations, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_signs_in_anew_even_with_a_valid_token_kept_and_asks_for_the_extra_scopes() {
    let (base, seen) = start().await;
    let url = format!("{base}/mcp");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let within = Duration::from_secs(60);
    assert_eq!(upstream("sec", &url, &store, true).check(within).await.unwrap(), 1);
    // `toolgate login sec --scope admin` in another process: the kept token still works, and
    // is not taken back from the store; the login is a new sign-in for the scope.
    let login = upstream("sec", &url, &store, true);
    login.oauth().unwrap().begin_login(&["admin".to_owned()]).await;
    assert_eq!(login.check(within).await.unwrap(), 1);
    let s = seen.lock().unwrap();
    assert_eq!(s.authorizations, 2);
    assert!(
        s.scopes[1]
            .as_deref()
            .is_some_and(|sc| sc.split(' ').any(|x| x == "admin")),
        "{:?}",
        s.scopes
    );
    assert_eq!(s.used.last().map(String::as_str), Some("at-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_with_a_state_toolgate_never_sent_is_refused_and_the_real_sign_in_still_completes() {
    let (base, seen) = start().await;
    seen.lock().unwrap().forge_state = true;
    let url = format!("{base}/mcp");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let up = upstream("sec", &url, &store, true);
    up.check(Duration::from_secs(60))
        .await
        .expect("the real redirect, after the forged one, signs in");
    let s = seen.lock().unwrap();
    assert_eq!(s.forged_answer, Some(400), "the forged redirect was not refused");
    assert_eq!(s.authorizations, 1);
    // Only the real code was redeemed: the attacker's never reached the token endpoint.
    assert_eq!(s.redeemed, vec!["code-1".to_owned()]);
    assert!(!s.used.is_empty(), "the token from the real code was used");
}
