"""localspec: speculative decoding for local GGUF models.

A small drafter proposes tokens, the large target verifies them in one batched
llama.cpp pass, and an acceptance rule keeps the output exactly what the target
alone would produce (greedy) or distributed as it would be (sampling).
"""

from __future__ import annotations

__version__ = "0.1.0"
