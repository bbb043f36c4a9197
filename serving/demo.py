"""The /demo page on the REST port: see a served model adapt.

One static HTML file (`demo.html` beside this module, its script inline, nothing fetched
from elsewhere) and two answers that TF Serving's REST API has no equivalent of: one JSON, the
names of the served models, their loaded versions and labels, what each version's export
says it is (`viable_model.json`: sine regression or a classifier of images, the input
shape, the number of classes, whether it ships example drawings) and the server's
request limits; and the example drawings an export ships in assets.extra/examples/
(the end-to-end Omniglot exports: drawings of the test alphabets with their licence),
so a person can fill a support set with one click. Everything else the page
asks through the REST API itself (`GET /v1/models/NAME`, `/metadata`, `:predict`), as any
other client would.

The page is on by default and `--demo=false` turns it off; the REST API's routes and
answers are the same either way.
"""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import asdict

from aiohttp import web

from serving.checks import Limits
from serving.manager import ModelManager
from viable_tf.export import layout

PAGE_PATH = "/demo"
MODELS_PATH = "/demo/models"
#: A version's example drawings (its assets.extra/examples/, as the export wrote them):
#: /demo/examples/<model>/<version>/index.json, .../<character>/<drawing>.png, LICENSE.
EXAMPLES_PATH = "/demo/examples/{name}/{version}/{path:.+}"
EXAMPLES_FOLDER = "examples"
EXAMPLE_TYPES = {".png": "image/png", ".json": "application/json", ".md": "text/markdown"}
#: What the page may load: itself and nothing from elsewhere (its script and style are
#: inline; images it makes are data: or blob: URLs).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'"
)
#: What the page shows of each version's viable_model.json.
DESCRIPTION_KEYS = ("method", "task", "input_shape", "input_dim", "output_dim", "head")


def page_html() -> bytes:
    return importlib.resources.files("serving").joinpath("demo.html").read_bytes()


def describe_models(manager: ModelManager, limits: Limits) -> dict:
    """The served models as the page lists them."""
    models = []
    for name, entry in sorted(manager.models.items()):
        versions = []
        for version, servable in sorted(entry.servables.items()):
            description = {k: servable.description.get(k) for k in DESCRIPTION_KEYS}
            examples = os.path.isfile(_examples_file(servable.path, "index.json") or "")
            versions.append({"version": version, **description, "examples": examples})
        models.append(
            {
                "name": name,
                "versions": versions,
                "labels": dict(sorted(entry.config.version_labels.items())),
            }
        )
    return {"models": models, "limits": asdict(limits)}


class DemoPage:
    """The page's two routes, added to the REST application."""

    def __init__(self, manager: ModelManager, limits: Limits) -> None:
        self.manager = manager
        self.limits = limits
        self._html = page_html()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(PAGE_PATH, self.page)
        app.router.add_get(PAGE_PATH + "/", self.page)
        app.router.add_get(MODELS_PATH, self.models)
        app.router.add_get(EXAMPLES_PATH, self.examples)

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._html,
            content_type="text/html",
            charset="utf-8",
            headers={
                "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                "Cache-Control": "no-cache",
                "X-Content-Type-Options": "nosniff",
            },
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(describe_models(self.manager, self.limits))

    async def examples(self, request: web.Request) -> web.StreamResponse:
        """A file of a served version's example drawings; 404 for anything else."""
        entry = self.manager.models.get(request.match_info["name"])
        version = request.match_info["version"]
        servable = entry and version.isdigit() and entry.servables.get(int(version))
        path = servable and _examples_file(servable.path, request.match_info["path"])
        if not path or not os.path.isfile(path):
            raise web.HTTPNotFound(text="no such example file")
        kind = EXAMPLE_TYPES.get(os.path.splitext(path)[1], "text/plain")
        return web.FileResponse(
            path, headers={"Content-Type": kind, "X-Content-Type-Options": "nosniff"}
        )


def _examples_file(version_dir: str, name: str) -> str | None:
    """The path of `name` inside the version's examples folder, or None if `name` would
    lead outside it."""
    root = os.path.realpath(os.path.join(version_dir, layout.ASSETS_EXTRA, EXAMPLES_FOLDER))
    path = os.path.realpath(os.path.join(root, name))
    return path if path.startswith(root + os.sep) else None
