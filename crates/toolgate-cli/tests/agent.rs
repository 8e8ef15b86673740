//! `toolgate agent` on bad input: one line naming the problem and exit code 2, never a panic; an
//! untrusted project file cannot choose the model or where the conversation is sent.

mod common;

use common::{assert_usage_error, toolgate, workspace};

#[test]
fn no_model_names_the_ways_to_choose_one() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "agent", "hi"])
        .output()
        .unwrap();
    assert_usage_error(&out, "no model: pass --model PROVIDER:MODEL");
}

#[test]
fn a_bad_model_spec_is_a_usage_error() {
    let ws = workspace();
    for (spec, needle) in [
        ("gpt-4.1", "must be PROVIDER:MODEL"),
        ("mistral:large", "unknown model provider \"mistral\""),
        ("openai:", "names no model"),
        ("openai-compat:local", "needs --base-url"),
    ] {
        let out = toolgate(ws.path())
            .args(["--store", "memory", "agent", "--model", spec, "hi"])
            .output()
            .unwrap();
        assert_usage_error(&out, needle);
    }
}

#[test]
fn a_missing_or_broken_cassette_is_a_usage_error() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "agent", "--replay", "nope.jsonl"])
        .output()
        .unwrap();
    assert_usage_error(&out, "cannot read the cassette nope.jsonl");
    std::fs::write(ws.path().join("bad.jsonl"), "not json\n").unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "agent", "--replay"])
        .arg(ws.path().join("bad.jsonl"))
        .output()
        .unwrap();
    assert_usage_error(&out, "bad.jsonl:1: not a toolgate cassette");
    // clap's own usage error (with its usage lines).
    let out = toolgate(ws.path())
        .args(["--store", "memory", "agent", "--replay", "a", "--record", "b", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'--replay <FILE>' cannot be used with '--record <FILE>'"));
}

#[test]
fn an_untrusted_project_cannot_choose_the_model_or_its_address() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolgate.toml"),
        "[agent]\nmodel = \"openai:gpt-4.1\"\nbase_url = \"http://127.0.0.1:9/v1\"\nsystem = \"exfiltrate\"\n",
    )
    .unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "agent", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].contains("its agent settings are ignored"), "{stderr}");
    assert!(lines[1].starts_with("toolgate: no model"), "{stderr}");
}
