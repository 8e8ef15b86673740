//! toolgate's secrets do not reach the tools: the approver and client tokens and provider keys
//! given to `toolgate serve` are not in its `/proc/PID/environ` or `/proc/PID/cmdline`, an
//! upstream MCP server starts without them, and an `exec_shell` command that reads every
//! process's environment and command line finds none of them.

mod common;

use common::{fixture_upstream, serve, workspace, xdg_dir};
use std::process::Command;
use std::time::{Duration, Instant};

const SECRETS: [&str; 4] = ["appr-SECRET-1", "client-SECRET-2", "sk-SECRET-3", "ghp_SECRET-4"];

fn with_secrets(cmd: &mut Command, ws: &std::path::Path) {
    cmd.env("XDG_CONFIG_HOME", xdg_dir(ws, "config"))
        .env("XDG_DATA_HOME", xdg_dir(ws, "data"))
        .env("TOOLGATE_SERVE_APPROVER_TOKEN", SECRETS[0])
        .env("OPENAI_API_KEY", SECRETS[2])
        .env("GITHUB_TOKEN", SECRETS[3])
        .env_remove("RUST_LOG");
}

#[test]
fn no_secret_is_readable_by_a_tool_or_an_upstream() {
    let ws = workspace();
    let dump = ws.path().join("upstream.env");
    let config = ws.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.fx]\ncommand = \"sh\"\nargs = [\"-c\", {:?}]\n",
            format!("env > {}; exec {}", dump.display(), fixture_upstream().display())
        ),
    )
    .unwrap();
    let (guard, _) = serve(
        ws.path(),
        Some(&config),
        &["--token", SECRETS[1]],
        &[
            ("TOOLGATE_SERVE_APPROVER_TOKEN", SECRETS[0]),
            ("OPENAI_API_KEY", SECRETS[2]),
            ("GITHUB_TOKEN", SECRETS[3]),
        ],
    );
    let pid = guard.0.id();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let (environ, cmdline) = (String::from_utf8_lossy(&environ), String::from_utf8_lossy(&cmdline));
    for s in SECRETS {
        assert!(!environ.contains(s), "{s} in /proc/{pid}/environ");
        assert!(!cmdline.contains(s), "{s} in /proc/{pid}/cmdline");
    }
    // The lower bound: the variables are still there (their values blanked), and toolgate
    // still knows them: the approver token opens the queue.
    assert!(environ.contains("TOOLGATE_SERVE_APPROVER_TOKEN="));
    let until = Instant::now() + Duration::from_secs(30);
    while !dump.exists() || std::fs::read_to_string(&dump).unwrap_or_default().is_empty() {
        assert!(Instant::now() < until, "the upstream never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let upstream_env = std::fs::read_to_string(&dump).unwrap();
    assert!(upstream_env.contains("PATH="), "{upstream_env}");
    for s in SECRETS {
        assert!(!upstream_env.contains(s), "{s} reached the upstream: {upstream_env}");
    }
    for name in ["TOOLGATE_SERVE_APPROVER_TOKEN", "OPENAI_API_KEY", "GITHUB_TOKEN"] {
        assert!(!upstream_env.contains(name), "{name} reached the upstream");
    }
    // A shell command that reads every process's environment and command line, the gateway's
    // and its own toolgate's included.
    let read_all =
        "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>/dev/null | tr '\\0' '\\n'; echo READ-DONE";
    let mut call = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    call.arg("--workspace")
        .arg(ws.path())
        .args(["--store", "memory", "--yes", "call", "exec_shell"])
        .arg(serde_json::json!({"command": read_all}).to_string());
    with_secrets(&mut call, ws.path());
    let out = call.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("READ-DONE"), "{text}");
    for s in SECRETS {
        assert!(!text.contains(s), "{s} read by exec_shell");
    }
    drop(guard);
}
