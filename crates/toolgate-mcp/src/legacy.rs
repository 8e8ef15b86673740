//! MCP tasks as the 2025-11-25 revision defines them, for its clients (the official Python
//! SDK 1.x's `session.experimental` among them): a `tools/call` with a `task` parameter returns
//! `{"task": …}`, and `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` follow it.
//! The same tasks as the extension's ([`crate::tasks`]: in the store, any replica answers).
//!
//! rmcp speaks the tasks extension (SEP-2663) that replaced this surface, and drops the
//! `task` parameter of a `tools/call`, so these messages are answered before rmcp sees them: by
//! the HTTP face for a session whose `initialize` asked for 2025-11-25 without declaring the
//! extension (a mark in the store, so every replica knows), and by the stdio face for such a
//! client. The same faces add the revision's `tasks` capability to the `initialize` result and
//! `execution.taskSupport` to the tools listed.

use crate::server::Gateway;
use crate::tasks::Record;
use rmcp::ErrorData as McpError;
use rmcp::model::TaskStatus;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::tool::TaskSupport;

/// The revision whose tasks this module serves.
pub const VERSION: &str = "2025-11-25";
/// Tasks per `tasks/list` page.
pub const PAGE: usize = 50;
/// The `_meta` key that ties a result to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Whether an `initialize` request opens a session this module serves: it asks for 2025-11-25
/// and does not declare the tasks extension (a client that declares it gets the extension's
/// tasks, whatever revision it speaks).
pub fn wants(initialize: &Value) -> bool {
    initialize.pointer("/params/protocolVersion").and_then(Value::as_str) == Some(VERSION)
        && initialize
            .pointer("/params/capabilities/extensions")
            .and_then(|e| e.get(crate::tasks::EXTENSION))
            .is_none()
}

/// The store's mark on an HTTP session this module serves.
pub fn mark(session_id: &str) -> String {
    format!("mcp-legacy-tasks/{session_id}")
}

/// Whether this module answers `message` (a JSON-RPC request of a 2025-11-25 session).
pub fn claims(message: &Value) -> bool {
    match message.get("method").and_then(Value::as_str) {
        Some("tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel") => message.get("id").is_some(),
        Some("tools/call") => {
            message.get("id").is_some() && message.pointer("/params/task").is_some_and(Value::is_object)
        }
        _ => false,
    }
}

/// The task as the revision shows it.
fn task_json(record: &Record) -> Value {
    let t = &record.task;
    let status = serde_json::to_value(t.status).unwrap_or(Value::Null);
    let mut task = json!({
        "taskId": t.task_id,
        "status": status,
        "createdAt": t.created_at,
        "lastUpdatedAt": t.last_updated_at,
        "ttl": t.ttl_ms,
        "pollInterval": t.poll_interval_ms,
    });
    if let Some(message) = &t.status_message {
        task["statusMessage"] = json!(message);
    }
    task
}

/// `notifications/tasks/status` for a task.
pub fn status_notification(record: &Record) -> rmcp::model::ServerNotification {
    rmcp::model::ServerNotification::CustomNotification(rmcp::model::CustomNotification::new(
        "notifications/tasks/status",
        Some(task_json(record)),
    ))
}

fn task_id(params: &Value) -> Result<&str, McpError> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("taskId is missing or not a string", None))
}

fn unknown(id: &str) -> McpError {
    McpError::invalid_params(format!("Unknown task: {id}"), None)
}

/// Answers one claimed request of `principal` in the session named `session`: the whole
/// JSON-RPC response.
pub async fn answer(gateway: &Arc<Gateway>, principal: &str, session: &str, message: &Value) -> Value {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let result = match method {
        "tools/call" => call(gateway, principal, session, &params).await,
        "tasks/get" => get(gateway, principal, &params).await,
        "tasks/result" => result(gateway, principal, &params).await,
        "tasks/list" => list(gateway, principal, session, &params).await,
        "tasks/cancel" => cancel(gateway, principal, &params).await,
        other => Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
            None,
        )),
    };
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

async fn call(gateway: &Arc<Gateway>, principal: &str, session: &str, params: &Value) -> Result<Value, McpError> {
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("name is missing or not a string", None))?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map.clone()),
        Some(_) => return Err(McpError::invalid_params("arguments must be an object", None)),
    };
    let ttl = match params.pointer("/task/ttl") {
        None | Some(Value::Null) => crate::tasks::TTL,
        Some(v) => Duration::from_millis(
            v.as_u64()
                .ok_or_else(|| McpError::invalid_params("task.ttl must be a whole number of milliseconds", None))?,
        ),
    };
    let record = gateway.start_task(principal, session, tool, arguments, ttl).await?;
    Ok(json!({"task": task_json(&record)}))
}

async fn record(gateway: &Arc<Gateway>, principal: &str, params: &Value) -> Result<Record, McpError> {
    let id = task_id(params)?;
    gateway.tasks().record(principal, id).await?.ok_or_else(|| unknown(id))
}

async fn get(gateway: &Arc<Gateway>, principal: &str, params: &Value) -> Result<Value, McpError> {
    Ok(task_json(&record(gateway, principal, params).await?))
}

/// Waits for the task to end, then its call's result (with the task's id in `_meta`), or the
/// error that failed it.
async fn result(gateway: &Arc<Gateway>, principal: &str, params: &Value) -> Result<Value, McpError> {
    let mut every = Duration::from_millis(20);
    loop {
        let record = record(gateway, principal, params).await?;
        match record.task.status {
            TaskStatus::Completed => {
                let mut result = Value::Object(record.result.clone().unwrap_or_default());
                result["_meta"][RELATED_TASK] = json!({"taskId": record.task.task_id});
                return Ok(result);
            }
            TaskStatus::Failed => {
                let error = record.error.clone().unwrap_or_default();
                return Err(McpError::new(
                    rmcp::model::ErrorCode(
                        error
                            .get("code")
                            .and_then(Value::as_i64)
                            .and_then(|c| i32::try_from(c).ok())
                            .unwrap_or(-32603),
                    ),
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the task failed")
                        .to_owned(),
                    None,
                ));
            }
            TaskStatus::Cancelled => {
                return Err(McpError::invalid_request(
                    format!("Task {} was cancelled", record.task.task_id),
                    None,
                ));
            }
            _ => {
                tokio::time::sleep(every).await;
                every = (every * 2).min(Duration::from_millis(250));
            }
        }
    }
}

async fn list(gateway: &Arc<Gateway>, principal: &str, session: &str, params: &Value) -> Result<Value, McpError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .parse::<usize>()
            .map_err(|_| McpError::invalid_params("the cursor is not one this server gave", None))?,
        Some(_) => return Err(McpError::invalid_params("the cursor must be a string", None)),
    };
    let session = crate::server::scoped(principal, session);
    let all = gateway.tasks().list(principal, session.as_str()).await?;
    let page: Vec<Value> = all.iter().skip(start).take(PAGE).map(task_json).collect();
    let mut out = json!({"tasks": page});
    if start + PAGE < all.len() {
        out["nextCursor"] = json!((start + PAGE).to_string());
    }
    Ok(out)
}

/// Cancels a running task and answers with it once it has ended (or after a moment, still
/// ending); an ended task cannot be cancelled (-32602).
async fn cancel(gateway: &Arc<Gateway>, principal: &str, params: &Value) -> Result<Value, McpError> {
    let before = record(gateway, principal, params).await?;
    if before.task.status.is_terminal() {
        return Err(McpError::invalid_params(
            format!("Task {} has already ended", before.task.task_id),
            None,
        ));
    }
    let tasks = gateway.tasks();
    tasks.cancel(principal, &before.task.task_id).await?;
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let now = record(gateway, principal, params).await?;
        if now.task.status.is_terminal() || tokio::time::Instant::now() >= until {
            return Ok(task_json(&now));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Adds the revision's task surface to a response rmcp made for a 2025-11-25 client: the
/// `tasks` capability to `initialize`'s result, each listed tool's `execution.taskSupport`.
pub fn patch(gateway: &Gateway, response: &mut Value) {
    let Some(result) = response.get_mut("result").and_then(Value::as_object_mut) else {
        return;
    };
    let initialize = result.contains_key("protocolVersion") && result.contains_key("serverInfo");
    if initialize && let Some(capabilities) = result.get_mut("capabilities").and_then(Value::as_object_mut) {
        capabilities.insert(
            "tasks".into(),
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        );
        return;
    }
    if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools {
            let support = tool
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| gateway.task_support(name));
            let shown = match support {
                Some(TaskSupport::Optional) => "optional",
                Some(TaskSupport::Required) => "required",
                _ => continue,
            };
            tool["execution"] = json!({"taskSupport": shown});
        }
    }
}

/// The stdio face's ends for rmcp over the process's `input` and `output`: each line from the
/// client goes to rmcp unless this module answers it (a task request, once the client's
/// `initialize` asked for 2025-11-25), and each line from rmcp goes to the client, patched for
/// such a client; whole lines only, so answers never interleave.
pub fn stdio<R, W>(gateway: Arc<Gateway>, input: R, output: W) -> (tokio::io::DuplexStream, tokio::io::DuplexStream)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(1 << 16);
    let (mut from_rmcp, rmcp_out) = tokio::io::duplex(1 << 16);
    let output = Arc::new(tokio::sync::Mutex::new(output));
    let legacy = Arc::new(AtomicBool::new(false));
    let session = format!("stdio-{}", uuid::Uuid::now_v7());
    // The revision's status notification for each of this client's tasks as it ends.
    {
        let (output, legacy, mut ended) = (output.clone(), legacy.clone(), gateway.tasks().subscribe());
        let mine = crate::server::scoped("local", &session).to_string();
        tokio::spawn(async move {
            loop {
                let record = match ended.recv().await {
                    Ok((_, record)) => record,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if record.session != mine || !legacy.load(Ordering::SeqCst) {
                    continue;
                }
                let params = task_json(&record);
                let mut text =
                    json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": params}).to_string();
                text.push('\n');
                let mut out = output.lock().await;
                if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
                    return;
                }
            }
        });
    }
    {
        let (output, legacy, gateway) = (output.clone(), legacy.clone(), gateway.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(input).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message: Option<Value> = serde_json::from_str(&line).ok();
                if let Some(m) = &message
                    && m.get("method").and_then(Value::as_str) == Some("initialize")
                {
                    legacy.store(wants(m), Ordering::SeqCst);
                }
                match message {
                    Some(m) if legacy.load(Ordering::SeqCst) && claims(&m) => {
                        let (gateway, output, session) = (gateway.clone(), output.clone(), session.clone());
                        // tasks/result waits for the task: the next lines do not wait for it.
                        tokio::spawn(async move {
                            let mut text = answer(&gateway, "local", &session, &m).await.to_string();
                            text.push('\n');
                            let mut out = output.lock().await;
                            let _ = out.write_all(text.as_bytes()).await;
                            let _ = out.flush().await;
                        });
                    }
                    _ => {
                        if to_rmcp.write_all(line.as_bytes()).await.is_err() || to_rmcp.write_all(b"\n").await.is_err()
                        {
                            break;
                        }
                    }
                }
            }
            // The client's end: rmcp sees it too.
            let _ = to_rmcp.shutdown().await;
        });
    }
    tokio::spawn(async move {
        let mut lines = BufReader::new(&mut from_rmcp).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = if legacy.load(Ordering::SeqCst) {
                match serde_json::from_str::<Value>(&line) {
                    Ok(mut v) => {
                        patch(&gateway, &mut v);
                        v.to_string()
                    }
                    Err(_) => line,
                }
            } else {
                line
            };
            text.push('\n');
            let mut out = output.lock().await;
            if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    (rmcp_in, rmcp_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_task_messages_are_claimed() {
        assert!(claims(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "x"}})
        ));
        assert!(claims(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "task": {"ttl": 1000}}})
        ));
        assert!(!claims(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}})
        ));
        assert!(!claims(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "task": true}})
        ));
        assert!(
            !claims(&json!({"jsonrpc": "2.0", "method": "tasks/get"})),
            "a notification is not answered"
        );
        assert!(!claims(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})));
    }
}
