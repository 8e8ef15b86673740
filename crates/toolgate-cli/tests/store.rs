//! The CLI on its state store: the default SQLite file, `--store`, `toolgate audit`, state shared
//! by processes of one session, the report of calls an earlier process left running, and bad
//! stores answered with one line and exit 2.

use serde_json::{Value, json};
use std::path::Path;

mod common;

use common::*;

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// One line, exit 2, and nothing on stdout.
fn assert_one_line_exit_2(out: &std::process::Output, needle: &str) {
    assert_usage_error(out, needle);
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Writes journal rows into a SQLite store as another process would have: opened (`started`)
/// or closed.
fn seed(path: &Path, rows: Vec<toolgate_core::store::JournalRow>, open: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = toolgate_store::open(
            &toolgate_store::StoreUrl::Sqlite(path.to_owned()),
            &toolgate_store::StoreOptions::default(),
        )
        .await
        .unwrap();
        for row in rows {
            if open {
                assert!(store.journal_begin(&row).await.unwrap());
            } else {
                store.journal_finish(row).await.unwrap();
            }
        }
        store.flush().await.unwrap();
    });
}

#[test]
fn the_default_store_is_a_sqlite_file_in_the_data_directory() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["call", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(xdg_dir(ws.path(), "data").join("toolgate/toolgate.db").is_file());

    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "call", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!xdg_dir(ws.path(), "data").exists(), "--store memory writes no file");
}

#[test]
fn audit_lists_rows_newest_first_with_filters_and_redacted_arguments() {
    let ws = workspace();
    let db = format!("sqlite://{}", ws.path().join("audit.db").display());
    let run = |args: &[&str]| {
        toolgate(ws.path())
            .args(["--store", &db, "--session", "s1"])
            .args(args)
            .output()
            .unwrap()
    };
    assert!(run(&["call", "read_file", r#"{"path": "hello.txt"}"#]).status.success());
    assert_eq!(
        run(&["call", "read_file", r#"{"path": "missing.txt"}"#]).status.code(),
        Some(1)
    );
    // Refused (nobody to approve), with a secret in its arguments.
    let out = run(&[
        "call",
        "write_file",
        r#"{"path": "x.txt", "content": "token=ghp_abcdefghijklmnopqrstuvwxyz0123"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));

    let rows = lines(&run(&["audit", "--json"]));
    let tools: Vec<&str> = rows.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["write_file", "read_file", "read_file"], "newest first");
    assert_eq!(rows[0]["outcome"], "error");
    assert_eq!(rows[0]["error_type"], "permission_denied");
    assert_eq!(rows[0]["decision"], "deny");
    let content = rows[0]["arguments"]["content"].as_str().unwrap();
    assert!(!content.contains("ghp_") && content.contains("[REDACTED]"), "{content}");
    assert_eq!(rows[1]["error_type"], "execution_failed");
    assert_eq!(rows[2]["outcome"], "success");
    assert_eq!(rows[2]["arguments"], json!({"path": "hello.txt"}));
    assert_eq!(rows[2]["session_id"], "s1");

    let only = |args: &[&str]| {
        let mut all = vec!["audit", "--json"];
        all.extend_from_slice(args);
        lines(&run(&all)).len()
    };
    assert_eq!(only(&["--outcome", "success"]), 1);
    assert_eq!(only(&["--outcome", "permission_denied"]), 1);
    assert_eq!(only(&["--tool", "read_file"]), 2);
    assert_eq!(only(&["--since", "1h"]), 3);
    assert_eq!(only(&["--since", "2999-01-01"]), 0);
    assert_eq!(only(&["--limit", "1"]), 1);
    let other = toolgate(ws.path())
        .args(["--store", &db, "--session", "nobody", "audit", "--json"])
        .output()
        .unwrap();
    assert!(lines(&other).is_empty(), "--session filters");

    let table = String::from_utf8(run(&["audit"]).stdout).unwrap();
    let mut table_lines = table.lines();
    assert!(table_lines.next().unwrap().starts_with("STARTED"));
    assert!(table.contains("permission_denied") && table.contains("read_file"));
    assert_eq!(table.lines().count(), 4);

    assert_one_line_exit_2(&run(&["audit", "--since", "yesterday"]), "--since");
}

#[test]
fn store_arguments_off_keeps_only_the_hash() {
    let ws = workspace();
    let db = format!("sqlite://{}", ws.path().join("a.db").display());
    toolgate(ws.path())
        .env("TOOLGATE_AUDIT_STORE_ARGUMENTS", "false")
        .args(["--store", &db, "call", "read_file", r#"{"path": "hello.txt"}"#])
        .assert()
        .success();
    let rows = lines(
        &toolgate(ws.path())
            .args(["--store", &db, "audit", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["arguments"], Value::Null);
    assert_eq!(rows[0]["arguments_hash"].as_str().unwrap().len(), 16);
}

#[test]
fn one_session_shares_full_results_across_processes() {
    let ws = workspace();
    let big: String = (0..400).map(|i| format!("line {i} of a long file\n")).collect();
    std::fs::write(ws.path().join("big.txt"), big).unwrap();
    let db = format!("sqlite://{}", ws.path().join("r.db").display());
    let first = toolgate(ws.path())
        .env("TOOLGATE_ENGINE_BUDGET_BYTES", "600")
        .args(["--store", &db, "--session", "shared", "call", "read_file"])
        .arg(r#"{"path": "big.txt"}"#)
        .output()
        .unwrap();
    assert!(first.status.success());
    let text = String::from_utf8_lossy(&first.stdout);
    let handle = regex_handle(&text).unwrap_or_else(|| panic!("no handle in {text}"));
    // Another process, same session: the handle is there.
    let second = toolgate(ws.path())
        .args(["--store", &db, "--session", "shared", "call", "read_result"])
        .arg(json!({"handle": handle}).to_string())
        .output()
        .unwrap();
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stdout));
    assert!(String::from_utf8_lossy(&second.stdout).contains("line 0 of a long file"));
    // Another session: it is not.
    let third = toolgate(ws.path())
        .args(["--store", &db, "--session", "other", "call", "read_result"])
        .arg(json!({"handle": handle}).to_string())
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(1));
}

/// Rows in the store's `results` table.
fn stored_results(db: &Path) -> i64 {
    use sqlx::Connection;
    let url = format!("sqlite://{}", db.display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT count(*) FROM results")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    })
}

#[test]
fn a_call_without_a_session_keeps_its_full_result_out_of_the_store() {
    let ws = workspace();
    let big: String = (0..400).map(|i| format!("line {i} of a long file\n")).collect();
    std::fs::write(ws.path().join("big.txt"), big).unwrap();
    let path = ws.path().join("r.db");
    let db = format!("sqlite://{}", path.display());
    let call = |session: Option<&str>| {
        let mut cmd = toolgate(ws.path());
        cmd.env("TOOLGATE_ENGINE_BUDGET_BYTES", "600").args(["--store", &db]);
        if let Some(s) = session {
            cmd.args(["--session", s]);
        }
        let out = cmd
            .args(["call", "read_file", r#"{"path": "big.txt"}"#])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(regex_handle(&String::from_utf8_lossy(&out.stdout)).is_some());
    };
    // No later process can name this session, so nothing is written for it (it once kept every
    // large result of every session-less call for 24 h, and each start swept them).
    call(None);
    call(None);
    assert_eq!(stored_results(&path), 0);
    // A named session keeps its results for the next process.
    call(Some("kept"));
    assert_eq!(stored_results(&path), 1);
}

fn regex_handle(text: &str) -> Option<String> {
    let at = text.find("handle=")? + "handle=".len();
    Some(text[at..].chars().take_while(|c| c.is_ascii_alphanumeric()).collect())
}

#[test]
fn calls_a_dead_process_left_running_are_reported_at_the_next_start() {
    let ws = workspace();
    let path = ws.path().join("crashed.db");
    // As a process that died mid-call leaves it: started, owned by a process that is gone.
    let mut owner = toolgate_store::this_process();
    owner.push('9');
    let row = toolgate_core::store::JournalRow {
        session_id: "s".into(),
        call_id: "c-lost".into(),
        tool: "write_file".into(),
        state: "started".into(),
        started_at: Some(std::time::SystemTime::now()),
        owner: Some(owner),
        ..Default::default()
    };
    seed(&path, vec![row], true);
    let db = format!("sqlite://{}", path.display());
    let out = toolgate(ws.path())
        .args(["--store", &db, "audit", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success());
    assert!(
        stderr.contains("1 call(s) may have run") && stderr.contains("c-lost"),
        "{stderr}"
    );
    let rows = lines(&out);
    assert_eq!(rows[0]["outcome"], "canceled");
    assert_eq!(rows[0]["error_type"], "interrupted");
    assert_eq!(rows[0]["may_have_run"], true);
    // Reported once: the row is closed now.
    let again = toolgate(ws.path())
        .args(["--store", &db, "audit", "--outcome", "interrupted", "--json"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains("may have run"));
    assert_eq!(lines(&again).len(), 1);
}

#[test]
fn bad_stores_get_one_line_exit_2_and_nothing_written() {
    let ws = workspace();
    let corrupt = ws.path().join("corrupt.db");
    std::fs::write(&corrupt, b"garbage, not SQLite\n".repeat(100)).unwrap();
    let before = std::fs::read(&corrupt).unwrap();
    let call = |store: &str| {
        toolgate(ws.path())
            .args(["--store", store, "call", "read_file", r#"{"path": "hello.txt"}"#])
            .output()
            .unwrap()
    };
    assert_one_line_exit_2(&call(&format!("sqlite://{}", corrupt.display())), "not a database");
    assert_eq!(std::fs::read(&corrupt).unwrap(), before);
    assert!(!ws.path().join("corrupt.db-wal").exists());
    assert_one_line_exit_2(
        &call(&format!("sqlite://{}/x.db", ws.path().join("hello.txt").display())),
        "cannot open the store",
    );
    assert_one_line_exit_2(&call("mysql://root@127.0.0.1/x"), "\"mysql\"");
    assert_one_line_exit_2(&call("postgres://postgres:pw@127.0.0.1:1/test"), "refused");
    let out = toolgate(ws.path())
        .env("TOOLGATE_STORE_URL", "ftp://x")
        .args(["audit"])
        .output()
        .unwrap();
    assert_one_line_exit_2(&out, "\"ftp\"");
    assert!(
        !xdg_dir(ws.path(), "data").exists(),
        "no default store was created either"
    );
}

#[test]
fn postgres_is_a_store_like_any_other() {
    let base = std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schema = format!("tg_cli_{}", std::process::id());
    let created = rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&base).await.ok()?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut conn)
            .await
            .ok()
    });
    if created.is_none() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true needs PostgreSQL at {base}"
        );
        eprintln!("skipped: no PostgreSQL at {base}");
        return;
    }
    let url = format!("{base}?options[search_path]={schema}");
    let ws = workspace();
    let result = std::panic::catch_unwind(|| {
        toolgate(ws.path())
            .args([
                "--store",
                &url,
                "--session",
                "pg",
                "call",
                "read_file",
                r#"{"path": "hello.txt"}"#,
            ])
            .assert()
            .success();
        let rows = lines(
            &toolgate(ws.path())
                .args(["--store", &url, "--session", "pg", "audit", "--json"])
                .output()
                .unwrap(),
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["tool"], "read_file");
    });
    rt.block_on(async {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&base).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&mut conn)
                .await;
        }
    });
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn retention_deletes_finished_rows_older_than_keep_days_at_start() {
    let ws = workspace();
    let path = ws.path().join("old.db");
    let day = std::time::Duration::from_secs(86_400);
    let rows = [("ancient", 40u32), ("recent", 2)]
        .into_iter()
        .map(|(id, age_days)| toolgate_core::store::JournalRow {
            session_id: "s".into(),
            call_id: id.into(),
            tool: "read_file".into(),
            state: "success".into(),
            started_at: Some(std::time::SystemTime::now() - day * age_days),
            ..Default::default()
        })
        .collect();
    seed(&path, rows, false);
    let db = format!("sqlite://{}", path.display());
    let ids = |keep: &str| -> Vec<String> {
        let out = toolgate(ws.path())
            .env("TOOLGATE_AUDIT_KEEP_DAYS", keep)
            .args(["--store", &db, "audit", "--json"])
            .output()
            .unwrap();
        lines(&out)
            .iter()
            .map(|r| r["call_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids("0"), ["recent", "ancient"], "keep_days = 0 keeps everything");
    assert_eq!(ids("30"), ["recent"], "the default 30 days drops the 40-day-old row");
    assert_eq!(ids("1"), Vec::<String>::new());
}

#[test]
fn memory_notes_outlive_the_process() {
    let ws = workspace();
    let db = format!("sqlite://{}", ws.path().join("m.db").display());
    toolgate(ws.path())
        .args(["--store", &db, "--yes", "call", "memory_write"])
        .arg(r#"{"key": "style", "value": "tabs, not spaces"}"#)
        .assert()
        .success();
    let out = toolgate(ws.path())
        .args(["--store", &db, "call", "memory_read", r#"{"key": "style"}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, json!({"key": "style", "value": "tabs, not spaces"}));
}

/// `audit --follow` prints what other processes write to the same store, as they write it: the
/// rows there already, then a later call's row (closed, with its outcome); a memory store, which
/// no other process can write, is refused.
#[test]
fn audit_follow_prints_the_rows_other_processes_write() {
    use std::io::BufRead;
    let ws = workspace();
    let first = toolgate(ws.path())
        .args(["call", "read_file", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert!(first.status.success());
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--workspace")
        .arg(ws.path())
        .args(["audit", "--follow", "--json"])
        .env("XDG_CONFIG_HOME", xdg_dir(ws.path(), "config"))
        .env("XDG_DATA_HOME", xdg_dir(ws.path(), "data"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("follow printed no {what}"))
    };
    let old = next("existing row");
    assert_eq!(
        (old["tool"].as_str(), old["outcome"].as_str()),
        (Some("read_file"), Some("success"))
    );
    // A later call by another process: its row arrives closed (maybe first as started).
    let later = toolgate(ws.path())
        .args(["--yes", "call", "write_file", r#"{"path": "new.txt", "content": "x"}"#])
        .output()
        .unwrap();
    assert!(later.status.success(), "{}", String::from_utf8_lossy(&later.stderr));
    let row = loop {
        let row = next("new row");
        assert_eq!(row["tool"], "write_file", "{row}");
        if row["outcome"] != "started" {
            break row;
        }
    };
    assert_eq!(row["outcome"], "success", "{row}");
    let _ = follow.kill();
    let _ = follow.wait();

    let out = toolgate(ws.path())
        .args(["--store", "memory", "audit", "--follow"])
        .output()
        .unwrap();
    assert_usage_error(&out, "--follow reads rows other processes write");
}
