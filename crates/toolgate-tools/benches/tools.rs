//! `exec_shell`'s overhead over a bare spawn of `true` (both in the same run), and `fetch_url`'s
//! throughput on a 10 MB page served on 127.0.0.1.
//!
//! `cargo bench -p toolgate-tools --bench tools`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use toolgate_core::ToolContext;
use toolgate_core::tool::{Tool, Typed};
use toolgate_tools::exec_shell::{ExecShell, ShellConfig};
use toolgate_tools::fetch::{FetchConfig, FetchUrl};
use toolgate_tools::netguard::Guard;

fn shell(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let tool = Typed::new(ExecShell::new(ShellConfig::default()));
    let unsandboxed = Typed::new(ExecShell::new(ShellConfig {
        sandbox: toolgate_tools::sandbox::SandboxMode::Off,
        ..ShellConfig::default()
    }));
    let ctx = ToolContext::standalone(dir.path());
    let mut group = c.benchmark_group("exec_shell");
    group.bench_function("bare_spawn_true", |b| {
        b.to_async(&rt).iter(|| async {
            let status = tokio::process::Command::new("true")
                .status()
                .await
                .unwrap_or_else(|e| panic!("spawn: {e}"));
            assert!(status.success());
        });
    });
    group.bench_function("exec_shell_true", |b| {
        b.to_async(&rt).iter(|| async {
            let out = tool
                .execute(&ctx, json!({"command": "true"}))
                .await
                .unwrap_or_else(|e| panic!("exec_shell: {e}"));
            assert_eq!(out.content["exit_code"], 0);
        });
    });
    // The same without the Landlock sandbox: what the PID-namespace containment costs alone.
    group.bench_function("exec_shell_true_sandbox_off", |b| {
        b.to_async(&rt).iter(|| async {
            let out = unsandboxed
                .execute(&ctx, json!({"command": "true"}))
                .await
                .unwrap_or_else(|e| panic!("exec_shell: {e}"));
            assert_eq!(out.content["exit_code"], 0);
        });
    });
    group.finish();
}

fn fetch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    const SIZE: usize = 10_000_000;
    let server = rt.block_on(async {
        let server = wiremock::MockServer::start().await;
        let page: String = "toolgate fetch benchmark line\n".repeat(SIZE / 30 + 1)[..SIZE].to_owned();
        wiremock::Mock::given(wiremock::matchers::path("/page.txt"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(page, "text/plain; charset=utf-8"))
            .mount(&server)
            .await;
        server
    });
    let tool = Typed::new(FetchUrl::new(FetchConfig {
        guard: Guard {
            allow_addresses: vec!["127.0.0.1".parse().unwrap_or_else(|e| panic!("{e}"))],
            ..Guard::default()
        },
        max_bytes: 16 << 20,
        ..FetchConfig::default()
    }));
    let ctx = ToolContext::standalone(std::path::Path::new("/"));
    let url = format!("{}/page.txt", server.uri());
    let mut group = c.benchmark_group("fetch_url");
    group.throughput(Throughput::Bytes(SIZE as u64));
    group.sample_size(20);
    group.bench_function("10MB_text_page", |b| {
        b.to_async(&rt).iter(|| async {
            let out = tool
                .execute(&ctx, json!({ "url": url }))
                .await
                .unwrap_or_else(|e| panic!("fetch_url: {e}"));
            assert_eq!(out.content["bytes"], SIZE);
        });
    });
    group.finish();
}

criterion_group!(benches, shell, fetch);
criterion_main!(benches);
