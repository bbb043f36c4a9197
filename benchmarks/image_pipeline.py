"""Does the image pipeline keep up with meta-training, and what memory does a folder take?

    .venv/bin/python benchmarks/image_pipeline.py [--sizes=10000,100000] [--repeats=5]
        [--cache_budget_mb=16]

For each folder size, a folder of generated 28 x 28 grey PNGs (20 per class) is written
to a temporary directory, and in a fresh process (so that its peak memory is its own):

- `ImageFolderEpisodes` over it (gin/images/base.gin's settings, 28 x 28 x 1, and
  `--cache_budget_mb`: a folder over it is decoded to disk and read per episode): the
  seconds to find, decode and hold the images, and the process's peak resident memory
  after (TensorFlow's own, measured alone, beside it);
- the episodes per second the pipeline delivers (`sample`, B = 4 episodes a draw, traced
  as the trainer traces it) at 5-way 1-shot and 20-way 1-shot with 15 queries per class;
- the episodes per second the meta-updates consume: B / the seconds of one meta-update of
  images/protonet.gin and images/cavia.gin at that setting (the trainer's compiled update).

Prints one table; the goal is a pipeline that delivers at least 5x what the updates take.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PER_CLASS = 20
DRAWS, STEPS = 50, 10  # episode draws, and meta-updates, a timed call


def write_folder(root: str, count: int) -> None:
    """`count` 28 x 28 grey PNGs, PER_CLASS a class (a bar placed by the class, specks)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for c in range(count // PER_CLASS):
        folder = os.path.join(root, f"class {c:05d}")
        os.makedirs(folder)
        for i in range(PER_CLASS):
            image = np.where(rng.uniform(size=(28, 28, 1)) > 0.03, 255, 0).astype(np.uint8)
            image[(c % 24) : (c % 24) + 4, 4:24] = 0
            tf.io.write_file(os.path.join(folder, f"{i}.png"), tf.io.encode_png(image))


def peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(image_dir: str, repeats: int, budget: float) -> dict:
    """Run in a fresh process: the figures of one folder, as JSON on stdout."""
    import tensorflow as tf
    from timing import best_of, median_of

    from viable_tf import config
    from viable_tf.tasks import seed_for
    from viable_tf.tasks.images import ImageFolderEpisodes
    from viable_tf.training import Trainer

    tf.constant(0.0)  # TensorFlow started: its own memory, before the images
    result = {"tensorflow_mb": peak_mb()}
    loaded = []
    result["load_seconds"] = best_of(
        lambda: loaded.append(
            ImageFolderEpisodes(image_dir=image_dir, num_queries=15, cache_budget_mb=budget)
        ),
        1,
        warmup=0,
    )
    result["peak_mb"] = peak_mb()
    result["cache"] = loaded[0].cache
    loaded.clear()  # the images leave before the next loads
    for ways in (5, 20):
        tasks = ImageFolderEpisodes(
            image_dir=image_dir, num_ways=ways, num_queries=15, cache_budget_mb=budget
        )
        draw = tf.function(lambda seed, tasks=tasks: tasks.sample(seed, 4), autograph=False)
        seconds = median_of(
            lambda draw=draw: [draw(seed_for(0, i)).support_x.numpy() for i in range(DRAWS)],
            repeats,
        )
        result[f"pipeline_{ways}way"] = 4 * DRAWS / seconds
        for method in ("protonet", "cavia"):
            with tempfile.TemporaryDirectory() as model_dir:
                config.parse(
                    [f"images/{method}.gin"],
                    [
                        f"IMAGE_DIR={image_dir!r}",
                        f"NUM_WAYS={ways}",
                        "NUM_QUERIES=15",
                        f"ImageFolderEpisodes.cache_budget_mb={budget}",
                        "Trainer.show_progress=False",
                    ],
                )
                trainer = Trainer(model_dir=model_dir)
                update = median_of(
                    lambda trainer=trainer: trainer.train_chunk(tf.constant(STEPS)), repeats
                )
                result[f"{method}_{ways}way"] = 4 * STEPS / update
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--cache_budget_mb", type=float, default=2048, help="ImageFolderEpisodes' budget"
    )
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeats, args.cache_budget_mb)))
        return
    from timing import header

    print(
        header(
            "28 x 28 x 1 PNGs, 20 a class; B = 4 episodes a draw and an update; "
            f"cache_budget_mb={args.cache_budget_mb:g}"
        )
    )
    print(
        "| images | cache | load (s) | peak memory (MB; TensorFlow alone) | setting "
        "| pipeline (episodes/s) | Prototypical Network updates take (episodes/s) "
        "| CAVIA updates take | pipeline / fastest demand |"
    )
    print("|---:|---|---:|---:|---|---:|---:|---:|---:|")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as root:
            write_folder(root, size)
            child = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    f"--measure={root}",
                    f"--repeats={args.repeats}",
                    f"--cache_budget_mb={args.cache_budget_mb}",
                ],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
        r = json.loads(child.stdout.strip().splitlines()[-1])
        for ways in (5, 20):
            demand = max(r[f"protonet_{ways}way"], r[f"cavia_{ways}way"])
            print(
                f"| {size:,} | {r['cache']} | {r['load_seconds']:.0f} | {r['peak_mb']:.0f} "
                f"({r['tensorflow_mb']:.0f}) | {ways}-way 1-shot "
                f"| {r[f'pipeline_{ways}way']:,.0f} | {r[f'protonet_{ways}way']:.1f} "
                f"| {r[f'cavia_{ways}way']:.1f} | {r[f'pipeline_{ways}way'] / demand:,.0f}x |",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
