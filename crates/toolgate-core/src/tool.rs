//! The `Tool` trait, its spec, its context, and the typed convenience layer over it.

use crate::error::ToolError;
use crate::types::{Principal, SessionId, TurnId};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Behaviour hints; the one source of truth for parallelism, retry and the read-only hint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// The tool changes nothing: it may run beside other read-only calls.
    pub read_only: bool,
    /// The tool may destroy or overwrite data.
    pub destructive: bool,
    /// Running it twice with the same arguments has the effect of running it once.
    pub idempotent: bool,
    /// The tool reaches outside the workspace (network, other systems).
    pub open_world: bool,
}

impl Annotations {
    /// Read-only and idempotent, touching only the workspace.
    pub const READ_ONLY: Self = Self {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
    /// What an untrusted source gets: not read-only, destructive, open-world.
    pub const UNTRUSTED: Self = Self {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
}

/// How the engine treats a tool's calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Nothing special.
    #[default]
    Standard,
    /// Ends the turn after it runs.
    Terminal,
    /// Capped per turn by `max_per_turn` (default 1).
    Dangerous,
    /// Long-running; returns a job handle.
    Background,
}

/// Where a cacheable tool's results are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// This turn only.
    Turn,
    /// This session.
    Session,
    /// Across sessions, through the store.
    Persistent,
}

/// Caching of a read-only or idempotent tool's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSpec {
    /// Where entries live.
    pub scope: CacheScope,
    /// How long an entry is good for.
    pub ttl: Duration,
}

/// Retry of retryable failures: exponential backoff with full jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    /// Upper bound of the first delay.
    pub base: Duration,
    /// Growth of the bound per attempt.
    pub factor: u32,
    /// The bound never exceeds this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base: Duration::from_secs(1),
            factor: 2,
            cap: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The upper bound of the delay before attempt `next` (2 = the first retry).
    pub fn bound(&self, next: u32) -> Duration {
        let exp = next.saturating_sub(2).min(30);
        let grow = u64::from(self.factor.max(1)).saturating_pow(exp);
        let ms = (self.base.as_millis() as u64).saturating_mul(grow);
        Duration::from_millis(ms).min(self.cap)
    }
}

/// Which argument the permission rules match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "argument")]
pub enum PermissionSubject {
    /// Rules match the tool name only.
    #[default]
    None,
    /// A command line (matched per simple command).
    Command(String),
    /// A workspace path (matched by glob).
    Path(String),
    /// A URL (matched by domain).
    Url(String),
}

impl PermissionSubject {
    /// The argument the subject reads, if any.
    pub fn argument(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::Command(a) | Self::Path(a) | Self::Url(a) => Some(a),
        }
    }
}

/// Everything the engine needs to know about a tool besides its schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Behaviour hints.
    pub annotations: Annotations,
    /// Standard, terminal, dangerous or background.
    pub category: Category,
    /// Calls of this tool allowed to reach execution per turn (default: 1 for dangerous tools).
    pub max_per_turn: Option<u32>,
    /// Per-attempt timeout override.
    pub timeout: Option<Duration>,
    /// Whole-call deadline override (all attempts and backoff).
    pub deadline: Option<Duration>,
    /// Retry override.
    pub retry: Option<RetryPolicy>,
    /// Caching, for read-only or idempotent tools.
    pub cache: Option<CacheSpec>,
    /// Truncation budget override, in bytes of serialised JSON.
    pub budget: Option<usize>,
    /// The argument permission rules match.
    pub subject: PermissionSubject,
    /// The model to use for the next turn after this tool ran.
    pub model_override: Option<String>,
    /// A feature flag that must be on for the tool to be exposed.
    pub feature: Option<String>,
    /// The tool keeps to [`ToolContext::timeout`] itself and reports what happened (exec_shell
    /// kills its process tree and returns the output so far); the engine's own timeout is then a
    /// backstop a few seconds later.
    #[serde(default)]
    pub stops_itself: bool,
    /// What secret scanning does with this tool's results and outgoing arguments.
    #[serde(default)]
    pub secrets: SecretScan,
    /// A boolean argument that makes a call run as a background job (`exec_shell`'s
    /// `background`); a tool of category `background` always does.
    #[serde(default)]
    pub background_argument: Option<String>,
    /// Whether an MCP client that declared the tasks extension gets a task for a call of this
    /// tool (`[tools.NAME] task`).
    #[serde(default)]
    pub task: TaskSupport,
}

/// Whether a call may run as an MCP task (the `io.modelcontextprotocol/tasks` extension): the
/// call returns a task at once and the client polls `tasks/get` for its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    /// Always answered in the call's own response.
    #[default]
    Forbidden,
    /// A task for a client that declared the extension, a plain answer for any other.
    Optional,
    /// Only as a task: a client that did not declare the extension is refused (-32021).
    Required,
}

/// Secret scanning of one tool (`[tools.NAME] redact_results`, `secret_arguments`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretScan {
    /// Secret-shaped text in the tool's results is replaced before the model, the client, the
    /// hooks or a `read_result` handle see it (default on).
    pub results: bool,
    /// What a call of an open-world tool whose arguments carry a secret gets (default ask).
    pub arguments: SecretArguments,
}

impl Default for SecretScan {
    fn default() -> Self {
        Self {
            results: true,
            arguments: SecretArguments::Ask,
        }
    }
}

/// The verdict for a secret in the arguments of a tool that reaches outside the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretArguments {
    /// Somebody approves this very call (no grant or allow rule covers it; `--yolo` neither).
    #[default]
    Ask,
    /// Refused.
    Deny,
    /// Not checked.
    Allow,
}

impl ToolSpec {
    /// A spec with these annotations and defaults for the rest.
    pub fn with_annotations(annotations: Annotations) -> Self {
        Self {
            annotations,
            ..Self::default()
        }
    }

    /// Whether this call runs as a background job.
    pub fn runs_in_background(&self, arguments: &serde_json::Value) -> bool {
        self.category == Category::Background
            || self
                .background_argument
                .as_deref()
                .is_some_and(|a| arguments.get(a).and_then(serde_json::Value::as_bool) == Some(true))
    }

    /// Whether retries are allowed: only for read-only or idempotent tools.
    pub fn retry_allowed(&self) -> bool {
        self.annotations.read_only || self.annotations.idempotent
    }
}

/// A progress report from a running tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Work done so far.
    pub progress: f64,
    /// Total work, when known.
    pub total: Option<f64>,
    /// A short note.
    pub message: Option<String>,
}

/// Where a tool reports progress; cheap to clone.
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Fn(Progress) + Send + Sync>>);

impl ProgressSink {
    /// A sink calling `f` for every report.
    pub fn new(f: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(f)))
    }

    /// Reports progress (a no-op when nobody listens).
    pub fn report(&self, progress: Progress) {
        if let Some(f) = &self.0 {
            f(progress);
        }
    }

    /// Whether somebody listens.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// What a tool is given besides its arguments. Keep it small: every field widens every tool's contract.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The conversation.
    pub session_id: SessionId,
    /// The model answer being served.
    pub turn_id: TurnId,
    /// The agent loop's iteration (0 outside a loop).
    pub iteration: u32,
    /// The loop has passed its soft warning threshold: a tool may wrap up or say so.
    pub long_loop: bool,
    /// Fires on timeout or kill: pass it on to every I/O the tool starts.
    pub cancel: CancellationToken,
    /// The canonical workspace root.
    pub workspace: Arc<Path>,
    /// Who the call acts for.
    pub principal: Principal,
    /// Where progress goes.
    pub progress: ProgressSink,
    /// The session's store: full results behind `read_result` handles, memory records, and
    /// whatever else a tool keeps per session or principal.
    pub store: Arc<dyn crate::store::Store>,
    /// How long this attempt may run: the smaller of the tool's configured timeout and the
    /// engine's, never beyond the deadline. A per-call limit the model asks for is held under it.
    pub timeout: std::time::Duration,
    /// The session's background jobs, and the job this call runs as when it runs in the
    /// background (its output goes there as it is produced).
    pub jobs: crate::jobs::Jobs,
}

impl ToolContext {
    /// A context outside any engine (tests, direct calls): fresh ids, a new token, an in-memory store.
    pub fn standalone(workspace: &Path) -> Self {
        let session_id = SessionId::generate();
        Self {
            jobs: crate::jobs::Jobs::new(
                Arc::new(crate::jobs::JobRegistry::new(crate::jobs::JobLimits::default())),
                session_id.clone(),
            ),
            session_id,
            turn_id: TurnId::generate(),
            iteration: 0,
            long_loop: false,
            cancel: CancellationToken::new(),
            workspace: Arc::from(workspace),
            principal: Principal::new("local"),
            progress: ProgressSink::default(),
            store: Arc::new(crate::store::MemoryStore::new()),
            timeout: std::time::Duration::from_secs(300),
        }
    }
}

/// A tool's successful answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// The result the model sees (after truncation).
    pub content: Value,
    /// End the turn after this batch.
    pub end_turn: bool,
    /// Ask for the turn to be re-run with this context; nothing is recorded for the call.
    pub restart: Option<Value>,
    /// The tool ran but its work did not succeed (a command's non-zero exit, its own timeout):
    /// the model still sees `content`, with its provider's error flag, and the call is recorded
    /// as this error type (`execution_failed`, `timeout`). Never cached.
    pub failure: Option<crate::error::ErrorKind>,
}

impl ToolOutput {
    /// A JSON result.
    pub fn json(content: Value) -> Self {
        Self {
            content,
            end_turn: false,
            restart: None,
            failure: None,
        }
    }

    /// The same content, recorded as an unsuccessful call of this kind.
    pub fn failed(mut self, kind: crate::error::ErrorKind) -> Self {
        self.failure = Some(kind);
        self
    }

    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self::json(Value::String(text.into()))
    }
}

/// What a tool is told when the engine assembles a turn.
#[derive(Clone, Debug)]
pub struct TurnView<'a> {
    /// The provider format of the turn, when known (its capabilities).
    pub format: Option<crate::formats::Format>,
    /// Feature flags that are on.
    pub features: &'a [String],
    /// The agent loop's iteration.
    pub iteration: u32,
    /// The loop has passed its soft warning threshold.
    pub long_loop: bool,
}

/// This turn's view of a tool.
#[derive(Clone, Debug, PartialEq)]
pub enum Assembly {
    /// As registered.
    Unchanged,
    /// Narrowed for this turn: the schema shown and validated, and a shorter description.
    Narrowed {
        /// The description shown, when changed.
        description: Option<String>,
        /// The parameter schema shown and validated, when changed.
        parameters: Option<Value>,
    },
    /// Not exposed this turn, with the reason.
    Hidden(String),
}

/// What a tool decides about a call before permission and approval, without running anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vetted {
    /// The tool refuses the call whatever the rules say (the catastrophic list, a path outside
    /// the workspace or naming toolgate's own files): a `permission_denied` with source
    /// `builtin_deny`, before anyone is asked.
    pub refusal: Option<String>,
    /// The subject as the tool will really use it — the path resolved inside the workspace
    /// (symlinks and absolute spellings followed), the URL as the fetcher parses it. Allow rules
    /// match it alone; deny and ask rules match it or the subject as written.
    pub resolved: Option<String>,
}

impl Vetted {
    /// A refusal.
    pub fn refuse(why: impl Into<String>) -> Self {
        Self {
            refusal: Some(why.into()),
            resolved: None,
        }
    }

    /// The resolved subject.
    pub fn resolved(subject: impl Into<String>) -> Self {
        Self {
            refusal: None,
            resolved: Some(subject.into()),
        }
    }
}

/// A tool the engine can run. Object-safe: registries hold `Arc<dyn Tool>`.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The registered name.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of its arguments (an object schema).
    fn parameters(&self) -> &Value;
    /// Annotations, category, limits, caching, permission subject.
    fn spec(&self) -> &ToolSpec;
    /// JSON Schema of a successful result, when the tool promises one.
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    /// The parameter schema as the engine reads it (validation, listing, typing): borrowed
    /// from [`Tool::parameters`] unless the tool keeps its schema as text and parses it here,
    /// so that thousands of listed tools do not each hold a parsed tree.
    fn parameter_schema(&self) -> std::borrow::Cow<'_, Value> {
        std::borrow::Cow::Borrowed(self.parameters())
    }
    /// The result schema as the engine reads it; see [`Tool::parameter_schema`].
    fn result_schema(&self) -> Option<std::borrow::Cow<'_, Value>> {
        self.output_schema().map(std::borrow::Cow::Borrowed)
    }
    /// This turn's view: narrowed (fewer enum values, a shorter description), hidden when the
    /// tool is not available (backend down, provider lacks a capability), or unchanged.
    fn assemble(&self, _turn: &TurnView<'_>) -> Assembly {
        Assembly::Unchanged
    }
    /// The tool's own refusals and the subject its rules match, decided before permission
    /// (arguments already validated). Pure and quick: it never runs anything, and `toolgate
    /// check` calls it too.
    fn vet(&self, _workspace: &Path, _args: &Value) -> Vetted {
        Vetted::default()
    }
    /// Runs the call. Arguments are already validated against the assembled schema.
    /// Must stop promptly when `ctx.cancel` fires.
    async fn execute(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// A tool declared from typed Rust: the argument struct gives both the schema and the parsing.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments; their `JsonSchema` is the tool's parameter schema.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The registered name.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// Annotations, category, limits.
    fn spec(&self) -> ToolSpec;
    /// Runs the call with parsed arguments.
    async fn run(&self, ctx: &ToolContext, args: Self::Args) -> Result<ToolOutput, ToolError>;
    /// See [`Tool::vet`].
    fn vet(&self, _workspace: &Path, _args: &Value) -> Vetted {
        Vetted::default()
    }
}

/// Adapts a [`TypedTool`] to [`Tool`], computing its schema once.
pub struct Typed<T: TypedTool> {
    inner: T,
    parameters: Value,
    spec: ToolSpec,
}

impl<T: TypedTool> Typed<T> {
    /// Wraps a typed tool.
    pub fn new(inner: T) -> Self {
        let parameters = schema_for::<T::Args>();
        let spec = inner.spec();
        Self {
            inner,
            parameters,
            spec,
        }
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

/// The parameter schema of a typed argument struct: draft 2020-12, subschemas inlined, no `$schema`/`title`.
pub fn schema_for<A: JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<A>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
        map.remove("$schema");
    }
    value
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn vet(&self, workspace: &Path, args: &Value) -> Vetted {
        self.inner.vet(workspace, args)
    }
    async fn execute(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: T::Args = serde_json::from_value(args)
            .map_err(|e| ToolError::InvalidArguments(format!("arguments do not fit: {e}")))?;
        self.inner.run(ctx, args).await
    }
}
