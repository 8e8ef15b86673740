//! One suite, three stores: in memory, SQLite and PostgreSQL must behave the same.

mod common;

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::store::{JournalFilter, JournalRow, PendingRecord, Store};
use toolgate_core::{CallId, Principal, SessionId};

/// A time with whole microseconds (what the SQL stores keep).
fn at(secs_ago: u64) -> SystemTime {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
    UNIX_EPOCH + Duration::from_micros(now) - Duration::from_secs(secs_ago)
}

fn row(session: &str, call: &str, tool: &str, started: SystemTime) -> JournalRow {
    JournalRow {
        session_id: session.into(),
        call_id: call.into(),
        turn_id: "t1".into(),
        tool: tool.into(),
        arguments_hash: u64::MAX - 7,
        arguments: Some(json!({"path": "a.txt", "api_key": "[REDACTED]"})),
        repaired: true,
        raw: Some("{\"path\": \"a.txt\",".into()),
        state: "started".into(),
        decision: Some("allow".into()),
        source: Some("user_rule".into()),
        hooks: Some(json!({"pre": {"decision": null, "rewrote": false}})),
        started_at: Some(started),
        ..JournalRow::default()
    }
}

fn finished(r: &JournalRow, state: &'static str, error: Option<&'static str>) -> JournalRow {
    JournalRow {
        state: state.into(),
        error_type: error.map(Into::into),
        cache_hit: true,
        attempts: 3,
        waiting_ms: 12,
        running_ms: 345,
        may_have_run: state == "canceled",
        finished_at: Some(at(0)),
        ..r.clone()
    }
}

/// Compares rows without the owner stamp (durable stores add it).
fn same(a: &JournalRow, b: &JournalRow) -> bool {
    JournalRow {
        owner: None,
        ..a.clone()
    } == JournalRow {
        owner: None,
        ..b.clone()
    }
}

async fn journal(name: &str, s: &Arc<dyn Store>) {
    let sid = SessionId::new(format!("s-{name}"));
    let a = row(sid.as_str(), "c1", "write_file", at(30));
    assert!(s.journal_begin(&a).await.unwrap(), "{name}: first claim");
    assert!(
        !s.journal_begin(&a).await.unwrap(),
        "{name}: a second claim of the id fails"
    );
    assert!(s.journal_contains(&sid, &CallId::new("c1")).await.unwrap(), "{name}");
    assert!(!s.journal_contains(&sid, &CallId::new("c2")).await.unwrap(), "{name}");
    assert!(
        !s.journal_contains(&SessionId::new("other"), &CallId::new("c1"))
            .await
            .unwrap(),
        "{name}: keyed by session too"
    );
    let open = s.journal_unfinished().await.unwrap();
    let mine: Vec<_> = open.iter().filter(|r| r.session_id == sid).collect();
    assert_eq!(mine.len(), 1, "{name}");
    assert!(same(mine[0], &a), "{name}: {:?}", mine[0]);
    if name != "memory" {
        assert!(mine[0].owner.is_some(), "{name}: a durable row names its process");
    }

    // Closed: every field comes back as written.
    let a_done = finished(&a, "error", Some("timeout"));
    s.journal_finish(a_done.clone()).await.unwrap();
    let b = row(sid.as_str(), "c2", "read_file", at(20));
    s.journal_finish(finished(&b, "success", None)).await.unwrap();
    // A call that started a background job: its row names the job, then how it ended.
    let c = JournalRow {
        job: Some(json!({"id": "j0123456789ab"})),
        ..row(sid.as_str(), "c3", "exec_shell", at(10))
    };
    let c_done = JournalRow {
        job: Some(json!({"id": "j0123456789ab", "state": "killed", "exit_code": null, "output_bytes": 21})),
        ..finished(&c, "canceled", Some("canceled"))
    };
    s.journal_finish(c_done.clone()).await.unwrap();
    assert!(
        s.journal_unfinished()
            .await
            .unwrap()
            .iter()
            .all(|r| r.session_id != sid),
        "{name}"
    );

    let all = s
        .journal_list(&JournalFilter {
            session: Some(sid.clone()),
            ..JournalFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["c3", "c2", "c1"], "{name}: newest first");
    assert!(same(&all[2], &a_done), "{name}: {:?}\n!= {a_done:?}", all[2]);
    assert!(all[0].may_have_run, "{name}");
    assert!(same(&all[0], &c_done), "{name}: {:?}\n!= {c_done:?}", all[0]);
    // A later call in another turn reusing c1's id cannot rewrite c1's record.
    let forged = JournalRow {
        turn_id: "t2".into(),
        tool: "read_file".into(),
        ..finished(&a, "success", None)
    };
    s.journal_finish(forged).await.unwrap();
    let after = s
        .journal_list(&JournalFilter {
            session: Some(sid.clone()),
            ..JournalFilter::default()
        })
        .await
        .unwrap();
    let c1 = after.iter().find(|r| r.call_id.as_str() == "c1").unwrap();
    assert!(same(c1, &a_done), "{name}: the first record was rewritten: {c1:?}");

    let pick = |f: JournalFilter| {
        let s = s.clone();
        let sid = sid.clone();
        async move {
            s.journal_list(&JournalFilter {
                session: Some(sid),
                ..f
            })
            .await
            .unwrap()
            .iter()
            .map(|r| r.call_id.to_string())
            .collect::<Vec<_>>()
        }
    };
    let tool = |t: &str| JournalFilter {
        tool: Some(t.into()),
        ..JournalFilter::default()
    };
    let outcome = |o: &str| JournalFilter {
        outcome: Some(o.into()),
        ..JournalFilter::default()
    };
    assert_eq!(pick(tool("read_file")).await, ["c2"], "{name}");
    assert_eq!(pick(outcome("timeout")).await, ["c1"], "{name}: by error type");
    assert_eq!(pick(outcome("error")).await, ["c1"], "{name}: by outcome");
    assert_eq!(pick(outcome("success")).await, ["c2"], "{name}");
    let since = JournalFilter {
        since: Some(at(25)),
        ..JournalFilter::default()
    };
    assert_eq!(pick(since).await, ["c3", "c2"], "{name}");
    let limit = JournalFilter {
        limit: 1,
        ..JournalFilter::default()
    };
    assert_eq!(pick(limit).await, ["c3"], "{name}");
    // A principal's sessions by prefix: its own rows, and a prefix that is only a start of the
    // id's text, or has SQL wildcards, matches nothing else.
    let by_prefix = |p: &str| {
        let s = s.clone();
        let p = p.to_owned();
        async move {
            s.journal_list(&JournalFilter {
                session_prefix: Some(p),
                ..JournalFilter::default()
            })
            .await
            .unwrap()
            .len()
        }
    };
    let whole = sid.as_str().to_owned();
    assert_eq!(by_prefix(&whole[..whole.len() - 2]).await, 3, "{name}");
    assert_eq!(by_prefix(&format!("{whole}/")).await, 0, "{name}");
    assert_eq!(by_prefix("%").await, 0, "{name}: no wildcard");
    assert_eq!(by_prefix("_").await, 0, "{name}: no wildcard");

    // Retention: finished rows before the cut go; a started row stays whatever its age.
    let old = row(sid.as_str(), "old-open", "write_file", at(3600));
    assert!(s.journal_begin(&old).await.unwrap());
    let pruned = s.journal_prune(at(15)).await.unwrap();
    assert_eq!(pruned, 2, "{name}: c1 and c2");
    let left = pick(JournalFilter::default()).await;
    assert_eq!(left, ["c3", "old-open"], "{name}");
}

async fn grants(name: &str, s: &Arc<dyn Store>) {
    let sid = SessionId::new(format!("g-{name}"));
    s.grant_put(&sid, "read_file", None).await.unwrap();
    s.grant_put(&sid, "read_file", None).await.unwrap();
    s.grant_put(
        &sid,
        "exec_shell(cargo test)",
        Some(SystemTime::now() + Duration::from_secs(60)),
    )
    .await
    .unwrap();
    s.grant_put(&sid, "expired", Some(SystemTime::now() - Duration::from_secs(1)))
        .await
        .unwrap();
    let mut g = s.grants(&sid).await.unwrap();
    g.sort();
    assert_eq!(
        g,
        ["exec_shell(cargo test)", "read_file"],
        "{name}: upserted, expired hidden"
    );
    assert!(s.grants(&SessionId::new("nobody")).await.unwrap().is_empty(), "{name}");

    // A changed tool loses its grants in every session, patterned ones included; a tool whose
    // name merely starts with it keeps its own.
    let other = SessionId::new(format!("g2-{name}"));
    for rule in ["srv__write", "srv__write(/tmp/**)", "srv__writer", "srv__write_all"] {
        s.grant_put(&other, rule, None).await.unwrap();
    }
    assert_eq!(s.grants_revoke("srv__write").await.unwrap(), 2, "{name}");
    let mut g = s.grants(&other).await.unwrap();
    g.sort();
    assert_eq!(g, ["srv__write_all", "srv__writer"], "{name}: only the tool's own");
    assert_eq!(s.grants(&sid).await.unwrap().len(), 2, "{name}: other tools untouched");
    assert_eq!(s.grants_revoke("srv__write").await.unwrap(), 0, "{name}");
}

async fn cache(name: &str, s: &Arc<dyn Store>) {
    let k = format!("k-{name}");
    s.cache_put(&k, &json!({"v": 1}), Duration::from_secs(60))
        .await
        .unwrap();
    s.cache_put(&k, &json!({"v": 2}), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        s.cache_get(&k).await.unwrap(),
        Some(json!({"v": 2})),
        "{name}: upserted"
    );
    s.cache_put("gone", &json!(1), Duration::ZERO).await.unwrap();
    assert_eq!(s.cache_get("gone").await.unwrap(), None, "{name}: expired is ignored");
    assert_eq!(s.cache_get("never").await.unwrap(), None, "{name}");
}

async fn memory(name: &str, s: &Arc<dyn Store>) {
    let me = Principal::new(format!("me-{name}"));
    for (k, v) in [
        ("notes/b", "2"),
        ("notes/a", "1"),
        ("todo", "3"),
        ("n%tes", "4"),
        ("notes_x", "5"),
    ] {
        s.memory_put(&me, k, v).await.unwrap();
    }
    s.memory_put(&me, "todo", "3b").await.unwrap();
    assert_eq!(
        s.memory_list(&me, "notes/").await.unwrap(),
        ["notes/a", "notes/b"],
        "{name}"
    );
    assert_eq!(
        s.memory_list(&me, "n%").await.unwrap(),
        ["n%tes"],
        "{name}: no wildcards"
    );
    assert_eq!(
        s.memory_list(&me, "notes_").await.unwrap(),
        ["notes_x"],
        "{name}: no wildcards"
    );
    assert_eq!(s.memory_list(&me, "").await.unwrap().len(), 5, "{name}");
    assert_eq!(
        s.memory_get(&me, "todo").await.unwrap().as_deref(),
        Some("3b"),
        "{name}"
    );
    let other = Principal::new("other");
    assert_eq!(
        s.memory_get(&other, "todo").await.unwrap(),
        None,
        "{name}: per principal"
    );
    assert!(s.memory_list(&other, "").await.unwrap().is_empty(), "{name}");
}

async fn approvals(name: &str, s: &Arc<dyn Store>) {
    let id = format!("a-{name}");
    let p = PendingRecord {
        id: id.clone(),
        session_id: "s".into(),
        request: json!({"tool": "exec_shell", "arguments": {"command": "ls"}}),
        answer: None,
    };
    s.approval_put(&p).await.unwrap();
    assert_eq!(s.approval_get(&id).await.unwrap(), Some(p.clone()), "{name}");
    assert!(s.approval_answer(&id, &json!("approve_once")).await.unwrap(), "{name}");
    assert!(
        !s.approval_answer(&id, &json!("reject")).await.unwrap(),
        "{name}: the first answer wins"
    );
    assert_eq!(
        s.approval_get(&id).await.unwrap().unwrap().answer,
        Some(json!("approve_once")),
        "{name}"
    );
    assert!(!s.approval_answer("nope", &json!("x")).await.unwrap(), "{name}");
    assert_eq!(s.approval_get("nope").await.unwrap(), None, "{name}");

    // The queue: unanswered asks only, oldest first; a finished ask is forgotten.
    let ids: Vec<String> = (0..3).map(|i| format!("q{i}-{name}")).collect();
    for id in &ids {
        s.approval_put(&PendingRecord {
            id: id.clone(),
            session_id: "s".into(),
            request: json!({"tool": "x"}),
            answer: None,
        })
        .await
        .unwrap();
    }
    assert!(s.approval_answer(&ids[1], &json!("reject")).await.unwrap(), "{name}");
    let pending: Vec<String> = s.approvals_pending().await.unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(
        pending,
        [ids[0].clone(), ids[2].clone()],
        "{name}: unanswered, oldest first"
    );
    for id in &ids {
        s.approval_delete(id).await.unwrap();
    }
    s.approval_delete(&id).await.unwrap();
    assert!(s.approvals_pending().await.unwrap().is_empty(), "{name}");
    assert_eq!(s.approval_get(&ids[0]).await.unwrap(), None, "{name}: deleted");
}

async fn results(name: &str, s: &Arc<dyn Store>) {
    let sid = SessionId::new(format!("r-{name}"));
    let mut handles = Vec::new();
    for i in 0..4 {
        let v = Arc::new(json!({"i": i, "text": "x".repeat(100)}));
        handles.push(s.put(&sid, v, 120).await);
    }
    assert_eq!(s.get(&sid, &handles[3]).await.unwrap()["i"], 3, "{name}");
    assert_eq!(s.get(&sid, &handles[1]).await.unwrap()["i"], 1, "{name}");
    assert!(
        s.get(&sid, &handles[0]).await.is_none(),
        "{name}: three kept per session"
    );
    assert!(
        s.get(&SessionId::new("thief"), &handles[3]).await.is_none(),
        "{name}: another session's handle"
    );
    assert!(s.get(&sid, "h0000").await.is_none(), "{name}");
}

#[tokio::test]
async fn every_store_behaves_the_same() {
    let stores = common::stores("conformance").await;
    for (name, s) in &stores.all {
        journal(name, s).await;
        grants(name, s).await;
        cache(name, s).await;
        memory(name, s).await;
        approvals(name, s).await;
        results(name, s).await;
        s.flush().await.unwrap();
    }
    eprintln!(
        "conformance ran on: {}",
        stores.all.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    );
}
