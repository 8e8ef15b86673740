//! The journal: a row committed before a tool that is not read-only runs, closed after, and a
//! journaled call id never run twice.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::{CallId, EngineConfig, TurnOptions};

#[tokio::test]
async fn the_row_is_committed_before_the_tool_runs_and_closed_after() {
    let store = Arc::new(MemoryStore::new());
    let seen = store.clone();
    let tool = Arc::new(FnTool::new("change", writer(), move |ctx, _| {
        let seen = seen.clone();
        async move {
            // While the tool runs, its row is already there, `started`.
            let unfinished = seen.journal_unfinished().await.unwrap();
            let _ = ctx;
            Ok(toolgate_core::ToolOutput::json(json!(
                unfinished.iter().map(|r| r.call_id.clone()).collect::<Vec<_>>()
            )))
        }
    }));
    let mut h = harness(vec![tool], EngineConfig::default());
    h.session = Arc::new(toolgate_core::Session::new(
        h.engine.config(),
        toolgate_core::SessionOptions {
            store: Some(store.clone()),
            approver: Arc::new(toolgate_core::permit::ApproveAll),
            ..Default::default()
        },
    ));
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("j1", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!(["j1"]));
    assert!(
        store.journal_unfinished().await.unwrap().is_empty(),
        "closed after the call"
    );
    assert!(
        store
            .journal_contains(h.session.id(), &CallId::new("j1"))
            .await
            .unwrap()
    );

    // The same call id again in this session is not run a second time.
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("j1", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let e = &turn.outcomes[0].entry().unwrap().content["error"];
    assert_eq!(e["type"], "execution_failed");
    assert!(e["message"].as_str().unwrap().contains("never run twice"));
}
