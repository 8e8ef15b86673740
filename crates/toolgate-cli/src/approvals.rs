//! `toolgate approvals [--watch]`: the terminal approver — the same prompt, keys and diff as
//! `toolgate agent` — answering a gateway's approval queue over HTTP. Without `--watch` it answers
//! what waits and exits; with it, it goes on answering asks as they arrive until interrupted.

use crate::approve::{file_diff, prompt};
use anyhow::{Context, Result, bail};
use console::style;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use toolgate_core::ToolCall;
use toolgate_core::permit::{Answer, ApprovalRequest};

/// `toolgate approvals`'s options.
#[derive(clap::Args, Debug)]
pub struct ApprovalsArgs {
    /// Keep answering asks as they arrive, until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// The gateway's address.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8737")]
    pub url: String,
    /// The gateway's approver token (printed at its start).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TOOLGATE_SERVE_APPROVER_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

/// How often `--watch` looks at the queue.
const POLL: Duration = Duration::from_millis(300);

/// Runs `toolgate approvals`.
pub async fn run(args: &ApprovalsArgs, workspace: &Path) -> Result<ExitCode> {
    let Some(token) = args.token.as_deref().filter(|t| !t.is_empty()) else {
        bail!("toolgate approvals needs the gateway's approver token: --token T or TOOLGATE_SERVE_APPROVER_TOKEN");
    };
    if !std::io::stdin().is_terminal() {
        bail!("toolgate approvals asks a person: run it in a terminal");
    }
    let base = args.url.trim_end_matches('/').to_owned();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("cannot make an HTTP client")?;
    eprintln!(
        "{} answering {base}'s approvals{}",
        style("toolgate approvals").bold(),
        if args.watch {
            " as they arrive (Ctrl-C leaves)"
        } else {
            ""
        }
    );
    let mut handled: HashSet<String> = HashSet::new();
    loop {
        let waiting = pending(&http, &base, token).await?;
        let fresh: Vec<Value> = waiting
            .into_iter()
            .filter(|a| a["id"].as_str().is_some_and(|id| !handled.contains(id)))
            .collect();
        if fresh.is_empty() && !args.watch {
            if handled.is_empty() {
                eprintln!("no approvals waiting");
            }
            return Ok(ExitCode::SUCCESS);
        }
        for ask in fresh {
            let id = ask["id"].as_str().unwrap_or_default().to_owned();
            handled.insert(id.clone());
            let request = request_of(&ask);
            eprintln!("\n{}", style(header(&ask)).dim());
            let diff = file_diff(workspace, &request);
            let answer = tokio::task::spawn_blocking(move || prompt(&request, diff.as_deref()))
                .await
                .unwrap_or(Answer::Unavailable);
            let Some(body) = body_of(&answer) else {
                bail!("the terminal went away before the ask was answered");
            };
            let sent = http
                .post(format!("{base}/v1/approvals/{id}"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .with_context(|| format!("cannot reach {base}"))?;
            match sent.status().as_u16() {
                200 => eprintln!("{} answered", style("✓").green()),
                404 => eprintln!(
                    "{} already answered elsewhere, or withdrawn by its caller",
                    style("■").yellow()
                ),
                code => bail!(
                    "the gateway refused the answer ({code}): {}",
                    sent.text().await.unwrap_or_default()
                ),
            }
        }
        if args.watch {
            tokio::time::sleep(POLL).await;
        }
    }
}

async fn pending(http: &reqwest::Client, base: &str, token: &str) -> Result<Vec<Value>> {
    let response = http
        .get(format!("{base}/v1/approvals"))
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("cannot reach the gateway at {base}"))?;
    match response.status().as_u16() {
        200 => {}
        401 | 403 => bail!("the gateway at {base} refused the approver token"),
        code => bail!("the gateway at {base} answered {code} for /v1/approvals"),
    }
    let v: Value = response.json().await.context("the approval queue is not JSON")?;
    Ok(v["approvals"].as_array().cloned().unwrap_or_default())
}

/// The queued ask as the prompt shows it.
fn request_of(ask: &Value) -> ApprovalRequest {
    let r = &ask["request"];
    let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
    let arguments = r
        .get("arguments")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    ApprovalRequest {
        call: ToolCall::new(
            ask["id"].as_str().unwrap_or_default(),
            text("tool").unwrap_or_default(),
            arguments,
        ),
        subject: text("subject"),
        reason: text("reason").unwrap_or_default(),
        suggested_rule: text("suggested_rule"),
    }
}

/// Who asks, from where, and how long it has left.
fn header(ask: &Value) -> String {
    let r = &ask["request"];
    let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("?");
    let now = SystemTime::now();
    let at = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .and_then(|t| crate::time::parse_since(t, now).ok())
    };
    let secs = |d: Result<Duration, std::time::SystemTimeError>| d.map(|d| d.as_secs()).unwrap_or(0);
    let age = at("created_at").map(|t| format!(", asked {}s ago", secs(now.duration_since(t))));
    let left = at("expires_at").map(|t| format!(", expires in {}s", secs(t.duration_since(now))));
    format!(
        "session {} · principal {} · client {}{}{}",
        ask["session_id"].as_str().unwrap_or("?"),
        text("principal"),
        text("client"),
        age.unwrap_or_default(),
        left.unwrap_or_default()
    )
}

/// The queue's answer body for a prompt's answer (`None`: nobody answered).
fn body_of(answer: &Answer) -> Option<Value> {
    Some(match answer {
        Answer::ApproveOnce | Answer::AutoApprove => json!({"decision": "approve_once"}),
        Answer::ApproveSession => json!({"decision": "approve_session"}),
        Answer::ApproveTool => json!({"decision": "approve_tool"}),
        Answer::ApproveRule(rule) => json!({"decision": "approve_rule", "rule": rule}),
        Answer::Reject(reason) => json!({"decision": "reject", "reason": reason}),
        Answer::Unavailable | Answer::Failed(_) => return None,
    })
}
