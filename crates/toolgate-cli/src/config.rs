//! Configuration: the user file, `--config FILE`, then `TOOLGATE_<SECTION>_<KEY>` variables,
//! merged in that order. Every file is checked on its own first, so an error names its file and line.

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toolgate_core::EngineConfig;
use toolgate_core::rules::{Layer, LayerSource, RuleEntry};
use toolgate_core::tool::PermissionSubject;

/// Everything `toolgate.toml` holds (sections arrive with the features that read them).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[engine]`: timeouts, retries, budgets, guards.
    pub engine: EngineConfig,
    /// `[permissions]`: allow, ask and deny rules, and yolo.
    pub permissions: Permissions,
    /// `[[hooks.pre_tool_use]]`, `[[hooks.post_tool_use]]`.
    pub hooks: crate::hooks::HooksConfig,
    /// `[approval]`.
    pub approval: Approval,
    /// `[exposure]`.
    pub exposure: Exposure,
    /// `[mcp_servers.NAME]`: upstream MCP servers whose tools are registered as `NAME__tool`
    /// (file-only; an untrusted project file's are ignored).
    pub mcp_servers: toml::Table,
    /// `[store]`: where state is kept.
    pub store: StoreSection,
    /// `[audit]`: what the journal keeps, and for how long.
    pub audit: Audit,
    /// `[fetch]`: `fetch_url`'s guard and limits.
    pub fetch: Fetch,
    /// `[shell]`: `exec_shell`'s environment, limits and sandbox.
    pub shell: Shell,
    /// `[agent]`: the model and the loop of `toolgate agent`.
    pub agent: AgentSection,
    /// `[files]`: the file tools.
    pub files: Files,
    /// `[principals.NAME]`: the gateway's rules for one client principal (`--client
    /// NAME=TOKEN`), checked before every other layer.
    pub principals: std::collections::BTreeMap<String, Permissions>,
    /// `[tools.NAME]`: category, `max_per_turn`, timeout, budget and loop exemption of one tool
    /// (a built-in, or an upstream server's `SERVER__tool`).
    pub tools: std::collections::BTreeMap<String, toolgate_core::config::ToolSettings>,
}

/// `[agent]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// `PROVIDER:MODEL` (`--model` wins).
    pub model: Option<String>,
    /// The server's base URL (`--base-url` wins).
    pub base_url: Option<String>,
    /// The system prompt.
    pub system: Option<String>,
    /// Model calls per run at most (default 20, at least 1).
    pub max_iterations: Option<u32>,
    /// At the limit, one last model call without tools for an answer.
    pub final_answer_on_limit: bool,
    /// The same call returning the same output this many times ends the run (0: off).
    pub result_loop_threshold: Option<u32>,
    /// From this iteration on the loop counts as long (0: off; default 15).
    pub warn_iterations: Option<u32>,
    /// Native tool calling (default true); false uses the text fallback on Chat-style servers.
    pub native_tools: Option<bool>,
    /// How calls written in the model's text are read: a dialect (`hermes`, `deepseek`, …) or
    /// the model family's name (`qwen3`, `llama4`…); default: found from the text.
    pub dialect: Option<String>,
    /// Stream answers (default true).
    pub stream: Option<bool>,
    /// Anthropic's `max_tokens` (default 4096).
    pub max_tokens: Option<u32>,
    /// Background jobs outlive a run (default: only in an interactive session, until it ends).
    pub keep_jobs: Option<bool>,
}

/// `[shell]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Shell {
    /// Environment variables passed through besides PATH, HOME and LANG.
    pub env: Vec<String>,
    /// Bytes kept of stdout and of stderr (default 1 MiB each).
    pub max_output_bytes: Option<usize>,
    /// The default timeout of a command, in milliseconds (default 120000).
    pub timeout_ms: Option<u64>,
    /// `on` (default: what the kernel provides), `required` or `off`.
    pub sandbox: toolgate_tools::sandbox::SandboxMode,
    /// Whether sandboxed commands may use the network (default true).
    pub network: Option<bool>,
}

impl Shell {
    /// The tool's settings.
    pub fn tool_config(&self) -> toolgate_tools::exec_shell::ShellConfig {
        let d = toolgate_tools::exec_shell::ShellConfig::default();
        toolgate_tools::exec_shell::ShellConfig {
            env_allowlist: self.env.clone(),
            max_output_bytes: self.max_output_bytes.unwrap_or(d.max_output_bytes),
            timeout: self.timeout_ms.map_or(d.timeout, std::time::Duration::from_millis),
            sandbox: self.sandbox,
            network: self.network.unwrap_or(d.network),
            ..d
        }
    }
}

/// `[files]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Files {
    /// Let the file tools read (never write) files with more than one hard link (default
    /// false: another link may lie outside the workspace).
    pub hardlink_reads: bool,
}

/// `[fetch]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fetch {
    /// Let `fetch_url` reach loopback, private, link-local and other internal addresses.
    pub allow_private_network: bool,
    /// Single addresses allowed although internal (an internal docs server, say).
    pub allow_addresses: Vec<std::net::IpAddr>,
    /// Bytes of a body read at most (default 2 MiB).
    pub max_bytes: Option<usize>,
    /// The whole request, in milliseconds (default 30000).
    pub timeout_ms: Option<u64>,
    /// Same-host redirects followed at most (default 5).
    pub max_redirects: Option<usize>,
}

impl Fetch {
    /// The tool's settings.
    pub fn tool_config(&self) -> toolgate_tools::fetch::FetchConfig {
        let d = toolgate_tools::fetch::FetchConfig::default();
        toolgate_tools::fetch::FetchConfig {
            guard: toolgate_tools::netguard::Guard {
                allow_private_network: self.allow_private_network,
                allow_addresses: self.allow_addresses.clone(),
            },
            max_bytes: self.max_bytes.unwrap_or(d.max_bytes),
            timeout: self.timeout_ms.map_or(d.timeout, std::time::Duration::from_millis),
            max_redirects: self.max_redirects.unwrap_or(d.max_redirects),
            cache_ttl: d.cache_ttl,
        }
    }
}

/// `[store]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// `sqlite://PATH`, `postgres://…` or `memory` (default: SQLite under the data directory;
    /// `--store` wins).
    pub url: Option<String>,
    /// How long a write a call waits for is retried while the store is away (default 5000).
    pub write_timeout_ms: Option<u64>,
    /// `serve`: the replica's lease; a replica silent this long is taken for dead by the others
    /// (default 30000).
    pub lease_ms: Option<u64>,
}

/// `[audit]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    /// Keep the (redacted) arguments in the journal; `false` keeps only their hash.
    pub store_arguments: bool,
    /// Finished journal rows older than this many days are deleted at start (0: keep all).
    pub keep_days: u32,
    /// `full` (every commit synced) or `normal` (survives a process crash, not a power loss).
    pub durability: DurabilitySetting,
}

impl Default for Audit {
    fn default() -> Self {
        Self {
            store_arguments: true,
            keep_days: 30,
            durability: DurabilitySetting::Full,
        }
    }
}

/// `[audit] durability`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurabilitySetting {
    /// Every commit synced.
    #[default]
    Full,
    /// Commits survive a process crash.
    Normal,
}

/// `[exposure]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Exposure {
    /// Feature flags that are on (a tool whose spec names another flag is not exposed).
    pub features: Vec<String>,
    /// Turns a tool that succeeded in deliberate mode stays exposed after it (default 2).
    pub retain_turns: Option<u32>,
}

/// `[approval]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Approval {
    /// How long an ask waits for an answer, in milliseconds (default: 120000, and 50000 for
    /// `serve`, below the MCP clients' request timeouts).
    pub timeout_ms: Option<u64>,
    /// Who answers the gateway's asks: `queue` (the HTTP approval queue, the default for
    /// HTTP), `elicitation` (the MCP client that made the call) or `deny`.
    pub via: Option<toolgate_mcp::Via>,
}

/// `[permissions]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Permissions {
    /// Rules that allow calls without asking.
    pub allow: Vec<RuleEntry>,
    /// Rules that always ask, even under `--yolo`.
    pub ask: Vec<RuleEntry>,
    /// Rules that refuse calls, even under `--yolo`.
    pub deny: Vec<RuleEntry>,
    /// Allow every call no rule denies or asks.
    pub yolo: bool,
}

impl Permissions {
    /// Compiles the rules into a layer, checking each rule's examples against its tool's subject.
    pub fn layer(&self, source: LayerSource, subject_of: &dyn Fn(&str) -> Option<PermissionSubject>) -> Result<Layer> {
        let compile = |entries: &[RuleEntry], list: &str| -> Result<Vec<toolgate_core::rules::Rule>> {
            entries
                .iter()
                .map(|e| {
                    e.compile(subject_of)
                        .map_err(|m| anyhow!("invalid configuration: permissions.{list}: {m}"))
                })
                .collect()
        };
        Ok(Layer {
            source,
            allow: compile(&self.allow, "allow")?,
            ask: compile(&self.ask, "ask")?,
            deny: compile(&self.deny, "deny")?,
        })
    }
}

/// Sections whose scalar keys environment variables may set.
const ENV_SECTIONS: &[&str] = &[
    "engine",
    "permissions",
    "approval",
    "exposure",
    "store",
    "audit",
    "fetch",
    "files",
    "shell",
    "agent",
];

/// The user file: `$XDG_CONFIG_HOME/toolgate/toolgate.toml` or `~/.config/toolgate/toolgate.toml`.
pub fn user_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("toolgate").join("toolgate.toml"))
}

/// The configuration in force, and what an untrusted project file may still say.
#[derive(Debug)]
pub struct Loaded {
    /// The user file, a trusted project file and `--config`, merged, then the environment.
    pub config: Config,
    /// The deny and ask rules of an untrusted project file (its only parts that apply).
    pub untrusted_project: Option<Permissions>,
    /// Rules naming one tool of a configured MCP server, with where each is written: checked
    /// once the servers have connected.
    pub mcp_rules: Vec<(String, String)>,
    /// `[engine] loop_threshold` was set (else each face has its own default).
    pub loop_threshold_set: bool,
}

/// Loads and merges the configuration: the user file, the workspace's project file (in full when
/// trusted, else only its deny and ask rules, with one warning), `--config FILE` (trusted: it was
/// named), then `TOOLGATE_<SECTION>_<KEY>` variables.
pub fn load(explicit: Option<&Path>, workspace: &Path, subject_of: SubjectOf<'_>) -> Result<Loaded> {
    // Rules are checked against the tools that can exist: the built-ins, and `SERVER__…` for
    // the servers any of the files configures (their tools are known once they connect).
    let candidates = [
        user_file(),
        Some(workspace.join(crate::trust::PROJECT_FILE)),
        explicit.map(Path::to_path_buf),
    ];
    let tables: Vec<toml::Table> = candidates
        .iter()
        .flatten()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| t.parse::<toml::Table>().ok())
        .filter_map(|t| t.get("mcp_servers").and_then(toml::Value::as_table).cloned())
        .collect();
    let servers: Vec<String> = tables.iter().flat_map(|t| t.keys().cloned()).collect();
    let unprefixed = tables
        .iter()
        .flat_map(|t| t.values())
        .any(|s| s.get("unprefixed").and_then(toml::Value::as_bool) == Some(true));
    let known = Known {
        subject_of,
        servers: &servers,
        unprefixed,
        deferred: std::cell::RefCell::new(Vec::new()),
    };
    let known = &known;
    let mut merged = toml::Table::new();
    if let Some(user) = user_file().filter(|p| p.is_file()) {
        merge(&mut merged, read_file(&user, known)?);
    }
    let mut untrusted_project = None;
    let project = workspace.join(crate::trust::PROJECT_FILE);
    let named = explicit.and_then(|p| std::fs::canonicalize(p).ok());
    if project.is_file() && std::fs::canonicalize(&project).ok() != named {
        let table = read_file(&project, known)?;
        let bytes = std::fs::read(&project).with_context(|| format!("cannot read {}", project.display()))?;
        if crate::trust::is_trusted(workspace, &bytes) {
            merge(&mut merged, table);
        } else {
            let full: Config = toml::Value::Table(table.clone())
                .try_into()
                .map_err(|e: toml::de::Error| anyhow!("{}: {}", project.display(), one_line(&e.to_string())))?;
            let ignored = ignored_parts(&table, &full.permissions);
            if !ignored.is_empty() {
                eprintln!(
                    "toolgate: warning: {} is not trusted, so its {} are ignored (only its deny and ask rules apply); run `toolgate trust` to trust it",
                    project.display(),
                    ignored.join(", ")
                );
            }
            untrusted_project = Some(Permissions {
                deny: full.permissions.deny,
                ask: full.permissions.ask,
                ..Permissions::default()
            });
        }
    }
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("the configuration file {} does not exist", path.display());
        }
        merge(&mut merged, read_file(path, known)?);
    }
    apply_env(&mut merged, std::env::vars())?;
    let loop_threshold_set = merged
        .get("engine")
        .and_then(toml::Value::as_table)
        .is_some_and(|e| e.contains_key("loop_threshold"));
    let config: Config = toml::Value::Table(merged)
        .try_into()
        .map_err(|e: toml::de::Error| anyhow!("invalid configuration: {}", one_line(&e.to_string())))?;
    config
        .engine
        .check()
        .map_err(|e| anyhow!("invalid configuration: {e}"))?;
    Ok(Loaded {
        config,
        untrusted_project,
        mcp_rules: known.deferred.take(),
        loop_threshold_set,
    })
}

/// The upstream servers of `[mcp_servers.NAME]` (disabled entries left out), each checked: a
/// bad entry is a configuration error naming it.
pub fn mcp_servers(
    config: &Config,
    workspace: &Path,
    timeout: std::time::Duration,
) -> Result<Vec<toolgate_mcp::Upstream>> {
    let mut servers = Vec::new();
    let enabled = config
        .mcp_servers
        .values()
        .filter(|v| v.get("enabled").and_then(toml::Value::as_bool) != Some(false))
        .count();
    for (name, value) in &config.mcp_servers {
        let entry: toolgate_mcp::ServerConfig = value.clone().try_into().map_err(|e: toml::de::Error| {
            anyhow!("invalid configuration: mcp_servers.{name}: {}", one_line(e.message()))
        })?;
        if !entry.enabled {
            continue;
        }
        if entry.unprefixed && enabled > 1 {
            bail!(
                "invalid configuration: mcp_servers.{name}: unprefixed serves a server's tools under their own names, which only the one MCP server of a gateway may do ({enabled} are enabled)"
            );
        }
        let server = toolgate_mcp::Upstream::new(name, entry, workspace.to_path_buf(), timeout)
            .map_err(|e| anyhow!("invalid configuration: {e}"))?;
        servers.push(server);
    }
    Ok(servers)
}

/// What an untrusted project file says that will not apply.
fn ignored_parts(table: &toml::Table, permissions: &Permissions) -> Vec<&'static str> {
    let mut parts = Vec::new();
    if !permissions.allow.is_empty() {
        parts.push("allow rules");
    }
    if permissions.yolo {
        parts.push("yolo");
    }
    for (section, name) in [
        ("hooks", "hooks"),
        ("mcp_servers", "MCP servers"),
        ("engine", "engine settings"),
        ("store", "store settings"),
        ("audit", "audit settings"),
        ("fetch", "fetch settings"),
        ("shell", "shell settings"),
        ("files", "file settings"),
        ("principals", "principal rules"),
        ("tools", "tool settings"),
        ("agent", "agent settings"),
    ] {
        if table.contains_key(section) {
            parts.push(name);
        }
    }
    parts
}

/// The permission subject of a tool, by name (rule examples are checked against it).
pub type SubjectOf<'a> = &'a dyn Fn(&str) -> Option<PermissionSubject>;

/// The tools a rule may name.
pub struct Known<'a> {
    /// A built-in tool's permission subject (`None`: no such built-in).
    pub subject_of: SubjectOf<'a>,
    /// Configured MCP servers, whose tools are `SERVER__tool`.
    pub servers: &'a [String],
    /// A server serves its tools under their own names: any name may be one of them (checked
    /// only against the server once it has connected).
    pub unprefixed: bool,
    /// Rules naming a configured server's tool, with where they are written.
    pub deferred: std::cell::RefCell<Vec<(String, String)>>,
}

impl Known<'_> {
    /// Why a rule's tool name can never match, if it cannot, with a hint.
    fn check(&self, name: &str) -> Result<(), String> {
        let server_of = |n: &str| n.split_once("__").map(|(s, _)| s.to_owned());
        let builtins: Vec<&str> = BUILTIN_NAMES
            .iter()
            .copied()
            .filter(|n| (self.subject_of)(n).is_some())
            .collect();
        if self.unprefixed {
            toolgate_core::rules::Rule::parse(name)?;
            return Ok(());
        }
        if name.contains(['*', '?', '[']) {
            let glob = toolgate_core::rules::Rule::parse(name)?;
            // A pattern fits a server when it names a tool of it: `every__*`, or one whose
            // literal start is inside the server's names (`every__trigger-*`).
            let literal = name.split(['*', '?', '[']).next().unwrap_or_default();
            let fits_server = self.servers.iter().any(|s| {
                let prefix = format!("{s}__");
                glob.names_tool(&format!("{prefix}x")) || (literal.starts_with(&prefix) && literal.len() > prefix.len())
            });
            if fits_server || builtins.iter().any(|b| glob.names_tool(b)) {
                return Ok(());
            }
            return Err(format!(
                "the pattern {name:?} matches no built-in tool and no configured MCP server's tools"
            ));
        }
        if (self.subject_of)(name).is_some() {
            return Ok(());
        }
        if let Some(server) = server_of(name)
            && self.servers.contains(&server)
        {
            return Ok(());
        }
        let hint = match name {
            "Bash" => Some("exec_shell".to_owned()),
            "Read" | "NotebookRead" => Some("read_file".to_owned()),
            "Write" => Some("write_file".to_owned()),
            "Edit" | "MultiEdit" | "NotebookEdit" => Some("edit_file".to_owned()),
            "WebFetch" => Some("fetch_url".to_owned()),
            "LS" | "Glob" => Some("list_directory".to_owned()),
            n if n.starts_with("mcp__") => Some(n.trim_start_matches("mcp__").to_owned()),
            _ => None,
        };
        if let Some(hint) = hint {
            return Err(format!(
                "there is no tool {name:?} (that is Claude Code's spelling; toolgate's is {hint:?})"
            ));
        }
        let mut candidates: Vec<String> = builtins.iter().map(|b| (*b).to_owned()).collect();
        candidates.extend(self.servers.iter().map(|s| format!("{s}__")));
        let near = toolgate_core::Registry::suggestions(name, candidates.iter().map(String::as_str));
        Err(match (server_of(name), near.first()) {
            (Some(server), _) if !self.servers.contains(&server) => {
                format!("there is no tool {name:?}: no MCP server {server:?} is configured")
            }
            (_, Some(first)) => format!("there is no tool {name:?}; did you mean {first:?}?"),
            _ => format!("there is no tool {name:?}"),
        })
    }
}

/// The built-in tools' names (the subject function says which this build registers).
const BUILTIN_NAMES: &[&str] = &[
    "read_file",
    "list_directory",
    "write_file",
    "edit_file",
    "exec_shell",
    "fetch_url",
    "memory_read",
    "memory_write",
    "read_result",
    "job_status",
    "job_output",
    "job_wait",
    "job_kill",
    "job_list",
];

fn read_file(path: &Path, known: &Known<'_>) -> Result<toml::Table> {
    let subject_of = known.subject_of;
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    // Checked alone first, so the error carries this file's line.
    let config = toml::from_str::<Config>(&text).map_err(|e| anyhow!("{}: {}", path.display(), describe(&e, &text)))?;
    // Every rule parses and matches its examples, or the error names the line.
    let rules = toml::from_str::<RuleSpans>(&text).unwrap_or_default();
    for (list, entries) in [
        ("allow", &rules.permissions.allow),
        ("ask", &rules.permissions.ask),
        ("deny", &rules.permissions.deny),
    ] {
        for entry in entries {
            let line = text[..entry.span().start.min(text.len())].matches('\n').count() + 1;
            match entry.get_ref().compile(subject_of) {
                Err(e) => bail!("{}: line {line}: permissions.{list}: {e}", path.display()),
                Ok(rule) => {
                    let name = rule.tool_pattern();
                    if name.contains("__") && !name.contains(['*', '?', '[']) {
                        known.deferred.borrow_mut().push((
                            name.to_owned(),
                            format!(
                                "{}: line {line}: permissions.{list}: the rule {:?}",
                                path.display(),
                                rule.to_string()
                            ),
                        ));
                    }
                    if let Err(e) = known.check(name) {
                        bail!(
                            "{}: line {line}: permissions.{list}: the rule {:?} can never match: {e}",
                            path.display(),
                            rule.to_string()
                        );
                    }
                }
            }
        }
    }
    let hooks = config.hooks.pre_tool_use.iter().chain(&config.hooks.post_tool_use);
    let spans = toml::from_str::<MatcherSpans>(&text).unwrap_or_default();
    let spans = spans.hooks.pre_tool_use.iter().chain(&spans.hooks.post_tool_use);
    for (hook, span) in hooks.zip(spans) {
        if let Err(e) = hook.regex() {
            let start = span.matcher.as_ref().map_or(0, |m| m.span().start);
            let line = text[..start.min(text.len())].matches('\n').count() + 1;
            bail!("{}: line {line}: {e}", path.display());
        }
    }
    text.parse::<toml::Table>()
        .map_err(|e| anyhow!("{}: {}", path.display(), one_line(&e.to_string())))
}

/// Where each rule stands in a file, for error lines.
#[derive(Default, Deserialize)]
struct RuleSpans {
    #[serde(default)]
    permissions: PermissionSpans,
}

#[derive(Default, Deserialize)]
struct PermissionSpans {
    #[serde(default)]
    allow: Vec<toml::Spanned<RuleEntry>>,
    #[serde(default)]
    ask: Vec<toml::Spanned<RuleEntry>>,
    #[serde(default)]
    deny: Vec<toml::Spanned<RuleEntry>>,
}

/// Where each hook's matcher stands in a file, for error lines.
#[derive(Default, Deserialize)]
struct MatcherSpans {
    #[serde(default)]
    hooks: HookSpans,
}

#[derive(Default, Deserialize)]
struct HookSpans {
    #[serde(default)]
    pre_tool_use: Vec<MatcherSpan>,
    #[serde(default)]
    post_tool_use: Vec<MatcherSpan>,
}

#[derive(Default, Deserialize)]
struct MatcherSpan {
    matcher: Option<toml::Spanned<String>>,
}

fn describe(e: &toml::de::Error, text: &str) -> String {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    match line {
        Some(l) => format!("line {l}: {}", e.message()),
        None => e.message().to_owned(),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// Applies `TOOLGATE_<SECTION>_<KEY>` variables of the known sections. Values are read as TOML
/// scalars (numbers, booleans), JSON for lists, and as strings otherwise.
pub fn apply_env(into: &mut toml::Table, vars: impl IntoIterator<Item = (String, String)>) -> Result<()> {
    for (name, raw) in vars {
        let Some(rest) = name.strip_prefix("TOOLGATE_") else {
            continue;
        };
        let Some((section, key)) = rest.split_once('_') else {
            continue;
        };
        let section = section.to_ascii_lowercase();
        if !ENV_SECTIONS.contains(&section.as_str()) {
            continue;
        }
        let key = key.to_ascii_lowercase();
        let value = env_value(&raw).with_context(|| format!("{name}: cannot read {raw:?}"))?;
        let table = into
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match table {
            toml::Value::Table(t) => {
                t.insert(key, value);
            }
            _ => bail!("{name}: [{section}] is not a table in the configuration"),
        }
    }
    Ok(())
}

fn env_value(raw: &str) -> Result<toml::Value> {
    let trimmed = raw.trim();
    if trimmed.starts_with('[') {
        let json: serde_json::Value = serde_json::from_str(trimmed).context("a list must be a JSON array")?;
        return toml::Value::try_from(json).context("the list holds values TOML cannot hold");
    }
    if let Ok(t) = format!("v = {trimmed}").parse::<toml::Table>()
        && let Some(v) = t.get("v")
        && !matches!(v, toml::Value::Table(_) | toml::Value::Array(_))
    {
        return Ok(v.clone());
    }
    Ok(toml::Value::String(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_sets_scalars_and_lists_of_known_sections_only() {
        let mut t = toml::Table::new();
        apply_env(
            &mut t,
            [
                ("TOOLGATE_ENGINE_TIMEOUT_MS".to_string(), "1500".to_string()),
                ("TOOLGATE_ENGINE_MALFORMED".to_string(), "abort".to_string()),
                ("TOOLGATE_ENGINE_LOOP_EXEMPT".to_string(), "[\"think\"]".to_string()),
                ("TOOLGATE_TEST_PG".to_string(), "postgres://x".to_string()),
            ],
        )
        .unwrap();
        let c: Config = toml::Value::Table(t).try_into().unwrap();
        assert_eq!(c.engine.timeout_ms, 1500);
        assert_eq!(c.engine.malformed, toolgate_core::MalformedPolicy::Abort);
        assert_eq!(c.engine.loop_exempt, vec!["think".to_string()]);
    }

    #[test]
    fn a_bad_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "[engine]\ntimeout_ms = 10\nno_such_key = 1\n").unwrap();
        let known = Known {
            subject_of: &|_| None,
            servers: &[],
            unprefixed: false,
            deferred: std::cell::RefCell::new(Vec::new()),
        };
        let err = read_file(&path, &known).unwrap_err().to_string();
        assert!(
            err.contains("t.toml") && err.contains("line 3") && err.contains("no_such_key"),
            "{err}"
        );
    }
}
