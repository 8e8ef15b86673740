//! `Engine::check`: a dry run of every stage that decides before a tool runs — lookup, exposure,
//! validation, the tool's own refusals, the permission rules with the session's grants — that
//! runs no tool and no hook. `toolgate check` prints it.

use crate::dispatch::Engine;
use crate::permit::{Verdict, decide_vetted};
use crate::rules::Subject;
use crate::session::Session;
use crate::types::ToolCall;
use crate::validate::ValidateOptions;
use crate::{CallError, TurnOptions};
use serde::Serialize;
use serde_json::Value;

/// What the pipeline would decide for a call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// `allow`, `ask` or `deny`.
    pub decision: &'static str,
    /// The verdict's source string, or the error type of the stage that refused.
    pub source: String,
    /// The rule that decided, when one did.
    pub rule: Option<String>,
    /// Why, in one sentence.
    pub reason: String,
    /// For a command line: the programs it was reduced to (name and arguments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub programs: Option<Vec<Vec<String>>>,
    /// The error the model would see, when a stage refused before permission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl Check {
    fn refused(error: CallError) -> Self {
        Self {
            decision: "deny",
            source: error.kind.as_str().to_owned(),
            rule: None,
            reason: error.message.clone(),
            programs: None,
            error: Some(error.to_json()),
        }
    }
}

impl Engine {
    /// Decides `call` for `session` as the pipeline would, without running anything.
    pub fn check(&self, session: &Session, call: &ToolCall) -> Check {
        let turn = self.start_turn(session, TurnOptions::default());
        let Some(entry) = turn.registry.get(call.name.as_str()) else {
            return Check::refused(CallError::new(
                crate::ErrorKind::UnknownTool,
                format!("There is no tool named {:?}.", call.name.as_str()),
            ));
        };
        let exposed = match self.exposure(entry, &turn) {
            Ok(e) => e,
            Err(why) => {
                return Check::refused(CallError::new(
                    crate::ErrorKind::NotAvailable,
                    format!("The tool {:?} is not available ({why}).", call.name.as_str()),
                ));
            }
        };
        let mut args = call.arguments_value();
        if let Err(e) = exposed.compiled.check(&mut args, ValidateOptions::default()) {
            return Check::refused(e);
        }
        let call = ToolCall {
            arguments: match &args {
                Value::Object(m) => m.clone(),
                _ => call.arguments.clone(),
            },
            ..call.clone()
        };
        let tool = entry.tool();
        let spec = entry.spec();
        let vetted = tool.vet(&session.workspace, &args);
        let decision = {
            let grants = session.grants.read().unwrap_or_else(|p| p.into_inner());
            decide_vetted(&call, spec, &session.policy, &grants, &vetted)
        };
        let programs = match Subject::of(&spec.subject, &call.arguments) {
            Subject::Command(a) => Some(a.programs.into_iter().map(|p| p.words).collect()),
            _ => None,
        };
        Check {
            decision: match decision.verdict {
                Verdict::Allow => "allow",
                Verdict::Ask => "ask",
                Verdict::Deny => "deny",
            },
            source: decision.source.as_str().to_owned(),
            rule: crate::permit::rule_in(&decision.reason).map(str::to_owned),
            reason: decision.reason,
            programs,
            error: None,
        }
    }
}
