//! An upstream server's requests to its client — `elicitation/create` and
//! `sampling/createMessage` — sent on to the MCP client whose call they belong to.
//!
//! toolgate holds one connection per upstream server for every session, and the protocol does
//! not say which call a server request belongs to. It is the call in flight at that server: when
//! every call then in flight there comes from one session, the request goes to that session's
//! client; when calls of several sessions are in flight, nobody can tell whose it is, and it is
//! refused (an elicitation declined, a sampling request an error) rather than shown to the wrong
//! client.
//!
//! Both are governed like calls, under the names `SERVER__elicitation` and `SERVER__sampling`:
//! a deny rule refuses them; a sampling request otherwise goes through the session's rules and
//! grants and its approver (an ask, unless a rule allows it), because it spends the client's
//! model on a prompt a third party wrote. An elicitation is put to the user, who answers or
//! declines it: only a deny rule stops it. An accepted form gets the defaults its schema gives
//! for the fields the answer left out (SEP-1034).

// Sampling is deprecated in the 2026-07-28 draft (SEP-2577) but part of 2025-11-25, which
// toolgate serves and whose servers send it.
#![allow(deprecated)]

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, LoggingMessageNotificationParam,
};
use serde_json::Value;
use toolgate_core::SessionId;

/// Where an upstream server's requests to its client go.
#[async_trait::async_trait]
pub trait Relay: Send + Sync {
    /// Puts an elicitation of `server`, made during a call of `session`, to that call's client.
    async fn elicit(
        &self,
        server: &str,
        session: &SessionId,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, McpError>;
    /// Has the client of `session` sample its model for `server`.
    async fn sample(
        &self,
        server: &str,
        session: &SessionId,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, McpError>;
    /// A resource of `server` changed (`notifications/resources/updated`): tell its subscribers.
    async fn resource_updated(&self, _server: &str, _uri: &str) {}
    /// A log message of `server`, sent while the calls in flight there were all `session`'s
    /// (`None`: several sessions' or none, and it goes to nobody).
    async fn log(&self, _server: &str, _session: Option<&SessionId>, _params: LoggingMessageNotificationParam) {}
}

/// The gateway's clients, as the relay of its upstream servers (weak: the hub outlives no
/// gateway).
pub(crate) struct ToClients(pub(crate) std::sync::Weak<crate::server::Gateway>);

impl ToClients {
    /// The calling session and its client, after the rules allowed `SERVER__what`.
    async fn governed(
        &self,
        server: &str,
        session: &SessionId,
        what: &str,
        read_only: bool,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<rmcp::service::Peer<rmcp::service::RoleServer>, String> {
        let gateway = self.0.upgrade().ok_or("the gateway has stopped")?;
        let live = gateway.live_session(session).ok_or("the calling session has ended")?;
        let name = format!("{server}__{what}");
        let call = toolgate_core::ToolCall::new(toolgate_core::CallId::generate(), name.as_str(), arguments);
        let mut spec = toolgate_core::tool::ToolSpec::default();
        spec.annotations.read_only = read_only;
        gateway
            .engine
            .govern(&live, &call, &spec)
            .await
            .map_err(|why| format!("{name}: {why}"))?;
        gateway
            .peer(session)
            .ok_or_else(|| "the calling client is not connected (a REST caller cannot be asked)".to_owned())
    }
}

#[async_trait::async_trait]
impl Relay for ToClients {
    async fn elicit(
        &self,
        server: &str,
        session: &SessionId,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, McpError> {
        let message = match &params {
            ElicitRequestParams::FormElicitationParams { message, .. }
            | ElicitRequestParams::UrlElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        let mut arguments = serde_json::Map::new();
        arguments.insert("message".into(), Value::String(message));
        let decline = |why: &str| {
            tracing::info!(server = %server, session = %session, "declined an elicitation: {why}");
            ElicitResult::new(rmcp::model::ElicitationAction::Decline)
        };
        let peer = match self.governed(server, session, "elicitation", true, arguments).await {
            Ok(peer) => peer,
            Err(why) => return Ok(decline(&why)),
        };
        let capable = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some());
        if !capable {
            return Ok(decline("the calling client does not take elicitations"));
        }
        tracing::info!(server = %server, session = %session, "elicitation sent on to the calling client");
        peer.create_elicitation(params).await.map_err(|e| match e {
            rmcp::ServiceError::McpError(e) => e,
            other => McpError::internal_error(format!("the calling client did not answer: {other}"), None),
        })
    }

    async fn sample(
        &self,
        server: &str,
        session: &SessionId,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, McpError> {
        let mut arguments = serde_json::Map::new();
        arguments.insert("max_tokens".into(), Value::from(params.max_tokens));
        arguments.insert("messages".into(), Value::from(params.messages.len()));
        if let Some(system) = &params.system_prompt {
            arguments.insert(
                "system_prompt".into(),
                Value::String(system.chars().take(500).collect()),
            );
        }
        let peer = self
            .governed(server, session, "sampling", false, arguments)
            .await
            .map_err(|why| McpError::invalid_request(format!("toolgate refused the sampling request: {why}"), None))?;
        let capable = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some());
        if !capable {
            return Err(McpError::invalid_request(
                "toolgate refused the sampling request: the calling client does not sample",
                None,
            ));
        }
        tracing::info!(server = %server, session = %session, "sampling request sent on to the calling client");
        peer.create_message(params).await.map_err(|e| match e {
            rmcp::ServiceError::McpError(e) => e,
            other => McpError::internal_error(format!("the calling client did not answer: {other}"), None),
        })
    }

    async fn resource_updated(&self, server: &str, uri: &str) {
        if let Some(gateway) = self.0.upgrade() {
            gateway.extension().resource_updated(server, uri).await;
        }
    }

    async fn log(&self, server: &str, session: Option<&SessionId>, mut params: LoggingMessageNotificationParam) {
        let Some(gateway) = self.0.upgrade() else { return };
        // A server's log line sent during one session's calls goes to that session's client
        // only: the clients of other sessions (other principals, perhaps) never see it.
        params.logger = Some(match params.logger.take() {
            Some(logger) => format!("{server}/{logger}"),
            None => server.to_owned(),
        });
        match session {
            Some(session) => {
                if let Some(peer) = gateway.peer(session) {
                    let _ = peer.notify_logging_message(params).await;
                }
            }
            // Outside a call (or during calls of several sessions): to the clients that chose a
            // log level.
            None => gateway.extension().upstream_log(server, params).await,
        }
    }
}

/// Fills the fields an accepted form answer left out with the defaults of its schema.
pub fn apply_defaults(params: &ElicitRequestParams, result: &mut ElicitResult) {
    if result.action != rmcp::model::ElicitationAction::Accept {
        return;
    }
    let ElicitRequestParams::FormElicitationParams { requested_schema, .. } = params else {
        return;
    };
    let Ok(schema) = serde_json::to_value(requested_schema) else {
        return;
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let content = result
        .content
        .get_or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Some(content) = content.as_object_mut() else {
        return;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default")
            && !content.contains_key(name)
        {
            content.insert(name.clone(), default.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ElicitationAction;
    use serde_json::json;

    fn form() -> ElicitRequestParams {
        serde_json::from_value(json!({
            "mode": "form",
            "message": "who?",
            "requestedSchema": {"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "nick": {"type": "string"}
            }}
        }))
        .unwrap()
    }

    #[test]
    fn an_accepted_form_gets_the_defaults_of_the_fields_left_out_and_keeps_the_rest() {
        let mut r: ElicitResult = serde_json::from_value(json!({"action": "accept", "content": {"age": 41}})).unwrap();
        apply_defaults(&form(), &mut r);
        assert_eq!(r.content, Some(json!({"age": 41, "name": "John Doe"})));
        let mut empty: ElicitResult = serde_json::from_value(json!({"action": "accept"})).unwrap();
        apply_defaults(&form(), &mut empty);
        assert_eq!(empty.content, Some(json!({"name": "John Doe", "age": 30})));
    }

    #[test]
    fn a_declined_form_gets_no_content() {
        let mut r: ElicitResult = serde_json::from_value(json!({"action": "decline"})).unwrap();
        apply_defaults(&form(), &mut r);
        assert_eq!(r.action, ElicitationAction::Decline);
        assert_eq!(r.content, None);
    }
}
