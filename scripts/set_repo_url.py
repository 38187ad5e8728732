"""Point the course at another repository (a fork): ``python scripts/set_repo_url.py https://github.com/you/minillm``.

The address lives in one place, ``minillm/notebook.py``'s ``REPO_URL``; this script rewrites it there and in
everything derived from it — the README's Colab badges and the notebooks' setup cells — so a fork changes it
once. ``tests/test_foundation.py`` checks that they agree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "minillm" / "notebook.py"


def current_url() -> str:
    return re.search(r'^REPO_URL = "([^"]+)"', SOURCE.read_text(), re.M).group(1)


def main(new_url: str) -> None:
    new_url = new_url.rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", new_url):
        raise SystemExit(f"expected https://github.com/<owner>/<name>, got {new_url!r}")
    old_url = current_url()
    old_slug, new_slug = old_url.split("github.com/")[1], new_url.split("github.com/")[1]
    files = [SOURCE, ROOT / "README.md", *sorted((ROOT / "notebooks").rglob("*.ipynb"))]
    for path in files:
        text = path.read_text(encoding="utf-8")
        updated = text.replace(old_url, new_url).replace(f"github/{old_slug}/", f"github/{new_slug}/")
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            print(f"updated {path.relative_to(ROOT)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
