"""Your own images: a folder of class folders as few-shot episodes (datasets/image_folder.py,
tasks/images.py), the gin/images configs, and everything a folder can get wrong.

The folder is drawn here: 12 classes of glyphs (a bar whose place and direction say the
class, and random specks) in 3 groups, saved in every format, size and channel count
the reader converts, with spaces and non-ASCII characters in names."""

import io
import json
import os
import shutil
import struct

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from viable_tf.cli import export as export_cli
from viable_tf.cli import train as train_cli
from viable_tf.config import load_run
from viable_tf.datasets import image_folder
from viable_tf.export.pngs import decode_png, encode_pngs
from viable_tf.image_decoding import convert, convert_all, decode_image
from viable_tf.tasks import seed_for
from viable_tf.tasks.images import ImageFolderEpisodes

FORMATS = ("PNG", "JPEG", "GIF", "BMP")


def _glyph(rng, label: int, size: int) -> np.ndarray:
    """A white drawing [size, size] of 0..255 with a dark bar placed by the label."""
    image = np.where(rng.uniform(size=(size, size)) > 0.03, 255, 0).astype(np.uint8)
    position = (label % 4) * size // 4 + size // 16
    if label // 4 == 0:
        image[position : position + size // 8, size // 8 : -size // 8] = 0
    elif label // 4 == 1:
        image[size // 8 : -size // 8, position : position + size // 8] = 0
    else:
        for i in range(size // 8, size - size // 8):
            image[i, max(0, i - position) : i - position + size // 8] = 0
    return image


def write_folder(root, *, classes=12, per_class=8, seed=0):
    """root/<group>/<class>/<image>, every image in its own format, size and mode."""
    rng = np.random.default_rng(seed)
    for label in range(classes):
        folder = root / f"group {label // 4}" / f"clé {label:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            size = (28, 40, 105)[i % 3]
            gray = _glyph(rng, label, size)
            fmt = FORMATS[i % len(FORMATS)]
            image = Image.fromarray(gray)
            if i % 2:  # colour, and with an alpha channel where the format keeps it
                image = image.convert("RGBA" if fmt == "PNG" else "RGB")
            suffix = {"JPEG": ".jpg"}.get(fmt, f".{fmt.lower()}")
            image.save(folder / f"dessin {i}{suffix}", format=fmt)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("images") / "glyphs")


def _episodes(folder, **kw):
    settings = {"image_dir": str(folder), "num_ways": 2, "num_shots": 1, "num_queries": 3}
    return ImageFolderEpisodes(**{**settings, **kw})


def test_every_format_size_and_mode_becomes_the_configured_image(folder):
    classes = image_folder.scan(str(folder))
    assert len(classes) == 12 and classes[0].name == "group 0/clé 00"
    assert classes[0].group == "group 0" and len(classes[0].files) == 8
    images, skipped = image_folder.decode(
        classes[0].files, image_size=(28, 28), channels=1, bad_files="refuse"
    )
    assert images.shape == (8, 28, 28, 1) and not skipped
    assert images.min() >= 0.0 and images.max() <= 1.0 and images.mean() > 0.6  # white
    colour, _ = image_folder.decode(
        classes[0].files, image_size=(16, 20), channels=3, bad_files="refuse"
    )
    assert colour.shape == (8, 16, 20, 3)
    # The formats agree on what they hold: each class's bar is where its label puts it.
    rows = images[:, :, 4:-4, 0].mean(axis=(0, 2))
    assert rows[1:4].mean() < 0.6 < rows[10:].mean()


def test_a_class_is_converted_as_each_of_its_files_alone_bit_for_bit(folder):
    """`decode` converts the images of one shape together (`convert_all`): the same bits as
    each file converted alone, in the files' order, whatever their sizes and modes."""
    files = [f for c in image_folder.scan(str(folder))[:3] for f in c.files]
    decoded = [decode_image(image_folder.read_bytes(f)) for f in files]
    assert len({image.shape for image in decoded}) > 3  # sizes and channel counts mixed
    for size, channels in (((28, 28), 1), ((16, 20), 3), ((105, 105), 1)):
        together, _ = image_folder.decode(
            files, image_size=size, channels=channels, bad_files="refuse"
        )
        alone = np.stack([convert(image, size, channels).numpy() for image in decoded])
        np.testing.assert_array_equal(together.view(np.uint32), alone.view(np.uint32))
    # Converted in parts where the images waiting pass `batch_bytes`: the same bits.
    for batch_bytes in (1, 40_000):
        parts = convert_all(iter(decoded), (28, 28), 1, batch_bytes=batch_bytes)
        alone = np.stack([convert(image, (28, 28), 1).numpy() for image in decoded])
        np.testing.assert_array_equal(parts.view(np.uint32), alone.view(np.uint32))


@pytest.mark.parametrize("mode, suffix", [("RGB", "png"), ("RGBA", "png"), ("RGB", "jpg")])
def test_a_colour_file_read_as_grey_is_what_the_served_image_signature_sees(mode, suffix, tmp_path):
    """Training's grey (channels=1) of a colour PNG or JPEG is what the served graph's
    decoding gives (ITU-R 601 luma, alpha over white), where a plain mean of the channels
    was up to 0.25 off for saturated colours."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, size=(24, 24, len(mode)), dtype=np.uint8)
    pixels[0, :3, :3] = [[255, 0, 0], [0, 255, 0], [0, 0, 255]]
    path = tmp_path / f"colour_{mode}.{suffix}"
    Image.fromarray(pixels, mode).save(path)
    trained, _ = image_folder.decode(
        [str(path)], image_size=(24, 24), channels=1, bad_files="refuse"
    )
    served = decode_png(path.read_bytes(), channels=1)  # the served graph's decoding
    assert trained.shape == (1, *served.shape)
    np.testing.assert_array_equal(trained[0], served)


def _bmp(bits: int, rows: list[bytes], width: int, palette: np.ndarray | None = None) -> bytes:
    """A BI_RGB BMP file: `rows` top to bottom, each padded to 4 bytes here, and
    `palette` [n, 3] RGB for 1- to 8-bit pixels."""
    table = b""
    if palette is not None:  # BGR0 entries
        bgr0 = np.concatenate([palette[:, ::-1], np.zeros((len(palette), 1))], axis=1)
        table = bgr0.astype(np.uint8).tobytes()
    data = b"".join(row + bytes(-len(row) % 4) for row in reversed(rows))
    offset = 54 + len(table)
    header = struct.pack("<2sIHHI", b"BM", offset + len(data), 0, 0, offset)
    colours = 0 if palette is None else len(palette)
    info = struct.pack(
        "<IiiHHIIiiII", 40, width, len(rows), 1, bits, 0, len(data), 2835, 2835, colours, 0
    )
    return header + info + table + data


def test_every_kind_of_bmp_and_gif_reads_as_the_same_image_in_png_does(tmp_path):
    """BMP and GIF files (decoded by Pillow) give the pixels a PNG of the same image
    gives: a 32-bit BMP whose fourth byte is unused, 0 as most tools write it
    (TensorFlow's decoder took it for alpha: an all-white image), palette BMPs
    (TensorFlow took the indices for grey), 1- and 4-bit BMPs (which TensorFlow
    refuses), and a GIF drawing on a transparent background (TensorFlow dropped the
    transparency: all black)."""
    rng = np.random.default_rng(5)
    colour = rng.integers(0, 256, size=(9, 13, 3), dtype=np.uint8)
    palette = rng.integers(0, 256, size=(16, 3), dtype=np.uint8)
    indices = rng.integers(0, 16, size=(9, 13), dtype=np.uint8)
    paletted = Image.fromarray(indices, "P")
    paletted.putpalette(palette.reshape(-1).tolist())
    grey = Image.fromarray(colour).convert("L")
    bgrx = np.concatenate([colour[..., ::-1], np.zeros((9, 13, 1), np.uint8)], axis=2)
    odd = np.concatenate([indices, np.zeros((9, 1), np.uint8)], axis=1)  # 13 -> 14 nibbles
    files = {
        "32-bit.bmp": (_bmp(32, [row.tobytes() for row in bgrx], 13), Image.fromarray(colour)),
        "4-bit.bmp": (
            _bmp(4, [(row[0::2] << 4 | row[1::2]).tobytes() for row in odd], 13, palette),
            paletted,
        ),
    }
    stroke = np.zeros((9, 13, 4), np.uint8)
    stroke[3:5, 2:11, 3] = 255  # a black bar, the rest transparent black
    for name, image in {
        "transparent.gif": Image.fromarray(stroke, "RGBA"),
        "palette.gif": paletted,
        "animated.gif": grey,
        "24-bit.bmp": Image.fromarray(colour),
        "8-bit palette.bmp": paletted,
        "8-bit grey.bmp": grey,
        "1-bit.bmp": grey.convert("1"),
    }.items():
        data = io.BytesIO()
        if name == "animated.gif":  # the first frame is read
            image.save(data, format="GIF", save_all=True, append_images=[paletted])
        else:
            image.save(data, format=name.rsplit(".", 1)[1].upper())
        files[name] = (data.getvalue(), image)
    assert Image.open(io.BytesIO(files["transparent.gif"][0])).info["transparency"] is not None
    assert Image.open(io.BytesIO(files["animated.gif"][0])).n_frames == 2
    bits = {
        name: struct.unpack_from("<H", data, 28)[0]
        for name, (data, _) in files.items()
        if name.endswith(".bmp")
    }
    assert bits == {
        "32-bit.bmp": 32,
        "4-bit.bmp": 4,
        "24-bit.bmp": 24,
        "8-bit palette.bmp": 8,
        "8-bit grey.bmp": 8,
        "1-bit.bmp": 1,
    }
    for name, (data, image) in files.items():
        bmp, png = tmp_path / name, tmp_path / f"{name}.png"
        bmp.write_bytes(data)
        image.save(png)
        for channels in (1, 3):
            read = [
                image_folder.decode(
                    [str(path)], image_size=(9, 13), channels=channels, bad_files="refuse"
                )[0]
                for path in (bmp, png)
            ]
            np.testing.assert_array_equal(read[0], read[1], err_msg=f"{name}, {channels}")
            if name == "transparent.gif":  # white around the bar
                assert read[0][0, 0, 0, 0] == 1.0 and read[0][0, 4, 5, 0] == 0.0
    (tmp_path / "broken.bmp").write_bytes(files["24-bit.bmp"][0][:60])
    with pytest.raises(ValueError, match=r"broken\.bmp does not decode as an image \("):
        image_folder.decode(
            [str(tmp_path / "broken.bmp")], image_size=(9, 13), channels=1, bad_files="refuse"
        )


def test_splits_are_class_disjoint_and_groups_stay_whole(folder, tmp_path):
    classes = image_folder.scan(str(folder))
    by_fraction = image_folder.split_classes(classes, fractions=(0.5, 0.25, 0.25), seed=1)
    assert [len(by_fraction[s]) for s in ("train", "val", "test")] == [6, 3, 3]
    names = [c.name for s in by_fraction.values() for c in s]
    assert sorted(names) == sorted(c.name for c in classes)
    by_group = image_folder.split_classes(classes, fractions=(1 / 3, 1 / 3, 1 / 3), by_group=True)
    for split in by_group.values():
        assert len({c.group for c in split}) == 1 and len(split) == 4
    named = tmp_path / "split.json"
    named.write_text(json.dumps({"train": ["group 0", "group 1"], "val": ["group 2"], "test": []}))
    split = image_folder.split_classes(classes, split_file=str(named), by_group=True)
    assert len(split["train"]) == 8 and not split["test"]
    named.write_text(json.dumps({"train": ["group 0"], "val": ["group 0"], "test": []}))
    with pytest.raises(ValueError, match="'group 0' is in both train and val"):
        image_folder.split_classes(classes, split_file=str(named), by_group=True)
    named.write_text('{"train": ["group 0",]}')
    with pytest.raises(ValueError, match=r"split\.json is not a JSON split file \(Expecting"):
        image_folder.split_classes(classes, split_file=str(named), by_group=True)
    with pytest.raises(ValueError, match=r"split file \S*nowhere\.json does not exist"):
        image_folder.split_classes(classes, split_file=str(tmp_path / "nowhere.json"))


def test_episodes_are_drawn_from_the_seed_and_rotations_are_training_classes(folder):
    a, b = _episodes(folder, rotations=(0, 90)), _episodes(folder, rotations=(0, 90))
    assert a.num_classes == {"train": 14, "val": 3, "test": 2}  # 7 classes at 2 angles
    first, again = a.sample(seed_for(3, 0), 4), b.sample(seed_for(3, 0), 4)
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)
    assert first.support_x.shape == (4, 2, 28 * 28) and first.query_x.shape == (4, 6, 784)
    other = a.sample(seed_for(3, 1), 4)
    assert not np.array_equal(first.support_x, other.support_x)


def _one_line(error) -> str:
    """The error's message: one line (gin adds a line naming the configurable it was
    raised in, which the command-line tools leave out)."""
    first, *rest = str(error.value).split("\n")
    assert all(line.strip().startswith("In call to configurable") for line in rest), rest
    return first


def test_what_a_folder_can_get_wrong_is_named_at_start(folder, tmp_path):
    with pytest.raises(ValueError) as error:
        _episodes(tmp_path / "nowhere")
    assert "nowhere does not exist" in _one_line(error)
    (tmp_path / "a file").write_text("")
    with pytest.raises(ValueError) as error:
        _episodes(tmp_path / "a file")
    assert "a file is a file, not a folder" in _one_line(error)
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "notes.txt").write_text("no images")
    with pytest.raises(ValueError) as error:
        _episodes(tmp_path / "flat")
    assert "holds no class folders of images" in _one_line(error)
    with pytest.raises(ValueError) as error:
        _episodes(folder, num_shots=2, num_queries=7)
    assert "class 'group 0/clé 00' has 8 images" in _one_line(error) and "need 9" in str(
        error.value
    )
    with pytest.raises(ValueError) as error:
        _episodes(folder, num_ways=4)
    assert "the val split has 3 classes" in _one_line(error) and "4-way" in str(error.value)
    (tmp_path / "a file").write_text("")
    with pytest.raises(ValueError) as error:
        _episodes(folder, cache_budget_mb=0.01, cache_dir=str(tmp_path / "a file"))
    assert "a file is a file, not a folder" in _one_line(error)


def test_a_folder_over_the_cache_budget_is_read_from_disk_with_the_same_episodes(tmp_path):
    """Over `cache_budget_mb` the decoded images go to one file each under `cache_dir`
    and every episode reads its own: the same episodes from the same seeds, evaluation's
    tf.data included."""
    folder = write_folder(tmp_path / "images", classes=12, per_class=8)
    in_memory = _episodes(folder, rotations=(0, 90))
    on_disk = _episodes(
        folder, rotations=(0, 90), cache_budget_mb=0.05, cache_dir=str(tmp_path / "c")
    )
    assert (in_memory.cache, on_disk.cache) == ("memory", "disk")
    assert on_disk.cache_dir == str(tmp_path / "c")
    rows = sorted(os.listdir(tmp_path / "c" / "train"))
    assert len(rows) == 8 * in_memory.num_classes["train"] and rows[0] == "000000000.f32"
    for step in range(3):
        a, b = in_memory.sample(seed_for(5, step), 4), on_disk.sample(seed_for(5, step), 4)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    a = next(iter(in_memory.test.dataset(2, seed=9, num_episodes=2)))
    b = next(iter(on_disk.test.dataset(2, seed=9, num_episodes=2)))
    np.testing.assert_array_equal(a.query_x.numpy(), b.query_x.numpy())


def test_a_bad_file_is_named_or_skipped_and_small_classes_skipped_when_asked(tmp_path):
    root = write_folder(tmp_path / "images", classes=8, per_class=5)
    truncated = root / "group 0" / "clé 00" / "dessin 0.png"
    truncated.write_bytes(truncated.read_bytes()[:60])
    (root / "group 1" / "clé 04" / "dessin 9.jpg").write_text("not an image at all")
    with pytest.raises(ValueError) as error:
        _episodes(root, fractions=(0.5, 0.25, 0.25), split_seed=1)
    message = _one_line(error)  # split_seed=1: both broken classes are training classes
    assert "clé 00/dessin 0.png does not decode as an image" in message
    assert message.endswith("pass bad_files='skip' to leave such files out")
    with pytest.raises(ValueError, match="class 'group 0/clé 00' has 4 images"):
        _episodes(root, fractions=(0.5, 0.25, 0.25), split_seed=1, num_queries=4, bad_files="skip")
    tasks = _episodes(
        root,
        fractions=(0.5, 0.25, 0.25),
        split_seed=1,
        num_queries=4,
        bad_files="skip",
        small_classes="skip",
    )
    assert sorted(os.path.basename(f) for f in tasks.skipped_files) == [
        "dessin 0.png",
        "dessin 9.jpg",
    ]
    assert tasks.skipped_classes == ["group 0/clé 00"]


@pytest.mark.slow
def test_one_command_trains_on_a_folder_and_the_export_takes_pngs(folder, tmp_path, run_cli):
    """images/protonet.gin as the README shows it, a few meta-updates: results with a CI,
    then an export whose serving_png answers as its tensor signature; a bad folder stops
    at start and writes nothing."""
    model_dir, export_base = tmp_path / "run", tmp_path / "export"
    params = [
        f"IMAGE_DIR={str(folder)!r}",
        "NUM_WAYS=2",
        "NUM_QUERIES=3",
        "NUM_STEPS=6",
        "META_BATCH_SIZE=2",
        "EvaluationSpec.eval_every=3",
        "Trainer.show_progress=False",
        "conv4_film.filters=8",
        "classification_validation_evaluator.num_episodes=5",
        "classification_test_evaluator.num_episodes=20",
    ]
    argv = ["--gin_file=images/protonet.gin", *(f"--gin_param={p}" for p in params)]
    status, out = run_cli(train_cli, [*argv, f"--model_dir={model_dir}"])
    assert status == 0, out.err[-2000:]
    record = json.loads((model_dir / "results.json").read_text())
    assert record["num_tasks"] == 20 and record["ci95"] > 0 and record["metric"] == "accuracy"
    assert record["hparams"]["image_shape"] == "28x28x1"
    status, out = run_cli(export_cli, [f"--model_dir={model_dir}", f"--export_base={export_base}"])
    assert status == 0, out.err[-2000:]
    loaded = tf.saved_model.load(str(export_base / "1"))
    assert {"serving_default", "serving_png"} <= set(loaded.signatures)
    rng = np.random.default_rng(5)
    drawings = np.stack([_glyph(rng, label, 28) for label in (0, 5, 0, 5, 0, 5)]) / 255.0
    drawings = drawings[None, ..., None].astype(np.float32)  # [1, 6, 28, 28, 1]
    labels = tf.constant([[0, 1]], tf.int32)
    served = loaded.signatures["serving_default"](
        support_x=tf.constant(drawings[:, :2]),
        support_y=labels,
        query_x=tf.constant(drawings[:, 2:]),
    )["logits"].numpy()
    as_pngs = loaded.signatures["serving_png"](
        support_png=tf.constant(encode_pngs(drawings[:, :2])),
        support_y=labels,
        query_png=tf.constant(encode_pngs(drawings[:, 2:])),
    )["logits"].numpy()
    assert served.shape == (1, 4, 2)
    np.testing.assert_allclose(as_pngs, served, rtol=1e-4, atol=1e-5)
    # The export answers as the trained model does on the pixels training took (not
    # l2-normalised, as features read through LEO's format are).
    run = load_run(str(model_dir))
    pixels, _ = run.tasks.raw_inputs()
    support, query = (
        tf.reshape(pixels(drawings[0, s]), [1, -1, 784]) for s in (slice(2), slice(2, 6))
    )
    state = run.learner.adapt(support, labels, tf.ones([1, 2], tf.bool))
    np.testing.assert_allclose(
        served, run.learner.predict(state, query).numpy(), rtol=1e-4, atol=1e-5
    )

    bad = tmp_path / "bad_run"
    argv[1] = f"--gin_param=IMAGE_DIR={str(tmp_path / 'missing')!r}"
    status, out = run_cli(train_cli, [*argv, f"--model_dir={bad}"])
    assert status != 0 and "missing does not exist" in out.err
    assert not bad.exists() or not any(bad.iterdir())


IMAGE_CONFIGS = sorted(
    f"images/{name}"
    for name in os.listdir(os.path.join(os.path.dirname(__file__), "..", "gin", "images"))
    if name not in ("base.gin", "conv.gin", "omniglot.gin")  # layers, not learners
)


@pytest.mark.parametrize("config", IMAGE_CONFIGS)
def test_every_image_config_builds_its_learner_on_a_folder(config, folder, tmp_path):
    """Each shipped config (CAVIA, simVIABLE, relVIABLE, MAML, VIABLE on MAML, the
    Prototypical Network) builds its learner over the conv net, at the folder's size."""
    from viable_tf import config as configs
    from viable_tf.training import Trainer

    configs.parse(
        [config],
        [f"IMAGE_DIR={str(folder)!r}", "IMAGE_SIZE=20", "NUM_WAYS=2", "NUM_QUERIES=3"],
    )
    trainer = Trainer(model_dir=str(tmp_path))
    expected = os.path.basename(config).removesuffix(".gin")  # protonet: its own name
    assert trainer.learner.method_name.startswith(expected.split("_")[0]), trainer.learner
    assert trainer.tasks.image_shape == (20, 20, 1) and trainer.tasks.input_dim == 400
    batch = trainer.tasks.sample(seed_for(0, 0), 2)
    loss, _ = trainer.learner.meta_loss(batch)
    assert np.isfinite(float(loss))


# -- a tensorflow-datasets image dataset by name -------------------------------------------


class TinyGlyphs(tfds.core.GeneratorBasedBuilder):
    """8 classes of the glyphs above, 6 each, in two splits: a TFDS dataset built here
    (datasets cannot be downloaded in CI), read by name as any registered one is."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "picture": tfds.features.Image(shape=(40, 40, 1)),
                    "glyph": tfds.features.ClassLabel(names=[f"glyph {i}" for i in range(8)]),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0), "test": self._generate_examples(1)}

    def _generate_examples(self, part):
        rng = np.random.default_rng(part)
        for label in range(8):
            for i in range(3):
                picture = _glyph(rng, label, 40)[..., None]
                yield f"{label}_{i}", {"picture": picture, "glyph": label}


def test_a_tfds_dataset_by_name_gives_the_same_kind_of_episodes(tmp_path):
    tasks = ImageFolderEpisodes(
        image_dir=None,
        tfds_name="tiny_glyphs",
        tfds_label="glyph",
        tfds_image="picture",
        tfds_data_dir=str(tmp_path),
        tfds_download=True,  # prepares it from its generator: nothing is fetched
        fractions=(0.5, 0.25, 0.25),
        num_ways=2,
        num_shots=1,
        num_queries=3,
    )
    assert tasks.num_classes == {"train": 4, "val": 2, "test": 2}  # 6 images a class
    batch = tasks.sample(seed_for(0, 0), 3)
    assert batch.support_x.shape == (3, 2, 784) and float(tf.reduce_max(batch.support_x)) <= 1
    with pytest.raises(ValueError) as error:
        ImageFolderEpisodes(
            tfds_name="tiny_glyphs", tfds_label="label", tfds_data_dir=str(tmp_path)
        )
    assert "has no label feature 'label'; its features: picture, glyph" in _one_line(error)
    on_disk = ImageFolderEpisodes(  # the budget counts a TFDS dataset's images too
        tfds_name="tiny_glyphs",
        tfds_label="glyph",
        tfds_image="picture",
        tfds_data_dir=str(tmp_path),
        image_size=64,
        cache_budget_mb=0.5,
        fractions=(0.5, 0.25, 0.25),
        num_ways=2,
        num_shots=1,
        num_queries=3,
    )
    assert on_disk.cache == "disk" and on_disk.sample(seed_for(0, 0), 2).support_x.shape == (
        2,
        2,
        64 * 64,
    )
    with pytest.raises(ValueError) as error:
        ImageFolderEpisodes(tfds_name="no_such_glyphs")
    assert "tensorflow-datasets has no dataset 'no_such_glyphs'" in _one_line(error)


OMNIGLOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "..", "shared", "data")


@pytest.mark.slow
def test_omniglots_zips_are_an_image_folder_split_and_drawn_as_the_protocol_does():
    """gin/images/omniglot.gin over Omniglot's zips: the characters of each split are
    those the end-to-end pipeline (datasets/omniglot.py) reads, a character's drawings
    in the same order, their pixels the pipeline's to float rounding (resized, then
    inverted, where the pipeline inverts first), meta-training characters rotated."""
    from viable_tf import config
    from viable_tf.datasets import omniglot
    from viable_tf.networks import omniglot_encoder

    data_dir = os.path.abspath(os.path.join(OMNIGLOT, "omniglot"))
    config.parse(["images/protonet.gin", "images/omniglot.gin"], [f"IMAGE_DIR={data_dir!r}"])
    tasks = ImageFolderEpisodes()  # as gin configures it
    reference = omniglot.read_omniglot(data_dir)
    for split in ("train", "val", "test"):
        characters = sorted({c.replace(".", "/", 1) for c in reference[split].classes})
        assert tasks.class_names[split] == characters, split
    assert tasks.num_classes["train"] == 4 * len(set(reference["train"].classes))
    assert tasks.num_queries == 10 and tasks.image_shape == (28, 28, 1)
    test = reference["test"]
    first = [i for i, c in enumerate(test.classes) if c == test.classes[0]]
    expected = omniglot_encoder.pixel_featurizer()(test.images[first]).numpy()
    drawn = tasks.test.sample(seed_for(0, 0))
    rows = tf.reshape(drawn.support_x, [-1, 784]).numpy()
    assert rows.min() >= 0 and rows.max() <= 1
    # The first test character's drawings, from the sampler's store, in order.
    store = tasks.test._embeddings.numpy()[: len(first)]
    np.testing.assert_allclose(store, expected, atol=1e-6)


def _effective_bindings(files, params) -> set[str]:
    """The config's bindings with every macro replaced by its value, leaving out the
    macros themselves and the LEO-format episodes' bindings no image config calls."""
    import re

    import gin

    from viable_tf import config

    config.parse(files, params)
    lines = [line for line in gin.config_str().splitlines() if line and line[0] != "#"]
    macros = dict(line.split(" = ", 1) for line in lines if re.match(r"[A-Z_]+ = ", line))
    used = set()
    for line in lines:
        if not re.match(r"[A-Z_]+ = |FewShotEpisodes\.", line):
            used.add(re.sub(r"%([A-Z_]+)", lambda m: macros[m.group(1)], line))
    return used


@pytest.mark.parametrize("method", ["protonet", "cavia"])
def test_the_end_to_end_configs_train_as_the_image_configs_on_omniglot(method):
    """gin/omniglot_conv/<method>_5way1shot.gin binds what images/<method>.gin with
    images/omniglot.gin binds at 5-way 1-shot and 500 validation episodes (the command of
    the omniglot_image_folder records): those runs are the shipped end-to-end configs'."""
    data = f"IMAGE_DIR={os.path.abspath(os.path.join(OMNIGLOT, 'omniglot'))!r}"
    shipped = _effective_bindings([f"omniglot_conv/{method}_5way1shot.gin"], [data])
    images = _effective_bindings(
        [f"images/{method}.gin", "images/omniglot.gin"],
        [data, "NUM_SHOTS=1", "classification_validation_evaluator.num_episodes=500"],
    )
    assert shipped == images


def test_zip_archives_are_read_inside_and_a_bad_one_is_named(tmp_path):
    import zipfile

    source = write_folder(tmp_path / "images", classes=4, per_class=3)
    archives = tmp_path / "zips"
    archives.mkdir()
    with zipfile.ZipFile(archives / "first.zip", "w") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, "top/" + path.relative_to(source).as_posix())
    with zipfile.ZipFile(archives / "second.zip", "w") as archive:  # one class again
        first = sorted((source / "group 0" / "clé 00").iterdir())[0]
        archive.write(first, f"other/group 0/clé 00/{first.name}")
        archive.writestr("other/group 0/clé 00/extra.png", first.read_bytes())
    found = image_folder.scan(str(archives))
    assert [c.name for c in found] == [c.name for c in image_folder.scan(str(source))]
    assert found[0].size == 4  # its 3 files, the duplicate kept once, and the extra one
    images, _ = image_folder.decode(
        found[0].files, image_size=(8, 8), channels=1, bad_files="refuse"
    )
    assert images.shape == (4, 8, 8, 1)
    (archives / "broken.zip").write_text("not a zip")
    with pytest.raises(ValueError) as error:
        image_folder.scan(str(archives))
    assert "broken.zip is not a zip archive" in _one_line(error)


def test_hidden_files_macos_archives_and_linked_class_folders(tmp_path):
    """What copying a folder from a Mac adds is not read: "._<name>" metadata beside
    each image (not an image, though named .png), .DS_Store, hidden folders, and a zip
    archive's __MACOSX folder. A class folder that is a symbolic link is read as the
    folder it points to, and a link back up is read once."""
    import zipfile

    source = write_folder(tmp_path / "images", classes=4, per_class=3)
    expected = [(c.name, c.size) for c in image_folder.scan(str(source))]
    copied = tmp_path / "copied"
    shutil.copytree(source, copied)
    for image in sorted(copied.rglob("*.*")):
        (image.parent / f"._{image.name}").write_bytes(b"\0\5\26\7 AppleDouble metadata")
    for folder in sorted(p for p in copied.rglob("*") if p.is_dir()):
        (folder / ".DS_Store").write_bytes(b"Bud1 junk")
    shutil.copytree(copied / "group 0" / "clé 00", copied / ".Trashes" / "clé 00")
    found = image_folder.scan(str(copied))
    assert [(c.name, c.size) for c in found] == expected
    images, skipped = image_folder.decode(
        found[0].files, image_size=(8, 8), channels=1, bad_files="refuse"
    )
    assert images.shape == (3, 8, 8, 1) and not skipped

    linked = tmp_path / "linked"
    (linked / "group 0").mkdir(parents=True)
    for c in ("clé 00", "clé 01"):
        (linked / "group 0" / c).symlink_to(source / "group 0" / c, target_is_directory=True)
    (linked / "group 0" / "up").symlink_to(linked, target_is_directory=True)  # a loop
    assert [(c.name, c.size) for c in image_folder.scan(str(linked))] == expected[:2]

    with zipfile.ZipFile(tmp_path / "mac.zip", "w") as archive:  # as macOS's Compress
        for path in sorted(copied.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                name = path.relative_to(copied).as_posix()
                archive.write(path, f"images/{name}")
                parent, base = name.rsplit("/", 1)
                archive.writestr(f"__MACOSX/images/{parent}/._{base}", b"\0\5\26\7 metadata")
    archives = tmp_path / "zips"
    archives.mkdir()
    (tmp_path / "mac.zip").rename(archives / "mac.zip")
    assert [(c.name, c.size) for c in image_folder.scan(str(archives))] == expected
