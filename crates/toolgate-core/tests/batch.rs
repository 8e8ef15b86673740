//! Batches: read-only calls run together (bounded), any other call waits for every earlier call
//! and blocks every later one; results come back in the model's order; terminal and restart.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Barrier;
use toolgate_core::tool::ToolOutput;
use toolgate_core::{EngineConfig, Outcome, TurnOptions, TurnStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_run_together() {
    // Each call waits at a barrier for all three: only concurrent calls can pass it.
    let barrier = Arc::new(Barrier::new(3));
    let b = barrier.clone();
    let tool = Arc::new(FnTool::new("meet", read_only(), move |_, args| {
        let b = b.clone();
        async move {
            b.wait().await;
            Ok(ToolOutput::json(args))
        }
    }));
    let h = harness(vec![tool], EngineConfig::default());
    let answer = openai_answer(&[
        ("a", "meet", "{\"n\": 1}"),
        ("b", "meet", "{\"n\": 2}"),
        ("c", "meet", "{\"n\": 3}"),
    ]);
    // The bound only turns a regression (serial runs deadlock at the barrier) into a failure.
    let turn = tokio::time::timeout(
        Duration::from_secs(30),
        h.engine.run_turn(&h.session, &answer, TurnOptions::default()),
    )
    .await
    .expect("read-only calls must run concurrently");
    let ns: Vec<_> = turn.results().map(|r| r.content["n"].clone()).collect();
    assert_eq!(ns, [json!(1), json!(2), json!(3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writing_call_waits_for_earlier_calls_and_blocks_later_ones() {
    let active = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let (active, log) = (active.clone(), log.clone());
        Arc::new(FnTool::new("reader", read_only(), move |_, args| {
            let (active, log) = (active.clone(), log.clone());
            async move {
                active.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                log.lock().unwrap().push(format!("r{}", args["n"]));
                active.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::text("r"))
            }
        }))
    };
    let writer_tool = {
        let (active, log) = (active.clone(), log.clone());
        Arc::new(FnTool::new("writer", writer(), move |_, _| {
            let (active, log) = (active.clone(), log.clone());
            async move {
                let others = active.load(Ordering::SeqCst);
                log.lock().unwrap().push(format!("w(others={others})"));
                Ok(ToolOutput::text("w"))
            }
        }))
    };
    let h = harness(vec![reader, writer_tool], EngineConfig::default());
    let answer = openai_answer(&[
        ("1", "reader", "{\"n\": 1}"),
        ("2", "reader", "{\"n\": 2}"),
        ("3", "writer", "{}"),
        ("4", "reader", "{\"n\": 4}"),
    ]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    let log = log.lock().unwrap().clone();
    let w = log.iter().position(|e| e.starts_with('w')).unwrap();
    assert_eq!(log[w], "w(others=0)", "the writer ran alone: {log:?}");
    assert!(
        log[..w].contains(&"r1".to_string()) && log[..w].contains(&"r2".to_string()),
        "{log:?}"
    );
    assert_eq!(log[w + 1..], ["r4".to_string()], "{log:?}");
    let ids: Vec<&str> = turn.results().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "3", "4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallelism_is_bounded() {
    let active = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let tool = {
        let (active, peak) = (active.clone(), peak.clone());
        Arc::new(FnTool::new("r", read_only(), move |_, _| {
            let (active, peak) = (active.clone(), peak.clone());
            async move {
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                active.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::text("ok"))
            }
        }))
    };
    let config = EngineConfig {
        max_parallel: 3,
        ..EngineConfig::default()
    };
    let h = harness(vec![tool], config);
    let calls: Vec<(String, String)> = (0..20).map(|i| (format!("c{i}"), format!("{{\"i\": {i}}}"))).collect();
    let refs: Vec<(&str, &str, &str)> = calls.iter().map(|(id, a)| (id.as_str(), "r", a.as_str())).collect();
    let turn = h
        .engine
        .run_turn(&h.session, &openai_answer(&refs), TurnOptions::default())
        .await;
    assert_eq!(turn.results().count(), 20);
    assert!(peak.load(Ordering::SeqCst) <= 3, "peak {}", peak.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_failure_never_drops_a_sibling_and_a_panic_still_gets_a_result() {
    let panicky = Arc::new(FnTool::new("panicky", read_only(), |_, _| async {
        if true {
            panic!("tool bug");
        }
        Ok(ToolOutput::text("unreachable"))
    }));
    let h = harness(vec![panicky, echo("echo", read_only())], EngineConfig::default());
    let answer = openai_answer(&[("p", "panicky", "{}"), ("e", "echo", "{\"x\": 1}"), ("u", "nope", "{}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("execution_failed"));
    assert_eq!(turn.outcomes[1].entry().unwrap().content, json!({"x": 1}));
    assert_eq!(error_type(&turn.outcomes[2]).as_deref(), Some("unknown_tool"));
}

#[tokio::test]
async fn after_a_terminal_call_the_rest_of_the_batch_runs_and_the_turn_ends() {
    let h = harness(
        vec![echo("finish", terminal()), echo("echo", read_only())],
        EngineConfig::default(),
    );
    let answer = openai_answer(&[("f", "finish", "{}"), ("e", "echo", "{\"after\": true}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.status, TurnStatus::EndTurn);
    assert_eq!(turn.outcomes[1].entry().unwrap().content, json!({"after": true}));
    assert!(matches!(turn.outcomes[0], Outcome::Recorded { end_turn: true, .. }));
}

#[tokio::test]
async fn a_restart_records_nothing_and_hands_back_its_context() {
    let enrich = Arc::new(FnTool::new("enrich", read_only(), |_, _| async {
        Ok(ToolOutput {
            restart: Some(json!({"memory": "the user prefers metric units"})),
            ..ToolOutput::text("")
        })
    }));
    let h = harness(vec![enrich], EngineConfig::default());
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("x", "enrich", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.status, TurnStatus::Restart);
    assert!(turn.messages.is_empty());
    assert_eq!(
        turn.restart_context,
        Some(json!({"memory": "the user prefers metric units"}))
    );
}

#[tokio::test]
async fn dangerous_tools_are_capped_per_turn_when_they_reach_execution() {
    let mut spec = writer();
    spec.category = toolgate_core::tool::Category::Dangerous;
    let h = harness(vec![echo("nuke", spec)], EngineConfig::default());
    let answer = openai_answer(&[("a", "nuke", "{\"n\": 1}"), ("b", "nuke", "{\"n\": 2}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!({"n": 1}));
    assert_eq!(error_type(&turn.outcomes[1]).as_deref(), Some("rate_limited"));
    // The next turn may run it again.
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("c", "nuke", "{\"n\": 3}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!({"n": 3}));
}
