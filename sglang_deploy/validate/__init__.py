"""Validation in one place: a profile checked against the SGLang release it pins, and what the tool knows of that
release's code (the SGLang wing; layout review 4, issue 51 item 5).

- The check: check.py runs the layers (``check_profile``); the parser's layer is parser_checks.py, the rules the parser
  cannot know rule_checks.py (each problem a profile.problem.Problem).
- SGLang's own code, run or read: validator_env.py (a release's parser environment), probe_client.py and
  parser_probe.py (the shared probe inside it), resolution.py (SGLang's resolution of a command line) under
  gpu_facts.py (the target card's facts), flag_table.py (the option table exported from the parser),
  flag_classes.py (each dest's reviewed class), env_rules.py (the environment allow-list), start_feasibility.py
  (what starts on a card), routes.py (the HTTP route table), token_counter.py (the token map's counter run in the
  parser environment).
- A new release: add.py (`sglang-deploy sglang add`), scan.py (its static readings), upgrade.py (what changes when only
  sglang.version does).

The data each release's facts are kept in stays in releases/<version>/ (releases/__init__.py, standard library).
This file imports nothing: the simulated host runs flag_table.py, start_feasibility.py and gpu_facts.py without the check
(roles/simulator.py); import the module you need (``from sglang_deploy.validate.check import check_profile``).
"""
