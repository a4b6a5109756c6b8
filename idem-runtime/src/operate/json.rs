//! Records as JSON, for scripts (`idem --json`) and the actix service.

use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

use super::Inspection;
use crate::record::RecordState;
use crate::sealing;

/// `inspection` as a JSON object: its id, state, route, attempt, age and
/// claim time, token, fingerprint prefix, lease and TTL left, steps (each
/// result as the JSON it is, or `result_hex` for other bytes) and, when
/// completed, the stored response's status and size. With `detail`, also
/// the response's headers and body (`body` as text when it is UTF-8, else
/// `body_hex`). What is sealed and was not opened shows as sealed: a step
/// as `"sealed": true`, a response as `sealed_with` (its key's id).
pub fn to_json(inspection: &Inspection, detail: bool) -> Value {
    let record = &inspection.record;
    let steps: Vec<Value> = record
        .steps
        .iter()
        .map(|step| match serde_json::from_slice::<Value>(&step.result) {
            _ if sealing::is_sealed_step(&step.result) => json!({"name": step.name, "sealed": true}),
            Ok(result) => json!({"name": step.name, "result": result}),
            Err(_) => json!({"name": step.name, "result_hex": hex::encode(&step.result)}),
        })
        .collect();
    let mut out = json!({
        "id": inspection.id(),
        "key": inspection.key.as_str(),
        "state": record.state_name().as_str(),
        "route": record.route,
        "attempt": record.attempt.map(|attempt| attempt.as_str()),
        "age_seconds": record.age().map(|age| age.as_secs()),
        "claimed_at_unix_ms": record.claimed_at.and_then(|at| at.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_millis() as u64),
        "token": record.token().map(|token| token.to_hex()),
        "fingerprint_prefix": &record.fingerprint.to_hex()[..16],
        "ttl_left_ms": record.ttl_left().as_millis() as u64,
        "steps": steps,
    });
    if let RecordState::InFlight { lease_left, .. } = record.state {
        out["lease_left_ms"] = json!(lease_left.as_millis() as u64);
    }
    if let RecordState::Completed { response, .. } = &record.state {
        let mut stored = json!({"status": response.status, "size": response.size()});
        if let Some(id) = sealing::sealed_with(response) {
            stored["sealed_with"] = json!(id.map_or_else(|_| "?".to_owned(), |id| id.to_hex()));
        } else if detail {
            let headers: Vec<Value> =
                response.headers.iter().map(|(name, value)| json!([name, String::from_utf8_lossy(value)])).collect();
            stored["headers"] = Value::Array(headers);
            match std::str::from_utf8(&response.body) {
                Ok(text) => stored["body"] = json!(text),
                Err(_) => stored["body_hex"] = json!(hex::encode(&response.body)),
            }
        }
        out["response"] = stored;
    }
    out
}
