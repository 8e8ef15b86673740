//! toolgate's own control files — its configuration, trust records, state store and the hook
//! programs a trusted configuration names — kept out of every tool's reach. The file tools
//! refuse them (by the path the kernel really opened, so absolute spellings, symlinks and `..`
//! do not matter), and `exec_shell`'s sandbox keeps them read-only even inside the workspace.
//!
//! The list is process-wide: the program that loads the configuration sets it once at start
//! ([`set`]), before any tool runs.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use toolgate_core::ToolError;

static PROTECTED: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// Sets the control paths (files or directories). Each is canonicalised when it exists, and
/// its parent is canonicalised when it does not yet, so a later file there is covered too.
pub fn set(paths: impl IntoIterator<Item = PathBuf>) {
    let mut list: Vec<PathBuf> = paths.into_iter().filter_map(|p| canonical(&p)).collect();
    list.sort();
    list.dedup();
    *PROTECTED.write().unwrap_or_else(|p| p.into_inner()) = list;
}

/// The control paths in force.
pub fn list() -> Vec<PathBuf> {
    PROTECTED.read().unwrap_or_else(|p| p.into_inner()).clone()
}

fn canonical(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    let parent = p.parent()?;
    let name = p.file_name()?;
    canonical(parent).map(|c| c.join(name))
}

/// Whether `path` (absolute, as the kernel resolved it) is a control path or inside one.
pub fn is_protected(path: &Path) -> bool {
    PROTECTED
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|c| path.starts_with(c))
}

/// A refusal when `path` is protected.
pub fn refuse(path: &Path, shown: &str) -> Result<(), ToolError> {
    if is_protected(path) {
        return Err(ToolError::failed(format!(
            "{shown} is one of toolgate's own control files (configuration, trust records, state or hooks); no tool may touch it"
        )));
    }
    Ok(())
}
