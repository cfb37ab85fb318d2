"""An SGLang release's own `sglang serve` on this machine (default: the newest reviewed), with only its Scheduler replaced (sglang_deploy/sim/
sglang_scheduler.py): the same front end the simulated host runs, without the container, for tests of what a
client sees (outside clients, the differential test against the model-only simulator).

Started like the simulated host's unit starts it: the front-end layer's python (testbed/sglang_env.py), the GPU
stand-in's facts, stub libcuda.so.1 and nvidia-smi, and an entry point that loads the Scheduler plugin. About 20 s
to healthy and 4 GB of memory (three SGLang processes and the main one): start one per test module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_deploy.validate import gpu_facts

from sglang_deploy.validate import validator_env
from sglang_deploy.validate.resolution import load_model_config
from sglang_deploy.sim import synthetic_checkpoint
from testbed import sglang_env
from testbed.local_sim import MODEL_CONFIG, SGLANG_VERSION, free_port, wait_healthy

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIM = """#!{python}
import sys
from sglang.cli.main import main
if __name__ == "__main__":
    sys.exit(main())
"""
ENTRY_POINTS = "[sglang.srt.plugins]\nsimulated_scheduler = sglang_deploy.sim.sglang_scheduler:register\n"


def model_dir(path: Path) -> str:
    """The synthetic checkpoint as the simulated host gets it: headers only, the profile's config.json, a tokenizer."""
    synthetic_checkpoint.write(str(path), header_only=True, config=load_model_config(MODEL_CONFIG))
    return str(path)


class LocalSGLang:
    def __init__(self, flags: list[str], env: dict | None, model_dir: str, port: int | None = None,
                 version: str = SGLANG_VERSION):
        self.version = version  # whose front end (its validator env and front-end layer)
        self.port = port or free_port()
        self.model_dir = model_dir
        self.flags = flags
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.work = Path(tempfile.mkdtemp(prefix="local-sglang-"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [str(self.work / "sglang"), "serve", "--model-path", self.model_dir, "--host", "127.0.0.1",
                "--port", str(self.port), *self.flags]

    def environment(self) -> dict:
        python = sglang_env.ensure(self.version, quiet=True)
        standin = validator_env.standin_dir(self.version)
        plugin = self.work / "plugin"
        (plugin / "sglang_deploy_sim_scheduler-0.dist-info").mkdir(parents=True, exist_ok=True)
        (plugin / "sglang_deploy_sim_scheduler-0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: sglang-deploy-sim-scheduler\nVersion: 0\n")
        (plugin / "sglang_deploy_sim_scheduler-0.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
        shim = self.work / "sglang"
        shim.write_text(SHIM.format(python=python))
        shim.chmod(0o755)
        return {**os.environ, "SGLANG_SIM_START_SECONDS": "0.4", **self.extra_env,
                "SGLANG_DEPLOY_GPU_FACTS": gpu_facts.facts_json(gpu_facts.model(gpu_facts.DEFAULT_MODEL), 2),
                "LD_LIBRARY_PATH": str(standin / "lib"), "PATH": f"{standin / 'bin'}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": f"{plugin}{os.pathsep}{REPO_ROOT}", "PYTHONUNBUFFERED": "1"}

    def start(self, log_path: Path) -> "LocalSGLang":
        self.log_path = log_path
        env = self.environment()
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work,
                                            start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 180) -> "LocalSGLang":
        wait_healthy(self, "sglang serve", timeout, poll_s=0.5)
        return self

    def wait_exit(self, timeout: float = 120) -> int:
        return self.process.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.process:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # the schedulers and the detokenizer too
            except ProcessLookupError:
                pass

    def bench(self, *args: str, api_key_file: str | None = None) -> dict:
        """Measure with the gate's own client (hostside/bench.py)."""
        extra = ["--api-key-file", api_key_file] if api_key_file else []
        result = subprocess.run([sys.executable, "-m", "sglang_deploy.hostside.bench", "--url", self.url, *extra,
                                 *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        return json.loads(result.stdout)
