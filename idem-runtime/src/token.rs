//! Fencing tokens: proof that an execution still owns its key.

use std::cell::RefCell;
use std::fmt;

/// Tokens drawn per system call.
const BATCH: usize = 32;

/// A thread's batch of random bytes, and what tells whether the process
/// forked since it was drawn.
struct Batch {
    bytes: [u8; BATCH * 16],
    next: usize,
    /// Set when the batch is drawn; `pthread_atfork` behind it, so that
    /// checking costs an atomic load, not a `getpid` system call.
    fork: Option<forkguard::Guard>,
}

thread_local! {
    static BATCH_OF_THREAD: RefCell<Batch> = const { RefCell::new(Batch { bytes: [0; BATCH * 16], next: BATCH, fork: None }) };
}

/// An opaque, unguessable proof of ownership of an in-flight record.
///
/// Random 128 bits, fresh for every successful claim, so a token from an
/// earlier life of a key can never match a later one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FencingToken(u128);

impl FencingToken {
    /// A fresh random token from the operating system's generator, drawn
    /// in batches per thread (one system call for 32 tokens). A batch
    /// is never used by two processes: a thread that finds itself in
    /// another process (after a `fork`) draws a new one first.
    pub fn generate() -> Self {
        BATCH_OF_THREAD.with(|batch| {
            let mut batch = batch.borrow_mut();
            let forked = batch.fork.as_mut().is_none_or(forkguard::Guard::detected_fork);
            if batch.next == BATCH || forked {
                // The OS random source failing is not something a request can recover from.
                getrandom::fill(&mut batch.bytes).expect("the operating system's random source failed");
                batch.next = 0;
                batch.fork.get_or_insert_with(forkguard::new);
            }
            let at = batch.next * 16;
            batch.next += 1;
            let mut token = [0u8; 16];
            token.copy_from_slice(&batch.bytes[at..at + 16]);
            // Used bytes are wiped: a token is never kept where it was drawn.
            batch.bytes[at..at + 16].fill(0);
            Self(u128::from_be_bytes(token))
        })
    }

    /// The token as 16 big-endian bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Rebuilds a token from [`FencingToken::to_bytes`].
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }

    /// The token as 32 lower-case hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Parses [`FencingToken::to_hex`].
    pub fn from_hex(text: &str) -> Option<Self> {
        (text.len() == 32).then(|| u128::from_str_radix(text, 16).ok().map(Self))?
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({:08x}…)", (self.0 >> 96) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_round_trip() {
        let a = FencingToken::generate();
        let b = FencingToken::generate();
        assert_ne!(a, b);
        assert_eq!(FencingToken::from_hex(&a.to_hex()), Some(a));
        assert_eq!(FencingToken::from_bytes(a.to_bytes()), a);
        assert_eq!(FencingToken::from_hex("12"), None);
        assert_eq!(FencingToken::from_hex(&"g".repeat(32)), None);
    }

    #[test]
    fn batches_never_repeat_a_token() {
        let tokens: std::collections::HashSet<_> = (0..BATCH * 10).map(|_| FencingToken::generate()).collect();
        assert_eq!(tokens.len(), BATCH * 10);
        assert!(!tokens.contains(&FencingToken(0)), "a wiped slot is never handed out");
    }
}
