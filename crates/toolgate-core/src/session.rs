//! A session: one conversation's identity, approver, result handles, stop/kill state and the
//! counters that span turns (loop detector, consecutive errors).

use crate::config::EngineConfig;
use crate::guard::LoopDetector;
use crate::permit::{Approver, DenyAll, Policy};
use crate::result::ResultStore;
use crate::rules::{Layer, LayerSource, Rule};
use crate::store::{MemoryStore, Store, StoreError};
use crate::types::{Principal, SessionId};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// How to open a session; every field has a default.
pub struct SessionOptions {
    /// The id (default: a fresh UUIDv7).
    pub id: Option<SessionId>,
    /// Who the calls act for (default: `local`).
    pub principal: Principal,
    /// The workspace root (default: the working directory); canonicalised when it exists.
    pub workspace: PathBuf,
    /// Who answers asks (default: nobody — asks are refused as `non_interactive_deny`).
    pub approver: Arc<dyn Approver>,
    /// Where the session's state is kept, full results included (default: in memory, results
    /// bounded by the engine config).
    pub store: Option<Arc<dyn Store>>,
    /// Session-wide permission switches.
    pub policy: Policy,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            id: None,
            principal: Principal::new("local"),
            workspace: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            approver: Arc::new(DenyAll),
            store: None,
            policy: Policy::default(),
        }
    }
}

/// One conversation's state, shared by its turns.
pub struct Session {
    pub(crate) id: SessionId,
    pub(crate) principal: Principal,
    pub(crate) workspace: Arc<Path>,
    /// The workspace as text (cache keys, hook events).
    pub(crate) workspace_text: Arc<str>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) policy: Policy,
    /// Rules granted by approvals during this session.
    pub(crate) grants: std::sync::RwLock<Layer>,
    kill: Mutex<CancellationToken>,
    /// The background jobs' parent: cancelled by a stop or kill of the session (a job outlives
    /// its turn, not its session), renewed by `resume`.
    jobs: Mutex<CancellationToken>,
    stop: AtomicBool,
    pub(crate) loop_detector: Mutex<LoopDetector>,
    pub(crate) consecutive_errors: AtomicU32,
    /// Deliberate mode: tools that succeeded, with the turns they stay exposed.
    pub(crate) retained: Mutex<std::collections::HashMap<crate::types::ToolName, u32>>,
    /// Serialises asks: one prompt at a time, even for parallel calls.
    pub(crate) asking: tokio::sync::Mutex<()>,
}

impl Session {
    /// Opens a session under the engine's configuration.
    pub fn new(config: &EngineConfig, options: SessionOptions) -> Self {
        let workspace = std::fs::canonicalize(&options.workspace).unwrap_or(options.workspace);
        Self {
            id: options.id.unwrap_or_else(SessionId::generate),
            principal: options.principal,
            workspace_text: Arc::from(workspace.display().to_string()),
            workspace: Arc::from(workspace.as_path()),
            approver: options.approver,
            store: options.store.unwrap_or_else(|| {
                Arc::new(MemoryStore::with_result_limits(
                    config.results_per_session,
                    config.results_bytes_per_session,
                ))
            }),
            policy: options.policy,
            grants: std::sync::RwLock::new(Layer::new(LayerSource::Session)),
            kill: Mutex::new(CancellationToken::new()),
            jobs: Mutex::new(CancellationToken::new()),
            stop: AtomicBool::new(false),
            loop_detector: Mutex::new(LoopDetector::new(
                config.loop_threshold,
                config
                    .loop_exempt
                    .iter()
                    .cloned()
                    .chain(
                        config
                            .tools
                            .iter()
                            .filter(|(_, t)| t.loop_exempt)
                            .map(|(name, _)| name.clone()),
                    )
                    .chain(crate::jobs::POLLING_TOOLS.iter().map(|t| (*t).to_owned())),
            )),
            consecutive_errors: AtomicU32::new(0),
            retained: Mutex::new(std::collections::HashMap::new()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The canonical workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Where full results are kept (the session's store).
    pub fn results(&self) -> Arc<dyn ResultStore> {
        self.store.clone()
    }

    /// Grants a rule for the rest of the session (an approval answer), in the store too.
    pub async fn grant(&self, rule: Rule) {
        if let Err(e) = self.store.grant_put(&self.id, &rule.to_string(), None).await {
            tracing::warn!(error = %e, "could not store the session grant");
        }
        self.grants.write().unwrap_or_else(|p| p.into_inner()).allow.push(rule);
    }

    /// Drops this session's grants of a tool (its definition changed); the store's are revoked
    /// separately ([`Store::grants_revoke`]). Returns the rules dropped.
    pub fn revoke_tool(&self, tool: &str) -> Vec<String> {
        let mut grants = self.grants.write().unwrap_or_else(|p| p.into_inner());
        let mut dropped = Vec::new();
        grants.allow.retain(|rule| {
            let text = rule.to_string();
            if crate::store::grant_names_tool(&text, tool) {
                dropped.push(text);
                false
            } else {
                true
            }
        });
        dropped
    }

    /// Takes up the grants the store holds for this session (made by earlier processes, or by
    /// another replica serving the same session); those it has already are not added twice.
    pub async fn load_grants(&self) -> Result<usize, StoreError> {
        let texts = self.store.grants(&self.id).await?;
        let mut grants = self.grants.write().unwrap_or_else(|p| p.into_inner());
        let held: std::collections::HashSet<String> = grants.allow.iter().map(Rule::to_string).collect();
        let new: Vec<Rule> = texts
            .iter()
            .filter(|t| !held.contains(t.as_str()))
            .filter_map(|t| Rule::parse(t).ok())
            .collect();
        let n = new.len();
        grants.allow.extend(new);
        Ok(n)
    }

    /// Takes up the guards' state a named session left in the store (the loop detector and the
    /// consecutive-error count), so they act across requests, processes and replicas.
    pub async fn load_guards(&self) -> Result<(), StoreError> {
        let Some(state) = self.store.cache_get(&self.guards_key()).await? else {
            return Ok(());
        };
        let number = |k: &str| state.get(k).and_then(serde_json::Value::as_u64);
        let last = state
            .get("loop_last")
            .and_then(serde_json::Value::as_str)
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        let count = number("loop_count").unwrap_or(0).min(u64::from(u32::MAX)) as u32;
        self.loop_detector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .restore(last, count);
        let errors = number("consecutive_errors").unwrap_or(0).min(u64::from(u32::MAX)) as u32;
        self.consecutive_errors
            .store(errors, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// The guards' state (the loop detector's last batch and count, the consecutive errors):
    /// a request that did not change it need not write it back.
    pub fn guards_state(&self) -> (Option<u64>, u32, u32) {
        let (last, count) = self.loop_detector.lock().unwrap_or_else(|p| p.into_inner()).state();
        let errors = self.consecutive_errors.load(std::sync::atomic::Ordering::SeqCst);
        (last, count, errors)
    }

    /// Keeps the guards' state in the store for the session's next request (kept a day).
    pub async fn save_guards(&self) -> Result<(), StoreError> {
        let (last, count) = self.loop_detector.lock().unwrap_or_else(|p| p.into_inner()).state();
        let state = serde_json::json!({
            "loop_last": last.map(|h| format!("{h:016x}")),
            "loop_count": count,
            "consecutive_errors": self.consecutive_errors.load(std::sync::atomic::Ordering::SeqCst),
        });
        self.store
            .cache_put(&self.guards_key(), &state, std::time::Duration::from_secs(86_400))
            .await
    }

    fn guards_key(&self) -> String {
        format!("toolgate/session-guards/{}", self.id)
    }

    /// The session's store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Stop: no new call starts; calls in flight finish. Background jobs end (their owner asked
    /// for the work to stop).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.end_jobs();
    }

    /// Ends the session's background jobs (their tools kill what they started); later jobs run
    /// under a fresh token.
    pub fn end_jobs(&self) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.cancel();
        *jobs = CancellationToken::new();
    }

    /// The token the session's background jobs run under.
    pub(crate) fn jobs_token(&self) -> CancellationToken {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Kill: like stop, and calls in flight are cancelled (tokens fired, futures dropped).
    pub fn kill(&self) {
        self.request_stop();
        self.kill_token().cancel();
    }

    /// Whether a stop or kill is pending.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Clears a stop or kill so the conversation can continue.
    pub fn resume(&self) {
        let mut kill = self.kill.lock().unwrap_or_else(|p| p.into_inner());
        if kill.is_cancelled() {
            *kill = CancellationToken::new();
        }
        self.stop.store(false, Ordering::SeqCst);
    }

    /// The token a kill fires.
    pub fn kill_token(&self) -> CancellationToken {
        self.kill.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
