"""minillm — the reference library of the minillm course.

One module per concept, in course order (see README's notebook ↔ module table). Modules are imported
explicitly (``from minillm import tokenizer``) so that ``import minillm`` stays cheap.
"""

__version__ = "0.1.0"
