//! Property tests: random bytes and random JSON fed to the parser, the validator, the truncator
//! and the whole engine never panic, and their invariants hold.

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_core::formats::RawArguments;
use toolgate_core::parse::{parse_arguments, repair_json};
use toolgate_core::result::{MIN_BUDGET, truncate};
use toolgate_core::validate::{CompiledSchema, ValidateOptions};
use toolgate_core::{Answer, Dialect, EngineConfig, Format, TurnOptions};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("call_1"),
            Just("read_file"),
            Just("function"),
            Just("tool_use"),
            Just("{\"a\":"),
            Just("")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        "[a-z_]{1,8}",
                        Just("tool_calls".to_owned()),
                        Just("function".to_owned()),
                        Just("arguments".to_owned()),
                        Just("name".to_owned()),
                        Just("content".to_owned()),
                        Just("parts".to_owned()),
                        Just("functionCall".to_owned()),
                        Just("output".to_owned()),
                        Just("choices".to_owned()),
                        Just("message".to_owned()),
                        Just("type".to_owned()),
                        Just("input".to_owned()),
                        Just("tool".to_owned()),
                    ],
                    inner
                ),
                0..8
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arguments_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300), cut in any::<bool>()) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Ok((_, Some(r))) = parse_arguments(&RawArguments::Text(text.clone()), cut) {
            prop_assert_eq!(&r.raw, &text);
        }
        let _ = repair_json(&text);
    }

    #[test]
    fn arguments_parser_never_panics_on_json_ish_text(value in arb_json(), chop in 0usize..200) {
        let text = value.to_string();
        let mut end = chop.min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        let _ = parse_arguments(&RawArguments::Text(text[..end].to_owned()), false);
        let parsed = parse_arguments(&RawArguments::Json(value.clone()), false);
        if let Value::Object(o) = &value {
            prop_assert_eq!(parsed.unwrap().0, o.clone());
        }
    }

    #[test]
    fn every_format_reader_never_panics(value in arb_json()) {
        for format in [Format::Openai, Format::Responses, Format::Anthropic, Format::Gemini, Format::Text, Format::Mcp] {
            let _ = Answer::parse(format, &value);
        }
        let _ = Format::detect(&value);
    }

    #[test]
    fn validator_never_panics(value in arb_json()) {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "b": {"type": "boolean"},
                "s": {"type": "string", "pattern": "^a", "enum": ["a", "ab"]},
                "arr": {"type": "array", "items": {"type": "number"}},
                "o": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}, "additionalProperties": false}
            },
            "required": ["n"],
            "additionalProperties": false,
            "dependentRequired": {"b": ["s"]}
        });
        let compiled = CompiledSchema::compile(&schema).unwrap();
        let mut v = value.clone();
        if compiled.check(&mut v, ValidateOptions::default()).is_ok() {
            prop_assert!(compiled.is_valid(&v));
        }
        let mut strict = value;
        let _ = compiled.check(&mut strict, ValidateOptions { coerce: false, drop_unknown: false });
    }

    #[test]
    fn truncation_never_exceeds_the_budget(value in arb_json(), budget in 0usize..2000, pad in 0usize..5000) {
        let value = json!({"v": value, "pad": "p".repeat(pad), "tail": [1, 2, 3]});
        let t = truncate(&value, budget, Some("r9"));
        let size = t.value.to_string().len();
        prop_assert!(size <= budget.max(MIN_BUDGET), "{} > {}", size, budget);
        if !t.truncated {
            prop_assert_eq!(t.value, value);
        } else if t.value.get("_truncated_json").is_none() {
            // Structure kept: every key survives.
            prop_assert!(t.value.get("v").is_some() && t.value.get("pad").is_some() && t.value.get("tail").is_some());
        }
    }
}

#[test]
fn the_engine_never_panics_and_answers_every_call_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    });
    let h = harness(
        vec![echo("read_file", read_only()), echo("write_file", writer())],
        EngineConfig::default(),
    );
    runner
        .run(&arb_json(), |value| {
            for format in [
                Format::Openai,
                Format::Anthropic,
                Format::Gemini,
                Format::Responses,
                Format::Text,
            ] {
                if let Ok(answer) = Answer::parse(format, &value) {
                    let calls = answer.calls.len();
                    let turn = runtime.block_on(h.engine.run_turn(&h.session, &answer, TurnOptions::default()));
                    if turn.status != toolgate_core::TurnStatus::Restart {
                        prop_assert_eq!(turn.results().count(), calls);
                    }
                    h.session.resume();
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Text whose escaped size is far from its length: newlines, quotes, backslashes, control
/// characters and multi-byte characters, in runs.
fn escape_heavy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\n".to_owned()),
        Just("\"quoted\"".to_owned()),
        Just("\\".to_owned()),
        Just("\u{1}\u{7}".to_owned()),
        Just("é€😀".to_owned()),
        "[a-z0-9 ]{1,30}",
        "[0-9]{1,6}\n",
    ];
    prop::collection::vec(piece, 200..3000).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The lower bound: a cut result uses the budget, not a sliver of it (a multi-line stdout once
    /// kept 307 bytes of 65,536).
    #[test]
    fn a_cut_string_keeps_close_to_the_budget(text in escape_heavy(), budget in 1024usize..16384) {
        let value = json!({"exit_code": 0, "stdout": text, "stderr": "warning: last line"});
        let t = truncate(&value, budget, Some("r1"));
        let size = t.value.to_string().len();
        prop_assert!(size <= budget, "{} > {}", size, budget);
        if t.truncated {
            prop_assert!(size >= budget - budget / 20 - 64, "kept {} of {}", size, budget);
            prop_assert_eq!(&t.value["stderr"], "warning: last line");
        }
    }

    #[test]
    fn a_cut_array_keeps_close_to_the_budget(items in prop::collection::vec(escape_heavy(), 2..6), budget in 2048usize..16384) {
        let value = json!({"lines": items, "status": "ok"});
        let t = truncate(&value, budget, None);
        let size = t.value.to_string().len();
        prop_assert!(size <= budget, "{} > {}", size, budget);
        if t.truncated {
            let kept: Vec<usize> = t.value["lines"].as_array().map(|a| a.iter().map(|x| x.to_string().len()).collect()).unwrap_or_default();
            let orig: Vec<(usize, usize)> = value["lines"].as_array().map(|a| a.iter().map(|x| (x.as_str().map_or(0, str::len), x.to_string().len())).collect()).unwrap_or_default();
            prop_assert!(size >= budget - budget / 20 - 128, "kept {} of {}: {:?} from {:?}", size, budget, kept, orig);
            prop_assert_eq!(&t.value["status"], "ok");
        }
    }

    #[test]
    fn cut_nested_values_keep_close_to_the_budget(
        a in escape_heavy(),
        b in escape_heavy(),
        short in prop::collection::vec("[a-z\n\"]{0,40}", 0..400),
        budget in 2048usize..16384,
    ) {
        let value = json!({"outer": {"a": a, "inner": {"b": b, "list": short}}, "n": 7});
        let t = truncate(&value, budget, Some("r2"));
        let size = t.value.to_string().len();
        prop_assert!(size <= budget, "{} > {}", size, budget);
        if t.truncated {
            prop_assert!(t.value.get("_truncated_json").is_none(), "structure kept");
            prop_assert!(size >= budget - budget / 10 - 256, "kept {} of {}", size, budget);
            prop_assert_eq!(&t.value["n"], 7);
        }
    }
}

/// The cases that were reported: `seq 1 100000`, a 1 MB log and a 600 KB JSON document, each cut
/// to the default 65,536-byte budget.
#[test]
fn reported_multi_line_results_keep_most_of_the_budget() {
    let seq: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    let log: String = (0..20_000)
        .map(|n| {
            format!(
                "2026-11-24T10:00:{:02} INFO request {n} path=\"/a/b\" took 3ms\n",
                n % 60
            )
        })
        .collect();
    let doc = serde_json::to_string_pretty(&json!({
        "items": (0..6_000).map(|n| json!({"id": n, "name": format!("item \"{n}\""), "tags": ["a", "b"]})).collect::<Vec<_>>()
    }))
    .unwrap();
    for (what, text) in [("seq", seq), ("log", log), ("json", doc)] {
        let value = json!({"exit_code": 0, "stdout": text, "stderr": ""});
        let t = truncate(&value, 65_536, Some("r1"));
        let size = t.value.to_string().len();
        assert!(size <= 65_536, "{what}: {size}");
        assert!(size >= 62_000, "{what}: kept only {size} of 65,536 bytes");
    }
}

/// Pieces the family parsers look for, mixed with multi-byte text: random answers made of them.
fn arb_answer_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop_oneof![
            Just("<tool_call>"),
            Just("</tool_call>"),
            Just("<function="),
            Just("<parameter="),
            Just("</parameter>"),
            Just("<arg_key>"),
            Just("<arg_value>"),
            Just("<｜tool▁calls▁begin｜>"),
            Just("<｜tool▁call▁begin｜>"),
            Just("<｜tool▁sep｜>"),
            Just("<｜DSML｜invoke name=\""),
            Just("<|python_tag|>"),
            Just("[TOOL_CALLS]"),
            Just("[ARGS]"),
            Just("[CALL_ID]"),
            Just("<|channel|>"),
            Just("<|message|>"),
            Just(" to=functions."),
            Just("<|call|>"),
            Just("<|tool_call_begin|>functions."),
            Just("<|tool_call_argument_begin|>"),
            Just("<start_function_call>call:"),
            Just("<escape>"),
            Just("```tool_code\n"),
            Just("```json\n"),
            Just("```"),
            Just("<think>"),
            Just("</think>"),
            Just("{\"name\": \"f\", \"arguments\": {"),
            Just("{\"tool\": \"f\", \"parameters\": {"),
            Just("[f(a="),
        ]
        .prop_map(str::to_owned),
        "[\\{\\}\\[\\]\"'=(),:;\\\\ a-z0-9é東｜▁\n]{0,12}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

/// Argument values whose strings hold the families' markers.
fn arb_arguments() -> impl Strategy<Value = Map<String, Value>> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zé東 ]{0,8}".prop_map(Value::String),
        prop_oneof![
            Just("</tool_call>"),
            Just("<|call|>"),
            Just("```"),
            Just("[ARGS]"),
            Just("<｜tool▁call▁end｜>"),
            Just("<|tool_call_end|>"),
            Just("\"}"),
            Just("</think>"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,8}", value, 0..5).prop_map(|m| m.into_iter().collect())
}

/// One call written as each family's template writes it.
fn written(family: usize, name: &str, args: &Value) -> (Dialect, String) {
    match family {
        0 => (
            Dialect::Hermes,
            format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>"),
        ),
        1 => (Dialect::Mistral, format!("[TOOL_CALLS]{name}[ARGS]{args}")),
        2 => (
            Dialect::Mistral,
            format!("[TOOL_CALLS][{{\"name\": \"{name}\", \"arguments\": {args}}}]"),
        ),
        3 => (
            Dialect::Kimi,
            format!(
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"
            ),
        ),
        4 => (
            Dialect::Deepseek,
            format!(
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            ),
        ),
        5 => (
            Dialect::Deepseek,
            format!(
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            ),
        ),
        6 => (
            Dialect::GptOss,
            format!(
                "<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>"
            ),
        ),
        7 => (
            Dialect::Llama,
            format!("<|python_tag|>{{\"name\": \"{name}\", \"parameters\": {args}}}<|eom_id|>"),
        ),
        _ => (
            Dialect::Toolgate,
            format!("```json\n{{\"tool\": \"{name}\", \"parameters\": {args}}}\n```"),
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random text of markers and multi-byte characters: every family parser, named or found,
    /// returns (never panics), names no call with an empty name, and never invents content.
    #[test]
    fn family_parsers_never_panic(text in arb_answer_text()) {
        for d in Dialect::ALL {
            let parsed = toolgate_core::formats::dialect::parse(&text, d);
            for call in &parsed.calls {
                prop_assert!(call.name.as_deref() != Some(""), "{d:?}: {call:?}");
            }
            prop_assert!(parsed.content.len() <= text.len() + parsed.calls.len() + 1, "{d:?}: {parsed:?}");
        }
    }

    /// A call written in a family's format reads back as the same name and arguments, whatever
    /// markers its string values hold, found by its markers or named.
    #[test]
    fn a_written_call_reads_back_exactly(family in 0usize..9, name in "[a-z][a-z_]{0,11}", args in arb_arguments(), preface in "[A-Za-zé ]{0,20}") {
        let args = Value::Object(args);
        let (dialect, call) = written(family, &name, &args);
        let text = if preface.trim().is_empty() || family == 8 { call } else { format!("{}\n{call}", preface.trim()) };
        for asked in [Dialect::Auto, dialect] {
            let parsed = toolgate_core::formats::dialect::parse(&text, asked);
            prop_assert_eq!(parsed.calls.len(), 1, "{:?} {}", asked, text);
            prop_assert_eq!(parsed.calls[0].name.as_deref(), Some(name.as_str()));
            prop_assert_eq!(&parsed.calls[0].arguments, &RawArguments::Json(args.clone()), "{}", text);
        }
    }
}
