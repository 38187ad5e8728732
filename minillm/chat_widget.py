"""Ask several chat models the same thing and read their replies side by side — in a notebook.

Notebooks 09 and 10 end with the models they explain: the base model, the SFT model and the aligned one. A
text box sends one prompt to each (greedy replies, so the same prompt always gets the same answer) and shows
the replies in columns, with the gold score when the prompt is one of the course's tasks. Widgets do not render
everywhere (GitHub's viewer, a notebook opened untrusted, nbval), so :func:`replies_table` prints the same
comparison as plain text for fixed prompts: the notebook reads the same without them. What a learner types is
content, never control: it is encoded as one user message in the chat format.

Widget code lives here, beside the concept modules and never inside them (``ipywidgets`` is imported only when
a widget is built).
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from minillm.chat import encode_prompt
from minillm.chat_terminal import MIN_REPLY_TOKENS, ChatModel, load_chat_model
from minillm.generation import generate_responses
from minillm.tasks import gold_score


@dataclass
class Reply:
    """One model's greedy reply to a prompt, and its gold score (None when nothing knows the right answer)."""

    model: str
    text: str
    gold: float | None


def shipped_models(names: Sequence[str] = ("base", "sft", "aligned")) -> list[ChatModel]:
    """The course's shipped chat models (``minillm chat``'s names: base, sft, aligned) or folders, ready to ask."""
    return [load_chat_model(name) for name in names]


def gold_or_none(prompt: str, reply: str) -> float | None:
    """The gold score of ``reply`` when ``prompt`` is one of the course's tasks, else None."""
    try:
        return gold_score(prompt, reply)
    except ValueError:  # not a course task: a story request or a question about a story, in the course's words
        return None


def side_by_side(models: Sequence[ChatModel], prompt: str, max_new_tokens: int = 80) -> list[Reply]:
    """Each model's greedy reply to ``prompt`` (one user message), with its gold score where one applies."""
    prompt = prompt.strip()
    if not prompt:
        raise ValueError("the prompt is empty: type a request or a question")
    replies = []
    for m in models:
        room = m.context_length - len(encode_prompt(prompt, m.tokenizer))
        if room < MIN_REPLY_TOKENS:
            raise ValueError(f"the prompt leaves {max(room, 0)} of {m.context_length} tokens for {m.name}'s reply")
        (text,) = generate_responses(m.model, m.tokenizer, [prompt], max_new_tokens=min(max_new_tokens, room))
        text = text.strip()
        replies.append(Reply(m.name, text, gold_or_none(prompt, text)))
    return replies


def _gold_text(reply: Reply) -> str:
    return "no gold score (not a course task)" if reply.gold is None else f"gold score {reply.gold:.2f}"


def replies_table(prompt: str, replies: Sequence[Reply], width: int = 100) -> str:
    """The comparison as plain text: the prompt, then each model's reply (wrapped) and its gold score."""
    lines = textwrap.wrap(" ".join(prompt.split()), width, initial_indent="prompt: ", subsequent_indent="        ")
    for r in replies:
        lines.append(f"  [{r.model}] {_gold_text(r)}")
        lines += textwrap.wrap(r.text or "(empty reply)", width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def replies_html(prompt: str, replies: Sequence[Reply]) -> str:
    """The comparison as an HTML table, one column per model; every text is escaped (it is data, not markup)."""
    head = "".join(f"<th style='text-align:left'>{html.escape(r.model)}</th>" for r in replies)
    cells = "".join(
        f"<td style='vertical-align:top;text-align:left;white-space:pre-wrap'>{html.escape(r.text or '(empty)')}"
        f"<br><i>{html.escape(_gold_text(r))}</i></td>"
        for r in replies
    )
    return (
        f"<p><b>prompt:</b> {html.escape(prompt)}</p>"
        f"<table style='table-layout:fixed;width:100%'><tr>{head}</tr><tr>{cells}</tr></table>"
    )


def chat_widget(models: Sequence[ChatModel], example: str = "", max_new_tokens: int = 80):
    """A text box and a button; each prompt is answered by every model, side by side (needs ipywidgets)."""
    import ipywidgets as widgets

    box = widgets.Textarea(value=example, placeholder="Type a request or a question…", layout={"width": "100%"})
    button = widgets.Button(description="Ask all models", button_style="primary")
    shown = widgets.HTML()

    def ask(_=None) -> None:
        button.disabled, shown.value = True, "<i>thinking…</i>"
        try:
            shown.value = replies_html(box.value, side_by_side(models, box.value, max_new_tokens))
        except ValueError as error:
            shown.value = f"<b>error:</b> {html.escape(str(error))}"
        finally:
            button.disabled = False

    button.on_click(ask)
    names = ", ".join(m.name for m in models)
    intro = widgets.HTML(f"Each prompt goes to {html.escape(names)} (greedy replies, a fresh conversation each).")
    return widgets.VBox([intro, box, button, shown])
