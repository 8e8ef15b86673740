//! Identifiers and the normalised tool call.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::sync::Arc;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl Default for $name {
            fn default() -> Self {
                Self::new("")
            }
        }

        impl $name {
            /// Wraps a string as this identifier.
            pub fn new(s: impl AsRef<str>) -> Self {
                Self(Arc::from(s.as_ref()))
            }
            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }
    };
}

id_type!(
    /// The id linking a tool call to its result (the provider's, or a UUIDv7 when it gave none).
    CallId
);
id_type!(
    /// A tool's registered name (`read_file`, `github__create_issue`).
    ToolName
);
id_type!(
    /// One conversation: grants, result handles and session-scoped cache entries belong to it.
    SessionId
);
id_type!(
    /// One model answer and the batch of tool calls in it.
    TurnId
);
id_type!(
    /// Who the calls act for (memory and cache are keyed by it).
    Principal
);

impl CallId {
    /// A fresh time-ordered id, for providers that give none.
    pub fn generate() -> Self {
        Self::from(format!("call_{}", uuid::Uuid::now_v7().simple()))
    }
}

impl SessionId {
    /// A fresh time-ordered session id.
    pub fn generate() -> Self {
        Self::from(uuid::Uuid::now_v7().to_string())
    }
}

impl TurnId {
    /// A fresh time-ordered turn id.
    pub fn generate() -> Self {
        Self::from(uuid::Uuid::now_v7().to_string())
    }
}

/// What stage 1 did to make a call usable; present only on repaired calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// Each repair applied, in order (`"trailing_comma"`, `"completed_cut_off_value"`, …).
    pub actions: Vec<String>,
    /// The repair completed a value that was cut off: it may have invented arguments.
    pub completed_cut_off: bool,
    /// The arguments exactly as the model sent them.
    pub raw: String,
}

impl Repair {
    /// The repair action of a call read from an OpenAI-compatible answer's text because its
    /// `tool_calls` was empty (the server's tool parser missed it).
    pub const PARSED_FROM_CONTENT: &'static str = "parsed_from_content";

    /// Why the repaired call may not be what the model meant, when it may not: a value cut off
    /// and completed, or a call read from prose. Such a call is asked (unless read-only).
    pub fn doubt(&self) -> Option<&'static str> {
        if self.completed_cut_off {
            Some("its arguments were cut off and completed by repair, so they may not be what the model meant")
        } else if self.actions.iter().any(|a| a == Self::PARSED_FROM_CONTENT) {
            Some("it was read from the answer's text, not its tool_calls, so the model may not have meant it as a call")
        } else {
            None
        }
    }
}

/// A tool call after stage 1: a known shape whatever the provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Links the call to its result.
    pub id: CallId,
    /// The registered tool name (provider-safe names are mapped back).
    pub name: ToolName,
    /// Always a JSON object.
    pub arguments: Map<String, Value>,
    /// Set when stage 1 had to repair the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

impl ToolCall {
    /// A call with well-formed arguments.
    pub fn new(id: impl Into<CallId>, name: impl Into<ToolName>, arguments: Map<String, Value>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            repair: None,
        }
    }

    /// The arguments as a JSON value.
    pub fn arguments_value(&self) -> Value {
        Value::Object(self.arguments.clone())
    }
}
