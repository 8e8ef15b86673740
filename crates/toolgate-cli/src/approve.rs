//! The terminal approver: shows the tool, the subject and the arguments, and takes one key per
//! answer. Without a terminal on stdin it refuses at once — it never hangs waiting.

use async_trait::async_trait;
use console::Term;
use std::io::IsTerminal;
use toolgate_core::permit::{Answer, ApprovalRequest, Approver};

/// How much of the arguments the prompt shows.
const MAX_SHOWN: usize = 2000;

/// Asks the person at the terminal.
#[derive(Clone, Copy, Debug, Default)]
pub struct TerminalApprover;

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Answer {
        if !std::io::stdin().is_terminal() {
            return Answer::Unavailable;
        }
        let request = request.clone();
        // The prompt blocks on the terminal: off the async threads.
        tokio::task::spawn_blocking(move || prompt(&request))
            .await
            .unwrap_or(Answer::Unavailable)
    }
}

fn prompt(request: &ApprovalRequest) -> Answer {
    let term = Term::stderr();
    let tool = request.call.name.as_str();
    let mut args = serde_json::to_string_pretty(&request.arguments()).unwrap_or_default();
    if args.len() > MAX_SHOWN {
        let mut cut = MAX_SHOWN;
        while !args.is_char_boundary(cut) {
            cut -= 1;
        }
        args.truncate(cut);
        args.push_str("\n…");
    }
    let mut text = format!("\n{tool} wants to run ({})\n", request.reason);
    if let Some(subject) = &request.subject {
        text.push_str(&format!("  {subject}\n"));
    }
    text.push_str(&format!("arguments: {args}\n"));
    text.push_str("  [y] approve once\n  [s] approve calls like this for the session\n");
    text.push_str(&format!("  [t] approve {tool} for the session\n"));
    if let Some(rule) = &request.suggested_rule {
        text.push_str(&format!("  [r] approve {rule} for the session\n"));
    }
    text.push_str("  [n] reject\nanswer: ");
    if term.write_str(&text).is_err() {
        return Answer::Unavailable;
    }
    loop {
        let Ok(key) = term.read_char() else {
            return Answer::Unavailable;
        };
        let answer = match key {
            'y' | 'Y' => Answer::ApproveOnce,
            's' | 'S' => Answer::ApproveSession,
            't' | 'T' => Answer::ApproveTool,
            'r' | 'R' if request.suggested_rule.is_some() => {
                Answer::ApproveRule(request.suggested_rule.clone().unwrap_or_default())
            }
            'n' | 'N' => {
                let _ = term.write_str("n\nreason (optional, Enter to skip): ");
                let reason = term.read_line().unwrap_or_default();
                let reason = reason.trim();
                return Answer::Reject((!reason.is_empty()).then(|| reason.to_owned()));
            }
            _ => continue,
        };
        let _ = term.write_line(&key.to_string());
        return answer;
    }
}
