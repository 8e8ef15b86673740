//! The web console's security and live feed over HTTP (the browser test, `scripts/console.sh`,
//! drives the page itself): the page forbids other origins' scripts and framing; the API wants the
//! cookie the approver token becomes (HttpOnly, SameSite=Strict, Secure behind TLS); a
//! state-changing request without the console's own header or from another origin is refused; the
//! event stream pushes an ask when it is made and its removal when it is answered elsewhere.

mod common;

use common::{serve, workspace};
use serde_json::{Value, json};
use std::time::Duration;

const APPROVER: &str = "approver-token-console";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn login(addr: &str, token: &str, https: bool) -> reqwest::Response {
    let mut req = http()
        .post(format!("http://{addr}/console/login"))
        .header("Content-Type", "application/json")
        .header("X-Toolgate-Console", "1")
        .body(json!({"token": token}).to_string());
    if https {
        req = req.header("X-Forwarded-Proto", "https");
    }
    req.send().await.unwrap()
}

fn cookie_of(response: &reqwest::Response) -> String {
    let set = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_wants_its_cookie_and_refuses_cross_site_requests() {
    let ws = workspace();
    let (_guard, addr) = serve(ws.path(), None, &[], &[("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)]);
    let page = http().get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("Approver token"));

    assert_eq!(
        http()
            .get(format!("http://{addr}/console/api/approvals"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(login(&addr, "wrong", false).await.status(), 401);
    let ok = login(&addr, APPROVER, false).await;
    assert_eq!(ok.status(), 200);
    let set = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains("Secure"),
        "{set}"
    );
    let behind_tls = login(&addr, APPROVER, true).await;
    assert!(
        behind_tls.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
    let cookie = cookie_of(&ok);
    let api = |path: &str| http().get(format!("http://{addr}{path}")).header("Cookie", &cookie);
    assert_eq!(api("/console/api/approvals").send().await.unwrap().status(), 200);
    let tools: Value = api("/console/api/tools").send().await.unwrap().json().await.unwrap();
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "exec_shell")
    );
    // A forged or foreign cookie is no login.
    let forged = http()
        .get(format!("http://{addr}/console/api/approvals"))
        .header("Cookie", "toolgate_console=v1.99999999999.00ff")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);

    let answer = |content_type: &'static str, marked: bool, origin: Option<String>| {
        let mut req = http()
            .post(format!("http://{addr}/console/api/approvals/nosuchask"))
            .header("Cookie", &cookie)
            .header("Content-Type", content_type)
            .body(r#"{"decision": "approve_once"}"#);
        if marked {
            req = req.header("X-Toolgate-Console", "1");
        }
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        req.send()
    };
    // The page's own request reaches the queue (the ask is unknown: 404)…
    assert_eq!(answer("application/json", true, None).await.unwrap().status(), 404);
    // …a cross-site form cannot: no header, a form's content type, or another origin.
    assert_eq!(
        answer("application/x-www-form-urlencoded", false, None)
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(answer("application/json", false, None).await.unwrap().status(), 403);
    assert_eq!(
        answer("application/json", true, Some("http://evil.example".into()))
            .await
            .unwrap()
            .status(),
        403
    );
}

/// Reads server-sent events until one named `name` comes whose data satisfies `done`.
async fn until_event(
    body: &mut reqwest::Response,
    buffer: &mut String,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("");
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            if event == name
                && let Ok(v) = serde_json::from_str::<Value>(&data)
                && done(&v)
            {
                return v;
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(60), body.chunk())
            .await
            .expect("an event within a minute")
            .unwrap()
            .expect("the stream goes on");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_pushes_an_ask_and_its_answer_from_elsewhere() {
    let ws = workspace();
    let (_guard, addr) = serve(
        ws.path(),
        None,
        &["--client", "rest=rest-token-1"],
        &[("TOOLGATE_SERVE_APPROVER_TOKEN", APPROVER)],
    );
    let cookie = cookie_of(&login(&addr, APPROVER, false).await);
    let mut events = http()
        .get(format!("http://{addr}/console/api/events"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut buffer = String::new();
    until_event(&mut events, &mut buffer, "approvals", |v| v == &json!([])).await;
    // A REST caller's write is asked.
    let caller = {
        let addr = addr.clone();
        tokio::spawn(async move {
            let answer = json!({"role": "assistant", "tool_calls": [{"id": "w1", "type": "function",
                "function": {"name": "write_file", "arguments": "{\"path\": \"a.txt\", \"content\": \"new\\n\"}"}}]});
            let v: Value = http()
                .post(format!("http://{addr}/v1/execute?session=s"))
                .bearer_auth("rest-token-1")
                .json(&answer)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v
        })
    };
    let queue = until_event(&mut events, &mut buffer, "approvals", |v| {
        v.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let ask = &queue[0];
    assert_eq!(ask["request"]["tool"], "write_file");
    assert!(ask["diff"].as_str().unwrap().contains("+new"), "{ask}");
    // Answered elsewhere (the REST queue): the stream says the queue is empty again.
    let id = ask["id"].as_str().unwrap();
    let answered = http()
        .post(format!("http://{addr}/v1/approvals/{id}"))
        .bearer_auth(APPROVER)
        .json(&json!({"decision": "approve_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    until_event(&mut events, &mut buffer, "approvals", |v| v == &json!([])).await;
    let done = caller.await.unwrap();
    assert!(!done.to_string().contains("\"error\""), "{done}");
    // And the call's row arrives on the same stream, closed.
    let rows = until_event(&mut events, &mut buffer, "calls", |v| {
        v.as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["call_id"] == "w1" && r["outcome"] == "success"))
    })
    .await;
    assert!(rows.as_array().unwrap().iter().any(|r| r["tool"] == "write_file"));

    // The calls page's search: by tool, principal, outcome and time range; one call's record.
    let search = |query: String| {
        let cookie = cookie.clone();
        let addr = addr.clone();
        async move {
            let v: Value = http()
                .get(format!("http://{addr}/console/api/calls?{query}"))
                .header("Cookie", &cookie)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["call_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert_eq!(search("tool=write_file&principal=rest".into()).await, ["w1"]);
    assert_eq!(
        search("tool=write_file&principal=someone-else".into()).await,
        Vec::<String>::new()
    );
    assert_eq!(search("outcome=success&tool=write_file".into()).await, ["w1"]);
    assert_eq!(search("outcome=timeout".into()).await, Vec::<String>::new());
    assert_eq!(search(format!("since_ms={}", now - 600_000)).await, ["w1"]);
    assert_eq!(
        search(format!("until_ms={}", now - 600_000)).await,
        Vec::<String>::new()
    );
    assert_eq!(search("session=rest/s&call=w1".into()).await, ["w1"]);
}
