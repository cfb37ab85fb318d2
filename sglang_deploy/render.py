"""Profile -> the files a release installs on the host (unit, environment, secrets)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .flags import exec_start_args, exec_start_line
from .layout import ServiceLayout, venv_path
from .profile import Profile

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
_ENV_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]*$")
SECRET_MASK = "********"


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_environment(layout: ServiceLayout, venv: str, cuda_home: str | None = None) -> dict[str, str]:
    """Settings every SGLang service needs; the profile's environment is applied on top."""
    environment = {
        "HOME": layout.state_dir,
        "SGLANG_CACHE_DIR": layout.cache_dir,  # parent of the Triton/Inductor/FlashInfer JIT caches
        "HF_HOME": f"{layout.cache_dir}/huggingface",
        "HF_HUB_OFFLINE": "1",  # local checkpoint only: no hub access at start
    }
    if cuda_home:  # the pinned toolkit's nvcc for SGLang's JIT-compiled kernels, not whatever is on PATH
        environment["CUDA_HOME"] = cuda_home
        environment["PATH"] = f"{cuda_home}/bin:{venv}/bin:{SYSTEM_PATH}"
    return environment


def env_quote(value: str) -> str:
    if _ENV_SAFE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


@dataclass(frozen=True)
class Rendered:
    unit: str
    env: str
    secrets: str
    exec_start: list[str]
    environment: dict[str, str]


def _jinja() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(profile: Profile, api_key: str | None = None, port: int | None = None,
           cuda_home: str | None = None) -> Rendered:
    """Same profile and key -> byte-identical files. The key only ever lands in the secrets file."""
    layout = ServiceLayout(profile.service.name)
    secrets_file = layout.secrets_path if api_key else None
    venv = venv_path(profile)
    argv = exec_start_args(profile, venv, secrets_file, port)
    environment = {**base_environment(layout, venv, cuda_home), **profile.env_values()}
    env = _jinja()
    context = dict(profile=profile, service=profile.service, layout=layout, api_key=api_key)
    unit = env.get_template("sglang.service.j2").render(exec_start=exec_start_line(argv), **context)
    env_file = env.get_template("sglang.env.j2").render(
        environment={key: env_quote(value) for key, value in environment.items()}, **context)
    secrets = env.get_template("secrets.yaml.j2").render(**context)
    if api_key and (api_key in unit or api_key in env_file):
        raise AssertionError("the API key leaked into the unit or the environment file")
    return Rendered(unit=unit, env=env_file, secrets=secrets, exec_start=argv, environment=environment)


def mask_secrets(text: str) -> str:
    """Hide the value of every secret line (api-key: ...) for diffs and logs."""
    return re.sub(r"^(\s*(?:api-key|admin-api-key)\s*:\s*).*$", r"\1" + SECRET_MASK, text, flags=re.MULTILINE)
