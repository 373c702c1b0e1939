//! The process's own numbers, read from `/proc/self` (Linux; elsewhere nothing is exported).

/// One reading.
pub(super) struct Reading {
    pub cpu_s: f64,
    pub rss_bytes: u64,
    pub vsize_bytes: u64,
    pub open_fds: usize,
    pub max_fds: Option<u64>,
}

/// Clock ticks per second and page size: the values every Linux on the platforms this
/// runs on uses (sysconf would need libc).
const TICKS_PER_S: f64 = 100.0;
const PAGE_SIZE: u64 = 4096;

/// Fields of `/proc/self/stat` after the command name: (utime, stime, starttime,
/// vsize, rss pages).
pub(super) fn parse_stat(stat: &str) -> Option<(u64, u64, u64, u64, u64)> {
    // The command name is in parentheses and may hold spaces: split after its end.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15, starttime 22,
    // vsize 23, rss 24.
    let get = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some((get(14)?, get(15)?, get(22)?, get(23)?, get(24)?))
}

pub(super) fn read() -> Option<Reading> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (utime, stime, _start, vsize, rss) = parse_stat(&stat)?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse().ok())
        });
    Some(Reading {
        cpu_s: (utime + stime) as f64 / TICKS_PER_S,
        rss_bytes: rss * PAGE_SIZE,
        vsize_bytes: vsize,
        open_fds,
        max_fds,
    })
}

/// The process start time, Unix seconds (0 when unknown).
pub(super) fn start_time_s() -> f64 {
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    let start = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_stat(&s))
        .map(|f| f.2 as f64 / TICKS_PER_S);
    match (boot, start) {
        (Some(b), Some(s)) => b + s,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_fields_are_read_past_a_command_name_with_spaces() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 12345 987654321 2048 18446744073709551615";
        assert_eq!(
            super::parse_stat(stat),
            Some((250, 50, 12345, 987654321, 2048))
        );
        assert_eq!(super::parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let r = super::read().expect("/proc/self is readable on Linux");
        assert!(r.rss_bytes > 0 && r.open_fds > 0);
        assert!(super::start_time_s() > 1.0e9);
    }
}
