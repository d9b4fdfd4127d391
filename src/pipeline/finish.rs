//! The one place a turn ends. Every exit of every driver (a trajectory step accepted,
//! terminated or failed, a side call, a passthrough reply, the Terminus confirmation) goes
//! through [`finish`]: it sets the record's timings and error, remembers a turn answered
//! without a tool call (so the scaffold's next request finds its session), and writes the
//! record (the trace writer counts it in the metrics as it writes).

use std::time::Instant;

use crate::error::ProxyError;
use crate::respond::Reply;
use crate::session::{NudgeState, SessionId};
use crate::trace::{Pending, StepRecord, Timings};

use super::{Prepared, Scope, TurnOutcome};

/// A record on its way to the trace: whole (written with its prompt) or begun while the
/// backend generated ([`crate::trace::TraceWriter::begin`]).
pub enum TurnRecord {
    Whole(StepRecord),
    Begun(Pending),
}

impl std::ops::Deref for TurnRecord {
    type Target = StepRecord;
    fn deref(&self) -> &StepRecord {
        match self {
            Self::Whole(r) => r,
            Self::Begun(p) => p,
        }
    }
}

impl std::ops::DerefMut for TurnRecord {
    fn deref_mut(&mut self) -> &mut StepRecord {
        match self {
            Self::Whole(r) => r,
            Self::Begun(p) => p,
        }
    }
}

/// Who the ending turn was: its session and step, and, for a turn whose reply may come
/// without a tool call, the prepared turn and nudges to remember it by.
pub struct Ending<'a> {
    pub session: &'a SessionId,
    pub step: usize,
    pub remember: Option<(&'a Prepared, &'a NudgeState)>,
}

/// Ends a turn: `timings` with `total_ms` measured from `started`; on an error the record
/// says so (unless the caller already worded it, as a termination does) and the error is
/// returned; on a reply without a tool call the turn is remembered. The record is written
/// before returning.
pub async fn finish(
    scope: &Scope<'_>,
    ending: Ending<'_>,
    mut record: TurnRecord,
    timings: Timings,
    started: Instant,
    result: Result<Reply, ProxyError>,
) -> Result<TurnOutcome, ProxyError> {
    record.timings = Timings {
        total_ms: started.elapsed().as_secs_f64() * 1e3,
        ..timings
    };
    match &result {
        Err(e) if record.error.is_none() => record.set_error(e),
        Err(_) => {}
        Ok(reply) => {
            // A reply of several tool calls too: a scaffold that takes one call a turn
            // (SWE-agent) sends it back as plain content to say so, with no minted id.
            let several = !reply.more_tool_calls.is_empty();
            if let (true, Some((prepared, nudges))) =
                (reply.tool_call.is_none() || several, ending.remember)
            {
                let content = reply.content.as_deref().unwrap_or_default();
                prepared.remember_turn(scope.sessions, content, ending.session, nudges);
            }
        }
    }
    match record {
        TurnRecord::Whole(r) => scope.trace.write_record(ending.session, r).await,
        TurnRecord::Begun(p) => scope.trace.commit(p).await,
    }
    result.map(|reply| TurnOutcome {
        reply,
        session: ending.session.clone(),
        step: ending.step,
    })
}
