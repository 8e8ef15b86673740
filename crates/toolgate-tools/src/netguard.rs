//! The SSRF guard of `fetch_url`: which addresses a model may make toolgate connect to.
//!
//! Refused unless `allow_private_network = true`: loopback, private, link-local (where cloud
//! metadata lives), unique-local, CGNAT, multicast, reserved, documentation, benchmark and
//! unspecified ranges, and IPv6 forms that embed a refused IPv4 address (mapped, compatible,
//! NAT64, 6to4) or hide one (Teredo). Every spelling reaches these checks as an address: the
//! `url` crate turns decimal, octal, hex and short IPv4 forms and trailing dots into IP literals,
//! names are checked on the addresses they resolve to (the ones then connected to), and every
//! redirect hop is checked again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Refused IPv4 ranges: (network, prefix length, what it is).
const V4: &[(u32, u8, &str)] = &[
    (0x0000_0000, 8, "the unspecified \"this network\" range"),
    (0x0a00_0000, 8, "a private network (10/8)"),
    (0x6440_0000, 10, "carrier-grade NAT (100.64/10)"),
    (0x7f00_0000, 8, "loopback"),
    (0xa9fe_0000, 16, "link-local (where cloud metadata services live)"),
    (0xac10_0000, 12, "a private network (172.16/12)"),
    (0xc000_0000, 24, "IETF protocol assignments (192.0.0/24)"),
    (0xc000_0200, 24, "documentation (192.0.2/24)"),
    (0xc058_6300, 24, "the 6to4 relay range (192.88.99/24)"),
    (0xc0a8_0000, 16, "a private network (192.168/16)"),
    (0xc612_0000, 15, "benchmarking (198.18/15)"),
    (0xc633_6400, 24, "documentation (198.51.100/24)"),
    (0xcb00_7100, 24, "documentation (203.0.113/24)"),
    (0xe000_0000, 4, "multicast"),
    (0xf000_0000, 4, "reserved (240/4, broadcast)"),
];

/// Refused IPv6 ranges.
const V6: &[(u128, u8, &str)] = &[
    (0, 128, "the unspecified address"),
    (1, 128, "loopback"),
    (
        0x0100_0000_0000_0000_0000_0000_0000_0000,
        64,
        "the discard range (100::/64)",
    ),
    (
        0x2001_0000_0000_0000_0000_0000_0000_0000,
        32,
        "Teredo (hides an IPv4 address)",
    ),
    (0x2001_0010_0000_0000_0000_0000_0000_0000, 28, "ORCHID"),
    (0x2001_0020_0000_0000_0000_0000_0000_0000, 28, "ORCHIDv2"),
    (
        0x2001_0db8_0000_0000_0000_0000_0000_0000,
        32,
        "documentation (2001:db8::/32)",
    ),
    (
        0x3fff_0000_0000_0000_0000_0000_0000_0000,
        20,
        "documentation (3fff::/20)",
    ),
    (
        0xfc00_0000_0000_0000_0000_0000_0000_0000,
        7,
        "unique-local (fc00::/7, cloud metadata on some)",
    ),
    (0xfe80_0000_0000_0000_0000_0000_0000_0000, 10, "link-local"),
    (0xfec0_0000_0000_0000_0000_0000_0000_0000, 10, "site-local"),
    (0xff00_0000_0000_0000_0000_0000_0000_0000, 8, "multicast"),
];

/// Names refused before any lookup (they resolve to internal services).
const NAMES: &[&str] = &["localhost", "metadata.google.internal", "metadata.goog", "metadata"];

/// Why an IPv4 address is refused, if it is.
pub fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    V4.iter()
        .find(|(net, prefix, _)| {
            let mask = if *prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(*prefix))
            };
            bits & mask == *net
        })
        .map(|(_, _, why)| *why)
}

/// Why an IPv6 address is refused, if it is (embedded IPv4 addresses are checked as IPv4).
pub fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    let in_net = |net: u128, prefix: u32| {
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        bits & mask == net
    };
    // Forms that carry an IPv4 address: the IPv4 rules decide.
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    // IPv4-mapped (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96) and NAT64 (64:ff9b::/96).
    if in_net(0x0000_0000_0000_0000_0000_ffff_0000_0000, 96)
        || in_net(0x0000_0000_0000_0000_ffff_0000_0000_0000, 96)
        || in_net(0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96)
    {
        return forbidden_v4(low32);
    }
    if in_net(0x0064_ff9b_0001_0000_0000_0000_0000_0000, 48) {
        return Some("local-use NAT64 (64:ff9b:1::/48), which reaches internal IPv4 networks");
    }
    if in_net(0x2002_0000_0000_0000_0000_0000_0000_0000, 16) {
        return forbidden_v4(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    if let Some((_, _, why)) = V6.iter().find(|(net, prefix, _)| in_net(*net, u32::from(*prefix))) {
        return Some(why);
    }
    if in_net(0, 96) {
        // IPv4-compatible (deprecated): refused whatever it embeds.
        return Some("an IPv4-compatible address (::/96)");
    }
    None
}

/// Why an address is refused, if it is.
pub fn forbidden_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

/// Why a host name is refused before any lookup, if it is.
pub fn forbidden_name(host: &str) -> Option<&'static str> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if NAMES.contains(&host.as_str()) || host.ends_with(".localhost") {
        return Some("a name for this machine or a metadata service");
    }
    None
}

/// The guard's settings.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    /// Turns the guard off (`[fetch] allow_private_network = true`).
    pub allow_private_network: bool,
    /// Addresses allowed although their range is refused (one internal service, say).
    pub allow_addresses: Vec<IpAddr>,
}

impl Guard {
    fn refusal(&self, what: &str, why: &str) -> String {
        format!(
            "refused: {what} is {why}; fetch_url does not reach private or internal networks unless the configuration sets [fetch] allow_private_network = true"
        )
    }

    /// Checks an address about to be connected to.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        if self.allow_private_network || self.allow_addresses.contains(&ip) {
            return Ok(());
        }
        match forbidden_ip(ip) {
            Some(why) => Err(self.refusal(&ip.to_string(), why)),
            None => Ok(()),
        }
    }

    /// Checks a resolved address list: every address must pass (a name that resolves to one
    /// public and one private address is refused).
    pub fn check_resolved(&self, name: &str, addrs: &[SocketAddr]) -> Result<(), String> {
        if addrs.is_empty() {
            return Err(format!("{name} resolves to no address"));
        }
        for a in addrs {
            self.check_ip(a.ip()).map_err(|e| {
                e.replacen(
                    "refused: ",
                    &format!("refused: {name} resolves to {} which ", a.ip()),
                    1,
                )
            })?;
        }
        Ok(())
    }

    /// Checks a URL before it is requested (and each redirect hop): the scheme, an IP-literal
    /// host, a refused name.
    pub fn check_url(&self, url: &url::Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "refused: only http and https URLs are fetched, not {}:",
                url.scheme()
            ));
        }
        match url.host() {
            None => Err("refused: the URL has no host".into()),
            Some(url::Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip)),
            Some(url::Host::Domain(name)) => {
                if self.allow_private_network {
                    return Ok(());
                }
                match forbidden_name(name) {
                    Some(why) => Err(self.refusal(name, why)),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decision function on every refused range (no traffic: nothing is connected to).
    #[test]
    fn forbidden_addresses_in_every_spelling() {
        let guard = Guard::default();
        let refused = [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://127.0.0.1./",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[0:0:0:0:0:ffff:169.254.169.254]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[::ffff:0:7f00:1]/",
            "http://[::ffff:0:169.254.169.254]/",
            "http://[64:ff9b:1::8.8.8.8]/",
            "http://[64:ff9b:1:ffff::1]/",
            "http://[2002:7f00:1::]/",
            "http://[2001::1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://2852039166/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]/",
            "http://10.0.0.1/",
            "http://172.16.5.4/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://100.100.100.200/",
            "http://0.0.0.0/",
            "http://0/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://[ff02::1]/",
            "http://240.0.0.1/",
            "http://255.255.255.255/",
            "http://198.18.0.1/",
            "http://192.0.2.1/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://app.localhost/",
            "http://metadata.google.internal/",
            "http://metadata/",
            "file:///etc/passwd",
            "gopher://example.com/",
        ];
        for text in refused {
            let url = url::Url::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let e = guard.check_url(&url).expect_err(text);
            assert!(e.starts_with("refused"), "{text}: {e}");
            if url.scheme().starts_with("http") {
                assert!(
                    e.contains("allow_private_network"),
                    "{text}: the message names the switch: {e}"
                );
            }
        }
        assert!(refused.len() >= 25);
    }

    #[test]
    fn public_addresses_pass_and_the_switches_work() {
        let guard = Guard::default();
        for text in [
            "https://docs.rs/tokio",
            "http://93.184.216.34/",
            "http://[2606:2800:220:1:248:1893:25c8:1946]/",
            "http://[::ffff:8.8.8.8]/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
        ] {
            let url = url::Url::parse(text).unwrap();
            assert_eq!(guard.check_url(&url), Ok(()), "{text}");
        }
        let open = Guard {
            allow_private_network: true,
            ..Guard::default()
        };
        assert!(
            open.check_url(&url::Url::parse("http://127.0.0.1:8080/").unwrap())
                .is_ok()
        );
        let one = Guard {
            allow_addresses: vec!["127.0.0.1".parse().unwrap()],
            ..Guard::default()
        };
        assert!(one.check_ip("127.0.0.1".parse().unwrap()).is_ok());
        assert!(one.check_ip("127.0.0.2".parse().unwrap()).is_err());
        let mixed: Vec<SocketAddr> = vec!["93.184.216.34:80".parse().unwrap(), "10.1.1.1:80".parse().unwrap()];
        let e = guard.check_resolved("evil.example", &mixed).unwrap_err();
        assert!(e.contains("evil.example resolves to 10.1.1.1"), "{e}");
    }
}
