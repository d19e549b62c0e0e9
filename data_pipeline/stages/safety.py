"""Safety stage: URL/domain blocklist, unsafe-word categories and score, PII redaction.

The one stage that rewrites `text`: each PII span becomes a placeholder (`<EMAIL>`, `<PHONE>`, ...)
and `pii_counts` records the count per kind. `safety_reason` is a SOFT tag: the job keeps the row.

unsafe_score (documented, in [0, 1)): with `hits_c` whole-word matches of category `c` from the
unsafe-word lists (LDNOOBW English and Chinese, see data_pipeline/resources/README.md) and `W`
words (CJK characters count 1/2),

    density = 100 * sum_c(weight_c * hits_c) / W      (weighted hits per 100 words)
    unsafe_score = 1 - exp(-density / 2)

so one sexual term in 100 words scores 0.39, three score 0.78, and one in 1,000 words 0.05.
`safety_reason` is `url_blocklist` when the URL is blocked, else `unsafe_words` when
`unsafe_score >= unsafe_threshold`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
from pydantic import Field

from data_pipeline.stages import pii
from data_pipeline.stages.base import Stage, StageConfig
from pretrain.errors import ConfigError
from pretrain.hashcache import cache_root

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
DEFAULT_WEIGHTS: dict[str, float] = {
    "child_safety": 10.0,
    "slur": 2.0,
    "extremism": 2.0,
    "violence": 1.5,
    "sexual": 1.0,
    "profanity": 0.5,
    "spam": 0.5,
    "anatomical": 0.1,
}
_CJK_RUN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile("[^\\W\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_URL_WORDS = re.compile(r"[^a-z0-9]+")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
PII_COUNTS_TYPE = pa.struct([pa.field(kind, pa.int32()) for kind in pii.KINDS])
"""`pii_counts`: one int32 per PII kind (0 = none found; null = kind not checked)."""
CATEGORIES_TYPE = pa.list_(pa.field("category", pa.string(), nullable=False))
"""`unsafe_categories`: category names (empty = none)."""


def pii_struct(counts: dict[str, int], checked: Iterable[str] = pii.KINDS) -> dict[str, Any]:
    """The `pii_counts` value: a count for every checked kind, null for the others."""
    return {kind: int(counts.get(kind, 0)) if kind in checked else None for kind in pii.KINDS}


class SafetyConfig(StageConfig):
    """Config of the safety stage (`stages.safety` in the pipeline YAML)."""

    url_blocklist: bool = True
    """Use datatrove's bundled lists (UT1 adult domains and URLs, banned URL words)."""
    extra_blocked_domains: tuple[str, ...] = ()
    soft_word_threshold: int = Field(2, ge=1)
    """URLs holding this many soft-banned words are blocked (datatrove's default)."""
    unsafe_words: bool = True
    unsafe_threshold: float = Field(0.5, ge=0, le=1)
    category_weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    redact_pii: bool = True
    pii_kinds: tuple[str, ...] = pii.KINDS
    """Kinds to redact: email, cn_id, card, ipv6, ipv4, phone."""


class UrlBlocklist:
    """datatrove URLFilter's rules over its bundled lists, offline: domain (4.5M UT1 domains,
    held as sorted 64-bit hashes), sub-domain, exact URL, hard and soft URL words, sub-words."""

    def __init__(
        self, bundled: bool = True, extra_domains: Iterable[str] = (), soft_word_threshold: int = 2
    ) -> None:
        import ahocorasick
        import tldextract

        self._extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
        self._extra = {d.strip().lower() for d in extra_domains if d.strip()}
        self._soft_threshold = soft_word_threshold
        self._domains = np.zeros(0, dtype=np.uint64)
        self._urls: set[str] = set()
        self._hard: set[str] = set()
        self._soft: set[str] = set()
        self._subwords = ahocorasick.Automaton()
        if bundled:
            self._load_bundled()
        if len(self._subwords):
            self._subwords.make_automaton()

    def _load_bundled(self) -> None:
        from datatrove.utils._import_utils import ASSETS_PATH

        archive = Path(ASSETS_PATH) / "url_filterblacklistsv0_3_0.tar.gz"
        cache = _domain_cache(archive)
        domains = _load_cached(cache)
        urls = ""
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:  # sequential: stop before the 124 MB domain list when cached
                if member.name == "urls":
                    urls = tar.extractfile(member).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                elif member.name == "domains" and domains is None:
                    domains = _hash_domains(tar.extractfile(member).read(), cache)  # type: ignore[union-attr]
                if urls and domains is not None:
                    break
        self._domains = domains if domains is not None else np.zeros(0, dtype=np.uint64)
        self._urls = {u.strip() for u in urls.splitlines() if u.strip()}

        def words(name: str) -> set[str]:
            lines = (Path(ASSETS_PATH) / name).read_text("utf-8").splitlines()
            return {_URL_WORDS.sub("", x.lower()) for x in lines if x and x[0] != "#"}

        self._hard, self._soft = words("banned_words.txt"), words("soft_banned_words.txt")
        for word in words("banned_subwords.txt"):
            self._subwords.add_word(word, word)

    def _has_domain(self, domain: str) -> bool:
        import xxhash

        if not domain:
            return False
        if domain in self._extra:
            return True
        value = np.uint64(xxhash.xxh64_intdigest(domain.encode("utf-8")))
        index = int(np.searchsorted(self._domains, value))
        return index < len(self._domains) and self._domains[index] == value

    def reason(self, url: str | None) -> str | None:
        """Which rule blocks `url` (`domain`, `subdomain`, `url`, `word`, `soft_words`,
        `subword`), or None."""
        if not url:
            return None
        info = self._extract(url)
        registered = getattr(info, "top_domain_under_public_suffix", None) or info.registered_domain
        if self._has_domain(registered.lower()):
            return "domain"
        if self._has_domain(info.fqdn.lower()):
            return "subdomain"
        host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").lower()
        parts = host.split(".")
        if any(".".join(parts[i:]) in self._extra for i in range(len(parts))):
            return "domain"
        if url in self._urls or _SCHEME.sub("", url) in self._urls:
            return "url"
        words = set(_URL_WORDS.split(url.lower()))
        if words & self._hard:
            return "word"
        if len(words & self._soft) >= self._soft_threshold:
            return "soft_words"
        if len(self._subwords) and next(self._subwords.iter(_URL_WORDS.sub("", url.lower())), None):
            return "subword"
        return None


def _domain_cache(archive: Path) -> Path:
    """Where the sorted domain hashes are cached (`PRETRAIN_CACHE`, default ~/.cache/pretrain)."""
    stat = archive.stat()
    return cache_root() / f"url-domains-{stat.st_size}-{int(stat.st_mtime)}.npy"


def _load_cached(path: Path) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None  # a partial or foreign file: rebuild it


def _hash_domains(raw: bytes, cache: Path) -> np.ndarray:
    """Sorted xxh64 hashes of the 4.5M domains (seconds; loading the cache takes milliseconds)."""
    import xxhash

    domains = raw.lower().split(b"\n")
    hashes = np.fromiter(map(xxhash.xxh64_intdigest, domains), np.uint64, len(domains))
    hashes.sort()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(partial, hashes)
        os.replace(partial, cache)
    except OSError:
        pass  # a read-only home: keep working without the cache
    return hashes


@functools.cache
def url_blocklist(
    bundled: bool = True, extra_domains: tuple[str, ...] = (), soft_word_threshold: int = 2
) -> UrlBlocklist:
    """One UrlBlocklist per process and settings (loading the bundled lists takes seconds)."""
    return UrlBlocklist(bundled, extra_domains, soft_word_threshold)


class UnsafeWords:
    """Whole-word (English) and substring (Chinese) matching of categorised unsafe terms."""

    def __init__(self, path: Path = RESOURCES / "unsafe_words.json") -> None:
        import ahocorasick

        data = json.loads(path.read_text("utf-8"))
        self._latin = ahocorasick.Automaton()
        self._cjk = ahocorasick.Automaton()
        for word, category in data["en"].items():
            self._latin.add_word(word.lower(), (len(word), category))
        for word, category in data["zh"].items():
            self._cjk.add_word(word, (len(word), category))
        self._latin.make_automaton()
        self._cjk.make_automaton()

    def hits(self, text: str) -> dict[str, int]:
        """Matches per category (leftmost-longest, non-overlapping: "他妈的" counts once)."""
        lower = text.lower()
        found: list[tuple[int, int, str]] = []
        for end, (length, category) in self._latin.iter(lower):
            start = end - length + 1
            if (start > 0 and lower[start - 1].isalnum()) or (
                end + 1 < len(lower) and lower[end + 1].isalnum()
            ):
                continue
            found.append((start, -length, category))
        if _CJK_RUN.search(text):
            found.extend(
                (end - length + 1, -length, category)
                for end, (length, category) in self._cjk.iter(text)
            )
        counts: dict[str, int] = {}
        covered = 0
        for start, negative_length, category in sorted(found):
            if start >= covered:
                counts[category] = counts.get(category, 0) + 1
                covered = start - negative_length
        return counts


def unsafe_score(hits: dict[str, int], num_words: float, weights: dict[str, float]) -> float:
    """1 - exp(-density / 2), density = weighted hits per 100 words (module docstring)."""
    weighted = sum(weights.get(category, 1.0) * n for category, n in hits.items())
    density = 100.0 * weighted / max(num_words, 1.0)
    return 1.0 - math.exp(-density / 2.0)


def count_words(text: str) -> float:
    """Words for the score's density: non-CJK words plus CJK characters / 2."""
    return len(_WORD.findall(text)) + len(_CJK_RUN.findall(text)) / 2


class SafetyStage(Stage):
    """Tags URL blocklisting and unsafe words, redacts PII in `text` (counts per kind)."""

    name: ClassVar[str] = "safety"
    order: ClassVar[int] = 60
    columns: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("url_blocked", pa.bool_()),
        pa.field("unsafe_score", pa.float32()),
        pa.field("unsafe_categories", CATEGORIES_TYPE),  # category names, [] when none
        pa.field("pii_counts", PII_COUNTS_TYPE),  # redactions made in `text`, per kind
        pa.field("safety_reason", pa.string()),
    )
    tags: ClassVar[tuple[str, ...]] = ("url_blocked", "unsafe_score")
    version: ClassVar[int] = 3  # 3: phone numbers by libphonenumber, national formats by lang
    Config: ClassVar[type[StageConfig]] = SafetyConfig
    config: SafetyConfig

    def setup(self) -> None:
        config = self.config
        unknown = [k for k in config.pii_kinds if k not in pii.KINDS]
        if unknown:
            raise ConfigError(
                f"stages.safety.pii_kinds: unknown kind(s) {', '.join(unknown)}; "
                f"valid kinds: {', '.join(pii.KINDS)}"
            )
        self._blocklist = url_blocklist(
            config.url_blocklist, config.extra_blocked_domains, config.soft_word_threshold
        )
        self._words = UnsafeWords() if config.unsafe_words else None

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        urls, langs = self.column_or_nulls(batch, "url"), self.column_or_nulls(batch, "lang")
        rows = [
            self.document(text, url, lang)
            for text, url, lang in zip(texts, urls, langs, strict=True)
        ]
        index = batch.column_names.index("text")
        field = batch.schema.field(index)
        batch = batch.set_column(
            index, field, pa.array([r.pop("text") for r in rows], type=field.type)
        )
        return self.append(
            batch,
            {name: [r[name] for r in rows] for name in rows[0]}
            if rows
            else {f.name: [] for f in self.columns},
        )

    def document(
        self, text: str | None, url: str | None = None, lang: str | None = None
    ) -> dict[str, Any]:
        """Safety tags for one document and its (redacted) text; `lang` (the langid stage's tag,
        when it ran) picks the national phone formats searched (pii.LANG_REGIONS)."""
        if not hasattr(self, "_blocklist"):
            self.setup()
        config = self.config
        blocked = self._blocklist.reason(url) is not None
        score, categories = 0.0, []
        counts: dict[str, int] = {}
        if text:
            if self._words is not None:
                hits = self._words.hits(text)
                score = unsafe_score(hits, count_words(text), config.category_weights)
                categories = sorted(hits)
            if config.redact_pii:
                text, counts = pii.redact(text, config.pii_kinds, lang=lang)
        reason = (
            "url_blocklist"
            if blocked
            else ("unsafe_words" if score >= config.unsafe_threshold and score > 0 else None)
        )
        return {
            "text": text,
            "url_blocked": blocked,
            "unsafe_score": score,
            "unsafe_categories": categories,
            "pii_counts": pii_struct(counts, config.pii_kinds if config.redact_pii else ()),
            "safety_reason": reason,
        }
