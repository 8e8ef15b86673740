//! Asks answered by the MCP client itself (`[approval] via = "elicitation"`), in both shapes the
//! protocol has:
//!
//! - a client of the classic handshake (2025-11-25 and before) is sent `elicitation/create`
//!   while its `tools/call` waits;
//! - a client of the 2026-07-28 revision cannot be sent requests: its `tools/call` is answered
//!   with an `InputRequiredResult` holding the elicitation form and a `requestState`, and the
//!   tool runs when the client calls again with its answer (`inputResponses`) and that state.
//!
//! The state is an opaque handle to what was asked, kept in the store (so any replica sharing
//! it takes the retry): the principal, the session, the tool and a digest of the arguments. A
//! retry is honoured once, only for that principal, session, tool and those arguments, and only
//! until the ask's timeout; its call id is the handle's, so the journal's atomic claim refuses a
//! second run of it.

use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitationAction, InputRequest, InputRequests,
    InputRequiredResult,
};
use rmcp::service::{Peer, RoleServer};
use rmcp::{ErrorData as McpError, model::ProtocolVersion};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use toolgate_core::permit::{Answer as Approval, ApprovalRequest, Approver};
use toolgate_core::store::Store;

/// The key of the one input request an ask makes.
const KEY: &str = "approval";

/// Asks the connected client through MCP elicitation, or answers with what the client already
/// answered in a 2026-07-28 retry.
#[derive(Default)]
pub struct ElicitApprover {
    /// The client of a classic session (set by each call).
    pub(crate) peer: Mutex<Option<Peer<RoleServer>>>,
    /// Answers a client gave in a retry, by the call id they were given for.
    answered: Mutex<HashMap<String, Approval>>,
}

impl ElicitApprover {
    /// Holds `answer` for the ask of the call `call_id`.
    pub(crate) fn answer(&self, call_id: &str, answer: Approval) {
        self.answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call_id.to_owned(), answer);
    }

    /// Forgets an answer the call did not need (the call was allowed without asking).
    pub(crate) fn forget(&self, call_id: &str) {
        self.answered.lock().unwrap_or_else(|p| p.into_inner()).remove(call_id);
    }
}

#[async_trait::async_trait]
impl Approver for ElicitApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Approval {
        let given = self
            .answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(request.call.id.as_str());
        if let Some(answer) = given {
            return answer;
        }
        let Some(peer) = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Approval::Unavailable;
        };
        let can = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some());
        if !can {
            return Approval::Unavailable;
        }
        let Some(params) = form(request.call.name.as_str(), &request.arguments(), &request.reason) else {
            return Approval::Unavailable;
        };
        match peer.create_elicitation(params).await {
            Ok(result) => read(result.action, result.content),
            Err(e) => {
                tracing::warn!(error = %e, "elicitation failed");
                Approval::Unavailable
            }
        }
    }
}

/// The form that asks about a call of `tool` with `arguments` (shown redacted).
fn form(tool: &str, arguments: &Value, reason: &str) -> Option<ElicitRequestParams> {
    let args = toolgate_core::redact::redact_value(arguments);
    let message = format!("Allow the tool `{tool}` to run with {args}? ({reason})");
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {"type": "string", "title": "Decision",
                             "enum": ["approve_once", "approve_session", "approve_tool", "reject"]},
                "reason": {"type": "string", "title": "Reason (when rejecting)"}
            },
            "required": ["decision"]
        }
    }))
    .ok()
}

/// What a client's answer to the form means.
fn read(action: ElicitationAction, content: Option<Value>) -> Approval {
    match action {
        ElicitationAction::Accept => crate::approve::parse_answer(&content.unwrap_or(Value::Null))
            .unwrap_or(Approval::Reject(Some("unreadable answer".into()))),
        _ => Approval::Reject(Some("the client declined".into())),
    }
}

/// Whether a request speaks the 2026-07-28 revision or later, where a server asks by answering
/// `InputRequiredResult` instead of sending requests.
pub(crate) fn multi_round_trip(version: Option<ProtocolVersion>) -> bool {
    version.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// Who asked what: the ask a `requestState` stands for.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Asked {
    pub principal: String,
    pub session: String,
    pub tool: String,
    /// SHA-256 of the arguments, keys sorted.
    pub digest: String,
}

impl Asked {
    pub(crate) fn new(principal: &str, session: &str, tool: &str, arguments: &Map<String, Value>) -> Self {
        use sha2::Digest;
        let mut canonical = String::new();
        // Keys sorted, so one set of arguments has one digest however a client orders them.
        toolgate_core::cache::canonical_json(&Value::Object(arguments.clone()), &mut canonical);
        let digest = sha2::Sha256::digest(canonical.as_bytes());
        Self {
            principal: principal.to_owned(),
            session: session.to_owned(),
            tool: tool.to_owned(),
            digest: digest.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

fn key(handle: &str) -> String {
    format!("mcp-input/{handle}")
}

/// The call id of the retry that answers `handle`.
pub(crate) fn call_id(handle: &str) -> String {
    format!("mcp-input-{handle}")
}

/// Keeps `asked` in the store until `ttl` passes and answers with the form for it: the
/// `InputRequiredResult` a 2026-07-28 client fulfils and retries with.
pub(crate) async fn defer(
    store: &dyn Store,
    asked: &Asked,
    arguments: &Value,
    reason: &str,
    ttl: Duration,
) -> Result<InputRequiredResult, McpError> {
    let handle = uuid::Uuid::new_v4().simple().to_string();
    let state = serde_json::to_value(asked).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    store.cache_put(&key(&handle), &state, ttl).await.map_err(|e| {
        McpError::internal_error(
            format!("the call needs approval and the ask could not be stored ({e}); nobody was asked"),
            None,
        )
    })?;
    let params = form(&asked.tool, arguments, reason)
        .ok_or_else(|| McpError::internal_error("the approval form could not be made", None))?;
    let mut requests = InputRequests::new();
    requests.insert(KEY.to_owned(), InputRequest::Elicitation(ElicitRequest::new(params)));
    Ok(InputRequiredResult::new(Some(requests), Some(handle)))
}

/// The answer a retry carries for the ask its `requestState` names, once: the state must name
/// an ask made for this same principal, session, tool and arguments that has not expired or
/// been answered. Anything else is the one error a forged or stale state gets.
pub(crate) async fn resume(
    store: &dyn Store,
    request: &CallToolRequestParams,
    asked: &Asked,
) -> Result<(String, Approval), McpError> {
    let invalid = || {
        McpError::invalid_params(
            "Invalid or expired requestState: call the tool again without it to be asked again",
            Some(json!({"reason": "invalid_request_state"})),
        )
    };
    let handle = request.request_state.as_deref().unwrap_or_default();
    if handle.is_empty() || handle.len() > 64 || !handle.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(invalid());
    }
    let kept = store
        .cache_get(&key(handle))
        .await
        .map_err(|e| McpError::internal_error(format!("the ask could not be read ({e})"), None))?;
    let Some(kept) = kept.filter(|v| !v.is_null()) else {
        return Err(invalid());
    };
    let Ok(kept) = serde_json::from_value::<Asked>(kept) else {
        return Err(invalid());
    };
    if &kept != asked {
        tracing::warn!(
            tool = %asked.tool,
            "a requestState was sent back for another call, session or principal than it was made for"
        );
        return Err(invalid());
    }
    // Answered once: the state is spent before the tool runs (and the journal refuses a second
    // run of its call id).
    store
        .cache_put(&key(handle), &Value::Null, Duration::from_secs(60))
        .await
        .map_err(|e| McpError::internal_error(format!("the ask could not be closed ({e})"), None))?;
    let response = request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(KEY))
        .ok_or_else(|| McpError::invalid_params(format!("inputResponses has no \"{KEY}\" answer"), None))?;
    let action: ElicitationAction = response
        .get("action")
        .cloned()
        .and_then(|a| serde_json::from_value(a).ok())
        .ok_or_else(|| {
            McpError::invalid_params(
                format!("the \"{KEY}\" answer needs an action: accept, decline or cancel"),
                None,
            )
        })?;
    Ok((call_id(handle), read(action, response.get("content").cloned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_set_of_arguments_has_one_digest_in_any_order() {
        let a: Map<String, Value> =
            serde_json::from_str(r#"{"path": "a", "opts": {"x": 1, "y": [2, {"b": 1, "a": 2}]}}"#).unwrap();
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"opts": {"y": [2, {"a": 2, "b": 1}], "x": 1}, "path": "a"}"#).unwrap();
        assert_eq!(Asked::new("p", "s", "t", &a), Asked::new("p", "s", "t", &b));
        // Another value, another array order, another key spelling: another digest.
        for other in [
            r#"{"path": "b", "opts": {"x": 1, "y": [2, {"b": 1, "a": 2}]}}"#,
            r#"{"path": "a", "opts": {"x": 1, "y": [{"b": 1, "a": 2}, 2]}}"#,
            r#"{"path": "a", "opts": {"x": "1", "y": [2, {"b": 1, "a": 2}]}}"#,
            r#"{"path": "a", "opts": {"x": 1, "y": [2, {"b": 1, "a": 2}]}, "extra": null}"#,
        ] {
            let c: Map<String, Value> = serde_json::from_str(other).unwrap();
            assert_ne!(
                Asked::new("p", "s", "t", &a).digest,
                Asked::new("p", "s", "t", &c).digest,
                "{other}"
            );
        }
    }

    #[test]
    fn only_the_2026_revision_is_asked_by_round_trip() {
        assert!(!multi_round_trip(None));
        assert!(!multi_round_trip(Some(ProtocolVersion::V_2025_06_18)));
        assert!(multi_round_trip(Some(ProtocolVersion::V_2026_07_28)));
    }
}
