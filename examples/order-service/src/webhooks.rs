//! `POST /webhooks/provider`: the payment provider's events, delivered at
//! least once. The signature is checked first (an extractor, before the
//! claim); the event id in the body is the idempotency key, so each event
//! counts once however often it is redelivered.

use serde::Deserialize;

use crate::app::AppState;
use crate::error::ApiError;

/// One provider event: `{"id": "evt_..", "type": "charge.refunded",
/// "data": {"charge_id": ".."}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct Event {
    /// The provider's event id, the same in every delivery.
    pub(crate) id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// The event's object.
    #[serde(default)]
    pub(crate) data: EventData,
}

/// The object an event is about.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventData {
    /// The charge, for charge events.
    pub(crate) charge_id: Option<String>,
}

/// Records what the event reports; other event types are acknowledged and
/// ignored, as a provider expects.
pub(crate) async fn record(event: &Event, state: &AppState) -> Result<(), ApiError> {
    if event.kind == "charge.refunded" {
        let Some(charge_id) = event.data.charge_id.as_deref() else {
            return Err(ApiError::Invalid("a charge.refunded event needs data.charge_id".to_owned()));
        };
        state.repo.record_refund(&event.id, charge_id).await?;
    }
    Ok(())
}

/// Checks a delivery's signature and parses its body, before anything else
/// reads it: under `#[idempotent]` extractors run before the key is
/// claimed, so a forged request with a real event id is refused before it
/// can touch that id, and the genuine event still runs.
pub(crate) fn verified<T: serde::de::DeserializeOwned>(
    state: &AppState,
    header: Option<&[u8]>,
    body: &[u8],
) -> Result<T, ApiError> {
    state.secret.verify(header, body, std::time::SystemTime::now())?;
    serde_json::from_slice(body).map_err(|error| ApiError::Invalid(error.to_string()))
}
