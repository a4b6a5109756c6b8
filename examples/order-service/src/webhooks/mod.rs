//! `POST /webhooks/provider`: the payment provider's events, delivered at
//! least once. The signature is checked first (an extractor, before the
//! claim); the event id in the body is the idempotency key, so each event
//! counts once however often it is redelivered.

mod verified;

use actix_web::{HttpResponse, post, web};
use idem_runtime::idempotent;
use serde::Deserialize;
use serde_json::json;

use self::verified::Verified;
use crate::error::ApiError;
use crate::routes::AppState;

/// One provider event: `{"id": "evt_..", "type": "charge.refunded",
/// "data": {"charge_id": ".."}}`.
#[derive(Debug, Deserialize)]
pub struct Event {
    /// The provider's event id, the same in every delivery.
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: String,
    /// The event's object.
    #[serde(default)]
    pub data: EventData,
}

/// The object an event is about.
#[derive(Debug, Default, Deserialize)]
pub struct EventData {
    /// The charge, for charge events.
    pub charge_id: Option<String>,
}

/// Records what the event reports; other event types are acknowledged and
/// ignored, as a provider expects.
#[idempotent(key = "json:/id", scope = "global", in_flight = "wait", wait = "10s")]
#[post("/webhooks/provider")]
pub async fn provider_event(event: Verified<Event>, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let Verified(event) = event;
    if event.kind == "charge.refunded" {
        let Some(charge_id) = event.data.charge_id.as_deref() else {
            return Err(ApiError::Invalid("a charge.refunded event needs data.charge_id".to_owned()));
        };
        state.repo.record_refund(&event.id, charge_id).await?;
    }
    Ok(HttpResponse::Ok().json(json!({ "received": true })))
}
