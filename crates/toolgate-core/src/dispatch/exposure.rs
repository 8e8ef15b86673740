//! Stages 3 and 4: which tool a call names, and whether it is exposed this turn (the allowlist,
//! feature flags and the tool's own assembly for the turn). The same logic lists the tools the
//! model is shown, so the schema it sees is the schema validated.

use super::Engine;
use super::turn::{TurnOptions, TurnState};
use crate::cache;
use crate::error::{CallError, ErrorKind};
use crate::formats::{self, Format, ToolView};
use crate::registry::{Entry, Registry};
use crate::tool::{Assembly, TurnView};
use crate::types::ToolName;
use crate::validate::CompiledSchema;
use serde_json::Value;
use std::sync::Arc;

/// A `not_available` refusal names every tool available when there are at most this many.
pub(crate) const LISTED_AT_MOST: usize = 16;

/// A tool as listed this turn: its narrowed description and schema, if it narrowed them.
struct Shown {
    description: Option<String>,
    narrowed: Option<Arc<CompiledSchema>>,
}

/// A tool as exposed this turn: the schema its arguments are validated against.
pub(crate) struct Exposed {
    pub(crate) compiled: Arc<CompiledSchema>,
}

impl Engine {
    /// The schemas of the tools exposed this turn, in a provider's format, sorted by name: the
    /// allowlist, feature flags and each tool's own assembly for this turn applied.
    pub fn tool_list(&self, format: Format, options: &TurnOptions) -> Value {
        self.tool_list_of(format, options, &|_| true)
    }

    /// [`Engine::tool_list`] of the tools whose provider name `keep` accepts: a page of a long
    /// list builds only its own tools.
    pub fn tool_list_of(&self, format: Format, options: &TurnOptions, keep: &dyn Fn(&str) -> bool) -> Value {
        let turn = TurnState::new(
            TurnOptions {
                format: options.format.or(Some(format)),
                ..options.clone()
            },
            self.registry(),
        );
        let shown: Vec<(&Entry, Shown)> = turn
            .registry
            .entries()
            .filter(|e| keep(e.provider_name()))
            .filter_map(|e| self.shown(e, &turn).ok().map(|x| (e, x)))
            .collect();
        // Schemas as this turn shows them: narrowed, or as the tool gives them now (a tool may
        // parse them from text for this page).
        let schemas: Vec<_> = shown
            .iter()
            .map(|(e, x)| {
                let parameters = match &x.narrowed {
                    Some(compiled) => std::borrow::Cow::Borrowed(compiled.schema()),
                    None => e.tool().parameter_schema(),
                };
                (parameters, e.tool().result_schema())
            })
            .collect();
        let views: Vec<ToolView<'_>> = shown
            .iter()
            .zip(&schemas)
            .map(|((e, x), (parameters, output))| ToolView {
                name: e.provider_name(),
                description: x.description.as_deref().unwrap_or(e.tool().description()),
                parameters,
                output_schema: output.as_deref(),
                annotations: e.spec().annotations,
            })
            .collect();
        formats::tool_list(format, &views)
    }

    /// Stage 4 as listing needs it: the same decision as [`Engine::exposure`], without keeping
    /// a compiled validator for every tool listed (a call compiles and keeps its tool's own).
    fn shown(&self, entry: &Entry, turn: &TurnState) -> Result<Shown, String> {
        self.allowed(entry, turn)?;
        match entry.tool().assemble(&self.view(turn)) {
            Assembly::Hidden(reason) => Err(reason),
            Assembly::Unchanged => entry.compiles().map(|()| Shown {
                description: None,
                narrowed: None,
            }),
            Assembly::Narrowed {
                description,
                parameters,
            } => Ok(Shown {
                description,
                narrowed: match parameters {
                    Some(schema) => Some(self.compile_narrowed(&schema)?),
                    None => {
                        entry.compiles()?;
                        None
                    }
                },
            }),
        }
    }

    /// The allowlist and the tool's feature flag.
    fn allowed(&self, entry: &Entry, turn: &TurnState) -> Result<(), String> {
        if !turn.exposes(entry.name()) {
            return Err("it is outside this turn's allowlist".into());
        }
        if let Some(flag) = &entry.spec().feature
            && !self.config.features.contains(flag)
        {
            return Err(format!("the feature {flag:?} is off"));
        }
        Ok(())
    }

    fn view<'a>(&'a self, turn: &TurnState) -> TurnView<'a> {
        TurnView {
            format: turn.format,
            features: &self.config.features,
            iteration: turn.iteration,
            long_loop: turn.long_loop,
        }
    }

    /// Stage 3: the tool the call names, or `unknown_tool` with up to 3 close names among the
    /// tools exposed this turn.
    pub(crate) fn lookup<'t>(&self, turn: &'t TurnState, name: &ToolName) -> Result<&'t Entry, CallError> {
        if let Some(entry) = turn.registry.of_call(name.as_str()) {
            return Ok(entry);
        }
        let exposed = self.exposed_names(turn);
        let suggestions = Registry::suggestions(name.as_str(), exposed.iter().map(String::as_str));
        let mut message = format!("There is no tool named {:?}.", name.as_str());
        if !suggestions.is_empty() {
            let quoted: Vec<String> = suggestions.iter().map(|n| format!("{n:?}")).collect();
            message.push_str(&format!(" Did you mean {}?", quoted.join(", ")));
        }
        Err(CallError::new(ErrorKind::UnknownTool, message).with("suggestions", suggestions))
    }

    /// Stage 4: the tool as exposed this turn, or `not_available` with the tools that are.
    /// The names it offers are bounded: all of them when there are at most
    /// [`LISTED_AT_MOST`], else the closest few and how many there are (thousands of upstream
    /// tools made one refusal 169 KB).
    pub(crate) fn expose(&self, entry: &Entry, turn: &TurnState) -> Result<Exposed, CallError> {
        self.exposure(entry, turn).map_err(|why| {
            let exposed = self.exposed_names(turn);
            let count = exposed.len();
            let name = entry.provider_name();
            let (offered, message) = if count <= LISTED_AT_MOST {
                let message = match count {
                    0 => format!("The tool {name:?} is not available this turn ({why}), and no tool is."),
                    _ => format!(
                        "The tool {name:?} is not available this turn ({why}). Use one of: {}.",
                        exposed.join(", ")
                    ),
                };
                (exposed, message)
            } else {
                let closest = Registry::suggestions(name, exposed.iter().map(String::as_str));
                let message = if closest.is_empty() {
                    format!("The tool {name:?} is not available this turn ({why}); {count} other tools are.")
                } else {
                    format!(
                        "The tool {name:?} is not available this turn ({why}); {count} other tools are, the closest: {}.",
                        closest.join(", ")
                    )
                };
                (closest, message)
            };
            CallError::new(ErrorKind::NotAvailable, message)
                .with("allowed_tools", offered)
                .with("available_count", count)
        })
    }

    /// Stage 4 for one tool: the allowlist, its feature flag, and its assembly for this turn.
    pub(crate) fn exposure(&self, entry: &Entry, turn: &TurnState) -> Result<Exposed, String> {
        self.allowed(entry, turn)?;
        match entry.tool().assemble(&self.view(turn)) {
            Assembly::Hidden(reason) => Err(reason),
            Assembly::Unchanged => Ok(Exposed {
                compiled: entry.compiled()?,
            }),
            Assembly::Narrowed { parameters, .. } => Ok(Exposed {
                compiled: match parameters {
                    Some(schema) => self.compile_narrowed(&schema)?,
                    None => entry.compiled()?,
                },
            }),
        }
    }

    /// The provider-safe names of the tools exposed this turn, sorted.
    fn exposed_names(&self, turn: &TurnState) -> Vec<String> {
        turn.registry
            .entries()
            .filter(|e| self.shown(e, turn).is_ok())
            .map(|e| e.provider_name().to_owned())
            .collect()
    }

    /// Narrowed schemas, compiled once and reused (keyed by their canonical JSON).
    fn compile_narrowed(&self, schema: &Value) -> Result<Arc<CompiledSchema>, String> {
        let mut key = String::new();
        cache::canonical_json(schema, &mut key);
        let mut compiled = self.narrowed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = compiled.get(&key) {
            return Ok(c.clone());
        }
        let c = Arc::new(CompiledSchema::compile(schema)?);
        if compiled.len() >= 1024 {
            compiled.clear();
        }
        compiled.insert(key, c.clone());
        Ok(c)
    }
}
