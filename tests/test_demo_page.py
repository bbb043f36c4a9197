"""The /demo page in a real browser: headless Chromium driven by Selenium
against a viable-serve on loopback. Chromium and its driver are Debian's `chromium` and
`chromium-driver`, which the README's test command installs where missing, beside the
suite (tests/browser_install.py: the test waits for it); a browser that cannot start fails
the test with the reason (no skip).

Set VIABLE_DEMO_SCREENSHOT to a path to keep the sine screenshot there too (docs/ holds
one taken so: docs/images/demo_sine.png)."""

import os
import shutil

import browser_install
import keras
import numpy as np
import pytest
import requests
import tensorflow as tf
from serving_harness import RunningServer, model_config

from serving.checks import Limits
from serving.client import Client
from serving.server import ServerOptions, options_from_flags
from viable_tf.export import export_saved_model
from viable_tf.learners import CAVIA, VIABLE, PrototypeHead
from viable_tf.networks import PredictionNetwork, SimpleLossNetwork, SkipInputs
from viable_tf.tasks import SineTasks
from viable_tf.training import EvaluationSpec, PerformanceSpec, Trainer

MAX_SUPPORT = 5
MAX_QUERY = 500
#: A model name a careless page would turn into markup (no '/' or ':', as TF Serving's
#: REST paths allow).
HOSTILE_NAME = "<img src=x onerror=document.title='pwned'>"
#: The points clicked: on y = 3 sin(x).
CLICKS = [(-3.0, -0.42), (-1.2, -2.8), (0.8, 2.15), (2.6, 1.55)]


def _trained_cavia(model_dir) -> CAVIA:
    """CAVIA after 600 meta-updates on sine: enough to bend towards the points."""
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        model_dir=str(model_dir),
        tasks=SineTasks(num_support=5, num_query=10),
        learner=CAVIA,
        num_steps=600,
        meta_batch_size=10,
        evaluation=EvaluationSpec(eval_every=600, summary_every=300, figure_every=10_000),
        performance=PerformanceSpec(steps_per_call=300),
        show_progress=False,
    )
    trainer.train()
    return trainer.learner


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    waves = str(models / "waves")
    export_saved_model(_trained_cavia(tmp_path_factory.mktemp("train")), waves, version=3)
    keras.utils.set_random_seed(1)
    other = str(models / "relviable")
    export_saved_model(
        VIABLE(input_dim=1, output_dim=1, loss_network=lambda: SimpleLossNetwork()), other
    )
    running = RunningServer(
        ServerOptions(
            models=[
                model_config("waves", waves, stable=3),
                model_config("second", other),
                model_config(HOSTILE_NAME, other),
            ],
            port=0,
            rest_api_port=0,
            limits=Limits(max_support=MAX_SUPPORT, max_query=MAX_QUERY, max_tasks=16),
        )
    )
    yield running
    running.stop()


def _chromium():
    """A headless Chromium under Selenium, or a failure that says why not."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    reason = browser_install.wait()
    if reason is not None:
        pytest.fail(reason)
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail(
            "the browser test needs Debian's chromium and chromium-driver "
            f"(found chromium={browser}, chromedriver={driver}); the README's test command "
            "installs them with apt-get"
        )
    options = Options()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1000,760",
    ):
        options.add_argument(argument)
    try:
        return webdriver.Chrome(service=Service(driver), options=options)
    except Exception as error:  # the reason, in the failure, instead of a skip
        pytest.fail(f"headless Chromium did not start: {str(error).splitlines()[0]}")


@pytest.fixture(scope="module")
def browser():
    driver = _chromium()
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def _wait(driver, condition: str, timeout: float = 30.0):
    """Waits until the page's `condition` (JavaScript, over window.viableDemo) holds."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.05).until(
            lambda d: d.execute_script(
                f"const demo = window.viableDemo; return Boolean({condition});"
            )
        )
    except TimeoutException:
        seen = _state(
            driver,
            "{kind: demo.kind, error: demo.error, notice: demo.notice, busy: demo.busy, "
            "ready: demo.ready, support: demo.support.length, queries: demo.queries.length}",
        )
        logs = [entry["message"] for entry in driver.get_log("browser")]
        pytest.fail(f"the page did not reach {condition} in {timeout} s: {seen}; console: {logs}")


def _state(driver, expression: str):
    return driver.execute_script(f"const demo = window.viableDemo; return {expression};")


def _click(driver, x: float, y: float, shift: bool = False):
    """Clicks the plot at data point (x, y), as a user would (the page maps pixels back)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    plot = driver.find_element(By.ID, "plot")
    box = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", plot
    )
    p = _state(driver, "demo.plot")
    px = p["left"] + (x - p["x0"]) / (p["x1"] - p["x0"]) * (p["right"] - p["left"])
    py = p["bottom"] - (y - p["y0"]) / (p["y1"] - p["y0"]) * (p["bottom"] - p["top"])
    dx, dy = (px - 360) * box[0] / 720, (py - 210) * box[1] / 420  # from the plot's centre
    serial = _state(driver, "demo.updates")
    actions = ActionChains(driver)
    if shift:
        actions.key_down(Keys.SHIFT)
    actions.move_to_element_with_offset(plot, round(dx), round(dy)).click()
    if shift:
        actions.key_up(Keys.SHIFT)
    actions.perform()
    return serial


def _curve(driver, series: str) -> tuple[np.ndarray, np.ndarray]:
    """The drawn polyline of `series`, mapped back from pixels to data coordinates."""
    from selenium.webdriver.common.by import By

    line = driver.find_element(By.CSS_SELECTOR, f"polyline[data-series='{series}']")
    pixels = np.array(
        [[float(v) for v in pair.split(",")] for pair in line.get_attribute("points").split()]
    )
    p = _state(driver, "demo.plot")
    x = p["x0"] + (pixels[:, 0] - p["left"]) / (p["right"] - p["left"]) * (p["x1"] - p["x0"])
    y = p["y0"] + (p["bottom"] - pixels[:, 1]) / (p["bottom"] - p["top"]) * (p["y1"] - p["y0"])
    return x, y


@pytest.mark.slow
def test_the_page_is_served_beside_the_api_and_turned_off_by_flag(server, tmp_path):
    page = requests.get(server.rest_url + "/demo", timeout=30)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "connect-src 'self'" in page.headers["Content-Security-Policy"]
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "https://" not in page.text
    listing = requests.get(server.rest_url + "/demo/models", timeout=30).json()
    waves = next(m for m in listing["models"] if m["name"] == "waves")
    assert waves["labels"] == {"stable": 3}
    assert [v["version"] for v in waves["versions"]] == [3]
    assert waves["versions"][0]["task"] == "regression"
    assert listing["limits"]["max_support"] == MAX_SUPPORT
    # --demo=false: no page, the API as before.
    base = str(tmp_path)
    assert options_from_flags([f"--model_base_path={base}"]).demo is True
    assert options_from_flags([f"--model_base_path={base}", "--demo=false"]).demo is False
    assert options_from_flags([f"--model_base_path={base}", "--demo"]).demo is True
    with pytest.raises(SystemExit):
        options_from_flags([f"--model_base_path={base}", "--demo=perhaps"])
    running = RunningServer(
        ServerOptions(models=[model_config("waves", base)], port=0, rest_api_port=0, demo=False)
    )
    try:
        assert requests.get(running.rest_url + "/demo", timeout=30).status_code == 404
        status = requests.get(running.rest_url + "/v1/models/waves", timeout=30)
        assert status.status_code == 200
    finally:
        running.stop()


@pytest.mark.slow
def test_clicked_points_bend_the_served_curve(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(server.rest_url + "/demo")
    _wait(browser, "demo.ready && demo.prior && demo.busy === 0")
    # The model list comes from the server, names escaped: the hostile one is text.
    names = [o.text for o in Select(browser.find_element(By.ID, "model")).options]
    assert names == sorted(["waves", "second", HOSTILE_NAME])
    assert browser.title == "viable-serve: see it adapt"
    assert not browser.find_elements(By.CSS_SELECTOR, "header img, select img")
    # Served under a label: the requests go to /v1/models/waves/labels/stable.
    Select(browser.find_element(By.ID, "model")).select_by_visible_text("waves")
    _wait(browser, "demo.spec.name === 'waves' && demo.prior && demo.busy === 0")
    Select(browser.find_element(By.ID, "version")).select_by_value("label:stable")
    _wait(browser, "demo.spec.label === 'stable' && demo.prior && demo.busy === 0")
    assert "version 3: AVAILABLE" in browser.find_element(By.ID, "status").text

    for x, y in CLICKS:
        serial = _click(browser, x, y)
        _wait(browser, f"demo.updates > {serial} && demo.busy === 0")
    _wait(browser, f"demo.sentPoints && demo.sentPoints.length === {len(CLICKS)}")
    sent = _state(browser, "demo.sentPoints")
    points = np.array([[p["x"], p["y"]] for p in sent])
    np.testing.assert_allclose(points, np.array(CLICKS), atol=0.05)  # where it was clicked
    grid = np.array(_state(browser, "demo.grid"))

    # The drawn curve is the served prediction for those points (asked here over gRPC).
    client = Client(server.grpc_target)
    try:
        query = grid[None, :, None].astype(np.float32)
        served = client.predict(
            points[None, :, :1], points[None, :, 1:], query, model_name="waves", label="stable"
        )["predictions"][0, :, 0]
        empty = np.zeros([1, 0, 1], np.float32)
        prior = client.predict(empty, empty, query, model_name="waves")["predictions"][0, :, 0]
    finally:
        client.close()
    np.testing.assert_allclose(_state(browser, "demo.adapted"), served, rtol=1e-6, atol=1e-6)
    drawn_x, drawn_y = _curve(browser, "adapted")
    pixel = 12.0 / 378  # one pixel of the plot in y; the page writes pixels to 0.01
    np.testing.assert_allclose(drawn_x, grid, atol=0.01 * pixel * 2)
    np.testing.assert_allclose(drawn_y, served, atol=0.01 * pixel)
    _, drawn_prior = _curve(browser, "prior")
    np.testing.assert_allclose(drawn_prior, prior, atol=0.01 * pixel)
    assert np.max(np.abs(served - prior)) > 0.5  # adapted: not the prior
    # Adapted to the points: closer to them than the prior is.
    at = lambda curve: np.interp(points[:, 0], grid, curve)  # noqa: E731
    assert np.mean((at(served) - points[:, 1]) ** 2) < np.mean((at(prior) - points[:, 1]) ** 2)
    assert "K = 4" in browser.find_element(By.ID, "latency").text
    screenshot = str(tmp_path / "demo_sine.png")
    assert browser.save_screenshot(screenshot) and os.path.getsize(screenshot) > 10_000
    if os.environ.get("VIABLE_DEMO_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["VIABLE_DEMO_SCREENSHOT"])

    # A second model's curve beside it, for the same points.
    Select(browser.find_element(By.ID, "compare")).select_by_visible_text("second")
    _wait(browser, "demo.compare && demo.busy === 0")
    assert browser.find_elements(By.CSS_SELECTOR, "polyline[data-series='compare']")

    # Clicks past --max_support are capped with a message; shift-click removes a point.
    serial = _click(browser, 4.0, 0.0)
    _wait(browser, f"demo.updates > {serial} && demo.busy === 0")
    _click(browser, -4.5, 1.0)
    _wait(browser, "demo.notice !== null")
    assert f"--max_support is {MAX_SUPPORT}" in browser.find_element(By.ID, "notice").text
    assert _state(browser, "demo.points.length") == MAX_SUPPORT
    serial = _click(browser, 4.0, 0.0, shift=True)
    _wait(browser, f"demo.updates > {serial} && demo.busy === 0")
    assert _state(browser, "demo.points.length") == MAX_SUPPORT - 1

    # A request the server refuses shows the server's message, not a broken plot.
    box = browser.find_element(By.ID, "resolution")
    before = _state(browser, "demo.adapted")
    box.clear()
    box.send_keys(str(MAX_QUERY + 1))
    browser.find_element(By.ID, "clear").click()  # blurs the box: its change event
    _wait(browser, "demo.error !== null && demo.busy === 0")
    message = browser.find_element(By.ID, "message").text
    assert message.startswith("400: ") and "--max_query" in message
    assert _state(browser, "demo.adapted") == before  # the last good curve stays drawn


@pytest.fixture(scope="module")
def classifier_server(tmp_path_factory):
    """A 3-way prototype-head classifier exported with an image featurizer (16 x 16)."""
    keras.utils.set_random_seed(2)
    images = keras.Input((16, 16, 1))
    featurizer = keras.Model(images, keras.layers.Flatten()(images))
    learner = CAVIA(
        input_dim=256,
        output_dim=3,
        num_inner_steps=1,
        inner_lr=0.1,
        task_loss="cross_entropy",
        head=PrototypeHead(),
        network=lambda **kw: PredictionNetwork(hidden_units=(32,), features=[SkipInputs()], **kw),
    )
    base = str(tmp_path_factory.mktemp("models") / "glyphs")
    export_saved_model(
        learner, base, featurizer=featurizer, input_shape=(16, 16, 1), normalize=True
    )
    running = RunningServer(
        ServerOptions(models=[model_config("glyphs", base)], port=0, rest_api_port=0)
    )
    yield running
    running.stop()


def _glyph(path, kind: int, longer: int) -> np.ndarray:
    """A 16 x 16 drawing (white background, black strokes) written as a PNG: a vertical
    bar, a horizontal bar or a diagonal, `longer` pixels longer than the support's."""
    image = np.ones((16, 16), np.float32)
    span = np.arange(3, 13 + longer)
    if kind == 0:
        image[span, 7] = 0.0
    elif kind == 1:
        image[7, span] = 0.0
    else:
        image[span, span] = 0.0
    png = tf.io.encode_png(tf.constant((image * 255).astype(np.uint8)[..., None]))
    tf.io.write_file(str(path), png)
    return image


@pytest.mark.slow
def test_drawings_are_classified_by_the_served_model(classifier_server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(classifier_server.rest_url + "/demo")
    _wait(browser, "demo.ready && demo.kind === 'classification'")
    uploads = browser.find_elements(By.CSS_SELECTOR, "#classes input[type=file]")
    assert len(uploads) == 3
    for kind, upload in enumerate(uploads):
        _glyph(tmp_path / f"support{kind}.png", kind, 0)
        upload.send_keys(str(tmp_path / f"support{kind}.png"))
    queries = []
    for kind in (2, 0, 1):
        queries.append(_glyph(tmp_path / f"query{kind}.png", kind, 1))
        browser.find_element(By.ID, "query-files").send_keys(str(tmp_path / f"query{kind}.png"))
    _wait(browser, "demo.support.length === 3 && demo.queries.length === 3")
    # The page read the PNGs as the model's inputs: 0..1, white = 1.
    pixels = np.array(_state(browser, "demo.queries.map((q) => q.pixels)"), np.float32)
    np.testing.assert_allclose(pixels[..., 0], np.stack(queries), atol=1e-6)
    browser.find_element(By.ID, "classify").click()
    _wait(browser, "demo.results !== null && demo.busy === 0")
    results = _state(browser, "demo.results")
    assert results["classes"] == [2, 0, 1]  # nearest class mean of the raw pixels
    probabilities = np.array(results["probabilities"])
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tr")
    assert len(rows) == 4 and rows[1].find_elements(By.TAG_NAME, "td")[1].text == "2"

    # A class without a drawing: the prototype head's refusal, shown as the server said it.
    browser.find_element(By.CSS_SELECTOR, "#thumbs-1 img").click()  # removes class 1's
    browser.find_element(By.ID, "classify").click()
    _wait(browser, "demo.error !== null && demo.busy === 0")
    message = browser.find_element(By.ID, "message").text
    assert message.startswith("400: ") and "class 1" in message


# -- the end-to-end image classifier: example drawings, the pad, PNGs over REST --------


@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    """An end-to-end image classifier (tests/image_models.py) that takes PNG files; set
    VIABLE_DEMO_IMAGE_MODEL to a served export's base path to show that one instead (the
    docs' screenshot is of the trained Omniglot model)."""
    from image_models import export_image_classifier

    base = os.environ.get("VIABLE_DEMO_IMAGE_MODEL")
    if not base:
        root = tmp_path_factory.mktemp("image_demo")
        base = str(root / "glyphs")
        export_image_classifier(base, str(root / "examples"))
    running = RunningServer(
        ServerOptions(models=[model_config("omniglot", base)], port=0, rest_api_port=0)
    )
    yield running
    running.stop()


def _draw(driver, strokes):
    """Draws on the pad with the pointer, as a person would: each stroke a press, moves
    through its points (fractions of the pad's width and height) and a release."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    pad = driver.find_element(By.ID, "pad")
    width, height = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", pad
    )

    def offset(point):  # from the pad's centre, in CSS pixels
        return round((point[0] - 0.5) * width), round((point[1] - 0.5) * height)

    for stroke in strokes:
        actions = ActionChains(driver, duration=10)
        actions.move_to_element_with_offset(pad, *offset(stroke[0])).click_and_hold()
        for point in stroke[1:]:
            actions.move_to_element_with_offset(pad, *offset(point))
        actions.release().perform()


@pytest.mark.slow
def test_a_drawing_on_the_pad_is_classified_as_grpc_answers_for_its_png(
    image_server, browser, tmp_path
):
    import base64

    from selenium.webdriver.common.by import By

    from viable_tf.export.pngs import decode_png

    browser.get(image_server.rest_url + "/demo")
    _wait(browser, "demo.ready && demo.kind === 'classification' && demo.busy === 0")
    assert _state(browser, "demo.takesPng") is True
    ways = _state(browser, "demo.ways")
    # One click fills the support set: one example drawing of each of N characters.
    assert browser.find_element(By.ID, "examples-row").is_displayed()
    browser.find_element(By.ID, "examples").click()
    _wait(browser, f"demo.support.length === {ways} && demo.busy === 0")
    characters = _state(browser, "demo.exampleCharacters")
    assert len(set(characters)) == ways
    assert [s["label"] for s in _state(browser, "demo.support")] == list(range(ways))
    licence = requests.get(
        image_server.rest_url
        + browser.find_element(By.ID, "examples-licence")
        .get_attribute("href")
        .split(image_server.rest_url)[-1],
        timeout=30,
    )
    assert licence.status_code == 200 and "MIT License" in licence.text
    # A query drawn on the pad: a cross, two strokes.
    _draw(browser, [[(0.2, 0.2), (0.5, 0.5), (0.8, 0.8)], [(0.8, 0.2), (0.2, 0.8)]])
    browser.find_element(By.ID, "pad-query").click()
    browser.find_element(By.ID, "pad-clear").click()
    _draw(browser, [[(0.5, 0.15), (0.5, 0.85)]])  # and a vertical bar
    browser.find_element(By.ID, "pad-query").click()
    _wait(browser, "demo.queries.length === 2")
    browser.find_element(By.ID, "classify").click()
    _wait(browser, "demo.results !== null && demo.busy === 0")
    sent = _state(browser, "demo.sent")
    assert sent["signature_name"] == "serving_png"
    pngs = {
        name: np.array([[base64.b64decode(v["b64"]) for v in sent["inputs"][name][0]]], object)
        for name in ("support_png", "query_png")
    }
    support_y = np.array(sent["inputs"]["support_y"], np.int32)
    # The strokes are in the PNGs the page sent: dark pixels on a white drawing.
    cross = decode_png(pngs["query_png"][0, 0])
    assert cross.shape == (105, 105, 1) and cross.min() < 0.2 and np.median(cross) == 1.0
    assert cross[52, 52, 0] < 0.5 and cross[10, 52, 0] == 1.0  # the centre, not the top
    # The label and scores shown are what a gRPC Predict answers for the same PNGs.
    client = Client(image_server.grpc_target)
    try:
        served = client.predict_pngs(
            pngs["support_png"], support_y, pngs["query_png"], model_name="omniglot"
        )
        tensors = client.predict(
            np.stack([decode_png(p) for p in pngs["support_png"][0]])[None],
            support_y,
            np.stack([decode_png(p) for p in pngs["query_png"][0]])[None],
            model_name="omniglot",
        )
    finally:
        client.close()
    results = _state(browser, "demo.results")
    assert results["classes"] == served["classes"][0].tolist()
    np.testing.assert_allclose(results["probabilities"], served["probabilities"][0], rtol=1e-6)
    np.testing.assert_array_equal(tensors["logits"], served["logits"])  # PNG = its pixels
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tr")
    shown = [int(row.find_elements(By.TAG_NAME, "td")[1].text) for row in rows[1:]]
    assert shown == served["classes"][0].tolist()
    screenshot = str(tmp_path / "demo_omniglot.png")
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    browser.set_window_size(1000, min(int(height) + 140, 2400))  # the whole page
    try:
        assert browser.save_screenshot(screenshot) and os.path.getsize(screenshot) > 10_000
    finally:
        browser.set_window_size(1000, 760)
    if os.environ.get("VIABLE_DEMO_OMNIGLOT_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["VIABLE_DEMO_OMNIGLOT_SCREENSHOT"])
