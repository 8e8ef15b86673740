//! Shell command lines reduced to the programs they can run, with a real bash parser
//! (brush-parser), never by splitting strings. One analysis serves the allow, ask and deny rules
//! and `exec_shell`'s catastrophic list.
//!
//! - [`Analysis::commands`] are the simple commands as written. Allow rules must cover every one
//!   of them, and never cover a line that is *opaque*: one that cannot be parsed, or part of
//!   which is not visible as literal words (variable, tilde or arithmetic expansion, command or
//!   process substitution, environment assignments, control flow, function definitions,
//!   here-documents that expand, redirections that write outside the workspace).
//! - [`Analysis::programs`] are every program the line can run: each simple command, then what
//!   its wrappers run (`env`, `command`, `exec`, `nice`, `timeout`, `sudo`, `xargs`,
//!   `find -exec`, … see [`unwrap`]), with a path resolved to its program name (`/usr/bin/rm` is
//!   `rm`), and the scripts interpreters are given inline (`bash -c`, `eval`, here-strings,
//!   here-documents and literal text piped into a shell) parsed the same way, recursively. Deny
//!   and ask rules match when *any* of them matches.
//! - [`Analysis::dynamic`] says why a program name is computed at run time (`$x`, `$(…)`,
//!   backquotes, a glob or brace expansion as the command name, a script read from a pipe):
//!   deny rules fail closed on such a line.
//!
//! Variables assigned a literal value in the line are followed (`x=rm; $x …` runs `rm`); a
//! variable assigned two different values, or never assigned, is unknown. The working directory
//! is followed through `cd`/`pushd`, so the catastrophic list can see `cd / && rm -rf *`.

pub mod unwrap;
mod words;

use brush_parser::ParserOptions;
use brush_parser::ast::{
    AndOr, AndOrList, AssignmentName, AssignmentValue, Command, CommandPrefixOrSuffixItem, CompoundCommand,
    CompoundList, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline, SimpleCommand as AstSimple, Word,
};
use brush_parser::word::{Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};
use std::collections::HashMap;

pub use unwrap::WRAPPERS;
pub use words::expand_braces;
use words::{clean, join, literal_output};

/// One simple command as literal words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words after quote removal; a word that could not be made literal is kept as written.
    pub words: Vec<String>,
    /// Whether the command runs its arguments as code (`bash -c`, `eval`, `xargs`…).
    pub wrapper: bool,
}

/// One program the line can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The program's name (the last part of its path) followed by its arguments.
    pub words: Vec<String>,
    /// The command word as written (`/usr/bin/rm`, `./git`), for allow rules.
    pub written: String,
    /// The name is computed at run time; `words[0]` is then the text as written.
    pub dynamic: bool,
    /// It runs code taken from its arguments (an interpreter, a wrapper, `git -c core.pager=…`):
    /// prefix and glob allow rules never cover it.
    pub runs_code: bool,
    /// The directory it runs in, relative to where the line starts (`.`), absolute, under `~`,
    /// or `None` when a `cd` went somewhere not known in advance.
    pub cwd: Option<String>,
}

impl Program {
    /// The program name.
    pub fn name(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }
}

/// A file an output redirection writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The target with known variables substituted (`~` for home, unknown variables empty).
    pub path: String,
    /// The target depends on something not known in advance (a variable, a glob, braces).
    pub dynamic: bool,
    /// The directory the line was in, as for [`Program::cwd`].
    pub cwd: Option<String>,
}

/// What a command line runs, as far as can be seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command as written, in order, including those inside substitutions.
    pub commands: Vec<SimpleCommand>,
    /// Every program the line can run, wrappers unwrapped and inline scripts parsed.
    pub programs: Vec<Program>,
    /// Why no rule can allow this line, if none can.
    pub opaque: Option<String>,
    /// Why some program it runs is not known before it runs, if so.
    pub dynamic: Option<String>,
    /// Every file an output redirection writes to.
    pub writes: Vec<Write>,
    /// Functions that call themselves (a fork bomb's shape).
    pub recursive_functions: Vec<String>,
    /// The line, or a script inside it, could not be parsed: what it runs is not known.
    pub unparsed: bool,
}

/// How deep substitutions and inline scripts inside each other are followed.
const MAX_NESTING: usize = 8;
/// At most this many programs are listed; past it the line is opaque and dynamic.
const MAX_PROGRAMS: usize = 4096;

/// Analyses a command line.
pub fn analyze(line: &str) -> Analysis {
    let mut w = Walker {
        out: Analysis::default(),
        options: ParserOptions::default(),
        vars: HashMap::new(),
        cwd: Some(".".into()),
        stdin: Stdin::Closed,
        functions: Vec::new(),
    };
    w.line(line, 0);
    w.out
}

/// A word after expansion, as far as it can be known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expanded {
    /// Known variables substituted, `~` for home, unknown variables and substitutions empty.
    pub text: String,
    /// Part of it is computed at run time.
    pub dynamic: bool,
    /// It holds an unquoted glob or brace expansion.
    pub pattern: bool,
}

/// What a command reads on stdin, as far as the line shows.
#[derive(Clone, Debug)]
enum Stdin {
    Closed,
    Text(String),
    Unknown,
}

#[derive(Clone, Debug)]
enum Var {
    Known(String),
    Unknown,
}

struct Walker {
    out: Analysis,
    options: ParserOptions,
    vars: HashMap<String, Var>,
    cwd: Option<String>,
    stdin: Stdin,
    functions: Vec<String>,
}

impl Walker {
    fn opaque(&mut self, why: &str) {
        if self.out.opaque.is_none() {
            self.out.opaque = Some(why.to_owned());
        }
    }

    fn dynamic(&mut self, why: String) {
        self.opaque("what it runs is not known in advance");
        if self.out.dynamic.is_none() {
            self.out.dynamic = Some(why);
        }
    }

    fn line(&mut self, line: &str, depth: usize) {
        if depth > MAX_NESTING {
            self.dynamic("it nests scripts and substitutions too deeply to check".into());
            return;
        }
        match parse_program(line, &self.options) {
            Some(program) => {
                for complete in &program.complete_commands {
                    self.list(complete, depth);
                }
            }
            None => {
                // bash may still run parts of what this parser cannot read: fail closed.
                self.out.unparsed = true;
                self.opaque("it cannot be parsed as a shell command line");
                self.dynamic("it cannot be parsed, so what it runs is not known in advance".into());
            }
        }
    }

    fn list(&mut self, list: &CompoundList, depth: usize) {
        for item in &list.0 {
            self.and_or(&item.0, depth);
        }
    }

    fn and_or(&mut self, a: &AndOrList, depth: usize) {
        self.pipeline(&a.first, depth);
        for next in &a.additional {
            match next {
                AndOr::And(p) | AndOr::Or(p) => self.pipeline(p, depth),
            }
        }
    }

    fn pipeline(&mut self, p: &Pipeline, depth: usize) {
        let outer = std::mem::replace(&mut self.stdin, Stdin::Closed);
        for (i, c) in p.seq.iter().enumerate() {
            self.stdin = if i == 0 {
                outer.clone()
            } else {
                literal_output(&p.seq[i - 1]).map_or(Stdin::Unknown, Stdin::Text)
            };
            self.command(c, depth);
        }
        self.stdin = outer;
    }

    fn command(&mut self, c: &Command, depth: usize) {
        match c {
            Command::Simple(s) => self.simple(s, depth),
            Command::Compound(compound, redirects) => {
                if let Some(r) = redirects {
                    for redirect in &r.0 {
                        self.redirect(redirect, depth);
                    }
                }
                self.compound(compound, depth);
            }
            Command::Function(f) => {
                self.opaque("it defines a shell function");
                let name = f.fname.value.clone();
                self.functions.push(name.clone());
                let before = self.out.programs.len();
                // Its body is listed, so deny rules and the catastrophic list see what it would run.
                self.compound(&f.body.0, depth);
                self.functions.pop();
                if self.out.programs[before..].iter().any(|p| p.words[0] == name) {
                    self.out.recursive_functions.push(name);
                }
            }
            Command::ExtendedTest(..) => self.opaque("it uses a [[ … ]] test"),
        }
    }

    /// Groups are transparent; control flow makes the line opaque, and its bodies are listed.
    fn compound(&mut self, compound: &CompoundCommand, depth: usize) {
        match compound {
            CompoundCommand::Subshell(s) => self.list(&s.list, depth),
            CompoundCommand::BraceGroup(b) => self.list(&b.list, depth),
            other => {
                self.opaque("it uses control flow (loops, conditionals or arithmetic)");
                match other {
                    CompoundCommand::ForClause(f) => {
                        // The loop variable takes values the walk does not follow.
                        self.vars.insert(f.variable_name.clone(), Var::Unknown);
                        self.list(&f.body.list, depth);
                    }
                    CompoundCommand::ArithmeticForClause(f) => self.list(&f.body.list, depth),
                    CompoundCommand::CaseClause(c) => {
                        for item in &c.cases {
                            if let Some(cmd) = &item.cmd {
                                self.list(cmd, depth);
                            }
                        }
                    }
                    CompoundCommand::IfClause(i) => {
                        self.list(&i.condition, depth);
                        self.list(&i.then, depth);
                        for e in i.elses.iter().flatten() {
                            if let Some(c) = &e.condition {
                                self.list(c, depth);
                            }
                            self.list(&e.body, depth);
                        }
                    }
                    CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                        self.list(&w.0, depth);
                        self.list(&w.1.list, depth);
                    }
                    CompoundCommand::Coprocess(c) => self.command(&c.body, depth),
                    // `( (a) )` reads as `((…))` to the parser; bash may run it as subshells.
                    CompoundCommand::Arithmetic(a) => self.maybe_commands(&a.expr.value, depth),
                    _ => {}
                }
            }
        }
    }

    fn assign(&mut self, name: &AssignmentName, value: &AssignmentValue, depth: usize) {
        let AssignmentName::VariableName(name) = name else {
            return;
        };
        let value = match value {
            AssignmentValue::Scalar(w) => {
                let e = self.word(w, depth);
                (!e.dynamic && !e.pattern).then_some(e.text)
            }
            AssignmentValue::Array(_) => None,
        };
        self.set_var(name, value);
    }

    /// A second, different value makes a variable unknown: the walk does not follow control flow.
    fn set_var(&mut self, name: &str, value: Option<String>) {
        let next = match (self.vars.get(name), value) {
            (None, Some(v)) => Var::Known(v),
            (Some(Var::Known(old)), Some(v)) if *old == v => Var::Known(v),
            _ => Var::Unknown,
        };
        self.vars.insert(name.to_owned(), next);
    }

    fn simple(&mut self, s: &AstSimple, depth: usize) {
        let mut words: Vec<Expanded> = Vec::new();
        let prefix_len = s.prefix.as_ref().map_or(0, |p| p.0.len());
        let items = s
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .chain(s.suffix.iter().flat_map(|p| p.0.iter()));
        let mut name_seen = false;
        let mut assignments = Vec::new();
        // Here-strings and here-documents on this command are its stdin.
        let stdin_before = self.stdin.clone();
        for (i, item) in items.enumerate() {
            // The command name sits between prefix and suffix.
            if !name_seen && i >= prefix_len {
                name_seen = true;
                if let Some(name) = &s.word_or_name {
                    let e = self.word(name, depth);
                    words.push(e);
                }
            }
            match item {
                CommandPrefixOrSuffixItem::Word(w) => {
                    let e = self.word(w, depth);
                    words.push(e);
                }
                // After the command name, `a=b` is an ordinary argument (`dd of=x`).
                CommandPrefixOrSuffixItem::AssignmentWord(_, w) if name_seen => {
                    let e = self.word(w, depth);
                    words.push(e);
                }
                CommandPrefixOrSuffixItem::AssignmentWord(a, _) => assignments.push(a),
                CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, depth),
                CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.opaque("it uses process substitution");
                    self.list(&sub.list, depth + 1);
                }
            }
        }
        if !name_seen && let Some(name) = &s.word_or_name {
            let e = self.word(name, depth);
            words.push(e);
        }
        if words.is_empty() {
            // Assignments alone set shell variables for the rest of the line.
            for a in assignments {
                self.assign(&a.name, &a.value, depth);
            }
            self.stdin = stdin_before;
            return;
        }
        if !assignments.is_empty() {
            self.opaque("it sets environment variables for the command");
            for a in assignments {
                // Evaluated for their substitutions; they do not outlive the command.
                if let AssignmentValue::Scalar(w) = &a.value {
                    self.word(w, depth);
                }
            }
        }
        let head = unwrap::program_name(&words[0].text).to_owned();
        self.out.commands.push(SimpleCommand {
            words: words.iter().map(|w| w.text.clone()).collect(),
            wrapper: WRAPPERS.contains(&head.as_str()),
        });
        self.run(&words, depth);
        self.stdin = stdin_before;
    }

    /// Lists the program `words` runs and, through its wrappers, what that runs.
    fn run(&mut self, words: &[Expanded], depth: usize) {
        let Some(first) = words.first() else {
            return;
        };
        if self.out.programs.len() >= MAX_PROGRAMS {
            self.dynamic("it runs too many programs to check".into());
            return;
        }
        let mut texts: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
        if first.dynamic || first.pattern || first.text.is_empty() {
            let why = format!(
                "the program name {:?} is computed at run time (a variable, substitution, glob or brace expansion)",
                first.text
            );
            self.out.programs.push(Program {
                words: texts,
                written: first.text.clone(),
                dynamic: true,
                runs_code: true,
                cwd: self.cwd.clone(),
            });
            self.dynamic(why);
            return;
        }
        let name = unwrap::program_name(&first.text).to_owned();
        texts[0].clone_from(&name);
        let runs_code = WRAPPERS.contains(&name.as_str()) || unwrap::runs_code_from_options(&name, &texts[1..]);
        self.out.programs.push(Program {
            words: texts,
            written: first.text.clone(),
            dynamic: false,
            runs_code,
            cwd: self.cwd.clone(),
        });
        match unwrap::inner(&name, words) {
            unwrap::Inner::None => {}
            unwrap::Inner::Command(rest) if name == "xargs" => {
                // xargs appends the words it reads; when the line shows them, so does the analysis.
                let mut full = rest.to_vec();
                if let Stdin::Text(t) = &self.stdin {
                    full.extend(t.split_whitespace().map(|w| Expanded {
                        text: w.to_owned(),
                        ..Expanded::default()
                    }));
                }
                self.run(&full, depth)
            }
            unwrap::Inner::Command(rest) => self.run(rest, depth),
            unwrap::Inner::Commands(list) => {
                for rest in list {
                    self.run(rest, depth);
                }
            }
            unwrap::Inner::Script(word) => {
                if word.dynamic {
                    self.dynamic(format!("{name} runs a script computed at run time"));
                }
                // Parsed as far as it is known, for the catastrophic list.
                self.script(&word.text, depth);
            }
            unwrap::Inner::Stdin => match self.stdin.clone() {
                Stdin::Text(t) => self.script(&t, depth),
                Stdin::Closed => {}
                Stdin::Unknown => self.dynamic(format!("{name} runs a script read from its input")),
            },
            unwrap::Inner::ScriptFile(path) => {
                // A script the line itself writes or names earlier (`> s.sh`, `tee s.sh`,
                // `curl -o s.sh`) holds what the line put there: not known in advance.
                let same = |t: &str| clean(t) == clean(&path.text);
                let made_here = self.out.writes.iter().any(|w| same(&w.path))
                    || self.out.programs[..self.out.programs.len().saturating_sub(1)]
                        .iter()
                        .any(|p| p.words[1..].iter().any(|w| same(w)));
                if path.dynamic || made_here {
                    self.dynamic(format!("{name} runs a script file the line writes or computes"));
                }
            }
            unwrap::Inner::Unknowable(why) => self.dynamic(why),
        }
        self.follow_cd(&name, &words[1..]);
        if matches!(name.as_str(), "export" | "declare" | "typeset" | "local" | "readonly") {
            for w in &words[1..] {
                if let Some((var, value)) = w.text.split_once('=') {
                    let known = !w.dynamic && !w.pattern;
                    self.set_var(var, known.then(|| value.to_owned()));
                }
            }
        }
    }

    /// A script inline: parsed with the variables and directory of the line so far.
    fn script(&mut self, text: &str, depth: usize) {
        let stdin = std::mem::replace(&mut self.stdin, Stdin::Closed);
        self.line(text, depth + 1);
        self.stdin = stdin;
    }

    fn follow_cd(&mut self, name: &str, args: &[Expanded]) {
        match name {
            "cd" | "pushd" => {
                let target = args.iter().find(|a| !a.text.starts_with('-') || a.text == "-");
                self.cwd = match target {
                    None => Some("~".into()),
                    Some(t) if t.dynamic || t.pattern || t.text == "-" => None,
                    Some(t) => join(self.cwd.as_deref(), &t.text),
                };
            }
            "popd" => self.cwd = None,
            _ => {}
        }
    }
}

/// A whole line parsed, or `None` when it cannot be. The parser panics on some input (a
/// redirection's descriptor number too large for an `i32`), allocates without end on other input
/// (a here-document tag holding a control character, such as `<<\x0c\t`, or an empty one before
/// `(`: it pushes empty bodies until memory runs out) and takes exponential time on deeply nested
/// unclosed parentheses, all found by fuzzing: such lines are refused before they reach the
/// parser, and any other panic is caught, so hostile text is unparseable, never a crash or a hang.
fn parse_program(text: &str, options: &ParserOptions) -> Option<brush_parser::ast::Program> {
    if oversized_descriptor(text) || unreadable_here_tag(text) || too_deeply_nested(text) || slow_subscripts(text) {
        return None;
    }
    std::panic::catch_unwind(|| brush_parser::Parser::new(text.as_bytes(), options).parse_program())
        .ok()
        .and_then(Result::ok)
}

/// A run of ten or more digits right before `<` or `>`: a descriptor number no `i32` holds.
fn oversized_descriptor(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut run = 0usize;
    for &b in bytes {
        if b.is_ascii_digit() {
            run += 1;
        } else {
            if run >= 10 && (b == b'<' || b == b'>') {
                return true;
            }
            run = 0;
        }
    }
    false
}

/// A here-document (`<<`, `<<-`, not a here-string `<<<`) whose tag is not a plain word: once
/// unquoted, a tag people write (`EOF`, `'END'`, `"EOT"`, `E\OF`) is letters, digits and
/// `_ . - + : @ %`, and nothing follows it but a blank, a newline or an operator other than `(`.
/// The parser cannot end on other tags: an empty one before `(` (`<<""(#`) or one opening a
/// substitution (`<<$( (#($`) made it allocate 2 GB in under 2 s, and one holding a control
/// character pushed empty bodies until memory ran out (all found by fuzzing).
fn unreadable_here_tag(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'<' || bytes[i + 1] != b'<' {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        if bytes.get(j) == Some(&b'<') {
            // A here-string: skip all of its angle brackets.
            while bytes.get(j) == Some(&b'<') {
                j += 1;
            }
            i = j;
            continue;
        }
        if bytes.get(j) == Some(&b'-') {
            j += 1;
        }
        while matches!(bytes.get(j), Some(b' ' | b'\t')) {
            j += 1;
        }
        // The tag: up to unquoted white space or a metacharacter; what it is once unquoted.
        let plain = |c: u8| c.is_ascii_alphanumeric() || b"_.-+:@%".contains(&c);
        let (mut tag, mut quote) = (0usize, None::<u8>);
        while let Some(&b) = bytes.get(j) {
            let literal = match (quote, b) {
                (Some(q), _) if b == q => {
                    quote = None;
                    None
                }
                (Some(_), _) => Some(b),
                (None, b'\'' | b'"') => {
                    quote = Some(b);
                    None
                }
                (None, b'\\') => {
                    j += 1;
                    bytes.get(j).copied()
                }
                (None, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>') => break,
                (None, _) => Some(b),
            };
            if let Some(c) = literal {
                if !plain(c) {
                    return true;
                }
                tag += 1;
            }
            j += 1;
        }
        if tag == 0 || quote.is_some() || bytes.get(j) == Some(&b'(') {
            return true;
        }
        i = j.max(i + 2);
    }
    false
}

/// Parentheses nested deeper than [`MAX_PARENS`], counted as written (quoted ones too): the
/// parser backtracks through each unclosed `(` twice over (a subshell, or an arithmetic `((`),
/// so its time doubles with every level (28 took 56 s; found by fuzzing). No command line a
/// person writes nests so deep; such a line is unparseable.
fn too_deeply_nested(text: &str) -> bool {
    let mut depth = 0usize;
    for b in text.bytes() {
        match b {
            b'(' => {
                depth += 1;
                if depth > MAX_PARENS {
                    return true;
                }
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// How deep parentheses may nest in a line the parser is given.
const MAX_PARENS: usize = 12;

/// A subscripted parameter expansion (`${NAME[…]}`, `${!NAME[…]}`). The parser backtracks
/// through subscripts it cannot close, and how it closes one (quotes, nested braces) is its own:
/// twelve `${n[,}` in a word ran for minutes, closed ones nested five deep took 0.4 s, and three
/// whose `]` was quoted 38 s (all found by fuzzing). A line that expands a variable is opaque in
/// any case (what it runs is not known in advance: asked, and failing closed under deny rules),
/// so such a line loses nothing by being unparseable before the parser sees it.
fn slow_subscripts(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] != b'$' || b[i + 1] != b'{' {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        if b.get(j) == Some(&b'!') {
            j += 1;
        }
        let name = j;
        while b.get(j).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            j += 1;
        }
        if j > name && b.get(j) == Some(&b'[') {
            return true;
        }
        i += 2;
    }
    false
}

#[cfg(test)]
mod tests;
