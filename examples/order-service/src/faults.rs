//! Fault injection for tests: points where the process aborts on purpose,
//! like a crash (no shutdown, no unwinding, nothing flushed or committed).

/// Which crash points are armed (`--crash-after-charge`,
/// `--crash-after-order-insert`); none by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Abort once the provider recorded a charge, before the handler returns.
    pub crash_after_charge: bool,
    /// Abort once the order row is written, before the handler returns.
    pub crash_after_order_insert: bool,
}

impl Faults {
    /// The provider recorded a charge (and, on Postgres, the payment row is
    /// written in the uncommitted transaction): abort here if armed.
    pub fn after_charge(self) {
        if self.crash_after_charge {
            crash("--crash-after-charge");
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
