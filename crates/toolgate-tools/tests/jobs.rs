//! Background jobs with the real tools: `exec_shell` with `"background": true` starts two HTTP
//! servers (one in the background of the other) on loopback ports this test picks; the call
//! answers at once; the next call fetches from one (`fetch_url`, its address allowed); `job_output`
//! shows the server's log; `job_kill` ends the whole tree, so neither port answers any more.

mod common;

use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::permit::DenyAll;
use toolgate_core::{Answer, Engine, EngineConfig, Format, Registry, Session, TurnOptions};
use toolgate_tools::ToolsConfig;
use toolgate_tools::fetch::FetchConfig;
use toolgate_tools::netguard::Guard;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn engine() -> Arc<Engine> {
    let config = ToolsConfig {
        fetch: FetchConfig {
            guard: Guard {
                allow_private_network: false,
                allow_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            },
            ..FetchConfig::default()
        },
        ..ToolsConfig::default()
    };
    let mut registry = Registry::new();
    for t in toolgate_tools::builtin_tools_with(&config) {
        registry.register(t);
    }
    Arc::new(Engine::new(registry, EngineConfig::default()))
}

async fn call(engine: &Arc<Engine>, session: &Arc<Session>, id: &str, tool: &str, args: Value) -> (bool, Value) {
    let answer = Answer::parse(
        Format::Openai,
        &json!({"role": "assistant", "tool_calls": [
            {"id": id, "type": "function", "function": {"name": tool, "arguments": args.to_string()}}
        ]}),
    )
    .unwrap();
    let turn = engine.run_turn(session, &answer, TurnOptions::default()).await;
    let entry = turn.outcomes[0].entry().expect("a result");
    (!entry.is_error, entry.content.clone())
}

fn answers(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[tokio::test]
async fn a_background_server_is_fetched_from_logged_and_killed_with_its_whole_tree() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("index.txt"), "served from the workspace\n").unwrap();
    let engine = engine();
    let session = common::session(
        &engine,
        ws.path(),
        &["exec_shell", "fetch_url", "job_kill"],
        &[],
        false,
        Arc::new(DenyAll),
    );
    let (main, child) = (free_port(), free_port());
    let command = format!(
        "python3 -u -m http.server {child} --bind 127.0.0.1 & exec python3 -u -m http.server {main} --bind 127.0.0.1"
    );
    let (ok, started) = call(
        &engine,
        &session,
        "c1",
        "exec_shell",
        json!({"command": command, "background": true}),
    )
    .await;
    assert!(ok, "{started}");
    assert_eq!(started["state"], "running");
    let id = started["job_id"].as_str().unwrap().to_owned();
    let job = engine.jobs().get(session.id(), &id).expect("the job");

    // Both servers say they serve (their own output, as it comes).
    while job.read(Some(0), 1 << 16).text.matches("Serving HTTP").count() < 2 {
        let more = job.output_bytes() + 1;
        let came = job.wait_for_output(more, Duration::from_secs(30)).await;
        assert!(came, "the servers did not start: {}", job.read(Some(0), 1 << 16).text);
    }

    let (ok, fetched) = call(
        &engine,
        &session,
        "c2",
        "fetch_url",
        json!({"url": format!("http://127.0.0.1:{main}/index.txt")}),
    )
    .await;
    assert!(ok, "{fetched}");
    assert!(fetched.to_string().contains("served from the workspace"), "{fetched}");

    // The log line of that request, through job_output.
    let before = job.output_bytes();
    if !job.read(Some(0), 1 << 16).text.contains("GET /index.txt") {
        assert!(job.wait_for_output(before + 1, Duration::from_secs(30)).await);
    }
    let (ok, out) = call(
        &engine,
        &session,
        "c3",
        "job_output",
        json!({"job_id": id, "offset": 0}),
    )
    .await;
    assert!(ok, "{out}");
    assert!(
        out["text"]
            .as_str()
            .unwrap()
            .contains("\"GET /index.txt HTTP/1.1\" 200"),
        "{out}"
    );
    assert_eq!(out["state"], "running");

    let (ok, killed) = call(&engine, &session, "c4", "job_kill", json!({"job_id": id})).await;
    assert!(ok, "{killed}");
    assert_eq!(killed["killed"], true);
    assert_eq!(killed["state"], "killed");
    assert!(!answers(main), "the server the shell ran still answers");
    assert!(!answers(child), "the server it left in the background still answers");

    let (ok, status) = call(&engine, &session, "c5", "job_status", json!({"job_id": id})).await;
    assert!(ok);
    assert_eq!(status["state"], "killed");
    let (ok, missing) = call(&engine, &session, "c6", "job_status", json!({"job_id": "jnosuchjob"})).await;
    assert!(!ok);
    assert!(
        missing.to_string().contains(&id),
        "the refusal names the session's jobs: {missing}"
    );
}

#[tokio::test]
async fn a_job_is_invisible_to_another_session_and_ends_with_its_own() {
    let ws = tempfile::tempdir().unwrap();
    let engine = engine();
    let mine = common::session(&engine, ws.path(), &["exec_shell"], &[], false, Arc::new(DenyAll));
    let theirs = common::session(&engine, ws.path(), &["job_kill"], &[], false, Arc::new(DenyAll));
    let (ok, started) = call(
        &engine,
        &mine,
        "c1",
        "exec_shell",
        json!({"command": "echo up; exec sleep 600", "background": true}),
    )
    .await;
    assert!(ok, "{started}");
    let id = started["job_id"].as_str().unwrap().to_owned();
    let (ok, refused) = call(&engine, &theirs, "c2", "job_kill", json!({"job_id": id})).await;
    assert!(!ok, "{refused}");
    let job = engine.jobs().get(mine.id(), &id).unwrap();
    assert!(job.running());
    mine.kill();
    assert!(job.wait(Duration::from_secs(30)).await);
    assert_eq!(job.status(false)["state"], "killed");
}
