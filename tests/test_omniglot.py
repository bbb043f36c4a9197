"""Omniglot end to end on the real images in ../shared: splits, encoder, features, served model."""

import json
import os
import subprocess
import sys

import grpc
import numpy as np
import pytest
import requests
from serving_harness import RunningServer, model_config

from serving.client import Client
from serving.omniglot_client import omniglot_episode
from serving.server import ServerOptions
from viable_tf.datasets import load_embeddings, omniglot
from viable_tf.networks import omniglot_encoder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(REPO, "..", "shared", "data", "omniglot")


@pytest.fixture(scope="module")
def splits():
    return omniglot.read_omniglot(DATA_DIR)


def test_the_zips_give_242_characters_split_by_alphabet(splits):
    characters = {name: sorted(set(split.classes)) for name, split in splits.items()}
    assert {k: len(v) for k, v in characters.items()} == {"train": 153, "val": 46, "test": 43}
    assert sum(len(split.classes) for split in splits.values()) == 242 * 20  # Greek, Latin once
    for name, alphabets in omniglot.ALPHABETS.items():
        assert {c.split(".")[0] for c in characters[name]} == set(alphabets)
    assert not set(characters["train"]) & (set(characters["val"]) | set(characters["test"]))
    images = splits["test"].images
    assert images.shape[1:] == (105, 105, 1) and images.dtype == np.float32
    assert set(np.unique(images)) == {0.0, 1.0} and images.mean() > 0.8  # white background


def test_missing_zips_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"lacks images_background_small1\.zip"):
        omniglot.read_omniglot(str(tmp_path))


def test_preprocessing_and_features_in_leo_format(splits, tmp_path):
    white = np.ones((1, 105, 105, 1), np.float32)
    np.testing.assert_array_equal(
        omniglot_encoder.OmniglotPreprocessing()(white), np.zeros((1, 28, 28, 1))
    )
    encoder = omniglot_encoder.build_encoder()
    test = splits["test"]
    subset = omniglot.OmniglotSplit(test.images[:40], test.classes[:40], test.image_ids[:40])
    features = omniglot_encoder.encode(encoder, subset.images)
    assert features.shape == (40, omniglot_encoder.FEATURE_DIM)
    path = str(tmp_path / "omniglot" / "center" / "test_embeddings.pkl")
    omniglot.write_leo_pickle(path, features, subset)
    data = load_embeddings(path)
    assert data.classes == subset.classes and data.images == subset.image_ids
    np.testing.assert_allclose(
        data.embeddings, features / np.linalg.norm(features, axis=1, keepdims=True), rtol=1e-5
    )


@pytest.mark.slow
def test_viable_omniglot_end_to_end_and_the_export_serves_raw_images(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    command = [
        os.path.join(os.path.dirname(sys.executable), "viable-omniglot"),
        f"--data_dir={DATA_DIR}",
        f"--work_dir={work}",
        "--encoder_epochs=1",
        "--num_steps=20",
        "--meta_batch_size=2",
        "--methods=cavia",
        "--settings=5way5shot",
        "--test_episodes=20",
        "--eval_every=10",
        "--validation_episodes=10",
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Omniglot test accuracy" in result.stdout
    assert "5way5shot: exported cavia_5way5shot (best validation accuracy" in result.stdout
    summary = json.loads((work / "results.json").read_text())
    run = summary["runs"]["cavia_5way5shot"]
    assert run["num_tasks"] == 20 and run["metric"] == "accuracy"
    assert sorted(run["by_shots"], key=int) == [str(k) for k in range(1, 10)]
    assert run["by_shots"]["3"]["num_support"] == 3
    for split in ("train", "val", "test"):
        assert (work / "features" / "omniglot" / "center" / f"{split}_embeddings.pkl").exists()
    base = work / "export" / "cavia_5way5shot"
    assert (base / "1" / "saved_model.pb").exists()
    assert summary["served"] == {"5way5shot": "cavia_5way5shot"}

    server = RunningServer(
        ServerOptions(models=[model_config("omniglot", str(base))], port=0, rest_api_port=0)
    )
    client = Client(server.grpc_target)
    try:
        support_x, support_y, query_x, _ = omniglot_episode(DATA_DIR, 5, 5, 3, seed=1)
        assert support_x.shape == (1, 25, 105, 105, 1) and support_y.dtype == np.int32
        outputs = client.predict(support_x, support_y, query_x, model_name="omniglot")
        assert outputs["logits"].shape == (1, 15, 5) and outputs["classes"].shape == (1, 15)
        np.testing.assert_allclose(outputs["probabilities"].sum(-1), 1.0, atol=1e-5)
        # a label outside 0..N-1: 400 over REST, INVALID_ARGUMENT over gRPC; server stays up
        bad = support_y.copy()
        bad[0, 0] = 5
        with pytest.raises(grpc.RpcError) as info:
            client.predict(support_x, bad, query_x, model_name="omniglot")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "class labels 0..4" in info.value.details()
        response = requests.post(
            f"{server.rest_url}/v1/models/omniglot:predict",
            json={
                "inputs": {
                    "support_x": support_x[:, :5].tolist(),
                    "support_y": [[0, 1, 2, 3, 7]],
                    "query_x": query_x[:, :2].tolist(),
                }
            },
            timeout=60,
        )
        assert response.status_code == 400 and "class labels 0..4" in response.json()["error"]
        response = requests.post(
            f"{server.rest_url}/v1/models/omniglot:predict",
            json={
                "inputs": {
                    "support_x": support_x[:, :5].tolist(),
                    "support_y": [[0.5, 1, 2, 3, 4]],
                    "query_x": query_x[:, :2].tolist(),
                }
            },
            timeout=60,
        )
        assert response.status_code == 400 and "expected int32 values" in response.json()["error"]
        again = client.predict(support_x, support_y, query_x, model_name="omniglot")
        np.testing.assert_allclose(again["logits"], outputs["logits"], atol=1e-5)
        # viable-client's omniglot command: episodes of test-alphabet drawings, sent as
        # tensors and as PNG files over both protocols, beside the export run in process.
        from serving import client as client_cli

        monkeypatch.setattr(
            "sys.argv",
            [
                *("viable-client", f"--target={server.grpc_target}", "--model_name=omniglot"),
                *("omniglot", f"--data_dir={DATA_DIR}", "--num_ways=5", "--num_shots=5"),
                *("--num_queries=2", "--num_episodes=2", f"--rest_url={server.rest_url}"),
                f"--saved_model={base / '1'}",
            ],
        )
        client_cli.main()
        lines = capsys.readouterr().out.strip().splitlines()
        what = "omniglot 5-way 5-shot, test alphabets, "
        routes = ["in process, tensors"] + [
            f"{route}, {form}" for form in ("tensors", "png") for route in ("gRPC", "REST")
        ]
        accuracies = []
        for line, route in zip(lines[:5], routes, strict=True):
            assert line.startswith(f"{what}{route}: accuracy ")
            assert line.endswith("(95% CI over 2 episodes, 20 queries)")
            accuracies.append(float(line.split("accuracy ")[1].split()[0]))
        assert len(set(accuracies)) == 1 and 0.0 <= accuracies[0] <= 1.0
        assert lines[5:] == [
            f"{route}: 0 of 20 answers differ from the in-process model" for route in routes[1:]
        ]
    finally:
        client.close()
        server.stop()
