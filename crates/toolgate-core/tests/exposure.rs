//! Stage 4: per-turn assembly (narrowed or hidden), feature flags, deliberate mode and its
//! retention window. The schema the model sees is the schema validated.

mod common;

use async_trait::async_trait;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::tool::{Assembly, ToolContext, ToolOutput, ToolSpec, TurnView};
use toolgate_core::types::ToolName;
use toolgate_core::{EngineConfig, Format, Tool, ToolError, TurnOptions};

/// A tool with three modes that narrows itself to one on even iterations and hides itself
/// when the provider is Gemini.
struct Modal {
    schema: Value,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Modal {
    fn name(&self) -> &str {
        "modal"
    }
    fn description(&self) -> &str {
        "Runs in one of three modes."
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn assemble(&self, turn: &TurnView<'_>) -> Assembly {
        if turn.format == Some(Format::Gemini) {
            return Assembly::Hidden("the provider cannot use it".into());
        }
        if turn.iteration.is_multiple_of(2) {
            return Assembly::Narrowed {
                description: Some("Runs fast.".into()),
                parameters: Some(
                    json!({"type": "object", "properties": {"mode": {"type": "string", "enum": ["fast"]}}, "required": ["mode"]}),
                ),
            };
        }
        Assembly::Unchanged
    }
    async fn execute(&self, _: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(args))
    }
}

fn modal() -> Arc<dyn Tool> {
    Arc::new(Modal {
        schema: json!({"type": "object", "properties": {"mode": {"type": "string", "enum": ["fast", "safe", "slow"]}}, "required": ["mode"]}),
        spec: read_only(),
    })
}

fn turn(iteration: u32) -> TurnOptions {
    TurnOptions {
        iteration,
        ..TurnOptions::default()
    }
}

#[tokio::test]
async fn the_schema_shown_is_the_schema_validated() {
    let h = harness(vec![modal()], EngineConfig::default());
    let narrowed = h.engine.tool_list(Format::Openai, &turn(0));
    assert_eq!(narrowed[0]["function"]["description"], "Runs fast.");
    assert_eq!(
        narrowed[0]["function"]["parameters"]["properties"]["mode"]["enum"],
        json!(["fast"])
    );
    let full = h.engine.tool_list(Format::Openai, &turn(1));
    assert_eq!(
        full[0]["function"]["parameters"]["properties"]["mode"]["enum"],
        json!(["fast", "safe", "slow"])
    );
    // Run-time validation rejects what assembly removed, and accepts it when it is exposed.
    let t = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "modal", "{\"mode\": \"slow\"}")]),
            turn(0),
        )
        .await;
    assert_eq!(error_type(&t.outcomes[0]).as_deref(), Some("invalid_arguments"));
    let t = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("b", "modal", "{\"mode\": \"slow\"}")]),
            turn(1),
        )
        .await;
    assert_eq!(t.outcomes[0].entry().unwrap().content, json!({"mode": "slow"}));
}

#[tokio::test]
async fn hidden_and_flagged_off_tools_are_not_listed_nor_run() {
    let mut flagged = read_only();
    flagged.feature = Some("beta".into());
    let h = harness(
        vec![modal(), echo("beta_tool", flagged.clone())],
        EngineConfig::default(),
    );
    let gemini = TurnOptions {
        format: Some(Format::Gemini),
        iteration: 1,
        ..TurnOptions::default()
    };
    assert_eq!(
        h.engine.tool_list(Format::Gemini, &gemini)[0]["functionDeclarations"],
        json!([])
    );
    let t = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "modal", "{\"mode\": \"fast\"}"), ("b", "beta_tool", "{}")]),
            gemini,
        )
        .await;
    for o in &t.outcomes {
        assert_eq!(error_type(o).as_deref(), Some("not_available"));
    }
    assert!(
        t.outcomes[0]
            .entry()
            .unwrap()
            .content
            .to_string()
            .contains("provider cannot use it")
    );
    assert!(
        t.outcomes[1]
            .entry()
            .unwrap()
            .content
            .to_string()
            .contains("\\\"beta\\\" is off")
    );
    // With the flag on, the tool is there.
    let config = EngineConfig {
        features: vec!["beta".into()],
        ..EngineConfig::default()
    };
    let h = harness(vec![echo("beta_tool", flagged)], config);
    assert_eq!(
        h.engine.tool_list(Format::Openai, &turn(1)).as_array().unwrap().len(),
        1
    );
}

fn deliberate(allow: &[&str]) -> TurnOptions {
    TurnOptions {
        allowlist: Some(allow.iter().map(|n| (*n).into()).collect()),
        ..TurnOptions::default()
    }
}

/// Runs `pick` under deliberate mode, then `others` turns of other work, then `pick` again
/// outside the allowlist; returns the last call's error type.
async fn pick_after(others: u32) -> Option<String> {
    let h = harness(
        vec![echo("pick", read_only()), echo("other", read_only())],
        EngineConfig::default(),
    );
    let t = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("0", "pick", "{}")]),
            deliberate(&["pick"]),
        )
        .await;
    assert!(error_type(&t.outcomes[0]).is_none());
    for i in 0..others {
        let args = format!("{{\"i\": {i}}}");
        let t = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("o{i}"), "other", &args)]),
                deliberate(&["other"]),
            )
            .await;
        assert!(error_type(&t.outcomes[0]).is_none());
    }
    let t = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("last", "pick", "{\"again\": true}")]),
            deliberate(&["other"]),
        )
        .await;
    error_type(&t.outcomes[0])
}

#[tokio::test]
async fn a_tool_that_succeeded_in_deliberate_mode_stays_exposed_for_two_turns() {
    // "Do it again" in the next turn, or the one after, works; later it does not.
    assert_eq!(pick_after(0).await, None);
    assert_eq!(pick_after(1).await, None);
    assert_eq!(pick_after(2).await.as_deref(), Some("not_available"));
}

/// Two upstream tools whose names map to one model-facing name: the call made under the name the
/// model was shown runs the tool it was shown for, never the one registered under that exact name.
#[tokio::test]
async fn the_name_a_model_was_shown_runs_the_tool_it_was_shown_for() {
    let chat: Arc<dyn Tool> = Arc::new(FnTool::new("send.message", read_only(), |_, _| async {
        Ok(ToolOutput::text("chat message sent"))
    }));
    let mail: Arc<dyn Tool> = Arc::new(FnTool::new("send_message", read_only(), |_, _| async {
        Ok(ToolOutput::text("e-mail sent"))
    }));
    let h = harness(vec![chat, mail], EngineConfig::default());
    let list = h.engine.tool_list(Format::Openai, &TurnOptions::default());
    let shown: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_ne!(shown[0], shown[1]);
    let answer = openai_answer(&[("a", "send_message", "{}"), ("b", "send_message_2", "{}")]);
    let turn = h.engine.run_turn(&h.session, &answer, TurnOptions::default()).await;
    let texts: Vec<String> = turn
        .outcomes
        .iter()
        .map(|o| o.entry().unwrap().content.to_string())
        .collect();
    assert!(texts[0].contains("chat message sent"), "{texts:?}");
    assert!(texts[1].contains("e-mail sent"), "{texts:?}");
}

/// A refusal among thousands of tools names the closest few and how many there are, not all.
#[tokio::test]
async fn a_not_available_refusal_is_bounded_whatever_the_number_of_tools() {
    let mut tools: Vec<Arc<dyn Tool>> = (0..2_000)
        .map(|i| echo(&format!("server__tool_number_{i:04}"), read_only()))
        .collect();
    tools.push(echo("get_weather", read_only()));
    let h = harness(tools, EngineConfig::default());
    let everything_but_weather: Vec<ToolName> = (0..2_000)
        .map(|i| ToolName::new(format!("server__tool_number_{i:04}")))
        .collect();
    let options = TurnOptions {
        allowlist: Some(everything_but_weather),
        ..TurnOptions::default()
    };
    let turn = h
        .engine
        .run_turn(&h.session, &openai_answer(&[("x", "get_weather", "{}")]), options)
        .await;
    let e = turn.outcomes[0].entry().unwrap().content["error"].clone();
    assert_eq!(e["type"], "not_available");
    assert_eq!(e["available_count"], 2_000);
    let offered = e["allowed_tools"].as_array().unwrap();
    assert!(offered.len() <= 3, "{offered:?}");
    let size = e.to_string().len();
    assert!(size < 1_024, "{size} bytes");
    // Lower bound: a call one letter off still gets the names it meant.
    let options = TurnOptions {
        allowlist: Some(
            std::iter::once(42)
                .chain(100..120)
                .map(|i| ToolName::new(format!("server__tool_number_{i:04}")))
                .collect(),
        ),
        ..TurnOptions::default()
    };
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("y", "server__tool_number_0043", "{}")]),
            options,
        )
        .await;
    let e = &turn.outcomes[0].entry().unwrap().content["error"];
    assert_eq!(e["type"], "not_available");
    assert_eq!(e["available_count"], 21);
    assert!(
        e["allowed_tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "server__tool_number_0042"),
        "{e}"
    );
}
