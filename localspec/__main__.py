"""`python -m localspec` runs the CLI."""

from __future__ import annotations

from localspec.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
