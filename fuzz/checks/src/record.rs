//! Target `record`: the stored-response codec, read back from a store that
//! may hold anything (a corrupted value, a hostile write, another version).
//!
//! Properties:
//!
//! - any bytes decode to a response or an error, never a panic, and a
//!   decoded response is exactly what its own encoding decodes to;
//! - a value with bytes after the response is refused, not cut short;
//! - any response (built from the same bytes with `arbitrary`) round-trips
//!   exactly, and every proper prefix of its encoding is refused.

use arbitrary::{Arbitrary, Unstructured};
use idem_runtime::store::StoredResponse;

/// Checks one input: as stored bytes, then as the recipe of a response.
pub fn check(data: &[u8]) {
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
