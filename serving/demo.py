"""The /demo page on the REST port: see a served model adapt (issue 27).

One static HTML file (`demo.html` beside this module, its script inline, nothing fetched
from elsewhere) and one JSON answer that TF Serving's REST API has no equivalent of: the
names of the served models, their loaded versions and labels, what each version's export
says it is (`viable_model.json`: sine regression or a classifier of images, the input
shape, the number of classes) and the server's request limits. Everything else the page
asks through the REST API itself (`GET /v1/models/NAME`, `/metadata`, `:predict`), as any
other client would.

The page is on by default and `--demo=false` turns it off; the REST API's routes and
answers are the same either way.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import asdict

from aiohttp import web

from serving.checks import Limits
from serving.manager import ModelManager

PAGE_PATH = "/demo"
MODELS_PATH = "/demo/models"
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
            versions.append({"version": version, **description})
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
