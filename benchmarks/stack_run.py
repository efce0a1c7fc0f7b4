"""The deployable stack, for real, in one command: build the images, bring the compose stack
up, run the loop through it with its faults, serve the champion and ask it a question.

    make stack            # = .venv/bin/python benchmarks/stack_run.py
    .venv/bin/python benchmarks/stack_run.py --no-build --no-faults --keep
    # the CPU demo's model through the stack, so the gate can promote a champion to serve:
    .venv/bin/python benchmarks/stack_run.py --no-faults --spec training/specs/cpu_smollm2.yaml \
        --set cpu.time_budget_s=1500 --thresholds training/specs/thresholds_demo.yaml \
        --record-suffix smollm2 --timeout-min 75

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
`--record-suffix` saves steps 4 and 5 under their own keys (`loop_smollm2`, `serving_smollm2`)
so a run of another spec never replaces the default run's records.
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
#: Where a spec changed with --set lives: on the toolrl-runs volume, mounted at the same path
#: in every Airflow role and Ray node, so the planner and the training job read one file.
SPECS_IN_STACK = "/var/lib/toolrl/specs"


def stack_spec(spec: str, assignments: list[str]) -> tuple[str, str | None]:
    """The spec the stack's scheduled runs train (TOOLRL_TRAINING_SPEC), and the YAML to write
    at that path first when `assignments` (`--set cpu.time_budget_s=1500`) change it; a
    spec without assignments is named as given (a shipped one, inside the images)."""
    if not assignments:
        return spec, None
    import yaml

    from training.spec.model import load_spec, with_settings

    path = Path(spec) if Path(spec).is_absolute() else REPO / spec
    changed = with_settings(load_spec(path), assignments)
    text = f"# {spec} with {' '.join(assignments)} (benchmarks/stack_run.py --set)\n"
    text += yaml.safe_dump(changed.model_dump(mode="json"), sort_keys=False)
    return f"{SPECS_IN_STACK}/{path.stem}.stack.yaml", text


def write_into_runs_volume(path: str, text: str) -> None:
    """Write `path` on the toolrl-runs volume through the scheduler's container (the volume
    is group-writable for Airflow and Ray; nothing of the host is mounted)."""
    directory = str(Path(path).parent)
    subprocess.run(
        [
            "docker",
            "exec",
            "-i",
            stack_loop.container("airflow-scheduler"),
            "sh",
            "-c",
            f"mkdir -p {directory} && cat > {path}",
        ],
        input=text,
        text=True,
        check=True,
    )


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
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="change one field of --spec for this run (repeatable), e.g. cpu.time_budget_s=1500",
    )
    parser.add_argument(
        "--thresholds",
        default="",
        help="gate thresholds of the run (TOOLRL_GATE_THRESHOLDS; empty: production's), e.g. "
        "training/specs/thresholds_demo.yaml for cpu_smollm2.yaml",
    )
    parser.add_argument("--timeout-min", type=float, default=60.0, help="per retraining wait")
    parser.add_argument(
        "--record-suffix",
        default="",
        help="save the loop and serving records as loop_SUFFIX and serving_SUFFIX in stack.json, "
        "beside the default run's (e.g. smollm2 for the CPU demo's model)",
    )
    args = parser.parse_args()
    preflight()
    try:  # a bad --set or spec fails here, before any image is built
        spec, spec_text = stack_spec(args.spec, args.assignments)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--spec/--set: {exc}") from None
    t0 = time.monotonic()
    if not args.no_build and build() != 0:
        print("image build failed: see the step above and /var/tmp/toolrl-build-timings.tsv")
        return 1
    stack_up.write_env(
        args.env_file,
        [f"TOOLRL_TRAINING_SPEC={spec}", f"TOOLRL_GATE_THRESHOLDS={args.thresholds}"],
    )
    dc = stack_up.compose_cmd(args.env_file)
    ok = False
    try:
        up = stack_up.compose_up(args.env_file)
        stack_up.save("compose_up", {"measured_at_utc": stack_up.now_utc(), **up})
        if up["not_done"]:
            print(f"not healthy: {', '.join(up['not_done'])}; the stack is left up to inspect")
            args.keep = True
            return 1
        if spec_text is not None:
            write_into_runs_volume(spec, spec_text)
        loop = stack_loop.run_loop(
            stop_worker_at=None if args.no_faults else "sft/global_step_200",
            postgres_fault=not args.no_faults,
            scheduler_fault=not args.no_faults,
            timeout_min=args.timeout_min,
        )
        loop["training"] = {
            "spec": args.spec,
            "settings": args.assignments,
            "thresholds": args.thresholds or "the pipeline config's",
        }
        succeeded = all(r["state"] == "success" for r in loop["runs"])
        suffix = f"_{args.record_suffix}" if args.record_suffix else ""
        # a failed loop goes beside the last good one, never over it
        stack_up.save(f"loop{suffix}" if succeeded else f"loop{suffix}_failed", loop)
        print(json.dumps(loop, indent=2))
        if not succeeded:
            print("a DAG run did not succeed: the stack is left up to inspect (Airflow UI :8080)")
            args.keep = True
            return 1
        serving = stack_loop.serve_and_ask(args.env_file)
        stack_up.save(f"serving{suffix}", serving)
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
