//! Durable steps (§8 of the behaviour contract): a step's result is
//! recorded in the key's record, fenced by the execution's token, before the
//! execution goes on; an execution that takes the key over gets the results
//! back instead of running those steps again.
//!
//! Recording is one store call (a fenced append). A call that fails is
//! tried again, like a completion, at least once a second, until it lands,
//! the keeper finds the record no longer holds the token, or the record's
//! TTL has passed: the handler waits, since going on with an effect the
//! record does not know would let a takeover repeat it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use super::FIRST_PAUSE;
use super::lease::{LeaseState, Standing};
use crate::observe::store_call;
use crate::sealing::{self, Keyring};
use crate::store::{Fence, Step, StoreError};

/// Why a durable step could not give its result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The step's name is empty, longer than [`Step::MAX_NAME_BYTES`], or
    /// has a control character; nothing ran.
    #[error("a step name must be 1 to {max} bytes without control characters ({0} bytes given)", max = Step::MAX_NAME_BYTES)]
    InvalidName(usize),
    /// The execution's lease lapsed and its record was held for an operator
    /// meanwhile (`on_lapse = "hold"`): the step did not run. Returned from
    /// the handler, the execution stops and leaves the record held (409
    /// `execution-held`): the operator settles it on the steps it saw.
    #[error("the execution is held for an operator; step `{0}` did not run")]
    Held(String),
    /// The execution no longer owns its key (another execution took it
    /// over): its step's result was not recorded, and it must stop.
    #[error("the execution lost its key before step `{0}` was recorded; another execution owns it")]
    Lost(String),
    /// The step ran, and its result is larger than the stored-response
    /// limit, or the store refused it for good: it was not recorded, so a
    /// takeover would run it again.
    #[error("the result of step `{name}` was not recorded: {reason}")]
    NotRecorded {
        /// The step.
        name: String,
        /// Why.
        reason: String,
    },
    /// A recorded result does not read back as the step's type (the
    /// step's type changed between the execution that recorded it and
    /// this one).
    #[error("the recorded result of step `{name}` does not read back: {source}")]
    Unreadable {
        /// The step.
        name: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// The step's result could not be serialized; nothing was recorded.
    #[error("the result of step `{name}` could not be serialized: {source}")]
    Unserializable {
        /// The step.
        name: String,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// The steps of one execution: those recorded before it (by executions it
/// took over from) and its own.
pub(crate) struct Steps {
    lease: Arc<LeaseState>,
    recorded: Mutex<Vec<Step>>,
    /// The largest result recorded (the stored-response limit).
    limit: usize,
    /// The record's end: no recording is tried past it.
    ends: Instant,
    /// The keys results are sealed with before they are recorded, if any;
    /// `recorded` holds them open.
    sealing: Option<Arc<Keyring>>,
}

impl Steps {
    pub(crate) fn new(
        lease: Arc<LeaseState>,
        recorded: Vec<Step>,
        limit: usize,
        ends: Instant,
        sealing: Option<Arc<Keyring>>,
    ) -> Self {
        Self { lease, recorded: Mutex::new(recorded), limit, ends, sealing }
    }

    /// The result recorded for `name`, if any.
    pub(crate) fn recorded(&self, name: &str) -> Option<Bytes> {
        self.recorded.lock().iter().find(|step| step.name == name).map(|step| step.result.clone())
    }

    /// How many steps are recorded.
    pub(crate) fn count(&self) -> usize {
        self.recorded.lock().len()
    }

    /// Waits until this execution may run a step that was not recorded, as
    /// [`LeaseState::standing`] says: its lease confirmed live, and, after a
    /// lapse, its record still its own. The store's answer that another
    /// execution owns the key is [`StepError::Lost`]; a record held for an
    /// operator meanwhile (`on_lapse = "hold"`) is [`StepError::Held`]: the
    /// operator settles it on the steps it saw.
    pub(crate) async fn confirmed(&self, name: &str) -> Result<(), StepError> {
        match self.lease.standing(self.ends).await {
            Standing::Owner => Ok(()),
            Standing::Held => Err(StepError::Held(name.to_owned())),
            Standing::Lost | Standing::Unknown => Err(StepError::Lost(name.to_owned())),
        }
    }

    /// Records `step`, trying again as the module's docs say.
    pub(crate) async fn record(&self, step: Step) -> Result<(), StepError> {
        if step.result.len() > self.limit {
            return Err(StepError::NotRecorded {
                reason: format!("{} bytes, over the stored-response limit of {}", step.result.len(), self.limit),
                name: step.name,
            });
        }
        let lease = &*self.lease;
        let kept = match &self.sealing {
            Some(keyring) => {
                let sealed = sealing::seal_step(keyring, &lease.key, &step.name, &step.result);
                Step { name: step.name.clone(), result: sealed.into() }
            }
            None => step.clone(),
        };
        let mut pause = FIRST_PAUSE;
        let most = (lease.lease / 10).clamp(FIRST_PAUSE, Duration::from_secs(1));
        loop {
            let call = lease.store.record_step(&lease.key, lease.token, &kept);
            match store_call(lease.store.kind(), "record_step", lease.timeout, call).await {
                Ok(Fence::Held) => {
                    tracing::debug!(step = %step.name, "durable step recorded");
                    self.recorded.lock().push(step);
                    return Ok(());
                }
                Ok(_) => return Err(StepError::Lost(step.name)),
                // Refused for good (too large, a limit, a value the store
                // cannot hold): trying again would not help.
                Err(
                    error @ (StoreError::Full { .. } | StoreError::Corrupt { .. } | StoreError::Misconfigured { .. }),
                ) => {
                    return Err(StepError::NotRecorded { name: step.name, reason: error.to_string() });
                }
                Err(_) if lease.is_lost() => return Err(StepError::Lost(step.name)),
                Err(error) => {
                    let now = Instant::now();
                    if now >= self.ends {
                        return Err(StepError::NotRecorded { name: step.name, reason: error.to_string() });
                    }
                    tokio::time::sleep(pause.min(self.ends - now)).await;
                    pause = (pause * 2).min(most);
                }
            }
        }
    }
}
