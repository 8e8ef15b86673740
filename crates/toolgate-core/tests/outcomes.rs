//! Outcomes that tell the truth: what the model, the exit code, the journal and the metrics say
//! about a call is what happened to it. Each test here failed on the dispatcher before the stage
//! table (issue 15).

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use toolgate_core::config::ToolSettings;
use toolgate_core::error::ErrorKind;
use toolgate_core::hooks::{Hook, HookEvent, PostHookOutput};
use toolgate_core::permit::{Answer, ApprovalRequest, Approver, Policy};
use toolgate_core::store::{JournalFilter, JournalRow};
use toolgate_core::tool::{Category, ToolOutput, ToolSpec};
use toolgate_core::{EngineConfig, Outcome, Registry, Session, SessionOptions, TurnOptions, TurnStatus};

async fn rows(h: &Harness) -> Vec<JournalRow> {
    let mut rows = h.session.store().journal_list(&JournalFilter::default()).await.unwrap();
    rows.sort_by(|a, b| a.call_id.as_str().cmp(b.call_id.as_str()));
    rows
}

fn row<'a>(rows: &'a [JournalRow], id: &str) -> &'a JournalRow {
    rows.iter()
        .find(|r| r.call_id.as_str() == id)
        .unwrap_or_else(|| panic!("no journal row for {id}: {rows:#?}"))
}

/// Counts the asks and approves each.
#[derive(Default)]
struct Counting(AtomicU32);

#[async_trait]
impl Approver for Counting {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        self.0.fetch_add(1, Ordering::SeqCst);
        Answer::ApproveOnce
    }
}

struct Blocks;

#[async_trait]
impl Hook for Blocks {
    fn matches(&self, _: &str) -> bool {
        true
    }
    async fn post_tool_use(&self, _: &HookEvent) -> PostHookOutput {
        PostHookOutput {
            block: Some("the result holds a customer's address".into()),
            ..PostHookOutput::default()
        }
    }
}

#[tokio::test]
async fn a_result_a_post_hook_blocks_is_a_refusal_everywhere() {
    let mut registry = Registry::new();
    registry.register(echo("lookup", read_only()));
    let engine =
        Arc::new(toolgate_core::Engine::new(registry, EngineConfig::default()).with_hooks(vec![Arc::new(Blocks)]));
    let session = Arc::new(Session::new(engine.config(), SessionOptions::default()));
    let answer = toolgate_core::Answer::parse(
        toolgate_core::Format::Anthropic,
        &json!({"role": "assistant", "content": [{"type": "tool_use", "id": "b1", "name": "lookup", "input": {"who": "ann"}}]}),
    )
    .unwrap();
    let turn = engine.run_turn(&session, &answer, TurnOptions::default()).await;
    let Outcome::Recorded { entry, success, .. } = &turn.outcomes[0] else {
        panic!("{:?}", turn.outcomes[0]);
    };
    assert!(!success);
    assert_eq!(entry.error_kind, Some(ErrorKind::HookDenied));
    assert_eq!(entry.content["error"]["type"], "hook_denied");
    assert!(
        !entry.content.to_string().contains("ann"),
        "the withheld result is not shown"
    );
    // Anthropic's error flag is set on the tool_result the model gets.
    let result = &turn.messages[1]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["is_error"], true, "{result}");
    let rows = session.store().journal_list(&JournalFilter::default()).await.unwrap();
    assert_eq!(rows[0].state, "error");
    assert_eq!(rows[0].error_type.as_deref(), Some("hook_denied"));
    assert_eq!(
        rows[0].hooks.as_ref().unwrap()["post"]["blocked"],
        "the result holds a customer's address"
    );
}

#[tokio::test]
async fn the_per_turn_cap_refuses_before_anyone_is_asked() {
    let approver = Arc::new(Counting::default());
    let spec = ToolSpec {
        category: Category::Dangerous,
        ..writer()
    };
    let h = harness_with(
        vec![echo("deploy", spec)],
        EngineConfig::default(),
        approver.clone(),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("d1", "deploy", "{}"), ("d2", "deploy", "{}"), ("d3", "deploy", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let kinds: Vec<Option<String>> = turn.outcomes.iter().map(error_type).collect();
    assert_eq!(kinds, [None, Some("rate_limited".into()), Some("rate_limited".into())]);
    assert_eq!(
        approver.0.load(Ordering::SeqCst),
        1,
        "only the call that can run is put to a person"
    );
}

#[tokio::test]
async fn a_slot_of_a_call_refused_before_it_runs_is_given_back() {
    struct RejectFirst(AtomicU32);
    #[async_trait]
    impl Approver for RejectFirst {
        async fn approve(&self, _: &ApprovalRequest) -> Answer {
            match self.0.fetch_add(1, Ordering::SeqCst) {
                0 => Answer::Reject(Some("not that one".into())),
                _ => Answer::ApproveOnce,
            }
        }
    }
    let spec = ToolSpec {
        category: Category::Dangerous,
        ..writer()
    };
    let h = harness_with(
        vec![echo("deploy", spec)],
        EngineConfig::default(),
        Arc::new(RejectFirst(AtomicU32::new(0))),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("d1", "deploy", "{}"), ("d2", "deploy", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let kinds: Vec<Option<String>> = turn.outcomes.iter().map(error_type).collect();
    assert_eq!(
        kinds,
        [Some("rejected_by_user".into()), None],
        "the rejected call did not use up the turn's one run"
    );
}

fn failing(kind: ErrorKind) -> Arc<dyn toolgate_core::Tool> {
    Arc::new(FnTool::new("sh", writer(), move |_, _| async move {
        Ok(ToolOutput::json(json!({"exit_code": 3, "stdout": "", "stderr": "boom"})).failed(kind))
    }))
}

#[tokio::test]
async fn a_tool_that_ran_and_failed_is_unsuccessful_and_keeps_its_output() {
    for (kind, journalled) in [
        (ErrorKind::ExecutionFailed, "execution_failed"),
        (ErrorKind::Timeout, "timeout"),
    ] {
        let mut h = harness(vec![failing(kind)], EngineConfig::default());
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[("s1", "sh", "{}")]),
                TurnOptions::default(),
            )
            .await;
        let Outcome::Recorded { entry, success, .. } = &turn.outcomes[0] else {
            panic!("{:?}", turn.outcomes[0]);
        };
        assert!(!success);
        assert!(entry.is_error);
        assert_eq!(
            entry.content["stderr"], "boom",
            "the model still sees what the command printed"
        );
        let rows = rows(&h).await;
        assert_eq!(
            (rows[0].state.as_ref(), rows[0].error_type.as_deref()),
            ("error", Some(journalled))
        );
        let finished = drain(&mut h.events)
            .into_iter()
            .find_map(|e| match e {
                toolgate_core::events::Event::CallFinished {
                    success, error_type, ..
                } => Some((success, error_type)),
                _ => None,
            })
            .unwrap();
        assert_eq!(finished, (false, Some(journalled)), "metrics say what the journal says");
    }
}

#[tokio::test]
async fn a_failed_output_is_never_cached() {
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let spec = ToolSpec {
        cache: Some(toolgate_core::tool::CacheSpec {
            scope: toolgate_core::tool::CacheScope::Session,
            ttl: std::time::Duration::from_secs(60),
        }),
        ..read_only()
    };
    let tool = Arc::new(FnTool::new("probe", spec, move |_, _| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok(ToolOutput::json(json!({"n": n})).failed(ErrorKind::ExecutionFailed)) }
    }));
    let h = harness(vec![tool], EngineConfig::default());
    for id in ["p1", "p2"] {
        h.engine
            .run_turn(
                &h.session,
                &openai_answer(&[(id, "probe", "{}")]),
                TurnOptions::default(),
            )
            .await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_approval_timeout_is_not_a_person_s_no() {
    struct Never;
    #[async_trait]
    impl Approver for Never {
        async fn approve(&self, _: &ApprovalRequest) -> Answer {
            std::future::pending().await
        }
    }
    let h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(Never),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let entry = turn.outcomes[0].entry().unwrap();
    assert_eq!(entry.content["error"]["source"], "approval_timeout");
    let rows = rows(&h).await;
    assert_eq!(rows[0].source.as_deref(), Some("approval_timeout"));
    assert_eq!(rows[0].decision.as_deref(), Some("deny"));
}

#[tokio::test]
async fn an_ask_that_could_not_be_made_is_a_failure_not_a_refusal() {
    struct Broken;
    #[async_trait]
    impl Approver for Broken {
        async fn approve(&self, _: &ApprovalRequest) -> Answer {
            Answer::Failed("state store: the disk is full".into())
        }
    }
    let h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(Broken),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let entry = turn.outcomes[0].entry().unwrap();
    assert_eq!(entry.content["error"]["type"], "execution_failed", "{}", entry.content);
    assert_eq!(entry.content["error"]["source"], "approval_failed");
    let message = entry.content["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the disk is full") && message.contains("Nobody was asked"),
        "{message}"
    );
    let rows = rows(&h).await;
    assert_eq!(rows[0].source.as_deref(), Some("approval_failed"));
}

#[tokio::test]
async fn every_call_that_reaches_the_pipeline_has_a_row() {
    let typed = Arc::new(
        FnTool::new(
            "typed",
            read_only(),
            |_, args| async move { Ok(ToolOutput::json(args)) },
        )
        .schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})),
    );
    let h = harness(vec![echo("read", read_only()), typed], EngineConfig::default());
    let run = |calls: &'static [(&'static str, &'static str, &'static str)]| {
        let (engine, session) = (h.engine.clone(), h.session.clone());
        async move {
            engine
                .run_turn(&session, &openai_answer(calls), TurnOptions::default())
                .await
        }
    };
    run(&[
        ("ok", "read", "{}"),
        ("unknown", "no_such_tool", "{}"),
        ("invalid", "typed", r#"{"n": "x"}"#),
    ])
    .await;
    let narrowed = TurnOptions {
        allowlist: Some(vec!["read".into()]),
        ..TurnOptions::default()
    };
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("hidden", "typed", r#"{"n": 1}"#)]),
            narrowed,
        )
        .await;
    // The loop detector: the third identical batch is refused, and journalled.
    for id in ["l1", "l2", "l3"] {
        h.engine
            .run_turn(
                &h.session,
                &openai_answer(&[(id, "read", r#"{"q": 1}"#)]),
                TurnOptions::default(),
            )
            .await;
    }
    // A refused call reusing a call id never overwrites the row that id already has.
    run(&[("ok", "no_such_tool", "{}")]).await;
    let rows = rows(&h).await;
    assert_eq!(rows.len(), 7, "{rows:#?}");
    assert_eq!(row(&rows, "ok").state, "success");
    assert_eq!(row(&rows, "ok").tool.as_str(), "read");
    assert_eq!(row(&rows, "unknown").error_type.as_deref(), Some("unknown_tool"));
    assert_eq!(row(&rows, "invalid").error_type.as_deref(), Some("invalid_arguments"));
    assert_eq!(row(&rows, "hidden").error_type.as_deref(), Some("not_available"));
    assert_eq!(row(&rows, "l3").error_type.as_deref(), Some("loop_detected"));
    assert_eq!(row(&rows, "l2").state, "success");
}

#[tokio::test]
async fn the_loop_detector_can_be_switched_off_and_exempts_a_configured_tool() {
    let off = EngineConfig {
        loop_threshold: 0,
        ..EngineConfig::default()
    };
    assert!(off.check().is_ok());
    let h = harness(vec![echo("poll", read_only())], off);
    for n in 0..10 {
        let id = format!("p{n}");
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&id, "poll", "{}")]),
                TurnOptions::default(),
            )
            .await;
        assert_eq!(error_type(&turn.outcomes[0]), None, "call {n}");
    }
    let mut exempt = EngineConfig::default();
    exempt.tools.insert(
        "poll".into(),
        ToolSettings {
            loop_exempt: true,
            ..ToolSettings::default()
        },
    );
    let h = harness(vec![echo("poll", read_only())], exempt);
    for n in 0..10 {
        let id = format!("p{n}");
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&id, "poll", "{}")]),
                TurnOptions::default(),
            )
            .await;
        assert_eq!(error_type(&turn.outcomes[0]), None, "call {n}");
    }
    let one = EngineConfig {
        loop_threshold: 1,
        ..EngineConfig::default()
    };
    assert!(one.check().unwrap_err().contains("0 to switch"));
}

#[tokio::test]
async fn tool_settings_set_category_cap_timeout_and_budget() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let saw = seen.clone();
    let tool = Arc::new(FnTool::new("job", writer(), move |ctx, _| {
        *saw.lock().unwrap() = Some(ctx.timeout);
        async move { Ok(ToolOutput::text("x".repeat(5000))) }
    }));
    let mut config = EngineConfig {
        timeout_ms: 2_000,
        ..EngineConfig::default()
    };
    config.tools.insert(
        "job".into(),
        ToolSettings {
            category: Some(Category::Terminal),
            max_per_turn: Some(1),
            timeout_ms: Some(60_000),
            budget_bytes: Some(1_000),
            loop_exempt: false,
            ..ToolSettings::default()
        },
    );
    let h = harness(vec![tool], config);
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("j1", "job", "{}"), ("j2", "job", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.status, TurnStatus::EndTurn, "terminal by configuration");
    assert_eq!(error_type(&turn.outcomes[1]).as_deref(), Some("rate_limited"));
    let kept = turn.outcomes[0].entry().unwrap().content.to_string().len();
    assert!((900..=1_000).contains(&kept), "the configured budget: {kept}");
    assert_eq!(
        *seen.lock().unwrap(),
        Some(std::time::Duration::from_millis(2_000)),
        "a tool's timeout never exceeds the engine's"
    );
}

#[tokio::test]
async fn a_named_session_s_error_count_survives_into_its_next_process() {
    let config = EngineConfig {
        max_consecutive_errors: 3,
        ..EngineConfig::default()
    };
    let mut registry = Registry::new();
    registry.register(echo("read", read_only()));
    let engine = Arc::new(toolgate_core::Engine::new(registry, config));
    let store: Arc<dyn toolgate_core::store::Store> = Arc::new(toolgate_core::store::MemoryStore::new());
    let open = || {
        Arc::new(Session::new(
            engine.config(),
            SessionOptions {
                id: Some(toolgate_core::SessionId::new("named")),
                store: Some(store.clone()),
                ..SessionOptions::default()
            },
        ))
    };
    let first = open();
    for (id, args) in [("e1", r#"{"n": 1}"#), ("e2", r#"{"n": 2}"#)] {
        engine
            .run_turn(&first, &openai_answer(&[(id, "nope", args)]), TurnOptions::default())
            .await;
    }
    first.save_guards().await.unwrap();
    let second = open();
    second.load_guards().await.unwrap();
    let turn = engine
        .run_turn(
            &second,
            &openai_answer(&[("e3", "nope", r#"{"n": 3}"#)]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(
        turn.status,
        TurnStatus::Aborted(toolgate_core::AbortReason::ConsecutiveErrors),
        "the third failure in a row of the session, across processes"
    );
}
