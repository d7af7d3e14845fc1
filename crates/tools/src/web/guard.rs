//! SSRF guard for URLs the model asks us to fetch (engineering notes §6.3 rule 5).
//!
//! A URL is allowed only if it is `http`/`https` and every address its host stands for is a
//! public unicast address. Refused: unspecified, loopback, private (RFC 1918), CGNAT
//! (100.64/10, which also holds Alibaba's metadata address), link-local (169.254/16, which
//! holds the AWS/GCP/Azure metadata address), IETF/documentation/benchmark ranges,
//! multicast, reserved and broadcast; for IPv6 also unique-local (fc00::/7, with AWS's
//! `fd00:ec2::254`), link-local, site-local, multicast and documentation ranges, and any IPv4
//! embedded in IPv4-mapped, IPv4-compatible, NAT64 (64:ff9b::/96), 6to4 or Teredo addresses
//! is checked as IPv4.
//!
//! The check runs on the URL of every hop (redirects are followed by hand) and again inside
//! the HTTP client's DNS resolver ([`GuardedResolver`]), so a name that resolves to a public
//! address during the check and to a private one at connect time (DNS rebinding) is refused
//! too. Proxies are never used by the guarded client.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use url::{Host, Url};

/// Why an address is refused (`None`: allowed).
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let reason = match o {
        [169, 254, 169, 254] => "a cloud metadata address",
        [0, ..] => "an unspecified/\"this network\" address",
        [127, ..] => "a loopback address",
        [10, ..] => "a private address",
        [172, b, ..] if (16..=31).contains(&b) => "a private address",
        [192, 168, ..] => "a private address",
        [100, b, ..] if (64..=127).contains(&b) => "a shared (CGNAT) address",
        [169, 254, ..] => "a link-local address",
        [192, 0, 0, _] => "an IETF protocol address",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "a documentation address",
        [198, 18..=19, ..] => "a benchmarking address",
        [192, 88, 99, _] => "a deprecated relay address",
        [224..=239, ..] => "a multicast address",
        [240..=255, ..] => "a reserved address",
        _ => return None,
    };
    Some(reason)
}

fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (deprecated compatible form)
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
        return Some(tail);
    }
    // 64:ff9b::/96 NAT64 and 64:ff9b:1::/48 local-use NAT64
    if s[0] == 0x64 && s[1] == 0xff9b {
        return Some(tail);
    }
    // 2002::/16 6to4: the IPv4 address is in bits 16..48
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    // 2001:0::/32 Teredo: the client's IPv4 is the last 32 bits, inverted
    if s[0] == 0x2001 && s[1] == 0 {
        return Some(Ipv4Addr::new(!o[12], !o[13], !o[14], !o[15]));
    }
    None
}

fn blocked_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    if let Some(v4) = embedded_v4(ip) {
        if ip.segments()[0] == 0x2001 {
            // Teredo tunnels bypass address checks altogether.
            return Some("a Teredo tunnel address");
        }
        return blocked_v4(v4);
    }
    let s = ip.segments();
    let reason = match s[0] {
        _ if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => "a cloud metadata address",
        x if x & 0xfe00 == 0xfc00 => "a unique-local address",
        x if x & 0xffc0 == 0xfe80 => "a link-local address",
        x if x & 0xffc0 == 0xfec0 => "a site-local address",
        x if x & 0xff00 == 0xff00 => "a multicast address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        0x3fff if s[1] & 0xf000 == 0 => "a documentation address",
        0x0100 if s[1..4] == [0, 0, 0] => "a discard-only address",
        _ => return None,
    };
    Some(reason)
}

/// A refused URL, with a text the model can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("only http and https URLs can be fetched, got '{0}:'")]
    Scheme(String),
    #[error("the URL has no host")]
    NoHost,
    #[error(
        "{host} is {reason}; private, loopback, link-local and cloud-metadata addresses cannot be fetched"
    )]
    Blocked { host: String, reason: &'static str },
    #[error(
        "{host} resolves to {ip}, which is {reason}; private, loopback, link-local and cloud-metadata addresses cannot be fetched"
    )]
    ResolvesToBlocked {
        host: String,
        ip: IpAddr,
        reason: &'static str,
    },
    #[error("could not resolve {host}: {detail}")]
    Resolve { host: String, detail: String },
}

/// Network policy for fetching model-chosen URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SsrfPolicy {
    /// `web.allow_private_addresses`: disables the address checks (self-hosted setups).
    pub allow_private: bool,
    /// Exact `ip:port` pairs that are allowed even though private, when the URL names that IP
    /// literally. For trusted local services; the test suite uses it for a stub that
    /// redirects elsewhere. Names are never matched against this list.
    pub exempt: Vec<SocketAddr>,
}

impl SsrfPolicy {
    pub fn strict() -> Self {
        SsrfPolicy::default()
    }

    /// Checks what can be checked without DNS: the scheme and, for an IP literal host, the
    /// address. Returns the host name to resolve when the host is a domain.
    pub fn check_literal(&self, url: &Url) -> Result<Option<String>, GuardError> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(GuardError::Scheme(other.to_string())),
        }
        let host = url.host().ok_or(GuardError::NoHost)?;
        let ip = match host {
            Host::Domain(d) => return Ok(Some(d.to_string())),
            Host::Ipv4(v4) => IpAddr::V4(v4),
            Host::Ipv6(v6) => IpAddr::V6(v6),
        };
        if self.allow_private {
            return Ok(None);
        }
        let port = url.port_or_known_default().unwrap_or(0);
        if self.exempt.contains(&SocketAddr::new(ip, port)) {
            return Ok(None);
        }
        match blocked_reason(ip) {
            Some(reason) => Err(GuardError::Blocked {
                host: ip.to_string(),
                reason,
            }),
            None => Ok(None),
        }
    }

    /// Full check: scheme, IP literal, and every address a domain resolves to.
    pub async fn check(&self, url: &Url) -> Result<(), GuardError> {
        let Some(domain) = self.check_literal(url)? else {
            return Ok(());
        };
        if self.allow_private {
            return Ok(());
        }
        resolve_checked(&domain).await.map(|_| ())
    }
}

/// Resolves `host` and fails if any address is blocked (or none was found).
pub async fn resolve_checked(host: &str) -> Result<Vec<SocketAddr>, GuardError> {
    let host_clean = host.trim_end_matches('.');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host_clean, 0))
        .await
        .map_err(|e| GuardError::Resolve {
            host: host.to_string(),
            detail: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(GuardError::Resolve {
            host: host.to_string(),
            detail: "no addresses".into(),
        });
    }
    for a in &addrs {
        if let Some(reason) = blocked_reason(a.ip()) {
            return Err(GuardError::ResolvesToBlocked {
                host: host.to_string(),
                ip: a.ip(),
                reason,
            });
        }
    }
    Ok(addrs)
}

/// The guarded client's DNS resolver: resolves with the system resolver and refuses the whole
/// name if any address is blocked.
#[derive(Debug, Default, Clone)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = resolve_checked(&host)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Finds a [`GuardError`] in an error's source chain (reqwest wraps resolver errors).
pub fn find_guard_error(e: &(dyn std::error::Error + 'static)) -> Option<GuardError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(g) = err.downcast_ref::<GuardError>() {
            return Some(g.clone());
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn blocked(s: &str) -> bool {
        blocked_reason(IpAddr::from_str(s).unwrap()).is_some()
    }

    #[test]
    fn ipv4_ranges() {
        for s in [
            "0.0.0.0",
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "192.0.0.170",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(blocked(s), "{s} should be blocked");
        }
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "93.184.216.34",
        ] {
            assert!(!blocked(s), "{s} should be allowed");
        }
        assert_eq!(
            blocked_reason("169.254.169.254".parse().unwrap()),
            Some("a cloud metadata address")
        );
    }

    #[test]
    fn ipv6_ranges() {
        for s in [
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:7f00:1::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            assert!(blocked(s), "{s} should be blocked");
        }
        for s in ["2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(!blocked(s), "{s} should be allowed");
        }
    }

    #[test]
    fn literal_checks() {
        let p = SsrfPolicy::strict();
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(matches!(
            p.check_literal(&u("file:///etc/passwd")),
            Err(GuardError::Scheme(_))
        ));
        assert!(p.check_literal(&u("http://127.0.0.1:8080/")).is_err());
        assert!(p.check_literal(&u("http://[::1]/")).is_err());
        assert!(p.check_literal(&u("http://[::ffff:7f00:1]/")).is_err());
        // WHATWG parsing turns these spellings into 127.0.0.1.
        assert!(p.check_literal(&u("http://2130706433/")).is_err());
        assert!(p.check_literal(&u("http://0x7f.1/")).is_err());
        assert!(p.check_literal(&u("http://0/")).is_err());
        assert_eq!(
            p.check_literal(&u("https://example.com/x")).unwrap(),
            Some("example.com".to_string())
        );
        let exempt = SsrfPolicy {
            allow_private: false,
            exempt: vec!["127.0.0.1:8080".parse().unwrap()],
        };
        assert!(exempt.check_literal(&u("http://127.0.0.1:8080/")).is_ok());
        assert!(exempt.check_literal(&u("http://127.0.0.1:8081/")).is_err());
        let open = SsrfPolicy {
            allow_private: true,
            exempt: vec![],
        };
        assert!(open.check_literal(&u("http://127.0.0.1/")).is_ok());
        assert!(open.check_literal(&u("ftp://127.0.0.1/")).is_err());
    }

    #[tokio::test]
    async fn localhost_is_refused_by_resolution() {
        let e = SsrfPolicy::strict()
            .check(&Url::parse("http://localhost:9/").unwrap())
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::ResolvesToBlocked { .. }), "{e}");
        let r = GuardedResolver
            .resolve(Name::from_str("localhost").unwrap())
            .await;
        let err = r.err().expect("resolver must refuse localhost");
        assert!(find_guard_error(err.as_ref()).is_some());
    }
}
