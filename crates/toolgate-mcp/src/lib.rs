//! toolgate's MCP faces, on the official Rust SDK (rmcp):
//!
//! - **upstream servers as tools**: each `[mcp_servers.NAME]` (a stdio child in its own process
//!   group, or streamable HTTP) is connected, listed and registered as `NAME__tool`; annotations
//!   count only when trusted; `list_changed` refreshes the registry and revokes the grants of a
//!   tool whose definition changed; a server that exits is restarted with backoff;
//! - **the gateway**: the governed registry served as an MCP server (streamable HTTP at `/mcp`,
//!   or stdio), with the REST face beside it.

pub mod approve;
pub mod config;
pub mod console;
pub mod elicit;
pub mod http;
pub mod hub;
pub mod legacy;
pub mod metrics;
pub mod oauth;
pub mod proxy;
pub mod relay;
pub mod server;
pub mod sessions;
pub mod tasks;
pub mod tool;
pub mod trace;
pub mod upstream;

pub use approve::{Queue, Via};
pub use config::ServerConfig;
pub use hub::{Hub, ServerHealth, ServerState};
pub use server::{Extension, Gateway, GatewayHandler, SessionFactory};
pub use upstream::{Unserved, Upstream};

/// Re-exported so embedding programs (the conformance fixture) need not name rmcp's version.
pub use rmcp;
