//! `#[idempotent]` in the application's OpenAPI document (feature
//! `utoipa`): every idempotent operation gets its key's header parameter,
//! the `Idempotent-Replayed` header on its responses, and the problems the
//! runtime answers by itself (§5 of the behaviour contract), for actix-web
//! and axum alike.
//!
//! Add [`Idempotency`] to the document's modifiers:
//!
//! ```
//! # #[cfg(feature = "actix")] {
//! use actix_web::{HttpResponse, post};
//! use idem_runtime::idempotent;
//! use idem_runtime::openapi::Idempotency;
//! use utoipa::OpenApi;
//!
//! /// Creates an order.
//! #[idempotent(ttl = "24h")]
//! #[utoipa::path(post, path = "/orders", responses((status = 201, description = "Created")))]
//! #[post("/orders")]
//! async fn create_order() -> HttpResponse {
//!     HttpResponse::Created().finish()
//! }
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(create_order), modifiers(&Idempotency))]
//! struct ApiDoc;
//!
//! let document = ApiDoc::openapi();
//! let operation = document.paths.paths["/orders"].post.as_ref().unwrap();
//! assert!(operation.responses.responses.contains_key("422"), "key reused");
//! # }
//! ```
//!
//! An operation is idempotent when its handler has `#[idempotent]` above
//! its `#[utoipa::path(..)]` (an attribute runs before those below it, so
//! one written above `#[idempotent]` never shows it the path):
//! the attribute writes the route's terms into the path as the
//! operation's `x-idempotency` extension (its TTL, lease, scope, where the
//! key comes from, whether it is required, what a concurrent duplicate
//! gets), which stays in the document for the clients generated from it;
//! [`Idempotency`] documents every operation that carries one.

use utoipa::Modify;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Required, Schema};

use serde::Deserialize;

use crate::key::IdempotencyKey;
use crate::web::REPLAYED_HEADER;
use crate::web::problem::TYPE_PREFIX;

/// The modifier that documents every idempotent operation (see the
/// module's docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Idempotency;

/// The name of the extension in which the attribute writes a route's terms.
pub const EXTENSION: &str = "x-idempotency";

/// What the modifier reads of a route's terms.
#[derive(Debug, Deserialize)]
struct Terms {
    scope: String,
    key: Key,
    required: bool,
}

/// Where a route's key comes from.
#[derive(Debug, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
enum Key {
    Header { header: String },
    Path {},
    Json {},
    Composite { parts: Vec<Key> },
    Computed {},
}

impl Key {
    /// The header that carries the key or one of its parts, if any.
    fn header(&self) -> Option<&str> {
        match self {
            Self::Header { header } => Some(header),
            Self::Composite { parts } => parts.iter().find_map(Key::header),
            Self::Path {} | Self::Json {} | Self::Computed {} => None,
        }
    }
}

/// The name of the problem schema this adds to the document's components.
pub const PROBLEM_SCHEMA: &str = "IdempotencyProblem";

impl Modify for Idempotency {
    fn modify(&self, openapi: &mut OpenApi) {
        let mut documented = false;
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.options,
                &mut item.head,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                let Some(terms) = terms(operation) else { continue };
                document(operation, &terms);
                documented = true;
            }
        }
        if documented {
            let components = openapi.components.get_or_insert_with(Default::default);
            components.schemas.entry(PROBLEM_SCHEMA.to_owned()).or_insert_with(problem_schema);
        }
    }
}

/// The route's terms `operation` carries, if it is idempotent.
fn terms(operation: &Operation) -> Option<Terms> {
    let terms = operation.extensions.as_ref()?.get(EXTENSION)?;
    match serde_json::from_value(terms.clone()) {
        Ok(terms) => Some(terms),
        Err(error) => {
            tracing::warn!(%error, operation = ?operation.operation_id, "unreadable x-idempotency terms");
            None
        }
    }
}

/// What a problem response of `status` may be, by its `type` slugs and
/// what each means.
struct Problems {
    status: &'static str,
    description: &'static str,
    types: &'static [&'static str],
    retry_after: bool,
}

/// The problems every idempotent operation may answer.
const ALWAYS: [Problems; 6] = [
    Problems {
        status: "400",
        description: "The idempotency key is missing (on a route that requires it), malformed, too long or \
                      repeated, or the body could not be read; nothing ran.",
        types: &["missing-key", "invalid-key", "invalid-body"],
        retry_after: false,
    },
    Problems {
        status: "409",
        description: "A request with this key is still being processed (retry after `Retry-After`), was \
                      taken over by another execution, or is held for an operator (`execution-held`: retrying \
                      does not help).",
        types: &["in-flight", "lease-lost", "execution-held"],
        retry_after: true,
    },
    Problems {
        status: "413",
        description: "The request body is over the server's limit; nothing ran.",
        types: &["body-too-large"],
        retry_after: false,
    },
    Problems {
        status: "415",
        description: "The request body has a `Content-Encoding`: send it without one; nothing ran.",
        types: &["unsupported-content-encoding"],
        retry_after: false,
    },
    Problems {
        status: "422",
        description: "The key was already used for a different request (method, host, path, query or body); \
                      use a new key for a new request.",
        types: &["key-reused"],
        retry_after: false,
    },
    Problems {
        status: "503",
        description: "The idempotency store is unavailable, the server is shutting down or too busy, or cannot \
                      keep leases; nothing ran: retry after `Retry-After`.",
        types: &["store-unavailable", "shutting-down", "overloaded", "keeper-stopped"],
        retry_after: true,
    },
];

/// The problem of a route with `scope = "user"` that has no subject.
const NO_SUBJECT: Problems = Problems {
    status: "401",
    description: "The request has no authenticated user, which the key's scope needs; nothing ran.",
    types: &["missing-subject"],
    retry_after: false,
};

/// Documents `operation` as idempotent under `terms`.
fn document(operation: &mut Operation, terms: &Terms) {
    if let Some(header) = terms.key.header() {
        let parameters = operation.parameters.get_or_insert_with(Vec::new);
        let known = parameters.iter().any(|parameter| match parameter {
            RefOr::T(parameter) => parameter.name.eq_ignore_ascii_case(header),
            RefOr::Ref(_) => false,
        });
        if !known {
            parameters.push(RefOr::T(key_parameter(header, terms.required)));
        }
    }
    // A replay answers whatever the first response was, marked.
    for response in operation.responses.responses.values_mut() {
        if let RefOr::T(response) = response {
            response.headers.entry(replayed_name()).or_insert_with(|| RefOr::T(replayed_header()));
        }
    }
    let user = (terms.scope == "user").then_some(&NO_SUBJECT);
    for problems in ALWAYS.iter().chain(user) {
        match operation.responses.responses.get_mut(problems.status) {
            Some(RefOr::T(theirs)) => {
                // The application's own answer of that status stays; what
                // the runtime may answer with it is said beside.
                theirs.description.push_str(&format!(" Or an idempotency problem: {}", type_list(problems)));
            }
            Some(RefOr::Ref(_)) => {}
            None => {
                operation.responses.responses.insert(problems.status.to_owned(), RefOr::T(problem_response(problems)));
            }
        }
    }
}

/// The header of a replayed response's name, as documents write it.
fn replayed_name() -> String {
    "Idempotent-Replayed".to_owned()
}

/// The header `header` that carries the key.
fn key_parameter(header: &str, required: bool) -> utoipa::openapi::path::Parameter {
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(IdempotencyKey::MAX_LEN + 2));
    let required_mark = if required { Required::True } else { Required::False };
    let description = format!(
        "The idempotency key: one per logical operation, the same on every retry of it. An RFC 9651 sf-string \
         (`\"abc\"`) or a bare token (`abc`), 1 to {} visible ASCII characters. A retry with the same \
         key and request gets the first response back, marked `{REPLAYED_HEADER}: true`; {}",
        IdempotencyKey::MAX_LEN,
        if required { "the key is required." } else { "without one, the request runs without idempotency." }
    );
    ParameterBuilder::new()
        .name(header)
        .parameter_in(ParameterIn::Header)
        .required(required_mark)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// `Idempotent-Replayed`, on every response of an idempotent operation.
fn replayed_header() -> utoipa::openapi::header::Header {
    let schema = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["true"]));
    HeaderBuilder::new()
        .schema(Some(schema))
        .description(Some("`true` when this is a replay of the key's first response, byte for byte; absent on it."))
        .build()
}

/// The `type` URIs of `problems`, as a description lists them.
fn type_list(problems: &Problems) -> String {
    problems.types.iter().map(|slug| format!("`{TYPE_PREFIX}{slug}`")).collect::<Vec<_>>().join(", ")
}

/// A problem+json response of `problems`' status.
fn problem_response(problems: &Problems) -> Response {
    let description = format!("{} Problem types: {}.", problems.description, type_list(problems));
    let content = Content::new(Some(Ref::from_schema_name(PROBLEM_SCHEMA)));
    let mut response = ResponseBuilder::new().description(description).content("application/problem+json", content);
    if problems.retry_after {
        let seconds = ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1));
        let retry = HeaderBuilder::new().schema(Some(seconds)).description(Some("Seconds to wait before a retry."));
        response = response.header("Retry-After", retry.build());
    }
    response.build()
}

/// The schema of a problem (RFC 9457) the runtime answers.
fn problem_schema() -> RefOr<Schema> {
    let text = |description: &str| ObjectBuilder::new().schema_type(Type::String).description(Some(description));
    let schema = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("An RFC 9457 problem the idempotency runtime answers by itself."))
        .property("type", text(&format!("The problem's type: `{TYPE_PREFIX}<slug>`.")))
        .property("title", text("A short summary of the problem's type."))
        .property("status", ObjectBuilder::new().schema_type(Type::Integer).description(Some("The status code.")))
        .property("detail", text("What happened, and what to do."))
        .required("type")
        .required("title")
        .required("status")
        .required("detail");
    RefOr::T(Schema::Object(schema.build()))
}
