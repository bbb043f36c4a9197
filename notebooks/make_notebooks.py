"""Writes notebooks/quickstart.ipynb, omniglot.ipynb and images.ipynb from the cells below
(unexecuted); `python notebooks/make_notebooks.py --execute` also runs them in place, so
the committed files carry the outputs of a real run. tests/test_notebooks.py executes
them in the README's test command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))


def parameters(source: str):
    cell = new_code_cell(source)
    cell.metadata["tags"] = ["parameters"]  # papermill's and tests/test_notebooks.py's
    return cell


QUICKSTART = [
    new_markdown_cell(
        "# viable_tf quickstart: sine regression\n\n"
        "Train CAVIA and relVIABLE (CAVIA whose inner loop follows a learned *relational* "
        "loss over every pair of support points) on the paper's sine tasks, see both adapt "
        "from 4 points, evaluate them with the project's protocol, export one as a "
        "SavedModel, call its `serving_default`, then serve it with `viable-serve` and send "
        "one REST and one gRPC request. A small budget (about a minute on 2 cores): the "
        "paper's runs are 50,000 meta-updates (`viable-sine-paper`)."
    ),
    parameters("STEPS = 1500  # meta-updates per learner (the paper: 50,000)\nSEED = 0"),
    new_code_cell(
        "import os\nimport subprocess\nimport sys\nimport tempfile\nimport time\n\n"
        "from viable_tf.logs import quiet_tensorflow\n\n"
        "quiet_tensorflow()  # TensorFlow's start-up lines, as the command-line tools do\n"
        "import matplotlib.pyplot as plt\nimport numpy as np\nimport tensorflow as tf\n\n"
        "tf.get_logger().setLevel('ERROR')\n"
        "from viable_tf.evaluation import test_protocol\n"
        "from viable_tf.export import export_saved_model\n"
        "from viable_tf.learners import CAVIA, VIABLE\n"
        "from viable_tf.networks import RelationLossNetwork\n"
        "from viable_tf.tasks import SineTasks, seed_for\n"
        "from viable_tf.training import EvaluationSpec, Trainer\n\n"
        "work = tempfile.mkdtemp(prefix='viable-quickstart-')\n"
        "tasks = SineTasks()  # amplitude in [0.1, 5], phase in [0, pi], x in [-5, 5], K = Q = 10"
    ),
    new_markdown_cell(
        "## Meta-train\n\n`Trainer` is what `viable-train` builds from gin: compiled chunks "
        "of meta-updates, validation every `eval_every`, the best checkpoint kept."
    ),
    new_code_cell(
        "learners = {\n"
        "    'CAVIA': lambda **sizes: CAVIA(context_dim=5, **sizes),\n"
        "    'relVIABLE': lambda **sizes: VIABLE(context_dim=5, loss_network=RelationLossNetwork, **sizes),\n"
        "}\n"
        "trained = {}\n"
        "for name, make in learners.items():\n"
        "    start = time.perf_counter()\n"
        "    trainer = Trainer(model_dir=os.path.join(work, name), tasks=tasks, learner=make,\n"
        "                      num_steps=STEPS, evaluation=EvaluationSpec(eval_every=500),\n"
        "                      seed=SEED, show_progress=False)\n"
        "    trainer.train()\n"
        "    step = trainer.restore_best()\n"
        "    trained[name] = trainer.learner\n"
        "    print(f'{name}: {STEPS} meta-updates in {time.perf_counter() - start:.0f} s, best at {step}')"
    ),
    new_markdown_cell(
        "## Adapted from 4 points\n\nOne task drawn from a fixed seed: both learners adapt "
        "to the same 4 support points (red); the dashed line is the true curve."
    ),
    new_code_cell(
        "grid = tasks.evaluation_grid(200)\n"
        "batch, params = tasks.sample_tasks(seed_for(123, 4), 1, num_support=4, query_x=grid)\n"
        "truth = params.amplitude[0] * np.sin(grid.numpy() - params.phase[0])\n"
        "fig, ax = plt.subplots(figsize=(7, 3.5))\n"
        "ax.plot(grid, truth, 'k--', label='true curve')\n"
        "for name, learner in trained.items():\n"
        "    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)\n"
        "    ax.plot(grid, learner.predict(state, batch.query_x)[0, :, 0], label=f'{name}, adapted')\n"
        "ax.scatter(batch.support_x[0, :, 0], batch.support_y[0, :, 0], c='red', zorder=3, label='4 support points')\n"
        "ax.set_xlabel('x'); ax.set_ylabel('y'); ax.legend(loc='lower right', fontsize=8)\n"
        "plt.show()"
    ),
    new_markdown_cell(
        "## Evaluate with the project's protocol\n\n1,000 fixed test tasks, MSE over 100 "
        "evenly spaced points, mean and 95% CI (docs/method.md §4), at K = 4 and K = 10."
    ),
    new_code_cell(
        "for name, learner in trained.items():\n"
        "    for k in (4, 10):\n"
        "        result = test_protocol(tasks, num_support=k)(learner)\n"
        "        print(f'{name:10} K = {k:2}: MSE {result.mean:.3f} +- {result.ci95:.3f}')"
    ),
    new_markdown_cell(
        "## Export, and call the SavedModel\n\nThe export adapts and predicts inside the "
        "graph (standard ops only), so TensorFlow Serving loads it unchanged."
    ),
    new_code_cell(
        "export_base = os.path.join(work, 'export')\n"
        "path = export_saved_model(trained['relVIABLE'], export_base)\n"
        "serve = tf.saved_model.load(path).signatures['serving_default']\n"
        "support_x = batch.support_x[:, :4]\n"
        "answer = serve(support_x=support_x, support_y=batch.support_y[:, :4],\n"
        "               query_x=tf.constant([[[0.0], [2.5]]]))\n"
        "print(path, {k: v.shape for k, v in answer.items()})\n"
        "print('predictions at x = 0 and 2.5:', answer['predictions'].numpy().ravel())"
    ),
    new_markdown_cell(
        "## Serve it, and ask over REST and gRPC\n\n`viable-serve` speaks TensorFlow "
        "Serving's protocols; port 0 lets it pick free ports, which it prints."
    ),
    new_code_cell(
        "import re\n\nimport requests\n\nfrom serving.client import Client\n\n"
        "server = subprocess.Popen(\n"
        "    [os.path.join(os.path.dirname(sys.executable), 'viable-serve'), '--model_name=sine',\n"
        "     f'--model_base_path={export_base}', '--port=0', '--rest_api_port=0'],\n"
        "    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)\n"
        "line = server.stdout.readline()  # 'viable-serve: serving sine: gRPC on ..., REST on ...'\n"
        "grpc_port, rest_port = re.findall(r':(\\d+)', line)[:2]\n"
        "print(line.strip())"
    ),
    new_code_cell(
        "x = [[-3.0], [-1.0], [1.0], [3.0]]\n"
        "y = [[float(np.sin(v[0]))] for v in x]\n"
        "rest = requests.post(f'http://127.0.0.1:{rest_port}/v1/models/sine:predict',\n"
        "                     json={'instances': [{'support_x': x, 'support_y': y, 'query_x': [[0.5]]}]},\n"
        "                     timeout=60).json()\n"
        "print('REST:', rest['predictions'][0]['predictions'])\n"
        "client = Client(f'127.0.0.1:{grpc_port}')\n"
        "outputs = client.predict([x], [y], [[[0.5]]], model_name='sine')\n"
        "client.close()\n"
        "print('gRPC:', outputs['predictions'].ravel(), ' true sin(0.5) =', round(float(np.sin(0.5)), 3))"
    ),
    new_code_cell("server.terminate()\nprint('viable-serve stopped:', server.wait(timeout=60))"),
]

OMNIGLOT = [
    new_markdown_cell(
        "# viable_tf on Omniglot: few-shot classification of handwritten characters\n\n"
        "The classification pipeline of `viable-omniglot`, step by step and at a small "
        "budget: read the Omniglot images, train an image encoder on the meta-train "
        "characters, meta-train CAVIA with the prototype head on its frozen features, compare "
        "it with the nearest class mean on the same test episodes, then export it *with the "
        "encoder in front* and classify drawings of alphabets it never saw, as a served "
        "model would. `DATA_DIR` is the folder with Omniglot's `images_background.zip` and "
        "`images_evaluation.zip`."
    ),
    parameters(
        "DATA_DIR = '../../shared/data/omniglot'  # tests/test_notebooks.py passes the CI's\n"
        "ENCODER_EPOCHS = 10  # viable-omniglot: 30\n"
        "STEPS = 1000  # meta-updates (the RESULTS.md runs: 20,000)\n"
        "VALIDATION_EPISODES, TEST_EPISODES = 100, 300  # the RESULTS.md runs: 200, 1,000"
    ),
    new_code_cell(
        "import os\nimport tempfile\n\n"
        "from viable_tf.logs import quiet_tensorflow\n\n"
        "quiet_tensorflow()  # TensorFlow's start-up lines, as the command-line tools do\n"
        "import matplotlib.pyplot as plt\nimport numpy as np\nimport tensorflow as tf\n"
        "import tensorflow_datasets as tfds\n\n"
        "tf.get_logger().setLevel('ERROR')\ntfds.disable_progress_bar()\n"
        "from viable_tf import config\n"
        "from viable_tf.datasets import omniglot as data\n"
        "from viable_tf.evaluation import test_protocol\n"
        "from viable_tf.evaluation.classification import classification_test_evaluator, nearest_mean_accuracy\n"
        "from viable_tf.experiments import omniglot\n"
        "from viable_tf.export import export_saved_model\n"
        "from viable_tf.training import Trainer\n\n"
        "work = tempfile.mkdtemp(prefix='viable-omniglot-')\n"
        "splits = data.read_omniglot(DATA_DIR)\n"
        "for name, split in splits.items():\n"
        "    print(f'{name}: {len(set(split.classes))} characters, {len(split.classes)} drawings')"
    ),
    new_code_cell(
        "test = splits['test']\n"
        "fig, axes = plt.subplots(1, 8, figsize=(10, 1.6))\n"
        "for ax, row in zip(axes, range(0, 160, 20), strict=True):\n"
        "    ax.imshow(test.images[row, :, :, 0], cmap='gray'); ax.set_title(test.classes[row].split('.')[-1], fontsize=7); ax.axis('off')\n"
        "plt.show()"
    ),
    new_markdown_cell(
        "## The encoder and its frozen features\n\nA 4-block conv net trained to classify "
        "the meta-train characters only; its features of every drawing are written in "
        "LEO's pickle format, which the episode sampler reads."
    ),
    new_code_cell(
        "info = omniglot.prepare_features(DATA_DIR, work, epochs=ENCODER_EPOCHS, seed=0)\n"
        "print(f\"encoder: {info['final_train_accuracy']:.3f} train accuracy in {info['seconds']} s\")"
    ),
    new_markdown_cell(
        "## Meta-train CAVIA with the prototype head\n\nThe shipped config "
        "`omniglot/cavia_proto_5way1shot.gin` (5-way 1-shot), at a smaller budget."
    ),
    new_code_cell(
        "features = os.path.join(work, 'features')\n"
        "config.parse(['omniglot/cavia_proto_5way1shot.gin'], [\n"
        "    f'DATA_DIR={features!r}', f'NUM_STEPS={STEPS}', 'EvaluationSpec.eval_every=200',\n"
        "    f'classification_validation_evaluator.num_episodes={VALIDATION_EPISODES}',\n"
        "    f'classification_test_evaluator.num_episodes={TEST_EPISODES}', 'Trainer.show_progress=False'])\n"
        "trainer = Trainer(model_dir=os.path.join(work, 'run'))\n"
        "trainer.train()\n"
        "trainer.restore_best()\n"
        "result = test_protocol(trainer.tasks)(trainer.learner)\n"
        "reference = nearest_mean_accuracy(classification_test_evaluator(trainer.tasks))\n"
        "print(f'CAVIA, prototype head: {100 * result.mean:.1f} +- {100 * result.ci95:.1f}%')\n"
        "print(f'nearest class mean:    {100 * reference.mean:.1f} +- {100 * reference.ci95:.1f}%  (same episodes)')"
    ),
    new_markdown_cell(
        "## Export with the encoder, and classify unseen alphabets\n\nThe served model "
        "takes drawings as read (float32 [B, K, 105, 105, 1], 0..1): the encoder runs "
        "inside the graph, then the learner adapts to the support drawings."
    ),
    new_code_cell(
        "encoder = omniglot.frozen_encoder(work)  # the frozen encoder of stage 1\n"
        "path = export_saved_model(trainer.learner, os.path.join(work, 'export'), featurizer=encoder,\n"
        "                          input_shape=data.IMAGE_SHAPE, normalize=True)  # LEO's features\n"
        "serve = tf.saved_model.load(path).signatures['serving_default']\n"
        "from serving.omniglot_client import omniglot_episode\n"
        "support_x, support_y, query_x, query_y = omniglot_episode(DATA_DIR, ways=5, shots=1, queries=2, seed=7)\n"
        "answer = serve(support_x=tf.constant(support_x), support_y=tf.constant(support_y),\n"
        "               query_x=tf.constant(query_x))\n"
        "predicted = answer['classes'].numpy()[0]\n"
        "print('predicted:', predicted, ' true:', query_y[0], f' {np.mean(predicted == query_y[0]):.0%} right')"
    ),
    new_code_cell(
        "fig, axes = plt.subplots(2, 5, figsize=(9, 3.8))\n"
        "for c in range(5):\n"
        "    axes[0, c].imshow(support_x[0, c, :, :, 0], cmap='gray'); axes[0, c].set_title(f'class {c}', fontsize=8)\n"
        "    axes[1, c].imshow(query_x[0, 2 * c, :, :, 0], cmap='gray')\n"
        "    axes[1, c].set_title(f'predicted {predicted[2 * c]}', fontsize=8)\n"
        "for ax in axes.ravel(): ax.axis('off')\n"
        "axes[0, 0].set_ylabel('support'); plt.show()"
    ),
]


IMAGES = [
    new_markdown_cell(
        "# Your own images: from a folder to a served classifier\n\n"
        "Meta-train a few-shot image classifier on a folder of class folders "
        "(`IMAGE_DIR/<class>/<image>`, any of PNG, JPEG, GIF, BMP), test it on classes it "
        "never saw, export it, serve it with `viable-serve` and classify new images sent as "
        "base64 PNGs over REST. With `IMAGE_DIR = None` the notebook draws a folder of "
        "glyphs first; point it at your own folder instead (docs/images.md). A few minutes "
        "of CPU."
    ),
    parameters(
        "IMAGE_DIR = None  # your folder of class folders, or None: draw one\n"
        "STEPS = 1000  # meta-updates (the configs' cap: 100,000, with early stopping)\n"
        "TEST_EPISODES = 300"
    ),
    new_code_cell(
        "import base64\nimport os\nimport re\nimport subprocess\nimport sys\nimport tempfile\n\n"
        "from viable_tf.logs import quiet_tensorflow\n\n"
        "quiet_tensorflow()  # TensorFlow's start-up lines, as the command-line tools do\n"
        "import matplotlib.pyplot as plt\nimport numpy as np\nimport requests\n"
        "import tensorflow as tf\n\n"
        "tf.get_logger().setLevel('ERROR')\n"
        "from viable_tf import config\n"
        "from viable_tf.evaluation import test_protocol\n"
        "from viable_tf.export import export_saved_model\n"
        "from viable_tf.training import Trainer\n\n"
        "work = tempfile.mkdtemp(prefix='viable-images-')"
    ),
    new_markdown_cell(
        "## A folder of class folders\n\n"
        "Each drawn class is a glyph of three strokes of its own; each image of it moves "
        "the glyph by a pixel or two and adds specks, at one of three sizes. 40 classes of "
        "10 images: 24 to meta-train on, 8 to validate, 8 to test."
    ),
    new_code_cell(
        "def glyph(rng, strokes, size):\n"
        "    image = np.ones((size, size), np.float32)\n"
        "    shift = rng.integers(-2, 3, size=2)\n"
        "    for (y0, x0), (y1, x1) in strokes:\n"
        "        for t in np.linspace(0, 1, 4 * size):\n"
        "            y, x = (np.array([y0 + t * (y1 - y0), x0 + t * (x1 - x0)]) * size).astype(int) + shift\n"
        "            image[max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2] = 0.0\n"
        "    image[rng.uniform(size=image.shape) < 0.02] = 0.0\n"
        "    return image\n\n"
        "if IMAGE_DIR is None:\n"
        "    IMAGE_DIR = os.path.join(work, 'glyphs')\n"
        "    rng = np.random.default_rng(0)\n"
        "    for c in range(40):\n"
        "        strokes = rng.uniform(0.15, 0.85, size=(3, 2, 2))\n"
        "        folder = os.path.join(IMAGE_DIR, f'glyph {c:02d}')\n"
        "        os.makedirs(folder)\n"
        "        for i in range(10):\n"
        "            image = glyph(rng, strokes, (28, 40, 64)[i % 3])\n"
        "            png = tf.io.encode_png(tf.constant((255 * image).astype(np.uint8))[..., None])\n"
        "            tf.io.write_file(os.path.join(folder, f'{i}.png'), png)\n"
        "classes = sorted(os.listdir(IMAGE_DIR))\n"
        "print(f'{IMAGE_DIR}: {len(classes)} classes, e.g. {classes[:3]}')\n"
        "fig, axes = plt.subplots(1, 8, figsize=(10, 1.6))\n"
        "for ax, name in zip(axes, classes[:8], strict=False):  # fewer than 8: fewer shown\n"
        "    first = sorted(os.listdir(os.path.join(IMAGE_DIR, name)))[0]\n"
        "    ax.imshow(tf.io.decode_image(tf.io.read_file(os.path.join(IMAGE_DIR, name, first)))[..., 0], cmap='gray')\n"
        "    ax.set_title(name, fontsize=7)\n"
        "    ax.axis('off')\n"
        "plt.show()"
    ),
    new_markdown_cell(
        "## Meta-train and test\n\n"
        "`images/protonet.gin` is what `viable-train --gin_file=images/protonet.gin "
        "--gin_param=\"IMAGE_DIR='...'\"` reads: the Prototypical Network over the conv net "
        "of the Omniglot end-to-end path, 5-way 1-shot, the images at 28 x 28 grey. "
        "`images/cavia.gin`, `relviable.gin`, `maml.gin` and the others train the other "
        "learners the same way."
    ),
    new_code_cell(
        "config.parse(\n"
        "    ['images/protonet.gin'],\n"
        "    [\n"
        "        f'IMAGE_DIR={IMAGE_DIR!r}',\n"
        "        f'NUM_STEPS={STEPS}',\n"
        "        f'EvaluationSpec.eval_every={max(STEPS // 4, 1)}',\n"
        "        'classification_validation_evaluator.num_episodes=100',\n"
        "        f'classification_test_evaluator.num_episodes={TEST_EPISODES}',\n"
        "        'Trainer.show_progress=False',\n"
        "    ],\n"
        ")\n"
        "trainer = Trainer(model_dir=os.path.join(work, 'run'))\n"
        "print('classes per split:', trainer.tasks.num_classes)\n"
        "trainer.train()\n"
        "trainer.restore_best()\n"
        "result = test_protocol(trainer.tasks)(trainer.learner)\n"
        "print(f'test classes, 5-way 1-shot: {100 * result.mean:.1f} +- {100 * result.ci95:.1f}% '\n"
        "      f'(95% CI, {TEST_EPISODES} episodes; chance 20%)')"
    ),
    new_markdown_cell(
        "## Export, serve, and classify PNGs over REST\n\n"
        "The export takes the images themselves: as float tensors in `serving_default`, "
        "as PNG files in `serving_png` (`viable-export --model_dir=M --export_base=E` "
        'writes the same from a run folder). Over REST a PNG travels as `{"b64": ...}`, '
        "as TensorFlow Serving reads binary strings."
    ),
    new_code_cell(
        "featurizer, image_shape = trainer.tasks.raw_inputs()\n"
        "export_base = os.path.join(work, 'export')\n"
        "export_saved_model(  # the pixels as training took them: not l2-normalised\n"
        "    trainer.learner, export_base, featurizer=featurizer, input_shape=image_shape, normalize=False\n"
        ")\n"
        "server = subprocess.Popen(\n"
        "    [os.path.join(os.path.dirname(sys.executable), 'viable-serve'), '--model_name=images',\n"
        "     f'--model_base_path={export_base}', '--port=0', '--rest_api_port=0'],\n"
        "    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)\n"
        "line = server.stdout.readline()  # 'viable-serve: serving images: gRPC on ..., REST on ...'\n"
        "rest_port = re.findall(r':(\\d+)', line)[1]\n"
        "print(line.strip())"
    ),
    new_code_cell(
        "def b64_png(path):\n"
        "    with open(path, 'rb') as f:\n"
        "        return {'b64': base64.b64encode(f.read()).decode()}\n\n"
        "test_classes = trainer.tasks.class_names['test'][:5]  # never meta-trained on\n"
        "support, query, truth = [], [], []\n"
        "for label, name in enumerate(test_classes):\n"
        "    files = sorted(os.listdir(os.path.join(IMAGE_DIR, name)))\n"
        "    support.append(b64_png(os.path.join(IMAGE_DIR, name, files[0])))\n"
        "    for f in files[1:3]:\n"
        "        query.append(b64_png(os.path.join(IMAGE_DIR, name, f)))\n"
        "        truth.append(label)\n"
        "answer = requests.post(\n"
        "    f'http://127.0.0.1:{rest_port}/v1/models/images:predict',\n"
        "    json={'signature_name': 'serving_png',\n"
        "          'inputs': {'support_png': [support], 'support_y': [list(range(5))], 'query_png': [query]}},\n"
        "    timeout=60,\n"
        ").json()\n"
        "predicted = answer['outputs']['classes'][0]\n"
        "print('classes of', test_classes)\n"
        "print('predicted:', predicted, ' true:', truth, f' {np.mean(np.equal(predicted, truth)):.0%} right')"
    ),
    new_code_cell("server.terminate()\nprint('viable-serve stopped:', server.wait(timeout=60))"),
]


def write(name: str, cells: list) -> str:
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = os.path.join(HERE, name)
    nbformat.write(notebook, path)
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    subprocess.run([ruff, "format", "--quiet", path], check=True)  # as the repository is
    return path


def execute(path: str, parameters: dict | None = None, timeout: int = 900):
    """Runs a notebook in place (its folder as the working directory), first replacing
    its `parameters` cell's values with `parameters`."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    if parameters:
        for cell in notebook.cells:
            if "parameters" in cell.metadata.get("tags", []):
                cell.source += "\n# injected\n" + "\n".join(
                    f"{k} = {v!r}" for k, v in parameters.items()
                )
    NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": HERE}}
    ).execute()
    return notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--execute", action="store_true", help="run them and keep the outputs")
    parser.add_argument("--only", default=None, help="one notebook, e.g. images.ipynb")
    args = parser.parse_args()
    notebooks = {"quickstart.ipynb": QUICKSTART, "omniglot.ipynb": OMNIGLOT, "images.ipynb": IMAGES}
    for name, cells in notebooks.items():
        if args.only and name != args.only:
            continue
        path = write(name, cells)
        if args.execute:
            nbformat.write(execute(path), path)
        print(path)


if __name__ == "__main__":
    main()
