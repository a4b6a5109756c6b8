//! `POST /webhooks/provider` (see `webhooks.rs` of the crate).

use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;
use serde_json::json;

use super::State;
use super::verified::Verified;
use crate::error::ApiError;
use crate::webhooks::{Event, record};

/// Records what the event reports.
#[idempotent(key = "json:/id", scope = "global", in_flight = "wait", wait = "10s")]
#[post("/webhooks/provider")]
pub(super) async fn provider_event(event: Verified<Event>, state: State) -> Result<HttpResponse, ApiError> {
    record(&event.0, &state).await?;
    Ok(HttpResponse::Ok().json(json!({ "received": true })))
}
