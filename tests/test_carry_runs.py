"""lab/carry_runs.py: a run carried to a new work directory resumes to the state of
an uninterrupted one."""

import json
import os
import signal

import numpy as np
import pytest
from conftest import checkpoint_values, load_tool

from viable_tf.learners import CAVIA
from viable_tf.tasks import SineTasks
from viable_tf.training import EvaluationSpec, PerformanceSpec, Trainer


def _tool():
    return load_tool("carry_runs")


def _train(model_dir, num_steps):
    Trainer(
        model_dir=str(model_dir),
        tasks=SineTasks(),
        learner=CAVIA,
        num_steps=num_steps,
        evaluation=EvaluationSpec(eval_every=20, figure_every=0, keep_checkpoints=3),
        # the resume is the claim, not the compiler: no XLA compile
        performance=PerformanceSpec(steps_per_call=10, jit_compile=False),
        show_progress=False,
    ).train()


@pytest.mark.slow
def test_a_carried_run_resumes_to_the_uninterrupted_state(tmp_path):
    carry = _tool()
    _train(tmp_path / "straight" / "runs" / "cavia", 60)
    first = tmp_path / "machine_1"
    _train(first / "runs" / "cavia", 40)
    (first / "runs" / "empty").mkdir()  # started, no checkpoint yet: carried as it is

    manifest = carry.save(str(first), str(tmp_path / "carried"), commit="abc1234")
    assert manifest["cavia"]["step"] == 40 and not manifest["cavia"]["finished"]
    assert manifest["empty"]["step"] == 0
    carried = tmp_path / "carried" / "cavia"
    # The latest checkpoint only, and a record naming it alone.
    assert sorted(p.name for p in (carried / "checkpoints").iterdir() if "ckpt" in p.name) == [
        "ckpt-40.data-00000-of-00001",
        "ckpt-40.index",
    ]
    assert (carried / "checkpoints" / "wall_clock.json").exists()
    # Its best weights: carried, or, from the latest checkpoint's step, left to that.
    best = carry._checkpoint_state(str(first / "runs" / "cavia" / "best"))
    assert best is not None
    assert (carried / "best" / "checkpoint").exists() == (best != "ckpt-40")
    assert (manifest["cavia"].get("best") == "latest") == (best == "ckpt-40")
    assert not any(p.name.startswith("events.out") for p in carried.iterdir())  # not for resuming
    # ... but its scalar curves are, for its record (a setback after its best weights).
    status = load_tool("e2e_status")
    before = status.scalar_curve(str(first / "runs" / "cavia"), "train/meta_loss")
    assert before and status.scalar_curve(str(carried), "train/meta_loss") == before
    on_disk = json.loads((tmp_path / "carried" / "MANIFEST.json").read_text())
    assert on_disk["cavia"]["commit"] == "abc1234"

    second = tmp_path / "machine_2"
    assert carry.restore(str(second), str(tmp_path / "carried")) == ["cavia", "empty"]
    assert carry.restore(str(second), str(tmp_path / "carried")) == []  # already there
    assert carry._checkpoint_state(str(second / "runs" / "cavia" / "best")) == best
    _train(second / "runs" / "cavia", 60)

    straight = checkpoint_values(str(tmp_path / "straight/runs/cavia/checkpoints/ckpt-60"))
    resumed = checkpoint_values(str(second / "runs/cavia/checkpoints/ckpt-60"))
    assert straight.keys() == resumed.keys()
    for name, value in straight.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # Resumed, its curves run from the first machine's start to the second's end.
    whole = status.scalar_curve(str(second / "runs" / "cavia"), "train/meta_loss")
    straight_curve = status.scalar_curve(str(tmp_path / "straight/runs/cavia"), "train/meta_loss")
    assert [s for s, _ in whole] == [s for s, _ in straight_curve]
    assert whole[: len(before)] == before
    # A run further along where it is restored to is left alone.
    assert carry.restore(str(second), str(tmp_path / "carried")) == []
    assert carry.step_of(str(second / "runs" / "cavia")) == 60


def _checkpoint_files(folder, name, step):
    """A checkpoint `ckpt-<step>` in `folder` as the trainer leaves it: its files, whose
    bytes name it and `name`, and the record naming it."""
    folder.mkdir(parents=True)
    for suffix in ("index", "data-00000-of-00001"):
        (folder / f"ckpt-{step}.{suffix}").write_text(f"{name} {step} {suffix}")
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')


@pytest.mark.parametrize("best_step", [500, 1000])
def test_best_weights_of_the_latest_step_are_carried_once(tmp_path, best_step):
    """Best weights from an earlier step are carried; from the latest checkpoint's step
    they are that checkpoint's, left out of carried/ and put back in best/ by restore."""
    carry = _tool()
    run = tmp_path / "work" / "runs" / "cavia"
    _checkpoint_files(run / "checkpoints", "latest", 1000)
    _checkpoint_files(run / "best", "best", best_step)
    manifest = carry.save(str(tmp_path / "work"), str(tmp_path / "carried"), commit="abc1234")
    carried = tmp_path / "carried" / "cavia"
    if best_step == 1000:
        assert manifest["cavia"]["best"] == "latest" and not (carried / "best").exists()
    else:
        assert "best" not in manifest["cavia"]
        assert (carried / "best" / "ckpt-500.index").read_text() == "best 500 index"
    assert carry.restore(str(tmp_path / "new"), str(tmp_path / "carried")) == ["cavia"]
    best = tmp_path / "new" / "runs" / "cavia" / "best"
    assert carry._checkpoint_state(str(best)) == f"ckpt-{best_step}"
    origin = "latest" if best_step == 1000 else "best"
    for suffix in ("index", "data-00000-of-00001"):
        restored = (best / f"ckpt-{best_step}.{suffix}").read_text()
        assert restored == f"{origin} {best_step} {suffix}"


def test_save_stores_the_full_hash_of_a_commit_and_refuses_one_that_names_none(tmp_path):
    """`save --commit` takes what git takes (an abbreviation, a branch) and stores the full
    hash; a hash that names no commit (a typo like 7995c3f2 for 7995c3f) is refused in
    one line, where the manifest once held it."""
    import subprocess

    carry = _tool()
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    full = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert carry.resolve_commit(full[:7], str(tmp_path)) == full.strip()
    assert carry.resolve_commit("HEAD", str(tmp_path)) == full.strip()
    typo = full[:7] + ("1" if full[7] == "0" else "0")  # 8 digits, not the commit's
    for bad in (typo, "no-such-branch", full.strip()[::-1]):
        with pytest.raises(SystemExit, match=f"--commit '{bad}' names no commit of"):
            carry.resolve_commit(bad, str(tmp_path))


def _state(pid: int, becomes: str = "", within: float = 5.0) -> str:
    """A process's state (R, S, T: stopped, ...), waited for until it is one of
    `becomes` (a signal is delivered a moment after it is sent)."""
    import time

    deadline = time.time() + within
    while True:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if not becomes or state in becomes or time.time() > deadline:
            return state
        time.sleep(0.02)


def test_pause_waits_for_the_next_checkpoint_then_stops_the_whole_group(tmp_path):
    import subprocess
    import sys
    import threading
    import time

    carry = _tool()
    run = tmp_path / "work" / "runs" / "cavia"
    (run / "checkpoints").mkdir(parents=True)
    record = run / "checkpoints" / "checkpoint"
    record.write_text('model_checkpoint_path: "ckpt-500"\n')
    # A driver leading its group, and the child that trains with the run's --model_dir.
    sleeper = "import time; time.sleep(60)"
    child = (
        f"import subprocess, sys; subprocess.run([sys.executable, '-c', {sleeper!r}, sys.argv[1]])"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", child, f"--model_dir={run}"], start_new_session=True
    )
    try:
        deadline = time.time() + 30
        while "cavia" not in carry.training_groups(str(tmp_path / "work")):
            assert time.time() < deadline, "the training child did not start"
            time.sleep(0.05)
        assert carry.training_groups(str(tmp_path / "work")) == {"cavia": driver.pid}
        paused = {}
        waiting = threading.Thread(
            target=lambda: paused.update(carry.pause(str(tmp_path / "work"), poll=0.05))
        )
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive() and _state(driver.pid) != "T"  # no new checkpoint yet
        record.write_text('model_checkpoint_path: "ckpt-1000"\n')
        waiting.join(timeout=10)
        assert paused == {"cavia": "ckpt-1000"}
        assert _state(driver.pid, becomes="T") == "T"
        assert carry.resume(str(tmp_path / "work")) == ["cavia"]
        assert _state(driver.pid, becomes="RS") in "RS"
        with pytest.raises(SystemExit, match="no process trains other"):
            carry.pause(str(tmp_path / "work"), ["other"])
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def _stand_in_python(worktree, seen):
    """A stand-in for the worktree's Python: it writes to `seen` what it was asked, where,
    on which CPUs, and whether it leads its process group; fails if asked for `fails`."""
    python = worktree / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$* | $(pwd) | $(grep Cpus_allowed_list /proc/self/status | cut -f2) | '
        f"$(awk '{{print ($1 == $5)}}' /proc/$$/stat)\" >> {seen}\n"
        'echo "driver output"\n'
        '[ "${5#--methods=}" = fails ] && exit 3 || exit 0\n'
    )
    python.chmod(0o755)
    return seen


def test_queue_waits_for_a_run_that_another_process_trains(tmp_path):
    """A list changed while its first run trains: the new queue waits for that run's
    process group to end instead of training the same folder a second time, then goes on."""
    import subprocess
    import sys
    import threading
    import time

    carry = _tool()
    worktree, work = tmp_path / "wt", tmp_path / "work"
    seen = _stand_in_python(worktree, tmp_path / "seen.txt")
    run = work / "runs" / "maml_5way5shot"
    run.mkdir(parents=True)
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", f"--model_dir={run}"],
        start_new_session=True,
    )
    log = work / "queue.log"

    def end_the_training_once_waited_for():
        deadline = time.monotonic() + 60
        while "wait for" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        time.sleep(0.2)  # the queue polls meanwhile and finds it still there
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait()

    try:
        deadline = time.monotonic() + 30
        while "maml_5way5shot" not in carry.training_groups(str(work)):
            assert time.monotonic() < deadline, "the training did not start"
            time.sleep(0.02)
        ender = threading.Thread(target=end_the_training_once_waited_for)
        ender.start()
        jobs = ["maml:5way5shot", "cavia:5way1shot"]
        statuses = carry.queue(str(work), str(worktree), str(tmp_path / "data"), None, jobs, 0.02)
        ender.join(timeout=60)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
    assert statuses == [None, 0]
    assert "--methods=maml" not in seen.read_text()
    assert seen.read_text().count("--methods=cavia") == 1
    assert [line.split(" ", 1)[1] for line in log.read_text().splitlines()] == [
        f"wait for maml:5way5shot: process group {trainer.pid} trains it",
        f"end maml:5way5shot (process group {trainer.pid})",
        f"start cavia:5way1shot on core any from {worktree}",
        "end cavia:5way1shot rc=0",
    ]


def test_queue_runs_each_job_in_turn_from_the_worktree_pinned_in_its_own_group(
    tmp_path, monkeypatch
):
    """Each job is the end-to-end driver of the worktree's .venv, run there, one after
    another, on the core named, leading its own process group (what `pause` stops); paths
    may be relative to where the queue starts; a malformed job is refused before any
    starts."""
    carry = _tool()
    monkeypatch.chdir(tmp_path)
    worktree, work = tmp_path / "wt", tmp_path / "work"
    seen = _stand_in_python(worktree, tmp_path / "seen.txt")
    core = sorted(os.sched_getaffinity(0))[-1]
    jobs = ["cavia:5way1shot", "fails:20way1shot", "maml:5way5shot"]
    statuses = carry.queue("work", "wt", "data", core, jobs)
    assert statuses == [0, 3, 0]  # a failed job does not stop the ones after it
    lines = seen.read_text().splitlines()
    assert len(lines) == 3
    for line, job in zip(lines, jobs, strict=True):
        method, setting = job.split(":")
        args, cwd, cpus, leads = (part.strip() for part in line.split("|"))
        assert args == (
            f"-m viable_tf.experiments.omniglot_conv --data_dir={tmp_path / 'data'} "
            f"--work_dir={work} --methods={method} --settings={setting}"
        )
        assert cwd == str(worktree) and cpus == str(core) and leads == "1"
    assert (work / "cavia_5way1shot.out").read_text() == "driver output\n"
    log = (work / "queue.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in log] == [
        f"start cavia:5way1shot on core {core} from {worktree}",
        "end cavia:5way1shot rc=0",
        f"start fails:20way1shot on core {core} from {worktree}",
        "end fails:20way1shot rc=3",
        f"start maml:5way5shot on core {core} from {worktree}",
        "end maml:5way5shot rc=0",
    ]
    seen.unlink()
    for bad in ("cavia", "cavia:", ":5way1shot", "cavia:5way1shot:extra"):
        with pytest.raises(SystemExit, match="a job is METHOD:SETTING"):
            carry.queue(
                str(work), str(worktree), str(tmp_path / "data"), None, ["maml:5way5shot", bad]
            )
    assert not seen.exists()  # refused before the first job ran
