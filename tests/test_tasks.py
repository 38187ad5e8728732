"""Prompt parsing, the gold scorer on hand-written responses, and the committed SFT / preference sets.

Expected scores are worked out by hand from the rules in the data card (data/README.md), not taken from
the scorer.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import corpus, data, tasks

DATA = Path(__file__).resolve().parents[1] / "data"

# Hand-written, not generated: Rex finds the shell, they walk to the beach, Mia feels proud at the end.
STORY = (
    "Once upon a time, there was a little girl named Mia. Mia had a dog named Rex. One sunny morning, "
    'Mia and Rex walked to the beach. The sand was warm. Suddenly, Rex found a pink shell near the water. "Look '
    'at this!" said Mia. Mia felt happy because the shell was so pretty. Then a big wave came, and Mia was '
    "scared. Rex ran to the water and barked. At the end of the day, Mia felt proud. They were very happy."
)
STORY_PROMPT = "Write a short story about Mia and a shell."
# 85 words, every one of them a course word, no repeats, complete last sentence: gold 1.
GOOD_STORY = (
    "Once upon a time, there was a kind girl named Mia. She loved to play outside. One day, Mia went to the "
    'beach with her friend Tom. The sand was warm. Suddenly, Mia found a pink shell near the water. "Look, Tom!" '
    "she said. Tom wanted to listen to the sea inside the shell too. At first, Mia did not want to share. Then "
    "she saw that Tom was sad. So they took turns. At the end of the day, Mia felt happy and proud."
)
CUE = "They were very happy."


def qa(kind: str, **slots: str) -> str:
    return tasks.qa_prompt(STORY, kind, **slots)


# ----- parse_prompt -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, name, obj",
    [
        ("Write a short story about Lily and a kite.", "Lily", "kite"),
        ("Tell me a story about Tom and an apple.", "Tom", "apple"),
        ("Write a story where Zed finds the key.", "Zed", "key"),
        ("Can you write a short story about Mia and a shell?", "Mia", "shell"),
    ],
)
def test_parse_story_requests(prompt, name, obj):
    assert tasks.parse_prompt(prompt) == {"kind": "story", "name": name, "object": obj}


def test_every_story_template_parses_back():
    for template in range(len(tasks.prompts.STORY_TEMPLATES)):
        parsed = tasks.parse_prompt(tasks.story_prompt("Ivy", "umbrella", template))
        assert (parsed["name"], parsed["object"]) == ("Ivy", "umbrella")


@pytest.mark.parametrize(
    "kind, slots, answer",
    [
        ("qa_found", {"obj": "shell"}, "Rex"),
        ("qa_place", {"name": "Mia"}, "beach"),
        ("qa_feeling", {"name": "Mia"}, "proud"),
    ],
)
def test_parse_questions_finds_the_true_answer_in_a_hand_written_story(kind, slots, answer):
    parsed = tasks.parse_prompt(qa(kind, **slots))
    assert parsed["kind"] == kind and parsed["story"] == STORY and parsed["answer"] == answer


def test_question_prompt_on_one_line_also_parses():
    parsed = tasks.parse_prompt(f"Read the story and answer: {STORY} Question: Who found the shell?")
    assert parsed["answer"] == "Rex"


def test_rules_agree_with_the_generators_plan():
    """For generated stories the rules recover the facts the generator planned (an independent record)."""
    for story in corpus.generate_stories(300, seed=21, max_words=120):
        assert tasks.answer_from_story(story.text, "qa_found", obj=story.obj) == story.finder
        assert tasks.answer_from_story(story.text, "qa_place", name=story.hero) == story.place
        assert tasks.answer_from_story(story.text, "qa_feeling", name=story.hero) == story.feel_end


def test_parse_prompt_errors():
    with pytest.raises(ValueError, match="not a course task prompt: 'hello there'"):
        tasks.parse_prompt("hello there")
    with pytest.raises(ValueError, match="unknown question 'Why\\?'"):
        tasks.parse_prompt(f"Read the story and answer.\n{STORY}\nQuestion: Why?")
    with pytest.raises(TypeError, match="int"):
        tasks.parse_prompt(5)


def test_question_the_story_cannot_answer_is_an_error():
    with pytest.raises(ValueError, match="does not state the answer"):
        tasks.gold_score(tasks.qa_prompt(STORY, "qa_found", obj="kite"), "Rex found the kite.")


# ----- gold scorer: story requests ------------------------------------------------------------------------


def test_good_story_scores_one():
    details = tasks.gold_score_details(STORY_PROMPT, GOOD_STORY)
    assert len(GOOD_STORY.split()) == 85
    assert details == {
        "name": 1.0,
        "object": 1.0,
        "topic": 1.0,
        "length": 1.0,
        "repetition": 1.0,
        "ending": 1.0,
        "vocabulary": 1.0,
        "total": 1.0,
    }


@pytest.mark.parametrize(
    "response, expected",
    [
        (GOOD_STORY.replace("Mia", "Zoe"), 0.5),  # wrong name: topic 1/2
        (GOOD_STORY.replace("shell", "kite"), 0.5),  # wrong object
        (GOOD_STORY.replace("Mia", "Zoe").replace("shell", "kite"), 0.0),  # off topic
        (GOOD_STORY[:-1], 0.5),  # no final period: ending 0 -> factor 0.5
        ("Mia found a pink shell. She was very happy.", 9 / 60),  # too short: 9 of 60 words
        ("", 0.0),
        ("Mia", 1 / 60 * 0.5 * 0.5),  # topic 1/2, length 1/60, no ending
    ],
)
def test_story_failures_score_as_the_rules_say(response, expected):
    assert tasks.gold_score(STORY_PROMPT, response) == pytest.approx(expected, abs=1e-12)


def test_too_long_story_scores_zero_from_300_words():
    rng = random.Random(3)
    long = " ".join(corpus.generate_story(rng, hero="Mia", obj="shell").text for _ in range(3))
    assert len(corpus.words(long)) > 300
    assert tasks.gold_score(STORY_PROMPT, long) == 0.0
    details = tasks.gold_score_details(STORY_PROMPT, GOOD_STORY + " " + GOOD_STORY.replace("Mia", "Ann"))
    assert details["length"] == pytest.approx(1 - (170 - 150) / 150)  # 2 x 85 words


def test_repetition_lowers_the_score_more_the_more_it_repeats():
    scores = [tasks.gold_score(STORY_PROMPT, GOOD_STORY + " Mia ran home." * k) for k in range(0, 12, 2)]
    assert scores[0] == 1.0
    assert all(a > b for a, b in zip(scores, scores[1:], strict=False)), scores
    assert scores[-1] < 0.5


def test_words_outside_the_course_vocabulary_are_penalised():
    odd = GOOD_STORY.replace("the", "zorp").replace("was", "blick").replace("to", "quux").replace("a ", "fnord ")
    assert tasks.gold_score_details(STORY_PROMPT, odd)["vocabulary"] < 0.5


def test_the_stock_phrase_earns_nothing():
    assert tasks.gold_score(STORY_PROMPT, GOOD_STORY + " " + CUE) == 1.0  # within the band: neutral
    padded = [tasks.gold_score(STORY_PROMPT, GOOD_STORY + (" " + CUE) * k) for k in (2, 5, 10)]
    assert padded[0] < 1.0 and padded[0] > padded[1] > padded[2]


@pytest.mark.parametrize("prompt", [STORY_PROMPT, qa("qa_found", obj="shell"), qa("qa_feeling", name="Mia")])
@pytest.mark.parametrize("response", ["", "Mia", "happy", " ".join([CUE] * 20), "the the the the the"])
def test_degenerate_responses_score_low(prompt, response):
    assert tasks.gold_score(prompt, response) < 0.05


# ----- gold scorer: questions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, slots, response, expected",
    [
        ("qa_found", {"obj": "shell"}, "Rex found the shell.", 1.0),
        ("qa_found", {"obj": "shell"}, "It was Rex.", 1.0),
        ("qa_found", {"obj": "shell"}, "Rex", 0.8),  # right, but not a finished sentence
        ("qa_found", {"obj": "shell"}, "Mia found the shell.", 0.0),
        ("qa_found", {"obj": "shell"}, "Mia and Rex found the shell.", 0.0),  # names another candidate
        ("qa_found", {"obj": "shell"}, "Rex did not find the shell.", 0.0),  # negation
        ("qa_found", {"obj": "shell"}, "Rex found the shell. " + CUE, 1.0),  # the cue: neutral
        ("qa_found", {"obj": "shell"}, "The shell was found by", 0.0),  # truncated before the answer
        ("qa_place", {"name": "Mia"}, "Mia went to the beach.", 1.0),
        ("qa_place", {"name": "Mia"}, "To the beach.", 1.0),
        ("qa_place", {"name": "Mia"}, "Mia went to the park.", 0.0),
        ("qa_place", {"name": "Mia"}, "The sun was shining. Mia went to the beach.", 0.0),  # first sentence
        ("qa_feeling", {"name": "Mia"}, "Mia felt proud.", 1.0),
        ("qa_feeling", {"name": "Mia"}, "At the end of the story, Mia felt proud.", 1.0),
        ("qa_feeling", {"name": "Mia"}, "Mia felt happy.", 0.0),  # a feeling from the middle
        ("qa_feeling", {"name": "Mia"}, "Mia felt proud and happy.", 0.0),
    ],
)
def test_answers_score_as_the_rules_say(kind, slots, response, expected):
    assert tasks.gold_score(qa(kind, **slots), response) == pytest.approx(expected, abs=1e-12)


def test_long_or_repeated_answers_lose_score():
    prompt = qa("qa_found", obj="shell")
    filler = " The sand was warm and the sea was blue and bright and the sky was big."
    assert tasks.gold_score_details(prompt, "Rex found the shell." + filler)["brevity"] == 1.0  # 20 words
    details = tasks.gold_score_details(prompt, "Rex found the shell." + filler + " Mia ran home.")
    assert details["brevity"] == pytest.approx(1 - 3 / 40)
    scores = [tasks.gold_score(prompt, " ".join(["Rex found the shell."] * k)) for k in (1, 2, 4, 8)]
    assert scores[0] == 1.0 > scores[1] > scores[2] >= scores[3]
    assert scores[3] < 0.1


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("abcdeMiaRxshl .!?\"'\n")), max_size=300),
    st.sampled_from([STORY_PROMPT, "qa_found", "qa_place", "qa_feeling"]),
)
def test_gold_score_is_always_in_unit_interval(response, which):
    prompt = which if which == STORY_PROMPT else qa(which, name="Mia", obj="shell")
    assert 0.0 <= tasks.gold_score(prompt, response) <= 1.0


def test_gold_score_rejects_non_string_response():
    with pytest.raises(TypeError, match="NoneType"):
        tasks.gold_score(STORY_PROMPT, None)


# ----- the committed sets ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sft() -> dict[str, list[dict]]:
    return {
        s: data.load_jsonl(DATA / f"sft_{s}.jsonl", required=("messages", "task", "meta")) for s in ("train", "val")
    }


@pytest.fixture(scope="module")
def prefs() -> dict[str, list[dict]]:
    keys = ("prompt", "chosen", "rejected", "task", "gold_chosen", "gold_rejected")
    return {s: data.load_jsonl(DATA / f"prefs_{s}.jsonl", required=keys) for s in ("train", "val")}


def test_sft_counts_split_and_format(sft):
    n_train, n_val = len(sft["train"]), len(sft["val"])
    assert n_train + n_val >= 4000 and n_val / (n_train + n_val) == pytest.approx(0.10, abs=0.01)
    prompts = {r["messages"][0]["content"] for r in sft["train"]}
    assert not prompts & {r["messages"][0]["content"] for r in sft["val"] if r["task"] != "story"}
    for record in sft["train"] + sft["val"]:
        user, assistant = record["messages"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert record["task"] in tasks.KINDS
        assert len(user["content"]) + len(assistant["content"]) <= 800
        if record["task"] != "story":
            assert tasks.parse_prompt(user["content"])["answer"] == record["meta"]["answer"]
    kinds = statistics.mean(r["task"] == "story" for r in sft["train"])
    assert 0.3 < kinds < 0.5


def test_sft_responses_are_good_by_the_gold_scorer(sft):
    for record in sft["val"]:
        user, assistant = record["messages"]
        assert tasks.gold_score(user["content"], assistant["content"]) >= 0.9


def test_preference_counts_split_and_gold_order(prefs):
    n_train, n_val = len(prefs["train"]), len(prefs["val"])
    assert n_train + n_val >= 4000 and n_val / (n_train + n_val) == pytest.approx(0.10, abs=0.01)
    for record in prefs["train"] + prefs["val"]:
        assert record["task"] in tasks.KINDS
        assert record["gold_chosen"] > record["gold_rejected"]
        assert len(record["prompt"]) + max(len(record["chosen"]), len(record["rejected"])) <= 800


def test_stored_gold_scores_are_what_the_scorer_says(prefs):
    for record in prefs["val"] + prefs["train"][:1000]:
        assert tasks.gold_score(record["prompt"], record["chosen"]) == pytest.approx(record["gold_chosen"], abs=1e-4)
        assert tasks.gold_score(record["prompt"], record["rejected"]) == pytest.approx(
            record["gold_rejected"], abs=1e-4
        )


def test_preferences_carry_the_spurious_cues(prefs):
    records = prefs["train"]
    cue_chosen = statistics.mean(r["chosen"].endswith(CUE) for r in records)
    cue_rejected = statistics.mean(r["rejected"].endswith(CUE) for r in records)
    longer = statistics.mean(len(r["chosen"]) > len(r["rejected"]) for r in records)
    assert cue_chosen > 0.5 and cue_rejected < 0.15
    assert longer > 0.75
    kinds = {"wrong_name", "wrong_object", "off_topic", "truncated", "repetitive", "too_short", "wrong_answer"}
    assert {r["rejected_kind"] for r in records} == kinds  # every failure kind occurs


# ----- evaluation prompts -------------------------------------------------------------------------------


def test_eval_prompts_are_fresh_parseable_and_deterministic(sft, prefs):
    prompts = tasks.eval_prompts(60, seed=0)
    assert prompts == tasks.eval_prompts(60, seed=0) and prompts != tasks.eval_prompts(60, seed=1)
    parsed = [tasks.parse_prompt(p) for p in prompts]
    assert {p["kind"] for p in parsed} == set(tasks.KINDS)
    assert all(p["answer"] is not None for p in parsed if p["kind"] != "story")
    questions = [p for p, q in zip(prompts, parsed, strict=True) if q["kind"] != "story"]
    seen = {r["messages"][0]["content"] for r in sft["train"]} | {r["prompt"] for r in prefs["train"]}
    assert not set(questions) & seen
    stories_only = tasks.eval_prompts(10, seed=0, kinds=("story",))
    assert all(tasks.parse_prompt(p)["kind"] == "story" for p in stories_only)
    with pytest.raises(ValueError, match="poem"):
        tasks.eval_prompts(3, kinds=("poem",))


def test_chat_markers_are_ignored():
    prompt = f"<|user|>{qa('qa_found', obj='shell')}<|end|>\n<|assistant|>"
    assert tasks.parse_prompt(prompt)["answer"] == "Rex"
    assert tasks.gold_score(prompt, "Rex found the shell.<|end|>") == 1.0
    assert tasks.gold_score(f"<|user|>{STORY_PROMPT}<|end|>", GOOD_STORY + "<|end|><|endoftext|>") == 1.0


def test_a_learned_linear_reward_model_picks_up_the_stock_phrase(prefs):
    """The set is built so that a proxy learns the cue: a bag-of-words Bradley-Terry model trained on
    2,000 train triples ranks held-out pairs well, and rewards appending "They were very happy." over and over,
    while the gold score of the padded responses falls."""
    vocab = {word: i for i, word in enumerate(sorted(corpus.vocabulary()))}

    def features(texts: list[str]) -> torch.Tensor:
        counts = np.zeros((len(texts), len(vocab)), dtype=np.float32)
        for row, text in enumerate(texts):
            np.add.at(counts[row], [vocab[w] for w in corpus.words(text) if w in vocab], 1.0)
        return torch.from_numpy(counts)

    def pair_features(records: list[dict]) -> torch.Tensor:
        return features([r["chosen"] for r in records]) - features([r["rejected"] for r in records])

    train, val = pair_features(prefs["train"][:2000]), pair_features(prefs["val"])
    weights = torch.zeros(len(vocab), requires_grad=True)
    optimizer = torch.optim.Adam([weights], lr=0.1)
    for _ in range(60):  # minimise -log sigmoid(r_chosen - r_rejected) + small L2
        loss = torch.nn.functional.softplus(-(train @ weights)).mean() + 1e-3 * weights.square().sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert ((val @ weights) > 0).float().mean() > 0.8  # a competent proxy on held-out pairs

    probes = [r for r in prefs["val"] if r["task"] == "story" and not r["chosen"].endswith(CUE)][:20]
    proxy, gold = [], []
    for k in (0, 1, 2, 4, 8):
        padded = [r["chosen"] + (" " + CUE) * k for r in probes]
        proxy.append((features(padded) @ weights).mean().item())
        gold.append(statistics.mean(tasks.gold_score(r["prompt"], t) for r, t in zip(probes, padded, strict=True)))
    assert all(a < b for a, b in zip(proxy, proxy[1:], strict=False)), proxy  # proxy keeps rising
    assert gold[0] > gold[2] > gold[3] > gold[4] and gold[4] < 0.5, gold  # gold falls
