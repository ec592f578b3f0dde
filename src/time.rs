//! Time stamps as records and traces write them: RFC 3339 in UTC with
//! milliseconds. The lowest layer, so the agent loop, the tactic runner and
//! batch share one helper without importing each other.

/// Now as a record writes times: `2026-11-22T08:15:00.123Z`.
pub fn timestamp() -> String {
    format_timestamp(chrono::Utc::now())
}

/// RFC 3339 in UTC with milliseconds, as chrono's
/// `to_rfc3339_opts(SecondsFormat::Millis, true)` writes it (records have
/// four per agent call and run; chrono's way costs several times more).
pub(crate) fn format_timestamp(time: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::{Datelike, Timelike};
    if !(0..=9999).contains(&time.year()) {
        return time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    }
    let time = time.naive_utc();
    let mut text = String::with_capacity(24);
    push_digits(&mut text, time.year() as u32, 4);
    text.push('-');
    push_digits(&mut text, time.month(), 2);
    text.push('-');
    push_digits(&mut text, time.day(), 2);
    text.push('T');
    push_digits(&mut text, time.hour(), 2);
    text.push(':');
    push_digits(&mut text, time.minute(), 2);
    text.push(':');
    // A leap second (nanoseconds past one second) shows as second 60.
    let nanos = time.nanosecond();
    push_digits(&mut text, time.second() + nanos / 1_000_000_000, 2);
    text.push('.');
    push_digits(&mut text, nanos % 1_000_000_000 / 1_000_000, 3);
    text.push('Z');
    text
}

/// A time stamp as [`format_timestamp`] writes it, read without chrono's
/// general parser (a traced run's spans read four or more, and chrono's
/// RFC 3339 parser cost about 400 instructions each: callgrind,
/// docs/benchmarks.md, "Telemetry"); any other RFC 3339 time (an offset, no
/// or more fraction digits, a leap second) by chrono's. `None` when it is
/// no RFC 3339 time.
#[cfg(any(feature = "otel", test))]
pub(crate) fn parse_timestamp(text: &str) -> Option<std::time::SystemTime> {
    let bytes = text.as_bytes();
    let ours = bytes.len() == 24
        && [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (23, b'Z'),
        ]
        .iter()
        .all(|&(at, byte)| bytes[at] == byte);
    if ours {
        let number = |from: usize, to: usize| {
            bytes[from..to].iter().try_fold(0u32, |number, digit| {
                digit
                    .is_ascii_digit()
                    .then(|| number * 10 + u32::from(digit - b'0'))
            })
        };
        let read = (|| {
            let date = chrono::NaiveDate::from_ymd_opt(
                number(0, 4)? as i32,
                number(5, 7)?,
                number(8, 10)?,
            )?;
            date.and_hms_milli_opt(
                number(11, 13)?,
                number(14, 16)?,
                number(17, 19)?,
                number(20, 23)?,
            )
        })();
        if let Some(time) = read {
            return Some(std::time::SystemTime::from(time.and_utc()));
        }
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(std::time::SystemTime::from)
}

/// `value` in exactly `width` decimal digits (zero-padded; higher digits cut).
fn push_digits(text: &mut String, value: u32, width: u32) {
    // Constant divisors: each digit is a multiply, not a division.
    let digits = [
        value / 1000 % 10,
        value / 100 % 10,
        value / 10 % 10,
        value % 10,
    ];
    for digit in &digits[4 - width as usize..] {
        text.push(char::from(b'0' + *digit as u8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_stamps_read_as_chrono_writes_them() {
        use chrono::{NaiveDate, TimeZone, Utc};
        let at = |y, mo, d, h, mi, s, ms| {
            let time = NaiveDate::from_ymd_opt(y, mo, d)
                .and_then(|date| date.and_hms_milli_opt(h, mi, s, ms))
                .unwrap();
            Utc.from_utc_datetime(&time)
        };
        let mut times = vec![
            at(2026, 11, 22, 8, 15, 0, 123),
            at(1999, 1, 2, 3, 4, 5, 6),
            at(2000, 12, 31, 23, 59, 59, 999),
            at(2016, 12, 31, 23, 59, 59, 1500), // a leap second
            at(12, 1, 1, 0, 0, 0, 0),
            at(10000, 1, 1, 0, 0, 0, 0),
            Utc::now(),
        ];
        times.push(times[0] + chrono::Duration::nanoseconds(999_999));
        for time in times {
            let chrono = time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            assert_eq!(format_timestamp(time), chrono);
            // And read back as chrono reads it.
            assert_eq!(
                parse_timestamp(&chrono),
                chrono::DateTime::parse_from_rfc3339(&chrono)
                    .ok()
                    .map(std::time::SystemTime::from),
                "{chrono}"
            );
        }
        // Other RFC 3339 times, and none.
        for text in [
            "2026-11-22T09:15:00.123+01:00",
            "2026-11-22T08:15:00Z",
            "2026-11-22T08:15:00.123456Z",
            "2016-12-31T23:59:60.500Z",
            "2026-02-30T08:15:00.123Z",
            "2026-11-22T08:15:00.1a3Z",
            "yesterday",
        ] {
            assert_eq!(
                parse_timestamp(text),
                chrono::DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(std::time::SystemTime::from),
                "{text}"
            );
        }
        assert_eq!(
            parse_timestamp("2026-11-22T09:15:00.123+01:00"),
            parse_timestamp("2026-11-22T08:15:00.123Z")
        );
    }
}
