//! Helpers shared by the CLI tests.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

/// toolgate's configuration or data directory for a test workspace: beside it, never inside
/// (toolgate's own files inside a workspace make the sandbox keep its top level read-only).
pub fn xdg_dir(workspace: impl AsRef<Path>, kind: &str) -> std::path::PathBuf {
    let ws = workspace.as_ref();
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ws.with_file_name(format!("{name}.xdg")).join(kind)
}

/// `toolgate --workspace W`, isolated from the developer's configuration, data and store.
pub fn toolgate(workspace: &Path) -> Command {
    let mut cmd = Command::cargo_bin("toolgate").unwrap();
    cmd.arg("--workspace").arg(workspace);
    cmd.env("XDG_CONFIG_HOME", xdg_dir(workspace, "config"));
    cmd.env("XDG_DATA_HOME", xdg_dir(workspace, "data"));
    cmd.env_remove("RUST_LOG");
    cmd.env_remove("TOOLGATE_STORE_URL");
    cmd
}

/// A workspace holding `hello.txt`.
pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello\nworld\n").unwrap();
    dir
}

/// stdout as one JSON document.
pub fn json_out(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// A user mistake: exit 2, one line on stderr naming the problem, no panic or backtrace.
pub fn assert_usage_error(out: &std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "{stderr:?} should mention {needle:?}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
}

/// Kills the child (and waits for it) on drop, so a failing test leaves no server behind.
pub struct Guard(pub std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fixture MCP server of toolgate-mcp (`examples/fixture_upstream.rs`), built beside the
/// `toolgate` binary by `cargo test` (it builds every example of the workspace).
pub fn fixture_upstream() -> std::path::PathBuf {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_toolgate"));
    let path = bin
        .parent()
        .map(|d| d.join("examples").join("fixture_upstream"))
        .unwrap_or_default();
    assert!(
        path.is_file(),
        "{} is missing: run the workspace's tests with `cargo test` (it builds the examples)",
        path.display()
    );
    path
}

/// `toolgate --workspace W --store memory [--config C] serve --listen 127.0.0.1:0 EXTRA…` with
/// these environment variables, toolgate's data beside the workspace; waits for it to listen.
/// Returns the guard and the `host:port` it listens on.
pub fn serve(workspace: &Path, config: Option<&Path>, extra: &[&str], envs: &[(&str, &str)]) -> (Guard, String) {
    serve_on(workspace, "memory", config, extra, envs)
}

/// `serve`, on the store `store`.
pub fn serve_on(
    workspace: &Path,
    store: &str,
    config: Option<&Path>,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (Guard, String) {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("--workspace")
        .arg(workspace)
        .args(["--store", store, "serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("XDG_CONFIG_HOME", xdg_dir(workspace, "config"))
        .env("XDG_DATA_HOME", xdg_dir(workspace, "data"))
        .env_remove("RUST_LOG")
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let guard = Guard(child);
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("toolgate serve exited").unwrap();
        if let Some(rest) = line.split("MCP at http://").nth(1) {
            break rest.split('/').next().unwrap_or_default().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (guard, addr)
}

/// An interoperability peer installed by `scripts/peers.sh` (the path its variable names), or
/// `None` with a message: a skip, except under `CI=true`, where a missing peer fails.
pub fn peer(var: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .filter(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{var} is not set: run scripts/peers.sh (scripts/test does)"
        );
        eprintln!("skipped: {var} is not set (scripts/peers.sh installs the MCP peers)");
    }
    found
}
