//! The agent loop against scripted models: every end status, restart, model override, batches,
//! and continuing after a kill.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolgate_core::agent::ModelRouter;
use toolgate_core::events::Event;
use toolgate_core::hooks::{Hook, HookEvent, PostHookOutput};
use toolgate_core::tool::{ToolOutput, ToolSpec};
use toolgate_core::{
    Agent, AgentConfig, AgentStatus, Answer, EngineConfig, Format, Model, ModelError, ModelErrorKind, ModelRequest,
    ToolError,
};

/// One scripted step: an answer body, an error, or "wait until cancelled".
enum Step {
    Body(Value),
    Fail(ModelError),
    Hang,
}

/// A model that plays scripted answers in the OpenAI Chat format and keeps every request.
struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<ModelRequest>>,
    name: String,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Self> {
        Self::named("scripted:main", steps)
    }

    fn named(name: &str, steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Self {
            steps: Mutex::new(steps.into()),
            requests: Mutex::new(Vec::new()),
            name: name.into(),
        })
    }

    fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl Model for Scripted {
    fn format(&self) -> Format {
        Format::Openai
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
    async fn complete(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<Answer, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        let step = self.steps.lock().unwrap().pop_front();
        match step {
            Some(Step::Body(body)) => {
                Answer::parse(Format::Openai, &body).map_err(|e| ModelError::new(ModelErrorKind::InvalidResponse, e.0))
            }
            Some(Step::Fail(e)) => Err(e),
            Some(Step::Hang) => {
                cancel.cancelled().await;
                Err(ModelError::new(ModelErrorKind::Canceled, "canceled"))
            }
            None => Err(ModelError::new(ModelErrorKind::Replay, "the script ran out")),
        }
    }
}

fn text(t: &str) -> Step {
    Step::Body(json!({"role": "assistant", "content": t}))
}

fn calls(calls: &[(&str, &str, Value)]) -> Step {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    Step::Body(json!({"role": "assistant", "content": null, "tool_calls": calls}))
}

fn agent(h: &Harness, model: Arc<Scripted>, config: AgentConfig) -> Agent {
    Agent::new(h.engine.clone(), h.session.clone(), model, config)
}

/// Every tool call id in the history has exactly one result, and every result answers a call.
fn assert_history_valid(history: &[Value]) {
    let mut calls: Vec<String> = Vec::new();
    let mut results: HashMap<String, usize> = HashMap::new();
    for m in history {
        for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            calls.push(c["id"].as_str().unwrap().to_owned());
        }
        if m["role"] == "tool" {
            *results
                .entry(m["tool_call_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    for id in &calls {
        assert_eq!(
            results.get(id),
            Some(&1),
            "call {id} must have exactly one result: {history:#?}"
        );
    }
    assert_eq!(results.len(), calls.len(), "results without calls: {history:#?}");
}

#[tokio::test]
async fn a_text_answer_ends_the_run_with_its_text() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![text("All done.")]);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let run = a.run("hello").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.text.as_deref(), Some("All done."));
    assert_eq!(run.iterations, 1);
    let req = &model.requests()[0];
    assert_eq!(req.messages, vec![json!({"role": "user", "content": "hello"})]);
    assert_eq!(
        req.tools[0]["function"]["name"], "echo",
        "the exposed tools are offered"
    );
    assert_eq!(a.history().len(), 2);
}

#[tokio::test]
async fn tool_results_are_sent_back_and_the_loop_continues() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![calls(&[("c1", "echo", json!({"x": 1}))]), text("x is 1")]);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let run = a.run("what is x?").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.iterations, 2);
    let second = &model.requests()[1];
    assert_eq!(second.messages.len(), 3);
    assert_eq!(second.messages[1]["tool_calls"][0]["id"], "c1");
    assert_eq!(
        second.messages[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "{\"x\":1}"})
    );
    assert_history_valid(a.history());
}

#[tokio::test]
async fn a_terminal_tool_ends_the_turn() {
    let h = harness(vec![echo("finish", terminal())], EngineConfig::default());
    let model = Scripted::new(vec![calls(&[("c1", "finish", json!({}))]), text("never asked")]);
    let run = agent(&h, model.clone(), AgentConfig::default()).run("go").await;
    assert_eq!(run.status, AgentStatus::EndTurn);
    assert_eq!(model.requests().len(), 1);
}

fn counting_calls(n: usize) -> Vec<Step> {
    (0..n)
        .map(|i| calls(&[(&format!("c{i}"), "echo", json!({"i": i}))]))
        .collect()
}

#[tokio::test]
async fn max_iterations_ends_the_run_and_names_the_limit() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(counting_calls(10));
    let config = AgentConfig {
        max_iterations: 3,
        ..AgentConfig::default()
    };
    let mut a = agent(&h, model.clone(), config);
    let run = a.run("loop").await;
    assert_eq!(run.status, AgentStatus::MaxIterations { limit: 3 });
    assert!(!run.answered());
    assert_eq!(run.status.to_string(), "max_iterations (3)");
    assert!(run.detail.unwrap().contains("max_iterations = 3"));
    assert_eq!(model.requests().len(), 3);
    assert_history_valid(a.history());
}

#[tokio::test]
async fn max_iterations_is_at_least_one() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![text("fine")]);
    let config = AgentConfig {
        max_iterations: 0,
        ..AgentConfig::default()
    };
    let run = agent(&h, model, config).run("q").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
}

#[tokio::test]
async fn final_answer_on_limit_makes_one_last_call_without_tools() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let mut steps = counting_calls(2);
    steps.push(text("Here is what I found."));
    let model = Scripted::new(steps);
    let config = AgentConfig {
        max_iterations: 2,
        final_answer_on_limit: true,
        ..AgentConfig::default()
    };
    let mut a = agent(&h, model.clone(), config);
    let run = a.run("loop").await;
    assert_eq!(run.status, AgentStatus::MaxIterations { limit: 2 });
    assert_eq!(run.text.as_deref(), Some("Here is what I found."));
    assert!(
        run.answered(),
        "an answer made at the limit is an answer (the CLI exits 0)"
    );
    assert!(!run.detail.as_deref().unwrap().contains("without a final answer"));
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].has_tools());
    assert!(!requests[2].has_tools(), "the last call offers no tools");
    assert_eq!(a.history().last().unwrap()["content"], "Here is what I found.");
    assert_history_valid(a.history());
}

#[tokio::test]
async fn identical_batches_end_the_run_as_loop_detected() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let steps = (0..5)
        .map(|i| calls(&[(&format!("c{i}"), "echo", json!({"same": true}))]))
        .collect();
    let model = Scripted::new(steps);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let run = a.run("loop").await;
    assert_eq!(run.status, AgentStatus::LoopDetected);
    assert_eq!(run.iterations, 3, "the third identical batch is not run");
    assert_history_valid(a.history());
}

#[tokio::test]
async fn the_same_call_returning_the_same_output_counts_as_a_loop_when_enabled() {
    // A, B, A: no two consecutive batches are identical, but A returned the same output twice.
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let steps = vec![
        calls(&[("c1", "echo", json!({"a": 1}))]),
        calls(&[("c2", "echo", json!({"b": 1}))]),
        calls(&[("c3", "echo", json!({"a": 1}))]),
        text("never"),
    ];
    let config = AgentConfig {
        result_loop_threshold: 2,
        ..AgentConfig::default()
    };
    let run = agent(&h, Scripted::new(steps), config).run("loop").await;
    assert_eq!(run.status, AgentStatus::LoopDetected);
    assert_eq!(run.iterations, 3);
    assert!(run.detail.unwrap().contains("same output 2 times"));

    // Off by default: the same script reaches the answer.
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let steps = vec![
        calls(&[("c1", "echo", json!({"a": 1}))]),
        calls(&[("c2", "echo", json!({"b": 1}))]),
        calls(&[("c3", "echo", json!({"a": 1}))]),
        text("done"),
    ];
    let run = agent(&h, Scripted::new(steps), AgentConfig::default())
        .run("loop")
        .await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
}

#[tokio::test]
async fn consecutive_errors_end_the_run() {
    let failing = Arc::new(FnTool::new("fail", read_only(), |_, _| async {
        Err(ToolError::failed("broken"))
    }));
    let config = EngineConfig {
        max_consecutive_errors: 2,
        ..EngineConfig::default()
    };
    let h = harness(vec![failing], config);
    let steps = (0..5)
        .map(|i| calls(&[(&format!("c{i}"), "fail", json!({"i": i}))]))
        .collect();
    let mut a = agent(&h, Scripted::new(steps), AgentConfig::default());
    let run = a.run("try").await;
    assert_eq!(run.status, AgentStatus::ConsecutiveErrors);
    assert_history_valid(a.history());
}

struct StopAfter;

#[async_trait]
impl Hook for StopAfter {
    fn matches(&self, tool: &str) -> bool {
        tool == "echo"
    }
    async fn post_tool_use(&self, _: &HookEvent) -> PostHookOutput {
        PostHookOutput {
            stop: Some("budget exhausted".into()),
            ..PostHookOutput::default()
        }
    }
}

#[tokio::test]
async fn a_post_hook_stop_ends_the_run_with_its_message() {
    let mut registry = toolgate_core::Registry::new();
    registry.register(echo("echo", read_only()));
    let engine =
        Arc::new(toolgate_core::Engine::new(registry, EngineConfig::default()).with_hooks(vec![Arc::new(StopAfter)]));
    let session = Arc::new(toolgate_core::Session::new(
        engine.config(),
        toolgate_core::SessionOptions::default(),
    ));
    let model = Scripted::new(vec![calls(&[("c1", "echo", json!({}))]), text("never")]);
    let mut a = Agent::new(engine, session, model, AgentConfig::default());
    let run = a.run("go").await;
    assert_eq!(run.status, AgentStatus::PostHookStop);
    assert_eq!(run.detail.as_deref(), Some("budget exhausted"));
    assert_history_valid(a.history());
}

#[tokio::test]
async fn a_model_error_ends_the_run_with_its_kind_and_message() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![Step::Fail(ModelError::new(
        ModelErrorKind::RateLimited,
        "openai: 429 rate_limit_exceeded: slow down",
    ))]);
    let run = agent(&h, model, AgentConfig::default()).run("q").await;
    assert_eq!(run.status, AgentStatus::ModelError(ModelErrorKind::RateLimited));
    assert_eq!(run.status.as_str(), "model_error");
    assert!(run.detail.unwrap().contains("slow down"));
}

#[tokio::test]
async fn a_restart_reruns_the_model_with_the_context_and_records_nothing_for_the_call() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let lookup = Arc::new(FnTool::new("lookup", read_only(), move |_, _| {
        let first = r.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let mut out = ToolOutput::json(json!("found"));
            if first {
                out.restart = Some(json!("The user's timezone is UTC+2."));
            }
            Ok(out)
        }
    }));
    let h = harness(vec![lookup], EngineConfig::default());
    let model = Scripted::new(vec![
        calls(&[("c1", "lookup", json!({}))]),
        calls(&[("c2", "lookup", json!({"again": true}))]),
        text("done"),
    ]);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let run = a.run("when?").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    let second = &model.requests()[1];
    let texts: Vec<String> = second.messages.iter().map(|m| m.to_string()).collect();
    assert!(
        texts.iter().all(|t| !t.contains("\"c1\"")),
        "nothing is recorded for the restarted call: {texts:?}"
    );
    assert!(
        second.messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("UTC+2"),
        "the tool's context is injected"
    );
    assert_history_valid(a.history());
}

#[tokio::test]
async fn a_tool_can_choose_the_model_for_the_next_turn_only() {
    let big = Arc::new(FnTool::new(
        "think_hard",
        ToolSpec {
            model_override: Some("big-model".into()),
            ..read_only()
        },
        |_, _| async { Ok(ToolOutput::json(json!("ok"))) },
    ));
    let h = harness(vec![big, echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![
        calls(&[("c1", "echo", json!({})), ("c2", "think_hard", json!({}))]),
        calls(&[("c3", "echo", json!({"n": 2}))]),
        text("done"),
    ]);
    let run = agent(&h, model.clone(), AgentConfig::default()).run("q").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    let models: Vec<Option<String>> = model.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, vec![None, Some("big-model".into()), None]);
}

struct Router(Arc<Scripted>);

impl ModelRouter for Router {
    fn route(&self, name: &str, _: &Arc<dyn Model>) -> Result<Option<Arc<dyn Model>>, ModelError> {
        assert_eq!(name, "other:model");
        Ok(Some(self.0.clone()))
    }
}

#[tokio::test]
async fn a_router_resolves_an_override_into_another_model() {
    let tool = Arc::new(FnTool::new(
        "escalate",
        ToolSpec {
            model_override: Some("other:model".into()),
            ..read_only()
        },
        |_, _| async { Ok(ToolOutput::json(json!("ok"))) },
    ));
    let h = harness(vec![tool, echo("echo", read_only())], EngineConfig::default());
    let main = Scripted::new(vec![calls(&[("c1", "escalate", json!({}))]), text("main again")]);
    let other = Scripted::named("other:model", vec![calls(&[("c2", "echo", json!({"x": 1}))])]);
    let mut a = Agent::new(
        h.engine.clone(),
        h.session.clone(),
        main.clone(),
        AgentConfig::default(),
    )
    .with_router(Arc::new(Router(other.clone())));
    let run = a.run("q").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.text.as_deref(), Some("main again"));
    assert_eq!(main.requests().len(), 2);
    assert_eq!(other.requests().len(), 1);
    assert_eq!(other.requests()[0].iteration, 2);
}

#[tokio::test]
async fn read_only_calls_run_together_and_an_exclusive_call_runs_alone() {
    let running = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let seen_alone = Arc::new(Mutex::new(None));
    let (r1, b1) = (running.clone(), barrier.clone());
    let reader = Arc::new(FnTool::new("reader", read_only(), move |_, _| {
        let (r, b) = (r1.clone(), b1.clone());
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            // Both readers must be running at once to pass the barrier.
            tokio::time::timeout(Duration::from_secs(10), b.wait())
                .await
                .map_err(|_| ToolError::failed("the other reader never ran alongside"))?;
            r.fetch_sub(1, Ordering::SeqCst);
            Ok(ToolOutput::json(json!("read")))
        }
    }));
    let (r2, s2) = (running.clone(), seen_alone.clone());
    let writer_tool = Arc::new(FnTool::new("write", writer(), move |_, _| {
        let (r, s) = (r2.clone(), s2.clone());
        async move {
            *s.lock().unwrap() = Some(r.load(Ordering::SeqCst));
            Ok(ToolOutput::json(json!("written")))
        }
    }));
    let h = harness(vec![reader, writer_tool], EngineConfig::default());
    let model = Scripted::new(vec![
        calls(&[
            ("r1", "reader", json!({"n": 1})),
            ("r2", "reader", json!({"n": 2})),
            ("w1", "write", json!({})),
        ]),
        text("done"),
    ]);
    let mut a = agent(&h, model, AgentConfig::default());
    let run = a.run("go").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    let results: Vec<&Value> = a.history().iter().filter(|m| m["role"] == "tool").collect();
    let contents: Vec<&str> = results.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(
        contents,
        vec!["read", "read", "written"],
        "results in the model's order"
    );
    assert_eq!(
        *seen_alone.lock().unwrap(),
        Some(0),
        "the writer ran with no reader running"
    );
}

#[tokio::test]
async fn after_a_kill_the_conversation_continues_with_one_result_per_call_id() {
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Arc::new(Mutex::new(Some(started_tx)));
    let slow = Arc::new(FnTool::new("slow", writer(), move |ctx, _| {
        let tx = started_tx.clone();
        async move {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            ctx.cancel.cancelled().await;
            Err(ToolError::failed("cancelled"))
        }
    }));
    let h = harness(vec![slow, echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![
        calls(&[
            ("c1", "echo", json!({"a": 1})),
            ("c2", "slow", json!({})),
            ("c3", "echo", json!({"b": 2})),
        ]),
        text("continuing"),
    ]);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let session = a.session().clone();
    let killer = tokio::spawn(async move {
        if started_rx.await.is_ok() {
            session.kill();
        }
    });
    let run = a.run("go").await;
    killer.await.unwrap();
    assert_eq!(run.status, AgentStatus::StoppedByUser);
    assert_history_valid(a.history());
    let results: Vec<&Value> = a.history().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(
        results[0]["content"], "{\"a\":1}",
        "a call that finished keeps its result"
    );
    for r in &results[1..] {
        assert!(
            r["content"].as_str().unwrap().contains("\"canceled\""),
            "killed and never-started calls get a synthetic canceled result: {r}"
        );
    }
    // The next run continues the conversation; its request is valid.
    let run = a.run("go on").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    let next = model.requests()[1].clone();
    assert_history_valid(&next.messages);
    assert_eq!(
        next.messages.last().unwrap(),
        &json!({"role": "user", "content": "go on"})
    );
}

#[tokio::test]
async fn a_kill_while_the_model_answers_stops_the_run() {
    let h = harness(vec![echo("echo", read_only())], EngineConfig::default());
    let model = Scripted::new(vec![Step::Hang, text("after")]);
    let mut a = agent(&h, model.clone(), AgentConfig::default());
    let session = a.session().clone();
    let mut events = h.events;
    let killer = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if matches!(e, Event::ModelRequested { .. }) {
                session.kill();
                break;
            }
        }
    });
    let run = a.run("q").await;
    killer.await.unwrap();
    assert_eq!(run.status, AgentStatus::StoppedByUser);
    let run = a.run("again").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.text.as_deref(), Some("after"));
}

#[tokio::test]
async fn the_soft_warning_reaches_tools_and_the_event_stream() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let probe = Arc::new(FnTool::new("probe", read_only(), move |ctx, _| {
        s.lock().unwrap().push((ctx.iteration, ctx.long_loop));
        async { Ok(ToolOutput::json(json!("ok"))) }
    }));
    let mut h = harness(vec![probe], EngineConfig::default());
    let mut steps: Vec<Step> = (0..3)
        .map(|i| calls(&[(&format!("c{i}"), "probe", json!({"i": i}))]))
        .collect();
    steps.push(text("done"));
    let config = AgentConfig {
        warn_iterations: 2,
        ..AgentConfig::default()
    };
    let run = agent(&h, Scripted::new(steps), config).run("q").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(*seen.lock().unwrap(), vec![(1, false), (2, true), (3, true)]);
    let warnings: Vec<Event> = drain(&mut h.events)
        .into_iter()
        .filter(|e| matches!(e, Event::LongLoop { .. }))
        .collect();
    assert_eq!(
        warnings,
        vec![Event::LongLoop {
            iteration: 2,
            max_iterations: 20
        }]
    );
}

#[tokio::test]
async fn an_anthropic_prompt_after_tool_results_joins_the_user_message() {
    let mut history =
        vec![json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]})];
    toolgate_core::formats::push_user_text(Format::Anthropic, &mut history, "next");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["content"][1], json!({"type": "text", "text": "next"}));
    let mut gemini = vec![json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]})];
    toolgate_core::formats::push_user_text(Format::Gemini, &mut gemini, "next");
    assert_eq!(gemini[0]["parts"][1], json!({"text": "next"}));
}

/// A background tool whose job runs until it is stopped.
fn server_tool() -> Arc<dyn toolgate_core::Tool> {
    let spec = ToolSpec {
        category: toolgate_core::tool::Category::Background,
        ..writer()
    };
    Arc::new(FnTool::new("serve", spec, |ctx, _| async move {
        ctx.cancel.cancelled().await;
        Err(ToolError::Canceled)
    }))
}

#[tokio::test]
async fn the_end_of_a_run_ends_its_jobs_unless_they_are_kept() {
    for keep_jobs in [false, true] {
        let h = harness(vec![server_tool()], EngineConfig::default());
        let model = Scripted::new(vec![calls(&[("s1", "serve", json!({}))]), text("serving")]);
        let mut a = agent(
            &h,
            model,
            AgentConfig {
                keep_jobs,
                ..AgentConfig::default()
            },
        );
        let run = a.run("start it").await;
        assert!(run.answered(), "{run:?}");
        let jobs = h.engine.jobs().list(h.session.id());
        assert_eq!(jobs.len(), 1);
        // The run's end asks the job to stop at once (its token), or does not.
        assert_eq!(jobs[0].cancel_token().is_cancelled(), !keep_jobs);
        if keep_jobs {
            assert!(jobs[0].running(), "a kept job outlives the run");
            h.session.end_jobs();
        }
        assert!(jobs[0].wait(Duration::from_secs(10)).await);
        assert_eq!(jobs[0].status(false)["state"], "killed");
    }
}
