use super::*;

const ROUTE: &str = "POST /orders/{id}/payments";

fn fp() -> Fingerprint {
    Fingerprint::from_bytes([7; 32])
}

/// When the records of these tests were claimed: a whole millisecond.
fn at() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_767_225_600_123)
}

/// A record of this layout in `state`, with `body` after its header.
fn record(state: u8, token: FencingToken, attempt: u8, body: &[u8]) -> Vec<u8> {
    let mut value = claimed(&fp(), token, 1_000, 61_000, &tail(at(), Some(ROUTE)));
    value[0] = state;
    value[ATTEMPT] = attempt;
    value.extend_from_slice(body);
    value
}

/// A step as `step.lua` appends it.
fn entry(name: &str, result: &[u8]) -> Vec<u8> {
    [format!("{:03}{name}{:010}", name.len(), result.len()).as_bytes(), result].concat()
}

fn step(name: &str, result: &'static [u8]) -> Step {
    Step { name: name.to_owned(), result: Bytes::from_static(result) }
}

#[test]
fn a_claimed_value_reads_back() {
    let token = FencingToken::generate();
    let value = claimed(&fp(), token, 30_000, 86_400_000, &tail(at(), Some(ROUTE)));
    assert_eq!(&value[MARK], b"000000086370000", "fixed width, so that Lua rewrites it in place");
    assert_eq!(&value[CLAIMED_AT], b"1767225600123");
    assert_eq!(&value[ROUTE_LENGTH], b"0026");
    assert_eq!(&value[HEADER..], ROUTE.as_bytes());
    let expected = Stored {
        fingerprint: fp(),
        state: State::InFlight { token, mark: 86_370_000, graced: false },
        attempt: Some(Attempt::First),
        claimed_at: Some(at()),
        route: Some(ROUTE),
        steps: Vec::new(),
    };
    assert_eq!(read(&value).unwrap(), expected);
    let mut graced = value.clone();
    graced[0] = b'g';
    assert!(matches!(read(&graced).unwrap().state, State::InFlight { graced: true, .. }));
    graced[0] = b'h';
    assert_eq!(read(&graced).unwrap().state, State::Held { token });
    assert_eq!(lease_left(86_370_000, 86_399_000), Duration::from_millis(29_000));
    assert_eq!(lease_left(86_370_000, 86_000_000), Duration::ZERO);
    assert_eq!(lease_left(86_370_000, -1), Duration::ZERO);
}

#[test]
fn steps_read_back_in_order_byte_for_byte() {
    let token = FencingToken::generate();
    let body = [entry("charge", br#"{"id":"ch_1"}"#), entry("ship", b""), entry("binary", b"\x00\xff\r\n")].concat();
    let expected = vec![step("charge", br#"{"id":"ch_1"}"#), step("ship", b""), step("binary", b"\x00\xff\r\n")];
    // In flight, held, and a tombstone (a release keeps them).
    for state in [b'l', b'g', b'h', b'r'] {
        let value = record(state, token, b'2', &body);
        let stored = read(&value).unwrap();
        assert_eq!((stored.steps, stored.attempt), (expected.clone(), Some(Attempt::Takeover)));
    }
    assert_eq!(steps(&body).unwrap(), expected, "as claim.lua hands them back");
    assert_eq!(steps(b"").unwrap(), Vec::new());
}

#[test]
fn completed_and_released_records_keep_their_header() {
    let token = FencingToken::generate();
    let completed = record(b'c', token, b'1', b"resp");
    let completed = read(&completed).unwrap();
    assert_eq!(completed.state, State::Completed { response: b"resp" });
    assert_eq!((completed.route, completed.claimed_at), (Some(ROUTE), Some(at())));
    assert_eq!(completed.attempt, Some(Attempt::AfterRelease));
    assert!(completed.steps.is_empty(), "the bytes after the header are the response");
    let released = record(b'r', token, b'0', b"");
    let released = read(&released).unwrap();
    assert_eq!((released.state, released.route), (State::Released, Some(ROUTE)));
    assert!(released.steps.is_empty(), "released forgetting its steps, or before any");
    let released = record(b'r', token, b'1', &entry("charge", b"ch_1"));
    let released = read(&released).unwrap();
    assert_eq!((released.state, released.attempt), (State::Released, Some(Attempt::AfterRelease)));
    assert_eq!(released.steps, vec![step("charge", b"ch_1")], "a tombstone keeps its steps");
    let unknown = claimed(&fp(), token, 1, 2, &tail(UNIX_EPOCH - Duration::from_secs(1), None));
    let unknown = read(&unknown).unwrap();
    assert_eq!((unknown.claimed_at, unknown.route), (None, None), "a clock before 1970, no route");
}

#[test]
fn records_of_the_upper_case_layout_read_back() {
    let token = FencingToken::generate();
    let in_flight = [&b"L"[..], fp().as_bytes(), &token.to_bytes(), b"2", b"86370000"].concat();
    let expected = Stored {
        fingerprint: fp(),
        state: State::InFlight { token, mark: 86_370_000, graced: false },
        attempt: Some(Attempt::Takeover),
        claimed_at: None,
        route: None,
        steps: Vec::new(),
    };
    assert_eq!(read(&in_flight).unwrap(), expected);
    let graced = [&b"G"[..], &in_flight[1..]].concat();
    assert!(matches!(read(&graced).unwrap().state, State::InFlight { graced: true, .. }));
    let completed = [&b"C"[..], fp().as_bytes(), &[2; 16], b"resp"].concat();
    let read_back = read(&completed).unwrap();
    assert_eq!((read_back.state, read_back.attempt), (State::Completed { response: b"resp" }, None));
    assert_eq!(read(&completed[..49]).unwrap().state, State::Completed { response: b"" });
    let released = [&b"R"[..], fp().as_bytes()].concat();
    let read_back = read(&released).unwrap();
    assert_eq!((read_back.state, read_back.steps), (State::Released, Vec::new()), "no steps in that layout");
}

#[test]
fn a_glance_needs_the_header_alone() {
    let token = FencingToken::generate();
    let value = record(b'h', token, b'2', &entry("charge", &[9; 4096]));
    let expected = Glance {
        fingerprint: fp(),
        state: StateName::Held,
        token: Some(token),
        attempt: Some(Attempt::Takeover),
        claimed_at: Some(at()),
        route: Some(ROUTE),
    };
    assert_eq!(glance(&value[..HEADER + ROUTE.len() + 5]).unwrap(), expected, "steps cut off");
    assert!(glance(&value[..HEADER + 3]).is_err(), "the route cut off");
    assert!(read(&value[..HEADER + ROUTE.len() + 5]).is_err(), "read refuses cut steps");
    assert_eq!(glance(&record(b'c', token, b'0', b"resp")).unwrap().token, None);
    let tombstone = record(b'r', token, b'1', &entry("charge", &[9; 4096]));
    let glanced = glance(&tombstone[..HEADER + ROUTE.len() + 5]).unwrap();
    assert_eq!((glanced.state, glanced.token), (StateName::Released, None), "a tombstone's steps cut off");
}

#[test]
fn long_routes_are_cut_at_a_character_boundary() {
    let long = "é".repeat(6_000);
    let tail = tail(at(), Some(&long));
    assert_eq!(&tail[13..17], b"9998");
    let value = claimed(&fp(), FencingToken::generate(), 1, 2, &tail);
    assert_eq!(read(&value).unwrap().route, Some(&long[..9_998]));
    let far = tail_ms(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 10));
    assert_eq!(far, MAX_CLAIMED_AT_MS, "13 digits at most");
}

fn tail_ms(at: SystemTime) -> u64 {
    digits(&tail(at, None)[..13]).unwrap()
}

#[test]
fn anything_else_is_refused() {
    let token = FencingToken::generate();
    let fp = [3u8; 32];
    let upper = |attempt: u8, mark: &[u8]| [&b"L"[..], &fp, &[4; 16], &[attempt], mark].concat();
    let with = |range: Range<usize>, bytes: &[u8]| {
        let mut value = record(b'l', token, b'0', b"");
        value[range].copy_from_slice(bytes);
        value
    };
    let mut bad = vec![
        Vec::new(),
        b"OK".to_vec(),
        [&b"R"[..], &fp, b"x"].concat(),
        [&b"R"[..], &fp[..31]].concat(),
        [&b"C"[..], &fp, &[0; 15]].concat(),
        upper(b'0', b""),
        upper(b'3', b"10"),
        upper(b'0', b"-1"),
        upper(b'0', b"1 "),
        upper(b'0', b"99999999999999999999999"),
        [&b"X"[..], &fp].concat(),
        // This layout: every field checked.
        record(b'l', token, b'0', b"")[..HEADER - 1].to_vec(),
        record(b'x', token, b'0', b""),
        record(b'L', token, b'0', b""),
        record(b'l', token, b'3', b""),
        with(MARK, b"00000000000001 "),
        with(MARK, b"-00000000000001"),
        with(CLAIMED_AT, b"+000000000001"),
        with(ROUTE_LENGTH, b"0027"),
        with(ROUTE_LENGTH, b"00x6"),
        with(HEADER..HEADER + 2, b"\xff\xfe"),
        record(b'r', token, b'0', b"x"),
        record(b'r', token, b'1', b"006charge0000000002x"),
        record(b'l', token, b'0', b"00"),
        record(b'l', token, b'0', b"006charge000000000"),
        record(b'l', token, b'0', b"006charge0000000002x"),
        record(b'h', token, b'0', b"002\xff\xfe0000000000"),
        record(b'l', token, b'0', b"0x1a0000000000"),
    ];
    let mut after_a_step = record(b'l', token, b'0', &entry("charge", b"1"));
    after_a_step.push(b'0');
    bad.push(after_a_step);
    for bad in bad {
        assert!(read(&bad).is_err(), "{:?}", String::from_utf8_lossy(&bad));
    }
    assert!(read(&upper(b'2', b"0")).is_ok());
}
