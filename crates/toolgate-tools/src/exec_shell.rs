//! `exec_shell`: runs a command line with `bash -c` in the workspace (or a directory inside it).
//!
//! - stdin is closed; the environment is empty but for `PATH`, `HOME`, `LANG` and an allowlist.
//! - The shell gets a session and process group of its own and is made a child subreaper, so
//!   every descendant — one that double-forks or calls `setsid` included — stays in its tree
//!   while it runs. On a timeout or a kill the whole tree is signalled: TERM, then KILL after a
//!   grace period, following descendants by pid and start time even once they are reparented.
//! - stdout and stderr are read concurrently while the process runs, each kept up to a cap
//!   (the rest is read and dropped), so the process never blocks on a full pipe and memory
//!   stays bounded.
//! - The denylist ([`crate::denylist`]) refuses catastrophic commands before anything runs.
//! - An optional sandbox ([`crate::sandbox`]): Landlock confines writes to the workspace and a
//!   temporary directory, and a seccomp filter refuses new IPv4/IPv6 sockets.

use crate::sandbox::SandboxMode;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use toolgate_core::ToolError;
use toolgate_core::error::ErrorKind;
use toolgate_core::tool::{
    Annotations, PermissionSubject, TaskSupport, ToolContext, ToolOutput, ToolSpec, TypedTool, Vetted,
};

/// `exec_shell` settings (`[shell]` in the configuration).
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// Environment variables passed through besides `PATH`, `HOME` and `LANG`.
    pub env_allowlist: Vec<String>,
    /// Bytes kept of stdout, and of stderr.
    pub max_output_bytes: usize,
    /// The default timeout of a command (the call's `timeout_ms` may lower or raise it up to
    /// `max_timeout`).
    pub timeout: Duration,
    /// The longest timeout a call may ask for.
    pub max_timeout: Duration,
    /// Between TERM and KILL.
    pub kill_grace: Duration,
    /// The OS sandbox (on by default).
    pub sandbox: SandboxMode,
    /// Whether sandboxed commands may open network sockets (default true).
    pub network: bool,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            env_allowlist: Vec::new(),
            max_output_bytes: 1 << 20,
            timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            sandbox: SandboxMode::On,
            network: true,
        }
    }
}

/// Arguments of `exec_shell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecShellArgs {
    /// The command line, run with `bash -c`.
    pub command: String,
    /// The directory to run in, relative to the workspace (default: the workspace).
    pub cwd: Option<String>,
    /// Stop the command after this many milliseconds (default 120000; in the background, the
    /// engine's job limit).
    pub timeout_ms: Option<u64>,
    /// Run in the background (servers, watchers, long builds): answer at once with a job handle,
    /// then follow it with job_output, job_wait and job_kill.
    #[serde(default)]
    pub background: Option<bool>,
}

/// The tool.
#[derive(Debug, Default)]
pub struct ExecShell {
    /// Settings.
    pub config: ShellConfig,
    containment: crate::contain::Containment,
}

impl ExecShell {
    /// An `exec_shell` with these settings.
    pub fn new(config: ShellConfig) -> Self {
        Self {
            config,
            containment: crate::contain::Containment::default(),
        }
    }
}

/// One process as the kernel lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Proc {
    pid: i32,
    start: u64,
}

/// pid → (parent, start time) for every process of this machine.
fn process_table() -> HashMap<i32, (i32, u64)> {
    let mut table = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((ppid, start)) = stat(pid) {
            table.insert(pid, (ppid, start));
        }
    }
    table
}

/// Parent and start time from `/proc/PID/stat` (the name may hold spaces and parentheses).
fn stat(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None; // already dead
    }
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// The live processes among `known`, plus every descendant of them.
fn live_tree(known: &HashSet<Proc>) -> HashSet<Proc> {
    let table = process_table();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, (ppid, _)) in &table {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut out = HashSet::new();
    let mut queue: Vec<i32> = known
        .iter()
        .filter(|p| table.get(&p.pid).is_some_and(|(_, s)| *s == p.start))
        .map(|p| p.pid)
        .collect();
    while let Some(pid) = queue.pop() {
        let Some((_, start)) = table.get(&pid) else { continue };
        if out.insert(Proc { pid, start: *start }) {
            queue.extend(children.get(&pid).into_iter().flatten());
        }
    }
    out
}

fn signal_all(procs: &HashSet<Proc>, group: i32, sig: nix::sys::signal::Signal) {
    use nix::unistd::Pid;
    let _ = nix::sys::signal::killpg(Pid::from_raw(group), sig);
    for p in procs {
        // Recheck identity right before signalling: a recycled pid is left alone.
        if stat(p.pid).is_some_and(|(_, s)| s == p.start) {
            let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), sig);
        }
    }
}

/// The process tree of one command: its root (the shell) and every descendant seen so far.
struct Tree {
    root: Proc,
    seen: HashSet<Proc>,
}

impl Tree {
    fn refresh(&mut self) -> HashSet<Proc> {
        let mut known = self.seen.clone();
        known.insert(self.root);
        let live = live_tree(&known);
        self.seen.extend(live.iter().copied());
        live
    }

    /// TERM to the tree, KILL after the grace period to whatever is left, until nothing is.
    async fn terminate(&mut self, child: &mut tokio::process::Child, grace: Duration) -> &'static str {
        use nix::sys::signal::Signal;
        let live = self.refresh();
        signal_all(&live, self.root.pid, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let root_done = matches!(child.try_wait(), Ok(Some(_)));
            if root_done && self.refresh().is_empty() {
                return "SIGTERM";
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..50 {
            let live = self.refresh();
            if live.is_empty() && matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            signal_all(&live, self.root.pid, Signal::SIGKILL);
            let _ = tokio::time::timeout(Duration::from_millis(20), child.wait()).await;
        }
        "SIGKILL"
    }
}

/// Kills a tree whose call was abandoned (the engine's timeout or a kill dropped the future):
/// in the background, TERM then KILL, so the caller is not held up.
struct Guard {
    tree: Option<(Tree, tokio::process::Child, Duration)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some((mut tree, mut child, grace)) = self.tree.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    tree.terminate(&mut child, grace).await;
                });
            }
            Err(_) => {
                let live = tree.refresh();
                signal_all(&live, tree.root.pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes; returns them and the total read. A
/// background job also gets every byte as it comes.
async fn capped(
    mut stream: impl AsyncRead + Unpin,
    cap: usize,
    job: Option<std::sync::Arc<toolgate_core::jobs::Job>>,
) -> (Vec<u8>, u64) {
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, total),
            Ok(n) => {
                if let Some(job) = &job {
                    job.write(&buf[..n]);
                }
                total += n as u64;
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A redirection written as a path inside the workspace that really lands outside it (through a
/// symlink to a file or a directory) or on one of toolgate's control files.
fn redirect_escape(analysis: &toolgate_core::shell::Analysis, place: &crate::denylist::Place) -> Option<String> {
    let root = std::fs::canonicalize(&place.workspace).unwrap_or_else(|_| place.workspace.clone());
    let alternatives = analysis.writes.iter().flat_map(|w| {
        toolgate_core::shell::expand_braces(&w.path, 64)
            .into_iter()
            .map(move |path| (path, w.cwd.as_deref()))
    });
    for (path, cwd) in alternatives {
        let Some(cwd) = cwd else {
            continue;
        };
        if path.is_empty() || path == "/dev/null" {
            continue;
        }
        if path.starts_with('/') || path.starts_with('~') || cwd.starts_with('/') || cwd.starts_with('~') {
            continue; // written outside on its face: no allow rule covers it, a person is asked
        }
        let target = place.start.join(cwd).join(&path);
        let real = resolve_existing(&target);
        if crate::protect::is_protected(&real) {
            return Some(format!(
                "it redirects output to {path}, one of toolgate's own control files"
            ));
        }
        if !real.starts_with(&root) {
            return Some(format!(
                "it redirects output to {}, which leads outside the workspace (to {})",
                path,
                real.display()
            ));
        }
    }
    None
}

/// The path with its longest existing prefix resolved (symlinks followed), the rest appended.
fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(std::ffi::OsStr::to_os_string),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The directory to run in: inside the workspace, existing.
fn working_dir(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(rel) = cwd.filter(|c| !c.is_empty() && *c != ".") else {
        return Ok(workspace.to_path_buf());
    };
    let ws = crate::confine::Workspace::open(workspace)?;
    let relative = ws.relative(rel)?;
    let fd = ws.open_beneath(
        &relative,
        nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_RDONLY,
        0,
        rel,
    )?;
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| ToolError::failed(format!("cannot resolve the directory {rel:?}: {e}")))
}

#[async_trait]
impl TypedTool for ExecShell {
    type Args = ExecShellArgs;
    fn name(&self) -> &str {
        "exec_shell"
    }
    fn description(&self) -> &str {
        "Run a shell command line (bash -c) in the workspace and return its exit code, stdout and stderr. stdin is closed; long output is cut. With background: true (servers, watchers, long builds) it returns a job handle at once."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            subject: PermissionSubject::Command("command".into()),
            // The tool keeps to the engine's limit itself (it kills the tree and reports the output
            // so far); the engine's own timeout is a backstop.
            stops_itself: true,
            background_argument: Some("background".into()),
            // A long build or test run is what an MCP task is for.
            task: TaskSupport::Optional,
            ..ToolSpec::with_annotations(Annotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true,
            })
        }
    }
    fn vet(&self, workspace: &Path, args: &serde_json::Value) -> Vetted {
        let command = args
            .get("command")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let cwd = args.get("cwd").and_then(serde_json::Value::as_str);
        let place = crate::denylist::Place::new(workspace, cwd);
        let analysis = toolgate_core::shell::analyze(command);
        if let Some(why) = crate::denylist::check_analysis(&analysis, command, &place) {
            return Vetted::refuse(format!(
                "{why}; this command is on exec_shell's list of catastrophic commands, refused whatever the rules say"
            ));
        }
        match redirect_escape(&analysis, &place) {
            Some(why) => Vetted::refuse(why),
            None => Vetted::default(),
        }
    }
    async fn run(&self, ctx: &ToolContext, args: ExecShellArgs) -> Result<ToolOutput, ToolError> {
        let place = crate::denylist::Place::new(&ctx.workspace, args.cwd.as_deref());
        if let Some(why) = crate::denylist::check_at(&args.command, &place) {
            return Err(ToolError::failed(format!(
                "refused before running: {why}. This command is on exec_shell's denylist of catastrophic commands."
            )));
        }
        let cwd = working_dir(&ctx.workspace, args.cwd.as_deref())?;
        let sandbox = crate::sandbox::prepare(self.config.sandbox, &ctx.workspace, self.config.network)
            .map_err(ToolError::failed)?;
        // One rule: the call's own timeout ≤ [shell] timeout/max ≤ the engine's limit for this
        // attempt. A background job is held to the engine's job limit instead.
        let job = ctx.jobs.current().cloned();
        let timeout = match &job {
            Some(_) => args
                .timeout_ms
                .map_or(ctx.timeout, Duration::from_millis)
                .min(ctx.timeout),
            None => args
                .timeout_ms
                .map_or(self.config.timeout, Duration::from_millis)
                .min(self.config.max_timeout)
                .min(ctx.timeout),
        };

        let mut command = tokio::process::Command::new("bash");
        command
            .arg("-c")
            .arg(&args.command)
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_clear();
        command.envs(crate::contain::minimal_env(&self.config.env_allowlist));
        let pre_exec = sandbox.pre_exec();
        let containment = self.containment.clone();
        // SAFETY: between fork and exec only async-signal-safe calls are made: setsid, prctl,
        // unshare, fork and waitpid in the containment, and the sandbox's landlock_restrict_self
        // and seccomp filter installation, none of which allocates (the sandbox's rules and the
        // namespace maps were built before the fork).
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)?;
                containment.apply()?;
                pre_exec.apply()
            });
        }
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|e| ToolError::failed(format!("cannot start bash: {e}")))?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let root = Proc {
            pid,
            start: stat(pid).map(|(_, s)| s).unwrap_or(0),
        };
        let cap = self.config.max_output_bytes;
        let stdout = child.stdout.take().map(|s| tokio::spawn(capped(s, cap, job.clone())));
        let stderr = child.stderr.take().map(|s| tokio::spawn(capped(s, cap, job.clone())));
        let mut guard = Guard {
            tree: Some((
                Tree {
                    root,
                    seen: HashSet::new(),
                },
                child,
                self.config.kill_grace,
            )),
        };
        let (tree, child, grace) = match guard.tree.as_mut() {
            Some((t, c, g)) => (t, c, *g),
            None => return Err(ToolError::failed("internal: the process was lost")),
        };
        enum End {
            Exited(std::process::ExitStatus),
            TimedOut,
            Canceled,
        }
        let end = tokio::select! {
            status = child.wait() => match status {
                Ok(s) => End::Exited(s),
                Err(e) => return Err(ToolError::failed(format!("cannot wait for bash: {e}"))),
            },
            () = tokio::time::sleep(timeout) => End::TimedOut,
            () = ctx.cancel.cancelled() => End::Canceled,
        };
        let (status, signal_sent) = match end {
            End::Exited(s) => (Some(s), None),
            End::TimedOut | End::Canceled => {
                let sent = tree.terminate(child, grace).await;
                (child.try_wait().ok().flatten(), Some(sent))
            }
        };
        guard.tree = None;
        let canceled = matches!(end, End::Canceled);
        // Output still in the pipes is drained; a leftover background process holding them
        // open does not hold the call (it gets a short while, then its output is dropped).
        let drain = Duration::from_millis(250);
        let collect = |h: Option<tokio::task::JoinHandle<(Vec<u8>, u64)>>| async move {
            match h {
                Some(mut h) => match tokio::time::timeout(drain, &mut h).await {
                    Ok(Ok(r)) => r,
                    _ => {
                        h.abort();
                        (Vec::new(), 0)
                    }
                },
                None => (Vec::new(), 0),
            }
        };
        let ((out, out_total), (err, err_total)) = tokio::join!(collect(stdout), collect(stderr));
        if canceled {
            return Err(ToolError::Canceled);
        }
        use std::os::unix::process::ExitStatusExt;
        let signal = status.and_then(|s| s.signal()).map(|s| {
            nix::sys::signal::Signal::try_from(s)
                .map(|sig| sig.as_str().to_owned())
                .unwrap_or_else(|_| s.to_string())
        });
        let mut result = json!({
            "exit_code": status.and_then(|s| s.code()),
            "signal": signal,
            "stdout": text(&out),
            "stderr": text(&err),
            "duration_ms": started.elapsed().as_millis() as u64,
            "truncated": out_total > out.len() as u64 || err_total > err.len() as u64,
        });
        if out_total > out.len() as u64 || err_total > err.len() as u64 {
            result["stdout_bytes"] = json!(out_total);
            result["stderr_bytes"] = json!(err_total);
        }
        if let Some(sent) = signal_sent {
            result["timed_out"] = json!(true);
            result["killed_with"] = json!(sent);
            result["timeout_ms"] = json!(timeout.as_millis() as u64);
        }
        if let Some(report) = sandbox.report() {
            result["sandbox"] = serde_json::to_value(report).unwrap_or_default();
        }
        // The model sees the output either way; the call is recorded as what happened.
        let output = ToolOutput::json(result);
        Ok(if signal_sent.is_some() {
            output.failed(ErrorKind::Timeout)
        } else if status.is_none_or(|s| !s.success()) {
            output.failed(ErrorKind::ExecutionFailed)
        } else {
            output
        })
    }
}
