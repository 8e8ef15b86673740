//! Command hooks run as real `sh` scripts, in the PreToolUse / PostToolUse convention.

mod common;
use common::xdg_dir;

use assert_cmd::Command;
use serde_json::{Value, json};
use std::path::Path;

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "file a").unwrap();
        std::fs::write(dir.path().join("b.txt"), "file b").unwrap();
        Self { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn script(&self, name: &str, body: &str) -> String {
        let p = self.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        format!("sh {}", p.display())
    }
    fn config(&self, toml: &str) -> std::path::PathBuf {
        let p = self.path().join("hooks.toml");
        std::fs::write(&p, toml).unwrap();
        p
    }
    /// `toolgate --workspace W --config CONFIG`, isolated from the developer's files.
    fn toolgate(&self, config: &Path) -> Command {
        let mut cmd = Command::cargo_bin("toolgate").unwrap();
        cmd.arg("--workspace")
            .arg(self.path())
            .arg("--config")
            .arg(config)
            .env("XDG_CONFIG_HOME", xdg_dir(self.path(), "config"))
            .env("XDG_DATA_HOME", xdg_dir(self.path(), "data"))
            .env_remove("RUST_LOG");
        cmd
    }
    fn call(&self, config: &Path, extra: &[&str], tool: &str, args: Value) -> (Option<i32>, Value) {
        let out = Command::cargo_bin("toolgate")
            .unwrap()
            .arg("--workspace")
            .arg(self.path())
            .arg("--config")
            .arg(config)
            .args(extra)
            .args(["call", tool, &args.to_string()])
            .env("XDG_CONFIG_HOME", xdg_dir(self.path(), "config"))
            .env("XDG_DATA_HOME", xdg_dir(self.path(), "data"))
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {} / {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), v)
    }
}

fn pre(command: &str, extra: &str) -> String {
    format!("[[hooks.pre_tool_use]]\nmatcher = \"read_file|write_file\"\ncommand = {command:?}\n{extra}\n")
}

fn read_a() -> Value {
    json!({"path": "a.txt"})
}

#[test]
fn exit_2_blocks_with_stderr_as_the_reason() {
    let ws = Ws::new();
    let cmd = ws.script("block.sh", "echo 'no reading today' >&2; exit 2");
    let (code, v) = ws.call(&ws.config(&pre(&cmd, "")), &[], "read_file", read_a());
    assert_eq!(code, Some(1));
    assert_eq!(v["error"]["type"], "hook_denied");
    assert!(v["error"]["message"].as_str().unwrap().contains("no reading today"));
}

#[test]
fn other_exit_codes_follow_on_error() {
    let ws = Ws::new();
    let cmd = ws.script("broken.sh", "echo oops >&2; exit 1");
    let (code, v) = ws.call(&ws.config(&pre(&cmd, "")), &[], "read_file", read_a());
    assert_eq!(code, Some(0), "ignore is the default: {v}");
    assert_eq!(v["content"], "file a");
    let (code, v) = ws.call(
        &ws.config(&pre(&cmd, "on_error = \"block\"")),
        &[],
        "read_file",
        read_a(),
    );
    assert_eq!(code, Some(1));
    assert_eq!(v["error"]["type"], "hook_denied");
    let missing = "/no/such/hook-program";
    let (_, v) = ws.call(
        &ws.config(&pre(missing, "on_error = \"block\"")),
        &[],
        "read_file",
        read_a(),
    );
    assert_eq!(v["error"]["type"], "hook_denied");
}

#[test]
fn a_hook_past_its_timeout_is_stopped_and_follows_on_error() {
    let ws = Ws::new();
    let cmd = ws.script("slow.sh", "sleep 30");
    let (_, v) = ws.call(
        &ws.config(&pre(&cmd, "timeout_ms = 300\non_error = \"block\"")),
        &[],
        "read_file",
        read_a(),
    );
    assert_eq!(v["error"]["type"], "hook_denied");
    assert!(v["error"]["message"].as_str().unwrap().contains("300 ms"), "{v}");
    let (_, v) = ws.call(&ws.config(&pre(&cmd, "timeout_ms = 300")), &[], "read_file", read_a());
    assert_eq!(v["content"], "file a");
}

#[test]
fn json_decisions_allow_deny_and_ask() {
    let ws = Ws::new();
    let allow = ws.script(
        "allow.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "notes are fine"}}'"#,
    );
    // write_file would be asked (and refused: no terminal); the hook's allow skips that ask.
    let (code, v) = ws.call(
        &ws.config(&pre(&allow, "")),
        &[],
        "write_file",
        json!({"path": "n.txt", "content": "x"}),
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(std::fs::read_to_string(ws.path().join("n.txt")).unwrap(), "x");

    let deny = ws.script("deny.sh", r#"echo '{"decision": "block", "reason": "legacy says no"}'"#);
    let (_, v) = ws.call(&ws.config(&pre(&deny, "")), &[], "read_file", read_a());
    assert_eq!(v["error"]["type"], "hook_denied");
    assert!(v["error"]["message"].as_str().unwrap().contains("legacy says no"));

    let ask = ws.script(
        "ask.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "check first"}}'"#,
    );
    let (_, v) = ws.call(&ws.config(&pre(&ask, "")), &[], "read_file", read_a());
    assert_eq!(
        v["error"]["type"], "permission_denied",
        "read_file is read-only, but the hook asks: {v}"
    );
    assert_eq!(v["error"]["source"], "non_interactive_deny");
}

#[test]
fn rewritten_input_is_validated_and_decided_again() {
    let ws = Ws::new();
    let to_b = ws.script(
        "to_b.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"path": "b.txt"}}}'"#,
    );
    let (_, v) = ws.call(&ws.config(&pre(&to_b, "")), &[], "read_file", read_a());
    assert_eq!(v["content"], "file b");

    let invalid = ws.script(
        "invalid.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"path": 7}}}'"#,
    );
    let (_, v) = ws.call(&ws.config(&pre(&invalid, "")), &[], "read_file", read_a());
    assert_eq!(v["error"]["type"], "invalid_arguments");

    let to_locked = ws.script(
        "to_locked.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"path": "locked/x.txt", "content": "x"}}}'"#,
    );
    let rules = "[permissions]\nallow = [\"write_file\"]\ndeny = [\"write_file(locked/**)\"]\n";
    let config = ws.config(&format!("{rules}{}", pre(&to_locked, "")));
    let (_, v) = ws.call(&config, &[], "write_file", json!({"path": "free.txt", "content": "x"}));
    assert_eq!(v["error"]["type"], "permission_denied", "{v}");
    assert_eq!(v["error"]["source"], "config_deny");
    assert!(!ws.path().join("locked").exists());
}

#[test]
fn two_hooks_merge_and_see_each_others_rewrites_with_the_event_on_stdin() {
    let ws = Ws::new();
    let first = ws.script(
        "first.sh",
        r#"cat > first-event.json; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"path": "b.txt"}, "additionalContext": "one"}}'"#,
    );
    let second = ws.script(
        "second.sh",
        r#"cat > second-event.json; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "two"}}'"#,
    );
    let config = ws.config(&format!("{}{}", pre(&first, ""), pre(&second, "")));
    let (_, v) = ws.call(&config, &[], "read_file", read_a());
    assert_eq!(v["content"], "file b");
    assert_eq!(v["additional_context"], "one\ntwo");
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("first-event.json")).unwrap()).unwrap();
    assert_eq!(event["hook_event_name"], "PreToolUse");
    assert_eq!(event["tool_name"], "read_file");
    assert_eq!(event["tool_input"], read_a());
    assert!(event["session_id"].is_string() && event["tool_use_id"].is_string());
    assert_eq!(
        Path::new(event["cwd"].as_str().unwrap()),
        std::fs::canonicalize(ws.path()).unwrap()
    );
    let second_event: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("second-event.json")).unwrap()).unwrap();
    assert_eq!(second_event["tool_input"], json!({"path": "b.txt"}));
}

#[test]
fn post_hooks_replace_the_result_or_stop_the_run() {
    let ws = Ws::new();
    let replace = ws.script(
        "replace.sh",
        r#"cat > post-event.json; echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": {"redacted": true}}}'"#,
    );
    let config = ws.config(&format!("[[hooks.post_tool_use]]\ncommand = {replace:?}\n"));
    let (_, v) = ws.call(&config, &[], "read_file", read_a());
    assert_eq!(v, json!({"redacted": true}));
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("post-event.json")).unwrap()).unwrap();
    assert_eq!(event["hook_event_name"], "PostToolUse");
    assert_eq!(event["tool_response"]["content"], "file a");

    let stop = ws.script(
        "stop.sh",
        r#"echo '{"continue": false, "stopReason": "quota reached"}'"#,
    );
    let config = ws.config(&format!("[[hooks.post_tool_use]]\ncommand = {stop:?}\n"));
    let answer = json!({"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}},
        {"id": "b", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\": \"late.txt\", \"content\": \"x\"}"}}
    ]});
    let out = Command::cargo_bin("toolgate")
        .unwrap()
        .arg("--workspace")
        .arg(ws.path())
        .arg("--config")
        .arg(&config)
        .args(["--yes", "exec"])
        .env("XDG_CONFIG_HOME", xdg_dir(ws.path(), "config"))
        .env("XDG_DATA_HOME", xdg_dir(ws.path(), "data"))
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "post_hook_stop");
    assert!(v["messages"][2]["content"].as_str().unwrap().contains("canceled"));
    assert!(
        !ws.path().join("late.txt").exists(),
        "the rest of the batch did not run"
    );
}

#[test]
fn an_invalid_matcher_is_a_configuration_error_naming_the_line() {
    let ws = Ws::new();
    let config =
        ws.config("[engine]\ntimeout_ms = 1000\n\n[[hooks.pre_tool_use]]\nmatcher = \"read_(\"\ncommand = \"true\"\n");
    let out = Command::cargo_bin("toolgate")
        .unwrap()
        .arg("--workspace")
        .arg(ws.path())
        .arg("--config")
        .arg(&config)
        .arg("tools")
        .env("XDG_CONFIG_HOME", xdg_dir(ws.path(), "config"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 5") && stderr.contains("not a valid regex"),
        "{stderr}"
    );
}

fn audit(ws: &Ws, config: &Path, extra: &[&str]) -> Vec<Value> {
    let out = ws
        .toolgate(config)
        .args(["audit", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A post hook's block is a refusal everywhere: the exit code, the provider's error flag, the
/// journal (it once exited 0 and journalled `success`).
#[test]
fn a_post_hook_block_is_a_refusal_in_the_exit_code_the_flag_and_the_journal() {
    let ws = Ws::new();
    for (name, body) in [
        (
            "block-json.sh",
            r#"echo '{"decision": "block", "reason": "contains a secret"}'"#,
        ),
        ("block-exit.sh", "echo 'contains a secret' >&2; exit 2"),
    ] {
        let hook = ws.script(name, body);
        let config = ws.config(&format!("[[hooks.post_tool_use]]\ncommand = {hook:?}\n"));
        let (code, v) = ws.call(&config, &[], "read_file", read_a());
        assert_eq!(code, Some(1), "{name}: {v}");
        assert_eq!(v["error"]["type"], "hook_denied", "{name}");
        assert!(v["error"]["message"].as_str().unwrap().contains("contains a secret"));
        assert!(!v.to_string().contains("file a"), "{name}: the result is withheld");
        let rows = audit(&ws, &config, &["--outcome", "hook_denied"]);
        assert!(!rows.is_empty(), "{name}: audit --outcome hook_denied finds it");
        assert_eq!(rows[0]["outcome"], "error");
        // Anthropic's tool_result carries is_error.
        let answer = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}
        ]});
        let out = ws
            .toolgate(&config)
            .args(["exec", "--format", "anthropic"])
            .write_stdin(answer.to_string())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["messages"][1]["content"][0]["is_error"], true, "{name}: {v}");
    }
}

/// A command that fails or times out is an unsuccessful call, and the journal says which.
#[test]
fn a_failed_or_timed_out_shell_command_is_not_a_success() {
    let ws = Ws::new();
    let config = ws.config("[engine]\ntimeout_ms = 1500\n");
    let (code, v) = ws.call(
        &config,
        &["--yes"],
        "exec_shell",
        json!({"command": "echo out; echo err >&2; exit 3"}),
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(
        (v["exit_code"].as_i64(), v["stdout"].as_str()),
        (Some(3), Some("out\n")),
        "the model still sees the output"
    );
    // [engine] timeout_ms bounds exec_shell, whatever the call asks for.
    let (code, v) = ws.call(
        &config,
        &["--yes"],
        "exec_shell",
        json!({"command": "sleep 30", "timeout_ms": 60000}),
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["timed_out"], true, "{v}");
    assert_eq!(v["timeout_ms"], 1500, "{v}");
    let failed = audit(&ws, &config, &["--outcome", "execution_failed"]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["outcome"], "error");
    let timed_out = audit(&ws, &config, &["--outcome", "timeout"]);
    assert_eq!(
        timed_out.len(),
        1,
        "audit --outcome timeout finds the killed command: {timed_out:?}"
    );
    assert_eq!(audit(&ws, &config, &["--outcome", "success"]).len(), 0);
    assert_eq!(failed[0]["source"], "auto_approved", "--yes is not a person's approval");
}

/// `[tools.NAME]` makes a tool dangerous (capped per turn) or terminal.
#[test]
fn tool_settings_make_a_tool_dangerous_or_terminal() {
    let ws = Ws::new();
    let config =
        ws.config("[tools.write_file]\ncategory = \"dangerous\"\n\n[tools.read_file]\ncategory = \"terminal\"\n");
    let answer = json!({"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\": \"one.txt\", \"content\": \"1\"}"}},
        {"id": "b", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\": \"two.txt\", \"content\": \"2\"}"}},
        {"id": "c", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}}
    ]});
    let out = ws
        .toolgate(&config)
        .args(["--yes", "exec"])
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "end_turn", "{v}");
    assert!(ws.path().join("one.txt").exists());
    assert!(!ws.path().join("two.txt").exists(), "dangerous: one run per turn");
    assert!(
        v["messages"][2]["content"].as_str().unwrap().contains("rate_limited"),
        "{v}"
    );
    let bad = ws.config("[tools.read_file]\ncategory = \"sometimes\"\n");
    let out = ws.toolgate(&bad).arg("tools").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown category is a configuration error"
    );
}

/// The tool's own refusal comes before any ask: an escaping redirect under an ask rule is refused
/// without an approval (it was once put to the approver, and refused only after a yes).
#[test]
fn a_tool_s_own_refusal_is_never_put_to_the_approver() {
    let ws = Ws::new();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let config = ws.config("[permissions]\nask = [\"exec_shell\"]\n");
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let command = "echo x > link/escaped.txt";
    let (code, v) = ws.call(&config, &["--yes"], "exec_shell", json!({ "command": command }));
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["error"]["source"], "builtin_deny", "{v}");
    assert!(!target.exists());
    let rows = audit(&ws, &config, &[]);
    assert_eq!(rows[0]["source"], "builtin_deny", "no approval was recorded: {rows:?}");
}
