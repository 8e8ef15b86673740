//! Secret scanning from the command line, against the real tools: a `fetch_url` whose URL carries
//! a key never connects (not under `--yolo` with an allow rule either) while the same URL without
//! it does; `check` says why; a file holding keys is read with the keys replaced, and verbatim for
//! a tool configured to keep them.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;

const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
const GITHUB: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345";

/// A listener nobody accepts from: whatever connected to it waits in its backlog.
fn silent_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    (listener, port)
}

/// Whether anything connected (a finished process's connection stays in the backlog).
fn was_connected(listener: &TcpListener) -> bool {
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

fn fetch(ws: &std::path::Path, url: &str) -> std::process::Output {
    toolgate(ws)
        .env("TOOLGATE_FETCH_ALLOW_PRIVATE_NETWORK", "true")
        .env("TOOLGATE_PERMISSIONS_ALLOW", r#"["fetch_url"]"#)
        .args(["--store", "memory", "--yolo", "call", "fetch_url"])
        .arg(serde_json::json!({ "url": url }).to_string())
        .output()
        .unwrap()
}

#[test]
fn a_key_in_a_fetched_url_never_leaves_and_the_same_url_without_it_does() {
    let ws = workspace();
    for url in [
        format!("http://127.0.0.1:{{port}}/?key={AWS}"),
        format!("http://127.0.0.1:{{port}}/p?access_token={GITHUB}"),
        format!("http://u:{GITHUB}@127.0.0.1:{{port}}/"),
    ] {
        let (listener, port) = silent_listener();
        let url = url.replace("{port}", &port.to_string());
        let out = fetch(ws.path(), &url);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{url}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let v = json_out(&out);
        assert_eq!(v["error"]["type"], "permission_denied", "{v}");
        let shown = v.to_string();
        assert!(
            !shown.contains(AWS) && !shown.contains(GITHUB),
            "the refusal repeats the key: {shown}"
        );
        assert!(!was_connected(&listener), "{url} reached the server");
    }
    // The other side: the same request without a key is made.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf).unwrap_or(0);
        let body = "<p>served</p>";
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    let out = fetch(ws.path(), &format!("http://127.0.0.1:{port}/?page=2"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(served.join().unwrap().starts_with("GET /?page=2 "));
}

#[test]
fn check_names_the_secret_s_place_and_kind_but_not_the_secret() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "--yolo", "check", "fetch_url"])
        .arg(serde_json::json!({ "url": format!("https://example.com/?k={AWS}") }).to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_out(&out);
    assert_eq!(v["decision"], "ask", "{v}");
    assert_eq!(v["source"], "secret_in_arguments", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains("/url") && reason.contains("AWS access key"), "{reason}");
    assert!(!v.to_string().contains(AWS));
}

#[test]
fn a_file_s_keys_are_replaced_in_what_read_file_returns_unless_configured_not_to() {
    let ws = workspace();
    let env = format!("HOME=/home/u\nAWS_ACCESS_KEY_ID={AWS}\nGH={GITHUB}\nDEBUG=1\n");
    std::fs::write(ws.path().join(".env"), &env).unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "call", "read_file", r#"{"path": ".env"}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let content = json_out(&out)["content"].as_str().unwrap().to_owned();
    assert_eq!(
        content,
        "HOME=/home/u\nAWS_ACCESS_KEY_ID=[REDACTED]\nGH=[REDACTED]\nDEBUG=1\n"
    );

    let config = ws.path().with_extension("toml");
    std::fs::write(&config, "[tools.read_file]\nredact_results = false\n").unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .args(["--store", "memory", "call", "read_file", r#"{"path": ".env"}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_out(&out)["content"], env);
}

#[test]
fn an_unknown_secret_setting_is_a_one_line_configuration_error() {
    let ws = workspace();
    let config = ws.path().with_extension("toml");
    std::fs::write(&config, "[tools.fetch_url]\nsecret_arguments = \"maybe\"\n").unwrap();
    let out = toolgate(ws.path())
        .arg("--config")
        .arg(&config)
        .args(["--store", "memory", "tools"])
        .output()
        .unwrap();
    assert_usage_error(
        &out,
        "line 2: unknown variant `maybe`, expected one of `ask`, `deny`, `allow`",
    );
}
