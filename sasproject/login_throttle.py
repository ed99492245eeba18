"""Sign-in throttling (issue 22, rebuilt in issue 26): brute force on the site's and the admin's
sign-in forms, counted BEFORE the password is checked.

Every attempt with a username and a password first takes its place in Redis, in one Lua script
(one round trip, atomic): the counts of (username, address) and of the address over all names
are incremented, and past either limit the attempt is refused - its increments taken back, the
password never checked. So N concurrent guesses get at most the limit's worth of checks, and a
right password past the limit is refused like a wrong one (a guesser must not learn it).
A success takes its own count back (it was no failure) and clears its (username, address).

Keyed so that nobody can lock out everyone (SAS_LOGIN_THROTTLE, docs/decisions.md, record 19):
- (username, address), FAILURES_PER_USERNAME in WINDOW: one address guessing one name is locked
  out; the same name from elsewhere is not.
- the address over all names, FAILURES_PER_IP: one address guessing many names is locked out.
- a name over all addresses past SLOW_PER_USERNAME, and the whole site past SLOW_SITE: these
  slow, they never lock - an attempt from an address that has not signed in to that name before
  (KNOWN_DAYS) waits for a pace slot (one password check per NAME_PACE_MS for the name, one per
  SITE_PACE_MS for the site) and is otherwise refused with "try again in N s" (429). An address
  that has signed in to the name before is not slowed.

The client address comes from the trusted proxy (client_address): SAS_TRUSTED_PROXY_HOPS proxies
in front, each appending to SAS_TRUSTED_PROXY_HEADER (X-Forwarded-For); 0 = REMOTE_ADDR. An IPv6
address counts as its /64 (one host holds a whole /64).

Redis unreachable: sign-in FAILS CLOSED - 503 "temporarily unavailable", no password checked (an
attacker who can take Redis down must not get unlimited guesses; docs/decisions.md, record 19). Sessions
already signed in and API tokens are not affected.

The username is hashed in the keys (any text a client types, bounded length, no user data in
Redis).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)

# KEYS: 1 (name, address), 2 address, 3 name, 4 site, 5 name's pace slot, 6 site's pace slot,
# 7 "this address has signed in to this name". ARGV: 1 per-(name, address) limit, 2 per-address
# limit, 3 window ms, 4 name's slow-down threshold, 5 site's, 6 name's pace ms, 7 site's pace ms.
# Returns {verdict, ms until it may change}: "ok" | "pair" | "address" | "slow-name" | "slow-site".
_ATTEMPT = """
local function count(key)
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('PEXPIRE', key, ARGV[3]) end
  return n
end
local function undo(n)
  for i = 1, n do redis.call('DECR', KEYS[i]) end
end
local pair = count(KEYS[1])
local address = count(KEYS[2])
local pair_limit, address_limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if pair_limit > 0 and pair > pair_limit then
  undo(2)
  return {'pair', redis.call('PTTL', KEYS[1])}
end
if address_limit > 0 and address > address_limit then
  undo(2)
  return {'address', redis.call('PTTL', KEYS[2])}
end
local name = count(KEYS[3])
local site = count(KEYS[4])
if redis.call('EXISTS', KEYS[7]) == 1 then
  return {'ok', 0}
end
local name_slow, site_slow = tonumber(ARGV[4]), tonumber(ARGV[5])
local slow_name = name_slow > 0 and name > name_slow
local slow_site = site_slow > 0 and site > site_slow
if slow_name and redis.call('EXISTS', KEYS[5]) == 1 then
  undo(4)
  return {'slow-name', redis.call('PTTL', KEYS[5])}
end
if slow_site and redis.call('EXISTS', KEYS[6]) == 1 then
  undo(4)
  return {'slow-site', redis.call('PTTL', KEYS[6])}
end
if slow_name then redis.call('SET', KEYS[5], 1, 'PX', ARGV[6]) end
if slow_site then redis.call('SET', KEYS[6], 1, 'PX', ARGV[7]) end
return {'ok', 0}
"""

# A success: its attempt was no failure. KEYS as above; ARGV: 1 known-address TTL in seconds.
# DECR only keys still there: one whose window ended in between must not come back negative.
_SUCCESS = """
redis.call('DEL', KEYS[1])
for i = 2, 4 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('DECR', KEYS[i]) end
end
redis.call('SET', KEYS[7], 1, 'EX', ARGV[1])
return 1
"""


class ThrottleUnavailable(Exception):
    """The throttle's Redis cannot be reached: sign-in is refused (fails closed)."""


@dataclass(frozen=True)
class LoginRefused:
    """Why an attempt is refused, the HTTP status its page answers with and the seconds until
    trying again may succeed."""

    message: str
    status: int
    retry_after: int


def _config() -> dict[str, int]:
    conf = settings.SAS_LOGIN_THROTTLE
    defaults = {
        "FAILURES_PER_USERNAME": 5,
        "FAILURES_PER_IP": 20,
        "WINDOW": 900,
        "SLOW_PER_USERNAME": 20,
        "SLOW_SITE": 300,
        "NAME_PACE_MS": 2000,
        "SITE_PACE_MS": 100,
        "KNOWN_DAYS": 30,
    }
    return {key: int(conf.get(key, value)) for key, value in defaults.items()}


def _keys(*, username: str, address: str) -> list[str]:
    name = hashlib.sha256(username.strip().lower().encode("utf-8", "surrogatepass")).hexdigest()[:32]
    prefix = f"{settings.REDIS_PREFIX}sas:login"
    return [
        f"{prefix}:pair:{name}:{address}",
        f"{prefix}:addr:{address}",
        f"{prefix}:name:{name}",
        f"{prefix}:site",
        f"{prefix}:pace:name:{name}",
        f"{prefix}:pace:site",
        f"{prefix}:known:{name}:{address}",
    ]


def _canonical(text: str) -> str | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else str(address)


def client_address(request: HttpRequest | None) -> str:
    """The client's address as the trusted proxies saw it.

    SAS_TRUSTED_PROXY_HOPS = N proxies in front, each appending the address it was reached from
    to SAS_TRUSTED_PROXY_HEADER (nginx: `proxy_set_header X-Forwarded-For $remote_addr`, one
    proxy, N = 1): the N-th entry from the right is the one the outermost trusted proxy wrote;
    entries left of it are the client's to invent. 0 (the default): REMOTE_ADDR. A header
    missing, short or unparsable at that place (a request that did not come through the proxy):
    REMOTE_ADDR, so such requests share the proxy's count rather than choosing their own."""
    if request is None:
        return "unknown"
    remote = _canonical(str(request.META.get("REMOTE_ADDR", ""))) or "unknown"
    hops = int(getattr(settings, "SAS_TRUSTED_PROXY_HOPS", 0))
    if hops <= 0:
        return remote
    header = str(getattr(settings, "SAS_TRUSTED_PROXY_HEADER", "X-Forwarded-For"))
    meta_key = "HTTP_" + header.upper().replace("-", "_")
    entries = [part for part in str(request.META.get(meta_key, "")).split(",") if part.strip()]
    if len(entries) < hops:
        return remote
    return _canonical(entries[-hops]) or remote


def _refusal(verdict: str, ms: int, conf: dict[str, int]) -> LoginRefused:
    seconds = max(1, -(-int(ms) // 1000))
    minutes = max(1, round(conf["WINDOW"] / 60))
    if verdict == "pair":
        message = (
            f"Too many failed sign-in attempts for this username from this address: the limit is "
            f"{conf['FAILURES_PER_USERNAME']} per {minutes} minutes. Try again in {seconds} s."
        )
        return LoginRefused(message=message, status=429, retry_after=seconds)
    if verdict == "address":
        message = (
            f"Too many failed sign-in attempts from this address: the limit is "
            f"{conf['FAILURES_PER_IP']} per {minutes} minutes. Try again in {seconds} s."
        )
        return LoginRefused(message=message, status=429, retry_after=seconds)
    what = "this username" if verdict == "slow-name" else "the site"
    message = (
        f"Sign-in is slowed down for {what} after many failed attempts from elsewhere. "
        f"Try again in {seconds} s."
    )
    return LoginRefused(message=message, status=429, retry_after=seconds)


def login_attempt_begin(*, username: str, address: str) -> LoginRefused | None:
    """Count this attempt before its password is checked: None = go on and check it; else the
    refusal (nothing counted). Raises ThrottleUnavailable when Redis cannot be reached."""
    conf = _config()
    args = [
        conf["FAILURES_PER_USERNAME"],
        conf["FAILURES_PER_IP"],
        conf["WINDOW"] * 1000,
        conf["SLOW_PER_USERNAME"],
        conf["SLOW_SITE"],
        conf["NAME_PACE_MS"],
        conf["SITE_PACE_MS"],
    ]
    try:
        verdict, ms = get_redis().eval(_ATTEMPT, 7, *_keys(username=username, address=address), *args)
    except redis.RedisError as exc:
        raise ThrottleUnavailable(str(exc)) from exc
    verdict = verdict.decode() if isinstance(verdict, bytes) else str(verdict)
    return None if verdict == "ok" else _refusal(verdict, int(ms), conf)


def login_success_record(*, username: str, address: str) -> None:
    """Take the success's count back and remember that this address signs in to this name."""
    ttl = _config()["KNOWN_DAYS"] * 86400
    try:
        get_redis().eval(_SUCCESS, 7, *_keys(username=username, address=address), max(1, ttl))
    except redis.RedisError:
        # The password was right and its check counted once: at worst one failure too many.
        logger.warning("login throttle: Redis unreachable after a sign-in; count not taken back")


def login_unlock(*, username: str, address: str = "") -> int:
    """An operator lifts the lockouts of a username (from one address, or from every address),
    and its slow-down; the per-address counts stay (they are the guessing addresses'). The
    number of keys deleted."""
    keys = _keys(username=username, address=address or "*")
    client = get_redis()
    found = list(client.scan_iter(keys[0], count=1000)) if not address else [keys[0]]
    return int(client.delete(*found, keys[2], keys[4]))


UNAVAILABLE = LoginRefused(
    message="Sign-in is temporarily unavailable: please try again in a minute.", status=503, retry_after=60
)


class _ThrottledMixin:
    """clean() of an AuthenticationForm with the throttle around it: count, then check."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        if not username or not self.cleaned_data.get("password"):
            return super().clean()  # type: ignore[misc]  # no password checked
        address = client_address(self.request)
        try:
            refused = login_attempt_begin(username=username, address=address)
        except ThrottleUnavailable as exc:
            logger.error("sign-in refused: the throttle's Redis is unreachable (%s)", exc)
            refused = UNAVAILABLE
        if refused is not None:
            logger.warning("sign-in refused (%s) from %s", refused.message, address)
            if self.request is not None:
                self.request.sas_login_refused = refused  # type: ignore[attr-defined]
            raise forms.ValidationError(refused.message, code="throttled")
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            logger.warning("sign-in failed for a username from %s", address)
            raise
        login_success_record(username=username, address=address)
        return cleaned


class ThrottledAuthenticationForm(_ThrottledMixin, AuthenticationForm):
    """The site's sign-in (/accounts/login/)."""


class ThrottledAdminAuthenticationForm(_ThrottledMixin, AdminAuthenticationForm):
    """The admin's sign-in (/admin/login/)."""


class LoginRefusalStatusMiddleware:
    """A sign-in page whose form refused the attempt answers 429 (or 503 with the throttle's
    Redis down) with Retry-After, not 200: the page is the same, clients and monitors see why."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        refused: LoginRefused | None = getattr(request, "sas_login_refused", None)
        if refused is not None and response.status_code == 200:
            response.status_code = refused.status
            response["Retry-After"] = str(refused.retry_after)
        return response
