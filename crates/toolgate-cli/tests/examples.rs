//! The shipped cassettes (`examples/*.cassette.jsonl`) replay offline through `toolgate agent`
//! and show what they are for: the file tools with an approval, a refused call, a timeout and a
//! repaired call.
//!
//! They are recorded by this file too: `cargo test -p toolgate-cli --test examples -- --ignored
//! record` runs each script against a local server speaking OpenAI Chat Completions and
//! records the real requests toolgate sends. Re-record when a tool's schema or the request shape
//! changes (replay then fails with a diff naming the field).

mod common;
#[path = "../../toolgate-llm/tests/common/mod.rs"]
mod llm_server;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

struct Example {
    name: &'static str,
    prompt: &'static str,
    answers: Vec<Value>,
    /// Approve every ask while recording and replaying.
    yes: bool,
}

fn calls(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    json!({"id": "chatcmpl-demo", "object": "chat.completion", "created": 1_763_700_000, "model": "gpt-4.1",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls, "refusal": null},
                        "logprobs": null, "finish_reason": "tool_calls"}]})
}

fn text(t: &str) -> Value {
    json!({"id": "chatcmpl-demo", "object": "chat.completion", "created": 1_763_700_000, "model": "gpt-4.1",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": t, "refusal": null},
                        "logprobs": null, "finish_reason": "stop"}]})
}

fn examples() -> Vec<Example> {
    vec![
        Example {
            name: "quickstart",
            prompt: "Turn notes.txt into a checklist in TODO.md.",
            answers: vec![
                calls(&[
                    ("call_list", "list_directory", r#"{"path": "."}"#),
                    ("call_read", "read_file", r#"{"path": "notes.txt"}"#),
                ]),
                calls(&[(
                    "call_write",
                    "write_file",
                    r##"{"path": "TODO.md", "content": "# TODO\n\n- [ ] buy milk\n- [ ] call the plumber\n- [ ] renew passport\n"}"##,
                )]),
                text("I turned the three notes into a checklist in TODO.md."),
            ],
            yes: false,
        },
        Example {
            name: "refused",
            prompt: "Clean up the build directory.",
            answers: vec![
                calls(&[("call_rm", "exec_shell", r#"{"command": "rm -rf build"}"#)]),
                text("I may not run rm here: the project's rules deny it. Remove build/ yourself if you want it gone."),
            ],
            yes: true,
        },
        Example {
            name: "timeout",
            prompt: "Wait for the slow job, but not for long.",
            answers: vec![
                calls(&[(
                    "call_sleep",
                    "exec_shell",
                    r#"{"command": "sleep 30", "timeout_ms": 300}"#,
                )]),
                text("The job did not finish within 0.3 s, so toolgate stopped it and everything it started."),
            ],
            yes: true,
        },
        Example {
            name: "repaired",
            prompt: "What is in notes.txt?",
            answers: vec![
                // The model's arguments were cut off: toolgate completes them and marks the call.
                calls(&[("call_cut", "read_file", r#"{"path": "notes.txt"#)]),
                text("notes.txt lists three errands: buy milk, call the plumber and renew the passport."),
            ],
            yes: false,
        },
    ]
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cassette(name: &str) -> PathBuf {
    repo().join("examples").join(format!("{name}.cassette.jsonl"))
}

/// A fresh copy of `examples/demo`.
fn demo_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo().join("examples/demo")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// Records every cassette against the scripted server.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "rewrites examples/*.cassette.jsonl; run it with --ignored when a request shape changes"]
async fn record_the_example_cassettes() {
    for ex in examples() {
        let replies = ex.answers.iter().map(|a| llm_server::Reply::json(200, a)).collect();
        let server = llm_server::serve(replies).await;
        let ws = demo_workspace();
        let mut cmd = common::toolgate(ws.path());
        cmd.args(["--store", "memory", "agent", "--model", "openai:gpt-4.1", "--base-url"])
            .arg(format!("{}/v1", server.base))
            .arg("--record")
            .arg(cassette(ex.name))
            .arg(ex.prompt)
            .env("OPENAI_API_KEY", "sk-demo-not-a-key")
            .env("TOOLGATE_AGENT_STREAM", "false");
        if ex.yes || ex.name == "quickstart" {
            cmd.arg("--yes");
        }
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            ex.name,
            String::from_utf8_lossy(&out.stderr)
        );
        // Tool results are compared on replay (timings and the sandbox report normalised).
        let path = cassette(ex.name);
        // The local server's port changes every run: the recording names OpenAI's address.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(&server.base, "https://api.openai.com");
        std::fs::write(&path, text).unwrap();
    }
}

/// Replays one example with `--json` and returns its events and exit code.
fn replay(name: &str, ws: &Path, yes: bool) -> (Vec<Value>, Option<i32>, String) {
    let mut cmd = common::toolgate(ws);
    cmd.args(["--store", "memory", "agent", "--json", "--replay"])
        .arg(cassette(name))
        .env_remove("OPENAI_API_KEY");
    if yes {
        cmd.arg("--yes");
    }
    let out = cmd.output().unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: not a JSON event ({e}): {l}")))
        .collect();
    (
        events,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn finished(events: &[Value]) -> &Value {
    events
        .iter()
        .rev()
        .find(|e| e["event"] == "run_finished")
        .expect("a run_finished event")
}

fn call_finished<'a>(events: &'a [Value], tool: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == "call_finished" && e["tool"] == tool)
        .unwrap_or_else(|| panic!("no call_finished for {tool}: {events:#?}"))
}

#[test]
fn the_quickstart_uses_the_file_tools_and_writes_after_approval() {
    let ws = demo_workspace();
    let (events, code, stderr) = replay("quickstart", ws.path(), true);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(finished(&events)["status"], "final_answer");
    assert!(finished(&events)["text"].as_str().unwrap().contains("TODO.md"));
    for tool in ["list_directory", "read_file", "write_file"] {
        assert_eq!(call_finished(&events, tool)["success"], true, "{tool}");
    }
    let verdict = events
        .iter()
        .find(|e| e["event"] == "verdict" && e["tool"] == "write_file")
        .unwrap();
    assert_eq!(
        verdict["source"], "auto_approved",
        "write_file is asked, and --yes approves it without a person"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("TODO.md")).unwrap(),
        "# TODO\n\n- [ ] buy milk\n- [ ] call the plumber\n- [ ] renew passport\n"
    );
}

/// A replay compares tool results: when the write is refused, the recorded "done" answer is not
/// played back (it once printed "I turned the three notes into a checklist" and exited 0).
#[test]
fn without_a_terminal_the_quickstart_write_is_refused_and_the_replay_stops_at_the_divergence() {
    let ws = demo_workspace();
    let (events, code, stderr) = replay("quickstart", ws.path(), false);
    assert_eq!(code, Some(1), "{stderr}");
    let finished = finished(&events);
    assert_ne!(finished["status"], "final_answer", "{finished}");
    assert!(
        finished["text"].as_str().is_none_or(|t| !t.contains("TODO.md")),
        "{finished}"
    );
    assert!(
        finished.to_string().contains("diverged from the cassette")
            && finished.to_string().contains("permission_denied"),
        "the divergence names the refused result: {finished}"
    );
    let verdict = events
        .iter()
        .find(|e| e["event"] == "verdict" && e["tool"] == "write_file")
        .unwrap();
    assert_eq!(verdict["source"], "non_interactive_deny");
    assert!(!ws.path().join("TODO.md").exists());
}

#[test]
fn the_refused_example_is_denied_by_the_project_rule() {
    let ws = demo_workspace();
    std::fs::create_dir(ws.path().join("build")).unwrap();
    let (events, code, stderr) = replay("refused", ws.path(), true);
    assert_eq!(code, Some(0), "{stderr}");
    let call = call_finished(&events, "exec_shell");
    assert_eq!(call["error_type"], "permission_denied");
    let verdict = events.iter().find(|e| e["event"] == "verdict").unwrap();
    assert_eq!(verdict["source"], "config_deny", "--yes never beats a deny");
    assert!(ws.path().join("build").exists(), "nothing was removed");
}

#[test]
fn the_timeout_example_stops_the_command() {
    let ws = demo_workspace();
    let (events, code, stderr) = replay("timeout", ws.path(), true);
    assert_eq!(code, Some(0), "{stderr}");
    let result = events
        .iter()
        .find(|e| e["event"] == "message_added" && e["message"]["role"] == "tool")
        .expect("the tool result");
    let content: Value = serde_json::from_str(result["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["timed_out"], true, "{content}");
    assert_eq!(content["timeout_ms"], 300);
}

#[test]
fn the_repaired_example_completes_the_cut_off_arguments() {
    let ws = demo_workspace();
    let (events, code, stderr) = replay("repaired", ws.path(), false);
    assert_eq!(code, Some(0), "{stderr}");
    let started = events.iter().find(|e| e["event"] == "call_started").unwrap();
    assert_eq!(started["arguments"], json!({"path": "notes.txt"}));
    assert!(started["repair"].is_object(), "the call is marked repaired: {started}");
    assert_eq!(call_finished(&events, "read_file")["success"], true);
}

#[test]
fn a_replay_that_diverges_fails_with_the_difference() {
    let ws = demo_workspace();
    let mut cmd = common::toolgate(ws.path());
    cmd.args(["--store", "memory", "agent", "--replay"])
        .arg(cassette("repaired"))
        .arg("A different question");
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("diverged from the cassette"), "{stderr}");
    assert!(
        stderr.contains("A different question"),
        "the diff shows the new value: {stderr}"
    );
}
