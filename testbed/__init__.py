"""The test bed, never shipped to a host nor in the wheel: the simulated CT129 (a systemd container over
real SSH, simhost.py), the simulator as a local process (local_sim.py) and its calibration (calibration.py).
Importable from the repository root (scripts, tests and benchmarks put it on sys.path)."""
