"""roles/service_user.py without a host: in_place from the DeployState fact's fixtures, install's commands for a
fake host's facts."""

import pytest

from fakehost import fixture_fact, run_role
from roles import service_user

HOME = "/var/lib/sglang"


def account(case: str):
    return fixture_fact("DeployState", case)["user"]


def test_the_tools_account_is_in_place():
    assert service_user.in_place(account("redeploy_everything_in_place"), "sglang", HOME)


@pytest.mark.parametrize("case", ["first_deploy_gpu_host", "user_short_passwd_line", "account_of_someone_else"])
def test_no_account_or_someone_elses_is_not_in_place(case):
    assert not service_user.in_place(account(case), "sglang", HOME)


@pytest.mark.parametrize("change", [{"groups": ["sglang", "video"]}, {"shell": "/bin/bash"}, {"home": "/home/sglang"},
                                    {"gecos": ""}])
def test_an_account_that_differs_is_not_in_place(change):
    assert not service_user.in_place({**account("redeploy_everything_in_place"), **change}, "sglang", HOME)


def test_install_on_a_host_without_the_account():
    ops = run_role(service_user.install, user="sglang", home=HOME)
    assert ops.names == ["Service user | Group video exists", "Service user | Group render exists",
                         "Service user | Group sglang", "Service user | System user sglang (no login, member of video, render)"]
    assert ops.commands[:3] == ["groupadd -r video", "groupadd -r render", "groupadd -r sglang"]
    assert ops.commands[3] == ("useradd -d /var/lib/sglang -s /usr/sbin/nologin -g sglang -G video,render -r "
                               "-c 'sglang-deploy service user' -M sglang")


def test_install_changes_nothing_when_the_account_is_there():
    user = {"home": HOME, "shell": "/usr/sbin/nologin", "group": "sglang", "groups": ["video", "render"],
            "comment": "sglang-deploy service user", "uid": 998, "gid": 988}
    ops = run_role(service_user.install, user="sglang", home=HOME,
                   facts={"Groups": ["video", "render", "sglang"], "Users": {"sglang": user},
                          "Directory": {"mode": 755, "user": "sglang", "group": "sglang"}})
    assert ops.commands == []
