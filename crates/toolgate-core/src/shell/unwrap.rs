//! What a program runs besides itself: the command a wrapper is given (`env rm …`, `sudo -u x rm`,
//! `timeout 5 rm`, `xargs rm`, `find … -exec rm {} +`), the script a shell or `eval` is given
//! inline, and the options of ordinary programs that name a program to run (`git -c
//! core.pager=…`, `cargo --config 'target.….runner=…'`, `tar --to-command=…`).

use super::Expanded;

/// Programs whose arguments are themselves code: a prefix rule (`tool(name:*)`) never allows them.
pub const WRAPPERS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "rbash", "fish", "csh", "tcsh", "posh", "eval", "exec",
    "source", ".", "env", "xargs", "sudo", "doas", "su", "runuser", "nohup", "nice", "ionice", "timeout", "time",
    "command", "builtin", "watch", "stdbuf", "setsid", "chroot", "chrt", "taskset", "unbuffer", "flock", "parallel",
    "busybox", "strace", "ltrace", "nsenter", "unshare", "fakeroot", "script", "trap", "alias", "python", "python3",
    "perl", "ruby", "node", "awk", "gawk", "php", "lua",
];

/// `/usr/bin/rm` → `rm`.
pub fn program_name(word: &str) -> &str {
    let name = word.rsplit('/').next().unwrap_or(word);
    if name.is_empty() { word } else { name }
}

/// What a program runs besides itself.
#[derive(Debug)]
pub enum Inner<'a> {
    /// Nothing.
    None,
    /// The command in these words.
    Command(&'a [Expanded]),
    /// Several commands (`find -exec a ; -exec b +`).
    Commands(Vec<&'a [Expanded]>),
    /// A script given inline (`bash -c`, `eval`, `su -c`, `watch`).
    Script(Expanded),
    /// A shell reading its script from stdin.
    Stdin,
    /// A script in a file (`bash x.sh`, `source x`).
    ScriptFile(Expanded),
    /// It runs something that cannot be known before it runs.
    Unknowable(String),
}

/// Options of a wrapper: which take a value as the next word (or attached, `-n5`, `--opt=v`).
struct Opts {
    with_value: &'static [&'static str],
    /// A word that is all digits after `-` is an option too (`nice -5`).
    numeric: bool,
}

/// The index of the first word of `args` that is not an option of the wrapper.
fn after_options(args: &[Expanded], opts: &Opts) -> usize {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if t == "--" {
            return i + 1;
        }
        if !t.starts_with('-') || t == "-" {
            return i;
        }
        if opts.numeric && t[1..].chars().all(|c| c.is_ascii_digit()) {
            i += 1;
            continue;
        }
        let takes = opts.with_value.contains(&t);
        i += if takes { 2 } else { 1 };
    }
    args.len()
}

/// Skips `NAME=value` words (`env A=1 rm`).
fn after_assignments(args: &[Expanded], mut i: usize) -> usize {
    while args.get(i).is_some_and(|a| is_assignment(&a.text)) {
        i += 1;
    }
    i
}

fn is_assignment(t: &str) -> bool {
    t.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn rest<'a>(args: &'a [Expanded], i: usize) -> Inner<'a> {
    match args.get(i..) {
        Some(r) if !r.is_empty() => Inner::Command(r),
        _ => Inner::None,
    }
}

/// The value of an option `-c VALUE` / `--command=VALUE` / `--command VALUE`, if given.
fn option_value(args: &[Expanded], short: &str, long: &str) -> Option<Expanded> {
    let letter = short.trim_start_matches('-');
    for (i, a) in args.iter().enumerate() {
        // `-qc VALUE`: short flags run together, the one taking the value last.
        let cluster = a.text.strip_prefix('-').is_some_and(|f| {
            !f.starts_with('-') && f.len() > 1 && f.ends_with(letter) && f.chars().all(|c| c.is_ascii_alphabetic())
        });
        if a.text == short || a.text == long || cluster {
            return args.get(i + 1).cloned();
        }
        if let Some(v) = a.text.strip_prefix(long).and_then(|v| v.strip_prefix('=')) {
            return Some(Expanded {
                text: v.to_owned(),
                ..a.clone()
            });
        }
    }
    None
}

/// The words joined with spaces, as `eval` and `watch` do.
fn joined(words: &[Expanded]) -> Expanded {
    Expanded {
        text: words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" "),
        dynamic: words.iter().any(|w| w.dynamic),
        pattern: false,
    }
}

/// What `name` (already reduced to its program name) runs, given all its words.
pub fn inner<'a>(name: &str, words: &'a [Expanded]) -> Inner<'a> {
    let args = &words[1..];
    match name {
        "xargs" | "parallel" | "find" => runner(name, args),
        "eval" | "trap" | "alias" | "source" | "." => evaluator(name, args),
        "sudo" | "doas" | "su" | "runuser" | "script" | "flock" | "watch" | "strace" | "ltrace" | "nsenter"
        | "unshare" | "busybox" => privileged(name, args),
        "bash" | "sh" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "rbash" | "posh" | "fish" => shell(name, args),
        _ => prefixed(name, args),
    }
}

/// Wrappers that run the rest of their words after their own options (`env`, `nice`, `timeout`, …).
fn prefixed<'a>(name: &str, args: &'a [Expanded]) -> Inner<'a> {
    let o = |with_value: &'static [&'static str]| Opts {
        with_value,
        numeric: false,
    };
    match name {
        "command" | "builtin" | "nohup" | "unbuffer" | "fakeroot" | "setsid" => {
            rest(args, after_options(args, &o(&[])))
        }
        "exec" => rest(args, after_options(args, &o(&["-a"]))),
        "nice" => rest(
            args,
            after_options(
                args,
                &Opts {
                    with_value: &["-n", "--adjustment"],
                    numeric: true,
                },
            ),
        ),
        "time" => rest(args, after_options(args, &o(&["-f", "-o", "--format", "--output"]))),
        "ionice" => rest(args, after_options(args, &o(&["-c", "-n", "-p", "-t", "-P", "-u"]))),
        "stdbuf" => rest(
            args,
            after_options(args, &o(&["-i", "-o", "-e", "--input", "--output", "--error"])),
        ),
        "timeout" => {
            let i = after_options(args, &o(&["-s", "-k", "--signal", "--kill-after"]));
            rest(args, i + 1)
        }
        "chrt" | "taskset" => {
            let i = after_options(args, &o(&[]));
            // The priority, or the CPU mask or list, comes before the command.
            rest(args, i + 1)
        }
        "chroot" => {
            let i = after_options(args, &o(&["--userspec", "--groups"]));
            if args.len() > i + 1 {
                rest(args, i + 1)
            } else {
                Inner::Stdin
            }
        }
        "env" => {
            if let Some(split) = option_value(args, "-S", "--split-string") {
                return Inner::Script(split);
            }
            let i = after_options(args, &o(&["-u", "--unset", "-C", "--chdir", "-S", "--split-string"]));
            rest(args, after_assignments(args, i))
        }
        _ => Inner::None,
    }
}

/// Wrappers that run a command as someone else, or watch or trace it (`sudo`, `su -c`, `watch`, `strace`, …).
fn privileged<'a>(name: &str, args: &'a [Expanded]) -> Inner<'a> {
    let o = |with_value: &'static [&'static str]| Opts {
        with_value,
        numeric: false,
    };
    match name {
        "sudo" => {
            let i = after_options(
                args,
                &o(&[
                    "-u",
                    "-g",
                    "-h",
                    "-p",
                    "-C",
                    "-D",
                    "-r",
                    "-t",
                    "-U",
                    "-T",
                    "-R",
                    "--user",
                    "--group",
                    "--host",
                    "--prompt",
                    "--chdir",
                    "--role",
                    "--type",
                    "--other-user",
                    "--close-from",
                    "--chroot",
                    "--command-timeout",
                ]),
            );
            let i = after_assignments(args, i);
            if i < args.len() { rest(args, i) } else { Inner::Stdin }
        }
        "doas" => {
            let i = after_options(args, &o(&["-u", "-C"]));
            if i < args.len() { rest(args, i) } else { Inner::Stdin }
        }
        "su" | "runuser" => match option_value(args, "-c", "--command") {
            Some(script) => Inner::Script(script),
            None => match option_value(args, "-s", "--shell") {
                Some(_) => Inner::Unknowable(format!("{name} starts a shell named in its options")),
                None => Inner::Stdin,
            },
        },
        "script" => match option_value(args, "-c", "--command") {
            Some(script) => Inner::Script(script),
            None => Inner::Stdin,
        },
        "flock" => match option_value(args, "-c", "--command") {
            Some(script) => Inner::Script(script),
            None => {
                let i = after_options(args, &o(&["-w", "-E", "--timeout", "--wait", "--conflict-exit-code"]));
                rest(args, i + 1)
            }
        },
        "watch" => {
            let i = after_options(args, &o(&["-n", "--interval", "-q", "--equexit"]));
            match args.get(i..) {
                Some(r) if !r.is_empty() => {
                    if args[..i].iter().any(|a| a.text == "-x" || a.text == "--exec") {
                        Inner::Command(r)
                    } else {
                        Inner::Script(joined(r))
                    }
                }
                _ => Inner::None,
            }
        }
        "strace" | "ltrace" => rest(
            args,
            after_options(
                args,
                &o(&["-o", "-e", "-p", "-s", "-u", "-E", "-a", "-b", "-O", "-S", "-X", "-P"]),
            ),
        ),
        "nsenter" | "unshare" => rest(args, after_options(args, &o(&["-t", "--target", "-S", "-G"]))),
        "busybox" => rest(args, 0),
        _ => Inner::None,
    }
}

/// Programs that run a command once per input or file (`xargs`, `parallel`, `find -exec`).
fn runner<'a>(name: &str, args: &'a [Expanded]) -> Inner<'a> {
    let o = |with_value: &'static [&'static str]| Opts {
        with_value,
        numeric: false,
    };
    match name {
        "xargs" => {
            let i = after_options(
                args,
                &o(&[
                    "-a",
                    "-d",
                    "-E",
                    "-I",
                    "-L",
                    "-n",
                    "-P",
                    "-s",
                    "--arg-file",
                    "--delimiter",
                    "--max-args",
                    "--max-procs",
                    "--max-chars",
                    "--max-lines",
                    "--process-slot-var",
                ]),
            );
            if i < args.len() { rest(args, i) } else { Inner::None }
        }
        "parallel" => {
            let i = after_options(
                args,
                &o(&["-j", "--jobs", "-S", "-a", "--arg-file", "-d", "-I", "--delimiter"]),
            );
            let end = args[i.min(args.len())..]
                .iter()
                .position(|a| a.text.starts_with(":::"))
                .map_or(args.len(), |p| p + i);
            match args.get(i..end) {
                Some(r) if !r.is_empty() => Inner::Script(joined(r)),
                _ => Inner::Unknowable("parallel runs commands read from its input".into()),
            }
        }
        "find" => {
            let mut list = Vec::new();
            let mut i = 0;
            while i < args.len() {
                if matches!(args[i].text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let start = i + 1;
                    let end = args[start.min(args.len())..]
                        .iter()
                        .position(|a| a.text == ";" || a.text == "+")
                        .map_or(args.len(), |p| p + start);
                    if let Some(cmd) = args.get(start..end).filter(|c| !c.is_empty()) {
                        list.push(cmd);
                    }
                    i = end;
                }
                i += 1;
            }
            Inner::Commands(list)
        }
        _ => Inner::None,
    }
}

/// Builtins that run text as commands (`eval`, `trap`, `alias`, `source`).
fn evaluator<'a>(name: &str, args: &'a [Expanded]) -> Inner<'a> {
    match name {
        "eval" => {
            if args.is_empty() {
                Inner::None
            } else {
                Inner::Script(joined(args))
            }
        }
        "trap" => match args.iter().find(|a| !a.text.starts_with('-')) {
            Some(action) => Inner::Script(action.clone()),
            None => Inner::None,
        },
        "alias" => {
            let values: Vec<Expanded> = args
                .iter()
                .filter_map(|a| {
                    a.text.split_once('=').map(|(_, v)| Expanded {
                        text: v.to_owned(),
                        ..a.clone()
                    })
                })
                .collect();
            match values.as_slice() {
                [] => Inner::None,
                [one] => Inner::Script(one.clone()),
                many => Inner::Script(Expanded {
                    text: many.iter().map(|v| v.text.as_str()).collect::<Vec<_>>().join("\n"),
                    dynamic: many.iter().any(|v| v.dynamic),
                    pattern: false,
                }),
            }
        }
        "source" | "." => match args.first() {
            Some(file) => Inner::ScriptFile(file.clone()),
            None => Inner::None,
        },
        _ => Inner::None,
    }
}

/// `bash -c SCRIPT`, `bash -lc SCRIPT`, `bash FILE`, `bash` (stdin), `bash -s`.
fn shell<'a>(name: &str, args: &'a [Expanded]) -> Inner<'a> {
    let mut i = 0;
    let mut inline = false;
    let mut from_stdin = false;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if a.dynamic {
            if inline {
                break; // the script itself
            }
            return Inner::Unknowable(format!("{name} is given options computed at run time"));
        }
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            i += if matches!(long, "rcfile" | "init-file") { 2 } else { 1 };
            if long == "command" && name == "fish" {
                inline = true;
            }
            continue;
        }
        if let Some(flags) = t.strip_prefix('-').or_else(|| t.strip_prefix('+')) {
            if flags.contains('c') && t.starts_with('-') {
                inline = true;
            }
            if flags.contains('s') && t.starts_with('-') {
                from_stdin = true;
            }
            // `-o name` / `-O name` take the option's name as the next word.
            i += if flags.ends_with('o') || flags.ends_with('O') {
                2
            } else {
                1
            };
            continue;
        }
        break;
    }
    match args.get(i) {
        Some(script) if inline => Inner::Script(script.clone()),
        None if inline => Inner::None,
        _ if from_stdin => Inner::Stdin,
        Some(file) => Inner::ScriptFile(file.clone()),
        None => Inner::Stdin,
    }
}

/// Whether an ordinary program is told, through its options, to run another program or code —
/// so a prefix rule for it must not cover the call. The well-known forms:
/// `git -c …` (core.pager, core.sshCommand, alias.x=!…), `git --exec-path`, `git … --upload-pack`,
/// `cargo --config …` (a target runner), `tar --to-command / -I / --use-compress-program /
/// --checkpoint-action`, `rsync -e`, `ssh -o ProxyCommand=…`, `sort --compress-program`,
/// `man -P`, `zip -TT`, `vim -c`, `gdb -ex`, `find -exec`, `git rebase -x`.
pub fn runs_code_from_options(name: &str, args: &[String]) -> bool {
    let has = |flags: &[&str]| {
        args.iter().any(|a| {
            flags
                .iter()
                .any(|f| a == f || (f.starts_with("--") && a.strip_prefix(f).is_some_and(|r| r.starts_with('='))))
        })
    };
    let has_prefix = |prefixes: &[&str]| args.iter().any(|a| prefixes.iter().any(|p| a.starts_with(p)));
    match name {
        "git" => {
            has(&[
                "-c",
                "--config-env",
                "--exec-path",
                "--upload-pack",
                "--receive-pack",
                "-x",
                "--exec",
                "--ext-diff",
            ]) || has_prefix(&["--upload-pack=", "--receive-pack=", "--exec-path=", "--config-env="])
                || args
                    .iter()
                    .any(|a| a == "filter-branch" || a == "foreach" || a == "run")
        }
        "cargo" => has(&["--config", "-Z"]) || has_prefix(&["--config="]),
        "tar" => {
            has(&[
                "--to-command",
                "-I",
                "--use-compress-program",
                "--info-script",
                "-F",
                "--new-volume-script",
                "--rsh-command",
            ]) || has_prefix(&["--checkpoint-action", "--to-command=", "--use-compress-program=", "-I"])
        }
        "rsync" => has(&["-e", "--rsh", "--rsync-path"]) || has_prefix(&["--rsh=", "--rsync-path=", "-e"]),
        "ssh" | "scp" | "sftp" => has(&["-o", "-F", "-S"]) || has_prefix(&["-oProxyCommand", "-oLocalCommand", "-o"]),
        "sort" => has(&["--compress-program"]),
        "man" => has(&["-P", "--pager", "-H", "--html"]),
        "zip" => has(&["-TT", "--unzip-command"]),
        "vim" | "vi" | "nvim" | "ex" => has(&["-c", "--cmd", "-S"]) || args.iter().any(|a| a.starts_with('+')),
        "emacs" => has(&["--eval", "-l", "--load", "-f", "--funcall"]),
        "gdb" => has(&["-ex", "--eval-command", "-x", "--command"]),
        "find" => has(&["-exec", "-execdir", "-ok", "-okdir"]),
        "less" | "more" => has_prefix(&["+!", "-+"]),
        "sed" => args.iter().any(|a| {
            !a.starts_with('-') && (a.contains("/e") || a.starts_with('e') || a.contains(";e") || a.contains("\ne"))
        }),
        "npm" | "pnpm" | "yarn" => has(&["--script-shell"]) || has_prefix(&["--script-shell="]),
        _ => false,
    }
}
