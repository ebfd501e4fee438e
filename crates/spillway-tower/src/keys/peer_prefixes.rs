//! How a client's address becomes its key: the network of a given prefix length that holds it,
//! so that one client holding many addresses (an IPv6 host is given a /64) is one key.

use ipnet::{Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr};

/// The prefix lengths that make a client's address a key: the key of an IPv4 client is its
/// /`v4` network, of an IPv6 client its /`v6` network. The default, /32 and /64, keys an IPv4
/// client by its address and an IPv6 one by its /64, the smallest block a network gives one
/// LAN, host or phone (a subscriber may get a /56 or a /48, RFC 6177, and so 256 or 65,536
/// keys): a client that picks a new address from its /64 for each request is still one key.
///
/// A key is written as the network's first address, with `/` and the length when the length
/// is shorter than the address: `192.0.2.7`, `198.51.100.0/24`, `2001:db8:1:2::/64`,
/// `2001:db8::1` (at /128). An IPv6 address that carries an IPv4 client's (`::ffff:192.0.2.7`,
/// NAT64's `64:ff9b::192.0.2.7`, 6to4, Teredo) is keyed as the IPv4 address.
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::PeerIpPrefixes;
///
/// let prefixes = PeerIpPrefixes::default();
/// assert_eq!(prefixes.key("192.0.2.7".parse().unwrap()), "192.0.2.7");
/// assert_eq!(prefixes.key("2001:db8:1:2:a:b:c:d".parse().unwrap()), "2001:db8:1:2::/64");
/// let wide = PeerIpPrefixes::new(24, 48)?;
/// assert_eq!(wide.key("192.0.2.7".parse().unwrap()), "192.0.2.0/24");
/// assert_eq!(PeerIpPrefixes::EXACT.key("2001:db8::1".parse().unwrap()), "2001:db8::1");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIpPrefixes {
    v4: u8,
    v6: u8,
}

impl Default for PeerIpPrefixes {
    /// An IPv4 client's address, an IPv6 client's /64.
    fn default() -> Self {
        Self { v4: 32, v6: 64 }
    }
}

impl PeerIpPrefixes {
    /// Every address a key of its own (/32 and /128).
    pub const EXACT: Self = Self { v4: 32, v6: 128 };

    /// Keys by /`v4` and /`v6` networks.
    ///
    /// # Errors
    ///
    /// A length out of range (1 to 32 for IPv4, 1 to 128 for IPv6), named. A length of 0
    /// would make every client one key: a rule without a key does that.
    pub fn new(v4: u8, v6: u8) -> Result<Self, String> {
        if !(1..=32).contains(&v4) {
            return Err(format!(
                "an IPv4 prefix is from 1 to 32 bits long, not {v4}"
            ));
        }
        if !(1..=128).contains(&v6) {
            return Err(format!(
                "an IPv6 prefix is from 1 to 128 bits long, not {v6}"
            ));
        }
        Ok(Self { v4, v6 })
    }

    /// The IPv4 prefix length.
    pub fn v4(self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub fn v6(self) -> u8 {
        self.v6
    }

    /// The key of a client at `ip`. An IPv6 address that carries an IPv4 client's (written
    /// as IPv6, `::ffff:192.0.2.7`; translated by NAT64, `64:ff9b::192.0.2.7`; a 6to4 site's
    /// `2002:c000:207::/48`; a Teredo client's; the old IPv4-compatible `::192.0.2.7`) is
    /// keyed as that IPv4 address: one IPv4 client, however it reaches the service, is one
    /// key, and two are never one.
    pub fn key(self, ip: IpAddr) -> String {
        match client_address(ip) {
            IpAddr::V4(v4) if self.v4 == 32 => v4_text(v4),
            IpAddr::V4(v4) => {
                let net = Ipv4Net::new(v4, self.v4).map_or(v4, |net| net.network());
                let mut text = v4_text(net);
                text.push('/');
                text.push_str(&self.v4.to_string());
                text
            }
            IpAddr::V6(v6) if self.v6 == 128 => v6.to_string(),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.v6)
                .map_or_else(|_| v6.to_string(), |net| net.trunc().to_string()),
        }
    }

    /// Whether `text`, as a per-key rule's exception or a value to match, names a key these
    /// prefixes make; if not, why, with the key it should be written as when it names an
    /// address or a network within one key.
    ///
    /// # Errors
    ///
    /// `2001:db8::1` under a /64: "is never a client's key: ... write `2001:db8::/64`"; a
    /// network wider than a key (`2001:db8::/48` under a /64), which no one key covers; `vip`:
    /// not an address.
    ///
    /// # Examples
    ///
    /// ```
    /// use spillway_tower::keys::PeerIpPrefixes;
    ///
    /// let prefixes = PeerIpPrefixes::default();
    /// assert!(prefixes.check_key("192.0.2.7").is_ok());
    /// assert!(prefixes.check_key("2001:db8::/64").is_ok());
    /// assert!(prefixes.check_key("2001:db8::1").unwrap_err().contains("`2001:db8::/64`"));
    /// assert!(prefixes.check_key("vip").is_err());
    /// ```
    pub fn check_key(self, text: &str) -> Result<(), String> {
        let (address, length) = match text.parse::<IpAddr>() {
            Ok(address) => (address, None),
            Err(_) => match text.parse::<ipnet::IpNet>() {
                Ok(net) => (net.addr(), Some(net.prefix_len())),
                Err(_) => {
                    return Err(format!(
                        "`{text}` is not an address or a network, so it is never a client's key"
                    ))
                }
            },
        };
        let key = self.key(address);
        if key == text {
            return Ok(());
        }
        // The key's length in the bits `text` is written in (an IPv4 address written as IPv6
        // has 96 more), and how clients of its family are keyed.
        let mapped = matches!(address, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
        let carried = address.is_ipv6() && client_address(address).is_ipv4();
        if carried && !mapped && length.is_some() {
            return Err(format!(
                "`{text}` is a network of addresses that carry IPv4 clients' addresses, which are keyed as those: name each IPv4 key"
            ));
        }
        let (keyed, keyed_as) = match address {
            IpAddr::V4(_) => (self.v4, keyed_as("IPv4", self.v4, 32)),
            IpAddr::V6(_) if mapped => (self.v4 + 96, keyed_as("IPv4", self.v4, 32)),
            IpAddr::V6(_) => (self.v6, keyed_as("IPv6", self.v6, 128)),
        };
        if length.is_some_and(|length| length < keyed) {
            return Err(format!(
                "`{text}` is a wider network than one client's key ({keyed_as}), and no one key covers it: name each key, or key clients by wider networks"
            ));
        }
        Err(format!(
            "`{text}` is never a client's key ({keyed_as}); write `{key}`"
        ))
    }
}

/// The address that names the client at `ip`: the IPv4 address an IPv6 one carries
/// (`::ffff:192.0.2.7`; NAT64's `64:ff9b::192.0.2.7`, 6to4's `2002:c000:207::/48`, a Teredo
/// client's, the old IPv4-compatible `::192.0.2.7`, when the IPv4 address they carry is a
/// global one: one that is private, loopback, link-local or shared could only stand for a
/// host inside), or `ip`.
///
/// # Examples
///
/// ```
/// use spillway_tower::keys::client_address;
///
/// let ip = |text: &str| text.parse::<std::net::IpAddr>().unwrap();
/// assert_eq!(client_address(ip("64:ff9b::7.7.7.1")), ip("7.7.7.1"));
/// assert_eq!(client_address(ip("64:ff9b::10.0.0.5")), ip("64:ff9b::10.0.0.5"));
/// assert_eq!(client_address(ip("2001:db8::1")), ip("2001:db8::1"));
/// ```
pub fn client_address(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip.to_canonical() else {
        return ip.to_canonical();
    };
    let bits = u128::from(v6);
    let low = |shift: u32| Ipv4Addr::from((bits >> shift) as u32);
    let embedded = match v6.segments() {
        // NAT64's well-known prefix, 64:ff9b::/96 (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low(0)),
        // 6to4, 2002:AABB:CCDD::/48 (RFC 3056).
        [0x2002, ..] => Some(low(80)),
        // Teredo, 2001::/32: the client's public address, inverted, in the last 32 bits
        // (RFC 4380).
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!(bits as u32))),
        // IPv4-compatible, ::a.b.c.d (RFC 4291, deprecated), but `::` and `::1`.
        [0, 0, 0, 0, 0, 0, high, _] if high != 0 => Some(low(0)),
        _ => None,
    };
    embedded
        .filter(|v4| global(*v4))
        .map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// Whether `v4` may be a host on the internet: not private, loopback, link-local, shared
/// (100.64.0.0/10), "this network" (0.0.0.0/8), broadcast or multicast.
fn global(v4: Ipv4Addr) -> bool {
    let [first, second, ..] = v4.octets();
    !(v4.is_private()
        || v4.is_loopback()
        || v4.is_link_local()
        || v4.is_broadcast()
        || v4.is_multicast()
        || first == 0
        || (first == 100 && (64..128).contains(&second)))
}

/// How clients of `family` are keyed at `length` of `full` bits.
fn keyed_as(family: &str, length: u8, full: u8) -> String {
    if length == full {
        format!("{family} clients are keyed by their address")
    } else {
        format!("{family} clients are keyed by their /{length} network")
    }
}

/// `ip` as its `Display` writes it, its four numbers written directly (this runs on every
/// request a per-IP rule limits, and the formatting machinery costs more than the rest of the
/// key).
fn v4_text(ip: Ipv4Addr) -> String {
    let mut text = String::with_capacity(18);
    for (index, octet) in ip.octets().into_iter().enumerate() {
        if index > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_written_as_its_display_writes_it() {
        let mut state = 1u64;
        for _ in 0..10_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v4 = Ipv4Addr::from((state >> 32) as u32);
            assert_eq!(v4_text(v4), v4.to_string());
        }
        for ip in ["0.0.0.0", "255.255.255.255", "10.0.100.9", "1.20.255.0"] {
            let v4: Ipv4Addr = ip.parse().unwrap();
            assert_eq!(v4_text(v4), ip);
        }
    }

    #[test]
    fn a_client_is_keyed_by_its_network() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let default = PeerIpPrefixes::default();
        // Every address of one /64 is one key; the next /64 is another.
        let one = default.key(ip("2001:db8:1:2::1"));
        assert_eq!(one, "2001:db8:1:2::/64");
        assert_eq!(default.key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")), one);
        assert_eq!(default.key(ip("2001:db8:1:3::1")), "2001:db8:1:3::/64");
        // IPv4 at /32, written as IPv6 or not.
        assert_eq!(default.key(ip("192.0.2.7")), "192.0.2.7");
        assert_eq!(default.key(ip("::ffff:192.0.2.7")), "192.0.2.7");
        let wide = PeerIpPrefixes::new(24, 48).unwrap();
        assert_eq!(wide.key(ip("192.0.2.7")), "192.0.2.0/24");
        assert_eq!(wide.key(ip("::ffff:192.0.2.200")), "192.0.2.0/24");
        assert_eq!(wide.key(ip("2001:db8:1:2::1")), "2001:db8:1::/48");
        assert_eq!(PeerIpPrefixes::EXACT.key(ip("2001:db8::1")), "2001:db8::1");
        let narrow = PeerIpPrefixes::new(1, 1).unwrap();
        assert_eq!(narrow.key(ip("200.1.1.1")), "128.0.0.0/1");
        assert_eq!(narrow.key(ip("::1")), "::/1");
    }

    #[test]
    fn an_ipv6_address_that_carries_an_ipv4_client_s_is_keyed_as_it() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let default = PeerIpPrefixes::default();
        for (v6, v4) in [
            ("64:ff9b::7.7.7.1", "7.7.7.1"),
            ("64:ff9b::7.7.7.2", "7.7.7.2"),
            ("2002:606:601::1", "6.6.6.1"),
            ("2002:606:601:9::7", "6.6.6.1"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"),
            ("::8.8.8.1", "8.8.8.1"),
            ("::ffff:8.8.8.1", "8.8.8.1"),
        ] {
            assert_eq!(default.key(ip(v6)), v4, "{v6}");
            assert_eq!(PeerIpPrefixes::EXACT.key(ip(v6)), v4, "{v6}");
        }
        // Not IPv4-compatible: the unspecified and the loopback address; a NAT64 address
        // under another prefix.
        assert_eq!(PeerIpPrefixes::EXACT.key(ip("::1")), "::1");
        assert_eq!(PeerIpPrefixes::EXACT.key(ip("::")), "::");
        assert_eq!(default.key(ip("64:ff9b:1::7.7.7.1")), "64:ff9b:1::/64");
        // An exception is written as the key.
        let why = default.check_key("64:ff9b::7.7.7.1").unwrap_err();
        assert!(why.contains("write `7.7.7.1`"), "{why}");
        for network in ["64:ff9b::707:700/120", "2002:606:601::/48"] {
            let why = default.check_key(network).unwrap_err();
            assert!(why.contains("name each IPv4 key"), "{network}: {why}");
        }
        // A carried address that is not a global one stands for a host inside: not mapped.
        assert_eq!(default.key(ip("64:ff9b::10.0.0.5")), "64:ff9b::/64");
        assert_eq!(PeerIpPrefixes::EXACT.key(ip("::127.0.0.1")), "::7f00:1");
        assert_eq!(
            PeerIpPrefixes::EXACT.key(ip("2002:a00:1::1")),
            "2002:a00:1::1"
        );
    }

    #[test]
    fn lengths_out_of_range_are_refused() {
        assert!(PeerIpPrefixes::new(0, 64).unwrap_err().contains("IPv4"));
        assert!(PeerIpPrefixes::new(33, 64).is_err());
        assert!(PeerIpPrefixes::new(32, 0).unwrap_err().contains("IPv6"));
        assert!(PeerIpPrefixes::new(32, 129).is_err());
        assert_eq!(PeerIpPrefixes::new(32, 128).unwrap(), PeerIpPrefixes::EXACT);
    }

    #[test]
    fn a_key_written_by_hand_is_checked_against_the_prefixes() {
        let default = PeerIpPrefixes::default();
        for good in ["192.0.2.7", "2001:db8:1:2::/64", "::/64"] {
            assert_eq!(default.check_key(good), Ok(()), "{good}");
        }
        let cases = [
            (
                "2001:db8:1:2::9",
                "(IPv6 clients are keyed by their /64 network); write `2001:db8:1:2::/64`",
            ),
            ("2001:db8:1:2::9/64", "write `2001:db8:1:2::/64`"),
            ("2001:db8:1:2::/80", "write `2001:db8:1:2::/64`"),
            ("2001:DB8:1:2::/64", "write `2001:db8:1:2::/64`"),
            (
                "192.0.2.7/32",
                "(IPv4 clients are keyed by their address); write `192.0.2.7`",
            ),
            (
                "::ffff:192.0.2.7",
                "(IPv4 clients are keyed by their address); write `192.0.2.7`",
            ),
        ];
        for (text, write) in cases {
            let why = default.check_key(text).unwrap_err();
            assert!(why.contains(write), "{text}: {why}");
        }
        // A network wider than a key is not one key: no spelling is offered.
        for wide in ["2001:db8::/48", "10.0.0.0/8", "::ffff:10.0.0.0/104"] {
            let why = default.check_key(wide).unwrap_err();
            assert!(
                why.contains("wider network") && !why.contains("write"),
                "{wide}: {why}"
            );
        }
        assert!(default
            .check_key("vip")
            .unwrap_err()
            .contains("not an address"));
        let exact = PeerIpPrefixes::EXACT;
        assert_eq!(exact.check_key("2001:db8::9"), Ok(()));
        assert!(exact.check_key("2001:db8::/64").is_err());
    }
}
