//! The keys records are sealed with, and the keyring that holds the current
//! one and those it replaced.

use std::fmt;

use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use sha2::{Digest, Sha256};

/// Bytes of a records key.
pub const KEY_BYTES: usize = 32;

/// The identity of a records key, written into every record it seals: the
/// first 8 bytes of SHA-256 over a label and the key, which tell keys apart
/// without saying anything of them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub(crate) [u8; 8]);

impl KeyId {
    /// Its 16 hexadecimal digits, as logs and the operator's tool show it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", self.to_hex())
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A 256-bit key that seals records with XChaCha20-Poly1305.
///
/// Its `Debug` form shows its [`KeyId`], never the key.
///
/// ```
/// use idem_runtime::sealing::RecordsKey;
///
/// let key = RecordsKey::from_hex(&"0f".repeat(32))?;
/// assert_eq!(key.id().to_hex().len(), 16);
/// # Ok::<(), idem_runtime::sealing::InvalidRecordsKey>(())
/// ```
#[derive(Clone)]
pub struct RecordsKey {
    id: KeyId,
    pub(crate) cipher: XChaCha20Poly1305,
}

/// Why a text is not a records key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a records key is 64 hexadecimal digits (32 bytes); this one is {0}")]
pub struct InvalidRecordsKey(&'static str);

impl RecordsKey {
    /// The key of these 32 bytes (from a secrets manager, say).
    pub fn new(bytes: [u8; KEY_BYTES]) -> Self {
        let id = Sha256::new().chain_update(b"idem-records-key-id-v1").chain_update(bytes).finalize();
        let mut short = [0; 8];
        short.copy_from_slice(&id[..8]);
        Self { id: KeyId(short), cipher: XChaCha20Poly1305::new(&bytes.into()) }
    }

    /// The key written as 64 hexadecimal digits (either case; surrounding
    /// whitespace, as a file or an environment variable may hold it, is
    /// ignored). The error never repeats the text.
    pub fn from_hex(text: &str) -> Result<Self, InvalidRecordsKey> {
        let text = text.trim();
        if text.len() != 2 * KEY_BYTES {
            return Err(InvalidRecordsKey(if text.is_empty() { "empty" } else { "of another length" }));
        }
        let mut bytes = [0; KEY_BYTES];
        hex::decode_to_slice(text, &mut bytes).map_err(|_| InvalidRecordsKey("not hexadecimal"))?;
        Ok(Self::new(bytes))
    }

    /// Its identity, kept in each record it seals.
    pub fn id(&self) -> KeyId {
        self.id
    }
}

impl fmt::Debug for RecordsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordsKey({})", self.id)
    }
}

/// The keys of [`Idem::encrypt_records`](crate::Idem::encrypt_records):
/// new records are sealed with the current key; records sealed with a
/// previous one still open, so that keys rotate without a pause.
///
/// ```
/// use idem_runtime::sealing::{Keyring, RecordsKey};
///
/// # let (new, old) = (RecordsKey::new([1; 32]), RecordsKey::new([2; 32]));
/// // Rotation: seal with the new key, keep opening what the old one sealed
/// // until those records have expired (the longest `ttl` in use).
/// let keyring = Keyring::new(new).with_previous(old);
/// ```
#[derive(Debug, Clone)]
pub struct Keyring {
    current: RecordsKey,
    previous: Vec<RecordsKey>,
    accept_unsealed: bool,
}

impl Keyring {
    /// A keyring that seals with `current`.
    pub fn new(current: RecordsKey) -> Self {
        Self { current, previous: Vec::new(), accept_unsealed: false }
    }

    /// Also opens records sealed with `key` (a key this one replaced).
    pub fn with_previous(mut self, key: RecordsKey) -> Self {
        if key.id != self.current.id && self.previous.iter().all(|known| known.id != key.id) {
            self.previous.push(key);
        }
        self
    }

    /// Whether a record kept in the clear (by a configuration without
    /// encryption) is replayed as it is. `false`, the default: it fails
    /// closed like a record that does not open, since anyone who can
    /// write to the store could have written it. `true` for the migration
    /// window after encryption is turned on (the longest `ttl` in use), so
    /// that the retries of requests answered before then still replay.
    pub fn accept_unsealed(mut self, accept: bool) -> Self {
        self.accept_unsealed = accept;
        self
    }

    /// The key new records are sealed with.
    pub fn current(&self) -> &RecordsKey {
        &self.current
    }

    /// The key of identity `id`, if this keyring has it.
    pub(crate) fn key(&self, id: &KeyId) -> Option<&RecordsKey> {
        std::iter::once(&self.current).chain(&self.previous).find(|key| key.id == *id)
    }

    /// Whether records kept in the clear are replayed.
    pub(crate) fn accepts_unsealed(&self) -> bool {
        self.accept_unsealed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_hex_and_never_shown() {
        let text = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let key = RecordsKey::from_hex(&format!("  {text}\n")).expect("a key");
        assert_eq!(key.id(), RecordsKey::from_hex(&text.to_ascii_lowercase()).unwrap().id());
        let shown = format!("{key:?} {:?}", Keyring::new(key.clone()));
        assert!(!shown.to_ascii_lowercase().contains("00112233"), "{shown}");
        assert!(shown.contains(&key.id().to_hex()), "{shown}");
        for bad in ["", "00", &"zz".repeat(32), &"0".repeat(65)] {
            let error = RecordsKey::from_hex(bad).expect_err(bad).to_string();
            assert!(bad.len() <= 2 || !error.contains(bad), "the text is never repeated: {error}");
        }
    }

    #[test]
    fn a_key_id_is_stable_and_computable_outside() {
        // Records sealed by one release open with the next only if ids do
        // not change; docs/operations.md computes this one with sha256sum.
        assert_eq!(RecordsKey::from_hex(&"0f".repeat(32)).unwrap().id().to_hex(), "71fd96ad3fe39a9b");
    }

    #[test]
    fn a_keyring_finds_its_keys_by_id() {
        let (a, b, c) = (RecordsKey::new([1; 32]), RecordsKey::new([2; 32]), RecordsKey::new([3; 32]));
        assert_ne!(a.id(), b.id());
        let keyring =
            Keyring::new(a.clone()).with_previous(b.clone()).with_previous(b.clone()).with_previous(a.clone());
        assert_eq!(keyring.current().id(), a.id());
        assert_eq!(keyring.key(&b.id()).map(RecordsKey::id), Some(b.id()));
        assert!(keyring.key(&c.id()).is_none());
        assert_eq!(keyring.previous.len(), 1, "each key once");
        assert!(!keyring.accepts_unsealed(), "fails closed by default");
    }
}
