"""The doctor's and the tune's stages, in the order doctor.py and tune.py run them: arguments -> (the host package)
-> measure.

The variant (a real GPU host or the simulated one) is chosen once, from the host settings (roles/target.py): it
says what the hardware is and what stands in for it, so no stage here asks whether the host is simulated.

- the perf doctor (`doctor.py`): the collector's answer on the host (hostside/doctor_collect.py), the diagnosis
  (sglang_deploy/doctor/diagnosis.py), saved with the active release and locally;
- a measuring session in the tune's host session: the regression bisect (`bisect=`, sglang_deploy/bisect_run.py),
  the A/B on request (`ab=`, sglang_deploy/doctor/ab.py) and the tune itself (`tune.py`, sglang_deploy/tune/).
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from roles import target
from roles.facts import GpuHost
from roles.ops import HostRemote
from roles.settings import host_settings, of, sudo
from sglang_deploy.doctor.diagnosis import diagnose, format_report, with_collection
from sglang_deploy.results import save_result
from sglang_deploy.hostfacts import uvm_warning
from sglang_deploy.hostside.lib.client import printable
from sglang_deploy.hostside.contract.probes import DoctorCollection
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.findings import DoctorReport
from sglang_deploy.hostside.store import RELEASE_ID
from sglang_deploy.layout import ServicePaths, host_program
from sglang_deploy.release_plan import service_of
from sglang_deploy.settings import DoctorArgs
from sglang_deploy.tune.host import TuneError


def arguments() -> DoctorArgs:
    """doctor.py's host data: one measurement at a time, refused before anything runs on the host."""
    args = of(DoctorArgs)
    if args.bisect and args.ab:
        raise DeployError("bisect= and ab= are two measurements: ask for one at a time; nothing was changed")
    return args


def measure(args: DoctorArgs) -> None:
    """The doctor's diagnosis, or the measuring session the arguments name, as one operation."""
    if args.bisect:
        # deferred: 20 ms (bisect_run) on doctor.py, only where a bisect runs
        from sglang_deploy.bisect_run import Bisect

        python.call(name=f"Regression bisect of {args.bisect}", function=session, kind=Bisect, what=args.bisect,
                    label=f"bisect {args.bisect}")
    elif args.ab:
        # deferred: 21 ms (doctor.ab) on doctor.py, only where an A/B runs
        from sglang_deploy.doctor.ab import SpecAB

        python.call(name=f"A/B: the active release against {args.ab}", function=session, kind=SpecAB, what=args.ab,
                    label=f"ab {args.ab}")
    else:
        python.call(name="Perf doctor", function=diagnosis, args=args)


def tune() -> None:
    """The tune (sglang_deploy/tune/controller.Runner) as one operation."""
    # deferred: 12 ms (tune.controller) on doctor.py, only where a tune runs
    from sglang_deploy.tune.controller import Runner

    python.call(name="Tune", function=session, kind=lambda name, data, remote, log, what, detected:
                Runner(name, data, remote, log, detected), what=None, label="tune")


def session(kind, what, label: str) -> None:
    """A measurement in the tune's host session, on the variant's hardware; the variant says first what stands in
    for the GPU server where something does."""
    variant = target.of(host_settings())
    for line in variant.measurement_warnings():
        logger.warning(f"[{host.name}] {line}")
    try:
        kind(host.name, host.data, HostRemote(), lambda line: logger.info(f"[{host.name}] {line}"), what,
             variant.detected_hardware(host)).run()
    except TuneError as error:
        raise DeployError(f"{host.name}: {label}: {error}") from None


def diagnosis(args: DoctorArgs) -> None:
    """The perf doctor: the collector's answer, the diagnosis, the report saved with the release and locally."""
    service = service_of(host_settings())
    gpu_facts = host.get_fact(GpuHost)
    command = host_program("doctor_collect", "--service", service, *["--probe"] * args.probe,
                           *["--probe-force"] * args.probe_force)
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
    result = diagnose(collected, gpus, gpu_facts["topology"])
    result = with_collection(result, collected)
    logger.info(f"[{host.name}] perf doctor, release {collected.active} of {service}:")
    if uvm_warning(gpu_facts):
        logger.warning(f"[{host.name}] {uvm_warning(gpu_facts)}")
        result["errors"].append(uvm_warning(gpu_facts))
    errors = [printable(error) for error in collected.errors]
    for line in (format_report(result) + ("\n" + "\n".join(errors) if errors else "")).splitlines():
        logger.info(f"    {line}")
    report = DoctorReport.from_dict(result)  # its fields as the perf watch and the tune read them
    host.put_file(StringIO(report.dump()), ServicePaths(service).release_file(collected.active, report.FILE))
    saved = save_result(host.name, result, kind="doctor")
    logger.info(f"    saved with the release (doctor.json) and in {saved}")
