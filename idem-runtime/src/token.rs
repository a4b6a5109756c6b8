//! Fencing tokens: proof that an execution still owns its key.

use std::fmt;

/// An opaque, unguessable proof of ownership of an in-flight record.
///
/// Random 128 bits, fresh for every successful claim, so a token from an
/// earlier life of a key can never match a later one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FencingToken(u128);

impl FencingToken {
    /// A fresh random token, straight from the operating system (a
    /// user-space generator would repeat its tokens in both halves of a
    /// `fork`).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        // The OS random source failing is not something a request can recover from.
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        Self(u128::from_be_bytes(bytes))
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
}
