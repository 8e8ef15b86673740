//! `memory_read` and `memory_write`: durable notes per principal, kept in the session's `Store`
//! (SQLite or PostgreSQL for the CLI and gateway, so notes outlive the process).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolgate_core::ToolError;
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec, TypedTool};

/// Limits on notes.
#[derive(Clone, Copy, Debug)]
pub struct MemoryLimits {
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Longest value, in bytes.
    pub max_value_bytes: usize,
    /// Keys one principal may hold.
    pub max_keys: usize,
    /// Keys one listing returns at most.
    pub max_listed: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            max_key_bytes: 256,
            max_value_bytes: 64 << 10,
            max_keys: 1_000,
            max_listed: 200,
        }
    }
}

/// Arguments of `memory_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryReadArgs {
    /// The key to read. Omit it to list keys instead.
    pub key: Option<String>,
    /// List the keys starting with this prefix (all keys when empty). Used when `key` is absent.
    pub prefix: Option<String>,
}

/// Arguments of `memory_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryWriteArgs {
    /// The key, e.g. `project/conventions`.
    pub key: String,
    /// The note; it replaces what the key held.
    pub value: String,
}

/// Reads one note, or lists keys by prefix.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryRead {
    /// Limits.
    pub limits: MemoryLimits,
}

/// Writes one note.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryWrite {
    /// Limits.
    pub limits: MemoryLimits,
}

fn check_key(key: &str, limits: &MemoryLimits) -> Result<(), ToolError> {
    if key.is_empty() {
        return Err(ToolError::InvalidArguments("the key is empty".into()));
    }
    if key.len() > limits.max_key_bytes {
        return Err(ToolError::InvalidArguments(format!(
            "the key is {} bytes; keys are at most {}",
            key.len(),
            limits.max_key_bytes
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(ToolError::InvalidArguments("the key holds control characters".into()));
    }
    Ok(())
}

fn store_failed(e: toolgate_core::store::StoreError) -> ToolError {
    ToolError::retryable(e.to_string())
}

#[async_trait]
impl TypedTool for MemoryRead {
    type Args = MemoryReadArgs;
    fn name(&self) -> &str {
        "memory_read"
    }
    fn description(&self) -> &str {
        "Read a durable note by key, or list the keys of your notes (optionally by prefix). Notes persist across sessions."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, args: MemoryReadArgs) -> Result<ToolOutput, ToolError> {
        if let Some(key) = args.key {
            check_key(&key, &self.limits)?;
            let value = ctx.store.memory_get(&ctx.principal, &key).await.map_err(store_failed)?;
            return Ok(ToolOutput::json(match value {
                Some(value) => json!({"key": key, "value": value}),
                None => json!({"key": key, "found": false}),
            }));
        }
        let prefix = args.prefix.unwrap_or_default();
        let keys = ctx
            .store
            .memory_list(&ctx.principal, &prefix)
            .await
            .map_err(store_failed)?;
        let total = keys.len();
        let listed: Vec<String> = keys.into_iter().take(self.limits.max_listed).collect();
        Ok(ToolOutput::json(json!({
            "prefix": prefix,
            "keys": listed,
            "total": total,
            "truncated": total > self.limits.max_listed,
        })))
    }
}

#[async_trait]
impl TypedTool for MemoryWrite {
    type Args = MemoryWriteArgs;
    fn name(&self) -> &str {
        "memory_write"
    }
    fn description(&self) -> &str {
        "Write a durable note under a key (replacing what it held). Notes persist across sessions; keep them short."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        })
    }
    async fn run(&self, ctx: &ToolContext, args: MemoryWriteArgs) -> Result<ToolOutput, ToolError> {
        check_key(&args.key, &self.limits)?;
        if args.value.len() > self.limits.max_value_bytes {
            return Err(ToolError::InvalidArguments(format!(
                "the value is {} bytes; notes are at most {}",
                args.value.len(),
                self.limits.max_value_bytes
            )));
        }
        let existing = ctx
            .store
            .memory_get(&ctx.principal, &args.key)
            .await
            .map_err(store_failed)?;
        if existing.is_none() {
            let held = ctx
                .store
                .memory_list(&ctx.principal, "")
                .await
                .map_err(store_failed)?
                .len();
            if held >= self.limits.max_keys {
                return Err(ToolError::failed(format!(
                    "you already hold {held} notes, the most allowed; overwrite one instead"
                )));
            }
        }
        ctx.store
            .memory_put(&ctx.principal, &args.key, &args.value)
            .await
            .map_err(store_failed)?;
        Ok(ToolOutput::json(json!({
            "key": args.key,
            "written": args.value.len(),
            "replaced": existing.is_some(),
        })))
    }
}
