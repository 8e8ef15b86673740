//! Stages 5 and 6 for one call: its arguments against this turn's assembled schema, and the
//! per-turn cap. (The loop detector, the batch half of stage 6, is in the scheduler.)

use super::Engine;
use super::exposure::Exposed;
use super::record::Flight;
use super::turn::TurnState;
use crate::error::{CallError, ErrorKind};
use crate::events::Event;
use crate::registry::Entry;
use crate::session::Session;
use crate::tool::Category;
use crate::validate::ValidateOptions;
use serde_json::Value;

impl Engine {
    /// Stage 5: validation against the schema exposed this turn; safe coercions are kept (and
    /// reported), unknown keys dropped where the schema forbids them; `invalid_arguments` lists
    /// every error.
    pub(crate) fn validate(&self, exposed: &Exposed, f: &mut Flight) -> Result<(), CallError> {
        let mut args = std::mem::take(&mut f.args);
        let checked = exposed.compiled.check(&mut args, ValidateOptions::default());
        f.args = args;
        let warnings = checked?;
        if !warnings.is_empty() {
            tracing::warn!(call_id = %f.call.id, ?warnings, "arguments adjusted");
            self.events.emit(&Event::ArgumentsAdjusted {
                call_id: f.call.id.clone(),
                warnings,
            });
        }
        if let Value::Object(m) = &f.args {
            f.call.arguments = m.clone();
        }
        Ok(())
    }

    /// Stage 6, per call: the per-turn cap (`max_per_turn`, default 1 for dangerous tools). The
    /// call takes a slot before anyone is asked to approve it; a slot of a call refused later,
    /// before it runs, is given back by stage 13.
    pub(crate) fn take_slot(&self, turn: &TurnState, entry: &Entry, f: &mut Flight) -> Result<(), CallError> {
        let spec = entry.spec();
        let cap = spec.max_per_turn.or(match spec.category {
            Category::Dangerous => Some(self.config.dangerous_max_per_turn),
            _ => None,
        });
        let Some(cap) = cap else {
            return Ok(());
        };
        let mut executed = turn.executed.lock().unwrap_or_else(|p| p.into_inner());
        let n = executed.entry(entry.name().clone()).or_insert(0);
        if *n >= cap {
            return Err(CallError::new(
                ErrorKind::RateLimited,
                format!(
                    "{:?} may run at most {cap} time(s) per turn; call it again in a later turn.",
                    entry.provider_name()
                ),
            )
            .with("max_per_turn", cap));
        }
        *n += 1;
        f.slot = Some(entry.name().clone());
        Ok(())
    }

    /// Stage 6, per call: a call that would start a background job is refused while the
    /// session's (or the engine's) jobs are at their cap, before anyone is asked.
    pub(crate) fn job_slot(&self, session: &Session, entry: &Entry, f: &Flight) -> Result<(), CallError> {
        if !entry.spec().runs_in_background(&f.args) {
            return Ok(());
        }
        match self.jobs.refusal(&session.id) {
            None => Ok(()),
            Some(why) => Err(CallError::new(ErrorKind::RateLimited, why)),
        }
    }
}
