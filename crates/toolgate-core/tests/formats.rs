//! Each provider's wire format: the exact JSON of a successful and a failed call, read from the
//! provider's answer and written back as the messages to append; a batch of three keeps its ids
//! and order; tool listings in every format.

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::tool::ToolOutput;
use toolgate_core::{Answer, EngineConfig, Format, ToolError, TurnOptions, TurnStatus};

fn tools() -> Vec<Arc<dyn toolgate_core::Tool>> {
    let weather = FnTool::new("get_weather", read_only(), |_, args| async move {
        Ok(ToolOutput::json(json!({"city": args["city"], "temp_c": 21})))
    })
    .schema(json!({
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
        "additionalProperties": false
    }));
    let broken = FnTool::new("broken", read_only(), |_, _| async {
        Err(ToolError::failed("disk on fire"))
    });
    vec![Arc::new(weather), Arc::new(broken)]
}

async fn exec(format: Format, body: Value) -> (Vec<Value>, TurnStatus) {
    let h = harness(tools(), EngineConfig::default());
    let answer = Answer::parse(format, &body).unwrap();
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    (turn.messages, turn.status)
}

const FAIL: &str = r#"{"error":{"type":"execution_failed","message":"disk on fire","attempts":1,"retryable":false}}"#;

#[tokio::test]
async fn openai_chat_completions() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "broken", "arguments": "{}"}}
            ]}}]
    });
    let (messages, status) = exec(Format::Openai, body).await;
    assert_eq!(status, TurnStatus::Continue);
    assert_eq!(
        messages,
        vec![
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "broken", "arguments": "{}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "call_a", "content": "{\"city\":\"Paris\",\"temp_c\":21}"}),
            json!({"role": "tool", "tool_call_id": "call_b", "content": FAIL}),
        ]
    );
}

#[tokio::test]
async fn openai_responses() {
    let body = json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "broken", "arguments": "{}", "status": "completed"}
        ]
    });
    let (messages, _) = exec(Format::Responses, body).await;
    assert_eq!(
        messages,
        vec![
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}),
            json!({"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "broken", "arguments": "{}", "status": "completed"}),
            json!({"type": "function_call_output", "call_id": "call_a", "output": "{\"city\":\"Paris\",\"temp_c\":21}"}),
            json!({"type": "function_call_output", "call_id": "call_b", "output": FAIL}),
        ]
    );
}

#[tokio::test]
async fn anthropic_messages() {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_b", "name": "broken", "input": {}}
        ]
    });
    let (messages, _) = exec(Format::Anthropic, body).await;
    assert_eq!(
        messages,
        vec![
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_b", "name": "broken", "input": {}}
            ]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "{\"city\":\"Paris\",\"temp_c\":21}"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": FAIL, "is_error": true}
            ]}),
        ]
    );
}

#[tokio::test]
async fn gemini_generate_content_with_generated_ids() {
    let body = json!({
        "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"name": "broken", "args": {}}}
        ]}}]
    });
    let (messages, _) = exec(Format::Gemini, body).await;
    let id_a = messages[0]["parts"][0]["functionCall"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let id_b = messages[0]["parts"][1]["functionCall"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        id_a.starts_with("call_") && id_a != id_b,
        "UUIDv7 ids are generated: {id_a} {id_b}"
    );
    assert_eq!(
        messages,
        vec![
            json!({"role": "model", "parts": [
                {"functionCall": {"id": id_a, "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"id": id_b, "name": "broken", "args": {}}}
            ]}),
            json!({"role": "user", "parts": [
                {"functionResponse": {"id": id_a, "name": "get_weather", "response": {"result": {"city": "Paris", "temp_c": 21}}}},
                {"functionResponse": {"id": id_b, "name": "broken", "response": serde_json::from_str::<Value>(FAIL).unwrap()}}
            ]}),
        ]
    );
}

#[tokio::test]
async fn text_fallback() {
    let body = json!(
        "I'll check the weather.\n```json\n{\"tool\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}, \"reasoning\": \"asked\"}\n```"
    );
    let (messages, _) = exec(Format::Text, body.clone()).await;
    assert_eq!(
        messages,
        vec![
            json!({"role": "assistant", "content": body}),
            json!({"role": "user", "content": "[TOOL RESULT: get_weather]\n{\"city\":\"Paris\",\"temp_c\":21}"}),
        ]
    );
    let (messages, _) = exec(Format::Text, json!("{\"tool\": \"broken\", \"parameters\": {}}")).await;
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": format!("[TOOL RESULT: broken]\n{FAIL}")})
    );
}

#[tokio::test]
async fn a_batch_of_three_keeps_its_ids_and_order_in_every_format() {
    let cities = ["Oslo", "Lima", "Pune"];
    let bodies = [
        (
            Format::Openai,
            json!({"role": "assistant", "tool_calls": cities.iter().enumerate().map(|(i, c)| json!({"id": format!("id{i}"), "type": "function", "function": {"name": "get_weather", "arguments": json!({"city": c}).to_string()}})).collect::<Vec<_>>()}),
        ),
        (
            Format::Responses,
            json!({"output": cities.iter().enumerate().map(|(i, c)| json!({"type": "function_call", "call_id": format!("id{i}"), "name": "get_weather", "arguments": json!({"city": c}).to_string()})).collect::<Vec<_>>()}),
        ),
        (
            Format::Anthropic,
            json!({"role": "assistant", "content": cities.iter().enumerate().map(|(i, c)| json!({"type": "tool_use", "id": format!("id{i}"), "name": "get_weather", "input": {"city": c}})).collect::<Vec<_>>()}),
        ),
        (
            Format::Gemini,
            json!({"role": "model", "parts": cities.iter().enumerate().map(|(i, c)| json!({"functionCall": {"id": format!("id{i}"), "name": "get_weather", "args": {"city": c}}})).collect::<Vec<_>>()}),
        ),
    ];
    for (format, body) in bodies {
        let h = harness(tools(), EngineConfig::default());
        let answer = Answer::parse(format, &body).unwrap();
        let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
        let results: Vec<(String, Value)> = turn
            .results()
            .map(|r| (r.call_id.to_string(), r.content["city"].clone()))
            .collect();
        assert_eq!(
            results,
            vec![
                ("id0".into(), json!("Oslo")),
                ("id1".into(), json!("Lima")),
                ("id2".into(), json!("Pune"))
            ],
            "{format}"
        );
    }
}

#[tokio::test]
async fn cut_off_answers_ask_the_model_to_reissue() {
    let cases = [
        (
            Format::Openai,
            json!({"choices": [{"finish_reason": "length", "message": {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Par"}}]}}]}),
        ),
        (
            Format::Anthropic,
            json!({"role": "assistant", "stop_reason": "max_tokens", "content": [
            {"type": "tool_use", "id": "c", "name": "get_weather", "input": "{\"city\": \"Par"}]}),
        ),
        (
            Format::Responses,
            json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [
            {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{\"city\": \"Par"}]}),
        ),
        (
            Format::Gemini,
            json!({"candidates": [{"finishReason": "MAX_TOKENS", "content": {"role": "model", "parts": [
            {"functionCall": {"id": "c", "name": "get_weather", "args": "{\"city\": \"Par"}}]}}]}),
        ),
    ];
    for (format, body) in cases {
        let h = harness(tools(), EngineConfig::default());
        let answer = Answer::parse(format, &body).unwrap();
        assert!(answer.cut_off, "{format}");
        let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
        let entry = turn.outcomes[0].entry().unwrap();
        assert_eq!(entry.content["error"]["type"], "malformed_call", "{format}");
        assert!(
            entry.content["error"]["message"].as_str().unwrap().contains("Reissue"),
            "{format}"
        );
    }
}

#[tokio::test]
async fn tool_lists_are_sorted_and_shaped_per_provider() {
    let h = harness(tools(), EngineConfig::default());
    let t = TurnOptions::default();
    let openai = h.engine.tool_list(Format::Openai, &t);
    assert_eq!(openai[0]["function"]["name"], "broken");
    assert_eq!(openai[1]["function"]["name"], "get_weather");
    assert_eq!(
        openai[1]["function"]["strict"], true,
        "closed, all-required schema qualifies for strict mode"
    );
    assert_eq!(openai[0]["function"]["strict"], false);
    let responses = h.engine.tool_list(Format::Responses, &t);
    assert_eq!(
        responses[1],
        json!({"type": "function", "name": "get_weather", "description": "a test tool",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"], "additionalProperties": false},
        "strict": true})
    );
    let anthropic = h.engine.tool_list(Format::Anthropic, &t);
    assert_eq!(anthropic[1]["input_schema"]["required"], json!(["city"]));
    let gemini = h.engine.tool_list(Format::Gemini, &t);
    assert_eq!(
        gemini[0]["functionDeclarations"][1],
        json!({"name": "get_weather", "description": "a test tool",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}})
    );
    assert!(gemini[0]["functionDeclarations"][0].get("parameters").is_none());
    let mcp = h.engine.tool_list(Format::Mcp, &t);
    assert_eq!(
        mcp["tools"][1]["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    let text = h.engine.tool_list(Format::Text, &t);
    assert!(text.as_str().unwrap().contains("### get_weather"));
    let narrowed = TurnOptions {
        allowlist: Some(vec!["get_weather".into()]),
        ..TurnOptions::default()
    };
    assert_eq!(
        h.engine.tool_list(Format::Openai, &narrowed).as_array().unwrap().len(),
        1
    );
}

#[tokio::test]
async fn deliberate_mode_refuses_tools_outside_the_allowlist() {
    let h = harness(tools(), EngineConfig::default());
    let options = TurnOptions {
        allowlist: Some(vec!["get_weather".into()]),
        ..TurnOptions::default()
    };
    let turn = h
        .engine
        .run_turn(&h.session, &openai_answer(&[("x", "broken", "{}")]), options)
        .await;
    let e = &turn.outcomes[0].entry().unwrap().content["error"];
    assert_eq!(e["type"], "not_available");
    assert_eq!(e["allowed_tools"], json!(["get_weather"]));
}

#[tokio::test]
async fn names_are_repaired_and_unknown_names_get_suggestions() {
    let mut h = harness(tools(), EngineConfig::default());
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[
                ("a", "functions.get_weather", "{\"city\": \"Rome\"}"),
                ("b", "GET_WEATHER", "{\"city\": \"Bonn\"}"),
                ("c", "get_wether", "{}"),
            ]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content["city"], "Rome");
    assert_eq!(turn.outcomes[1].entry().unwrap().content["city"], "Bonn");
    let e = &turn.outcomes[2].entry().unwrap().content["error"];
    assert_eq!(e["type"], "unknown_tool");
    assert_eq!(e["suggestions"], json!(["get_weather"]));
    // The repairs are reported in the calls' events.
    let repaired: Vec<Vec<String>> = drain(&mut h.events)
        .into_iter()
        .filter_map(|e| match e {
            toolgate_core::events::Event::CallStarted { repair: Some(r), .. } => Some(r.actions),
            _ => None,
        })
        .collect();
    assert_eq!(
        repaired,
        vec![
            vec!["stripped_name_prefix".to_string()],
            vec!["fixed_name_case".to_string()]
        ]
    );
}

#[tokio::test]
async fn parameters_at_the_top_level_are_moved_into_arguments() {
    let h = harness(tools(), EngineConfig::default());
    let body = json!({"role": "assistant", "tool_calls": [{"id": "t", "type": "function", "function": {"name": "get_weather", "city": "Kyiv"}}]});
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &Answer::parse(Format::Openai, &body).unwrap(),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content["city"], "Kyiv");
    let text = json!("{\"tool\": \"get_weather\", \"city\": \"Riga\"}");
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &Answer::parse(Format::Text, &text).unwrap(),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content["city"], "Riga");
}

#[tokio::test]
async fn a_text_answer_without_calls_is_final() {
    let (messages, status) = exec(Format::Openai, json!({"role": "assistant", "content": "Done."})).await;
    assert_eq!(status, TurnStatus::FinalAnswer);
    assert_eq!(messages, vec![json!({"role": "assistant", "content": "Done."})]);
}

#[test]
fn an_answer_with_more_calls_than_the_cap_is_refused_whole() {
    use toolgate_core::formats::MAX_CALLS_PER_ANSWER;
    let calls = |n: usize| {
        (0..n)
            .map(|i| {
                serde_json::json!({"id": format!("c{i}"), "type": "function",
                "function": {"name": "read_file", "arguments": "{}"}})
            })
            .collect::<Vec<_>>()
    };
    let at_cap = serde_json::json!({"role": "assistant", "tool_calls": calls(MAX_CALLS_PER_ANSWER)});
    assert_eq!(
        toolgate_core::Answer::parse(toolgate_core::Format::Openai, &at_cap)
            .unwrap()
            .calls
            .len(),
        MAX_CALLS_PER_ANSWER
    );
    let over = serde_json::json!({"role": "assistant", "tool_calls": calls(MAX_CALLS_PER_ANSWER + 1)});
    let e = toolgate_core::Answer::parse(toolgate_core::Format::Openai, &over).unwrap_err();
    assert!(e.to_string().contains("at most 1024"), "{e}");
    let blocks: Vec<_> = (0..=MAX_CALLS_PER_ANSWER)
        .map(|i| serde_json::json!({"type": "tool_use", "id": format!("t{i}"), "name": "x", "input": {}}))
        .collect();
    let anthropic = serde_json::json!({"role": "assistant", "content": blocks});
    assert!(toolgate_core::Answer::parse(toolgate_core::Format::Anthropic, &anthropic).is_err());
}
