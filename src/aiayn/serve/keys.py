"""API keys: which keys a server takes, and how much each may ask for per minute.

`aiayn serve --api-key KEY` takes one key with no limit; `--api-keys FILE` takes the keys of a
JSON file, each with its own limits (`KeyLimits`; a field left out takes its default):

    {"alice-key": {"requests_per_minute": 60, "chars_per_minute": 20000},
     "bob-key": {}}

A request without a key, or with another, gets a 403; one over its key's request rate, or whose
characters would take the key over its budget, gets a 429 with Retry-After (the seconds until
the window has room). The window slides: what a key sent in the last 60 seconds counts. The
characters counted are those of the request's texts (its route's `texts` fields: not its language codes or
settings), the key aside; a request refused for its input (a 4xx before anything is decoded) is not counted.
"""

from __future__ import annotations

import collections
import dataclasses
import hmac
import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from aiayn.config import did_you_mean
from aiayn.serve.limits import KeyLimits
from aiayn.serve.requests import HTTPProblem

WINDOW_S = 60.0  # the limits are per minute


KNOWN_LIMITS = frozenset(f.name for f in dataclasses.fields(KeyLimits))
UNLIMITED = KeyLimits(requests_per_minute=10 ** 12, chars_per_minute=10 ** 15)  # `--api-key`: no limit


def read_api_keys(path: str | Path) -> dict[str, KeyLimits]:
    """The keys of a JSON file (see the module) -> their limits. Errors name the file and the key's position."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"), object_pairs_hook=_once_each)  # a BOM dropped
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the api keys ({e})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: want a JSON object of key -> limits, with at least one key")
    keys = {}
    for i, (key, limits) in enumerate(data.items()):
        if not key.strip() or not isinstance(limits, dict):
            raise ValueError(f"{path}: key {i + 1}: want a non-empty key and an object of limits")
        unknown = sorted(set(limits) - KNOWN_LIMITS)
        if unknown:
            raise ValueError(f"{path}: key {i + 1}: unknown limit {', '.join(map(repr, unknown))}"
                             f"{did_you_mean(unknown, KNOWN_LIMITS)}; known: {', '.join(sorted(KNOWN_LIMITS))}")
        try:
            keys[key] = KeyLimits(**limits)
        except ValueError as e:
            raise ValueError(f"{path}: key {i + 1}: {e}") from None
    return keys


def _once_each(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object whose names are all different (json.loads keeps a repeated key's last value, silently)."""
    repeated = sorted(name for name, n in collections.Counter(name for name, _ in pairs).items() if n > 1)
    if repeated:
        raise ValueError(f"{', '.join(map(repr, repeated))} named more than once")
    return dict(pairs)


def request_chars(fields: Mapping[str, Any]) -> int:
    """Characters in the string fields of a request (in lists too), the api key aside."""
    def count(value) -> int:
        if isinstance(value, str):
            return len(value)
        if isinstance(value, (list, tuple)):
            return sum(count(v) for v in value)
        return 0
    return sum(count(v) for k, v in fields.items() if k != "api_key")


class KeyRing:
    """The keys a server takes and what each sent in the last minute. Empty: no key needed."""

    def __init__(self, keys: Mapping[str, KeyLimits]):
        self.keys = dict(keys)
        self.sent: dict[str, collections.deque] = {key: collections.deque() for key in self.keys}  # (time, chars)
        self.lock = threading.Lock()
        self.refused: collections.Counter = collections.Counter()  # "403" / "429" -> requests refused

    def __bool__(self) -> bool:
        return bool(self.keys)

    def check(self, given: Any, fields: Mapping[str, Any]) -> tuple | None:
        """Let a request with key `given` through, counted against its key (the charge is returned, for
        `refund`), or raise a 403 or a 429. `fields`: what its character budget counts."""
        if not self.keys:
            return None
        key = self._match(given)
        if key is None:
            self.refused["403"] += 1
            raise HTTPProblem(403, "invalid api_key" if given else "this server needs an api_key")
        limits, chars, now = self.keys[key], request_chars(fields), time.monotonic()
        with self.lock:
            sent = self.sent[key]
            while sent and sent[0][0] <= now - WINDOW_S:
                sent.popleft()
            if len(sent) >= limits.requests_per_minute:
                self._refuse(f"over this key's {limits.requests_per_minute} requests per minute",
                             sent[0][0] + WINDOW_S - now)
            used = sum(c for _, c in sent)
            if used + chars > limits.chars_per_minute:
                if chars > limits.chars_per_minute:
                    raise HTTPProblem(413, f"{chars} characters in one request; this key may send "
                                           f"{limits.chars_per_minute} a minute")
                self._refuse(f"over this key's {limits.chars_per_minute} characters per minute",
                             self._room_at(sent, used + chars - limits.chars_per_minute) - now)
            charge = (now, chars)
            sent.append(charge)
            return key, charge

    def refund(self, charged: tuple | None) -> None:
        """Take back what `check` charged a key (`charged`), for a request refused before anything was decoded."""
        if charged is None:
            return
        key, charge = charged
        with self.lock:
            if charge in self.sent[key]:
                self.sent[key].remove(charge)

    def _match(self, given: Any) -> str | None:
        if not isinstance(given, str):
            return None
        found = None
        for key in self.keys:  # every key compared, in constant time each
            if hmac.compare_digest(given.encode(errors="surrogatepass"), key.encode()):  # JSON may hold a lone surrogate
                found = key
        return found

    @staticmethod
    def _room_at(sent, excess: int) -> float:
        """When enough of the window's characters have left it to free `excess` of them."""
        freed = 0
        for at, chars in sent:
            freed += chars
            if freed >= excess:
                return at + WINDOW_S
        return time.monotonic() + WINDOW_S

    def _refuse(self, why: str, wait_s: float) -> None:
        self.refused["429"] += 1
        raise HTTPProblem(429, why, {"Retry-After": str(max(1, math.ceil(wait_s)))})


def given_key(request, fields: Mapping[str, Any]) -> Any:
    """The key a request sent: its `api_key` field, else an `Authorization: Bearer` header."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    bearer = _utf8(token) if scheme.lower() == "bearer" else None
    return fields.get("api_key") or bearer  # LibreTranslate's clients send api_key "" when they have none


def _utf8(header_value: str) -> str:
    """A header's text as its client wrote it: HTTP headers arrive as bytes, which the server reads as Latin-1, so
    a UTF-8 key (as a body's JSON carries it) is read back from those bytes; others are left as read."""
    try:
        return header_value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return header_value
