"""The surface table (``gateway.surfaces.table``) is the one source of the app's client routes, the error dialect of a
path and the metrics' endpoint labels: they cannot drift apart (as ``/v1/models/`` once did: served as Gemini,
counted as ``other``)."""

from __future__ import annotations

import re

from starlette.routing import Route

from gateway.app.factory import HANDLERS, create_app
from gateway.app.settings import Settings
from gateway.ops import metrics
from gateway.surfaces.table import SURFACES, dialect_for_request, surface_for_path


def _concrete(route: str) -> str:
    return re.sub(r"\{[^}]+\}", "gemini-3-pro-preview:generateContent", route)


def test_every_route_of_a_surface_is_labelled_and_rendered_as_that_surface() -> None:
    for s in SURFACES:
        for route in s.routes:
            path = _concrete(route)
            assert surface_for_path(path, s.method) is s, path
            assert metrics.endpoint_of(path, s.method) == s.label and s.label in metrics.ENDPOINTS
            assert dialect_for_request(path, {}, method=s.method) == s.errors


def test_a_path_two_surfaces_share_is_told_apart_by_method() -> None:
    """``/v1/models/{id}``: GET is a model lookup (the SDKs' ``models.retrieve``), POST Gemini's generateContent; a
    method neither takes is the first one's (its 405 in Google's envelope)."""
    from gateway.surfaces.table import GENERATE_CONTENT, MODEL_GET, dialect_for_request

    path = "/v1/models/gpt-5"
    assert surface_for_path(path, "GET") is MODEL_GET and surface_for_path(path, "POST") is GENERATE_CONTENT
    assert surface_for_path(path, "DELETE") is GENERATE_CONTENT and surface_for_path(path) is GENERATE_CONTENT
    assert metrics.endpoint_of(path, "GET") == "models" and metrics.endpoint_of(path, "POST") == "generate_content"
    bearer, anthropic, goog = {"authorization": "Bearer k"}, {"x-api-key": "k"}, {"x-goog-api-key": "k"}
    assert [dialect_for_request(path, h, "", "GET") for h in (bearer, anthropic, goog, {})] == [
        "openai", "anthropic", "gemini", "gemini"]
    assert dialect_for_request(path, bearer, "", "POST") == "gemini"
    assert dialect_for_request("/v1beta/models/gpt-5", bearer, "", "GET") == "gemini"


def test_the_gemini_path_without_beta_is_generate_content_not_other() -> None:
    path = "/v1/models/gemini-3-pro-preview:streamGenerateContent"
    assert metrics.endpoint_of(path) == "generate_content" and dialect_for_request(path, {}) == "gemini"
    assert metrics.endpoint_of("/v1beta/unknown") == "generate_content"  # its error shape and label: Gemini's
    assert metrics.endpoint_of("/nowhere") == "other" and dialect_for_request("/nowhere", {}) == "anthropic"
    assert metrics.endpoint_of("/healthz") is None


def test_the_apps_client_routes_are_the_tables() -> None:
    app = create_app(Settings(), store=None, upstreams={})
    served = {(r.path, next(iter(set(r.methods or ()) - {"HEAD"})), r.endpoint) for r in app.routes
              if isinstance(r, Route) and surface_for_path(_concrete(r.path)) is not None}
    assert served == {(path, s.method, HANDLERS[s.label]) for s in SURFACES for path in s.routes}
    assert set(HANDLERS) == {s.label for s in SURFACES}


def test_one_routing_rule_with_one_error_for_every_surface() -> None:
    """``dialects.route``: a model is served when its upstream is configured and of a kind the surface calls;
    else the same 400 ``model_not_supported`` whatever the surface (it was written three times, three texts)."""
    from gateway.dialects.routing import Router
    from gateway.errors import ClientError
    from gateway.surfaces.common import route

    router = Router()
    assert route(router.caps_for("claude-opus-4-5"), {"anthropic"}, "claude-opus-4-5").upstream == "anthropic"
    for configured, kinds in (({"gemini"}, ("anthropic", "gemini", "openai")), ({"anthropic"}, ("gemini",))):
        try:
            route(router.caps_for("claude-opus-4-5"), configured, "claude-opus-4-5", kinds)
        except ClientError as e:
            assert (e.status, e.code) == (400, "model_not_supported")
            assert e.message == "no upstream configured for model claude-opus-4-5 that this endpoint can call"
        else:
            raise AssertionError("routed to an upstream the surface cannot call")
