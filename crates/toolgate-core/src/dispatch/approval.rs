//! Stages 7 and 8: the permission decision (the tool's own refusal first, then the rules), the
//! PreToolUse hooks, and — only when everything that can refuse without a human has passed — the
//! session's approver. Each refusal here is the error the model sees for it.

use super::Engine;
use super::exposure::Exposed;
use super::outcome::{AbortReason, Stop};
use super::record::Flight;
use super::turn::{TurnState, call_kill};
use crate::error::{CallError, ErrorKind};
use crate::events::Event;
use crate::hooks::{self, HookDecision, HookEvent};
use crate::permit::{Answer as Approval, ApprovalRequest, Decision, Source, Verdict, decide_vetted, suggested_rule};
use crate::redact::redact_text;
use crate::registry::Entry;
use crate::rules::Rule;
use crate::session::Session;
use crate::tool::ToolSpec;
use crate::types::ToolCall;
use crate::validate::ValidateOptions;
use serde_json::Value;
use std::time::Duration;

impl Engine {
    /// Stages 7–8: decide, let the pre hooks have their say, ask when the verdict is still ask,
    /// and emit the final verdict with its source.
    pub(crate) async fn permit(
        &self,
        session: &Session,
        turn: &TurnState,
        entry: &Entry,
        exposed: &Exposed,
        f: &mut Flight,
    ) -> Result<(), Stop> {
        let mut decision = self.decide(session, entry, &f.call);
        if decision.verdict != Verdict::Deny && !self.hooks.is_empty() {
            decision = self.pre_hooks(session, entry, exposed, f, decision).await?;
        }
        let (allowed, source, reason) = match decision.verdict {
            Verdict::Allow => (true, decision.source, decision.reason),
            Verdict::Deny => (false, decision.source, decision.reason),
            Verdict::Ask => self.ask(session, turn, entry, &f.call, decision.reason).await,
        };
        let journalled = match (allowed, source) {
            (true, _) => "allow",
            (false, Source::ContextCanceled) => "canceled",
            (false, _) => "deny",
        };
        f.verdict = Some((journalled, source));
        let name = entry.provider_name();
        self.events.emit(&Event::Verdict {
            call_id: f.call.id.clone(),
            tool: entry.name().clone(),
            decision: journalled,
            source: source.as_str(),
            reason: reason.clone(),
        });
        for hook in self.hooks.iter().filter(|h| h.matches(name)) {
            hook.on_tool_approval_decision(f.call.id.as_str(), name, journalled, source.as_str())
                .await;
        }
        tracing::debug!(call_id = %f.call.id, decision = journalled, source = source.as_str(), "permission verdict");
        if allowed {
            Ok(())
        } else {
            Err(refusal(name, source, reason))
        }
    }

    /// Stage 7: the tool's own refusal, then the rules and the session's grants (pure, no prompt).
    fn decide(&self, session: &Session, entry: &Entry, call: &ToolCall) -> Decision {
        let vetted = entry.tool().vet(&session.workspace, &call.arguments_value());
        let grants = session.grants.read().unwrap_or_else(|p| p.into_inner());
        decide_vetted(call, entry.spec(), &session.policy, &grants, &vetted)
    }

    /// Stage 8's hooks: a deny or ask tightens the verdict, an allow skips only a default ask; a
    /// rewrite is validated against this turn's schema and decided again.
    async fn pre_hooks(
        &self,
        session: &Session,
        entry: &Entry,
        exposed: &Exposed,
        f: &mut Flight,
        mut decision: Decision,
    ) -> Result<Decision, Stop> {
        let event = hook_event(session, &f.call, entry.provider_name(), "PreToolUse", None);
        let merged = hooks::run_pre(&self.hooks, &event).await;
        f.context = merged.additional_context;
        if merged.decision.is_some() || merged.updated_input.is_some() {
            f.note_hook(
                "pre",
                serde_json::json!({
                    "decision": merged.decision.as_ref().map(|(d, _)| d.as_str()),
                    "reason": merged.decision.as_ref().map(|(_, r)| redact_text(r).into_owned()),
                    "rewrote": merged.updated_input.is_some(),
                }),
            );
        }
        if let Some(input) = merged.updated_input {
            let mut rewritten = Value::Object(input);
            if let Err(mut error) = exposed.compiled.check(&mut rewritten, ValidateOptions::default()) {
                error.message = format!(
                    "A PreToolUse hook rewrote the arguments, and the result is invalid: {}",
                    error.message
                );
                return Err(Stop::Refused(error));
            }
            if let Value::Object(m) = &rewritten {
                f.call.arguments = m.clone();
            }
            f.args = rewritten;
            decision = self.decide(session, entry, &f.call);
        }
        let tightened = |verdict, reason, source| Decision {
            verdict,
            reason,
            source,
        };
        Ok(match merged.decision {
            Some((HookDecision::Deny, reason)) if decision.verdict != Verdict::Deny => {
                tightened(Verdict::Deny, reason, Source::PreToolUseHookDeny)
            }
            Some((HookDecision::Ask, reason)) if decision.verdict == Verdict::Allow => {
                tightened(Verdict::Ask, reason, Source::PreToolUseHookAsk)
            }
            Some((HookDecision::Allow, reason))
                if decision.verdict == Verdict::Ask && decision.source == Source::DefaultAsk =>
            {
                tightened(Verdict::Allow, reason, Source::PreToolUseHookAllow)
            }
            _ => decision,
        })
    }

    /// Stage 8's approval: asks the session's approver (one ask at a time), within the timeout,
    /// raced with a kill.
    async fn ask(
        &self,
        session: &Session,
        turn: &TurnState,
        entry: &Entry,
        call: &ToolCall,
        reason: String,
    ) -> (bool, Source, String) {
        let (kill, _linked) = call_kill(session, turn);
        self.ask_with(session, &kill, call, entry.spec(), reason).await
    }

    /// Decides an action that is no call of the registry (an upstream MCP server's sampling
    /// request, say) as stage 8 decides a call: the permission rules and the session's grants,
    /// then, for an ask, the session's approver as a call is asked (one ask at a time, within
    /// the timeout, raced with a kill). `Err` says why it may not happen.
    pub async fn govern(&self, session: &Session, call: &ToolCall, spec: &ToolSpec) -> Result<(), String> {
        let decision = {
            let grants = session.grants.read().unwrap_or_else(|p| p.into_inner());
            crate::permit::decide(call, spec, &session.policy, &grants)
        };
        match decision.verdict {
            Verdict::Allow => Ok(()),
            Verdict::Deny => Err(decision.reason),
            Verdict::Ask => {
                let kill = session.kill_token();
                match self.ask_with(session, &kill, call, spec, decision.reason).await {
                    (true, _, _) => Ok(()),
                    (false, _, why) => Err(why),
                }
            }
        }
    }

    /// The ask itself: the request the approver sees, its answer within the timeout, and the
    /// grant that answer makes.
    async fn ask_with(
        &self,
        session: &Session,
        kill: &tokio_util::sync::CancellationToken,
        call: &ToolCall,
        spec: &ToolSpec,
        reason: String,
    ) -> (bool, Source, String) {
        let request = ApprovalRequest {
            call: call.clone(),
            subject: spec
                .subject
                .argument()
                .and_then(|key| call.arguments.get(key))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }),
            reason: reason.clone(),
            suggested_rule: suggested_rule(call.name.as_str(), spec, &call.arguments),
        };
        let timeout = Duration::from_millis(self.config.approval_timeout_ms);
        let answer = tokio::select! {
            biased;
            _ = kill.cancelled() => return (false, Source::ContextCanceled, "the session was stopped while the call waited for approval".into()),
            answer = async {
                let _one_at_a_time = session.asking.lock().await;
                tokio::time::timeout(timeout, session.approver.approve(&request)).await
            } => answer,
        };
        let Ok(answer) = answer else {
            return (
                false,
                Source::ApprovalTimeout,
                format!("nobody answered the approval request within {} ms", timeout.as_millis()),
            );
        };
        self.grant(session, call, &request, answer, reason).await
    }

    /// What an approver's answer means: the verdict, and the rule it grants for the session.
    async fn grant(
        &self,
        session: &Session,
        call: &ToolCall,
        request: &ApprovalRequest,
        answer: Approval,
        reason: String,
    ) -> (bool, Source, String) {
        match answer {
            Approval::ApproveOnce => (true, Source::UserApproved, "approved once".into()),
            Approval::AutoApprove => (
                true,
                Source::AutoApproved,
                "approved by --yes, without asking anyone".into(),
            ),
            Approval::ApproveSession => {
                // Calls like this one: its exact subject, or the tool when it has none.
                let text = match request.subject.as_deref() {
                    Some(subject) if !subject.contains([')', '\n']) => format!("{}({subject})", call.name),
                    _ => call.name.to_string(),
                };
                match Rule::parse(&text) {
                    Ok(rule) => session.grant(rule).await,
                    Err(e) => tracing::warn!(error = %e, "could not record the session grant"),
                }
                (true, Source::UserApprovedSession, "approved for the session".into())
            }
            Approval::ApproveTool => {
                if let Ok(rule) = Rule::parse(call.name.as_str()) {
                    session.grant(rule).await;
                }
                (true, Source::UserApprovedTool, "tool approved for the session".into())
            }
            Approval::ApproveRule(text) => match Rule::parse(&text) {
                Ok(rule) if rule.names_tool(call.name.as_str()) => {
                    session.grant(rule).await;
                    (true, Source::UserApprovedRule, format!("approved by the rule {text}"))
                }
                _ => (
                    false,
                    Source::UserRejected,
                    format!("the rule {text:?} does not cover this call"),
                ),
            },
            Approval::Reject(why) => (
                false,
                Source::UserRejected,
                why.unwrap_or_else(|| "no reason given".into()),
            ),
            Approval::Unavailable => (false, Source::NonInteractiveDeny, reason),
            Approval::Failed(why) => (false, Source::ApprovalFailed, why),
        }
    }
}

/// The error the model sees for a refused verdict, by its source.
fn refusal(name: &str, source: Source, reason: String) -> Stop {
    let error = match source {
        Source::ContextCanceled => {
            return Stop::Abort(
                AbortReason::StoppedByUser,
                CallError::new(ErrorKind::Canceled, "The call was canceled by the user before it ran."),
            );
        }
        Source::BuiltinDeny => CallError::new(
            ErrorKind::PermissionDenied,
            format!("{name:?} refuses this call before it runs: {reason}."),
        ),
        Source::PreToolUseHookDeny => {
            CallError::new(ErrorKind::HookDenied, format!("A hook refused this call: {reason}"))
        }
        Source::UserRejected => CallError::new(
            ErrorKind::RejectedByUser,
            format!("The user rejected this call: {reason}"),
        ),
        Source::ApprovalTimeout => CallError::new(
            ErrorKind::RejectedByUser,
            format!("The call was not approved: {reason}. Ask the user before trying again."),
        ),
        Source::ApprovalFailed => CallError::new(
            ErrorKind::ExecutionFailed,
            format!(
                "The call was not run: it needs approval and the ask could not be made ({reason}). Nobody was asked; try again later."
            ),
        ),
        Source::NonInteractiveDeny => CallError::new(
            ErrorKind::PermissionDenied,
            format!(
                "Calling {name:?} needs approval ({reason}) and nobody can approve it here; the user can allow it with --yes, --yolo or an allow rule for {name:?}."
            ),
        ),
        _ => CallError::new(
            ErrorKind::PermissionDenied,
            format!("Calling {name:?} is not permitted: {reason}."),
        ),
    };
    Stop::Refused(error.with("source", source.as_str()))
}

/// What a hook is told about a call.
pub(crate) fn hook_event(
    session: &Session,
    call: &ToolCall,
    name: &str,
    event: &'static str,
    response: Option<Value>,
) -> HookEvent {
    HookEvent {
        session_id: session.id.to_string(),
        hook_event_name: event,
        tool_name: name.to_owned(),
        tool_input: call.arguments_value(),
        tool_use_id: call.id.to_string(),
        cwd: session.workspace_text.to_string(),
        tool_response: response,
    }
}
