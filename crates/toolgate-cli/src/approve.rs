//! The terminal approver: shows the tool, the subject and the arguments, and takes one key per
//! answer. Without a terminal on stdin it refuses at once — it never hangs waiting.

use crate::ui::Ui;
use async_trait::async_trait;
use console::{Term, style};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolgate_core::permit::{Answer, ApprovalRequest, Approver};

/// How much of the arguments the prompt shows.
const MAX_SHOWN: usize = 2000;

/// The most diff lines shown before a file change is approved.
const MAX_DIFF_LINES: usize = 200;

/// Asks the person at the terminal.
#[derive(Clone, Default)]
pub struct TerminalApprover {
    /// The agent's display, paused while the prompt owns the terminal.
    pub ui: Option<Arc<Ui>>,
    /// The workspace, to show what a file change would do.
    pub workspace: Option<PathBuf>,
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Answer {
        if !std::io::stdin().is_terminal() {
            return Answer::Unavailable;
        }
        let request = request.clone();
        let diff = self.workspace.as_deref().and_then(|w| file_diff(w, &request));
        if let Some(ui) = &self.ui {
            ui.pause();
        }
        // The prompt blocks on the terminal: off the async threads.
        let answer = tokio::task::spawn_blocking(move || prompt(&request, diff.as_deref()))
            .await
            .unwrap_or(Answer::Unavailable);
        if let Some(ui) = &self.ui {
            ui.resume();
        }
        answer
    }
}

/// A coloured unified diff of what `write_file` or `edit_file` would change, when the file is
/// inside the workspace and readable.
pub fn file_diff(workspace: &Path, request: &ApprovalRequest) -> Option<String> {
    let plain = toolgate_mcp::console::file_diff(
        workspace,
        request.call.name.as_str(),
        &request.arguments(),
        MAX_DIFF_LINES,
    )?;
    let mut out = String::new();
    for line in plain.lines() {
        let styled = if line.starts_with("+++") || line.starts_with("---") {
            style(line).bold().to_string()
        } else if line.starts_with('+') {
            style(line).green().to_string()
        } else if line.starts_with('-') {
            style(line).red().to_string()
        } else if line.starts_with("@@") {
            style(line).cyan().to_string()
        } else {
            line.to_owned()
        };
        out.push_str(&styled);
        out.push('\n');
    }
    Some(out)
}

/// Shows the ask on the terminal (stderr) and reads one key per answer.
pub fn prompt(request: &ApprovalRequest, diff: Option<&str>) -> Answer {
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
    match diff {
        // The diff says what the content arguments would; the path is in the subject.
        Some(diff) => text.push_str(diff),
        None => text.push_str(&format!("arguments: {args}\n")),
    }
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
