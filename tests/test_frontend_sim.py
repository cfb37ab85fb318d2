"""The simulated CT129 running SGLang 0.5.23's own `sglang serve` (host data sim_server=sglang): only the Scheduler
class is modelled. The proven profile passes the gate there, a refused start exits with SGLang's own error, and the API key stays out of every output, file and journal
line through them.

The one module on SGLang's own front end (each start costs about 40 s of CPU: 2 starts here), for what only it can
show: its processes, its resolution, its auth, its refused start, the key in its journal, and a gate that reads its
answers. The tool's decisions around the server (restarts, secrets, the diff, refusals, the incident refused for its
real reasons and rolled back) are tested on the model-only simulator, whose answers test_frontends holds to this
front end's (same statuses, fields and readings); every simulated host's session ends with the same key check
(tests/conftest.py key_leaks)."""

import json
import re

import pytest

from conftest import PROVEN, TEST_SERVICE_PORT, key_leaks, proven_with, write_profile

pytestmark = pytest.mark.simhost


def small_gate(profile, directory):
    """The profile with a gate sized to what these tests check (the floors and the output check decide; 3 samples
    of 128 tokens)."""
    import re

    # a release of its own (a note in the environment), so that the deploy switches and gates even where this
    # worker's host already runs the same unit from another module
    text = profile.read_text().replace("environment:\n", 'environment:\n  SGLANG_SIM_NOTE: "frontend-sim"\n', 1)
    head, gate = text.split("\ngate:\n", 1)
    gate = re.sub(r"^  (samples|max_new_tokens|warmup|on_inconclusive|max_regression_pct): .*\n", "", gate,
                  flags=re.M).rstrip("\n")
    # The baseline on this worker's host is often a release another module measured on the model-only simulator, a
    # different server on a differently loaded machine: 3 pairs against it say little (keep when inconclusive), and
    # only a collapse (more than 40 % slower) fails the comparison; the floors and the output check decide.
    return write_profile(directory, f"{head}\ngate:\n{gate}\n  samples: 3\n  max_new_tokens: 128\n  warmup: 0\n"
                                    "  on_inconclusive: keep\n  max_regression_pct: 40\n", profile.name)


@pytest.fixture(scope="module")
def proven(simhost, tmp_path_factory):
    result = simhost.deploy(profile=small_gate(PROVEN, tmp_path_factory.mktemp("profiles")), gate=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_refused_start_exits_with_sglangs_own_error(simhost, tmp_path):
    # --speculative-adaptive on a hybrid model passes the parser: the modelled scheduler fails it at start, and
    # SGLang's own run_scheduler_process takes the server down (rank 0 died during initialization). First in the
    # module, on the worker's fresh host (this module is handed out first: LONGEST_FIRST), so there is no release
    # to roll back to and no second start of SGLang's front end (about 40 CPU-s); a rollback after a refused start
    # is tested on the model-only simulator (test_gate_sim, test_releases_sim).
    bad = proven_with(tmp_path, "environment:\n", 'environment:\n  SGLANG_SIM_CRASH_AT_START: "1"\n', "crash.yaml")
    result = simhost.deploy(profile=bad, gate=True)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "scheduler died during initialization" in output or "Scheduler hit an exception" in output, output[-3000:]
    # readiness printed the journal of the failed start; the release before it (if this host had one) is back
    assert "SGLANG_SIM_CRASH_AT_START" in output, output[-3000:]
    assert "no good release to roll back to" in output or "healthy again" in output, output[-3000:]


def test_the_service_runs_sglangs_own_processes(simhost, proven):
    # the service user's processes, by the titles SGLang gives them (setproctitle)
    tree = simhost.sh("ps -o args= -u sglang")
    for title in ("sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"):
        assert title in tree, tree
    pid = simhost.main_pid()
    cmdline = simhost.sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
    unit = simhost.sh("systemctl show -p ExecStart --value sglang")
    # the unit's ExecStart is the one a real host gets: the log redactor, then <venv>/bin/sglang serve ...
    assert "log_redactor.py /opt/sglang-deploy/venvs/sglang-0.5.23-" in unit and "simulat" not in unit.lower()
    assert "/bin/sglang serve --model-path /srv/models/Qwen3.6-27B-FP8" in cmdline


def test_server_info_is_sglangs_with_the_fields_only_the_full_pipeline_resolves(simhost, proven):
    status, body = simhost.http("/server_info", key=simhost.api_key)
    info = json.loads(body)
    assert status == 200 and info["version"] == "0.5.23"
    assert (info["attention_backend"], info["page_size"], info["chunked_prefill_size"]) == ("flashinfer", 1, 4096)
    assert info["cuda_graph_config"]["prefill"]["backend"] == "breakable"
    assert info["internal_states"][0]["simulated"] is True  # says so, where SGLang's answer has room
    # below the Scheduler, SGLang's own code where it is arithmetic: the captured sizes (get_batch_sizes_to_capture),
    # the pool sizing (KVCacheConfigurator: the mamba state cache it writes into the context, the running cap) and
    # its start-up line
    state = info["internal_states"][0]
    assert state["decode_cuda_graph_bs"] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert state["effective_max_running_requests_per_dp"] == 16 and state["max_mamba_cache_size"] // 5 >= 16
    line = simhost.sh("journalctl -u sglang --no-pager -o cat | grep -F 'max_total_num_tokens=' | tail -1")
    assert f"max_total_num_tokens={state['memory_usage']['token_capacity']}, chunked_prefill_size=4096" in line, line
    assert "GPU work is modelled" in simhost.sh("journalctl -u sglang --no-pager -o cat | grep 'SIMULATED scheduler' | tail -1")
    assert simhost.http("/server_info")[0] == 401  # SGLang's own auth middleware


def test_the_proven_profile_passes_the_gate(proven):
    output = proven.stdout + proven.stderr
    said = "\n".join(line for line in output.splitlines() if "] " in line or line.startswith("    "))
    assert "decode tok/s (1 stream, median)" in output and "is active (good)" in output, said[-6000:]


def test_the_key_is_in_no_output_file_or_journal_line(simhost, proven, tmp_path):
    """After a refused start and a gated start: the everyday verbs that read
    the server and its journal, and a diff, then every output, the host's files and the journal grepped for the
    key. SGLang returns it from /server_info and logs it at every start (``server_args=``)."""
    key = simhost.api_key
    assert simhost.pyinfra("doctor.py").returncode == 0, simhost.transcript[-1][-3000:]
    # the card from nvidia-smi (49140 MiB), what is still free after start from SGLang's startup_available
    assert "of 48.0 GB: static pool 42.2 GB" in simhost.transcript[-1], simhost.transcript[-1][-3000:]
    assert "GB still free after start (SGLang's startup_available)" in simhost.transcript[-1]
    assert simhost.pyinfra("releases.py").returncode == 0, simhost.transcript[-1][-3000:]
    variant = proven_with(tmp_path, "--max-running-requests: 16", "--max-running-requests: 12", "variant.yaml")
    assert simhost.deploy("--dry", "--diff", profile=variant).returncode == 0, simhost.transcript[-1][-3000:]
    commands = [entry.split("\n", 1)[0] for entry in simhost.transcript]
    assert any("deploy.py" in command and "skip_gate=true" not in command for command in commands), commands  # gated
    # the server does hold it, so a leak would be visible: /server_info returns it, as SGLang's does
    assert key in simhost.http("/server_info", key=key)[1]
    assert key_leaks(simhost) == []
    # SGLang logged server_args at each of the 2 starts (crash, proven); the log redactor in front of it (ExecStart's
    # first stage) replaced the key
    started = simhost.sh("journalctl --no-pager -o cat -u sglang | grep -F 'server_args='").splitlines()
    assert len(started) >= 2 and all("'api_key': '<redacted>'" in line for line in started), started[-1:]
    assert f":{TEST_SERVICE_PORT}" not in key


# Run on the simulated host by its system python: each (method, path) of the walk, without a key and with the key
# given, the statuses SGLang's middleware answers. Only the admin routes get a key (the API key: to be refused), so
# no handler but the public ones runs.
WALK = r"""
import json, sys, urllib.error, urllib.request
plan = json.load(sys.stdin)
def status(method, path, key):
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (plan["port"], path), method=method,
                                     data=b"{}" if method in ("POST", "PUT", "PATCH") else None,
                                     headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
key = [line.split(": ", 1)[1] for line in open(plan["secrets"]) if line.startswith("api-key: ")][0]
key = json.loads(key)
print(json.dumps([[method, path, status(method, path, None), status(method, path, key) if api else None]
                  for method, path, api in plan["walk"]]))
"""


def test_the_route_table_answers_only_to_its_keys(simhost, proven):
    """SGLang's own route table (the live app's /openapi.json, beside the table derived from the release's source,
    sglang_deploy/validate/routes.py) walked on its own front end: without a key every route but the reviewed public ones is
    refused, and the API key opens no admin route (the tool's admin key, which nobody is given, does)."""
    from sglang_deploy.validate import routes

    key = simhost.api_key
    status, body = simhost.http("/openapi.json", key=key)
    assert status == 200, body[:300]
    live = {(method.upper(), path) for path, item in json.loads(body)["paths"].items() for method in item}
    derived = routes.registered(routes.load("0.5.23"))
    table = {(method, route["path"]) for route in derived for method in route["methods"] if method != "WEBSOCKET"}
    # the derivation from the source is the live app's table (its HTTP routes in the schema: OpenAPI writes
    # {model:path} as {model}; FastAPI's own /openapi.json, /docs, /redoc are walked below)
    schema = {(method, re.sub(r":[a-z]+}", "}", route["path"])) for route in derived if route["in_schema"]
              for method in route["methods"] if method != "WEBSOCKET"}
    assert live == schema, (sorted(live - schema), sorted(schema - live))
    admin = {route["path"] for route in derived if route["level"] != "normal"}
    walk = sorted(table | {("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")}
                  | {("GET", path) for path in routes.REVIEWED_PUBLIC})
    # path parameters ({model:path}, {response_id}) filled in
    plan = {"port": TEST_SERVICE_PORT, "secrets": "/etc/sglang-deploy/sglang/secrets.yaml",
            "walk": [[method, re.sub(r"\{[^}]*\}", "x", path), path in admin] for method, path in walk]}
    answers = json.loads(simhost.sh(f"python3 -c '{WALK}' <<'EOF'\n{json.dumps(plan)}\nEOF"))
    open_ = [(method, path, without) for method, path, without, _ in answers
             if without not in (401, 403) and path not in routes.REVIEWED_PUBLIC]
    assert open_ == [], open_
    # The admin routes of the routers http_server includes (elastic EP's) take the API key on this front end:
    # SGLang's middleware finds no route for them in FastAPI 0.142's lazily included routers and falls back to
    # `normal` (sglang/srt/utils/auth.py _get_auth_level_from_app_and_scope). Their handlers refuse while
    # --elastic-ep-backend is unset, a flag of class `exposure` (a waiver); recorded in docs/refusals.md.
    included = {route["path"] for route in derived if route["level"] != "normal" and route["module"] != routes.ENTRYPOINT}
    with_api_key = [(method, path, api) for method, path, _, api in answers if api is not None and api not in (401, 403)]
    assert [(method, path) for method, path, api in with_api_key if path not in included] == [], with_api_key
    assert all(api in (400, 404) for _, path, api in with_api_key), with_api_key  # the handlers' own refusal
    public = sorted({path for method, path, without, _ in answers if without not in (401, 403)})
    # /metrics: on where the profile sets --enable-metrics (the proven profile does)
    assert public == sorted(routes.REVIEWED_PUBLIC), public
    counts = {"walked": len(answers), "admin": sum(api is not None for *_, api in answers), "public": len(public),
              "admin_taking_the_api_key": len(with_api_key)}
    assert counts["admin"] >= 40 and counts["walked"] >= 90, counts
    # the admin key opens an admin route (a read-only one): the server has it, from the secrets file
    admin_key = json.loads(simhost.sh("sed -n 's/^admin-api-key: //p' /etc/sglang-deploy/sglang/secrets.yaml"))
    assert len(admin_key) >= 40
    assert simhost.http("/list_external_corpora", key=admin_key)[0] not in (401, 403)
    assert simhost.http("/list_external_corpora", key=key)[0] == 401
    # SGLang 0.5.23 itself hands every server argument to an API-key holder, the admin key among them
    # (/server_info: ServerArgs.resolved_dict, no redaction): recorded here, so that the day it stops, this says so
    # (docs/refusals.md: what the admin key does and does not close)
    sglang_discloses = admin_key in simhost.http("/server_info", key=key)[1]
    # and is nowhere else: no output, file, journal line or command line (SGLang logs server_args at each start)
    assert key_leaks(simhost, admin_key) == []
    assert admin_key not in simhost.sh("ps -eo args; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true")
    print("routes walked", counts, "admin key in /server_info:", sglang_discloses)
