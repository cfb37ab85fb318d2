"""Validating a profile's flags: SGLang's own parser, then the rules the parser cannot know.

check.py runs the layers (``check_profile``); the parser's layer is flag_checks.py, the rules the parser cannot
know rule_checks.py, and each problem a problem.Problem. Callers import the entry points from here.
"""

from .check import TOPOLOGIES, check_profile, model_config_problems, server_args

__all__ = ["TOPOLOGIES", "check_profile", "model_config_problems", "server_args"]
