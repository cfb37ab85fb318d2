"""Roll the SGLang service back to the previous good release, or to any retained one.

    pyinfra inventory/sim.py rollback.py [--data release=0003-1a2b3c4d] [--dry --diff]

The target's unit and environment are installed, the service restarts and must become ready; if it
does not, the release that was running comes back. `pyinfra inventory/X.py releases.py` lists them.
A release of a multi-node server (`--limit nodes`) restarts in the deploy's order: every node stops, the
joining ranks start, then rank 0.
"""

import json

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import FileContents

from roles import multinode, release
from roles.facts import ReleaseStore
from roles.settings import host_settings, of
from sglang_deploy.hostside.documents import RESOLVED_FILE, LockInfo, ReleaseMeta
from sglang_deploy.hostside.store import auth_change
from sglang_deploy.release_plan import release_dir, rollback_target, service_of
from sglang_deploy.settings import RollbackArgs
from sglang_deploy.switch_options import SwitchOptions

settings, args = host_settings(), of(RollbackArgs)
service = service_of(settings)
store = host.get_fact(ReleaseStore, service=service)
if store["lock"]:  # the deploy's refusal (plan.refusals), word for word
    raise DeployError(f"{host.name}: {LockInfo.from_dict(store['lock'], 'the store lock holder').refusal()}; nothing was "
                      "changed")
try:
    target = rollback_target(store, args.release)
except ValueError as error:
    raise DeployError(f"{host.name}: {error}; nothing was changed") from None

metas = {r["id"]: ReleaseMeta.from_dict(r, f"{host.name}: release {r['id']}'s meta.json") for r in store["releases"]}
meta = metas[target]
active = store["state"].get("active")
logger.info(f"[{host.name}] rollback {service}: {active or 'nothing active'} -> {target} "
            f"({meta.profile}, SGLang {meta.sglang_version}, {meta.verdict or 'unverified'})")
active_meta = metas.get(active)
change = auth_change(active_meta, meta)
if change:
    logger.warning(f"[{host.name}] {change}")
directory = release_dir(service, target)
unit, env = (host.get_fact(FileContents, path=f"{directory}/{name}") for name in ("sglang.service", "sglang.env"))
release.install_programs()
release.show_changes(service=service, unit="\n".join(unit) + "\n", env="\n".join(env) + "\n")
# The target's preflight before its restart (a rollback the switch does on its own is never delayed by one); it
# resolves again (fresh): the service user's cache is moved aside at the switch, and not trusted before it.
if args.skip_preflight:
    logger.warning(f"[{host.name}] skip_preflight: restarting on {target} WITHOUT its preflight")
else:
    resolution = json.loads("\n".join(host.get_fact(FileContents, path=f"{directory}/{RESOLVED_FILE}") or ["{}"])
                            or "{}")
    release.preflight(service=service, release_id=target, unit="\n".join(unit) + "\n", env="\n".join(env) + "\n",
                      interpreter=release.preflight_interpreter(meta.simulated, meta.venv),
                      gpus=release.preflight_gpus(resolution.get("resolved"), (meta.node or {}).get("nnodes", 1)),
                      simulated=meta.simulated, exec_start=meta.exec_start,
                      resolved=resolution.get("resolved"), container_id=settings.container_id,
                      resolve=settings.preflight_stack, fresh=True)
options = SwitchOptions(service=service, release_id=target, probe_url=meta.probe_url,
                        timeout=meta.start_timeout_s, reason="rollback", auto_rollback=True, force=True)
node = meta.node  # a multi-node release: this host's rank (release_plan.build_meta)
spans = node or (active_meta and active_meta.node)  # entering or leaving a multi-node release
nodes = [h.name for h in inventory.get_group(settings.node_group)] if spans else []
if spans:  # every node of the server goes together
    multinode.require_whole_server(nodes, "rolled back")
if node:
    multinode.switch_in_order(options, node["rank"], node["nnodes"], nodes)
else:
    release.switch(options=options)
