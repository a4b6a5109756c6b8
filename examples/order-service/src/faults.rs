//! Fault injection for tests: points where the process aborts on purpose,
//! like a crash (no shutdown, no unwinding, nothing flushed or committed).

use clap::ValueEnum;

/// The durable steps of the service's handlers, by name: the payment's
/// provider call, `charge`. A crash point can follow each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurableStep {
    /// The payment's call to the provider (see `routes::charge`).
    Charge,
}

impl DurableStep {
    /// The step's name, as the runtime records it and `idem inspect` shows it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Charge => "charge",
        }
    }
}

/// Which crash points are armed (`--crash-after-charge`,
/// `--crash-after-step`, `--crash-after-order-insert`); none by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Abort once the provider recorded a charge, before the payment's step
    /// `charge` is recorded.
    pub crash_after_charge: bool,
    /// Abort once the runtime recorded this durable step.
    pub crash_after_step: Option<DurableStep>,
    /// Abort once the order row is written, before the handler returns.
    pub crash_after_order_insert: bool,
}

impl Faults {
    /// The provider recorded a charge; the payment's durable step `charge`
    /// is not recorded yet: abort here if armed.
    pub fn after_charge(self) {
        if self.crash_after_charge {
            crash("--crash-after-charge");
        }
    }

    /// The runtime recorded the durable step `step` (on Postgres: outside
    /// the handler's transaction, which holds nothing of the payment yet):
    /// abort here if armed for it.
    pub fn after_step(self, step: DurableStep) {
        if self.crash_after_step == Some(step) {
            crash(&format!("--crash-after-step {}", step.name()));
        }
    }

    /// The order row is written (on Postgres: not yet committed): abort
    /// here if armed.
    pub fn after_order_insert(self) {
        if self.crash_after_order_insert {
            crash("--crash-after-order-insert");
        }
    }
}

fn crash(knob: &str) -> ! {
    tracing::error!("{knob}: aborting the process on purpose");
    std::process::abort()
}
