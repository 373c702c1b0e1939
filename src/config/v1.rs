//! The cronstable front-end (protocol v1): the ciphertext cap, request limits and timeouts,
//! client-address buckets, trusted proxies.

use std::time::Duration;

use super::apns::Delivery;
use super::reader::Reader;
use super::vars::*;
use crate::delivery::Settings as Core;
use crate::v1::{Intake, Settings};

/// `<10 of A-Z0-9>.<bundle id>`.
fn is_app_id(s: &str) -> bool {
    let Some((team, bundle)) = s.split_once('.') else {
        return false;
    };
    team.len() == 10
        && team
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        && !bundle.is_empty()
        && bundle.len() <= 255
        && bundle
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

pub(super) fn read(r: &mut Reader<'_>, delivery: &Delivery, core: &Core) -> Settings {
    let max_ciphertext_chars = r.int(&RELAY_MAX_CIPHERTEXT_CHARS) as usize;
    super::apns::check_cap(r, max_ciphertext_chars, &core.alert_title, &core.alert_body);
    let max_inflight = r.int(&RELAY_MAX_INFLIGHT) as usize;
    let header_timeout = Duration::from_millis(r.int(&RELAY_HEADER_TIMEOUT_MS));
    let body_timeout = Duration::from_millis(r.int(&RELAY_BODY_TIMEOUT_MS));
    let ip_capacity = r.int(&RELAY_IP_RATE_CAPACITY) as u32;
    let ip_refill = r.float(&RELAY_IP_RATE_REFILL_PER_S);
    let trusted_proxies = match crate::admission::clients::parse_trusted(
        &r.value(&RELAY_TRUSTED_PROXIES).unwrap_or_default(),
    ) {
        Ok(t) => t,
        Err(bad) => {
            r.fail(
                &RELAY_TRUSTED_PROXIES,
                &bad,
                "comma-separated addresses or blocks such as 10.0.0.0/8, fd00::/8",
            );
            Vec::new()
        }
    };
    let aasa_app_ids = match r.set(&RELAY_AASA_APP_IDS) {
        Some(list) => {
            let ids: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
            if !ids.iter().all(|id| is_app_id(id)) {
                r.fail(
                    &RELAY_AASA_APP_IDS,
                    &list,
                    "comma-separated app ids <TEAMID>.<bundle id>, e.g. ABCDE12345.com.example.app",
                );
            }
            Some(ids)
        }
        None => match delivery {
            Delivery::Apns(a) => Some(vec![format!("{}.{}", a.team_id, a.topic)]),
            _ => None,
        },
    };
    let intake = r.choice(
        &RELAY_V1_INTAKE,
        &[Intake::Public, Intake::Local, Intake::Off],
        "public, local or off",
    );
    let sunset = r.set(&RELAY_V1_SUNSET);
    if let Some(v) = &sunset {
        // Sent verbatim as a header value: it must be one, and it should be an HTTP date.
        let printable = v.bytes().all(|b| (0x20..0x7f).contains(&b));
        if !printable || v.len() > 64 || !is_http_date(v) {
            let v = v.clone();
            r.fail(
                &RELAY_V1_SUNSET,
                &v,
                "an HTTP date such as Wed, 01 Jul 2027 00:00:00 GMT",
            );
        }
    }
    Settings {
        intake,
        sunset,
        aasa_app_ids,
        max_ciphertext_chars,
        max_inflight,
        header_timeout,
        body_timeout,
        client_rate: (ip_capacity, ip_refill),
        trusted_proxies,
    }
}

/// `Wed, 01 Jul 2027 00:00:00 GMT` (RFC 9110's IMF-fixdate), checked by shape.
fn is_http_date(s: &str) -> bool {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split(' ').collect();
    let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
    let [day, date, month, year, time, zone] = parts[..] else {
        return false;
    };
    let Some(day) = day.strip_suffix(',') else {
        return false;
    };
    let clock: Vec<&str> = time.split(':').collect();
    DAYS.contains(&day)
        && digits(date, 2)
        && MONTHS.contains(&month)
        && digits(year, 4)
        && clock.len() == 3
        && clock.iter().all(|t| digits(t, 2))
        && zone == "GMT"
}

#[cfg(test)]
mod date_tests {
    #[test]
    fn http_dates() {
        assert!(super::is_http_date("Wed, 01 Jul 2027 00:00:00 GMT"));
        for bad in [
            "2027-07-01",
            "Wed, 1 Jul 2027 00:00:00 GMT",
            "Wed 01 Jul 2027 00:00:00 GMT",
            "Wed, 01 Jul 2027 00:00:00 UTC",
            "Wed, 01 July 2027 00:00:00 GMT",
            "",
        ] {
            assert!(!super::is_http_date(bad), "{bad}");
        }
    }
}
