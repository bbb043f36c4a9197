"""How far is MetaOptNet-SVM's in-graph solve from the optimum of its dual, on a trained run?

    python -m lab.svm_solver_gap RUN_DIR [--episodes=20] [--iterations=10,50,200,500,2000] \
        [--gin_param="DATA_DIR='W/features'"]

Restores a run whose head is `SVMHead` (its best checkpoint), takes the first episodes of
its test protocol, and solves the Crammer-Singer dual of each episode's support features
(`crammer_singer_dual`, the head's own C and eps) for each number of accelerated projected
gradient iterations, and for 5,000 as the reference. Prints, as Markdown: the median norm
of the support features and the median largest eigenvalue of their Gram matrix (the
solver's curvature L), then for each number of iterations the median relative gap of the
dual objective to the reference's and the median sum of |alpha|. The head was trained with
its own `num_iterations`; the gap says whether that solve is the SVM the method names.
"""

from __future__ import annotations

import argparse

import numpy as np

REFERENCE_ITERATIONS = 5000


def dual_objective(gram, alpha, one_hot, eps: float) -> np.ndarray:
    """[B]: 1/2 sum_k alpha_k^T G alpha_k + eps/2 |alpha|^2 - sum_n alpha_{n, y_n}."""
    quadratic = np.einsum("bkn,bkj,bjn->b", alpha, gram, alpha)
    return 0.5 * quadratic + 0.5 * eps * np.sum(alpha**2, (1, 2)) - np.sum(alpha * one_hot, (1, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--iterations", default="10,50,200,500,2000")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.evaluation.protocols import test_protocol
    from viable_tf.learners.metaoptnet import crammer_singer_dual, masked_one_hot

    run = load_run(args.run_dir, tuple(args.gin_param))
    learner, head = run.learner, run.learner.head
    batch = next(iter(test_protocol(run.tasks).batches()))
    x, y, mask = (
        t[: args.episodes] for t in (batch.support_x, batch.support_y, batch.support_mask)
    )
    state = learner.start_state(x, y, mask)
    features = tf.cast(learner.network(x, state.context), tf.float64)  # [B, K, H]
    gram = tf.matmul(features, features, transpose_b=True)  # [B, K, K]
    one_hot = tf.cast(masked_one_hot(y, mask, learner.output_dim), tf.float64)  # [B, K, N]

    def solve(iterations: int) -> np.ndarray:
        alpha = crammer_singer_dual(
            gram, one_hot, mask, c=head.c, eps=head.eps, num_iterations=iterations
        )
        return alpha.numpy()

    reference = dual_objective(gram.numpy(), solve(REFERENCE_ITERATIONS), one_hot.numpy(), head.eps)
    norms = np.linalg.norm(features.numpy(), axis=-1)
    curvature = np.linalg.eigvalsh(gram.numpy())[:, -1]
    print(
        f"{args.episodes} test episodes of {args.run_dir} (checkpoint {run.checkpoint_step}); "
        f"C = {head.c}, eps = {head.eps}, trained with {head.num_iterations} iterations\n"
    )
    print(f"median |support feature| = {np.median(norms):.3g}; ", end="")
    print(f"median L = {np.median(curvature):.3g}\n")
    print(f"| iterations | median relative gap to {REFERENCE_ITERATIONS:,} | median sum |alpha| |")
    print("|---:|---:|---:|")
    for iterations in (int(n) for n in args.iterations.split(",")):
        alpha = solve(iterations)
        objective = dual_objective(gram.numpy(), alpha, one_hot.numpy(), head.eps)
        gap = np.median((objective - reference) / np.abs(reference))
        print(f"| {iterations:,} | {gap:.3g} | {np.median(np.abs(alpha).sum((1, 2))):.3g} |")


if __name__ == "__main__":
    main()
