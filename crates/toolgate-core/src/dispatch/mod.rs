//! The dispatcher: the only place that knows the order of the stages (DESIGN.md's table, and
//! ARCHITECTURE.md in this repository). `run_turn` takes a model answer through stage 1 and the
//! scheduler; `run_call` takes one call through stages 2–13. Each stage lives in the file named
//! after what it does and returns a [`Stop`](outcome::Stop) when it ends the call; stage 13
//! turns whatever came back into the outcome, the journal row, the metrics and the events.
//!
//! | # | stage | where |
//! |---|---|---|
//! | 1 | parse | `crate::parse`, batch policy in `batch.rs` |
//! | 2 | stop check | `stop_check` here; for a batch, `batch.rs` |
//! | 3–4 | lookup, exposure | `exposure.rs` |
//! | 5–6 | validate, guards | `arguments.rs`; the loop detector in `batch.rs` |
//! | 7–8 | permission, pre hooks, approval | `approval.rs` |
//! | 9–10 | cache, execute | `run.rs` (the attempts in `crate::execute`) |
//! | 11–12 | result, post hooks | `output.rs` |
//! | 13 | record | `record.rs` |

mod approval;
mod arguments;
mod background;
mod batch;
mod exposure;
mod outcome;
mod output;
mod record;
mod run;
mod turn;

pub use outcome::{AbortReason, Outcome, TurnOutcome, TurnStatus, turn_status};
pub use record::AUDIT_BYTES;
pub use turn::{TurnOptions, TurnState};

use crate::cache::ResultCache;
use crate::config::EngineConfig;
use crate::error::{CallError, ErrorKind};
use crate::events::{Event, EventSink, NoEvents};
use crate::hooks::Hook;
use crate::redact::redact_value;
use crate::registry::{Registry, provider_safe};
use crate::session::Session;
use crate::tool::ProgressSink;
use crate::types::ToolCall;
use crate::validate::CompiledSchema;
use outcome::{Done, Stop};
use record::Flight;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tracing::Instrument;

/// The engine: a registry, a configuration and an event sink.
pub struct Engine {
    /// Swapped whole when upstream tools change; each turn keeps the one it started with.
    registry: std::sync::RwLock<Arc<Registry>>,
    config: EngineConfig,
    events: Arc<dyn EventSink>,
    /// Every background job, by session.
    jobs: Arc<crate::jobs::JobRegistry>,
    /// Whether a sink was set (events that cost work to build are skipped otherwise).
    listening: bool,
    hooks: Vec<Arc<dyn Hook>>,
    cache: ResultCache,
    narrowed: Mutex<HashMap<String, Arc<CompiledSchema>>>,
}

impl Engine {
    /// An engine over these tools (`[tools.NAME]` settings of the configuration applied).
    pub fn new(mut registry: Registry, config: EngineConfig) -> Self {
        registry.configure(&config.tools);
        Self {
            jobs: Arc::new(crate::jobs::JobRegistry::new(config.job_limits())),
            registry: std::sync::RwLock::new(Arc::new(registry)),
            config,
            events: Arc::new(NoEvents),
            listening: false,
            hooks: Vec::new(),
            cache: ResultCache::new(10_000),
            narrowed: Mutex::new(HashMap::new()),
        }
    }

    /// Runs these PreToolUse / PostToolUse hooks, in this order, for the tools they match.
    pub fn with_hooks(mut self, hooks: Vec<Arc<dyn Hook>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Sends events to `sink`.
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = sink;
        self.listening = true;
        self
    }

    /// Sends an event to the engine's sink (the agent loop's own events go the same way).
    pub fn emit(&self, event: &Event) {
        self.events.emit(event);
    }

    /// The tools, as they are now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the tools (upstream servers changed theirs). Turns already running keep the
    /// registry they started with; the next turn sees this one.
    pub fn set_registry(&self, mut registry: Registry) {
        registry.configure(&self.config.tools);
        *self.registry.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(registry);
    }

    /// Every background job of this engine, by session.
    pub fn jobs(&self) -> &Arc<crate::jobs::JobRegistry> {
        &self.jobs
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// One call through stages 2–13, outside any batch (the `call` command, the gateway).
    pub async fn run_call(&self, session: &Arc<Session>, call: ToolCall, options: TurnOptions) -> Outcome {
        let turn = self.start_turn(session, options);
        self.run_call_at(session, &turn, call, Instant::now()).await
    }

    /// One call inside its `execute_tool` span.
    async fn run_call_at(&self, session: &Arc<Session>, turn: &TurnState, call: ToolCall, queued: Instant) -> Outcome {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = tracing::field::Empty,
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.description = tracing::field::Empty,
            gen_ai.tool.type = "function",
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record("otel.name", format!("execute_tool {}", call.name).as_str());
            if let Some(e) = turn.registry.of_call(call.name.as_str()) {
                span.record("gen_ai.tool.description", e.tool().description());
            }
            if self.config.trace_content {
                // Traced content is redacted like the journal's.
                span.record(
                    "gen_ai.tool.call.arguments",
                    redact_value(&call.arguments_value()).to_string().as_str(),
                );
            }
        }
        let outcome = self
            .pipeline(session, turn, call, queued)
            .instrument(span.clone())
            .await;
        if let Some(entry) = outcome.entry() {
            if let Some(kind) = entry.error_kind {
                span.record("error.type", kind.as_str());
            }
            if self.config.trace_content && !span.is_disabled() {
                span.record(
                    "gen_ai.tool.call.result",
                    redact_value(&entry.content).to_string().as_str(),
                );
            }
        }
        outcome
    }

    /// Stages 2–13 for one call: the stages in order, then the record of what they returned.
    async fn pipeline(&self, session: &Arc<Session>, turn: &TurnState, call: ToolCall, queued: Instant) -> Outcome {
        self.events.emit(&Event::CallStarted {
            session_id: session.id.clone(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: if self.listening {
                redact_value(&call.arguments_value())
            } else {
                Value::Null
            },
            repair: call.repair.clone(),
        });
        let name = turn
            .registry
            .get(call.name.as_str())
            .map_or_else(|| provider_safe(call.name.as_str()), |e| e.provider_name().to_owned());
        let mut flight = Flight::new(call, name, queued);
        flight.announced = true;
        let result = self.stages(session, turn, &mut flight).await;
        self.record(session, turn, flight, result).await
    }

    /// Stages 2–12, top to bottom as DESIGN.md orders them; the first stage that ends the call
    /// says how, and nothing after it runs.
    async fn stages(&self, session: &Session, turn: &TurnState, f: &mut Flight) -> Result<Done, Stop> {
        stop_check(session, turn)?; // 2
        let entry = self.lookup(turn, &f.call.name)?; // 3
        let exposed = self.expose(entry, turn)?; // 4
        self.validate(&exposed, f)?; // 5
        self.take_slot(turn, entry, f)?; // 6 (the batch's loop detector ran before)
        self.job_slot(session, entry, f)?; // 6: the background jobs' caps
        self.permit(session, turn, entry, &exposed, f).await?; // 7, 8
        let output = self.run(session, turn, entry, &exposed.compiled, f).await?; // 9, 10
        let done = self.shape(session, entry, output, f).await?; // 11
        self.post_hooks(session, entry, done, f).await // 12
    }

    /// A call's progress sink: the event stream (when somebody listens) and the turn's own sink.
    fn progress_sink(&self, call: &ToolCall, turn: &TurnState) -> ProgressSink {
        if !self.listening && !turn.progress.is_set() {
            return ProgressSink::default();
        }
        let events = self.listening.then(|| self.events.clone());
        let forward = turn.progress.clone();
        let call_id = call.id.clone();
        ProgressSink::new(move |progress| {
            if let Some(events) = &events {
                events.emit(&Event::Progress {
                    call_id: call_id.clone(),
                    progress: progress.clone(),
                });
            }
            forward.report(progress);
        })
    }
}

/// Stage 2: a pending stop or kill, or a post hook that stopped the run, ends the call before
/// anything runs.
fn stop_check(session: &Session, turn: &TurnState) -> Result<(), Stop> {
    if session.stop_requested() {
        return Err(batch::never_started());
    }
    match turn.stop_message() {
        None => Ok(()),
        Some(message) => Err(Stop::Abort(
            AbortReason::PostHookStop,
            CallError::new(
                ErrorKind::Canceled,
                format!("The call was not run because a hook stopped the run: {message}"),
            ),
        )),
    }
}
