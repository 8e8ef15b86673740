//! `toolgate serve` under load, on loopback and bounded: 64 concurrent MCP clients × 500 calls
//! of a no-op read-only upstream tool, with the SQLite journal. No call may fail and every call
//! must be in the journal, closed as a success, after a graceful shutdown.
//!
//! The figures in BENCHMARKS.md come from the release build:
//! `cargo test --release -p toolgate-cli --test load -- --nocapture --include-ignored`
//! (`added_latency` is a measurement, not a check: it only runs when asked for).

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolgate_mcp::rmcp;

mod common;
use common::{Guard, fixture_upstream, xdg_dir};

const CLIENTS: usize = 64;
const CALLS: usize = 500;

/// Starts the fixture upstream on streamable HTTP; its URL.
fn upstream() -> (Guard, String) {
    let mut child = Command::new(fixture_upstream())
        .args(["normal", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("the fixture exited").unwrap();
        if let Some(url) = line.strip_prefix("listening ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Guard(child), url)
}

/// Starts `toolgate serve` over that upstream with a SQLite store in `dir`; its MCP URL.
fn gateway(dir: &Path, upstream: &str, store: &str) -> (Guard, String) {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!("[mcp_servers.fx]\nurl = {upstream:?}\ntrust_annotations = true\nenabled_tools = [\"noop\"]\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(dir)
        .arg("--store")
        .arg(store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("XDG_CONFIG_HOME", xdg_dir(dir, "config"))
        .env("XDG_DATA_HOME", xdg_dir(dir, "data"))
        .env("TOOLGATE_SERVE_APPROVER_TOKEN", "load-approver")
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("toolgate serve exited").unwrap();
        if let Some(rest) = line.split("MCP at ").nth(1) {
            break rest.split(',').next().unwrap_or_default().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Guard(child), url)
}

async fn client(url: &str) -> RunningService<rmcp::RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .expect("MCP handshake")
}

/// One call; `Err` with the reason when it was a JSON-RPC error or an `isError` result. The
/// arguments differ from call to call: the engine's loop detection refuses a third identical
/// call in a row, as it would for a model repeating itself.
async fn call(client: &RunningService<rmcp::RoleClient, ()>, tool: &str, n: usize) -> Result<(), String> {
    let mut args = serde_json::Map::new();
    args.insert("n".into(), n.into());
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .map_err(|e| e.to_string())?;
    if result.is_error == Some(true) {
        return Err(format!("{:?}", result.content));
    }
    Ok(())
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("state.db").display())
}

/// SIGTERM, then the exit status.
fn stop(mut guard: Guard) -> std::process::ExitStatus {
    let pid = guard.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    guard.0.wait().unwrap()
}

/// Journal rows of `tool` in the SQLite file: (all, closed as a success).
async fn journal(db: &Path, tool: &str) -> (i64, i64) {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let (all, ok): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN state = 'success' THEN 1 ELSE 0 END), 0) FROM journal WHERE tool = ?",
    )
    .bind(tool)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    (all, ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_every_call_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, upstream_url) = upstream();
    let (serve, url) = gateway(dir.path(), &upstream_url, &sqlite(dir.path()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let client = client(&url).await;
            let mut errors = Vec::new();
            for n in 0..CALLS {
                if let Err(e) = call(&client, "fx__noop", n).await {
                    errors.push(e);
                }
            }
            let _ = client.cancel().await;
            errors
        }));
    }
    let mut errors = Vec::new();
    for task in tasks {
        errors.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    let total = CLIENTS * CALLS;
    eprintln!(
        "load: {total} calls from {CLIENTS} clients in {:.2} s: {:.0} calls/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    assert!(
        errors.is_empty(),
        "{} call(s) failed, first: {}",
        errors.len(),
        errors[0]
    );
    // A graceful stop flushes the journal's writer.
    let status = stop(serve);
    assert!(status.success(), "toolgate serve exited with {status}");
    let (all, ok) = journal(&dir.path().join("state.db"), "fx__noop").await;
    assert_eq!(all, total as i64, "every call has its journal row");
    assert_eq!(ok, total as i64, "every row is closed as a success");
}

/// Percentile (0..=100) of sorted durations.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let i = (sorted.len() * p / 100).min(sorted.len().saturating_sub(1));
    sorted[i]
}

async fn timed(url: &str, tool: &str, n: usize) -> Vec<Duration> {
    let client = client(url).await;
    for i in 0..200 {
        call(&client, tool, i).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        call(&client, tool, i).await.unwrap();
        times.push(t.elapsed());
    }
    let _ = client.cancel().await;
    times.sort();
    times
}

/// The latency the gateway adds over calling the same upstream directly, one sequential client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement for BENCHMARKS.md, run by hand in release"]
async fn added_latency() {
    let n: usize = std::env::var("TOOLGATE_LOAD_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, upstream_url) = upstream();
    let direct = timed(&upstream_url, "noop", n).await;
    let report = |what: &str, through: &[Duration]| {
        for p in [50, 99] {
            let (d, g) = (percentile(&direct, p), percentile(through, p));
            eprintln!(
                "{what} p{p}: direct {:.0} µs, through the gateway {:.0} µs, added {:.0} µs",
                d.as_secs_f64() * 1e6,
                g.as_secs_f64() * 1e6,
                (g.as_secs_f64() - d.as_secs_f64()) * 1e6
            );
        }
    };
    let memory = dir.path().join("memory");
    std::fs::create_dir_all(&memory).unwrap();
    let (serve, url) = gateway(&memory, &upstream_url, "memory");
    report("memory store", &timed(&url, "fx__noop", n).await);
    assert!(stop(serve).success());
    let (serve, url) = gateway(dir.path(), &upstream_url, &sqlite(dir.path()));
    report("SQLite journal", &timed(&url, "fx__noop", n).await);
    assert!(stop(serve).success());
    let (all, _) = journal(&dir.path().join("state.db"), "fx__noop").await;
    assert_eq!(all, (n + 200) as i64, "every measured call is journaled");
}

/// A schema of its own on the test PostgreSQL (`TOOLGATE_TEST_PG`), dropped when done; `None`
/// without a server.
async fn pg_schema(tag: &str) -> Option<(String, impl Drop + use<>)> {
    use sqlx::Connection;
    struct Dropper(String, String);
    impl Drop for Dropper {
        fn drop(&mut self) {
            let (base, name) = (self.0.clone(), self.1.clone());
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async {
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
    let base = std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let name = format!("tg_load_{tag}_{}", std::process::id());
    let mut conn = sqlx::PgConnection::connect(&base).await.ok()?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
        .execute(&mut conn)
        .await
        .ok()?;
    let url = format!("{base}?options[search_path]={name}");
    Some((url, Dropper(base, name)))
}

/// Calls per second with 1, 2 and 3 replicas on one PostgreSQL, 16 and 64 clients spread over
/// them (client i on replica i mod n, as a balancer spreads connections), and the latency one
/// sequential client sees per store (the PostgreSQL figure includes the session's grants and
/// guards read from the store for every call).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement for BENCHMARKS.md, run by hand in release"]
async fn replicas_throughput() {
    let calls: usize = std::env::var("TOOLGATE_LOAD_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let (_upstream, upstream_url) = upstream();
    let dir = tempfile::tempdir().unwrap();
    for clients in [16, 64] {
        let mut first = 0.0;
        for replicas in 1..=3 {
            let (store, _schema) = pg_schema(&format!("r{replicas}c{clients}")).await.expect("PostgreSQL");
            let mut serves = Vec::new();
            let mut urls = Vec::new();
            for r in 0..replicas {
                let d = dir.path().join(format!("c{clients}r{replicas}-{r}"));
                std::fs::create_dir_all(&d).unwrap();
                let (guard, url) = gateway(&d, &upstream_url, &store);
                serves.push(guard);
                urls.push(url);
            }
            let started = Instant::now();
            let mut tasks = Vec::new();
            for c in 0..clients {
                let url = urls[c % replicas].clone();
                tasks.push(tokio::spawn(async move {
                    let client = client(&url).await;
                    for n in 0..calls {
                        call(&client, "fx__noop", n).await.unwrap();
                    }
                    let _ = client.cancel().await;
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            let rate = (clients * calls) as f64 / started.elapsed().as_secs_f64();
            if replicas == 1 {
                first = rate;
            }
            eprintln!(
                "{clients} clients, {replicas} replica(s): {rate:.0} calls/s ({:.2}x one replica)",
                rate / first
            );
            for s in serves {
                assert!(stop(s).success());
            }
        }
    }
    let (store, _schema) = pg_schema("latency").await.expect("PostgreSQL");
    for (what, store) in [("memory", "memory".to_owned()), ("PostgreSQL", store)] {
        let d = dir.path().join(format!("latency-{what}"));
        std::fs::create_dir_all(&d).unwrap();
        let (serve, url) = gateway(&d, &upstream_url, &store);
        let times = timed(&url, "fx__noop", 2000).await;
        eprintln!(
            "{what} store, one client: p50 {:.0} µs, p99 {:.0} µs",
            percentile(&times, 50).as_secs_f64() * 1e6,
            percentile(&times, 99).as_secs_f64() * 1e6
        );
        assert!(stop(serve).success());
    }
}
