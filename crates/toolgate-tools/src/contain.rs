//! Child processes that cannot outlive toolgate, however toolgate dies (SIGKILL included), and
//! that see no more of its environment than they need.
//!
//! [`Containment::apply`] runs in the forked child before `exec`:
//! - the child asks the kernel for SIGKILL when its parent thread dies (`PR_SET_PDEATHSIG`);
//! - where the kernel allows a new PID namespace (as root, or through a user namespace that
//!   maps the user to itself), the child forks once more: the grandchild is PID 1 of a
//!   namespace of its own and dies with the child; it forks the program (PID 2, an ordinary
//!   process that signals reach as anywhere) and reaps orphans until the program ends. Then it
//!   hands the program's wait status to the child and exits — and when a namespace's first
//!   process dies the kernel kills every process in it, so nothing started inside —
//!   double-forked, `setsid`, `nohup`, left in the background — outlives the program, or
//!   toolgate. The child only waits (ignoring TERM and the terminal's signals, which its tree
//!   gets) and exits as the program did.
//! - Where no namespace can be had, the parent-death signal still takes the program itself,
//!   and the caller's process-group and tree tracking remain the only other net; the result
//!   says which held ([`Containment::describe`]).

use std::io;

/// What a spawn does between fork and exec to stay contained.
#[derive(Clone, Debug)]
pub struct Containment {
    /// `uid_map` and `gid_map` lines when a user namespace is needed (not root).
    maps: Option<(Vec<u8>, Vec<u8>)>,
    namespaces: bool,
}

impl Default for Containment {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Containment {
    /// Everything the kernel allows (`namespaces` false: the parent-death signal only).
    pub fn new(namespaces: bool) -> Self {
        // SAFETY: plain queries.
        let (uid, gid) = unsafe { (nix::libc::geteuid(), nix::libc::getegid()) };
        Self {
            maps: (uid != 0).then(|| {
                (
                    format!("{uid} {uid} 1\n").into_bytes(),
                    format!("{gid} {gid} 1\n").into_bytes(),
                )
            }),
            namespaces,
        }
    }

    /// Applies it in the forked child. Returns in the process that must exec the program.
    ///
    /// # Safety
    /// Only for `pre_exec`: it forks, and the intermediate process never returns.
    pub unsafe fn apply(&self) -> io::Result<()> {
        use nix::libc;
        // SAFETY: async-signal-safe system calls only; the map texts were built before the fork.
        unsafe {
            let parent = libc::getppid();
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1); // toolgate died between fork and here
            }
            if !self.namespaces {
                return Ok(());
            }
            let flags = if self.maps.is_some() {
                libc::CLONE_NEWUSER | libc::CLONE_NEWPID
            } else {
                libc::CLONE_NEWPID
            };
            if libc::unshare(flags) != 0 {
                return Ok(()); // no namespace here: the parent-death signal alone
            }
            if let Some((uid_map, gid_map)) = &self.maps {
                write_file(c"/proc/self/setgroups", b"deny");
                write_file(c"/proc/self/uid_map", uid_map);
                write_file(c"/proc/self/gid_map", gid_map);
            }
            // The status of the program travels from the namespace's init to the waiter here.
            let mut pipe = [0i32; 2];
            if libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            let [read_end, write_end] = pipe;
            let init = libc::fork();
            if init < 0 {
                return Err(io::Error::last_os_error());
            }
            if init == 0 {
                // PID 1 of the namespace: dies with the waiter (its parent is outside the
                // namespace, so getppid() says 0 and no race check is possible here; the waiter
                // only ends by waiting for it or by being killed, which this signal covers).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                libc::close(read_end);
                let program = libc::fork();
                if program < 0 {
                    libc::_exit(127);
                }
                if program == 0 {
                    // PID 2: the program. Not init, so signals reach it as anywhere else.
                    libc::close(write_end);
                    return Ok(());
                }
                run_init(program, write_end);
            }
            libc::close(write_end);
            run_waiter(init, read_end);
        }
    }
}

/// PID 1 of the namespace: reaps every orphan until the program ends, hands its wait status to
/// the waiter, and exits — and with it the kernel kills whatever the program left behind.
///
/// # Safety
/// In a forked child only (async-signal-safe calls; never returns).
unsafe fn run_init(program: nix::libc::pid_t, status_out: i32) -> ! {
    use nix::libc;
    // SAFETY: close_range, waitpid, write and _exit are async-signal-safe.
    unsafe {
        // Only the status pipe stays open: spawn's error pipe must close when the program
        // execs, and the output pipes when the program's tree is done.
        if status_out > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (status_out - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (status_out + 1) as u32, u32::MAX, 0u32);
        let mut status = 0;
        loop {
            let mut st = 0;
            let r = libc::waitpid(-1, &mut st, 0);
            if r == program {
                status = st;
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        let bytes = status.to_ne_bytes();
        libc::write(status_out, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0);
    }
}

/// The process toolgate spawned: holds no descriptor but the status pipe, ignores the
/// terminal's and a graceful TERM (its tree gets them; a KILL ends it, and the namespace with
/// it), and exits as the program did — by the same signal, or with its exit code.
///
/// # Safety
/// In a forked child only (async-signal-safe calls; never returns).
unsafe fn run_waiter(init: nix::libc::pid_t, status_in: i32) -> ! {
    use nix::libc;
    // SAFETY: async-signal-safe system calls only.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Every descriptor but the status pipe goes: spawn's error pipe (so spawn returns),
        // stdin and the output pipes (so they close when the program's tree is done).
        if status_in > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (status_in - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (status_in + 1) as u32, u32::MAX, 0u32);
        let mut bytes = [0u8; 4];
        let mut got = 0usize;
        while got < 4 {
            let n = libc::read(status_in, bytes[got..].as_mut_ptr().cast(), 4 - got);
            if n > 0 {
                got += n as usize;
            } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            } else {
                break;
            }
        }
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
        let status = if got == 4 {
            i32::from_ne_bytes(bytes)
        } else {
            init_status
        };
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            127
        });
    }
}

impl Containment {
    /// [`Containment::apply`] in a process group of its own, made first so the waiter is in it
    /// too (Ctrl-C at a terminal does not reach it; a kill of the group does).
    ///
    /// # Safety
    /// As for [`Containment::apply`].
    pub unsafe fn apply_in_own_group(&self) -> io::Result<()> {
        // SAFETY: one system call, then `apply` under the caller's promise.
        unsafe {
            if nix::libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            self.apply()
        }
    }
}

/// Writes `bytes` to a file, ignoring failure (async-signal-safe).
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) {
    use nix::libc;
    // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, bytes.as_ptr().cast(), bytes.len());
            libc::close(fd);
        }
    }
}

/// Whether this process may make a PID namespace (checked once, by trying in a child).
pub fn namespaces_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut cmd = std::process::Command::new("true");
        let c = Containment::new(true);
        let flags = if c.maps.is_some() {
            nix::libc::CLONE_NEWUSER | nix::libc::CLONE_NEWPID
        } else {
            nix::libc::CLONE_NEWPID
        };
        use std::os::unix::process::CommandExt;
        // SAFETY: one system call, async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if nix::libc::unshare(flags) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.status().is_ok_and(|s| s.success())
    })
}

/// The environment a child starts with: `PATH`, `HOME`, `LANG` (from toolgate's own, or
/// defaults), `TMPDIR` when set, and the variables named in `pass` that are set. Nothing else of
/// toolgate's environment — tokens and keys included — reaches it.
pub fn minimal_env(pass: &[String]) -> Vec<(String, String)> {
    let get = |k: &str| std::env::var(k).ok();
    let mut env = vec![
        (
            "PATH".to_owned(),
            get("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        ),
        ("HOME".to_owned(), get("HOME").unwrap_or_else(|| "/".into())),
        ("LANG".to_owned(), get("LANG").unwrap_or_else(|| "C.UTF-8".into())),
    ];
    if let Some(tmp) = get("TMPDIR") {
        env.push(("TMPDIR".into(), tmp));
    }
    for name in pass {
        if crate::contain::is_secret_name(name) {
            continue;
        }
        if let Some(v) = get(name) {
            env.push((name.clone(), v));
        }
    }
    env
}

/// toolgate's own secrets, never passed to a child even when named in an allowlist.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.starts_with("TOOLGATE_") && (n.contains("TOKEN") || n.contains("KEY") || n.contains("SECRET"))
}
