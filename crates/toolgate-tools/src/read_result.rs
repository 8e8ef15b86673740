//! `read_result`: pages through a result that was truncated, by the handle its marker names.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::ToolError;
use toolgate_core::result::escaped_len;
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec, TypedTool};

/// Largest page, in bytes of escaped JSON text, so a page always fits the default budget.
pub const MAX_PAGE: u64 = 48 * 1024;

/// Arguments of `read_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadResultArgs {
    /// The handle named in a truncation marker (`read_result handle=r1`).
    pub handle: String,
    /// A JSON pointer selecting part of the result (`/stdout`, `/items/3`). Default: all of it.
    #[serde(default)]
    pub pointer: Option<String>,
    /// Byte offset into the selected text. Default 0.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Bytes to return, at most 49152. Default 16384.
    #[serde(default)]
    #[schemars(range(min = 1, max = 49152))]
    pub length: Option<u64>,
}

/// Pages through full results kept for this session.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadResult;

#[async_trait]
impl TypedTool for ReadResult {
    type Args = ReadResultArgs;
    fn name(&self) -> &str {
        "read_result"
    }
    fn description(&self) -> &str {
        "Read more of a tool result that was truncated: pass the handle from the truncation marker, optionally a JSON pointer, and a byte offset."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, args: ReadResultArgs) -> Result<ToolOutput, ToolError> {
        let full = ctx.store.get(&ctx.session_id, &args.handle).await.ok_or_else(|| {
            ToolError::failed(format!(
                "there is no result under handle {:?} in this session (handles belong to the session that produced them and old ones are evicted)",
                args.handle
            ))
        })?;
        let selected = match args.pointer.as_deref() {
            None | Some("") => full.as_ref(),
            Some(p) => full
                .pointer(p)
                .ok_or_else(|| ToolError::failed(format!("the pointer {p:?} selects nothing in that result")))?,
        };
        let text = match selected {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let total = text.len();
        let mut start = (args.offset.unwrap_or(0) as usize).min(total);
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        // A page is measured as it will be sent (JSON-escaped), so it always fits the budget.
        let length = args.length.unwrap_or(16 * 1024).clamp(1, MAX_PAGE) as usize;
        let mut end = start;
        let mut sent = 0;
        for c in text[start..].chars() {
            let mut buf = [0u8; 4];
            let width = escaped_len(c.encode_utf8(&mut buf));
            if sent + width > length {
                break;
            }
            sent += width;
            end += c.len_utf8();
        }
        Ok(ToolOutput::json(json!({
            "handle": args.handle,
            "offset": start,
            "length": end - start,
            "total_bytes": total,
            "next_offset": (end < total).then_some(end),
            "content": &text[start..end],
        })))
    }
}
