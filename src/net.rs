//! Which destination addresses webhooks may reach (docs/decisions.md#webhooks, docs/decisions.md#faults-and-floods): only globally
//! routable ones, unless an address is in the configured allow-list or the webhook has
//! `allowBlockedHosts`. Pure rules, shared by registration (literal addresses are refused when
//! a webhook is created) and delivery (`delivery::ssrf`, which also checks what names resolve
//! to). Depends on nothing of the service.

use std::net::IpAddr;

use ipnet::IpNet;

/// Blocks that are not globally routable (IANA special-purpose registries, RFC 6890 and
/// successors). IPv4-mapped IPv6 addresses are checked as IPv4 first.
const BLOCKED: &[&str] = &[
    "0.0.0.0/8",       // "this network", unspecified
    "10.0.0.0/8",      // RFC 1918
    "100.64.0.0/10",   // CGNAT, RFC 6598
    "127.0.0.0/8",     // loopback
    "169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
    "172.16.0.0/12",   // RFC 1918
    "192.0.0.0/24",    // IETF protocol assignments
    "192.0.2.0/24",    // TEST-NET-1
    "192.88.99.0/24",  // 6to4 relay anycast
    "192.168.0.0/16",  // RFC 1918
    "198.18.0.0/15",   // benchmarking
    "198.51.100.0/24", // TEST-NET-2
    "203.0.113.0/24",  // TEST-NET-3
    "224.0.0.0/4",     // multicast
    "240.0.0.0/4",     // reserved, and broadcast
    "::/128",          // unspecified
    "::1/128",         // loopback
    "::/96",           // IPv4-compatible (deprecated)
    "64:ff9b::/96",    // NAT64
    "64:ff9b:1::/48",  // local-use NAT64
    "100::/64",        // discard-only
    "2001::/23",       // IETF protocol assignments (Teredo, benchmarking, ORCHID)
    "2001:db8::/32",   // documentation
    "2002::/16",       // 6to4
    "3fff::/20",       // documentation
    "fc00::/7",        // unique local
    "fe80::/10",       // link-local
    "fec0::/10",       // site-local (deprecated)
    "ff00::/8",        // multicast
];

fn blocked_nets() -> &'static [IpNet] {
    static NETS: std::sync::OnceLock<Vec<IpNet>> = std::sync::OnceLock::new();
    NETS.get_or_init(|| BLOCKED.iter().filter_map(|s| s.parse().ok()).collect())
}

/// An IPv4-mapped IPv6 address as IPv4; anything else unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// True when `ip` is globally routable: in none of the blocked ranges above.
pub fn is_global(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    !blocked_nets().iter().any(|n| n.contains(&ip))
}

/// Decides which destination addresses delivery may connect to.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Blocks allowed even though not globally routable (`delivery.allowed_cidrs`).
    pub allowed: Vec<IpNet>,
}

impl Guard {
    /// True when delivery may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        is_global(ip) || self.allowed.iter().any(|n| n.contains(&ip))
    }
}

/// Why a destination was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("destination {host} resolves to {ip}, which is not a globally routable address (SSRF guard)")]
    Blocked { host: String, ip: IpAddr },
    #[error("destination {0} did not resolve to any address")]
    NoAddress(String),
}

/// Checks a URL whose host is an IP literal (the resolver is not asked for those).
pub fn check_literal(guard: &Guard, url: &url::Url) -> Result<(), Refused> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if guard.permits(ip) {
        Ok(())
    } else {
        Err(Refused::Blocked { host: ip.to_string(), ip })
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn private_and_special_ranges_are_refused() {
        let g = Guard::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
            assert!(!g.permits(ip), "{ip} must be refused");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            let ip: IpAddr = ip.parse().unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST));
            assert!(g.permits(ip), "{ip} must be allowed");
        }
    }

    #[test]
    fn allow_list_overrides() {
        let g = Guard { allowed: vec!["127.0.0.0/8".parse().unwrap_or_else(|_| IpNet::default())] };
        assert!(g.permits("127.0.0.1".parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))));
        assert!(g.permits("::ffff:127.0.0.2".parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))));
        assert!(!g.permits("10.0.0.1".parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))));
    }
}
