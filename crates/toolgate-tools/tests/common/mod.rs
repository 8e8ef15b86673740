//! Helpers shared by the attack tests: the engine over the built-in tools, and a session with
//! rules.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use toolgate_core::permit::{Approver, Policy};
use toolgate_core::rules::{Layer, LayerSource, Rule};
use toolgate_core::{Engine, EngineConfig, Registry, Session, SessionOptions};

/// An engine over every built-in tool, default settings.
pub fn engine() -> Arc<Engine> {
    let mut registry = Registry::new();
    for t in toolgate_tools::builtin_tools() {
        registry.register(t);
    }
    Arc::new(Engine::new(registry, EngineConfig::default()))
}

/// A session in `ws` with these allow and deny rules (a user layer), `--yolo` or not, and the
/// approver that answers asks.
pub fn session(
    engine: &Engine,
    ws: &Path,
    allow: &[&str],
    deny: &[&str],
    yolo: bool,
    approver: Arc<dyn Approver>,
) -> Arc<Session> {
    let mut layer = Layer::new(LayerSource::User);
    layer.allow = allow.iter().map(|r| Rule::parse(r).unwrap()).collect();
    layer.deny = deny.iter().map(|r| Rule::parse(r).unwrap()).collect();
    Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            workspace: ws.to_owned(),
            approver,
            policy: Policy {
                yolo,
                layers: Arc::new(vec![layer]),
            },
            ..SessionOptions::default()
        },
    ))
}
