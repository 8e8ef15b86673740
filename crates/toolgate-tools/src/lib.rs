//! toolgate's built-in tools, declared through the typed tool trait of `toolgate-core`.
//!
//! The file tools (`read_file`, `list_directory`, `write_file`, `edit_file`) are confined to the
//! workspace by the kernel (`openat2` with `RESOLVE_BENEATH`), so `..`, absolute paths, symlinks
//! leading out and symlinks swapped in during a call are all refused. `read_result` pages through
//! results the engine truncated. `memory_read` and `memory_write` keep durable notes per principal
//! in the session's store.
//!
//! ```
//! let mut registry = toolgate_core::Registry::new();
//! for tool in toolgate_tools::builtin_tools() {
//!     registry.register(tool);
//! }
//! assert!(registry.get("read_file").is_some());
//! ```

pub mod confine;
pub mod files;
pub mod memory;
pub mod read_result;

use std::sync::Arc;
use toolgate_core::Tool;
use toolgate_core::tool::Typed;

/// Every built-in tool with default settings.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    let mut tools = files::file_tools();
    tools.push(Arc::new(Typed::new(read_result::ReadResult)));
    tools.push(Arc::new(Typed::new(memory::MemoryRead::default())));
    tools.push(Arc::new(Typed::new(memory::MemoryWrite::default())));
    tools
}
