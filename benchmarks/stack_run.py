"""The deployable stack, for real, in one command: build the images, bring the compose stack
up, run the loop through it with its faults, serve the champion and ask it a question.

    make stack            # = .venv/bin/python benchmarks/stack_run.py
    .venv/bin/python benchmarks/stack_run.py --no-build --no-faults --keep

Steps, each written to benchmarks/results/stack.json as soon as it is measured (a later
failure loses nothing measured before it):
1. `build`: infra/images/build-local-base.sh (base images from Debian's packages, then the
   project images; cached layers make a rebuild minutes), build times and image sizes;
2. a fresh .env (random secrets, mode 0600) with the short training spec;
3. `compose_up`: the host-network variant of infra/compose/compose.yaml, time to healthy;
4. `loop`: the dataset DAG, the retraining run the scheduler starts from its Asset event,
   and during it the three faults (Postgres restart, scheduler restart, Ray worker stopped
   mid-training, then the operator's clear; see stack_loop.py);
5. `serving`: the `serving-cpu` profile answers the demo question with the champion;
6. the stack is taken down with its volumes (`--keep` leaves it running).
Needs root (or the docker group), a running dockerd and docker-compose; about 45 minutes on a
2-core machine, most of it the training job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # benchmark scripts are files, not a package

import stack_loop  # noqa: E402
import stack_up  # noqa: E402

TIMINGS = Path("/var/tmp/toolrl-build-timings.tsv")
SHORT_SPEC = "training/specs/cpu_tiny.yaml"


def preflight() -> None:
    """Fail before any work when the tools the steps need are missing, saying what to do."""
    for tool, fix in (
        ("docker", "apt-get install docker.io"),
        ("docker-compose", "apt-get install docker-compose"),
    ):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: {fix}")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise SystemExit(
            "dockerd is not answering: start it (`nohup dockerd > /var/tmp/dockerd.log 2>&1 &`) "
            "and run this again as root or as a member of the docker group"
        )


def build() -> int:
    """build-local-base.sh, its timings and the image sizes merged into stack.json."""
    env = {**os.environ, "TIMINGS_FILE": str(TIMINGS)}
    rc = subprocess.run([str(REPO / "infra/images/build-local-base.sh")], env=env).returncode
    stack_up.save("build", stack_up.merged_build(TIMINGS))
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-build", action="store_true", help="use the images already built")
    parser.add_argument("--no-faults", action="store_true", help="the loop without faults")
    parser.add_argument("--keep", action="store_true", help="leave the stack running at the end")
    parser.add_argument("--env-file", type=Path, default=Path("/var/tmp/toolrl.env"))
    parser.add_argument("--spec", default=SHORT_SPEC, help="TrainingSpec of the retraining run")
    parser.add_argument("--timeout-min", type=float, default=60.0, help="per retraining wait")
    args = parser.parse_args()
    preflight()
    t0 = time.monotonic()
    if not args.no_build and build() != 0:
        print("image build failed: see the step above and /var/tmp/toolrl-build-timings.tsv")
        return 1
    stack_up.write_env(args.env_file, [f"TOOLRL_TRAINING_SPEC={args.spec}"])
    dc = stack_up.compose_cmd(args.env_file)
    ok = False
    try:
        up = stack_up.compose_up(args.env_file)
        stack_up.save("compose_up", {"measured_at_utc": stack_up.now_utc(), **up})
        if up["not_done"]:
            print(f"not healthy: {', '.join(up['not_done'])}; the stack is left up to inspect")
            args.keep = True
            return 1
        loop = stack_loop.run_loop(
            stop_worker_at=None if args.no_faults else "sft/global_step_200",
            postgres_fault=not args.no_faults,
            scheduler_fault=not args.no_faults,
            timeout_min=args.timeout_min,
        )
        stack_up.save("loop", loop)
        print(json.dumps(loop, indent=2))
        if not all(r["state"] == "success" for r in loop["runs"]):
            print("a DAG run did not succeed: the stack is left up to inspect (Airflow UI :8080)")
            args.keep = True
            return 1
        serving = stack_loop.serve_and_ask(args.env_file)
        stack_up.save("serving", serving)
        print(json.dumps(serving, indent=2))
        ok = serving.get("time_to_healthy_s") is not None
        return 0 if ok else 1
    finally:
        print(f"stack run: {time.monotonic() - t0:.0f} s; figures in {stack_up.RESULTS}")
        if args.keep:
            print("stack left running; take it down with: " + " ".join([*dc, "down", "-v"]))
        else:
            subprocess.run([*dc, "--profile", "serving-cpu", "down", "-v"], check=False)


if __name__ == "__main__":
    sys.exit(main())
