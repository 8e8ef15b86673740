//! An upstream server's tool as a toolgate [`Tool`]: `SERVER__tool`, its schemas, annotations
//! that count only when the server is trusted, and its results turned into ours.

use crate::upstream::Link;
use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::ToolError;
use toolgate_core::tool::{Annotations, Tool, ToolContext, ToolOutput, ToolSpec};

/// A tool's definition as the server gave it: what decides whether it "changed".
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    /// The server's name for it.
    pub name: String,
    /// Its description (or title).
    pub description: String,
    /// Its argument schema.
    pub input_schema: Value,
    /// Its result schema, if it declares one.
    pub output_schema: Option<Value>,
    /// Its annotations as JSON (`readOnlyHint`…), if any.
    pub annotations: Option<Value>,
}

impl ToolDef {
    /// From a `tools/list` entry.
    pub fn from_mcp(tool: &rmcp::model::Tool) -> Self {
        let description = tool
            .description
            .as_deref()
            .map(str::to_owned)
            .or_else(|| tool.title.clone())
            .unwrap_or_default();
        let mut input_schema = Value::Object((*tool.input_schema).clone());
        // Some servers leave out `type` on an empty schema; providers want an object schema.
        if let Value::Object(map) = &mut input_schema
            && !map.contains_key("type")
        {
            map.insert("type".into(), json!("object"));
        }
        Self {
            name: tool.name.to_string(),
            description,
            input_schema,
            output_schema: tool.output_schema.as_ref().map(|s| Value::Object((**s).clone())),
            annotations: tool.annotations.as_ref().and_then(|a| serde_json::to_value(a).ok()),
        }
    }

    /// Annotations as toolgate reads them: the server's hints with MCP's defaults when trusted,
    /// otherwise not read-only, destructive and open-world whatever it claims.
    pub fn annotations(&self, trusted: bool) -> Annotations {
        if !trusted {
            return Annotations::UNTRUSTED;
        }
        let hint = |key: &str| {
            self.annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        let read_only = hint("readOnlyHint").unwrap_or(false);
        Annotations {
            read_only,
            // MCP: destructive and idempotent mean something only for tools that write.
            destructive: !read_only && hint("destructiveHint").unwrap_or(true),
            idempotent: read_only || hint("idempotentHint").unwrap_or(false),
            open_world: hint("openWorldHint").unwrap_or(true),
        }
    }
}

/// A tool's definition as kept once registered: its schemas as compact JSON text, parsed when
/// the engine reads them. A parsed schema (order-preserving maps of 104-byte entries, each with
/// its own hash index) costs several times its text, for each of thousands of listed tools.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredDef {
    /// The server's name for it.
    pub name: String,
    /// Its description (or title).
    pub description: String,
    input: Box<str>,
    output: Option<Box<str>>,
    annotations: Option<Box<str>>,
}

impl StoredDef {
    pub(crate) fn new(def: ToolDef) -> Self {
        let text = |v: &Value| serde_json::to_string(v).unwrap_or_default().into_boxed_str();
        Self {
            input: text(&def.input_schema),
            output: def.output_schema.as_ref().map(text),
            annotations: def.annotations.as_ref().map(text),
            name: def.name,
            description: def.description,
        }
    }

    /// Its argument schema.
    pub fn input_schema(&self) -> Value {
        serde_json::from_str(&self.input).unwrap_or_else(|_| json!({"type": "object"}))
    }

    /// Its result schema, if it declares one.
    pub fn output_schema(&self) -> Option<Value> {
        self.output.as_deref().and_then(|t| serde_json::from_str(t).ok())
    }
}

/// An upstream tool, registered as `SERVER__tool` (or unprefixed).
#[derive(Debug)]
pub struct McpTool {
    name: String,
    def: StoredDef,
    spec: ToolSpec,
    link: Arc<Link>,
    /// The parsed schemas, made only if something asks for a reference (the engine reads
    /// `parameter_schema`, which parses without keeping).
    parameters: std::sync::OnceLock<Value>,
    output: std::sync::OnceLock<Option<Value>>,
}

impl McpTool {
    /// A tool registered as `name` (`SERVER__tool`, or the tool's own name for an unprefixed
    /// server).
    #[cfg(test)]
    pub(crate) fn new(name: &str, def: ToolDef, trusted: bool, tasks: bool, link: Arc<Link>) -> Self {
        let annotations = def.annotations(trusted);
        Self::stored(name, StoredDef::new(def), annotations, tasks, link)
    }

    /// A tool from its stored definition and the annotations toolgate reads for it.
    pub(crate) fn stored(name: &str, def: StoredDef, annotations: Annotations, tasks: bool, link: Arc<Link>) -> Self {
        let mut spec = ToolSpec::with_annotations(annotations);
        if tasks {
            spec.task = toolgate_core::tool::TaskSupport::Optional;
        }
        // With `timeout_resets_on_progress` the tool keeps its own, resettable timer; the
        // engine's is then the ceiling.
        spec.timeout = if link.resets_on_progress {
            Some(link.max_total)
        } else {
            link.tool_timeout
        };
        if link.resets_on_progress {
            spec.deadline = Some(link.max_total);
        }
        Self {
            name: name.to_owned(),
            def,
            spec,
            link,
            parameters: std::sync::OnceLock::new(),
            output: std::sync::OnceLock::new(),
        }
    }

    /// The definition the server gave.
    pub fn def(&self) -> &StoredDef {
        &self.def
    }

    /// The server it lives on.
    pub fn server(&self) -> &str {
        &self.link.server
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.def.description
    }
    fn parameters(&self) -> &Value {
        self.parameters.get_or_init(|| self.def.input_schema())
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn output_schema(&self) -> Option<&Value> {
        self.output.get_or_init(|| self.def.output_schema()).as_ref()
    }
    fn parameter_schema(&self) -> std::borrow::Cow<'_, Value> {
        match self.parameters.get() {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(self.def.input_schema()),
        }
    }
    fn result_schema(&self) -> Option<std::borrow::Cow<'_, Value>> {
        match self.output.get() {
            Some(v) => v.as_ref().map(std::borrow::Cow::Borrowed),
            None => self.def.output_schema().map(std::borrow::Cow::Owned),
        }
    }
    async fn execute(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let span = tracing::info_span!(
            "mcp_client_call",
            otel.name = %format!("tools/call {}", self.def.name),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            mcp.server.name = %self.link.server,
            gen_ai.tool.name = %self.def.name,
            mcp.session.id = %ctx.session_id,
        );
        tracing::Instrument::instrument(self.link.call(&self.def.name, args, ctx), span).await
    }
}

/// The most of a failed call's text the model is told.
const ERROR_TEXT: usize = 4000;

/// A `CallToolResult` as a toolgate result: `structuredContent` when the server gave it, the
/// text when every block is text, the blocks as JSON otherwise; `isError` becomes a failure
/// carrying the server's text.
pub(crate) fn output(server: &str, tool: &str, result: CallToolResult) -> Result<ToolOutput, ToolError> {
    if result.is_error == Some(true) {
        let text: String = text_of(&result.content);
        let text = if text.trim().is_empty() {
            "no message".to_owned()
        } else {
            text.chars().take(ERROR_TEXT).collect()
        };
        return Err(ToolError::failed(format!(
            "The tool `{tool}` on the MCP server `{server}` reported an error: {text}"
        )));
    }
    if let Some(structured) = result.structured_content {
        return Ok(ToolOutput::json(structured));
    }
    let all_text = result.content.iter().all(|c| matches!(c, ContentBlock::Text(_)));
    if all_text {
        return Ok(ToolOutput::text(text_of(&result.content)));
    }
    Ok(ToolOutput::json(
        serde_json::to_value(&result.content).unwrap_or(Value::Null),
    ))
}

fn text_of(content: &[ContentBlock]) -> String {
    let mut parts = Vec::new();
    for c in content {
        match c.as_text() {
            Some(t) => parts.push(t.text.clone()),
            None => parts.push(serde_json::to_string(c).unwrap_or_default()),
        }
    }
    parts.join("\n")
}
