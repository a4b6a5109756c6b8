//! What the tool prints: text for people, JSON for scripts.

use idem_runtime::operate::{Inspection, OperatorError, Settled, detail_lines, summary_line, to_json};
use serde_json::json;

pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    pub(crate) fn list(&self, found: &[Inspection]) {
        for inspection in found {
            if self.json {
                println!("{}", to_json(inspection, false));
            } else {
                println!("{}", summary_line(inspection));
            }
        }
    }

    pub(crate) fn inspect(&self, inspection: &Inspection) {
        if self.json {
            println!("{}", to_json(inspection, true));
        } else {
            for line in detail_lines(inspection) {
                println!("{line}");
            }
        }
    }

    pub(crate) fn settled(&self, settled: &Settled) {
        if self.json {
            println!("{}", json!({"id": settled.id, "was": settled.was.as_str(), "now": settled.now.as_str()}));
        } else {
            println!("{}: {} -> {}", settled.id, settled.was, settled.now);
        }
    }

    pub(crate) fn error(&self, error: &OperatorError) {
        if self.json {
            let kind = match error {
                OperatorError::NotFound(_) => "not-found",
                OperatorError::NotSettleable { .. } => "not-settleable",
                OperatorError::Changed { .. } => "changed",
                // Refused as running too: the same write applies after the
                // grace (the detail says when).
                OperatorError::Running { .. } | OperatorError::Graced { .. } => "running",
                OperatorError::InvalidTarget(_) | OperatorError::InvalidResponse(_) => "usage",
                OperatorError::Sealed { .. } => "sealed",
                _ => "store",
            };
            println!("{}", json!({"error": kind, "detail": error.to_string()}));
        }
        eprintln!("idem: {error}");
    }
}
