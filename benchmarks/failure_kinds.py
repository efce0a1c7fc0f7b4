"""What a model gets wrong, by category: the failure kinds GRPO's reward must rank.

Reads the harness's case journal (`toolrl eval ... --out R.json` writes `R.json.cases.jsonl`;
`bench_cpu_training.py --keep DIR` leaves `DIR/eval/{sft,final}.json.cases.jsonl`) and
counts per category: extra call attempts, missing or wrong tools, wrong arguments with the
right tools, a final answer that misses the tool's result, a call where none is needed,
malformed calls. `tests/code/test_reward_ranks_sft_failures.py` checks the rule reward
ranks each kind below the correct rollout.

    python benchmarks/failure_kinds.py DIR/eval/sft.json.cases.jsonl [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def failure_kinds(cases: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for case in cases:
        kinds = by[str(case["category"])]
        kinds["cases"] += 1
        kinds["passed"] += bool(case.get("passed"))
        kinds["malformed"] += bool(case.get("malformed_calls"))
        expected = Counter(case.get("expected_tools") or [])
        called = Counter(case.get("called_tools") or [])
        if not expected:
            kinds["call_where_none_needed"] += bool(case.get("call_attempts"))
            continue
        kinds["extra_calls"] += int(case.get("call_attempts") or 0) > sum(expected.values())
        kinds["missing_or_wrong_tool"] += bool(expected - called)
        kinds["wrong_arguments"] += bool(case.get("selection_ok") and not case.get("exact_calls"))
        kinds["answer_misses_result"] += bool(case.get("exact_calls") and not case.get("answer_ok"))
    return {category: dict(counts) for category, counts in sorted(by.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("journal", type=Path, help="A harness case journal (.cases.jsonl).")
    parser.add_argument("--out", type=Path, default=None, help="Also write the counts here.")
    args = parser.parse_args()
    lines = args.journal.read_text(encoding="utf-8").splitlines()[1:]  # first: the header
    cases = [json.loads(line) for line in lines if line.strip()]
    counts = failure_kinds([c for c in cases if c.get("sample", 0) == 0])
    for category, kinds in counts.items():
        print(f"{category:>13}: {kinds}")
    if args.out:
        args.out.write_text(json.dumps({"journal": str(args.journal), "by_category": counts},
                                       indent=2) + "\n", encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()
