"""What the bench tests on fake models share: a chat template and a small prompt set
(two categories, one two-turn prompt)."""

from __future__ import annotations

from localspec.prompts import BenchPrompt

TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
PROMPTS = [
    BenchPrompt("a-1", "alpha", ("hello",)),
    BenchPrompt("a-2", "alpha", ("first turn", "second turn")),
    BenchPrompt("b-1", "beta", ("other",)),
]
