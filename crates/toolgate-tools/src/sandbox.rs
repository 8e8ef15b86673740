//! The OS sandbox of `exec_shell` on Linux, on by default: Landlock lets the command write only
//! inside the workspace and the temporary directory (everything stays readable), and keeps
//! toolgate's own control files ([`crate::protect`]) read-only even when they sit inside the
//! workspace: the directories leading to them get no write access of their own (no new entries
//! there, no renames that could swap them), every other entry stays writable. With
//! `network = false`, a seccomp filter refuses new IPv4 and IPv6 sockets (Landlock alone governs
//! TCP bind/connect, not UDP); by default the network is allowed (agents install packages).
//!
//! Everything that allocates or opens files — the Landlock ruleset, the BPF program — is built
//! before the fork; the child only makes the two system calls that apply them.

use serde::Serialize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whether the sandbox is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// No sandbox.
    Off,
    /// Every part the kernel provides; the result says which are active.
    #[default]
    On,
    /// Every part, or the command does not run.
    Required,
}

/// Which parts of the sandbox are active, for the result.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SandboxReport {
    /// `enforced (ABI n)`, or why not.
    pub filesystem: String,
    /// `enforced` (no new IPv4/IPv6 sockets), or why not.
    pub network: String,
}

/// What the child applies between fork and exec.
#[derive(Clone, Default)]
pub struct PreExec {
    landlock: Option<Arc<OwnedFd>>,
    seccomp: Option<Arc<seccompiler::BpfProgram>>,
}

impl PreExec {
    /// Applies the sandbox to the calling (forked) process: async-signal-safe system calls only.
    pub fn apply(&self) -> std::io::Result<()> {
        if self.landlock.is_none() && self.seccomp.is_none() {
            return Ok(());
        }
        // SAFETY: plain system calls on values built before the fork.
        unsafe {
            if nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = &self.landlock
                && nix::libc::syscall(nix::libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(program) = &self.seccomp {
            seccompiler::apply_filter(program).map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Ok(())
    }
}

/// A sandbox prepared for one command.
#[derive(Default)]
pub struct Prepared {
    pre_exec: PreExec,
    report: Option<SandboxReport>,
}

impl Prepared {
    /// What the child applies.
    pub fn pre_exec(&self) -> PreExec {
        self.pre_exec.clone()
    }

    /// Which parts are active (none when the sandbox is off).
    pub fn report(&self) -> Option<&SandboxReport> {
        self.report.as_ref()
    }
}

/// The paths under `root` that may be written: `root` itself when no control path lies inside
/// it; otherwise each of its entries but the control paths, recursing into the directories that
/// lead to one (which get no write access of their own).
fn writable_roots(root: &Path, protected: &[PathBuf], out: &mut Vec<PathBuf>) {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if protected.iter().any(|p| root.starts_with(p)) {
        return;
    }
    if !protected.iter().any(|p| p.starts_with(&root)) {
        out.push(root);
        return;
    }
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        // A symlink would grant its target, which may lie anywhere: writes through it are refused.
        if kind.is_symlink() {
            continue;
        }
        let is_dir = kind.is_dir();
        if protected.iter().any(|p| p.starts_with(&path)) {
            if is_dir && !protected.contains(&path) {
                writable_roots(&path, protected, out);
            }
        } else {
            out.push(path);
        }
    }
}

fn landlock_ruleset(workspace: &Path) -> Result<(OwnedFd, String), String> {
    use landlock::{
        ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, path_beneath_rules,
    };
    let abi = ABI::V5;
    let tmp = std::env::temp_dir();
    let protected = crate::protect::list();
    let mut writable: Vec<PathBuf> = vec![PathBuf::from("/dev/null")];
    writable_roots(workspace, &protected, &mut writable);
    writable_roots(&tmp, &protected, &mut writable);
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(|e| e.to_string())?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
        .map_err(|e| e.to_string())?;
    let fd: Option<OwnedFd> = ruleset.into();
    let fd = fd.ok_or_else(|| "unavailable: this kernel does not provide Landlock".to_owned())?;
    // The kernel's ABI version: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
    // SAFETY: a query with no pointer.
    let version = unsafe { nix::libc::syscall(nix::libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    Ok((
        fd,
        format!(
            "enforced: writes only in the workspace and {} (Landlock ABI {version})",
            tmp.display()
        ),
    ))
}

fn seccomp_program() -> Result<seccompiler::BpfProgram, String> {
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
    let family = |f: i32| -> Result<SeccompRule, String> {
        SeccompRule::new(vec![
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, f as u64).map_err(|e| e.to_string())?,
        ])
        .map_err(|e| e.to_string())
    };
    let rules = std::collections::BTreeMap::from([(
        nix::libc::SYS_socket,
        vec![family(nix::libc::AF_INET)?, family(nix::libc::AF_INET6)?],
    )]);
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(|_| {
        format!(
            "unavailable: seccomp filters are not built for {}",
            std::env::consts::ARCH
        )
    })?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter.try_into().map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Whether this kernel provides Landlock (for the one warning at start when it does not).
pub fn landlock_available() -> bool {
    // SAFETY: a query with no pointer: landlock_create_ruleset(NULL, 0, VERSION).
    unsafe { nix::libc::syscall(nix::libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) >= 1 }
}

/// Prepares the sandbox for a command in `workspace`. `Required` fails, naming what the kernel
/// lacks, when any part is unavailable.
/// With `network` false, new IPv4/IPv6 sockets are refused too.
pub fn prepare(mode: SandboxMode, workspace: &Path, network: bool) -> Result<Prepared, String> {
    if mode == SandboxMode::Off {
        return Ok(Prepared::default());
    }
    let (landlock, filesystem) = match landlock_ruleset(workspace) {
        Ok((fd, text)) => (Some(Arc::new(fd)), text),
        Err(why) => (None, why),
    };
    let allow_network = network;
    let (seccomp, network) = if allow_network {
        (None, "allowed ([shell] network = true)".to_owned())
    } else {
        match seccomp_program() {
            Ok(p) => (
                Some(Arc::new(p)),
                "enforced: no new IPv4 or IPv6 sockets (seccomp)".to_owned(),
            ),
            Err(why) => (None, why),
        }
    };
    if mode == SandboxMode::Required && (landlock.is_none() || (!allow_network && seccomp.is_none())) {
        return Err(format!(
            "the sandbox is required ([shell] sandbox = \"required\") but this system cannot provide it: filesystem {filesystem}; network {network}"
        ));
    }
    Ok(Prepared {
        pre_exec: PreExec { landlock, seccomp },
        report: Some(SandboxReport { filesystem, network }),
    })
}
