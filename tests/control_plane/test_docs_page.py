"""/docs works offline (its scripts served by the control plane) and can authenticate."""

from __future__ import annotations

import re

from tests.control_plane.conftest import Api


def test_docs_page_loads_everything_from_the_server_itself(api: Api) -> None:
    page = api.http.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    urls += re.findall(r"""url: ?["']([^"']+)["']""", page.text)
    assert urls and all(u.startswith("/") for u in urls), urls  # no CDN, no other host
    for url in urls:
        asset = api.http.get(url)
        assert asset.status_code == 200, url
    js = api.http.get("/docs/assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    redoc = api.http.get("/redoc")
    assert redoc.status_code == 200 and "fonts.googleapis" not in redoc.text
    assert "/docs/assets/redoc.standalone.js" in redoc.text


def test_openapi_declares_the_api_key_for_authorize(api: Api) -> None:
    schema = api.http.get("/openapi.json").json()
    scheme = schema["components"]["securitySchemes"]["apiKey"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    assert schema["paths"]["/v1/allocations"]["post"]["security"] == [{"apiKey": []}]
    assert schema["paths"]["/v1/tenants"]["post"]["security"] == [{"apiKey": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]


def test_a_key_given_as_authorize_sends_it_works(api: Api) -> None:
    # What Swagger UI sends after Authorize: `Authorization: Bearer <key>`.
    _, headers = api.tenant(quota=1)
    assert headers["Authorization"].startswith("Bearer ")
    assert api.http.get("/v1/holds", headers=headers).status_code == 200
    assert api.http.get("/v1/holds").status_code == 401
