//! The upstream servers' prompts, resources, resource templates, completions and log level,
//! served by the gateway beside their tools: names namespaced as tools are (`SERVER__name`, or
//! the server's own for an `unprefixed` one), resource URIs kept as the server gave them and
//! routed back to it. A server that is down, or that does not serve the feature, is left out of
//! the lists; a request for one of its names fails with a message naming it.
//!
//! Not proxied: resource subscriptions (the gateway declares none) and the upstreams' own log
//! messages.

use crate::hub::Hub;
use crate::server::Extension;
use crate::upstream::Upstream;
use async_trait::async_trait;
use rmcp::ErrorData as McpError;
#[allow(deprecated)]
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams, ReadResourceResult, Reference,
    ServerCapabilities, SetLevelRequestParams,
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

impl Proxy {
    /// Proxies what `hub`'s servers serve.
    pub fn new(hub: Arc<Hub>) -> Self {
        Self {
            hub,
            resources: Mutex::new(HashMap::new()),
            templates: Mutex::new(Vec::new()),
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
            "resources": {"subscribe": false, "listChanged": false},
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

    /// Sets the level at every server that logs (their messages are not forwarded yet: this
    /// keeps a client's choice from being refused).
    #[allow(deprecated)]
    async fn set_level(&self, request: SetLevelRequestParams, _: RequestContext<RoleServer>) -> Result<(), McpError> {
        for (upstream, peer) in self.serving(|c| c.logging.is_some()) {
            if let Err(e) = peer.set_level(request.clone()).await {
                tracing::warn!(server = %upstream.name(), error = %e, "could not set the server's log level");
            }
        }
        Ok(())
    }
}
