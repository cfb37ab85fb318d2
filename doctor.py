"""The perf doctor: roofline from the checkpoint's bytes and a ranked list of what leaves perf on the table.

    pyinfra inventory/X.py doctor.py [--data probe=true] [--data probe_force=true]
    pyinfra inventory/X.py doctor.py --data bisect=<release> [--data tune_budget_s=N] [--data tune_samples=N] ...
    pyinfra inventory/X.py doctor.py --data ab=nospec [--data tune_samples=N] ...

Reads the running server, its process and the GPUs; `probe=true` also runs the GPU probe (bandwidth,
P2P, all-reduce latency) in the release's venv, which refuses while the GPUs are in use (stop the
service first, or probe_force=true). The report is printed, saved with the active release
(doctor.json) and locally in results/<host>/.

`bisect=<release>`: the regression bisect (sglang_deploy/bisect_run.py). The release the gate refused as slower is
compared with the active (good) release, deployed from host data `profile`: each difference between them (a flag,
a variable, the drafter, the weights) is measured alone as a temporary release in the tune's host session (the lock
held, the active release restored), and the change that costs the speed is named with its figures.

`ab=nospec`: the short A/B on request (sglang_deploy/doctor/ab.py). The active release against the same release
without speculation, a temporary release in the same host session; speculation slower than none is named from it,
with both speeds and spreads and the profile edit that tests it.
"""

from io import StringIO

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from roles import release
from roles.facts import GpuHost
from sglang_deploy.doctor.diagnosis import diagnose, format_report, with_collection
from sglang_deploy.hostfacts import uvm_warning
from sglang_deploy.gate import save_result
from sglang_deploy.hostside.client import printable
from sglang_deploy.hostside.documents import DocumentError
from sglang_deploy.hostside.outputs import DoctorCollection
from sglang_deploy.hostside.reports import DoctorReport
from sglang_deploy.hostside.store import RELEASE_ID
from sglang_deploy.layout import host_program
from sglang_deploy.layout import STORE_ROOT
from sglang_deploy.release_plan import service_of
from sglang_deploy.settings import DoctorArgs
from roles.settings import host_settings, of, sudo

service = service_of(host_settings())
gpu_facts = host.get_fact(GpuHost)
probe, probe_force, bisect = of(DoctorArgs).probe, of(DoctorArgs).probe_force, of(DoctorArgs).bisect
ab = of(DoctorArgs).ab


def run_doctor():
    command = host_program("doctor_collect", "--service", service, *["--probe"] * probe,
                           *["--probe-force"] * probe_force)
    ok, output = host.run_shell_command(command, _sudo=sudo())
    if not ok:
        raise DeployError(f"collecting the doctor's inputs failed:\n{output.stderr}")
    try:  # the collector's answer through its class: a field renamed on either side is named here
        collected = DoctorCollection.loads(output.stdout, "hostside.doctor_collect's output")
    except DocumentError as error:
        raise DeployError(f"{host.name}: {error}; nothing was written") from None
    if not collected.active:
        raise DeployError(f"{host.name}: no active release of {service} to examine")
    if not RELEASE_ID.match(collected.active):  # it names the upload path below
        raise DeployError(f"{host.name}: the host reports the active release as {printable(collected.active)!r}, "
                          "not a release id (NNNN-xxxxxxxx): nothing is written")
    gpus = [dict(gpu, clocks_event_reasons=collected.clock_reasons.get(str(gpu["index"]))) for gpu in gpu_facts["gpus"]]
    server_info = collected.server_info
    result = diagnose({"server_info": server_info, "environ": collected.environ, "topology": gpu_facts["topology"],
                       "gpus": gpus, "gate": collected.gate, "probe": collected.probe,
                       "checkpoint": collected.checkpoint, "simulated_gpu": ((server_info.get("internal_states") or [{}])[0] or {}).get("simulated_gpu"),
                       "log_findings": collected.log_findings, "costly_env": collected.costly_env,
                       "draft_checkpoint": collected.draft_checkpoint,
                       "offered_drafts": collected.offered_drafts,
                       "card_memory_mib": collected.card_memory_mib,
                       "last_tune": collected.last_tune, "last_ab": collected.last_ab,
                       "release": collected.active})
    result = with_collection(result, collected)
    logger.info(f"[{host.name}] perf doctor, release {collected.active} of {service}:")
    if uvm_warning(gpu_facts):
        logger.warning(f"[{host.name}] {uvm_warning(gpu_facts)}")
        result["errors"].append(uvm_warning(gpu_facts))
    errors = [printable(error) for error in collected.errors]
    for line in (format_report(result) + ("\n" + "\n".join(errors) if errors else "")).splitlines():
        logger.info(f"    {line}")
    report = DoctorReport.from_dict(result)  # its fields as the perf watch and the tune read them
    host.put_file(StringIO(report.dump()), f"{STORE_ROOT}/{service}/releases/{collected.active}/{report.FILE}")
    saved = save_result(host.name, result, kind="doctor")
    logger.info(f"    saved with the release (doctor.json) and in {saved}")


def run_session(kind, what):
    """A measurement in the tune's host session: the regression bisect (bisect_run.Bisect) or the A/B on request
    (doctor/ab.py SpecAB)."""
    from roles.ops import HostRemote
    from sglang_deploy.hostfacts import detected_hardware
    from sglang_deploy.tune.host import TuneError

    if host_settings().simulated:
        logger.warning(f"[{host.name}] SIMULATED HOST: every number below comes from sglang_deploy.sim's hardware "
                       "model of 2x RTX A6000, not from SGLang on a GPU")
    detected = None if host_settings().simulated else detected_hardware(gpu_facts)
    try:
        kind(host.name, host.data, HostRemote(), lambda line: logger.info(f"[{host.name}] {line}"), what,
             detected).run()
    except TuneError as error:
        raise DeployError(f"{host.name}: {'bisect' if bisect else 'ab'} {what}: {error}") from None


if bisect and ab:
    raise DeployError("bisect= and ab= are two measurements: ask for one at a time; nothing was changed")
release.install_programs()
if bisect:
    from sglang_deploy.bisect_run import Bisect

    python.call(name=f"Regression bisect of {bisect}", function=run_session, kind=Bisect, what=bisect)
elif ab:
    from sglang_deploy.doctor.ab import SpecAB

    python.call(name=f"A/B: the active release against {ab}", function=run_session, kind=SpecAB, what=ab)
else:
    python.call(name="Perf doctor", function=run_doctor)
