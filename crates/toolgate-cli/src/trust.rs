//! Trust of project files: `./toolgate.toml` is untrusted until `toolgate trust` records the
//! workspace with the file's SHA-256; a changed file is untrusted again.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name of a project file inside a workspace.
pub const PROJECT_FILE: &str = "toolgate.toml";

/// toolgate's data directory: `$XDG_DATA_HOME/toolgate` or `~/.local/share/toolgate`.
pub fn data_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(base.join("toolgate"))
}

fn store_path() -> Result<PathBuf> {
    data_dir()
        .map(|d| d.join("trusted.json"))
        .context("cannot find a data directory: set XDG_DATA_HOME or HOME")
}

fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn read_store(path: &Path) -> Result<BTreeMap<String, String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("{} is not a trust store", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn key(workspace: &Path) -> String {
    std::fs::canonicalize(workspace)
        .unwrap_or_else(|_| workspace.to_path_buf())
        .display()
        .to_string()
}

/// Whether the workspace's project file, with exactly these bytes, was trusted.
pub fn is_trusted(workspace: &Path, bytes: &[u8]) -> bool {
    let Ok(path) = store_path() else {
        return false;
    };
    read_store(&path)
        .ok()
        .and_then(|store| store.get(&key(workspace)).cloned())
        .is_some_and(|recorded| recorded == digest(bytes))
}

/// Records the workspace's project file as trusted; returns the file and its digest.
pub fn trust(workspace: &Path) -> Result<(PathBuf, String)> {
    let file = workspace.join(PROJECT_FILE);
    let bytes = std::fs::read(&file).with_context(|| format!("there is no {} to trust", file.display()))?;
    let text = std::str::from_utf8(&bytes).with_context(|| format!("{} is not UTF-8", file.display()))?;
    // A file that does not load cannot be trusted.
    if let Err(e) = toml::from_str::<crate::config::Config>(text) {
        bail!("{} is not a valid configuration: {}", file.display(), e.message());
    }
    let path = store_path()?;
    let mut store = read_store(&path)?;
    let sum = digest(&bytes);
    store.insert(key(workspace), sum.clone());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&store)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok((file, sum))
}
