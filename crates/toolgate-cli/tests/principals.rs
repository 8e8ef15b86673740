//! Identities in the gateway: each client token names a principal, whose memory, sessions and
//! audit rows are its own, and whose `[principals.NAME]` rules apply; `/v1/execute` and
//! `/v1/audit` need a token even on loopback; the approver token reads the whole audit.

mod common;

use common::{serve, workspace};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-1";
const BOB: &str = "bob-token-2";
const APPROVER: &str = "approver-token-3";

fn call(name: &str, args: Value) -> Value {
    json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": name, "arguments": args.to_string()}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_keep_their_memory_sessions_and_audit_apart() {
    let ws = workspace();
    let config = ws.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[permissions]\nallow = [\"memory_write\"]\n\n[principals.bob]\ndeny = [\"memory_write\"]\n",
    )
    .unwrap();
    let (_guard, addr) = serve(
        ws.path(),
        Some(&config),
        &["--client", &format!("alice={ALICE}"), "--client", &format!("bob={BOB}")],
        &[("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)],
    );
    let base = format!("http://{addr}/v1");
    let http = reqwest::Client::new();
    let execute = |token: Option<&'static str>, session: &str, answer: Value| {
        let mut r = http.post(format!("{base}/execute?session={session}")).json(&answer);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // No token: refused, even on loopback.
    let r = execute(None, "s", call("memory_read", json!({}))).await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http.get(format!("{base}/audit")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // Alice writes a note; she reads it back, Bob does not see it.
    let r: Value = execute(
        Some(ALICE),
        "a1",
        call("memory_write", json!({"key": "plan", "value": "alice's secret plan"})),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(r["session_id"], "a1", "the session id as the client named it: {r}");
    assert!(!r["messages"][1]["content"].as_str().unwrap().contains("error"), "{r}");
    let read = |token| execute(Some(token), "x", call("memory_read", json!({"key": "plan"})));
    let alice_reads: Value = read(ALICE).await.unwrap().json().await.unwrap();
    assert!(alice_reads.to_string().contains("alice's secret plan"), "{alice_reads}");
    let bob_reads: Value = read(BOB).await.unwrap().json().await.unwrap();
    assert!(!bob_reads.to_string().contains("alice's secret plan"), "{bob_reads}");
    // Bob's own rules deny him memory_write; Alice's allow stands.
    let bob_writes: Value = execute(
        Some(BOB),
        "b1",
        call("memory_write", json!({"key": "plan", "value": "bob"})),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(bob_writes.to_string().contains("permission_denied"), "{bob_writes}");
    // The same session name is two sessions: Bob's "a1" is not Alice's.
    let audit = |token: &'static str, query: &str| {
        let url = format!("{base}/audit{query}");
        let http = http.clone();
        async move {
            let v: Value = http
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["rows"].as_array().cloned().unwrap_or_default()
        }
    };
    let alice_rows = audit(ALICE, "").await;
    assert_eq!(alice_rows.len(), 2, "{alice_rows:?}");
    assert!(
        alice_rows
            .iter()
            .all(|r| r["session_id"].as_str().unwrap().starts_with("alice/"))
    );
    let bob_rows = audit(BOB, "").await;
    assert_eq!(bob_rows.len(), 2, "{bob_rows:?}");
    assert!(
        bob_rows
            .iter()
            .all(|r| r["session_id"].as_str().unwrap().starts_with("bob/"))
    );
    assert!(
        audit(BOB, "?session=a1").await.is_empty(),
        "Bob cannot read Alice's session a1"
    );
    assert_eq!(audit(APPROVER, "").await.len(), 4, "the approver reads every row");
}
