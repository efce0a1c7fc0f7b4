"""The file verl loads by path: `reward.custom_reward_function.path=<repo>/training/rewards/
verl_entry.py`, `reward.custom_reward_function.name=compute_score` (rule reward) or
`compute_score_judged` (rule + group judge, see `training.rewards.judged`).

verl imports this file outside any package (`importlib.util.spec_from_file_location`), so
when `training` is not importable (a Ray worker without the repo on its path) the repository
root, two folders up, is put on `sys.path` first. That is the only side effect, and it is why
this file exists apart from `training.rewards.score`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("training") is None:  # pragma: no cover - depends on the worker
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from training.rewards.judged import compute_score_judged
from training.rewards.score import compute_score

__all__ = ["compute_score", "compute_score_judged"]
