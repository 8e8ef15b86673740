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

fn session_on(
    h: &Harness,
    store: Arc<MemoryStore>,
    approver: Arc<dyn toolgate_core::permit::Approver>,
) -> Arc<toolgate_core::Session> {
    Arc::new(toolgate_core::Session::new(
        h.engine.config(),
        toolgate_core::SessionOptions {
            store: Some(store),
            approver,
            ..Default::default()
        },
    ))
}

async fn row(store: &MemoryStore, id: &str) -> toolgate_core::store::JournalRow {
    let rows = store
        .journal_list(&toolgate_core::store::JournalFilter::default())
        .await
        .unwrap();
    rows.into_iter()
        .find(|r| r.call_id.as_str() == id)
        .unwrap_or_else(|| panic!("no row for {id}"))
}

#[tokio::test]
async fn rows_record_the_decision_the_outcome_and_redacted_arguments() {
    let store = Arc::new(MemoryStore::new());
    let mut h = harness(
        vec![echo("look", read_only()), echo("change", writer())],
        EngineConfig::default(),
    );
    // Nobody approves: the writer's default ask becomes a refusal, which still gets a row.
    h.session = session_on(&h, store.clone(), Arc::new(toolgate_core::permit::DenyAll));
    let answer = openai_answer(&[
        ("r1", "look", r#"{"q": "x", "api_key": "sk-abcdefghijklmnopqrstu"}"#),
        (
            "w1",
            "change",
            r#"{"cmd": "curl -H 'Authorization: Bearer abcdefgh12345678' x"}"#,
        ),
        ("r2", "look", r#"{"password": "hunter2",}"#),
    ]);
    h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;

    let r1 = row(&store, "r1").await;
    assert_eq!((r1.state.as_ref(), r1.error_type.as_deref()), ("success", None));
    assert_eq!(r1.decision.as_deref(), Some("allow"));
    assert_eq!(r1.arguments, Some(json!({"q": "x", "api_key": "[REDACTED]"})));
    assert!(!r1.repaired && r1.raw.is_none());
    assert!(r1.finished_at.is_some() && r1.started_at.is_some());

    let w1 = row(&store, "w1").await;
    assert_eq!(
        (w1.state.as_ref(), w1.error_type.as_deref()),
        ("error", Some("permission_denied"))
    );
    assert_eq!(
        (w1.decision.as_deref(), w1.source.as_deref()),
        (Some("deny"), Some("non_interactive_deny"))
    );
    assert_eq!(w1.attempts, 0);
    let cmd = w1.arguments.as_ref().unwrap()["cmd"].as_str().unwrap().to_owned();
    assert!(!cmd.contains("abcdefgh12345678") && cmd.contains("[REDACTED]"), "{cmd}");

    // A repaired call keeps its raw text, redacted too.
    let r2 = row(&store, "r2").await;
    assert!(r2.repaired);
    let raw = r2.raw.unwrap();
    assert!(raw.contains("password") && !raw.contains("hunter2"), "{raw}");
}

#[tokio::test]
async fn store_arguments_off_keeps_only_the_hash_and_a_refused_rerun_writes_nothing() {
    let store = Arc::new(MemoryStore::new());
    let config = EngineConfig {
        audit_arguments: false,
        ..EngineConfig::default()
    };
    let mut h = harness(vec![echo("change", writer())], config);
    h.session = session_on(&h, store.clone(), Arc::new(toolgate_core::permit::ApproveAll));
    let answer = openai_answer(&[("c1", "change", r#"{"n": 1}"#)]);
    h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    let first = row(&store, "c1").await;
    assert_eq!(first.arguments, None);
    assert_ne!(first.arguments_hash, 0);
    assert_eq!((first.state.as_ref(), first.attempts), ("success", 1));

    let again = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(error_type(&again.outcomes[0]).as_deref(), Some("execution_failed"));
    assert_eq!(
        row(&store, "c1").await,
        first,
        "the refusal left the original row alone"
    );
}

#[tokio::test]
async fn large_arguments_are_kept_cut_to_the_audit_budget() {
    let store = Arc::new(MemoryStore::new());
    let mut h = harness(vec![echo("look", read_only())], EngineConfig::default());
    h.session = session_on(&h, store.clone(), Arc::new(toolgate_core::permit::ApproveAll));
    let big = "x".repeat(100_000);
    let args = json!({"text": big, "path": "a.txt"}).to_string();
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("big", "look", &args)]),
            TurnOptions::default(),
        )
        .await;
    let r = row(&store, "big").await;
    let kept = r.arguments.unwrap();
    let size = toolgate_core::result::json_size(&kept);
    assert!(size <= toolgate_core::dispatch::AUDIT_BYTES + 512, "{size}");
    assert_eq!(kept["path"], "a.txt", "short values survive the cut");
    assert_eq!(
        r.arguments_hash,
        toolgate_core::guard::canonical_hash(&serde_json::from_str(&args).unwrap()),
        "the hash covers the whole arguments"
    );
}

#[tokio::test]
async fn a_killed_call_is_closed_canceled_and_may_have_run() {
    let store = Arc::new(MemoryStore::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let signal = started.clone();
    let tool = Arc::new(FnTool::new("slow_write", writer(), move |ctx, _| {
        let signal = signal.clone();
        async move {
            signal.notify_one();
            ctx.cancel.cancelled().await;
            Ok(toolgate_core::ToolOutput::json(json!("never")))
        }
    }));
    let mut h = harness(vec![tool], EngineConfig::default());
    h.session = session_on(&h, store.clone(), Arc::new(toolgate_core::permit::ApproveAll));
    let (engine, session) = (h.engine.clone(), h.session.clone());
    let turn = tokio::spawn(async move {
        engine
            .run_turn(
                &session,
                &openai_answer(&[("k1", "slow_write", "{}")]),
                TurnOptions::default(),
            )
            .await
    });
    started.notified().await;
    assert_eq!(store.journal_unfinished().await.unwrap().len(), 1, "open while it runs");
    h.session.kill();
    let turn = turn.await.unwrap();
    assert_eq!(turn.status.as_str(), "stopped_by_user");
    let r = row(&store, "k1").await;
    assert_eq!(
        (r.state.as_ref(), r.error_type.as_deref()),
        ("canceled", Some("canceled"))
    );
    assert!(r.may_have_run, "the tool had started");
    assert!(store.journal_unfinished().await.unwrap().is_empty());
}

/// The audit-tampering path: a model that reuses the id of an earlier write for a harmless read
/// in a later turn cannot overwrite the write's journal row with the read's.
#[tokio::test]
async fn a_reused_call_id_cannot_rewrite_an_earlier_call_s_row() {
    let store = Arc::new(MemoryStore::new());
    let mut h = harness(
        vec![echo("change", writer()), echo("peek", read_only())],
        EngineConfig::default(),
    );
    h.session = session_on(&h, store.clone(), Arc::new(toolgate_core::permit::ApproveAll));
    let write = openai_answer(&[("x1", "change", r#"{"path": "secrets.txt"}"#)]);
    h.engine.run_turn(&h.session, &write, TurnOptions::default()).await;
    let original = row(&store, "x1").await;
    assert_eq!((original.tool.as_str(), original.state.as_ref()), ("change", "success"));
    let cover = openai_answer(&[("x1", "peek", r#"{"q": "nothing to see"}"#)]);
    h.engine.run_turn(&h.session, &cover, TurnOptions::default()).await;
    let after = row(&store, "x1").await;
    assert_eq!(after, original, "the write's record was rewritten by a later read");
}
