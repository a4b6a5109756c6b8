//! The route of a request, as its storage key, its record and its metric
//! labels name it: the pattern of the route that matched, never the raw
//! path (keys and labels must not grow with what clients send). Each
//! framework finds the pattern its own way (`actix/route.rs`,
//! `axum/route.rs`); its names are made here, once per route, method and
//! worker thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use metrics::Label;

use crate::observe::{self, Outcome};

/// The route of a request that matched no pattern (a default service, a
/// fallback).
pub(crate) const UNMATCHED_ROUTE: &str = "<unmatched>";

/// Most routes whose names are kept (per worker thread, and their metric
/// labels for the process): routes are patterns, so a service has far
/// fewer; past it a request makes its route's names for itself.
const KEPT_ROUTES: usize = 1024;

/// The methods whose routes are kept: those of RFC 9110 and `PATCH`.
/// Others are the client's to make up on a route without a method guard,
/// and must never take their room.
const STANDARD_METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/// A request's route as keys, records, spans and metrics name it, made once
/// per route and worker thread and shared by its requests.
#[derive(Clone)]
pub(crate) struct Route(Arc<Names>);

struct Names {
    /// The route.
    route: Arc<str>,
    /// `METHOD route`, as records keep it for operators.
    claimed: Arc<str>,
    /// The labels of its requests' count, by outcome (see `Outcome::ALL`);
    /// `None` past [`KEPT_ROUTES`].
    labels: Option<&'static OutcomeLabels>,
}

/// The labels of a route's count, one pair per outcome.
type OutcomeLabels = [[Label; 2]; Outcome::ALL.len()];

/// Routes as a worker keeps them: by route, then method.
type KeptRoutes = HashMap<Box<str>, Vec<(&'static str, Route)>>;

thread_local! {
    /// This worker's routes, by route and method.
    static ROUTES: RefCell<KeptRoutes> = RefCell::default();
}

/// The metric labels of every route, made once for the process (leaked:
/// at most [`KEPT_ROUTES`] of them).
static LABELS: LazyLock<Mutex<HashMap<Box<str>, &'static OutcomeLabels>>> = LazyLock::new(Mutex::default);

impl Route {
    /// The route `route` of a request with `method`.
    pub(crate) fn named(route: &str, method: &str) -> Self {
        let kept = ROUTES.with_borrow(|routes| {
            routes.get(route)?.iter().find(|(kept, _)| *kept == method).map(|(_, route)| route.clone())
        });
        if let Some(kept) = kept {
            return kept;
        }
        let made = Self::make(route, method);
        if let Some(&standard) = STANDARD_METHODS.iter().find(|&&standard| standard == method) {
            ROUTES.with_borrow_mut(|routes| {
                let room = match routes.get(route) {
                    Some(_) => true,
                    None => routes.len() < KEPT_ROUTES,
                };
                if room {
                    routes.entry(route.into()).or_default().push((standard, made.clone()));
                }
            });
        }
        made
    }

    fn make(route: &str, method: &str) -> Self {
        let labels = {
            let mut labels = LABELS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match labels.get(route) {
                Some(kept) => Some(*kept),
                None if labels.len() < KEPT_ROUTES => {
                    let name: &'static str = Box::leak(route.into());
                    let made: &'static OutcomeLabels = Box::leak(Box::new(Outcome::ALL.map(|outcome| {
                        [Label::from_static_parts("outcome", outcome.as_str()), Label::from_static_parts("route", name)]
                    })));
                    labels.insert(route.into(), made);
                    Some(made)
                }
                None => None,
            }
        };
        Self(Arc::new(Names { route: route.into(), claimed: format!("{method} {route}").into(), labels }))
    }

    /// `METHOD route`, as records keep it.
    pub(crate) fn claimed(&self) -> Arc<str> {
        Arc::clone(&self.0.claimed)
    }

    /// Counts one request of this route that ended with `outcome`, and
    /// records it on the current span.
    pub(crate) fn count(&self, outcome: Outcome) {
        match self.0.labels {
            Some(labels) => observe::count_labelled(&labels[outcome as usize], outcome),
            None => observe::count(&self.0.route, outcome),
        }
    }

    /// Whether `self` and `other` are one kept route.
    #[cfg(test)]
    pub(crate) fn is(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for Route {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0.route
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_index_their_labels() {
        for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
    }

    #[test]
    fn a_route_is_named_once_per_standard_method() {
        let post = Route::named("/names/{id}", "POST");
        assert!(post.is(&Route::named("/names/{id}", "POST")), "kept for the next request");
        assert_eq!(&*post.claimed(), "POST /names/{id}");
        assert!(!post.is(&Route::named("/names/{id}", "PUT")));
        // Methods a client makes up are named, but not kept.
        for n in 0..20 {
            let made_up = format!("M{n}");
            assert_eq!(&*Route::named("/names/{id}", &made_up).claimed(), format!("M{n} /names/{{id}}"));
        }
        let kept = ROUTES.with_borrow(|routes| routes.get("/names/{id}").map(Vec::len));
        assert_eq!(kept, Some(2), "POST and PUT");
    }
}
