//! The seed systems' behaviours, held as tests: TomoriBot's "Execute Tool Call" stage, the Evennia
//! assistant's validation and retries, docker-agent's loop detector, clawft's truncation.

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use toolgate_core::events::Event;
use toolgate_core::tool::{RetryPolicy, ToolOutput, ToolSpec};
use toolgate_core::{AbortReason, EngineConfig, MalformedPolicy, Outcome, ToolError, TurnOptions, TurnStatus};

// ---- TomoriBot ----

#[tokio::test]
async fn a_call_with_no_name_aborts_the_batch_with_nothing_run_under_abort_policy() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let counting = Arc::new(FnTool::new("count", read_only(), move |_, _| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text("ran"))
        }
    }));
    let config = EngineConfig {
        malformed: MalformedPolicy::Abort,
        ..EngineConfig::default()
    };
    let h = harness(vec![counting], config);
    let answer = openai_answer(&[("c1", "count", "{}"), ("c2", "", "{}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::MalformedCall));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing may run");
    assert_eq!(error_type(&turn.outcomes[1]).as_deref(), Some("malformed_call"));
    // Every call id still has exactly one result.
    let ids: Vec<&str> = turn.results().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2"]);
}

#[tokio::test]
async fn a_call_with_no_name_is_reported_and_the_rest_runs_by_default() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let answer = openai_answer(&[("c1", "echo", "{\"a\": 1}"), ("c2", "", "{}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.status, TurnStatus::Continue);
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!({"a": 1}));
    assert_eq!(error_type(&turn.outcomes[1]).as_deref(), Some("malformed_call"));
}

/// What a tool saw of its own cancellation: the token it was handed and whether its future was dropped.
#[derive(Clone, Default)]
struct Witness {
    token: Arc<std::sync::Mutex<Option<tokio_util::sync::CancellationToken>>>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Witness {
    fn cancelled_and_dropped(&self) -> bool {
        let token = self.token.lock().unwrap().clone().expect("the tool ran");
        token.is_cancelled() && self.dropped.load(Ordering::SeqCst)
    }
}

/// A tool that records its token, tells `started`, then waits forever (until dropped).
fn hanging(name: &str, spec: ToolSpec, witness: Witness, started: Arc<Notify>) -> Arc<FnTool> {
    Arc::new(FnTool::new(name, spec, move |ctx, _| {
        let (w, s) = (witness.clone(), started.clone());
        async move {
            *w.token.lock().unwrap() = Some(ctx.cancel.clone());
            let _flag = DropFlag(w.dropped.clone());
            s.notify_one();
            std::future::pending::<()>().await;
            Ok(ToolOutput::text("never"))
        }
    }))
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_a_recorded_failure_the_model_sees_and_cancels_the_work() {
    let witness = Witness::default();
    let config = EngineConfig {
        timeout_ms: 5_000,
        ..EngineConfig::default()
    };
    let h = harness(
        vec![hanging("slow", writer(), witness.clone(), Arc::new(Notify::new()))],
        config,
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("t1", "slow", "{}")]),
            TurnOptions::default(),
        )
        .await;
    match &turn.outcomes[0] {
        Outcome::Recorded {
            success: false, entry, ..
        } => {
            assert_eq!(entry.content["error"]["type"], "timeout");
            assert_eq!(entry.content["error"]["timeout_ms"], 5000);
            assert!(entry.is_error);
        }
        other => panic!("expected a recorded timeout, got {other:?}"),
    }
    assert_eq!(turn.status, TurnStatus::Continue);
    // The tool's token was cancelled and its future dropped: the work stopped, not merely abandoned.
    assert!(witness.cancelled_and_dropped());
}

#[tokio::test]
async fn a_kill_aborts_with_nothing_recorded_and_the_tool_work_cancelled() {
    let started = Arc::new(Notify::new());
    let witness = Witness::default();
    let h = harness(
        vec![hanging("work", writer(), witness.clone(), started.clone())],
        EngineConfig::default(),
    );
    let engine = h.engine.clone();
    let session = h.session.clone();
    let run = tokio::spawn(async move {
        engine
            .run_turn(
                &session,
                &openai_answer(&[("k1", "work", "{}"), ("k2", "work", "{}")]),
                TurnOptions::default(),
            )
            .await
    });
    started.notified().await;
    h.session.kill();
    let turn = run.await.unwrap();
    assert!(witness.cancelled_and_dropped());
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::StoppedByUser));
    for o in &turn.outcomes {
        let Outcome::Abort { reason, entry } = o else {
            panic!("{o:?}")
        };
        assert_eq!(*reason, AbortReason::StoppedByUser);
        // The model never sees a partial result: only the synthetic `canceled`.
        assert_eq!(entry.content["error"]["type"], "canceled");
    }
    // After resuming, the session runs calls again.
    h.session.resume();
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("k3", "missing_tool", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.status, TurnStatus::Continue);
}

#[tokio::test]
async fn a_stop_request_aborts_before_any_tool_runs() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let tool = Arc::new(FnTool::new("t", read_only(), move |_, _| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text("ran"))
        }
    }));
    let h = harness(vec![tool], EngineConfig::default());
    h.session.request_stop();
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("s1", "t", "{}"), ("s2", "t", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::StoppedByUser));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(turn.results().count(), 2);
}

#[tokio::test]
async fn a_stop_lets_calls_in_flight_finish_but_starts_no_new_one() {
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let runs = Arc::new(AtomicU32::new(0));
    let (s, rel, r) = (started.clone(), release.clone(), runs.clone());
    let tool = Arc::new(FnTool::new("w", writer(), move |_, _| {
        let (s, rel, r) = (s.clone(), rel.clone(), r.clone());
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            s.notify_one();
            rel.notified().await;
            Ok(ToolOutput::text("done"))
        }
    }));
    let h = harness(vec![tool], EngineConfig::default());
    let (engine, session) = (h.engine.clone(), h.session.clone());
    let run = tokio::spawn(async move {
        engine
            .run_turn(
                &session,
                &openai_answer(&[("a", "w", "{}"), ("b", "w", "{}")]),
                TurnOptions::default(),
            )
            .await
    });
    started.notified().await;
    h.session.request_stop();
    release.notify_one();
    let turn = run.await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the second call must not start");
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!("done"));
    assert_eq!(error_type(&turn.outcomes[1]).as_deref(), Some("canceled"));
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::StoppedByUser));
}

#[tokio::test]
async fn the_consecutive_error_cap_ends_the_loop_after_exactly_n_failed_calls() {
    let failing = Arc::new(FnTool::new("fail", read_only(), |_, _| async {
        Err(ToolError::failed("boom"))
    }));
    let config = EngineConfig {
        max_consecutive_errors: 3,
        ..EngineConfig::default()
    };
    let h = harness(vec![failing, echo("ok", read_only())], config);
    let mut statuses = Vec::new();
    for i in 0..3 {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("f{i}"), "fail", &format!("{{\"i\": {i}}}"))]),
                TurnOptions::default(),
            )
            .await;
        statuses.push(turn.status);
    }
    assert_eq!(
        statuses,
        [
            TurnStatus::Continue,
            TurnStatus::Continue,
            TurnStatus::Aborted(AbortReason::ConsecutiveErrors)
        ]
    );
    // A success resets the count.
    for (i, tool) in ["fail", "fail", "ok", "fail", "fail"].iter().enumerate() {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("g{i}"), tool, &format!("{{\"i\": {i}}}"))]),
                TurnOptions::default(),
            )
            .await;
        assert_eq!(turn.status, TurnStatus::Continue, "call {i}");
    }
}

#[tokio::test]
async fn every_finished_call_reports_its_duration_split() {
    let mut h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("d1", "echo", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let events = drain(&mut h.events);
    let finished = events
        .iter()
        .find_map(|e| match e {
            Event::CallFinished {
                call_id,
                duration_ms,
                waiting_ms,
                running_ms,
                attempts,
                success,
                ..
            } => Some((
                call_id.as_str().to_owned(),
                *duration_ms,
                *waiting_ms,
                *running_ms,
                *attempts,
                *success,
            )),
            _ => None,
        })
        .expect("a CallFinished event");
    assert_eq!(finished.0, "d1");
    assert!(finished.1 >= finished.2 && finished.1 >= finished.3);
    assert_eq!(finished.4, 1);
    assert!(finished.5);
}

// ---- The Evennia assistant ----

fn flaky(name: &str, spec: ToolSpec, fail_times: u32, counter: Arc<AtomicU32>) -> Arc<FnTool> {
    Arc::new(FnTool::new(name, spec, move |_, _| {
        let counter = counter.clone();
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= fail_times {
                Err(ToolError::retryable(format!("transient failure {n}")))
            } else {
                Ok(ToolOutput::json(json!({"attempt": n})))
            }
        }
    }))
}

#[tokio::test(start_paused = true)]
async fn retryable_errors_are_retried_with_growing_jittered_delays_up_to_four_attempts() {
    let counter = Arc::new(AtomicU32::new(0));
    let mut h = harness(
        vec![flaky("flaky", read_only(), 10, counter.clone())],
        EngineConfig::default(),
    );
    let start = tokio::time::Instant::now();
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("r1", "flaky", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(counter.load(Ordering::SeqCst), 4, "at most 4 attempts");
    let entry = turn.outcomes[0].entry().unwrap();
    assert_eq!(entry.content["error"]["type"], "execution_failed");
    assert_eq!(entry.content["error"]["attempts"], 4);
    let retries: Vec<(u64, u64)> = drain(&mut h.events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Retry { delay_ms, bound_ms, .. } => Some((delay_ms, bound_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        retries.iter().map(|r| r.1).collect::<Vec<_>>(),
        [1000, 2000, 4000],
        "bounds grow ×2 from 1 s"
    );
    assert!(
        retries.iter().all(|(d, b)| d <= b),
        "full jitter stays under the bound: {retries:?}"
    );
    let waited: u64 = retries.iter().map(|r| r.0).sum();
    assert_eq!(
        start.elapsed().as_millis() as u64,
        waited,
        "the delays are slept on the (paused) clock"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_delays_are_jittered() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..5 {
        let counter = Arc::new(AtomicU32::new(0));
        let mut h = harness(vec![flaky("flaky", read_only(), 1, counter)], EngineConfig::default());
        h.engine
            .run_turn(
                &h.session,
                &openai_answer(&[("j", "flaky", "{}")]),
                TurnOptions::default(),
            )
            .await;
        for e in drain(&mut h.events) {
            if let Event::Retry { delay_ms, .. } = e {
                seen.insert(delay_ms);
            }
        }
    }
    assert!(seen.len() > 1, "five draws in 0..=1000 ms were all equal: {seen:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retryable_error_that_clears_succeeds_on_a_later_attempt() {
    let counter = Arc::new(AtomicU32::new(0));
    let h = harness(
        vec![flaky("flaky", idempotent_writer(), 2, counter.clone())],
        EngineConfig::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("r2", "flaky", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!({"attempt": 3}));
}

#[tokio::test(start_paused = true)]
async fn non_idempotent_tools_and_non_retryable_errors_are_not_retried() {
    let counter = Arc::new(AtomicU32::new(0));
    let h = harness(
        vec![flaky("once", writer(), 10, counter.clone())],
        EngineConfig::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("n1", "once", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    assert_eq!(turn.outcomes[0].entry().unwrap().content["error"]["attempts"], 1);

    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let fatal = Arc::new(FnTool::new("fatal", read_only(), move |_, _| {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            Err(ToolError::failed("not found"))
        }
    }));
    let h = harness(vec![fatal], EngineConfig::default());
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("n2", "fatal", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_deadline() {
    let counter = Arc::new(AtomicU32::new(0));
    let mut spec = read_only();
    spec.retry = Some(RetryPolicy {
        max_attempts: 100,
        base: Duration::from_secs(10),
        factor: 1,
        cap: Duration::from_secs(10),
    });
    spec.deadline = Some(Duration::from_secs(25));
    let h = harness(
        vec![flaky("flaky", spec, 1000, counter.clone())],
        EngineConfig::default(),
    );
    let start = tokio::time::Instant::now();
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("dl", "flaky", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert!(start.elapsed() <= Duration::from_secs(25));
    assert!(counter.load(Ordering::SeqCst) < 100);
}

#[tokio::test]
async fn parameters_are_validated_and_coerced_before_the_tool_runs() {
    let schema = json!({
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": 5},
            "unit": {"type": "string", "enum": ["s", "ms"]},
            "label": {"type": "string", "pattern": "^[a-z]+$"},
            "format": {"type": "string"},
            "width": {"type": "integer"}
        },
        "required": ["count"],
        "dependentRequired": {"width": ["format"]}
    });
    let tool = Arc::new(FnTool::new("v", read_only(), |_, a| async move { Ok(ToolOutput::json(a)) }).schema(schema));
    let mut h = harness(vec![tool], EngineConfig::default());
    let cases: &[(&str, Option<&str>)] = &[
        (r#"{"count": "5"}"#, None),
        (r#"{}"#, Some("count")),
        (r#"{"count": 9}"#, Some("/count")),
        (r#"{"count": 1, "unit": "h"}"#, Some("/unit")),
        (r#"{"count": 1, "label": "A1"}"#, Some("/label")),
        (r#"{"count": 1, "width": 3}"#, Some("format")),
    ];
    for (i, (args, expected_error)) in cases.iter().enumerate() {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("v{i}"), "v", args)]),
                TurnOptions::default(),
            )
            .await;
        let entry = turn.outcomes[0].entry().unwrap();
        match expected_error {
            None => assert_eq!(entry.content, json!({"count": 5}), "{args}"),
            Some(needle) => {
                assert_eq!(entry.content["error"]["type"], "invalid_arguments", "{args}");
                assert!(entry.content.to_string().contains(needle), "{args}: {}", entry.content);
            }
        }
    }
    let coerced = drain(&mut h.events).into_iter().any(
        |e| matches!(e, Event::ArgumentsAdjusted { ref warnings, .. } if warnings.iter().any(|w| w.contains("/count"))),
    );
    assert!(coerced, "the coercion is reported as a warning event");
}

// ---- docker-agent's loop detector, through the engine ----

#[tokio::test]
async fn the_nth_identical_batch_is_not_run() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let tool = Arc::new(FnTool::new("look", read_only(), move |_, _| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text("same"))
        }
    }));
    let h = harness(vec![tool], EngineConfig::default());
    let mut statuses = Vec::new();
    for (i, args) in [r#"{"a": 1, "b": 2}"#, r#"{"b": 2, "a": 1}"#, r#"{"a": 1, "b": 2}"#]
        .iter()
        .enumerate()
    {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("l{i}"), "look", args)]),
                TurnOptions::default(),
            )
            .await;
        statuses.push(turn.status);
        if i == 2 {
            assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("loop_detected"));
        }
    }
    assert_eq!(statuses[2], TurnStatus::Aborted(AbortReason::LoopDetected));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the third identical batch must not run");
}

// ---- clawft's truncation, through the engine, with read_result paging ----

#[tokio::test]
async fn big_results_are_truncated_within_budget_and_kept_under_a_handle() {
    let big = Arc::new(FnTool::new("big", read_only(), |_, _| async {
        Ok(ToolOutput::json(
            json!({"exit_code": 1, "stdout": "o".repeat(200_000), "stderr": "e".repeat(10) + "THE END"}),
        ))
    }));
    let config = EngineConfig {
        budget_bytes: 4096,
        ..EngineConfig::default()
    };
    let h = harness(vec![big], config);
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("b1", "big", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let entry = turn.outcomes[0].entry().unwrap();
    assert!(entry.content.to_string().len() <= 4096);
    assert_eq!(entry.content["exit_code"], 1);
    assert!(entry.content["stderr"].as_str().unwrap().ends_with("THE END"));
    let stdout = entry.content["stdout"].as_str().unwrap();
    let handle = stdout
        .split("read_result handle=")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("the marker names a handle");
    let full = h.session.results().get(h.session.id(), handle).await.expect("kept");
    assert_eq!(full["stdout"].as_str().unwrap().len(), 200_000);
    // Another session cannot see it.
    let other = toolgate_core::SessionId::new("someone-else");
    assert!(h.session.results().get(&other, handle).await.is_none());
}

#[tokio::test]
async fn empty_output_becomes_no_output() {
    let quiet = Arc::new(FnTool::new("quiet", read_only(), |_, _| async {
        Ok(ToolOutput::json(Value::Null))
    }));
    let h = harness(vec![quiet], EngineConfig::default());
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("q", "quiet", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!("(no output)"));
}
