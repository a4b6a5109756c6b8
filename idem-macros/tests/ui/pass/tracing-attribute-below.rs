//! Tracing attributes below `#[idempotent]` instrument the user's handler,
//! not the wrapper: `#[fastrace::trace]` (a last segment shared with
//! actix-web's `#[trace("/path")]`, which is not a route macro for that) with
//! properties read from the handler's own arguments, and
//! `#[tracing::instrument]`. Runs once, then replays: each span is recorded
//! once, for the execution, never for the replay.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, post, web};
use fastrace::collector::{Config, Reporter, SpanContext, SpanRecord};
use fastrace::prelude::Span;
use idem_runtime::idempotent;

/// Reads an order, traced with its id.
#[idempotent(scope = "route")]
#[fastrace::trace(properties = { "order_id": "{id}" })]
#[post("/orders/{id}")]
async fn traced(id: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().body(id.into_inner())
}

/// The same with `tracing`.
#[idempotent(scope = "route")]
#[tracing::instrument(skip(body))]
#[post("/instrumented")]
async fn instrumented(body: String) -> HttpResponse {
    HttpResponse::Ok().body(body)
}

/// Keeps what fastrace reports.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanRecord>>>);

impl Reporter for Collected {
    fn report(&mut self, spans: Vec<SpanRecord>) {
        self.0.lock().unwrap().extend(spans);
    }
}

/// Counts the `tracing` spans named `instrumented`.
struct Counting(Arc<AtomicUsize>);

impl tracing::Subscriber for Counting {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        if span.metadata().name() == "instrumented" {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn main() {
    let collected = Collected::default();
    fastrace::set_reporter(collected.clone(), Config::default());
    {
        let root = Span::root("request", SpanContext::random());
        let _parent = root.set_local_parent();
        replay::execute_then_replay(|config| {
            config.service(traced);
        }, "/orders/o-7", "{}");
    }
    fastrace::flush();
    let spans = collected.0.lock().unwrap();
    let recorded: Vec<_> = spans.iter().filter(|span| span.name.contains("::traced")).collect();
    assert_eq!(recorded.len(), 1, "one span, for the execution only: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    assert!(recorded[0].properties.iter().any(|(k, v)| k == "order_id" && v == "o-7"), "{:?}", recorded[0].properties);

    let instrumented_spans = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::with_default(Counting(instrumented_spans.clone()), || {
        replay::execute_then_replay(|config| {
            config.service(instrumented);
        }, "/instrumented", "{}");
    });
    assert_eq!(instrumented_spans.load(Ordering::SeqCst), 1, "one span, for the execution only");
}
