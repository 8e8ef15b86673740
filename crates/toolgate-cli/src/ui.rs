//! What `toolgate agent` shows while it runs: one line per tool call with its verdict, a spinner
//! with the elapsed time for model calls and tool calls over a second, warnings — or, with
//! `--json`, the event stream itself, one JSON object per line on stdout.

use console::style;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use toolgate_core::events::{Event, EventSink};

/// A spinner appears for work that has gone on this long.
const SPINNER_AFTER: Duration = Duration::from_secs(1);

/// Renders the event stream.
pub struct Ui {
    json: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    calls: HashMap<String, Call>,
    /// The model call in progress, since when.
    model_since: Option<Instant>,
    spinner: Option<ProgressBar>,
    /// An approval prompt owns the terminal.
    paused: bool,
}

struct Call {
    tool: String,
    subject: String,
    verdict: Option<(&'static str, &'static str, String)>,
    running_since: Option<Instant>,
}

impl Ui {
    /// A renderer; `json` prints events instead of lines.
    pub fn new(json: bool) -> Arc<Self> {
        let spinners = !json && console::Term::stderr().is_term();
        let ui = Arc::new(Self {
            json,
            state: Mutex::new(State::default()),
        });
        if spinners {
            let weak = Arc::downgrade(&ui);
            tokio::spawn(tick(weak));
        }
        ui
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the terminal to a prompt: the spinner goes away until `resume`.
    pub fn pause(&self) {
        let mut s = self.state();
        s.paused = true;
        if let Some(sp) = s.spinner.take() {
            sp.finish_and_clear();
        }
    }

    /// Takes the terminal back after a prompt.
    pub fn resume(&self) {
        self.state().paused = false;
    }

    /// Prints a line on stderr, above any spinner.
    pub fn line(&self, text: &str) {
        if self.json {
            return;
        }
        let s = self.state();
        match &s.spinner {
            Some(sp) => sp.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    fn render(&self, event: &Event) {
        match event {
            Event::CallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => {
                self.state().calls.insert(
                    call_id.to_string(),
                    Call {
                        tool: tool.to_string(),
                        subject: subject(tool.as_str(), arguments),
                        verdict: None,
                        running_since: None,
                    },
                );
            }
            Event::Verdict {
                call_id,
                decision,
                source,
                reason,
                ..
            } => {
                let mut s = self.state();
                if let Some(c) = s.calls.get_mut(call_id.as_str()) {
                    c.verdict = Some((decision, source, reason.clone()));
                    if *decision == "allow" {
                        c.running_since = Some(Instant::now());
                    }
                }
            }
            Event::CallFinished {
                call_id,
                tool,
                success,
                error_type,
                duration_ms,
                cache_hit,
                ..
            } => {
                let call = {
                    let mut s = self.state();
                    let call = s.calls.remove(call_id.as_str());
                    if s.calls.values().all(|c| c.running_since.is_none())
                        && let Some(sp) = s.spinner.take()
                    {
                        sp.finish_and_clear();
                    }
                    call
                };
                let (name, subject, verdict) = match call {
                    Some(c) => (c.tool, c.subject, c.verdict),
                    None => (tool.to_string(), String::new(), None),
                };
                let head = if subject.is_empty() {
                    style(name).bold().to_string()
                } else {
                    format!("{} {}", style(name).bold(), subject)
                };
                let verdict_text = match &verdict {
                    Some((d, src, _)) => format!("{d} ({src})"),
                    None => "not run".into(),
                };
                let line = if *success {
                    let cached = if *cache_hit { ", cached" } else { "" };
                    format!(
                        "  {} {head}  {}",
                        style("✓").green(),
                        style(format!("{verdict_text} · {duration_ms} ms{cached}")).dim()
                    )
                } else {
                    let kind = error_type.unwrap_or("error");
                    let why = match &verdict {
                        Some(("deny", _, reason)) if !reason.is_empty() => format!(": {reason}"),
                        _ => String::new(),
                    };
                    format!(
                        "  {} {head}  {}",
                        style("✗").red(),
                        style(format!("{verdict_text} · {kind}{why}")).red()
                    )
                };
                self.line(&line);
            }
            Event::Retry {
                attempt,
                delay_ms,
                error,
                ..
            } => self.line(&format!(
                "    {} attempt {attempt} failed ({error}); retrying in {delay_ms} ms",
                style("↻").yellow()
            )),
            Event::ModelRequested { .. } => self.state().model_since = Some(Instant::now()),
            Event::ModelAnswered { text, calls, .. } => {
                self.clear_model();
                if *calls > 0
                    && let Some(t) = text.as_deref().map(str::trim).filter(|t| !t.is_empty())
                {
                    self.line(&style(t).dim().to_string());
                }
            }
            Event::ModelFailed { kind, message, .. } => {
                self.clear_model();
                self.line(&format!("{} model {kind}: {message}", style("✗").red()));
            }
            Event::LongLoop {
                iteration,
                max_iterations,
            } => self.line(&format!(
                "{} iteration {iteration} of at most {max_iterations}: this task is taking many steps",
                style("!").yellow()
            )),
            Event::ModelOverride { model } => self.line(&style(format!("  next turn uses {model}")).dim().to_string()),
            Event::TurnRestarted { .. } => self.line(
                &style("  a tool asked to re-run the turn with more context")
                    .dim()
                    .to_string(),
            ),
            _ => {}
        }
    }

    fn clear_model(&self) {
        let mut s = self.state();
        s.model_since = None;
        if let Some(sp) = s.spinner.take() {
            sp.finish_and_clear();
        }
    }

    /// Shows or updates the spinner for the oldest work past `SPINNER_AFTER`.
    fn refresh(&self) {
        let mut s = self.state();
        if s.paused {
            return;
        }
        let now = Instant::now();
        let oldest = s
            .calls
            .values()
            .filter_map(|c| c.running_since.map(|t| (t, format!("{} {}", c.tool, c.subject))))
            .chain(s.model_since.map(|t| (t, "thinking".to_owned())))
            .min_by_key(|(t, _)| *t);
        let Some((since, what)) = oldest.filter(|(t, _)| now.duration_since(*t) >= SPINNER_AFTER) else {
            return;
        };
        let message = format!("{} ({}s)", what.trim(), now.duration_since(since).as_secs());
        match &s.spinner {
            Some(sp) => sp.set_message(message),
            None => {
                let sp = ProgressBar::new_spinner();
                sp.set_style(
                    ProgressStyle::with_template("  {spinner} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                sp.set_message(message);
                sp.enable_steady_tick(Duration::from_millis(100));
                s.spinner = Some(sp);
            }
        }
    }
}

async fn tick(ui: Weak<Ui>) {
    let mut every = tokio::time::interval(Duration::from_millis(250));
    loop {
        every.tick().await;
        match ui.upgrade() {
            Some(ui) => ui.refresh(),
            None => return,
        }
    }
}

impl EventSink for Ui {
    fn emit(&self, event: &Event) {
        if self.json {
            let mut out = std::io::stdout().lock();
            if serde_json::to_writer(&mut out, event).is_ok() {
                let _ = writeln!(out);
                let _ = out.flush();
            }
            return;
        }
        self.render(event);
    }
}

/// What a call acts on, for its line: the command, the path or the URL, else short arguments.
pub fn subject(tool: &str, arguments: &Value) -> String {
    let pick = |k: &str| arguments.get(k).and_then(Value::as_str).map(str::to_owned);
    let text = match tool {
        "exec_shell" => pick("command"),
        "read_file" | "write_file" | "edit_file" | "list_directory" => pick("path"),
        "fetch_url" => pick("url"),
        "read_result" => pick("handle"),
        "memory_read" | "memory_write" => pick("key"),
        _ => None,
    }
    .unwrap_or_else(|| match arguments {
        Value::Object(o) if o.is_empty() => String::new(),
        Value::Null => String::new(),
        other => other.to_string(),
    });
    let one_line = text.replace('\n', " ⏎ ");
    if one_line.chars().count() > 80 {
        let cut: String = one_line.chars().take(79).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}
