//! The loop detector and the consecutive-error cap are session state: they hold across
//! `exec --session` processes and REST requests of one named session; the gateway's default is
//! off (its clients are programs too), and `[engine] loop_threshold` sets it for every face.

mod common;

use common::{serve, toolgate, workspace};
use serde_json::{Value, json};

const TOKEN: &str = "poller-token-1";
const CLIENT: &str = "poller=poller-token-1";

fn read_answer(id: &str) -> Value {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"hello.txt\"}"}}]})
}

fn loop_detected(v: &Value) -> bool {
    v.to_string().contains("loop_detected")
}

#[test]
fn the_loop_detector_holds_across_exec_processes_of_a_named_session() {
    let ws = workspace();
    let mut seen = Vec::new();
    for n in 0..3 {
        let out = toolgate(ws.path())
            .args(["--session", "poller", "exec"])
            .write_stdin(read_answer(&format!("c{n}")).to_string())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        seen.push(loop_detected(&v));
    }
    assert_eq!(
        seen,
        [false, false, true],
        "the third identical batch of the session is refused"
    );
    // Another session starts fresh.
    let out = toolgate(ws.path())
        .args(["--session", "other", "exec"])
        .write_stdin(read_answer("d0").to_string())
        .output()
        .unwrap();
    assert!(!loop_detected(&serde_json::from_slice(&out.stdout).unwrap()));
}

async fn polls(addr: &str, session: &str, n: usize) -> Vec<bool> {
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    for i in 0..n {
        let v: Value = http
            .post(format!("http://{addr}/v1/execute?session={session}"))
            .bearer_auth(TOKEN)
            .json(&read_answer(&format!("p{i}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        seen.push(loop_detected(&v));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_does_not_refuse_a_polling_client_by_default() {
    let ws = workspace();
    let (_guard, addr) = serve(ws.path(), None, &["--client", CLIENT], &[]);
    assert_eq!(polls(&addr, "poll", 6).await, [false; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_threshold_holds_across_rest_requests_of_a_session() {
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(&config, "[engine]\nloop_threshold = 3\n").unwrap();
    let (_guard, addr) = serve(ws.path(), Some(&config), &["--client", CLIENT], &[]);
    assert_eq!(polls(&addr, "poll", 3).await, [false, false, true]);
}
