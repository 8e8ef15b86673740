//! Workspace confinement. Every path is resolved by the kernel with `openat2(RESOLVE_BENEATH)`
//! against a descriptor of the canonical workspace: `..`, absolute symlinks and symlinks leading
//! out are refused during resolution itself, so a symlink swapped in between a check and a use
//! cannot escape (there is no separate check).

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{Mode, mkdirat};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use toolgate_core::ToolError;

/// The canonical workspace, opened as a directory descriptor.
pub struct Workspace {
    root: PathBuf,
    dir: OwnedFd,
}

impl Workspace {
    /// Opens the workspace root.
    pub fn open(root: &Path) -> Result<Self, ToolError> {
        let dir = nix::fcntl::open(
            root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ToolError::failed(format!("cannot open the workspace {}: {e}", root.display())))?;
        Ok(Self {
            root: root.to_path_buf(),
            dir,
        })
    }

    /// Turns the model's path into one relative to the workspace, refusing what leaves it lexically.
    pub fn relative(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.contains('\0') {
            return Err(ToolError::InvalidArguments("the path contains a NUL byte".into()));
        }
        let p = Path::new(path);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.root).map_err(|_| outside(path))?
        } else {
            p
        };
        let mut out = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(outside(path));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside(path)),
            }
        }
        if out.as_os_str().is_empty() {
            out.push(".");
        }
        Ok(out)
    }

    /// Opens `rel` beneath the workspace with `flags`. Unless `flags` has `O_PATH`, only a
    /// regular file or a directory is accepted (a FIFO, socket or device is refused without
    /// blocking: the open is non-blocking), a regular file with more than one hard link is
    /// refused (the other link may be outside the workspace), and toolgate's own control files
    /// ([`crate::protect`]) are refused — checked before a file is created, and again on what
    /// was opened.
    pub fn open_beneath(&self, rel: &Path, flags: OFlag, mode: u32, shown: &str) -> Result<OwnedFd, ToolError> {
        if flags.contains(OFlag::O_PATH) {
            return open_in(&self.dir, rel, flags, mode, shown);
        }
        if flags.contains(OFlag::O_CREAT) {
            let parent = rel
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if let Ok(dir) = open_in(&self.dir, parent, OFlag::O_PATH | OFlag::O_DIRECTORY, 0, shown)
                && let Some(name) = rel.file_name()
            {
                crate::protect::refuse(&real_path(&dir)?.join(name), shown)?;
            }
        }
        // What is there already is checked before it can be truncated or written.
        let writes = flags.intersects(OFlag::O_WRONLY | OFlag::O_RDWR | OFlag::O_TRUNC);
        if writes && let Ok(existing) = open_in(&self.dir, rel, OFlag::O_PATH, 0, shown) {
            vet_opened(&existing, shown, true)?;
        }
        let fd = open_in(&self.dir, rel, flags | OFlag::O_NONBLOCK, mode, shown)?;
        vet_opened(&fd, shown, writes)?;
        // Back to blocking reads and writes on a regular file or directory.
        nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFL(flags & !OFlag::O_CREAT & !OFlag::O_TRUNC & !OFlag::O_EXCL),
        )
        .map_err(|e| ToolError::failed(format!("{shown}: {e}")))?;
        Ok(fd)
    }

    /// Creates the missing parent directories of `rel`, each confined to the workspace.
    pub fn create_parents(&self, rel: &Path, shown: &str) -> Result<(), ToolError> {
        let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(());
        };
        let mut current: Option<OwnedFd> = None;
        let mut so_far = PathBuf::new();
        for comp in parent.components() {
            so_far.push(comp);
            let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            match open_in(&self.dir, &so_far, dir_flags, 0, shown) {
                Ok(fd) => current = Some(fd),
                Err(_) => {
                    let base = current.as_ref().map_or_else(|| self.dir.as_fd(), |f| f.as_fd());
                    match mkdirat(base, comp.as_os_str(), Mode::from_bits_truncate(0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => {
                            return Err(ToolError::failed(format!(
                                "cannot create the directory {}: {e}",
                                so_far.display()
                            )));
                        }
                    }
                    current = Some(open_in(&self.dir, &so_far, dir_flags, 0, shown)?);
                }
            }
        }
        Ok(())
    }
}

/// Whether files with several hard links may be read (`[files] hardlink_reads`; never written).
static HARDLINK_READS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets the file tools read (never write) files with more than one hard link: a hard link may
/// lie outside the workspace, so this is off unless the configuration says so.
pub fn set_hardlink_reads(allow: bool) {
    HARDLINK_READS.store(allow, std::sync::atomic::Ordering::Relaxed);
}

/// Only a regular file with one link (several, for a read, when allowed), or a directory, and
/// none of toolgate's control files.
fn vet_opened(fd: &OwnedFd, shown: &str, writes: bool) -> Result<(), ToolError> {
    let st = nix::sys::stat::fstat(fd).map_err(|e| ToolError::failed(format!("{shown}: {e}")))?;
    let kind = st.st_mode & nix::libc::S_IFMT;
    if kind != nix::libc::S_IFREG && kind != nix::libc::S_IFDIR {
        let what = match kind {
            nix::libc::S_IFIFO => "a FIFO",
            nix::libc::S_IFSOCK => "a socket",
            nix::libc::S_IFCHR => "a character device",
            nix::libc::S_IFBLK => "a block device",
            _ => "not a regular file",
        };
        return Err(ToolError::failed(format!(
            "{shown} is {what}; the file tools open only regular files and directories"
        )));
    }
    let reads_allowed = !writes && HARDLINK_READS.load(std::sync::atomic::Ordering::Relaxed);
    if kind == nix::libc::S_IFREG && st.st_nlink > 1 && !reads_allowed {
        return Err(ToolError::failed(format!(
            "{shown} has {} hard links; the file tools refuse files with more than one, since another link may lie outside the workspace ([files] hardlink_reads = true allows reading them)",
            st.st_nlink
        )));
    }
    crate::protect::refuse(&real_path(fd)?, shown)
}

/// What the file tools decide before permission: a path outside the workspace or naming one of
/// toolgate's control files is refused (`builtin_deny`, before anyone is asked); otherwise the
/// path the kernel resolves — symlinks inside the workspace and absolute spellings followed —
/// relative to the workspace, which is what path rules match.
pub fn vet_path(root: &Path, path: &str) -> toolgate_core::tool::Vetted {
    use toolgate_core::tool::Vetted;
    let Ok(ws) = Workspace::open(root) else {
        return Vetted::default();
    };
    let rel = match ws.relative(path) {
        Ok(r) => r,
        Err(e) => return Vetted::refuse(e.to_string()),
    };
    let canonical_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let inside = |real: &Path| -> Vetted {
        if crate::protect::is_protected(real) {
            return Vetted::refuse(format!(
                "{path} is one of toolgate's own control files (configuration, trust records, state or hooks); no tool may touch it"
            ));
        }
        match real.strip_prefix(&canonical_root) {
            Ok(r) if r.as_os_str().is_empty() => Vetted::resolved("."),
            Ok(r) => Vetted::resolved(r.to_string_lossy()),
            Err(_) => Vetted::refuse(outside(path).to_string()),
        }
    };
    match open_in(&ws.dir, &rel, OFlag::O_PATH, 0, path) {
        Ok(fd) => match real_path(&fd) {
            Ok(real) => inside(&real),
            Err(e) => Vetted::refuse(e.to_string()),
        },
        Err(e) if is_missing(&e) => {
            // A file to be created: its directory resolved, its name as given.
            let parent = rel
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = rel.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_default();
            match open_in(&ws.dir, parent, OFlag::O_PATH | OFlag::O_DIRECTORY, 0, path) {
                Ok(dir) => match real_path(&dir) {
                    Ok(real) => inside(&real.join(name)),
                    Err(e) => Vetted::refuse(e.to_string()),
                },
                // Directories still to be made: the path as written, normalised.
                Err(e) if is_missing(&e) => inside(&canonical_root.join(&rel)),
                Err(e) => Vetted::refuse(e.to_string()),
            }
        }
        Err(e) => Vetted::refuse(e.to_string()),
    }
}

/// The path the kernel opened a descriptor at.
pub fn real_path(fd: &impl std::os::fd::AsRawFd) -> Result<PathBuf, ToolError> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| ToolError::failed(format!("cannot resolve an opened path: {e}")))
}

fn open_in(dir: &OwnedFd, rel: &Path, flags: OFlag, mode: u32, shown: &str) -> Result<OwnedFd, ToolError> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    loop {
        match openat2(dir.as_fd(), rel, how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(Errno::EXDEV | Errno::ELOOP) => return Err(outside(shown)),
            Err(Errno::ENOENT) => return Err(ToolError::failed(format!("{shown}: no such file or directory"))),
            Err(Errno::ENOTDIR) => {
                return Err(ToolError::failed(format!(
                    "{shown}: a component of the path is not a directory"
                )));
            }
            Err(Errno::EISDIR) => return Err(ToolError::failed(format!("{shown} is a directory"))),
            Err(Errno::EACCES | Errno::EPERM) => return Err(ToolError::failed(format!("{shown}: permission denied"))),
            Err(Errno::ENOSYS) => {
                return Err(ToolError::failed(
                    "this kernel lacks openat2, which file tools need to confine paths safely; refusing",
                ));
            }
            Err(e) => return Err(ToolError::failed(format!("{shown}: {e}"))),
        }
    }
}

fn outside(path: &str) -> ToolError {
    ToolError::failed(format!(
        "{path:?} is outside the workspace; only paths inside it can be used"
    ))
}

/// Whether an error is a missing file (so parents may be created).
pub fn is_missing(e: &ToolError) -> bool {
    matches!(e, ToolError::Failed(m) if m.ends_with("no such file or directory"))
}
