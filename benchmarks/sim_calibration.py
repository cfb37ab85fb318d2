"""Measure the simulator's calibration table through the gate's client and print it next to the bands.

    python benchmarks/sim_calibration.py [--samples 5] [--max-new-tokens 256]

tok/s is the median single-stream decode rate of N samples; tau the median acceptance length.
Exit status 1 when a row is out of its band.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testbed.calibration import measure  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    table = measure(args.samples, args.max_new_tokens)
    print(f"{'configuration':42} {'tok/s':>7} {'tau':>5} {'vs proven':>9} {'CV %':>5}  target band")
    for row in table:
        tau = f"{row['tau']:.2f}" if row["tau"] else "-"
        print(f"{row['name']:42} {row['tok_s']:7.1f} {tau:>5} {row['vs_proven']:9.3f} {row['cv_pct']:5.1f}  "
              f"{row['band']}  {'ok' if row['in_band'] else 'OUT OF BAND'}")
    return 0 if all(row["in_band"] for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
