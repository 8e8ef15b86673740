//! A kill in the middle of a slow `exec_shell` inside the agent loop: the loop ends at once (the
//! command would run 60 s), the model never sees output from it, and its processes are gone.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolgate_core::CancellationToken;
use toolgate_core::permit::{ApproveAll, Policy};
use toolgate_core::{
    Agent, AgentConfig, AgentStatus, Answer, Engine, EngineConfig, Format, Model, ModelError, ModelErrorKind,
    ModelRequest, Registry, Session, SessionOptions,
};

/// Calls exec_shell once, then answers with text.
struct OneCall(Mutex<u32>);

#[async_trait]
impl Model for OneCall {
    fn format(&self) -> Format {
        Format::Openai
    }
    fn describe(&self) -> String {
        "scripted:one-call".into()
    }
    async fn complete(&self, _: &ModelRequest, _: &CancellationToken) -> Result<Answer, ModelError> {
        let mut n = self.0.lock().unwrap();
        *n += 1;
        let body = if *n == 1 {
            // A grandchild in its own session must die too. Each records its pid as seen from
            // outside the shell's PID namespace (cut's parent, from /proc/self/stat).
            let record = "cut -d' ' -f4 /proc/self/stat >> pids; exec sleep 60";
            let command = format!("setsid sh -c \"{record}\" & sh -c \"{record}\" & wait");
            json!({"role": "assistant", "tool_calls": [{"id": "call_slow", "type": "function",
                   "function": {"name": "exec_shell", "arguments": json!({"command": command}).to_string()}}]})
        } else {
            json!({"role": "assistant", "content": "continued"})
        };
        Answer::parse(Format::Openai, &body).map_err(|e| ModelError::new(ModelErrorKind::InvalidResponse, e.0))
    }
}

/// Alive: present and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_a_slow_command_ends_the_loop_and_its_processes() {
    let ws = tempfile::tempdir().unwrap();
    let mut registry = Registry::new();
    for t in toolgate_tools::builtin_tools() {
        registry.register(t);
    }
    let engine = Arc::new(Engine::new(registry, EngineConfig::default()));
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            workspace: ws.path().to_owned(),
            approver: Arc::new(ApproveAll),
            policy: Policy::default(),
            ..SessionOptions::default()
        },
    ));
    let mut agent = Agent::new(
        engine,
        session.clone(),
        Arc::new(OneCall(Mutex::new(0))),
        AgentConfig::default(),
    );
    let pid_file = ws.path().join("pids");
    let watcher = {
        let (session, pid_file) = (session.clone(), pid_file.clone());
        tokio::spawn(async move {
            // Wait (bounded) until both sleeps have started, then kill.
            let until = Instant::now() + Duration::from_secs(20);
            while std::fs::read_to_string(&pid_file).map_or(0, |t| t.lines().count()) < 2 {
                assert!(Instant::now() < until, "the command never started");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let killed_at = Instant::now();
            session.kill();
            killed_at
        })
    };
    let run = tokio::time::timeout(Duration::from_secs(30), agent.run("run the slow job"))
        .await
        .expect("the loop ends");
    let ended_at = Instant::now();
    let killed_at = watcher.await.unwrap();
    assert_eq!(run.status, AgentStatus::StoppedByUser);
    assert!(
        ended_at.duration_since(killed_at) < Duration::from_secs(5),
        "the loop ended {:?} after the kill",
        ended_at.duration_since(killed_at)
    );
    let results: Vec<&Value> = agent.history().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results.len(), 1, "one result for the one call id");
    let content: Value = serde_json::from_str(results[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        content["error"]["type"], "canceled",
        "nothing of the command is recorded: {content}"
    );
    // The tree is signalled as the call is dropped (TERM, then KILL): it is gone within the
    // same 5 s.
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    while let Some(pid) = pids.iter().find(|p| alive(**p)) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "{pid} survived the kill by 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The conversation continues.
    let run = agent.run("go on").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
}
