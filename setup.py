"""Build hook: the wheel carries the course's base checkpoint (``data/base_long``) and its chat models
(``data/posttrain/sft`` and ``data/posttrain/aligned``) as package data, for ``minillm chat``.

Why: ``python -m minillm --size demo`` post-trains that checkpoint, and a practitioner who installs the wheel
has no clone. Outside a clone ``minillm.paths.data_dir`` regenerates the course's text data and copies this
checkpoint next to it. Everything else about the build is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# the demo's start, and what `minillm chat` talks to
SHIPPED_CHECKPOINTS = ("base_long", "posttrain/sft", "posttrain/aligned")


class BuildPyWithCheckpoints(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in SHIPPED_CHECKPOINTS:
            source = root / "data" / name
            if source.is_dir():  # an sdist without data/ builds a wheel without the checkpoint
                shutil.copytree(source, Path(self.build_lib) / "minillm" / "_data" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithCheckpoints})
