//! The runtime's own extractors in an actix-web handler: the execution
//! context, and the transaction of the transactional mode.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};

use super::request::annotated;
use crate::problem::ProblemError;
use crate::web::{Annotated, ExecutionContext, PendingContext, not_in_a_keyed_request};

impl FromRequest for ExecutionContext {
    type Error = ProblemError;
    type Future = Ready<Result<Self, ProblemError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(match annotated(req) {
            Some(Annotated::Keyed) => {
                // One slot per request, shared by every extraction of the
                // context (a custom extractor may take one too).
                let mut extensions = req.extensions_mut();
                Ok(match extensions.get::<PendingContext>() {
                    Some(pending) => pending.context(),
                    None => {
                        let (pending, context) = PendingContext::new();
                        extensions.insert(pending);
                        context
                    }
                })
            }
            annotated => Err(not_in_a_keyed_request(annotated)),
        })
    }
}

#[cfg(feature = "postgres")]
impl FromRequest for crate::web::Tx {
    type Error = ProblemError;
    type Future = Ready<Result<Self, ProblemError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let pending = req.extensions().contains::<crate::web::PendingTx>();
        let made = crate::web::tx_for(annotated(req), super::request::config_of(req).map(|config| &**config), pending);
        ready(made.map(|(tx, pending)| {
            req.extensions_mut().insert(pending);
            tx
        }))
    }
}
