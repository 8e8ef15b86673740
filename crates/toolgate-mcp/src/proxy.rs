//! The upstream servers' prompts, resources, resource templates, completions and log level,
//! served by the gateway beside their tools: names namespaced as tools are (`SERVER__name`, or
//! the server's own for an `unprefixed` one), resource URIs kept as the server gave them and
//! routed back to it. A server that is down, or that does not serve the feature, is left out of
//! the lists; a request for one of its names fails with a message naming it.
//!
//! Resource subscriptions are kept per client: a `resources/subscribe` subscribes at the server
//! that owns the URI (once, however many clients ask), and its `notifications/resources/updated`
//! goes to each client subscribed; the last `resources/unsubscribe` ends it there.

use crate::hub::Hub;
use crate::server::Extension;
use crate::upstream::Upstream;
use async_trait::async_trait;
use rmcp::ErrorData as McpError;
#[allow(deprecated)]
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams, ReadResourceResult, Reference,
    ServerCapabilities, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The upstreams' surfaces besides tools, as the gateway's [`Extension`].
pub struct Proxy {
    hub: Arc<Hub>,
    /// Resource URI → the server that listed it (filled by `resources/list`).
    resources: Mutex<HashMap<String, String>>,
    /// A resource template's text before its first `{` → its server.
    templates: Mutex<Vec<(String, String)>>,
    /// The clients that chose a log level (they get the servers' log lines sent outside a call).
    log_clients: Mutex<Vec<Peer<RoleServer>>>,
    /// Resource URI → the clients subscribed to it.
    subscribers: Mutex<HashMap<String, Vec<Peer<RoleServer>>>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

fn failed(server: &str, e: rmcp::ServiceError) -> McpError {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the MCP server `{server}` failed: {other}"), None),
    }
}

/// Whether two handles are the same client connection (they share its handshake record).
fn same_client(a: &Peer<RoleServer>, b: &Peer<RoleServer>) -> bool {
    match (a.peer_info(), b.peer_info()) {
        (Some(x), Some(y)) => Arc::ptr_eq(&x, &y),
        _ => false,
    }
}

impl Proxy {
    /// Proxies what `hub`'s servers serve.
    pub fn new(hub: Arc<Hub>) -> Self {
        Self {
            hub,
            resources: Mutex::new(HashMap::new()),
            templates: Mutex::new(Vec::new()),
            subscribers: Mutex::new(HashMap::new()),
            log_clients: Mutex::new(Vec::new()),
        }
    }

    /// The connected servers that declare a feature, with their client.
    fn serving(&self, feature: impl Fn(&ServerCapabilities) -> bool) -> Vec<(Arc<Upstream>, Peer<RoleClient>)> {
        self.hub
            .upstreams()
            .iter()
            .filter_map(|u| u.peer().map(|p| (u.clone(), p)))
            .filter(|(_, p)| p.peer_info().is_some_and(|i| feature(&i.capabilities)))
            .collect()
    }

    /// The server a namespaced name belongs to, its client and the server's own name for it.
    fn owner(&self, shown: &str) -> Result<(Arc<Upstream>, Peer<RoleClient>, String), McpError> {
        for upstream in self.hub.upstreams() {
            let remote = if upstream.unprefixed() {
                Some(shown.to_owned())
            } else {
                shown
                    .strip_prefix(upstream.name())
                    .and_then(|r| r.strip_prefix("__"))
                    .map(str::to_owned)
            };
            if let Some(remote) = remote {
                let peer = upstream.peer().ok_or_else(|| {
                    McpError::internal_error(format!("the MCP server `{}` is not connected", upstream.name()), None)
                })?;
                return Ok((upstream.clone(), peer, remote));
            }
        }
        Err(McpError::invalid_params(format!("Unknown prompt: {shown}"), None))
    }

    /// The server a resource URI belongs to: the one that listed it, else the one whose template
    /// it matches (the longest literal start), else the only server serving resources.
    fn resource_owner(&self, uri: &str) -> Result<(Arc<Upstream>, Peer<RoleClient>), McpError> {
        let named = self
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uri)
            .cloned()
            .or_else(|| {
                let templates = self.templates.lock().unwrap_or_else(|p| p.into_inner());
                templates
                    .iter()
                    .filter(|(start, _)| !start.is_empty() && uri.starts_with(start.as_str()))
                    .max_by_key(|(start, _)| start.len())
                    .map(|(_, server)| server.clone())
            });
        let serving = self.serving(|c| c.resources.is_some());
        let found = match named {
            Some(server) => serving.into_iter().find(|(u, _)| u.name() == server),
            None if serving.len() == 1 => serving.into_iter().next(),
            None => None,
        };
        found.ok_or_else(|| {
            McpError::resource_not_found(format!("Resource not found: {uri}"), Some(json!({"uri": uri})))
        })
    }
}

#[async_trait]
impl Extension for Proxy {
    fn capabilities(&self, capabilities: &mut ServerCapabilities) {
        let extra: Result<ServerCapabilities, _> = serde_json::from_value(json!({
            "prompts": {"listChanged": false},
            "resources": {"subscribe": true, "listChanged": false},
            "completions": {},
            "logging": {}
        }));
        if let Ok(extra) = extra {
            capabilities.prompts = extra.prompts;
            capabilities.resources = extra.resources;
            capabilities.completions = extra.completions;
            #[allow(deprecated)]
            {
                capabilities.logging = extra.logging;
            }
        }
    }

    async fn list_prompts(&self, _: RequestContext<RoleServer>) -> Result<ListPromptsResult, McpError> {
        let mut all = Vec::new();
        for (upstream, peer) in self.serving(|c| c.prompts.is_some()) {
            match peer.list_all_prompts().await {
                Ok(prompts) => all.extend(prompts.into_iter().map(|mut p| {
                    p.name = upstream.registered_name(&p.name);
                    p
                })),
                Err(e) => tracing::warn!(server = %upstream.name(), error = %e, "could not list the server's prompts"),
            }
        }
        Ok(ListPromptsResult::with_all_items(all))
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, McpError> {
        let (upstream, peer, remote) = self.owner(&request.name)?;
        request.name = remote;
        peer.get_prompt(request).await.map_err(|e| failed(upstream.name(), e))
    }

    async fn list_resources(&self, _: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        let mut all = Vec::new();
        let mut routes = HashMap::new();
        for (upstream, peer) in self.serving(|c| c.resources.is_some()) {
            let listed = match peer.list_all_resources().await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(server = %upstream.name(), error = %e, "could not list the server's resources");
                    continue;
                }
            };
            for mut resource in listed {
                if let Some(other) = routes.get(&resource.uri) {
                    tracing::warn!(uri = %resource.uri, first = %other, second = %upstream.name(),
                        "two servers list the same resource URI; the first one's is served");
                    continue;
                }
                routes.insert(resource.uri.clone(), upstream.name().to_owned());
                resource.name = upstream.registered_name(&resource.name);
                all.push(resource);
            }
        }
        *self.resources.lock().unwrap_or_else(|p| p.into_inner()) = routes;
        Ok(ListResourcesResult::with_all_items(all))
    }

    async fn list_resource_templates(
        &self,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut all = Vec::new();
        let mut routes = Vec::new();
        for (upstream, peer) in self.serving(|c| c.resources.is_some()) {
            match peer.list_all_resource_templates().await {
                Ok(templates) => {
                    for mut t in templates {
                        let start = t.uri_template.split('{').next().unwrap_or_default().to_owned();
                        routes.push((start, upstream.name().to_owned()));
                        t.name = upstream.registered_name(&t.name);
                        all.push(t);
                    }
                }
                Err(e) => {
                    tracing::warn!(server = %upstream.name(), error = %e, "could not list the server's resource templates")
                }
            }
        }
        *self.templates.lock().unwrap_or_else(|p| p.into_inner()) = routes;
        Ok(ListResourceTemplatesResult::with_all_items(all))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, McpError> {
        let (upstream, peer) = self.resource_owner(&request.uri)?;
        peer.read_resource(request)
            .await
            .map_err(|e| failed(upstream.name(), e))
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let (upstream, peer) = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (upstream, peer, remote) = self.owner(&prompt.name)?;
                prompt.name = remote;
                (upstream, peer)
            }
            Reference::Resource(resource) => self.resource_owner(&resource.uri)?,
            _ => {
                return Err(McpError::invalid_params(
                    "a completion reference of an unknown kind",
                    None,
                ));
            }
        };
        peer.complete(request).await.map_err(|e| failed(upstream.name(), e))
    }

    #[allow(deprecated)] // subscriptions of 2025-11-25 (the draft's are streams)
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let (upstream, peer) = self.resource_owner(&request.uri)?;
        let subscribes = peer
            .peer_info()
            .and_then(|i| i.capabilities.resources.as_ref().and_then(|r| r.subscribe))
            .unwrap_or(false);
        if !subscribes {
            return Err(McpError::invalid_request(
                format!(
                    "the MCP server `{}` does not offer resource subscriptions",
                    upstream.name()
                ),
                None,
            ));
        }
        let first = {
            let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            let list = subs.entry(request.uri.clone()).or_default();
            list.retain(|p| !p.is_transport_closed());
            let first = list.is_empty();
            if !list.iter().any(|p| same_client(p, &context.peer)) {
                list.push(context.peer.clone());
            }
            first
        };
        if first && let Err(e) = peer.subscribe(request.clone()).await {
            // Not subscribed there: nobody is, so the next client's subscribe tries again.
            self.subscribers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&request.uri);
            return Err(failed(upstream.name(), e));
        }
        Ok(())
    }

    #[allow(deprecated)] // subscriptions of 2025-11-25 (the draft's are streams)
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let last = {
            let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            match subs.get_mut(&request.uri) {
                Some(list) => {
                    list.retain(|p| !p.is_transport_closed() && !same_client(p, &context.peer));
                    let last = list.is_empty();
                    if last {
                        subs.remove(&request.uri);
                    }
                    last
                }
                None => false,
            }
        };
        if last && let Ok((upstream, peer)) = self.resource_owner(&request.uri) {
            peer.unsubscribe(request)
                .await
                .map_err(|e| failed(upstream.name(), e))?;
        }
        Ok(())
    }

    async fn resource_updated(&self, server: &str, uri: &str) {
        let peers: Vec<Peer<RoleServer>> = {
            let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            match subs.get_mut(uri) {
                Some(list) => {
                    list.retain(|p| !p.is_transport_closed());
                    list.clone()
                }
                None => Vec::new(),
            }
        };
        tracing::debug!(server = %server, uri = %uri, clients = peers.len(), "resource updated");
        for peer in peers {
            let _ = peer
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri.to_owned()))
                .await;
        }
    }

    /// Sets the level at every server that logs; their messages go to the client whose call
    /// they were logged during.
    #[allow(deprecated)]
    async fn upstream_log(&self, server: &str, params: rmcp::model::LoggingMessageNotificationParam) {
        let peers: Vec<Peer<RoleServer>> = {
            let mut clients = self.log_clients.lock().unwrap_or_else(|p| p.into_inner());
            clients.retain(|p| !p.is_transport_closed());
            clients.clone()
        };
        tracing::debug!(server = %server, clients = peers.len(), "upstream log message");
        for peer in peers {
            let _ = peer.notify_logging_message(params.clone()).await;
        }
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        {
            let mut clients = self.log_clients.lock().unwrap_or_else(|p| p.into_inner());
            clients.retain(|p| !p.is_transport_closed() && !same_client(p, &context.peer));
            clients.push(context.peer.clone());
        }
        for (upstream, peer) in self.serving(|c| c.logging.is_some()) {
            if let Err(e) = peer.set_level(request.clone()).await {
                tracing::warn!(server = %upstream.name(), error = %e, "could not set the server's log level");
            }
        }
        Ok(())
    }
}
