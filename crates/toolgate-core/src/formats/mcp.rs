//! MCP: `tools/list` entries with annotations, `tools/call` params, `CallToolResult`s.

use super::{Answer, Format, FormatError, RawArguments, RawCall, ToolResult, ToolView};
use serde_json::{Value, json};

pub(super) fn parse(body: &Value) -> Result<Answer, FormatError> {
    let params = body.get("params").unwrap_or(body);
    let name = params.get("name").and_then(Value::as_str).map(str::to_owned);
    if name.is_none() {
        return Err(FormatError::new(Format::Mcp, "no `name` in the tools/call params"));
    }
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => RawArguments::Missing,
        Some(v) => RawArguments::Json(v.clone()),
    };
    let id = body.get("id").map(|id| match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    Ok(Answer {
        format: Format::Mcp,
        message: Value::Null,
        text: None,
        calls: vec![RawCall {
            id,
            name,
            arguments,
            extra: Default::default(),
            repair: None,
        }],
        cut_off: false,
        reasoning: None,
        dialect: None,
    })
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"content": [{"type": "text", "text": r.content_text()}], "isError": r.is_error}))
        .collect()
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> Value {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut v = json!({
                "name": t.name,
                "description": t.description,
                "inputSchema": t.parameters,
                "annotations": {
                    "readOnlyHint": t.annotations.read_only,
                    "destructiveHint": t.annotations.destructive,
                    "idempotentHint": t.annotations.idempotent,
                    "openWorldHint": t.annotations.open_world,
                }
            });
            if let Some(out) = t.output_schema {
                v["outputSchema"] = out.clone();
            }
            v
        })
        .collect();
    json!({"tools": list})
}
