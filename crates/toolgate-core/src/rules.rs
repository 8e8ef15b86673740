//! Permission rules: `tool`, `tool(exact)`, `tool(prefix:*)`, `tool(glob)` for paths,
//! `fetch_url(domain:example.com)`, `server__tool`, `server__*`; layered by source.
//!
//! A rule's pattern is read against the tool's permission subject. For command lines the rule
//! must hold for every simple command of the line (see [`crate::shell`]); a prefix rule never
//! allows a program that runs its arguments as code (`bash -c`, `eval`, `xargs`…).

use crate::shell::{Analysis, Program};
use crate::tool::PermissionSubject;
use globset::{Glob, GlobMatcher};
use serde::Deserialize;
use std::fmt;

/// Which tools a rule names.
#[derive(Clone, Debug)]
enum Names {
    Exact(String),
    Glob(GlobMatcher),
}

/// What a rule's parenthesised pattern matches.
#[derive(Clone, Debug)]
enum Pattern {
    /// The whole subject; for commands, the words of a simple command (parsed once, here).
    Exact(String, Option<Vec<String>>),
    /// `prefix:*` — the subject starts with these words (commands) or this text.
    Prefix(String, Option<Vec<String>>),
    /// `domain:host` — a URL on this host or a subdomain of it.
    Domain(String),
    /// A glob over the subject (paths).
    Glob(GlobMatcher),
}

/// One rule, parsed.
#[derive(Clone, Debug)]
pub struct Rule {
    text: String,
    names: Names,
    pattern: Option<Pattern>,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The subject of a call, read from its arguments.
#[derive(Clone, Debug)]
pub enum Subject {
    /// The tool has no subject (or the argument is missing).
    None,
    /// A command line, analysed into simple commands.
    Command(Analysis),
    /// A path.
    Path(String),
    /// A URL.
    Url(String),
}

impl Subject {
    /// Reads the subject of a call's arguments according to the tool's spec.
    pub fn of(spec: &PermissionSubject, args: &serde_json::Map<String, serde_json::Value>) -> Self {
        let value = |key: &str| args.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
        match spec {
            PermissionSubject::None => Self::None,
            PermissionSubject::Command(k) => value(k).map_or(Self::None, |c| Self::Command(crate::shell::analyze(&c))),
            PermissionSubject::Path(k) => value(k).map_or(Self::None, Self::Path),
            PermissionSubject::Url(k) => value(k).map_or(Self::None, Self::Url),
        }
    }
}

impl Rule {
    /// Parses `tool` or `tool(pattern)`.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        let (name, pattern) = match text.find('(') {
            Some(open) => {
                let Some(inner) = text[open + 1..].strip_suffix(')') else {
                    return Err(format!("rule {text:?}: a pattern must end with ')'"));
                };
                (text[..open].trim(), Some(inner.trim()))
            }
            None => (text, None),
        };
        if name.is_empty() {
            return Err(format!("rule {text:?} names no tool"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*' | '/'))
        {
            return Err(format!(
                "rule {text:?}: {name:?} is not a tool name or a `server__*` pattern"
            ));
        }
        let names = if name.contains('*') {
            Names::Glob(
                Glob::new(name)
                    .map_err(|e| format!("rule {text:?}: {e}"))?
                    .compile_matcher(),
            )
        } else {
            Names::Exact(name.to_owned())
        };
        let pattern = match pattern {
            None => None,
            Some("") => return Err(format!("rule {text:?} has an empty pattern")),
            Some(p) => Some(if let Some(domain) = p.strip_prefix("domain:") {
                let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
                if domain.is_empty() {
                    return Err(format!("rule {text:?} names no domain"));
                }
                Pattern::Domain(domain)
            } else if let Some(prefix) = p.strip_suffix(":*") {
                let prefix = prefix.trim();
                Pattern::Prefix(prefix.to_owned(), words_of(prefix))
            } else if p.contains(['*', '?', '[', '{']) {
                Pattern::Glob(
                    Glob::new(p)
                        .map_err(|e| format!("rule {text:?}: {e}"))?
                        .compile_matcher(),
                )
            } else {
                Pattern::Exact(p.to_owned(), words_of(p))
            }),
        };
        Ok(Rule {
            text: text.to_owned(),
            names,
            pattern,
        })
    }

    /// The tool name or name pattern the rule is written for (`exec_shell`, `github__*`).
    pub fn tool_pattern(&self) -> &str {
        self.text.split('(').next().unwrap_or(&self.text).trim()
    }

    /// Whether the rule names this tool.
    pub fn names_tool(&self, tool: &str) -> bool {
        match &self.names {
            Names::Exact(n) => n == tool,
            Names::Glob(g) => g.is_match(tool),
        }
    }

    /// Whether the rule has no pattern (it covers every call of its tools).
    pub fn is_bare(&self) -> bool {
        self.pattern.is_none()
    }

    /// Whether the rule's pattern covers one program, for allow: as written (`./git` is not
    /// `git`), and never by prefix or glob when the program runs code from its arguments.
    fn allows_program(&self, p: &Program) -> bool {
        if p.dynamic {
            return false;
        }
        let rest = &p.words[1.min(p.words.len())..];
        match &self.pattern {
            None => true,
            Some(Pattern::Exact(_, words)) => words.as_deref().is_some_and(|w| same_words(&p.written, rest, w, false)),
            Some(Pattern::Prefix(_, words)) => {
                !p.runs_code && words.as_deref().is_some_and(|w| same_words(&p.written, rest, w, true))
            }
            Some(Pattern::Glob(g)) => !p.runs_code && g.is_match(joined(&p.written, rest)),
            Some(Pattern::Domain(_)) => false,
        }
    }

    /// Whether the rule's pattern names one program, for deny and ask: by its program name or
    /// as written, wrappers or not.
    fn names_program(&self, p: &Program) -> bool {
        let rest = &p.words[1.min(p.words.len())..];
        let name = p.name();
        let both =
            |w: &[String], prefix: bool| same_words(name, rest, w, prefix) || same_words(&p.written, rest, w, prefix);
        match &self.pattern {
            None => true,
            Some(Pattern::Exact(_, words)) => words.as_deref().is_some_and(|w| both(w, false)),
            Some(Pattern::Prefix(_, words)) => words.as_deref().is_some_and(|w| !w.is_empty() && both(w, true)),
            Some(Pattern::Glob(g)) => g.is_match(joined(name, rest)) || g.is_match(joined(&p.written, rest)),
            Some(Pattern::Domain(_)) => false,
        }
    }

    fn matches_text(&self, subject: &str, is_url: bool) -> bool {
        match &self.pattern {
            None => true,
            Some(Pattern::Exact(p, _)) => p == subject,
            Some(Pattern::Prefix(p, _)) => subject.starts_with(p.as_str()),
            Some(Pattern::Glob(g)) => g.is_match(subject),
            Some(Pattern::Domain(d)) => {
                is_url && host_of(subject).is_some_and(|h| h == *d || h.ends_with(&format!(".{d}")))
            }
        }
    }

    /// Whether the rule covers this call in the *any* sense (deny and ask): for a command line,
    /// some simple command of it (including inside substitutions) matches.
    pub fn covers_any(&self, tool: &str, subject: &Subject) -> bool {
        if !self.names_tool(tool) {
            return false;
        }
        match subject {
            _ if self.is_bare() => true,
            Subject::None => false,
            // A program whose name is computed at run time may be any program: fail closed.
            Subject::Command(a) => a.dynamic.is_some() || a.programs.iter().any(|p| self.names_program(p)),
            Subject::Path(p) => normalize_path(p).is_some_and(|p| self.matches_text(&p, false)),
            Subject::Url(u) => self.matches_text(u, true),
        }
    }

    /// Whether the rule allows one program of `tool` (allow, every program in turn).
    pub fn allows_program_of(&self, tool: &str, p: &Program) -> bool {
        self.names_tool(tool) && self.allows_program(p)
    }

    /// Whether the rule allows this whole call (allow): bare, or the subject matches; for command
    /// lines use [`allows`], which needs every simple command matched.
    fn covers_whole(&self, tool: &str, subject: &Subject) -> bool {
        match subject {
            Subject::Command(_) => false,
            other => self.covers_any(tool, other),
        }
    }

    /// Checks an example subject against the rule, for `match` / `not_match` lists.
    pub fn example_matches(&self, tool: &str, kind: &PermissionSubject, example: &str) -> bool {
        let subject = match kind {
            PermissionSubject::Command(_) => Subject::Command(crate::shell::analyze(example)),
            PermissionSubject::Path(_) => Subject::Path(example.to_owned()),
            PermissionSubject::Url(_) => Subject::Url(example.to_owned()),
            PermissionSubject::None => Subject::None,
        };
        match &subject {
            Subject::Command(_) => allows(&[self], tool, &subject),
            other => self.covers_any(tool, other),
        }
    }
}

/// Whether `rules` allow the call: a bare rule for the tool, or — for a command line that is not
/// opaque — every program it runs (what its wrappers run included) matched by some rule; for
/// other subjects, a matching rule.
pub fn allows(rules: &[&Rule], tool: &str, subject: &Subject) -> bool {
    if rules.iter().any(|r| r.names_tool(tool) && r.is_bare()) {
        return true;
    }
    match subject {
        Subject::Command(a) => {
            a.opaque.is_none()
                && a.dynamic.is_none()
                && !a.programs.is_empty()
                && a.programs
                    .iter()
                    .all(|p| rules.iter().any(|r| r.allows_program_of(tool, p)))
        }
        other => rules.iter().any(|r| r.covers_whole(tool, other)),
    }
}

/// Whether `head rest…` equals `pattern` (or, with `prefix`, starts with it), without building
/// the word list.
fn same_words(head: &str, rest: &[String], pattern: &[String], prefix: bool) -> bool {
    let Some((first, more)) = pattern.split_first() else {
        return false;
    };
    first == head && if prefix { rest.starts_with(more) } else { rest == more }
}

/// `head rest…` joined by spaces, for glob patterns.
fn joined(head: &str, rest: &[String]) -> String {
    let mut out = String::with_capacity(head.len() + rest.iter().map(|w| w.len() + 1).sum::<usize>());
    out.push_str(head);
    for w in rest {
        out.push(' ');
        out.push_str(w);
    }
    out
}

fn words_of(pattern: &str) -> Option<Vec<String>> {
    let a = crate::shell::analyze(pattern);
    match a.commands.as_slice() {
        [one] if a.opaque.is_none() => Some(one.words.clone()),
        _ => None,
    }
}

/// `./a/../b` → `b`; `None` when the path climbs out of its root.
fn normalize_path(p: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    Some(if p.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    })
}

fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split(']').next()?.trim_start_matches('[')
    } else {
        host.split(':').next()?
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Where a layer of rules comes from, in precedence order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSource {
    /// Grants made during this session.
    Session,
    /// The project file `./toolgate.toml` (only its deny and ask rules while untrusted).
    Project,
    /// The user file.
    User,
    /// Built-in defaults.
    Default,
}

/// One layer's rules.
#[derive(Clone, Debug)]
pub struct Layer {
    /// Where they come from.
    pub source: LayerSource,
    /// Allow rules.
    pub allow: Vec<Rule>,
    /// Ask rules.
    pub ask: Vec<Rule>,
    /// Deny rules.
    pub deny: Vec<Rule>,
}

impl Layer {
    /// An empty layer.
    pub fn new(source: LayerSource) -> Self {
        Self {
            source,
            allow: Vec::new(),
            ask: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// A rule as written in `toolgate.toml`: a string, or a table with examples checked at load.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RuleEntry {
    /// `"exec_shell(git status)"`.
    Text(String),
    /// `{rule = "…", match = [...], not_match = [...]}`.
    Table {
        /// The rule.
        rule: String,
        /// Subjects the rule must match.
        #[serde(default, rename = "match")]
        matches: Vec<String>,
        /// Subjects the rule must not match.
        #[serde(default)]
        not_match: Vec<String>,
    },
}

impl RuleEntry {
    /// Parses the rule and checks its examples against the tool's subject kind (`subject_of`
    /// gives it for a tool name; tools unknown to it are checked as plain text).
    pub fn compile(&self, subject_of: impl Fn(&str) -> Option<PermissionSubject>) -> Result<Rule, String> {
        match self {
            Self::Text(t) => Rule::parse(t),
            Self::Table {
                rule,
                matches,
                not_match,
            } => {
                let parsed = Rule::parse(rule)?;
                let tool = match &parsed.names {
                    Names::Exact(n) => n.clone(),
                    Names::Glob(_) => return Ok(parsed),
                };
                let kind = subject_of(&tool).unwrap_or(PermissionSubject::Path(String::new()));
                for example in matches {
                    if !parsed.example_matches(&tool, &kind, example) {
                        return Err(format!("rule {rule:?} does not match its example {example:?}"));
                    }
                }
                for example in not_match {
                    if parsed.example_matches(&tool, &kind, example) {
                        return Err(format!("rule {rule:?} matches {example:?}, listed under not_match"));
                    }
                }
                Ok(parsed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::analyze;

    fn cmd(line: &str) -> Subject {
        Subject::Command(analyze(line))
    }

    fn allowed(rules: &[&str], tool: &str, subject: &Subject) -> bool {
        let rules: Vec<Rule> = rules.iter().map(|r| Rule::parse(r).unwrap()).collect();
        let refs: Vec<&Rule> = rules.iter().collect();
        allows(&refs, tool, subject)
    }

    #[test]
    fn rule_syntax() {
        for bad in ["", "(x)", "exec_shell(", "exec_shell()", "a b", "fetch_url(domain:)"] {
            assert!(Rule::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Rule::parse("github__*").unwrap().names_tool("github__create_issue"));
        assert!(!Rule::parse("github__*").unwrap().names_tool("gitlab__x"));
    }

    #[test]
    fn exact_and_prefix_command_rules() {
        assert!(allowed(&["exec_shell(git status)"], "exec_shell", &cmd("git status")));
        assert!(allowed(
            &["exec_shell(git status)"],
            "exec_shell",
            &cmd("git   'status'")
        ));
        assert!(!allowed(
            &["exec_shell(git status)"],
            "exec_shell",
            &cmd("git status -s")
        ));
        assert!(allowed(
            &["exec_shell(cargo test:*)"],
            "exec_shell",
            &cmd("cargo test -p core")
        ));
        assert!(!allowed(
            &["exec_shell(cargo test:*)"],
            "exec_shell",
            &cmd("cargo testx")
        ));
        assert!(allowed(
            &["exec_shell(git status)", "exec_shell(git diff:*)"],
            "exec_shell",
            &cmd("git status && git diff HEAD")
        ));
    }

    #[test]
    fn paths_and_domains() {
        let src = ["read_file(src/**)"];
        assert!(allowed(&src, "read_file", &Subject::Path("src/a/b.rs".into())));
        assert!(allowed(&src, "read_file", &Subject::Path("./src/lib.rs".into())));
        assert!(!allowed(&src, "read_file", &Subject::Path("src/../secrets".into())));
        assert!(!allowed(&src, "read_file", &Subject::Path("../src/x".into())));
        let docs = ["fetch_url(domain:docs.rs)"];
        assert!(allowed(
            &docs,
            "fetch_url",
            &Subject::Url("https://docs.rs/serde".into())
        ));
        assert!(allowed(
            &docs,
            "fetch_url",
            &Subject::Url("https://www.docs.rs./x".into())
        ));
        assert!(!allowed(
            &docs,
            "fetch_url",
            &Subject::Url("https://docs.rs.evil.com/".into())
        ));
        assert!(!allowed(
            &docs,
            "fetch_url",
            &Subject::Url("https://evil.com/?docs.rs".into())
        ));
        assert!(!allowed(
            &docs,
            "fetch_url",
            &Subject::Url("https://docs.rs@evil.com/".into())
        ));
    }

    #[test]
    fn examples_are_checked() {
        let kind = |_: &str| Some(PermissionSubject::Command("command".into()));
        let ok = RuleEntry::Table {
            rule: "exec_shell(cargo test:*)".into(),
            matches: vec!["cargo test".into(), "cargo test -p x".into()],
            not_match: vec!["cargo build".into(), "cargo test; rm -rf /".into()],
        };
        assert!(ok.compile(kind).is_ok());
        let bad = RuleEntry::Table {
            rule: "exec_shell(cargo test:*)".into(),
            matches: vec!["cargo build".into()],
            not_match: vec![],
        };
        assert!(bad.compile(kind).unwrap_err().contains("does not match its example"));
    }
}
