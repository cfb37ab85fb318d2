"""The output check's answer (hostside/contract/gate.py OutputCheck): built by output_check.evaluate through its class, stored in
the gate's result and read back as the next gate's baseline, carried short by the watch and the tune; what earlier
versions stored reads, a renamed field on either side fails."""

import pytest

from sglang_deploy.hostside.lib import output_check
from sglang_deploy.hostside.contract.document import DocumentError
from sglang_deploy.hostside.contract.findings import WatchEntry, WatchOutput
from sglang_deploy.hostside.contract.gate import GateResult, OutputCheck, OutputCounts, OutputRow
from sglang_deploy.hostside.contract.session import TuneItemResult
from test_documents import string_key_reads
from test_output_check import DIGEST, DOCUMENT, answers

# The output check as the first gate stored it in gate-result.json (output_check.py of 2026-12-01): each row holds
# its id and either its error or its answer, with degenerate, wrong and first_divergence only where they applied.
FIRST = {
    "verdict": "inconclusive", "reasons": [], "inconclusive": ["output: 1 of 8 prompts got no answer: x"],
    "prompts_digest": DIGEST, "prompts_version": 1, "known_right": 7, "total": 8, "degenerate": 0,
    "agreement": None, "compared": 0,
    "results": [{"id": item["id"], "text": text, "finish_reason": "stop"} if index else
                {"id": item["id"], "error": "URLError: refused"}
                for index, (item, (text, _)) in enumerate(zip(DOCUMENT["prompts"], answers().values()))]}
GATE = {"verdict": "fail", "reasons": ["output: ..."], "inconclusive": [], "rows": [], "config_problems": []}


def test_the_check_is_built_through_its_class_and_round_trips_through_the_gate_result():
    check = output_check.evaluate(answers(), DOCUMENT, DIGEST)
    assert isinstance(check, OutputCheck) and all(isinstance(row, OutputRow) for row in check.results)
    stored = GateResult.loads(GateResult.from_dict({**GATE, "output": check.to_dict()}).dump())
    assert stored.output == check and stored.output.known_right == 8
    again = output_check.evaluate(answers(), DOCUMENT, DIGEST, stored.output)  # the next gate's baseline
    assert (again.agreement, again.compared, again.verdict) == (1.0, 8, "pass")


def test_a_check_stored_by_the_first_gate_reads_and_is_a_baseline():
    """Every field of the check was written by every version: required; a row's fields were left out where they
    did not apply: their defaults say so."""
    stored = GateResult.from_dict({**GATE, "output": FIRST}).output
    assert set(FIRST) == OutputCheck.field_names()
    assert (stored.results[0].error, stored.results[0].text, stored.results[1].first_divergence) == (
        "URLError: refused", None, None)
    again = output_check.evaluate(answers(), DOCUMENT, DIGEST, stored)
    assert (again.compared, again.agreement) == (7, 1.0)  # the prompt without an answer is not compared


@pytest.mark.parametrize("output, message", [
    ({**{k: v for k, v in FIRST.items() if k != "known_right"}, "knwon_right": 7},
     "gate-result.json output: unknown field 'knwon_right'"),
    ({k: v for k, v in FIRST.items() if k != "results"}, "gate-result.json output: required field 'results'"),
    ({**FIRST, "prompts_digest": None}, "gate-result.json output: field 'prompts_digest' is None"),
    ({**FIRST, "results": [{"id": "x", "txt": "391"}]}, "gate-result.json output results[0]: unknown field 'txt'"),
    ({**FIRST, "results": [{"text": "391"}]}, "gate-result.json output results[0]: required field 'id'"),
])
def test_a_renamed_or_missing_field_is_named_never_read_as_none(output, message):
    """A renamed field on the writing side reaches the reader as an unknown field (and a missing required one): the
    gate's next baseline is refused by name, not compared as "nothing to agree with"."""
    with pytest.raises(DocumentError) as error:
        GateResult.from_dict({**GATE, "output": output})
    assert str(error.value).startswith(message), error.value


def test_the_short_forms_are_the_checks_own_fields():
    """The watch's (release.WatchOutput) and the tune's (OutputCounts) short forms take the check's fields by name:
    a field renamed in the check alone fails here, and where they are built (getattr)."""
    assert WatchOutput.field_names() <= OutputCheck.field_names()
    assert OutputCounts.field_names() <= OutputCheck.field_names()
    check = output_check.evaluate(answers(wrong=True), DOCUMENT, DIGEST)
    assert check.counts() == OutputCounts(verdict="fail", known_right=5, total=8, degenerate=0,
                                          prompts_digest=DIGEST)
    item = TuneItemResult.from_dict({"seq": 1, "id": "c1", "release_id": "0002-bbbbbbbb", "ok": False, "at": "t",
                                     "duration_s": 1.0, "output": check.counts().to_dict()})
    assert item.output.known_right == 5
    with pytest.raises(DocumentError, match="output: unknown field 'knwon_right'"):
        TuneItemResult.from_dict({**item.to_dict(), "output": {**item.output.to_dict(), "knwon_right": 5}})
    entry = WatchEntry.from_dict({"status": "ok", "at": "t", "unix": 1, "release": "0001-aaaaaaaa",
                                  "output": {name: getattr(check, name) for name in WatchOutput.field_names()}})
    assert entry.output.verdict == "fail"


PLANTED = [  # the output check's answer, as the gate, the switch, the watch and the tune read it before output_result
    'def run(probe_url, api_key, expect, baseline_output):\n'
    '    output = output_check.run(probe_url, api_key, expect.served_name, baseline_output)\n'
    '    if output["verdict"] == "fail":\n        return output["reasons"]\n',
    'def measured(entry):\n    check = output_check.run(probe_url, api_key, "default", limit=3)\n'
    '    return check["verdict"] == "pass"\n',
    'def run_gate(stored, release):\n    return stored[release].output["results"] if release else None\n',
    'def f(result):\n    return (result.output or {}).get("known_right")\n',
]


@pytest.mark.parametrize("source", PLANTED)
def test_the_scan_finds_a_planted_string_key_read_of_the_check(source):
    assert string_key_reads(source), source
