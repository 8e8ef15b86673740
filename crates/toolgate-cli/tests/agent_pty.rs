//! `toolgate agent` under a pseudo-terminal: the quickstart cassette replays offline and shows the
//! tool lines, the approval prompt with the file's diff, and the final answer; Ctrl-C during a
//! slow command kills it and returns to the prompt, where the session goes on.

mod common;
use common::xdg_dir;
#[path = "../../toolgate-llm/tests/common/mod.rs"]
mod llm_server;

use expectrl::session::OsSession;
use expectrl::{Eof, Expect, Session};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn spawn(ws: &Path, args: &[&str], env: &[(&str, &str)]) -> OsSession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("--workspace").arg(ws).args(["--store", "memory"]).args(args);
    cmd.env("XDG_CONFIG_HOME", xdg_dir(ws, "config"));
    cmd.env("XDG_DATA_HOME", xdg_dir(ws, "data"));
    cmd.env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut session = Session::spawn(cmd).expect("spawn under a pty");
    // Only a bound for a broken build: the test waits on the screen's text itself.
    session.set_expect_timeout(Some(Duration::from_secs(60)));
    session
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_quickstart_replays_with_tool_lines_an_approval_and_the_answer() {
    let ws = tempfile::tempdir().unwrap();
    for f in ["notes.txt", "toolgate.toml", ".gitignore"] {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/demo")
            .join(f);
        std::fs::copy(from, ws.path().join(f)).unwrap();
    }
    let cassette = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.cassette.jsonl");
    let mut p = spawn(ws.path(), &["agent", "--replay", cassette.to_str().unwrap()], &[]);
    let before = p.expect("answer: ").expect("the approval prompt");
    let screen = text(before.before());
    assert!(
        screen.contains("Turn notes.txt into a checklist"),
        "the recorded prompt is shown: {screen}"
    );
    assert!(screen.contains("✓") && screen.contains("list_directory"), "{screen}");
    assert!(screen.contains("read_file") && screen.contains("notes.txt"), "{screen}");
    assert!(
        screen.contains("readonly_hint"),
        "the verdict's source is on the line: {screen}"
    );
    assert!(screen.contains("write_file wants to run"), "{screen}");
    assert!(
        screen.contains("+- [ ] buy milk"),
        "the diff is shown before approval: {screen}"
    );
    p.send("y").unwrap();
    let rest = p.expect(Eof).expect("the run ends");
    let rest = text(rest.as_bytes());
    assert!(rest.contains("write_file") && rest.contains("user_approved"), "{rest}");
    assert!(
        rest.contains("I turned the three notes into a checklist in TODO.md."),
        "{rest}"
    );
    assert!(
        std::fs::read_to_string(ws.path().join("TODO.md"))
            .unwrap()
            .contains("- [ ] renew passport")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_kills_a_slow_command_and_returns_to_the_prompt() {
    let ws = tempfile::tempdir().unwrap();
    let call = |cmd: &str| {
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
               "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "exec_shell",
               "arguments": json!({"command": cmd}).to_string()}}]}}]})
    };
    let answer = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Back again."}}]});
    let server = llm_server::serve(vec![
        llm_server::Reply::json(200, &call("echo started > started; sleep 60")),
        llm_server::Reply::json(200, &answer),
    ])
    .await;
    let base = format!("{}/v1", server.base);
    let ws_path = ws.path().to_owned();
    let screen = tokio::task::spawn_blocking(move || {
        let mut p = spawn(
            &ws_path,
            &["--yes", "agent", "--model", "openai:gpt-4.1", "--base-url", &base],
            &[("OPENAI_API_KEY", "sk-test"), ("TOOLGATE_AGENT_STREAM", "false")],
        );
        p.expect("› ").expect("the prompt");
        p.send_line("run the slow job").unwrap();
        // Wait for the command to be running (its spinner shows after a second).
        p.expect("exec_shell").expect("the running call");
        let started = ws_path.join("started");
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while !started.exists() {
            assert!(std::time::Instant::now() < until, "the command never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        p.send([3u8]).unwrap();
        let stopped = p.expect("stopped_by_user").expect("the run stops");
        let mut screen = text(stopped.before());
        p.expect("› ").expect("back at the prompt");
        p.send_line("go on").unwrap();
        let answered = p.expect("Back again.").expect("the session continues");
        screen.push_str(&text(answered.before()));
        p.expect("› ").expect("the prompt again");
        p.send_line("/exit").unwrap();
        p.expect(Eof).expect("exit");
        screen
    })
    .await
    .unwrap();
    assert!(screen.contains("stopping"), "{screen}");
    assert!(screen.contains("canceled"), "the killed call's line says so: {screen}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let results: Vec<_> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results.len(), 1, "the killed call has one result");
    assert!(results[0]["content"].as_str().unwrap().contains("canceled"));
}

/// In a terminal session a background job outlives the run that started it: a line after the run
/// shows it running, `/jobs` lists it, `/output ID` shows what it printed, `/kill ID` ends it.
#[tokio::test(flavor = "multi_thread")]
async fn a_background_job_is_shown_after_the_run_and_followed_and_killed_at_the_prompt() {
    let ws = tempfile::tempdir().unwrap();
    let call = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
           "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "exec_shell",
           "arguments": json!({"command": "echo server is up; exec sleep 600", "background": true}).to_string()}}]}}]});
    let answer = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "It runs in the background."}}]});
    let server = llm_server::serve(vec![
        llm_server::Reply::json(200, &call),
        llm_server::Reply::json(200, &answer),
    ])
    .await;
    let base = format!("{}/v1", server.base);
    let ws_path = ws.path().to_owned();
    let screen = tokio::task::spawn_blocking(move || {
        let mut p = spawn(
            &ws_path,
            &["--yes", "agent", "--model", "openai:gpt-4.1", "--base-url", &base],
            &[("OPENAI_API_KEY", "sk-test"), ("TOOLGATE_AGENT_STREAM", "false")],
        );
        p.expect("› ").expect("the prompt");
        p.send_line("start the server").unwrap();
        p.expect("It runs in the background.").expect("the answer");
        let line = p.expect("/kill").expect("the job's line after the run");
        let mut screen = text(line.before());
        let id = regex::Regex::new(r"j[0-9a-f]{12}")
            .unwrap()
            .find(&screen)
            .map(|m| m.as_str().to_owned())
            .unwrap_or_else(|| panic!("no job id on the screen: {screen}"));
        p.expect("› ").expect("the prompt again");
        // Until the job has printed its line (it runs on its own; the list says how much).
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            p.send_line("/jobs").unwrap();
            let listed = text(p.expect("› ").expect("the list").before());
            screen.push_str(&listed);
            if listed.contains("running for") && !listed.contains(", 0 bytes of output") {
                break;
            }
            assert!(std::time::Instant::now() < until, "the job printed nothing: {screen}");
        }
        p.send_line(format!("/output {id}")).unwrap();
        let output = p.expect("› ").expect("the output");
        screen.push_str(&text(output.before()));
        p.send_line(format!("/kill {id}")).unwrap();
        let killed = p.expect("killed").expect("the kill");
        screen.push_str(&text(killed.before()));
        p.expect("› ").expect("the prompt after the kill");
        p.send_line("/jobs").unwrap();
        let after = p.expect("› ").expect("the list after the kill");
        screen.push_str("\n--- after ---\n");
        screen.push_str(&text(after.before()));
        p.send_line("/exit").unwrap();
        p.expect(Eof).expect("exit");
        (screen, id)
    })
    .await
    .unwrap();
    let (screen, id) = screen;
    let (before, after) = screen.split_once("--- after ---").unwrap();
    assert!(before.contains(&format!("{id} exec_shell running")), "{screen}");
    assert!(
        before.contains("server is up"),
        "/output shows what it printed: {screen}"
    );
    assert!(after.contains(&format!("{id} exec_shell killed")), "{screen}");
}

/// POSTs one call to the gateway's REST face in session `w`; the tool message's content.
async fn rest_call(addr: &str, id: &str, args: serde_json::Value) -> serde_json::Value {
    let answer = json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "write_file", "arguments": args.to_string()}}]});
    let v: serde_json::Value = reqwest::Client::new()
        .post(format!("http://{addr}/v1/execute?session=w"))
        .bearer_auth("rest-token-1")
        .json(&answer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["messages"][1].clone()
}

/// `toolgate approvals --watch` answers a gateway's queue with the agent's prompt and diff: an
/// ask answered with `s` lets the REST caller's call run, and the next call like it is not asked.
#[tokio::test(flavor = "multi_thread")]
async fn the_terminal_approver_answers_a_gateway_s_queue_and_a_session_grant_holds() {
    let ws = tempfile::tempdir().unwrap();
    let envs = [("TOOLGATE_SERVE_APPROVER_TOKEN", "approver-token-1")];
    let (_gateway, addr) = common::serve(ws.path(), None, &["--client", "rest=rest-token-1"], &envs);
    let first = {
        let addr = addr.clone();
        tokio::spawn(async move {
            rest_call(
                &addr,
                "c1",
                json!({"path": "out.txt", "content": "hello from the queue\n"}),
            )
            .await
        })
    };
    let ws_path = ws.path().to_owned();
    let url = format!("http://{addr}");
    let (p, asked) = tokio::task::spawn_blocking(move || {
        let mut p = spawn(&ws_path, &["approvals", "--watch", "--url", &url], &envs);
        let asked = text(p.expect("answer: ").expect("the ask is shown").before());
        (p, asked)
    })
    .await
    .unwrap();
    assert!(asked.contains("write_file wants to run"), "{asked}");
    assert!(asked.contains("+hello from the queue"), "the diff is shown: {asked}");
    assert!(
        asked.contains("principal rest") && asked.contains("client rest"),
        "who asks: {asked}"
    );
    let (p, screen) = tokio::task::spawn_blocking(move || {
        let mut screen = String::new();
        let mut p = p;
        p.send("s").unwrap();
        let answered = p.expect("answered").expect("the answer is sent");
        screen.push_str(&text(answered.before()));
        (p, screen)
    })
    .await
    .unwrap();
    let message = first.await.unwrap();
    assert!(
        !message.to_string().contains("\"error\""),
        "the approved call ran: {message}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "hello from the queue\n"
    );
    // The same call again in the session: the grant answers, nobody is asked.
    let second = rest_call(
        &addr,
        "c2",
        json!({"path": "out.txt", "content": "hello from the queue\n"}),
    )
    .await;
    assert!(!second.to_string().contains("\"error\""), "{second}");
    let audit: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{addr}/v1/audit?session=w"))
        .bearer_auth("rest-token-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let source = |id: &str| {
        audit["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["call_id"] == id)
            .map(|r| r["source"].clone())
    };
    assert_eq!(source("c1"), Some(json!("user_approved_session")), "{audit}");
    assert_eq!(source("c2"), Some(json!("session_permissions_allow")), "{audit}");
    assert!(screen.contains('s'), "the key is echoed: {screen}");
    drop(p);
}
