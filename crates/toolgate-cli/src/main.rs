//! `toolgate`: the command line of toolgate's engine.

mod approve;
mod config;
mod hooks;
mod trust;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use toolgate_core::permit::{ApproveAll, Approver, Policy};
use toolgate_core::rules::{Layer, LayerSource};
use toolgate_core::{
    Answer, CallId, Engine, Format, Outcome, Registry, Session, SessionId, SessionOptions, ToolCall, TurnOptions,
    TurnStatus,
};

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
    /// The session id (default: a fresh one).
    #[arg(long, global = true, value_name = "ID")]
    session: Option<String>,
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
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {}", one_line(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
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
    if !workspace.is_dir() {
        bail!("the workspace {} is not a directory", workspace.display());
    }
    let mut registry = Registry::new();
    for tool in toolgate_tools::builtin_tools() {
        registry.register(tool);
    }
    let subject_of = |name: &str| registry.get(name).map(|e| e.tool().spec().subject.clone());
    let config::Loaded {
        config,
        untrusted_project,
    } = config::load(cli.config.as_deref(), &workspace, &subject_of)?;
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
    if !config.mcp_servers.is_empty() {
        eprintln!(
            "toolgate: warning: [mcp_servers] are configured, but this version does not connect to MCP servers yet"
        );
    }
    let hooks = hooks::build(&config.hooks).map_err(|e| anyhow!("invalid configuration: {e}"))?;
    let mut engine_config = config.engine;
    if let Some(ms) = config.approval.timeout_ms {
        engine_config.approval_timeout_ms = ms;
    }
    engine_config.features.extend(config.exposure.features.iter().cloned());
    if let Some(turns) = config.exposure.retain_turns {
        engine_config.deliberate_retain_turns = turns;
    }
    let engine = Arc::new(Engine::new(registry, engine_config).with_hooks(hooks));
    // --yes answers every ask; otherwise the person at the terminal does (or nobody, at once).
    let approver: Arc<dyn Approver> = if cli.yes {
        Arc::new(ApproveAll)
    } else {
        Arc::new(approve::TerminalApprover)
    };
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            id: cli.session.as_deref().map(SessionId::new),
            workspace,
            approver,
            policy: Policy {
                yolo: cli.yolo || config.permissions.yolo,
                layers: Arc::new(layers),
            },
            ..SessionOptions::default()
        },
    ));
    match cli.command {
        Command::Tools { format } => {
            let list = engine.tool_list(format, &TurnOptions::default());
            match list {
                Value::String(text) => print_text(&text)?,
                other => print_json(&other)?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Call { tool, args } => call(&engine, &session, tool, args.as_deref()).await,
        Command::Exec { format } => exec(&engine, &session, format).await,
        Command::Trust { .. } => Ok(ExitCode::SUCCESS),
    }
}

async fn call(engine: &Arc<Engine>, session: &Arc<Session>, tool: String, args: Option<&str>) -> Result<ExitCode> {
    let arguments = match args.map(str::trim).filter(|a| !a.is_empty()) {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => o,
            Ok(_) => bail!("ARGS_JSON must be a JSON object, like '{{\"path\": \"README.md\"}}'"),
            Err(e) => bail!("ARGS_JSON is not valid JSON: {e}"),
        },
    };
    let call = ToolCall::new(CallId::generate(), tool.as_str(), arguments);
    let outcome = engine.run_call(session, call, TurnOptions::default()).await;
    let (content, ok) = match &outcome {
        Outcome::Recorded { entry, success, .. } => (entry.content.clone(), *success),
        Outcome::Abort { entry, .. } => (entry.content.clone(), false),
        Outcome::Restart { context } => (json!({"restart": context}), true),
    };
    print_json(&content)?;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

async fn exec(engine: &Arc<Engine>, session: &Arc<Session>, format: Option<Format>) -> Result<ExitCode> {
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
        (Some(Format::Mcp), _) => bail!("exec reads model answers; --format mcp is only for `toolgate tools`"),
        (Some(Format::Text), Ok(v @ Value::Object(_))) => (Format::Text, v),
        (Some(Format::Text), _) => (Format::Text, Value::String(input)),
        (Some(f), Ok(v)) => (f, v),
        (Some(f), Err(e)) => bail!("stdin is not a JSON {} model answer: {e}", f.as_str()),
        (None, Ok(v)) => (Format::detect(&v), v),
        (None, Err(e)) if looks_like_json(&input) => bail!("stdin is not valid JSON: {e}"),
        (None, Err(_)) => (Format::Text, Value::String(input)),
    };
    let answer = Answer::parse(format, &body).map_err(|e| anyhow!(e))?;
    let turn = engine.run_turn(session, &answer, TurnOptions::default()).await;
    print_json(&json!({"messages": turn.messages, "status": turn.status.as_str()}))?;
    Ok(match turn.status {
        TurnStatus::Aborted(_) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

fn looks_like_json(input: &str) -> bool {
    matches!(input.trim_start().as_bytes().first(), Some(b'{' | b'['))
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
