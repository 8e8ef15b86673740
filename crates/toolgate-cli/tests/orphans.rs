//! Nothing outlives toolgate: `exec_shell` starts a background subshell (in its own session,
//! double-forked, nohup'd) that would touch a marker two seconds later; toolgate is killed with
//! SIGKILL while the command runs; every process of the tree is gone, and the marker never
//! appears. (The tree's processes write their own pids as the host sees them, from
//! `/proc/self/stat`, so the test waits on their death, not on a clock.)

mod common;

use common::{workspace, xdg_dir};
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

#[test]
fn a_sigkill_of_toolgate_takes_every_process_it_started() {
    let ws = workspace();
    // Each background process records its pid as seen from outside (field 4 of cut's own stat
    // is its parent: the subshell), then waits and would touch the marker.
    let record = "cut -d' ' -f4 /proc/self/stat >> pids";
    let command = format!(
        "({record}; sleep 2; touch marker1) & \
         setsid sh -c \"{record}; sleep 2; touch marker2\" & \
         nohup sh -c \"({record}; sleep 2; touch marker3) &\" >/dev/null 2>&1 & \
         sleep 30"
    );
    let bin = assert_cmd::cargo::cargo_bin("toolgate");
    let mut child = std::process::Command::new(bin)
        .arg("--workspace")
        .arg(ws.path())
        .args(["--store", "memory", "--yes", "call", "exec_shell"])
        .arg(serde_json::json!({"command": command}).to_string())
        .env("XDG_CONFIG_HOME", xdg_dir(ws.path(), "config"))
        .env("XDG_DATA_HOME", xdg_dir(ws.path(), "data"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pids_file = ws.path().join("pids");
    let until = Instant::now() + Duration::from_secs(30);
    let pids: Vec<i32> = loop {
        let pids: Vec<i32> = std::fs::read_to_string(&pids_file)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() == 3 {
            break pids;
        }
        assert!(Instant::now() < until, "the background processes never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(pids.iter().all(|p| alive(*p)), "they run while toolgate does");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < until, "processes outlived toolgate: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    for m in ["marker1", "marker2", "marker3"] {
        assert!(!ws.path().join(m).exists(), "{m} appeared");
    }
}

/// The pids the tree's processes recorded, once there are `n`.
fn recorded(file: &std::path::Path, n: usize) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < until, "the background processes never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A background job outlives its call (the gateway answers with its handle and serves on), but
/// not toolgate: a SIGKILL of the gateway takes the job's whole tree.
#[test]
fn a_background_job_outlives_its_call_but_not_a_sigkilled_toolgate() {
    use std::io::{BufRead, BufReader, Write};
    let ws = workspace();
    let record = "cut -d' ' -f4 /proc/self/stat >> pids";
    let command = format!("(setsid sh -c \"{record}; exec sleep 300\" &) ; {record}; exec sleep 300");
    let bin = assert_cmd::cargo::cargo_bin("toolgate");
    let mut child = std::process::Command::new(bin)
        .arg("--workspace")
        .arg(ws.path())
        .args(["--store", "memory", "--yolo", "serve", "--stdio"])
        .env("XDG_CONFIG_HOME", xdg_dir(ws.path(), "config"))
        .env("XDG_DATA_HOME", xdg_dir(ws.path(), "data"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").unwrap();
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
    );
    let _ = lines.next().unwrap().unwrap();
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "exec_shell", "arguments": {"command": command, "background": true}}}),
    );
    let answer: serde_json::Value = loop {
        let line = lines.next().expect("an answer").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 2 {
            break v;
        }
    };
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"job_id\"") && text.contains("running"), "{text}");
    // The call has answered; its job runs on.
    let pids = recorded(&ws.path().join("pids"), 2);
    assert!(pids.iter().all(|p| alive(*p)), "the job runs after its call answered");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < until, "a job outlived toolgate: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
