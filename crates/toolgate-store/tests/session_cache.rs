//! A session's cache entries reach a durable store, so another process of the same session (here:
//! a second store and engine on the same SQLite file) answers from them; other sessions do not.

mod common;

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use toolgate_core::tool::{Annotations, CacheScope, CacheSpec, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{Tool, ToolError, TurnOptions};
use toolgate_store::{StoreOptions, StoreUrl};

struct Counted {
    spec: ToolSpec,
    schema: Value,
    runs: Arc<AtomicU32>,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "counts its runs"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, _: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ToolOutput::json(json!({"args": args, "run": n})))
    }
}

#[tokio::test]
async fn a_session_cache_entry_is_shared_by_the_sessions_processes() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::Sqlite(dir.path().join("state.db"));
    let runs = Arc::new(AtomicU32::new(0));
    let tool = || -> Arc<dyn Tool> {
        Arc::new(Counted {
            spec: ToolSpec {
                cache: Some(CacheSpec {
                    scope: CacheScope::Session,
                    ttl: Duration::from_secs(600),
                }),
                ..ToolSpec::with_annotations(Annotations::READ_ONLY)
            },
            schema: json!({"type": "object"}),
            runs: runs.clone(),
        })
    };
    let call = |id: &str| {
        toolgate_core::Answer::parse(
            toolgate_core::Format::Openai,
            &json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}]}),
        )
        .unwrap()
    };
    let mut contents = Vec::new();
    for (i, session_id) in ["s1", "s1", "s2"].iter().enumerate() {
        // Each round is a separate store and engine, as a separate process would have.
        let store = toolgate_store::open(&url, &StoreOptions::default()).await.unwrap();
        let engine = common::engine(vec![tool()]);
        let session = common::session(&engine, store.clone(), session_id);
        let turn = engine
            .run_turn(&session, &call(&format!("c{i}")), TurnOptions::default())
            .await;
        contents.push(turn.outcomes[0].entry().unwrap().content.clone());
        store.flush().await.unwrap();
    }
    assert_eq!(contents[0]["run"], 1);
    assert_eq!(
        contents[1]["run"], 1,
        "the second process of s1 answered from the cache"
    );
    assert_eq!(contents[2]["run"], 2, "another session runs the tool");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
