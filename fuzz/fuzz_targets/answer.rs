//! Every provider's answer reader and the validator on arbitrary JSON: never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::validate::{CompiledSchema, ValidateOptions};
use toolgate_core::{Answer, Format};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for format in [Format::Openai, Format::Responses, Format::Anthropic, Format::Gemini, Format::Text, Format::Mcp] {
        let _ = Answer::parse(format, &value);
    }
    // The value as a schema and as an instance of a fixed schema.
    if let Ok(compiled) = CompiledSchema::compile(&value) {
        let _ = compiled.check(&mut serde_json::json!({"a": "1"}), ValidateOptions::default());
    }
    let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false});
    if let Ok(compiled) = CompiledSchema::compile(&schema) {
        let _ = compiled.check(&mut value.clone(), ValidateOptions::default());
    }
});
