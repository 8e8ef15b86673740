//! `exec_shell`: results, the environment, whole-tree kills (a grandchild that ignores TERM, one
//! that calls `setsid`, one orphaned by a double fork), bounded output, the denylist, the sandbox.

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use toolgate_core::tool::{Tool, Typed};
use toolgate_core::{ToolContext, ToolError};
use toolgate_tools::exec_shell::{ExecShell, ShellConfig};
use toolgate_tools::sandbox::SandboxMode;

fn shell(config: ShellConfig) -> Typed<ExecShell> {
    Typed::new(ExecShell::new(config))
}

fn quick() -> ShellConfig {
    ShellConfig {
        kill_grace: Duration::from_millis(300),
        ..ShellConfig::default()
    }
}

async fn run(tool: &Typed<ExecShell>, ws: &Path, args: Value) -> Result<Value, ToolError> {
    let ctx = ToolContext::standalone(ws);
    tool.execute(&ctx, args).await.map(|o| o.content)
}

/// Alive: present and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// Waits (bounded) for a condition the system reaches by itself, checking it as it goes.
async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < until, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

#[tokio::test]
async fn exit_codes_signals_streams_and_directories() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let t = shell(quick());
    let v = run(&t, ws.path(), json!({"command": "echo out; echo err >&2; exit 7"}))
        .await
        .unwrap();
    assert_eq!((v["exit_code"].clone(), v["signal"].clone()), (json!(7), Value::Null));
    assert_eq!(
        (v["stdout"].as_str(), v["stderr"].as_str()),
        (Some("out\n"), Some("err\n"))
    );
    assert_eq!(v["truncated"], false);

    let v = run(&t, ws.path(), json!({"command": "kill -KILL $$"})).await.unwrap();
    assert_eq!(
        (v["exit_code"].clone(), v["signal"].clone()),
        (Value::Null, json!("SIGKILL"))
    );

    let v = run(&t, ws.path(), json!({"command": "pwd", "cwd": "sub"}))
        .await
        .unwrap();
    assert!(v["stdout"].as_str().unwrap().trim_end().ends_with("/sub"));
    let e = run(&t, ws.path(), json!({"command": "pwd", "cwd": "../.."}))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("outside") || e.to_string().contains("workspace"),
        "{e}"
    );

    // stdin is closed: `cat` ends at once instead of waiting.
    let v = run(&t, ws.path(), json!({"command": "cat; echo after"})).await.unwrap();
    assert_eq!(v["stdout"], "after\n");
}

#[tokio::test]
async fn the_environment_holds_only_path_home_lang_and_the_allowlist() {
    // SAFETY: set before any thread of this test reads the environment.
    unsafe {
        std::env::set_var("TOOLGATE_TEST_SECRET", "hunter2");
        std::env::set_var("TOOLGATE_TEST_ALLOWED", "visible");
    }
    let ws = tempfile::tempdir().unwrap();
    let t = shell(ShellConfig {
        env_allowlist: vec!["TOOLGATE_TEST_ALLOWED".into()],
        ..quick()
    });
    let v = run(&t, ws.path(), json!({"command": "env"})).await.unwrap();
    let env = v["stdout"].as_str().unwrap();
    assert!(!env.contains("hunter2"), "{env}");
    assert!(env.contains("TOOLGATE_TEST_ALLOWED=visible"));
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TOOLGATE_TEST_ALLOWED",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "unexpected variable {name}"
        );
    }
}

/// A grandchild that ignores TERM, one in its own session, and one orphaned by a double fork.
/// Each writes its own pid as the host sees it (the shell runs in a PID namespace of its own,
/// where `$!` numbers differ): the parent of `cut`, from /proc/self/stat.
const STUBBORN_TREE: &str = "(trap '' TERM; cut -d' ' -f4 /proc/self/stat >> pids; exec sleep 1000) & \
     setsid sh -c \"cut -d' ' -f4 /proc/self/stat >> pids; exec sleep 1000\" & \
     ( setsid sh -c \"cut -d' ' -f4 /proc/self/stat >> pids; exec sleep 1000\" & ) ; \
     wait";

#[tokio::test]
async fn a_timeout_kills_the_whole_tree() {
    let ws = tempfile::tempdir().unwrap();
    let t = shell(quick());
    let v = run(&t, ws.path(), json!({"command": STUBBORN_TREE, "timeout_ms": 500}))
        .await
        .unwrap();
    assert_eq!(v["timed_out"], true);
    // The TERM-ignoring grandchild needs a KILL: toolgate's after the grace period, or the
    // kernel's at once when the shell's PID namespace ends with the shell (where namespaces
    // can be had). Either way it is gone, which is what is asserted below.
    assert!(matches!(v["killed_with"].as_str(), Some("SIGKILL" | "SIGTERM")), "{v}");
    let pids = pids(&std::fs::read_to_string(ws.path().join("pids")).unwrap());
    assert_eq!(pids.len(), 3);
    for pid in pids {
        assert!(!alive(pid), "{pid} survived the timeout");
    }
}

#[tokio::test]
async fn a_kill_kills_the_whole_tree() {
    let ws = tempfile::tempdir().unwrap();
    let t = std::sync::Arc::new(shell(quick()));
    let ctx = ToolContext::standalone(ws.path());
    let cancel = ctx.cancel.clone();
    let task = {
        let t = t.clone();
        tokio::spawn(async move { t.execute(&ctx, json!({"command": STUBBORN_TREE})).await })
    };
    let file = ws.path().join("pids");
    eventually("three pids written", Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| pids(&t).len() == 3)
    })
    .await;
    cancel.cancel();
    assert!(matches!(task.await.unwrap(), Err(ToolError::Canceled)));
    for pid in pids(&std::fs::read_to_string(&file).unwrap()) {
        assert!(!alive(pid), "{pid} survived the kill");
    }
}

#[tokio::test]
async fn an_abandoned_call_still_kills_its_tree() {
    // The engine's own timeout drops the call's future: the tree is killed in the background.
    let ws = tempfile::tempdir().unwrap();
    let t = std::sync::Arc::new(shell(quick()));
    let task = {
        let (t, dir) = (t.clone(), ws.path().to_owned());
        tokio::spawn(async move {
            let ctx = ToolContext::standalone(&dir);
            t.execute(&ctx, json!({"command": STUBBORN_TREE})).await
        })
    };
    let file = ws.path().join("pids");
    eventually("three pids written", Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| pids(&t).len() == 3)
    })
    .await;
    task.abort();
    let _ = task.await;
    let pids = pids(&std::fs::read_to_string(&file).unwrap());
    eventually("the tree gone", Duration::from_secs(10), || {
        pids.iter().all(|p| !alive(*p))
    })
    .await;
}

fn max_rss_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| u.max_rss())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_100_mb_output_is_cut_at_the_cap_with_memory_bounded() {
    let ws = tempfile::tempdir().unwrap();
    let t = shell(quick());
    let before = max_rss_kib();
    let v = run(
        &t,
        ws.path(),
        json!({"command": "head -c 100000000 /dev/zero | tr '\\0' x"}),
    )
    .await
    .unwrap();
    let grown_mib = (max_rss_kib() - before) / 1024;
    assert_eq!(v["exit_code"], 0, "the process ran to its end and was reaped");
    assert_eq!(v["truncated"], true);
    assert_eq!(v["stdout_bytes"], 100_000_000);
    assert_eq!(v["stdout"].as_str().unwrap().len(), 1 << 20);
    assert!(grown_mib < 32, "memory grew by {grown_mib} MiB for 100 MB of output");
    eprintln!("100 MB of output: peak memory grew by {grown_mib} MiB");
}

#[tokio::test]
async fn both_streams_beyond_a_pipe_buffer_do_not_deadlock() {
    let ws = tempfile::tempdir().unwrap();
    let t = shell(quick());
    let v = run(
        &t,
        ws.path(),
        json!({"command": "for i in $(seq 40); do head -c 100000 /dev/zero; head -c 100000 /dev/zero >&2; done; echo done >&2"}),
    )
    .await
    .unwrap();
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["stdout_bytes"], 4_000_000);
    assert_eq!(v["stderr_bytes"], 4_000_005);
}

#[tokio::test]
async fn denylisted_commands_never_run() {
    let ws = tempfile::tempdir().unwrap();
    let t = shell(quick());
    for cmd in [
        "touch ran; rm -rf /",
        "touch ran && mkfs.ext4 /dev/sda",
        "touch ran; echo $(reboot)",
        "touch ran; :(){ :|:& };:",
    ] {
        let e = run(&t, ws.path(), json!({ "command": cmd })).await.unwrap_err();
        assert!(e.to_string().contains("denylist"), "{cmd}: {e}");
        assert!(!ws.path().join("ran").exists(), "{cmd}: nothing ran");
    }
}

/// Probes each thing the sandbox stops; a run without the sandbox shows each probe works.
fn probes(outside: &str, tcp_port: u16) -> String {
    format!(
        "echo inside > inside.txt && echo wrote-inside; \
         echo x > {outside} 2>/dev/null && echo wrote-outside; \
         (echo x > /dev/udp/127.0.0.1/9) 2>/dev/null && echo udp-open; \
         (exec 3<>/dev/tcp/127.0.0.1/{tcp_port}) 2>/dev/null && echo tcp-open; \
         echo end"
    )
}

#[tokio::test]
async fn the_sandbox_stops_writes_outside_and_network_sockets() {
    let ws = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = format!("/var/tmp/toolgate-sandbox-{}", std::process::id());
    let command = probes(&outside, port);

    let off = ShellConfig {
        sandbox: SandboxMode::Off,
        ..quick()
    };
    let control = run(&shell(off), ws.path(), json!({ "command": command }))
        .await
        .unwrap();
    let control_out = control["stdout"].as_str().unwrap().to_owned();
    let _ = std::fs::remove_file(&outside);
    for probe in ["wrote-inside", "wrote-outside", "udp-open", "tcp-open"] {
        assert!(
            control_out.contains(probe),
            "without the sandbox {probe} works: {control_out}"
        );
    }

    let t = shell(ShellConfig {
        sandbox: SandboxMode::On,
        network: false,
        ..quick()
    });
    let v = run(&t, ws.path(), json!({ "command": command })).await.unwrap();
    let report = v["sandbox"].clone();
    let out = v["stdout"].as_str().unwrap().to_owned();
    let _ = std::fs::remove_file(&outside);
    let fs_on = report["filesystem"].as_str().unwrap_or("").starts_with("enforced");
    let net_on = report["network"].as_str().unwrap_or("").starts_with("enforced");
    if !fs_on || !net_on {
        eprintln!("sandbox test skipped in part: this kernel reports {report}");
    }
    assert!(out.contains("wrote-inside") && out.contains("end"), "{out}");
    if fs_on {
        assert!(
            !out.contains("wrote-outside"),
            "a write outside the workspace got through: {out}"
        );
    }
    if net_on {
        assert!(!out.contains("udp-open"), "a UDP socket was opened: {out}");
        assert!(!out.contains("tcp-open"), "a TCP socket was opened: {out}");
    }
}

#[tokio::test]
async fn a_required_sandbox_the_kernel_cannot_give_fails_closed() {
    let ws = tempfile::tempdir().unwrap();
    let t = shell(ShellConfig {
        sandbox: SandboxMode::Required,
        network: false,
        ..quick()
    });
    // Where the kernel provides both parts the command runs; where not, it must not run at all.
    match run(&t, ws.path(), json!({"command": "touch ran"})).await {
        Ok(v) => {
            assert!(v["sandbox"]["filesystem"].as_str().unwrap().starts_with("enforced"));
            assert!(v["sandbox"]["network"].as_str().unwrap().starts_with("enforced"));
        }
        Err(e) => {
            assert!(e.to_string().contains("required"), "{e}");
            assert!(!ws.path().join("ran").exists());
        }
    }
}
