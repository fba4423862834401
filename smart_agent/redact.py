"""Redaction of secrets and personal data from log text before it is kept in an Event."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable

from predictors.types import Event
from smart_agent.redact_rules import PROVIDERS, THEN, extra_rules, late_rules

EXCERPT_CHARS = 200
# Text longer than this is cut before redaction, and the last TAIL_GUARD characters of the
# redacted cut are dropped: a secret split by the cut is never shown as a fragment.
REDACT_WINDOW = 4096
TAIL_GUARD = 512

Replacement = str | Callable[[re.Match[str]], str]

# Tokens are not preceded by a letter or digit, so "task-..." is not an OpenAI key.
_NB = r"(?<![A-Za-z0-9])"
_PEM = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
_PEM_END = r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
_Q = r"(?:\\?[\"'])?"  # an optional quote, maybe escaped (JSON inside a JSON string)
_KEY_WORDS = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|client[_-]?secret|credentials?|auth"
)


# A key's value: an escaped-quoted, double- or single-quoted string, or a bare word.
_VALUE = (
    r"(?:\\\"(?:[^\"\\]|\\[^\"])*(?:\\\"|\"|$)|\"[^\"]*(?:\"|$)|'[^']*(?:'|$)"
    r"|[^\s\"',;&)}\]]+)"
)
# A value that is itself followed by a separator was a key ('PWD "api_key": "s3cr"'): the
# values after it go too, or the key word it held would be gone before the scan reached it.
_VALUES = _VALUE + r"(?:\s*(?:[:=]|=>)\s*" + _VALUE + r")*"


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _ipv6(match: re.Match[str]) -> str:
    text = match.group(0)
    try:
        ipaddress.IPv6Address(text.split("%", 1)[0])
    except ValueError:
        return text  # a clock time, a MAC address or C++ scope, not an address
    return _mark("ip")


def _blob(match: re.Match[str]) -> str:
    """High-entropy base64 (key material, AWS secret keys, a PEM body seen without BEGIN)."""
    text = match.group(0)
    mixed = (
        any(c.isdigit() for c in text)
        and any(c.isupper() for c in text)
        and any(c.islower() for c in text)
    )
    # Paths are long runs of the same alphabet, but split by slashes into words.
    return _mark("blob") if mixed and text.count("/") <= 2 else text


def _key_value(match: re.Match[str]) -> str:
    return f"{match.group('key')}{match.group('sep')}{_mark('secret')}"


# Order matters: whole blocks and self-identifying tokens go first, so that a generic rule
# (an e-mail, an IP address) cannot break a token into pieces that no longer match.
BUILTIN: tuple[tuple, ...] = (
    ("private_key", _PEM + r".*?(?:" + _PEM_END + r"|$)", _mark("private_key"), re.S),
    ("jwt", _NB + r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*", _mark("jwt"), 0),
    *extra_rules()[: len(PROVIDERS)],  # type: ignore[list-item]
    ("anthropic", _NB + r"sk-ant-[A-Za-z0-9_-]{16,}", _mark("anthropic"), 0),
    ("openai", _NB + r"sk-[A-Za-z0-9_-]{20,}", _mark("openai"), 0),
    (
        "github",
        _NB + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        _mark("github"),
        0,
    ),
    ("slack", _NB + r"xox[abposr]-[A-Za-z0-9-]{10,}", _mark("slack"), 0),
    ("slack", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+", _mark("slack"), 0),
    ("huggingface", _NB + r"hf_[A-Za-z0-9]{30,}", _mark("huggingface"), 0),
    ("google", _NB + r"AIza[0-9A-Za-z_-]{35}", _mark("google"), 0),
    ("aws", _NB + r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![0-9A-Z])", _mark("aws"), 0),
    (
        "aws",
        r"(?i)(?P<key>aws[A-Za-z0-9_.-]{0,20}(?:secret|key)[A-Za-z0-9_]*" + _Q + r")"
        r"(?P<sep>\s*[:=]\s*" + _Q + r")[A-Za-z0-9/+=]{30,}",
        _key_value,
        0,
    ),
    (
        "bearer",
        r"(?i)(?P<key>\bbearer|authorization:\s*basic)(?P<sep>\s+)[A-Za-z0-9._~+/=-]{8,}",
        _key_value,
        0,
    ),
    (
        "url_credentials",
        r"(?i)\b(?P<scheme>[a-z][a-z0-9+.-]{0,30}://)[^/\s@]+@",
        lambda m: f"{m.group('scheme')}{_mark('credentials')}@",
        0,
    ),
    *extra_rules()[len(PROVIDERS) :],  # type: ignore[list-item]
    (
        "secret",
        r"(?i)(?P<key>\b(?:[A-Za-z0-9]{1,30}[_.-]){0,4}(?:" + _KEY_WORDS + r")\b" + _Q + r")"
        r"(?P<sep>\s*(?:[:=]|=>)\s*|\s+(?=\\?[\"']))(?!\[REDACTED:)" + _VALUES,
        _key_value,
        0,
    ),
    (
        "secret",
        r"(?i)(?P<key>--(?:[A-Za-z0-9]{1,20}[_-]){0,3}(?:" + _KEY_WORDS + r")(?!iz)[A-Za-z0-9_-]*)"
        r"(?P<sep>[= ])(?!\[REDACTED:)(?:(?!(?<![A-Za-z0-9_])--)\S)+" + THEN,
        _key_value,
        0,
    ),
    ("blob", r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=_\-])", _blob, 0),
    (
        "email",
        r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
        _mark("email"),
        0,
    ),
    (
        "ip",
        r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}"
        r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\.?\d)",
        _mark("ip"),
        0,
    ),
    (
        "ip",
        r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:)?(?:%\w+)?(?![\w:])",
        _ipv6,
        0,
    ),
    (
        "home",
        r"(?P<base>/home/|/Users/|[A-Za-z]:\\Users\\)(?!\[)[^/\\\s]+",
        lambda m: f"{m.group('base')}[user]",
        0,
    ),
    *late_rules(),  # type: ignore[list-item]
)

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_DROP = ("Cc", "Cf", "Co", "Cs", "Cn")


def clean(text: str) -> str:
    """Printable single line: ANSI codes and control/format characters removed, spaces
    collapsed. Done before redaction, so a zero-width character cannot hide a secret from
    the patterns and reappear joined when a later step drops it."""
    text = _ANSI.sub("", text)
    if not text.isascii() or not text.isprintable():
        text = "".join(
            " " if ch in "\t\r\n\v\f" else ch
            for ch in text
            if ch in "\t\r\n\v\f" or unicodedata.category(ch) not in _DROP
        )
    return " ".join(text.split())


class Redactor:
    """Replaces secrets and personal data by `[REDACTED:<kind>]` markers; thread-safe.

    `patterns` are extra user regexes (applied first, replaced by `[REDACTED:custom]`).
    `hits` counts replacements per kind.
    """

    def __init__(self, patterns: Iterable[str] = (), *, builtin: bool = True) -> None:
        rules: list[tuple[str, re.Pattern[str], Replacement, tuple[str, ...]]] = []
        for pattern in patterns:
            rules.append(("custom", re.compile(pattern), _mark("custom"), ()))
        if builtin:
            for kind, pattern, replacement, flags, *hints in BUILTIN:
                rules.append(
                    (kind, re.compile(pattern, flags), replacement, hints[0] if hints else ())
                )
        self._rules = rules
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()

    def redact(self, text: str) -> str:
        """`text` with every match of every rule replaced (rules applied in order)."""
        counts: list[tuple[str, int]] = []
        low = text.lower()
        for kind, regex, replacement, hints in self._rules:
            if hints and not any(hint in low for hint in hints):
                continue  # a cheap test spares most lines most rules
            new, n = regex.subn(replacement, text)
            if n and new != text:  # a function rule may keep a match (a clock time)
                counts.append((kind, n))
                text = new
                low = text.lower()
        if counts:
            with self._lock:
                for kind, n in counts:
                    self.hits[kind] += n
        return text

    def excerpt(self, text: str, limit: int = EXCERPT_CHARS) -> str:
        """A cleaned, redacted, single-line snippet of at most `limit` characters."""
        cut = len(text) > REDACT_WINDOW
        out = self.redact(clean(text[:REDACT_WINDOW] if cut else text))
        if cut:
            out = out[: max(0, len(out) - TAIL_GUARD)]
        return out if len(out) <= limit else out[: max(0, limit - 3)] + "..."

    def field(self, value: str | None, limit: int = 128) -> str | None:
        """A short structured value (job id, GPU model, user) from a log, redacted."""
        if value is None:
            return None
        return self.excerpt(value, limit) or None

    def event(self, event: Event, *, keep_user: bool = False) -> Event:
        """The event with every text field redacted (the user too unless `keep_user`)."""
        return dataclasses.replace(
            event,
            user=event.user if keep_user else (self.field(event.user, 64) or "unknown"),
            gpu_model=self.field(event.gpu_model, 64),
            job_id=self.field(event.job_id),
            cue=self.field(event.cue, 64),
            excerpt=None if event.excerpt is None else self.excerpt(event.excerpt),
            source=self.field(event.source, 256),
        )


class PrivateKeyGuard:
    """Per-stream guard for multi-line PEM private keys: from a BEGIN line until its END
    line (or `max_lines` lines, if END never comes), lines are replaced by a marker, so no
    line of a key reaches a parser. One guard per file; not thread-safe."""

    _BEGIN = re.compile(_PEM)
    _END = re.compile(_PEM_END)
    MARK = _mark("private_key")

    def __init__(self, max_lines: int = 400) -> None:
        self.max_lines = max_lines
        self._inside = 0  # lines left in the current block; 0 = outside

    @property
    def inside(self) -> bool:
        return self._inside > 0

    def feed(self, line: str) -> str:
        # Cheap test first: almost no line has five dashes in it.
        if not self._inside:
            if "-----" not in line:
                return line
            begin = self._BEGIN.search(line)
            if begin is None:
                return line
            if self._END.search(line, begin.end()):
                return line  # the whole key is on this line; the redactor removes it
            self._inside = self.max_lines
            return line[: begin.start()] + self.MARK
        self._inside -= 1
        end = self._END.search(line) if "-----" in line else None
        if end is not None:
            self._inside = 0
            return self.MARK + line[end.end() :]
        return self.MARK

    def reset(self) -> None:
        self._inside = 0
