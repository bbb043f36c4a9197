"""The shipped image classifier (viable_tf/pretrained/): listed by `python -m
viable_tf.pretrained`, served by viable-serve as it is installed, and as accurate on
held-out episodes of Omniglot's test alphabets as its reported figure says."""

import os

import numpy as np
import pytest
from scipy import stats
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.omniglot_client import omniglot_episode
from serving.server import ServerOptions
from viable_tf import pretrained

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(REPO, "..", "shared", "data", "omniglot")
EPISODES, QUERIES = 40, 5  # 5-way 1-shot, 5 queries per class: 1,000 answers


def test_the_listing_names_each_model_its_base_path_and_its_figure(capsys):
    import runpy

    runpy.run_module("viable_tf.pretrained", run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(pretrained.MODELS)
    for line, name in zip(lines, pretrained.MODELS, strict=True):
        assert line.startswith(f"{name}  {pretrained.base_path(name)}  ")
        assert "test accuracy" in line and "95% CI, 1,000 episodes" in line
        assert os.path.isfile(os.path.join(pretrained.base_path(name), "1", "saved_model.pb"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(pretrained.MODELS))
def test_the_served_model_is_as_accurate_as_reported_on_held_out_episodes(name):
    """Over gRPC, drawings of the test alphabets as read: the mean accuracy of EPISODES
    fresh episodes and the reported one (1,000 episodes of the test protocol) agree
    within their two 95% CIs."""
    reported = pretrained.evaluation(name)
    server = RunningServer(
        ServerOptions(
            models=[model_config("omniglot", pretrained.base_path(name))],
            port=0,
            rest_api_port=0,
        )
    )
    client = Client(server.grpc_target)
    try:
        accuracies = []
        for seed in range(EPISODES):
            support_x, support_y, query_x, query_y = omniglot_episode(
                DATA_DIR, 5, 1, QUERIES, seed=1000 + seed
            )
            answer = client.predict(support_x, support_y, query_x, model_name="omniglot")
            accuracies.append(float(np.mean(answer["classes"] == query_y)))
    finally:
        client.close()
        server.stop()
    mean = float(np.mean(accuracies))
    ci = float(stats.t.ppf(0.975, EPISODES - 1) * stats.sem(accuracies))
    margin = (
        f"served {mean:.3f} +- {ci:.3f}, reported {reported['mean']:.3f} +- {reported['ci95']:.3f}"
    )
    assert abs(mean - reported["mean"]) <= ci + reported["ci95"], margin


@pytest.mark.parametrize("name", sorted(pretrained.MODELS))
def test_the_shipped_model_takes_its_example_drawings_as_png_and_as_jpeg_files(name):
    """serving_png takes PNG and JPEG files (docs/SERVING.md), the shipped models too: the
    example drawings that ship with each, sent as their PNG files and as JPEG files of the
    same drawings, are answered alike (JPEG's loss moves few answers). Their files are
    Omniglot's, 1-bit grey PNGs: answered exactly as 8-bit PNGs of the same pixels."""
    import io
    import pathlib

    import tensorflow as tf
    from PIL import Image

    version = os.path.join(pretrained.base_path(name), "1")
    examples = os.path.join(version, "assets.extra", "examples")
    characters = sorted(d for d in os.listdir(examples) if os.path.isdir(os.path.join(examples, d)))
    serve = tf.saved_model.load(version).signatures["serving_png"]
    agree = total = 0
    for start in range(0, 10, 5):  # two 5-way episodes, 2 queries per class
        pngs, eight_bit, jpegs = [], [], []
        for character in characters[start : start + 5]:
            files = sorted(
                f for f in os.listdir(os.path.join(examples, character)) if f.endswith(".png")
            )
            drawings = [pathlib.Path(examples, character, f).read_bytes() for f in files[:3]]
            assert all(png[24] == 1 for png in drawings)  # IHDR's bit depth
            pngs.append(drawings)
            for kind, kept in (("PNG", eight_bit), ("JPEG", jpegs)):
                kept.append([])
                for png in drawings:
                    buffer = io.BytesIO()
                    Image.open(io.BytesIO(png)).convert("L").save(buffer, kind, quality=90)
                    kept[-1].append(buffer.getvalue())
        answers = []
        for files in (pngs, eight_bit, jpegs):
            answer = serve(
                support_png=tf.constant([[f[0] for f in files]]),
                support_y=tf.constant([list(range(5))], tf.int32),
                query_png=tf.constant([[q for f in files for q in f[1:]]]),
            )
            assert answer["probabilities"].shape == (1, 10, 5)
            answers.append(answer)
        np.testing.assert_array_equal(answers[0]["logits"], answers[1]["logits"])
        classes = [answer["classes"].numpy() for answer in answers]
        agree += int(np.sum(classes[0] == classes[2]))
        total += classes[0].size
    assert agree >= 0.8 * total, (agree, total)
