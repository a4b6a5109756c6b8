//! What `#[idempotent]` needs of an axum handler, which axum's own
//! `Handler` does not give: its extractors run apart from its call, so that
//! the claim comes between them (§4.5 of the behaviour contract: an
//! extractor that refuses the request leaves no trace, and a webhook's
//! signature check runs before its event id is claimed).
//!
//! [`Extract`] is a handler's argument list as a tuple (every argument but
//! the last extracted from the request's parts, the last from the whole
//! request, as axum does); [`Call`] is the handler called with that tuple.

use std::future::Future;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};

/// A handler's arguments, extracted from a request in axum's order.
#[doc(hidden)]
pub trait Extract<S, M>: Sized + Send + 'static {
    /// The arguments, or the first extractor's refusal as its response.
    fn extract(req: Request, state: &S) -> impl Future<Output = Result<Self, Response>> + Send;
}

/// A handler, called with its arguments as a tuple.
#[doc(hidden)]
pub trait Call<Args>: Clone + Send + Sync + 'static {
    /// Calls the handler; its output as a response.
    fn call(self, args: Args) -> impl Future<Output = Response> + Send;
}

impl<S: Send + Sync> Extract<S, ()> for () {
    async fn extract(_: Request, _: &S) -> Result<Self, Response> {
        Ok(())
    }
}

impl<F, Fut> Call<()> for F
where
    F: FnOnce() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output: IntoResponse> + Send,
{
    async fn call(self, (): ()) -> Response {
        self().await.into_response()
    }
}

/// [`Extract`] and [`Call`] for handlers of one arity: the parts'
/// extractors, then the last one.
macro_rules! arity {
    ($($part:ident),*; $last:ident) => {
        impl<S, M, $($part,)* $last> Extract<S, M> for ($($part,)* $last,)
        where
            S: Send + Sync,
            M: 'static,
            $($part: FromRequestParts<S> + Send + 'static,)*
            $last: FromRequest<S, M> + Send + 'static,
        {
            #[allow(non_snake_case, reason = "one binding per type parameter, named after it")]
            async fn extract(req: Request, state: &S) -> Result<Self, Response> {
                #[allow(unused_mut, reason = "a handler of one argument extracts none from the parts")]
                let (mut parts, body) = req.into_parts();
                $(
                    let $part = $part::from_request_parts(&mut parts, state).await.map_err(IntoResponse::into_response)?;
                )*
                let req = Request::from_parts(parts, body);
                let $last = $last::from_request(req, state).await.map_err(IntoResponse::into_response)?;
                Ok(($($part,)* $last,))
            }
        }

        impl<F, Fut, $($part,)* $last> Call<($($part,)* $last,)> for F
        where
            F: FnOnce($($part,)* $last) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future<Output: IntoResponse> + Send,
            $($part: Send,)*
            $last: Send,
        {
            #[allow(non_snake_case, reason = "one binding per type parameter, named after it")]
            async fn call(self, ($($part,)* $last,): ($($part,)* $last,)) -> Response {
                self($($part,)* $last).await.into_response()
            }
        }
    };
}

arity!(; T1);
arity!(T1; T2);
arity!(T1, T2; T3);
arity!(T1, T2, T3; T4);
arity!(T1, T2, T3, T4; T5);
arity!(T1, T2, T3, T4, T5; T6);
arity!(T1, T2, T3, T4, T5, T6; T7);
arity!(T1, T2, T3, T4, T5, T6, T7; T8);
arity!(T1, T2, T3, T4, T5, T6, T7, T8; T9);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9; T10);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10; T11);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11; T12);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12; T13);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13; T14);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14; T15);
arity!(T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14, T15; T16);
