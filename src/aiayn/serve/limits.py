"""What one server allows: request sizes, decoding bounds, the api keys and connection timeouts."""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class KeyLimits:
    """What one api key may ask for in a minute (`aiayn serve --api-keys FILE`; see `serve.keys`)."""

    requests_per_minute: int = 60
    chars_per_minute: int = 100_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{f.name} must be a whole number of at least 1, got {value!r}")


@dataclass(frozen=True)
class ServeLimits:
    max_texts: int = 64  # texts (or images) in one request
    max_chars: int = 2000  # characters of one text
    max_beam: int = 16
    max_len_b: int = 256
    api_key: str = ""  # "" = no key needed (unless api_keys); any key sent is ignored
    api_keys: tuple = ()  # ((key, KeyLimits), ...): keys with limits of their own (`serve.keys.read_api_keys`)
    cors_origins: tuple = ()  # web pages of these origins ("*": any) may call the API, as LibreTranslate's do
    # An idle keep-alive connection stays open this long; it must exceed the request timeout. uvicorn
    # can arm its keep-alive timer after the next request on a connection has already arrived (its
    # issues #1637, #2097); the timer then cuts that request off unanswered when it fires. With
    # uvicorn's default of 5 s, a request that waited 5 s in a full queue was lost that way (a
    # ReadError the server never logged: `benchmarks/serve_load.py --overflow-only --overflow-runs N
    # --keep-alive 5` lost one request in 30 runs and one in 40; the default none in 55).
    # Longer than any request lives, the stray timer is replaced when that request is answered.
    keep_alive_s: float = 75.0
    # A client has this long to send a whole request (headers and body), counted from its first byte,
    # or from the connection's opening for its first request; a connection still sending is then
    # closed. uvicorn has no such bound (its keep-alive timer restarts on every byte received), so a
    # client sending half a request, a byte at a time, held a connection open indefinitely.
    receive_timeout_s: float = 20.0

    @property
    def max_body_bytes(self) -> int:
        """The most bytes a request body may hold: `max_texts` texts of `max_chars` characters, each
        written as JSON's longest escape (6 bytes, \\uXXXX), and room for images (4 MiB at least)."""
        return max(4 << 20, 6 * self.max_texts * self.max_chars + (64 << 10))

    def __post_init__(self) -> None:
        if not 0 < self.keep_alive_s < float("inf"):  # NaN fails too
            raise ValueError(f"the keep-alive must be a positive number of seconds, got {self.keep_alive_s}")
        if not 0 < self.receive_timeout_s < float("inf"):
            raise ValueError(f"the receive timeout must be a positive number of seconds, got {self.receive_timeout_s}")
        if not all(isinstance(o, str) and o for o in self.cors_origins):
            raise ValueError(f"each CORS origin must be a non-empty string, got {self.cors_origins!r}")
        for name in ("max_texts", "max_chars", "max_beam", "max_len_b"):  # 0 or less would refuse every request
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
