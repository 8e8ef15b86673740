//! Background jobs through the gateway's REST face: a job started by one request outlives it and
//! is seen by the next requests of its session (`job_status`, `/v1/jobs`), not by another
//! principal's; `toolgate_jobs_running` counts it; `job_kill` ends it.

mod common;

use common::{serve, workspace};
use serde_json::{Value, json};

const CLIENTS: [&str; 2] = ["alice=alice-token-1", "bob=bob-token-1"];

async fn execute(addr: &str, token: &str, session: &str, id: &str, tool: &str, args: Value) -> Value {
    let answer = json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]});
    let v: Value = reqwest::Client::new()
        .post(format!("http://{addr}/v1/execute?session={session}"))
        .bearer_auth(token)
        .json(&answer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let content = v["messages"][1]["content"].as_str().unwrap_or_else(|| panic!("{v}"));
    serde_json::from_str(content).unwrap_or_else(|_| json!(content))
}

async fn get(addr: &str, token: &str, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

async fn jobs_running(addr: &str) -> String {
    let text = get(addr, "alice-token-1", "/metrics").await.text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with("toolgate_jobs_running "))
        .unwrap_or_else(|| panic!("no jobs gauge in {text}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_outlives_its_request_and_is_followed_listed_counted_and_killed() {
    let ws = workspace();
    let (_guard, addr) = serve(
        ws.path(),
        None,
        &["--client", CLIENTS[0], "--client", CLIENTS[1]],
        &[("TOOLGATE_PERMISSIONS_ALLOW", r#"["exec_shell", "job_kill"]"#)],
    );
    let started = execute(
        &addr,
        "alice-token-1",
        "work",
        "c1",
        "exec_shell",
        json!({"command": "echo ready; exec sleep 600", "background": true}),
    )
    .await;
    assert_eq!(started["state"], "running", "{started}");
    let id = started["job_id"].as_str().unwrap().to_owned();
    assert_eq!(jobs_running(&addr).await, "toolgate_jobs_running 1");

    // The next request of the session sees it; the REST list too.
    let status = execute(
        &addr,
        "alice-token-1",
        "work",
        "c2",
        "job_status",
        json!({"job_id": id}),
    )
    .await;
    assert_eq!(status["state"], "running", "{status}");
    let listed: Value = get(&addr, "alice-token-1", "/v1/jobs?session=work")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["jobs"][0]["job_id"], id.as_str(), "{listed}");
    // Another principal's session of the same name is another session.
    let theirs: Value = get(&addr, "bob-token-1", "/v1/jobs?session=work")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["jobs"], json!([]), "{theirs}");
    let refused = execute(&addr, "bob-token-1", "work", "c3", "job_kill", json!({"job_id": id})).await;
    assert!(refused.to_string().contains("there is no job"), "{refused}");
    assert!(get(&addr, "alice-token-1", "/v1/jobs").await.status().is_client_error());

    let killed = execute(&addr, "alice-token-1", "work", "c4", "job_kill", json!({"job_id": id})).await;
    assert_eq!(killed["state"], "killed", "{killed}");
    assert_eq!(jobs_running(&addr).await, "toolgate_jobs_running 0");
    // Its journal row says how it ended.
    let audit: Value = get(&addr, "alice-token-1", "/v1/audit?session=work")
        .await
        .json()
        .await
        .unwrap();
    let row = audit["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["call_id"] == "c1")
        .cloned()
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(row["outcome"], "canceled", "{row}");
    assert_eq!(row["job"]["id"], id.as_str());
    assert_eq!(row["job"]["state"], "killed");
    assert_eq!(row["job"]["output_bytes"], 6);
}
