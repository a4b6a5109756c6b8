// Malformed key sources, each reported on its literal: an unknown source,
// a pointer without its leading `/`, a bad `~` escape, a path parameter
// written with its braces, `header` beside a key that is not a header, and
// `required = false` with a path key (a matched route always has it).
use idem_runtime::axum::idempotent;

#[idempotent(key = "query:id")]
async fn unknown_source() -> &'static str {
    "created"
}

#[idempotent(key = "json:id")]
async fn pointer_without_slash() -> &'static str {
    "created"
}

#[idempotent(key = "json:/a~2b")]
async fn bad_escape() -> &'static str {
    "created"
}

#[idempotent(key = "path:{id}")]
async fn braces() -> &'static str {
    "created"
}

#[idempotent(key = "json:/id", header = "X-Event-Key")]
async fn header_beside_a_body_key() -> &'static str {
    "created"
}

#[idempotent(key = "path:id", required = false)]
async fn optional_path_key() -> &'static str {
    "created"
}

fn main() {}
