//! The dispatcher: the only place that knows the order of the stages. `run_turn` takes a model
//! answer and returns the messages to append; `run_call` takes one call through stages 2–13.

use crate::cache::{self, KeyParts, ResultCache};
use crate::config::{EngineConfig, MalformedPolicy};
use crate::error::{CallError, ErrorKind};
use crate::events::{Event, EventSink, NoEvents};
use crate::execute::{ExecFailure, ExecPolicy, ExecReport, execute};
use crate::formats::{self, Answer, CallEcho, Format, ToolResult, ToolView};
use crate::hooks::{self, Hook, HookDecision, HookEvent};
use crate::parse::{self, Malformed};
use crate::permit::{Answer as Approval, ApprovalRequest, Decision, Source, Verdict, decide_vetted, suggested_rule};
use crate::redact::{redact_text, redact_value};
use crate::registry::{Entry, Registry, provider_safe};
use crate::result::{json_size, normalize_empty, truncate};
use crate::rules::Rule;
use crate::session::Session;
use crate::store::JournalRow;
use crate::tool::{
    Assembly, CacheScope, CacheSpec, Category, ProgressSink, ToolContext, ToolOutput, ToolSpec, TurnView,
};
use crate::types::{CallId, ToolCall, ToolName, TurnId};
use crate::validate::CompiledSchema;
use crate::validate::ValidateOptions;
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{RwLock, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Why a call (and with it the loop) aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    /// A stop or kill.
    StoppedByUser,
    /// A malformed call under `malformed = "abort"`.
    MalformedCall,
    /// The consecutive-error cap was reached.
    ConsecutiveErrors,
    /// The loop detector tripped.
    LoopDetected,
    /// A post hook stopped the run.
    PostHookStop,
}

impl AbortReason {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoppedByUser => "stopped_by_user",
            Self::MalformedCall => "malformed_call",
            Self::ConsecutiveErrors => "consecutive_errors",
            Self::LoopDetected => "loop_detected",
            Self::PostHookStop => "post_hook_stop",
        }
    }
}

/// The outcome of one call.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The normal case: append `entry`.
    Recorded {
        /// The result the model sees.
        entry: ToolResult,
        /// Whether the call succeeded.
        success: bool,
        /// Whether the turn ends after this batch.
        end_turn: bool,
    },
    /// The tool asked for the turn to be re-run with this context; nothing is recorded.
    Restart {
        /// What to add to the model's context.
        context: Value,
    },
    /// The loop must stop. `entry` is the result the history gets if the conversation continues
    /// (a synthetic `canceled` for a killed or never-started call), so every call id keeps exactly
    /// one result.
    Abort {
        /// Why.
        reason: AbortReason,
        /// The call's result for the history.
        entry: ToolResult,
    },
}

impl Outcome {
    /// The history entry, if the outcome has one.
    pub fn entry(&self) -> Option<&ToolResult> {
        match self {
            Self::Recorded { entry, .. } | Self::Abort { entry, .. } => Some(entry),
            Self::Restart { .. } => None,
        }
    }
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The answer had no tool calls: it is the final answer.
    FinalAnswer,
    /// Results were recorded; call the model again.
    Continue,
    /// A terminal tool ran: the turn ends.
    EndTurn,
    /// A tool asked for the turn to be re-run with more context.
    Restart,
    /// The loop must stop.
    Aborted(AbortReason),
}

impl TurnStatus {
    /// The stable string (`continue`, `end_turn`, `stopped_by_user`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FinalAnswer => "final_answer",
            Self::Continue => "continue",
            Self::EndTurn => "end_turn",
            Self::Restart => "restart",
            Self::Aborted(r) => r.as_str(),
        }
    }
}

/// What a turn produced.
#[derive(Clone, Debug)]
pub struct TurnOutcome {
    /// The messages to append, in the answer's format: the assistant message, then the results.
    pub messages: Vec<Value>,
    /// Each call's outcome, in the model's order.
    pub outcomes: Vec<Outcome>,
    /// How the turn ended.
    pub status: TurnStatus,
    /// The context a `Restart` asked for.
    pub restart_context: Option<Value>,
    /// The message of a post hook that stopped the run.
    pub stop_message: Option<String>,
}

impl TurnOutcome {
    /// The results, in the model's order (one per call id, except after a restart).
    pub fn results(&self) -> impl Iterator<Item = &ToolResult> {
        self.outcomes.iter().filter_map(Outcome::entry)
    }
}

/// Per-turn settings.
#[derive(Clone, Debug, Default)]
pub struct TurnOptions {
    /// The agent loop's iteration.
    pub iteration: u32,
    /// The loop has passed its soft warning threshold (tools may wrap up).
    pub long_loop: bool,
    /// Deliberate mode: only these tools are exposed this turn.
    pub allowlist: Option<Vec<ToolName>>,
    /// The provider format of the turn (tools may depend on its capabilities).
    pub format: Option<Format>,
    /// The caller's own stop for this turn's calls (an MCP client cancelling its request, or
    /// disconnecting): like a session kill, for these calls only.
    pub cancel: Option<CancellationToken>,
    /// Where the tools' progress reports go besides the event stream (an MCP client's progress
    /// token, say).
    pub progress: ProgressSink,
}

/// State shared by the calls of one turn.
pub struct TurnState {
    id: TurnId,
    iteration: u32,
    long_loop: bool,
    format: Option<Format>,
    allowlist: Option<HashSet<ToolName>>,
    executed: Mutex<HashMap<ToolName, u32>>,
    /// Set when a post hook stopped the run: calls not yet started are not run.
    stopped: Mutex<Option<String>>,
    /// Turn-scoped cache entries; each runs its call once for concurrent identical calls.
    cache: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Value>>>>,
    /// The tools as they were when the turn started (an upstream refresh swaps the engine's).
    pub(crate) registry: Arc<Registry>,
    cancel: Option<CancellationToken>,
    progress: ProgressSink,
}

impl TurnState {
    /// A new turn over these tools.
    pub fn new(options: TurnOptions, registry: Arc<Registry>) -> Self {
        Self {
            registry,
            cancel: options.cancel,
            progress: options.progress,
            id: TurnId::generate(),
            iteration: options.iteration,
            long_loop: options.long_loop,
            format: options.format,
            allowlist: options.allowlist.map(|a| a.into_iter().collect()),
            executed: Mutex::new(HashMap::new()),
            stopped: Mutex::new(None),
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn stop(&self, message: String) {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(message);
    }

    fn stop_message(&self) -> Option<String> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn exposes(&self, name: &ToolName) -> bool {
        self.allowlist.as_ref().is_none_or(|a| a.contains(name))
    }
}

/// The engine: a registry, a configuration and an event sink.
pub struct Engine {
    /// Swapped whole when upstream tools change; each turn keeps the one it started with.
    registry: std::sync::RwLock<Arc<Registry>>,
    config: EngineConfig,
    events: Arc<dyn EventSink>,
    /// Whether a sink was set (events that cost work to build are skipped otherwise).
    listening: bool,
    hooks: Vec<Arc<dyn Hook>>,
    cache: ResultCache,
    narrowed: Mutex<HashMap<String, Arc<CompiledSchema>>>,
}

/// A tool as exposed this turn.
pub(crate) struct Exposed {
    description: Option<String>,
    pub(crate) compiled: Arc<CompiledSchema>,
}

impl Engine {
    /// An engine over these tools.
    pub fn new(registry: Registry, config: EngineConfig) -> Self {
        Self {
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

    fn hook_event(
        &self,
        session: &Session,
        call: &ToolCall,
        name: &str,
        event: &'static str,
        response: Option<Value>,
    ) -> HookEvent {
        HookEvent {
            session_id: session.id.to_string(),
            hook_event_name: event,
            tool_name: name.to_owned(),
            tool_input: call.arguments_value(),
            tool_use_id: call.id.to_string(),
            cwd: session.workspace_text.to_string(),
            tool_response: response,
        }
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

    /// Sends an event to the engine's sink (the agent loop's own events go the same way).
    pub fn emit(&self, event: &Event) {
        self.events.emit(event);
    }

    /// Sends events to `sink`.
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = sink;
        self.listening = true;
        self
    }

    /// The tools, as they are now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the tools (upstream servers changed theirs). Turns already running keep the
    /// registry they started with; the next turn sees this one.
    pub fn set_registry(&self, registry: Registry) {
        *self.registry.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(registry);
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The schemas of the tools exposed this turn, in a provider's format, sorted by name: the
    /// allowlist, feature flags and each tool's own assembly for this turn applied.
    pub fn tool_list(&self, format: Format, options: &TurnOptions) -> Value {
        let turn = TurnState::new(
            TurnOptions {
                format: options.format.or(Some(format)),
                ..options.clone()
            },
            self.registry(),
        );
        let exposed: Vec<(&Entry, Exposed)> = turn
            .registry
            .entries()
            .filter_map(|e| self.exposure(e, &turn).ok().map(|x| (e, x)))
            .collect();
        let views: Vec<ToolView<'_>> = exposed
            .iter()
            .map(|(e, x)| ToolView {
                name: e.provider_name(),
                description: x.description.as_deref().unwrap_or(e.tool().description()),
                parameters: x.compiled.schema(),
                output_schema: e.tool().output_schema(),
                annotations: e.tool().spec().annotations,
            })
            .collect();
        formats::tool_list(format, &views)
    }

    /// Stage 4 for one tool: the allowlist, its feature flag, and its assembly for this turn.
    pub(crate) fn exposure(&self, entry: &Entry, turn: &TurnState) -> Result<Exposed, String> {
        if !turn.exposes(entry.name()) {
            return Err("it is outside this turn's allowlist".into());
        }
        if let Some(flag) = &entry.tool().spec().feature
            && !self.config.features.contains(flag)
        {
            return Err(format!("the feature {flag:?} is off"));
        }
        let view = TurnView {
            format: turn.format,
            features: &self.config.features,
            iteration: turn.iteration,
            long_loop: turn.long_loop,
        };
        match entry.tool().assemble(&view) {
            Assembly::Hidden(reason) => Err(reason),
            Assembly::Unchanged => Ok(Exposed {
                description: None,
                compiled: entry.compiled()?,
            }),
            Assembly::Narrowed {
                description,
                parameters,
            } => Ok(Exposed {
                description,
                compiled: match parameters {
                    Some(schema) => self.compile_narrowed(&schema)?,
                    None => entry.compiled()?,
                },
            }),
        }
    }

    /// The provider-safe names of the tools exposed this turn, sorted.
    fn exposed_names(&self, turn: &TurnState) -> Vec<String> {
        turn.registry
            .entries()
            .filter(|e| self.exposure(e, turn).is_ok())
            .map(|e| e.provider_name().to_owned())
            .collect()
    }

    /// Narrowed schemas, compiled once and reused (keyed by their canonical JSON).
    fn compile_narrowed(&self, schema: &Value) -> Result<Arc<CompiledSchema>, String> {
        let mut key = String::new();
        cache::canonical_json(schema, &mut key);
        let mut compiled = self.narrowed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = compiled.get(&key) {
            return Ok(c.clone());
        }
        let c = Arc::new(CompiledSchema::compile(schema)?);
        if compiled.len() >= 1024 {
            compiled.clear();
        }
        compiled.insert(key, c.clone());
        Ok(c)
    }

    /// A turn's state: deliberate mode keeps tools that succeeded under it for a few more turns.
    pub(crate) fn start_turn(&self, session: &Session, mut options: TurnOptions) -> TurnState {
        let mut retained = session.retained.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(allow) = options.allowlist.as_mut() {
            allow.extend(retained.keys().cloned());
        }
        retained.retain(|_, turns| {
            *turns -= 1;
            *turns > 0
        });
        TurnState::new(options, self.registry())
    }

    /// Runs every call of a model answer and returns the messages to append.
    pub async fn run_turn(
        self: &Arc<Self>,
        session: &Arc<Session>,
        answer: &Answer,
        options: TurnOptions,
    ) -> TurnOutcome {
        let turn = Arc::new(self.start_turn(session, options));
        // Stage 1, for the whole batch.
        let parsed: Vec<Result<ToolCall, Malformed>> = answer
            .calls
            .iter()
            .map(|raw| parse::normalize(raw, &turn.registry, answer.cut_off))
            .collect();
        let echoes: Vec<CallEcho> = parsed.iter().map(|p| self.echo(p)).collect();
        let mut messages = formats::assistant_messages(answer, &echoes);
        if parsed.is_empty() {
            self.emit_messages(&messages);
            return TurnOutcome {
                messages,
                outcomes: Vec::new(),
                status: TurnStatus::FinalAnswer,
                restart_context: None,
                stop_message: None,
            };
        }
        let outcomes = self.run_parsed(session, &turn, parsed).await;
        let status = turn_status(&outcomes);
        let restart_context = outcomes.iter().find_map(|o| match o {
            Outcome::Restart { context } => Some(context.clone()),
            _ => None,
        });
        if status == TurnStatus::Restart {
            messages.clear();
        } else {
            let results: Vec<ToolResult> = outcomes.iter().filter_map(Outcome::entry).cloned().collect();
            messages.extend(formats::result_messages(answer.format, &results));
        }
        self.emit_messages(&messages);
        TurnOutcome {
            messages,
            outcomes,
            status,
            restart_context,
            stop_message: turn.stop_message(),
        }
    }

    fn emit_messages(&self, messages: &[Value]) {
        for m in messages {
            self.events.emit(&Event::MessageAdded { message: m.clone() });
        }
    }

    fn echo(&self, parsed: &Result<ToolCall, Malformed>) -> CallEcho {
        match parsed {
            Ok(call) => CallEcho {
                id: call.id.clone(),
                name: self.provider_name(&call.name),
                arguments: Some(call.arguments.clone()),
            },
            Err(m) => CallEcho {
                id: m.id.clone(),
                name: m.name.as_deref().map_or_else(|| "unknown".to_owned(), provider_safe),
                arguments: None,
            },
        }
    }

    fn provider_name(&self, name: &ToolName) -> String {
        self.registry()
            .get(name.as_str())
            .map_or_else(|| provider_safe(name.as_str()), |e| e.provider_name().to_owned())
    }

    /// Stages 2–13 for a batch of normalised calls, in the model's order.
    async fn run_parsed(
        self: &Arc<Self>,
        session: &Arc<Session>,
        turn: &Arc<TurnState>,
        parsed: Vec<Result<ToolCall, Malformed>>,
    ) -> Vec<Outcome> {
        let any_malformed = parsed.iter().any(Result::is_err);
        if any_malformed && self.config.malformed == MalformedPolicy::Abort {
            return parsed
                .into_iter()
                .map(|p| match p {
                    Err(m) => self.abort_with(AbortReason::MalformedCall, &m.id, m.name.as_deref().unwrap_or("unknown"), *m.error),
                    Ok(c) => self.abort_with(
                        AbortReason::MalformedCall,
                        &c.id,
                        &self.provider_name(&c.name),
                        CallError::new(ErrorKind::Canceled, "Not run: another call in this batch was malformed, so the batch was aborted. Reissue the calls."),
                    ),
                })
                .collect();
        }
        // Stage 2 for the whole batch: a pending stop aborts before anything runs.
        if session.stop_requested() {
            return parsed.iter().map(|p| self.never_started(p)).collect();
        }
        // Stage 6, batch part: the Nth identical batch is not run.
        let valid: Vec<&ToolCall> = parsed.iter().filter_map(|p| p.as_ref().ok()).collect();
        if !valid.is_empty() {
            let args: Vec<Value> = valid.iter().map(|c| c.arguments_value()).collect();
            let tripped = session
                .loop_detector
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(valid.iter().zip(&args).map(|(c, a)| (c.name.as_str(), a)));
            if tripped {
                let n = self.config.loop_threshold;
                return parsed
                    .iter()
                    .map(|p| {
                        let (id, name) = id_and_name(p);
                        self.abort_with(
                            AbortReason::LoopDetected,
                            id,
                            &self.provider_name(&name),
                            CallError::new(
                                ErrorKind::LoopDetected,
                                format!("The same tool calls were repeated {n} times in a row, so this batch was not run. Try a different approach."),
                            )
                            .with("repeats", n),
                        )
                    })
                    .collect();
            }
        }
        if parsed.len() == 1 {
            let queued = Instant::now();
            let p = parsed.into_iter().next();
            return match p {
                Some(Ok(call)) => vec![self.run_call_at(session, turn, call, queued).await],
                Some(Err(m)) => vec![self.malformed(session, m)],
                None => Vec::new(),
            };
        }
        self.schedule(session, turn, parsed).await
    }

    /// Runs a batch: calls start in order; read-only calls share a read lock (bounded), every other
    /// call takes the write lock, so it waits for all earlier calls and blocks all later ones.
    async fn schedule(
        self: &Arc<Self>,
        session: &Arc<Session>,
        turn: &Arc<TurnState>,
        parsed: Vec<Result<ToolCall, Malformed>>,
    ) -> Vec<Outcome> {
        let lock = Arc::new(RwLock::new(()));
        let readers = Arc::new(Semaphore::new(self.config.max_parallel.max(1)));
        let mut set = JoinSet::new();
        let mut slots: Vec<Option<Outcome>> = vec![None; parsed.len()];
        let mut fallback: Vec<(CallId, String)> = Vec::with_capacity(parsed.len());
        for (index, p) in parsed.into_iter().enumerate() {
            let (id, name) = id_and_name(&p);
            fallback.push((id.clone(), self.provider_name(&name)));
            let call = match p {
                Ok(call) => call,
                Err(m) => {
                    slots[index] = Some(self.malformed(session, m));
                    continue;
                }
            };
            let queued = Instant::now();
            let read_only = turn
                .registry
                .get(call.name.as_str())
                .is_none_or(|e| e.tool().spec().annotations.read_only);
            let engine = Arc::clone(self);
            let session = Arc::clone(session);
            let turn = Arc::clone(turn);
            if read_only {
                let permit = readers.clone().acquire_owned().await;
                let guard = lock.clone().read_owned().await;
                set.spawn(async move {
                    let outcome = engine.run_call_at(&session, &turn, call, queued).await;
                    drop((guard, permit));
                    (index, outcome)
                });
            } else {
                let guard = lock.clone().write_owned().await;
                set.spawn(async move {
                    let outcome = engine.run_call_at(&session, &turn, call, queued).await;
                    drop(guard);
                    (index, outcome)
                });
            }
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((index, outcome)) => slots[index] = Some(outcome),
                Err(e) => tracing::error!(error = %e, "a tool call task failed"),
            }
        }
        // A call whose task panicked still gets exactly one result.
        slots
            .into_iter()
            .zip(fallback)
            .map(|(slot, (id, name))| {
                slot.unwrap_or_else(|| {
                    let error = CallError::new(ErrorKind::ExecutionFailed, "The tool crashed while running this call.");
                    self.recorded_failure(session, &id, &name, error)
                })
            })
            .collect()
    }

    /// One call through stages 2–13, outside any batch (the `call` command, the gateway).
    pub async fn run_call(&self, session: &Arc<Session>, call: ToolCall, options: TurnOptions) -> Outcome {
        let turn = self.start_turn(session, options);
        self.run_call_at(session, &turn, call, Instant::now()).await
    }

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
            if let Some(e) = turn.registry.get(call.name.as_str()) {
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

    async fn pipeline(&self, session: &Arc<Session>, turn: &TurnState, call: ToolCall, queued: Instant) -> Outcome {
        self.events.emit(&Event::CallStarted {
            session_id: session.id.clone(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: if self.listening {
                crate::redact::redact_value(&call.arguments_value())
            } else {
                Value::Null
            },
            repair: call.repair.clone(),
        });
        let mut stats = Stats {
            queued,
            ..Stats::default()
        };
        // 2. stop check
        if session.stop_requested() {
            let outcome = self.never_started(&Ok(call.clone()));
            self.finish(&call, &outcome, &stats);
            return outcome;
        }
        if let Some(message) = turn.stop_message() {
            let error = CallError::new(
                ErrorKind::Canceled,
                format!("The call was not run because a hook stopped the run: {message}"),
            );
            let outcome = self.abort_with(
                AbortReason::PostHookStop,
                &call.id,
                &self.provider_name(&call.name),
                error,
            );
            self.finish(&call, &outcome, &stats);
            return outcome;
        }
        // 3. lookup
        let Some(entry) = turn.registry.get(call.name.as_str()) else {
            let exposed = self.exposed_names(turn);
            let suggestions = Registry::suggestions(call.name.as_str(), exposed.iter().map(String::as_str));
            let mut message = format!("There is no tool named {:?}.", call.name.as_str());
            if !suggestions.is_empty() {
                message.push_str(&format!(" Did you mean {}?", quote_list(&suggestions)));
            }
            let error = CallError::new(ErrorKind::UnknownTool, message).with("suggestions", suggestions);
            let outcome = self.recorded_failure(session, &call.id, &provider_safe(call.name.as_str()), error);
            self.finish(&call, &outcome, &stats);
            return outcome;
        };
        let outcome = self.pipeline_known(session, turn, &call, entry, &mut stats).await;
        if let Some(mut row) = stats.journal.take() {
            let kind = match &outcome {
                Outcome::Recorded { success: true, .. } | Outcome::Restart { .. } => None,
                other => other.entry().and_then(|e| e.error_kind),
            };
            row.state = match kind {
                None => "success",
                Some(ErrorKind::Canceled) => "canceled",
                Some(_) => "error",
            }
            .into();
            row.error_type = kind.map(|k| k.as_str().into());
            row.may_have_run = row.state == "canceled" && stats.attempts > 0;
            row.finished_at = Some(std::time::SystemTime::now());
            row.attempts = stats.attempts;
            row.waiting_ms = stats.waiting.as_millis() as u64;
            row.running_ms = stats.running.as_millis() as u64;
            if let Err(e) = session.store.journal_finish(row).await {
                tracing::error!(error = %e, call_id = %call.id, "could not close the journal row");
            }
        }
        self.finish(&call, &outcome, &stats);
        outcome
    }

    async fn pipeline_known(
        &self,
        session: &Arc<Session>,
        turn: &TurnState,
        call: &ToolCall,
        entry: &Entry,
        stats: &mut Stats,
    ) -> Outcome {
        let tool = entry.tool();
        let spec = tool.spec();
        let name = entry.provider_name();
        let fail = |error: CallError| self.recorded_failure(session, &call.id, name, error);
        // 4. exposure
        let exposed = match self.exposure(entry, turn) {
            Ok(exposed) => exposed,
            Err(why) => {
                let allowed = self.exposed_names(turn);
                return fail(
                    CallError::new(
                        ErrorKind::NotAvailable,
                        format!(
                            "The tool {name:?} is not available this turn ({why}). Use one of: {}.",
                            allowed.join(", ")
                        ),
                    )
                    .with("allowed_tools", allowed),
                );
            }
        };
        // 5. validate, against this turn's assembled schema
        let compiled = exposed.compiled;
        let mut args = call.arguments_value();
        match compiled.check(&mut args, ValidateOptions::default()) {
            Ok(warnings) if !warnings.is_empty() => {
                tracing::warn!(call_id = %call.id, ?warnings, "arguments adjusted");
                self.events.emit(&Event::ArgumentsAdjusted {
                    call_id: call.id.clone(),
                    warnings,
                });
            }
            Ok(_) => {}
            Err(error) => return fail(error),
        }
        let call = &ToolCall {
            arguments: match &args {
                Value::Object(m) => m.clone(),
                _ => call.arguments.clone(),
            },
            ..call.clone()
        };
        // 6. guards (per call): the per-turn cap is checked and counted where the call reaches execution.
        // From here on the call has a journal row, written when it ends (or, for a tool that is not
        // read-only, committed before it runs).
        stats.journal = Some(JournalRow {
            session_id: session.id.clone(),
            call_id: call.id.clone(),
            turn_id: turn.id.clone(),
            tool: entry.name().clone(),
            arguments_hash: crate::guard::canonical_hash(&args),
            arguments: self.config.audit_arguments.then(|| audit_arguments(&args)),
            repaired: call.repair.is_some(),
            raw: call.repair.as_ref().map(|r| audit_text(&r.raw)),
            state: "started".into(),
            started_at: Some(std::time::SystemTime::now()),
            ..JournalRow::default()
        });
        // 6 (continued). the tool's own refusals, then 7. permission, on the subject the tool resolved
        let decide_now = |call: &ToolCall| {
            let vetted = tool.vet(&session.workspace, &call.arguments_value());
            let grants = session.grants.read().unwrap_or_else(|p| p.into_inner());
            decide_vetted(call, spec, &session.policy, &grants, &vetted)
        };
        let mut decision = decide_now(call);
        let mut call = call.clone();
        let mut context: Vec<String> = Vec::new();
        // 8. pre hooks (a rule's deny stands: hooks do not run), then approval
        if decision.verdict != Verdict::Deny && !self.hooks.is_empty() {
            let event = self.hook_event(session, &call, name, "PreToolUse", None);
            let merged = hooks::run_pre(&self.hooks, &event).await;
            context = merged.additional_context;
            if let Some(row) = stats.journal.as_mut()
                && (merged.decision.is_some() || merged.updated_input.is_some())
            {
                row.hooks = Some(serde_json::json!({"pre": {
                    "decision": merged.decision.as_ref().map(|(d, _)| d.as_str()),
                    "reason": merged.decision.as_ref().map(|(_, r)| redact_text(r).into_owned()),
                    "rewrote": merged.updated_input.is_some(),
                }}));
            }
            if let Some(input) = merged.updated_input {
                // Rewritten input is validated against this turn's schema, then decided again.
                let mut rewritten = Value::Object(input);
                if let Err(mut error) = compiled.check(&mut rewritten, ValidateOptions::default()) {
                    error.message = format!(
                        "A PreToolUse hook rewrote the arguments, and the result is invalid: {}",
                        error.message
                    );
                    return fail(error);
                }
                if let Value::Object(m) = rewritten {
                    call.arguments = m;
                }
                args = call.arguments_value();
                if let Some(row) = stats.journal.as_mut() {
                    row.arguments_hash = crate::guard::canonical_hash(&args);
                    row.arguments = self.config.audit_arguments.then(|| audit_arguments(&args));
                }
                decision = decide_now(&call);
            }
            match merged.decision {
                Some((HookDecision::Deny, reason)) if decision.verdict != Verdict::Deny => {
                    decision = Decision {
                        verdict: Verdict::Deny,
                        reason,
                        source: Source::PreToolUseHookDeny,
                    };
                }
                Some((HookDecision::Ask, reason)) if decision.verdict == Verdict::Allow => {
                    decision = Decision {
                        verdict: Verdict::Ask,
                        reason,
                        source: Source::PreToolUseHookAsk,
                    };
                }
                Some((HookDecision::Allow, reason))
                    if decision.verdict == Verdict::Ask && decision.source == Source::DefaultAsk =>
                {
                    decision = Decision {
                        verdict: Verdict::Allow,
                        reason,
                        source: Source::PreToolUseHookAllow,
                    };
                }
                _ => {}
            }
        }
        let call = &call;
        let (allowed, source, reason) = match decision.verdict {
            Verdict::Allow => (true, decision.source, decision.reason),
            Verdict::Deny => (false, decision.source, decision.reason),
            Verdict::Ask => self.ask(session, turn, call, spec, decision.reason).await,
        };
        let decision_str = match (allowed, source) {
            (true, _) => "allow",
            (false, Source::ContextCanceled) => "canceled",
            (false, _) => "deny",
        };
        self.events.emit(&Event::Verdict {
            call_id: call.id.clone(),
            tool: entry.name().clone(),
            decision: decision_str,
            source: source.as_str(),
            reason: reason.clone(),
        });
        for hook in self.hooks.iter().filter(|h| h.matches(name)) {
            hook.on_tool_approval_decision(call.id.as_str(), name, decision_str, source.as_str())
                .await;
        }
        tracing::debug!(call_id = %call.id, decision = decision_str, source = source.as_str(), "permission verdict");
        if let Some(row) = stats.journal.as_mut() {
            row.decision = Some(decision_str.into());
            row.source = Some(source.as_str().into());
        }
        if !allowed {
            return match source {
                Source::ContextCanceled => self.abort_with(
                    AbortReason::StoppedByUser,
                    &call.id,
                    name,
                    CallError::new(ErrorKind::Canceled, "The call was canceled by the user before it ran."),
                ),
                Source::BuiltinDeny => fail(
                    CallError::new(ErrorKind::PermissionDenied, format!("{name:?} refuses this call before it runs: {reason}."))
                        .with("source", source.as_str()),
                ),
                Source::PreToolUseHookDeny => fail(
                    CallError::new(ErrorKind::HookDenied, format!("A hook refused this call: {reason}"))
                        .with("source", source.as_str()),
                ),
                Source::UserRejected => fail(
                    CallError::new(ErrorKind::RejectedByUser, format!("The user rejected this call: {reason}")).with("source", source.as_str()),
                ),
                Source::NonInteractiveDeny => fail(
                    CallError::new(
                        ErrorKind::PermissionDenied,
                        format!(
                            "Calling {name:?} needs approval and nobody can approve it here; the user can allow it with --yes, --yolo or an allow rule for {name:?}."
                        ),
                    )
                    .with("source", source.as_str()),
                ),
                _ => fail(
                    CallError::new(ErrorKind::PermissionDenied, format!("Calling {name:?} is not permitted: {reason}."))
                        .with("source", source.as_str()),
                ),
            };
        }
        // 6 (continued). per-turn cap, counted at execution
        let cap = spec.max_per_turn.or(match spec.category {
            Category::Dangerous => Some(self.config.dangerous_max_per_turn),
            _ => None,
        });
        if let Some(cap) = cap {
            let mut executed = turn.executed.lock().unwrap_or_else(|p| p.into_inner());
            let n = executed.entry(entry.name().clone()).or_insert(0);
            if *n >= cap {
                drop(executed);
                return fail(
                    CallError::new(
                        ErrorKind::RateLimited,
                        format!("{name:?} may run at most {cap} time(s) per turn; call it again in a later turn."),
                    )
                    .with("max_per_turn", cap),
                );
            }
            *n += 1;
        }
        // The journal row: committed before a tool that is not read-only runs, and a call id
        // the journal already holds is never run a second time.
        if !spec.annotations.read_only
            && let Some(row) = stats.journal.as_ref()
        {
            match session.store.journal_begin(row).await {
                Ok(true) => {}
                Ok(false) => {
                    // The row already there is the call's record; this refusal writes none.
                    stats.journal = None;
                    return fail(CallError::new(
                        ErrorKind::ExecutionFailed,
                        format!(
                            "The call id {} already ran in this session; a call is never run twice. Issue a new call.",
                            call.id
                        ),
                    ));
                }
                Err(e) => {
                    stats.journal = None;
                    return fail(CallError::new(
                        ErrorKind::ExecutionFailed,
                        format!("The call was not run: {e}."),
                    ));
                }
            }
        }
        // 10. execute (inside stage 9 when the tool is cacheable)
        let (kill, _linked) = call_kill(session, turn);
        let ctx = ToolContext {
            session_id: session.id.clone(),
            turn_id: turn.id.clone(),
            iteration: turn.iteration,
            long_loop: turn.long_loop,
            cancel: kill.child_token(),
            workspace: session.workspace.clone(),
            principal: session.principal.clone(),
            progress: self.progress_sink(call, turn),
            store: session.store.clone(),
        };
        let policy = ExecPolicy {
            timeout: spec.timeout.unwrap_or(Duration::from_millis(self.config.timeout_ms)),
            deadline: spec.deadline.unwrap_or(Duration::from_millis(self.config.deadline_ms)),
            retry: spec.retry.unwrap_or_else(|| self.config.retry()),
            retry_allowed: spec.retry_allowed(),
        };
        stats.waiting = stats.queued.elapsed();
        let run = || {
            execute(
                tool.as_ref(),
                &ctx,
                &args,
                policy,
                &kill,
                self.events.as_ref(),
                &call.id,
            )
        };
        // 9. cache: only for cacheable tools that are read-only or idempotent
        let report = match spec.cache.filter(|_| spec.retry_allowed()) {
            None => run().await,
            Some(plan) => {
                let key = cache::key(&KeyParts {
                    tool: entry.name().as_str(),
                    schema_hash: compiled.hash(),
                    args: &args,
                    workspace: &session.workspace_text,
                    principal: session.principal.as_str(),
                    scope: plan.scope,
                    session: session.id.as_str(),
                    turn: turn.id.as_str(),
                });
                let (report, hit) = self.cached(session, turn, plan, key, run).await;
                if let Some(row) = stats.journal.as_mut() {
                    row.cache_hit = hit;
                }
                stats.cache_hit = hit;
                report
            }
        };
        stats.attempts = report.attempts;
        stats.running = report.running;
        let output = match report.result {
            Ok(output) => output,
            Err(ExecFailure::Killed) => {
                return self.abort_with(
                    AbortReason::StoppedByUser,
                    &call.id,
                    name,
                    CallError::new(
                        ErrorKind::Canceled,
                        "The call was canceled by the user while it ran; its partial result was discarded.",
                    ),
                );
            }
            Err(ExecFailure::Timeout { limit }) => {
                return fail(
                    CallError::new(
                        ErrorKind::Timeout,
                        format!(
                            "The tool did not finish within {} ms and was stopped.",
                            limit.as_millis()
                        ),
                    )
                    .with("attempts", report.attempts)
                    .with("timeout_ms", limit.as_millis() as u64),
                );
            }
            Err(ExecFailure::Failed(e)) => {
                return fail(
                    CallError::new(ErrorKind::ExecutionFailed, e.to_string())
                        .with("attempts", report.attempts)
                        .with("retryable", e.is_retryable()),
                );
            }
        };
        if let Some(context) = output.restart {
            return Outcome::Restart { context };
        }
        // 11. result
        let mut structured = false;
        match entry.compiled_output() {
            Some(Ok(compiled)) if !compiled.is_valid(&output.content) => {
                let violations = compiled.violations(&output.content);
                return fail(
                    CallError::new(
                        ErrorKind::ResultInvalid,
                        "The tool returned a result that does not match its output schema.",
                    )
                    .with("errors", serde_json::to_value(violations).unwrap_or(Value::Null)),
                );
            }
            Some(Err(message)) => return fail(CallError::new(ErrorKind::ResultInvalid, message)),
            Some(Ok(_)) => structured = true,
            None => {}
        }
        let content = normalize_empty(output.content);
        let budget = spec.budget.unwrap_or(self.config.budget_bytes);
        let size = json_size(&content);
        let content = if size > budget {
            let full = Arc::new(content);
            let handle = session.store.put(&session.id, full.clone(), size).await;
            let t = truncate(&full, budget, Some(&handle));
            stats.truncated = t.truncated;
            structured &= !t.truncated;
            t.value
        } else {
            content
        };
        // 12. post hooks
        let mut content = content;
        let mut stop = None;
        if !self.hooks.is_empty() {
            let event = self.hook_event(session, call, name, "PostToolUse", Some(content.clone()));
            let merged = hooks::run_post(&self.hooks, &event).await;
            if let Some(row) = stats.journal.as_mut()
                && (merged.replacement.is_some() || merged.stop.is_some())
            {
                let post = serde_json::json!({
                    "replaced": merged.replacement.is_some(),
                    "stop": merged.stop.as_deref().map(|m| redact_text(m).into_owned()),
                });
                match row.hooks.as_mut().and_then(Value::as_object_mut) {
                    Some(hooks) => {
                        hooks.insert("post".into(), post);
                    }
                    None => row.hooks = Some(serde_json::json!({ "post": post })),
                }
            }
            if let Some(replacement) = merged.replacement {
                structured = false;
                content = truncate(&normalize_empty(replacement), budget, None).value;
            }
            context.extend(merged.additional_context);
            stop = merged.stop;
        }
        if !context.is_empty() {
            structured = false;
            content = with_context(content, context.join("\n"));
        }
        // 13. record
        session.consecutive_errors.store(0, Ordering::SeqCst);
        if turn.allowlist.is_some() && self.config.deliberate_retain_turns > 0 {
            // "Do it again" works: the tool stays exposed for the next turns.
            session
                .retained
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(entry.name().clone(), self.config.deliberate_retain_turns);
        }
        let entry = ToolResult {
            call_id: call.id.clone(),
            name: name.to_owned(),
            content,
            is_error: false,
            error_kind: None,
            structured,
        };
        if let Some(message) = stop {
            // The rest of the batch gets synthetic results; the loop ends with the hook's message.
            turn.stop(message);
            return Outcome::Abort {
                reason: AbortReason::PostHookStop,
                entry,
            };
        }
        Outcome::Recorded {
            entry,
            success: true,
            end_turn: spec.category == Category::Terminal || output.end_turn,
        }
    }

    /// Stage 9 around stage 10: answers from the cache, or runs once and stores a success.
    async fn cached<F, Fut>(
        &self,
        session: &Session,
        turn: &TurnState,
        plan: CacheSpec,
        key: String,
        run: F,
    ) -> (ExecReport, bool)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ExecReport>,
    {
        let hit = |content: Value| ExecReport {
            result: Ok(ToolOutput::json(content)),
            attempts: 0,
            running: Duration::ZERO,
        };
        if plan.scope == CacheScope::Persistent {
            if let Ok(Some(content)) = session.store.cache_get(&key).await {
                return (hit(content), true);
            }
            let report = run().await;
            if let Some(content) = cacheable(&report)
                && let Err(e) = session.store.cache_put(&key, &content, plan.ttl).await
            {
                tracing::warn!(error = %e, "could not store the cache entry");
            }
            return (report, false);
        }
        // The report of a run that happened here, so a miss is reported as what it was.
        let mut ran: Option<ExecReport> = None;
        // A session entry also goes to a durable store, so the session's other processes share it.
        let shared = (plan.scope == CacheScope::Session && session.store.durable()).then(|| key.clone());
        let run_once = async {
            if let Some(key) = &shared
                && let Ok(Some(content)) = session.store.cache_get(key).await
            {
                return Ok(content);
            }
            let report = run().await;
            let cacheable = cacheable(&report);
            if let (Some(key), Some(content)) = (&shared, &cacheable)
                && let Err(e) = session.store.cache_put(key, content, plan.ttl).await
            {
                tracing::warn!(error = %e, "could not store the cache entry");
            }
            ran = Some(report.clone());
            cacheable.ok_or(report)
        };
        let outcome = if plan.scope == CacheScope::Turn {
            // Turn entries live and die with the turn.
            let cell = turn
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key)
                .or_default()
                .clone();
            cell.get_or_try_init(|| run_once).await.cloned().map_err(Arc::new)
        } else {
            self.cache
                .get_or_run(key, plan.ttl, run_once)
                .await
                .map(|cached| cached.content.clone())
        };
        match (outcome, ran) {
            (_, Some(report)) => (report, false),
            (Ok(content), None) => (hit(content), true),
            (Err(report), None) => ((*report).clone(), false),
        }
    }

    /// Stage 8's approval: asks the session's approver (one ask at a time), within the timeout,
    /// raced with a kill.
    async fn ask(
        &self,
        session: &Arc<Session>,
        turn: &TurnState,
        call: &ToolCall,
        spec: &ToolSpec,
        reason: String,
    ) -> (bool, Source, String) {
        let subject = spec.subject.argument();
        let (kill, _linked) = call_kill(session, turn);
        let request = ApprovalRequest {
            call: call.clone(),
            subject: subject.and_then(|key| call.arguments.get(key)).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            reason: reason.clone(),
            suggested_rule: suggested_rule(call.name.as_str(), spec, &call.arguments),
        };
        let timeout = Duration::from_millis(self.config.approval_timeout_ms);
        let answer = tokio::select! {
            biased;
            _ = kill.cancelled() => return (false, Source::ContextCanceled, "the session was stopped while the call waited for approval".into()),
            answer = async {
                let _one_at_a_time = session.asking.lock().await;
                tokio::time::timeout(timeout, session.approver.approve(&request)).await
            } => answer,
        };
        match answer {
            Err(_) => (
                false,
                Source::UserRejected,
                format!("nobody approved it within {} ms", timeout.as_millis()),
            ),
            Ok(Approval::ApproveOnce) => (true, Source::UserApproved, "approved once".into()),
            Ok(Approval::ApproveSession) => {
                // Calls like this one: its exact subject, or the tool when it has none.
                let text = match request.subject.as_deref() {
                    Some(subject) if !subject.contains([')', '\n']) => format!("{}({subject})", call.name),
                    _ => call.name.to_string(),
                };
                match Rule::parse(&text) {
                    Ok(rule) => session.grant(rule).await,
                    Err(e) => tracing::warn!(error = %e, "could not record the session grant"),
                }
                (true, Source::UserApprovedSession, "approved for the session".into())
            }
            Ok(Approval::ApproveTool) => {
                if let Ok(rule) = Rule::parse(call.name.as_str()) {
                    session.grant(rule).await;
                }
                (true, Source::UserApprovedTool, "tool approved for the session".into())
            }
            Ok(Approval::ApproveRule(text)) => match Rule::parse(&text) {
                Ok(rule) if rule.names_tool(call.name.as_str()) => {
                    session.grant(rule).await;
                    (true, Source::UserApprovedRule, format!("approved by the rule {text}"))
                }
                _ => (
                    false,
                    Source::UserRejected,
                    format!("the rule {text:?} does not cover this call"),
                ),
            },
            Ok(Approval::Reject(why)) => (
                false,
                Source::UserRejected,
                why.unwrap_or_else(|| "no reason given".into()),
            ),
            Ok(Approval::Unavailable) => (false, Source::NonInteractiveDeny, reason),
        }
    }

    fn malformed(&self, session: &Arc<Session>, m: Malformed) -> Outcome {
        let name = m.name.as_deref().map_or_else(|| "unknown".to_owned(), provider_safe);
        self.recorded_failure(session, &m.id, &name, *m.error)
    }

    /// A failed call's entry; the consecutive-error cap turns the Nth into an abort.
    fn recorded_failure(&self, session: &Arc<Session>, id: &CallId, name: &str, error: CallError) -> Outcome {
        let entry = error_entry(id, name, &error);
        let failures = session.consecutive_errors.fetch_add(1, Ordering::SeqCst) + 1;
        if self.config.max_consecutive_errors > 0 && failures >= self.config.max_consecutive_errors {
            session.consecutive_errors.store(0, Ordering::SeqCst);
            return Outcome::Abort {
                reason: AbortReason::ConsecutiveErrors,
                entry,
            };
        }
        Outcome::Recorded {
            entry,
            success: false,
            end_turn: false,
        }
    }

    fn abort_with(&self, reason: AbortReason, id: &CallId, name: &str, error: CallError) -> Outcome {
        Outcome::Abort {
            reason,
            entry: error_entry(id, name, &error),
        }
    }

    fn never_started(&self, p: &Result<ToolCall, Malformed>) -> Outcome {
        let (id, name) = id_and_name(p);
        self.abort_with(
            AbortReason::StoppedByUser,
            id,
            &self.provider_name(&name),
            CallError::new(
                ErrorKind::Canceled,
                "The call was not run because the user stopped the turn.",
            ),
        )
    }

    fn finish(&self, call: &ToolCall, outcome: &Outcome, stats: &Stats) {
        let (success, error_type) = match outcome {
            Outcome::Recorded { success, entry, .. } => (*success, entry.error_kind.map(ErrorKind::as_str)),
            Outcome::Restart { .. } => (true, None),
            Outcome::Abort { entry, .. } => (false, entry.error_kind.map(ErrorKind::as_str)),
        };
        let total = stats.queued.elapsed();
        let running = stats.running;
        let waiting = if stats.attempts > 0 { stats.waiting } else { total };
        tracing::info!(
            tool = %call.name,
            call_id = %call.id,
            success,
            error_type,
            attempts = stats.attempts,
            duration_ms = total.as_secs_f64() * 1e3,
            waiting_ms = waiting.as_secs_f64() * 1e3,
            running_ms = running.as_secs_f64() * 1e3,
            "tool call finished"
        );
        self.events.emit(&Event::CallFinished {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            success,
            error_type,
            attempts: stats.attempts,
            duration_ms: total.as_millis() as u64,
            waiting_ms: waiting.as_millis() as u64,
            running_ms: running.as_millis() as u64,
            truncated: stats.truncated,
            cache_hit: stats.cache_hit,
        });
    }
}

#[derive(Clone)]
struct Stats {
    queued: Instant,
    waiting: Duration,
    running: Duration,
    attempts: u32,
    truncated: bool,
    cache_hit: bool,
    /// The journal row, once the call passed the guards.
    journal: Option<JournalRow>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            queued: Instant::now(),
            waiting: Duration::ZERO,
            running: Duration::ZERO,
            attempts: 0,
            truncated: false,
            cache_hit: false,
            journal: None,
        }
    }
}

fn id_and_name(p: &Result<ToolCall, Malformed>) -> (&CallId, ToolName) {
    match p {
        Ok(c) => (&c.id, c.name.clone()),
        Err(m) => (&m.id, ToolName::new(m.name.as_deref().unwrap_or("unknown"))),
    }
}

/// The token that stops a call: the session's kill, joined by the caller's own stop when the
/// turn has one. The guard ends the link when the call is done.
fn call_kill(session: &Session, turn: &TurnState) -> (CancellationToken, Option<tokio_util::sync::DropGuard>) {
    let kill = session.kill_token();
    let Some(own) = turn.cancel.clone() else {
        return (kill, None);
    };
    let both = kill.child_token();
    if own.is_cancelled() {
        both.cancel();
        return (both, None);
    }
    let link = both.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = own.cancelled() => link.cancel(),
            _ = link.cancelled() => {}
        }
    });
    (both.clone(), Some(both.drop_guard()))
}

fn error_entry(id: &CallId, name: &str, error: &CallError) -> ToolResult {
    ToolResult {
        call_id: id.clone(),
        name: name.to_owned(),
        content: error.to_json(),
        is_error: true,
        error_kind: Some(error.kind),
        structured: false,
    }
}

/// Arguments as the journal keeps them: secrets redacted, cut structurally to
/// [`AUDIT_BYTES`] (the row's hash covers them whole).
fn audit_arguments(args: &Value) -> Value {
    let redacted = redact_value(args);
    if json_size(&redacted) <= AUDIT_BYTES {
        return redacted;
    }
    truncate(&redacted, AUDIT_BYTES, None).value
}

/// Raw call text as the journal keeps it: redacted, at most [`AUDIT_BYTES`] on a char boundary.
fn audit_text(raw: &str) -> String {
    let redacted = redact_text(raw);
    if redacted.len() <= AUDIT_BYTES {
        return redacted.into_owned();
    }
    let mut end = AUDIT_BYTES;
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} bytes cut]", &redacted[..end], redacted.len() - end)
}

/// The most of a call's arguments (and raw text) one journal row keeps.
pub const AUDIT_BYTES: usize = 8 << 10;

/// What a run leaves in the cache: a success's untruncated content; failures and restarts never.
fn cacheable(report: &ExecReport) -> Option<Value> {
    match &report.result {
        Ok(output) if output.restart.is_none() => Some(output.content.clone()),
        _ => None,
    }
}

/// Adds hook context to a result: beside the keys of an object, or around anything else.
fn with_context(content: Value, context: String) -> Value {
    match content {
        Value::Object(mut map) => {
            map.insert("additional_context".into(), Value::String(context));
            Value::Object(map)
        }
        other => serde_json::json!({"result": other, "additional_context": context}),
    }
}

fn quote_list(names: &[String]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// The turn's status from its calls' outcomes: the first abort in the model's order wins, then a
/// restart, then a terminal tool.
pub fn turn_status(outcomes: &[Outcome]) -> TurnStatus {
    if let Some(reason) = outcomes.iter().find_map(|o| match o {
        Outcome::Abort { reason, .. } => Some(*reason),
        _ => None,
    }) {
        return TurnStatus::Aborted(reason);
    }
    if outcomes.iter().any(|o| matches!(o, Outcome::Restart { .. })) {
        return TurnStatus::Restart;
    }
    if outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Recorded { end_turn: true, .. }))
    {
        return TurnStatus::EndTurn;
    }
    TurnStatus::Continue
}
