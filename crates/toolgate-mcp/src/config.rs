//! `[mcp_servers.NAME]`: how to reach one upstream server and how far to trust it.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// One upstream MCP server, as a trusted `toolgate.toml` declares it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program of a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory (default: the workspace).
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// Headers sent with every HTTP request (`Authorization`, say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Believe the server's tool annotations (read-only, destructive, open-world). Off: its
    /// tools count as not read-only, destructive and open-world, whatever they claim.
    #[serde(default)]
    pub trust_annotations: bool,
    /// Only these tools (names as the server gives them); all when absent.
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// A progress notification restarts the call's timeout (up to `max_total_timeout_secs`).
    #[serde(default)]
    pub timeout_resets_on_progress: bool,
    /// Time to start and finish the handshake (default 30 s).
    pub startup_timeout_secs: Option<f64>,
    /// Per-call timeout (default: the engine's).
    pub tool_timeout_secs: Option<f64>,
    /// With `timeout_resets_on_progress`: the most a call may take in all (default 10 × the
    /// per-call timeout).
    pub max_total_timeout_secs: Option<f64>,
    /// Set false to keep the entry without starting the server.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Serve its tools under their own names, not `SERVER__tool` (only for the one MCP server
    /// of a gateway; a tool named like a built-in one replaces it).
    #[serde(default)]
    pub unprefixed: bool,
    /// OAuth for an HTTP server (`[mcp_servers.NAME.oauth]`): a pre-registered client, client
    /// credentials, scopes. Without it a server that answers 401 is still authorized, with
    /// dynamic client registration and `toolgate login NAME`.
    pub oauth: Option<crate::oauth::OAuthConfig>,
}

fn yes() -> bool {
    true
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
    },
}

impl ServerConfig {
    /// Checks the entry: a usable name, exactly one of `command` and `url`, sane limits.
    pub fn validate(&self, name: &str) -> Result<Endpoint, String> {
        check_name(name)?;
        let endpoint = match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "mcp_servers.{name}: give either `command` (stdio) or `url` (streamable HTTP), not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "mcp_servers.{name}: needs `command` (a stdio server) or `url` (a streamable HTTP server)"
                ));
            }
            (Some(command), None) if command.trim().is_empty() => {
                return Err(format!("mcp_servers.{name}: `command` is empty"));
            }
            (Some(command), None) => Endpoint::Stdio {
                command: command.clone(),
                args: self.args.clone(),
            },
            (None, Some(url)) => {
                let parsed = url
                    .parse::<reqwest::Url>()
                    .map_err(|e| format!("mcp_servers.{name}: `url` {url:?} is not a URL: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("mcp_servers.{name}: `url` must be http or https, not {url:?}"));
                }
                Endpoint::Http { url: url.clone() }
            }
        };
        if self.url.is_some() && (!self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some()) {
            return Err(format!(
                "mcp_servers.{name}: `args`, `env` and `cwd` are for stdio servers, not with `url`"
            ));
        }
        if self.command.is_some() && self.oauth.is_some() {
            return Err(format!(
                "mcp_servers.{name}: `oauth` is for HTTP servers, not with `command`"
            ));
        }
        if let Some(oauth) = &self.oauth {
            oauth.validate(name)?;
        }
        if self.command.is_some() && !self.headers.is_empty() {
            return Err(format!(
                "mcp_servers.{name}: `headers` are for HTTP servers, not with `command`"
            ));
        }
        for (key, value) in [
            ("startup_timeout_secs", self.startup_timeout_secs),
            ("tool_timeout_secs", self.tool_timeout_secs),
            ("max_total_timeout_secs", self.max_total_timeout_secs),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && v <= 86_400.0)
            {
                return Err(format!(
                    "mcp_servers.{name}: `{key}` must be between 0 and 86400 seconds, not {v}"
                ));
            }
        }
        for (header, value) in &self.headers {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(format!("mcp_servers.{name}: {header:?} is not a valid header name"));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "mcp_servers.{name}: the value of header {header:?} is not valid"
                ));
            }
        }
        Ok(endpoint)
    }

    /// The handshake's time limit.
    pub fn startup_timeout(&self) -> Duration {
        secs(self.startup_timeout_secs).unwrap_or(Duration::from_secs(30))
    }

    /// The per-call timeout, when the entry sets one.
    pub fn tool_timeout(&self) -> Option<Duration> {
        secs(self.tool_timeout_secs)
    }

    /// Whether a tool (by the server's name for it) is exposed.
    pub fn exposes(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

fn secs(v: Option<f64>) -> Option<Duration> {
    v.filter(|v| v.is_finite() && *v > 0.0).map(Duration::from_secs_f64)
}

/// Server names become tool-name prefixes (`NAME__tool`): letters, digits, `-` and `_`, no `__`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 32 {
        return Err(format!("mcp_servers.{name:?}: a server name has 1 to 32 characters"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!(
            "mcp_servers.{name}: a server name has only letters, digits, `-` and `_` (it prefixes its tools' names)"
        ));
    }
    if name.contains("__") || name.ends_with('_') {
        return Err(format!(
            "mcp_servers.{name}: a server name cannot contain `__` or end with `_` (`__` separates it from the tool name)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServerConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_server_needs_exactly_one_way_in() {
        let neither = parse("args = [\"x\"]").unwrap();
        assert!(neither.validate("s").unwrap_err().contains("needs `command`"));
        let both = parse("command = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"").unwrap();
        assert!(both.validate("s").unwrap_err().contains("not both"));
        let stdio = parse("command = \"srv\"\nargs = [\"--a\"]").unwrap();
        assert_eq!(
            stdio.validate("s").unwrap(),
            Endpoint::Stdio {
                command: "srv".into(),
                args: vec!["--a".into()]
            }
        );
        let http = parse("url = \"http://127.0.0.1:9/mcp\"\nheaders = {Authorization = \"Bearer x\"}").unwrap();
        assert!(matches!(http.validate("s").unwrap(), Endpoint::Http { .. }));
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(parse("command = \"x\"\ncomand = 1").unwrap_err().contains("comand"));
        let ftp = parse("url = \"ftp://h/x\"").unwrap();
        assert!(ftp.validate("s").unwrap_err().contains("http or https"));
        let junk = parse("url = \"not a url\"").unwrap();
        assert!(junk.validate("s").unwrap_err().contains("is not a URL"));
        let mixed = parse("url = \"http://h/mcp\"\nargs = [\"x\"]").unwrap();
        assert!(mixed.validate("s").unwrap_err().contains("for stdio servers"));
        let slow = parse("command = \"x\"\ntool_timeout_secs = -1").unwrap();
        assert!(slow.validate("s").unwrap_err().contains("tool_timeout_secs"));
        let header = parse("url = \"http://h/mcp\"\nheaders = {\"bad name\" = \"x\"}").unwrap();
        assert!(header.validate("s").unwrap_err().contains("header name"));
        let ok = parse("command = \"x\"").unwrap();
        for name in ["", "a__b", "a_", "a b", "a.b", &"x".repeat(33)] {
            assert!(ok.validate(name).is_err(), "{name:?}");
        }
        for name in ["time", "git-hub", "my_srv2"] {
            assert!(ok.validate(name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn tool_filters() {
        let c = parse("command = \"x\"\nenabled_tools = [\"a\", \"b\"]\ndisabled_tools = [\"b\"]").unwrap();
        assert!(c.exposes("a"));
        assert!(!c.exposes("b"), "disabled wins");
        assert!(!c.exposes("c"), "not enabled");
        let all = parse("command = \"x\"\ndisabled_tools = [\"c\"]").unwrap();
        assert!(all.exposes("a") && !all.exposes("c"));
    }
}
