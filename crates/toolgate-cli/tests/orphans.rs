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
