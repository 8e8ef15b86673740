//! The engine's own overhead: one validated call to a no-op tool through the whole pipeline,
//! stage 1 on typical and broken arguments, truncation of 10 MB values, and a batch of 100
//! concurrent read-only calls, and an agent run of two iterations against an instant model.
//!
//! Run: `cargo bench -p toolgate-core --bench engine`

use async_trait::async_trait;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};
use std::hint::black_box;
use std::sync::Arc;
use toolgate_core::formats::RawArguments;
use toolgate_core::parse::parse_arguments;
use toolgate_core::result::truncate;
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{
    Answer, Engine, EngineConfig, Format, Registry, Session, SessionOptions, Tool, ToolCall, ToolError, TurnOptions,
};

struct Noop {
    schema: Value,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

fn engine() -> (Arc<Engine>, Arc<Session>) {
    let mut registry = Registry::new();
    registry.register(Arc::new(Noop {
        schema: json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["path"],
            "additionalProperties": false
        }),
        spec: ToolSpec::with_annotations(Annotations::READ_ONLY),
    }));
    let config = EngineConfig {
        // Identical batches are the point of the benchmark, not a loop.
        loop_threshold: u32::MAX,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(registry, config));
    let session = Arc::new(Session::new(engine.config(), SessionOptions::default()));
    (engine, session)
}

fn pipeline(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (engine, session) = engine();
    let mut args = Map::new();
    args.insert("path".into(), json!("src/lib.rs"));
    args.insert("limit".into(), json!(10));
    let call = ToolCall::new("call_1", "noop", args);
    c.bench_function("pipeline/one_validated_noop_call", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(engine.run_call(&session, call.clone(), TurnOptions::default()).await) })
    });
    let answer = Answer::parse(
        Format::Openai,
        &json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "noop", "arguments": "{\"path\": \"src/lib.rs\", \"limit\": 10}"}}]}),
    )
    .unwrap();
    c.bench_function("pipeline/one_call_turn_openai_in_and_out", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(engine.run_turn(&session, &answer, TurnOptions::default()).await) })
    });
}

fn batch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (engine, session) = engine();
    let calls: Vec<Value> = (0..100)
        .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "noop", "arguments": format!("{{\"path\": \"f{i}\"}}")}}))
        .collect();
    let answer = Answer::parse(Format::Openai, &json!({"role": "assistant", "tool_calls": calls})).unwrap();
    c.bench_function("batch/100_concurrent_read_only_calls", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(engine.run_turn(&session, &answer, TurnOptions::default()).await) })
    });
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    let cases = [
        (
            "valid",
            r#"{"path": "src/main.rs", "offset": 10, "limit": 50, "pattern": "fn main", "recursive": true}"#,
        ),
        (
            "single_quotes_trailing_comma",
            r#"{'path': 'src/main.rs', 'offset': 10, 'limit': 50, 'pattern': 'fn main', 'recursive': True,}"#,
        ),
        (
            "unquoted_keys_fenced",
            "```json\n{path: \"src/main.rs\", offset: 10, limit: 50, pattern: \"fn main\", recursive: true}\n```",
        ),
        (
            "cut_off",
            r#"{"path": "src/main.rs", "offset": 10, "limit": 50, "pattern": "fn ma"#,
        ),
        (
            "double_encoded",
            r#""{\"path\": \"src/main.rs\", \"offset\": 10, \"limit\": 50}""#,
        ),
    ];
    for (name, text) in cases {
        let raw = RawArguments::Text(text.to_owned());
        g.bench_function(name, |b| b.iter(|| black_box(parse_arguments(black_box(&raw), false))));
    }
    g.finish();
}

fn truncation(c: &mut Criterion) {
    let mut g = c.benchmark_group("truncate");
    g.sample_size(20);
    for mb in [1usize, 10] {
        let n = mb << 20;
        let string = json!({"exit_code": 0, "stdout": "x".repeat(n), "stderr": "done"});
        let array = json!({"items": (0..n / 8).map(|i| i as u64 * 1_000_001).collect::<Vec<_>>()});
        let nested = json!({"rows": (0..n / 1024).map(|i| json!({"id": i, "name": format!("row {i}"), "body": "b".repeat(990), "tags": ["a", "b"]})).collect::<Vec<_>>()});
        for (kind, value) in [("string", &string), ("array", &array), ("nested_objects", &nested)] {
            let bytes = value.to_string().len() as u64;
            g.throughput(Throughput::Bytes(bytes));
            g.bench_with_input(BenchmarkId::new(kind, format!("{mb}MB")), value, |b, v| {
                b.iter(|| black_box(truncate(black_box(v), 65_536, Some("r1"))))
            });
        }
    }
    g.finish();
}

/// Secret scanning of results (stage 11, before truncation): a log whose lines hit the literal
/// prefilter (so the regexes run), text that does not, and the nested objects of `truncate`.
fn redaction(c: &mut Criterion) {
    let mut g = c.benchmark_group("redact_result");
    g.sample_size(10);
    for mb in [1usize, 10] {
        let n = mb << 20;
        let line = "2026-11-25T09:00:00Z INFO fetched page 3 with the key cache warm; token count 512, pass 2\n";
        let log = json!({"exit_code": 0, "stdout": line.repeat(n / line.len()), "stderr": ""});
        let plain = json!({"exit_code": 0, "stdout": "lorem ipsum dolor sit amet ".repeat(n / 27), "stderr": ""});
        let nested = json!({"rows": (0..n / 1024).map(|i| json!({"id": i, "name": format!("row {i}"), "body": "b".repeat(990), "tags": ["a", "b"]})).collect::<Vec<_>>()});
        for (kind, value) in [
            ("log_with_needles", &log),
            ("plain_text", &plain),
            ("nested_objects", &nested),
        ] {
            g.throughput(Throughput::Bytes(value.to_string().len() as u64));
            g.bench_with_input(BenchmarkId::new(kind, format!("{mb}MB")), value, |b, v| {
                b.iter_batched(
                    || v.clone(),
                    |mut v| black_box(toolgate_core::redact::redact_result(&mut v)),
                    criterion::BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

/// The secret check of an open-world call's arguments (stage 7): the text as it is (`secret_kind`,
/// what was checked before encodings were read) against `find_secret` (as it is, percent-decoded
/// and base64-decoded), on the arguments a fetch and an upstream tool are given.
fn secret_arguments(c: &mut Criterion) {
    use toolgate_core::redact::{find_secret, secret_kind};
    let mut g = c.benchmark_group("secret_arguments");
    let body: String = (0..1024)
        .map(|i| format!("line {i}: the quarterly report for region {i} was filed; see ticket {i:08}.\n"))
        .collect();
    let cases = [
        (
            "plain_url",
            json!({"url": "https://docs.rs/tokio/latest/tokio/task/fn.spawn_blocking.html"}),
        ),
        (
            "percent_encoded_url",
            json!({"url": "https://docs.rs/releases/search?query=spawn%20blocking%20tokio&page=2"}),
        ),
        (
            "url_with_base64",
            json!({"url": "https://example.com/data?b=aGVsbG8gd29ybGQsIHRoaXMgaXMgZmluZQ=="}),
        ),
        (
            "document_64KiB",
            json!({"title": "report", "body": body, "tags": ["q3", "regions"]}),
        ),
    ];
    for (name, args) in &cases {
        let Value::Object(map) = args else { continue };
        g.throughput(Throughput::Bytes(args.to_string().len() as u64));
        g.bench_with_input(BenchmarkId::new("as_it_is", name), map, |b, m| {
            b.iter(|| black_box(m.values().filter_map(Value::as_str).find_map(secret_kind)))
        });
        g.bench_with_input(BenchmarkId::new("with_encodings", name), map, |b, m| {
            b.iter(|| black_box(find_secret(black_box(m))))
        });
    }
    g.finish();
}

fn permission(c: &mut Criterion) {
    use toolgate_core::permit::{Policy, decide};
    use toolgate_core::rules::{Layer, LayerSource, Rule};
    use toolgate_core::tool::PermissionSubject;
    let mut layer = Layer::new(LayerSource::User);
    for i in 0..196 {
        layer
            .allow
            .push(Rule::parse(&format!("exec_shell(tool{i} run:*)")).unwrap());
    }
    for r in ["exec_shell(git status)", "exec_shell(cargo test:*)", "exec_shell(ls:*)"] {
        layer.allow.push(Rule::parse(r).unwrap());
    }
    layer.deny.push(Rule::parse("exec_shell(rm:*)").unwrap());
    let policy = Policy {
        yolo: false,
        layers: Arc::new(vec![layer]),
    };
    let grants = Layer::new(LayerSource::Session);
    let spec = ToolSpec {
        subject: PermissionSubject::Command("command".into()),
        ..ToolSpec::with_annotations(Annotations::UNTRUSTED)
    };
    let mut args = Map::new();
    args.insert("command".into(), json!("git status && cargo test -p core | ls -la"));
    let call = ToolCall::new("c", "exec_shell", args);
    c.bench_function("permission/decide_200_rules_3_command_line", |b| {
        b.iter(|| black_box(decide(black_box(&call), &spec, &policy, &grants)))
    });
}

struct NoopHook;

#[async_trait]
impl toolgate_core::hooks::Hook for NoopHook {
    fn matches(&self, _: &str) -> bool {
        true
    }
}

/// One call to a tool that is not read-only, allowed by a path rule, through a no-op pre hook,
/// missing the cache (turn scope: every call is a new turn), with its journal row written.
fn governed(c: &mut Criterion) {
    use toolgate_core::permit::Policy;
    use toolgate_core::rules::{Layer, LayerSource, Rule};
    use toolgate_core::tool::{CacheScope, CacheSpec, PermissionSubject};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut registry = Registry::new();
    registry.register(Arc::new(Noop {
        schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        spec: ToolSpec {
            subject: PermissionSubject::Path("path".into()),
            cache: Some(CacheSpec {
                scope: CacheScope::Turn,
                ttl: std::time::Duration::from_secs(60),
            }),
            ..ToolSpec::with_annotations(Annotations {
                idempotent: true,
                ..Annotations::default()
            })
        },
    }));
    let engine = Engine::new(registry, EngineConfig::default()).with_hooks(vec![Arc::new(NoopHook)]);
    let mut layer = Layer::new(LayerSource::User);
    layer.allow.push(Rule::parse("noop(src/**)").unwrap());
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            policy: Policy {
                yolo: false,
                layers: Arc::new(vec![layer]),
            },
            ..SessionOptions::default()
        },
    ));
    let mut args = Map::new();
    args.insert("path".into(), json!("src/lib.rs"));
    c.bench_function("pipeline/governed_call_allow_rule_noop_hook_cache_miss", |b| {
        b.to_async(&rt).iter(|| async {
            let call = ToolCall::new(toolgate_core::CallId::generate(), "noop", args.clone());
            black_box(engine.run_call(&session, call, TurnOptions::default()).await)
        })
    });
}

/// A model that answers at once: one call of `noop`, then text — so a run measures the loop's
/// own work (requests built, answers parsed, history kept, one call through the pipeline).
struct Instant2 {
    call: Answer,
    text: Answer,
}

#[async_trait]
impl toolgate_core::Model for Instant2 {
    fn format(&self) -> Format {
        Format::Openai
    }
    fn describe(&self) -> String {
        "bench:instant".into()
    }
    async fn complete(
        &self,
        request: &toolgate_core::ModelRequest,
        _: &toolgate_core::CancellationToken,
    ) -> Result<Answer, toolgate_core::ModelError> {
        Ok(if request.iteration == 1 {
            self.call.clone()
        } else {
            self.text.clone()
        })
    }
}

fn agent(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (engine, session) = engine();
    let model = Arc::new(Instant2 {
        call: Answer::parse(
            Format::Openai,
            &json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "noop", "arguments": "{\"path\": \"src/lib.rs\"}"}}]}),
        )
        .unwrap(),
        text: Answer::parse(Format::Openai, &json!({"role": "assistant", "content": "done"})).unwrap(),
    });
    c.bench_function("agent/run_two_iterations_one_call", |b| {
        b.to_async(&rt).iter(|| async {
            let mut agent = toolgate_core::Agent::new(
                engine.clone(),
                session.clone(),
                model.clone(),
                toolgate_core::AgentConfig::default(),
            );
            black_box(agent.run("read it").await)
        })
    });
}

criterion_group!(
    benches,
    pipeline,
    governed,
    batch,
    parse,
    truncation,
    redaction,
    secret_arguments,
    permission,
    agent
);
criterion_main!(benches);
