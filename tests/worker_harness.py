"""Local training processes for the distributed tests: the viable-train command, and two
MultiWorker workers on loopback ports they bound themselves (retried when another process
took a port first)."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def _free_port() -> int:
    """A port free now; a worker binds it later, so another process may take it first:
    _start_workers notices and starts again on other ports."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


#: What a worker prints when its port was taken between _free_port and its own bind.
BIND_FAILED = "Could not start gRPC server"


def _train_command(model_dir, *params):
    return [
        sys.executable,
        "-m",
        "viable_tf.cli.train",
        "--gin_file=gin/sine/relviable_relu.gin",  # the mechanics, at the cheaper activation
        "--gin_param=Trainer.show_progress=False",
        "--gin_param=EvaluationSpec.figure_every=0",
        "--gin_param=test_evaluator.num_tasks=100",
        *(f"--gin_param={p}" for p in params),
        f"--model_dir={model_dir}",
    ]


@contextlib.contextmanager
def _workers(model_dir, *params, scratch=None):
    """Two local workers, killed on the way out whatever happened."""
    workers = _start_workers(model_dir, *params, scratch=scratch)
    try:
        yield workers
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()


def _start_workers(model_dir, *params, scratch=None, attempts=3):
    """Two local workers, each listening on its port; `scratch` is their TMPDIR (non-chief
    checkpoints go there). TensorFlow's gRPC server cannot share a port (no SO_REUSEPORT)
    nor take port 0 in a cluster spec, so the ports are picked free and, if another
    process took one before a worker bound it, both workers start again on new ones."""
    for _ in range(attempts):
        ports = [_free_port(), _free_port()]
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        workers = []
        for index in range(2):
            config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            workers.append(
                subprocess.Popen(
                    _train_command(model_dir, "STRATEGY='multi_worker'", *params),
                    cwd=REPO,
                    env={
                        **ENV,
                        "TF_CONFIG": json.dumps(config),
                        **({"TMPDIR": str(scratch)} if scratch else {}),
                    },
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + 300
        while not all(_listening(port) for port in ports):
            codes = [worker.poll() for worker in workers]
            if all(code == 0 for code in codes):  # done already: both had listened
                return workers
            if any(code not in (None, 0) for code in codes) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        else:
            return workers
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        errors = [worker.communicate()[1] for worker in workers]
        if not any(BIND_FAILED in err for err in errors):
            raise AssertionError(
                "a worker stopped before both listened: " + "\n".join(e[-2000:] for e in errors)
            )
    raise AssertionError(f"no two free ports held for {attempts} attempts")
