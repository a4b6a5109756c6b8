//! The OpenAPI document of an application: every `#[idempotent]` operation
//! documented by `openapi::Idempotency`, on actix-web and axum alike.

use idem_runtime::openapi::{Idempotency, PROBLEM_SCHEMA};
use serde_json::Value;
use utoipa::OpenApi;

mod actix_routes {
    use actix_web::{HttpResponse, post};
    use idem_runtime::idempotent;

    /// Creates an order.
    #[idempotent(ttl = "24h")]
    #[utoipa::path(post, path = "/orders", responses((status = 201, description = "Created")))]
    #[post("/orders")]
    pub async fn create_order(body: String) -> HttpResponse {
        HttpResponse::Created().body(body)
    }

    /// A provider's event, by its id; its own 400 for a bad signature.
    #[idempotent(key = "json:/id", scope = "global")]
    #[utoipa::path(
        post,
        path = "/webhooks",
        operation_id = "receive_event",
        responses((status = 200, description = "Received"), (status = 400, description = "Bad signature"))
    )]
    #[post("/webhooks")]
    pub async fn webhook(body: String) -> HttpResponse {
        HttpResponse::Ok().body(body)
    }

    /// Not idempotent.
    #[utoipa::path(post, path = "/ping", responses((status = 200, description = "Pong")))]
    #[post("/ping")]
    pub async fn ping() -> HttpResponse {
        HttpResponse::Ok().finish()
    }
}

mod axum_routes {
    use idem_runtime::axum::idempotent;

    /// Pays an order.
    #[idempotent(scope = "route", required = false, header = "X-Request-Key")]
    #[utoipa::path(post, path = "/orders/{id}/payments", params(("id" = String, Path)), responses((status = 201, description = "Paid")))]
    pub async fn pay(axum::extract::Path(id): axum::extract::Path<String>) -> String {
        id
    }
}

#[derive(OpenApi)]
#[openapi(
    paths(actix_routes::create_order, actix_routes::webhook, actix_routes::ping, axum_routes::pay),
    modifiers(&Idempotency)
)]
struct Api;

fn document() -> Value {
    serde_json::to_value(Api::openapi()).expect("a document")
}

/// The problem statuses an operation of `scope` documents.
fn problems(operation: &Value) -> Vec<String> {
    let responses = operation["responses"].as_object().expect("responses");
    responses
        .iter()
        .filter(|(_, response)| response["content"]["application/problem+json"].is_object())
        .map(|(status, _)| status.clone())
        .collect()
}

#[test]
fn an_idempotent_operation_documents_its_key_its_replays_and_its_problems() {
    let document = document();
    let operation = &document["paths"]["/orders"]["post"];
    let key = operation["parameters"].as_array().expect("parameters").iter().find(|p| p["name"] == "Idempotency-Key");
    let key = key.unwrap_or_else(|| panic!("the key's header: {operation}"));
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], true);
    assert_eq!(key["schema"]["maxLength"], 257, "255 characters, quoted");
    assert_eq!(problems(operation), ["400", "401", "409", "413", "415", "422", "503"], "{operation}");
    let reused = &operation["responses"]["422"];
    assert!(reused["description"].as_str().unwrap().contains("urn:idem:problem:key-reused"), "{reused}");
    let schema = &reused["content"]["application/problem+json"]["schema"]["$ref"];
    assert_eq!(schema, &format!("#/components/schemas/{PROBLEM_SCHEMA}"));
    for status in ["409", "503"] {
        assert!(operation["responses"][status]["headers"]["Retry-After"].is_object(), "{status}: {operation}");
    }
    let terms = &operation["x-idempotency"];
    assert_eq!((terms["ttl"].as_str(), terms["lock_ttl"].as_str()), (Some("1d"), Some("30s")), "{terms}");
    assert_eq!(terms["in_flight"], "reject");
    let created = &operation["responses"]["201"];
    assert_eq!(created["headers"]["Idempotent-Replayed"]["schema"]["enum"][0], "true", "{created}");
    assert!(document["components"]["schemas"][PROBLEM_SCHEMA]["properties"]["type"].is_object());
}

#[test]
fn a_natural_key_has_no_header_and_the_applications_own_answers_stay() {
    let document = document();
    let operation = &document["paths"]["/webhooks"]["post"];
    assert_eq!(operation["operationId"], "receive_event");
    assert_eq!(operation["x-idempotency"]["key"]["pointer"], "/id", "the terms stay: {operation}");
    assert_eq!(operation["x-idempotency"]["scope"], "global");
    assert!(operation["parameters"].as_array().is_none_or(Vec::is_empty), "no key header: {operation}");
    let theirs = operation["responses"]["400"]["description"].as_str().unwrap();
    assert!(theirs.starts_with("Bad signature"), "{theirs}");
    assert!(theirs.contains("urn:idem:problem:invalid-key"), "{theirs}");
    assert!(!problems(operation).contains(&"401".to_owned()), "no subject under scope = \"global\"");
}

#[test]
fn an_axum_operation_is_documented_the_same_way() {
    let document = document();
    let operation = &document["paths"]["/orders/{id}/payments"]["post"];
    let parameters = operation["parameters"].as_array().expect("parameters");
    let key = parameters.iter().find(|p| p["name"] == "X-Request-Key").unwrap_or_else(|| panic!("{operation}"));
    assert_eq!(key["required"], false, "required = false");
    assert!(parameters.iter().any(|p| p["name"] == "id"), "the path's own parameter stays");
    assert!(problems(operation).contains(&"422".to_owned()), "{operation}");
}

#[test]
fn other_operations_are_left_as_they_are() {
    let document = document();
    let operation = &document["paths"]["/ping"]["post"];
    assert!(problems(operation).is_empty(), "{operation}");
    assert!(operation["responses"]["200"]["headers"].as_object().is_none_or(|h| h.is_empty()), "{operation}");
}
