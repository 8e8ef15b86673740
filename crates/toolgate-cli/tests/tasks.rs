//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) in `toolgate serve`: a client that
//! declared the extension gets a task for an `exec_shell` call; the task is in the store, so
//! another replica on the same SQLite file answers `tasks/get` and takes `tasks/cancel`, which
//! kills the command on the replica running it and records `canceled` in the journal; another
//! principal does not see the task; a client without the extension gets a plain result; an
//! upstream server's tasks are followed, and cancelled, through the gateway; the official Python
//! SDK's client (2.x, through its own extension interface) follows and cancels tasks.

mod common;
use common::{Guard, peer, serve_on, workspace};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use toolgate_mcp::rmcp;
use toolgate_mcp::rmcp::ServiceExt;
use toolgate_mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
    GetTaskResult, Implementation, TaskStatus,
};
use toolgate_mcp::rmcp::service::RunningService;
use toolgate_mcp::rmcp::transport::StreamableHttpClientTransport;
use toolgate_mcp::rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

const ALICE: &str = "alice-token-1";
const BOB: &str = "bob-token-2";
const APPROVER: &str = "approver-token-3";

type Client = RunningService<rmcp::RoleClient, ClientConfig>;

/// An MCP client of `addr` with `token`, declaring the tasks extension or not.
async fn client(addr: &str, token: &str, tasks: bool) -> Client {
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    let mut info = ClientConfig::default();
    info.capabilities = capabilities;
    info.client_info = Implementation::new("tasks-test", "1");
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(token);
    info.serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("MCP handshake")
}

fn shell(command: &str) -> CallToolRequestParams {
    let mut args = serde_json::Map::new();
    args.insert("command".into(), json!(command));
    CallToolRequestParams::new("exec_shell").with_arguments(args)
}

/// Polls `tasks/get` until the task reaches a terminal status (bounded).
async fn until_ended(client: &Client, id: &str) -> GetTaskResult {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let got = client.get_task(GetTaskParams::new(id)).await.expect("tasks/get");
        if got.task.status().is_terminal() {
            return got;
        }
        assert!(Instant::now() < until, "task {id} did not end: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for a file the command writes when it has started (bounded).
async fn until_file(path: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_owned();
        }
        assert!(Instant::now() < until, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process whose command line holds `needle` runs (not a zombie). The command's own
/// `$$` is no help: the shell may see another pid namespace.
fn running(needle: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|entry| {
        let path = entry.path();
        let cmdline = std::fs::read(path.join("cmdline")).unwrap_or_default();
        let zombie = std::fs::read_to_string(path.join("stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"));
        !zombie && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle)
    })
}

async fn audit(addr: &str, tool: &str) -> Vec<Value> {
    let rows: Value = reqwest::Client::new()
        .get(format!("http://{addr}/v1/audit?tool={tool}"))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    rows["rows"].as_array().cloned().unwrap_or_default()
}

fn text_of(result: &GetTaskResult) -> String {
    serde_json::to_value(result).unwrap()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn replica(ws: &Path, db: &str, config: &Path) -> (Guard, String) {
    serve_on(
        ws,
        db,
        Some(config),
        &["--client", &format!("alice={ALICE}"), "--client", &format!("bob={BOB}")],
        &[("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_on_one_replica_and_is_read_and_cancelled_through_another() {
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(&config, "[permissions]\nallow = [\"exec_shell\"]\n").unwrap();
    let db = format!("sqlite://{}", ws.path().join("state.db").display());
    let (_a, addr_a) = replica(ws.path(), &db, &config);
    let (_b, addr_b) = replica(ws.path(), &db, &config);
    let on_a = client(&addr_a, ALICE, true).await;
    let on_b = client(&addr_b, ALICE, true).await;

    // A quick command: a task, completed with the command's output.
    let created = match on_a.call_tool_once(shell("echo made-by-a-task")).await.unwrap() {
        CallToolResponse::Task(t) => t,
        other => panic!("a task was expected: {other:?}"),
    };
    let done = until_ended(&on_b, &created.task.task_id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed);
    assert!(text_of(&done).contains("made-by-a-task"), "{done:?}");

    // A slow command: the other replica reads it running, then cancels it.
    let out = ws.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Not beside gateway.toml and state.db: the sandbox lets no new entry be made there.
    let marker = out.join("started");
    let command = format!("echo started > '{}'; exec sleep 1201", marker.display());
    let created = match on_a.call_tool_once(shell(&command)).await.unwrap() {
        CallToolResponse::Task(t) => t,
        other => panic!("a task was expected: {other:?}"),
    };
    let id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    until_file(&marker).await;
    assert!(running("sleep 1201"), "the command runs");
    let seen = on_b.get_task(GetTaskParams::new(id.clone())).await.unwrap();
    assert_eq!(
        seen.task.status(),
        TaskStatus::Working,
        "replica B reads the task from the store"
    );

    // Another principal: the task does not exist for Bob, on either replica.
    let bob = client(&addr_b, BOB, true).await;
    let err = bob.get_task(GetTaskParams::new(id.clone())).await.unwrap_err();
    assert!(
        err.to_string().contains("-32602") || err.to_string().contains("Unknown task"),
        "{err}"
    );
    assert!(bob.cancel_task(CancelTaskParams::new(id.clone())).await.is_err());
    assert_eq!(
        on_b.get_task(GetTaskParams::new(id.clone()))
            .await
            .unwrap()
            .task
            .status(),
        TaskStatus::Working,
        "Bob's cancel did nothing"
    );

    // Alice cancels through B; A stops the command.
    on_b.cancel_task(CancelTaskParams::new(id.clone())).await.unwrap();
    let ended = until_ended(&on_a, &id).await;
    assert_eq!(ended.task.status(), TaskStatus::Cancelled, "{ended:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while running("sleep 1201") {
        assert!(Instant::now() < until, "the cancelled command still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The journal closes the call as canceled.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = audit(&addr_b, "exec_shell").await;
        let row = rows.iter().find(|r| r["arguments"].to_string().contains("sleep 1201"));
        if let Some(row) = row
            && row["outcome"] != "started"
        {
            assert_eq!(row["outcome"], "canceled", "{row}");
            break;
        }
        assert!(
            Instant::now() < until,
            "the cancelled call's row was not closed: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Cancelling an ended task is a no-op; a made-up id is unknown.
    on_a.cancel_task(CancelTaskParams::new(id.clone())).await.unwrap();
    assert_eq!(
        on_a.get_task(GetTaskParams::new(id)).await.unwrap().task.status(),
        TaskStatus::Cancelled
    );
    assert!(on_a.get_task(GetTaskParams::new("no-such-task")).await.is_err());

    // A client without the extension gets the result in the call's response.
    let plain = client(&addr_a, ALICE, false).await;
    match plain.call_tool_once(shell("echo plain")).await.unwrap() {
        CallToolResponse::Complete(result) => {
            assert!(format!("{:?}", result.content).contains("plain"), "{result:?}");
        }
        other => panic!("a plain result was expected: {other:?}"),
    }
    for c in [on_a, on_b, bob, plain] {
        let _ = c.cancel().await;
    }
}

/// A gateway fronting another toolgate (over stdio) whose `exec_shell` answers with tasks: the
/// outer gateway follows the inner task, gives its own client a task for the same call, and a
/// cancel of the outer task cancels the inner one, which kills the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_task_is_followed_and_cancelled_through_the_gateway() {
    let ws = workspace();
    let inner_ws = ws.path().join("inner");
    std::fs::create_dir_all(&inner_ws).unwrap();
    let inner_config = ws.path().join("inner.toml");
    std::fs::write(&inner_config, "[permissions]\nallow = [\"exec_shell\"]\n").unwrap();
    let config = ws.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[permissions]\nallow = [\"inner__exec_shell\"]\n\n[mcp_servers.inner]\ncommand = {:?}\nargs = [\"--config\", {:?}, \"--workspace\", {:?}, \"--store\", \"memory\", \"serve\", \"--stdio\"]\n",
            env!("CARGO_BIN_EXE_toolgate"),
            inner_config.display().to_string(),
            inner_ws.display().to_string(),
        ),
    )
    .unwrap();
    let (_g, addr) = serve_on(
        ws.path(),
        "memory",
        Some(&config),
        &["--client", &format!("alice={ALICE}")],
        &[("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)],
    );
    let alice = client(&addr, ALICE, true).await;
    let mut call = shell("echo from-the-inner-gateway");
    call.name = "inner__exec_shell".into();
    let created = match alice.call_tool_once(call).await.unwrap() {
        CallToolResponse::Task(t) => t,
        other => panic!("a task was expected for a task-capable upstream tool: {other:?}"),
    };
    let done = until_ended(&alice, &created.task.task_id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed, "{done:?}");
    assert!(text_of(&done).contains("from-the-inner-gateway"), "{done:?}");

    let marker = inner_ws.join("started");
    let mut call = shell(&format!("echo started > '{}'; exec sleep 1202", marker.display()));
    call.name = "inner__exec_shell".into();
    let created = match alice.call_tool_once(call).await.unwrap() {
        CallToolResponse::Task(t) => t,
        other => panic!("a task was expected: {other:?}"),
    };
    until_file(&marker).await;
    assert!(running("sleep 1202"));
    alice
        .cancel_task(CancelTaskParams::new(created.task.task_id.clone()))
        .await
        .unwrap();
    let ended = until_ended(&alice, &created.task.task_id).await;
    assert_eq!(ended.task.status(), TaskStatus::Cancelled, "{ended:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while running("sleep 1202") {
        assert!(Instant::now() < until, "the inner command still runs after the cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = alice.cancel().await;
}

/// The official Python SDK 2.x client, declaring the extension through its `ClientExtension`
/// interface: a quick command comes back as a task it follows to `completed`; a slow one it
/// cancels once the command has started, and the command is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_follows_and_cancels_tasks() {
    let Some(python) = peer("TOOLGATE_MCP_PY2") else {
        return;
    };
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(&config, "[permissions]\nallow = [\"exec_shell\"]\n").unwrap();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);
    let marker = work.join("started");
    let slow = json!({"command": format!("echo started > '{}'; exec sleep 1203", marker.display())});
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mcp_tasks.py");
    let url = format!("http://{addr}/mcp");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(["--url", &url])
            .args(["--call", "exec_shell", r#"{"command": "echo from-python"}"#])
            .args(["--call", "exec_shell", &slow.to_string()])
            .arg("--cancel-when")
            .arg(&marker)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out["version"].as_str().unwrap().starts_with("2."), "{out}");
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls[0]["task"], true, "{out}");
    assert_eq!(
        calls[0]["statuses"].as_array().unwrap().last().unwrap(),
        "completed",
        "{out}"
    );
    assert!(calls[0]["text"].as_str().unwrap().contains("from-python"), "{out}");
    assert_eq!(calls[1]["task"], true, "{out}");
    assert_eq!(
        calls[1]["statuses"].as_array().unwrap().last().unwrap(),
        "cancelled",
        "{out}"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while running("sleep 1203") {
        assert!(Instant::now() < until, "the cancelled command still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `[tools.NAME] task` decides per tool: `forbidden` answers in the call's response even for a
/// client with the extension; `required` refuses a client without it (-32021) and makes a task
/// for one with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_setting_of_a_tool_decides_whether_it_runs_as_a_task() {
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[permissions]\nallow = [\"exec_shell\"]\n\n[tools.exec_shell]\ntask = \"forbidden\"\n\n[tools.list_directory]\ntask = \"required\"\n",
    )
    .unwrap();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (_g, addr) = serve_on(
        &work,
        "memory",
        Some(&config),
        &["--client", &format!("alice={ALICE}")],
        &[],
    );
    let with = client(&addr, ALICE, true).await;
    let without = client(&addr, ALICE, false).await;
    assert!(matches!(
        with.call_tool_once(shell("echo plain")).await.unwrap(),
        CallToolResponse::Complete(_)
    ));
    let list = || CallToolRequestParams::new("list_directory").with_arguments(serde_json::Map::new());
    let err = without.call_tool_once(list()).await.unwrap_err();
    assert!(err.to_string().contains("-32021"), "{err}");
    let created = match with.call_tool_once(list()).await.unwrap() {
        CallToolResponse::Task(t) => t,
        other => panic!("a task was expected: {other:?}"),
    };
    assert_eq!(
        until_ended(&with, &created.task.task_id).await.task.status(),
        TaskStatus::Completed
    );
    // A misspelt setting is a config error that names it.
    std::fs::write(&config, "[tools.exec_shell]\ntask = \"sometimes\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--config")
        .arg(&config)
        .args(["--store", "memory", "tools"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2") && stderr.contains("sometimes") && stderr.contains("optional"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    for c in [with, without] {
        let _ = c.cancel().await;
    }
}

/// The official Python SDK 1.x client, whose `session.experimental` speaks the tasks of the
/// 2025-11-25 revision (`tools/call` with `task`, `tasks/get`, `tasks/result`, `tasks/list`,
/// `tasks/cancel`), over streamable HTTP and over stdio: a quick command's result comes from
/// `tasks/result` tied to its task, a slow one is cancelled and its command is gone, each ended
/// task is told in `notifications/tasks/status`, and `tasks/list` lists the session's tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_1_client_runs_2025_11_25_tasks_over_http_and_stdio() {
    let Some(python) = peer("TOOLGATE_MCP_PY1") else {
        return;
    };
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(&config, "[permissions]\nallow = [\"exec_shell\"]\n").unwrap();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);
    let stdio: Vec<String> = vec![
        env!("CARGO_BIN_EXE_toolgate").into(),
        "--config".into(),
        config.display().to_string(),
        "--workspace".into(),
        work.display().to_string(),
        "--store".into(),
        "memory".into(),
        "serve".into(),
        "--stdio".into(),
    ];
    for (how, target, sleep) in [
        (
            "http",
            vec!["--url".to_owned(), format!("http://{addr}/mcp")],
            "sleep 1205",
        ),
        (
            "stdio",
            [vec!["--stdio".to_owned()], stdio.clone()].concat(),
            "sleep 1206",
        ),
    ] {
        let marker = work.join(format!("started-{how}"));
        let slow = json!({"command": format!("echo started > '{}'; exec {sleep}", marker.display())});
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mcp_tasks.py");
        let python = python.clone();
        let out = tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(python);
            cmd.arg(script)
                .args(["--call", "exec_shell", r#"{"command": "echo from-python-1"}"#])
                .args(["--call", "exec_shell", &slow.to_string()])
                .arg("--cancel-when")
                .arg(&marker)
                .args(&target);
            cmd.output().unwrap()
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{how}: the Python client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(out["version"].as_str().unwrap().starts_with("1."), "{out}");
        let calls = out["calls"].as_array().unwrap();
        assert_eq!(
            calls[0]["statuses"].as_array().unwrap().last().unwrap(),
            "completed",
            "{how}: {out}"
        );
        assert!(
            calls[0]["text"].as_str().unwrap().contains("from-python-1"),
            "{how}: {out}"
        );
        assert_eq!(calls[0]["related"], true, "{how}: the result names its task: {out}");
        assert_eq!(
            calls[1]["statuses"].as_array().unwrap().last().unwrap(),
            "cancelled",
            "{how}: {out}"
        );
        assert_eq!(
            out["listed"], out["ids"],
            "{how}: tasks/list lists the session's tasks: {out}"
        );
        assert_eq!(
            calls[0]["notified"],
            json!(["completed"]),
            "{how}: the status notification: {out}"
        );
        assert_eq!(
            calls[1]["notified"],
            json!(["cancelled"]),
            "{how}: the status notification: {out}"
        );
        let until = Instant::now() + Duration::from_secs(10);
        while running(sleep) {
            assert!(Instant::now() < until, "{how}: the cancelled command still runs");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One JSON-RPC message to the gateway as a 2025-11-25 client sends it; the response (from a
/// JSON body or the event stream's data) and the session id the server gave.
async fn rpc(
    addr: &str,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (reqwest::StatusCode, Value, Option<String>) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&body);
    if let Some(s) = session {
        request = request.header("Mcp-Session-Id", s);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let id = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    });
    (status, value, id)
}

async fn legacy_session(addr: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let (_, answer, id) = rpc(addr, token, None, init).await;
    assert!(
        answer
            .pointer("/result/capabilities/tasks/requests/tools/call")
            .is_some(),
        "{answer}"
    );
    let id = id.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    rpc(addr, token, Some(&id), initialized).await;
    id
}

/// The 2025-11-25 surface from the attacker's side: a made-up session id gets rmcp's 404, not
/// an answer; another principal's session does not find, list or cancel Alice's task; and a
/// tool that does not run as a task is refused, not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2025_11_25_task_surface_keeps_principals_and_sessions_apart() {
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(&config, "[permissions]\nallow = [\"exec_shell\"]\n").unwrap();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (_g, addr) = serve_on(
        &work,
        "memory",
        Some(&config),
        &["--client", &format!("alice={ALICE}"), "--client", &format!("bob={BOB}")],
        &[],
    );
    let alice = legacy_session(&addr, ALICE).await;
    let bob = legacy_session(&addr, BOB).await;
    let (_, listed, _) = rpc(
        &addr,
        ALICE,
        Some(&alice),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let shell = tools.iter().find(|t| t["name"] == "exec_shell").unwrap();
    assert_eq!(shell["execution"]["taskSupport"], "optional", "{shell}");
    let read = tools.iter().find(|t| t["name"] == "read_file").unwrap();
    assert!(read.get("execution").is_none(), "{read}");

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "exec_shell",
        "arguments": {"command": "exec sleep 1207"}, "task": {"ttl": 60000}}});
    let (_, created, _) = rpc(&addr, ALICE, Some(&alice), call).await;
    let id = created["result"]["task"]["taskId"].as_str().expect("a task").to_owned();
    assert_eq!(created["result"]["task"]["ttl"], 60000, "{created}");
    let get = |n: u64, method: &str| json!({"jsonrpc": "2.0", "id": n, "method": method, "params": {"taskId": id}});
    // Bob: unknown task, an empty list, and his cancel cancels nothing.
    let (_, answer, _) = rpc(&addr, BOB, Some(&bob), get(3, "tasks/get")).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer, _) = rpc(&addr, BOB, Some(&bob), get(4, "tasks/cancel")).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer, _) = rpc(
        &addr,
        BOB,
        Some(&bob),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/list"}),
    )
    .await;
    assert_eq!(answer["result"]["tasks"], json!([]), "{answer}");
    // A made-up session id is not answered by the task layer.
    let (status, _, _) = rpc(&addr, ALICE, Some("made-up-session"), get(6, "tasks/get")).await;
    assert_eq!(status, 404);
    // Alice's task still runs; she cancels it.
    let (_, answer, _) = rpc(&addr, ALICE, Some(&alice), get(7, "tasks/get")).await;
    assert_eq!(answer["result"]["status"], "working", "{answer}");
    let until = Instant::now() + Duration::from_secs(30);
    while !running("sleep 1207") {
        assert!(Instant::now() < until, "the task's command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, answer, _) = rpc(&addr, ALICE, Some(&alice), get(8, "tasks/cancel")).await;
    assert_eq!(answer["result"]["taskId"], id.as_str(), "{answer}");
    let (_, answer, _) = rpc(&addr, ALICE, Some(&alice), get(9, "tasks/result")).await;
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("cancelled"),
        "{answer}"
    );
    let (_, answer, _) = rpc(&addr, ALICE, Some(&alice), get(10, "tasks/cancel")).await;
    assert_eq!(
        answer["error"]["code"], -32602,
        "an ended task is not cancelled again: {answer}"
    );
    // A tool that does not run as a task: refused, and it did not run.
    let marker = work.join("read-ran");
    std::fs::write(&marker, "x").unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "read_file",
        "arguments": {"path": "read-ran"}, "task": {}}});
    let (_, answer, _) = rpc(&addr, ALICE, Some(&alice), call).await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let rows = audit_as(&addr, "read_file").await;
    assert!(rows.is_empty(), "the refused call never ran: {rows:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while running("sleep 1207") {
        assert!(Instant::now() < until, "the cancelled command still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn audit_as(addr: &str, tool: &str) -> Vec<Value> {
    let rows: Value = reqwest::Client::new()
        .get(format!("http://{addr}/v1/audit?tool={tool}"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    rows["rows"].as_array().cloned().unwrap_or_default()
}
