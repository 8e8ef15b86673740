//! Stages 11 and 12: the result's shape (its output schema, secrets redacted, structural
//! truncation to the budget with the full result kept behind a `read_result` handle), then the PostToolUse hooks, which
//! may replace the result, withhold it (a refusal: `hook_denied`) or stop the run.

use super::Engine;
use super::approval::hook_event;
use super::outcome::{Done, Stop};
use super::record::Flight;
use crate::error::{CallError, ErrorKind};
use crate::hooks;
use crate::redact::{redact_result, redact_text};
use crate::registry::Entry;
use crate::result::{json_size, normalize_empty, truncate};
use crate::session::Session;
use crate::tool::{Category, ToolOutput};
use serde_json::Value;
use std::sync::Arc;

impl Engine {
    /// Stage 11: check the result against the tool's output schema and cut it to the budget.
    pub(crate) async fn shape(
        &self,
        session: &Session,
        entry: &Entry,
        output: ToolOutput,
        f: &mut Flight,
    ) -> Result<Done, Stop> {
        let spec = entry.spec();
        let mut structured = false;
        if output.failure.is_none() {
            match entry.compiled_output() {
                Some(Ok(compiled)) if !compiled.is_valid(&output.content) => {
                    let violations = compiled.violations(&output.content);
                    return Err(Stop::Refused(
                        CallError::new(
                            ErrorKind::ResultInvalid,
                            "The tool returned a result that does not match its output schema.",
                        )
                        .with("errors", serde_json::to_value(violations).unwrap_or(Value::Null)),
                    ));
                }
                Some(Err(message)) => return Err(Stop::Refused(CallError::new(ErrorKind::ResultInvalid, message))),
                Some(Ok(_)) => structured = true,
                None => {}
            }
        }
        let mut content = normalize_empty(output.content);
        // Secrets leave the result before anything downstream sees it: the model, the client, the
        // hooks, the cache of shaped results and the full result behind a `read_result` handle.
        if spec.secrets.results {
            let redacted = redact_result(&mut content);
            if redacted > 0 {
                structured = false;
                tracing::info!(tool = %f.tool, call_id = %f.call.id, redacted, "secrets redacted from a result");
            }
        }
        let budget = self.budget(entry);
        let size = json_size(&content);
        let content = if size > budget {
            let full = Arc::new(content);
            let handle = session.store.put(&session.id, full.clone(), size).await;
            let t = truncate(&full, budget, Some(&handle));
            f.truncated = t.truncated;
            structured &= !t.truncated;
            t.value
        } else {
            content
        };
        Ok(Done {
            content,
            structured,
            end_turn: spec.category == Category::Terminal || output.end_turn,
            failed: output.failure,
            stop: None,
        })
    }

    pub(crate) fn budget(&self, entry: &Entry) -> usize {
        entry.spec().budget.unwrap_or(self.config.budget_bytes)
    }

    /// Stage 12: the PostToolUse hooks, then any context the hooks added.
    pub(crate) async fn post_hooks(
        &self,
        session: &Session,
        entry: &Entry,
        mut done: Done,
        f: &mut Flight,
    ) -> Result<Done, Stop> {
        if !self.hooks.is_empty() {
            let event = hook_event(
                session,
                &f.call,
                entry.provider_name(),
                "PostToolUse",
                Some(done.content.clone()),
            );
            let merged = hooks::run_post(&self.hooks, &event).await;
            if merged.replacement.is_some() || merged.stop.is_some() || merged.block.is_some() {
                f.note_hook(
                    "post",
                    serde_json::json!({
                        "replaced": merged.replacement.is_some(),
                        "blocked": merged.block.as_deref().map(|m| redact_text(m).into_owned()),
                        "stop": merged.stop.as_deref().map(|m| redact_text(m).into_owned()),
                    }),
                );
            }
            if let Some(replacement) = merged.replacement {
                done.structured = false;
                done.content = truncate(&normalize_empty(replacement), self.budget(entry), None).value;
            }
            if let Some(reason) = merged.block {
                // A withheld result is a refusal: the model sees why, never the result.
                let error = CallError::new(ErrorKind::HookDenied, format!("A hook withheld this result: {reason}"))
                    .with("source", "post_tool_use_hook_block");
                done.structured = false;
                done.content = error.to_json();
                done.failed = Some(ErrorKind::HookDenied);
            }
            f.context.extend(merged.additional_context);
            done.stop = merged.stop;
        }
        if !f.context.is_empty() {
            done.structured = false;
            done.content = with_context(std::mem::take(&mut done.content), f.context.join("\n"));
        }
        Ok(done)
    }
}

/// Adds hook context to a result: beside the keys of an object, or around anything else.
fn with_context(content: Value, context: String) -> Value {
    match content {
        Value::Object(mut map) => {
            map.insert("additional_context".into(), Value::String(context));
            Value::Object(map)
        }
        other => serde_json::json!({"result": other, "additional_context": context}),
    }
}
