"""``minillm.chat_widget``: the side-by-side replies of notebooks 09 and 10, as text, HTML and a widget."""

from __future__ import annotations

import pytest
import torch

from minillm.chat_terminal import ChatModel, load_chat_model
from minillm.chat_widget import Reply, chat_widget, gold_or_none, replies_html, replies_table, side_by_side
from minillm.generation import generate_responses
from minillm.tasks import eval_prompts, gold_score


@pytest.fixture(scope="module")
def sft() -> ChatModel:
    return load_chat_model("sft")


@pytest.fixture(scope="module")
def base() -> ChatModel:
    return load_chat_model("base")


def test_each_model_gives_its_greedy_reply_and_the_gold_score_of_a_course_task(sft, base) -> None:
    prompt = next(p for p in eval_prompts(40, seed=3) if p.startswith("Read the story"))
    replies = side_by_side([base, sft], prompt, max_new_tokens=24)
    assert [r.model for r in replies] == ["base", "sft"]
    for reply, m in zip(replies, (base, sft), strict=True):
        (want,) = generate_responses(m.model, m.tokenizer, [prompt], max_new_tokens=24)
        assert reply.text == want.strip()
        assert reply.gold == pytest.approx(gold_score(prompt, reply.text), abs=0)


def test_a_prompt_that_is_no_course_task_has_no_gold_score(sft) -> None:
    (reply,) = side_by_side([sft], "hello, who are you?", max_new_tokens=8)
    assert reply.gold is None and gold_or_none("hello", "hi") is None
    assert "no gold score" in replies_table("hello, who are you?", [reply])


def test_bad_prompts_are_refused_with_one_line(sft) -> None:
    with pytest.raises(ValueError, match="empty"):
        side_by_side([sft], "   ")
    with pytest.raises(ValueError, match="leaves .* tokens"):
        side_by_side([sft], "tell me more " * 200)


def test_the_table_and_the_html_show_every_reply_and_escape_what_was_typed() -> None:
    replies = [Reply("base", "a <b>bold</b> reply", None), Reply("sft", "Ben found the kite.", 1.0)]
    table = replies_table("Who <found> it?", replies)
    assert table.splitlines()[0] == "prompt: Who <found> it?"
    assert "[sft] gold score 1.00" in table and "Ben found the kite." in table
    page = replies_html("Who <found> it?", replies)
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page and "&lt;found&gt;" in page
    assert page.count("<td") == 2


def test_the_widget_answers_what_is_typed(sft) -> None:
    torch.manual_seed(0)
    box = chat_widget([sft], example="Write a short story about Sam and a kite.", max_new_tokens=12)
    _, text, button, shown = box.children
    button.click()
    assert "sft" in shown.value and "gold score" in shown.value
    text.value = ""
    button.click()
    assert shown.value.startswith("<b>error:</b>") and not button.disabled
