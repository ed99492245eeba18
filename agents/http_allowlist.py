"""Where HTTP-call jobs may go: the host allowlist and the private-address rule.

Two settings, each a list of host patterns (docs/jobs-targets.md):

- `SAS_HTTP_JOB_ALLOWED_HOSTS`: a URL's host must match one. `api.example.com` (that host,
  any port), `api.example.com:8443` (that port only), `*.example.com` (any subdomain, not
  the apex), and IP addresses written out (`203.0.113.7`, `[2001:db8::1]:8080`). A wildcard
  never matches an IP address, so an address is reachable only if it is listed itself.
- `SAS_HTTP_JOB_PRIVATE_HOSTS`: the hosts allowed to be, or to resolve to, a loopback,
  private, link-local or otherwise non-public address. A name that matches the allowlist but
  not this list must resolve to public addresses only - checked when the call is made, and
  the connection goes to the address that was checked (no second lookup a DNS rebinding could
  answer differently). An IP address listed in the allowlist is allowed as written.

Both default to the simulator's host and port (SIMULATOR_URL), the one service a fresh
install calls. This module is pure: parsing and matching, no I/O except `addresses_resolve`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

URL_MAX_LENGTH = 2000
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
# A last label of digits or hex: something a resolver may read as an address (`127.1`,
# `2130706433`, `0x7f.1`), which only the dotted-decimal form of an address may be.
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


class UrlRefused(ValueError):
    """The URL may not be called; the message says why, for the person who wrote it."""


@dataclass(frozen=True)
class HostPattern:
    """One allowlist entry. `host` is normalised (lower-case, IDNA); for a wildcard it is the
    suffix after `*.`."""

    host: str
    port: int | None = None
    wildcard: bool = False

    def matches(self, host: str, port: int, *, is_ip: bool) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return not is_ip and host.endswith("." + self.host)
        return host == self.host


@dataclass(frozen=True)
class Target:
    """A URL that passed the allowlist: its normalised host and effective port."""

    url: str
    scheme: str
    host: str
    port: int
    ip: IPAddress | None
    # The host may be (or resolve to) a non-public address.
    private_ok: bool

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if self.ip is not None and self.ip.version == 6 else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def host_normalise(raw: str) -> tuple[str, IPAddress | None]:
    """The canonical form of a URL's host (without brackets): an address, or a lower-case IDNA
    name. Raises UrlRefused for anything else."""
    host = raw.strip().lower().rstrip(".")
    if not host:
        raise UrlRefused("the URL has no host")
    if "%" in host:
        raise UrlRefused("IPv6 zone identifiers are not allowed")
    try:
        return str(ipaddress.ip_address(host)), ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UrlRefused(f"{raw!r} is not a valid host name") from None
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UrlRefused(f"{raw!r} is not a valid host name")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise UrlRefused(f"{raw!r}: write an IP address in its standard form (such as 192.0.2.1)")
    return host, None


def pattern_parse(entry: str) -> HostPattern:
    """One allowlist entry -> HostPattern; raises ValueError with the reason."""
    text = entry.strip().lower()
    if not text:
        raise ValueError("empty host pattern")
    wildcard = text.startswith("*.")
    if wildcard:
        text = text[2:]
    port: int | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: bad bracketed IPv6 address")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{entry!r}: bad port")
        port = int(port_text)
    try:
        normalised, ip = host_normalise(host)
    except UrlRefused as exc:
        raise ValueError(f"{entry!r}: {exc}") from None
    if wildcard and ip is not None:
        raise ValueError(f"{entry!r}: a wildcard takes a domain, not an address")
    return HostPattern(host=normalised, port=port, wildcard=wildcard)


@lru_cache(maxsize=32)
def patterns_parse(entries: tuple[str, ...]) -> tuple[HostPattern, ...]:
    return tuple(pattern_parse(entry) for entry in entries)


def _patterns(setting: str) -> tuple[HostPattern, ...]:
    return patterns_parse(tuple(getattr(settings, setting)))


def _matches(patterns: Iterable[HostPattern], host: str, port: int, *, is_ip: bool) -> bool:
    return any(p.matches(host, port, is_ip=is_ip) for p in patterns)


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address (an IPv4-mapped IPv6 address is judged as IPv4)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def url_check(url: object) -> Target:
    """The URL if an HTTP-call job may call it, as a Target; else UrlRefused with the reason.
    No DNS lookup here (see `addresses_resolve`)."""
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused("must be an absolute http:// or https:// URL")
    url = url.strip()
    if len(url) > URL_MAX_LENGTH:
        raise UrlRefused(f"at most {URL_MAX_LENGTH} characters")
    if _FORBIDDEN_URL_CHARS.search(url):
        raise UrlRefused("must not contain spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [IPv6 bracket
        raise UrlRefused("is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise UrlRefused("must be an absolute http:// or https:// URL")
    if "@" in parts.netloc:
        raise UrlRefused("must not contain a user name or password (user@host)")
    if parts.fragment or url.endswith("#"):
        raise UrlRefused("must not have a #fragment (it is never sent)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UrlRefused("has an invalid port") from None
    host, ip = host_normalise(parts.hostname or "")
    is_ip = ip is not None
    if not _matches(_patterns("SAS_HTTP_JOB_ALLOWED_HOSTS"), host, port, is_ip=is_ip):
        where = f"[{host}]" if ip is not None and ip.version == 6 else host
        raise UrlRefused(f"{where}:{port} is not on the allowlist (setting SAS_HTTP_JOB_ALLOWED_HOSTS)")
    # An address listed in the allowlist is allowed as written; a name may be private only if
    # it is listed as such.
    private_ok = is_ip or _matches(_patterns("SAS_HTTP_JOB_PRIVATE_HOSTS"), host, port, is_ip=is_ip)
    if not private_ok and (host == "localhost" or host.endswith(".localhost")):
        raise UrlRefused(f"{host} is a loopback name (allow it in SAS_HTTP_JOB_PRIVATE_HOSTS)")
    return Target(url=url, scheme=parts.scheme, host=host, port=port, ip=ip, private_ok=private_ok)


def addresses_resolve(target: Target) -> Sequence[IPAddress]:
    """The addresses to connect to, checked: an address as written, or the name's addresses -
    all of them public unless the host may be private. Raises UrlRefused (a non-public address)
    or OSError (the name does not resolve)."""
    if target.ip is not None:
        return [target.ip]
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OSError(f"{target.host} has no address")
    if not target.private_ok:
        private = [str(a) for a in addresses if not is_public(a)]
        if private:
            raise UrlRefused(
                f"{target.host} resolves to a non-public address ({', '.join(private)}); "
                "allow it in SAS_HTTP_JOB_PRIVATE_HOSTS if that is intended"
            )
    return addresses


def allowlist_errors() -> list[str]:
    """Configuration errors in both settings (for the system check)."""
    errors = []
    for setting in ("SAS_HTTP_JOB_ALLOWED_HOSTS", "SAS_HTTP_JOB_PRIVATE_HOSTS"):
        for entry in getattr(settings, setting):
            try:
                pattern_parse(entry)
            except ValueError as exc:
                errors.append(f"{setting}: {exc}")
    return errors
