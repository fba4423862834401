"""The API page at /docs, offline: Swagger UI from an installed package, and an Authorize button.

The page's scripts come from the `fastapi-offline` wheel (Swagger UI and ReDoc files), served
by the control plane itself, so the page works on a cluster with no way out to a CDN. The
OpenAPI document declares the bearer API key, so "Authorize" takes a key and every "Try it
out" sends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs/assets"
SCHEME = "apiKey"

# Routes anyone may call: no key is asked for there.
PUBLIC = ("/healthz", "/readyz", "/metrics")


def install(app: FastAPI) -> None:
    """Add /docs, /redoc and their assets; the app must be made with docs_url=None."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True},
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )

    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = plain()
        schema.setdefault("components", {})["securitySchemes"] = {
            SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key (tenant), a node token, or the admin token: "
                "sent as `Authorization: Bearer <key>`.",
            }
        }
        for path, operations in schema.get("paths", {}).items():
            if path in PUBLIC:
                continue
            for operation in operations.values():
                operation["security"] = [{SCHEME: []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
