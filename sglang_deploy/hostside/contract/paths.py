"""Where things live on a deployed host: one table for both sides. The host's programs (store.py, the switch, the
preflight, the doctor's collector, the tune's runner) and the controller (layout.py, release_plan.py, the roles, the
doctor, the tune and the bisection) read the same names here; a path of the store is never spelled again by
f-string. The files inside a release and the store's own files are named by their documents (release.py: FILE and
the *_FILE names; store.py: StoreState.FILE, LockInfo.FILE, SwitchOutcome.FILE).

    /var/lib/sglang-deploy/<service>/      the release store (STORE_ROOT; SGLANG_DEPLOY_STORE in tests)
        releases/<id>/                     one release: its unit, environment, meta.json and reports
        tune/<session>/                    a tune session's queue, results, session.json and close
    /etc/systemd/system/<service>.service  the installed unit (the active release's)
    /etc/sglang-deploy/<service>/          its environment file and the secrets file
    /var/lib/<service>, /var/cache/<service>  the service's StateDirectory= and CacheDirectory=
    /opt/sglang-deploy/                    the tool's software (TOOL_ROOT): venvs/, lib/ (the host package),
                                           router/, hub-client/, wheelhouse/
    /srv/models/                           the weights' snapshots (MODELS_ROOT; SGLANG_DEPLOY_MODELS in tests)
    /run/sglang-deploy/preflight/          the preflight's reports (a tmpfs)

Standard library only: shipped to the host with the rest of the package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

STORE_ROOT = os.environ.get("SGLANG_DEPLOY_STORE", "/var/lib/sglang-deploy")
UPLOAD_DIR = "/var/lib/sglang-deploy"  # where the controller's archives land before unpacking (root's, never a test's store)
MODELS_ROOT = os.environ.get("SGLANG_DEPLOY_MODELS", "/srv/models")  # the weights' snapshots (hostside/weights/)
TOOL_ROOT = "/opt/sglang-deploy"  # the tool's own software: venvs, the host package, the hub client, wheelhouses
VENV_ROOT = f"{TOOL_ROOT}/venvs"  # the release venvs (and the router's)
HOST_LIB = f"{TOOL_ROOT}/lib"  # the host package is installed as HOST_LIB/hostside (run with python3 -m)
ROUTER_LIB = f"{TOOL_ROOT}/router"  # the router's launcher (sglang_deploy/router.py)
UNIT_DIR = "/etc/systemd/system"
CONFIG_ROOT = "/etc/sglang-deploy"
PREFLIGHT_DIR = "/run/sglang-deploy/preflight"  # a tmpfs: the preflight's inputs never reach the release store
SIMULATED_MARKER = "/etc/sglang-deploy-simulated"  # present only on a simulated host (testbed/simhost.py)


@dataclass(frozen=True)
class ServicePaths:
    """One service's paths on its host."""
    service: str

    @property
    def root(self) -> str:
        """The service's release store."""
        return f"{STORE_ROOT}/{self.service}"

    @property
    def releases_dir(self) -> str:
        return f"{self.root}/releases"

    def release_dir(self, release_id: str) -> str:
        return f"{self.releases_dir}/{release_id}"

    def release_file(self, release_id: str, name: str) -> str:
        """A file of a release: a document's FILE or one of release.py's *_FILE names."""
        return f"{self.release_dir(release_id)}/{name}"

    def release_upload(self, release_id: str) -> str:
        """Where a release's files wait as one archive (roles/release.stage) until the same command unpacks them."""
        return f"{UPLOAD_DIR}/.upload-release-{self.service}-{release_id}.tar"

    def tune_dir(self, session: str) -> str:
        """A tune session's directory (session.py's documents)."""
        return f"{self.root}/tune/{session}"

    @property
    def unit_path(self) -> str:
        return f"{UNIT_DIR}/{self.service}.service"

    @property
    def config_dir(self) -> str:
        return f"{CONFIG_ROOT}/{self.service}"

    @property
    def env_path(self) -> str:
        return f"{self.config_dir}/sglang.env"

    @property
    def secrets_path(self) -> str:
        return f"{self.config_dir}/secrets.yaml"

    @property
    def state_dir(self) -> str:
        """The service's StateDirectory= (its user's home)."""
        return f"/var/lib/{self.service}"

    @property
    def cache_dir(self) -> str:
        return f"/var/cache/{self.service}"

    @property
    def own_dirs(self) -> tuple[str, str]:
        """The directories the service itself writes: its state and its cache."""
        return self.state_dir, self.cache_dir

    def preflight_report(self, suffix: str = "") -> str:
        """The preflight's report: the deploy's (suffix ""), the doctor's ("-doctor")."""
        return f"{PREFLIGHT_DIR}/{self.service}{suffix}.json"
