//! The runtime's own extractors in an axum handler: the execution context,
//! and the transaction of the transactional mode. They leave their slots
//! in the request's [`Slots`], which the runtime keeps.

use axum::extract::FromRequestParts;
use http::request::Parts;

use super::request::Slots;
use crate::problem::ProblemError;
use crate::web::{Annotated, ExecutionContext, PendingContext, not_in_a_keyed_request};

impl<S: Send + Sync> FromRequestParts<S> for ExecutionContext {
    type Rejection = ProblemError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ProblemError> {
        let annotated = parts.extensions.get::<Annotated>().copied();
        let (Some(Annotated::Keyed), Some(slots)) = (annotated, parts.extensions.get::<Slots>()) else {
            return Err(not_in_a_keyed_request(annotated));
        };
        // One slot per request, shared by every extraction of the context
        // (a custom extractor may take one too).
        let mut left = slots.left();
        Ok(match &left.context {
            Some(pending) => pending.context(),
            None => {
                let (pending, context) = PendingContext::new();
                left.context = Some(pending);
                context
            }
        })
    }
}

#[cfg(feature = "postgres")]
impl<S: Send + Sync> FromRequestParts<S> for crate::web::Tx {
    type Rejection = ProblemError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ProblemError> {
        if parts.extensions.get::<super::request::AfterTheClaim>().is_some() {
            return Err(ProblemError::new(
                crate::problem::ProblemKind::NotConfigured,
                "idem_runtime::Tx needs #[idempotent] on the handler: under IdempotentLayer the handler's \
                 extractors run after the claim, too late to lend it the transaction",
            ));
        }
        let annotated = parts.extensions.get::<Annotated>().copied();
        let config = parts.extensions.get::<crate::web::Idem>().map(|idem| &*idem.inner);
        let slots = parts.extensions.get::<Slots>();
        let pending = slots.is_some_and(|slots| slots.left().tx.is_some());
        let (tx, pending) = crate::web::tx_for(annotated.filter(|_| slots.is_some()), config, pending)?;
        if let Some(slots) = slots {
            slots.left().tx = Some(pending);
        }
        Ok(tx)
    }
}
