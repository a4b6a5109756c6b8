// `fingerprint_headers` takes a list of valid header names, each once, and
// not the key's own header.
use idem_runtime::axum::idempotent;

#[idempotent(fingerprint_headers = "x-account-id")]
async fn not_a_list() -> &'static str {
    "created"
}

#[idempotent(fingerprint_headers = ["x account", 7])]
async fn bad_names() -> &'static str {
    "created"
}

#[idempotent(fingerprint_headers = ["X-Account-Id", "x-account-id"])]
async fn twice() -> &'static str {
    "created"
}

#[idempotent(header = "X-Request-Key", fingerprint_headers = ["x-request-key"])]
async fn the_key_header() -> &'static str {
    "created"
}

fn main() {}
