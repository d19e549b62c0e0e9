"""MinHash, LSH and connected-components core (numpy only, no Ray)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipeline.dedup import components
from data_pipeline.dedup.components import bucket_pairs
from data_pipeline.dedup.minhash import (
    EMPTY,
    MinHasher,
    band_keys,
    batch_shingles,
    exact_hashes,
    hash_strings,
    jaccard_estimate,
    lsh_params,
    word_tokens,
)

pytestmark = pytest.mark.timeout(120)


def _exact_jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(text: str) -> set[tuple[str, ...]]:
        words = text.lower().split()
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}

    sa, sb = grams(a), grams(b)
    return len(sa & sb) / len(sa | sb)


def test_string_hash_is_content_based_and_batch_independent() -> None:
    words = pa.array(["alpha", "beta", "alpha", "", "gamma", "beta"])
    hashes = hash_strings(words)
    assert hashes[0] == hashes[2] and hashes[1] == hashes[5]
    assert len(set(hashes.tolist())) == 4
    alone = hash_strings(pa.array(["gamma"]))
    assert alone[0] == hashes[4]  # same word, different batch and offset
    sliced = hash_strings(words.slice(4, 2))
    assert sliced.tolist() == hashes[4:6].tolist()


def test_word_tokens_fold_case_punctuation_and_unicode() -> None:
    tokens, offsets = word_tokens(pa.array(["Hello, World!", "hello world", "Ｈｅｌｌｏ world"]))
    assert offsets.tolist() == [0, 2, 4, 6]
    assert tokens[0:2].tolist() == tokens[2:4].tolist() == tokens[4:6].tolist()


def test_exact_hash_normalises_case_whitespace_and_nfkc() -> None:
    hashes = exact_hashes(pa.array(["A  b\n c", "a b c", "ａ b c", "a b d", None, ""]))
    assert hashes[0] == hashes[1] == hashes[2]
    assert hashes[3] != hashes[0]
    assert hashes[4] == hashes[5]


def test_signature_estimates_jaccard() -> None:
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(5000)]
    base = list(rng.choice(vocab, 400))
    texts, truths = [], []
    for edits in (0, 5, 20, 60, 150):
        other = list(base)
        for pos in rng.choice(len(other), edits, replace=False):
            other[pos] = "zz" + other[pos]
        texts.append(" ".join(other))
        truths.append(_exact_jaccard(" ".join(base), texts[-1]))
    shingles, offsets, _ = batch_shingles(pa.array([" ".join(base), *texts]), None, 5, 5)
    sig = MinHasher(256, seed=3).signatures(shingles, offsets)
    estimates = jaccard_estimate(np.repeat(sig[:1], len(texts), axis=0), sig[1:])
    # 256 permutations: standard error <= 0.032; 4 sigma bound
    assert np.abs(estimates - np.array(truths)).max() < 0.13
    assert estimates[0] == 1.0


def test_empty_and_tiny_documents_are_counted() -> None:
    texts = pa.array(["", None, "two words", "one two three four five six", "   "])
    shingles, offsets, counts = batch_shingles(texts, None, 5, 5)
    assert np.diff(offsets).tolist() == [0, 0, 1, 2, 0]
    assert (counts["empty"], counts["tiny"]) == (3, 1)
    sig = MinHasher(16).signatures(shingles, offsets)
    assert (sig[0] == EMPTY).all() and (sig[2] != EMPTY).any()


def test_cjk_documents_use_character_shingles() -> None:
    text = "这是一个中文文档用于测试字符级别的切分"
    shingles, offsets, counts = batch_shingles(pa.array([text, text]), pa.array(["zh", "en"]), 5, 5)
    assert counts["cjk"] == 1
    assert np.diff(offsets).tolist() == [len(text) - 4, 1]  # en: one "word", a tiny document


def test_signatures_do_not_depend_on_batching() -> None:
    texts = [" ".join(f"t{(i * j) % 97}" for j in range(30 + i)) for i in range(40)]
    hasher = MinHasher(64, seed=9)
    whole = hasher.signatures(*batch_shingles(pa.array(texts), None, 5, 5)[:2])
    halves = [
        hasher.signatures(*batch_shingles(pa.array(part), None, 5, 5)[:2])
        for part in (texts[:13], texts[13:])
    ]
    assert np.array_equal(whole, np.concatenate(halves))


def test_lsh_params_match_datasketch_optimum() -> None:
    from datasketch.lsh import _optimal_param

    for threshold, perms in ((0.5, 64), (0.8, 128), (0.9, 256)):
        assert lsh_params(threshold, perms) == _optimal_param(threshold, perms, 0.5, 0.5)
    bands, rows = lsh_params(0.8, 128, 0.1, 0.9)
    assert bands * rows <= 128 and 1 - (1 - 0.8**rows) ** bands > 0.85


def test_band_keys_collide_only_on_equal_bands() -> None:
    sig = np.arange(24, dtype=np.uint32).reshape(2, 12)
    sig[1, :4] = sig[0, :4]
    keys = band_keys(sig, 3, 4)
    assert keys[0, 0] == keys[1, 0] and (keys[0, 1:] != keys[1, 1:]).all()
    assert len(set(keys.ravel().tolist())) == 5


def test_bucket_pairs_large_buckets_stay_linear_and_connected() -> None:
    keys = np.array([7] * 100 + [8, 8, 9], dtype=np.uint64)
    vertices = np.arange(103, dtype=np.int64)[::-1].copy()
    left, right = bucket_pairs(keys, vertices, small_bucket=16)
    assert len(left) == 2 * 99 + 1
    labels = connected_components(103, left, right)
    assert len(set(labels[:100].tolist())) == 1 and labels[102] == 102


def connected_components(num_vertices: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Label of each vertex: the smallest vertex of its component (scipy, the reference)."""
    from scipy import sparse
    from scipy.sparse import csgraph

    graph = sparse.coo_matrix((np.ones(len(src)), (src, dst)), shape=(num_vertices,) * 2)
    component = csgraph.connected_components(graph, directed=False)[1]
    smallest = np.full(component.max() + 1, num_vertices)
    np.minimum.at(smallest, component, np.arange(num_vertices))
    return smallest[component]


def star_components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The aggregate's alternating large-star / small-star steps (data_pipeline.dedup.aggregate.
    _components) on one partition: (vertex, root) for every non-root vertex."""
    previous = None
    for _ in range(200):
        a, b = components.large_star(*components.orient_large(a, b))
        fingerprint = components.edge_fingerprint(a, b)
        a, b = components.small_star(*components.orient_small(a, b))
        if fingerprint == previous:
            break
        previous = fingerprint
    a, b = components.large_star(*components.orient_large(a, b))
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    first = np.ones(len(a), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[first], b[first]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=80))
def test_star_components_equal_union_find(edges: list[tuple[int, int]]) -> None:
    src = np.array([a for a, _ in edges], dtype=np.int64)
    dst = np.array([b for _, b in edges], dtype=np.int64)
    labels = connected_components(41, src, dst)
    keep = src != dst
    vertex, root = star_components(src[keep], dst[keep])
    star_labels = np.arange(41)
    star_labels[vertex] = root
    assert np.array_equal(labels, star_labels)
    assert len(np.unique(vertex)) == len(vertex)  # one root per vertex


def test_exact_verification_decides_pairs_near_the_threshold() -> None:
    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.dedup.core import signature_table, verify_pairs

    base = [f"w{i}" for i in range(400)]
    variants = []
    for edits in (9, 8):  # Jaccard 0.796 (below 0.8) and 0.818 (above)
        words = list(base)
        for k in range(edits):
            words[20 + 40 * k] = f"x{k}"
        variants.append(" ".join(words))
    texts = [" ".join(base), *variants]
    truths = [_exact_jaccard(texts[0], t) for t in variants]
    assert truths[0] < 0.8 < truths[1]
    table = pa.table({"id": ["a", "b", "c"], "text": texts})
    sigs, _ = signature_table(table, DedupConfig())
    signatures, shingles = signatures_of_table(sigs), sigs.column("shingles")
    v = np.asarray(sigs.column("vertex"))[[1, 2]]
    ok, similarity, _ = verify_pairs(
        signatures[[0, 0]], shingles.take(pa.array([0, 0])), sigs, v, DedupConfig()
    )
    assert ok.tolist() == [False, True]
    assert np.allclose(similarity, truths)


def signatures_of_table(sigs: pa.Table) -> np.ndarray:
    from data_pipeline.dedup.core import signatures_of

    return signatures_of(sigs.column("sig"), 128)
