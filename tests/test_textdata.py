"""minillm.textdata against independent references: unicodedata, a set of normalised strings, exact Jaccard,
brute-force all-pairs similarity, a simulation of the LSH S-curve and brute-force n-gram set intersection."""

from __future__ import annotations

import itertools
import json
import math
import random
import unicodedata
from collections import Counter

import numpy as np
import pytest

from minillm.data import load_stories, split_documents
from minillm.experiments import clean_vs_raw
from minillm.experiments.provenance import stale_results
from minillm.paths import data_path
from minillm.textdata import (
    KEEP_KINDS,
    KINDS,
    ExactDeduplicator,
    LSHIndex,
    MinHasher,
    NearDuplicateIndex,
    NgramIndex,
    Pipeline,
    candidate_pairs,
    candidate_probability,
    clean_documents,
    clean_file,
    contamination,
    corpus_text,
    english_stop_word_share,
    estimate_jaccard,
    exact_dedup,
    identify_language,
    is_english,
    jaccard,
    lsh_threshold,
    messy_corpus,
    normalize_text,
    quality_filter,
    route_documents,
    shingle_id,
    shingles,
    stop_word_shares,
)
from minillm.textdata.__main__ import main
from minillm.textdata.messy import DEFAULT_MIX, spanish_story
from minillm.textdata.minhash import PRIME


@pytest.fixture(scope="module")
def stories() -> list[str]:
    return load_stories(data_path("stories_train.txt"))


@pytest.fixture(scope="module")
def messy(stories):
    return messy_corpus(stories, 600, seed=3)


# --- normalisation -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("Ｈｅｌｌｏ，　ｗｏｒｌｄ！", "Hello, world!"),  # full-width letters, ideographic space
        ("a\u00a0b", "a b"),  # no-break space
        ("\ufb01sh and \ufb02ower", "fish and flower"),  # ligatures
        ("cafe\u0301", "caf\u00e9"),  # a combining accent composes
        ("x\u00b2", "x2"),  # superscript (a compatibility character)
        ("in\u200bto the\u200d wo\u2060rld\ufeff", "into the world"),  # zero-width characters
        ("soft\u00adhyphen", "softhyphen"),
        ("bell\x07 and\x00 nul", "bell and nul"),  # control characters
        ("one\r\ntwo\rthree\n", "one\ntwo\nthree"),  # line ends
        ("  many   spaces\t\tand tabs  ", "many spaces and tabs"),
        ("first\n\n \n\u00a0\nsecond", "first\nsecond"),  # blank lines (also ones that only look blank)
        ("", ""),
    ],
)
def test_normalize_hand_written_cases(raw: str, want: str) -> None:
    assert normalize_text(raw) == want


def test_normalize_agrees_with_unicodedata_and_is_idempotent(messy) -> None:
    # every printable, non-space character NFKC maps to itself or to visible text, as unicodedata says
    for code in list(range(0x21, 0x2FF)) + list(range(0xFF01, 0xFF5F)) + list(range(0xFB00, 0xFB07)):
        char = chr(code)
        if unicodedata.category(char)[0] in "CZ":
            continue
        want = " ".join(unicodedata.normalize("NFKC", char).split())
        assert normalize_text(char) == want, hex(code)
    for doc in messy:
        once = normalize_text(doc.text)
        assert normalize_text(once) == once
        assert unicodedata.is_normalized("NFKC", once)
    with pytest.raises(TypeError):
        normalize_text(b"bytes")  # type: ignore[arg-type]


# --- exact dedup -------------------------------------------------------------------------------------------------


def test_exact_dedup_equals_a_set_of_normalised_strings(messy) -> None:
    texts = [d.text for d in messy]
    seen: set[str] = set()
    want = []
    for text in texts:
        key = normalize_text(text)
        if key not in seen:
            seen.add(key)
            want.append(text)
    assert exact_dedup(texts) == want
    # what that means for the generator's kinds: every exact and Unicode copy goes, no clean story does
    index = ExactDeduplicator()
    by_kind = Counter(d.kind for d in messy if index.is_duplicate(d.text))
    assert by_kind["exact_dup"] == sum(d.kind == "exact_dup" for d in messy)
    assert by_kind["unicode_dup"] == sum(d.kind == "unicode_dup" for d in messy)
    assert by_kind["clean"] == 0


# --- MinHash -----------------------------------------------------------------------------------------------------


def _sets_with_jaccard(rng: np.random.Generator, union: int, common: int) -> tuple[set[int], set[int]]:
    """Two sets of random ids with |A ∪ B| = union and |A ∩ B| = common (the rest split evenly)."""
    ids = rng.choice(PRIME, size=union, replace=False).tolist()
    only = (union - common) // 2
    shared = ids[:common]
    return set(shared + ids[common : common + only]), set(shared + ids[common + only :])


def test_minhash_estimates_exact_jaccard_within_binomial_error(messy) -> None:
    k = 256
    hasher = MinHasher(num_hashes=k, shingle_size=5, seed=1)
    rng = np.random.default_rng(0)
    z_scores = []
    # constructed pairs with a known Jaccard, and real pairs from the corpus (copies and unrelated stories)
    pairs = [_sets_with_jaccard(rng, 100, c) for c in (10, 30, 50, 70, 90) for _ in range(20)]
    docs = [d for d in messy if d.kind in ("clean", "near_dup")]
    for d in docs[:120]:
        source = messy[d.source].text if d.source is not None else docs[0].text
        pairs.append(({shingle_id(s) for s in shingles(d.text)}, {shingle_id(s) for s in shingles(source)}))
    for a, b in pairs:
        j = jaccard(a, b)
        est = estimate_jaccard(hasher.signature_of_ids(a), hasher.signature_of_ids(b))
        std = math.sqrt(j * (1 - j) / k)
        assert abs(est - j) <= 4 * std + 1e-12, (j, est)  # 4σ of a binomial(k, J) / k
        if 0 < j < 1:
            z_scores.append((est - j) / std)
    z = np.array(z_scores)
    assert abs(z.mean()) <= 4 / math.sqrt(len(z))  # unbiased: the mean z-score is ~ N(0, 1/len)
    assert np.mean(np.abs(z) <= 2) >= 0.9  # about 95 % within 2σ, as a binomial should be


def test_signature_of_text_is_signature_of_its_shingle_ids(messy) -> None:
    hasher = MinHasher(num_hashes=8, shingle_size=3, seed=0)
    text = messy[0].text
    ids = [shingle_id(s) for s in shingles(text, 3)]
    by_hand = [min((int(a) * x + int(b)) % PRIME for x in ids) for a, b in zip(hasher.a, hasher.b, strict=True)]
    assert hasher.signature(text).tolist() == by_hand


# --- LSH ---------------------------------------------------------------------------------------------------------


def test_s_curve_matches_a_simulation() -> None:
    bands, rows, trials = 16, 4, 400
    rng = np.random.default_rng(5)
    for common in (20, 40, 50, 60, 80):
        s = common / 100
        hits = 0
        for trial in range(trials):
            a, b = _sets_with_jaccard(rng, 100, common)
            hasher = MinHasher(bands * rows, seed=trial)  # fresh hash functions for every trial
            index = LSHIndex(bands, rows)
            index.add(0, hasher.signature_of_ids(a))
            hits += bool(index.candidates(hasher.signature_of_ids(b)))
        p = candidate_probability(s, bands, rows)
        assert abs(hits / trials - p) <= 4 * math.sqrt(p * (1 - p) / trials) + 0.01, (s, hits / trials, p)
    assert lsh_threshold(20, 5) == pytest.approx((1 / 20) ** (1 / 5))
    assert candidate_probability(lsh_threshold(20, 5), 20, 5) == pytest.approx(1 - (1 - 1 / 20) ** 20)


def test_lsh_candidates_against_brute_force_all_pairs(messy) -> None:
    docs = [d.text for d in messy[:400]]
    sets = [shingles(t) for t in docs]
    exact = {(i, j): jaccard(sets[i], sets[j]) for i, j in itertools.combinations(range(len(docs)), 2)}
    bands, rows = 32, 4
    hasher = MinHasher(bands * rows, seed=0)
    signatures = [hasher.signature(t) for t in docs]
    found = candidate_pairs(signatures, bands, rows)
    similar = {p for p, j in exact.items() if j >= 0.6}
    dissimilar = {p for p, j in exact.items() if j < 0.2}
    assert len(similar) >= 50
    recall = len(similar & found) / len(similar)
    assert recall >= 0.97, recall  # the S-curve at J = 0.6 is already 0.99
    assert len(dissimilar & found) / len(dissimilar) <= 0.01  # at J = 0.2 it is 0.05; most pairs are far lower
    # the number of candidates is what the S-curve predicts, pair by pair, within binomial error
    probs = candidate_probability(np.array(list(exact.values())), bands, rows)
    assert abs(len(found) - probs.sum()) <= 4 * math.sqrt((probs * (1 - probs)).sum()) + 5
    # after the check on the whole signature: near-duplicate pairs at the 0.5 threshold
    verified = {p for p in found if estimate_jaccard(signatures[p[0]], signatures[p[1]]) >= 0.5}
    truth = {p for p, j in exact.items() if j >= 0.5}
    assert len(verified & truth) / len(verified) >= 0.95  # precision
    assert len(verified & truth) / len(truth) >= 0.95  # recall


def test_near_duplicate_index_matches_brute_force_first_copy(messy) -> None:
    docs = [d.text for d in messy[:300]]
    sets = [shingles(t) for t in docs]
    index = NearDuplicateIndex(bands=32, rows=4, threshold=0.5)
    kept: list[int] = []
    agree = 0
    for i, text in enumerate(docs):
        truth = any(jaccard(sets[i], sets[k]) >= 0.5 for k in kept)
        got = index.is_duplicate(text)
        agree += got == truth
        if not got:
            kept.append(i)
    assert agree / len(docs) >= 0.98


# --- filters -----------------------------------------------------------------------------------------------------


def test_filters_keep_every_course_story(stories) -> None:
    everything = stories + load_stories(data_path("stories_val.txt"))
    for story in everything:
        cleaned, problems = quality_filter(normalize_text(story))
        assert cleaned == story and problems == [], story[:80]
        assert is_english(story)
    assert min(english_stop_word_share(s) for s in everything) >= 0.2


def test_pipeline_precision_and_recall_by_kind(stories, messy) -> None:
    pipeline = Pipeline()
    decisions = [pipeline.process(d.text) for d in messy]
    kept = Counter(d.kind for d, (text, _) in zip(messy, decisions, strict=True) if text is not None)
    total = Counter(d.kind for d in messy)
    for kind in KEEP_KINDS:
        assert kept[kind] == total[kind], kind  # nothing good is lost
    for kind in set(KINDS) - KEEP_KINDS:
        assert kept[kind] <= 0.05 * total[kind], (kind, kept[kind], total[kind])
    story_set = set(stories)
    for d, (text, _) in zip(messy, decisions, strict=True):
        if d.kind == "wrapped":
            assert text in story_set  # the navigation and cookie lines went, the story stayed whole
    report = pipeline.report
    assert report.documents_in == len(messy) and report.documents_out == sum(kept.values())
    assert sum(report.removed.values()) == len(messy) - report.documents_out


def test_language_identification_tells_english_from_spanish_from_junk(stories, messy) -> None:
    rng = random.Random("test-spanish")
    spanish = [spanish_story(rng) for _ in range(300)]
    assert all(identify_language(s) == "en" for s in stories[:1000])
    assert all(identify_language(s) == "es" for s in spanish)
    # each language's own stop words dominate: the lists share no word, and the other list barely scores
    assert max(stop_word_shares(s)["es"] for s in stories[:1000]) < 0.05
    assert max(stop_word_shares(s)["en"] for s in spanish) < 0.05
    mash = [normalize_text(d.text) for d in messy if d.kind == "garbage"]
    assert sum(identify_language(t) is None for t in mash) >= 0.7 * len(mash)  # the rest: English spam lines
    assert identify_language("") is None and identify_language("123 456") is None
    with pytest.raises(ValueError, match="min_share"):
        identify_language("text", -0.5)


def test_routing_keeps_spanish_apart_and_changes_nothing_for_english(messy) -> None:
    texts = [d.text for d in messy]
    english, report = clean_documents(texts)
    by_language, routed = route_documents(texts)
    assert sorted(by_language) == ["en", "es"] and by_language["en"] == english
    assert routed.languages == {"en": len(english), "es": len(by_language["es"])}
    assert report.set_aside == {"es": len(by_language["es"])} and routed.set_aside == {}
    assert report.removed["language"] == len(by_language["es"]) and routed.removed["language"] == 0
    originals = {normalize_text(d.text) for d in messy if d.kind == "spanish"}
    assert set(by_language["es"]) <= originals  # Spanish pages only, unchanged by the quality step
    assert any("set aside" in line for line in report.lines())


def test_pipeline_steps_switch_off_one_at_a_time(messy) -> None:
    texts = [d.text for d in messy]
    dedup_only, dedup_report = clean_documents(texts, Pipeline(filters=False))
    filters_only, filter_report = clean_documents(texts, Pipeline(dedup=False))
    assert dedup_report.removed["quality"] == dedup_report.removed["language"] == 0
    assert filter_report.removed["exact_dedup"] == filter_report.removed["near_dedup"] == 0
    assert dedup_only == exact_dedup(dedup_only)  # no two kept texts normalise alike
    assert len(set(filters_only)) < len(filters_only)  # the copies stayed
    for text in filters_only:
        assert quality_filter(text)[0] == text and is_english(text)
    everything = clean_documents(texts, Pipeline(dedup=False, filters=False))[0]
    assert everything == [t for t in map(normalize_text, texts) if t]
    for bad in [("fr",), (), "en"]:
        with pytest.raises(ValueError, match="languages"):
            Pipeline(languages=bad)


# --- contamination -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 8, 13])
def test_contamination_equals_brute_force_ngram_sets(stories, n: int) -> None:
    train = stories[:150]
    # test documents: unseen stories, pieces of training stories, a mix, and short texts
    test = stories[150:190] + [train[3][:200], train[7] + " " + stories[300], "too short", ""]

    def grams(text: str) -> list[tuple[str, ...]]:
        words = _words(text)
        return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]

    reference = {g for doc in train for g in grams(doc)}
    index = NgramIndex(train, n)
    assert len(index) == len(reference)
    for doc, got in zip(test, contamination(index, test), strict=True):
        mine = grams(doc)
        overlap = sum(g in reference for g in mine)
        assert (got.ngrams, got.overlap, got.dirty) == (len(mine), overlap, overlap > 0)


def _words(text: str) -> list[str]:
    """Lower-case words without punctuation, written independently of minillm's regex."""
    cleaned = "".join(c if c.isalnum() or c == "_" else " " for c in unicodedata.normalize("NFKC", text).casefold())
    return cleaned.split()


# --- the generator -----------------------------------------------------------------------------------------------


def test_messy_corpus_is_deterministic_and_follows_its_mix(stories) -> None:
    a, b = messy_corpus(stories, 2000, seed=7), messy_corpus(stories, 2000, seed=7)
    assert a == b
    assert messy_corpus(stories, 200, seed=8) != a[:200]
    counts = Counter(d.kind for d in a)
    total = sum(DEFAULT_MIX.values())
    for kind, weight in DEFAULT_MIX.items():
        p = weight / total
        assert abs(counts[kind] - 2000 * p) <= 4 * math.sqrt(2000 * p * (1 - p)) + 1, kind
    for i, d in enumerate(a):
        if d.kind in ("exact_dup", "unicode_dup", "near_dup"):
            assert d.source < i and a[d.source].kind == "clean"
        if d.kind == "exact_dup":
            assert d.text == a[d.source].text
        assert "\n\n" not in d.text.replace("\r", "") and d.text == d.text.strip()  # one document each
    with pytest.raises(ValueError, match="not enough stories"):
        messy_corpus(stories[:5], 100)
    with pytest.raises(ValueError, match="mix"):
        messy_corpus(stories, 10, mix={"spam": 1.0})


# --- streaming ---------------------------------------------------------------------------------------------------


def test_streaming_clean_of_a_file_equals_the_in_memory_pipeline(tmp_path, messy) -> None:
    source, target = tmp_path / "raw.txt", tmp_path / "clean.txt"
    text = corpus_text(messy)
    source.write_bytes(text.encode("utf-8"))
    report = clean_file(source, target)
    kept, memory_report = clean_documents(split_documents(text.replace("\r\n", "\n")))
    assert target.read_text(encoding="utf-8") == "\n\n".join(kept) + "\n"
    assert report == memory_report
    # the list of documents the generator made gives the same result as its file
    assert clean_documents([d.text for d in messy])[0] == kept
    # and the command line writes the same file
    main(["clean", str(source), str(tmp_path / "cli.txt")])
    assert (tmp_path / "cli.txt").read_bytes() == target.read_bytes()
    # an existing output is someone's work: replaced only when asked
    target.write_text("finished work\n")
    with pytest.raises(FileExistsError, match="overwrite"):
        clean_file(source, target)
    with pytest.raises(SystemExit):
        main(["clean", str(source), str(target)])
    assert target.read_text() == "finished work\n"
    main(["clean", str(source), str(target), "--overwrite"])
    assert target.read_bytes() == (tmp_path / "cli.txt").read_bytes()


def test_bad_inputs_fail_clearly(tmp_path) -> None:
    with pytest.raises(ValueError, match="shingle size"):
        shingles("a b c", 0)
    with pytest.raises(ValueError, match="num_hashes"):
        MinHasher(0)
    with pytest.raises(ValueError, match="b·r"):
        LSHIndex(4, 4).add(0, np.zeros(8, dtype=np.uint32))
    with pytest.raises(ValueError, match="threshold"):
        NearDuplicateIndex(threshold=0.0)
    with pytest.raises(ValueError, match="min_share"):
        is_english("text", 1.5)
    with pytest.raises(ValueError, match="min_english_share"):
        Pipeline(min_english_share=-0.1)
    path = tmp_path / "a.txt"
    path.write_text("one document\n")
    with pytest.raises(ValueError, match="another file"):
        clean_file(path, path)
    with pytest.raises(FileNotFoundError):
        clean_file(tmp_path / "missing.txt", tmp_path / "out.txt")
    assert not (tmp_path / "out.txt").exists()


# --- the precomputed clean-vs-raw runs (notebook 13) -------------------------------------------------------------

COMMITTED = data_path("textdata") / "clean_vs_raw.json"


def test_committed_clean_vs_raw_results_match_the_code() -> None:
    payload = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert stale_results(payload, clean_vs_raw) == [], f"{COMMITTED} is stale: rerun the experiment"
    assert payload["provenance"]["code"] == "minillm/experiments/clean_vs_raw.py"
    assert "--quick" not in payload["provenance"]["command"]
    settings = clean_vs_raw.Settings(**{**payload["settings"], "seeds": tuple(payload["settings"]["seeds"])})
    assert settings == clean_vs_raw.Settings()
    # the module's hash does not cover minillm.textdata: the streams' makeup shows the corpus and the pipeline are
    # still the ones that made the runs
    streams, info, val_sets, _ = clean_vs_raw.token_streams(settings)
    assert payload["val_tokens"] == {name: len(ids) for name, ids in val_sets.items()}
    for arm in clean_vs_raw.ARMS:
        recorded = payload["arms"][arm]
        assert recorded["tokens"] == len(streams[arm]) == settings.tokens_per_arm  # equal tokens for every arm
        assert recorded["epochs"] == settings.epochs  # and the same number of passes over them
        for key in ("crawl_docs", "documents", "tokens_by_kind", "spanish_set_aside"):
            assert recorded[key] == info[arm][key], (arm, key)
    clean_kinds = payload["arms"]["clean"]["tokens_by_kind"]  # stories only, bar an edited copy LSH can miss
    assert (
        set(clean_kinds) - KEEP_KINDS <= {"near_dup"}
        and clean_kinds.get("near_dup", 0) < 0.01 * settings.tokens_per_arm
    )
    for seed in settings.seeds:
        runs = {arm: payload["runs"][f"{arm}_seed{seed}"] for arm in clean_vs_raw.ARMS}
        assert all(run["steps"][-1] == settings.steps for run in runs.values())
        assert runs["clean"]["val_loss"]["en"][-1] < runs["raw"]["val_loss"]["en"][-1]
        assert runs["raw"]["val_loss"]["es"][-1] < runs["clean"]["val_loss"]["es"][-1]  # raw saw Spanish


def test_clean_vs_raw_arms_run_the_steps_they_are_named_after(stories) -> None:
    docs = messy_corpus(stories, 300, seed=5)
    kinds = {arm: Counter(docs[i].kind for i, _ in clean_vs_raw.curate(arm, docs)[0]) for arm in clean_vs_raw.ARMS}
    copies = {"exact_dup", "unicode_dup", "near_dup"}
    junk = {"boilerplate", "garbage", "spanish"}
    assert set(kinds["raw"]) == set(kinds["normalise"]) == set(KINDS)
    assert [text for _, text in clean_vs_raw.curate("normalise", docs)[0]] == [normalize_text(d.text) for d in docs]
    assert not copies & set(kinds["dedup"]) and junk <= set(kinds["dedup"])
    assert copies <= set(kinds["filter"]) and not junk & set(kinds["filter"])
    assert set(kinds["clean"]) <= set(KEEP_KINDS)
    assert all(len(clean_vs_raw.curate(arm, docs)[1]) > 0 for arm in ("filter", "clean"))  # Spanish set aside
    with pytest.raises(ValueError, match="raise n_docs"):
        clean_vs_raw.arm_stream(None, [], docs, 10)
    with pytest.raises(ValueError, match="unknown arm"):
        clean_vs_raw.arm_pipeline("cleanest")


def test_clean_vs_raw_quick_run_writes_a_fresh_record(tmp_path) -> None:
    clean_vs_raw.main(["--out", str(tmp_path), "--quick"])
    payload = json.loads((tmp_path / clean_vs_raw.RESULT).read_text(encoding="utf-8"))
    assert stale_results(payload, clean_vs_raw) == []
    assert sorted(payload["runs"]) == sorted(f"{arm}_seed0" for arm in clean_vs_raw.ARMS)
    assert {arm["tokens"] for arm in payload["arms"].values()} == {clean_vs_raw.QUICK.tokens_per_arm}
    for run in payload["runs"].values():
        assert run["steps"] == [10, 20] and len(run["train_loss"]) == 20
        assert sorted(run["val_loss"]) == ["en", "es"]
        assert all(math.isfinite(v) for losses in run["val_loss"].values() for v in losses)
    with pytest.raises(SystemExit):  # an existing result is not replaced without --overwrite
        clean_vs_raw.main(["--out", str(tmp_path), "--quick"])
