//! Tool calls written in the raw text of open-weight models, read through `Answer::parse` and run
//! by the engine: each family's format as its chat template writes it, several calls in order,
//! reasoning kept apart, values typed by the tool's schema, a broken marker turned into
//! `malformed_call` (never a final answer), prose that only looks like a call left as prose, and
//! the OpenAI-compatible fallback (a call left in `content`) marked repaired and asked.

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::events::Event;
use toolgate_core::permit::{DenyAll, Policy};
use toolgate_core::tool::ToolOutput;
use toolgate_core::{Answer, Dialect, EngineConfig, Format, TurnOptions, TurnStatus};

/// Tools that answer with the arguments they were given, so a test sees what the engine ran.
fn tools() -> Vec<Arc<dyn toolgate_core::Tool>> {
    let echo_args = |_, args: Value| async move { Ok(ToolOutput::json(args)) };
    let weather = FnTool::new("get_weather", read_only(), echo_args).schema(json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "when": {"type": ["string", "null"]}
        },
        "required": ["city"]
    }));
    let search = FnTool::new("search", read_only(), echo_args).schema(json!({
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "number"},
            "filters": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["query"]
    }));
    let write = FnTool::new("write_file", writer(), echo_args).schema(json!({
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]
    }));
    vec![Arc::new(weather), Arc::new(search), Arc::new(write)]
}

struct Ran {
    /// (tool name, arguments it received) for each call that ran, in order.
    calls: Vec<(String, Value)>,
    /// Error types of the calls that did not run.
    errors: Vec<String>,
    status: TurnStatus,
    answer: Answer,
}

async fn run_in(format: Format, body: Value, dialect: Dialect) -> Ran {
    let h = harness(tools(), EngineConfig::default());
    let answer = Answer::parse_with(format, &body, dialect).expect("a text answer always parses");
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    let mut calls = Vec::new();
    let mut errors = Vec::new();
    for o in &turn.outcomes {
        let entry = o.entry().expect("every call has a result");
        if entry.is_error {
            errors.push(error_type(o).unwrap_or_default());
        } else {
            calls.push((entry.name.clone(), entry.content.clone()));
        }
    }
    Ran {
        calls,
        errors,
        status: turn.status,
        answer,
    }
}

async fn run(text: &str) -> Ran {
    run_in(Format::Text, json!(text), Dialect::Auto).await
}

fn calls(list: &[(&str, Value)]) -> Vec<(String, Value)> {
    list.iter().map(|(n, v)| ((*n).to_owned(), v.clone())).collect()
}

/// What a case is, its family, the text, and the calls (name, arguments) it holds.
type Case = (&'static str, Dialect, String, Vec<(String, Value)>);

/// Each family's format, as its chat template writes it, with the calls it holds.
fn families() -> Vec<Case> {
    vec![
        (
            "hermes (Qwen 2.5 / 3), two calls, prose before, a closing tag inside a string",
            Dialect::Hermes,
            "Let me look both up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"what does </tool_call> mean\", \"limit\": 1e2}}\n</tool_call>".into(),
            calls(&[
                ("get_weather", json!({"city": "Zürich", "days": 3})),
                ("search", json!({"query": "what does </tool_call> mean", "limit": 100.0})),
            ]),
        ),
        (
            "hermes without newlines",
            Dialect::Hermes,
            "<tool_call>{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"filters\":{\"lang\":{\"in\":[\"en\",\"de\"]}},\"limit\":-2.5E-3}}</tool_call>".into(),
            calls(&[("search", json!({"query": "x", "filters": {"lang": {"in": ["en", "de"]}}, "limit": -0.0025}))]),
        ),
        (
            "qwen3-coder XML, values typed by the schema",
            Dialect::Qwen3Coder,
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n5\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=when>\nnull\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n42\n</parameter>\n<parameter=filters>\n{\"site\": \"docs.rs\"}\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n</function>\n</tool_call>".into(),
            calls(&[
                ("get_weather", json!({"city": "São Paulo", "days": 5, "metric": true, "when": null})),
                ("search", json!({"query": "42", "filters": {"site": "docs.rs"}, "tags": ["a", "b"]})),
            ]),
        ),
        (
            "deepseek V3 (fenced JSON inside the call tokens)",
            Dialect::Deepseek,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n{\"path\": \"a.md\", \"content\": \"```rust\\nfn main() {}\\n```\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>".into(),
            calls(&[
                ("get_weather", json!({"city": "Paris"})),
                ("write_file", json!({"path": "a.md", "content": "```rust\nfn main() {}\n```"})),
            ]),
        ),
        (
            "deepseek V3.1 (name, separator, JSON)",
            Dialect::Deepseek,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"東京\", \"days\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>".into(),
            calls(&[("get_weather", json!({"city": "東京", "days": 2}))]),
        ),
        (
            "deepseek V3.2 DSML",
            Dialect::Deepseek,
            "I will check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">4</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>".into(),
            calls(&[("get_weather", json!({"city": "Paris", "days": 4}))]),
        ),
        (
            "llama 3.x python_tag, two calls separated by ';'",
            Dialect::Llama,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"search\", \"parameters\": {\"query\": \"fjords\"}}<|eom_id|>".into(),
            calls(&[
                ("get_weather", json!({"city": "Oslo"})),
                ("search", json!({"query": "fjords"})),
            ]),
        ),
        (
            "llama 3.x bare JSON",
            Dialect::Llama,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\", \"when\": null}}".into(),
            calls(&[("get_weather", json!({"city": "Lima", "when": null}))]),
        ),
        (
            "llama 4 pythonic list",
            Dialect::Llama,
            "[get_weather(city=\"Pune\", days=3, metric=True), search(query='rust \\'async\\'', filters={\"lang\": \"en\"}, limit=1.5e1, tags=[\"x\"])]".into(),
            calls(&[
                ("get_weather", json!({"city": "Pune", "days": 3, "metric": true})),
                ("search", json!({"query": "rust 'async'", "filters": {"lang": "en"}, "limit": 15.0, "tags": ["x"]})),
            ]),
        ),
        (
            "llama 4 pythonic list after a short preface",
            Dialect::Llama,
            "Sure, checking the weather.\n\n[get_weather(city=\"Rome\")]".into(),
            calls(&[("get_weather", json!({"city": "Rome"}))]),
        ),
        (
            "hermes, two objects in one block",
            Dialect::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n{\"name\": \"search\", \"arguments\": {\"query\": \"rome\"}}\n</tool_call>".into(),
            calls(&[
                ("get_weather", json!({"city": "Rome"})),
                ("search", json!({"query": "rome"})),
            ]),
        ),
        (
            "mistral v3",
            Dialect::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}, {\"name\": \"search\", \"arguments\": {\"query\": \"[TOOL_CALLS]\"}, \"id\": \"def456ghi\"}]".into(),
            calls(&[
                ("get_weather", json!({"city": "Paris"})),
                ("search", json!({"query": "[TOOL_CALLS]"})),
            ]),
        ),
        (
            "mistral v11 with and without CALL_ID",
            Dialect::Mistral,
            "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"query\": \"[ARGS] is a token\"}".into(),
            calls(&[
                ("get_weather", json!({"city": "Paris"})),
                ("search", json!({"query": "[ARGS] is a token"})),
            ]),
        ),
        (
            "gpt-oss harmony, recipient in the channel, analysis before",
            Dialect::GptOss,
            "<|channel|>analysis<|message|>The user wants the weather; call get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>".into(),
            calls(&[("get_weather", json!({"city": "Paris"}))]),
        ),
        (
            "gpt-oss harmony, recipient in the role header",
            Dialect::GptOss,
            "<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{\"query\": \"<|call|> in a string\"}<|call|>".into(),
            calls(&[("search", json!({"query": "<|call|> in a string"}))]),
        ),
        (
            "kimi k2, two calls",
            Dialect::Kimi,
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{\"query\": \"kimi\"}<|tool_call_end|><|tool_calls_section_end|>".into(),
            calls(&[
                ("get_weather", json!({"city": "Paris"})),
                ("search", json!({"query": "kimi"})),
            ]),
        ),
        (
            "glm 4.5 / 4.6 (one pair per line), typed by the schema",
            Dialect::Glm,
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>".into(),
            calls(&[("get_weather", json!({"city": "Paris", "days": 3}))]),
        ),
        (
            "glm 4.7 (no newlines)",
            Dialect::Glm,
            "<tool_call>search<arg_key>query</arg_key><arg_value>a <b>bold</b> query</arg_value><arg_key>limit</arg_key><arg_value>7</arg_value></tool_call>".into(),
            calls(&[("search", json!({"query": "a <b>bold</b> query", "limit": 7}))]),
        ),
        (
            "gemma tool_code block",
            Dialect::Gemma,
            "```tool_code\nget_weather(city=\"Paris\", days=2)\n```".into(),
            calls(&[("get_weather", json!({"city": "Paris", "days": 2}))]),
        ),
        (
            "functiongemma",
            Dialect::Gemma,
            "<start_function_call>call:get_weather{city:<escape>New York, NY<escape>,days:3}<end_function_call>".into(),
            calls(&[("get_weather", json!({"city": "New York, NY", "days": 3}))]),
        ),
        (
            "toolgate's own object in a fence, a triple backtick inside a string",
            Dialect::Toolgate,
            "I'll write it.\n```json\n{\"tool\": \"write_file\", \"parameters\": {\"path\": \"a.md\", \"content\": \"```sh\\nls\\n```\"}}\n```".into(),
            calls(&[("write_file", json!({"path": "a.md", "content": "```sh\nls\n```"}))]),
        ),
    ]
}

#[tokio::test]
async fn every_family_runs_its_calls_in_order_found_without_and_with_a_dialect() {
    for (what, dialect, text, expected) in families() {
        for asked in [Dialect::Auto, dialect] {
            let ran = run_in(Format::Text, json!(text), asked).await;
            assert_eq!(ran.errors, Vec::<String>::new(), "{what} ({asked:?})");
            assert_eq!(ran.calls, expected, "{what} ({asked:?})");
            assert_eq!(ran.status, TurnStatus::Continue, "{what} ({asked:?})");
            if asked == Dialect::Auto && dialect != Dialect::Toolgate {
                // Llama's bare JSON is the same text as the generic bare call.
                let found = ran.answer.dialect.expect("the family is named");
                assert!(
                    found == dialect || found == Dialect::Toolgate,
                    "{what}: found {found:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn reasoning_is_kept_apart_and_never_parsed_for_calls() {
    let ran = run(
        "<think>Maybe <tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\": \"x\", \"content\": \"\"}}</tool_call>? No, just look.</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
    )
    .await;
    assert_eq!(ran.calls, calls(&[("get_weather", json!({"city": "Rome"}))]));
    let reasoning = ran.answer.reasoning.expect("reasoning separated");
    assert!(reasoning.contains("Maybe <tool_call>"), "{reasoning}");
    assert_eq!(ran.answer.text.as_deref(), Some("Checking."));

    // A reasoning model whose template opens the block itself: only the closing tag is written.
    let ran = run("I should call write_file.</think>No call needed: it is sunny.").await;
    assert_eq!(ran.status, TurnStatus::FinalAnswer);
    assert!(ran.calls.is_empty());

    // gpt-oss: the analysis channel is reasoning, the final channel the content.
    let ran = run(
        "<|channel|>analysis<|message|>to=functions.write_file would be wrong<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
    )
    .await;
    assert_eq!(ran.status, TurnStatus::FinalAnswer);
    assert_eq!(ran.answer.text.as_deref(), Some("It is sunny."));
}

#[tokio::test]
async fn a_marker_that_cannot_be_read_is_a_malformed_call_not_a_final_answer() {
    // Arguments the lenient reader completes are read as such (`{"city": }` becomes a null city,
    // refused by the schema): an error the model can act on, never a final answer.
    let ran = run("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>").await;
    assert_eq!(
        (ran.status, ran.errors),
        (TurnStatus::Continue, vec!["invalid_arguments".to_owned()])
    );
    let broken = [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Pa",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\"",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"",
        "<start_function_call>call:get_weather{city:<escape>Paris",
    ];
    for text in broken {
        let ran = run(text).await;
        assert_eq!(ran.status, TurnStatus::Continue, "{text}");
        assert!(ran.calls.is_empty(), "{text}: ran {:?}", ran.calls);
        assert_eq!(ran.errors, ["malformed_call"], "{text}");
    }
}

#[tokio::test]
async fn prose_that_only_looks_like_a_call_is_a_final_answer() {
    let prose = [
        "The weather in Paris is sunny, 21 °C.",
        "Call get_weather(city=\"Paris\") to see it yourself.",
        "Qwen writes its calls as `<tool_call>{\"name\": …}</tool_call>`.",
        "An example:\n```\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n```\nThat is all.",
        "Here is the record: {\"name\": \"Alice\", \"age\": 30}",
        "{\"answer\": 42}",
        "[1, 2, 3]",
        "[\"get_weather\", \"search\"]",
        "Use `[TOOL_CALLS]` before the JSON list.",
        "f(x) = x^2 for x in [0, 1]; g(y=2) is constant.",
        "{not json at all",
        "[f(a=1) is a list in Python",
        "",
    ];
    for text in prose {
        let ran = run(text).await;
        assert_eq!(
            ran.status,
            TurnStatus::FinalAnswer,
            "{text:?}: {:?} {:?}",
            ran.calls,
            ran.errors
        );
        assert!(ran.answer.calls.is_empty(), "{text:?}");
    }
}

#[tokio::test]
async fn a_named_dialect_reads_only_its_own_markers() {
    // Named Mistral, a Hermes tag is text (the model would not write it), but bare JSON is still read.
    let hermes = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    let ran = run_in(Format::Text, json!(hermes), Dialect::Mistral).await;
    assert_eq!(ran.status, TurnStatus::FinalAnswer);
    let ran = run_in(Format::Text, json!(hermes), Dialect::Hermes).await;
    assert_eq!(ran.calls, calls(&[("get_weather", json!({"city": "Rome"}))]));
}

#[tokio::test]
async fn an_openai_answer_with_its_call_left_in_content_is_run_marked_repaired_and_asked() {
    let content = "I'll save it.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"notes.md\", \"content\": \"hi\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}\n</tool_call>";
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": content, "tool_calls": []}}]});
    // Under --yolo, with nobody to approve: the read-only call runs; the write, read from prose, is
    // asked (and refused, nobody can approve), though yolo would run the same call from tool_calls.
    let mut h = harness_with(
        tools(),
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy {
            yolo: true,
            ..Policy::default()
        },
    );
    let answer = Answer::parse(Format::Openai, &body).unwrap();
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    assert_eq!(turn.status, TurnStatus::Continue);
    assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("permission_denied"));
    let why = turn.outcomes[0].entry().unwrap().content["error"]["message"].to_string();
    assert!(why.contains("read from the answer's text"), "{why}");
    assert_eq!(turn.outcomes[1].entry().unwrap().content, json!({"city": "Bern"}));
    let events = drain(&mut h.events);
    let verdicts: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Verdict { decision, source, .. } => Some((*decision, *source)),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts[0], ("deny", "non_interactive_deny"));
    let repairs: Vec<Vec<String>> = events
        .iter()
        .filter_map(|e| match e {
            Event::CallStarted { repair: Some(r), .. } => Some(r.actions.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(repairs.len(), 2, "{events:?}");
    assert!(repairs.iter().all(|r| r[0] == "parsed_from_content"), "{repairs:?}");
    // The assistant message echoed into the history carries the calls as tool_calls (so the
    // server sees results linked to calls) and only the prose as content.
    let msg = &turn.messages[0];
    assert_eq!(msg["content"], "I'll save it.");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "write_file");
    assert_eq!(msg["tool_calls"][1]["function"]["name"], "get_weather");
    assert_eq!(turn.messages[2]["tool_call_id"], msg["tool_calls"][1]["id"]);

    // The same write in tool_calls runs under yolo without an ask.
    let mut h = harness_with(
        tools(),
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy {
            yolo: true,
            ..Policy::default()
        },
    );
    let direct = openai_answer(&[("c1", "write_file", "{\"path\": \"notes.md\", \"content\": \"hi\"}")]);
    let turn = h.engine.run_turn(&h.session, &direct, TurnOptions::default()).await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content["path"], "notes.md");
    drain(&mut h.events);

    // Content with no call stays a final answer.
    let plain = json!({"role": "assistant", "content": "All done.", "tool_calls": []});
    let answer = Answer::parse(Format::Openai, &plain).unwrap();
    assert!(answer.calls.is_empty());
    assert_eq!(answer.text.as_deref(), Some("All done."));
}

#[tokio::test]
async fn a_bare_call_object_is_detected_as_text_and_run() {
    let body = json!({"name": "get_weather", "arguments": {"city": "Kyiv"}});
    assert_eq!(Format::detect(&body), Format::Text);
    let ran = run_in(Format::detect(&body), body, Dialect::Auto).await;
    assert_eq!(ran.calls, calls(&[("get_weather", json!({"city": "Kyiv"}))]));
    // An assistant message is still OpenAI.
    assert_eq!(
        Format::detect(&json!({"role": "assistant", "content": "hi", "name": "bot", "arguments": 1})),
        Format::Openai
    );
}

#[tokio::test]
async fn a_json_object_that_is_not_a_call_is_a_final_answer_in_text_format() {
    let ran = run_in(Format::Text, json!({"answer": 42}), Dialect::Auto).await;
    assert_eq!(ran.status, TurnStatus::FinalAnswer);
    assert_eq!(ran.answer.text.as_deref(), Some("{\"answer\":42}"));
}

/// Documentation is the prose most like a model explaining tool calls: every marker of every
/// family, quoted in code spans and fences, JSON examples, pythonic examples. Read as answers —
/// whole, and paragraph by paragraph — it holds no call.
#[test]
fn the_documentation_read_as_answers_invents_no_call() {
    for (name, doc) in [
        ("README.md", include_str!("../../../README.md")),
        ("ARCHITECTURE.md", include_str!("../../../ARCHITECTURE.md")),
    ] {
        let mut texts = vec![doc.to_owned()];
        texts.extend(split_outside_fences(doc));
        for text in &texts {
            let parsed = toolgate_core::formats::dialect::parse(text, Dialect::Auto);
            assert!(parsed.calls.is_empty(), "{name}: {:?} from\n{text}", parsed.calls);
        }
    }
}

/// Paragraphs, a fenced block kept whole with its fences.
fn split_outside_fences(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_fence = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if line.trim().is_empty() && !in_fence {
            if !current.trim().is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    out.push(current);
    out
}
