//! OTLP export: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, a call to an upstream MCP tool leaves
//! spans at the collector (an HTTP listener on loopback standing in for one, reading the
//! protobuf bodies), named by the MCP conventions, and the trace context the upstream received
//! in `params._meta` belongs to the exported trace. Without the variable nothing is sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

mod common;
use common::{fixture_upstream, xdg_dir};

/// A collector: answers every POST with 200 and hands over (path, body).
fn collector() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let mut length = 0usize;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = reader.get_mut().write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    );
                    if tx.send((path, body)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, rx)
}

fn call_meta(dir: &Path, endpoint: Option<&str>) -> serde_json::Value {
    let config = dir.join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.fx]\ncommand = {:?}\nargs = [\"normal\"]\ntrust_annotations = true\n[permissions]\nallow = [\"fx__meta\"]\n",
            fixture_upstream().display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(dir)
        .args(["--store", "memory", "call", "fx__meta", "{}"])
        .env("XDG_CONFIG_HOME", xdg_dir(dir, "config"))
        .env("XDG_DATA_HOME", xdg_dir(dir, "data"))
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("RUST_LOG");
    match endpoint {
        Some(e) => cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", e),
        None => cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
    };
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "toolgate call failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The result is the `_meta` JSON the upstream saw, printed as a JSON string.
    let printed: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    match printed {
        serde_json::Value::String(s) => serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")),
        other => other,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn spans_go_to_the_collector_and_the_context_travels_in_meta() {
    let dir = tempfile::tempdir().unwrap();
    let (url, bodies) = collector();
    let meta = call_meta(dir.path(), Some(&url));
    let traceparent = meta["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent in the upstream's _meta: {meta}"));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    let trace_id = hex(parts[1]);
    // The exporter flushed at exit: everything it sent is queued already.
    let mut all = Vec::new();
    while let Ok((path, body)) = bodies.recv_timeout(Duration::from_secs(10)) {
        assert_eq!(path, "/v1/traces");
        all.extend(body);
        if contains(&all, b"tools/call meta") && contains(&all, &trace_id) {
            break;
        }
    }
    assert!(contains(&all, b"tools/call meta"), "the client span is exported");
    assert!(contains(&all, b"mcp.method.name"), "with the MCP attributes");
    assert!(contains(&all, b"toolgate"), "under the service name");
    assert!(
        contains(&all, &trace_id),
        "the trace the upstream was told about is the exported one"
    );
}

#[test]
fn without_the_endpoint_no_context_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let meta = call_meta(dir.path(), None);
    assert!(meta.get("traceparent").is_none(), "{meta}");
}
