//! The upstream servers together: starts them, keeps the engine's registry equal to the built-in
//! tools plus every server's current tools, and when a tool's definition changes revokes its
//! grants everywhere and says so — an approval never carries over to a tool that changed.

use crate::tool::McpTool;
use crate::upstream::{Report, Unserved, Upstream};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use toolgate_core::events::Event;
use toolgate_core::store::Store;
use toolgate_core::{Engine, Registry, Session, Tool};

/// A server's state, for `/healthz` and the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Not connected yet.
    Starting,
    /// Connected; this many tools exposed.
    Ready {
        /// Tools registered from it.
        tools: usize,
        /// Its tools that are not served (a schema that does not compile even normalised).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        unserved: Vec<Unserved>,
    },
    /// Down; retried in the background.
    Failed {
        /// Why.
        reason: String,
    },
}

/// A server's history: how often it went down or failed to start (each is followed by a
/// restart), and the last reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerHealth {
    /// Restarts since toolgate started (a failed start, or a server that exited or hung up).
    pub restarts: u32,
    /// Why it last went down, or could not start.
    pub last_error: Option<String>,
    /// When (RFC 3339).
    pub last_error_at: Option<String>,
}

/// What changed in one server's tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Change {
    /// New tools.
    pub added: Vec<String>,
    /// Tools gone.
    pub removed: Vec<String>,
    /// Tools whose definition changed (their grants were revoked).
    pub changed: Vec<String>,
}

impl Change {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

type Listener = Box<dyn Fn() + Send + Sync>;

/// When a server's changed tools reach the engine's registry. The first reports of all servers
/// wait for `start`, which builds the registry once for all of them (not once per server, each
/// rebuild registering thousands of tools again and warning again of every renamed one).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rebuild {
    Now,
    Later,
}

struct State {
    tools: BTreeMap<String, Vec<Arc<McpTool>>>,
    servers: BTreeMap<String, ServerState>,
    health: BTreeMap<String, ServerHealth>,
    sessions: Vec<Weak<Session>>,
    listeners: Vec<Listener>,
}

/// The upstream servers and the registry they feed.
pub struct Hub {
    engine: Arc<Engine>,
    base: Vec<Arc<dyn Tool>>,
    store: Arc<dyn Store>,
    state: Mutex<State>,
    shutdown: CancellationToken,
    supervisors: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Bumped after every report of a server (up, down, tools changed or not): tests and
    /// clients wait on it.
    version: watch::Sender<u64>,
    /// The servers (their connections serve prompts and resources too, see `proxy`).
    upstreams: Vec<Arc<Upstream>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Hub {
    /// Starts the servers and waits until each has connected or failed once (a server that
    /// does not start is reported and retried in the background; the others serve). `base`
    /// are the tools registered besides the servers' (the built-ins); the engine's registry
    /// is replaced by base + upstream tools.
    pub async fn start(
        engine: Arc<Engine>,
        base: Vec<Arc<dyn Tool>>,
        store: Arc<dyn Store>,
        servers: Vec<Upstream>,
    ) -> Arc<Self> {
        let (version, _) = watch::channel(0);
        let servers: Vec<Arc<Upstream>> = servers.into_iter().map(Arc::new).collect();
        for server in &servers {
            if let Some(oauth) = server.oauth() {
                oauth.set_store(store.clone());
            }
        }
        let hub = Arc::new(Self {
            engine,
            base,
            store,
            state: Mutex::new(State {
                tools: BTreeMap::new(),
                servers: servers
                    .iter()
                    .map(|s| (s.name().to_owned(), ServerState::Starting))
                    .collect(),
                health: BTreeMap::new(),
                sessions: Vec::new(),
                listeners: Vec::new(),
            }),
            shutdown: CancellationToken::new(),
            supervisors: Mutex::new(Vec::new()),
            version,
            upstreams: servers.clone(),
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pending: std::collections::BTreeSet<String> = servers.iter().map(|s| s.name().to_owned()).collect();
        {
            let mut supervisors = hub.supervisors.lock().unwrap_or_else(|p| p.into_inner());
            for server in servers {
                supervisors.push(tokio::spawn(server.supervise(tx.clone(), hub.shutdown.clone())));
            }
        }
        drop(tx);
        // The first report of every server, then the rest in the background.
        while !pending.is_empty() {
            let Some(report) = rx.recv().await else { break };
            pending.remove(report.server());
            hub.apply(report, Rebuild::Later).await;
        }
        hub.rebuild();
        release_freed_memory();
        let background = hub.clone();
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                background.apply(report, Rebuild::Now).await;
            }
        });
        hub
    }

    /// The servers.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// Each server's state.
    pub fn servers(&self) -> BTreeMap<String, ServerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).servers.clone()
    }

    /// Each server's restarts and last error (servers that never went down are absent).
    pub fn health(&self) -> BTreeMap<String, ServerHealth> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).health.clone()
    }

    /// Follows a session, so a changed tool's grants are dropped from it too.
    pub fn track(&self, session: &Arc<Session>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.sessions.retain(|s| s.strong_count() > 0);
        state.sessions.push(Arc::downgrade(session));
    }

    /// Calls `f` after every change of the registry (MCP clients get `list_changed`).
    pub fn on_change(&self, f: impl Fn() + Send + Sync + 'static) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .listeners
            .push(Box::new(f));
    }

    /// A receiver that sees the hub's version (bumped after each server report is applied).
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Stops every server (their process groups end) and waits for them, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        let handles: Vec<_> = std::mem::take(&mut *self.supervisors.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = tokio::time::timeout(grace, async {
            for h in handles {
                let _ = h.await;
            }
        })
        .await;
    }

    async fn apply(&self, report: Report, rebuild: Rebuild) {
        self.apply_report(report, rebuild).await;
        self.version.send_modify(|v| *v += 1);
    }

    async fn apply_report(&self, report: Report, rebuild: Rebuild) {
        match report {
            Report::Failed { server, reason } => {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                state.note_down(&server, &reason);
                state.servers.insert(server, ServerState::Failed { reason });
            }
            Report::Down { server, reason } => {
                self.state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note_down(&server, &reason);
            }
            Report::Tools {
                server,
                tools,
                unserved,
            } => {
                let (change, sessions) = {
                    let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    let old = state.tools.get(&server).cloned().unwrap_or_default();
                    let change = diff(&old, &tools);
                    state.servers.insert(
                        server.clone(),
                        ServerState::Ready {
                            tools: tools.len(),
                            unserved,
                        },
                    );
                    state.tools.insert(server.clone(), tools);
                    state.sessions.retain(|s| s.strong_count() > 0);
                    let sessions: Vec<Arc<Session>> = state.sessions.iter().filter_map(Weak::upgrade).collect();
                    (change, sessions)
                };
                if change.is_empty() {
                    return;
                }
                // Grants first, then the swap: no call sees the new definition with an old grant.
                // A tool that went away loses its grants too: if it comes back, it is new.
                for name in change.changed.iter().chain(&change.removed) {
                    for session in &sessions {
                        session.revoke_tool(name);
                    }
                    match self.store.grants_revoke(name).await {
                        Ok(n) => tracing::warn!(
                            server = %server, tool = %name, revoked = n,
                            "the tool's definition changed: its session grants were revoked"
                        ),
                        Err(e) => tracing::error!(
                            server = %server, tool = %name, error = %e,
                            "the tool's definition changed but its stored grants could not be revoked"
                        ),
                    }
                }
                if !change.added.is_empty() || !change.removed.is_empty() {
                    tracing::info!(server = %server, added = ?change.added, removed = ?change.removed, "the server's tools changed");
                }
                if rebuild == Rebuild::Now {
                    self.rebuild();
                    release_freed_memory();
                }
                self.engine.emit(&Event::ToolsChanged {
                    server,
                    added: change.added,
                    removed: change.removed,
                    changed: change.changed,
                });
            }
        }
    }

    /// Base tools, then each server's (sorted by server): the engine's registry from now on.
    fn rebuild(&self) {
        let mut registry = Registry::new();
        for tool in &self.base {
            registry.register(tool.clone());
        }
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for tools in state.tools.values() {
            for tool in tools {
                // Only an unprefixed server's tool can take a built-in's name: the declared
                // order (built-in < MCP) gives it the name, visibly.
                if self.base.iter().any(|b| b.name() == tool.name()) {
                    tracing::warn!(
                        server = %tool.server(),
                        tool = %tool.name(),
                        "the unprefixed MCP server's tool replaces the built-in tool of the same name"
                    );
                }
                registry.register(tool.clone());
            }
        }
        self.engine.set_registry(registry);
        for f in &state.listeners {
            f();
        }
    }
}

/// Gives the heap pages a tool list freed back to the system. Reading a server's list holds its
/// whole JSON text and parse at once (megabytes for thousands of tools), and the old registry is
/// dropped on each rebuild; glibc's allocator keeps such freed pages, so the gateway's resident
/// size would stay at the peak of its largest listing instead of what it holds.
pub(crate) fn release_freed_memory() {
    // SAFETY (below): malloc_trim only hands free pages of the allocator's own heap back to
    // the system; it touches no memory in use.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: as above; mallinfo2 only reads the allocator's counters.
        let in_use = unsafe {
            libc::malloc_trim(0);
            libc::mallinfo2().uordblks
        };
        tracing::debug!(heap_in_use = in_use, "freed heap pages returned to the system");
    }
}

impl State {
    fn note_down(&mut self, server: &str, reason: &str) {
        let h = self.health.entry(server.to_owned()).or_default();
        h.restarts += 1;
        h.last_error = Some(reason.to_owned());
        h.last_error_at = Some(toolgate_core::audit::rfc3339(std::time::SystemTime::now()));
    }
}

impl Report {
    fn server(&self) -> &str {
        match self {
            Report::Tools { server, .. } | Report::Failed { server, .. } | Report::Down { server, .. } => server,
        }
    }
}

fn diff(old: &[Arc<McpTool>], new: &[Arc<McpTool>]) -> Change {
    // By reference: a list of thousands is compared without copying a definition.
    let index = |list: &[Arc<McpTool>]| -> BTreeMap<String, Arc<McpTool>> {
        list.iter().map(|t| (t.name().to_owned(), t.clone())).collect()
    };
    let (old, new) = (index(old), index(new));
    let mut change = Change::default();
    for (name, tool) in &new {
        match old.get(name) {
            None => change.added.push(name.clone()),
            Some(before) if before.def() != tool.def() => change.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    change.removed = old.keys().filter(|k| !new.contains_key(*k)).cloned().collect();
    change
}
