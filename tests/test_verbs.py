"""The verbs (the top-level files a user runs) are lists of named stages, as deploy.py is: read by their AST, each
holds only its docstring, imports from roles/, and calls of stage functions (their results named), each with a
one-line comment; deploy.py's `if decision.switch:` on a stage's result is the one branch allowed. No loop, no
try, no function, no host fact, and no reference to `simulated`: the variant is chosen once (roles/target.py)."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from conftest import REPO

VERBS = ("deploy.py", "doctor.py", "facts.py", "history.py", "provision.py", "releases.py", "rollback.py",
         "rollout.py", "router.py", "tune.py")
FORBIDDEN_NAMES = {"simulated": "the variant is chosen once, in roles/target.py",
                   "get_fact": "a host fact is read in a stage"}


def comment_lines(text: str) -> set[int]:
    return {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT}


def simple(node: ast.expr) -> bool:
    """An argument or a branch's test: a name, a constant, or an attribute of a name (decision.switch)."""
    return isinstance(node, (ast.Name, ast.Constant)) or (isinstance(node, ast.Attribute) and simple(node.value))


def shape_problems(text: str, name: str = "verb.py") -> list[str]:
    """Where the verb's text is not a list of named stages, each as `name:line: what`."""
    tree = ast.parse(text)
    comments = comment_lines(text)
    roles: set[str] = set()  # the names the verb binds to roles/ modules
    problems = []

    def at(node, what):
        problems.append(f"{name}:{node.lineno}: {what}")

    def stage_call(node, call) -> None:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id in roles):
            return at(node, "not a call of a stage function of a roles/ module")
        if not all(simple(a) for a in [*call.args, *(k.value for k in call.keywords)]):
            at(node, f"{call.func.value.id}.{call.func.attr}: its arguments are names or constants, not expressions")
        if not comments & set(range(node.lineno, node.end_lineno + 1)):
            at(node, f"{call.func.value.id}.{call.func.attr}: no one-line comment saying what the stage does")

    def statements(body) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module == "roles":
                roles.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
                pass
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                at(node, f"imports {ast.unparse(node)!r}: a verb imports only its stages, from roles/")
            elif isinstance(node, ast.Expr):
                stage_call(node, node.value)
            elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
                stage_call(node, node.value)
            elif isinstance(node, ast.If) and simple(node.test):
                statements(node.body)
                statements(node.orelse)
            else:
                at(node, f"{type(node).__name__}: a verb's statements are stage calls (logic goes in the stages)")

    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    else:
        problems.append(f"{name}:1: no docstring saying what the verb does and how it is run")
    statements(body)
    for node in ast.walk(tree):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if word in FORBIDDEN_NAMES:
            at(node, f"{word}: {FORBIDDEN_NAMES[word]}")
    return problems


def test_the_verbs_are_the_top_level_python_files():
    assert sorted(path.name for path in REPO.glob("*.py")) == sorted(VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_is_a_list_of_named_stages(verb):
    assert shape_problems((REPO / verb).read_text(), verb) == []


GOOD = '''"""A verb."""

from roles import x_stages as stages

plan = stages.plan()  # the plan
if plan.switch:
    stages.switch(plan, "now")  # the switch
else:
    stages.stay(plan)  # nothing
'''


def test_a_planted_good_verb_passes():
    assert shape_problems(GOOD) == []


@pytest.mark.parametrize("replace, add, message", [
    (None, "from pyinfra import host\n", "imports 'from pyinfra import host'"),
    (None, "for h in plan.hosts:\n    stages.switch(h)  # each\n", "verb.py:10: For"),
    (None, "try:\n    stages.switch(plan)  # go\nexcept ValueError:\n    pass\n", "verb.py:10: Try"),
    (None, "if plan.target.simulated:\n    stages.stay(plan)  # sim\n", "simulated: the variant is chosen once"),
    (None, "stages.stay(plan.simulated)  # sim\n", "simulated: the variant is chosen once"),
    (None, "found = stages.host.get_fact(plan)  # a fact\n", "get_fact: a host fact is read in a stage"),
    (None, "stages.stay(plan)\n", "stages.stay: no one-line comment"),
    (None, "stages.stay(len(plan))  # computed\n", "stages.stay: its arguments are names or constants"),
    (None, "print(plan)  # a print\n", "not a call of a stage function"),
    (None, "def helper():\n    pass\n", "FunctionDef"),
    (("if plan.switch:", "if plan.check():"), "", "verb.py:6: If"),
    (('"""A verb."""\n', ""), "", "verb.py:1: no docstring"),
])
def test_a_planted_bad_verb_fails(replace, add, message):
    text = GOOD.replace(*replace) if replace else GOOD
    problems = shape_problems(text + add)
    assert any(message in problem for problem in problems), problems
