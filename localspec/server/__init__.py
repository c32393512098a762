"""The local OpenAI-compatible server: `create_app(engine, settings)` (see app.py).

Nothing is imported eagerly here, so `import localspec.server` stays cheap; use
`from localspec.server.app import create_app`.
"""

from __future__ import annotations
