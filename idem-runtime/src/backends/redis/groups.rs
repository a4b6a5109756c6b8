//! A renewal batch split in groups (a slot's renewals, or a primary's), each
//! sent on its own: what a group answered, and the batch's fences gathered
//! from its groups, so that a group that fails leaves only its own leases
//! unanswered.

use std::future::Future;
use std::time::Duration;

use crate::store::{Fence, StoreError};

/// What one group's pipeline answered.
pub(super) struct Answered {
    /// Each renewal's fence ([`Fence::Unknown`] for the redirected).
    pub(super) fences: Vec<Fence>,
    /// The renewals answered `MOVED` or `ASK`.
    pub(super) redirects: Vec<Redirect>,
    /// The slot map may be out of date (a redirection, `CLUSTERDOWN`).
    pub(super) remap: bool,
}

/// A renewal sent elsewhere.
pub(super) struct Redirect {
    /// Its place in the group.
    pub(super) at: usize,
    /// The node named, host:port.
    pub(super) node: String,
    /// `ASK` (once, after `ASKING`) rather than `MOVED`.
    pub(super) ask: bool,
}

/// `work`, or a timeout error after `budget`.
pub(super) async fn within<T>(
    budget: Duration,
    work: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(budget, work).await.unwrap_or(Err(StoreError::Timeout { store: "redis", after: budget }))
}

/// A batch's fences from its groups' answers: a group that fails (its
/// shard down, or its replicas late) leaves its own leases unanswered,
/// never the others'; the batch fails only when every group does.
pub(super) fn gather(
    batch: usize,
    groups: &[Vec<usize>],
    answered: Vec<Result<Vec<Fence>, StoreError>>,
) -> Result<Vec<Fence>, StoreError> {
    if answered.iter().all(Result::is_err) {
        let error = answered.into_iter().find_map(Result::err);
        return Err(error.unwrap_or(StoreError::Corrupt { store: "redis", message: "no renewal group".into() }));
    }
    let mut fences = vec![Fence::Unknown; batch];
    for (members, answers) in groups.iter().zip(answered) {
        match answers {
            Ok(answers) => {
                for (&i, fence) in members.iter().zip(answers) {
                    fences[i] = fence;
                }
            }
            Err(error) => tracing::warn!(%error, leases = members.len(), "a group of renewals failed"),
        }
    }
    Ok(fences)
}
