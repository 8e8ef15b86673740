//! Stages 8 and 12: PreToolUse and PostToolUse hooks. Several matching hooks run in configuration
//! order and merge deterministically: any deny wins, rewrites apply in order (each hook sees the
//! input the previous one left), contexts concatenate; a post hook may replace the result or stop
//! the run. Command hooks (the widely used stdin-JSON convention) implement [`Hook`] outside core.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a hook is told, in the convention's field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookEvent {
    /// The session.
    pub session_id: String,
    /// `PreToolUse` or `PostToolUse`.
    pub hook_event_name: &'static str,
    /// The tool (provider-safe name).
    pub tool_name: String,
    /// The arguments.
    pub tool_input: Value,
    /// The call id.
    pub tool_use_id: String,
    /// The workspace.
    pub cwd: String,
    /// The result (post hooks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_response: Option<Value>,
}

/// A pre hook's permission opinion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookDecision {
    /// Skips a default ask (never a deny, an ask rule or the ask of a repaired call).
    Allow,
    /// Turns an allow into an ask.
    Ask,
    /// Refuses the call.
    Deny,
}

impl HookDecision {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

/// What one pre hook said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PreHookOutput {
    /// Allow, ask or deny, with the reason.
    pub decision: Option<(HookDecision, String)>,
    /// New arguments (validated and decided again).
    pub updated_input: Option<Map<String, Value>>,
    /// Text added to what the model sees.
    pub additional_context: Option<String>,
}

/// What one post hook said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostHookOutput {
    /// A replacement for the result.
    pub replacement: Option<Value>,
    /// Withhold the result (Claude Code's `decision: "block"`, exit code 2): the call becomes a
    /// `hook_denied` refusal with this reason.
    pub block: Option<String>,
    /// Stop the run, with this message.
    pub stop: Option<String>,
    /// Text added to what the model sees.
    pub additional_context: Option<String>,
}

/// A hook. Implementations decide which tools they match.
#[async_trait]
pub trait Hook: Send + Sync {
    /// Whether the hook runs for this tool.
    fn matches(&self, tool: &str) -> bool;
    /// Before the call runs (after the permission decision).
    async fn pre_tool_use(&self, _event: &HookEvent) -> PreHookOutput {
        PreHookOutput::default()
    }
    /// After the call ran and its result was checked.
    async fn post_tool_use(&self, _event: &HookEvent) -> PostHookOutput {
        PostHookOutput::default()
    }
    /// Once per call, with the final verdict's decision and source strings.
    async fn on_tool_approval_decision(&self, _call_id: &str, _tool: &str, _decision: &str, _source: &str) {}
}

/// The pre hooks' merged result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PreMerged {
    /// The strongest decision: deny over ask over allow; the first reason of that strength.
    pub decision: Option<(HookDecision, String)>,
    /// The input after every rewrite, in order.
    pub updated_input: Option<Map<String, Value>>,
    /// Every context, in order.
    pub additional_context: Vec<String>,
}

/// The post hooks' merged result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostMerged {
    /// The result after every replacement, in order.
    pub replacement: Option<Value>,
    /// The first hook's reason for withholding the result.
    pub block: Option<String>,
    /// The first stop message.
    pub stop: Option<String>,
    /// Every context, in order.
    pub additional_context: Vec<String>,
}

fn rank(d: &HookDecision) -> u8 {
    match d {
        HookDecision::Allow => 1,
        HookDecision::Ask => 2,
        HookDecision::Deny => 3,
    }
}

/// Runs the matching pre hooks in order; each sees the input the previous one left.
pub async fn run_pre(hooks: &[std::sync::Arc<dyn Hook>], event: &HookEvent) -> PreMerged {
    let mut merged = PreMerged::default();
    let mut rewritten: Option<HookEvent> = None;
    for hook in hooks.iter().filter(|h| h.matches(&event.tool_name)) {
        let out = hook.pre_tool_use(rewritten.as_ref().unwrap_or(event)).await;
        if let Some((decision, reason)) = out.decision
            && merged.decision.as_ref().is_none_or(|(d, _)| rank(&decision) > rank(d))
        {
            merged.decision = Some((decision, reason));
        }
        if let Some(input) = out.updated_input {
            rewritten.get_or_insert_with(|| event.clone()).tool_input = Value::Object(input.clone());
            merged.updated_input = Some(input);
        }
        merged.additional_context.extend(out.additional_context);
    }
    merged
}

/// Runs the matching post hooks in order; each sees the result the previous one left.
pub async fn run_post(hooks: &[std::sync::Arc<dyn Hook>], event: &HookEvent) -> PostMerged {
    let mut merged = PostMerged::default();
    let mut replaced: Option<HookEvent> = None;
    for hook in hooks.iter().filter(|h| h.matches(&event.tool_name)) {
        let out = hook.post_tool_use(replaced.as_ref().unwrap_or(event)).await;
        if let Some(replacement) = out.replacement {
            replaced.get_or_insert_with(|| event.clone()).tool_response = Some(replacement.clone());
            merged.replacement = Some(replacement);
        }
        if merged.stop.is_none() {
            merged.stop = out.stop;
        }
        if merged.block.is_none() {
            merged.block = out.block;
        }
        merged.additional_context.extend(out.additional_context);
    }
    merged
}
