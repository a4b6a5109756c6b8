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
//!   read is what its bytes say at the offsets the Lua scripts
//!   (`layout.lua`) read, in the lower-case layout (state, fingerprint,
//!   token, attempt, lease mark, claim time, route, then the steps or the
//!   response) and in the upper-case one (state, fingerprint, token,
//!   attempt, lease mark, response);
//! - a claim's value made from the same bytes (any fingerprint, token,
//!   lease, TTL, claim time and route) reads back as that claim, and is
//!   itself read as its bytes say.

use arbitrary::{Arbitrary, Unstructured};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::__fuzzing::{RedisRecord, RedisState, read_redis_record, redis_claimed, redis_tail};
use idem_runtime::store::{Attempt, FencingToken, Fingerprint, Step, StoredResponse};

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
    check_redis_read(data);
    let mut u = Unstructured::new(data);
    let Ok(claim) = Claim::arbitrary(&mut u) else { return };
    let value = redis_claimed(
        &claim.fingerprint,
        claim.token,
        claim.lease,
        claim.ttl,
        &redis_tail(claim.at, claim.route.as_deref()),
    );
    check_redis_read(&value);
    let expected = RedisRecord {
        fingerprint: claim.fingerprint,
        state: RedisState::InFlight {
            token: claim.token,
            // 15 digits at most: far above any expiry.
            mark: (claim.ttl - claim.lease).min(999_999_999_999_999),
            graced: false,
        },
        attempt: Some(Attempt::First),
        claimed_at: claimed_at(claim.at),
        route: claim.route.as_deref().map(kept_route).filter(|route| !route.is_empty()),
        steps: Vec::new(),
    };
    assert_eq!(read_redis_record(&value), Ok(expected), "a claim's value reads back as that claim");
}

/// `data` read as a stored value: an error, or what its bytes say.
fn check_redis_read(data: &[u8]) {
    let record = match read_redis_record(data) {
        Err(reason) => return assert!(!reason.is_empty(), "an error says what is wrong"),
        Ok(record) => record,
    };
    // What every layout keeps at the same offsets: the state at Lua's byte
    // 1, the fingerprint at 2-33.
    assert_eq!(record.fingerprint.as_bytes(), &data[1..33]);
    let token = || FencingToken::from_bytes(data[33..49].try_into().expect("16 bytes"));
    let in_flight_or_held = |state: &RedisState<'_>| match *state {
        RedisState::InFlight { token: read, mark, graced } => {
            assert_eq!(read, token(), "the token is at 34-49");
            Some((mark, Some(graced)))
        }
        RedisState::Held { token: read } => {
            assert_eq!(read, token(), "the token is at 34-49");
            None
        }
        _ => panic!("{state:?} read from a holder's letter"),
    };
    match data[0] {
        letter @ (b'l' | b'g' | b'h' | b'c' | b'r') => {
            assert!(data.len() >= 82, "a header of {} bytes", data.len());
            assert_eq!(record.attempt, Some(attempt(data[49])), "the attempt is at 50");
            // 51-65, the lease mark: Lua's `tonumber` reads it whatever the
            // state, and refuses the record when it cannot.
            let mark = decimal(&data[50..65], "the lease mark");
            let ms = decimal(&data[65..78], "the claim time");
            let expected = (ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(ms));
            assert_eq!(record.claimed_at, expected, "the claim time is at 66-78");
            let end = 82 + usize::try_from(decimal(&data[78..82], "the route length")).expect("4 digits");
            let route = std::str::from_utf8(&data[82..end]).expect("a route read is UTF-8");
            assert_eq!(record.route, Some(route).filter(|route| !route.is_empty()), "the route is at 83-{end}");
            let body = &data[end..];
            match letter {
                b'l' | b'g' | b'h' => {
                    let graced = (letter != b'h').then_some(letter == b'g');
                    assert_eq!(in_flight_or_held(&record.state), (letter != b'h').then_some((mark, graced)));
                    assert_eq!(steps_bytes(&record.steps), body, "the steps are the rest, as step.lua appends them");
                }
                b'c' => {
                    assert_eq!(record.state, RedisState::Completed { response: body }, "the response is the rest");
                    assert!(record.steps.is_empty());
                }
                _ => {
                    assert_eq!(record.state, RedisState::Released);
                    assert_eq!(steps_bytes(&record.steps), body, "a tombstone keeps its steps after its route");
                }
            }
        }
        // The upper-case layout: no claim time, no route, no steps.
        letter => {
            assert_eq!((record.claimed_at, record.route), (None, None));
            assert!(record.steps.is_empty());
            match letter {
                b'L' | b'G' => {
                    assert_eq!(record.attempt, Some(attempt(data[49])), "the attempt is at 50");
                    // From 51 on, in as many digits as it takes.
                    let mark = decimal(&data[50..], "the lease mark");
                    assert_eq!(in_flight_or_held(&record.state), Some((mark, Some(letter == b'G'))));
                }
                b'C' => {
                    assert_eq!(record.attempt, None);
                    assert_eq!(record.state, RedisState::Completed { response: &data[49..] }, "the rest, from 50");
                }
                b'R' => {
                    assert_eq!((data.len(), record.attempt, record.state), (33, None, RedisState::Released));
                }
                other => panic!("a record read from a value starting with {other:#04x}"),
            }
        }
    }
}

/// The attempt a digit stands for (Lua's byte 50).
fn attempt(digit: u8) -> Attempt {
    match digit {
        b'0' => Attempt::First,
        b'1' => Attempt::AfterRelease,
        b'2' => Attempt::Takeover,
        other => panic!("a record read with the attempt {other:#04x}"),
    }
}

/// The number decimal `bytes` say, as Lua's `tonumber` reads them: a record
/// read has nothing but ASCII digits there.
fn decimal(bytes: &[u8], what: &str) -> u64 {
    assert!(!bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit), "{what} read from {bytes:?}");
    std::str::from_utf8(bytes).expect("ASCII").parse().unwrap_or_else(|_| panic!("{what} read from {bytes:?}"))
}

/// Steps as `step.lua` appends them: a name length (3 digits), the name, a
/// result length (10 digits), the result.
fn steps_bytes(steps: &[Step]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for Step { name, result } in steps {
        bytes.extend_from_slice(format!("{:03}{name}{:010}", name.len(), result.len()).as_bytes());
        bytes.extend_from_slice(result);
    }
    bytes
}

/// When a claim at `at` says it was claimed: to the millisecond, at most
/// 13 digits of them, unknown at or before 1970.
fn claimed_at(at: SystemTime) -> Option<SystemTime> {
    let ms = at.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis()).min(9_999_999_999_999);
    (ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("13 digits")))
}

/// What a record keeps of `route`: its longest start of at most 9,999 bytes
/// (four digits of length) that ends between two characters.
fn kept_route(route: &str) -> &str {
    let end = route.char_indices().map(|(at, c)| at + c.len_utf8()).take_while(|&end| end <= 9_999).last();
    &route[..end.unwrap_or(0)]
}

/// A claim made by `arbitrary`: what `claim` writes for a free key.
struct Claim {
    fingerprint: Fingerprint,
    token: FencingToken,
    /// At most `ttl`.
    lease: u64,
    ttl: u64,
    at: SystemTime,
    route: Option<String>,
}

impl Claim {
    fn arbitrary(u: &mut Unstructured<'_>) -> arbitrary::Result<Self> {
        let fingerprint = Fingerprint::from_bytes(u.arbitrary()?);
        let token = FencingToken::from_bytes(u.arbitrary()?);
        let (lease, ttl): (u64, u64) = (u.arbitrary()?, u.arbitrary()?);
        // Before or after 1970, to the nanosecond, up to year ~36,800: past
        // the 13 digits of milliseconds a record keeps.
        let before: bool = u.arbitrary()?;
        let offset = Duration::new(u.int_in_range(0..=1 << 40)?, u.int_in_range(0..=999_999_999)?);
        let at = if before { UNIX_EPOCH.checked_sub(offset) } else { UNIX_EPOCH.checked_add(offset) };
        let at = at.ok_or(arbitrary::Error::IncorrectFormat)?;
        // A route repeated, to reach the 9,999 bytes a record keeps (and
        // cut one between two characters), but not far past them.
        let route = if u.arbitrary()? {
            let times: u16 = u.arbitrary()?;
            let route = <&str>::arbitrary(u)?;
            let times = usize::from(times).clamp(1, 20_000 / route.len().max(1));
            Some(route.repeat(times))
        } else {
            None
        };
        Ok(Self { fingerprint, token, lease: lease.min(ttl), ttl, at, route })
    }
}
