//! The MCP conformance suite's server fixture: the toolgate gateway (the same router, pipeline,
//! Host/Origin guard and sessions `toolgate serve` uses) serving the suite's fixture tools as
//! governed tools, and its prompts, resources, completion and log levels through the gateway's
//! `Extension` hook. A test binary only: nothing here is reachable from the product's defaults.
//!
//! `conformance_server [ADDR]` (default `127.0.0.1:0`) prints `listening http://ADDR/mcp` and
//! serves until killed.

// The suite's 2025-11-25 scenarios exercise logging, which the draft revision deprecates.
#![allow(deprecated)]

use async_trait::async_trait;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, LoggingLevel, ReadResourceRequestParams, ReadResourceResult,
    ServerCapabilities, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use toolgate_core::ToolError;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::tool::{Annotations, Progress, TaskSupport, Tool, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{Engine, EngineConfig, Registry, SessionOptions};
use toolgate_mcp::http::HttpOptions;
use toolgate_mcp::metrics::Metrics;
use toolgate_mcp::{Extension, Gateway, Queue, Via};

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV header with one silent 8-bit sample.
const WAV: &str = "UklGRiUAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQEAAACA";

/// Converts a JSON literal of the protocol into the SDK's type.
fn from<T: DeserializeOwned>(value: Value) -> Result<T, McpError> {
    serde_json::from_value(value).map_err(|e| McpError::internal_error(format!("fixture: {e}"), None))
}

/// Which fixture tool.
#[derive(Clone, Copy)]
enum Kind {
    SimpleText,
    Image,
    Audio,
    EmbeddedResource,
    Mixed,
    Logging,
    Error,
    Progress,
    Sampling,
    Elicitation,
    ElicitationDefaults,
    ElicitationEnums,
    JsonSchema,
    // The tasks extension's fixtures (SEP-2663 scenarios).
    Greet,
    SlowCompute,
    FailingJob,
    ProtocolErrorJob,
}

struct Fixture {
    name: &'static str,
    description: &'static str,
    kind: Kind,
    parameters: Value,
    spec: ToolSpec,
    gateway: Arc<OnceLock<Weak<Gateway>>>,
    level: Arc<Mutex<LoggingLevel>>,
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

fn string_arg(name: &str, description: &str) -> Value {
    json!({"type": "object", "properties": {name: {"type": "string", "description": description}},
           "required": [name]})
}

impl Fixture {
    fn peer(&self, ctx: &ToolContext) -> Result<Peer<RoleServer>, ToolError> {
        self.gateway
            .get()
            .and_then(Weak::upgrade)
            .and_then(|g| g.peer(&ctx.session_id))
            .ok_or_else(|| ToolError::failed("no MCP client is connected to this session"))
    }

    async fn log(&self, peer: &Peer<RoleServer>, text: &str) {
        let threshold = *self.level.lock().unwrap_or_else(|p| p.into_inner());
        if severity(LoggingLevel::Info) < severity(threshold) {
            return;
        }
        if let Ok(params) = from(json!({"level": "info", "logger": "conformance", "data": text})) {
            let _ = peer.notify_logging_message(params).await;
        }
    }

    async fn elicit(&self, ctx: &ToolContext, message: &str, schema: Value) -> Result<Value, ToolError> {
        let peer = self.peer(ctx)?;
        if peer.peer_info().is_none_or(|i| i.capabilities.elicitation.is_none()) {
            return Err(ToolError::failed("the client does not support elicitation"));
        }
        let params = from(json!({"mode": "form", "message": message, "requestedSchema": schema}))
            .map_err(|e| ToolError::failed(e.message.to_string()))?;
        let result = peer
            .create_elicitation(params)
            .await
            .map_err(|e| ToolError::failed(format!("elicitation failed: {e}")))?;
        Ok(json!({"action": result.action, "content": result.content}))
    }

    async fn run(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let wait = |ms| tokio::time::sleep(Duration::from_millis(ms));
        Ok(match self.kind {
            Kind::SimpleText => ToolOutput::text("This is a simple text response for testing."),
            Kind::Image => ToolOutput::json(json!([{"type": "image", "data": PNG, "mimeType": "image/png"}])),
            Kind::Audio => ToolOutput::json(json!([{"type": "audio", "data": WAV, "mimeType": "audio/wav"}])),
            Kind::EmbeddedResource => ToolOutput::json(json!([{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}])),
            Kind::Mixed => ToolOutput::json(json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ])),
            Kind::Logging => {
                let peer = self.peer(ctx)?;
                self.log(&peer, "Tool execution started").await;
                wait(50).await;
                self.log(&peer, "Tool processing data").await;
                wait(50).await;
                self.log(&peer, "Tool execution completed").await;
                ToolOutput::text("Tool with logging executed successfully")
            }
            Kind::Error => {
                return Err(ToolError::failed(
                    "This tool intentionally returns an error for testing",
                ));
            }
            Kind::Progress => {
                for (i, done) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        wait(50).await;
                    }
                    ctx.progress.report(Progress {
                        progress: done,
                        total: Some(100.0),
                        message: None,
                    });
                }
                ToolOutput::text("Tool with progress executed successfully")
            }
            Kind::Sampling => {
                let peer = self.peer(ctx)?;
                if peer.peer_info().is_none_or(|i| i.capabilities.sampling.is_none()) {
                    return Err(ToolError::failed("the client does not support sampling"));
                }
                let prompt = args["prompt"].as_str().unwrap_or_default();
                let params = from(json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100
                }))
                .map_err(|e| ToolError::failed(e.message.to_string()))?;
                let result = peer
                    .create_message(params)
                    .await
                    .map_err(|e| ToolError::failed(format!("sampling failed: {e}")))?;
                let content = serde_json::to_value(&result.message.content).unwrap_or(Value::Null);
                let text = content
                    .get("text")
                    .or_else(|| content.get(0).and_then(|c| c.get("text")))
                    .and_then(Value::as_str)
                    .map_or_else(|| content.to_string(), str::to_owned);
                ToolOutput::text(format!("LLM response: {text}"))
            }
            Kind::Elicitation => {
                let message = args["message"].as_str().unwrap_or_default();
                let answer = self
                    .elicit(
                        ctx,
                        message,
                        json!({"type": "object", "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"}},
                        "required": ["username", "email"]}),
                    )
                    .await?;
                ToolOutput::text(format!("User response: {answer}"))
            }
            Kind::ElicitationDefaults => {
                let answer = self
                    .elicit(
                        ctx,
                        "Please review and update the form fields with defaults",
                        json!({
                        "type": "object", "properties": {
                            "name": {"type": "string", "description": "User name", "default": "John Doe"},
                            "age": {"type": "integer", "description": "User age", "default": 30},
                            "score": {"type": "number", "description": "User score", "default": 95.5},
                            "status": {"type": "string", "description": "User status",
                                       "enum": ["active", "inactive", "pending"], "default": "active"},
                            "verified": {"type": "boolean", "description": "Verification status", "default": true}
                        }}),
                    )
                    .await?;
                ToolOutput::text(format!(
                    "Elicitation completed: action={}, content={}",
                    answer["action"].as_str().unwrap_or_default(),
                    answer["content"]
                ))
            }
            Kind::ElicitationEnums => {
                let answer = self
                    .elicit(
                        ctx,
                        "Please select options from the enum fields",
                        json!({
                        "type": "object", "properties": {
                            "untitledSingle": {"type": "string", "description": "Select one option",
                                               "enum": ["option1", "option2", "option3"]},
                            "titledSingle": {"type": "string", "description": "Select one option with titles",
                                             "oneOf": [{"const": "value1", "title": "First Option"},
                                                       {"const": "value2", "title": "Second Option"},
                                                       {"const": "value3", "title": "Third Option"}]},
                            "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                           "enum": ["opt1", "opt2", "opt3"],
                                           "enumNames": ["Option One", "Option Two", "Option Three"]},
                            "untitledMulti": {"type": "array", "description": "Select multiple options",
                                              "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                            "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                            "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                                {"const": "value2", "title": "Second Choice"},
                                                                {"const": "value3", "title": "Third Choice"}]}}
                        }}),
                    )
                    .await?;
                ToolOutput::text(format!(
                    "Elicitation completed: action={}, content={}",
                    answer["action"].as_str().unwrap_or_default(),
                    answer["content"]
                ))
            }
            Kind::JsonSchema => ToolOutput::text(format!("Received: {args}")),
            Kind::Greet => ToolOutput::text(format!("Hello, {}!", args["name"].as_str().unwrap_or("world"))),
            Kind::SlowCompute => {
                let seconds = args["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, 600.0);
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                ToolOutput::text(format!(
                    "computed {} after {seconds} s",
                    args["label"].as_str().unwrap_or("a result")
                ))
            }
            Kind::FailingJob => {
                wait(1000).await;
                return Err(ToolError::failed("the job failed"));
            }
            // A crash of the server's own code: the task reports it as failed.
            #[allow(clippy::panic)]
            Kind::ProtocolErrorJob => panic!("protocol_error_job crashes by design"),
        })
    }
}

/// MCP log levels from least to most severe.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[async_trait]
impl Tool for Fixture {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.run(ctx, args).await
    }
}

/// The suite's prompts, resources, completion and log level.
struct Surface {
    level: Arc<Mutex<LoggingLevel>>,
    subscriptions: Mutex<BTreeSet<String>>,
}

#[async_trait]
impl Extension for Surface {
    fn capabilities(&self, capabilities: &mut ServerCapabilities) {
        let extra: Result<ServerCapabilities, _> = serde_json::from_value(json!({
            "prompts": {"listChanged": false},
            "resources": {"subscribe": true, "listChanged": false},
            "completions": {},
            "logging": {}
        }));
        if let Ok(extra) = extra {
            capabilities.prompts = extra.prompts;
            capabilities.resources = extra.resources;
            capabilities.completions = extra.completions;
            capabilities.logging = extra.logging;
        }
    }

    async fn list_prompts(&self, _: RequestContext<RoleServer>) -> Result<ListPromptsResult, McpError> {
        from(json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
            {"name": "test_prompt_with_arguments", "description": "A prompt with required arguments",
             "arguments": [{"name": "arg1", "description": "First test argument", "required": true},
                           {"name": "arg2", "description": "Second test argument", "required": true}]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource",
             "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
            {"name": "test_prompt_with_image", "description": "A prompt with image content"}
        ]}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, McpError> {
        let arg = |name: &str| -> Result<String, McpError> {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| McpError::invalid_params(format!("missing argument `{name}`"), None))
        };
        let messages = match request.name.as_str() {
            "test_simple_prompt" => json!([{"role": "user", "content": {"type": "text",
                "text": "This is a simple prompt for testing."}}]),
            "test_prompt_with_arguments" => {
                let (a, b) = (arg("arg1")?, arg("arg2")?);
                json!([{"role": "user", "content": {"type": "text",
                    "text": format!("Prompt with arguments: arg1='{a}', arg2='{b}'")}}])
            }
            "test_prompt_with_embedded_resource" => json!([
                {"role": "user", "content": {"type": "resource", "resource": {"uri": arg("resourceUri")?,
                    "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]),
            "test_prompt_with_image" => json!([
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]),
            other => return Err(McpError::invalid_params(format!("Unknown prompt: {other}"), None)),
        };
        from(json!({"messages": messages}))
    }

    async fn list_resources(&self, _: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        from(json!({"resources": [
            {"uri": "test://static-text", "name": "Static Text Resource",
             "description": "A static text resource for testing", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "Static Binary Resource",
             "description": "A static binary resource (image) for testing", "mimeType": "image/png"},
            {"uri": "test://watched-resource", "name": "Watched Resource",
             "description": "A resource for subscription tests", "mimeType": "text/plain"}
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        from(json!({"resourceTemplates": [
            {"uriTemplate": "test://template/{id}/data", "name": "Resource Template",
             "description": "A resource template with parameter substitution", "mimeType": "application/json"}
        ]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, McpError> {
        let uri = request.uri.as_str();
        let content = match uri {
            "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."}),
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => json!({"uri": uri, "mimeType": "application/json",
                    "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
                None => {
                    return Err(McpError::invalid_params(
                        "Resource not found",
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        from(json!({"contents": [content]}))
    }

    async fn subscribe(&self, request: SubscribeRequestParams, _: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let prefix = request.argument.value.to_lowercase();
        let values: Vec<&str> = ["paris", "park", "party"]
            .into_iter()
            .filter(|v| v.starts_with(&prefix))
            .collect();
        from(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    async fn set_level(&self, request: SetLevelRequestParams, _: RequestContext<RoleServer>) -> Result<(), McpError> {
        *self.level.lock().unwrap_or_else(|p| p.into_inner()) = request.level;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let gateway_ref: Arc<OnceLock<Weak<Gateway>>> = Arc::new(OnceLock::new());
    let level = Arc::new(Mutex::new(LoggingLevel::Debug));
    let tools: [(&str, &str, Kind, Value); 13] = [
        (
            "test_simple_text",
            "Returns simple text content",
            Kind::SimpleText,
            no_args(),
        ),
        ("test_image_content", "Returns image content", Kind::Image, no_args()),
        ("test_audio_content", "Returns audio content", Kind::Audio, no_args()),
        (
            "test_embedded_resource",
            "Returns an embedded resource",
            Kind::EmbeddedResource,
            no_args(),
        ),
        (
            "test_multiple_content_types",
            "Returns text, image and resource",
            Kind::Mixed,
            no_args(),
        ),
        (
            "test_tool_with_logging",
            "Sends log messages while it runs",
            Kind::Logging,
            no_args(),
        ),
        ("test_error_handling", "Always fails", Kind::Error, no_args()),
        ("test_tool_with_progress", "Reports progress", Kind::Progress, no_args()),
        (
            "test_sampling",
            "Asks the client's LLM",
            Kind::Sampling,
            string_arg("prompt", "The prompt to send to the LLM"),
        ),
        (
            "test_elicitation",
            "Asks the user",
            Kind::Elicitation,
            string_arg("message", "The message to show the user"),
        ),
        (
            "test_elicitation_sep1034_defaults",
            "Elicitation with defaults",
            Kind::ElicitationDefaults,
            no_args(),
        ),
        (
            "test_elicitation_sep1330_enums",
            "Elicitation with enum schemas",
            Kind::ElicitationEnums,
            no_args(),
        ),
        (
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            Kind::JsonSchema,
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"}, "email": {"type": "string"}},
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]}, "else": {"required": ["email"]},
                "additionalProperties": false
            }),
        ),
    ];
    let mut registry = Registry::new();
    for (name, description, kind, parameters) in tools {
        registry.register(Arc::new(Fixture {
            name,
            description,
            kind,
            parameters,
            // Read-only: the default policy allows them without an ask.
            spec: ToolSpec::with_annotations(Annotations::READ_ONLY),
            gateway: gateway_ref.clone(),
            level: level.clone(),
        }));
    }
    let slow_args = json!({"type": "object", "properties": {
        "seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}}});
    let task_tools: [(&str, &str, Kind, Value, TaskSupport); 4] = [
        (
            "greet",
            "Says hello",
            Kind::Greet,
            string_arg("name", "Who to greet"),
            TaskSupport::Forbidden,
        ),
        (
            "slow_compute",
            "Sleeps, then answers",
            Kind::SlowCompute,
            slow_args,
            TaskSupport::Optional,
        ),
        (
            "failing_job",
            "Fails after a second",
            Kind::FailingJob,
            no_args(),
            TaskSupport::Required,
        ),
        (
            "protocol_error_job",
            "Crashes",
            Kind::ProtocolErrorJob,
            no_args(),
            TaskSupport::Optional,
        ),
    ];
    for (name, description, kind, parameters, task) in task_tools {
        registry.register(Arc::new(Fixture {
            name,
            description,
            kind,
            parameters,
            spec: ToolSpec {
                task,
                ..ToolSpec::with_annotations(Annotations::READ_ONLY)
            },
            gateway: gateway_ref.clone(),
            level: level.clone(),
        }));
    }
    let metrics = Arc::new(Metrics::default());
    let engine = Arc::new(Engine::new(registry, EngineConfig::default()).with_events(metrics.clone()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let session_store = store.clone();
    let sessions: toolgate_mcp::SessionFactory = Arc::new(move || SessionOptions {
        store: Some(session_store.clone()),
        workspace: std::env::temp_dir(),
        ..SessionOptions::default()
    });
    let queue = Queue::new(store.clone());
    let gateway = Gateway::new(engine, None, sessions, Via::Deny, Some(queue.clone()));
    let _ = gateway_ref.set(Arc::downgrade(&gateway));
    gateway.set_extension(Arc::new(Surface {
        level,
        subscriptions: Mutex::new(BTreeSet::new()),
    }))?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let addr = listener.local_addr()?;
    let options = HttpOptions {
        listen: addr,
        client_token: None,
        clients: Vec::new(),
        approver_token: "conformance-approver".into(),
        allowed_hosts: Vec::new(),
        allowed_origins: Vec::new(),
        max_body: 4 << 20,
    };
    options.check()?;
    let app = toolgate_mcp::http::router(
        gateway,
        store,
        queue,
        metrics,
        options,
        tokio_util::sync::CancellationToken::new(),
    );
    println!("listening http://{addr}/mcp");
    axum::serve(listener, app).await?;
    Ok(())
}
