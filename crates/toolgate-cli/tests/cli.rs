//! The command line as DESIGN.md writes it: output shapes, exit codes, and bad input answered
//! with one clear line, never a panic.

use assert_cmd::Command;
use serde_json::{Value, json};
use std::path::Path;

mod common;

use common::*;

#[test]
fn tools_prints_every_format_sorted_by_name() {
    let ws = workspace();
    for format in ["openai", "responses", "anthropic", "gemini", "mcp"] {
        let out = toolgate(ws.path())
            .args(["tools", "--format", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{format}");
        let v = json_out(&out);
        let names: Vec<String> = match format {
            "openai" => v
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect(),
            "gemini" => v[0]["functionDeclarations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect(),
            "mcp" => v["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect(),
            _ => v
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect(),
        };
        assert_eq!(
            names,
            [
                "edit_file",
                "exec_shell",
                "fetch_url",
                "job_kill",
                "job_list",
                "job_output",
                "job_status",
                "job_wait",
                "list_directory",
                "memory_read",
                "memory_write",
                "read_file",
                "read_result",
                "write_file"
            ],
            "{format}"
        );
    }
    let out = toolgate(ws.path())
        .args(["tools", "--format", "text"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("### read_file"));
    let out = toolgate(ws.path()).args(["tools", "--format", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn call_prints_the_result_and_exits_by_outcome() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["call", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_out(&out)["content"], "hello\nworld\n");

    let out = toolgate(ws.path())
        .args(["call", "read_file", r#"{"path": "../../etc/passwd"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Refused by the tool's own confinement before permission, and said so.
    assert_eq!(json_out(&out)["error"]["type"], "permission_denied");
    assert_eq!(json_out(&out)["error"]["source"], "builtin_deny");

    let out = toolgate(ws.path()).args(["call", "raed_file", "{}"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["error"]["suggestions"], json!(["read_file"]));

    let out = toolgate(ws.path())
        .args(["call", "read_file", r#"{"path": 5}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["error"]["type"], "invalid_arguments");
}

#[test]
fn writes_are_refused_without_approval_and_run_with_yes_or_yolo() {
    let ws = workspace();
    let args = r#"{"path": "out.txt", "content": "written"}"#;
    let out = toolgate(ws.path()).args(["call", "write_file", args]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = &json_out(&out)["error"];
    assert_eq!(e["type"], "permission_denied");
    assert_eq!(e["source"], "non_interactive_deny");
    assert!(e["message"].as_str().unwrap().contains("--yes"));
    assert!(!ws.path().join("out.txt").exists());
    for flag in ["--yes", "--yolo"] {
        let out = toolgate(ws.path())
            .args([flag, "call", "write_file", args])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert_eq!(std::fs::read_to_string(ws.path().join("out.txt")).unwrap(), "written");
        std::fs::remove_file(ws.path().join("out.txt")).unwrap();
    }
}

#[test]
fn exec_runs_the_example_answer() {
    let ws = workspace();
    let example =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/openai-answer.json")).unwrap();
    // The checkout is the workspace here: keep state in memory so nothing is written into it.
    let out = toolgate(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
        .args(["--store", "memory", "exec"])
        .write_stdin(example)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_out(&out);
    assert_eq!(v["status"], "continue");
    let ids: Vec<&str> = v["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_list", "call_read", "call_escape", "call_write"]);
    let _ = ws;
}

#[test]
fn exec_reads_each_provider_format() {
    let ws = workspace();
    let answers = [
        (
            "anthropic",
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "hello.txt"}}]}),
        ),
        (
            "gemini",
            json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"id": "t1", "name": "read_file", "args": {"path": "hello.txt"}}}]}}]}),
        ),
        (
            "responses",
            json!({"output": [{"type": "function_call", "call_id": "t1", "name": "read_file", "arguments": "{\"path\": \"hello.txt\"}"}]}),
        ),
        (
            "openai",
            json!({"role": "assistant", "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"hello.txt\"}"}}]}),
        ),
    ];
    for (format, answer) in answers {
        for explicit in [true, false] {
            let mut cmd = toolgate(ws.path());
            cmd.arg("exec");
            if explicit {
                cmd.args(["--format", format]);
            }
            let out = cmd.write_stdin(answer.to_string()).output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{format}");
            let text = String::from_utf8_lossy(&out.stdout);
            // The file's text, as a JSON string inside the result (Gemini) or inside a string (the rest).
            assert!(
                text.contains("hello\\nworld") || text.contains("hello\\\\nworld"),
                "{format} explicit={explicit}: {text}"
            );
        }
    }
    let text = "```json\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"hello.txt\"}}\n```";
    let out = toolgate(ws.path())
        .args(["exec", "--format", "text"])
        .write_stdin(text)
        .output()
        .unwrap();
    let v = json_out(&out);
    assert!(
        v["messages"][1]["content"]
            .as_str()
            .unwrap()
            .starts_with("[TOOL RESULT: read_file]")
    );
}

#[test]
fn exec_exits_1_when_the_batch_aborts() {
    let ws = workspace();
    let config = ws.path().join("toolgate.toml");
    std::fs::write(&config, "[engine]\nmalformed = \"abort\"\n").unwrap();
    let answer =
        json!({"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"arguments": "{}"}}]});
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .arg("exec")
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["status"], "malformed_call");
    // The same through the environment.
    let out = toolgate(ws.path())
        .env("TOOLGATE_ENGINE_MALFORMED", "abort")
        .arg("exec")
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn bad_input_gets_one_clear_line_and_exit_2() {
    let ws = workspace();
    let out = toolgate(ws.path()).arg("exec").write_stdin("").output().unwrap();
    assert_usage_error(&out, "no model answer on stdin");
    let out = toolgate(ws.path())
        .args(["exec", "--format", "openai"])
        .write_stdin("garbage \u{1}\u{2} not json")
        .output()
        .unwrap();
    assert_usage_error(&out, "not a JSON openai model answer");
    let out = toolgate(ws.path())
        .args(["exec", "--format", "openai"])
        .write_stdin("{\"choices\": [")
        .output()
        .unwrap();
    assert_usage_error(&out, "not a JSON openai model answer");
    let out = toolgate(ws.path())
        .args(["exec", "--format", "anthropic"])
        .write_stdin("{\"role\": \"assistant\"}")
        .output()
        .unwrap();
    assert_usage_error(&out, "no `content` array");
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let out = toolgate(ws.path())
        .args(["exec", "--format", "openai"])
        .write_stdin(deep.clone())
        .output()
        .unwrap();
    assert_usage_error(&out, "recursion limit");
    // Without a format, text that is no JSON answer is a final answer, however deep.
    let out = toolgate(ws.path()).arg("exec").write_stdin(deep).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_out(&out)["status"], "final_answer");
    let out = toolgate(ws.path())
        .args(["call", "read_file", "{\"path\": "])
        .output()
        .unwrap();
    assert_usage_error(&out, "ARGS_JSON is not valid JSON");
    let out = toolgate(ws.path()).args(["call", "read_file", "[1]"]).output().unwrap();
    assert_usage_error(&out, "must be a JSON object");
    let out = Command::cargo_bin("toolgate")
        .unwrap()
        .args(["--workspace", "/no/such/dir", "tools"])
        .output()
        .unwrap();
    assert_usage_error(&out, "is not a directory");
    let out = toolgate(ws.path())
        .args(["--config", "/no/such.toml", "tools"])
        .output()
        .unwrap();
    assert_usage_error(&out, "does not exist");
    let bad = ws.path().join("bad.toml");
    std::fs::write(&bad, "[engine]\ntimeout_ms = \"soon\"\n").unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&bad)
        .arg("tools")
        .output()
        .unwrap();
    assert_usage_error(&out, "line 2");
    let out = toolgate(ws.path())
        .env("TOOLGATE_ENGINE_MAX_PARALLEL", "0")
        .arg("tools")
        .output()
        .unwrap();
    assert_usage_error(&out, "max_parallel");
    let out = toolgate(ws.path()).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_50_mb_answer_is_answered_correctly() {
    let ws = workspace();
    let content = "x".repeat(50 << 20);
    let answer = json!({"role": "assistant", "tool_calls": [{"id": "big", "type": "function", "function": {
        "name": "read_file", "arguments": json!({"path": "hello.txt", "padding": content}).to_string()}}]});
    let out = toolgate(ws.path())
        .arg("exec")
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_out(&out);
    // The unknown key is dropped (the schema forbids it) and the call runs.
    let result: Value = serde_json::from_str(v["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["content"], "hello\nworld\n");
    let huge = "y".repeat(65 << 20);
    let out = toolgate(ws.path()).arg("exec").write_stdin(huge).output().unwrap();
    assert_usage_error(&out, "larger than 64 MiB");
}

#[test]
fn a_call_with_10000_arguments_is_answered_correctly() {
    let ws = workspace();
    let mut args = serde_json::Map::new();
    args.insert("path".into(), json!("hello.txt"));
    for i in 0..10_000 {
        args.insert(format!("arg{i}"), json!(i));
    }
    let answer = json!({"role": "assistant", "tool_calls": [{"id": "many", "type": "function", "function": {
        "name": "read_file", "arguments": Value::Object(args).to_string()}}]});
    let out = toolgate(ws.path())
        .arg("exec")
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json_out(&out);
    assert!(v["messages"][1]["content"].as_str().unwrap().contains("hello\\nworld"));
}

#[test]
fn configured_rules_allow_and_deny_as_ordered() {
    let ws = workspace();
    let config = ws.path().join("rules.toml");
    std::fs::write(
        &config,
        r#"
[permissions]
allow = ["write_file(notes/**)"]
deny = [{ rule = "write_file(secrets/**)", match = ["secrets/key.txt"], not_match = ["notes/a.md"] }]
"#,
    )
    .unwrap();
    let write = |path: &str, extra: &[&str]| {
        let args = json!({"path": path, "content": "x"}).to_string();
        toolgate(ws.path())
            .arg("--config")
            .arg(&config)
            .args(extra)
            .args(["call", "write_file", &args])
            .output()
            .unwrap()
    };
    // An allow rule: no prompt, no --yes needed.
    let out = write("notes/today.md", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // Outside the rule: asked, and nobody can answer here.
    let out = write("other.md", &[]);
    assert_eq!(json_out(&out)["error"]["source"], "non_interactive_deny");
    // A deny rule beats --yolo.
    let out = write("secrets/key.txt", &["--yolo"]);
    assert_eq!(out.status.code(), Some(1));
    let e = &json_out(&out)["error"];
    assert_eq!(e["type"], "permission_denied");
    assert_eq!(e["source"], "config_deny");
    assert!(!ws.path().join("secrets/key.txt").exists());
    // The same rule from the environment.
    let args = json!({"path": "env/a.md", "content": "x"}).to_string();
    let out = toolgate(ws.path())
        .env("TOOLGATE_PERMISSIONS_ALLOW", r#"["write_file(env/**)"]"#)
        .args(["call", "write_file", &args])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_rule_whose_example_fails_is_a_configuration_error() {
    let ws = workspace();
    let config = ws.path().join("bad-rules.toml");
    std::fs::write(
        &config,
        "[permissions]\nallow = [{ rule = \"read_file(src/**)\", match = [\"docs/a.md\"] }]\n",
    )
    .unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .arg("tools")
        .output()
        .unwrap();
    assert_usage_error(&out, "does not match its example");
    std::fs::write(&config, "[permissions]\ndeny = [\"exec_shell(\"]\n").unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .arg("tools")
        .output()
        .unwrap();
    assert_usage_error(&out, "must end with ')'");
}

#[test]
fn an_untrusted_project_file_only_denies_and_asks_until_trusted() {
    let ws = workspace();
    let project = ws.path().join("toolgate.toml");
    std::fs::write(
        &project,
        "[permissions]\nallow = [\"write_file\"]\ndeny = [\"write_file(locked/**)\"]\nyolo = true\n\n[mcp_servers.evil]\ncommand = \"sh\"\n",
    )
    .unwrap();
    let write = |path: &str| {
        let args = json!({"path": path, "content": "x"}).to_string();
        toolgate(ws.path())
            .args(["call", "write_file", &args])
            .output()
            .unwrap()
    };
    // Untrusted: its allow rule and yolo do nothing, with one warning naming `toolgate trust`.
    let out = write("free.txt");
    assert_eq!(json_out(&out)["error"]["source"], "non_interactive_deny");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("toolgate trust").count(), 1, "{stderr}");
    assert!(
        stderr.contains("allow rules") && stderr.contains("yolo") && stderr.contains("MCP servers"),
        "{stderr}"
    );
    // Its deny rule applies, even to --yes.
    let args = json!({"path": "locked/a.txt", "content": "x"}).to_string();
    let out = toolgate(ws.path())
        .args(["--yes", "call", "write_file", &args])
        .output()
        .unwrap();
    assert_eq!(json_out(&out)["error"]["source"], "config_deny");

    // `toolgate trust` lifts it.
    let out = toolgate(ws.path()).arg("trust").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = write("free.txt");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("toolgate trust"));
    assert_eq!(
        json_out(&write("locked/b.txt"))["error"]["source"],
        "config_deny",
        "deny still wins over yolo"
    );

    // Editing the file untrusts it.
    std::fs::write(&project, "[permissions]\nallow = [\"write_file\", \"edit_file\"]\n").unwrap();
    let out = write("again.txt");
    assert_eq!(json_out(&out)["error"]["source"], "non_interactive_deny");
    assert!(String::from_utf8_lossy(&out.stderr).contains("toolgate trust"));

    // Naming it with --config trusts it.
    let args = json!({"path": "named.txt", "content": "x"}).to_string();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&project)
        .args(["call", "write_file", &args])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn trust_refuses_a_missing_or_broken_file() {
    let ws = workspace();
    let out = toolgate(ws.path()).arg("trust").output().unwrap();
    assert_usage_error(&out, "there is no");
    std::fs::write(ws.path().join("toolgate.toml"), "[permissions]\nallow = 3\n").unwrap();
    let out = toolgate(ws.path()).arg("trust").output().unwrap();
    assert_usage_error(&out, "not a valid configuration");
}

#[test]
fn a_70000_character_call_id_is_replaced_and_audit_does_not_panic() {
    let ws = workspace();
    let long = "x".repeat(70_000);
    let answer = serde_json::json!({"role": "assistant", "tool_calls": [{"id": long, "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"hello.txt\"}"}}]});
    let out = toolgate(ws.path())
        .args(["--session", "long-id", "exec", "--format", "openai"])
        .write_stdin(answer.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(&long), "the over-long id is not echoed back");
    assert!(stdout.contains("hello"), "the call still ran: {stdout}");
    let audit = toolgate(ws.path())
        .args(["--session", "long-id", "audit"])
        .output()
        .unwrap();
    assert_eq!(
        audit.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    assert!(String::from_utf8_lossy(&audit.stdout).contains("read_file"));
}

#[test]
fn rules_that_can_never_match_are_configuration_errors_with_a_hint() {
    let ws = workspace();
    for (rule, needle) in [
        (
            "Bash(git status)",
            "Claude Code's spelling; toolgate's is \"exec_shell\"",
        ),
        ("Read(src/**)", "toolgate's is \"read_file\""),
        ("WebFetch(domain:docs.rs)", "toolgate's is \"fetch_url\""),
        ("exec_shel(ls)", "did you mean \"exec_shell\"?"),
        ("github__create_issue", "no MCP server \"github\" is configured"),
        ("zzz*", "matches no built-in tool"),
        ("github__create*", "matches no built-in tool"),
    ] {
        let config = ws.path().join("rules.toml");
        std::fs::write(&config, format!("[permissions]\n\ndeny = [{rule:?}]\n")).unwrap();
        let out = toolgate(ws.path())
            .args(["--store", "memory", "--config"])
            .arg(&config)
            .args(["check", "read_file", r#"{"path": "hello.txt"}"#])
            .output()
            .unwrap();
        assert_usage_error(&out, needle);
        assert_usage_error(&out, "line 3");
    }
    // The lower bound: real tools, globs over them, and a configured server's tools load.
    let config = ws.path().join("rules.toml");
    std::fs::write(
        &config,
        "[permissions]\nallow = [\"exec_shell(git status)\", \"read_*\", \"srv__anything\"]\n\n[mcp_servers.srv]\ncommand = \"true\"\nenabled = false\n",
    )
    .unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "--config"])
        .arg(&config)
        .args(["check", "exec_shell", r#"{"command": "git status"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_out(&out)["decision"], "allow");
}

#[test]
fn a_rule_naming_a_tool_its_connected_server_lacks_is_an_error() {
    let ws = workspace();
    let config = ws.path().join("mcp.toml");
    let server = format!(
        "[mcp_servers.fx]\ncommand = {:?}\n",
        common::fixture_upstream().display().to_string()
    );
    std::fs::write(&config, format!("[permissions]\nallow = [\"fx__ehco\"]\n\n{server}")).unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "--config"])
        .arg(&config)
        .args(["check", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert_usage_error(&out, "line 2: permissions.allow: the rule \"fx__ehco\" can never match");
    assert_usage_error(&out, "did you mean \"fx__echo\"?");
    // The names an upstream's sampling and elicitation are governed under, and a pattern over
    // some of a server's tools, load.
    std::fs::write(
        &config,
        format!("[permissions]\nallow = [\"fx__echo\", \"fx__ec*\"]\ndeny = [\"fx__sampling\", \"fx__elicitation\"]\n\n{server}"),
    )
    .unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "--config"])
        .arg(&config)
        .args(["check", "fx__echo", r#"{"text": "hi"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_out(&out)["decision"], "allow");
}

#[test]
fn unprefixed_is_for_the_one_mcp_server_and_its_tools_may_be_named_in_rules() {
    let ws = workspace();
    let config = ws.path().with_extension("toml");
    std::fs::write(
        &config,
        "[mcp_servers.a]\ncommand = \"/nonexistent/a\"\nunprefixed = true\n[mcp_servers.b]\ncommand = \"/nonexistent/b\"\n",
    )
    .unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .args(["--store", "memory", "check", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert_usage_error(
        &out,
        "mcp_servers.a: unprefixed serves a server's tools under their own names",
    );
    // One server: a rule may name its tools as they are served (checked when it connects).
    std::fs::write(
        &config,
        "[permissions]\nallow = [\"search(*)\"]\n[mcp_servers.a]\ncommand = \"/nonexistent/a\"\nunprefixed = true\nstartup_timeout_secs = 1\n",
    )
    .unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .args(["--store", "memory", "check", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `toolgate login` on a user's mistake: one line naming what is wrong — a server not
/// configured, one without OAuth (stdio), one nothing answers at (its URL and why).
#[test]
fn login_mistakes_get_one_line_naming_the_server_and_why() {
    let ws = workspace();
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = ws.path().join("servers.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.local]\ncommand = \"true\"\n\n[mcp_servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    )
    .unwrap();
    let login = |server: &str| {
        toolgate(ws.path())
            .arg("--config")
            .arg(&config)
            .args(["login", server])
            .env_remove("BROWSER")
            .output()
            .unwrap()
    };
    assert_usage_error(
        &login("nosuch"),
        "no MCP server named \"nosuch\" (configured: local, remote)",
    );
    assert_usage_error(&login("local"), "local is not an HTTP server");
    assert_usage_error(
        &login("remote"),
        &format!("cannot reach the MCP server `remote` at http://127.0.0.1:{port}/mcp: Connection refused"),
    );
}
