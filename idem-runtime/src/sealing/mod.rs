//! Encrypted records (`Idem::encrypt_records`, §16 of the behaviour
//! contract): what a record keeps of a response (its headers and body) and
//! of a durable step (its result) is sealed with XChaCha20-Poly1305 before
//! it reaches the store, and opened when it is read back.
//!
//! - `keys.rs`: [`RecordsKey`], a 256-bit key and its [`KeyId`], and the
//!   [`Keyring`] of the current key and those it replaced;
//! - `seal.rs`: the sealed formats, [`seal_response`] and
//!   [`open_response`], [`seal_step`] and [`open_step`].
//!
//! Fingerprints and storage keys are hashes, sealed or not; the status of a
//! response stays in the clear (the operator's tool shows it), bound to the
//! sealed part.

mod keys;
mod seal;

pub use self::keys::{InvalidRecordsKey, KEY_BYTES, KeyId, Keyring, RecordsKey};
pub use self::seal::{
    SEALED_HEADER, Unopened, is_sealed_step, open_response, open_step, seal_response, seal_step, sealed_with,
};

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::record::StoredResponse;
    use crate::scope::{Scope, StorageKey};

    fn key(name: &str) -> StorageKey {
        StorageKey::new(Scope::Global, None, "", "", &crate::key::IdempotencyKey::natural(name).unwrap())
    }

    fn response() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("location".into(), b"/orders/ord_7".to_vec()),
            ],
            body: Bytes::from_static(br#"{"id":"ord_7","customer_id":"cus_42"}"#),
        }
    }

    #[test]
    fn a_sealed_response_opens_where_it_was_sealed_and_nowhere_else() {
        let keyring = Keyring::new(RecordsKey::new([7; 32]));
        let sealed = seal_response(&keyring, &key("a"), &response());
        assert_eq!(sealed.status, 201, "the status stays in the clear");
        let bytes = sealed.to_bytes();
        for secret in [&b"ord_7"[..], b"cus_42", b"location", b"application/json"] {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret), "{}", String::from_utf8_lossy(secret));
        }
        assert_eq!(open_response(Some(&keyring), &key("a"), sealed.clone()), Ok(response()));
        let id = keyring.current().id();
        assert_eq!(open_response(Some(&keyring), &key("b"), sealed.clone()), Err(Unopened::Forged(id)), "moved");
        let restatus = StoredResponse { status: 200, ..sealed.clone() };
        assert_eq!(open_response(Some(&keyring), &key("a"), restatus), Err(Unopened::Forged(id)));
        let mut body = sealed.body.to_vec();
        let last = body.len() - 1;
        body[last] ^= 1;
        let altered = StoredResponse { body: body.into(), ..sealed.clone() };
        assert_eq!(open_response(Some(&keyring), &key("a"), altered), Err(Unopened::Forged(id)));
        let cut = StoredResponse { body: sealed.body.slice(..10), ..sealed.clone() };
        assert_eq!(open_response(Some(&keyring), &key("a"), cut), Err(Unopened::Malformed));
        assert_eq!(open_response(None, &key("a"), sealed.clone()), Err(Unopened::NoKeyring(id)));
        let other = Keyring::new(RecordsKey::new([8; 32]));
        assert_eq!(open_response(Some(&other), &key("a"), sealed), Err(Unopened::UnknownKey(id)));
    }

    #[test]
    fn keys_rotate() {
        let (old, new) = (RecordsKey::new([1; 32]), RecordsKey::new([2; 32]));
        let before = seal_response(&Keyring::new(old.clone()), &key("a"), &response());
        let rotated = Keyring::new(new.clone()).with_previous(old);
        assert_eq!(open_response(Some(&rotated), &key("a"), before), Ok(response()), "the old key still opens");
        let after = seal_response(&rotated, &key("a"), &response());
        assert_eq!(sealed_with(&after), Some(Ok(new.id())), "new records use the new key");
        assert_ne!(seal_response(&rotated, &key("a"), &response()), after, "a fresh nonce each time");
    }

    #[test]
    fn records_in_the_clear_open_only_where_allowed() {
        let keyring = Keyring::new(RecordsKey::new([3; 32]));
        assert_eq!(open_response(None, &key("a"), response()), Ok(response()), "no keyring");
        assert_eq!(open_response(Some(&keyring), &key("a"), response()), Err(Unopened::Unsealed));
        let migrating = keyring.accept_unsealed(true);
        assert_eq!(open_response(Some(&migrating), &key("a"), response()), Ok(response()));
        assert_eq!(open_step(Some(&migrating), &key("a"), "charge", b"{}"), Ok(b"{}".to_vec()));
    }

    #[test]
    fn step_results_are_bound_to_their_key_and_name() {
        let keyring = Keyring::new(RecordsKey::new([4; 32]));
        let sealed = seal_step(&keyring, &key("a"), "charge", br#"{"charge":"ch_1"}"#);
        assert!(is_sealed_step(&sealed));
        assert!(!sealed.windows(4).any(|w| w == b"ch_1"));
        assert_eq!(open_step(Some(&keyring), &key("a"), "charge", &sealed), Ok(br#"{"charge":"ch_1"}"#.to_vec()));
        let id = keyring.current().id();
        assert_eq!(open_step(Some(&keyring), &key("a"), "refund", &sealed), Err(Unopened::Forged(id)));
        assert_eq!(open_step(Some(&keyring), &key("b"), "charge", &sealed), Err(Unopened::Forged(id)));
        assert_eq!(open_step(None, &key("a"), "charge", &sealed), Err(Unopened::NoKeyring(id)));
        assert_eq!(open_step(Some(&keyring), &key("a"), "charge", b"{}"), Err(Unopened::Unsealed));
        assert_eq!(open_step(Some(&keyring), &key("a"), "charge", &sealed[..20]), Err(Unopened::Malformed));
    }
}
