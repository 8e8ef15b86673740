//! `toolgate serve` proxies its upstream servers' prompts, resources, resource templates,
//! completions and log level beside their tools, namespaced as tools are: tested against the
//! MCP reference server "everything" (stdio) next to mcp-server-time (which serves none of
//! them), through rmcp's client over streamable HTTP; and with the one server unprefixed.

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
