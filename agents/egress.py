"""The egress policy: where an outbound call that a customer can aim may go (issue 18).

Every such call - an `http.call` job, an order's `callback_url`, alert webhooks later - is
checked by a named `EgressPolicy`, once when it is submitted (`url_check`: a clear 400 naming
the field) and again when the call is made (`url_check` + `addresses_resolve`: the host is
resolved once, every address checked, and the connection goes to a checked address - no second
lookup a DNS rebinding could answer differently; agents/egress_http.py).

A policy reads two settings under its prefix (docs/using/jobs-targets.md, "The egress policy"):

- `<PREFIX>_ALLOWED_HOSTS`: a URL must match one entry. `api.example.com` (that host, any
  port), `api.example.com:8443` (that port only), `*.example.com` (any subdomain, not the
  apex), an IP address written out (`203.0.113.7`, `[2001:db8::1]:8080`), `*` (any host, public
  addresses only), each optionally scoped to a path prefix: `127.0.0.1:8055/echo` allows
  `/echo` and `/echo/...`, not `/echoes` nor `/_faults`.
- `<PREFIX>_PRIVATE_HOSTS`: the hosts allowed to be, or to resolve to, a loopback, private,
  link-local, CGNAT or otherwise non-public address (no path). An IP address listed by itself
  in the allowlist (not matched by `*`) is allowed as written.

And every policy obeys `SAS_EGRESS_DENIED` (entries of the same form; a path there is a plain,
case-insensitive prefix: `/_` refuses `/_faults`, `/_ledger`, `/_stats`), by default the remote
services' payment, inventory, shipping and control paths, matched against the URL's host and
against every address it resolves to; and the cloud metadata endpoints, always.

Paths are normalised before matching: escapes of unreserved characters are decoded (`%5f` is
`_`, `%2e` is `.`), and a path with a `.` or `..` segment, an empty segment (`//`), or an
escaped `/` or `\\` is refused - the URL that is sent is the normalised one that was checked.

This module is pure: parsing and matching, no I/O except `addresses_resolve`.
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
DENIED_SETTING = "SAS_EGRESS_DENIED"
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
# A last label of digits or hex: something a resolver may read as an address (`127.1`,
# `2130706433`, `0x7f.1`), which only the dotted-decimal form of an address may be.
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# Cloud metadata endpoints (AWS, GCP, Azure, Alibaba, Oracle, AWS ECS): never reachable, whatever
# the settings say - they hand out the machine's credentials.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192", "169.254.170.2")
)
METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)


class UrlRefused(ValueError):
    """The URL may not be called. `str(exc)` says why in full, for the operator (it may name
    the setting that decides); `exc.customer` says why in the terms of the person who typed
    the URL - what to change in it, never an operator's setting. Customer-facing forms and API
    answers show `customer` (issue 28)."""

    def __init__(self, detail: str, *, customer: str | None = None) -> None:
        super().__init__(detail)
        self.customer = customer or detail


@dataclass(frozen=True)
class HostPattern:
    """One entry. `host` is normalised (lower-case, IDNA); for a wildcard it is the suffix after
    `*.`; `any_host` is the entry `*`. `path` is the normalised path prefix, if any."""

    host: str
    port: int | None = None
    wildcard: bool = False
    any_host: bool = False
    path: str | None = None

    def host_matches(self, host: str, port: int, *, is_ip: bool) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.any_host:
            return True
        if self.wildcard:
            return not is_ip and host.endswith("." + self.host)
        return host == self.host

    def path_under(self, path: str) -> bool:
        """For an allow entry: `path` is the prefix or below it, segment-wise."""
        if self.path is None or self.path == "/":
            return True
        return path == self.path or path.startswith(self.path.rstrip("/") + "/")

    def path_denied(self, path: str) -> bool:
        """For a deny entry: a plain, case-insensitive prefix (stricter than segment-wise)."""
        return self.path is None or path.lower().startswith(self.path.lower())


@dataclass(frozen=True)
class Target:
    """A URL that passed a policy's checks: the URL to send (normalised), its host and port."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    ip: IPAddress | None
    # The host may be (or resolve to) a non-public address.
    private_ok: bool
    policy: str

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


def path_normalise(raw: str) -> str:
    """The path as matched and sent: unreserved escapes decoded, other escapes upper-cased.
    Raises UrlRefused for a dot segment, an empty segment or an escaped separator."""

    def unescape(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        if char in "/\\":
            raise UrlRefused("the path must not contain an escaped / or \\ (%2F, %5C)")
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    path = _ESCAPE.sub(unescape, raw or "/")
    if not path.startswith("/"):
        raise UrlRefused("the path must start with /")
    segments = path.split("/")[1:]
    if any(segment in (".", "..") for segment in segments):
        raise UrlRefused("the path must not contain . or .. segments")
    if any(segment == "" for segment in segments[:-1]):
        raise UrlRefused("the path must not contain an empty segment (//)")
    return path


def pattern_parse(entry: str, *, path_allowed: bool = True) -> HostPattern:
    """One entry -> HostPattern; raises ValueError with the reason."""
    text = entry.strip()
    if not text:
        raise ValueError("empty host pattern")
    slash = text.find("/")
    path: str | None = None
    if slash >= 0:
        if not path_allowed:
            raise ValueError(f"{entry!r}: this list takes hosts only, no path")
        try:
            path = path_normalise(text[slash:])
        except UrlRefused as exc:
            raise ValueError(f"{entry!r}: {exc}") from None
        text = text[:slash]
    text = text.lower()
    any_host = text == "*" or text.startswith("*:")
    wildcard = text.startswith("*.")
    if wildcard or any_host:
        text = text[2:] if wildcard else text[1:]
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
    if any_host:
        if host:
            raise ValueError(f"{entry!r}: `*` stands alone (or `*:port`)")
        return HostPattern(host="", port=port, any_host=True, path=path)
    try:
        normalised, ip = host_normalise(host)
    except UrlRefused as exc:
        raise ValueError(f"{entry!r}: {exc}") from None
    if wildcard and ip is not None:
        raise ValueError(f"{entry!r}: a wildcard takes a domain, not an address")
    return HostPattern(host=normalised, port=port, wildcard=wildcard, path=path)


@lru_cache(maxsize=64)
def patterns_parse(entries: tuple[str, ...], path_allowed: bool = True) -> tuple[HostPattern, ...]:
    return tuple(pattern_parse(entry, path_allowed=path_allowed) for entry in entries)


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address. Loopback, private, link-local, CGNAT (100.64/10),
    documentation, multicast: not public. An IPv6 address that carries an IPv4 one (mapped,
    6to4, NAT64, the old IPv4-compatible form) must have a public IPv4 address in it too."""
    ip = _unmapped(ip)
    if not ip.is_global or ip.is_multicast:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.sixtofour
        if embedded is None and (ip in _IPV4_COMPATIBLE or any(ip in net for net in _NAT64)):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return True


def _unmapped(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _denied_patterns() -> tuple[HostPattern, ...]:
    return patterns_parse(tuple(getattr(settings, DENIED_SETTING, ())))


def _denied(host: str, port: int, path: str, *, is_ip: bool) -> HostPattern | None:
    for pattern in _denied_patterns():
        if pattern.host_matches(host, port, is_ip=is_ip) and pattern.path_denied(path):
            return pattern
    return None


@dataclass(frozen=True)
class EgressPolicy:
    """A named policy: its allow and private lists are the settings `<prefix>_ALLOWED_HOSTS` and
    `<prefix>_PRIVATE_HOSTS`; the deny list (`SAS_EGRESS_DENIED`) and the metadata rule are
    every policy's."""

    name: str
    prefix: str

    @property
    def allowed_setting(self) -> str:
        return f"{self.prefix}_ALLOWED_HOSTS"

    @property
    def private_setting(self) -> str:
        return f"{self.prefix}_PRIVATE_HOSTS"

    def _allowed(self) -> tuple[HostPattern, ...]:
        return patterns_parse(tuple(getattr(settings, self.allowed_setting)))

    def _private(self) -> tuple[HostPattern, ...]:
        return patterns_parse(tuple(getattr(settings, self.private_setting)), False)

    def url_check(self, url: object) -> Target:
        """The URL if this policy lets it be called, as a Target (its URL normalised); else
        UrlRefused with the reason. No DNS lookup here (see `addresses_resolve`)."""
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
        path = path_normalise(parts.path)
        is_ip = ip is not None
        where = f"[{host}]:{port}" if ip is not None and ip.version == 6 else f"{host}:{port}"
        if host in METADATA_NAMES or (ip is not None and _unmapped(ip) in METADATA_ADDRESSES):
            raise UrlRefused(f"{where} is a cloud metadata endpoint (never allowed)")
        if _denied(host, port, path, is_ip=is_ip) is not None:
            raise UrlRefused(
                f"{where}{path} is on the deny list (setting {DENIED_SETTING})",
                customer=f"{where}{path} is reserved by this service and cannot be called",
            )
        matching = [p for p in self._allowed() if p.host_matches(host, port, is_ip=is_ip)]
        if not matching:
            raise UrlRefused(
                f"{where} is not on the allowlist (setting {self.allowed_setting})",
                customer=f"{where} is not an address this service may call",
            )
        scoped = [p for p in matching if p.path_under(path)]
        if not scoped:
            raise UrlRefused(
                f"{where}: path {path} is not allowed (setting {self.allowed_setting})",
                customer=f"{where}: path {path} is not an address this service may call",
            )
        # An address listed by itself is allowed as written; a name (or an address matched only
        # by `*`) may be private only if it is listed as such.
        private_ok = (is_ip and any(not p.any_host for p in scoped)) or any(
            p.host_matches(host, port, is_ip=is_ip) for p in self._private()
        )
        if not private_ok and ip is not None and not is_public(ip):
            raise UrlRefused(
                f"{where} is not a public address (allow it in {self.private_setting})",
                customer=f"{where} is not a public address: use one reachable from the internet",
            )
        if not private_ok and (host == "localhost" or host.endswith(".localhost")):
            raise UrlRefused(
                f"{host} is a loopback name (allow it in {self.private_setting})",
                customer=f"{host} is a loopback name: use a public host name",
            )
        query = f"?{parts.query}" if parts.query else ""
        return Target(
            url=f"{parts.scheme}://{parts.netloc.lower()}{path}{query}",
            scheme=parts.scheme,
            host=host,
            port=port,
            path=path,
            ip=ip,
            private_ok=private_ok,
            policy=self.name,
        )

    def addresses_resolve(self, target: Target) -> Sequence[IPAddress]:
        """The addresses to connect to, checked: an address as written, or the name's addresses
        - all of them public unless the host may be private, none a metadata endpoint or on the
        deny list. Raises UrlRefused, or OSError (the name does not resolve)."""
        if target.ip is not None:
            addresses: list[IPAddress] = [target.ip]
        else:
            addresses = []
            for info in socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM):
                address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
                if address not in addresses:
                    addresses.append(address)
            if not addresses:
                raise OSError(f"{target.host} has no address")
        for address in addresses:
            plain = _unmapped(address)
            if plain in METADATA_ADDRESSES:
                raise UrlRefused(f"{target.host} resolves to a cloud metadata endpoint ({plain})")
            if _denied(str(plain), target.port, target.path, is_ip=True) is not None:
                raise UrlRefused(
                    f"{target.host} resolves to {plain}, whose {target.path} is on the deny list "
                    f"(setting {DENIED_SETTING})",
                    customer=f"{target.host}{target.path} is reserved by this service and cannot be called",
                )
        if not target.private_ok:
            private = [str(a) for a in addresses if not is_public(a)]
            if private:
                raise UrlRefused(
                    f"{target.host} resolves to a non-public address ({', '.join(private)}); "
                    f"allow it in {self.private_setting} if that is intended",
                    customer=f"{target.host} resolves to a non-public address: use one reachable "
                    "from the internet",
                )
        return addresses

    def errors(self) -> list[str]:
        """Configuration errors in this policy's settings (for the system check)."""
        return _entry_errors(self.allowed_setting, True) + _entry_errors(self.private_setting, False)


def _entry_errors(setting: str, path_allowed: bool) -> list[str]:
    errors = []
    for entry in getattr(settings, setting, ()):
        try:
            pattern_parse(entry, path_allowed=path_allowed)
        except ValueError as exc:
            errors.append(f"{setting}: {exc}")
    return errors


_POLICIES: dict[str, EgressPolicy] = {}


def egress_policy_register(policy: EgressPolicy) -> EgressPolicy:
    """Make a policy known to the system check (each app registers the policies it uses)."""
    _POLICIES[policy.name] = policy
    return policy


def egress_config_errors(policies: Iterable[EgressPolicy] | None = None) -> list[str]:
    """Every registered policy's configuration errors, and the deny list's."""
    chosen = list(_POLICIES.values()) if policies is None else list(policies)
    return [e for p in chosen for e in p.errors()] + _entry_errors(DENIED_SETTING, True)


# The policy of `http.call` jobs (agents/http_call.py).
HTTP_JOB_POLICY = egress_policy_register(EgressPolicy(name="http.call jobs", prefix="SAS_HTTP_JOB"))
