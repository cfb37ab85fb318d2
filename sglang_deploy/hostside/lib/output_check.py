"""The gate's output check: does the server answer correctly, before anyone measures how fast it is (stdlib only).

A release can run faster and answer garbage: NEXTN decode CUDA graphs on hybrid Gated-DeltaNet models return
HTTP 200 with repeated `!` (sgl-project/sglang#37111), `--load-format dummy` serves random weights at full speed.
So the gate first sends a shipped, versioned prompt set (prompts/output-check-v1.json) with greedy decoding
(temperature 0, a fixed seed) through /v1/chat/completions, and checks three things per prompt:
- the known answer (a number, an exact string copied back, a JSON object with given keys, Python that parses and
  defines a name): checkable without a reference model;
- degenerate output: empty, one character repeated, a handful of distinct words, or a finish reason other than
  `stop` for an answer that should end;
- agreement with the last good release on the same weights: the first position (in whitespace-separated words
  of the answer) where the two greedy outputs diverge, and the share of prompts that agree over the first
  AGREE_WORDS words. Speculative decoding is lossless under greedy decoding, but batch shapes and graphs change
  the numerics, so agreement below MIN_AGREEMENT is inconclusive, not a failure, unless an answer is also wrong.

A wrong known answer or degenerate output fails the release ("output: 3 of 8 known answers wrong: ...").

Its answer is an OutputCheck (hostside/contract/gate.py), built here through the class and read by attribute.
"""

import ast
import hashlib
import json
import os
import re
import urllib.error

from .client import http
from ..contract.gate import OutputCheck, OutputRow

PROMPTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts", "output-check-v1.json")
SEED = 1234
AGREE_WORDS = 24
# Two runs of one configuration agree on every prompt (greedy decoding is deterministic per configuration); a
# change of graphs or batch shapes may move a few late words. Below this share the check is inconclusive.
MIN_AGREEMENT = 0.75


def load_prompts(path=PROMPTS_FILE):
    with open(path, "rb") as handle:
        raw = handle.read()
    document = json.loads(raw)
    return document, "sha256:" + hashlib.sha256(raw).hexdigest()


def _json_object(text):
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(text[start:end + 1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _code(text):
    fenced = re.search(r"```(?:python|py)?\s*\n(.*?)```", text, re.S)
    return fenced.group(1) if fenced else text


def known_answer_problem(check, text):
    """None when the answer passes its check, else what is wrong."""
    kind = check["type"]
    if kind == "number":
        numbers = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
        if not numbers:
            return f"no number in the answer (expected {check['value']})"
        return None if float(numbers[0]) == float(check["value"]) else f"answered {numbers[0]}, expected {check['value']}"
    if kind == "contains":
        return None if check["text"] in text else f"does not contain {check['text']!r}"
    if kind == "json_keys":
        value = _json_object(text)
        if value is None:
            return "no JSON object in the answer"
        missing = [key for key in check["keys"] if key not in value]
        if missing:
            return f"JSON object lacks {', '.join(missing)}"
        wrong = [f"{key}={value.get(key)!r} (expected {expected!r})" for key, expected in (check.get("values") or {}).items()
                 if value.get(key) != expected]
        return f"JSON values wrong: {', '.join(wrong)}" if wrong else None
    if kind == "python":
        try:
            tree = ast.parse(_code(text))
        except SyntaxError as error:
            return f"the code does not parse: {error.msg} (line {error.lineno})"
        names = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        return None if check["defines"] in names else f"the code defines no function {check['defines']}"
    return f"unknown check type {kind!r}"


def degenerate_problem(text, finish_reason):
    """Output no working model gives: empty, one character or a handful of words repeated, or no end."""
    stripped = text.strip()
    if not stripped:
        return "empty output"
    characters = [c for c in stripped if not c.isspace()]
    if len(characters) >= 16:
        most = max(characters.count(c) for c in set(characters))
        if most / len(characters) >= 0.9:
            return f"one character repeated ({most} of {len(characters)})"
    words = stripped.split()
    if len(words) >= 24 and len(set(words)) <= 3:
        return f"{len(words)} words from {len(set(words))} distinct ones"
    if finish_reason != "stop":
        return f"finish reason {finish_reason!r}, expected 'stop' (the answer did not end)"
    return None


def first_divergence(words, reference):
    """The first word position where two outputs differ (None when one is a prefix of the other over the window)."""
    for position, (mine, theirs) in enumerate(zip(words[:AGREE_WORDS], reference[:AGREE_WORDS])):
        if mine != theirs:
            return position
    if min(len(words), AGREE_WORDS) != min(len(reference), AGREE_WORDS):
        return min(len(words), len(reference))
    return None


def ask(url, api_key, model, item, timeout=120):
    body = {"model": model, "messages": [{"role": "user", "content": item["prompt"]}], "temperature": 0,
            "seed": SEED, "max_tokens": item.get("max_tokens", 64),
            "chat_template_kwargs": {"enable_thinking": False}}
    status, raw = http(url + "/v1/chat/completions", body, api_key, timeout=timeout)
    text = raw.decode("utf-8", "replace")
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {text[:200]}")
    choice = json.loads(text)["choices"][0]
    return choice["message"].get("content") or "", choice.get("finish_reason")


def evaluate(answers, document, digest, baseline=None):
    """answers: {id: (text, finish_reason) or an error string}; baseline: a previous OutputCheck on the same weights.
    Returns an OutputCheck (hostside/contract/gate.py)."""
    reference = {row.id: row for row in baseline.results} if baseline else {}
    if baseline and baseline.prompts_digest != digest:
        reference = {}  # another prompt set: nothing to agree with
    results, wrong, degenerate, errors, agreeing, compared = [], [], [], [], 0, 0
    for item in document["prompts"]:
        answer = answers.get(item["id"])
        if isinstance(answer, str) or answer is None:
            row = OutputRow(id=item["id"], error=answer or "no answer")
            errors.append(f"{item['id']}: {row.error}")
            results.append(row)
            continue
        text, finish = answer
        problem = degenerate_problem(text, finish)
        if problem:
            degenerate.append(f"{item['id']}: {problem}")
        known = known_answer_problem(item["check"], text)
        if known:
            wrong.append(f"{item['id']}: {known}")
        previous, divergence = reference.get(item["id"]), None
        if previous and previous.text is not None:
            compared += 1
            divergence = first_divergence(text.split(), previous.text.split())
            agreeing += divergence is None
        results.append(OutputRow(id=item["id"], text=text[:2000], finish_reason=finish, degenerate=problem,
                                 wrong=known, first_divergence=divergence))
    total = len(document["prompts"])
    reasons, inconclusive = [], []
    if wrong:
        reasons.append(f"output: {len(wrong)} of {total} known answers wrong: {'; '.join(wrong)}")
    if degenerate:
        reasons.append(f"output: degenerate on {len(degenerate)} of {total} prompts: {'; '.join(degenerate)}")
    if errors:
        inconclusive.append(f"output: {len(errors)} of {total} prompts got no answer: {errors[0]}")
    agreement = agreeing / compared if compared else None
    if agreement is not None and agreement < MIN_AGREEMENT and not reasons:
        inconclusive.append(f"output: {agreeing} of {compared} prompts agree with the baseline release over the first "
                            f"{AGREE_WORDS} words (below {MIN_AGREEMENT:.0%}), every known answer right")
    verdict = "fail" if reasons else ("inconclusive" if inconclusive else "pass")
    return OutputCheck(verdict=verdict, reasons=reasons, inconclusive=inconclusive, prompts_digest=digest,
                       prompts_version=document.get("version"), known_right=total - len(wrong) - len(errors),
                       total=total, degenerate=len(degenerate), agreement=agreement, compared=compared,
                       results=results)


def run(url, api_key, model, baseline=None, path=PROMPTS_FILE, limit=None):
    """The check of the server at url, an OutputCheck; baseline: a previous one on the same weights, or None;
    limit: only the first N prompts (the watch's short check each period)."""
    document, digest = load_prompts(path)
    if limit:
        document = {**document, "prompts": document["prompts"][:limit]}
    answers = {}
    for item in document["prompts"]:
        try:
            answers[item["id"]] = ask(url, api_key, model, item)
        except (RuntimeError, OSError, ValueError, KeyError, IndexError, urllib.error.URLError) as error:
            answers[item["id"]] = f"{type(error).__name__}: {error}"
    return evaluate(answers, document, digest, baseline)
