//! Test helpers: a fresh PostgreSQL schema per test (dropped when the test ends, even when it
//! fails), and the three stores side by side.
#![allow(dead_code)]

use std::sync::Arc;
use toolgate_core::store::Store;
use toolgate_store::{StoreOptions, StoreUrl};

mod pg;
pub use pg::PgSchema;

/// Options with small result limits, so eviction is visible.
pub fn options() -> StoreOptions {
    StoreOptions {
        results_per_session: 3,
        ..StoreOptions::default()
    }
}

/// A store of each kind; the guards keep the SQLite directory and the PostgreSQL schema alive.
pub struct Stores {
    pub all: Vec<(&'static str, Arc<dyn Store>)>,
    _dir: tempfile::TempDir,
    _schema: Option<PgSchema>,
}

pub async fn stores(test: &str) -> Stores {
    let dir = tempfile::tempdir().unwrap();
    let opts = options();
    let mut all: Vec<(&'static str, Arc<dyn Store>)> = vec![
        ("memory", toolgate_store::open(&StoreUrl::Memory, &opts).await.unwrap()),
        (
            "sqlite",
            toolgate_store::open(&StoreUrl::Sqlite(dir.path().join("state.db")), &opts)
                .await
                .unwrap(),
        ),
    ];
    let schema = PgSchema::create(test).await;
    if let Some(s) = &schema {
        all.push((
            "postgres",
            toolgate_store::open(&StoreUrl::Postgres(s.url.clone()), &opts)
                .await
                .unwrap(),
        ));
    }
    Stores {
        all,
        _dir: dir,
        _schema: schema,
    }
}

use serde_json::{Value, json};
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{Engine, EngineConfig, Registry, Session, SessionOptions, Tool, ToolError};

/// A tool that is not read-only: appends `arguments.id` to a file, then acts (returns it).
pub struct Append {
    pub path: std::path::PathBuf,
    spec: ToolSpec,
    schema: Value,
}

impl Append {
    pub fn tool(path: std::path::PathBuf) -> Arc<dyn Tool> {
        Arc::new(Self {
            path,
            spec: ToolSpec::default(),
            schema: json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
        })
    }
}

#[async_trait::async_trait]
impl Tool for Append {
    fn name(&self) -> &str {
        "append"
    }
    fn description(&self) -> &str {
        "appends its id to a file"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        use std::io::Write;
        let id = args["id"].as_str().unwrap_or("?").to_owned();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        writeln!(f, "{id}").map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput::json(json!({"appended": id})))
    }
}

/// A read-only tool that does nothing.
pub struct Noop {
    spec: ToolSpec,
    schema: Value,
}

impl Noop {
    pub fn tool(read_only: bool) -> Arc<dyn Tool> {
        Arc::new(Self {
            spec: if read_only {
                ToolSpec::with_annotations(Annotations::READ_ONLY)
            } else {
                ToolSpec::default()
            },
            schema: json!({"type": "object"}),
        })
    }
}

#[async_trait::async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(json!("ok")))
    }
}

pub fn engine(tools: Vec<Arc<dyn Tool>>) -> Arc<Engine> {
    let mut registry = Registry::new();
    for t in tools {
        registry.register(t);
    }
    Arc::new(Engine::new(registry, EngineConfig::default()))
}

pub fn session(engine: &Engine, store: Arc<dyn Store>, id: &str) -> Arc<Session> {
    Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            id: Some(toolgate_core::SessionId::new(id)),
            store: Some(store),
            approver: Arc::new(toolgate_core::permit::ApproveAll),
            workspace: std::env::temp_dir(),
            ..SessionOptions::default()
        },
    ))
}

/// An OpenAI answer calling `name` once per id, with `{"id": id}` as arguments.
pub fn answer(name: &str, ids: &[String]) -> toolgate_core::Answer {
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": json!({"id": id}).to_string()}})
        })
        .collect();
    toolgate_core::Answer::parse(
        toolgate_core::Format::Openai,
        &json!({"role": "assistant", "content": null, "tool_calls": calls}),
    )
    .expect("a well-formed answer")
}

/// The error type of an outcome, if it failed.
pub fn error_type(o: &toolgate_core::Outcome) -> Option<String> {
    o.entry()
        .and_then(|e| e.content.pointer("/error/type"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}
