// Composite keys and fingerprint exclusions on axum handlers, checked as on
// actix-web's.
use idem_runtime::axum::idempotent;

#[idempotent(key = ["path:id"])]
async fn one_part() -> &'static str {
    "created"
}

#[idempotent(key = ["path:a", "path:b"], required = false)]
async fn optional_path_parts() -> &'static str {
    "created"
}

#[idempotent(fingerprint_exclude = ["attempt", "/meta", "/meta/sent_at"])]
async fn bad_exclusions() -> &'static str {
    "created"
}

fn main() {}
