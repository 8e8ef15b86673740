//! `toolgate agent`: the model ↔ tools loop in the terminal. One task with a prompt, an
//! interactive session without one; Ctrl-C kills the running calls and returns to the prompt, a
//! second Ctrl-C exits.

use crate::config::AgentSection;
use crate::ui::Ui;
use anyhow::{Context, Result, anyhow, bail};
use console::style;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use toolgate_core::agent::ModelRouter;
use toolgate_core::formats::Dialect;
use toolgate_core::jobs::JobRegistry;
use toolgate_core::{Agent, AgentConfig, AgentRun, Engine, Model, ModelError, Session};
use toolgate_llm::{ModelOptions, Replay, ReplayOptions};

/// `toolgate agent`'s options.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The task; without one, an interactive session (or the prompt is read from stdin when it
    /// is not a terminal).
    pub prompt: Option<String>,
    /// PROVIDER:MODEL: openai:gpt-4.1, responses:gpt-4.1, anthropic:claude-sonnet-4-5,
    /// gemini:gemini-2.5-flash, ollama:qwen2.5, openai-compat:NAME (with --base-url).
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// The server's base URL (OpenAI-compatible servers, proxies, local mocks).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Play the model's answers from a cassette instead of asking a model (offline).
    #[arg(long, value_name = "FILE", conflicts_with = "record")]
    pub replay: Option<PathBuf>,
    /// Record every model request and answer to a cassette (credentials stripped).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Print the event stream, one JSON object per line, instead of the terminal display.
    #[arg(long)]
    pub json: bool,
    /// Model calls per run at most (default 20).
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// The system prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Describe tools in the prompt instead of native tool calling (models without tools).
    #[arg(long)]
    pub text_tools: bool,
    /// How calls written in the model's text are read: auto (default), hermes, qwen3-coder,
    /// deepseek, llama, mistral, gpt-oss, kimi, glm, gemma, toolgate, or a model family's name.
    #[arg(long, value_name = "DIALECT")]
    pub dialect: Option<Dialect>,
}

/// A tool's model override: `provider:model` is a new model with the same options; a bare name is
/// the current provider's model of that name.
struct Router(ModelOptions);

impl ModelRouter for Router {
    fn route(&self, name: &str, _: &Arc<dyn Model>) -> Result<Option<Arc<dyn Model>>, ModelError> {
        if name.contains(':') {
            toolgate_llm::connect(name, &self.0).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Builds the model: a replay, or a provider model from --model / `[agent] model`.
fn model(args: &mut AgentArgs, section: &AgentSection) -> Result<(Arc<dyn Model>, Option<ModelOptions>)> {
    if let Some(path) = &args.replay {
        let replay = Replay::open(path, ReplayOptions::default()).map_err(|e| anyhow!(e.message))?;
        // Without a prompt, a replay runs the recorded one.
        if args.prompt.is_none() {
            args.prompt = replay.recorded_prompt();
            if args.prompt.is_none() {
                bail!("the cassette {} records no user prompt; pass one", path.display());
            }
        }
        return Ok((Arc::new(replay), None));
    }
    let spec = args.model.clone().or_else(|| section.model.clone()).ok_or_else(|| {
        anyhow!(
            "no model: pass --model PROVIDER:MODEL (such as openai:gpt-4.1 or ollama:qwen2.5), set [agent] model, or play a cassette with --replay FILE"
        )
    })?;
    let defaults = ModelOptions::default();
    let options = ModelOptions {
        base_url: args.base_url.clone().or_else(|| section.base_url.clone()),
        stream: section.stream.unwrap_or(defaults.stream),
        native_tools: !args.text_tools && section.native_tools.unwrap_or(true),
        dialect: match (args.dialect, &section.dialect) {
            (Some(d), _) => d,
            (None, Some(name)) => name
                .parse()
                .map_err(|e| anyhow!("invalid configuration: [agent] dialect: {e}"))?,
            (None, None) => Dialect::Auto,
        },
        max_tokens: section.max_tokens.unwrap_or(defaults.max_tokens),
        record: args.record.clone(),
        ..defaults
    };
    let model = toolgate_llm::connect(&spec, &options).map_err(|e| anyhow!(e.message))?;
    Ok((
        model,
        Some(ModelOptions {
            record: None,
            ..options
        }),
    ))
}

/// Runs `toolgate agent`.
pub async fn run(
    mut args: AgentArgs,
    section: &AgentSection,
    engine: Arc<Engine>,
    session: Arc<Session>,
    ui: Arc<Ui>,
) -> Result<ExitCode> {
    let (model, options) = model(&mut args, section)?;
    let defaults = AgentConfig::default();
    let interactive_session = args.prompt.is_none() && std::io::stdin().is_terminal();
    let config = AgentConfig {
        // In a terminal session a dev server started at one prompt serves the next ones; the
        // session's end (or Ctrl-C) ends it.
        keep_jobs: section.keep_jobs.unwrap_or(interactive_session),
        max_iterations: args
            .max_iterations
            .or(section.max_iterations)
            .unwrap_or(defaults.max_iterations),
        final_answer_on_limit: section.final_answer_on_limit,
        result_loop_threshold: section.result_loop_threshold.unwrap_or(defaults.result_loop_threshold),
        warn_iterations: section.warn_iterations.unwrap_or(defaults.warn_iterations),
        system: args.system.clone().or_else(|| section.system.clone()),
    };
    let jobs = engine.jobs().clone();
    let mut agent = Agent::new(engine, session.clone(), model.clone(), config);
    if let Some(options) = options {
        agent = agent.with_router(Arc::new(Router(options)));
    }
    let running = Arc::new(AtomicBool::new(false));
    let presses = Arc::new(AtomicU32::new(0));
    // The line editor installs its own SIGINT handler when it is created; ours is registered
    // after it, so it comes first (and chains to the editor's).
    let editor = if interactive_session {
        Some(rustyline::DefaultEditor::new().map_err(|e| anyhow!("cannot start the line editor: {e}"))?)
    } else {
        None
    };
    let interrupts =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).context("cannot watch for Ctrl-C")?;
    spawn_interrupts(interrupts, session, running.clone(), presses.clone(), ui.clone());
    let json = args.json;
    match args.prompt {
        Some(prompt) => {
            if args.replay.is_some() {
                ui.line(&format!("{} {prompt}", style("›").bold()));
            }
            let run = run_once(&mut agent, &prompt, &running, &presses).await;
            Ok(report(&run, json, &ui))
        }
        None if !std::io::stdin().is_terminal() => {
            let mut prompt = String::new();
            std::io::stdin()
                .take(1 << 20)
                .read_to_string(&mut prompt)
                .context("cannot read the prompt from stdin")?;
            if prompt.trim().is_empty() {
                bail!("no prompt: pass one as an argument, pipe one on stdin, or run on a terminal for a session");
            }
            let run = run_once(&mut agent, prompt.trim(), &running, &presses).await;
            Ok(report(&run, json, &ui))
        }
        None => match editor {
            Some(editor) => {
                let flags = Flags {
                    running: &running,
                    presses: &presses,
                };
                interactive(editor, &mut agent, &model, &jobs, json, &ui, flags).await
            }
            None => bail!("no prompt: pass one as an argument, pipe one on stdin, or run on a terminal for a session"),
        },
    }
}

async fn run_once(agent: &mut Agent, prompt: &str, running: &AtomicBool, presses: &AtomicU32) -> AgentRun {
    presses.store(0, Ordering::SeqCst);
    running.store(true, Ordering::SeqCst);
    let run = agent.run(prompt).await;
    running.store(false, Ordering::SeqCst);
    run
}

/// Prints a run's answer (stdout) or why it ended (stderr); the exit code.
fn report(run: &AgentRun, json: bool, ui: &Ui) -> ExitCode {
    if !json {
        if let Some(text) = &run.text {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", text.trim_end());
            let _ = out.flush();
        }
        if run.answered() && !run.status.is_success() {
            // The answer above was made at the iteration limit: said, not an error.
            let detail = run.detail.as_deref().unwrap_or_default();
            ui.line(&format!("{} {detail}", style("■").dim()));
        } else if !run.status.is_success() {
            let detail = run.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
            ui.line(&format!("{} run ended: {}{detail}", style("■").yellow(), run.status));
        }
    }
    if run.answered() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Ctrl-C during a run kills its calls; a second one exits. At the prompt the line editor
/// handles Ctrl-C itself.
fn spawn_interrupts(
    mut interrupts: tokio::signal::unix::Signal,
    session: Arc<Session>,
    running: Arc<AtomicBool>,
    presses: Arc<AtomicU32>,
    ui: Arc<Ui>,
) {
    tokio::spawn(async move {
        while interrupts.recv().await.is_some() {
            if !running.load(Ordering::SeqCst) || presses.fetch_add(1, Ordering::SeqCst) >= 1 {
                ui.pause();
                eprintln!();
                std::process::exit(130);
            }
            // Said before the kill, so the line comes before the run's end that the kill causes.
            ui.line(&format!(
                "{} stopping: running calls are killed (Ctrl-C again to exit)",
                style("■").yellow()
            ));
            session.kill();
        }
    });
}

/// Whether a run is going on, and how many Ctrl-C it got.
struct Flags<'a> {
    running: &'a AtomicBool,
    presses: &'a AtomicU32,
}

/// One line per running background job of the session: what, how long, and the commands.
fn job_lines(jobs: &JobRegistry, session: &Session, ui: &Ui) {
    for job in jobs.list(session.id()).iter().filter(|j| j.running()) {
        let secs = job.elapsed().as_secs();
        ui.line(&format!(
            "{} {} {} running {}m{:02}s, {} bytes of output — /output {} · /kill {}",
            style("◷").cyan(),
            job.id,
            job.tool,
            secs / 60,
            secs % 60,
            job.output_bytes(),
            job.id,
            job.id
        ));
    }
}

/// `/jobs`, `/output ID` and `/kill ID` at the prompt; false for any other line.
async fn job_command(line: &str, jobs: &JobRegistry, session: &Session, ui: &Ui) -> bool {
    let mut words = line.split_whitespace();
    let (command, id) = (words.next().unwrap_or_default(), words.next());
    let job = |id: Option<&str>| id.and_then(|id| jobs.get(session.id(), id));
    match (command, id) {
        ("/jobs", _) => {
            let all = jobs.list(session.id());
            if all.is_empty() {
                ui.line("no background jobs in this session");
            }
            for j in &all {
                let secs = j.elapsed().as_secs();
                ui.line(&format!(
                    "{} {} {} for {}m{:02}s, {} bytes of output",
                    j.id,
                    j.tool,
                    j.status(false)["state"].as_str().unwrap_or_default(),
                    secs / 60,
                    secs % 60,
                    j.output_bytes()
                ));
            }
        }
        ("/output", id) => match job(id) {
            Some(j) => {
                // The last 4 KiB: what a server or a build printed lately (a job that has printed
                // nothing yet gets a moment to).
                if j.output_bytes() == 0 {
                    j.wait_for_output(1, std::time::Duration::from_secs(2)).await;
                }
                let total = j.output_bytes();
                let page = j.read(Some(total.saturating_sub(4096)), 4096);
                ui.line(&format!(
                    "{} {} — bytes {}..{} of {}",
                    style("◷").cyan(),
                    j.id,
                    page.offset,
                    page.next_offset,
                    total
                ));
                ui.line(page.text.trim_end());
            }
            None => ui.line("which job? /jobs lists them: /output ID"),
        },
        ("/kill", id) => match job(id) {
            Some(j) => {
                j.kill();
                let ended = j.wait(std::time::Duration::from_secs(15)).await;
                ui.line(&format!(
                    "{} {} {}",
                    style("■").yellow(),
                    j.id,
                    if ended {
                        "killed"
                    } else {
                        "asked to stop; it has not ended yet"
                    }
                ));
            }
            None => ui.line("which job? /jobs lists them: /kill ID"),
        },
        _ => return false,
    }
    true
}

async fn interactive(
    mut editor: rustyline::DefaultEditor,
    agent: &mut Agent,
    model: &Arc<dyn Model>,
    jobs: &JobRegistry,
    json: bool,
    ui: &Ui,
    flags: Flags<'_>,
) -> Result<ExitCode> {
    use rustyline::error::ReadlineError;
    let history = crate::trust::data_dir().map(|d| d.join("history.txt"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    ui.line(&format!(
        "{} {} — Ctrl-C stops a run, Ctrl-D or /exit leaves, /jobs lists background jobs",
        style("toolgate agent").bold(),
        model.describe()
    ));
    loop {
        let line = tokio::task::block_in_place(|| editor.readline("› "));
        let prompt = match line {
            Ok(l) => l,
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => break,
            Err(e) => bail!("cannot read the prompt: {e}"),
        };
        let prompt = prompt.trim();
        if prompt.is_empty() {
            continue;
        }
        if prompt == "/exit" || prompt == "/quit" {
            break;
        }
        let _ = editor.add_history_entry(prompt);
        let session = agent.session().clone();
        if job_command(prompt, jobs, &session, ui).await {
            continue;
        }
        let run = run_once(agent, prompt, flags.running, flags.presses).await;
        report(&run, json, ui);
        job_lines(jobs, &session, ui);
    }
    // The session ends: so do its jobs.
    agent.session().end_jobs();
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = editor.save_history(h);
    }
    Ok(ExitCode::SUCCESS)
}
