//! toolgate's built-in tools, declared through the typed tool trait of `toolgate-core`.
//!
//! The file tools (`read_file`, `list_directory`, `write_file`, `edit_file`) are confined to the
//! workspace by the kernel (`openat2` with `RESOLVE_BENEATH`), so `..`, absolute paths, symlinks
//! leading out and symlinks swapped in during a call are all refused. `read_result` pages through
//! results the engine truncated. `memory_read` and `memory_write` keep durable notes per principal
//! in the session's store. `fetch_url` GETs a URL behind an SSRF guard ([`netguard`]). The job
//! tools (`job_status`, `job_output`, `job_wait`, `job_kill`, `job_list`) drive background jobs
//! (`exec_shell` with `"background": true`).
//!
//! ```
//! let mut registry = toolgate_core::Registry::new();
//! for tool in toolgate_tools::builtin_tools() {
//!     registry.register(tool);
//! }
//! assert!(registry.get("read_file").is_some());
//! ```

pub mod confine;
pub mod contain;
pub mod denylist;
pub mod exec_shell;
pub mod fetch;
pub mod files;
pub mod jobs;
pub mod memory;
pub mod netguard;
pub mod protect;
pub mod read_result;
pub mod sandbox;

use std::sync::Arc;
use toolgate_core::Tool;
use toolgate_core::tool::Typed;

/// Settings of the built-in tools that have any.
#[derive(Clone, Debug, Default)]
pub struct ToolsConfig {
    /// `fetch_url`.
    pub fetch: fetch::FetchConfig,
    /// `exec_shell`.
    pub shell: exec_shell::ShellConfig,
}

/// Every built-in tool with default settings.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    builtin_tools_with(&ToolsConfig::default())
}

/// Every built-in tool with these settings.
pub fn builtin_tools_with(config: &ToolsConfig) -> Vec<Arc<dyn Tool>> {
    let mut tools = files::file_tools();
    tools.push(Arc::new(Typed::new(read_result::ReadResult)));
    tools.push(Arc::new(Typed::new(memory::MemoryRead::default())));
    tools.push(Arc::new(Typed::new(memory::MemoryWrite::default())));
    tools.push(Arc::new(Typed::new(fetch::FetchUrl::new(config.fetch.clone()))));
    tools.push(Arc::new(Typed::new(exec_shell::ExecShell::new(config.shell.clone()))));
    tools.extend(jobs::job_tools());
    tools
}

#[cfg(test)]
mod schema_tests {
    use super::*;
    use toolgate_core::validate::{CompiledSchema, Draft};

    /// A one-shot `toolgate call` compiles one built-in schema, and the first compile of a
    /// process builds the meta-schema it is checked against: draft 7's costs ~1 ms less. Every
    /// built-in schema must mean the same read as draft 7, or this fast path is lost unseen.
    #[test]
    fn every_built_in_schema_is_read_as_draft_7_and_still_refuses_what_it_should() {
        for tool in builtin_tools() {
            let compiled =
                CompiledSchema::compile(tool.parameters()).unwrap_or_else(|e| panic!("{}: {e}", tool.name()));
            assert_eq!(compiled.read_as(), Some(Draft::Draft7), "{}", tool.name());
            assert!(!compiled.is_valid(&serde_json::json!([])), "{}", tool.name());
            assert!(
                !compiled.is_valid(&serde_json::json!({"no such argument": 1})),
                "{}",
                tool.name()
            );
            if let Some(output) = tool.output_schema() {
                let compiled = CompiledSchema::compile(output).unwrap_or_else(|e| panic!("{}: {e}", tool.name()));
                assert_eq!(compiled.read_as(), Some(Draft::Draft7), "{} output", tool.name());
            }
        }
    }
}
