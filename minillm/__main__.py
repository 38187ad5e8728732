"""``python -m minillm``: the whole pipeline, end to end (see :mod:`minillm.end_to_end`);
``python -m minillm chat``: talk to a trained model (see :mod:`minillm.chat_terminal`)."""

from minillm.end_to_end.cli import console

console()
