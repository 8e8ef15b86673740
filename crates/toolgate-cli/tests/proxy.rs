//! `toolgate serve` proxies its upstream servers' prompts, resources, resource templates,
//! completions and log level beside their tools, namespaced as tools are: tested against the
//! MCP reference server "everything" (stdio) next to mcp-server-time (which serves none of
//! them), through rmcp's client over streamable HTTP; and with the one server unprefixed.
//! Subscriptions and log messages reach the clients that asked for them, and no other.

mod common;
use common::{peer, serve_on, workspace};
use serde_json::json;
use std::path::Path;
use toolgate_mcp::rmcp::ServiceExt;
use toolgate_mcp::rmcp::model::{
    ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams, Reference, ResourceContents,
};
#[allow(deprecated)]
use toolgate_mcp::rmcp::model::{LoggingLevel, SetLevelRequestParams};
use toolgate_mcp::rmcp::transport::StreamableHttpClientTransport;

fn text_of(contents: &[ResourceContents]) -> String {
    contents
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .collect()
}

fn write_config(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, body).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_prompts_resources_and_completions_are_served_namespaced() {
    let (Some(everything), Some(time)) = (peer("TOOLGATE_MCP_EVERYTHING"), peer("TOOLGATE_MCP_TIME")) else {
        return;
    };
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = write_config(
        ws.path(),
        &format!(
            "[mcp_servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\n\n[mcp_servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"UTC\"]\n",
            everything.display().to_string(),
            time.display().to_string()
        ),
    );
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);
    let client =
        ().serve(StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp")))
            .await
            .expect("MCP handshake");
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert!(
        caps.prompts.is_some() && caps.resources.is_some() && caps.completions.is_some(),
        "{caps:?}"
    );

    // Prompts: namespaced, and got through the name the client sees.
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"every__simple-prompt") && names.contains(&"every__args-prompt"),
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| n.starts_with("every__")),
        "only everything serves prompts: {names:?}"
    );
    let mut args = serde_json::Map::new();
    args.insert("city".into(), json!("Paris"));
    let got = client
        .get_prompt(GetPromptRequestParams::new("every__args-prompt").with_arguments(args))
        .await
        .unwrap();
    let said = serde_json::to_string(&got.messages).unwrap();
    assert!(said.contains("Paris"), "{got:?}");
    assert!(
        client
            .get_prompt(GetPromptRequestParams::new("args-prompt"))
            .await
            .is_err(),
        "the server's own name is not the gateway's"
    );
    assert!(
        client
            .get_prompt(GetPromptRequestParams::new("time__nothing"))
            .await
            .is_err()
    );

    // Resources: their URIs as the server gave them, their names namespaced; read back.
    let resources = client.list_all_resources().await.unwrap();
    let doc = resources
        .iter()
        .find(|r| r.uri == "demo://resource/static/document/architecture.md")
        .unwrap_or_else(|| panic!("{resources:?}"));
    assert_eq!(doc.name, "every__architecture.md");
    let read = client
        .read_resource(ReadResourceRequestParams::new(doc.uri.clone()))
        .await
        .unwrap();
    assert!(text_of(&read.contents).len() > 100, "{read:?}");
    // A template's resource, never listed, is routed by the template.
    let templates = client.list_all_resource_templates().await.unwrap();
    let dynamic = templates
        .iter()
        .find(|t| t.uri_template == "demo://resource/dynamic/text/{resourceId}")
        .unwrap_or_else(|| panic!("{templates:?}"));
    assert!(dynamic.name.starts_with("every__"), "{dynamic:?}");
    let read = client
        .read_resource(ReadResourceRequestParams::new("demo://resource/dynamic/text/7"))
        .await
        .unwrap();
    assert!(text_of(&read.contents).contains('7'), "{read:?}");

    // Completion of a namespaced prompt's argument.
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("every__completable-prompt"),
            ArgumentInfo::new("department", "Eng"),
        ))
        .await
        .unwrap();
    assert!(done.completion.values.iter().any(|v| v.starts_with("Eng")), "{done:?}");
    #[allow(deprecated)]
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .unwrap();
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprefixed_server_s_prompts_keep_their_names() {
    let Some(everything) = peer("TOOLGATE_MCP_EVERYTHING") else {
        return;
    };
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = write_config(
        ws.path(),
        &format!(
            "[mcp_servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\nunprefixed = true\n",
            everything.display().to_string()
        ),
    );
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);
    let client =
        ().serve(StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp")))
            .await
            .expect("MCP handshake");
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "simple-prompt"), "{prompts:?}");
    client
        .get_prompt(GetPromptRequestParams::new("simple-prompt"))
        .await
        .unwrap();
    let resources = client.list_all_resources().await.unwrap();
    assert!(resources.iter().any(|r| r.name == "architecture.md"), "{resources:?}");
    let _ = client.cancel().await;
}

/// A client that hears resource updates and log messages, each on a channel.
#[derive(Clone)]
struct Listener {
    updated: tokio::sync::mpsc::UnboundedSender<String>,
    logged: tokio::sync::mpsc::UnboundedSender<(Option<String>, serde_json::Value)>,
}

impl toolgate_mcp::rmcp::ClientHandler for Listener {
    async fn on_resource_updated(
        &self,
        params: toolgate_mcp::rmcp::model::ResourceUpdatedNotificationParam,
        _: toolgate_mcp::rmcp::service::NotificationContext<toolgate_mcp::rmcp::service::RoleClient>,
    ) {
        let _ = self.updated.send(params.uri);
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: toolgate_mcp::rmcp::model::LoggingMessageNotificationParam,
        _: toolgate_mcp::rmcp::service::NotificationContext<toolgate_mcp::rmcp::service::RoleClient>,
    ) {
        let _ = self.logged.send((params.logger, params.data));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_reach_the_subscribed_client_only_and_the_upstreams_logs_the_clients_that_chose_a_level() {
    use toolgate_mcp::rmcp::model::{CallToolRequestParams, SubscribeRequestParams, UnsubscribeRequestParams};
    let Some(everything) = peer("TOOLGATE_MCP_EVERYTHING") else {
        return;
    };
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = write_config(
        ws.path(),
        &format!(
            "[mcp_servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\n\n[permissions]\nallow = [\"every__toggle-*\"]\n",
            everything.display().to_string()
        ),
    );
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);
    let connect = |updated, logged| {
        let addr = addr.clone();
        async move {
            Listener { updated, logged }
                .serve(StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp")))
                .await
                .expect("MCP handshake")
        }
    };
    let (up_tx, mut up_rx) = tokio::sync::mpsc::unbounded_channel();
    let (log_tx, mut log_rx) = tokio::sync::mpsc::unbounded_channel();
    let alice = connect(up_tx, log_tx).await;
    let (other_up_tx, mut other_up_rx) = tokio::sync::mpsc::unbounded_channel();
    let (other_log_tx, mut other_log_rx) = tokio::sync::mpsc::unbounded_channel();
    let bob = connect(other_up_tx, other_log_tx).await;
    assert_eq!(
        alice
            .peer_info()
            .unwrap()
            .capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe),
        Some(true)
    );

    // Alice chooses a log level and subscribes: the server's acknowledgement, a log line sent
    // outside any call, reaches her under the server's name.
    #[allow(deprecated)]
    alice
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .unwrap();
    let uri = "demo://resource/dynamic/text/1";
    #[allow(deprecated)]
    alice.subscribe(SubscribeRequestParams::new(uri)).await.unwrap();
    let wait = std::time::Duration::from_secs(30);
    let (logger, data) = tokio::time::timeout(wait, log_rx.recv())
        .await
        .expect("a log line")
        .unwrap();
    assert!(logger.as_deref().is_some_and(|l| l.starts_with("every")), "{logger:?}");
    assert!(data.to_string().to_lowercase().contains("subscri"), "{data}");

    // The server then sends updates for the URI (every 5 s once toggled): Alice hears them.
    let toggled = alice
        .call_tool(CallToolRequestParams::new("every__toggle-subscriber-updates"))
        .await
        .unwrap();
    assert_ne!(toggled.is_error, Some(true), "{toggled:?}");
    let got = tokio::time::timeout(wait, up_rx.recv())
        .await
        .expect("an update")
        .unwrap();
    assert_eq!(got, uri);

    // Bob, who neither subscribed nor chose a level, heard nothing.
    assert!(other_up_rx.try_recv().is_err());
    assert!(other_log_rx.try_recv().is_err());

    // Bob unsubscribing from Alice's URI ends nothing of hers: she hears the next update.
    #[allow(deprecated)]
    bob.unsubscribe(UnsubscribeRequestParams::new(uri)).await.unwrap();
    while up_rx.try_recv().is_ok() {}
    let got = tokio::time::timeout(wait, up_rx.recv())
        .await
        .expect("a later update")
        .unwrap();
    assert_eq!(got, uri);
    assert!(other_up_rx.try_recv().is_err());
    #[allow(deprecated)]
    alice.unsubscribe(UnsubscribeRequestParams::new(uri)).await.unwrap();
    let _ = alice.cancel().await;
    let _ = bob.cancel().await;
}
