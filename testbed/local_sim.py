"""Run the simulator as a local process (tests, benchmarks): no container, same HTTP interface."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from sglang_deploy import releases
from sglang_deploy.validate import gpu_facts
from sglang_deploy.validate.resolution import load_model_config, resolve_argv

REPO_ROOT = Path(__file__).resolve().parents[1]
SGLANG_VERSION = releases.newest_reviewed()  # the newest reviewed release (sglang_deploy/releases/)
ARCHITECTURE = "Qwen3_5ForConditionalGeneration"  # the simulated checkpoint's (data/qwen3.6-27b-fp8.json)
MODEL_CONFIG = "manifests/Qwen--Qwen3.6-27B-FP8/config.reconstructed.json"  # SGLang's resolution reads it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalSim:
    """A simulator process on 127.0.0.1 with the given flags and environment."""

    def __init__(self, flags: list[str], env: dict | None = None, model_dir: str | None = None, port: int | None = None,
                 draft_config: dict | None = None):
        self.draft_config = draft_config  # a draft model's config.json (DFLASH: its block size), resolved with
        self.port = port or free_port()
        self.model_dir = model_dir
        self.flags = flags
        self.env = {**os.environ, "SGLANG_SIM_START_SECONDS": "0.4", **(env or {})}
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "sglang_deploy.sim.server", "serve", "--model-path", self.model_dir,
                "--host", "127.0.0.1", "--port", str(self.port), *self.flags]

    def start(self, log_path: Path) -> "LocalSim":
        """Resolve the command line with the pinned SGLang's own code (as a deploy ships resolved.json),
        then start the simulator on it."""
        self.log_path = log_path
        server_argv = self.argv()[4:]
        if "--api-key" in server_argv:  # the key does not change the resolution; keep it out of the cache
            position = server_argv.index("--api-key")
            server_argv = server_argv[:position] + server_argv[position + 2:]
        document = resolve_argv(SGLANG_VERSION, server_argv, load_model_config(MODEL_CONFIG),
                                gpu_facts.model(gpu_facts.DEFAULT_MODEL), 2, self.draft_config)
        resolved_path = log_path.with_name(log_path.name + ".resolved.json")
        resolved_path.write_text(json.dumps(document))
        self.env = {**self.env, "SGLANG_SIM_RESOLVED": str(resolved_path)}
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            cwd=REPO_ROOT)
        return self

    def wait_ready(self, timeout: float = 30) -> "LocalSim":
        wait_healthy(self, "simulator", timeout, poll_s=0.1)
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def bench(self, *args: str) -> dict:
        """Measure with the gate's own client (hostside/bench.py)."""
        result = subprocess.run([sys.executable, "-m", "sglang_deploy.hostside.bench", "--url", self.url, *args],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        return json.loads(result.stdout)


def stub_model_dir(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": [ARCHITECTURE], "simulated": True}))
    return str(path)


def wait_healthy(server, name: str, timeout: float, poll_s: float) -> None:
    """Until `server` (a local process with .process, .url, .log()) answers /health 200; its log on failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{name} exited with {server.process.returncode}:\n{server.log()[-4000:]}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"{name} not ready within {timeout} s:\n{server.log()[-4000:]}")
