"""SGLang's own parse and whole resolution of one command line: what `sglang serve` runs before it starts a process.

The steps, in the order of SGLang's ``Engine._launch_subprocesses`` (entrypoints/engine.py:1153-1169):
``prepare_server_args`` (the parse), ``ServerArgs.resolve_once()`` (every step of ``run_resolution_pipeline``),
``_set_envs_and_config`` (its environment, the kernel package's version asserts), ``check_server_args()`` (about 25
asserts: arg_groups/validation_hook.py) and ``resolve_auto_parsers``. A refusal at any of them is SGLang's own
message with the step that raised it. The answer is SGLang's own ``ServerArgs.resolved_dict()`` after all of them.

Standard library + sglang only. Used in two places, one file: the controller's validator env runs it through
sglang_deploy/validate/parser_probe.py (loaded by path, with the target's GPU facts from the GPU stand-in), and the host's
preflight runs it in the release's own venv with the host's real GPUs (hostside/preflight/runner.py), so a command line
the pinned SGLang refuses on that host is refused before anything running is touched.
"""

import ast
import builtins
import importlib.util
import json
import logging
import os
import shutil
import tempfile


class _CapturedLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _replace_strings(value, old, new):
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_strings(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _replace_strings(item, old, new) for key, item in value.items()}
    return value


def _config_directory(config):
    """A checkpoint's config.json (an input of SGLang's ModelConfig, and of the DFLASH block size for a draft
    model) in a directory of its own, standing in for the path the host has; None without a config."""
    if config is None:
        return None
    directory = tempfile.mkdtemp(prefix="sglang-deploy-model-")
    with open(os.path.join(directory, "config.json"), "w") as out:
        json.dump(config, out)
    return directory


# (the flag whose path a config stands in for, the request's key for that config)
STAND_INS = (("--model-path", "model_config"), ("--speculative-draft-model-path", "draft_config"))
# What the process itself needs to run (the interpreter, the GPU stand-in's facts and stub driver), kept when a request
# states the environment the server will have: nothing else of the environment this process was started with
# (the operator's shell) reaches SGLang's code, so the verdict depends on the request alone.
MACHINERY = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE",
             "SGLANG_DEPLOY_GPU_FACTS", "SGLANG_DEPLOY_GPU_STANDIN")


def _environment_for(request, environ):
    """The environment SGLang's code runs under: as this process was started (the host's preflight, which runs
    under the unit's own EnvironmentFile), or, when the request states one (the controller's check), exactly that
    environment over the process's own machinery."""
    if "environment" not in request:
        return dict(environ)
    out = {name: value for name, value in environ.items() if name in MACHINERY}
    out.update({str(name): str(value) for name, value in (request["environment"] or {}).items()})
    return out


ENGINE_MODULE = "sglang.srt.entrypoints.engine"


def engine_function(name):
    """SGLang's own `name` from its engine module, without importing that module: the function's source compiled
    from the module's file, with the module-level bindings it names (its imports and assignments, in file order, to
    a fixpoint). Importing the engine imports the whole server (the scheduler, uvloop, zmq...): about 7 CPU-s more
    per preflight than the function needs. None where the module has no such function; ImportError (the first
    missing package) where the engine module itself would not import here: its third-party imports are checked
    first, so this answers as `from sglang.srt.entrypoints import engine` would. tests/test_resolution.py holds the
    result to the imported module's own function (same bytecode, same bound objects)."""
    spec = importlib.util.find_spec(ENGINE_MODULE)
    if spec is None or not spec.origin:
        raise ImportError(f"No module named {ENGINE_MODULE!r}")
    with open(spec.origin) as handle:
        tree = ast.parse(handle.read(), spec.origin)
    for node in tree.body:  # the engine's own third-party imports, as its import would meet them
        roots = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        for root in (module.split(".")[0] for module in roots):
            if root not in ("sglang", "__future__") and importlib.util.find_spec(root) is None:
                raise ImportError(f"No module named {root!r}")
    bindings, function = {}, None  # module-level name -> the statement (one alias of an import) that binds it
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            for alias in node.names:
                single = type(node)(names=[alias], **({"module": node.module, "level": node.level}
                                                       if isinstance(node, ast.ImportFrom) else {}))
                bindings[alias.asname or alias.name.split(".")[0]] = ast.copy_location(single, node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bindings[target.id] = node
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if node.name == name:
                function = node
            else:
                bindings[node.name] = node
    if function is None:
        return None
    chosen, pending = {}, [function]
    while pending:
        for used in {n.id for n in ast.walk(pending.pop()) if isinstance(n, ast.Name)}:
            statement = bindings.get(used)
            if statement is not None and id(statement) not in chosen and not hasattr(builtins, used):
                chosen[id(statement)] = statement
                pending.append(statement)
    body = sorted(chosen.values(), key=lambda node: (node.lineno, node.col_offset)) + [function]
    code = compile(ast.Module(body=body, type_ignores=[]), spec.origin, "exec",
                   flags=__import__("__future__").annotations.compiler_flag, dont_inherit=True)
    namespace = {"__name__": ENGINE_MODULE, "__file__": spec.origin, "__builtins__": builtins}
    exec(code, namespace)  # noqa: S102 - SGLang's own source, from its installed file
    return namespace[name]


def _launch_checks(skipped):
    """What `sglang serve` runs after resolve_once() and before it spawns a process (Engine._launch_subprocesses),
    as (step name, function of server_args). _set_envs_and_config lives in SGLang's engine module, whose import needs
    the whole server stack (uvloop, zmq...): the host's preflight runs it (engine_function) in the release's venv;
    the controller's validator env has no server stack, so there it is listed in `skipped` (its checks are the
    installed kernel packages' versions, a property of the host's venv, not of the profile)."""
    steps = []
    try:
        set_envs = engine_function("_set_envs_and_config")
    except ImportError as error:
        skipped.append(f"_set_envs_and_config (the engine module does not import here: {error})")
    else:
        if set_envs is not None:
            steps.append(("_set_envs_and_config", set_envs))
    steps.append(("check_server_args", lambda server_args: server_args.check_server_args()))
    try:
        # deferred: optional, SGLang is in the validator's and the release's virtualenv only
        from sglang.srt.parser.template_detection import resolve_auto_parsers
    except ImportError:
        pass
    else:
        steps.append(("resolve_auto_parsers", resolve_auto_parsers))
    return steps


def resolve(request):
    """SGLang's own parse (prepare_server_args) and its whole resolution (ServerArgs.resolve_once: every step of
    run_resolution_pipeline) for one argv, under the GPU facts this process was started with (gpu_standin), and
    the answer SGLang's own ServerArgs.resolved_dict() gives: the projection /server_info serves."""
    # deferred: optional, SGLang is in the validator's and the release's virtualenv only
    from sglang.srt.arg_groups import pipeline
    from sglang.srt.server_args import prepare_server_args

    argv = list(request["argv"])
    stand_ins = []  # (the host's path, the stand-in directory)
    for flag, key in STAND_INS:
        directory = _config_directory(request.get(key)) if flag in argv else None
        if directory is not None:
            stand_ins.append((argv[argv.index(flag) + 1], directory))
            argv[argv.index(flag) + 1] = directory
    steps = []
    real_hook, real_pass = pipeline.run_hook, pipeline.run_post_process_pass

    def traced_hook(builtin, server_args):
        steps.append(builtin.__name__)
        return real_hook(builtin, server_args)

    def traced_pass(server_args, fn):
        steps.append(getattr(fn, "__name__", str(fn)))
        return real_pass(server_args, fn)

    environ = dict(os.environ)  # steps may set variables; each request starts from the same environment
    os.environ.clear()
    os.environ.update(_environment_for(request, environ))
    captured = _CapturedLog()
    logging.disable(logging.NOTSET)
    root = logging.getLogger("sglang")  # not the root logger: a step that reconfigures logging would drop the handler
    level = root.level
    root.addHandler(captured)
    root.setLevel(logging.INFO)
    pipeline.run_hook, pipeline.run_post_process_pass = traced_hook, traced_pass
    error, step, resolved, skipped = None, None, None, []
    try:
        try:
            server_args = prepare_server_args(argv)
        except SystemExit:  # argparse refused the argv: the parse results already say why
            return {"resolved": None, "steps": [], "step": "parse", "log": [],
                    "error": "SGLang's parser refuses the command line", "full": True}
        try:
            server_args.resolve_once()
        except Exception as failure:  # noqa: BLE001 - SGLang's own refusal is the answer
            error = f"{type(failure).__name__}: {failure}"
            step = steps[-1] if steps else "resolve_once"
        if error is None:
            for name, check in _launch_checks(skipped):
                steps.append(name)
                try:
                    check(server_args)
                except Exception as failure:  # noqa: BLE001 - SGLang's own refusal is the answer
                    error, step = f"{type(failure).__name__}: {failure}", name
                    break
        resolved = server_args.resolved_dict() if error is None else None
    finally:
        pipeline.run_hook, pipeline.run_post_process_pass = real_hook, real_pass
        root.removeHandler(captured)
        root.setLevel(level)
        logging.disable(logging.CRITICAL)
        prometheus = os.environ.get("PROMETHEUS_MULTIPROC_DIR")  # made by _set_envs_and_config with --enable-metrics
        if prometheus and prometheus != environ.get("PROMETHEUS_MULTIPROC_DIR"):
            shutil.rmtree(prometheus, ignore_errors=True)
        os.environ.clear()
        os.environ.update(environ)
        for _, directory in stand_ins:
            shutil.rmtree(directory, ignore_errors=True)
    lines = captured.lines
    if resolved is not None:
        for secret in ("api_key", "admin_api_key"):
            resolved.pop(secret, None)
        if "--random-seed" not in argv:  # drawn anew at every start: not part of what a release is
            resolved.pop("random_seed", None)
        resolved = json.loads(json.dumps(resolved, default=str))
    for path, directory in stand_ins:
        resolved = _replace_strings(resolved, directory, path)
        lines = _replace_strings(lines, directory, path)
        error = _replace_strings(error, directory, path)
    return {"resolved": resolved, "steps": steps, "step": step, "error": error, "log": lines, "full": True,
            "skipped": skipped}
