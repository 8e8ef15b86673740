//! `memory_read` / `memory_write`: notes per principal in the session's store, with limits.

use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::tool::{Tool, Typed};
use toolgate_core::{Principal, ToolContext, ToolError};
use toolgate_tools::memory::{MemoryLimits, MemoryRead, MemoryWrite};

fn ctx(store: &Arc<toolgate_core::store::MemoryStore>, who: &str) -> ToolContext {
    ToolContext {
        principal: Principal::new(who),
        store: store.clone(),
        ..ToolContext::standalone(std::path::Path::new("/"))
    }
}

async fn run(tool: &dyn Tool, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    tool.execute(ctx, args).await.map(|o| o.content)
}

#[tokio::test]
async fn notes_are_written_read_listed_and_kept_per_principal() {
    let store = Arc::new(toolgate_core::store::MemoryStore::new());
    let (read, write) = (Typed::new(MemoryRead::default()), Typed::new(MemoryWrite::default()));
    let me = ctx(&store, "alice");
    let w = run(&write, &me, json!({"key": "project/style", "value": "tabs"}))
        .await
        .unwrap();
    assert_eq!(w, json!({"key": "project/style", "written": 4, "replaced": false}));
    let w = run(&write, &me, json!({"key": "project/style", "value": "spaces"}))
        .await
        .unwrap();
    assert_eq!(w["replaced"], true);
    run(&write, &me, json!({"key": "project/ci", "value": "gh"}))
        .await
        .unwrap();
    run(&write, &me, json!({"key": "todo", "value": "x"})).await.unwrap();

    let r = run(&read, &me, json!({"key": "project/style"})).await.unwrap();
    assert_eq!(r, json!({"key": "project/style", "value": "spaces"}));
    let r = run(&read, &me, json!({"prefix": "project/"})).await.unwrap();
    assert_eq!(r["keys"], json!(["project/ci", "project/style"]));
    assert_eq!(r["total"], 2);
    let r = run(&read, &me, json!({})).await.unwrap();
    assert_eq!(r["total"], 3);

    let bob = ctx(&store, "bob");
    let r = run(&read, &bob, json!({"key": "project/style"})).await.unwrap();
    assert_eq!(r["found"], false, "another principal sees nothing");
    assert_eq!(run(&read, &bob, json!({})).await.unwrap()["total"], 0);
}

#[tokio::test]
async fn limits_are_enforced_with_clear_errors() {
    let store = Arc::new(toolgate_core::store::MemoryStore::new());
    let limits = MemoryLimits {
        max_key_bytes: 8,
        max_value_bytes: 10,
        max_keys: 2,
        max_listed: 1,
    };
    let read = Typed::new(MemoryRead { limits });
    let write = Typed::new(MemoryWrite { limits });
    let me = ctx(&store, "alice");
    let err = |r: Result<Value, ToolError>| r.unwrap_err().to_string();
    assert!(err(run(&write, &me, json!({"key": "a-very-long-key", "value": "v"})).await).contains("at most 8"));
    assert!(err(run(&write, &me, json!({"key": "k", "value": "01234567890"})).await).contains("at most 10"));
    assert!(err(run(&write, &me, json!({"key": "a\nb", "value": "v"})).await).contains("control"));
    assert!(err(run(&write, &me, json!({"key": "", "value": "v"})).await).contains("empty"));
    run(&write, &me, json!({"key": "k1", "value": "v"})).await.unwrap();
    run(&write, &me, json!({"key": "k2", "value": "v"})).await.unwrap();
    assert!(err(run(&write, &me, json!({"key": "k3", "value": "v"})).await).contains("overwrite one"));
    run(&write, &me, json!({"key": "k2", "value": "w"})).await.unwrap();
    let listed = run(&read, &me, json!({})).await.unwrap();
    assert_eq!(listed["keys"], json!(["k1"]));
    assert_eq!(
        (listed["total"].clone(), listed["truncated"].clone()),
        (json!(2), json!(true))
    );
}
