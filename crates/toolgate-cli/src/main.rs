//! `toolgate`: the command line of toolgate's engine.

mod agent;
mod approvals;
mod approve;
mod audit;
mod config;
mod hooks;
mod secrets;
mod serve;
mod telemetry;
mod time;
mod trust;
mod ui;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use toolgate_core::formats::Dialect;
use toolgate_core::permit::{ApproveAll, Approver, Policy};
use toolgate_core::rules::{Layer, LayerSource};
use toolgate_core::store::Store;
use toolgate_core::{
    Answer, CallId, Engine, Format, Outcome, Registry, Session, SessionId, SessionOptions, ToolCall, TurnOptions,
    TurnStatus,
};
use toolgate_store::{Durability, StoreOptions, StoreUrl};

/// The largest model answer `exec` reads from stdin.
const MAX_STDIN: u64 = 64 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "toolgate",
    version,
    about = "Executes the tool calls of language models, safely, fast and observably."
)]
struct Cli {
    /// A configuration file (trusted: it was named explicitly).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The workspace the tools work in (default: the working directory).
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The session id (default: a fresh one; `call` and `exec` with the same id share grants,
    /// full results and cache).
    #[arg(long, global = true, value_name = "ID")]
    session: Option<String>,
    /// Where state is kept: sqlite://PATH, postgres://USER@HOST/DB or memory (default: SQLite
    /// under the data directory).
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    /// Approve every call that would be asked (a deny still wins).
    #[arg(long, global = true)]
    yes: bool,
    /// Allow every call that no rule denies or asks.
    #[arg(long, global = true)]
    yolo: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prints the tool schemas exposed, in a provider's format.
    Tools {
        /// openai, responses, anthropic, gemini, mcp or text.
        #[arg(long, default_value = "openai")]
        format: Format,
    },
    /// Runs one call through the whole pipeline and prints the result JSON.
    Call {
        /// The tool's name.
        tool: String,
        /// The arguments, a JSON object (default `{}`).
        args: Option<String>,
    },
    /// A dry run: what the pipeline would decide for this call (validation, the tool's own
    /// refusals, the permission rules and the session's grants), as JSON; nothing runs.
    Check {
        /// The tool's name.
        tool: String,
        /// The arguments, a JSON object (default `{}`).
        args: Option<String>,
    },
    /// Trusts the project file (`toolgate.toml`) of a workspace, as it is now.
    Trust {
        /// The workspace (default: --workspace, or the working directory).
        dir: Option<PathBuf>,
    },
    /// Reads a model answer on stdin, runs its calls, and prints the messages to append.
    Exec {
        /// openai, responses, anthropic, gemini or text (default: detected from the answer).
        #[arg(long)]
        format: Option<Format>,
        /// The text format of calls written in the answer's text: auto (default), toolgate,
        /// hermes, qwen3-coder, deepseek, llama, mistral, gpt-oss, kimi, glm, gemma, or a
        /// model's name (qwen3, deepseek-v3.1, llama4…).
        #[arg(long, value_name = "DIALECT", default_value = "auto")]
        dialect: Dialect,
    },
    /// Reads a model answer on stdin and prints what stage 1 makes of it (its calls, content,
    /// reasoning, format and dialect) without running anything.
    Parse {
        /// openai, responses, anthropic, gemini or text (default: detected from the answer).
        #[arg(long)]
        format: Option<Format>,
        /// The text format of the calls (default: found from the text); see `exec --dialect`.
        #[arg(long, value_name = "DIALECT", default_value = "auto")]
        dialect: Dialect,
    },
    /// Lists the audit journal, newest first.
    Audit(audit::AuditArgs),
    /// Answers a gateway's approval queue in the terminal, with the agent's prompt, keys and diff.
    Approvals(approvals::ApprovalsArgs),
    /// Runs the model ↔ tools loop: one task, or an interactive session without a prompt.
    Agent(agent::AgentArgs),
    /// Serves the governed tools (built-in and upstream MCP servers') as an MCP server, over
    /// streamable HTTP at /mcp with the REST API beside it, or over stdio.
    Serve(serve::ServeArgs),
    /// Signs in to an upstream MCP server over OAuth 2.1 (the authorization URL goes to
    /// `$BROWSER`, or is printed; the code comes back on a loopback redirect) and keeps its
    /// tokens in the store.
    Login {
        /// The server's name in `[mcp_servers]`.
        server: String,
        /// A scope to ask for beside those the server names (repeatable).
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// Forgets the server's tokens instead.
        #[arg(long)]
        logout: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    secrets::scrub();
    let telemetry = telemetry::init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {}", one_line(&format!("{e:#}")));
            ExitCode::from(2)
        }
    };
    // A finished command leaves its runtime as it is (its tasks hold nothing unwritten: the
    // store was flushed); a server that failed to start may not have, so it is dropped then.
    if LEFT_AS_IS.get().is_some() {
        std::mem::forget(runtime);
    } else {
        drop(runtime);
    }
    // The spans of the last calls (a server's shutdown included) leave before the exit.
    telemetry.shutdown();
    code
}

/// `toolgate login SERVER`: an OAuth sign-in (or a client credentials grant) for one upstream
/// HTTP server, its tokens kept in the store that `serve` and the other commands read.
async fn login(
    server: &str,
    scopes: &[String],
    logout: bool,
    upstreams: &[toolgate_mcp::Upstream],
    store: Arc<dyn Store>,
) -> Result<ExitCode> {
    let Some(upstream) = upstreams.iter().find(|u| u.name() == server) else {
        let names: Vec<&str> = upstreams.iter().map(toolgate_mcp::Upstream::name).collect();
        if names.is_empty() {
            bail!("no MCP server named {server:?}: the configuration has no [mcp_servers]");
        }
        bail!("no MCP server named {server:?} (configured: {})", names.join(", "));
    };
    let Some(oauth) = upstream.oauth() else {
        bail!("{server} is not an HTTP server without an Authorization header: it has no OAuth sign-in");
    };
    oauth.set_store(store.clone());
    if logout {
        oauth.logout().await.map_err(|e| anyhow!("{e}"))?;
        store
            .flush()
            .await
            .map_err(|e| anyhow!("cannot write the store: {e}"))?;
        println!("{server}: tokens forgotten");
        return Ok(ExitCode::SUCCESS);
    }
    oauth.set_interactive(toolgate_mcp::oauth::Opener::from_env());
    oauth.begin_login(scopes).await;
    // A session with the server, through the path `serve` uses: wherever the server answers
    // 401 or 403, the sign-in runs (the person has five minutes).
    let listed = upstream
        .check(std::time::Duration::from_secs(330))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    store
        .flush()
        .await
        .map_err(|e| anyhow!("cannot write the store: {e}"))?;
    match oauth.summary() {
        Some(done) => println!("{done}; {listed} tools listed"),
        None => println!("{server} did not ask for authorization ({listed} tools listed): nothing to sign in to"),
    }
    Ok(ExitCode::SUCCESS)
}

fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let workspace = match &cli.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the working directory")?,
    };
    if let Command::Trust { dir } = &cli.command {
        let dir = dir.clone().unwrap_or(workspace);
        let (file, sum) = trust::trust(&dir)?;
        println!("trusted {} (sha256 {sum})", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Approvals(args) = &cli.command {
        return approvals::run(args, &workspace).await;
    }
    if !workspace.is_dir() {
        bail!("the workspace {} is not a directory", workspace.display());
    }
    // The tools' permission subjects check rule examples while the configuration loads; the
    // registry is then built with the configured settings.
    // Made only when a rule needs them (building the tools derives their schemas).
    let defaults = std::cell::OnceCell::new();
    let default_subject = |name: &str| {
        defaults
            .get_or_init(toolgate_tools::builtin_tools)
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.spec().subject.clone())
    };
    let config::Loaded {
        config,
        untrusted_project,
        mcp_rules,
        loop_threshold_set,
    } = config::load(cli.config.as_deref(), &workspace, &default_subject)?;
    // toolgate's own files are out of every tool's reach: the user configuration, the trust
    // records and the default store (the data directory), a --config file, and hook programs.
    let mut protected: Vec<PathBuf> = Vec::new();
    protected.extend(config::user_file().and_then(|f| f.parent().map(std::path::Path::to_path_buf)));
    protected.extend(trust::data_dir());
    protected.extend(cli.config.clone());
    protected.extend(hooks::programs(&config.hooks, &workspace));
    toolgate_tools::protect::set(protected);
    toolgate_tools::confine::set_hardlink_reads(config.files.hardlink_reads);
    if config.shell.sandbox == toolgate_tools::sandbox::SandboxMode::On
        && !toolgate_tools::sandbox::landlock_available()
    {
        eprintln!(
            "toolgate: warning: this kernel has no Landlock, so exec_shell runs without its filesystem sandbox (set [shell] sandbox = \"required\" to refuse instead, or \"off\" to silence this)"
        );
    }
    let mut registry = Registry::new();
    let tools_config = toolgate_tools::ToolsConfig {
        fetch: config.fetch.tool_config(),
        shell: config.shell.tool_config(),
    };
    let builtins = toolgate_tools::builtin_tools_with(&tools_config);
    for tool in &builtins {
        registry.register(tool.clone());
    }
    let subject_of = |name: &str| registry.registered(name).map(|e| e.tool().spec().subject.clone());
    // Trusted files (user, trusted project, --config) merge into one layer; an untrusted project
    // file contributes only its deny and ask rules.
    // Built-in defaults come last: none yet beyond the read-only hint in decide().
    let mut layers = vec![
        config.permissions.layer(LayerSource::User, &subject_of)?,
        Layer::new(LayerSource::Default),
    ];
    if let Some(project) = &untrusted_project {
        layers.insert(0, project.layer(LayerSource::Project, &subject_of)?);
    }
    let upstreams = config::mcp_servers(&config, &workspace, engine_timeout(&config))?;
    let hooks = hooks::build(&config.hooks).map_err(|e| anyhow!("invalid configuration: {e}"))?;
    let mut engine_config = config.engine.clone();
    match config.approval.timeout_ms {
        Some(ms) => engine_config.approval_timeout_ms = ms,
        // A gateway's ask must end before its client gives up on the request (the TypeScript
        // SDK at 60 s, without resetting on progress by default): else an answer given after
        // that runs the tool for nobody.
        None if matches!(cli.command, Command::Serve(_)) => engine_config.approval_timeout_ms = GATEWAY_ASK_MS,
        None => {}
    }
    engine_config.features.extend(config.exposure.features.iter().cloned());
    if let Some(turns) = config.exposure.retain_turns {
        engine_config.deliberate_retain_turns = turns;
    }
    engine_config.audit_arguments = config.audit.store_arguments;
    engine_config.tools = config.tools.clone();
    // The loop detector protects a model from itself: on for the agent and `exec`, off for the
    // gateway, whose clients are programs too (a client polling a tool is not a loop), unless
    // `[engine] loop_threshold` says otherwise.
    if matches!(cli.command, Command::Serve(_)) && !loop_threshold_set {
        engine_config.loop_threshold = 0;
    }
    engine_config
        .check()
        .map_err(|e| anyhow!("invalid configuration: {e}"))?;
    let store = match &cli.command {
        // Upstream servers' OAuth tokens are in the store.
        Command::Tools { .. } if !upstreams.is_empty() => {
            Some(open_store(cli.store.as_deref(), &config, &engine_config, false, None).await?)
        }
        Command::Tools { .. } | Command::Trust { .. } | Command::Parse { .. } => None,
        // A full result behind a `read_result` handle is reachable only from its session: without
        // `--session` no later process can name it, so it stays in this process, not the store.
        Command::Call { .. } | Command::Exec { .. } | Command::Agent(_) if cli.session.is_none() => {
            Some(open_store(cli.store.as_deref(), &config, &engine_config, false, None).await?)
        }
        // A gateway is a replica: it holds a lease, so others can tell when it is gone.
        Command::Serve(_) => {
            let lease = std::time::Duration::from_millis(config.store.lease_ms.unwrap_or(30_000));
            Some(open_store(cli.store.as_deref(), &config, &engine_config, true, Some(lease)).await?)
        }
        _ => Some(open_store(cli.store.as_deref(), &config, &engine_config, true, None).await?),
    };
    if let (Command::Audit(args), Some(store)) = (&cli.command, &store) {
        return audit::run(args, cli.session.as_deref(), store.as_ref()).await;
    }
    if let (Command::Login { server, scopes, logout }, Some(store)) = (&cli.command, &store) {
        return login(server, scopes, *logout, &upstreams, store.clone()).await;
    }
    let mut engine = Engine::new(registry, engine_config).with_hooks(hooks);
    let ui = match &cli.command {
        Command::Agent(args) => {
            let ui = ui::Ui::new(args.json);
            engine = engine.with_events(ui.clone());
            Some(ui)
        }
        _ => None,
    };
    let metrics = Arc::new(toolgate_mcp::metrics::Metrics::default());
    if let Command::Serve(_) = &cli.command {
        engine = engine.with_events(metrics.clone());
    }
    let engine = Arc::new(engine);
    // Upstream MCP servers: started now, their tools registered beside the built-ins.
    let hub = if upstreams.is_empty() {
        None
    } else {
        let hub_store: Arc<dyn Store> = match &store {
            Some(s) => s.clone(),
            None => Arc::new(toolgate_core::store::MemoryStore::new()),
        };
        let hub = toolgate_mcp::Hub::start(engine.clone(), builtins.clone(), hub_store, upstreams).await;
        // A rule naming a tool its (connected) server does not have can never match.
        let registry = engine.registry();
        for (name, written) in &mcp_rules {
            let server = name.split("__").next().unwrap_or_default();
            // An upstream's requests to the client are governed under these names.
            if name.ends_with("__sampling") || name.ends_with("__elicitation") {
                continue;
            }
            let ready = matches!(hub.servers().get(server), Some(toolgate_mcp::ServerState::Ready { .. }));
            if ready && registry.registered(name).is_none() {
                let prefix = format!("{server}__");
                let names: Vec<&str> = registry
                    .entries()
                    .map(|e| e.name().as_str())
                    .filter(|n| n.starts_with(&prefix))
                    .collect();
                let near = Registry::suggestions(name, names.iter().copied());
                let hint = near
                    .first()
                    .map(|n| format!("; did you mean {n:?}?"))
                    .unwrap_or_default();
                bail!("{written} can never match: the MCP server {server:?} has no tool {name:?}{hint}");
            }
        }
        for state in hub.servers().into_values() {
            if let toolgate_mcp::ServerState::Failed { reason } = state {
                eprintln!(
                    "toolgate: warning: {reason}; its tools are missing until it starts (retried in the background)"
                );
            }
        }
        Some(hub)
    };
    // --yes answers every ask; otherwise the person at the terminal does (or nobody, at once).
    let approver: Arc<dyn Approver> = if cli.yes {
        Arc::new(ApproveAll)
    } else {
        Arc::new(approve::TerminalApprover {
            ui: ui.clone(),
            workspace: Some(workspace.clone()),
        })
    };
    let policy = Policy {
        yolo: cli.yolo || config.permissions.yolo,
        layers: Arc::new(layers),
    };
    if let Command::Serve(args) = cli.command {
        let Some(store) = store else {
            bail!("serve needs a store");
        };
        let yes = cli.yes;
        let factory_store = store.clone();
        let factory: toolgate_mcp::SessionFactory = Arc::new(move || SessionOptions {
            workspace: workspace.clone(),
            approver: if yes {
                Arc::new(ApproveAll)
            } else {
                Arc::new(toolgate_core::permit::DenyAll)
            },
            policy: policy.clone(),
            store: Some(factory_store.clone()),
            ..SessionOptions::default()
        });
        // Asks go to the HTTP queue unless the configuration says otherwise; on stdio there is
        // no queue to answer them unless another replica shares the store, so they are refused
        // unless `[approval] via` says so.
        let via = match (config.approval.via, args.stdio) {
            _ if yes => toolgate_mcp::Via::Yes,
            (Some(via), _) => via,
            (None, false) => toolgate_mcp::Via::Queue,
            (None, true) => toolgate_mcp::Via::Deny,
        };
        let queue = toolgate_mcp::Queue::new(store.clone());
        let proxy = hub.clone().map(toolgate_mcp::proxy::Proxy::new);
        let gateway = toolgate_mcp::Gateway::new(engine.clone(), hub, factory, via, Some(queue.clone()));
        // The upstreams' prompts, resources, completions and log level, beside their tools.
        if let Some(proxy) = proxy {
            gateway.set_extension(Arc::new(proxy)).map_err(|e| anyhow!("{e}"))?;
        }
        let mut principal_rules = std::collections::HashMap::new();
        for (name, rules) in &config.principals {
            let subject_of = |n: &str| engine.registry().registered(n).map(|e| e.tool().spec().subject.clone());
            let layer = rules
                .layer(LayerSource::User, &subject_of)
                .map_err(|e| anyhow!("[principals.{name}]: {e}"))?;
            principal_rules.insert(name.clone(), layer);
        }
        gateway
            .set_principal_rules(principal_rules)
            .map_err(|e| anyhow!("{e}"))?;
        let code = serve::run(args, gateway, queue, metrics, store.clone()).await;
        if let Err(e) = store.flush().await {
            eprintln!("toolgate: warning: the journal's last rows may not be written: {e}");
        }
        return code;
    }
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            id: cli.session.as_deref().map(SessionId::new),
            workspace,
            approver,
            policy,
            store: store.clone(),
            ..SessionOptions::default()
        },
    ));
    if cli.session.is_some() {
        session
            .load_grants()
            .await
            .map_err(|e| anyhow!("cannot load the session's grants: {e}"))?;
        session
            .load_guards()
            .await
            .map_err(|e| anyhow!("cannot load the session's loop detector and error count: {e}"))?;
    }
    let named = cli.session.is_some();
    let code = match cli.command {
        Command::Tools { format } => {
            let list = engine.tool_list(format, &TurnOptions::default());
            match list {
                Value::String(text) => print_text(&text)?,
                other => print_json(&other)?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Call { tool, args } => call(&engine, &session, tool, args.as_deref()).await,
        Command::Check { tool, args } => check(&engine, &session, &tool, args.as_deref()),
        Command::Exec { format, dialect } => exec(&engine, &session, format, dialect).await,
        Command::Parse { format, dialect } => parse_answer(&engine, format, dialect),
        Command::Agent(args) => match ui {
            Some(ui) => agent::run(args, &config.agent, engine.clone(), session.clone(), ui).await,
            None => Ok(ExitCode::from(2)),
        },
        Command::Trust { .. }
        | Command::Login { .. }
        | Command::Audit(_)
        | Command::Serve(_)
        | Command::Approvals(_) => Ok(ExitCode::SUCCESS),
    };
    // A named session's guards are its state: the next `exec --session` takes up from here.
    if named && let Err(e) = session.save_guards().await {
        eprintln!("toolgate: warning: the session's loop detector and error count were not kept: {e}");
    }
    if let Some(hub) = &hub {
        hub.shutdown(std::time::Duration::from_secs(5)).await;
    }
    if let Some(store) = &store
        && let Err(e) = store.flush().await
    {
        eprintln!("toolgate: warning: the journal's last rows may not be written: {e}");
    }
    // Everything is written and flushed: the process ends now, without taking its state apart
    // (the registry, the compiled schemas, the store's connections: a third of a short call's
    // time went to that, and to a close-time checkpoint the next process does not need).
    let _ = LEFT_AS_IS.set(Box::new((engine, session, store, hub)));
    code
}

/// A finished command's state, never dropped: `main` exits without tearing it down.
static LEFT_AS_IS: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>> = std::sync::OnceLock::new();

/// The engine's per-attempt timeout (upstream tools without their own use it).
/// How long a gateway's ask waits by default: below the common MCP clients' request timeouts.
const GATEWAY_ASK_MS: u64 = 50_000;

fn engine_timeout(config: &config::Config) -> std::time::Duration {
    std::time::Duration::from_millis(config.engine.timeout_ms)
}

/// Opens the state store (`--store`, else `[store] url`, else SQLite under the data directory),
/// applies retention and reports calls an earlier process left running. `keep_results`: full
/// results are written to the store (else they stay in this process).
async fn open_store(
    flag: Option<&str>,
    config: &config::Config,
    engine: &toolgate_core::EngineConfig,
    keep_results: bool,
    lease: Option<std::time::Duration>,
) -> Result<Arc<dyn Store>> {
    let url = match flag.or(config.store.url.as_deref()) {
        Some(text) => StoreUrl::parse(text)?,
        None => {
            let dir = trust::data_dir().context(
                "cannot find a data directory for the default store: set XDG_DATA_HOME or HOME, or pass --store",
            )?;
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
            StoreUrl::Sqlite(dir.join("toolgate.db"))
        }
    };
    let options = StoreOptions {
        durability: match config.audit.durability {
            config::DurabilitySetting::Full => Durability::Full,
            config::DurabilitySetting::Normal => Durability::Normal,
        },
        results_per_session: engine.results_per_session,
        result_max_bytes: if keep_results {
            StoreOptions::default().result_max_bytes
        } else {
            0
        },
        write_timeout: config
            .store
            .write_timeout_ms
            .map_or(StoreOptions::default().write_timeout, std::time::Duration::from_millis),
        replica_lease: lease,
        ..StoreOptions::default()
    };
    let store = toolgate_store::open(&url, &options).await?;
    toolgate_store::retain(store.as_ref(), config.audit.keep_days)
        .await
        .map_err(|e| anyhow!("{}: retention failed: {e}", url.label()))?;
    let recovery = toolgate_store::recover(store.as_ref())
        .await
        .map_err(|e| anyhow!("{}: cannot read the journal: {e}", url.label()))?;
    if !recovery.closed.is_empty() {
        let shown: Vec<String> = recovery
            .closed
            .iter()
            .take(5)
            .map(|r| {
                format!(
                    "{} (session {}, call {}, started {})",
                    r.tool,
                    r.session_id,
                    r.call_id,
                    r.started_at.map(time::rfc3339).unwrap_or_default()
                )
            })
            .collect();
        let more = recovery.closed.len().saturating_sub(shown.len());
        eprintln!(
            "toolgate: warning: {} call(s) may have run when an earlier toolgate process stopped: {}{}; `toolgate audit --outcome interrupted` lists them",
            recovery.closed.len(),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    Ok(store)
}

/// `toolgate audit`.
/// ARGS_JSON of `call` and `check`: a JSON object, `{}` when absent.
fn call_arguments(args: Option<&str>) -> Result<serde_json::Map<String, Value>> {
    Ok(match args.map(str::trim).filter(|a| !a.is_empty()) {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => o,
            Ok(_) => bail!("ARGS_JSON must be a JSON object, like '{{\"path\": \"README.md\"}}'"),
            Err(e) => bail!("ARGS_JSON is not valid JSON: {e}"),
        },
    })
}

fn check(engine: &Engine, session: &Session, tool: &str, args: Option<&str>) -> Result<ExitCode> {
    let call = ToolCall::new(CallId::generate(), tool, call_arguments(args)?);
    let report = engine.check(session, &call);
    print_json(&serde_json::to_value(&report)?)?;
    Ok(ExitCode::SUCCESS)
}

async fn call(engine: &Arc<Engine>, session: &Arc<Session>, tool: String, args: Option<&str>) -> Result<ExitCode> {
    let call = ToolCall::new(CallId::generate(), tool.as_str(), call_arguments(args)?);
    let outcome = engine.run_call(session, call, TurnOptions::default()).await;
    let (content, ok) = match &outcome {
        Outcome::Recorded { entry, success, .. } => (entry.content.clone(), *success),
        Outcome::Abort { entry, .. } => (entry.content.clone(), false),
        Outcome::Restart { context } => (json!({"restart": context}), true),
    };
    print_json(&content)?;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

async fn exec(
    engine: &Arc<Engine>,
    session: &Arc<Session>,
    format: Option<Format>,
    dialect: Dialect,
) -> Result<ExitCode> {
    let answer = read_answer(format, dialect)?;
    let turn = engine.run_turn(session, &answer, TurnOptions::default()).await;
    print_json(&json!({"messages": turn.messages, "status": turn.status.as_str()}))?;
    Ok(match turn.status {
        TurnStatus::Aborted(_) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// `toolgate parse`: stage 1 alone, as JSON.
fn parse_answer(engine: &Engine, format: Option<Format>, dialect: Dialect) -> Result<ExitCode> {
    let answer = read_answer(format, dialect)?;
    let registry = engine.registry();
    let calls: Vec<Value> = answer
        .calls
        .iter()
        .map(
            |raw| match toolgate_core::parse::normalize(raw, &registry, answer.cut_off) {
                Ok(call) => json!({
                    "id": call.id.as_str(),
                    "name": call.name.as_str(),
                    "arguments": call.arguments,
                    "repairs": call.repair.map(|r| r.actions).unwrap_or_default(),
                }),
                Err(bad) => json!({
                    "id": bad.id.as_str(),
                    "name": bad.name,
                    "error": {"type": bad.error.kind.as_str(), "message": bad.error.message},
                }),
            },
        )
        .collect();
    print_json(&json!({
        "calls": calls,
        "content": answer.text.filter(|t| !t.is_empty()),
        "reasoning": answer.reasoning,
        "format": answer.format.as_str(),
        "dialect": answer.dialect.map(Dialect::as_str),
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// Reads the model answer on stdin: a provider's JSON body or message in `format` (detected
/// when not given), or text. Text is read by the family parsers, JSON that is no provider
/// answer is text too, and so is anything that is not JSON.
fn read_answer(format: Option<Format>, dialect: Dialect) -> Result<Answer> {
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_string(&mut input)
        .context("cannot read the model answer from stdin (it must be UTF-8)")?;
    if input.len() as u64 > MAX_STDIN {
        bail!("the model answer on stdin is larger than {} MiB", MAX_STDIN >> 20);
    }
    if input.trim().is_empty() {
        bail!("no model answer on stdin: pipe a provider's response body or its assistant message");
    }
    let parsed = serde_json::from_str::<Value>(&input);
    let (format, body) = match (format, parsed) {
        (Some(Format::Mcp), _) => bail!("this reads model answers; --format mcp is only for `toolgate tools`"),
        // A message with text content is read for its content; any other input is the text.
        (Some(Format::Text), Ok(v @ Value::Object(_))) if v.get("content").is_some_and(Value::is_string) => {
            (Format::Text, v)
        }
        // A JSON string is the text it holds (a model answer logged as a JSON string).
        (Some(Format::Text) | None, Ok(v @ Value::String(_))) => (Format::Text, v),
        (Some(Format::Text), _) => (Format::Text, Value::String(input)),
        (Some(f), Ok(v)) => (f, v),
        (Some(f), Err(e)) => bail!("stdin is not a JSON {} model answer: {e}", f.as_str()),
        (None, Ok(v @ Value::Object(_))) => (Format::detect(&v), v),
        // A JSON string, number or list is text (a pythonic or JSON call list, or prose).
        (None, _) => (Format::Text, Value::String(input)),
    };
    Answer::parse_with(format, &body, dialect).map_err(|e| anyhow!(e))
}

fn print_json(value: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

fn print_text(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}
