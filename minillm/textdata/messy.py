"""A small messy "web crawl" made from the course stories, with every document's true kind known.

Real pretraining text arrives as massive, unstructured, dirty text. This generator imitates that at a size a
laptop cleans in a second: course stories mixed with the junk a crawl holds — byte-identical copies, copies that
differ only in their Unicode spelling, edited copies, cookie banners and navigation menus, pages in another
language and garbage. Because each document records what it *is*, the course can measure what every cleaning
step removes (precision and recall), which is impossible on a real crawl.

Deterministic: one ``random.Random`` seeded by a string; nothing global, nothing downloaded.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

#: Every kind of document, in the order tables list them. ``clean`` and ``wrapped`` should be kept.
KINDS: tuple[str, ...] = (
    "clean",  # a course story
    "wrapped",  # a new story between navigation/cookie lines: keep the story, drop the lines
    "exact_dup",  # a byte-identical copy of an earlier story
    "unicode_dup",  # a copy written with NBSP, full-width letters, ligatures, zero-width characters, extra spaces
    "near_dup",  # a copy with a few words changed, inserted or dropped, or case/punctuation changed
    "boilerplate",  # a page of cookie banners, newsletter prompts and menus only
    "spanish",  # a story in another language (from a small Spanish grammar below)
    "garbage",  # random characters, markup debris, keyboard mash, one line repeated
)
KEEP_KINDS = frozenset({"clean", "wrapped"})

#: The default share of each kind (the first document is always clean: copies need an original).
DEFAULT_MIX: dict[str, float] = {
    "clean": 0.44,
    "wrapped": 0.05,
    "exact_dup": 0.08,
    "unicode_dup": 0.08,
    "near_dup": 0.10,
    "boilerplate": 0.07,
    "spanish": 0.08,
    "garbage": 0.10,
}


@dataclass(frozen=True)
class MessyDocument:
    """A document of the messy corpus: its text, its true kind and, for a copy, the index of the original."""

    text: str
    kind: str
    source: int | None = None


BOILERPLATE_LINES: tuple[str, ...] = (
    "We use cookies to improve your experience. By continuing you accept our cookie policy.",
    "This site uses cookies. Accept all cookies | Manage preferences",
    "Subscribe to our newsletter and never miss a story!",
    "Sign up for free and get weekly updates in your inbox.",
    "Home | Stories | About us | Contact | Log in",
    "Menu | Search | Categories | Popular | New",
    "© 2024 Example Media. All rights reserved.",
    "Privacy policy | Terms of use | Cookie settings",
    "Share on Facebook · Share on X · Copy link",
    "Click here to read more stories like this one.",
    "Please enable JavaScript to view the comments.",
    "Advertisement - continue reading below",
)

_NAMES_ES = (
    ("Ana", "a"),
    ("Lucía", "a"),
    ("Sofía", "a"),
    ("Marta", "a"),
    ("Pablo", "o"),
    ("Mateo", "o"),
    ("Diego", "o"),
    ("Hugo", "o"),
)
_PLACES_ES = ("el parque", "la playa", "el bosque", "la granja", "el río", "la plaza", "el jardín", "la montaña")
_OBJECTS_ES = (
    ("una pelota", "roja"),
    ("una cometa", "azul"),
    ("un libro", "viejo"),
    ("un sombrero", "grande"),
    ("una caja", "pequeña"),
    ("un tambor", "nuevo"),
    ("una llave", "dorada"),
    ("un barco", "blanco"),
)
_FEELINGS_ES = ("feliz", "tranquil{g}", "content{g}", "orgullos{g}")
_TIMES_ES = ("Un día", "Una mañana", "Por la tarde", "Un domingo", "Después del desayuno")


def _contract(text: str) -> str:
    """Spanish contracts "a el" and "de el" into "al" and "del"."""
    return text.replace(" a el ", " al ").replace(" de el ", " del ")


def spanish_story(rng: random.Random) -> str:
    """A short story in Spanish from a few frames with slots (grammatical, agreement included)."""
    (hero, g), (friend, g2) = rng.sample(_NAMES_ES, 2)
    place = rng.choice(_PLACES_ES)
    obj, adj = rng.choice(_OBJECTS_ES)
    feeling = rng.choice(_FEELINGS_ES).format(g=g)
    child = "una niña" if g == "a" else "un niño"
    buddy = "su amiga" if g2 == "a" else "su amigo"
    sentences = [
        rng.choice(
            [
                f"Había una vez {child} llamad{g} {hero}.",
                f"{hero} era {child} muy curios{g} que vivía cerca de {place}.",
            ]
        ),
        f"{rng.choice(_TIMES_ES)}, {hero} fue a {place} con {buddy} {friend}.",
        rng.choice(
            [
                f"Allí encontraron {obj} {adj} debajo de un árbol.",
                f"Cerca del camino vieron {obj} {adj} y se acercaron.",
            ]
        ),
        f"«¿De quién será?», preguntó {friend} en voz baja.",
        rng.choice(
            [
                f"Los dos jugaron con {obj.split()[1]} toda la tarde y se rieron mucho.",
                "Buscaron a su dueño por todo el pueblo, pero no encontraron a nadie.",
            ]
        ),
        "Cuando el sol se puso, volvieron a casa cantando una canción.",
        f"Esa noche {hero} estaba muy {feeling} y se durmió con una sonrisa.",
        rng.choice(["Fue un día que nunca olvidaron.", "Al día siguiente, quisieron volver a jugar juntos."]),
    ]
    return _contract(" ".join(sentences))


_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm", "1234567890")
_MARKUP = (
    '<div class="nav-item">',
    "</div>",
    '<a href="/page?id=',
    '">',
    "</a>",
    "<span>",
    "</span>",
    "&nbsp;",
    "&amp;",
    "<br/>",
    '<img src="/static/banner.png" alt="">',
    "<script>var ads = [];</script>",
    '{"id": 1, "type": "ad"}',
    "<!-- end header -->",
    "<td>",
    "</tr>",
)
_SPAM_LINES = (
    "BUY NOW best prices cheap deals",
    "FREE shipping on all orders today only",
    "WIN a prize click the link",
)


def garbage(rng: random.Random) -> str:
    """One of four kinds of junk a crawl holds: random characters, markup debris, keyboard mash, a line repeated."""
    style = rng.randrange(4)
    if style == 0:  # random printable characters, a few spaces
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789!@#$%^&*()_+-=[]{};:,.<>/?~|ÆØß¤§¶•ΩЖ"
        return "".join(rng.choice(alphabet + "  ") for _ in range(rng.randint(150, 500))).strip() + "!"
    if style == 1:  # markup left behind by a bad HTML-to-text step
        parts = [rng.choice(_MARKUP) + (str(rng.randint(1, 999)) if rng.random() < 0.3 else "") for _ in range(60)]
        return " ".join(parts)
    if style == 2:  # keyboard mash: runs along a row of the keyboard
        words = []
        for _ in range(rng.randint(25, 60)):
            row = rng.choice(_KEYBOARD_ROWS[:3])
            start = rng.randrange(len(row))
            length = rng.randint(8, 18)
            words.append("".join(row[(start + i) % len(row)] for i in range(length)))
        return " ".join(words)
    line = rng.choice(_SPAM_LINES)  # a spam line repeated, Windows line ends
    return "\r\n".join([line] * rng.randint(8, 20))


def _unicode_variant(rng: random.Random, text: str) -> str:
    """The same text in other code points: what NFKC and the whitespace rules of normalisation undo."""
    out = []
    for word in text.split(" "):
        r = rng.random()
        if r < 0.06:
            word = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in word)  # full-width
        elif r < 0.12 and len(word) > 2:
            i = rng.randrange(1, len(word))
            word = word[:i] + rng.choice("\u200b\u200c\u200d\u2060\u00ad") + word[i:]  # invisible inside a word
        out.append(word.replace("fi", "\ufb01") if rng.random() < 0.5 else word)  # the "ﬁ" ligature
    seps = [rng.choice([" ", " ", "\u00a0", "  ", "\u3000", " \t"]) for _ in range(len(out) - 1)]
    return "".join(w + s for w, s in zip(out, [*seps, ""], strict=True))


def _near_variant(rng: random.Random, text: str) -> str:
    """A lightly edited copy: 1-4 words changed, inserted or dropped, and sometimes case or punctuation changed."""
    words = text.split(" ")
    for _ in range(rng.randint(1, 4)):
        edit, i = rng.randrange(3), rng.randrange(len(words))
        if edit == 0:
            words[i] = rng.choice(words)  # changed
        elif edit == 1:
            words.insert(i, rng.choice(("really", "very", "then", "just", "also")))  # inserted
        elif len(words) > 10:
            del words[i]  # dropped
    out = " ".join(words)
    style = rng.randrange(4)
    if style == 1:
        out = out.lower()
    elif style == 2:
        out = out.replace(",", "").replace("!", ".")
    elif style == 3:
        out = out.upper()
    return out


def _wrapped(rng: random.Random, story: str) -> str:
    """A story as a page shows it: navigation above, a cookie banner or newsletter prompt below."""
    top = rng.sample(BOILERPLATE_LINES[4:6], rng.randint(1, 2))
    bottom = rng.sample([*BOILERPLATE_LINES[:4], *BOILERPLATE_LINES[6:]], rng.randint(1, 3))
    return ("\r\n" if rng.random() < 0.5 else "\n").join([*top, story, *bottom])


def messy_corpus(
    stories: Iterable[str], n_docs: int = 1000, seed: int = 0, mix: dict[str, float] | None = None
) -> list[MessyDocument]:
    """``n_docs`` documents drawn from ``mix`` (default :data:`DEFAULT_MIX`), in crawl order.

    New stories (``clean``, ``wrapped``) are taken from ``stories`` in order; copies copy an earlier clean
    story, chosen at random, so the first copy of every text is the clean one. Raises ValueError when the stories
    run out or the mix names an unknown kind.
    """
    mix = dict(DEFAULT_MIX if mix is None else mix)
    unknown = sorted(set(mix) - set(KINDS))
    if unknown or not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"mix must give non-negative weights to kinds from {KINDS}, got {mix}")
    if not isinstance(n_docs, int) or n_docs < 0:
        raise ValueError(f"n_docs must be a non-negative int, got {n_docs!r}")
    rng = random.Random(f"messy-{seed}")
    fresh: Iterator[str] = iter(stories)
    kinds, weights = list(mix), list(mix.values())
    docs: list[MessyDocument] = []
    originals: list[int] = []  # indexes of the clean stories so far

    def next_story() -> str:
        story = next(fresh, None)
        if story is None:
            raise ValueError(f"not enough stories for {n_docs} documents (ran out after {len(docs)})")
        return story

    for _ in range(n_docs):
        kind = rng.choices(kinds, weights)[0]
        if kind in ("exact_dup", "unicode_dup", "near_dup") and not originals:
            kind = "clean"
        if kind == "clean":
            originals.append(len(docs))
            docs.append(MessyDocument(next_story(), kind))
        elif kind == "wrapped":
            docs.append(MessyDocument(_wrapped(rng, next_story()), kind))
        elif kind in ("exact_dup", "unicode_dup", "near_dup"):
            source = rng.choice(originals)
            text = docs[source].text
            if kind != "exact_dup":
                text = {"unicode_dup": _unicode_variant, "near_dup": _near_variant}[kind](rng, text)
            docs.append(MessyDocument(text, kind, source))
        elif kind == "boilerplate":
            docs.append(MessyDocument("\n".join(rng.sample(BOILERPLATE_LINES, rng.randint(3, 7))), kind))
        elif kind == "spanish":
            docs.append(MessyDocument(spanish_story(rng), kind))
        else:
            docs.append(MessyDocument(garbage(rng), kind))
    return docs


def corpus_text(documents: Iterable[MessyDocument | str]) -> str:
    """The documents as one text file: separated by a blank line, as :mod:`minillm.data` reads them."""
    return "\n\n".join(d.text if isinstance(d, MessyDocument) else d for d in documents) + "\n"
