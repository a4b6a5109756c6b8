//! RFC 9651 parameters after a quoted key (`"abc";foo=1`): checked, then
//! ignored.
//!
//! The grammar (RFC 9651, sections 3.1.2 and 4.2.3.2), as it follows an
//! item: `*( ";" *SP key [ "=" bare-item ] )`, where a key is
//! `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )` and a
//! bare item is an integer, decimal, string, token, byte sequence, boolean,
//! date or display string. Nothing may come between the item and its first
//! `;`, and nothing may follow the last parameter (the caller has already
//! trimmed the header's surrounding whitespace).

/// Why some parameters are malformed.
pub(super) type Reason = &'static str;

/// Checks that `input` is RFC 9651 parameters and nothing else.
pub(super) fn check(mut input: &[u8]) -> Result<(), Reason> {
    while let [b';', rest @ ..] = input {
        input = key(skip_spaces(rest))?;
        if let [b'=', rest @ ..] = input {
            input = bare_item(rest)?;
        }
    }
    match input {
        [] => Ok(()),
        _ => Err("only RFC 9651 parameters (`;name=value`) may follow the closing quote"),
    }
}

fn skip_spaces(mut input: &[u8]) -> &[u8] {
    while let [b' ', rest @ ..] = input {
        input = rest;
    }
    input
}

/// The input after the longest prefix whose bytes all satisfy `accept`.
fn skip_while(input: &[u8], accept: impl Fn(u8) -> bool) -> &[u8] {
    let end = input.iter().position(|&b| !accept(b)).unwrap_or(input.len());
    &input[end..]
}

/// A parameter's name.
fn key(input: &[u8]) -> Result<&[u8], Reason> {
    match input {
        [first, rest @ ..] if first.is_ascii_lowercase() || *first == b'*' => {
            Ok(skip_while(rest, |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)))
        }
        _ => Err("a parameter name must start with a lower-case letter or `*`"),
    }
}

/// A parameter's value.
fn bare_item(input: &[u8]) -> Result<&[u8], Reason> {
    match input {
        [b'-' | b'0'..=b'9', ..] => number(input).map(|(rest, _)| rest),
        [b'"', rest @ ..] => string(rest),
        [b'*' | b'a'..=b'z' | b'A'..=b'Z', rest @ ..] => Ok(skip_while(rest, is_token_char)),
        [b':', rest @ ..] => byte_sequence(rest),
        [b'?', b'0' | b'1', rest @ ..] => Ok(rest),
        [b'@', rest @ ..] => match number(rest)? {
            (rest, false) => Ok(rest),
            (_, true) => Err("a date parameter must be a whole number of seconds"),
        },
        [b'%', b'"', rest @ ..] => display_string(rest),
        _ => Err("a parameter value is not an RFC 9651 bare item"),
    }
}

/// `tchar / ":" / "/"`.
fn is_token_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte)
}

/// An integer (at most 15 digits) or a decimal (at most 12 digits, `.`, 1
/// to 3 digits), with an optional `-`; the rest, and whether it was a
/// decimal.
fn number(input: &[u8]) -> Result<(&[u8], bool), Reason> {
    let unsigned = input.strip_prefix(b"-").unwrap_or(input);
    let after_integer = skip_while(unsigned, |b| b.is_ascii_digit());
    let integer_digits = unsigned.len() - after_integer.len();
    if integer_digits == 0 {
        return Err("a number parameter has no digits");
    }
    let Some(fraction) = after_integer.strip_prefix(b".") else {
        return match integer_digits {
            ..=15 => Ok((after_integer, false)),
            _ => Err("an integer parameter has more than 15 digits"),
        };
    };
    let rest = skip_while(fraction, |b| b.is_ascii_digit());
    match (integer_digits, fraction.len() - rest.len()) {
        (..=12, 1..=3) => Ok((rest, true)),
        _ => Err("a decimal parameter has more than 12 digits before `.` or not 1 to 3 after it"),
    }
}

/// The rest of a string after its opening `"`: printable ASCII and spaces,
/// with `\"` and `\\` escapes.
fn string(mut input: &[u8]) -> Result<&[u8], Reason> {
    loop {
        match input {
            [b'"', rest @ ..] => return Ok(rest),
            [b'\\', b'"' | b'\\', rest @ ..] => input = rest,
            [b'\\', ..] => return Err("only \\\" and \\\\ may be escaped in a string parameter"),
            [b' '..=b'~', rest @ ..] => input = rest,
            [] => return Err("a string parameter is not closed"),
            [_, ..] => return Err("a string parameter holds a control character or a non-ASCII byte"),
        }
    }
}

/// The rest of a byte sequence after its opening `:`: base64, then `:`.
fn byte_sequence(input: &[u8]) -> Result<&[u8], Reason> {
    let Some(end) = input.iter().position(|&b| b == b':') else {
        return Err("a byte sequence parameter is not closed");
    };
    let (base64, rest) = (&input[..end], &input[end + 1..]);
    let data = base64.strip_suffix(b"==").or_else(|| base64.strip_suffix(b"=")).unwrap_or(base64);
    let padded = data.len() != base64.len();
    let valid = data.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        && data.len() % 4 != 1
        && (!padded || base64.len() % 4 == 0);
    if valid { Ok(rest) } else { Err("a byte sequence parameter is not base64") }
}

/// The rest of a display string after its opening `%"`: printable ASCII,
/// with `%` and two lower-case hex digits for each byte of non-ASCII UTF-8.
fn display_string(mut input: &[u8]) -> Result<&[u8], Reason> {
    let mut bytes = Vec::new();
    loop {
        match input {
            [b'"', rest @ ..] => {
                return match std::str::from_utf8(&bytes) {
                    Ok(_) => Ok(rest),
                    Err(_) => Err("a display string parameter is not UTF-8"),
                };
            }
            [b'%', high, low, rest @ ..] => {
                let (Some(high), Some(low)) = (lower_hex(*high), lower_hex(*low)) else {
                    return Err("a display string parameter has a `%` without two lower-case hex digits");
                };
                bytes.push(high << 4 | low);
                input = rest;
            }
            [b'%', ..] => return Err("a display string parameter has a `%` without two lower-case hex digits"),
            [byte @ b' '..=b'~', rest @ ..] => {
                bytes.push(*byte);
                input = rest;
            }
            [] => return Err("a display string parameter is not closed"),
            [_, ..] => return Err("a display string parameter holds a control character or a non-ASCII byte"),
        }
    }
}

fn lower_hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_kind_of_value() {
        for params in [
            "",
            ";a",
            ";a;b",
            "; a;  b=1",
            ";a=-0;b=123456789012345;c=-123456789012.123;d=0.1",
            r#";a="";b="with space \" and \\ escapes""#,
            ";a=Tok;b=*t;c=a:b/c!#$%&'*+-.^_`|~9",
            ";a=::;b=:aGk=:;c=:aGVsbG8=:;d=:YQ==:;e=:YQ:",
            ";a=?0;b=?1",
            ";a=@0;b=@-1;c=@1700000000",
            r#";a=%"";b=%"plain";c=%"caf%c3%a9 %22%25""#,
            ";*;a*b.c-d_e9",
        ] {
            assert_eq!(check(params.as_bytes()), Ok(()), "{params}");
        }
    }

    #[test]
    fn refuses_what_the_grammar_does_not_allow() {
        for params in [
            " ;a",
            ";",
            ";a;",
            ";_a",
            ";a=",
            ";a= 1",
            ";a=1 ",
            ";a=--1",
            ";a=1.",
            ";a=.5",
            ";a=1.2.3",
            ";a=1234567890123456",
            ";a=1.2345",
            ";a=1234567890123.1",
            ";a=\"x",
            ";a=\"\\x\"",
            ";a=\"\u{7f}\"",
            ";a=?",
            ";a=?true",
            ";a=@",
            ";a=@1.5",
            ";a=:aGk",
            ";a=:a:",
            ";a=:a=b=:",
            ";a=:YQ=:",
            ";a=%x",
            ";a=%\"%2\"",
            ";a=%\"%E9\"",
            ";a=%\"%e9\"",
            ";a=%\"open",
            ";a=b,c",
            ";a=(1)",
            "x",
        ] {
            assert!(check(params.as_bytes()).is_err(), "{params:?}");
        }
    }
}
