//! Operations without a framework (`idem_runtime::once`) on any store: one
//! run per key however many calls race, from two values as two processes
//! would hold them; the first output replayed; another input refused; a run
//! that stopped half way taken over with the same derived keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::once::{Once, OnceError, Ran};
use idem_runtime::store::Store;

use crate::counter::Counter;
use crate::http::fresh_key;

/// Every check on `store`, in a namespace of this run.
pub async fn assert_once(store: Arc<dyn Store>) {
    let namespace = format!("charges-{}", fresh_key());
    // Two values over one store: two processes running the same operations.
    let here = Once::from_arc(Arc::clone(&store), &namespace).wait(Duration::from_secs(20));
    let there = Once::from_arc(Arc::clone(&store), &namespace).wait(Duration::from_secs(20));
    let runs = Arc::new(Counter::default());
    let key = format!("order-{}", fresh_key());
    let calls = (0..64).map(|n| {
        let once = if n % 2 == 0 { here.clone() } else { there.clone() };
        let (runs, key) = (Arc::clone(&runs), key.clone());
        tokio::spawn(async move {
            once.run(&key, &("cus_1", 1500), |_| async move {
                let run = runs.next();
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, std::io::Error>(format!("ch_{run}"))
            })
            .await
        })
    });
    let mut executed = 0;
    for call in futures_util::future::join_all(calls).await {
        match call.expect("a call's task").expect("an output") {
            Ran::Executed(charge) => {
                executed += 1;
                assert_eq!(charge, "ch_1");
            }
            Ran::Replayed(charge) => assert_eq!(charge, "ch_1", "every call gets the one run's output"),
        }
    }
    assert_eq!((executed, runs.get()), (1, 1), "64 calls of one key from two processes, one run");

    let again = there.run(&key, &("cus_1", 1500), |_| async { Ok::<_, std::io::Error>("ch_x".to_owned()) }).await;
    assert_eq!(again.expect("a replay"), Ran::Replayed("ch_1".to_owned()));
    let other = here.run(&key, &("cus_1", 2500), |_| async { Ok::<_, std::io::Error>("ch_y".to_owned()) }).await;
    assert!(matches!(other, Err(OnceError::Mismatch)), "another input under the key: {other:?}");
    assert_eq!(runs.get(), 1);

    assert_stopped_run_is_taken_over(store, &namespace).await;
}

/// A run whose future is dropped half way: a later call takes it over once
/// the lease lapsed and the holder's grace passed, with the same derived
/// key for its downstream call.
async fn assert_stopped_run_is_taken_over(store: Arc<dyn Store>, namespace: &str) {
    let once =
        Once::from_arc(store, namespace).lease(Duration::from_millis(900)).store_timeout(Duration::from_millis(300));
    let key = format!("order-{}", fresh_key());
    let derived = Mutex::new(Vec::new());
    let stopped = once.run(&key, &1, |context| {
        derived.lock().unwrap().push(context.derived_key("charge"));
        std::future::pending::<Result<String, std::io::Error>>()
    });
    assert!(tokio::time::timeout(Duration::from_millis(200), stopped).await.is_err());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let taken = loop {
        let ran = once
            .run(&key, &1, |context| {
                derived.lock().unwrap().push(context.derived_key("charge"));
                async { Ok::<_, std::io::Error>("ch_2".to_owned()) }
            })
            .await;
        match ran {
            Err(OnceError::InFlight { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break other,
        }
    };
    assert_eq!(taken.expect("the takeover's output"), Ran::Executed("ch_2".to_owned()));
    let derived = derived.into_inner().unwrap();
    assert_eq!(derived.len(), 2);
    assert_eq!(derived[0], derived[1], "the takeover passes the downstream the first run's key");
}
