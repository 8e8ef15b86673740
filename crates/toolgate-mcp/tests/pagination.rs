//! `tools/list` in pages over real HTTP, read by rmcp's client: thousands of tools arrive in
//! bounded pages, each tool once and in order, and a cursor the server did not give is refused.

use async_trait::async_trait;
use rmcp::ServiceExt;
use rmcp::model::PaginatedRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::tool::{ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{EngineConfig, Registry, SessionOptions, Tool, ToolError};
use toolgate_mcp::http::HttpOptions;
use toolgate_mcp::metrics::Metrics;
use toolgate_mcp::server::{PAGE_BYTES, PAGE_TOOLS};
use toolgate_mcp::{Gateway, Queue, Via};

struct Listed {
    name: String,
    description: String,
    schema: Value,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Listed {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn execute(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("listed"))
    }
}

fn tool(name: &str, description: String) -> Arc<dyn Tool> {
    Arc::new(Listed {
        name: name.into(),
        description,
        schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        spec: ToolSpec::default(),
    })
}

/// A gateway serving `tools` on a loopback port; its address.
async fn serve(tools: Vec<Arc<dyn Tool>>) -> (String, tokio_util::sync::CancellationToken) {
    let mut registry = Registry::new();
    for t in tools {
        registry.register(t);
    }
    let engine = Arc::new(toolgate_core::Engine::new(registry, EngineConfig::default()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let factory_store = store.clone();
    let factory: toolgate_mcp::SessionFactory = Arc::new(move || SessionOptions {
        store: Some(factory_store.clone()),
        workspace: std::env::temp_dir(),
        ..SessionOptions::default()
    });
    let queue = Queue::new(store.clone());
    let gateway = Gateway::new(engine, None, factory, Via::Queue, Some(queue.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = HttpOptions {
        listen: addr,
        client_token: None,
        approver_token: "approver-secret".into(),
        clients: vec![],
        allowed_hosts: vec![],
        allowed_origins: vec![],
        max_body: 64 * 1024,
    };
    options.check().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = toolgate_mcp::http::router(
        gateway,
        store,
        queue,
        Arc::new(Metrics::default()),
        options,
        shutdown.clone(),
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    (format!("http://127.0.0.1:{}/mcp", addr.port()), shutdown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_tools_arrive_in_bounded_pages_each_once_in_order() {
    let mut tools: Vec<Arc<dyn Tool>> = (0..1_500)
        .map(|i| tool(&format!("srv__tool_{i:05}"), format!("Tool number {i}.")))
        .collect();
    // One tool larger than a page's byte budget: it still arrives, alone on its page.
    tools.push(tool("srv__huge", "x".repeat(PAGE_BYTES + 1024)));
    let (url, shutdown) = serve(tools).await;
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let client = ().serve(transport).await.expect("MCP handshake");

    let mut cursor = None;
    let mut pages = Vec::new();
    loop {
        let page = client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor.clone())))
            .await
            .expect("a page");
        let names: Vec<String> = page.tools.iter().map(|t| t.name.to_string()).collect();
        let bytes: usize = page.tools.iter().map(|t| serde_json::to_string(t).unwrap().len()).sum();
        assert!(!names.is_empty(), "an empty page before the end");
        assert!(names.len() <= PAGE_TOOLS, "{} tools in one page", names.len());
        assert!(
            names.len() == 1 || bytes <= PAGE_BYTES,
            "{bytes} bytes in one page of {}",
            names.len()
        );
        pages.push(names);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
        assert!(pages.len() < 100, "the cursor does not advance");
    }
    let all: Vec<&String> = pages.iter().flatten().collect();
    assert_eq!(all.len(), 1_501);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "not sorted, or a tool twice");
    assert!(pages.iter().any(|p| p == &["srv__huge".to_owned()]));
    assert!(pages.len() >= 1_500usize.div_ceil(PAGE_TOOLS));

    // The SDK's own walk over the cursors gets the same list.
    let walked = client.list_all_tools().await.expect("every page");
    assert_eq!(walked.len(), 1_501);

    // A cursor the server did not give is a protocol error, not a list from the start.
    for forged in [
        "garbage",
        "after:",
        "after:../../etc",
        "after:a b",
        &format!("after:{}", "x".repeat(65)),
    ] {
        let refused = client
            .list_tools(Some(
                PaginatedRequestParams::default().with_cursor(Some(forged.to_owned())),
            ))
            .await;
        assert!(refused.is_err(), "{forged:?} was taken");
    }
    // A cursor naming a tool that went away continues after where it would be.
    let after_gone = client
        .list_tools(Some(
            PaginatedRequestParams::default().with_cursor(Some("after:srv__tool_00099_gone".into())),
        ))
        .await
        .expect("a page");
    assert_eq!(after_gone.tools[0].name, "srv__tool_00100");
    let _ = client.cancel().await;
    shutdown.cancel();
}
