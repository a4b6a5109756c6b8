//! The `#[idempotent]` attribute. Use it through `idem-runtime`.
