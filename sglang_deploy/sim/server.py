"""A simulated SGLang server: SGLang's command line and HTTP API, with the speed of a modelled GPU host.

It stands in for the GPU server only, and says so everywhere: its logs, ``/server_info``
(``"simulated": true``) and ``/model_info``. Tokens are emitted in real time at the rate the hardware
model gives, so clients measure wall-clock time exactly as against a real server.

Standard library only (it runs with the simulated host's system python3).

Environment knobs (all optional; faults are planted by a test profile's ``environment:``):
  SGLANG_SIM_MACHINE / SGLANG_SIM_MODEL   data files under data/ (default 2xa6000-pcie, qwen3.6-27b-fp8)
  SGLANG_SIM_START_SECONDS                weight loading + graph capture time (default 3)
  SGLANG_SIM_SEED                         timing-noise seed (default: random per process)
  SGLANG_SIM_P2P=0                        the board has no working GPU peer-to-peer
  SGLANG_SIM_CRASH_AT_START=1             the scheduler dies while loading weights (SIGKILL, as SGLang)
  SGLANG_SIM_HANG_AT_START=1              never become healthy
  SGLANG_SIM_DIE_AFTER_REQUESTS=N         the scheduler dies after N generation requests (SIGKILL)
  SGLANG_SIM_EXIT0_AFTER_REQUESTS=N       ... exits with status 0 after N requests (a CUDA fault that exits 0)
  SGLANG_SIM_FAULT_OUTPUT=garbage|wrong-answers|diverge   broken answers (engine.py OUTPUT_FAULTS)
  SGLANG_SIM_FAULT_OUTPUT_AT_STEPS=N                    ... only in a release with N speculative steps
  SGLANG_SIM_SLOWDOWN_PCT=X               every cycle X % slower (a regression only a benchmark sees)
  SGLANG_SIM_GENERATE_5XX=1               generation endpoints answer 500
  SGLANG_SIM_ACCEPT_COLLAPSE=1            speculative acceptance collapses (tau ~1.2)
  SGLANG_SIM_ACCEPT_COLLAPSE_AFTER=N      ... after N generation requests of this process (decay over uptime;
                                          a restart brings acceptance back)
  SGLANG_SIM_STREAM_ERROR_AFTER=N         a /generate stream ends with SGLang's in-band error chunk after N tokens
  SGLANG_SIM_STREAM_ABORT_AFTER=N         a /generate stream's last chunk is an abort after N tokens
  SGLANG_SIM_GRAPH_CAPTURE_FAIL=1         decode CUDA graph capture fails: the server dies, as SGLang does
  SGLANG_SIM_FAULT_SLOW_RESOLVED=DEST=JSON every cycle 25 % slower where the resolution holds that value (an upgrade's
                                        changed default that costs speed: engine.slow_resolved)
  SGLANG_SIM_FAULT_SPEC_GRAPH_DOWNGRADE=1 speculative decode runs eager (vllm#35387): slower than none
  SGLANG_SIM_AUTH_BROKEN=1                the API key is configured but not enforced (any request is served)
  SGLANG_SIM_RESOLVED=FILE                SGLang's resolution of this command line (validate/resolution.py); by
                                          default the release's resolved.json whose argv matches

What /server_info reports is SGLang's own resolution of the command line (``resolved.json``, computed by
the pinned SGLang's parser and resolution hooks and shipped with the release), plus what only the
running process knows (internal_states, the runtime graph batch limit): the simulator keeps no copy
of SGLang's defaults.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from . import multinode
from sglang_deploy.validate import flag_table  # shipped next to this package on a simulated host

from .engine import SGLANG_VERSION, Engine, die_like_a_failed_scheduler, log
from .http_api import handler_for
from .startup import load_and_capture


# --- command line ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """SGLang's own option table (exported from the real parser) rebuilt with argparse (validate/flag_table.py)."""
    table = flag_table.load(SGLANG_VERSION)
    return flag_table.build_parser(table, parser_class=argparse.ArgumentParser)


def merge_config(argv: list[str]) -> list[str]:
    """--config FILE: YAML 'flag-name: value' lines become flags in front of the command line."""
    if "--config" not in argv:
        return argv
    position = argv.index("--config")
    path = argv[position + 1]
    config_args = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        value = json.loads(value) if value.startswith('"') else value
        if value in ("true", True):
            config_args.append(f"--{key.replace('_', '-')}")
        elif value not in ("false", False):
            config_args += [f"--{key.replace('_', '-')}", str(value)]
    return config_args + argv[:position] + argv[position + 2:]


# --- start-up -------------------------------------------------------------------------------------

def fail(message: str) -> int:
    log.error(message)
    return 1


# hostside/contract/paths.STORE_ROOT, spelled again: the simulator is shipped to its host without the host package
STORE_ROOT = os.environ.get("SGLANG_DEPLOY_STORE", "/var/lib/sglang-deploy")


def without_config(argv: list[str]) -> list[str]:
    if "--config" not in argv:
        return list(argv)
    position = argv.index("--config")
    return argv[:position] + argv[position + 2:]


def load_resolution(argv: list[str], env: dict) -> tuple[dict | None, str]:
    """SGLang's resolution of this command line: SGLANG_SIM_RESOLVED, else the resolved.json of a staged
    release whose argv is this one (the unit's argv without --config)."""
    if env.get("SGLANG_SIM_RESOLVED"):
        path = env["SGLANG_SIM_RESOLVED"]
        return json.loads(Path(path).read_text()), path
    wanted = without_config(argv)
    for path in sorted(Path(STORE_ROOT).glob("*/releases/*/resolved.json"), reverse=True):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if document.get("argv") == wanted:
            return document, str(path)
    return None, f"{STORE_ROOT}/*/releases/*/resolved.json"


def startup_errors(args: argparse.Namespace, engine: Engine) -> str | None:
    """The checks real SGLang makes before serving, with its kind of messages."""
    model_dir = Path(args.model_path)
    if not (model_dir / "config.json").exists():
        return f"OSError: {args.model_path} does not appear to have a file named config.json"
    if (args.tp_size or 1) > engine.machine["gpu_count"] * (args.nnodes or 1):
        return (f"RuntimeError: tp_size={args.tp_size} but only {engine.machine['gpu_count']} GPUs are visible "
                "(CUDA error: invalid device ordinal)")
    if args.speculative_adaptive and engine.model.get("hybrid"):
        return "RuntimeError: adaptive speculative decoding is not supported for hybrid GDN models (illegal memory access)"
    return None




def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    if argv[:1] == ["version"]:
        print(f"sglang version: {SGLANG_VERSION} (SIMULATED by sglang-deploy)")
        return 0
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    parser = build_parser()
    try:
        merged = merge_config(argv)
    except (OSError, IndexError, ValueError) as error:
        print(f"sglang serve: error: --config: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(merged)  # unknown, removed or ambiguous flags exit 2, as in SGLang
    env = dict(os.environ)
    log.info("SIMULATED SGLang %s (sglang-deploy simulator, no GPU is used)", SGLANG_VERSION)
    resolution, where = load_resolution(argv, env)
    if resolution is None:
        return fail(f"SIMULATED: no SGLang resolution for this command line in {where}; the simulator serves only "
                    "what the pinned SGLang's own code resolved (sglang_deploy.validate.resolution)")
    for line in resolution.get("log") or []:  # what SGLang's resolution logged at launch
        log.warning(line)
    if resolution.get("error"):  # SGLang's resolution raised: the launcher dies with it
        return fail(resolution["error"])
    resolved = dict(resolution["resolved"])
    # build_server_info: resolved_dict() carries the key; launch_command is the argv after the --config merge.
    served = {**resolved, "api_key": args.api_key, "launch_command": " ".join(merged)}
    log.info("server_args=%s", served)  # engine.py logs resolved_dict() at start, key included
    engine = Engine(args, env, resolved)
    error = startup_errors(args, engine)
    if error:
        return fail(error)
    signal.signal(signal.SIGTERM, lambda *_: (log.info("Received SIGTERM, shutting down"), os._exit(0)))
    error = multinode.rendezvous(args.nnodes or 1, args.node_rank or 0, args.dist_init_addr,
                                 float(args.dist_timeout or 1800), die_like_a_failed_scheduler)
    if error:
        return fail(error)
    if (args.nnodes or 1) > 1:
        engine.eff = __import__("dataclasses").replace(engine.eff, custom_allreduce=False)
        log.warning(multinode.SPANS_NODES)

    start_seconds = float(env.get("SGLANG_SIM_START_SECONDS", "3"))
    load_and_capture(engine, resolved, env, args.context_length, die_like_a_failed_scheduler)
    if args.node_rank:  # engine.py: only node rank 0 runs the tokenizer manager and the HTTP server
        log.info("node rank %d: schedulers ready; serving no HTTP (rank 0 serves) (SIMULATED)", args.node_rank)
        threading.Event().wait()
    # http_server.py: uvicorn starts only once the schedulers are ready (connections are refused until
    # then); /health answers 503 during the warmup request, then the server is up.
    status = {"up": False}
    httpd = ThreadingHTTPServer((args.host, args.port), handler_for(engine, served, status))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True, name="http").start()
    threading.Thread(target=engine.loop, daemon=True, name="engine").start()
    warmup = engine.submit("The capital city of France is", {"max_new_tokens": 1, "temperature": 0}, counted=False)
    while warmup.events.get(timeout=600)[0] != "done":
        pass
    time.sleep(start_seconds * 0.1)
    status["up"] = True
    log.info("The server is fired up and ready to roll! (SIMULATED)")
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
