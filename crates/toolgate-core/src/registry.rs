//! The registry: names to tools, provider-safe names, "did you mean" suggestions.

use crate::config::ToolSettings;
use crate::tool::{Tool, ToolSpec};
use crate::types::ToolName;
use crate::validate::CompiledSchema;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

/// The longest name providers accept.
pub const MAX_PROVIDER_NAME: usize = 64;

/// One registered tool with what the engine precomputes for it.
pub struct Entry {
    tool: Arc<dyn Tool>,
    /// The tool's spec with the configuration's `[tools.NAME]` settings applied.
    spec: ToolSpec,
    name: ToolName,
    provider_name: String,
    compiled: OnceLock<Result<Arc<CompiledSchema>, String>>,
    /// Whether the parameter schema compiles, known without keeping its validator: listing
    /// thousands of tools must not hold a validator for each (tens of KB), only calls do.
    compiles: OnceLock<Result<(), String>>,
    compiled_output: OnceLock<Option<Result<Arc<CompiledSchema>, String>>>,
}

impl Entry {
    /// The tool.
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }
    /// The spec the engine applies: the tool's own, with `[tools.NAME]` settings over it.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    /// The registered name.
    pub fn name(&self) -> &ToolName {
        &self.name
    }
    /// The name providers see (`^[a-zA-Z0-9_-]{1,64}$`).
    pub fn provider_name(&self) -> &str {
        &self.provider_name
    }
    /// The tool's parameter schema, compiled on first use and reused.
    pub fn compiled(&self) -> Result<Arc<CompiledSchema>, String> {
        self.compiled
            .get_or_init(|| CompiledSchema::compile(&self.tool.parameter_schema()).map(Arc::new))
            .clone()
    }

    /// Whether the parameter schema compiles: from the validator when a call already made it,
    /// else compiled once and dropped.
    pub fn compiles(&self) -> Result<(), String> {
        if let Some(compiled) = self.compiled.get() {
            return compiled.as_ref().map(drop).map_err(Clone::clone);
        }
        self.compiles
            .get_or_init(|| CompiledSchema::compile(&self.tool.parameter_schema()).map(drop))
            .clone()
    }

    /// Whether this entry keeps a compiled validator (tests: listing must not make one).
    #[cfg(test)]
    pub(crate) fn holds_validator(&self) -> bool {
        self.compiled.get().is_some()
    }

    /// The tool's output schema, if it has one, compiled on first use and reused.
    pub fn compiled_output(&self) -> Option<Result<Arc<CompiledSchema>, String>> {
        self.compiled_output
            .get_or_init(|| {
                self.tool
                    .result_schema()
                    .map(|s| CompiledSchema::compile(&s).map(Arc::new))
            })
            .clone()
    }
}

/// Maps names to tools. Registering a name again replaces the tool.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<ToolName, Entry>,
    by_provider: HashMap<String, ToolName>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies per-tool settings (`[tools.NAME]`) over the tools' own specs; a setting for a
    /// tool that is not registered waits for one that is (upstream tools come and go).
    pub fn configure(&mut self, settings: &BTreeMap<String, ToolSettings>) {
        for (name, set) in settings {
            if let Some(entry) = self.tools.get_mut(name.as_str()) {
                entry.spec = entry.tool.spec().clone();
                set.apply(&mut entry.spec);
            }
        }
    }

    /// Registers a tool; a tool of the same name is replaced.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let name = ToolName::new(tool.name());
        if let Some(old) = self.tools.remove(&name) {
            self.by_provider.remove(&old.provider_name);
        }
        let provider_name = self.unique_provider_name(name.as_str());
        if provider_name != provider_safe(name.as_str())
            && let Some(holder) = self.by_provider.get(&provider_safe(name.as_str()))
        {
            tracing::warn!(
                tool = %name,
                other = %holder,
                served_as = %provider_name,
                "two tools map to the same model-facing name; the later one is renamed"
            );
        }
        self.by_provider.insert(provider_name.clone(), name.clone());
        self.tools.insert(
            name.clone(),
            Entry {
                spec: tool.spec().clone(),
                tool,
                name,
                provider_name,
                compiled: OnceLock::new(),
                compiles: OnceLock::new(),
                compiled_output: OnceLock::new(),
            },
        );
    }

    /// Removes a tool; returns whether it was there.
    pub fn unregister(&mut self, name: &str) -> bool {
        match self.tools.remove(name) {
            Some(old) => {
                self.by_provider.remove(&old.provider_name);
                true
            }
            None => false,
        }
    }

    /// Looks up the tool a model means: the one shown under this model-facing name, else the one
    /// registered under it when no tool is shown under it. Model-facing names are unique (a later
    /// tool whose name maps to a taken one gets a suffix), so a name shown to the model always
    /// runs the tool it was shown for, even where another tool is registered under that exact
    /// name (`send.message` shown as `send_message`, beside a tool named `send_message`).
    pub fn get(&self, name: &str) -> Option<&Entry> {
        match self.by_provider.get(name) {
            Some(registered) => self.tools.get(registered),
            None => self.tools.get(name),
        }
    }

    /// The tool registered under exactly this name (configuration and rules name tools so).
    pub fn registered(&self, name: &str) -> Option<&Entry> {
        self.tools.get(name)
    }

    /// The tool of a call stage 1 has read: its name is the registered name when the tool was
    /// found (see [`Registry::get`] for names as a model writes them).
    pub fn of_call(&self, name: &str) -> Option<&Entry> {
        self.tools.get(name).or_else(|| self.get(name))
    }

    /// Every entry, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.tools.values()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The one tool whose name equals `name` ignoring case, if exactly one does.
    pub fn case_insensitive(&self, name: &str) -> Option<&Entry> {
        let mut found = self
            .tools
            .values()
            .filter(|e| e.name.as_str().eq_ignore_ascii_case(name) || e.provider_name.eq_ignore_ascii_case(name));
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// Up to 3 names among `candidates` close to `name`, closest first.
    pub fn suggestions<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let wanted = name.to_ascii_lowercase();
        let mut scored: Vec<(usize, &str)> = candidates
            .into_iter()
            .filter_map(|c| {
                let lower = c.to_ascii_lowercase();
                let distance = levenshtein(&wanted, &lower);
                let limit = (wanted.len().max(lower.len()) / 3).max(2);
                let contains = wanted.len() >= 3 && (lower.contains(&wanted) || wanted.contains(&lower));
                (distance <= limit || contains).then_some((distance, c))
            })
            .collect();
        scored.sort();
        scored.into_iter().take(3).map(|(_, c)| c.to_owned()).collect()
    }

    fn unique_provider_name(&self, name: &str) -> String {
        let base = provider_safe(name);
        if !self.by_provider.contains_key(&base) {
            return base;
        }
        for n in 2u32.. {
            let suffix = format!("_{n}");
            let mut candidate = base.clone();
            while candidate.len() + suffix.len() > MAX_PROVIDER_NAME {
                candidate.pop();
            }
            candidate.push_str(&suffix);
            if !self.by_provider.contains_key(&candidate) {
                return candidate;
            }
        }
        base
    }
}

/// Maps a name to `^[a-zA-Z0-9_-]{1,64}$`: other characters become `_`, a long name is cut and
/// given a hash suffix so two long names stay apart.
pub fn provider_safe(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    if out.len() > MAX_PROVIDER_NAME {
        let hash = fnv1a(name.as_bytes());
        out.truncate(MAX_PROVIDER_NAME - 9);
        out.push_str(&format!("_{:08x}", hash as u32));
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn provider_names_are_safe_and_bounded() {
        assert_eq!(provider_safe("github__create_issue"), "github__create_issue");
        assert_eq!(provider_safe("my.server/tool name"), "my_server_tool_name");
        let long = "x".repeat(100);
        let safe = provider_safe(&long);
        assert_eq!(safe.len(), MAX_PROVIDER_NAME);
        assert_ne!(safe, provider_safe(&"x".repeat(101)));
    }

    struct Named(String, Value, ToolSpec);

    #[async_trait::async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            &self.0
        }
        fn description(&self) -> &str {
            "named"
        }
        fn parameters(&self) -> &Value {
            &self.1
        }
        fn spec(&self) -> &ToolSpec {
            &self.2
        }
        async fn execute(
            &self,
            _: &crate::tool::ToolContext,
            _: Value,
        ) -> Result<crate::tool::ToolOutput, crate::ToolError> {
            Err(crate::ToolError::failed("not run here"))
        }
    }

    fn named(name: &str) -> Arc<dyn Tool> {
        Arc::new(Named(
            name.into(),
            serde_json::json!({"type": "object"}),
            ToolSpec::default(),
        ))
    }

    #[test]
    fn a_model_facing_name_always_finds_the_tool_shown_under_it_whatever_the_order() {
        for order in [
            ["chat__send.message", "chat__send_message"],
            ["chat__send_message", "chat__send.message"],
        ] {
            let mut r = Registry::new();
            for name in order {
                r.register(named(name));
            }
            // The mapping is a bijection: distinct model-facing names, each finding its own tool.
            let shown: Vec<(String, String)> = r
                .entries()
                .map(|e| (e.provider_name().to_owned(), e.name().as_str().to_owned()))
                .collect();
            assert_ne!(shown[0].0, shown[1].0, "{order:?}");
            for (provider, registered) in &shown {
                assert_eq!(
                    r.get(provider).map(|e| e.name().as_str()),
                    Some(registered.as_str()),
                    "{order:?}"
                );
                assert_eq!(
                    r.registered(registered).map(|e| e.name().as_str()),
                    Some(registered.as_str())
                );
            }
            // The first keeps the plain name, the later one is renamed.
            assert_eq!(r.get("chat__send_message").map(|e| e.name().as_str()), Some(order[0]));
            assert_eq!(r.get("chat__send_message_2").map(|e| e.name().as_str()), Some(order[1]));
        }
    }

    #[test]
    fn many_names_mapping_to_one_stay_apart_and_replacing_a_tool_keeps_its_name() {
        let names = ["a.b", "a b", "a/b", "a:b", "a_b", "a+b", "a@b", "a b_2"];
        let mut r = Registry::new();
        for name in names {
            r.register(named(name));
        }
        let mut seen = std::collections::HashSet::new();
        for e in r.entries() {
            assert!(
                seen.insert(e.provider_name().to_owned()),
                "{} shown twice",
                e.provider_name()
            );
            assert_eq!(r.get(e.provider_name()).map(|x| x.name()), Some(e.name()));
        }
        assert_eq!(seen.len(), names.len());
        let before = r.get("a.b").map(|e| e.provider_name().to_owned());
        r.register(named("a.b"));
        assert_eq!(r.get("a.b").map(|e| e.provider_name().to_owned()), before);
        assert!(r.unregister("a_b") && r.registered("a_b").is_none());
    }

    #[tokio::test]
    async fn listing_tools_keeps_no_validator_and_still_leaves_out_what_does_not_compile() {
        let mut r = Registry::new();
        for i in 0..50 {
            r.register(named(&format!("tool_{i}")));
        }
        r.register(Arc::new(Named(
            "broken".into(),
            serde_json::json!({"type": "banana"}),
            ToolSpec::default(),
        )));
        let engine = crate::Engine::new(r, crate::EngineConfig::default());
        let list = engine.tool_list(crate::Format::Openai, &crate::TurnOptions::default());
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        assert_eq!(names.len(), 50, "{names:?}");
        assert!(!names.contains(&"broken"));
        let registry = engine.registry();
        assert!(registry.entries().all(|e| !e.holds_validator()));
        // A call compiles its own tool's validator, and keeps it.
        assert!(registry.get("tool_7").unwrap().compiled().is_ok());
        assert!(registry.get("tool_7").unwrap().holds_validator());
        assert!(!registry.get("tool_8").unwrap().holds_validator());
    }

    #[test]
    fn suggestions_find_close_names_only() {
        let names = ["read_file", "write_file", "list_directory", "exec_shell"];
        assert_eq!(Registry::suggestions("read_fil", names), vec!["read_file"]);
        assert_eq!(Registry::suggestions("readfile", names)[0], "read_file");
        assert!(Registry::suggestions("zzzzzzzzzz", names).is_empty());
    }
}
