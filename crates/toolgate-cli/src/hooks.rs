//! Command hooks in the widely used PreToolUse / PostToolUse convention: a tool-name matcher
//! (regex) and a command run with `sh -c`, the event as JSON on stdin. Exit 0 proceeds (stdout may
//! carry a JSON decision in the convention's `hookSpecificOutput` shape, or the older top-level
//! `decision: approve|block`); exit 2 blocks with stderr as the reason; any other exit code, a hook
//! that cannot start, or a timeout follows the hook's `on_error` (`ignore`, or `block`).

use async_trait::async_trait;
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_core::hooks::{Hook, HookDecision, HookEvent, PostHookOutput, PreHookOutput};

/// Output read from a hook, at most.
const MAX_OUTPUT: u64 = 1 << 20;

/// What a failed or timed-out hook does.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Proceed as if the hook said nothing (the convention's default).
    #[default]
    Ignore,
    /// Refuse the call (pre) or withhold the result (post).
    Block,
}

/// `[[hooks.pre_tool_use]]` / `[[hooks.post_tool_use]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// A regex over the tool name (whole name); empty or `*` matches every tool.
    #[serde(default)]
    pub matcher: Option<String>,
    /// The command, run with `sh -c` in the workspace.
    pub command: String,
    /// How long it may run.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// `ignore` (default) or `block`.
    #[serde(default)]
    pub on_error: OnError,
}

fn default_timeout() -> u64 {
    60_000
}

/// `[hooks]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    /// Hooks run before calls.
    pub pre_tool_use: Vec<HookConfig>,
    /// Hooks run after calls.
    pub post_tool_use: Vec<HookConfig>,
}

impl HookConfig {
    /// The matcher compiled, anchored to the whole tool name.
    pub fn regex(&self) -> Result<Option<Regex>, String> {
        let m = self.matcher.as_deref().map_or("", str::trim);
        if m.is_empty() || m == "*" {
            return Ok(None);
        }
        Regex::new(&format!("^(?:{m})$")).map(Some).map_err(|e| {
            format!(
                "the matcher {m:?} is not a valid regex: {}",
                e.to_string().lines().last().unwrap_or("")
            )
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Pre,
    Post,
}

/// One command hook.
#[derive(Debug)]
pub struct CommandHook {
    stage: Stage,
    matcher: Option<Regex>,
    command: String,
    timeout: Duration,
    on_error: OnError,
}

/// Builds the configured hooks, pre hooks first, each list in configuration order.
pub fn build(config: &HooksConfig) -> Result<Vec<std::sync::Arc<dyn Hook>>, String> {
    let mut out: Vec<std::sync::Arc<dyn Hook>> = Vec::new();
    for (stage, list) in [(Stage::Pre, &config.pre_tool_use), (Stage::Post, &config.post_tool_use)] {
        for h in list {
            out.push(std::sync::Arc::new(CommandHook {
                stage,
                matcher: h.regex()?,
                command: h.command.clone(),
                timeout: Duration::from_millis(h.timeout_ms),
                on_error: h.on_error,
            }));
        }
    }
    Ok(out)
}

/// How a hook ended.
enum Ran {
    Exited { code: i32, stdout: String, stderr: String },
    Failed(String),
}

impl CommandHook {
    async fn run(&self, event: &HookEvent) -> Ran {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .current_dir(&event.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return Ran::Failed(format!("the hook {:?} could not start: {e}", self.command)),
        };
        let pid = child.id();
        let input = serde_json::to_vec(event).unwrap_or_default();
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let io = async {
            let write = async {
                if let Some(mut s) = stdin.take() {
                    // A hook that does not read its stdin is not an error.
                    let _ = s.write_all(&input).await;
                }
            };
            let read = |pipe: Option<tokio::process::ChildStdout>| async move {
                let mut buf = Vec::new();
                if let Some(p) = pipe {
                    let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf).await;
                }
                String::from_utf8_lossy(&buf).into_owned()
            };
            let read_err = async {
                let mut buf = Vec::new();
                if let Some(p) = stderr.take() {
                    let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf).await;
                }
                String::from_utf8_lossy(&buf).into_owned()
            };
            let ((), out, err) = tokio::join!(write, read(stdout.take()), read_err);
            let status = child.wait().await;
            (status, out, err)
        };
        match tokio::time::timeout(self.timeout, io).await {
            Ok((Ok(status), stdout, stderr)) => Ran::Exited {
                code: status.code().unwrap_or(-1),
                stdout,
                stderr,
            },
            Ok((Err(e), ..)) => Ran::Failed(format!("the hook {:?} failed: {e}", self.command)),
            Err(_) => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    // The whole group: a hook's own children die with it.
                    let _ =
                        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
                Ran::Failed(format!(
                    "the hook {:?} did not finish within {} ms",
                    self.command,
                    self.timeout.as_millis()
                ))
            }
        }
    }

    fn failed(&self, message: String) -> Option<String> {
        tracing::warn!(hook = %self.command, %message, "hook failed");
        (self.on_error == OnError::Block).then_some(message)
    }
}

/// The JSON a hook printed on exit 0, if it printed an object.
fn output_json(stdout: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str::<Value>(stdout.trim()) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

#[async_trait]
impl Hook for CommandHook {
    fn matches(&self, tool: &str) -> bool {
        self.matcher.as_ref().is_none_or(|r| r.is_match(tool))
    }

    async fn pre_tool_use(&self, event: &HookEvent) -> PreHookOutput {
        if self.stage != Stage::Pre {
            return PreHookOutput::default();
        }
        let deny = |reason: String| PreHookOutput {
            decision: Some((HookDecision::Deny, reason)),
            ..PreHookOutput::default()
        };
        match self.run(event).await {
            Ran::Exited { code: 0, stdout, .. } => {
                let Some(out) = output_json(&stdout) else {
                    return PreHookOutput::default();
                };
                let specific = out.get("hookSpecificOutput");
                let reason = text(specific.and_then(|s| s.get("permissionDecisionReason")))
                    .or_else(|| text(out.get("reason")))
                    .unwrap_or_else(|| format!("decided by the hook {:?}", self.command));
                let decision = match text(specific.and_then(|s| s.get("permissionDecision"))).as_deref() {
                    Some("allow") => Some(HookDecision::Allow),
                    Some("deny") => Some(HookDecision::Deny),
                    Some("ask") => Some(HookDecision::Ask),
                    _ => match text(out.get("decision")).as_deref() {
                        Some("approve") => Some(HookDecision::Allow),
                        Some("block") => Some(HookDecision::Deny),
                        _ => None,
                    },
                };
                let decision = if out.get("continue") == Some(&Value::Bool(false)) {
                    Some(HookDecision::Deny)
                } else {
                    decision
                };
                PreHookOutput {
                    decision: decision.map(|d| (d, text(out.get("stopReason")).unwrap_or(reason))),
                    updated_input: specific
                        .and_then(|s| s.get("updatedInput"))
                        .and_then(Value::as_object)
                        .cloned(),
                    additional_context: text(specific.and_then(|s| s.get("additionalContext"))),
                }
            }
            Ran::Exited { code: 2, stderr, .. } => deny(nonempty(stderr, &self.command)),
            Ran::Exited { code, stderr, .. } => self
                .failed(format!(
                    "the hook {:?} exited with {code}: {}",
                    self.command,
                    stderr.trim()
                ))
                .map(deny)
                .unwrap_or_default(),
            Ran::Failed(message) => self.failed(message).map(deny).unwrap_or_default(),
        }
    }

    async fn post_tool_use(&self, event: &HookEvent) -> PostHookOutput {
        if self.stage != Stage::Post {
            return PostHookOutput::default();
        }
        let withhold = |reason: String| PostHookOutput {
            block: Some(reason),
            ..PostHookOutput::default()
        };
        match self.run(event).await {
            Ran::Exited { code: 0, stdout, .. } => {
                let Some(out) = output_json(&stdout) else {
                    return PostHookOutput::default();
                };
                let specific = out.get("hookSpecificOutput");
                let mut result = PostHookOutput {
                    replacement: specific
                        .and_then(|s| s.get("updatedToolOutput").or_else(|| s.get("updatedMCPToolOutput")))
                        .cloned(),
                    stop: (out.get("continue") == Some(&Value::Bool(false)))
                        .then(|| text(out.get("stopReason")).unwrap_or_else(|| "a hook stopped the run".into())),
                    additional_context: text(specific.and_then(|s| s.get("additionalContext"))),
                    block: None,
                };
                if text(out.get("decision")).as_deref() == Some("block") {
                    result.block = Some(
                        text(out.get("reason")).unwrap_or_else(|| format!("the hook {:?} blocked it", self.command)),
                    );
                }
                result
            }
            Ran::Exited { code: 2, stderr, .. } => withhold(nonempty(stderr, &self.command)),
            Ran::Exited { code, stderr, .. } => self
                .failed(format!(
                    "the hook {:?} exited with {code}: {}",
                    self.command,
                    stderr.trim()
                ))
                .map(withhold)
                .unwrap_or_default(),
            Ran::Failed(message) => self.failed(message).map(withhold).unwrap_or_default(),
        }
    }
}

fn nonempty(stderr: String, command: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        format!("the hook {command:?} blocked it")
    } else {
        s.to_owned()
    }
}

/// The files the hook commands run (their programs and script arguments that exist as files,
/// relative to the workspace or absolute): toolgate's control files, out of the tools' reach.
pub fn programs(config: &HooksConfig, workspace: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for h in config.pre_tool_use.iter().chain(&config.post_tool_use) {
        let analysis = toolgate_core::shell::analyze(&h.command);
        for p in &analysis.programs {
            let words = std::iter::once(&p.written).chain(p.words.iter().skip(1));
            for w in words.filter(|w| w.contains('/') || !w.starts_with('-')) {
                let path = workspace.join(w);
                if path.is_file() {
                    out.push(path);
                }
            }
        }
    }
    out
}
