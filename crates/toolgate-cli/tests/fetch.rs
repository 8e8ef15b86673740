//! `fetch_url` from the command line: refused by the guard before any connection, asked unless a
//! rule allows it, and configurable with `[fetch]`.

mod common;

use common::*;
use std::io::{Read, Write};

#[test]
fn the_metadata_address_is_refused_by_the_guard() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args([
            "--store",
            "memory",
            "--yes",
            "call",
            "fetch_url",
            r#"{"url":"http://169.254.169.254/"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v = json_out(&out);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("refused") && message.contains("allow_private_network"),
        "{message}"
    );
    assert!(message.contains("link-local"), "{message}");
}

#[test]
fn exec_shell_prints_the_result_json() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args([
            "--store",
            "memory",
            "--yes",
            "call",
            "exec_shell",
            r#"{"command":"echo hi"}"#,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = json_out(&out);
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone()),
        (serde_json::json!(0), serde_json::json!("hi\n"))
    );
}

#[test]
fn fetch_url_is_asked_unless_a_rule_allows_it() {
    let ws = workspace();
    let out = toolgate(ws.path())
        .args([
            "--store",
            "memory",
            "call",
            "fetch_url",
            r#"{"url":"https://docs.rs/"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["error"]["type"], "permission_denied");
}

/// Serves one HTTP response on 127.0.0.1 and returns its port.
fn one_response(body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn allow_private_network_reaches_a_local_server() {
    let ws = workspace();
    let port = one_response("<h1>Local docs</h1><p>hello</p>");
    let out = toolgate(ws.path())
        .env("TOOLGATE_FETCH_ALLOW_PRIVATE_NETWORK", "true")
        .env("TOOLGATE_PERMISSIONS_ALLOW", r#"["fetch_url"]"#)
        .args(["--store", "memory", "call", "fetch_url"])
        .arg(format!(r#"{{"url":"http://127.0.0.1:{port}/"}}"#))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let content = json_out(&out)["content"].as_str().unwrap().to_owned();
    assert!(
        content.contains("# Local docs") && content.contains("hello"),
        "{content}"
    );
}
