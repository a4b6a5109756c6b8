//! The actix-web glue the `#[idempotent]` expansion calls into.

mod body;
mod capture;
mod config;
mod entry;
mod execute;
mod observe;
mod options;
mod problem;

pub use capture::REPLAYED_HEADER;
pub use config::{
    DEFAULT_BODY_LIMIT, DEFAULT_RESPONSE_LIMIT, DEFAULT_STORE_TIMEOUT, Idem, ServerErrorPolicy, SubjectResolver,
};
pub use entry::handle;
pub use observe::{Outcome, REQUESTS_METRIC, STORE_LATENCY_METRIC};
pub use options::{InFlight, RouteOptions};
pub use problem::{PROBLEM_TYPE_PREFIX, ProblemKind};
