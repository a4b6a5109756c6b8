//! Lease renewals from the lease keeper's own runtime: they go through a
//! pool of their own, created on that runtime, so they keep a lease alive
//! while the runtime that built the store (an application worker, blocked
//! by a handler) does not run at all. Through the application's pool they
//! would wait for that runtime, whose reactor drives those connections.

use std::time::{Duration, Instant};

use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, FencingToken, Renewal, Store};
use idem_tests::backend::postgres_store;

/// Long enough that opening the renewal pool's first connection on a busy
/// machine stays well within it; a renewal stuck behind the stalled
/// runtime waits for the acquire timeout (3 s) instead.
const LEASE: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(60);

#[test]
fn keeper_renewals_do_not_wait_for_a_stalled_application_runtime() {
    let test = "postgres keeper_renewals_do_not_wait_for_a_stalled_application_runtime";
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", test) else {
        return;
    };
    let app = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // One connection, opened on `app`: all the application's pool has.
    let store = app.block_on(postgres_store(&url, 1));
    let (key, request) = (fresh_key(), fingerprint("a long handler"));
    let token = app.block_on(async {
        match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
            Claim::Acquired { token, .. } => token,
            other => panic!("expected the key to be acquired, got {other:?}"),
        }
    });
    // From now on nothing drives `app`, as if its only thread were blocked.
    let keeper = {
        let renewals =
            [Renewal { key: key.clone(), token, lease: LEASE }, Renewal { key: fresh_key(), token, lease: LEASE }];
        let store = store.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let until = Instant::now() + 3 * LEASE;
                while Instant::now() < until {
                    let sent = Instant::now();
                    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held, Fence::Lost]);
                    assert!(sent.elapsed() < LEASE / 2, "a renewal took {:?}", sent.elapsed());
                    tokio::time::sleep(LEASE / 4).await;
                }
            });
        })
    };
    keeper.join().expect("the keeper's renewals");
    app.block_on(async {
        match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
            Claim::InFlight { retry_after } => assert!(!retry_after.is_zero()),
            other => panic!("the lease should have been kept alive, got {other:?}"),
        }
        assert_eq!(store.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
        let forged = [Renewal { key: key.clone(), token: FencingToken::generate(), lease: LEASE }];
        assert_eq!(store.renew_many(&forged).await.unwrap(), [Fence::Lost]);
    });
}
