//! PreToolUse / PostToolUse hooks in-process: decisions, rewrites, merging, post replacement and
//! stop, and the approval-decision notification.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use toolgate_core::events::Event;
use toolgate_core::hooks::{Hook, HookDecision, HookEvent, PostHookOutput, PreHookOutput};
use toolgate_core::permit::{DenyAll, Policy};
use toolgate_core::rules::{Layer, LayerSource, Rule};
use toolgate_core::tool::{PermissionSubject, ToolSpec};
use toolgate_core::{AbortReason, Engine, EngineConfig, Registry, Session, SessionOptions, TurnOptions, TurnStatus};

#[derive(Default)]
struct Scripted {
    pre: Option<PreHookOutput>,
    post: Option<PostHookOutput>,
    seen: Mutex<Vec<HookEvent>>,
    notified: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Hook for Scripted {
    fn matches(&self, tool: &str) -> bool {
        tool != "unhooked"
    }
    async fn pre_tool_use(&self, event: &HookEvent) -> PreHookOutput {
        self.seen.lock().unwrap().push(event.clone());
        self.pre.clone().unwrap_or_default()
    }
    async fn post_tool_use(&self, event: &HookEvent) -> PostHookOutput {
        self.seen.lock().unwrap().push(event.clone());
        self.post.clone().unwrap_or_default()
    }
    async fn on_tool_approval_decision(&self, _: &str, _: &str, decision: &str, source: &str) {
        self.notified
            .lock()
            .unwrap()
            .push((decision.to_owned(), source.to_owned()));
    }
}

fn pre(decision: Option<(HookDecision, &str)>, input: Option<Value>, context: Option<&str>) -> Arc<Scripted> {
    Arc::new(Scripted {
        pre: Some(PreHookOutput {
            decision: decision.map(|(d, r)| (d, r.to_owned())),
            updated_input: input.and_then(|v| v.as_object().cloned()),
            additional_context: context.map(str::to_owned),
        }),
        ..Scripted::default()
    })
}

fn shell_like() -> Arc<dyn toolgate_core::Tool> {
    let spec = ToolSpec {
        subject: PermissionSubject::Command("command".into()),
        ..writer()
    };
    Arc::new(
        FnTool::new(
            "run",
            spec,
            |_, a| async move { Ok(toolgate_core::ToolOutput::json(a)) },
        )
        .schema(json!({
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": false
        })),
    )
}

struct Setup {
    engine: Arc<Engine>,
    session: Arc<Session>,
    events: tokio::sync::mpsc::UnboundedReceiver<Event>,
}

fn setup(hooks: Vec<Arc<dyn Hook>>, allow: &[&str], deny: &[&str]) -> Setup {
    let mut registry = Registry::new();
    registry.register(shell_like());
    registry.register(echo("look", read_only()));
    let (sink, events) = toolgate_core::events::ChannelEvents::new();
    let engine = Arc::new(
        Engine::new(registry, EngineConfig::default())
            .with_events(Arc::new(sink))
            .with_hooks(hooks),
    );
    let mut layer = Layer::new(LayerSource::User);
    layer.allow = allow.iter().map(|r| Rule::parse(r).unwrap()).collect();
    layer.deny = deny.iter().map(|r| Rule::parse(r).unwrap()).collect();
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            approver: Arc::new(DenyAll),
            policy: Policy {
                yolo: false,
                layers: Arc::new(vec![layer]),
            },
            ..SessionOptions::default()
        },
    ));
    Setup {
        engine,
        session,
        events,
    }
}

async fn run(s: &mut Setup, command: &str) -> (Value, Vec<&'static str>) {
    let args = json!({"command": command}).to_string();
    let turn = s
        .engine
        .run_turn(
            &s.session,
            &openai_answer(&[("h1", "run", &args)]),
            TurnOptions::default(),
        )
        .await;
    let sources = drain(&mut s.events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Verdict { source, .. } => Some(source),
            _ => None,
        })
        .collect();
    (turn.outcomes[0].entry().unwrap().content.clone(), sources)
}

#[tokio::test]
async fn a_hook_deny_refuses_and_its_reason_reaches_the_model() {
    let mut s = setup(
        vec![pre(Some((HookDecision::Deny, "not on fridays")), None, None)],
        &["run"],
        &[],
    );
    let (content, sources) = run(&mut s, "ls").await;
    assert_eq!(content["error"]["type"], "hook_denied");
    assert!(content["error"]["message"].as_str().unwrap().contains("not on fridays"));
    assert_eq!(sources, ["pre_tool_use_hook_deny"]);
}

#[tokio::test]
async fn a_hook_allow_skips_a_default_ask_but_never_a_deny_rule() {
    let mut s = setup(
        vec![pre(Some((HookDecision::Allow, "safe")), None, None)],
        &[],
        &["run(rm:*)"],
    );
    let (content, sources) = run(&mut s, "ls").await;
    assert_eq!(content, json!({"command": "ls"}));
    assert_eq!(sources, ["pre_tool_use_hook_allow"]);
    let (content, sources) = run(&mut s, "rm -rf x").await;
    assert_eq!(content["error"]["type"], "permission_denied");
    assert_eq!(sources, ["config_deny"]);
}

#[tokio::test]
async fn a_hook_ask_turns_an_allow_into_an_ask() {
    let mut s = setup(
        vec![pre(Some((HookDecision::Ask, "double-check")), None, None)],
        &["run"],
        &[],
    );
    let (content, sources) = run(&mut s, "ls").await;
    // Nobody can answer here: the ask is refused.
    assert_eq!(content["error"]["type"], "permission_denied");
    assert_eq!(sources, ["non_interactive_deny"]);
}

#[tokio::test]
async fn a_valid_rewrite_runs_and_an_invalid_one_is_refused() {
    let mut s = setup(vec![pre(None, Some(json!({"command": "ls -la"})), None)], &["run"], &[]);
    let (content, _) = run(&mut s, "ls").await;
    assert_eq!(content, json!({"command": "ls -la"}));
    let mut s = setup(vec![pre(None, Some(json!({"command": 42})), None)], &["run"], &[]);
    let (content, _) = run(&mut s, "ls").await;
    assert_eq!(content["error"]["type"], "invalid_arguments");
    assert!(content["error"]["message"].as_str().unwrap().contains("hook rewrote"));
}

#[tokio::test]
async fn a_rewrite_into_a_denied_command_is_decided_again_and_denied() {
    let mut s = setup(
        vec![pre(None, Some(json!({"command": "rm -rf ~"})), None)],
        &["run(ls:*)"],
        &["run(rm:*)"],
    );
    let (content, sources) = run(&mut s, "ls").await;
    assert_eq!(content["error"]["type"], "permission_denied");
    assert_eq!(sources, ["config_deny"]);
}

#[tokio::test]
async fn two_hooks_merge_in_order() {
    let first = pre(
        Some((HookDecision::Allow, "fine")),
        Some(json!({"command": "ls -a"})),
        Some("one"),
    );
    let second = Arc::new(Scripted {
        pre: Some(PreHookOutput {
            decision: Some((HookDecision::Deny, "second says no".into())),
            updated_input: None,
            additional_context: Some("two".into()),
        }),
        ..Scripted::default()
    });
    let mut s = setup(vec![first.clone(), second.clone()], &["run"], &[]);
    let (content, _) = run(&mut s, "ls").await;
    assert_eq!(content["error"]["type"], "hook_denied", "any deny wins");
    // The second hook saw the first one's rewrite.
    assert_eq!(second.seen.lock().unwrap()[0].tool_input, json!({"command": "ls -a"}));
    // Contexts concatenate on a successful call.
    let ctx_a = pre(None, None, Some("alpha"));
    let ctx_b = pre(None, None, Some("beta"));
    let mut s = setup(vec![ctx_a, ctx_b], &["run"], &[]);
    let (content, _) = run(&mut s, "ls").await;
    assert_eq!(content["additional_context"], "alpha\nbeta");
}

#[tokio::test]
async fn post_hooks_replace_results_and_stop_the_run() {
    let replace = Arc::new(Scripted {
        post: Some(PostHookOutput {
            replacement: Some(json!({"redacted": true})),
            ..PostHookOutput::default()
        }),
        ..Scripted::default()
    });
    let mut s = setup(vec![replace.clone()], &["run"], &[]);
    let (content, _) = run(&mut s, "cat secrets").await;
    assert_eq!(content, json!({"redacted": true}));
    let post_event = replace
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|e| e.hook_event_name == "PostToolUse")
        .cloned()
        .unwrap();
    assert_eq!(post_event.tool_response, Some(json!({"command": "cat secrets"})));

    let stop = Arc::new(Scripted {
        post: Some(PostHookOutput {
            stop: Some("budget exhausted".into()),
            ..PostHookOutput::default()
        }),
        ..Scripted::default()
    });
    let s = setup(vec![stop], &["run"], &[]);
    let answer = openai_answer(&[
        ("a", "run", "{\"command\": \"ls\"}"),
        ("b", "run", "{\"command\": \"pwd\"}"),
    ]);
    let turn = s.engine.run_turn(&s.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::PostHookStop));
    assert_eq!(turn.stop_message.as_deref(), Some("budget exhausted"));
    assert_eq!(
        turn.outcomes[0].entry().unwrap().content,
        json!({"command": "ls"}),
        "the stopping call keeps its result"
    );
    assert_eq!(
        error_type(&turn.outcomes[1]).as_deref(),
        Some("canceled"),
        "the rest get synthetic results"
    );
}

#[tokio::test]
async fn the_approval_decision_is_notified_once_per_call() {
    let hook = Arc::new(Scripted::default());
    let s = setup(vec![hook.clone()], &["run(ls:*)"], &[]);
    let answer = openai_answer(&[
        ("a", "run", "{\"command\": \"ls\"}"),
        ("b", "run", "{\"command\": \"pwd\"}"),
        ("c", "unhooked", "{}"),
    ]);
    s.engine.run_turn(&s.session, &answer, TurnOptions::default()).await;
    assert_eq!(
        hook.notified.lock().unwrap().clone(),
        [
            ("allow".to_owned(), "config_allow".to_owned()),
            ("deny".to_owned(), "non_interactive_deny".to_owned())
        ]
    );
}
