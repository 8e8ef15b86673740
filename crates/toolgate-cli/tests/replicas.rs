//! Gateway replicas on one PostgreSQL: a replica killed with SIGKILL mid-call has its running
//! call closed as interrupted and its pending ask withdrawn by another replica within the lease
//! time — whatever the hostnames and pids (the lease decides, not the process table).

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
