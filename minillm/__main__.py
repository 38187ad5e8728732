"""``python -m minillm``: the whole pipeline, end to end (see :mod:`minillm.end_to_end`)."""

from minillm.end_to_end.cli import main

main()
