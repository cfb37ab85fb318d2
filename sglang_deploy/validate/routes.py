"""SGLang's HTTP route table and each route's auth level, read from that release's own code, as data.

    releases/<version>/routes.json: {"routes": [{"path", "methods", "level", "module", "line", "when"}]}

Derived (``export``) from the release's source, not listed by hand: every ``@app.<verb>``/``@app.api_route``/
``@router.<verb>`` decorator of ``sglang/srt/entrypoints/http_server.py`` and of the routers it includes, with the
``@auth_level(AuthLevel.X)`` beside it (none: ``normal``), the route's path as SGLang computes it with the tool's
environment (``os.environ.get(NAME, default)``: the default; the tool's allow-list admits none of those names) and
the condition a route is registered under (``when``, the source text of the enclosing ``if``).

What a route answers to is then SGLang's own decision (``sglang/srt/utils/auth.py decide_request_auth``), run with the
keys the tool configures: ``public`` (answers without a key: SGLang exempts paths by prefix), ``admin`` (only the
admin key, which the tool generates and gives to nobody) and ``authenticated`` (the API key). ``REVIEWED_PUBLIC`` is
the short list of public routes a reviewer accepted; a release whose table has another public route fails its test
(tests/test_routes.py), and the simulated host walks the live app's table (tests/test_frontend_sim.py).
"""

from __future__ import annotations

import ast
import json
import types
from functools import lru_cache
from pathlib import Path

RELEASES_DIR = Path(__file__).resolve().parent.parent / "releases"
ENTRYPOINT = "sglang/srt/entrypoints/http_server.py"
VERBS = {"get": ["GET"], "post": ["POST"], "put": ["PUT"], "delete": ["DELETE"], "patch": ["PATCH"],
         "head": ["HEAD"], "options": ["OPTIONS"], "websocket": ["WEBSOCKET"]}
LEVELS = ("normal", "admin_optional", "admin_force")
# Public routes a reviewer accepted, with why; SGLang exempts every path starting /health, /ready or /metrics
# from its keys (sglang/srt/utils/auth.py). /health_generate runs one short generation for whoever reaches the port
# (security review 4, B3): kept public because SGLang gives no way to close it, the port is the service's only one.
REVIEWED_PUBLIC = {
    "/health": "liveness for probes and the tool's readiness",
    "/health_generate": "SGLang's own exemption (prefix /health): one generation of a few tokens; no key can close it",
    "/ready": "readiness for probes",
    "/metrics": "Prometheus scraping, only where the profile sets --enable-metrics",
}


def routes_path(version: str) -> Path:
    return RELEASES_DIR / version / "routes.json"


@lru_cache(maxsize=8)
def load(version: str) -> list[dict]:
    """The route table of SGLang <version> (empty when none was exported for it)."""
    try:
        return json.loads(routes_path(version).read_text())["routes"]
    except FileNotFoundError:
        return []


def _string(node, constants: dict) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    # os.environ.get("NAME", "default"): the tool's environment sets no such name (env_rules.ALLOWED_ENV)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and ast.unparse(node.func.value) == "os.environ" and len(node.args) == 2):
        return _string(node.args[1], constants)
    return None


def _level(decorators) -> str:
    for decorator in decorators:
        if (isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "auth_level" and decorator.args
                and isinstance(decorator.args[0], ast.Attribute)):
            return decorator.args[0].attr.lower()
    return "normal"


def _routes_of(path: Path, module: str, owners: set[str]) -> list[dict]:
    tree = ast.parse(path.read_text(), filename=str(path))
    constants: dict = {}
    found: list[dict] = []

    def visit(body, when):
        for node in body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _string(node.value, constants)
                if value is not None:
                    constants[node.targets[0].id] = value
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                level = _level(node.decorator_list)
                for decorator in node.decorator_list:
                    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                            and isinstance(decorator.func.value, ast.Name) and decorator.func.value.id in owners):
                        continue
                    verb = decorator.func.attr
                    if verb not in VERBS and verb != "api_route":
                        continue
                    route = _string(decorator.args[0], constants) if decorator.args else None
                    if route is None and when:  # registered only where a variable names it (registered())
                        route = f"<{ast.unparse(decorator.args[0])}>"
                    elif route is None:
                        raise ValueError(f"{module}:{decorator.lineno}: a route whose path is not a string")
                    methods, in_schema = VERBS.get(verb, ["GET"]), True
                    for keyword in decorator.keywords:
                        if keyword.arg == "methods":
                            methods = [element.value for element in keyword.value.elts]
                        if keyword.arg == "include_in_schema" and isinstance(keyword.value, ast.Constant):
                            in_schema = bool(keyword.value.value)
                    found.append({"path": route, "methods": sorted(methods), "level": level, "module": module,
                                  "line": decorator.lineno, "when": when, "in_schema": in_schema})
            elif isinstance(node, ast.If):
                condition = ast.unparse(node.test)
                visit(node.body, condition if not when else f"{when} and {condition}")
                visit(node.orelse, f"not ({condition})" if not when else f"{when} and not ({condition})")

    visit(tree.body, "")
    return found


def export(site_packages: Path) -> dict:
    """The route table of the SGLang installed in site_packages, from its source: http_server's routes and those of
    every router it includes (``app.include_router(name)``, name imported from a sibling module)."""
    entry = Path(site_packages) / ENTRYPOINT
    routes = _routes_of(entry, ENTRYPOINT, {"app"})
    tree = ast.parse(entry.read_text())
    imported = {alias.asname or alias.name: (node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and ast.unparse(node.func) == "app.include_router" and node.args
                and isinstance(node.args[0], ast.Name)):
            module, name = imported[node.args[0].id]
            relative = module.replace(".", "/") + ".py"
            routes += _routes_of(Path(site_packages) / relative, relative, {name})
    routes.sort(key=lambda route: (route["path"], route["methods"]))
    return {"source": "sglang_deploy.validate.routes.export: the release's own route decorators and @auth_level",
            "routes": routes}


class _Unset(dict):
    """Module names a route condition reads: None (the tool's environment sets none of SGLang's route variables)."""

    def __missing__(self, key):
        return None


def registered(routes: list[dict]) -> list[dict]:
    """The routes SGLang registers in the tool's environment: each route's condition (`when`) evaluated with an
    empty os.environ and every module name it reads unset."""
    names = _Unset(os=types.SimpleNamespace(environ={}))
    return [route for route in routes if not route["when"] or eval(route["when"], {"__builtins__": {}}, names)]  # noqa: S307


def decide(level: str, path: str, key: str | None, api_key: str, admin_key: str, decide_request_auth, auth_level):
    """SGLang's own decision for one request (decide_request_auth and AuthLevel passed in from the release's
    sglang.srt.utils.auth): whether it is allowed."""
    header = f"Bearer {key}" if key else None
    return decide_request_auth(method="GET", path=path, authorization_header=header, api_key=api_key,
                               admin_api_key=admin_key, auth_level=auth_level(level)).allowed


def classify(routes: list[dict], decide_request_auth, auth_level) -> dict[str, list[str]]:
    """Each route path as SGLang decides it with the tool's two keys: public (no key), admin (the admin key only),
    authenticated (the API key)."""
    api, admin = "api-key-of-the-clients", "admin-key-of-the-tool"
    out: dict[str, list[str]] = {"public": [], "admin": [], "authenticated": []}
    for route in routes:
        path = route["path"]
        if decide(route["level"], path, None, api, admin, decide_request_auth, auth_level):
            kind = "public"
        elif decide(route["level"], path, api, api, admin, decide_request_auth, auth_level):
            kind = "authenticated"
        elif decide(route["level"], path, admin, api, admin, decide_request_auth, auth_level):
            kind = "admin"
        else:
            raise ValueError(f"{route['module']}:{route['line']}: {path} answers to no key")
        out[kind].append(path)
    return out
