"""PII detection and redaction: e-mail, phone numbers, IPv4/IPv6, Chinese resident ID numbers
(ISO 7064 MOD 11-2 checksum) and payment card numbers (Luhn + issuer prefix).

Detectors are compiled regexes plus validators (checksums, `ipaddress`, context rules) that turn
away the look-alikes a corpus is full of: version numbers, dates, order numbers, hashes, IDs with a
bad checksum. Spans found by an earlier kind win over overlapping spans of a later one.

Phone numbers are found two ways, in this order: Google's libphonenumber (the `phonenumbers`
package, `Leniency.STRICT_GROUPING`: a number its region's numbering plan allows, grouped as that
region groups digits) in E.164 form (`+49 30 12345678`, any country) and in the national format
of the regions of the document's language (`LANG_REGIONS`: `030 1234567` in a German document),
then the regexes for the forms the library misses (Chinese mobiles glued to Chinese text, US
numbers in a document of another language).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import phonenumbers

PLACEHOLDERS: dict[str, str] = {
    "email": "<EMAIL>",
    "cn_id": "<CN_ID>",
    "card": "<CARD>",
    "ipv6": "<IPV6>",
    "ipv4": "<IPV4>",
    "phone": "<PHONE>",
}
"""PII kind -> the placeholder written into `text`, in priority order."""
KINDS: tuple[str, ...] = tuple(PLACEHOLDERS)
"""Every kind detected, in priority order: the fields of the safety stage's `pii_counts`."""


@dataclass(frozen=True, order=True)
class Span:
    """A detected PII span `text[start:end]` of one kind."""

    start: int
    end: int
    kind: str


_EMAIL = re.compile(
    r"(?<![A-Za-z0-9_.+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,63})@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}"
    r"(?![A-Za-z0-9_-])"
)
_CN_ID = re.compile(
    r"(?<![A-Za-z0-9_])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]"
    r"(?![A-Za-z0-9_])"
)
_CARD = re.compile(r"(?<![A-Za-z0-9_.-])\d(?:[ -]?\d){12,18}(?![A-Za-z0-9_-]|\.\d)")
_IPV4 = re.compile(
    r"(?<![A-Za-z0-9_.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
    r"(?![A-Za-z0-9_]|\.\d|-\w)"
)
_IPV6 = re.compile(
    r"(?<![A-Za-z0-9_:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{0,4}|"
    r"(?:\d{1,3}\.){3}\d{1,3})(?![A-Za-z0-9_:]|\.\w)"
)
_PHONE = re.compile(r"""(?x)
    (?<![A-Za-z0-9_+.-])
    (?:
        (?:\+?86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}                      # Chinese mobile
      | \+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,6}){1,4}  # international
      | (?:\+?1[ .-]?)?\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}                 # NANP (415) 555-0132
      | (?:\+?1[ .-])?\d{3}[.-]\d{3}[.-]\d{4}                         # NANP 415-555-0132
      | 0\d{2,3}-\d{7,8}                                              # Chinese landline
    )
    (?![A-Za-z0-9_-]|\.\d)""")
_VERSION_CONTEXT = re.compile(
    r"(?i)(?:\bv|version|release|ver\.?|kernel|linux|build|版本号?[：:]?)\s*$"
)
_DATE_LIKE = re.compile(r"(?:19|20)\d{2}[.-](?:0?[1-9]|1[0-2])[.-](?:0?[1-9]|[12]\d|3[01])$")
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK = "10X98765432"
_CARD_PREFIX = re.compile(r"4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|3[05689]|6(?:011|5|2)")


def cn_id_valid(number: str) -> bool:
    """ISO 7064 MOD 11-2 check digit of an 18-character Chinese resident ID."""
    if len(number) != 18 or not number[:17].isdigit():
        return False
    total = sum(int(d) * w for d, w in zip(number[:17], _CN_ID_WEIGHTS, strict=True))
    return _CN_ID_CHECK[total % 11] == number[17].upper()


def luhn_valid(digits: str) -> bool:
    """Luhn checksum of a digit string."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card_ok(text: str, match: re.Match[str]) -> bool:
    digits = re.sub(r"[ -]", "", match.group())
    groups = re.split(r"[ -]", match.group())
    if len(groups) > 1 and len({len(g) for g in groups[1:-1]}) > 1:
        return False  # card numbers group regularly (4-4-4-4, 4-6-5)
    return 13 <= len(digits) <= 19 and bool(_CARD_PREFIX.match(digits)) and luhn_valid(digits)


def _ipv4_ok(text: str, match: re.Match[str]) -> bool:
    before = text[max(0, match.start() - 12) : match.start()]
    return not _VERSION_CONTEXT.search(before)


def _ipv6_ok(text: str, match: re.Match[str]) -> bool:
    value = match.group()
    if "::" not in value and value.count(":") < 7:
        return False
    if sum(1 for part in value.split(":") if part) < 2:
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def _phone_ok(text: str, match: re.Match[str]) -> bool:
    value = match.group()
    digits = sum(ch.isdigit() for ch in value)
    if not 7 <= digits <= 15 or _DATE_LIKE.match(value):
        return False
    before = text[max(0, match.start() - 12) : match.start()]
    return not _VERSION_CONTEXT.search(before)


LANG_REGIONS: dict[str, tuple[str, ...]] = {
    "en": ("US", "GB"),
    "de": ("DE", "AT", "CH"),
    "fr": ("FR", "BE", "CH"),
    "es": ("ES", "MX"),
    "it": ("IT",),
    "nl": ("NL", "BE"),
    "pt": ("PT", "BR"),
    "pl": ("PL",),
    "ru": ("RU",),
    "zh": ("CN",),
    "ja": ("JP",),
    "ko": ("KR",),
}
"""Language tag (`lang`, ISO 639-1) -> the regions whose national phone formats a document in it
is searched for (E.164 numbers, `+CC ...`, are found in every document)."""
_LANG_ALIASES = {"eng": "en", "deu": "de", "ger": "de", "fra": "fr", "fre": "fr", "spa": "es"}
_LANG_ALIASES |= {"ita": "it", "nld": "nl", "por": "pt", "pol": "pl", "rus": "ru", "zho": "zh"}
_LANG_ALIASES |= {"cmn": "zh", "jpn": "ja", "kor": "ko"}


def regions_for(lang: str | None) -> tuple[str, ...]:
    """The regions of a language tag (`de`, `de-AT`, GlotLID's `deu_Latn`); () when unknown."""
    if not lang:
        return ()
    code = re.split(r"[-_]", lang.strip().lower(), maxsplit=1)[0]
    return LANG_REGIONS.get(_LANG_ALIASES.get(code, code), ())


_PHONE_RUN = re.compile(r"\+?\(?\d[\d \t().\-/\u00a0]{4,30}\d")
"""A run of digits and phone separators: the only places the library is asked to look."""
_RUN_CONTEXT = 2
"""Characters either side of a run the library also sees (it refuses a number glued to a letter)."""


def library_phones(text: str, regions: Iterable[str] = ()) -> Iterator[tuple[int, int]]:
    """(start, end) of each number libphonenumber finds valid: E.164 always, national formats of
    `regions`. The library runs on each digit run (with a little context), not the whole text."""
    regions = tuple(regions)
    for run in _PHONE_RUN.finditer(text):
        low = max(0, run.start() - _RUN_CONTEXT)
        for start, end in _window_phones(text[low : run.end() + _RUN_CONTEXT], regions):
            yield low + start, low + end


@functools.lru_cache(maxsize=1 << 16)
def _window_phones(window: str, regions: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The library's numbers in one window (cached: code and tables repeat the same runs)."""
    found: set[tuple[int, int]] = set()
    for region in (*regions, None):
        if region is None and "+" not in window:
            continue
        for match in phonenumbers.PhoneNumberMatcher(
            window, region, leniency=phonenumbers.Leniency.STRICT_GROUPING
        ):
            found.add((match.start, match.end))
    return tuple(sorted(found))


_GLUED_BEFORE = re.compile(r"[\w@#$%&=/\\.-]$")


def _library_ok(text: str, start: int, end: int) -> bool:
    """Turn away what the library takes for a number in code and data: glued to an identifier,
    an address or a path (`pinctrl@3100000`, `--date=@2147483647`), a bare digit string that
    does not start with a trunk 0 (INT_MAX, a count), or one after a version word."""
    if start and _GLUED_BEFORE.search(text[start - 1]):
        return False
    value = text[start:end]
    if value.isdigit() and not value.startswith("0"):
        return False
    before = text[max(0, start - 12) : start]
    return not _VERSION_CONTEXT.search(before)


def _cn_id_ok(text: str, match: re.Match[str]) -> bool:
    return cn_id_valid(match.group())


def _always(text: str, match: re.Match[str]) -> bool:
    return True


def _first_char(pattern: re.Pattern[str], chars: str) -> re.Pattern[str]:
    """The same pattern led by a lookahead on its possible first characters: the regex engine
    then skips to candidate positions instead of trying the lookbehind everywhere (3-4x)."""
    source = pattern.pattern
    flags = "(?x)" if source.startswith("(?x)") else ""
    return re.compile(f"{flags}(?=[{chars}]){source.removeprefix(flags)}", pattern.flags)


class _AtAnchored:
    """E-mail search that starts from each '@' (found by str.find) and matches in a window
    around it, instead of trying the pattern at every letter of the text."""

    def __init__(self, pattern: re.Pattern[str], before: int = 80, after: int = 400) -> None:
        self.pattern, self.before, self.after = pattern, before, after

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        done = 0
        at = text.find("@")
        while at != -1:
            end = min(len(text), at + self.after)
            match = self.pattern.search(text, max(done, at - self.before), end)
            if (
                match
                and match.start() <= at < match.end()
                and (match.end() < end or end == len(text))
            ):
                yield match
                done = match.end()
                at = text.find("@", done)
            else:
                at = text.find("@", at + 1)


Validator = Callable[[str, re.Match[str]], bool]
DETECTORS: dict[str, tuple[re.Pattern[str] | _AtAnchored, Validator]] = {
    "email": (_AtAnchored(_EMAIL), _always),
    "cn_id": (_first_char(_CN_ID, "1-9"), _cn_id_ok),
    "card": (_first_char(_CARD, "0-9"), _card_ok),
    "ipv6": (_first_char(_IPV6, "0-9A-Fa-f:"), _ipv6_ok),
    "ipv4": (_first_char(_IPV4, "0-9"), _ipv4_ok),
    "phone": (_first_char(_PHONE, "+(0-9"), _phone_ok),
}


# Cheap scans implied by every match of a kind: most documents skip most detectors.
_MAY_IPV6 = re.compile(r":(?::|[0-9A-Fa-f]{1,4}:)")
_MAY_IPV4 = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")
_MAY_PHONE = re.compile(r"\d(?:[ ()./-]{0,2}\d){6}")
_MAY_CARD = re.compile(r"\d(?:[ -]?\d){12}")


def possible_kinds(text: str) -> set[str]:
    """Kinds whose detector could match in `text` (a superset; skipping the rest is exact)."""
    kinds = {"email"} if "@" in text else set()
    if _MAY_IPV6.search(text):
        kinds.add("ipv6")
    if _MAY_IPV4.search(text):
        kinds.add("ipv4")
    if _MAY_PHONE.search(text):
        kinds.add("phone")
        if _MAY_CARD.search(text):
            kinds.update(("card", "cn_id"))
    return kinds


def find_pii(text: str, kinds: Iterable[str] = KINDS, lang: str | None = None) -> list[Span]:
    """Non-overlapping PII spans in `text`, sorted by start (earlier kinds win overlaps); `lang`,
    the document's language tag, adds the national phone formats of its regions."""
    taken: list[Span] = []
    wanted = set(kinds) & possible_kinds(text)
    for kind in (k for k in KINDS if k in wanted):
        if kind == "phone":
            for start, end in library_phones(text, regions_for(lang)):
                span = Span(start, end, kind)
                if _library_ok(text, start, end) and not any(
                    s.start < span.end and span.start < s.end for s in taken
                ):
                    taken.append(span)
        pattern, validate = DETECTORS[kind]
        for match in pattern.finditer(text):
            span = Span(match.start(), match.end(), kind)
            if any(s.start < span.end and span.start < s.end for s in taken):
                continue
            if validate(text, match):
                taken.append(span)
    return sorted(taken)


def redact(
    text: str,
    kinds: Iterable[str] = KINDS,
    lang: str | None = None,
) -> tuple[str, dict[str, int]]:
    """`text` with each PII span replaced by its placeholder, and the count per kind (`lang`: see
    `find_pii`)."""
    spans = find_pii(text, kinds, lang)
    if not spans:
        return text, {}
    pieces: list[str] = []
    counts: dict[str, int] = {}
    cursor = 0
    for span in spans:
        pieces.append(text[cursor : span.start])
        pieces.append(PLACEHOLDERS[span.kind])
        counts[span.kind] = counts.get(span.kind, 0) + 1
        cursor = span.end
    pieces.append(text[cursor:])
    return "".join(pieces), counts
