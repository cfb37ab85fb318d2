"""Model weights on the host: the profile's pinned snapshot, fetched or pushed, verified against the frozen
manifest before any switch (hostside/weights/ does the work on the host).

- hf:// sources: huggingface_hub's own client on the host (hf_hub_download, resumable), from the Hub, the
  endpoint of host data `hf_endpoint` (never the profile's); the python is the release's venv on GPU hosts (SGLang
  brings huggingface_hub), or a small venv (`hub_python`, installed from a controller wheelhouse).
- file:// sources (and the simulated host's synthetic checkpoint): pushed from the controller over the deploy's
  SSH connection into the staging directory (a file already there with the same content is not sent again),
  then verified and renamed into place.
A mismatch names the file and stops the deploy: nothing is staged or switched.
- token maps (speculative.token_map, tune.token_maps): pushed to /srv/models/token-maps/<sha256>.pt.
"""

import hashlib
import shlex
from io import BytesIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import files, server
from pyinfra.operations import python as python_op

from roles.settings import host_settings, sudo
from sglang_deploy.hostside.contract.answers import WeightsFailure, WeightsPlaced
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.weights.fetch import staging_dir
from sglang_deploy.hostside.weights.manifest import MODELS_ROOT, TOOL_DIR, human
from sglang_deploy.layout import TOOL_ROOT, host_program
from sglang_deploy.provision import with_proxy
from sglang_deploy.token_map.part import MapPart
from sglang_deploy.weights import HUB_CLIENT_PIN, Weights

HUB_VENV = f"{TOOL_ROOT}/hub-client"
HUB_WHEELS = f"{TOOL_ROOT}/hub-client-wheels"


MANIFESTS_DIR = f"{MODELS_ROOT}/{TOOL_DIR}/manifests"


def manifest_text(weights: Weights) -> str:
    return weights.manifest_file.read_text()


def manifest_in_place(found_files: dict, weights: Weights) -> bool:
    """Whether the manifests directory and this snapshot's manifest are on the host as `ensure` would write them
    (mode, owner, group and, for the file, the content's sha256, as the DeployState fact found them): then nothing
    is uploaded, and a no-op redeploy spends no round trip on them."""
    return (found_files.get(MANIFESTS_DIR, [])[:3] == ["755", "root", "root"]
            and found_files.get(weights.host_manifest, []) == [
                "644", "root", "root", hashlib.sha256(manifest_text(weights).encode()).hexdigest()])


@deploy("Weights: huggingface_hub client (small venv)")
def hub_client(wheelhouse: str | None):
    """A venv with only huggingface_hub, from a controller wheelhouse (offline) or the host's index."""
    commands = [f"python3 -m venv {HUB_VENV}"]
    if wheelhouse:
        wheels = sorted(Path(wheelhouse).glob("*.whl"))
        if not wheels:
            raise ValueError(f"hub_wheelhouse {wheelhouse}: no wheels")
        for wheel in wheels:
            files.put(name=f"wheel {wheel.name}", src=str(wheel), dest=f"{HUB_WHEELS}/{wheel.name}", mode=644,
                      create_remote_dir=True)
        commands.append(f"{HUB_VENV}/bin/pip install -q --disable-pip-version-check --no-index "
                        f"--find-links {HUB_WHEELS} {shlex.quote(HUB_CLIENT_PIN)}")
    else:
        commands.append(f"{HUB_VENV}/bin/pip install -q --disable-pip-version-check {shlex.quote(HUB_CLIENT_PIN)}")
    server.shell(name=f"{HUB_CLIENT_PIN} in {HUB_VENV}",
                 commands=[with_proxy(command, host_settings().proxy) for command in commands])


def fetch_command(weights: Weights, python: str, endpoint: str | None, token_file: str | None = None) -> str:
    command = ["fetch", "--manifest", weights.host_manifest, "--dir", weights.path,
               "--repo", weights.source.repo, "--revision", weights.source.revision, "--python", python]
    if endpoint:
        command += ["--endpoint", endpoint]
    if token_file:
        command += ["--token-file", token_file]
    return host_program("weights", *command)


def _fetch_live(command: str):
    """The fetch with its output printed as it arrives (a download of tens of GB takes minutes: its progress
    lines, every few seconds, show on the controller during the transfer, not only when it fails). Its answer, the
    last line, through its class (answers.WeightsPlaced, or WeightsFailure when it refuses): a field renamed on
    either side is named."""
    ok, output = host.run_shell_command(command, print_output=True, _sudo=sudo())
    lines = output.stdout_lines
    if ok:
        try:
            placed = WeightsPlaced.loads(lines[-1] if lines else "", WeightsPlaced.FILE)
        except DocumentError as error:
            raise OperationError(f"weights: fetched, but the answer cannot be read: {error}") from None
        host.log(f"weights: {placed.path} verified" + (" and in place" if placed.changed else ", unchanged"),
                 logger.info)
        return
    try:
        reason = WeightsFailure.loads(lines[-1] if lines else "", "hostside.weights' error line").error
    except DocumentError as error:  # no error line (a progress line last): its stderr; else the field, named
        not_json = str(error).startswith("hostside.weights' error line: not JSON")
        reason = ("; ".join(output.stderr_lines[-3:]) or "no output") if not_json else str(error)
    raise OperationError(f"weights: {reason}")


@deploy("Weights")
def ensure(weights: Weights, verified: bool, python: str | None = None, endpoint: str | None = None,
           local_dir: str | None = None, token_file: str | None = None, manifest_found: bool = False):
    """Upload the manifest (unless manifest_found: manifest_in_place); when the snapshot is not verified in place:
    fetch (hf) or push (local_dir), verify, rename into place. `verified` is the WeightsStatus fact (read before any
    change)."""
    if not manifest_found:
        files.directory(name=MANIFESTS_DIR, path=MANIFESTS_DIR, mode=755, present=True)
        files.put(name=f"Weights manifest sha256:{weights.digest[:12]} ({len(weights.manifest['files'])} files, "
                       f"{human(weights.total_bytes)})",
                  src=BytesIO(manifest_text(weights).encode()), dest=weights.host_manifest, mode=644)
    if verified:
        host.log(f"weights {weights.source.text}: {weights.path} verified, unchanged", logger.info)
        return
    if local_dir is None:
        host.log(f"weights {weights.source.text}: fetching {human(weights.total_bytes)} into {weights.path} "
                 f"(progress: {MODELS_ROOT}/{TOOL_DIR}/progress/)", logger.info)
        python_op.call(name=f"Fetch {weights.source.text} with huggingface_hub ({human(weights.total_bytes)}), "
                            "verify every file, rename into place",
                       function=_fetch_live,
                       command=with_proxy(fetch_command(weights, python, endpoint, token_file), host_settings().proxy))
        return
    staging = staging_dir(weights.path)
    for entry, src in weights.local_files():
        files.put(name=f"push {entry['path']} ({human(entry['size'])})", src=src,
                  dest=f"{staging}/{entry['path']}", mode=644, create_remote_dir=True)
    server.shell(name=f"Verify the pushed weights against the manifest, rename into {weights.path}",
                 commands=[host_program("weights", "promote", "--manifest", weights.host_manifest, "--dir",
                                        weights.path)])


@deploy("Token map")
def token_map(part: MapPart, found: list | None = None):
    """A token map the profile ships (token_map/part.py) at its content-addressed place (pyinfra sends it only when
    the host's copy differs); the host checks its sha256 before every switch (manifest.map_problem). found: the
    file's mode, owner, group and sha256 as the DeployState fact read them; a map already there as it would be
    written costs no round trip."""
    if found == ["644", "root", "root", part.sha256]:
        return
    files.put(name=f"token map {part.file.name} -> {part.host_path} (sha256:{part.sha256[:12]})", src=str(part.file),
              dest=part.host_path, mode=644, create_remote_dir=True)
