//! `toolgate serve` sends an upstream server's elicitation and sampling requests on to the MCP
//! client whose call they belong to, governed as `SERVER__elicitation` and `SERVER__sampling`:
//! tested with the MCP reference server "everything" (its trigger-elicitation-request and
//! trigger-sampling-request tools) behind the gateway and rmcp's client in front of it, from
//! both sides — what is forwarded and answered, and what a deny rule stops before the client
//! ever sees it.
#![allow(deprecated)] // sampling: deprecated by the 2026-07-28 draft, part of 2025-11-25

mod common;
use common::{peer, serve_on, workspace};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use toolgate_mcp::rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientInfo, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, Role, SamplingMessage,
};
use toolgate_mcp::rmcp::service::{RequestContext, RoleClient, RunningService};
use toolgate_mcp::rmcp::transport::StreamableHttpClientTransport;
use toolgate_mcp::rmcp::{ClientHandler, ErrorData, ServiceExt};

/// The person and model at the client: answers every form and sampling request, and counts
/// what reached it.
#[derive(Clone, Default)]
struct Person {
    forms: Arc<Mutex<Vec<String>>>,
    samples: Arc<AtomicUsize>,
    prompts: Arc<Mutex<Vec<String>>>,
    /// When set, a form stays open on the person's screen until the test releases it.
    hold: Option<Arc<Hold>>,
}

/// A form kept open: `shown` when it reaches the person, answered once `release`d.
#[derive(Default)]
struct Hold {
    shown: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientInfo {
        let mut info = ClientInfo::default();
        info.capabilities = ClientCapabilities::builder()
            .enable_elicitation()
            .enable_sampling()
            .build();
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => "(url)".to_owned(),
        };
        self.forms.lock().unwrap().push(message);
        if let Some(hold) = &self.hold {
            hold.shown.notify_one();
            hold.release.notified().await;
        }
        // The person fills two fields and leaves the rest as the form showed them.
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada Lovelace", "check": true})))
    }

    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.samples.fetch_add(1, Ordering::SeqCst);
        let prompt = serde_json::to_string(&request.messages).unwrap_or_default();
        self.prompts.lock().unwrap().push(prompt);
        Ok(CreateMessageResult::new(
            SamplingMessage::new(Role::Assistant, "the client's model says hi"),
            "client-model-1".to_owned(),
        ))
    }
}

/// `toolgate serve` with the reference server "everything" as its upstream `every` and `rest`
/// of the configuration after it (rules, approval): the workspace, the running gateway and its
/// address, or `None` (a skip) without the peer.
fn gateway(rest: &str) -> Option<(tempfile::TempDir, common::Guard, String)> {
    let everything = peer("TOOLGATE_MCP_EVERYTHING")?;
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = ws.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\n\n{rest}\n",
            everything.display().to_string()
        ),
    )
    .unwrap();
    let (guard, addr) = serve_on(&work, "memory", Some(&path), &[], &[]);
    Some((ws, guard, addr))
}

async fn connect(addr: &str, person: &Person) -> RunningService<RoleClient, Person> {
    person
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp")))
        .await
        .expect("MCP handshake")
}

async fn call(client: &RunningService<RoleClient, Person>, tool: &str, args: Value) -> (bool, String) {
    let Value::Object(args) = args else { unreachable!() };
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("tools/call answered");
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    (result.is_error == Some(true), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_elicitation_reaches_the_calling_client_and_its_answer_gets_the_form_defaults() {
    let Some((_ws, _g, addr)) = gateway("[permissions]\nallow = [\"every__*\"]") else {
        return;
    };
    let person = Person::default();
    let client = connect(&addr, &person).await;
    let (error, text) = call(&client, "every__trigger-elicitation-request", json!({})).await;
    assert!(!error, "{text}");
    // The server's own message reached the person, once.
    assert_eq!(
        *person.forms.lock().unwrap(),
        vec!["Please provide inputs for the following fields:".to_owned()]
    );
    // What the person typed came back through the server…
    assert!(text.contains("Ada Lovelace"), "{text}");
    // …with the defaults of the fields left as shown (SEP-1034), filled in by toolgate.
    assert!(text.contains("It was a dark and stormy night."), "{text}");
    assert!(text.contains("42"), "{text}");
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_sampling_request_a_rule_allows_is_answered_by_the_calling_clients_model() {
    let Some((_ws, _g, addr)) = gateway("[permissions]\nallow = [\"every__*\"]") else {
        return;
    };
    let person = Person::default();
    let client = connect(&addr, &person).await;
    let (error, text) = call(
        &client,
        "every__trigger-sampling-request",
        json!({"prompt": "count to three", "maxTokens": 20}),
    )
    .await;
    assert!(!error, "{text}");
    assert!(text.contains("the client's model says hi"), "{text}");
    assert_eq!(person.samples.load(Ordering::SeqCst), 1);
    assert!(person.prompts.lock().unwrap()[0].contains("count to three"));
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_stops_an_upstreams_sampling_and_elicitation_before_the_client_sees_them() {
    let Some((_ws, _g, addr)) =
        gateway("[permissions]\nallow = [\"every__*\"]\ndeny = [\"every__sampling\", \"every__elicitation\"]")
    else {
        return;
    };
    let person = Person::default();
    let client = connect(&addr, &person).await;
    let (_, sampled) = call(
        &client,
        "every__trigger-sampling-request",
        json!({"prompt": "exfiltrate the chat", "maxTokens": 20}),
    )
    .await;
    assert!(sampled.contains("refused the sampling request"), "{sampled}");
    assert!(!sampled.contains("the client's model says hi"), "{sampled}");
    let (_, elicited) = call(&client, "every__trigger-elicitation-request", json!({})).await;
    assert!(!elicited.contains("Ada Lovelace"), "{elicited}");
    assert!(elicited.to_lowercase().contains("decline"), "{elicited}");
    // Nothing reached the person or the model.
    assert_eq!(person.samples.load(Ordering::SeqCst), 0);
    assert!(person.forms.lock().unwrap().is_empty());
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_no_rule_allows_is_asked_and_a_refusal_reaches_neither_the_client_nor_its_model() {
    // The tool is allowed; sampling is not named, so it is an ask — and this gateway's asks are
    // refused at once (`[approval] via = "deny"`).
    let Some((_ws, _g, addr)) = gateway("[permissions]\nallow = [\"every__trigger-*\"]\n\n[approval]\nvia = \"deny\"")
    else {
        return;
    };
    let person = Person::default();
    let client = connect(&addr, &person).await;
    let (_, sampled) = call(
        &client,
        "every__trigger-sampling-request",
        json!({"prompt": "hello", "maxTokens": 5}),
    )
    .await;
    assert!(sampled.contains("every__sampling"), "{sampled}");
    assert_eq!(person.samples.load(Ordering::SeqCst), 0);
    // An elicitation is the person's to answer: not asked about, it reaches them.
    let (error, elicited) = call(&client, "every__trigger-elicitation-request", json!({})).await;
    assert!(!error && elicited.contains("Ada Lovelace"), "{elicited}");
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_while_two_sessions_calls_are_in_flight_reaches_neither_client() {
    let Some((_ws, _g, addr)) = gateway("[permissions]\nallow = [\"every__*\"]") else {
        return;
    };
    let hold = Arc::new(Hold::default());
    let alice = Person {
        hold: Some(hold.clone()),
        ..Person::default()
    };
    let bob = Person::default();
    let alice_client = connect(&addr, &alice).await;
    let bob_client = connect(&addr, &bob).await;
    // Alice's call is in flight at the upstream: its form is open on her screen.
    let alices_call = tokio::spawn(async move {
        let answer = call(&alice_client, "every__trigger-elicitation-request", json!({})).await;
        alice_client.cancel().await.ok();
        answer
    });
    hold.shown.notified().await;
    // Bob's calls make the server ask its client while both sessions' calls are in flight: the
    // request could be either's, so neither client is shown it.
    let (_, sampled) = call(
        &bob_client,
        "every__trigger-sampling-request",
        json!({"prompt": "whose model answers this?", "maxTokens": 5}),
    )
    .await;
    assert!(sampled.contains("no single client's call is in flight"), "{sampled}");
    let (_, elicited) = call(&bob_client, "every__trigger-elicitation-request", json!({})).await;
    assert!(!elicited.contains("Ada Lovelace"), "{elicited}");
    assert!(elicited.to_lowercase().contains("decline"), "{elicited}");
    assert_eq!(
        alice.samples.load(Ordering::SeqCst) + bob.samples.load(Ordering::SeqCst),
        0
    );
    assert!(bob.forms.lock().unwrap().is_empty());
    assert_eq!(alice.forms.lock().unwrap().len(), 1, "Alice saw only her own form");
    // Alice's own request, made while hers was the only call there, is still hers to answer.
    hold.release.notify_one();
    let (error, text) = alices_call.await.unwrap();
    assert!(!error && text.contains("Ada Lovelace"), "{text}");
    bob_client.cancel().await.ok();
}
