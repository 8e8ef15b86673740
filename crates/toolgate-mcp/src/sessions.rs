//! MCP sessions of the classic handshake kept in toolgate's store, so any replica sharing the
//! store can take over a session another replica made: rmcp replays the client's `initialize`
//! from what is kept here when a request names a session this process does not know.

use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::store::Store;

/// How long an MCP session outlives its last handshake in the store.
const KEPT: Duration = Duration::from_secs(24 * 3600);

/// The store's cache as rmcp's session store.
pub struct McpSessions(pub Arc<dyn Store>);

fn key(id: &str) -> String {
    format!("mcp-session/{id}")
}

#[async_trait::async_trait]
impl SessionStore for McpSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.0.cache_get(&key(id)).await? {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(state) => Ok(Some(serde_json::from_value(state)?)),
        }
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self.0.cache_put(&key(id), &serde_json::to_value(state)?, KEPT).await?)
    }

    /// Closed: kept as a tombstone for a moment (the cache has no delete), then swept.
    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Ok(self
            .0
            .cache_put(&key(id), &serde_json::Value::Null, Duration::from_secs(60))
            .await?)
    }
}
