//! `toolgate serve`: the MCP gateway, over streamable HTTP (with the REST face) or stdio.

use anyhow::{Context, Result, anyhow, bail};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolgate_core::store::Store;
use toolgate_mcp::http::HttpOptions;
use toolgate_mcp::metrics::Metrics;
use toolgate_mcp::{Gateway, Queue};

/// `toolgate serve`'s options.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Where to listen (streamable HTTP at /mcp, and the REST API).
    #[arg(long, default_value = "127.0.0.1:8737", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Serve one MCP client on stdin/stdout instead.
    #[arg(long)]
    pub stdio: bool,
    /// The client token (`Authorization: Bearer T`); required when not listening on loopback.
    #[arg(long, env = "TOOLGATE_SERVE_TOKEN", hide_env_values = true, value_name = "T")]
    pub token: Option<String>,
    /// A client principal and its token, `NAME=TOKEN`; repeatable (or comma-separated in
    /// TOOLGATE_SERVE_CLIENTS). Each principal's memory, sessions, grants and audit rows are
    /// its own, and `[principals.NAME]` rules apply to its calls.
    #[arg(
        long = "client",
        env = "TOOLGATE_SERVE_CLIENTS",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "NAME=TOKEN"
    )]
    pub clients: Vec<String>,
    /// The approver token for /v1/approvals (default: a random one, printed at start).
    #[arg(
        long,
        env = "TOOLGATE_SERVE_APPROVER_TOKEN",
        hide_env_values = true,
        value_name = "T"
    )]
    pub approver_token: Option<String>,
    /// A `Host` to accept besides loopback names (a public name of this gateway); repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// A browser `Origin` to accept (`http://localhost:6274`); repeatable. Requests without
    /// `Origin` are not browsers and pass.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    pub max_body: usize,
    /// Seconds calls in flight get to finish at shutdown before they are killed.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub grace: u64,
    /// Connections open at once at most (default: what the descriptor limit leaves room for,
    /// at most 4096); one more is closed at once, so idle clients cannot lock the others out.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds a connection may take to send a request's headers, and stay idle between
    /// requests, before it is closed.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub header_timeout: u64,
    /// Seconds a request's body may take to arrive.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub body_timeout: u64,
}

/// Connections the descriptor limit leaves room for: the soft limit less a reserve for the
/// store, upstream servers, child processes and files, at most 4096.
fn default_max_connections() -> usize {
    let mut limit = nix::libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: a query into a live struct.
    unsafe { nix::libc::getrlimit(nix::libc::RLIMIT_NOFILE, &mut limit) };
    (limit.rlim_cur.saturating_sub(256) as usize).clamp(16, 4096)
}

/// Serves `app` on `listener` until `shutdown`: headers (and the idle time between requests)
/// within `header_timeout`, at most `max` connections (one more is closed at once), TCP_NODELAY
/// on each (a response written in pieces would otherwise wait for the client's delayed ACK:
/// ~40 ms per MCP call). Connections still open at shutdown finish their requests.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    max: usize,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(max));
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a reset before accept: wait a moment, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(
                max,
                "connection refused: the gateway has its maximum of connections open"
            );
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    graceful.shutdown().await;
}

/// A random token: 32 bytes from the kernel, hex.
fn random_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the approver token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Runs the gateway until a stop signal, then shuts down gracefully.
pub async fn run(
    args: ServeArgs,
    gateway: Arc<Gateway>,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
) -> Result<ExitCode> {
    if args.stdio {
        return stdio(gateway, metrics, args.grace).await;
    }
    let generated = args.approver_token.is_none();
    let options = HttpOptions {
        listen: args.listen,
        client_token: args.token.clone(),
        approver_token: match args.approver_token.clone() {
            Some(t) => t,
            None => random_token()?,
        },
        clients: args
            .clients
            .iter()
            .map(|c| {
                c.split_once('=')
                    .map(|(n, t)| (n.trim().to_owned(), t.trim().to_owned()))
                    .ok_or_else(|| anyhow!("a --client value has no '=': write NAME=TOKEN"))
            })
            .collect::<Result<Vec<_>>>()?,
        allowed_hosts: args.allowed_hosts.clone(),
        allowed_origins: args.allowed_origins.clone(),
        max_body: args.max_body,
    };
    options.check().map_err(|e| anyhow!("{e}"))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("cannot read the listening address")?;
    // The port chosen (for `:0`) is part of the gateway's own origin.
    let options = HttpOptions {
        listen: addr,
        ..options
    };
    let shutdown = CancellationToken::new();
    let app = toolgate_mcp::http::router(
        gateway.clone(),
        store,
        queue,
        metrics.clone(),
        options.clone(),
        shutdown.clone(),
    );
    eprintln!(
        "toolgate: serving {} tools: MCP at http://{addr}/mcp, REST at http://{addr}/v1/, console at http://{addr}/",
        gateway.engine.registry().len()
    );
    let unserved: Vec<toolgate_mcp::Unserved> = gateway
        .hub
        .iter()
        .flat_map(|hub| hub.servers().into_values())
        .flat_map(|state| match state {
            toolgate_mcp::ServerState::Ready { unserved, .. } => unserved,
            _ => Vec::new(),
        })
        .collect();
    if !unserved.is_empty() {
        let names: Vec<&str> = unserved.iter().take(10).map(|u| u.tool.as_str()).collect();
        eprintln!(
            "toolgate: warning: {} upstream tools are not served, their schemas do not compile ({}{}; /healthz lists each with where its schema is wrong)",
            unserved.len(),
            names.join(", "),
            if unserved.len() > 10 { ", …" } else { "" }
        );
    }
    if generated {
        eprintln!(
            "toolgate: approver token for the console and /v1/approvals: {} (set TOOLGATE_SERVE_APPROVER_TOKEN to choose it)",
            options.approver_token
        );
    }
    // On the signal: stop accepting, end the MCP streams (`shutdown` is also their token), let
    // the requests in flight finish.
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(Duration::from_secs(
        args.body_timeout,
    )));
    let max = args.max_connections.unwrap_or_else(default_max_connections);
    let server = accept_loop(
        listener,
        app,
        max,
        Duration::from_secs(args.header_timeout),
        shutdown.clone(),
    );
    let watcher = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            stop_signal().await;
            eprintln!("toolgate: stopping: no new requests; calls in flight get to finish");
            shutdown.cancel();
        })
    };
    server.await;
    watcher.abort();
    finish(&gateway, &metrics, args.grace).await;
    Ok(ExitCode::SUCCESS)
}

/// Lets calls in flight finish within `grace`, kills the rest (closing their journal rows),
/// and stops the upstream servers.
async fn finish(gateway: &Gateway, metrics: &Metrics, grace: u64) {
    let drained = wait_idle(metrics, Duration::from_secs(grace)).await;
    if !drained {
        eprintln!(
            "toolgate: {} call(s) still running after {grace} s: killing them",
            metrics.in_flight()
        );
        gateway.kill_all();
        wait_idle(metrics, Duration::from_secs(5)).await;
    }
    if let Some(hub) = &gateway.hub {
        hub.shutdown(Duration::from_secs(10)).await;
    }
}

async fn wait_idle(metrics: &Metrics, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while metrics.in_flight() > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn stdio(gateway: Arc<Gateway>, metrics: Arc<Metrics>, grace: u64) -> Result<ExitCode> {
    use toolgate_mcp::rmcp::ServiceExt;
    let handler = gateway.handler();
    // The 2025-11-25 revision's task requests are answered beside rmcp (toolgate_mcp::legacy).
    let transport = toolgate_mcp::legacy::stdio(gateway.clone(), tokio::io::stdin(), tokio::io::stdout());
    let running = handler
        .serve(transport)
        .await
        .map_err(|e| anyhow!("the MCP client on stdio did not complete the handshake: {e}"))?;
    let token = running.cancellation_token();
    tokio::select! {
        r = running.waiting() => {
            if let Err(e) = r {
                bail!("the stdio session failed: {e}");
            }
        }
        _ = stop_signal() => token.cancel(),
    }
    finish(&gateway, &metrics, grace).await;
    Ok(ExitCode::SUCCESS)
}
