//! The file tools: `read_file`, `list_directory`, `write_file`, `edit_file`, all confined to the
//! workspace by [`crate::confine`].

use crate::confine::{Workspace, is_missing};
use async_trait::async_trait;
use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::fstatat;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::Arc;
use toolgate_core::ToolError;
use toolgate_core::tool::{Annotations, PermissionSubject, ToolContext, ToolOutput, ToolSpec, TypedTool, Vetted};

/// Limits of the file tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLimits {
    /// Bytes `read_file` returns at most (the rest is reported, not read).
    pub max_read_bytes: usize,
    /// Size of a file `edit_file` will load.
    pub max_edit_bytes: u64,
    /// Bytes `write_file` will write.
    pub max_write_bytes: usize,
    /// Entries `list_directory` returns at most.
    pub max_entries: usize,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_read_bytes: 256 * 1024,
            max_edit_bytes: 10 << 20,
            max_write_bytes: 10 << 20,
            max_entries: 1000,
        }
    }
}

fn path_spec(annotations: Annotations) -> ToolSpec {
    ToolSpec {
        subject: PermissionSubject::Path("path".into()),
        ..ToolSpec::with_annotations(annotations)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::failed(format!("the file operation failed: {e}")))?
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// First line to return (1-based). Default 1.
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// How many lines to return. Default: all that fit the size limit.
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// Reads a text file of the workspace, optionally a range of lines.
#[derive(Clone, Debug, Default)]
pub struct ReadFile {
    /// Size limits.
    pub limits: FileLimits,
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a text file in the workspace. Use offset and limit (in lines) to read part of a large file."
    }
    fn spec(&self) -> ToolSpec {
        path_spec(Annotations::READ_ONLY)
    }
    fn vet(&self, workspace: &Path, args: &serde_json::Value) -> Vetted {
        crate::confine::vet_path(
            workspace,
            args.get("path").and_then(serde_json::Value::as_str).unwrap_or_default(),
        )
    }
    async fn run(&self, ctx: &ToolContext, args: ReadFileArgs) -> Result<ToolOutput, ToolError> {
        let root = ctx.workspace.clone();
        let limits = self.limits;
        let cancel = ctx.cancel.clone();
        blocking(move || read_file(&root, &args, limits, &cancel))
            .await
            .map(ToolOutput::json)
    }
}

/// Bytes `read_file` scans at most to reach its first line (past it the read stops, said so).
const MAX_SCAN_BYTES: u64 = 256 << 20;

fn read_file(
    root: &Path,
    args: &ReadFileArgs,
    limits: FileLimits,
    cancel: &toolgate_core::CancellationToken,
) -> Result<serde_json::Value, ToolError> {
    let ws = Workspace::open(root)?;
    let rel = ws.relative(&args.path)?;
    let fd = ws.open_beneath(&rel, OFlag::O_RDONLY, 0, &args.path)?;
    let file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| ToolError::failed(format!("{}: {e}", args.path)))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{} is a directory; use list_directory",
            args.path
        )));
    }
    let mut reader = BufReader::new(file);
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut content = String::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut last = 0u64;
    let mut truncated = false;
    // Bounded by the file's real size and a scan budget, and stopped by a cancellation: a huge
    // sparse file or a far offset cannot keep a thread reading after the call ended.
    let scan_limit = meta.len().min(MAX_SCAN_BYTES);
    let mut scanned = 0u64;
    loop {
        if cancel.is_cancelled() {
            return Err(ToolError::Canceled);
        }
        if scanned >= scan_limit && scanned > 0 {
            truncated = scanned < meta.len();
            break;
        }
        line.clear();
        let n = reader
            .by_ref()
            .take(limits.max_read_bytes as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| ToolError::failed(format!("{}: {e}", args.path)))?;
        if n == 0 {
            break;
        }
        scanned += n as u64;
        if line.contains(&0) {
            return Err(ToolError::failed(format!("{} is a binary file", args.path)));
        }
        number += 1;
        if number < first {
            continue;
        }
        if number >= first.saturating_add(limit) {
            truncated = true;
            break;
        }
        if line.contains(&0) {
            return Err(ToolError::failed(format!("{} is a binary file", args.path)));
        }
        let text = String::from_utf8_lossy(&line);
        if content.len() + text.len() > limits.max_read_bytes {
            if content.is_empty() {
                // One line longer than the limit: its head, rather than nothing.
                let mut cut = limits.max_read_bytes.min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                content.push_str(&text[..cut]);
                last = number;
            }
            truncated = true;
            break;
        }
        content.push_str(&text);
        last = number;
    }
    Ok(json!({
        "path": args.path,
        "content": content,
        "start_line": first,
        "end_line": last,
        "size_bytes": meta.len(),
        "truncated": truncated,
    }))
}

/// Arguments of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirectoryArgs {
    /// Directory, relative to the workspace. Default: the workspace root.
    #[serde(default)]
    pub path: Option<String>,
}

/// Lists a directory of the workspace.
#[derive(Clone, Debug, Default)]
pub struct ListDirectory {
    /// Size limits.
    pub limits: FileLimits,
}

#[async_trait]
impl TypedTool for ListDirectory {
    type Args = ListDirectoryArgs;
    fn name(&self) -> &str {
        "list_directory"
    }
    fn description(&self) -> &str {
        "List the entries of a directory in the workspace, with their type and size."
    }
    fn spec(&self) -> ToolSpec {
        path_spec(Annotations::READ_ONLY)
    }
    fn vet(&self, workspace: &Path, args: &serde_json::Value) -> Vetted {
        crate::confine::vet_path(
            workspace,
            args.get("path").and_then(serde_json::Value::as_str).unwrap_or("."),
        )
    }
    async fn run(&self, ctx: &ToolContext, args: ListDirectoryArgs) -> Result<ToolOutput, ToolError> {
        let root = ctx.workspace.clone();
        let limits = self.limits;
        blocking(move || list_directory(&root, args.path.as_deref().unwrap_or("."), limits))
            .await
            .map(ToolOutput::json)
    }
}

fn list_directory(root: &Path, path: &str, limits: FileLimits) -> Result<serde_json::Value, ToolError> {
    let ws = Workspace::open(root)?;
    let rel = ws.relative(path)?;
    let fd = ws.open_beneath(&rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0, path)?;
    let mut dir = Dir::from_fd(fd).map_err(|e| ToolError::failed(format!("{path}: {e}")))?;
    let mut entries = Vec::new();
    let mut total = 0usize;
    let mut names: Vec<(String, Option<Type>)> = Vec::new();
    for entry in dir.iter() {
        let entry = entry.map_err(|e| ToolError::failed(format!("{path}: {e}")))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        total += 1;
        names.push((name, entry.file_type()));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names.into_iter().take(limits.max_entries) {
        let stat = fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok();
        let kind = match kind {
            Some(Type::Directory) => "directory",
            Some(Type::File) => "file",
            Some(Type::Symlink) => "symlink",
            Some(_) => "other",
            None => match stat.map(|s| s.st_mode & libc_mode::S_IFMT) {
                Some(libc_mode::S_IFDIR) => "directory",
                Some(libc_mode::S_IFREG) => "file",
                Some(libc_mode::S_IFLNK) => "symlink",
                _ => "other",
            },
        };
        let mut e = json!({"name": name, "type": kind});
        if kind == "file"
            && let Some(s) = stat
        {
            e["size_bytes"] = json!(s.st_size);
        }
        entries.push(e);
    }
    Ok(json!({
        "path": path,
        "entries": entries,
        "total": total,
        "truncated": total > limits.max_entries,
    }))
}

mod libc_mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFLNK: u32 = 0o120000;
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the workspace. Missing parent directories are created.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// Writes (creates or replaces) a file of the workspace.
#[derive(Clone, Debug, Default)]
pub struct WriteFile {
    /// Size limits.
    pub limits: FileLimits,
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Create or overwrite a file in the workspace with the given content."
    }
    fn spec(&self) -> ToolSpec {
        path_spec(Annotations {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        })
    }
    fn vet(&self, workspace: &Path, args: &serde_json::Value) -> Vetted {
        crate::confine::vet_path(
            workspace,
            args.get("path").and_then(serde_json::Value::as_str).unwrap_or_default(),
        )
    }
    async fn run(&self, ctx: &ToolContext, args: WriteFileArgs) -> Result<ToolOutput, ToolError> {
        if args.content.len() > self.limits.max_write_bytes {
            return Err(ToolError::failed(format!(
                "the content is {} bytes; write_file accepts at most {}",
                args.content.len(),
                self.limits.max_write_bytes
            )));
        }
        let root = ctx.workspace.clone();
        blocking(move || {
            let ws = Workspace::open(&root)?;
            let rel = ws.relative(&args.path)?;
            let created = write_all(&ws, &rel, &args.path, args.content.as_bytes(), true)?;
            Ok(json!({"path": args.path, "bytes_written": args.content.len(), "created": created}))
        })
        .await
        .map(ToolOutput::json)
    }
}

/// Writes `bytes` to `rel`, creating parents when allowed; returns whether the file was new.
fn write_all(ws: &Workspace, rel: &Path, shown: &str, bytes: &[u8], create_parents: bool) -> Result<bool, ToolError> {
    let existed = ws.open_beneath(rel, OFlag::O_PATH, 0, shown).is_ok();
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC;
    let fd = match ws.open_beneath(rel, flags, 0o644, shown) {
        Err(e) if create_parents && is_missing(&e) => {
            ws.create_parents(rel, shown)?;
            ws.open_beneath(rel, flags, 0o644, shown)?
        }
        other => other?,
    };
    let mut file = File::from(fd);
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .map_err(|e| ToolError::failed(format!("{shown}: {e}")))?;
    Ok(!existed)
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// The exact text to replace; it must occur exactly once unless `replace_all` is set.
    pub old_string: String,
    /// The replacement text.
    pub new_string: String,
    /// Replace every occurrence instead of requiring a unique one.
    #[serde(default)]
    pub replace_all: bool,
}

/// Replaces exact text in a file of the workspace.
#[derive(Clone, Debug, Default)]
pub struct EditFile {
    /// Size limits.
    pub limits: FileLimits,
}

#[async_trait]
impl TypedTool for EditFile {
    type Args = EditFileArgs;
    fn name(&self) -> &str {
        "edit_file"
    }
    fn description(&self) -> &str {
        "Replace an exact piece of text in a workspace file. old_string must match exactly once (include surrounding lines to make it unique), or set replace_all."
    }
    fn spec(&self) -> ToolSpec {
        path_spec(Annotations {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        })
    }
    fn vet(&self, workspace: &Path, args: &serde_json::Value) -> Vetted {
        crate::confine::vet_path(
            workspace,
            args.get("path").and_then(serde_json::Value::as_str).unwrap_or_default(),
        )
    }
    async fn run(&self, ctx: &ToolContext, args: EditFileArgs) -> Result<ToolOutput, ToolError> {
        if args.old_string.is_empty() {
            return Err(ToolError::InvalidArguments("old_string must not be empty".into()));
        }
        let root = ctx.workspace.clone();
        let limits = self.limits;
        blocking(move || edit_file(&root, &args, limits))
            .await
            .map(ToolOutput::json)
    }
}

fn edit_file(root: &Path, args: &EditFileArgs, limits: FileLimits) -> Result<serde_json::Value, ToolError> {
    let ws = Workspace::open(root)?;
    let rel = ws.relative(&args.path)?;
    let fd = ws.open_beneath(&rel, OFlag::O_RDONLY, 0, &args.path)?;
    let file = File::from(fd);
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > limits.max_edit_bytes {
        return Err(ToolError::failed(format!(
            "{} is {size} bytes; edit_file loads at most {}",
            args.path, limits.max_edit_bytes
        )));
    }
    let mut text = String::new();
    BufReader::new(file)
        .read_to_string(&mut text)
        .map_err(|e| ToolError::failed(format!("{} is not UTF-8 text: {e}", args.path)))?;
    let count = text.matches(args.old_string.as_str()).count();
    match count {
        0 => {
            return Err(ToolError::failed(format!(
                "old_string was not found in {}; read the file and copy the text exactly",
                args.path
            )));
        }
        n if n > 1 && !args.replace_all => {
            return Err(ToolError::failed(format!(
                "old_string occurs {n} times in {}; include more surrounding text to make it unique, or set replace_all",
                args.path
            )));
        }
        _ => {}
    }
    let updated = if args.replace_all {
        text.replace(args.old_string.as_str(), &args.new_string)
    } else {
        text.replacen(args.old_string.as_str(), &args.new_string, 1)
    };
    write_all(&ws, &rel, &args.path, updated.as_bytes(), false)?;
    Ok(json!({"path": args.path, "replacements": if args.replace_all { count } else { 1 }}))
}

/// The four file tools with default limits.
pub fn file_tools() -> Vec<Arc<dyn toolgate_core::Tool>> {
    use toolgate_core::tool::Typed;
    vec![
        Arc::new(Typed::new(ReadFile::default())),
        Arc::new(Typed::new(ListDirectory::default())),
        Arc::new(Typed::new(WriteFile::default())),
        Arc::new(Typed::new(EditFile::default())),
    ]
}
