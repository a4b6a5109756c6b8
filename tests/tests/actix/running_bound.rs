//! Executions running at once are bounded (`Idem::max_running`): 5 000
//! requests, each followed by a TCP reset, leave their executions running
//! by design (a client that hangs up never cancels a charge half way), but
//! never more than the bound; past it a request is answered 503
//! `overloaded` with `Retry-After` before its claim, so nothing is consumed
//! and its retry runs once executions end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, post, web};
use idem_runtime::{Idem, MemoryStore, idempotent};
use idem_tests::http::{fresh_key, post_with};
use idem_tests::resets::post_then_reset;
use idem_tests::server::TestServer;

/// Handlers running now, and the most that ever ran at once.
#[derive(Default)]
struct Running {
    now: AtomicUsize,
    most: AtomicUsize,
    total: AtomicUsize,
}

#[idempotent(scope = "route")]
#[post("/slow")]
async fn slow(running: web::Data<Running>) -> HttpResponse {
    let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
    running.most.fetch_max(now, Ordering::SeqCst);
    running.total.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    running.now.fetch_sub(1, Ordering::SeqCst);
    HttpResponse::Created().finish()
}

const BOUND: usize = 64;
const REQUESTS: usize = 5_000;
const CLIENTS: usize = 8;

/// The process's resident memory, in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kib| kib * 1024)
}

#[actix_web::test]
async fn requests_reset_by_their_clients_never_run_past_the_bound() {
    let running = web::Data::new(Running::default());
    let shared = running.clone();
    let idem = Idem::new(MemoryStore::new()).max_running(BOUND);
    let watched = idem.clone();
    let server = TestServer::start(idem, move |config| {
        config.app_data(shared.clone()).service(slow);
    });
    let host = server.url.trim_start_matches("http://").to_owned();
    // The server runs (its workers start on this thread's first await).
    let _ = post_with(&server.at("/nothing-here"), &[], "").await;
    let before = resident();

    // Watches the count of running executions while the storm lasts.
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let (mut most, mut memory) = (0, 0);
            while !done.load(Ordering::SeqCst) {
                most = most.max(watched.running());
                memory = memory.max(resident());
                std::thread::sleep(Duration::from_millis(5));
            }
            (most, memory)
        })
    };
    let storm: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let host = host.clone();
            std::thread::spawn(move || {
                for _ in 0..REQUESTS / CLIENTS {
                    let key = fresh_key();
                    post_then_reset(&host, "/slow", &[("idempotency-key", &key)], "{}", Duration::ZERO);
                }
            })
        })
        .collect();
    let started = Instant::now();
    // Joined off this thread, which runs the server's tasks too.
    actix_web::rt::task::spawn_blocking(move || {
        for client in storm {
            client.join().expect("a storm client");
        }
    })
    .await
    .expect("the storm");
    let stormed = started.elapsed();

    // Right after the storm, the bound is full: a request is refused
    // before its claim, and its key stays free.
    let key = fresh_key();
    let refused = post_with(&server.at("/slow"), &[("idempotency-key", &key)], "{}").await;
    let problem = refused.assert_problem(503);
    assert_eq!(problem["type"], "urn:idem:problem:overloaded", "{problem}");
    assert!(refused.retry_after.is_some(), "{refused:?}");

    // Once the executions end, the same request runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let served = loop {
        let reply = post_with(&server.at("/slow"), &[("idempotency-key", &key)], "{}").await;
        if reply.status.as_u16() != 503 || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(served.status.as_u16(), 201, "{served:?}");
    done.store(true, Ordering::SeqCst);
    let (most_counted, most_memory) =
        actix_web::rt::task::spawn_blocking(move || watch.join().expect("the watch")).await.expect("the watch");
    let (most, total) = (running.most.load(Ordering::SeqCst), running.total.load(Ordering::SeqCst));
    let grown = most_memory.saturating_sub(before);
    eprintln!(
        "{REQUESTS} requests reset by their clients in {stormed:?}: {total} handlers ran, at most {most} at once \
         ({most_counted} executions counted at once); resident memory grew by {} KiB at most",
        grown / 1024
    );
    assert!(most <= BOUND, "{most} handlers ran at once, over the bound of {BOUND}");
    assert!(most_counted <= BOUND, "{most_counted} executions counted at once, over the bound of {BOUND}");
    assert!(total >= BOUND, "the storm filled the bound ({total} handlers ran)");
    assert!(grown < 128 << 20, "resident memory grew by {grown} bytes");
    server.stop().await;
}
