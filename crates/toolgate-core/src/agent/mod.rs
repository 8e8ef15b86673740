//! The agent loop: ask the model with the tools exposed this turn, run the calls of its answer,
//! append the assistant message and the results, and repeat until one of the end statuses.
//!
//! The conversation is kept in the model's own wire format (the messages `run_turn` returns), so
//! what the model is sent is exactly what a provider expects, with one result per call id on
//! every path — stops and kills included.

use crate::dispatch::{Engine, Outcome, TurnOptions, TurnStatus};
use crate::events::Event;
use crate::formats::{self, Answer, Format, RawArguments};
use crate::session::Session;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod status;
use status::abort_status;
pub use status::{AgentRun, AgentStatus};

/// What the model is asked in one iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The conversation's wire format (the model's).
    pub format: Format,
    /// The system prompt, if any.
    pub system: Option<String>,
    /// The conversation so far, in `format`.
    pub messages: Vec<Value>,
    /// The tools exposed this turn, listed in `format` (an empty array or string: no tools).
    pub tools: Value,
    /// A tool chose this model for this turn (a model name of the same provider).
    pub model: Option<String>,
    /// The loop's iteration (1-based).
    pub iteration: u32,
}

impl ModelRequest {
    /// Whether tools are offered.
    pub fn has_tools(&self) -> bool {
        match &self.tools {
            Value::Array(a) => !a.is_empty(),
            Value::String(s) => !s.is_empty(),
            _ => false,
        }
    }
}

/// Why a model call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelErrorKind {
    /// Missing or refused credentials.
    Auth,
    /// 429 after the retries.
    RateLimited,
    /// 5xx after the retries.
    Server,
    /// The provider refused the request (4xx).
    BadRequest,
    /// The connection failed or dropped.
    Network,
    /// The answer could not be read.
    InvalidResponse,
    /// A replayed conversation diverged from its cassette, or the cassette ran out.
    Replay,
    /// The call was cancelled (a kill).
    Canceled,
    /// The model is misconfigured (unknown provider, bad base URL).
    Config,
}

impl ModelErrorKind {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::RateLimited => "rate_limited",
            Self::Server => "server_error",
            Self::BadRequest => "bad_request",
            Self::Network => "network",
            Self::InvalidResponse => "invalid_response",
            Self::Replay => "replay_mismatch",
            Self::Canceled => "canceled",
            Self::Config => "config",
        }
    }
}

/// A failed model call: its kind and one readable message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// What kind of failure.
    pub kind: ModelErrorKind,
    /// What went wrong, for a person.
    pub message: String,
}

impl ModelError {
    /// An error of `kind`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// A language model the loop can ask.
#[async_trait]
pub trait Model: Send + Sync {
    /// The wire format the conversation is kept in.
    fn format(&self) -> Format;
    /// `provider:model`, for events and messages.
    fn describe(&self) -> String;
    /// Asks the model; `cancel` fires on a kill.
    async fn complete(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<Answer, ModelError>;
}

/// The loop's settings; every field has a default.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// At most this many model calls per run (at least 1; default 20).
    pub max_iterations: u32,
    /// At the limit, make one last model call without tools so the user gets an answer.
    pub final_answer_on_limit: bool,
    /// The same call (tool and arguments) returning the same output this many times in a run
    /// ends it as `loop_detected` (0: off).
    pub result_loop_threshold: u32,
    /// From this iteration on, tools and the UI are told the loop is long (0: off).
    pub warn_iterations: u32,
    /// The system prompt.
    pub system: Option<String>,
    /// Background jobs outlive a run (the next `run` of the conversation finds them); by
    /// default a run's end ends them.
    pub keep_jobs: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 20,
            final_answer_on_limit: false,
            result_loop_threshold: 0,
            warn_iterations: 15,
            system: None,
            keep_jobs: false,
        }
    }
}

/// Builds the model a tool's override names (`provider:model` or a model name).
pub trait ModelRouter: Send + Sync {
    /// The model for `name`; `None` asks the current model under that model name.
    fn route(&self, name: &str, current: &Arc<dyn Model>) -> Result<Option<Arc<dyn Model>>, ModelError>;
}

/// A conversation with a model over an engine and a session.
pub struct Agent {
    engine: Arc<Engine>,
    session: Arc<Session>,
    model: Arc<dyn Model>,
    router: Option<Arc<dyn ModelRouter>>,
    config: AgentConfig,
    history: Vec<Value>,
}

impl Agent {
    /// A new conversation.
    pub fn new(engine: Arc<Engine>, session: Arc<Session>, model: Arc<dyn Model>, config: AgentConfig) -> Self {
        Self {
            engine,
            session,
            model,
            router: None,
            config,
            history: Vec::new(),
        }
    }

    /// Resolves tools' model overrides into models of other providers (by default an override is
    /// a model name of the current provider).
    pub fn with_router(mut self, router: Arc<dyn ModelRouter>) -> Self {
        self.router = Some(router);
        self
    }

    /// Continues an earlier conversation (in the model's format).
    pub fn with_history(mut self, history: Vec<Value>) -> Self {
        self.history = history;
        self
    }

    /// The conversation so far, in the model's format.
    pub fn history(&self) -> &[Value] {
        &self.history
    }

    /// The session the calls run in (stop and kill it from elsewhere).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Adds the user's prompt and runs the loop until an end status. The session's background
    /// jobs end with it, unless `AgentConfig::keep_jobs` says otherwise.
    pub async fn run(&mut self, prompt: &str) -> AgentRun {
        let run = self.run_loop(prompt).await;
        if !self.config.keep_jobs {
            self.session.end_jobs();
        }
        run
    }

    async fn run_loop(&mut self, prompt: &str) -> AgentRun {
        // A stop or kill ended the previous run; this one continues the conversation.
        self.session.resume();
        let format = self.model.format();
        formats::push_user_text(format, &mut self.history, prompt);
        let engine = self.engine.clone();
        let emit = |e: Event| engine.emit(&e);
        self.emit_message_added();
        let max = self.config.max_iterations.max(1);
        let mut override_model: Option<String> = None;
        let mut seen_results: HashMap<(String, String, String), u32> = HashMap::new();
        let mut iteration = 0u32;
        let finish = |status: AgentStatus, iterations: u32, text: Option<String>, detail: Option<String>| {
            emit(Event::RunFinished {
                status: status.as_str(),
                iterations,
                text: text.clone(),
                detail: detail.clone(),
            });
            AgentRun {
                status,
                text,
                iterations,
                detail,
            }
        };
        loop {
            if iteration >= max {
                let (iterations, text, detail) = self.at_limit(max, iteration).await;
                return finish(
                    AgentStatus::MaxIterations { limit: max },
                    iterations,
                    text,
                    Some(detail),
                );
            }
            iteration += 1;
            let long_loop = self.config.warn_iterations > 0 && iteration >= self.config.warn_iterations;
            if long_loop && iteration == self.config.warn_iterations {
                emit(Event::LongLoop {
                    iteration,
                    max_iterations: max,
                });
            }
            let options = TurnOptions {
                iteration,
                long_loop,
                format: Some(format),
                ..TurnOptions::default()
            };
            let answer = match self.ask_turn(format, &options, override_model.take()).await {
                Ok(a) => a,
                Err((status, message)) => return finish(status, iteration, None, Some(message)),
            };
            let mut turn = self.engine.run_turn(&self.session, &answer, options).await;
            match turn.status {
                TurnStatus::Restart => {
                    emit(Event::TurnRestarted { iteration });
                    self.restart_with(format, turn.restart_context.take());
                    continue;
                }
                _ => self.history.append(&mut turn.messages),
            }
            match turn.status {
                TurnStatus::FinalAnswer => return finish(AgentStatus::FinalAnswer, iteration, answer.text, None),
                TurnStatus::EndTurn => return finish(AgentStatus::EndTurn, iteration, answer.text, None),
                TurnStatus::Aborted(reason) => {
                    return finish(abort_status(reason), iteration, None, turn.stop_message.clone());
                }
                TurnStatus::Continue | TurnStatus::Restart => {}
            }
            if let Some(repeats) = self.repeated_result(&answer, &turn.outcomes, &mut seen_results) {
                let detail = format!("the same call returned the same output {repeats} times");
                return finish(AgentStatus::LoopDetected, iteration, None, Some(detail));
            }
            override_model = self.override_from(&turn.outcomes);
            if let Some(m) = &override_model {
                emit(Event::ModelOverride { model: m.clone() });
            }
        }
    }

    /// At `max_iterations`: one last call without tools when `final_answer_on_limit` asks for
    /// it. Returns the model calls made, the answer, and what to say about the end.
    async fn at_limit(&mut self, max: u32, iteration: u32) -> (u32, Option<String>, String) {
        if !self.config.final_answer_on_limit {
            return (
                iteration,
                None,
                format!("reached max_iterations = {max} without a final answer"),
            );
        }
        let text = self.final_answer(iteration + 1).await;
        let detail = match text {
            Some(_) => format!("reached max_iterations = {max}; the answer was made without tools"),
            None => format!("reached max_iterations = {max}; the last call, without tools, gave no answer"),
        };
        (iteration + 1, text, detail)
    }

    /// One model call for this turn: the tools exposed, the model (or a tool's override), the
    /// history lent to the request and taken back (no copy per iteration).
    async fn ask_turn(
        &mut self,
        format: Format,
        options: &TurnOptions,
        override_model: Option<String>,
    ) -> Result<Answer, (AgentStatus, String)> {
        let tools = self.engine.tool_list(format, options);
        let (model, model_name) = self
            .model_for_turn(override_model)
            .map_err(|e| (AgentStatus::ModelError(e.kind), e.message))?;
        let request = ModelRequest {
            format,
            system: self.config.system.clone(),
            messages: std::mem::take(&mut self.history),
            tools,
            model: model_name,
            iteration: options.iteration,
        };
        let asked = self.ask(&model, &request).await;
        self.history = request.messages;
        asked.map_err(|e| match e.kind {
            ModelErrorKind::Canceled => (AgentStatus::StoppedByUser, e.message),
            kind => (AgentStatus::ModelError(kind), e.message),
        })
    }

    /// A tool asked for the turn to be re-run: its context joins the history as user text.
    fn restart_with(&mut self, format: Format, context: Option<Value>) {
        let text = match context.unwrap_or(Value::Null) {
            Value::String(s) => s,
            other => other.to_string(),
        };
        formats::push_user_text(format, &mut self.history, &format!("[CONTEXT]\n{text}"));
        self.emit_message_added();
    }

    fn emit_message_added(&self) {
        if let Some(m) = self.history.last() {
            self.engine.emit(&Event::MessageAdded { message: m.clone() });
        }
    }

    /// The model for this turn: the override when a tool named one, else the agent's model.
    fn model_for_turn(&self, name: Option<String>) -> Result<(Arc<dyn Model>, Option<String>), ModelError> {
        match (name, &self.router) {
            (None, _) => Ok((self.model.clone(), None)),
            (Some(name), Some(router)) => {
                let Some(model) = router.route(&name, &self.model)? else {
                    return Ok((self.model.clone(), Some(name)));
                };
                if model.format() != self.model.format() {
                    return Err(ModelError::new(
                        ModelErrorKind::Config,
                        format!(
                            "the model override {name:?} speaks {}, but this conversation is kept in {}",
                            model.format(),
                            self.model.format()
                        ),
                    ));
                }
                Ok((model, None))
            }
            (Some(name), None) => Ok((self.model.clone(), Some(name))),
        }
    }

    /// One model call, raced against a kill.
    async fn ask(&self, model: &Arc<dyn Model>, request: &ModelRequest) -> Result<Answer, ModelError> {
        self.engine.emit(&Event::ModelRequested {
            iteration: request.iteration,
            model: request
                .model
                .as_ref()
                .map_or_else(|| model.describe(), |m| format!("{} (override {m})", model.describe())),
            tools: request.has_tools(),
        });
        let kill = self.session.kill_token();
        let started = Instant::now();
        let result = tokio::select! {
            biased;
            () = kill.cancelled() => Err(ModelError::new(ModelErrorKind::Canceled, "stopped while the model was answering")),
            r = model.complete(request, &kill) => r,
        };
        match &result {
            Ok(answer) => self.engine.emit(&Event::ModelAnswered {
                iteration: request.iteration,
                text: answer.text.clone(),
                calls: answer.calls.len(),
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            Err(e) => self.engine.emit(&Event::ModelFailed {
                iteration: request.iteration,
                kind: e.kind.as_str(),
                message: e.message.clone(),
            }),
        }
        result
    }

    /// The answer at the limit: one model call with no tools.
    async fn final_answer(&mut self, iteration: u32) -> Option<String> {
        let format = self.model.format();
        formats::push_user_text(
            format,
            &mut self.history,
            "You have reached the limit of tool calls for this task. Answer now with what you have found, without calling tools.",
        );
        self.emit_message_added();
        let request = ModelRequest {
            format,
            system: self.config.system.clone(),
            messages: std::mem::take(&mut self.history),
            tools: match format {
                Format::Text => Value::String(String::new()),
                _ => Value::Array(Vec::new()),
            },
            model: None,
            iteration,
        };
        let asked = self.ask(&self.model.clone(), &request).await;
        self.history = request.messages;
        let answer = asked.ok()?;
        if answer.calls.is_empty() {
            // Only a text answer can join the history: calls would need results.
            let messages = formats::assistant_messages(&answer, &[]);
            for m in messages {
                self.history.push(m);
                self.emit_message_added();
            }
        }
        answer.text
    }

    /// Result-aware loop detection: the same call returning the same output `threshold` times.
    fn repeated_result(
        &self,
        answer: &Answer,
        outcomes: &[Outcome],
        seen: &mut HashMap<(String, String, String), u32>,
    ) -> Option<u32> {
        let threshold = self.config.result_loop_threshold;
        if threshold == 0 {
            return None;
        }
        let mut worst = 0;
        for (raw, outcome) in answer.calls.iter().zip(outcomes) {
            let Outcome::Recorded { entry, .. } = outcome else {
                continue;
            };
            let args = match &raw.arguments {
                RawArguments::Missing | RawArguments::Broken(_) => String::new(),
                RawArguments::Fields(m) => Value::Object(m.clone()).to_string(),
                RawArguments::Text(t) => serde_json::from_str::<Value>(t).map_or_else(|_| t.clone(), |v| v.to_string()),
                RawArguments::Json(v) => v.to_string(),
            };
            let count = seen
                .entry((entry.name.clone(), args, entry.content_text()))
                .or_insert(0);
            *count += 1;
            worst = worst.max(*count);
        }
        (worst >= threshold).then_some(worst)
    }

    /// The first call of the batch (in the model's order) that ran and whose tool names a model.
    fn override_from(&self, outcomes: &[Outcome]) -> Option<String> {
        outcomes.iter().find_map(|o| match o {
            Outcome::Recorded { entry, .. } => self
                .engine
                .registry()
                .get(&entry.name)
                .and_then(|e| e.tool().spec().model_override.clone()),
            _ => None,
        })
    }
}
