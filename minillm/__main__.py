"""``python -m minillm``: the whole pipeline, end to end (see :mod:`minillm.pipeline`)."""

from minillm.pipeline.cli import main

main()
