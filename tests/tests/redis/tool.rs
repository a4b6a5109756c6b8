//! The operator's tool, `idem` (§14), on the shared Redis server and on the
//! shared Redis Cluster: listing, inspecting, releasing and resolving
//! records, fenced writes, and its exit statuses.

use std::sync::Arc;

use idem_runtime::store::Operable;
use idem_tests::backend::{redis_cluster_store, redis_store, url};
use idem_tests::tool_checks::{self, Tool};

/// A store on the shared Redis server, and the tool pointed at it.
async fn server(test: &str) -> Option<(Arc<dyn Operable>, Tool)> {
    let store = redis_store(test).await?;
    Some((Arc::new(store), Tool::on(&url("IDEM_REDIS_URL", test)?)))
}

/// A store on the shared Redis Cluster, and the tool pointed at it.
async fn cluster(test: &str) -> Option<(Arc<dyn Operable>, Tool)> {
    let store = redis_cluster_store(test).await?;
    Some((Arc::new(store), Tool::on(&url("IDEM_REDIS_CLUSTER_URL", test)?)))
}

/// The checks of `tool_checks`, on the store and tool `$open` gives.
macro_rules! tool_tests {
    ($open:path, $unreachable:literal) => {
        #[tokio::test]
        async fn listing_and_inspecting_show_each_record() {
            let Some((store, tool)) = $open(module_path!()).await else { return };
            tool_checks::listing_and_inspecting_show_each_record(store, &tool).await;
        }

        #[tokio::test]
        async fn release_and_resolve_settle_held_executions() {
            let Some((store, tool)) = $open(module_path!()).await else { return };
            tool_checks::release_and_resolve_settle_held_executions(store, &tool).await;
        }

        #[tokio::test]
        async fn a_record_that_changed_is_not_settled() {
            let Some((store, tool)) = $open(module_path!()).await else { return };
            tool_checks::a_record_that_changed_is_not_settled(store, &tool).await;
        }

        #[tokio::test]
        async fn sealed_records_open_only_with_the_keys() {
            let Some((store, tool)) = $open(module_path!()).await else { return };
            tool_checks::sealed_records_open_only_with_the_keys(store, &tool).await;
        }

        #[tokio::test]
        async fn usage_errors_exit_2() {
            let Some((_, tool)) = $open(module_path!()).await else { return };
            tool_checks::usage_errors_exit_2(&tool).await;
        }

        #[tokio::test]
        async fn an_unreachable_store_exits_2_without_its_password() {
            tool_checks::an_unreachable_store_exits_2_without_its_password($unreachable).await;
        }
    };
}

mod server {
    use super::*;

    tool_tests!(server, "redis://:hunter2@127.0.0.1:{port}/");
}

mod cluster {
    use super::*;

    tool_tests!(cluster, "redis-cluster://:hunter2@127.0.0.1:{port}");
}
