//! toolgate's engine: the fragile middle of an agent, done properly.
//!
//! A model emits tool calls; toolgate checks them, decides whether they may run, runs them
//! without hanging or escaping, and returns the history entries to append in the provider's own
//! format. Every call passes the stages of DESIGN.md in order — parse, stop check, lookup,
//! exposure, validate, guards, permission, hooks and approval, cache, execute, result, post hooks,
//! record — and every call id gets exactly one result on every path.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use toolgate_core::{Answer, Engine, EngineConfig, Format, Registry, Session, SessionOptions, TurnOptions};
//! use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec, TypedTool, Typed};
//! use toolgate_core::error::ToolError;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs { a: i64, b: i64 }
//!
//! struct Add;
//!
//! #[async_trait::async_trait]
//! impl TypedTool for Add {
//!     type Args = AddArgs;
//!     fn name(&self) -> &str { "add" }
//!     fn description(&self) -> &str { "Adds two integers." }
//!     fn spec(&self) -> ToolSpec { ToolSpec::with_annotations(Annotations::READ_ONLY) }
//!     async fn run(&self, _: &ToolContext, args: AddArgs) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::json(json!(args.a + args.b)))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! registry.register(Arc::new(Typed::new(Add)));
//! let engine = Arc::new(Engine::new(registry, EngineConfig::default()));
//! let session = Arc::new(Session::new(engine.config(), SessionOptions::default()));
//! let answer = Answer::parse(Format::Openai, &json!({"role": "assistant", "tool_calls": [
//!     {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": \"3\"}"}}
//! ]})).unwrap();
//! let turn = engine.run_turn(&session, &answer, TurnOptions::default()).await;
//! assert_eq!(turn.status.as_str(), "continue");
//! assert_eq!(turn.messages[1], json!({"role": "tool", "tool_call_id": "call_1", "content": "5"}));
//! # });
//! ```

pub mod agent;
pub mod audit;
pub mod cache;
pub mod check;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod events;
pub mod execute;
pub mod formats;
pub mod guard;
pub mod history;
pub mod hooks;
pub mod jobs;
pub mod lenient;
pub mod parse;
pub mod permit;
pub mod redact;
pub mod registry;
pub mod result;
pub mod rules;
pub mod session;
pub mod shell;
pub mod store;
pub mod tool;
pub mod types;
pub mod validate;

pub use agent::{Agent, AgentConfig, AgentRun, AgentStatus, Model, ModelError, ModelErrorKind, ModelRequest};
pub use config::{EngineConfig, MalformedPolicy};
pub use dispatch::{AbortReason, Engine, Outcome, TurnOptions, TurnOutcome, TurnStatus};
pub use error::{CallError, ErrorKind, ToolError};
pub use formats::{Answer, Dialect, Format, ToolResult};
pub use registry::Registry;
pub use session::{Session, SessionOptions};
/// The token a kill fires (re-exported for `Model` and `Tool` implementations).
pub use tokio_util::sync::CancellationToken;
pub use tool::{Tool, ToolContext, ToolOutput, ToolSpec, TypedTool};
pub use types::{CallId, Principal, SessionId, ToolCall, ToolName, TurnId};
