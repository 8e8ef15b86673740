//! Gateway replicas on one PostgreSQL: a replica killed with SIGKILL mid-call has its running
//! call closed as interrupted and its pending ask withdrawn by another replica within the lease
//! time — whatever the hostnames and pids (the lease decides, not the process table); and both
//! generations of the official Python MCP client keep one session's state across replicas
//! behind a round-robin proxy that sends each HTTP request to the next replica.

mod common;
use common::{serve_on, workspace};
use serde_json::{Value, json};
use std::time::Duration;

const CLIENT: &str = "ops=client-token";
const TOKEN: &str = "client-token";
const APPROVER: &str = "approver-token";

/// A schema of its own on the test server, dropped at the end.
struct Schema {
    base: String,
    name: String,
}

impl Schema {
    async fn create(tag: &str) -> Option<Self> {
        use sqlx::Connection;
        let base =
            std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let name = format!("tg_{tag}_{}", std::process::id());
        let made = async {
            let mut conn = sqlx::PgConnection::connect(&base).await.ok()?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                .execute(&mut conn)
                .await
                .ok()
        }
        .await;
        if made.is_none() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true needs PostgreSQL at {base}"
            );
            eprintln!("skipped: no PostgreSQL at {base}");
            return None;
        }
        Some(Self { base, name })
    }

    fn url(&self) -> String {
        format!("{}?options[search_path]={}", self.base, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // A thread of its own: the test's runtime may be gone or busy.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&base).await.ok()?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name} CASCADE")))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

async fn get(addr: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `probe` on `addr` until `done` holds (bounded: 30 s).
async fn until(addr: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..300 {
        let v = get(addr, path).await;
        if done(&v) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never reached the state waited for: {}", get(addr, path).await);
}

fn call(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": tool, "arguments": arguments.to_string()}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_s_calls_and_asks_are_closed_by_another_within_the_lease() {
    let Some(schema) = Schema::create("replicas").await else {
        return;
    };
    let ws = workspace();
    let config = ws
        .path()
        .with_file_name(format!("{}.toml", ws.path().file_name().unwrap().to_string_lossy()));
    std::fs::write(
        &config,
        "[store]\nlease_ms = 1500\n\n[permissions]\nallow = [\"exec_shell(sleep:*)\"]\n",
    )
    .unwrap();
    let envs = [("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)];
    let url = schema.url();
    let (mut doomed, a) = serve_on(ws.path(), &url, Some(&config), &["--client", CLIENT], &envs);
    let (_survivor, b) = serve_on(ws.path(), &url, Some(&config), &["--client", CLIENT], &envs);

    // On replica A: a command that runs for a minute, and a write that waits for approval.
    let post = |id: &'static str, tool: &'static str, args: Value| {
        let url = format!("http://{a}/v1/execute?session=doomed-{id}");
        tokio::spawn(async move {
            let _ = reqwest::Client::new()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&call(id, tool, args))
                .send()
                .await;
        })
    };
    let _running = post("run", "exec_shell", json!({"command": "sleep 60"}));
    let _asking = post("ask", "write_file", json!({"path": "x.txt", "content": "x"}));
    // Replica B sees both in the shared store.
    let started = until(&b, "/v1/audit?tool=exec_shell", |v| {
        v["rows"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["outcome"] == "started"))
    })
    .await;
    let owner = started["rows"][0]["owner"].as_str().unwrap().to_owned();
    assert!(owner.contains('#'), "a replica's rows name the replica: {owner}");
    until(&b, "/v1/approvals", |v| {
        v["approvals"].as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    // Metrics sum across replicas: the one ask is counted by the replica that waits on it.
    let mut replicas = Vec::new();
    let mut pending = 0;
    for addr in [&a, &b] {
        let text = reqwest::Client::new()
            .get(format!("http://{addr}/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("toolgate_approvals_pending ") {
                pending += n.parse::<u32>().unwrap();
            }
            if let Some(r) = line.strip_prefix("toolgate_replica_info{replica=\"") {
                replicas.push(r.split('"').next().unwrap().to_owned());
            }
        }
    }
    assert_eq!(pending, 1, "one ask, counted once");
    assert_eq!(replicas.len(), 2);
    assert_ne!(replicas[0], replicas[1]);
    assert!(replicas.contains(&owner), "{owner} in {replicas:?}");

    doomed.0.kill().unwrap(); // SIGKILL: no shutdown, no cleanup
    doomed.0.wait().unwrap();

    let closed = until(&b, "/v1/audit?tool=exec_shell", |v| {
        v["rows"][0]["outcome"] != "started"
    })
    .await;
    let row = &closed["rows"][0];
    assert_eq!(
        (
            row["outcome"].as_str(),
            row["error_type"].as_str(),
            row["may_have_run"].as_bool()
        ),
        (Some("canceled"), Some("interrupted"), Some(true)),
        "{row}"
    );
    until(&b, "/v1/approvals", |v| {
        v["approvals"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    // The write never ran.
    assert!(!ws.path().join("x.txt").exists());
}

/// A round-robin HTTP proxy on loopback: each request (not each connection: clients keep
/// connections alive) goes to the next backend; responses, event streams included, stream back.
async fn round_robin(backends: Vec<String>) -> String {
    use axum::body::Body;
    use axum::http::{Request, Response};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = std::sync::Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (next, client, backends) = (next.clone(), client.clone(), backends.clone());
        async move {
            let backend = &backends[next.fetch_add(1, Ordering::SeqCst) % backends.len()];
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut forward = client
                .request(parts.method, format!("http://{backend}{path}"))
                .body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let Ok(answer) = forward.send().await else {
                return Response::builder().status(502).body(Body::empty()).unwrap();
            };
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    response = response.header(name, value);
                }
            }
            response.body(Body::from_stream(answer.bytes_stream())).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn python(var: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .filter(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{var} is not set: run scripts/peers.sh"
        );
        eprintln!("skipped: {var} is not set (scripts/peers.sh installs the MCP peers)");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_client_generations_keep_their_session_across_round_robin_replicas() {
    let (Some(py1), Some(py2)) = (python("TOOLGATE_MCP_PY1"), python("TOOLGATE_MCP_PY2")) else {
        return;
    };
    let Some(schema) = Schema::create("roundrobin").await else {
        return;
    };
    let ws = workspace();
    let big: String = (0..4_000).map(|i| format!("line {i:05} of the big file\n")).collect();
    std::fs::write(ws.path().join("big.txt"), &big).unwrap();
    let config = ws
        .path()
        .with_file_name(format!("{}.toml", ws.path().file_name().unwrap().to_string_lossy()));
    std::fs::write(
        &config,
        "[approval]\ntimeout_ms = 4000\n\n[tools.read_file]\nbudget_bytes = 2048\n",
    )
    .unwrap();
    let envs = [("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)];
    let url = schema.url();
    let (_a, a) = serve_on(ws.path(), &url, Some(&config), &[], &envs);
    let (_b, b) = serve_on(ws.path(), &url, Some(&config), &[], &envs);
    let proxy = round_robin(vec![a, b]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mcp_client.py");
    for (python, tag) in [(&py1, "v1"), (&py2, "v2")] {
        let out = tokio::process::Command::new(python)
            .arg(script)
            .args(["--approve", &format!("http://{proxy}"), APPROVER])
            .args(["--url", &format!("http://{proxy}/mcp")])
            .args(["--call", "read_file", r#"{"path": "big.txt"}"#])
            .args([
                "--call",
                "read_result",
                r#"{"handle": "$HANDLE", "offset": 60000, "length": 200}"#,
            ])
            .args([
                "--call",
                "write_file",
                &format!(r#"{{"path": "{tag}-one.txt", "content": "1"}}"#),
            ])
            .args([
                "--call",
                "write_file",
                &format!(r#"{{"path": "{tag}-two.txt", "content": "2"}}"#),
            ])
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{tag}: {}", String::from_utf8_lossy(&out.stderr));
        let out: Value = serde_json::from_slice(&out.stdout).unwrap();
        let calls = out["calls"].as_array().unwrap();
        let how = format!("mcp {}", out["version"]);
        assert!(
            calls[0]["text"].as_str().unwrap().contains("read_result handle="),
            "{how}: {}",
            calls[0]
        );
        assert_eq!(calls[1]["isError"], false, "{how}: {}", calls[1]);
        for (i, file) in [(2, "one"), (3, "two")] {
            assert_eq!(calls[i]["isError"], false, "{how}: write {file}: {}", calls[i]);
            assert!(ws.path().join(format!("{tag}-{file}.txt")).exists());
        }
    }
    // Asks by elicitation for a 2026-07-28 client: the form comes from one replica and the
    // retry with its answer goes to the other (the proxy alternates), which finds the ask in
    // the store; the approve_tool grant then holds on both. (write_file is granted already: the
    // 2.x client above approved it in the principal's default session, kept in the store.)
    let eliciting = config.with_extension("elicit.toml");
    std::fs::write(&eliciting, "[approval]\nvia = \"elicitation\"\ntimeout_ms = 20000\n").unwrap();
    let (_c, c) = serve_on(ws.path(), &url, Some(&eliciting), &[], &envs);
    let (_d, d) = serve_on(ws.path(), &url, Some(&eliciting), &[], &envs);
    let proxy = round_robin(vec![c, d]).await;
    let out = tokio::process::Command::new(&py2)
        .arg(script)
        .args(["--elicit", r#"{"decision": "approve_tool"}"#])
        .args(["--url", &format!("http://{proxy}/mcp")])
        .args(["--call", "exec_shell", r#"{"command": "echo 1 > e-one.txt"}"#])
        .args(["--call", "exec_shell", r#"{"command": "echo 2 > e-two.txt"}"#])
        .args(["--call", "exec_shell", r#"{"command": "echo 3 > e-three.txt"}"#])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    for (i, file) in ["one", "two", "three"].iter().enumerate() {
        assert_eq!(out["calls"][i]["isError"], false, "{file}: {out}");
        assert!(ws.path().join(format!("e-{file}.txt")).exists(), "{file}");
    }
}
