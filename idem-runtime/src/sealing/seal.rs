//! Sealing and opening what a record keeps: a stored response's headers
//! and body, and a durable step's result.
//!
//! A sealed response keeps its status, and in place of its headers one
//! header whose name no response can have (`:idem-sealed`, holding the
//! key's id); its body is a format byte, a random 24-byte nonce and the
//! XChaCha20-Poly1305 ciphertext of the whole response. A sealed step
//! result is a prefix no JSON text starts with (a NUL byte), the key's id,
//! the nonce and the ciphertext. The associated data binds each to where
//! it lives: the storage key, and the status of a response or the name of
//! a step; a sealed value copied to another key, step or status does not
//! open. Stores keep sealed values as they keep any other: they never know.

use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};

use super::keys::{KeyId, Keyring};
use crate::record::StoredResponse;
use crate::scope::StorageKey;

/// The header that marks a sealed response; `:` is not allowed in a header
/// name, so no handler's response has it.
pub const SEALED_HEADER: &str = ":idem-sealed";

/// The format byte of a sealed response's body.
const RESPONSE_FORMAT: u8 = 1;

/// The prefix of a sealed step result (no JSON text starts with NUL).
const STEP_PREFIX: &[u8] = b"\0idem-sealed-step\x01";

const NONCE_BYTES: usize = 24;

/// Why a record could not be opened. Each one fails closed: the request is
/// answered 500 and nothing runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unopened {
    /// The record is sealed and this configuration has no keyring.
    #[error("the record is sealed (key {0}) and no records key is configured")]
    NoKeyring(KeyId),
    /// The record is sealed with a key the keyring does not have.
    #[error("the record is sealed with key {0}, which the keyring does not have")]
    UnknownKey(KeyId),
    /// The key is known but the record does not open with it: it was
    /// altered, or copied from another storage key, step or status.
    #[error("the record does not open with key {0}: altered, or moved from elsewhere")]
    Forged(KeyId),
    /// The record is in the clear, and the keyring accepts only sealed
    /// records.
    #[error("the record is kept in the clear, and only sealed records are accepted")]
    Unsealed,
    /// The sealed bytes are cut short or of an unknown format.
    #[error("the sealed record is malformed")]
    Malformed,
}

/// Seals `response`, kept at `key`, with the keyring's current key.
pub fn seal_response(keyring: &Keyring, key: &StorageKey, response: &StoredResponse) -> StoredResponse {
    let current = keyring.current();
    let id = current.id();
    let nonce = nonce();
    let aad = response_aad(key, response.status, &id);
    let plain = response.to_bytes();
    let mut body = Vec::with_capacity(1 + NONCE_BYTES + plain.len() + 16);
    body.push(RESPONSE_FORMAT);
    body.extend_from_slice(&nonce);
    // Encryption into a `Vec` fails only on allocation failure.
    let sealed = current.cipher.encrypt(&XNonce::from(nonce), Payload { msg: &plain, aad: &aad }).unwrap_or_default();
    body.extend_from_slice(&sealed);
    StoredResponse {
        status: response.status,
        headers: vec![(SEALED_HEADER.to_owned(), id.0.to_vec())],
        body: body.into(),
    }
}

/// The id of the key that sealed `response`, if it is sealed.
pub fn sealed_with(response: &StoredResponse) -> Option<Result<KeyId, Unopened>> {
    match response.headers.as_slice() {
        [(name, id)] if name == SEALED_HEADER => {
            Some(id.as_slice().try_into().map(KeyId).map_err(|_| Unopened::Malformed))
        }
        _ => None,
    }
}

/// Opens `response`, read at `key`: a sealed one with the keyring's key of
/// its id, one in the clear as it is when there is no keyring or it
/// accepts those.
pub fn open_response(
    keyring: Option<&Keyring>,
    key: &StorageKey,
    response: StoredResponse,
) -> Result<StoredResponse, Unopened> {
    let id = match sealed_with(&response) {
        None if keyring.is_none_or(Keyring::accepts_unsealed) => return Ok(response),
        None => return Err(Unopened::Unsealed),
        Some(id) => id?,
    };
    let keyring = keyring.ok_or(Unopened::NoKeyring(id))?;
    let found = keyring.key(&id).ok_or(Unopened::UnknownKey(id))?;
    let (nonce, sealed) = match response.body.split_first() {
        Some((&RESPONSE_FORMAT, rest)) if rest.len() >= NONCE_BYTES => rest.split_at(NONCE_BYTES),
        _ => return Err(Unopened::Malformed),
    };
    let nonce: [u8; NONCE_BYTES] = nonce.try_into().map_err(|_| Unopened::Malformed)?;
    let aad = response_aad(key, response.status, &id);
    let plain = found
        .cipher
        .decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad: &aad })
        .map_err(|_| Unopened::Forged(id))?;
    let opened = StoredResponse::from_bytes(&plain).map_err(|_| Unopened::Malformed)?;
    // The status is bound by the associated data; checked again all the same.
    if opened.status != response.status {
        return Err(Unopened::Forged(id));
    }
    Ok(opened)
}

/// Seals the result of step `name`, kept at `key`.
pub fn seal_step(keyring: &Keyring, key: &StorageKey, name: &str, result: &[u8]) -> Vec<u8> {
    let current = keyring.current();
    let id = current.id();
    let nonce = nonce();
    let aad = step_aad(key, name, &id);
    let mut out = Vec::with_capacity(STEP_PREFIX.len() + 8 + NONCE_BYTES + result.len() + 16);
    out.extend_from_slice(STEP_PREFIX);
    out.extend_from_slice(&id.0);
    out.extend_from_slice(&nonce);
    // Encryption into a `Vec` fails only on allocation failure.
    out.extend_from_slice(
        &current.cipher.encrypt(&XNonce::from(nonce), Payload { msg: result, aad: &aad }).unwrap_or_default(),
    );
    out
}

/// Opens the result of step `name`, read at `key`, as [`open_response`]
/// opens a response.
pub fn open_step(keyring: Option<&Keyring>, key: &StorageKey, name: &str, result: &[u8]) -> Result<Vec<u8>, Unopened> {
    let Some(rest) = result.strip_prefix(STEP_PREFIX) else {
        return match keyring.is_none_or(Keyring::accepts_unsealed) {
            true => Ok(result.to_vec()),
            false => Err(Unopened::Unsealed),
        };
    };
    if rest.len() < 8 + NONCE_BYTES {
        return Err(Unopened::Malformed);
    }
    let (id, rest) = rest.split_at(8);
    let id = KeyId(id.try_into().map_err(|_| Unopened::Malformed)?);
    let (nonce, sealed) = rest.split_at(NONCE_BYTES);
    let nonce: [u8; NONCE_BYTES] = nonce.try_into().map_err(|_| Unopened::Malformed)?;
    let keyring = keyring.ok_or(Unopened::NoKeyring(id))?;
    let found = keyring.key(&id).ok_or(Unopened::UnknownKey(id))?;
    let aad = step_aad(key, name, &id);
    found.cipher.decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad: &aad }).map_err(|_| Unopened::Forged(id))
}

/// Whether a step result is sealed.
pub fn is_sealed_step(result: &[u8]) -> bool {
    result.starts_with(STEP_PREFIX)
}

/// A fresh random nonce: 192 bits, so random nonces never meet.
fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0; NONCE_BYTES];
    getrandom::fill(&mut nonce).expect("the operating system's random source failed");
    nonce
}

/// Length-prefixed fields, as the associated data of a sealed value.
fn fields(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|part| part.len() + 8).sum());
    for part in parts {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn response_aad(key: &StorageKey, status: u16, id: &KeyId) -> Vec<u8> {
    fields(&[b"idem-sealed-response-v1", key.as_str().as_bytes(), &status.to_be_bytes(), &id.0])
}

fn step_aad(key: &StorageKey, name: &str, id: &KeyId) -> Vec<u8> {
    fields(&[b"idem-sealed-step-v1", key.as_str().as_bytes(), name.as_bytes(), &id.0])
}
