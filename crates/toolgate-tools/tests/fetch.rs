//! `fetch_url` against a local HTTP server on 127.0.0.1 started by the test. Only loopback
//! addresses are ever requested: the server is reached through an exception for 127.0.0.1 (or
//! `allow_private_network`), and every other forbidden address is refused before connecting.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use toolgate_core::tool::{Tool, Typed};
use toolgate_core::{ToolContext, ToolError};
use toolgate_tools::fetch::{FetchConfig, FetchUrl};
use toolgate_tools::netguard::Guard;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn only_loopback_server() -> Guard {
    Guard {
        allow_private_network: false,
        allow_addresses: vec!["127.0.0.1".parse().unwrap()],
    }
}

fn tool(config: FetchConfig) -> Typed<FetchUrl> {
    Typed::new(FetchUrl::new(config))
}

fn config() -> FetchConfig {
    FetchConfig {
        guard: only_loopback_server(),
        ..FetchConfig::default()
    }
}

async fn fetch(tool: &Typed<FetchUrl>, url: &str) -> Result<Value, ToolError> {
    let ctx = ToolContext::standalone(std::path::Path::new("/"));
    tool.execute(&ctx, json!({ "url": url })).await.map(|o| o.content)
}

async fn serve(route: &str, response: ResponseTemplate, server: &MockServer) {
    Mock::given(method("GET"))
        .and(path(route))
        .respond_with(response)
        .mount(server)
        .await;
}

#[tokio::test]
async fn html_becomes_markdown_and_json_is_pretty_printed() {
    let server = MockServer::start().await;
    let html = "<html><head><title>T</title><script>steal()</script></head><body>\
                <h1>Getting started</h1><p>Read the <a href=\"/docs\">docs</a>, then <b>build</b>.</p>\
                <ul><li>one</li><li>two</li></ul><style>.x{}</style></body></html>";
    serve(
        "/page",
        ResponseTemplate::new(200).set_body_raw(html, "text/html; charset=utf-8"),
        &server,
    )
    .await;
    serve(
        "/data",
        ResponseTemplate::new(200).set_body_raw(r#"{"a":1,"b":[true,null]}"#, "application/json"),
        &server,
    )
    .await;
    serve(
        "/logo",
        ResponseTemplate::new(200).set_body_raw(vec![0u8, 1, 2, 255], "image/png"),
        &server,
    )
    .await;
    let t = tool(config());

    let page = fetch(&t, &format!("{}/page", server.uri())).await.unwrap();
    let md = page["content"].as_str().unwrap();
    assert!(md.contains("# Getting started"), "{md}");
    assert!(md.contains("[docs](/docs)") && md.contains("**build**"), "{md}");
    assert!(md.contains("one") && md.contains("two"));
    assert!(
        !md.contains("steal") && !md.contains(".x{}") && !md.contains('<'),
        "{md}"
    );
    assert_eq!(page["status"], 200);
    assert_eq!(page["truncated"], false);

    let data = fetch(&t, &format!("{}/data", server.uri())).await.unwrap();
    assert_eq!(
        data["content"],
        "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ]\n}"
    );

    let logo = fetch(&t, &format!("{}/logo", server.uri())).await.unwrap();
    let text = logo["content"].as_str().unwrap();
    assert!(text.contains("image/png") && text.contains("not shown"), "{text}");
}

#[tokio::test]
async fn a_large_body_is_cut_while_reading() {
    let server = MockServer::start().await;
    let body = "x".repeat(5 << 20);
    serve(
        "/big",
        ResponseTemplate::new(200).set_body_raw(body, "text/plain"),
        &server,
    )
    .await;
    let t = tool(FetchConfig {
        max_bytes: 1 << 20,
        ..config()
    });
    let v = fetch(&t, &format!("{}/big", server.uri())).await.unwrap();
    assert_eq!(v["truncated"], true);
    assert_eq!(v["bytes"], 1 << 20);
    assert_eq!(v["content"].as_str().unwrap().len(), 1 << 20);
}

#[tokio::test]
async fn redirects_are_followed_on_one_host_up_to_the_limit() {
    let server = MockServer::start().await;
    for i in 1..=5 {
        let to = if i == 1 {
            "/end".to_owned()
        } else {
            format!("/r{}", i - 1)
        };
        serve(
            &format!("/r{i}"),
            ResponseTemplate::new(302).insert_header("location", to.as_str()),
            &server,
        )
        .await;
    }
    serve(
        "/end",
        ResponseTemplate::new(200).set_body_raw("arrived", "text/plain"),
        &server,
    )
    .await;
    let t = tool(FetchConfig {
        max_redirects: 3,
        ..config()
    });
    let v = fetch(&t, &format!("{}/r3", server.uri())).await.unwrap();
    assert_eq!(v["content"], "arrived");
    assert!(v["url"].as_str().unwrap().ends_with("/end"));
    let e = fetch(&t, &format!("{}/r5", server.uri()))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("stopped after 3 redirects"), "{e}");
}

#[tokio::test]
async fn redirects_to_forbidden_addresses_are_refused() {
    let server = MockServer::start().await;
    let port = server.address().port();
    let targets = [
        ("/meta", "http://169.254.169.254/latest/meta-data/".to_owned()),
        ("/other-loopback", format!("http://127.0.0.2:{port}/end")),
        ("/decimal", format!("http://2130706434:{port}/end")),
        ("/mapped", format!("http://[::ffff:127.0.0.1]:{port}/end")),
        ("/name", format!("http://localhost:{port}/end")),
        ("/scheme", "file:///etc/passwd".to_owned()),
    ];
    for (route, to) in &targets {
        serve(
            route,
            ResponseTemplate::new(302).insert_header("location", to.as_str()),
            &server,
        )
        .await;
    }
    let t = tool(config());
    for (route, to) in &targets {
        let e = fetch(&t, &format!("{}{route}", server.uri()))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("refused"), "{route} → {to}: {e}");
    }
    // Only the first hops reached the server: nothing was fetched from a refused target.
    let seen: Vec<String> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert_eq!(seen.len(), targets.len(), "{seen:?}");
}

#[tokio::test]
async fn a_redirect_to_another_host_is_reported_not_followed() {
    let server = MockServer::start().await;
    let elsewhere = format!("http://127.0.0.2:{}/page", server.address().port());
    serve(
        "/away",
        ResponseTemplate::new(301).insert_header("location", elsewhere.as_str()),
        &server,
    )
    .await;
    let t = tool(FetchConfig {
        guard: Guard {
            allow_private_network: true,
            ..Guard::default()
        },
        ..FetchConfig::default()
    });
    let v = fetch(&t, &format!("{}/away", server.uri())).await.unwrap();
    assert_eq!(v["status"], 301);
    assert_eq!(v["redirect_to"], elsewhere.as_str());
    assert!(v["content"].as_str().unwrap().contains("permission rules"));
}

#[tokio::test]
async fn with_the_guard_on_the_local_server_is_not_reached() {
    let server = MockServer::start().await;
    serve(
        "/page",
        ResponseTemplate::new(200).set_body_raw("secret", "text/plain"),
        &server,
    )
    .await;
    let t = tool(FetchConfig::default());
    for url in [
        format!("{}/page", server.uri()),
        format!("http://localhost:{}/page", server.address().port()),
        format!("http://2130706433:{}/page", server.address().port()),
        format!("http://0x7f.1:{}/page", server.address().port()),
    ] {
        let e = fetch(&t, &url).await.unwrap_err().to_string();
        assert!(
            e.contains("refused") && e.contains("allow_private_network"),
            "{url}: {e}"
        );
    }
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "no request arrived"
    );
}

#[tokio::test]
async fn slow_servers_time_out_and_overloaded_ones_ask_for_a_retry() {
    let server = MockServer::start().await;
    serve(
        "/slow",
        ResponseTemplate::new(200).set_delay(Duration::from_secs(10)),
        &server,
    )
    .await;
    serve(
        "/busy",
        ResponseTemplate::new(503).insert_header("retry-after", "7"),
        &server,
    )
    .await;
    let t = tool(FetchConfig {
        timeout: Duration::from_millis(300),
        ..config()
    });
    let started = Instant::now();
    let e = fetch(&t, &format!("{}/slow", server.uri())).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    match fetch(&t, &format!("{}/busy", server.uri())).await.unwrap_err() {
        ToolError::Retryable { retry_after, message } => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)));
            assert!(message.contains("503"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
