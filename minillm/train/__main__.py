"""``python -m minillm.train``: see :func:`minillm.train.cli.main`."""

from minillm.train.cli import main

if __name__ == "__main__":
    main()
