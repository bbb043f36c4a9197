"""Carries unfinished runs from one machine to the next through the repository.

The end-to-end Omniglot runs (docs/lab/omniglot/end_to_end.md) take longer than a machine is
kept, and nothing outside the repository survives a new machine. `save` copies what a
run needs to resume and to be read (the latest training checkpoint, the best weights
unless they are that checkpoint's, the wall-clock record, its scalar curves so far, the
operative config, the log and any results) from W/runs/<run>/ into DIR/<run>/, and
writes DIR/MANIFEST.json: for each run, the commit whose code trains it, its meta-update,
the time of the save and, as "best": "latest", whether its best weights are the latest
checkpoint's. `restore` copies them back into a new work directory (the latest
checkpoint into best/ as well where the manifest says so), where the driver's command
resumes each run from its checkpoint (a run whose work directory is further along is
left alone).

    .venv/bin/python -m lab.carry_runs save --work_dir W --to state/omniglot_conv \\
        --commit $(git -C WORKTREE rev-parse HEAD)
    .venv/bin/python -m lab.carry_runs restore --work_dir W --from state/omniglot_conv

A resumed run must train on the code of the commit the manifest names (a worktree of it):
the runs of a table are on one commit's code. Before a save, `pause` waits for each
training run's next checkpoint and then stops its whole process group (the driver and
the child that trains), so that the save loses no updates and the run's folder holds
still; `resume` lets them go on:

    .venv/bin/python -m lab.carry_runs pause --work_dir W [--runs a,b]
    .venv/bin/python -m lab.carry_runs resume --work_dir W

`queue` trains runs one after another on one core, each by the end-to-end driver of a
worktree (its own .venv, the commit the runs train on), so that one line per core puts a
machine to work on carried/README.md's lists; rerunning it resumes each unfinished run
and skips the finished ones (the driver's own rule); a run that a process already trains
(an earlier queue's, whose list is being changed) is waited for, not started a second
time on the same folder. Each driver leads its own process group (what `pause` stops),
and W/queue.log gets a line as each starts and ends:

    setsid nohup .venv/bin/python -m lab.carry_runs queue --work_dir W --worktree WT \
        --data_dir ../shared/data/omniglot --core 0 simviable:20way1shot maml:20way1shot &
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

MANIFEST = "MANIFEST.json"
#: Files of a run directory that are carried whole (globs relative to it). No TensorBoard
#: summaries: carried/ holds only what a run needs to resume and to be recorded, and of
#: its summaries that is its scalar curves (`curves.json`, for its record's setback).
RUN_FILES = ("operative_config.gin", "log.txt", "results.json", "eval_k*.json")
CURVES = "curves.json"
#: A manifest entry's key saying where a run's best weights are ("latest": in its
#: latest checkpoint, not carried twice).
BEST = "best"


def _checkpoint_state(directory: str) -> str | None:
    """The newest checkpoint's name ('ckpt-N') recorded in directory/checkpoint."""
    try:
        with open(os.path.join(directory, "checkpoint")) as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    return json.loads(first.split(":", 1)[1]) if first.startswith("model_checkpoint_path") else None


def step_of(run_dir: str) -> int:
    """The meta-update of a run directory's latest training checkpoint (0 if none)."""
    name = _checkpoint_state(os.path.join(run_dir, "checkpoints"))
    return int(name.rsplit("-", 1)[1]) if name else 0


def _copy_checkpoint(source: str, target: str, extra: tuple[str, ...] = ()) -> None:
    """The newest checkpoint of `source` (its files and a `checkpoint` record naming it
    alone) and the `extra` files into `target`."""
    name = _checkpoint_state(source)
    if name is None:
        return
    os.makedirs(target, exist_ok=True)
    for path in glob.glob(os.path.join(source, f"{name}.*")):
        shutil.copy2(path, target)
    for file in extra:
        if os.path.exists(os.path.join(source, file)):
            shutil.copy2(os.path.join(source, file), target)
    with open(os.path.join(target, "checkpoint"), "w") as f:
        f.write(f"model_checkpoint_path: {json.dumps(name)}\n")
        f.write(f"all_model_checkpoint_paths: {json.dumps(name)}\n")


def save_run(run_dir: str, target: str) -> bool:
    """What `run_dir` needs to resume, in `target` (replacing what was there). Best
    weights from the latest checkpoint's own step are not copied: that checkpoint holds
    them, and `restore` puts it in best/ again. Returns whether they were left out."""
    if os.path.exists(target):
        shutil.rmtree(target)
    os.makedirs(target)
    for pattern in RUN_FILES:
        for path in glob.glob(os.path.join(run_dir, pattern)):
            shutil.copy2(path, target)
    _copy_checkpoint(
        os.path.join(run_dir, "checkpoints"),
        os.path.join(target, "checkpoints"),
        extra=("wall_clock.json",),
    )
    best = _checkpoint_state(os.path.join(run_dir, "best"))
    best_is_latest = best is not None and best == _checkpoint_state(
        os.path.join(run_dir, "checkpoints")
    )
    if not best_is_latest:
        _copy_checkpoint(os.path.join(run_dir, "best"), os.path.join(target, "best"))
    _save_curves(run_dir, os.path.join(target, CURVES))
    return best_is_latest


def _save_curves(run_dir: str, path: str) -> None:
    """The run's scalar curves, those it carried in and those of its events files, as
    one small JSON file (lab/e2e_status.py reads it back beside the events)."""
    from lab.e2e_status import scalar_curves

    curves = scalar_curves(run_dir)
    if curves:
        with open(path, "w") as f:
            json.dump({tag: [[s, v] for s, v in curve] for tag, curve in curves.items()}, f)


def resolve_commit(commit: str, repo: str = ".") -> str:
    """`commit` (a hash, an abbreviation, a branch) as the full hash of a commit of `repo`;
    exits in one line when it names none, so that a manifest cannot name a commit no
    worktree can check out."""
    found = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode or not found.stdout.strip():
        raise SystemExit(
            f"carry_runs: --commit {commit!r} names no commit of {os.path.abspath(repo)}"
        )
    return found.stdout.strip()


def save(work_dir: str, to: str, commit: str, runs: list[str] | None = None) -> dict:
    """Saves the runs of `work_dir` (all, or those named) under `to`; returns the manifest."""
    manifest_path = os.path.join(to, MANIFEST)
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    names = runs or sorted(os.listdir(os.path.join(work_dir, "runs")))
    for name in names:
        run_dir = os.path.join(work_dir, "runs", name)
        if not os.path.isdir(run_dir):
            raise SystemExit(f"carry_runs: no run {name!r} in {work_dir}/runs")
        best_is_latest = save_run(run_dir, os.path.join(to, name))
        manifest[name] = {
            "commit": commit,
            "step": step_of(run_dir),
            "finished": os.path.exists(os.path.join(run_dir, "results.json")),
            "saved": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
            **({BEST: "latest"} if best_is_latest else {}),
        }
    os.makedirs(to, exist_ok=True)
    with open(manifest_path, "w") as f:
        json.dump(dict(sorted(manifest.items())), f, indent=1)
        f.write("\n")
    return manifest


def restore(work_dir: str, source: str) -> list[str]:
    """Copies each carried run into `work_dir`/runs unless the run there is as far or
    further along; returns the runs restored."""
    restored = []
    with open(os.path.join(source, MANIFEST)) as f:
        manifest = json.load(f)
    for name in manifest:
        target = os.path.join(work_dir, "runs", name)
        carried = os.path.join(source, name)
        if os.path.isdir(target) and step_of(target) >= step_of(carried):
            continue
        if os.path.exists(target):
            shutil.rmtree(target)
        shutil.copytree(carried, target)
        if manifest[name].get(BEST) == "latest":  # the best weights are the latest's
            _copy_checkpoint(os.path.join(target, "checkpoints"), os.path.join(target, "best"))
        restored.append(name)
    return restored


def training_groups(work_dir: str) -> dict[str, int]:
    """The process group of each run of `work_dir` a process trains: one whose command
    line names the run's folder as its --model_dir (the driver's child; the driver leads
    its group). Linux's /proc."""
    runs = os.path.realpath(os.path.join(work_dir, "runs"))
    groups = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().decode(errors="replace").split("\0")
            for word in words:
                if word.startswith("--model_dir="):
                    folder = os.path.realpath(word.split("=", 1)[1])
                    if os.path.dirname(folder) == runs:
                        groups[os.path.basename(folder)] = os.getpgid(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # the process ended while it was read
    return groups


def pause(work_dir: str, runs: list[str] | None = None, poll: float = 5.0) -> dict[str, str]:
    """Waits for the next checkpoint of each training run (all, or those named), then
    stops its process group; returns each run's checkpoint at the pause."""
    groups = training_groups(work_dir)
    names = runs or sorted(groups)
    missing = [name for name in names if name not in groups]
    if missing:
        raise SystemExit(f"carry_runs: no process trains {', '.join(missing)} in {work_dir}")
    folder = lambda name: os.path.join(work_dir, "runs", name, "checkpoints")  # noqa: E731
    waiting = {name: _checkpoint_state(folder(name)) for name in names}
    paused = {}
    while waiting:
        for name, before in list(waiting.items()):
            now = _checkpoint_state(folder(name))
            if now != before:
                os.killpg(groups[name], signal.SIGSTOP)
                paused[name] = now
                del waiting[name]
        if waiting:
            time.sleep(poll)
    return paused


def resume(work_dir: str) -> list[str]:
    """Lets every stopped training run of `work_dir` go on; returns them."""
    groups = training_groups(work_dir)
    for group in set(groups.values()):
        os.killpg(group, signal.SIGCONT)
    return sorted(groups)


#: The driver a queue runs, from the worktree (`python -m ...`).
DRIVER = "viable_tf.experiments.omniglot_conv"
QUEUE_LOG = "queue.log"


def job_command(worktree: str, work_dir: str, data_dir: str, job: str) -> list[str]:
    """The driver's command for one `method:setting` job, run from `worktree` (every path
    absolute: a relative one would be read from the worktree)."""
    method, sep, setting = job.partition(":")
    if not (method and sep and setting) or ":" in setting:
        raise SystemExit(f"carry_runs: a job is METHOD:SETTING (cavia:5way1shot), got {job!r}")
    return [
        os.path.join(os.path.abspath(worktree), ".venv", "bin", "python"),
        "-m",
        DRIVER,
        f"--data_dir={os.path.abspath(data_dir)}",
        f"--work_dir={os.path.abspath(work_dir)}",
        f"--methods={method}",
        f"--settings={setting}",
    ]


def queue(
    work_dir: str, worktree: str, data_dir: str, core: int | None, jobs: list[str], poll=30.0
) -> list[int | None]:
    """Runs `jobs` one after another from `worktree`, each pinned to `core` (None: any) in
    a process group of its own, its output appended to W/<method>_<setting>.out; returns
    their exit statuses. Every job's command is checked before the first starts. A job
    whose run a process already trains is waited for instead (checked every `poll`
    seconds until its process group is gone); its status is None, the other process's."""
    worktree = os.path.abspath(worktree)
    commands = [job_command(worktree, work_dir, data_dir, job) for job in jobs]
    os.makedirs(work_dir, exist_ok=True)
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    statuses: list[int | None] = []
    for job, command in zip(jobs, commands, strict=True):
        name = job.replace(":", "_")
        group = training_groups(work_dir).get(name)
        if group is not None:
            _log(work_dir, f"wait for {job}: process group {group} trains it")
            while _group_alive(group):
                time.sleep(poll)
            _log(work_dir, f"end {job} (process group {group})")
            statuses.append(None)
            continue
        _log(work_dir, f"start {job} on core {'any' if core is None else core} from {worktree}")
        with open(os.path.join(work_dir, f"{name}.out"), "a") as out:
            run = subprocess.Popen(
                command,
                cwd=worktree,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=pin,
            )
            statuses.append(run.wait())
        _log(work_dir, f"end {job} rc={statuses[-1]}")
    return statuses


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _log(work_dir: str, line: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(os.path.join(work_dir, QUEUE_LOG), "a") as f:
        f.write(f"{now} {line}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save")
    saving.add_argument("--work_dir", required=True)
    saving.add_argument("--to", required=True)
    saving.add_argument(
        "--commit", required=True, help="the commit whose code trains the runs (stored in full)"
    )
    saving.add_argument("--runs", default="", help="comma-separated (default: every run)")
    restoring = commands.add_parser("restore")
    restoring.add_argument("--work_dir", required=True)
    restoring.add_argument("--from", dest="source", required=True)
    pausing = commands.add_parser("pause")
    pausing.add_argument("--work_dir", required=True)
    pausing.add_argument("--runs", default="", help="comma-separated (default: every one training)")
    resuming = commands.add_parser("resume")
    resuming.add_argument("--work_dir", required=True)
    queueing = commands.add_parser("queue")
    queueing.add_argument("--work_dir", required=True)
    queueing.add_argument("--worktree", required=True, help="a checkout with its own .venv")
    queueing.add_argument("--data_dir", required=True, help="the folder holding Omniglot's zips")
    queueing.add_argument("--core", type=int, default=None, help="the CPU to pin them to")
    queueing.add_argument("jobs", nargs="+", help="METHOD:SETTING, in order")
    args = parser.parse_args(argv)
    if args.command == "save":
        commit = resolve_commit(args.commit)
        manifest = save(args.work_dir, args.to, commit, [r for r in args.runs.split(",") if r])
        for name, record in manifest.items():
            print(f"{name}: meta-update {record['step']} ({record['commit'][:7]})")
    elif args.command == "restore":
        print("restored:", ", ".join(restore(args.work_dir, args.source)) or "none")
    elif args.command == "pause":
        for name, at in pause(args.work_dir, [r for r in args.runs.split(",") if r]).items():
            print(f"{name}: paused after {at}")
    elif args.command == "queue":
        statuses = queue(args.work_dir, args.worktree, args.data_dir, args.core, args.jobs)
        return 0 if not any(statuses) else 1  # None (waited for) counts as success
    else:
        print("resumed:", ", ".join(resume(args.work_dir)) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
