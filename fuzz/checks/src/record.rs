//! Target `record`: the stored-response codec and the Redis store's record
//! layout, read back from a store that may hold anything (a corrupted
//! value, a hostile write, another version).
//!
//! Properties:
//!
//! - any bytes decode to a response or an error, never a panic, and a
//!   decoded response is exactly what its own encoding decodes to;
//! - a value with bytes after the response is refused, not cut short;
//! - any response (built from the same bytes with `arbitrary`) round-trips
//!   exactly, and every proper prefix of its encoding is refused;
//! - any bytes read as a Redis record or an error, never a panic; a record
//!   read is what its bytes say at the offsets the Lua scripts read (state,
//!   fingerprint, token, attempt, lease mark, response), and a claim's value
//!   made from the same bytes reads back as that claim.

use arbitrary::{Arbitrary, Unstructured};
use idem_runtime::__fuzzing::{RedisRecord, read_redis_record, redis_claimed};
use idem_runtime::store::{Attempt, FencingToken, Fingerprint, StoredResponse};

/// Checks one input: as stored bytes, then as the recipe of a response.
pub fn check(data: &[u8]) {
    check_redis_record(data);
    if let Ok(response) = StoredResponse::from_bytes(data) {
        // Not byte for byte: postcard reads an overlong varint (`80 00` for
        // 0) as the number, which is harmless.
        let bytes = response.to_bytes();
        assert!(bytes.len() <= data.len(), "{response:?} decoded from fewer bytes than it takes");
        assert_eq!(StoredResponse::from_bytes(&bytes).ok(), Some(response.clone()), "no exact round trip");
        let longer = [data, &[0]].concat();
        assert!(StoredResponse::from_bytes(&longer).is_err(), "{response:?} decoded with a byte after it");
    }
    let Ok(Response(response)) = Response::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let bytes = response.to_bytes();
    assert_eq!(StoredResponse::from_bytes(&bytes).ok(), Some(response.clone()), "no exact round trip");
    // Every prefix of a short encoding, a sample of a long one.
    let step = bytes.len() / 64 + 1;
    for end in (0..bytes.len()).step_by(step).chain([bytes.len() - 1]) {
        assert!(StoredResponse::from_bytes(&bytes[..end]).is_err(), "{response:?}: a prefix of {end} bytes decodes");
    }
}

/// A [`StoredResponse`] made by `arbitrary`.
struct Response(StoredResponse);

impl<'a> Arbitrary<'a> for Response {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let status = u.arbitrary()?;
        let headers = u.arbitrary()?;
        let body: Vec<u8> = u.arbitrary()?;
        Ok(Self(StoredResponse { status, headers, body: body.into() }))
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> arbitrary::Result<Self> {
        let status = u.arbitrary()?;
        let headers = u.arbitrary()?;
        let body = Vec::<u8>::arbitrary_take_rest(u)?;
        Ok(Self(StoredResponse { status, headers, body: body.into() }))
    }
}

/// The Redis record layout: `data` as a stored value, and as a claim.
fn check_redis_record(data: &[u8]) {
    match read_redis_record(data) {
        Err(reason) => assert!(!reason.is_empty()),
        Ok(RedisRecord::Released { fingerprint }) => {
            assert_eq!((data[0], data.len()), (b'R', 33));
            assert_eq!(fingerprint.as_bytes(), &data[1..33]);
        }
        Ok(RedisRecord::Completed { fingerprint, response }) => {
            assert_eq!(data[0], b'C');
            assert_eq!(fingerprint.as_bytes(), &data[1..33]);
            assert_eq!(response, &data[49..], "the response is the rest, from Lua's offset 50");
        }
        Ok(RedisRecord::InFlight { fingerprint, token, attempt, mark, graced }) => {
            assert_eq!(data[0], if graced { b'G' } else { b'L' });
            assert_eq!(fingerprint.as_bytes(), &data[1..33]);
            assert_eq!(token.to_bytes(), data[33..49]);
            let digit = match attempt {
                Attempt::First => b'0',
                Attempt::AfterRelease => b'1',
                _ => b'2',
            };
            assert_eq!(digit, data[49]);
            let written = std::str::from_utf8(&data[50..]).expect("a mark read is ASCII digits");
            assert_eq!(written.parse::<u64>().ok(), Some(mark), "the mark is the number Lua's tonumber reads");
        }
    }
    let mut u = Unstructured::new(data);
    let (Ok(fingerprint), Ok(token), Ok(lease), Ok(ttl)) =
        (u.arbitrary::<[u8; 32]>(), u.arbitrary::<[u8; 16]>(), u.arbitrary::<u64>(), u.arbitrary::<u64>())
    else {
        return;
    };
    let (fingerprint, token) = (Fingerprint::from_bytes(fingerprint), FencingToken::from_bytes(token));
    let lease = lease.min(ttl);
    let value = redis_claimed(&fingerprint, token, lease, ttl);
    let expected =
        RedisRecord::InFlight { fingerprint, token, attempt: Attempt::First, mark: ttl - lease, graced: false };
    assert_eq!(read_redis_record(&value), Ok(expected), "a claim's value reads back as that claim");
}
