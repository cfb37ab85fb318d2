"""The sequential gate (issue 50, item 5): when the comparison straddles its threshold it measures the same prompts
again and looks again, each look at its own error level, so that the one-sided error rates hold over all looks.

Synthetic samples (no host, no simulator): the rates of wrong decisions are counted over thousands of simulated
gates of the same shape as the proven profile's (8 prompts; noise per request as measured on the loaded machine).
"""

import math
import random

import pytest

from conftest import bench_measurement
from sglang_deploy.hostside.contract.gate import GateResult, GateSettings
from sglang_deploy.hostside.lib.gate import (ALPHA, evaluate, look_alpha, merged, paired_ratios, ratio_interval, sequential, straddles, t95, t_one_sided, table)

SETTINGS = GateSettings(min_decode_tok_s=None, min_accept_length=None, max_regression_pct=10, samples=8, warmup=1,
                        max_new_tokens=256, concurrency=4, on_inconclusive="rollback", max_rounds=4,
                        rounds_budget_s=300)
PROMPT_RATES = [49.0, 55.0, 52.0, 49.5, 54.5, 51.0, 49.0, 55.0]  # per-prompt differences are deterministic


def run(factor, rng, sigma, shift=0.0, positions=8):
    """One bench round: each prompt's rate x factor, with log-normal noise sigma per request and one log-normal
    shift (sd `shift`) of the whole round (the machine's load while it ran); positions set."""
    common = rng.gauss(0, shift) if shift else 0.0
    rates = [rate * factor * math.exp(rng.gauss(0, sigma) + common) for rate in PROMPT_RATES[:positions]]
    measured = bench_measurement(rates)
    return measured.but(samples=[s.but(position=i) for i, s in enumerate(measured.samples)])


def test_exact_t_quantiles():
    """The bisection on the exact tail against published values (and the fixed gate's table at 5 %)."""
    assert t_one_sided(0.025, 7) == pytest.approx(2.365, abs=1e-3)
    assert t_one_sided(0.01, 7) == pytest.approx(2.998, abs=1e-3)
    assert t_one_sided(0.005, 2) == pytest.approx(9.925, abs=1e-3)
    assert t_one_sided(0.0250001, 30) == pytest.approx(2.042, abs=1e-3)
    assert all(t_one_sided(0.0500001, df) == pytest.approx(t95(df), abs=3e-3) for df in range(1, 40))


def test_the_error_is_spent_at_most_once_over_all_looks():
    assert look_alpha(1, 1) == ALPHA  # the fixed gate, as before
    for rounds in range(2, 9):
        assert sum(look_alpha(look, rounds) for look in range(1, rounds + 1)) == pytest.approx(ALPHA)


def test_rounds_pair_by_position_one_ratio_per_prompt():
    rng = random.Random(1)
    baseline = run(1.0, rng, 0.0)
    first, second = run(0.9, rng, 0.0), run(1.1, rng, 0.0)
    ratios = paired_ratios(merged(first, second).samples, baseline.samples)
    assert len(ratios) == 8  # the positions are the units, not the 16 samples
    assert all(r == pytest.approx(math.sqrt(0.9 * 1.1)) for r in ratios)
    # samples measured before positions existed pair by their index, as the fixed gate did
    old = baseline.but(samples=[s.but(position=None) for s in baseline.samples])
    assert paired_ratios(first.samples, old.samples) == pytest.approx([0.9] * 8)


def test_a_straddling_comparison_measures_again_until_it_decides():
    """Noise drawn so that the first look straddles; the further rounds shrink the candidate's half of it."""
    rng = random.Random(7)
    baseline = run(1.0, random.Random(0), 0.0)
    first = bench_measurement([r * f for r, f in zip(PROMPT_RATES, [0.93, 1.0, 0.91, 1.02, 0.95, 0.99, 0.9, 1.01])])
    first = first.but(samples=[s.but(position=i) for i, s in enumerate(first.samples)])
    assert straddles(evaluate(first, SETTINGS, baseline))
    rounds = []
    result, measurement = sequential(first, SETTINGS, baseline, lambda: rounds.append(1) or run(1.0, rng, 0.01))
    comparison = result["comparison"]
    assert result["verdict"] == "pass", result
    assert 1 <= len(rounds) <= 3 and len(comparison["looks"]) == len(rounds) + 1
    assert comparison["samples"] == len(measurement.samples) == 8 * (len(rounds) + 1)
    assert [look["alpha"] for look in comparison["looks"]] == [look_alpha(k, 4) for k in range(1, len(rounds) + 2)]
    text = table(GateResult.from_dict({**result, "measurement": measurement.to_dict(), "config_problems": []}))
    assert f"sequential: {len(rounds) + 1} looks, {8 * (len(rounds) + 1)} samples" in text and "GATE PASS" in text


def test_the_time_budget_stops_the_rounds_and_says_so():
    baseline = run(1.0, random.Random(0), 0.0)
    first = run(0.95, random.Random(3), 0.05)
    assert straddles(evaluate(first, SETTINGS, baseline))
    result, _ = sequential(first, SETTINGS.but(rounds_budget_s=10), baseline, lambda: pytest.fail("no round fits"))
    assert result["verdict"] == "inconclusive" and "exceed the gate's budget of 10 s" in result["inconclusive"][-1]
    one_round, _ = sequential(first, SETTINGS.but(max_rounds=1), baseline, lambda: pytest.fail("one round only"))
    assert one_round["verdict"] == "inconclusive" and len(one_round["comparison"]["looks"]) == 1
    # the output check already left the verdict inconclusive: no round would change that
    unextended, _ = sequential(first, SETTINGS, baseline, lambda: pytest.fail("no round"), extend=False)
    assert len(unextended["comparison"]["looks"]) == 1


def test_request_errors_are_not_measured_away():
    baseline = run(1.0, random.Random(0), 0.0)
    first = run(0.95, random.Random(3), 0.05).but(errors=["sample 3: HTTP Error 500"])
    result, _ = sequential(first, SETTINGS, baseline, lambda: pytest.fail("errors: no further round"))
    assert result["verdict"] == "inconclusive" and not straddles(result)


def gate_outcomes(factor, settings, trials, sigma, seed, shift=0.0):
    """Verdicts of `trials` simulated gates of a release whose true ratio is `factor`; each trial its own baseline."""
    verdicts, samples = [], []
    for trial in range(trials):
        rng = random.Random(f"{seed}-{trial}")  # the same first round under either rule: a paired comparison
        baseline = run(1.0, rng, sigma, shift)
        result, measurement = sequential(run(factor, rng, sigma, shift), settings, baseline,
                                         lambda: run(factor, rng, sigma, shift))
        verdicts.append(result["verdict"])
        samples.append(len(measurement.samples))
    return verdicts, samples


@pytest.mark.parametrize("sigma", [0.03])
def test_error_rates_hold_over_all_looks_at_the_threshold(sigma):
    """Under the interval's own model (independent noise per request): a release exactly at the threshold (0.95) is
    passed (wrongly: it is not better) <= 5 % of the time over all looks; one a hair above it is failed (wrongly)
    <= 5 %. The worst case of each error: any other true ratio errs less. (The fixed gate at 5 % per look would
    pass about 5.8 % here; looking 4 times at 5 % each about 10 %.)"""
    n = 800
    at, _ = gate_outcomes(0.95, SETTINGS, n, sigma, seed=f"at-{sigma}")
    above, _ = gate_outcomes(0.9501, SETTINGS, n, sigma, seed=f"above-{sigma}")
    assert at.count("pass") / n <= ALPHA, at.count("pass")
    assert above.count("fail") / n <= ALPHA, above.count("fail")


def test_fewer_identical_releases_rolled_back_and_slower_ones_still_caught():
    """Identical releases measured as on the loaded 2-core machine (2 % per request, and each round shifted by
    1.5 % with the load while it ran): some fixed gates straddle (rolled back); the sequential gate decides most
    of them by measuring the candidate again (its round's shift averages out), and still fails 10 % slower
    releases. (The baseline's own shift stays: a stored measurement is not measured again.)"""
    sigma, shift, n = 0.02, 0.015, 800
    fixed, _ = gate_outcomes(1.0, SETTINGS.but(max_rounds=1), n, sigma, "identical", shift)
    seq, samples = gate_outcomes(1.0, SETTINGS, n, sigma, "identical", shift)
    slower, slower_samples = gate_outcomes(0.9, SETTINGS, n, sigma, "slower", shift)
    rolled_fixed, rolled_seq = n - fixed.count("pass"), n - seq.count("pass")
    print(f"identical rolled back: fixed {rolled_fixed}/{n}, sequential {rolled_seq}/{n}; mean samples "
          f"{sum(samples) / n:.1f}; 10 % slower passed {slower.count('pass')}/{n}, failed {slower.count('fail')}/{n}, "
          f"mean samples {sum(slower_samples) / n:.1f}")
    assert rolled_seq < 0.7 * rolled_fixed
    assert slower.count("pass") / n <= 0.01 and slower.count("fail") / n >= 0.95
    assert 8 < sum(samples) / n < 12  # most gates decide at the first look
