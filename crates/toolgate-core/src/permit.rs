//! Stage 7: the permission decision (pure), and the `Approver` that answers asks in stage 8.

use crate::rules::{Layer, LayerSource, Rule, Subject, allows};
use crate::tool::{PermissionSubject, SecretArguments, ToolSpec, Vetted};
use crate::types::{Repair, ToolCall};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Allow, deny, or ask somebody.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Refuse it.
    Deny,
    /// Ask the session's approver.
    Ask,
}

/// Where a verdict came from: DESIGN.md's source strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Yolo,
    SessionPermissionsAllow,
    SessionPermissionsDeny,
    ConfigAllow,
    ConfigDeny,
    ConfigAsk,
    DefaultAsk,
    ReadonlyHint,
    RepairedArgumentsAsk,
    UserApproved,
    UserApprovedSession,
    UserApprovedTool,
    UserApprovedRule,
    UserRejected,
    PreToolUseHookAllow,
    PreToolUseHookDeny,
    PreToolUseHookAsk,
    NonInteractiveDeny,
    ContextCanceled,
    /// The tool's own refusal before permission (the catastrophic list, confinement).
    BuiltinDeny,
    /// Nobody answered the ask within `approval_timeout` (not a person's "no").
    ApprovalTimeout,
    /// A standing policy approved the ask (`--yes`), not a person.
    AutoApproved,
    /// The ask could not be made (its queue's store failed): nobody was asked, nobody refused.
    ApprovalFailed,
    /// The arguments of a tool that reaches outside the machine carry a secret.
    SecretInArguments,
}

impl Source {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Yolo => "yolo",
            Self::SessionPermissionsAllow => "session_permissions_allow",
            Self::SessionPermissionsDeny => "session_permissions_deny",
            Self::ConfigAllow => "config_allow",
            Self::ConfigDeny => "config_deny",
            Self::ConfigAsk => "config_ask",
            Self::DefaultAsk => "default_ask",
            Self::ReadonlyHint => "readonly_hint",
            Self::RepairedArgumentsAsk => "repaired_arguments_ask",
            Self::UserApproved => "user_approved",
            Self::UserApprovedSession => "user_approved_session",
            Self::UserApprovedTool => "user_approved_tool",
            Self::UserApprovedRule => "user_approved_rule",
            Self::UserRejected => "user_rejected",
            Self::PreToolUseHookAllow => "pre_tool_use_hook_allow",
            Self::PreToolUseHookDeny => "pre_tool_use_hook_deny",
            Self::PreToolUseHookAsk => "pre_tool_use_hook_ask",
            Self::NonInteractiveDeny => "non_interactive_deny",
            Self::ContextCanceled => "context_canceled",
            Self::BuiltinDeny => "builtin_deny",
            Self::ApprovalTimeout => "approval_timeout",
            Self::ApprovalFailed => "approval_failed",
            Self::AutoApproved => "auto_approved",
            Self::SecretInArguments => "secret_in_arguments",
        }
    }
}

/// A permission decision: the verdict, why, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allow, deny or ask.
    pub verdict: Verdict,
    /// Why, in one sentence.
    pub reason: String,
    /// Which layer or rule decided.
    pub source: Source,
}

impl Decision {
    fn new(verdict: Verdict, source: Source, reason: impl Into<String>) -> Self {
        Self {
            verdict,
            reason: reason.into(),
            source,
        }
    }
}

/// The session-wide switches and rule layers `decide` reads.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// `--yolo`: allow what no deny or ask stops.
    pub yolo: bool,
    /// Rule layers from configuration, in precedence order (project, user, defaults).
    pub layers: Arc<Vec<Layer>>,
}

/// Decides a call without prompting anyone, in DESIGN.md's order: a deny in any layer wins (even
/// under yolo); then an ask rule in any layer, or a call repaired in a way that may change what the
/// model meant — a cut-off value completed, a call read from an answer's text (unless the tool is
/// read-only); then a secret in the arguments of an open-world tool (ask, or deny as the tool's
/// settings say); then yolo; then an allow (session grants first); then the
/// read-only hint for tools that are read-only and not open-world; otherwise ask.
pub fn decide(call: &ToolCall, spec: &ToolSpec, policy: &Policy, grants: &Layer) -> Decision {
    decide_vetted(call, spec, policy, grants, &Vetted::default())
}

/// [`decide`] after the tool vetted the call: its refusal is a deny (source `builtin_deny`)
/// that no rule, `--yolo` or approval overrides; its resolved subject is what allow rules match,
/// and deny and ask rules match it or the subject as written.
pub fn decide_vetted(call: &ToolCall, spec: &ToolSpec, policy: &Policy, grants: &Layer, vetted: &Vetted) -> Decision {
    if let Some(why) = &vetted.refusal {
        return Decision::new(Verdict::Deny, Source::BuiltinDeny, why.clone());
    }
    let tool = call.name.as_str();
    let written = Subject::of(&spec.subject, &call.arguments);
    let resolved = match (&vetted.resolved, &spec.subject) {
        (Some(r), PermissionSubject::Path(_)) => Some(Subject::Path(r.clone())),
        (Some(r), PermissionSubject::Url(_)) => Some(Subject::Url(r.clone())),
        _ => None,
    };
    // A URL is matched only as the fetcher reads it; a path as written or as resolved.
    let url = matches!(spec.subject, PermissionSubject::Url(_));
    let subject = resolved.as_ref().unwrap_or(&written);
    let covers = |r: &Rule| r.covers_any(tool, subject) || (resolved.is_some() && !url && r.covers_any(tool, &written));
    let layers = std::iter::once(grants).chain(policy.layers.iter());
    for layer in layers.clone() {
        if let Some(rule) = layer.deny.iter().find(|r| covers(r)) {
            let source = match layer.source {
                LayerSource::Session => Source::SessionPermissionsDeny,
                _ => Source::ConfigDeny,
            };
            return Decision::new(
                Verdict::Deny,
                source,
                format!("the rule {rule} denies it{}", dynamic_note(subject)),
            );
        }
    }
    for layer in layers.clone() {
        if let Some(rule) = layer.ask.iter().find(|r| covers(r)) {
            return Decision::new(
                Verdict::Ask,
                Source::ConfigAsk,
                format!("the rule {rule} asks for approval{}", dynamic_note(subject)),
            );
        }
    }
    let read_only = spec.annotations.read_only;
    if !read_only && let Some(doubt) = call.repair.as_ref().and_then(Repair::doubt) {
        return Decision::new(Verdict::Ask, Source::RepairedArgumentsAsk, doubt);
    }
    if let Some(decision) = secret_check(call, spec) {
        return decision;
    }
    if policy.yolo {
        return Decision::new(Verdict::Allow, Source::Yolo, "--yolo allows every call no rule denies");
    }
    let session_rules: Vec<&Rule> = grants.allow.iter().collect();
    if allows(&session_rules, tool, subject) {
        return Decision::new(
            Verdict::Allow,
            Source::SessionPermissionsAllow,
            "approved earlier in this session",
        );
    }
    let all_rules: Vec<&Rule> = layers.flat_map(|l| l.allow.iter()).collect();
    if allows(&all_rules, tool, subject) {
        return Decision::new(Verdict::Allow, Source::ConfigAllow, "an allow rule covers it");
    }
    if read_only && !spec.annotations.open_world {
        return Decision::new(
            Verdict::Allow,
            Source::ReadonlyHint,
            "the tool is read-only and stays in the workspace",
        );
    }
    let reason = match subject {
        Subject::Command(a) if a.opaque.is_some() => {
            format!(
                "no rule can allow this command line: {}",
                a.opaque.as_deref().unwrap_or_default()
            )
        }
        _ => "no rule allows it".to_owned(),
    };
    Decision::new(Verdict::Ask, Source::DefaultAsk, reason)
}

/// A secret in the arguments of an open-world tool would leave the machine: asked (or refused,
/// as the tool's settings say) before any grant, allow rule or `--yolo` lets it go. The reason
/// names where and what kind of secret, never the secret.
fn secret_check(call: &ToolCall, spec: &ToolSpec) -> Option<Decision> {
    if !spec.annotations.open_world || spec.secrets.arguments == SecretArguments::Allow {
        return None;
    }
    let (at, kind) = crate::redact::find_secret(&call.arguments)?;
    let at = if at.is_empty() { "/".to_owned() } else { at };
    let reason =
        format!("the argument at {at} carries what looks like {kind}, and the tool reaches outside this machine");
    let verdict = match spec.secrets.arguments {
        SecretArguments::Deny => Verdict::Deny,
        _ => Verdict::Ask,
    };
    Some(Decision::new(verdict, Source::SecretInArguments, reason))
}

/// The rule a decision's reason names (`the rule X denies it`, `the rule X asks …`).
pub fn rule_in(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix("the rule ")?;
    let end = rest.find(" denies it").or_else(|| rest.find(" asks for approval"))?;
    Some(&rest[..end])
}

/// Why a command rule matched a line whose program name is computed at run time.
fn dynamic_note(subject: &Subject) -> String {
    match subject {
        Subject::Command(a) => a
            .dynamic
            .as_ref()
            .map(|why| format!(" ({why}, so it may be any program)"))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// The rule an approver may grant for the rest of the session instead of this one call: the
/// command's prefix, the path's directory, the URL's domain.
pub fn suggested_rule(tool: &str, spec: &ToolSpec, args: &serde_json::Map<String, Value>) -> Option<String> {
    match Subject::of(&spec.subject, args) {
        Subject::Command(a) if a.opaque.is_none() && a.commands.len() == 1 && !a.commands[0].wrapper => {
            let words = &a.commands[0].words;
            let take = if words
                .get(1)
                .is_some_and(|w| !w.starts_with('-') && !w.contains(['/', '.']))
            {
                2
            } else {
                1
            };
            Some(format!("{tool}({}:*)", words[..take.min(words.len())].join(" ")))
        }
        Subject::Path(p) => {
            let dir = p.rsplit_once('/').map_or("", |(d, _)| d);
            Some(if dir.is_empty() {
                format!("{tool}(*)")
            } else {
                format!("{tool}({dir}/**)")
            })
        }
        Subject::Url(u) => u
            .split_once("://")
            .and_then(|(_, rest)| rest.split(['/', '?', '#', ':', '@']).next())
            .filter(|h| !h.is_empty())
            .map(|h| format!("{tool}(domain:{h})")),
        _ => None,
    }
}

/// What somebody asked to approve a call sees.
#[derive(Clone, Debug)]
pub struct ApprovalRequest {
    /// The call, arguments as they will run.
    pub call: ToolCall,
    /// What the permission rules matched (the command, path or URL), if any.
    pub subject: Option<String>,
    /// Why it is asked.
    pub reason: String,
    /// A rule the approver may grant for the session instead (`exec_shell(git status:*)`).
    pub suggested_rule: Option<String>,
}

impl ApprovalRequest {
    /// The arguments as JSON.
    pub fn arguments(&self) -> Value {
        self.call.arguments_value()
    }
}

/// An approver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    ApproveOnce,
    /// Run this call: approved by a standing policy (`--yes`), nobody was asked.
    AutoApprove,
    /// Run calls like this for the rest of the session.
    ApproveSession,
    /// Run this tool for the rest of the session.
    ApproveTool,
    /// Run calls matching this suggested rule for the rest of the session.
    ApproveRule(String),
    /// Refuse, with the reason the model is told.
    Reject(Option<String>),
    /// Nobody can answer here (no terminal, no client).
    Unavailable,
    /// The ask could not be put to anyone (its queue's store failed): why.
    Failed(String),
}

/// Answers asks: the terminal prompt, the HTTP queue, a channel, or a fixed answer.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Answers one ask. Called one at a time per session.
    async fn approve(&self, request: &ApprovalRequest) -> Answer;
}

/// `--yes`: approves every ask once (a deny still wins, it never reaches the approver).
#[derive(Clone, Copy, Debug, Default)]
pub struct ApproveAll;

#[async_trait]
impl Approver for ApproveAll {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        Answer::AutoApprove
    }
}

/// Nobody can approve: every ask is refused as `non_interactive_deny`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAll;

#[async_trait]
impl Approver for DenyAll {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        Answer::Unavailable
    }
}

/// An ask waiting for the embedding program's answer.
#[derive(Debug)]
pub struct PendingApproval {
    /// What is asked.
    pub request: ApprovalRequest,
    reply: tokio::sync::oneshot::Sender<Answer>,
}

impl PendingApproval {
    /// Answers the ask (a no-op when the call no longer waits: killed or timed out).
    pub fn answer(self, answer: Answer) {
        let _ = self.reply.send(answer);
    }
}

/// For library users: every ask arrives on a channel as a [`PendingApproval`] to answer. When
/// the receiver is gone, or drops an ask unanswered, the ask is refused (`non_interactive_deny`).
#[derive(Clone, Debug)]
pub struct ChannelApprover(tokio::sync::mpsc::Sender<PendingApproval>);

impl ChannelApprover {
    /// An approver and the receiver its asks arrive on (at most `capacity` waiting).
    pub fn new(capacity: usize) -> (Self, tokio::sync::mpsc::Receiver<PendingApproval>) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        (Self(tx), rx)
    }
}

#[async_trait]
impl Approver for ChannelApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Answer {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let pending = PendingApproval {
            request: request.clone(),
            reply,
        };
        if self.0.send(pending).await.is_err() {
            return Answer::Unavailable;
        }
        answer.await.unwrap_or(Answer::Unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::Annotations;

    fn call(repaired: bool) -> ToolCall {
        let mut c = ToolCall::new("c1", "t", Default::default());
        if repaired {
            c.repair = Some(Repair {
                actions: vec!["completed_cut_off_value".into()],
                completed_cut_off: true,
                raw: "{".into(),
            });
        }
        c
    }

    #[test]
    fn default_branch_table() {
        let ro = ToolSpec::with_annotations(Annotations::READ_ONLY);
        let ro_open = ToolSpec::with_annotations(Annotations {
            open_world: true,
            ..Annotations::READ_ONLY
        });
        let rw = ToolSpec::default();
        let cases = [
            (&ro, false, false, Verdict::Allow, Source::ReadonlyHint),
            (&ro, true, false, Verdict::Allow, Source::ReadonlyHint),
            (&ro_open, false, false, Verdict::Ask, Source::DefaultAsk),
            (&rw, false, false, Verdict::Ask, Source::DefaultAsk),
            (&rw, false, true, Verdict::Allow, Source::Yolo),
            (&rw, true, true, Verdict::Ask, Source::RepairedArgumentsAsk),
            (&rw, true, false, Verdict::Ask, Source::RepairedArgumentsAsk),
            (&ro_open, false, true, Verdict::Allow, Source::Yolo),
        ];
        for (spec, repaired, yolo, verdict, source) in cases {
            let policy = Policy {
                yolo,
                ..Policy::default()
            };
            let d = decide(&call(repaired), spec, &policy, &Layer::new(LayerSource::Session));
            assert_eq!(
                (d.verdict, d.source),
                (verdict, source),
                "{spec:?} repaired={repaired} yolo={yolo}"
            );
        }
    }

    #[test]
    fn a_call_read_from_text_is_asked_unless_read_only_and_other_repairs_are_not() {
        let with = |actions: &[&str]| {
            let mut c = ToolCall::new("c1", "t", Default::default());
            c.repair = Some(Repair {
                actions: actions.iter().map(|a| (*a).to_owned()).collect(),
                ..Repair::default()
            });
            c
        };
        let yolo = Policy {
            yolo: true,
            ..Policy::default()
        };
        let grants = Layer::new(LayerSource::Session);
        let rw = ToolSpec::default();
        let ro = ToolSpec::with_annotations(Annotations::READ_ONLY);
        let d = decide(
            &with(&[Repair::PARSED_FROM_CONTENT, "trailing_comma"]),
            &rw,
            &yolo,
            &grants,
        );
        assert_eq!((d.verdict, d.source), (Verdict::Ask, Source::RepairedArgumentsAsk));
        assert!(d.reason.contains("read from the answer's text"), "{}", d.reason);
        let d = decide(&with(&[Repair::PARSED_FROM_CONTENT]), &ro, &Policy::default(), &grants);
        assert_eq!((d.verdict, d.source), (Verdict::Allow, Source::ReadonlyHint));
        let d = decide(&with(&["trailing_comma", "stripped_prefix"]), &rw, &yolo, &grants);
        assert_eq!((d.verdict, d.source), (Verdict::Allow, Source::Yolo));
    }
}
