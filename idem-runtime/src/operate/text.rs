//! Records as text, for people (`idem` without `--json`).

use std::fmt::Write;
use std::time::Duration;

use super::Inspection;
use crate::record::RecordState;
use crate::sealing;

/// A duration as people read it: `42s`, `3m05s`, `2h10m`, `3d4h`.
fn short(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        3_600..86_400 => format!("{}h{:02}m", seconds / 3_600, seconds % 3_600 / 60),
        _ => format!("{}d{}h", seconds / 86_400, seconds % 86_400 / 3_600),
    }
}

/// One line per record, as `idem list` prints it: its id, state, route,
/// age, attempt and recorded steps.
pub fn summary_line(inspection: &Inspection) -> String {
    let record = &inspection.record;
    let steps: Vec<&str> = record.steps.iter().map(|step| step.name.as_str()).collect();
    format!(
        "{}  {:<9}  {:<32}  age {:<7}  attempt {:<13}  steps [{}]",
        inspection.id(),
        record.state_name().as_str(),
        record.route.as_deref().unwrap_or("-"),
        record.age().map_or_else(|| "-".to_owned(), short),
        record.attempt.map_or("-", |attempt| attempt.as_str()),
        steps.join(", "),
    )
}

/// The lines of `idem inspect`: every field of the record, one per line,
/// then each step with its result.
pub fn detail_lines(inspection: &Inspection) -> Vec<String> {
    let record = &inspection.record;
    let mut lines = vec![
        format!("id           {}", inspection.id()),
        format!("state        {}", record.state_name()),
        format!("route        {}", record.route.as_deref().unwrap_or("-")),
        format!("attempt      {}", record.attempt.map_or("-", |attempt| attempt.as_str())),
        format!("age          {}", record.age().map_or_else(|| "-".to_owned(), short)),
        format!("fingerprint  {}…", &record.fingerprint.to_hex()[..16]),
        format!("expires in   {}", short(record.ttl_left())),
    ];
    if let Some(token) = record.token() {
        lines.push(format!("token        {}", token.to_hex()));
    }
    match &record.state {
        RecordState::InFlight { lease_left, .. } if lease_left.is_zero() => {
            lines.push("lease        lapsed (its holder crashed, or is cut off from the store)".to_owned());
        }
        RecordState::InFlight { lease_left, .. } => lines.push(format!("lease        {} left", short(*lease_left))),
        RecordState::Held { .. } => {
            lines.push("lease        lapsed: held for an operator (release or resolve it)".to_owned());
        }
        RecordState::Completed { response, .. } => match sealing::sealed_with(response) {
            Some(id) => lines.push(format!(
                "response     {} ({} bytes), sealed with key {}",
                response.status,
                response.size(),
                id.map_or_else(|_| "?".to_owned(), |id| id.to_hex())
            )),
            None => lines.push(format!("response     {} ({} bytes)", response.status, response.size())),
        },
        _ => {}
    }
    let mut steps = format!("steps        {}", record.steps.len());
    for step in &record.steps {
        let shown = match std::str::from_utf8(&step.result) {
            _ if sealing::is_sealed_step(&step.result) => "sealed (give the records key to read it)".to_owned(),
            Ok(text) => text.to_owned(),
            Err(_) => format!("0x{}", hex::encode(&step.result)),
        };
        let _ = write!(steps, "\n  {}: {shown}", step.name);
    }
    lines.push(steps);
    lines
}
