//! The store conformance suite, run against a real Redis (`IDEM_REDIS_URL`),
//! once over RESP2 (the default) and once over RESP3, whose replies type
//! some values differently (a Lua `false` is a boolean there, not a nil).

use std::sync::Arc;

use idem_runtime::store::{Operable, Store};
use idem_tests::backend::redis_store;

async fn shared_store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(redis_store("redis_conformance").await?))
}

idem_runtime::store::testing::store_conformance_tests!(shared_store);
idem_runtime::store::testing::store_sequence_tests!(shared_store);

/// What operators do on the same server: list, find and settle records.
mod operable {
    use super::*;

    async fn operable_store() -> Option<Arc<dyn Operable>> {
        Some(Arc::new(redis_store("redis_operable_conformance").await?))
    }

    idem_runtime::store::testing::operable_conformance_tests!(operable_store);

    /// With a key prefix holding `SCAN`'s pattern characters, the listing
    /// and the search still see this store's records, and only them.
    mod prefixed {
        use super::*;

        async fn prefixed_store() -> Option<Arc<dyn Operable>> {
            let store = redis_store("redis_operable_conformance_prefixed").await?;
            Some(Arc::new(store.with_key_prefix("idem-test*[op]?:").expect("a prefix without braces")))
        }

        idem_runtime::store::testing::operable_conformance_tests!(prefixed_store);
    }
}

/// The same suite on a RESP3 connection (`?protocol=resp3`).
mod resp3 {
    use std::sync::Arc;

    use idem_runtime::RedisStore;
    use idem_runtime::store::Store;
    use redis::Value;

    /// `IDEM_REDIS_URL` asking for RESP3.
    fn resp3_url(test: &str) -> Option<String> {
        let url = idem_tests::backend::url("IDEM_REDIS_URL", test)?;
        let separator = if url.contains('?') { '&' } else { '?' };
        Some(format!("{url}{separator}protocol=resp3"))
    }

    async fn resp3_store() -> Option<Arc<dyn Store>> {
        let url = resp3_url("redis_conformance_resp3")?;
        let store = RedisStore::connect(&url).await.unwrap_or_else(|e| panic!("connecting over RESP3: {e}"));
        Some(Arc::new(store))
    }

    idem_runtime::store::testing::store_conformance_tests!(resp3_store);

    /// The URL really selects RESP3: a hash comes back as a map, which
    /// RESP2 cannot express.
    #[tokio::test]
    async fn the_url_selects_resp3() {
        let Some(url) = resp3_url("the_url_selects_resp3") else {
            return;
        };
        let mut connection =
            redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.expect("connecting");
        let key = format!("idem-resp3-probe-{}", std::process::id());
        let reply: Value = redis::pipe()
            .cmd("HSET")
            .arg(&key)
            .arg("f")
            .arg("v")
            .ignore()
            .cmd("HGETALL")
            .arg(&key)
            .cmd("DEL")
            .arg(&key)
            .ignore()
            .query_async(&mut connection)
            .await
            .expect("HGETALL");
        assert!(matches!(&reply, Value::Array(replies) if matches!(replies[..], [Value::Map(_)])), "{reply:?}");
    }
}
