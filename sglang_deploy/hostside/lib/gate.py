#!/usr/bin/env python3
"""The post-deploy gate: effective-config checks, then a measurement, then a verdict.

Runs on the host (inside `python3 -m hostside.switch`, under the store's lock), standard library only.
Also imported by the controller's tests: every function below except `run` is pure.

Verdicts: pass (the release is marked good), fail (rolled back), inconclusive (the comparison cannot
tell, or request errors; the profile's gate.on_inconclusive decides).
"""

import functools
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.error

from . import acceptance, client, output_check
from .client import get_json, is_simulated, printable
from ..contract.document import DocumentError
from ..contract.gate import AGGREGATE_ROUNDS, BenchConfig, GateResult, Measurement

# The bench client runs as `python -m <this package>.bench` from the directory that holds the package.
PROGRAMS_PACKAGE = __package__.rpartition(".")[0]  # the host package (hostside): its programs run with -m
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # where -m finds it


# --- effective configuration ------------------------------------------------------------------------

def decode_graph_gb(server_info):
    """Graph memory of the decode-side phases: a free-memory delta per phase, rounded to 1 MB. Not a capture signal:
    prefill graphs are captured first into the shared pool, and the decode phases can reuse its blocks and read 0."""
    graph = ((server_info.get("internal_states") or [{}])[0].get("memory_usage") or {}).get("graph") or {}
    return sum(graph.get(phase) or 0.0 for phase in ("decode", "target_verify", "draft_decode", "draft_extend"))


def decode_graph_batch_sizes(server_info):
    """The batch sizes the target's decode (with speculation: verify) CUDA graph runner captured, as SGLang
    reports them (internal_states[0].decode_cuda_graph_bs: tp_worker.get_decode_cuda_graph_bs(), internal_state.py
    _add_disaggregation); None where the server does not report the field."""
    state = (server_info.get("internal_states") or [{}])[0] or {}
    sizes = state.get("decode_cuda_graph_bs")
    return [size for size in sizes if isinstance(size, int)] if isinstance(sizes, list) else None


def decode_graphs_captured(server_info):
    """(captured, evidence): from the captured batch sizes where reported, else from the graph memory."""
    sizes = decode_graph_batch_sizes(server_info)
    if sizes is not None:
        return bool(sizes), f"internal_states[0].decode_cuda_graph_bs = {sizes}"
    return decode_graph_gb(server_info) > 0, (f"no decode_cuda_graph_bs reported; graph memory for decode/"
                                              f"target_verify/draft phases is {decode_graph_gb(server_info):.3f} GB")


def decode_backend(server_args):
    """cuda_graph_config.decode.backend: the decode CUDA graph backend after SGLang's folding of every graph flag
    (cuda_graph_hook.py). server_args: ServerArgs' fields as a dict, either the running server's /server_info or
    SGLang's resolution of a release's command line (the controller's validate/resolution.py `resolved`): both carry
    cuda_graph_config, so the gate's expectation and its check read it the same way."""
    return ((server_args.get("cuda_graph_config") or {}).get("decode") or {}).get("backend")


def config_problems(server_info, environ, cmdline_ok, cmdline, expect, findings=None, costly_env=()):
    """Differences between what the release declares (expect: GateExpect, SGLang's own resolution of its command
    line, its environment) and what the running server, its journal and its process report."""
    findings = findings or {}
    problems = []
    if not cmdline_ok:
        problems.append(f"process command line differs from the release's ExecStart: running {cmdline!r}")
    if expect.decode_graphs:
        if decode_backend(server_info) == "disabled":
            problems.append("decode CUDA graphs are disabled in the running server "
                            "(/server_info cuda_graph_config.decode.backend = 'disabled')")
        elif not decode_graphs_captured(server_info)[0]:
            problems.append(f"decode CUDA graphs were not captured (/server_info {decode_graphs_captured(server_info)[1]})")
    if expect.custom_all_reduce and findings.get("custom_all_reduce_fallback"):
        problems.append("custom all-reduce fell back to NCCL at runtime (declared: enabled); the server's journal "
                        f"says: {findings['custom_all_reduce_fallback']!r}; check GPU P2P (nvidia-smi topo -p2p r)")
    for key, value in expect.resolved.items():
        if server_info.get(key) != value:
            problems.append(f"{key}: SGLang resolves the release's command line to {value!r}, the running server "
                            f"reports {server_info.get(key)!r}")
    for key, value in expect.environment.items():
        if key not in environ:
            problems.append(f"environment: {key} is declared ({key}={value}) but missing from the server process")
        elif environ[key] != value:
            problems.append(f"environment: {key} is declared as {value!r} but the server process has {environ[key]!r}")
    for name, value, what, source in costly_env:
        problems.append(f"environment: {name}={value} is not declared by the release but set by {source}: {what}")
    return problems


# --- statistics --------------------------------------------------------------------------------------

def by_position(samples):
    """{position: [samples]}: a sample's place in its bench round (release.Sample.position; before 2026-12-06:
    its index in the list, one round)."""
    positions = {}
    for index, sample in enumerate(samples):
        positions.setdefault(sample.position if sample.position is not None else index, []).append(sample)
    return positions


def paired_ratios(samples, baseline_samples):
    """new/old decode rate per prompt position (the same prompt in both runs, release.Sample.position): with
    several rounds of a position, the geometric mean of its rounds against the geometric mean of the baseline's.

    One ratio per position, never one per repeated sample: the baseline's sample of a position is shared by every
    round of the candidate's, so the positions (not the samples) are the independent units the interval counts;
    each further round only makes a position's own ratio less noisy (its candidate half)."""
    new, old = by_position(samples), by_position(baseline_samples)
    ratios = []
    for position in sorted(set(new) & set(old)):
        mine = [s.decode_tok_s for s in new[position] if s.decode_tok_s]
        theirs = [s.decode_tok_s for s in old[position] if s.decode_tok_s]
        if not mine or not theirs or {s.kind for s in new[position]} != {s.kind for s in old[position]}:
            continue
        ratios.append(math.exp(statistics.fmean(math.log(v) for v in mine)
                               - statistics.fmean(math.log(v) for v in theirs)))
    return ratios


# One-sided 95 % quantiles of Student's t for 1-10 degrees of freedom; beyond, a Cornish-Fisher
# expansion around the normal quantile (within 0.002 of the exact value from 5 degrees of freedom on).
T95_ONE_SIDED = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812]


def t95(df):
    if df <= len(T95_ONE_SIDED):
        return T95_ONE_SIDED[df - 1]
    z = 1.6448536
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def _beta_fraction(a, b, x):
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for numerator in (m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def incomplete_beta(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_tail(t, df):
    """P(T > t) for Student's t with df degrees of freedom, t >= 0."""
    return 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=256)
def t_one_sided(alpha, df):
    """The t with P(T > t) = alpha (0 < alpha < 0.5): t95 at the fixed gate's 5 %, else by bisection on the exact
    tail (the host has no scipy)."""
    if alpha == ALPHA:
        return t95(df)
    low, high = 0.0, 1.0
    while t_tail(high, df) > alpha:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if t_tail(middle, df) > alpha else (low, middle)
    return (low + high) / 2


# Each one-sided decision (fail a release that is not slower than the threshold; pass one that is) errs at most
# ALPHA over all of a gate's looks. The sequential gate (max_rounds > 1) spends it by Bonferroni: half at the first
# look, the other half in equal parts over the further rounds. A union bound, so it holds whatever the looks'
# correlation (each look sees the earlier rounds again) and wherever the time budget stops the rounds.
ALPHA = 0.05


def look_alpha(look, rounds):
    """The one-sided error level of look `look` (1-based) of a gate of at most `rounds` rounds."""
    if rounds <= 1:
        return ALPHA
    return ALPHA / 2 if look == 1 else ALPHA / (2 * (rounds - 1))


def ratio_interval(ratios, alpha=ALPHA):
    """Geometric-mean ratio new/old and its one-sided (1 - alpha) bounds: (ratio, low, high).

    Why this interval: the per-prompt ratios are not copies of one number plus noise. With greedy
    decoding each prompt has its own acceptance pattern, and two configurations with different draft
    steps speed prompts up by different amounts (code accepts more drafts than chat), so the ratios of a
    3-step release against a 1-step one spread by ~10 % (standard deviation over 5 prompts) although each
    is measured to ~2 %. The
    question the gate asks is the release's speed over the shipped prompt mix, so the estimate is the
    mean over the prompts, and whatever makes the prompts disagree (timing noise or a real difference
    between prompts) is counted as uncertainty of that mean. Concretely:
      - log space: ratios are multiplicative (x 1.25 and x 0.8 are the same size of change), and the
        mean of the logs is the geometric mean, which no single ratio can drag past zero;
      - Student's t with n - 1 degrees of freedom, not the normal quantile: with 5 prompts the spread is
        itself estimated from 5 numbers, and t widens the interval for that (a bootstrap over 5 prompts
        has only 126 distinct resamples and its percentile interval is too narrow at this size);
      - one-sided 95 % bounds: each decision is one-sided (fail only when even the upper bound is below
        the threshold, pass when the lower bound is at or above it), so each error rate is <= 5 %;
        together the bounds are the two-sided 90 % interval the table shows. The sequential gate's
        looks use smaller alphas (look_alpha), so that the rates hold over all of its looks.
    One disturbed request (in either run) widens the interval more than it moves the mean: with n - 1
    equal ratios and one outlier d away from them (in logs), the bound on the outlier's side lies
    (t + 1) / n x |d| beyond the equal ratios and the other bound (t - 1) / n x |d| beyond them on the
    other side; both move outwards, so a single disturbed request can make a comparison inconclusive,
    never turn it into a fail or a pass.
    """
    logs = [math.log(r) for r in ratios if r > 0]
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), 0.0, float("inf")
    margin = t_one_sided(alpha, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - margin), math.exp(mean + margin)


def change_text(ratio):
    """0.9 -> '10.0 % slower', 1.3 -> '30.0 % faster'."""
    return f"{abs(ratio - 1) * 100:.1f} % {'faster' if ratio >= 1 else 'slower'}"


def interval_name(alpha):
    """The two-sided coverage of a pair of one-sided (1 - alpha) bounds: '90 %' at 5 %."""
    return f"{100 - 200 * alpha:.3g} %"


def compare(ratios, tolerance, alpha=ALPHA, rounds=1):
    """The one-sided decision on the paired ratios: ("pass" | "FAIL" | "inconclusive", comparison, message).

    The regression threshold sits at half the tolerance (0.95 for max_regression_pct 10): the gate must
    catch a release that is a full tolerance slower, and with a few samples the upper bound of such a
    release lies below 1 - tolerance / 2 but not below 1 - tolerance. Fail: the whole interval is below
    the threshold (the release is slower by more than half the tolerance, at 1 - alpha). Pass: the whole
    interval is at or above it, including any release that is faster. Inconclusive: the interval
    straddles the threshold. rounds: the measurement rounds the ratios rest on (said in the message).
    """
    ratio, low, high = ratio_interval(ratios, alpha)
    threshold = 1 - tolerance / 2
    comparison = {"ratio": ratio, "low": low, "high": high, "threshold": threshold, "pairs": len(ratios),
                  "change_pct": (ratio - 1) * 100, "regression_pct": (1 - ratio) * 100,
                  "half_width": (high - low) / 2 if math.isfinite(high) else float("inf"), "alpha": alpha,
                  "rounds": rounds}
    interval = (f"{interval_name(alpha)} interval {low:.3f}-{high:.3f}, {len(ratios)} paired prompts"
                + (f" x {rounds} rounds" if rounds > 1 else ""))
    if high < threshold:
        comparison["verdict"] = "FAIL"
        return "FAIL", comparison, (f"{change_text(ratio)} than the baseline ({interval}; fails when the whole "
                                    f"interval is below {threshold:.2f}, to catch {tolerance * 100:.0f} %)")
    if low >= threshold:
        comparison["verdict"] = "pass"
        return "pass", comparison, f"{change_text(ratio)} than the baseline ({interval})"
    comparison["verdict"] = "inconclusive"
    return "inconclusive", comparison, (f"cannot tell whether the release is more than {tolerance * 50:.0f} % slower "
                                        f"than the baseline: ratio {ratio:.3f}, {interval}, straddles {threshold:.2f}")


def below_floor(value, floor):
    """The one floor rule: a measured value under its floor (None: no floor set, or nothing measured). The gate's
    verdict (evaluate) and the perf watch's drift (watch.drift_reasons) both judge by it."""
    return floor is not None and value is not None and value < floor


def evaluate(measurement, settings, baseline=None, look=1):
    """Floors, then the comparison with the baseline: a measurement on the same host that passed its gate.
    measurement, baseline: release.Measurement; settings: the release's GateSettings (contract/gate.py).

    Without a baseline the verdict rests on the floors. The comparison is one-sided (see compare): it
    fails a release that is slower, passes one that is as fast or faster, and is inconclusive only when
    its interval straddles the regression threshold. look: which look of the sequential gate (1-based;
    its error level: look_alpha), the measurement holding every round so far.
    """
    rows, reasons, inconclusive = [], [], []
    decode, tau = measurement.decode_tok_s, measurement.accept_length
    if measurement.errors:
        inconclusive.append(f"{len(measurement.errors)} request error(s): {measurement.errors[0]}")
    if not decode:
        inconclusive.append("no successful sample")

    def row(metric, value, spread, threshold, prev, verdict):
        rows.append({"metric": metric, "value": value, "spread_pct": spread, "threshold": threshold,
                     "previous": prev, "verdict": verdict})

    # Each floor: its row, its reason's text, and the reason when nothing was measured (decode: inconclusive above)
    for metric, stat, floor, previous, measured, missing in (
            ("decode tok/s (1 stream, median)", decode, settings.min_decode_tok_s,
             baseline and baseline.decode_median, "single-stream decode {:.1f} tok/s", None),
            ("acceptance length tau (median)", tau, settings.min_accept_length, baseline and baseline.tau_median,
             "acceptance length {:.2f}", "no acceptance length reported (speculative decoding is off?)")):
        if stat:
            ok = not below_floor(stat.median, floor)
            row(metric, stat.median, stat.spread_pct, f">= {floor}" if floor else None, previous,
                "pass" if ok else "FAIL")
            if not ok:
                reasons.append(f"{measured.format(stat.median)} is below the floor {floor}")
        elif floor and missing:
            row(metric, None, None, f">= {floor}", None, "FAIL")
            reasons.append(missing)
    ttft = measurement.ttft_s
    if ttft:
        row("time to first token s (median)", ttft.median, ttft.spread_pct, None, baseline and baseline.ttft_median,
            "info")
    aggregate = measurement.aggregate_tok_s
    if aggregate:
        row(f"aggregate tok/s (concurrency {measurement.concurrency})", aggregate.median, aggregate.spread_pct, None,
            baseline and baseline.aggregate_median, "info")

    tolerance = settings.max_regression_pct / 100
    comparison = None
    if baseline and decode:
        ratios = paired_ratios(measurement.samples, baseline.samples)
        if len(ratios) >= 2:
            verdict, comparison, message = compare(ratios, tolerance, look_alpha(look, settings.max_rounds), look)
            if verdict == "FAIL":
                reasons.append(message)
            elif verdict == "inconclusive":
                inconclusive.append(message)
            comparison["message"] = message
            row("vs baseline (paired ratio, geo. mean)", comparison["ratio"],
                comparison["half_width"] / comparison["ratio"] * 100, f">= {comparison['threshold']:.2f}", 1.0,
                verdict)
        else:
            inconclusive.append("the baseline's samples do not pair with these (different prompts or N)")
    if reasons:
        verdict = "fail"
    elif inconclusive:
        verdict = "inconclusive"
    else:
        verdict = "pass"
    return {"verdict": verdict, "reasons": reasons, "inconclusive": inconclusive, "rows": rows,
            "comparison": comparison}


def format_value(value, metric=""):
    if value is None:
        return "-"
    if metric.startswith(("known answers", "degenerate")):
        return str(value)
    if metric.startswith("agree with"):
        return f"{value:.0f} %"
    if "ratio" in metric or "tau" in metric:
        return f"{value:.3f}" if "ratio" in metric else f"{value:.2f}"
    if "s (median)" in metric and "tok/s" not in metric:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f}"


def table(result):
    """The gate's outcome (a GateResult) as a text table (metric, value, spread, threshold, previous, verdict)."""
    header = f"{'metric':40} {'value':>10} {'spread':>8} {'threshold':>10} {'previous':>10}  verdict"
    lines = [header, "-" * len(header)]
    for row in result.rows:
        spread = f"{row['spread_pct']:.1f} %" if row.get("spread_pct") is not None else "-"
        lines.append(f"{row['metric']:40} {format_value(row['value'], row['metric']):>10} {spread:>8} "
                     f"{row['threshold'] or '-':>10} {format_value(row['previous'], row['metric']):>10}  {row['verdict']}")
    for problem in result.config_problems:
        lines.append(f"effective config: {problem}  FAIL")
    if result.baseline:  # set by switch.run_gate: which measurement the release was compared with, or why none
        lines.append(f"baseline: {result.baseline['note']}")
    if result.comparison and result.comparison.get("message"):
        lines.append(f"comparison: {result.comparison['message']}")
    looks = (result.comparison or {}).get("looks") or []
    if len(looks) > 1:  # the sequential gate measured further rounds: each look and its error level
        lines.append(f"sequential: {len(looks)} looks, {looks[-1]['samples']} samples; " + "; ".join(
            f"{look['rounds']}: {look['low']:.3f}-{look['high']:.3f} ({interval_name(look['alpha'])}) {look['verdict']}"
            for look in looks))
    lines += acceptance.lines(result.measurement and result.measurement.acceptance)  # per draft position
    lines.append(f"GATE {result.verdict.upper()}" + (": " + "; ".join(result.reasons + result.inconclusive)
                                                     if result.reasons or result.inconclusive else ""))
    return "\n".join(printable(line) for line in lines)  # server text: no escapes, no forged lines


# --- running on the host -------------------------------------------------------------------------------

def measure_builtin(probe_url, secrets_path, samples, warmup, max_new_tokens, concurrency):
    """The bench client's measurement (the gate's with its GateSettings; the watch's and the doctor's shorter): a
    Measurement; Measurement.failed, naming why, when the bench ran out of time, failed or answered unreadably."""
    command = [sys.executable, "-m", f"{PROGRAMS_PACKAGE}.bench", "--url", probe_url, "--api-key-file", secrets_path,
               "--samples", str(samples), "--warmup", str(warmup),
               "--max-new-tokens", str(max_new_tokens), "--concurrency", str(concurrency)]
    if client.GUARD is not None:  # the bench checks each keyed connection too (listener.py)
        command += ["--service", client.GUARD.service]
    # An overall deadline: every request at its own deadline (bench.py: 60 s + 1 s per token), plus start-up.
    requests = warmup + samples + 2
    deadline = 120 + requests * (60 + max_new_tokens)
    config = BenchConfig(samples=samples, warmup=warmup, max_new_tokens=max_new_tokens, concurrency=concurrency,
                         aggregate_rounds=AGGREGATE_ROUNDS)

    def failed(error):
        return Measurement.failed([error], probe_url, config, round(time.monotonic() - started, 1))

    started = time.monotonic()
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=deadline, cwd=PACKAGE_PARENT)  # progress: stderr
    except subprocess.TimeoutExpired:
        return failed(f"the measurement exceeded the gate's deadline of {deadline} s")
    if result.returncode != 0:
        return failed(f"the bench client exited with {result.returncode}")
    try:  # through its class: a field renamed on either side is named here, never read as "no sample"
        return Measurement.loads(result.stdout, Measurement.FILE)
    except DocumentError as error:
        return failed(f"the bench client's answer cannot be read: {error}")


def straddles(result):
    """The verdict is inconclusive for the comparison alone (its interval straddles the threshold; no request
    error, no floor, nothing else undecided): what another round of the same prompts can settle."""
    comparison = result.get("comparison")
    return (result["verdict"] == "inconclusive" and not result["reasons"] and comparison is not None
            and comparison.get("verdict") == "inconclusive" and result["inconclusive"] == [comparison["message"]])


def merged(first, more):
    """Two bench runs of the same prompt positions as one measurement (the first's aggregate and configuration;
    the samples of both, each keeping its position; the summaries over all of them)."""
    # deferred: 1.7 ms (bench) on hostside.switch and hostside.watch, for a merged measurement only
    from ..bench import summary

    samples = list(first.samples) + list(more.samples)
    return first.but(samples=samples, decode_tok_s=summary([s.decode_tok_s for s in samples]),
                     ttft_s=summary([s.ttft_s for s in samples]),
                     accept_length=summary([s.accept_length for s in samples]),
                     acceptance=acceptance.summary(samples), errors=list(first.errors) + list(more.errors),
                     duration_s=round((first.duration_s or 0) + (more.duration_s or 0), 3))


def sequential(measurement, settings, baseline, measure_round, clock=time.monotonic, extend=True):
    """The sequential gate: evaluate the first round; while the comparison alone is undecided (straddles), rounds
    are left (settings.max_rounds) and the next fits the time budget (settings.rounds_budget_s, estimated from the
    last round's single-stream time), measure the same prompts again (measure_round(): a Measurement) and look
    again at that look's error level (look_alpha). Returns (evaluate's result, the measurement of every round);
    result["comparison"]["looks"] lists each look, and "samples" the single-stream samples the decision needed.
    extend False: the first look alone (something else already leaves the verdict inconclusive)."""
    result = evaluate(measurement, settings, baseline)
    looks = [look_record(result, measurement)]
    started, look = clock(), 1
    last_round_s = sum(s.e2e_s for s in measurement.samples)
    while extend and straddles(result) and look < settings.max_rounds:
        if clock() - started + last_round_s > settings.rounds_budget_s:
            result["inconclusive"].append(f"no further round: the next ({last_round_s:.0f} s) would exceed the gate's "
                                          f"budget of {settings.rounds_budget_s:.0f} s for further rounds")
            break
        more = measure_round()
        if not more.samples:
            result["inconclusive"].append("a further round measured nothing: " + "; ".join(more.errors))
            break
        last_round_s = sum(s.e2e_s for s in more.samples)
        measurement, look = merged(measurement, more), look + 1
        result = evaluate(measurement, settings, baseline, look)
        looks.append(look_record(result, measurement))
    if result["comparison"] is not None:
        result["comparison"]["looks"] = looks
        result["comparison"]["samples"] = len(measurement.samples)
    return result, measurement


def look_record(result, measurement):
    """One look of the sequential gate, as its result keeps it."""
    comparison = result["comparison"] or {}
    return {"rounds": comparison.get("rounds", 1), "samples": len(measurement.samples), "pairs": comparison.get("pairs"),
            "ratio": comparison.get("ratio"), "low": comparison.get("low"), "high": comparison.get("high"),
            "alpha": comparison.get("alpha"), "verdict": result["verdict"]}


def output_rows(output):
    """The output check's (an release.OutputCheck) lines of the gate's table."""
    rows = [{"metric": f"known answers right (of {output.total})", "value": output.known_right,
             "spread_pct": None, "threshold": f"= {output.total}", "previous": None,
             "verdict": "pass" if output.known_right == output.total else "FAIL"},
            {"metric": "degenerate outputs", "value": output.degenerate, "spread_pct": None, "threshold": "= 0",
             "previous": None, "verdict": "pass" if not output.degenerate else "FAIL"}]
    if output.agreement is not None:
        rows.append({"metric": f"agree with baseline (first {output_check.AGREE_WORDS} words)",
                     "value": output.agreement * 100, "spread_pct": None,
                     "threshold": f">= {output_check.MIN_AGREEMENT * 100:.0f} %", "previous": None,
                     "verdict": "pass" if output.agreement >= output_check.MIN_AGREEMENT else "inconclusive"})
    return rows


def run(probe_url, secrets_path, api_key, pid, cmdline_ok, cmdline, config, baseline, evidence, baseline_output=None):
    """Effective-config checks, then the output check, then the measurement, then the verdict (config problems and
    wrong or degenerate answers fail at once, unmeasured). baseline_output: the output check of the baseline
    release when it serves the same weights (for the agreement figure).

    evidence: {"findings": SGLang's own log lines since the unit started, "environ": the process's
    whole environment, "costly_env": undeclared costly variables with their sources} (evidence.py).
    config: the release's GateConfig; returns a GateResult (contract/gate.py)."""
    started = time.monotonic()
    settings, expect = config.settings, config.expect
    try:
        server_info = get_json(probe_url + "/server_info", api_key)
        read_error = None
    except (urllib.error.URLError, OSError, ValueError) as error:
        server_info, read_error = {}, f"could not read /server_info: {error}"
    if read_error:
        problems = [read_error]
    else:
        problems = config_problems(server_info, evidence.get("environ") or {}, cmdline_ok, cmdline, expect,
                                   evidence.get("findings"), evidence.get("costly_env") or ())
    output = None
    if problems:
        result = {"verdict": "fail", "reasons": ["the running server differs from the release" if not read_error
                                                 else read_error],
                  "inconclusive": [], "rows": [], "comparison": None, "measurement": None}
    else:
        output = output_check.run(probe_url, api_key, expect.served_name or "default", baseline_output)
        if output.verdict == "fail":
            result = {"verdict": "fail", "reasons": output.reasons, "inconclusive": output.inconclusive,
                      "rows": output_rows(output), "comparison": None, "measurement": None}
        else:
            measurement = measure_builtin(probe_url, secrets_path, settings.samples, settings.warmup,
                                          settings.max_new_tokens, settings.concurrency)
            result, measurement = sequential(measurement, settings, baseline,
                                             lambda: measure_builtin(probe_url, secrets_path, settings.samples, 0,
                                                                     settings.max_new_tokens, 1),
                                             extend=not output.inconclusive)  # else inconclusive whatever it measures
            result["measurement"] = measurement.to_dict()
            result["rows"] = output_rows(output) + result["rows"]
            result["inconclusive"] = output.inconclusive + result["inconclusive"]
            if result["verdict"] == "pass" and result["inconclusive"]:
                result["verdict"] = "inconclusive"
    return GateResult.from_dict({**result, "output": output and output.to_dict(), "config_problems": problems,
                                 "simulated": is_simulated(server_info),
                                 "duration_s": round(time.monotonic() - started, 1)}, "the gate's result")
