use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::backends::MemoryStore;

/// Counts the runs of a work, and answers what it is told.
#[derive(Default)]
struct Runs(AtomicUsize);

impl Runs {
    fn charge(&self, answer: &str) -> impl Future<Output = Result<String, std::io::Error>> + use<> {
        let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        let answer = format!("{answer} (run {run})");
        async move { Ok(answer) }
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

fn once() -> Once {
    Once::new(MemoryStore::new(), "charges")
}

#[tokio::test]
async fn the_same_key_and_input_run_once_and_replay_the_output() {
    let (once, runs) = (once(), Runs::default());
    let first = once.run("k1", &("cus_1", 1500), |_| runs.charge("ch_1")).await.unwrap();
    assert_eq!(first, Ran::Executed("ch_1 (run 1)".to_owned()));
    let again = once.run("k1", &("cus_1", 1500), |_| runs.charge("ch_2")).await.unwrap();
    assert_eq!(again, Ran::Replayed("ch_1 (run 1)".to_owned()));
    assert!(again.is_replayed());
    assert_eq!(runs.count(), 1);
    // Another key is another operation.
    let other = once.run("k2", &("cus_1", 1500), |_| runs.charge("ch_3")).await.unwrap();
    assert_eq!(other.into_inner(), "ch_3 (run 2)");
}

#[tokio::test]
async fn another_input_under_the_key_is_refused_and_nothing_runs() {
    let (once, runs) = (once(), Runs::default());
    let _ = once.run("k1", &1500, |_| runs.charge("ch_1")).await.unwrap();
    let refused = once.run("k1", &2500, |_| runs.charge("ch_2")).await;
    assert!(matches!(refused, Err(OnceError::Mismatch)), "{refused:?}");
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn the_input_is_the_same_in_any_member_order_and_spacing() {
    let (once, runs) = (once(), Runs::default());
    let written: serde_json::Value = serde_json::from_str(r#"{"customer": "c", "amount": 1500}"#).unwrap();
    let rewritten: serde_json::Value = serde_json::from_str(r#"{ "amount" : 1500 , "customer" : "c" }"#).unwrap();
    let _ = once.run("k1", &written, |_| runs.charge("ch_1")).await.unwrap();
    let again = once.run("k1", &rewritten, |_| runs.charge("ch_2")).await.unwrap();
    assert!(again.is_replayed());
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn a_failure_releases_the_key_for_the_same_input_only() {
    let (once, runs) = (once(), Runs::default());
    let failed = once
        .run("k1", &1500, |_| async {
            runs.0.fetch_add(1, Ordering::SeqCst);
            Err::<String, _>(std::io::Error::other("provider unavailable"))
        })
        .await;
    assert!(matches!(failed, Err(OnceError::Failed(_))), "{failed:?}");
    // Nothing happened, by the work's word: the same input runs again.
    let retried = once.run("k1", &1500, |_| runs.charge("ch_1")).await.unwrap();
    assert_eq!(retried, Ran::Executed("ch_1 (run 2)".to_owned()));
    // A released key keeps its input: another one is still refused.
    let _ = once.run("k2", &1, |_| async { Err::<String, _>(std::io::Error::other("no")) }).await;
    let other = once.run("k2", &2, |_| runs.charge("ch_2")).await;
    assert!(matches!(other, Err(OnceError::Mismatch)), "{other:?}");
    assert_eq!(runs.count(), 2);
}

#[tokio::test]
async fn a_call_during_a_run_is_refused_or_waits_for_its_output() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let once = Once::from_arc(Arc::clone(&store), "charges");
    let waiting = Once::from_arc(store, "charges").wait(Duration::from_secs(10));
    let (started, release) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let runs = Runs::default();
    let first = once.run("k1", &1500, |_| async {
        started.notify_one();
        release.notified().await;
        runs.charge("ch_1").await
    });
    let others = async {
        started.notified().await;
        let refused = once.run("k1", &1500, |_| runs.charge("ch_2")).await;
        assert!(matches!(refused, Err(OnceError::InFlight { .. })), "{refused:?}");
        let waited = waiting.run("k1", &1500, |_| runs.charge("ch_3"));
        let let_go = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            release.notify_one();
        };
        tokio::join!(waited, let_go).0
    };
    let (first, waited) = tokio::join!(first, others);
    assert_eq!(first.unwrap(), Ran::Executed("ch_1 (run 1)".to_owned()));
    assert_eq!(waited.unwrap(), Ran::Replayed("ch_1 (run 1)".to_owned()));
    assert_eq!(runs.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_calls_of_one_key_run_the_work_once() {
    let once = Arc::new(once().wait(Duration::from_secs(10)));
    let runs = Arc::new(Runs::default());
    let calls: Vec<_> = (0..64)
        .map(|_| {
            let (once, runs) = (Arc::clone(&once), Arc::clone(&runs));
            tokio::spawn(async move {
                once.run("k1", &1500, |_| async {
                    let charged = runs.charge("ch");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    charged.await
                })
                .await
            })
        })
        .collect();
    let mut executed = 0;
    for call in calls {
        match call.await.unwrap().unwrap() {
            Ran::Executed(output) => {
                executed += 1;
                assert_eq!(output, "ch (run 1)");
            }
            Ran::Replayed(output) => assert_eq!(output, "ch (run 1)"),
        }
    }
    assert_eq!((executed, runs.count()), (1, 1));
}

#[tokio::test]
async fn an_output_of_another_type_is_unreadable_and_nothing_runs() {
    let (once, runs) = (once(), Runs::default());
    let _ = once.run("k1", &1, |_| runs.charge("ch_1")).await.unwrap();
    let read = once.run("k1", &1, |_| async { Ok::<u64, std::io::Error>(7) }).await;
    assert!(matches!(read, Err(OnceError::Unreadable(_))), "{read:?}");
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn an_output_over_the_limit_is_returned_once_and_never_run_again() {
    let (once, runs) = (once().output_limit(8), Runs::default());
    let first = once.run("k1", &1, |_| runs.charge("a long charge id")).await.unwrap();
    assert_eq!(first, Ran::Executed("a long charge id (run 1)".to_owned()));
    let again = once.run("k1", &1, |_| runs.charge("again")).await;
    assert!(matches!(again, Err(OnceError::NotKept)), "{again:?}");
    assert_eq!(runs.count(), 1);
}

/// A run whose future is dropped half way (a crash): the key is taken over
/// once its lease lapsed and its holder's grace passed, with the same
/// derived keys; under `OnLapse::Hold`, held instead.
#[tokio::test]
async fn a_run_that_stopped_half_way_is_taken_over_or_held() {
    for hold in [false, true] {
        let policy = if hold { OnLapse::Hold } else { OnLapse::Takeover };
        let once = once().lease(Duration::from_millis(300)).store_timeout(Duration::from_millis(100)).on_lapse(policy);
        let derived = std::sync::Mutex::new(Vec::new());
        let stopped = once.run("k1", &1, |context| {
            derived.lock().unwrap().push(context.derived_key("charge"));
            std::future::pending::<Result<String, std::io::Error>>()
        });
        assert!(tokio::time::timeout(Duration::from_millis(50), stopped).await.is_err());
        let runs = Runs::default();
        let mut answer = None;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match once
                .run("k1", &1, |context| {
                    assert_eq!(context.attempt(), Attempt::Takeover);
                    derived.lock().unwrap().push(context.derived_key("charge"));
                    runs.charge("ch")
                })
                .await
            {
                // The lapsed holder's grace, then the takeover.
                Err(OnceError::InFlight { .. }) => {}
                other => {
                    answer = Some(other);
                    break;
                }
            }
        }
        let derived = derived.into_inner().unwrap();
        if hold {
            assert!(matches!(answer, Some(Err(OnceError::Held { .. }))), "{answer:?}");
            assert_eq!(runs.count(), 0);
        } else {
            assert!(matches!(answer, Some(Ok(Ran::Executed(_)))), "{answer:?}");
            assert_eq!(derived.len(), 2);
            assert_eq!(derived[0], derived[1], "a takeover derives the keys the first run had");
        }
    }
}

#[tokio::test]
async fn derived_keys_differ_by_key_input_and_label() {
    let once = once();
    let derive = |key: &'static str, input: u64, label: &'static str| {
        let once = once.clone();
        async move {
            once.run(key, &input, |context| async move { Ok::<_, std::io::Error>(context.derived_key(label)) })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let base = derive("k1", 1, "charge").await;
    assert_eq!(base.len(), 64);
    assert_ne!(base, derive("k2", 1, "charge").await);
    assert_ne!(base, derive("k3", 2, "charge").await);
    assert_ne!(base, derive("k4", 1, "refund").await);
}

#[tokio::test]
async fn refusals_before_the_claim_run_nothing() {
    let runs = Runs::default();
    let bad = once().run("", &1, |_| runs.charge("x")).await;
    assert!(matches!(bad, Err(OnceError::InvalidKey(_))), "{bad:?}");
    let slow = once().store_timeout(Duration::from_secs(11)).run("k1", &1, |_| runs.charge("x")).await;
    assert!(matches!(slow, Err(OnceError::Misconfigured { .. })), "{slow:?}");
    let unencodable = std::collections::HashMap::from([((1, 2), 3)]);
    let input = once().run("k1", &unencodable, |_| runs.charge("x")).await;
    assert!(matches!(input, Err(OnceError::Input(_))), "{input:?}");
    let full = once().max_running(1);
    let (started, release) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let holding = full.run("k1", &1, |_| async {
        started.notify_one();
        release.notified().await;
        Ok::<_, std::io::Error>(1)
    });
    let refused = async {
        started.notified().await;
        let refused = full.run("k2", &1, |_| runs.charge("x")).await;
        release.notify_one();
        refused
    };
    let (held, refused) = tokio::join!(holding, refused);
    assert!(held.is_ok());
    assert!(matches!(refused, Err(OnceError::Overloaded)), "{refused:?}");
    assert_eq!(runs.count(), 0);
}

/// Operations and messages never share records, whatever their names.
#[tokio::test]
async fn an_operation_never_meets_a_message_of_the_same_name() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let once = Once::from_arc(Arc::clone(&store), "orders");
    let inbox = crate::inbox::Inbox::from_arc(store, "orders");
    let runs = Runs::default();
    let _ = once.run("evt_1", &(), |_| runs.charge("op")).await.unwrap();
    let delivered = inbox.process("evt_1", |_| runs.charge("message")).await.unwrap();
    assert!(matches!(delivered, crate::inbox::Delivery::Processed(_)), "{delivered:?}");
    assert_eq!(runs.count(), 2);
}
