//! Stage 9: scopes, single flight, failures never cached, only read-only or idempotent tools,
//! hits marked, the untruncated result kept.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use toolgate_core::events::Event;
use toolgate_core::store::MemoryStore;
use toolgate_core::tool::{CacheScope, CacheSpec, ToolOutput, ToolSpec};
use toolgate_core::{EngineConfig, Session, SessionOptions, ToolError, TurnOptions};

fn counting(spec: ToolSpec, runs: Arc<AtomicU32>, fail_first: bool) -> Arc<FnTool> {
    Arc::new(FnTool::new("look", spec, move |_, args| {
        let runs = runs.clone();
        async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            // Yield so concurrent identical calls overlap.
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            if fail_first && n == 1 {
                return Err(ToolError::failed("first run fails"));
            }
            Ok(ToolOutput::json(json!({"args": args, "big": "x".repeat(5000)})))
        }
    }))
}

fn cached(base: ToolSpec, scope: CacheScope) -> ToolSpec {
    ToolSpec {
        cache: Some(CacheSpec {
            scope,
            ttl: Duration::from_secs(600),
        }),
        ..base
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_run_once_and_hits_are_marked() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut h = harness(
        vec![counting(cached(read_only(), CacheScope::Turn), runs.clone(), false)],
        EngineConfig::default(),
    );
    let answer = openai_answer(&[
        ("a", "look", "{\"q\": 1}"),
        ("b", "look", "{\"q\": 1}"),
        ("c", "look", "{\"q\": 2}"),
    ]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "q=1 ran once for two calls, q=2 once");
    assert_eq!(
        turn.outcomes[0].entry().unwrap().content,
        turn.outcomes[1].entry().unwrap().content
    );
    let finished: Vec<(bool, u32)> = drain(&mut h.events)
        .into_iter()
        .filter_map(|e| match e {
            Event::CallFinished {
                cache_hit, attempts, ..
            } => Some((cache_hit, attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(finished.iter().filter(|(hit, _)| *hit).count(), 1);
    // A miss ran the tool and says so; a hit did not.
    assert!(
        finished
            .iter()
            .all(|(hit, attempts)| *attempts == if *hit { 0 } else { 1 }),
        "{finished:?}"
    );
    // Turn scope: the next turn runs again.
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("d", "look", "{\"q\": 1}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn session_scope_spans_turns_but_not_sessions_and_keeps_the_full_result() {
    let runs = Arc::new(AtomicU32::new(0));
    let config = EngineConfig {
        budget_bytes: 1024,
        ..EngineConfig::default()
    };
    let h = harness(
        vec![counting(cached(read_only(), CacheScope::Session), runs.clone(), false)],
        config,
    );
    for id in ["a", "b"] {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(id, "look", "{\"q\": 1}")]),
                TurnOptions::default(),
            )
            .await;
        // Truncated for the model both times: the cache held the untruncated result.
        let shown = turn.outcomes[0].entry().unwrap().content["big"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(shown.contains("bytes truncated"), "{shown}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let other = Arc::new(Session::new(h.engine.config(), SessionOptions::default()));
    h.engine
        .run_turn(
            &other,
            &openai_answer(&[("c", "look", "{\"q\": 1}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "another session does not share session-scoped entries"
    );
}

#[tokio::test]
async fn persistent_scope_goes_through_the_store_across_sessions() {
    let runs = Arc::new(AtomicU32::new(0));
    let h = harness(
        vec![counting(
            cached(read_only(), CacheScope::Persistent),
            runs.clone(),
            false,
        )],
        EngineConfig::default(),
    );
    let store = Arc::new(MemoryStore::new());
    for _ in 0..2 {
        let session = Arc::new(Session::new(
            h.engine.config(),
            SessionOptions {
                store: Some(store.clone()),
                ..SessionOptions::default()
            },
        ));
        h.engine
            .run_turn(
                &session,
                &openai_answer(&[("p", "look", "{\"q\": 1}")]),
                TurnOptions::default(),
            )
            .await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failures_are_never_cached() {
    let runs = Arc::new(AtomicU32::new(0));
    let h = harness(
        vec![counting(cached(read_only(), CacheScope::Session), runs.clone(), true)],
        EngineConfig::default(),
    );
    let first = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "look", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(error_type(&first.outcomes[0]).as_deref(), Some("execution_failed"));
    let second = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("b", "look", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert!(second.outcomes[0].entry().unwrap().content.get("args").is_some());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn tools_that_are_neither_read_only_nor_idempotent_are_never_cached() {
    let runs = Arc::new(AtomicU32::new(0));
    let h = harness(
        vec![counting(cached(writer(), CacheScope::Session), runs.clone(), false)],
        EngineConfig::default(),
    );
    for id in ["a", "b"] {
        h.engine
            .run_turn(
                &h.session,
                &openai_answer(&[(id, "look", "{}")]),
                TurnOptions::default(),
            )
            .await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
