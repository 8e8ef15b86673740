//! A scripted HTTP/1.1 server on 127.0.0.1 for adapter tests: it answers requests in order with
//! scripted responses, writes bodies in small chunks (so SSE events and UTF-8 characters are split
//! at awkward boundaries), and keeps every request it received.
#![allow(dead_code)]

use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One scripted response.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Write the body in chunks of this many bytes, flushing each.
    pub chunk: usize,
    /// Close the connection after this many body bytes (a dropped stream).
    pub drop_after: Option<usize>,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            chunk: 4096,
            drop_after: None,
        }
    }

    pub fn sse(body: &str, chunk: usize) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: body.as_bytes().to_vec(),
            chunk,
            drop_after: None,
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Server {
    pub base: String,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Starts a server that plays `replies` in order (then 500s).
pub async fn serve(replies: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
    let rec = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (rec, script) = (rec.clone(), script.clone());
            tokio::spawn(async move {
                // One request per connection: read the head, then Content-Length bytes.
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                let head_end = loop {
                    let n = match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.split("\r\n");
                let first = lines.next().unwrap_or_default().to_owned();
                let mut parts = first.split(' ');
                let method = parts.next().unwrap_or_default().to_owned();
                let target = parts.next().unwrap_or_default().to_owned();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let n = match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&tmp[..n]);
                }
                let body = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
                rec.lock().unwrap().push(Received {
                    at: Instant::now(),
                    method,
                    target,
                    headers,
                    body,
                });
                let reply = script.lock().unwrap().pop_front().unwrap_or_else(|| Reply {
                    status: 500,
                    headers: vec![("content-type".into(), "text/plain".into())],
                    body: b"script exhausted".to_vec(),
                    chunk: 4096,
                    drop_after: None,
                });
                let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
                for (k, v) in &reply.headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                if sock.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
                let limit = reply.drop_after.unwrap_or(reply.body.len()).min(reply.body.len());
                for piece in reply.body[..limit].chunks(reply.chunk.max(1)) {
                    let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
                    frame.extend_from_slice(piece);
                    frame.extend_from_slice(b"\r\n");
                    if sock.write_all(&frame).await.is_err() || sock.flush().await.is_err() {
                        return;
                    }
                }
                if reply.drop_after.is_none() {
                    let _ = sock.write_all(b"0\r\n\r\n").await;
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    Server { base, received }
}

/// SSE text from (event name, JSON data) pairs; an empty name writes only `data:`.
pub fn sse(events: &[(&str, Value)]) -> String {
    let mut out = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            out.push_str(&format!("event: {name}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    }
    out
}

/// A read-only `lookup` tool for loop tests: it records the arguments of every call, answers
/// `{"key", "values"}`, and fails for the key `missing`.
pub struct Lookup {
    schema: Value,
    spec: toolgate_core::tool::ToolSpec,
    pub calls: Arc<Mutex<Vec<Value>>>,
}

impl Lookup {
    pub fn new() -> Self {
        Self {
            schema: serde_json::json!({"type": "object", "properties": {"key": {"type": "string", "description": "the key"}}, "required": ["key"]}),
            spec: toolgate_core::tool::ToolSpec::with_annotations(toolgate_core::tool::Annotations::READ_ONLY),
            calls: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

#[async_trait::async_trait]
impl toolgate_core::Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks a key up."
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &toolgate_core::tool::ToolSpec {
        &self.spec
    }
    async fn execute(
        &self,
        _: &toolgate_core::ToolContext,
        args: Value,
    ) -> Result<toolgate_core::tool::ToolOutput, toolgate_core::ToolError> {
        self.calls.lock().unwrap().push(args.clone());
        if args["key"] == "missing" {
            return Err(toolgate_core::ToolError::failed("no such key"));
        }
        Ok(toolgate_core::tool::ToolOutput::json(
            serde_json::json!({"key": args["key"], "values": [1, 2, 3]}),
        ))
    }
}
