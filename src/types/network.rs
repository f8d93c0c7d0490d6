//! Client addresses: CIDR blocks, as `ipRestrict` and `delivery.allowed_cidrs` hold them.

/// An IP address or CIDR block of `ipRestrict` (spec §4.3), parsed once: host bits cleared,
/// IPv4-mapped IPv6 blocks (`::ffff:a.b.c.d/n`, n >= 96) as IPv4 so that they compare with the
/// IPv4 addresses clients connect from. Written as the address alone for a single host, else
/// `network/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr(ipnet::IpNet);

impl Cidr {
    /// Parses an address or a block; the error says why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let net = parse_cidr(text.trim())?;
        if let ipnet::IpNet::V6(v6) = net {
            if let (Some(v4), true) = (v6.addr().to_ipv4_mapped(), v6.prefix_len() >= 96) {
                let v4 = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_err(|e| e.to_string())?;
                return Ok(Cidr(ipnet::IpNet::V4(v4)));
            }
        }
        Ok(Cidr(net))
    }

    /// Whether `ip` lies in the block.
    pub fn contains_ip(&self, ip: &std::net::IpAddr) -> bool {
        self.0.contains(ip)
    }

    /// Whether `other` lies wholly inside this block.
    pub fn contains(&self, other: &Cidr) -> bool {
        self.0.contains(&other.0)
    }

    /// The prefix length and whether the block is IPv4.
    pub fn prefix(&self) -> (u8, bool) {
        (self.0.prefix_len(), matches!(self.0, ipnet::IpNet::V4(_)))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.prefix_len() == self.0.max_prefix_len() {
            write!(f, "{}", self.0.addr())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parses an IP address (as a single-host block) or a CIDR block, normalised to its network address.
pub fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    if let Ok(net) = s.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    s.parse::<std::net::IpAddr>()
        .map(ipnet::IpNet::from)
        .map_err(|_| format!("{s:?} is neither an IP address nor a CIDR block"))
}
