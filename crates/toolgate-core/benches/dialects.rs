//! Stage 1 on the raw text of open-weight models: one typical answer (< 2 KB: a sentence of
//! prose, a short reasoning block, two calls, one of them a file write of ~700 bytes) per family,
//! read with the family found from the text and with it named; a 2 KB prose answer with no call
//! (the cost every final answer pays); and an OpenAI-format answer whose content holds the call.
//!
//! Run: `cargo bench -p toolgate-core --bench dialects`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;
use toolgate_core::formats::dialect::parse;
use toolgate_core::{Answer, Dialect, Format};

/// The file a typical write carries (~700 bytes of Rust, quotes and newlines to escape).
fn file() -> String {
    let mut s = String::new();
    for i in 0..14 {
        s.push_str(&format!("    let v{i} = map.get(\"key{i}\").copied().unwrap_or(0);\n"));
    }
    s
}

fn answers() -> Vec<(&'static str, Dialect, String)> {
    let file = file();
    let file_json = Value::String(file.clone()).to_string();
    let write = json!({"path": "src/lib.rs", "content": file}).to_string();
    let read = json!({"path": "src/main.rs", "offset": 10, "limit": 40}).to_string();
    let think = "<think>The user wants the helper added; read main.rs first, then write lib.rs.</think>\n";
    let prose = "I'll read the entry point and write the helper.\n";
    vec![
        (
            "hermes",
            Dialect::Hermes,
            format!(
                "{think}{prose}<tool_call>\n{{\"name\": \"read_file\", \"arguments\": {read}}}\n</tool_call>\n<tool_call>\n{{\"name\": \"write_file\", \"arguments\": {write}}}\n</tool_call>"
            ),
        ),
        (
            "qwen3-coder",
            Dialect::Qwen3Coder,
            format!(
                "{prose}<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.rs\n</parameter>\n<parameter=offset>\n10\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/lib.rs\n</parameter>\n<parameter=content>\n{file}</parameter>\n</function>\n</tool_call>"
            ),
        ),
        (
            "deepseek-v3.1",
            Dialect::Deepseek,
            format!(
                "{prose}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{read}<｜tool▁call▁end｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{write}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            ),
        ),
        (
            "deepseek-v3.2-dsml",
            Dialect::Deepseek,
            format!(
                "{prose}<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"read_file\">\n<｜DSML｜parameter name=\"path\" string=\"true\">src/main.rs</｜DSML｜parameter>\n<｜DSML｜parameter name=\"offset\" string=\"false\">10</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"write_file\">\n<｜DSML｜parameter name=\"path\" string=\"true\">src/lib.rs</｜DSML｜parameter>\n<｜DSML｜parameter name=\"content\" string=\"true\">{file}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"
            ),
        ),
        (
            "llama3-python-tag",
            Dialect::Llama,
            format!(
                "<|python_tag|>{{\"name\": \"read_file\", \"parameters\": {read}}}; {{\"name\": \"write_file\", \"parameters\": {write}}}<|eom_id|>"
            ),
        ),
        (
            "llama4-pythonic",
            Dialect::Llama,
            format!(
                "[read_file(path=\"src/main.rs\", offset=10, limit=40), write_file(path=\"src/lib.rs\", content={file_json})]"
            ),
        ),
        (
            "mistral-v11",
            Dialect::Mistral,
            format!("[TOOL_CALLS]read_file[ARGS]{read}[TOOL_CALLS]write_file[ARGS]{write}"),
        ),
        (
            "gpt-oss",
            Dialect::GptOss,
            format!(
                "<|channel|>analysis<|message|>Read main.rs first, then write lib.rs.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{read}<|call|><|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{write}<|call|>"
            ),
        ),
        (
            "kimi-k2",
            Dialect::Kimi,
            format!(
                "{prose}<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>{read}<|tool_call_end|><|tool_call_begin|>functions.write_file:1<|tool_call_argument_begin|>{write}<|tool_call_end|><|tool_calls_section_end|>"
            ),
        ),
        (
            "glm",
            Dialect::Glm,
            format!(
                "{prose}<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>src/main.rs</arg_value>\n<arg_key>offset</arg_key>\n<arg_value>10</arg_value>\n</tool_call>\n<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>src/lib.rs</arg_value>\n<arg_key>content</arg_key>\n<arg_value>{file}</arg_value>\n</tool_call>"
            ),
        ),
        (
            "gemma-tool-code",
            Dialect::Gemma,
            format!(
                "{prose}```tool_code\nread_file(path=\"src/main.rs\", offset=10)\nwrite_file(path=\"src/lib.rs\", content={file_json})\n```"
            ),
        ),
        (
            "toolgate",
            Dialect::Toolgate,
            format!("{prose}```json\n{{\"tool\": \"write_file\", \"parameters\": {write}}}\n```"),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dialect_parse");
    for (name, dialect, text) in answers() {
        assert!(text.len() < 2048, "{name}: {} bytes", text.len());
        let found = parse(&text, Dialect::Auto);
        assert!(
            !found.calls.is_empty() && found.calls.iter().all(|c| c.name.is_some()),
            "{name} parses: {found:?}"
        );
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("auto", name), &text, |b, t| {
            b.iter(|| parse(black_box(t), Dialect::Auto))
        });
        g.bench_with_input(BenchmarkId::new("named", name), &text, |b, t| {
            b.iter(|| parse(black_box(t), dialect))
        });
    }
    // A final answer: 2 KB of prose with code spans, brackets and braces, and no call.
    let prose =
        "The function `parse(text)` returns {calls, content}; see [the docs](https://example.org) and f(x) = [1, 2].\n"
            .repeat(20);
    assert!(parse(&prose, Dialect::Auto).calls.is_empty());
    g.throughput(Throughput::Bytes(prose.len() as u64));
    g.bench_function("auto/prose-2k-no-call", |b| {
        b.iter(|| parse(black_box(&prose), Dialect::Auto))
    });
    g.finish();

    let mut g = c.benchmark_group("answer_parse");
    let hermes = answers().swap_remove(0).2;
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": hermes, "tool_calls": []}}]});
    g.bench_function("openai/call-in-content", |b| {
        b.iter(|| Answer::parse(Format::Openai, black_box(&body)))
    });
    let text = Value::String(hermes);
    g.bench_function("text/hermes", |b| {
        b.iter(|| Answer::parse(Format::Text, black_box(&text)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
