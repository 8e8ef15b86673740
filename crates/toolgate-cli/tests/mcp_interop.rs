//! `toolgate serve` between software nobody here wrote: the reference servers "everything"
//! (stdio and streamable HTTP) and mcp-server-time (Python, stdio) as upstreams, driven by the
//! official Python SDK's clients, 1.x and 2.x, over streamable HTTP and over stdio: list the
//! tools, call one allowed, one denied (`isError` with the error contract), one that times out.
//!
//! `scripts/peers.sh` installs the peers; without them the test is skipped with a message,
//! except under `CI=true`, where it fails.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{Guard, peer, xdg_dir};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts server-everything on streamable HTTP and waits for its "listening" line.
fn everything_http(bin: &PathBuf) -> (Guard, String) {
    let port = free_port();
    let mut child = Command::new(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines.next().expect("server-everything exited").unwrap();
        if line.contains("listening on port") {
            break;
        }
    }
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (Guard(child), format!("http://127.0.0.1:{port}/mcp"))
}

fn config(dir: &Path, everything: &Path, time: &Path, http_url: &str) -> PathBuf {
    let text = format!(
        r#"
[permissions]
allow = ["every__echo", "time__get_current_time", "web__get-sum", "every__trigger-long-running-operation"]
deny = ["every__get-sum"]

[mcp_servers.every]
command = {everything:?}
args = ["stdio"]
tool_timeout_secs = 1.5

[mcp_servers.time]
command = {time:?}
args = ["--local-timezone", "UTC"]

[mcp_servers.web]
url = {http_url:?}
"#,
        everything = everything.display().to_string(),
        time = time.display().to_string(),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn toolgate(dir: &std::path::Path, config: &PathBuf) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("--config")
        .arg(config)
        .arg("--workspace")
        .arg(dir)
        .arg("--store")
        .arg(format!("sqlite://{}", dir.join("state.db").display()))
        .env("XDG_CONFIG_HOME", xdg_dir(dir, "config"))
        .env("XDG_DATA_HOME", xdg_dir(dir, "data"))
        .env_remove("RUST_LOG");
    cmd
}

const CALLS: &[(&str, &str)] = &[
    ("every__echo", r#"{"message": "hello from python"}"#),
    ("time__get_current_time", r#"{"timezone": "UTC"}"#),
    ("web__get-sum", r#"{"a": 2, "b": 3}"#),
    ("every__get-sum", r#"{"a": 2, "b": 3}"#),
    (
        "every__trigger-long-running-operation",
        r#"{"duration": 5, "steps": 5}"#,
    ),
];

fn drive(python: &PathBuf, target: &[String]) -> Value {
    let calls: Vec<(String, String)> = CALLS.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect();
    drive_calls(python, &calls, target)
}

fn drive_calls(python: &PathBuf, calls: &[(String, String)], target: &[String]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mcp_client.py");
    let mut cmd = Command::new(python);
    cmd.arg(script);
    for (name, args) in calls {
        cmd.args(["--call", name, args]);
    }
    cmd.args(target);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn check(out: &Value, how: &str) {
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["every__echo", "time__get_current_time", "web__get-sum", "read_file"] {
        assert!(tools.contains(&t), "{how}: {t} missing from {tools:?}");
    }
    let calls = out["calls"].as_array().unwrap();
    let error_type = |i: usize| -> String {
        let text = calls[i]["text"].as_str().unwrap();
        serde_json::from_str::<Value>(text)
            .map(|v| v["error"]["type"].as_str().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    assert_eq!(calls[0]["isError"], false, "{how}: {}", calls[0]);
    assert!(
        calls[0]["text"].as_str().unwrap().contains("hello from python"),
        "{how}"
    );
    assert_eq!(calls[1]["isError"], false, "{how}: {}", calls[1]);
    assert!(
        calls[1]["text"].as_str().unwrap().contains("UTC"),
        "{how}: {}",
        calls[1]
    );
    assert_eq!(calls[2]["isError"], false, "{how}: {}", calls[2]);
    assert!(calls[2]["text"].as_str().unwrap().contains('5'), "{how}: {}", calls[2]);
    assert_eq!(calls[3]["isError"], true, "{how}");
    assert_eq!(error_type(3), "permission_denied", "{how}: {}", calls[3]);
    assert_eq!(calls[4]["isError"], true, "{how}");
    assert_eq!(error_type(4), "timeout", "{how}: {}", calls[4]);
}

#[test]
fn python_clients_drive_the_gateway_over_http_and_stdio() {
    let (Some(everything), Some(time), Some(py1), Some(py2)) = (
        peer("TOOLGATE_MCP_EVERYTHING"),
        peer("TOOLGATE_MCP_TIME"),
        peer("TOOLGATE_MCP_PY1"),
        peer("TOOLGATE_MCP_PY2"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_web, url) = everything_http(&everything);
    let config = config(dir.path(), &everything, &time, &url);

    // Streamable HTTP.
    let mut serve = toolgate(dir.path(), &config)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = serve.stderr.take().unwrap();
    let serve = Guard(serve);
    let mut lines = BufReader::new(stderr).lines();
    let endpoint = loop {
        let line = lines.next().expect("toolgate serve exited").unwrap();
        if let Some(rest) = line.split("MCP at ").nth(1) {
            break rest.split(',').next().unwrap().to_owned();
        }
        assert!(!line.contains("could not be started"), "{line}");
    };
    std::thread::spawn(move || for _ in lines {});
    for python in [&py1, &py2] {
        let out = drive(python, &["--url".into(), endpoint.clone()]);
        check(&out, &format!("mcp {} over HTTP", out["version"]));
    }
    drop(serve);

    // Stdio: the client starts `toolgate serve --stdio` itself.
    for python in [&py1, &py2] {
        let mut target = vec!["--stdio".to_owned(), env!("CARGO_BIN_EXE_toolgate").to_owned()];
        target.extend([
            "--config".into(),
            config.display().to_string(),
            "--workspace".into(),
            dir.path().display().to_string(),
            "--store".into(),
            "memory".into(),
            "serve".into(),
            "--stdio".into(),
        ]);
        let out = drive(python, &target);
        check(&out, &format!("mcp {} over stdio", out["version"]));
    }
}

/// Starts `toolgate serve` over HTTP and returns it with its MCP endpoint.
fn serve_http(dir: &Path, config: &PathBuf, approver: &str) -> (Guard, String) {
    let mut serve = toolgate(dir, config)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("TOOLGATE_SERVE_APPROVER_TOKEN", approver)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = serve.stderr.take().unwrap();
    let serve = Guard(serve);
    let mut lines = BufReader::new(stderr).lines();
    let endpoint = loop {
        let line = lines.next().expect("toolgate serve exited").unwrap();
        if let Some(rest) = line.split("MCP at ").nth(1) {
            break rest.split(',').next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (serve, endpoint)
}

/// Session state across consecutive calls, for both SDK generations: 2.x speaks the stateless
/// 2026-07-28 revision (a fresh server handler per request, no `Mcp-Session-Id`), 1.x keeps a
/// legacy session. A truncated result's `read_result` handle is read by the next call, and an
/// `approve_tool` answer (the tool for the session) to the first write covers the second (which, asked again, would
/// time out: nobody answers a second ask).
#[test]
fn python_clients_keep_their_session_across_calls() {
    let (Some(py1), Some(py2)) = (peer("TOOLGATE_MCP_PY1"), peer("TOOLGATE_MCP_PY2")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let big: String = (0..4_000).map(|i| format!("line {i:05} of the big file\n")).collect();
    std::fs::write(work.join("big.txt"), &big).unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[approval]\ntimeout_ms = 4000\n\n[tools.read_file]\nbudget_bytes = 2048\n",
    )
    .unwrap();
    let approver = "approver-token-for-the-interop-test";
    let (_serve, endpoint) = serve_http(&work, &config, approver);
    let base = endpoint.trim_end_matches("/mcp").to_owned();
    for (python, tag) in [(&py1, "v1"), (&py2, "v2")] {
        let calls: Vec<(String, String)> = vec![
            ("read_file".into(), r#"{"path": "big.txt"}"#.into()),
            (
                "read_result".into(),
                r#"{"handle": "$HANDLE", "offset": 60000, "length": 200}"#.into(),
            ),
            (
                "write_file".into(),
                format!(r#"{{"path": "{tag}-one.txt", "content": "1"}}"#),
            ),
            (
                "write_file".into(),
                format!(r#"{{"path": "{tag}-two.txt", "content": "2"}}"#),
            ),
        ];
        let target = [
            "--approve".to_owned(),
            base.clone(),
            approver.to_owned(),
            "--url".to_owned(),
            endpoint.clone(),
        ];
        let out = drive_calls(python, &calls, &target);
        let how = format!("mcp {}", out["version"]);
        let calls = out["calls"].as_array().unwrap();
        assert!(
            calls[0]["text"].as_str().unwrap().contains("read_result handle="),
            "{how}: {}",
            calls[0]
        );
        assert_eq!(
            calls[1]["isError"], false,
            "{how}: the handle of the call before: {}",
            calls[1]
        );
        assert!(
            calls[1]["text"].as_str().unwrap().contains("of the big file"),
            "{how}: {}",
            calls[1]
        );
        for (i, file) in [(2, "one"), (3, "two")] {
            assert_eq!(calls[i]["isError"], false, "{how}: write {file}: {}", calls[i]);
            assert!(work.join(format!("{tag}-{file}.txt")).exists(), "{how}: {file}");
        }
    }
    // Over stdio (asks are refused there: no queue), a handle is read by the next call too.
    for python in [&py1, &py2] {
        let calls: Vec<(String, String)> = vec![
            ("read_file".into(), r#"{"path": "big.txt"}"#.into()),
            (
                "read_result".into(),
                r#"{"handle": "$HANDLE", "offset": 60000, "length": 200}"#.into(),
            ),
        ];
        let mut target = vec!["--stdio".to_owned(), env!("CARGO_BIN_EXE_toolgate").to_owned()];
        target.extend(
            [
                "--config",
                &config.display().to_string(),
                "--workspace",
                &work.display().to_string(),
                "--store",
                "memory",
                "serve",
                "--stdio",
            ]
            .map(str::to_owned),
        );
        let out = drive_calls(python, &calls, &target);
        let calls = out["calls"].as_array().unwrap();
        assert_eq!(
            calls[1]["isError"], false,
            "mcp {} over stdio: {}",
            out["version"], calls[1]
        );
    }
}

/// `[approval] via = "elicitation"` for both SDK generations, over HTTP and stdio: 1.x is sent
/// `elicitation/create` while its call waits; 2.x (2026-07-28, which forbids requests from the
/// server) is answered with an `InputRequiredResult` and retries with its answer. Either way an
/// `approve_tool` answer to the first write covers the second (one form, not two), and a
/// rejection's reason reaches the client while the tool never runs.
#[test]
fn python_clients_approve_by_elicitation_across_calls() {
    let (Some(py1), Some(py2)) = (peer("TOOLGATE_MCP_PY1"), peer("TOOLGATE_MCP_PY2")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, "[approval]\nvia = \"elicitation\"\ntimeout_ms = 20000\n").unwrap();
    let (_serve, endpoint) = serve_http(&work, &config, "approver-token-for-the-elicitation-test");
    let stdio: Vec<String> = [
        "--stdio",
        env!("CARGO_BIN_EXE_toolgate"),
        "--config",
        &config.display().to_string(),
        "--workspace",
        &work.display().to_string(),
        "--store",
        "memory",
        "serve",
        "--stdio",
    ]
    .map(str::to_owned)
    .to_vec();
    let answers = [
        "--elicit".to_owned(),
        r#"{"decision": "approve_tool"}"#.to_owned(),
        "--elicit".to_owned(),
        r#"{"decision": "reject", "reason": "not on a friday"}"#.to_owned(),
    ];
    for (python, py) in [(&py1, "py1"), (&py2, "py2")] {
        for (transport, target) in [
            ("http", vec!["--url".to_owned(), endpoint.clone()]),
            ("stdio", stdio.clone()),
        ] {
            let tag = format!("{py}-{transport}");
            let calls: Vec<(String, String)> = vec![
                (
                    "write_file".into(),
                    format!(r#"{{"path": "{tag}-one.txt", "content": "1"}}"#),
                ),
                (
                    "write_file".into(),
                    format!(r#"{{"path": "{tag}-two.txt", "content": "2"}}"#),
                ),
                (
                    "exec_shell".into(),
                    format!(r#"{{"command": "echo 3 > {tag}-three.txt"}}"#),
                ),
            ];
            let mut args = answers.to_vec();
            args.extend(target);
            let out = drive_calls(python, &calls, &args);
            let how = format!("mcp {} over {transport}", out["version"]);
            let calls = out["calls"].as_array().unwrap();
            let asked = out["asked"].as_array().unwrap();
            assert_eq!(
                asked.len(),
                2,
                "{how}: one form per ask, the grant covering the second write: {out}"
            );
            assert!(asked[0].as_str().unwrap().contains("write_file"), "{how}: {}", asked[0]);
            assert!(asked[1].as_str().unwrap().contains("exec_shell"), "{how}: {}", asked[1]);
            for (i, file) in [(0, "one"), (1, "two")] {
                assert_eq!(calls[i]["isError"], false, "{how}: write {file}: {}", calls[i]);
                assert!(work.join(format!("{tag}-{file}.txt")).exists(), "{how}: {file}");
            }
            assert_eq!(calls[2]["isError"], true, "{how}: {}", calls[2]);
            let text = calls[2]["text"].as_str().unwrap();
            assert!(
                text.contains("rejected_by_user") && text.contains("not on a friday"),
                "{how}: {text}"
            );
            assert!(
                !work.join(format!("{tag}-three.txt")).exists(),
                "{how}: the rejected command ran"
            );
        }
    }
}

/// A list larger than one server-sent event a client takes (1 MiB): an upstream built on the
/// official SDK's FastMCP with 1,500 tools of ~900 bytes each, behind `toolgate serve`, listed by
/// both SDK generations over HTTP and stdio, page after page, every tool once; and a call to the
/// last of them runs it.
#[test]
fn python_clients_list_thousands_of_upstream_tools_in_pages() {
    let (Some(py1), Some(py2)) = (peer("TOOLGATE_MCP_PY1"), peer("TOOLGATE_MCP_PY2")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let server = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/many_tools_server.py");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[permissions]\nallow = [\"many__*\"]\n\n[mcp_servers.many]\ncommand = {:?}\nargs = [{server:?}, \"1500\"]\nstartup_timeout_secs = 120\n",
            py1.display().to_string()
        ),
    )
    .unwrap();
    let (_serve, endpoint) = serve_http(&work, &config, "approver-token-for-the-paging-test");
    let stdio = vec![
        "--stdio".to_owned(),
        env!("CARGO_BIN_EXE_toolgate").to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
        "--workspace".to_owned(),
        work.display().to_string(),
        "--store".to_owned(),
        "memory".to_owned(),
        "serve".to_owned(),
        "--stdio".to_owned(),
    ];
    let calls = vec![("many__tool_01499".to_owned(), r#"{"q": "last"}"#.to_owned())];
    for python in [&py1, &py2] {
        for target in [vec!["--url".to_owned(), endpoint.clone()], stdio.clone()] {
            let out = drive_calls(python, &calls, &target);
            let how = format!("mcp {} {}", out["version"], target[0]);
            let names: Vec<&str> = out["tools"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let upstream: Vec<&&str> = names.iter().filter(|n| n.starts_with("many__")).collect();
            assert_eq!(upstream.len(), 1_500, "{how}");
            let unique: std::collections::HashSet<&&str> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "{how}: a tool came twice");
            assert!(out["pages"].as_u64().unwrap() >= 3, "{how}: {} pages", out["pages"]);
            let call = &out["calls"][0];
            assert_eq!(call["isError"], false, "{how}: {call}");
            assert!(
                call["text"].as_str().unwrap().contains("tool 1499: last"),
                "{how}: {call}"
            );
        }
    }
}
