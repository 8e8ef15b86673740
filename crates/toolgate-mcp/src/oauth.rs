//! OAuth 2.1 for upstream streamable HTTP servers, as the MCP authorization specification
//! (2025-11-25) describes it.
//!
//! - **Discovery**: the protected resource metadata (RFC 9728) from the `resource_metadata` of
//!   the server's `WWW-Authenticate` challenge, else its path-aware and root well-known URLs;
//!   then the authorization server metadata (RFC 8414 and OpenID Connect discovery, path-aware
//!   forms first). A metadata document whose `issuer` differs from the issuer it was fetched for
//!   is refused. A server without protected resource metadata (the 2025-03-26 revision) has its
//!   own origin as the authorization server, with `/authorize`, `/token` and `/register` as the
//!   fallback endpoints.
//! - **The client**: `client_id` from `[mcp_servers.NAME.oauth]` (pre-registration), else a
//!   client ID metadata document URL (`client_metadata_url`) where the server supports those,
//!   else dynamic client registration (RFC 7591) where offered.
//! - **Grants**: authorization code with PKCE (S256), the browser sent to the authorization
//!   URL and the code received on a loopback redirect (`toolgate login SERVER`); client
//!   credentials (`grant = "client_credentials"`); refresh tokens. The `resource` parameter
//!   (RFC 8707) is the resource exactly as the metadata publishes it. A redirect's `iss` must be
//!   the issuer, byte for byte (RFC 9207), and is required where the server says it sends one.
//! - **Scopes**: `scopes` from the configuration, else the challenge's `scope`, else the
//!   metadata's `scopes_supported`, else none. A 403 `insufficient_scope` asks again for the
//!   union of the scopes held and those challenged; a challenge for scopes already asked for is
//!   not retried (no authorization loops).
//! - **Tokens** live in the store (`oauth/{server}`), never in a log line, a tool's view or an
//!   error message.
//!
//! Every OAuth endpoint must be HTTPS, or plain HTTP on a loopback host.

use base64::Engine as _;
use futures_core::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sse_stream::Sse;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::store::Store;

/// `[mcp_servers.NAME.oauth]`: how toolgate identifies itself to the server's authorization
/// server. Every key is optional: without the table, a server that answers 401 is authorized
/// with dynamic client registration and the authorization code grant.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// A client registered beforehand with the authorization server.
    pub client_id: Option<String>,
    /// Its secret (prefer `client_secret_env`).
    pub client_secret: Option<String>,
    /// The environment variable holding its secret.
    pub client_secret_env: Option<String>,
    /// The URL of toolgate's client ID metadata document, used as `client_id` where the
    /// authorization server supports those documents.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for (default: what the server's challenge or metadata names).
    pub scopes: Option<Vec<String>>,
    /// `authorization_code` (default: a user signs in with `toolgate login`) or
    /// `client_credentials` (a machine client; needs `client_id` and a secret).
    #[serde(default)]
    pub grant: Grant,
    /// The loopback port of the redirect (default: any free port). A pre-registered client
    /// whose authorization server matches redirect URIs exactly needs a fixed one.
    pub redirect_port: Option<u16>,
}

/// The OAuth grant toolgate uses for a server.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    #[default]
    AuthorizationCode,
    ClientCredentials,
}

impl OAuthConfig {
    /// Checks the table; `server` names it in the message.
    pub fn validate(&self, server: &str) -> Result<(), String> {
        if self.client_secret.is_some() && self.client_secret_env.is_some() {
            return Err(format!(
                "mcp_servers.{server}.oauth: give `client_secret` or `client_secret_env`, not both"
            ));
        }
        if (self.client_secret.is_some() || self.client_secret_env.is_some()) && self.client_id.is_none() {
            return Err(format!("mcp_servers.{server}.oauth: a client secret needs `client_id`"));
        }
        if self.grant == Grant::ClientCredentials && self.client_id.is_none() {
            return Err(format!(
                "mcp_servers.{server}.oauth: grant = \"client_credentials\" needs `client_id` and a secret"
            ));
        }
        if let Some(url) = &self.client_metadata_url {
            let parsed = url::Url::parse(url)
                .map_err(|e| format!("mcp_servers.{server}.oauth: `client_metadata_url` is not a URL: {e}"))?;
            if parsed.scheme() != "https" || parsed.path() == "/" {
                return Err(format!(
                    "mcp_servers.{server}.oauth: `client_metadata_url` must be an https URL with a path"
                ));
            }
        }
        if let Some(scopes) = &self.scopes
            && scopes.iter().any(|s| s.is_empty() || s.contains(char::is_whitespace))
        {
            return Err(format!(
                "mcp_servers.{server}.oauth: each of `scopes` is one scope token, without spaces"
            ));
        }
        Ok(())
    }

    fn secret(&self) -> Option<String> {
        match (&self.client_secret, &self.client_secret_env) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(var)) => std::env::var(var).ok(),
            (None, None) => None,
        }
    }
}

/// How an authorization URL reaches a person.
#[derive(Clone, Debug)]
pub enum Opener {
    /// Run this program with the URL as its last argument (`$BROWSER`); the URL is printed too.
    Command(Vec<String>),
    /// Only print it (on standard error).
    Print,
}

impl Opener {
    /// `$BROWSER` when set (words split on spaces, `%s` replaced by the URL), else `xdg-open`
    /// when this machine has it, else printing.
    pub fn from_env() -> Self {
        if let Ok(browser) = std::env::var("BROWSER") {
            let words: Vec<String> = browser.split_whitespace().map(str::to_string).collect();
            if !words.is_empty() {
                return Opener::Command(words);
            }
        }
        let xdg = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("xdg-open").is_file()))
            .unwrap_or(false);
        if xdg && std::env::var_os("DISPLAY").is_some() {
            Opener::Command(vec!["xdg-open".into()])
        } else {
            Opener::Print
        }
    }

    fn open(&self, server: &str, url: &str) {
        eprintln!("toolgate: to authorize {server}, open this URL in a browser:\n  {url}");
        if let Opener::Command(words) = self {
            let mut args: Vec<String> = words[1..].iter().map(|w| w.replace("%s", url)).collect();
            if !words.iter().any(|w| w.contains("%s")) {
                args.push(url.to_string());
            }
            let spawned = std::process::Command::new(&words[0])
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            match spawned {
                // Reaped in the background: a browser may keep running.
                Ok(mut child) => {
                    std::thread::spawn(move || child.wait());
                }
                Err(e) => eprintln!("toolgate: cannot run {:?}: {e}", words[0]),
            }
        }
    }
}

/// The tokens and client of one server, as kept in the store.
#[derive(Clone, Default, serde::Serialize, Deserialize)]
struct Kept {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    /// Seconds since the epoch; 0 when the server gave no lifetime.
    #[serde(default)]
    expires_at: u64,
    /// The scopes asked for (the server may grant fewer).
    #[serde(default)]
    scopes: Vec<String>,
    issuer: String,
    token_endpoint: String,
    #[serde(default)]
    resource: Option<String>,
    client: Client,
    /// Scopes a server challenged for and a login has not asked for yet.
    #[serde(default)]
    wanted: Vec<String>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("issuer", &self.issuer)
            .field("scopes", &self.scopes)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// A client identity at one authorization server.
#[derive(Clone, Default, serde::Serialize, Deserialize)]
struct Client {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    auth_method: String,
    /// The redirect URI it was registered with (dynamic registration).
    #[serde(default)]
    redirect_uri: Option<String>,
    #[serde(default)]
    issuer: String,
}

/// A parsed `WWW-Authenticate: Bearer …` challenge.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

impl Challenge {
    /// Reads the parameters of a Bearer challenge (quoted or token values, any order).
    pub fn parse(header: &str) -> Challenge {
        let mut out = Challenge::default();
        let rest = header.trim();
        let rest = match rest.split_once(char::is_whitespace) {
            Some((scheme, params)) if scheme.eq_ignore_ascii_case("bearer") => params,
            _ if rest.eq_ignore_ascii_case("bearer") => "",
            _ => rest,
        };
        let mut chars = rest.chars().peekable();
        loop {
            while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
                chars.next();
            }
            let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',')).collect();
            if key.is_empty() && chars.peek().is_none() {
                break;
            }
            if chars.next_if_eq(&'=').is_none() {
                continue;
            }
            let value = if chars.next_if_eq(&'"').is_some() {
                let mut v = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => v.extend(chars.next()),
                        '"' => break,
                        c => v.push(c),
                    }
                }
                v
            } else {
                std::iter::from_fn(|| chars.next_if(|c| *c != ',' && !c.is_whitespace())).collect()
            };
            match key.trim().to_ascii_lowercase().as_str() {
                "resource_metadata" => out.resource_metadata = Some(value),
                "scope" => out.scope = Some(value),
                "error" => out.error = Some(value),
                _ => {}
            }
        }
        out
    }

    fn scopes(&self) -> Vec<String> {
        self.scope
            .as_deref()
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

/// What discovery found.
#[derive(Clone, Debug)]
struct Found {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    registration_endpoint: Option<String>,
    token_auth_methods: Vec<String>,
    cimd: bool,
    /// `Some(true)`: the redirect must carry `iss`.
    iss_supported: Option<bool>,
    /// The resource to name, exactly as published.
    resource: Option<String>,
    scopes_supported: Option<Vec<String>>,
}

/// OAuth for one upstream server.
pub struct OAuth {
    server: String,
    url: url::Url,
    config: OAuthConfig,
    http: reqwest::Client,
    store: OnceLock<Arc<dyn Store>>,
    opener: OnceLock<Opener>,
    /// Cached copy of the store's grant.
    grant: Mutex<Option<Kept>>,
    /// One authorization at a time.
    flow: tokio::sync::Mutex<()>,
    /// The store was read for a grant (requests then ask memory only, until a challenge).
    looked: std::sync::atomic::AtomicBool,
    /// `toolgate login` set the held token aside: the store's copy of it is not taken back.
    signing_in: std::sync::atomic::AtomicBool,
    /// How long a person has to finish signing in.
    wait: Duration,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Why authorization did not give a token; the message never holds a secret.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

fn err(s: impl Into<String>) -> AuthError {
    AuthError(s.into())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn random_token() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| err(format!("no randomness for PKCE: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// `https`, or `http` on a loopback host.
fn check_endpoint(what: &str, raw: &str) -> Result<url::Url, AuthError> {
    let url = url::Url::parse(raw).map_err(|_| err(format!("the {what} {raw:?} is not a URL")))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err(err(format!("the {what} {raw:?} is not https"))),
    }
}

/// A metadata field that is a list of strings.
fn strings(v: &Value, key: &str) -> Option<Vec<String>> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
}

/// The scopes joined, without repeats, in first-seen order.
fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    a.iter().chain(b).filter(|s| seen.insert(s.as_str())).cloned().collect()
}

const STORE_TTL: Duration = Duration::from_secs(400 * 24 * 3600);

impl OAuth {
    /// OAuth for the server `server` at `url`.
    pub fn new(server: &str, url: &str, config: Option<OAuthConfig>) -> Result<Self, String> {
        let url = url::Url::parse(url).map_err(|e| format!("mcp_servers.{server}: `url` is not a URL: {e}"))?;
        let config = config.unwrap_or_default();
        config.validate(server)?;
        let http = reqwest::Client::builder()
            .no_proxy()
            // Metadata and token endpoints answer directly; a redirect is not followed to a
            // place the checks above did not see.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(OAuth {
            server: server.to_string(),
            url,
            config,
            http,
            store: OnceLock::new(),
            opener: OnceLock::new(),
            grant: Mutex::new(None),
            flow: tokio::sync::Mutex::new(()),
            looked: std::sync::atomic::AtomicBool::new(false),
            signing_in: std::sync::atomic::AtomicBool::new(false),
            wait: Duration::from_secs(300),
        })
    }

    /// Where tokens are kept (set once, by the hub).
    pub fn set_store(&self, store: Arc<dyn Store>) {
        let _ = self.store.set(store);
    }

    /// Lets a 401 start an authorization in the browser (a login, or a program with a person
    /// at hand). Without it, a server that needs a new sign-in is an error naming
    /// `toolgate login`.
    pub fn set_interactive(&self, opener: Opener) {
        let _ = self.opener.set(opener);
    }

    fn key(&self) -> String {
        format!("oauth/{}/{}", self.server, self.url.as_str())
    }

    fn cached(&self) -> Option<Kept> {
        self.grant.lock().ok().and_then(|g| g.clone())
    }

    /// The grant: the copy in memory, else (once) the store's.
    async fn load(&self) -> Option<Kept> {
        if let Some(g) = self.cached() {
            return Some(g);
        }
        if self.looked.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.reload().await
    }

    /// The store's grant, read now (another process — `toolgate login`, a replica — may have
    /// written one since), else the copy in memory.
    async fn reload(&self) -> Option<Kept> {
        let stored = match self.store.get() {
            Some(store) => store
                .cache_get(&self.key())
                .await
                .ok()
                .flatten()
                .and_then(|v| serde_json::from_value::<Kept>(v).ok()),
            None => None,
        };
        match stored {
            Some(grant) => {
                if let Ok(mut slot) = self.grant.lock() {
                    *slot = Some(grant.clone());
                }
                Some(grant)
            }
            None => self.cached(),
        }
    }

    async fn save(&self, grant: Kept) {
        if let Some(store) = self.store.get() {
            match serde_json::to_value(&grant) {
                Ok(v) => {
                    if let Err(e) = store.cache_put(&self.key(), &v, STORE_TTL).await {
                        tracing::warn!(server = %self.server, error = %e, "cannot keep the OAuth tokens in the store");
                    }
                }
                Err(e) => tracing::warn!(server = %self.server, error = %e, "cannot encode the OAuth tokens"),
            }
        }
        if let Ok(mut slot) = self.grant.lock() {
            *slot = Some(grant);
        }
    }

    /// The access token to send now, refreshed first when it has expired (or is about to).
    /// Every request asks: from memory, without copying the grant, once it is known.
    pub async fn token(&self) -> Option<String> {
        let peeked = self.grant.lock().ok().and_then(|g| {
            g.as_ref()
                .filter(|g| !g.access_token.is_empty())
                .map(|g| (g.access_token.clone(), g.expires_at))
        });
        let (access, expires_at) = match peeked {
            Some(p) => p,
            None => {
                let grant = self.load().await.filter(|g| !g.access_token.is_empty())?;
                (grant.access_token, grant.expires_at)
            }
        };
        if expires_at == 0 || expires_at > now() + 30 {
            return Some(access);
        }
        let _flow = self.flow.lock().await;
        // Another request may have refreshed it meanwhile.
        let grant = self.cached()?;
        if grant.expires_at != 0 && grant.expires_at <= now() + 30 {
            return match self.refresh(&grant).await {
                Ok(token) => Some(token),
                Err(e) => {
                    tracing::warn!(server = %self.server, error = %e, "the OAuth token expired and did not refresh");
                    None
                }
            };
        }
        Some(grant.access_token)
    }

    /// Answers a 401 or 403 challenge: a refreshed token, a new grant (client credentials, or a
    /// sign-in when interactive), or why not. `sent` is the token the refused request carried.
    pub async fn on_challenge(&self, header: &str, sent: Option<&str>) -> Result<(), AuthError> {
        let _flow = self.flow.lock().await;
        let challenge = Challenge::parse(header);
        // A sign-in in progress set the held token aside; otherwise the store may hold a newer
        // one (a login in another process, a replica's refresh).
        let held = if self.signing_in.load(std::sync::atomic::Ordering::Relaxed) {
            self.load().await
        } else {
            self.reload().await
        };
        // A token refreshed or granted while this request was refused: try it first.
        if let Some(g) = &held
            && !g.access_token.is_empty()
            && Some(g.access_token.as_str()) != sent
        {
            return Ok(());
        }
        let insufficient = challenge.error.as_deref() == Some("insufficient_scope");
        let challenged = challenge.scopes();
        if insufficient {
            let asked = held.as_ref().map(|g| g.scopes.clone()).unwrap_or_default();
            if !challenged.is_empty() && challenged.iter().all(|s| asked.contains(s)) {
                return Err(err(format!(
                    "{} refuses the scope it asked for ({}): not asking again",
                    self.server,
                    challenged.join(" ")
                )));
            }
        } else if let Some(g) = &held
            && g.refresh_token.is_some()
            && self.refresh(g).await.is_ok()
        {
            return Ok(());
        }
        let previous = held.as_ref().map(|g| g.scopes.clone()).unwrap_or_default();
        let wanted = held.as_ref().map(|g| g.wanted.clone()).unwrap_or_default();
        let scopes = if insufficient {
            union(&union(&previous, &challenged), &wanted)
        } else if challenged.is_empty() && wanted.is_empty() {
            Vec::new()
        } else {
            union(&union(&challenged, &previous), &wanted)
        };
        if self.config.grant == Grant::ClientCredentials {
            let found = self.discover(&challenge).await?;
            return self.client_credentials(&found, &scopes).await;
        }
        let Some(opener) = self.opener.get() else {
            // Remember what the server asked for, for the next login.
            if let Some(mut g) = held {
                g.wanted = union(&g.wanted, &scopes);
                self.save(g).await;
            }
            return Err(err(format!(
                "{} needs authorization{}: run `toolgate login {}`",
                self.server,
                if insufficient {
                    format!(" with the scope {}", scopes.join(" "))
                } else {
                    String::new()
                },
                self.server
            )));
        };
        let found = self.discover(&challenge).await?;
        self.authorize(&found, &scopes, scopes.is_empty(), opener.clone()).await
    }

    /// Starts a sign-in (`toolgate login`): the held token is set aside (the client
    /// registration and the scopes stay), so the next request the server refuses is answered
    /// by a new authorization, asking also for `extra` scopes.
    pub async fn begin_login(&self, extra: &[String]) {
        self.signing_in.store(true, std::sync::atomic::Ordering::Relaxed);
        let held = self.load().await;
        if let Ok(mut slot) = self.grant.lock() {
            *slot = held.map(|mut g| {
                g.access_token.clear();
                g.refresh_token = None;
                g.expires_at = 0;
                g.wanted = union(&g.wanted, extra);
                g
            });
            if slot.is_none() && !extra.is_empty() {
                *slot = Some(Kept {
                    wanted: extra.to_vec(),
                    ..Kept::default()
                });
            }
        }
    }

    /// What a sign-in got: the authorization server, scopes and lifetime; `None` when the
    /// server never asked for one.
    pub fn summary(&self) -> Option<String> {
        let grant = self.cached().filter(|g| !g.access_token.is_empty())?;
        Some(format!(
            "{} authorized by {}{}{}",
            self.server,
            grant.issuer,
            if grant.scopes.is_empty() {
                String::new()
            } else {
                format!(" (scopes: {})", grant.scopes.join(" "))
            },
            if grant.expires_at == 0 {
                String::new()
            } else {
                format!(", token valid {} s", grant.expires_at.saturating_sub(now()))
            }
        ))
    }

    /// Forgets the server's tokens.
    pub async fn logout(&self) -> Result<(), AuthError> {
        if let Ok(mut slot) = self.grant.lock() {
            *slot = None;
        }
        if let Some(store) = self.store.get() {
            store
                .cache_put(&self.key(), &Value::Null, Duration::from_secs(1))
                .await
                .map_err(|e| err(format!("cannot update the store: {e}")))?;
        }
        Ok(())
    }

    async fn get_json(&self, url: &str) -> Option<Value> {
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let bytes = response.bytes().await.ok()?;
        if bytes.len() > 1 << 20 {
            return None;
        }
        serde_json::from_slice::<Value>(&bytes).ok().filter(Value::is_object)
    }

    /// The protected resource metadata, then the authorization server's.
    async fn discover(&self, challenge: &Challenge) -> Result<Found, AuthError> {
        let (issuer, resource, scopes_supported) = self.resource_metadata(challenge).await?;
        let metadata = self.server_metadata(&issuer).await?;
        let found = self.found(issuer, metadata, resource, scopes_supported)?;
        tracing::debug!(server = %self.server, issuer = %found.issuer, "OAuth discovery done");
        Ok(found)
    }

    /// The protected resource metadata: its authorization server, resource and scopes; without
    /// any (the 2025-03-26 revision), the server's own origin as its authorization server.
    async fn resource_metadata(
        &self,
        challenge: &Challenge,
    ) -> Result<(String, Option<String>, Option<Vec<String>>), AuthError> {
        let origin = self.url.origin().ascii_serialization();
        let path = self.url.path().trim_end_matches('/');
        let mut urls = Vec::new();
        if let Some(u) = &challenge.resource_metadata {
            urls.push(check_endpoint("resource metadata URL", u)?.to_string());
        } else {
            if !path.is_empty() {
                urls.push(format!("{origin}/.well-known/oauth-protected-resource{path}"));
            }
            urls.push(format!("{origin}/.well-known/oauth-protected-resource"));
        }
        for u in &urls {
            let Some(v) = self.get_json(u).await else { continue };
            let Some(issuer) = v
                .get("authorization_servers")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
            else {
                continue;
            };
            let resource = v.get("resource").and_then(Value::as_str).map(str::to_string);
            if let Some(r) = &resource {
                self.check_resource(r)?;
            }
            return Ok((issuer.to_string(), resource, strings(&v, "scopes_supported")));
        }
        Ok((origin, None, None))
    }

    /// The authorization server's metadata, from the first of its well-known URLs (path-aware
    /// forms first) that answers.
    async fn server_metadata(&self, issuer: &str) -> Result<Option<Value>, AuthError> {
        let issuer_url = check_endpoint("authorization server", issuer)?;
        let origin = issuer_url.origin().ascii_serialization();
        let path = issuer_url.path().trim_end_matches('/');
        let candidates: Vec<String> = if path.is_empty() {
            vec![
                format!("{origin}/.well-known/oauth-authorization-server"),
                format!("{origin}/.well-known/openid-configuration"),
            ]
        } else {
            vec![
                format!("{origin}/.well-known/oauth-authorization-server{path}"),
                format!("{origin}/.well-known/openid-configuration{path}"),
                format!("{origin}{path}/.well-known/openid-configuration"),
            ]
        };
        for u in &candidates {
            if let Some(v) = self.get_json(u).await {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// The endpoints and abilities metadata states (checked), or the 2025-03-26 defaults.
    fn found(
        &self,
        issuer: String,
        metadata: Option<Value>,
        resource: Option<String>,
        scopes_supported: Option<Vec<String>>,
    ) -> Result<Found, AuthError> {
        let Some(m) = metadata else {
            let base = issuer.trim_end_matches('/').to_string();
            return Ok(Found {
                authorization_endpoint: format!("{base}/authorize"),
                token_endpoint: format!("{base}/token"),
                registration_endpoint: Some(format!("{base}/register")),
                token_auth_methods: vec!["client_secret_basic".into(), "client_secret_post".into(), "none".into()],
                cimd: false,
                iss_supported: None,
                issuer,
                resource,
                scopes_supported,
            });
        };
        let stated = m.get("issuer").and_then(Value::as_str).unwrap_or_default();
        if stated != issuer {
            return Err(err(format!(
                "{}'s authorization server metadata names the issuer {stated:?}, not {issuer:?}: refused",
                self.server
            )));
        }
        let endpoint = |key: &str| -> Result<Option<String>, AuthError> {
            match m.get(key).and_then(Value::as_str) {
                Some(u) => Ok(Some(check_endpoint(key, u)?.to_string())),
                None => Ok(None),
            }
        };
        let authorization_endpoint = endpoint("authorization_endpoint")?
            .ok_or_else(|| err("the authorization server metadata has no authorization_endpoint"))?;
        let token_endpoint = endpoint("token_endpoint")?
            .ok_or_else(|| err("the authorization server metadata has no token_endpoint"))?;
        if let Some(methods) = strings(&m, "code_challenge_methods_supported")
            && !methods.iter().any(|x| x == "S256")
            && self.config.grant == Grant::AuthorizationCode
        {
            return Err(err(format!(
                "{}'s authorization server does not offer PKCE with S256: refused",
                self.server
            )));
        }
        Ok(Found {
            authorization_endpoint,
            token_endpoint,
            registration_endpoint: endpoint("registration_endpoint")?,
            token_auth_methods: strings(&m, "token_endpoint_auth_methods_supported")
                .unwrap_or_else(|| vec!["client_secret_basic".into()]),
            cimd: m.get("client_id_metadata_document_supported").and_then(Value::as_bool) == Some(true),
            iss_supported: m
                .get("authorization_response_iss_parameter_supported")
                .and_then(Value::as_bool),
            issuer,
            resource,
            scopes_supported,
        })
    }

    /// The metadata's resource must be this server (same origin, a prefix of its path).
    fn check_resource(&self, resource: &str) -> Result<(), AuthError> {
        let r = url::Url::parse(resource).map_err(|_| err(format!("the resource {resource:?} is not a URL")))?;
        let same_origin = r.origin() == self.url.origin();
        let (mine, theirs) = (self.url.path().trim_end_matches('/'), r.path().trim_end_matches('/'));
        // A prefix by whole path segments: `/mcp` is not a resource of `/m`.
        let prefix = theirs.is_empty() || mine == theirs || mine.starts_with(&format!("{theirs}/"));
        if same_origin && prefix {
            Ok(())
        } else {
            Err(err(format!(
                "{}'s resource metadata is for {resource:?}, not {}: refused",
                self.server, self.url
            )))
        }
    }

    /// The token endpoint authentication method for a client with or without a secret.
    fn method_for(found: &Found, secret: bool) -> String {
        let offered = |m: &str| found.token_auth_methods.iter().any(|x| x == m);
        if !secret {
            return "none".into();
        }
        if offered("client_secret_basic") {
            "client_secret_basic".into()
        } else if offered("client_secret_post") {
            "client_secret_post".into()
        } else {
            "client_secret_basic".into()
        }
    }

    /// The client to use at this authorization server: configured, a metadata document URL,
    /// one registered before (same issuer, same redirect), or a new registration.
    async fn client(&self, found: &Found, redirect: &str, held: Option<&Kept>) -> Result<Client, AuthError> {
        if let Some(id) = &self.config.client_id {
            let secret = self.config.secret();
            return Ok(Client {
                client_id: id.clone(),
                auth_method: Self::method_for(found, secret.is_some()),
                client_secret: secret,
                redirect_uri: None,
                issuer: found.issuer.clone(),
            });
        }
        if found.cimd
            && let Some(url) = &self.config.client_metadata_url
        {
            return Ok(Client {
                client_id: url.clone(),
                client_secret: None,
                auth_method: "none".into(),
                redirect_uri: None,
                issuer: found.issuer.clone(),
            });
        }
        if let Some(g) = held
            && g.client.issuer == found.issuer
            && g.client.redirect_uri.as_deref() == Some(redirect)
        {
            return Ok(g.client.clone());
        }
        let Some(endpoint) = &found.registration_endpoint else {
            return Err(err(format!(
                "{}'s authorization server offers no client registration: set [mcp_servers.{}.oauth] client_id",
                self.server, self.server
            )));
        };
        self.register(found, endpoint, redirect).await
    }

    /// Dynamic client registration (RFC 7591), as a native application with the loopback
    /// redirect, asking for the token endpoint authentication the server offers.
    async fn register(&self, found: &Found, endpoint: &str, redirect: &str) -> Result<Client, AuthError> {
        let offered = |m: &str| found.token_auth_methods.iter().any(|x| x == m);
        let method = if offered("none") {
            "none"
        } else if offered("client_secret_basic") {
            "client_secret_basic"
        } else {
            "client_secret_post"
        };
        let body = json!({
            "client_name": "toolgate",
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
            "application_type": "native",
        });
        let response = self.http.post(endpoint).json(&body).send().await.map_err(|e| {
            err(format!(
                "cannot register with {}'s authorization server: {e}",
                self.server
            ))
        })?;
        let status = response.status();
        let v: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(err(format!(
                "{}'s authorization server refused the registration: HTTP {status} {}",
                self.server,
                oauth_error(&v)
            )));
        }
        let client_id = v
            .get("client_id")
            .and_then(Value::as_str)
            .ok_or_else(|| err("the registration answer has no client_id"))?
            .to_string();
        let client_secret = v.get("client_secret").and_then(Value::as_str).map(str::to_string);
        let auth_method = v
            .get("token_endpoint_auth_method")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| method.to_string());
        Ok(Client {
            client_id,
            client_secret,
            auth_method,
            redirect_uri: Some(redirect.to_string()),
            issuer: found.issuer.clone(),
        })
    }

    /// The scopes to ask for when no earlier grant or challenge says.
    fn default_scopes(&self, found: &Found, challenged: &[String], first: bool) -> Vec<String> {
        if let Some(s) = &self.config.scopes {
            return union(s, challenged);
        }
        if !challenged.is_empty() || !first {
            return challenged.to_vec();
        }
        found.scopes_supported.clone().unwrap_or_default()
    }

    /// The authorization code grant, through the browser and a loopback redirect.
    async fn authorize(&self, found: &Found, scopes: &[String], first: bool, opener: Opener) -> Result<(), AuthError> {
        let held = self.load().await;
        let scopes = self.default_scopes(found, scopes, first);
        let (listener, redirect) = self.redirect_listener(held.as_ref()).await?;
        let client = self.client(found, &redirect, held.as_ref()).await?;
        let verifier = random_token()?;
        let state = random_token()?;
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let resource = found.resource.clone().unwrap_or_else(|| self.url.to_string());
        let mut url = url::Url::parse(&found.authorization_endpoint)
            .map_err(|_| err("the authorization endpoint is not a URL"))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &client.client_id)
                .append_pair("redirect_uri", &redirect)
                .append_pair("state", &state)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("resource", &resource);
            if !scopes.is_empty() {
                q.append_pair("scope", &scopes.join(" "));
            }
        }
        opener.open(&self.server, url.as_str());
        let params = tokio::time::timeout(self.wait, callback(&listener, &state))
            .await
            .map_err(|_| {
                err(format!(
                    "no sign-in for {} within {} s",
                    self.server,
                    self.wait.as_secs()
                ))
            })??;
        let get = |k: &str| params.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        if get("state").as_deref() != Some(state.as_str()) {
            return Err(err("the redirect's state does not match: refused"));
        }
        match get("iss") {
            Some(iss) if iss != found.issuer => {
                return Err(err(format!(
                    "the redirect's iss {iss:?} is not the authorization server {:?}: refused",
                    found.issuer
                )));
            }
            None if found.iss_supported == Some(true) => {
                return Err(err(
                    "the redirect lacks the iss its authorization server promises: refused",
                ));
            }
            _ => {}
        }
        if let Some(e) = get("error") {
            let detail = get("error_description").unwrap_or_default();
            return Err(err(format!("{} refused the authorization: {e} {detail}", self.server)));
        }
        let code = get("code").ok_or_else(|| err("the redirect carries no code"))?;
        let form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code),
            ("redirect_uri", redirect.clone()),
            ("code_verifier", verifier),
            ("resource", resource.clone()),
        ];
        let v = self.token_request(&found.token_endpoint, &client, form).await?;
        self.keep(v, found, client, scopes, Some(resource), None).await
    }

    /// The loopback listener of the redirect and its URI: on the configured port, else the
    /// one registered before when free (so a registration still matches), else any.
    async fn redirect_listener(&self, held: Option<&Kept>) -> Result<(tokio::net::TcpListener, String), AuthError> {
        let cannot = |e: std::io::Error| err(format!("cannot listen for the redirect: {e}"));
        let registered = held
            .and_then(|g| g.client.redirect_uri.as_deref())
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| u.port());
        let listener = match (self.config.redirect_port, registered) {
            (Some(p), _) => tokio::net::TcpListener::bind(("127.0.0.1", p))
                .await
                .map_err(|e| err(format!("cannot listen for the redirect on port {p}: {e}")))?,
            (None, Some(p)) => match tokio::net::TcpListener::bind(("127.0.0.1", p)).await {
                Ok(l) => l,
                Err(_) => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(cannot)?,
            },
            (None, None) => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(cannot)?,
        };
        let port = listener.local_addr().map_err(cannot)?.port();
        Ok((listener, format!("http://127.0.0.1:{port}/callback")))
    }

    async fn client_credentials(&self, found: &Found, scopes: &[String]) -> Result<(), AuthError> {
        let secret = self.config.secret();
        let client = Client {
            client_id: self.config.client_id.clone().unwrap_or_default(),
            auth_method: Self::method_for(found, secret.is_some()),
            client_secret: secret,
            redirect_uri: None,
            issuer: found.issuer.clone(),
        };
        let scopes = self.default_scopes(found, scopes, true);
        let resource = found.resource.clone().unwrap_or_else(|| self.url.to_string());
        let mut form = vec![
            ("grant_type", "client_credentials".to_string()),
            ("resource", resource.clone()),
        ];
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        let v = self.token_request(&found.token_endpoint, &client, form).await?;
        self.keep(v, found, client, scopes, Some(resource), None).await
    }

    async fn refresh(&self, grant: &Kept) -> Result<String, AuthError> {
        let refresh = grant.refresh_token.clone().ok_or_else(|| err("no refresh token"))?;
        let mut form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh.clone()),
        ];
        if let Some(r) = &grant.resource {
            form.push(("resource", r.clone()));
        }
        let v = self.token_request(&grant.token_endpoint, &grant.client, form).await?;
        let found = Found {
            issuer: grant.issuer.clone(),
            authorization_endpoint: String::new(),
            token_endpoint: grant.token_endpoint.clone(),
            registration_endpoint: None,
            token_auth_methods: Vec::new(),
            cimd: false,
            iss_supported: None,
            resource: grant.resource.clone(),
            scopes_supported: None,
        };
        self.keep(
            v,
            &found,
            grant.client.clone(),
            grant.scopes.clone(),
            grant.resource.clone(),
            Some(refresh),
        )
        .await?;
        self.cached()
            .map(|g| g.access_token)
            .ok_or_else(|| err("no token was kept"))
    }

    /// A token endpoint request, the client authenticated as registered.
    async fn token_request(
        &self,
        endpoint: &str,
        client: &Client,
        mut form: Vec<(&'static str, String)>,
    ) -> Result<Value, AuthError> {
        let mut request = self.http.post(endpoint).header("accept", "application/json");
        match (client.auth_method.as_str(), &client.client_secret) {
            ("client_secret_basic", Some(secret)) => {
                // RFC 6749 §2.3.1: each part form-encoded before base64.
                let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                let pair = format!("{}:{}", enc(&client.client_id), enc(secret));
                request = request.header(
                    http::header::AUTHORIZATION,
                    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)),
                );
            }
            ("client_secret_post", Some(secret)) => {
                form.push(("client_id", client.client_id.clone()));
                form.push(("client_secret", secret.clone()));
            }
            _ => form.push(("client_id", client.client_id.clone())),
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let response = request
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| err(format!("cannot reach {}'s token endpoint: {e}", self.server)))?;
        let status = response.status();
        let v: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(err(format!(
                "{}'s token endpoint refused: HTTP {status} {}",
                self.server,
                oauth_error(&v)
            )));
        }
        if v.get("access_token").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(err(format!(
                "{}'s token endpoint answered without an access_token",
                self.server
            )));
        }
        Ok(v)
    }

    async fn keep(
        &self,
        v: Value,
        found: &Found,
        client: Client,
        scopes: Vec<String>,
        resource: Option<String>,
        old_refresh: Option<String>,
    ) -> Result<(), AuthError> {
        let access_token = v["access_token"].as_str().unwrap_or_default().to_string();
        let expires_at = v
            .get("expires_in")
            .and_then(Value::as_u64)
            .map(|s| now().saturating_add(s))
            .unwrap_or(0);
        let refresh_token = v
            .get("refresh_token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(old_refresh);
        self.save(Kept {
            access_token,
            refresh_token,
            expires_at,
            scopes,
            issuer: found.issuer.clone(),
            token_endpoint: found.token_endpoint.clone(),
            resource,
            client,
            wanted: Vec::new(),
        })
        .await;
        tracing::info!(server = %self.server, issuer = %found.issuer, "OAuth token obtained");
        Ok(())
    }
}

/// rmcp's streamable HTTP client with OAuth: every request carries the server's current
/// token; a 401 or 403 challenge is answered (refresh, new grant or sign-in) and the request
/// sent again, at most three times.
#[derive(Clone)]
pub struct AuthedHttp {
    pub inner: reqwest::Client,
    pub oauth: Arc<OAuth>,
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl AuthedHttp {
    /// The challenge to answer, when the request was refused for want of authorization.
    fn challenge_of<T>(result: &HttpResult<T>) -> Option<String> {
        match result {
            Err(StreamableHttpError::AuthRequired(e)) => Some(e.www_authenticate_header.clone()),
            Err(StreamableHttpError::InsufficientScope(e)) => Some(e.www_authenticate_header.clone()),
            _ => None,
        }
    }

    async fn answer(&self, header: &str, sent: Option<&str>) -> HttpResult<()> {
        self.oauth
            .on_challenge(header, sent)
            .await
            .map_err(|e| StreamableHttpError::UnexpectedServerResponse(std::borrow::Cow::Owned(e.0)))
    }

    async fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        headers: HashMap<HeaderName, HeaderValue>,
        max: Option<usize>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut attempts = 0;
        loop {
            let token = self.oauth.token().await;
            let result = match max {
                Some(max) => {
                    self.inner
                        .post_message_with_max_sse_event_size(
                            uri.clone(),
                            message.clone(),
                            session_id.clone(),
                            token.clone(),
                            headers.clone(),
                            max,
                        )
                        .await
                }
                None => {
                    self.inner
                        .post_message(
                            uri.clone(),
                            message.clone(),
                            session_id.clone(),
                            token.clone(),
                            headers.clone(),
                        )
                        .await
                }
            };
            match Self::challenge_of(&result) {
                Some(header) if attempts < 3 => {
                    attempts += 1;
                    self.answer(&header, token.as_deref()).await?;
                }
                _ => return result,
            }
        }
    }
}

impl StreamableHttpClient for AuthedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(uri, message, session_id, custom_headers, None).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(uri, message, session_id, custom_headers, Some(max_sse_event_size))
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let token = self.oauth.token().await;
        self.inner.delete_session(uri, session_id, token, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let token = self.oauth.token().await;
        self.inner
            .get_stream(uri, session_id, last_event_id, token, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let token = self.oauth.token().await;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                token,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// `error` and `error_description` of an OAuth error body, bounded.
fn oauth_error(v: &Value) -> String {
    let e = v.get("error").and_then(Value::as_str).unwrap_or_default();
    let d = v.get("error_description").and_then(Value::as_str).unwrap_or_default();
    let s = format!("{e} {d}");
    s.trim().chars().take(300).collect()
}

/// Waits for the browser's redirect on the loopback listener and answers it; other paths get
/// 404 and the wait goes on.
/// The query of the first redirect to `/callback` that carries `state`. Anything else that
/// reaches the port — another path, or a redirect with another state (a local process or a web
/// page racing the real one, with a code of its own) — is answered and ignored, so it can
/// neither end the sign-in nor have its code redeemed.
async fn callback(listener: &tokio::net::TcpListener, state: &str) -> Result<Vec<(String, String)>, AuthError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|e| err(format!("the redirect listener failed: {e}")))?;
        let mut buf = Vec::with_capacity(2048);
        let mut chunk = [0u8; 2048];
        let head = loop {
            let n = match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await {
                Ok(Ok(n)) => n,
                _ => 0,
            };
            if n == 0 {
                break None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break Some(String::from_utf8_lossy(&buf).into_owned());
            }
            if buf.len() > 16 * 1024 {
                break None;
            }
        };
        let Some(head) = head else { continue };
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        if path != "/callback" {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            continue;
        }
        let params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        if !params.iter().any(|(k, v)| k == "state" && v == state) {
            tracing::warn!("a redirect without this sign-in's state reached the loopback listener: ignored");
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            continue;
        }
        let page = if params.iter().any(|(k, _)| k == "error") {
            "toolgate: the authorization was refused. You can close this tab."
        } else {
            "toolgate: authorization received. You can close this tab."
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        return Ok(params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_quoted_and_bare_values_in_any_order() {
        let c = Challenge::parse(
            r#"Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scopes(), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x/.well-known/oauth-protected-resource/mcp")
        );
        let c = Challenge::parse(r#"Bearer realm=x,scope="q\"uoted",error=invalid_token"#);
        assert_eq!(c.scope.as_deref(), Some("q\"uoted"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(Challenge::parse("Bearer"), Challenge::default());
        assert_eq!(Challenge::parse(""), Challenge::default());
        assert_eq!(Challenge::parse("Bearer ,,, =, x"), Challenge::default());
    }

    #[test]
    fn endpoints_must_be_https_or_loopback() {
        assert!(check_endpoint("t", "https://as.example.com/token").is_ok());
        assert!(check_endpoint("t", "http://localhost:9/token").is_ok());
        assert!(check_endpoint("t", "http://127.0.0.1:9/token").is_ok());
        assert!(check_endpoint("t", "http://[::1]:9/token").is_ok());
        for bad in [
            "http://as.example.com/token",
            "http://localhost.evil.com/token",
            "http://10.0.0.1/token",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "not a url",
        ] {
            assert!(check_endpoint("t", bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_resource_of_another_server_is_refused() {
        let o = OAuth::new("s", "https://mcp.example.com/mcp", None).unwrap();
        assert!(o.check_resource("https://mcp.example.com/mcp").is_ok());
        assert!(o.check_resource("https://mcp.example.com").is_ok());
        assert!(o.check_resource("https://mcp.example.com/").is_ok());
        assert!(o.check_resource("https://evil.example.com/mcp").is_err());
        assert!(o.check_resource("http://mcp.example.com/mcp").is_err());
        assert!(o.check_resource("https://mcp.example.com/other").is_err());
        assert!(
            o.check_resource("https://mcp.example.com/m").is_err(),
            "a prefix of a segment"
        );
        assert!(o.check_resource("https://mcp.example.com/mcp/deeper").is_err());
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let bad = |c: OAuthConfig| c.validate("gh").unwrap_err();
        assert!(
            bad(OAuthConfig {
                client_secret: Some("x".into()),
                ..OAuthConfig::default()
            })
            .contains("needs `client_id`")
        );
        assert!(
            bad(OAuthConfig {
                grant: Grant::ClientCredentials,
                ..OAuthConfig::default()
            })
            .contains("client_credentials")
        );
        assert!(
            bad(OAuthConfig {
                client_metadata_url: Some("http://example.com/c.json".into()),
                ..OAuthConfig::default()
            })
            .contains("https")
        );
        assert!(
            bad(OAuthConfig {
                scopes: Some(vec!["a b".into()]),
                ..OAuthConfig::default()
            })
            .contains("without spaces")
        );
    }

    #[test]
    fn a_grant_never_prints_its_tokens() {
        let g = Kept {
            access_token: "at-SECRET".into(),
            refresh_token: Some("rt-SECRET".into()),
            client: Client {
                client_secret: Some("cs-SECRET".into()),
                ..Client::default()
            },
            ..Kept::default()
        };
        assert!(!format!("{g:?}").contains("SECRET"));
    }

    #[test]
    fn pkce_verifiers_are_long_random_and_url_safe() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }
}
