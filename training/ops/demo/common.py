"""What every part of the demo shares: where it writes for a person (stderr, so stdout
stays clean for scripts), the venv's bin directory, the served model's name, the question."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

console = Console(stderr=True)
BIN = Path(sys.executable).parent
MODEL_NAME = "toolrl-demo"
DEMO_QUESTION = "What's the weather like in Paris right now?"
